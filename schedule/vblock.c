/* schedule/vblock.c: v-half and v-min's building block (Qi et al., "Pipeline Parallelism with
 * Controllable Memory", arXiv 2405.15362) as slots of one op per rank.
 *
 * One micro-batch's four passes over a rank, at fixed offsets in time slots of one op each:
 * chunk 0's F, chunk 1's F (the V turns at the last rank), chunk 1's I (back down the ranks) and
 * chunk 0's I, at rank r
 *   v-min   r, 2p-1-r, 2p+g+r, 4p+g-1-r            (g = 2 if p % 3 == 0, else 0)
 *   v-half  2r, 3p-2-r, 3p+g+2r-1, 6p+g-2-r        (g = 3 if p is even, else 0)
 * and the block repeated every 6 slots, one per micro-batch: a steady state of F F I I W W per
 * rank in which no two ops meet (the offsets differ mod 6), where a micro-batch's chunk-0 slot lives
 * about 4p (v-min) or 6p (v-half) slots, so a rank holds about 2p/3 or p chunk slots. W's go into
 * the free slots, oldest first. The warm-up and cool-down of that are sparse: one pass in time order
 * moves every op there to the earliest free slot its inputs allow, an F only where the rank's count
 * of open forwards minus W's run stays within the block's peak; a second pass does the same in the
 * cool-down with the W's implicit (one in each free slot while any is due), as the paper's greedy
 * reordering does; W's are then placed again. The slots give each rank its order (zb_rounds.c times it
 * under the costs and checks the memory budget as for its other constructors). */
#include <limits.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"

typedef struct {
  int p, m, T;
  int *t;   /* [(r * 6 + e) * m + k]: slot of rank r's k-th op of kind e: 0 F chunk 0, 1 F chunk 1,
             * 2 I chunk 1, 3 I chunk 0, 4 W (2m of them) */
  int *occ; /* [r * T + slot]: vp_code(e, k), or 0 */
  int *mem; /* [r * T + slot]: forwards minus W's up to and including the slot */
  int *due; /* [r * T + slot]: with W's implicit (one in each free slot while any is due), the
             * W's due after the slot */
  int peak; /* the most mem holds, over the ranks whose curves were drawn from scratch since it was
             * set to 0 (vp_put_w, vp_implicit_all) */
} vpat;

static int *vp_t(vpat *v, int r, int e) { return &v->t[((size_t)r * 6 + e) * v->m]; }
/* A slot's op, kind e and index k, in one int: shifts and masks where a division by m stalled every
 * look at a slot (sched_size_check keeps k far below INT_MAX / 8). */
static int vp_code(int e, int k) { return 1 + (k << 3 | e); }
static int vp_kind(int c) { return (c - 1) & 7; }
static int vp_index(int c) { return (c - 1) >> 3; }

/* Rank r's W's into its free slots, each after its I, oldest first; the rank's memory curve (and
 * its peak into v->peak). */
static void vp_put_w(vpat *v, int r) {
  int *occ = &v->occ[(size_t)r * v->T], *mem = &v->mem[(size_t)r * v->T], *w = vp_t(v, r, 4);
  int nw = 0, due = 0, cur = 0;
  for (int x = 0; x < v->T; x++) {
    int c = occ[x];
    if (c && vp_kind(c) == 4) occ[x] = c = 0; /* the W's placed before */
    if (c) {
      int e = vp_kind(c);
      cur += e < 2, due += e == 2 || e == 3;
    } else if (due > 0 && nw < 2 * v->m) { /* always: the bound keeps the compiler quiet */
      occ[x] = vp_code(4, nw), w[nw++] = x, due--, cur--;
    }
    mem[x] = cur;
    if (cur > v->peak) v->peak = cur;
  }
}

/* The k-th (from 0) input gradient of rank r in slot order. */
static int vp_kth_i(vpat *v, int r, int k) {
  const int *a = vp_t(v, r, 2), *b = vp_t(v, r, 3);
  int lo = k + 1 - v->m > 0 ? k + 1 - v->m : 0, hi = k + 1 < v->m ? k + 1 : v->m; /* taken from a */
  while (lo < hi) { /* the least i with a[i] > b[k - i] (i from a, k + 1 - i from b) */
    int i = (lo + hi) / 2;
    if (k - i >= 0 && a[i] < b[k - i]) lo = i + 1;
    else hi = i;
  }
  int i = lo, ta = i > 0 ? a[i - 1] : -1, tb = k + 1 - i > 0 ? b[k - i] : -1;
  return ta > tb ? ta : tb;
}

/* With W's implicit: rank r's memory curve from slot y on, with the ops as they are now (the same
 * as when the curve was stored from slot z on), until it meets the stored one at or after z; 0 if
 * it goes above peak. write: store it. */
static int vp_implicit(vpat *v, int r, int y, int z, int peak, int write) {
  int *occ = &v->occ[(size_t)r * v->T], *mem = &v->mem[(size_t)r * v->T], *due = &v->due[(size_t)r * v->T];
  int cur = y > 0 ? mem[y - 1] : 0, d = y > 0 ? due[y - 1] : 0;
  for (int x = y; x < v->T; x++) {
    if (occ[x]) {
      int e = vp_kind(occ[x]);
      cur += e < 2, d += e == 2 || e == 3;
    } else if (d > 0) {
      cur--, d--;
    }
    if (cur > peak) return 0;
    if (x >= z && cur == mem[x] && d == due[x]) break; /* as before from here on */
    if (write) mem[x] = cur, due[x] = d;
  }
  return 1;
}

/* Rank r's W's out, and its memory curve and W's due with them implicit, from scratch (its peak
 * into v->peak): vp_implicit over every slot, in the same pass. */
static void vp_implicit_all(vpat *v, int r) {
  int *occ = &v->occ[(size_t)r * v->T], *mem = &v->mem[(size_t)r * v->T], *due = &v->due[(size_t)r * v->T];
  int cur = 0, d = 0;
  for (int x = 0; x < v->T; x++) {
    int c = occ[x];
    if (c && vp_kind(c) == 4) occ[x] = c = 0;
    if (c) {
      int e = vp_kind(c);
      cur += e < 2, d += e == 2 || e == 3;
    } else if (d > 0) {
      cur--, d--;
    }
    mem[x] = cur, due[x] = d;
    if (cur > v->peak) v->peak = cur;
  }
}

/* One pass in time order moving ops to the earliest free slot their inputs allow: in the
 * warm-up and the cool-down with the W's placed (implicit = 0), then in the cool-down with the
 * W's implicit (implicit = 1). Memory stays within the peak it starts with. */
static void vp_squeeze(vpat *v, int implicit) {
  int p = v->p, m = v->m, T = v->T, phase = 0;
  if (implicit) { /* the W's out, the curves from scratch */
    v->peak = 0;
    for (int r = 0; r < p; r++) vp_implicit_all(v, r);
  }
  int peak = v->peak; /* of the curves as they start (vp_put_w's, without implicit) */
  int end = 0; /* past the last op (each kind's last; moves keep each kind in order, and go earlier) */
  for (int r = 0; r < p; r++)
    for (int e = 0; e < (implicit ? 4 : 5); e++) {
      int last = vp_t(v, r, e)[(e == 4 ? 2 * m : m) - 1] + 1;
      if (last > end) end = last;
    }
  for (int x = 0; x < end; x++) {
    core_progress_at((double)implicit * T + x); /* a column of p slots at a time */
    for (int r = 0; r < p; r++) {
      int c = v->occ[(size_t)r * T + x]; /* as it started: moves go to earlier slots only */
      if (!c) continue;
      int e = vp_kind(c), k = vp_index(c);
      if (phase == 0 && e == 3 && r == 0) {
        /* the steady state, from rank 0's first chunk-0 I on: nothing in it moves. The cool-down
         * begins after the first of the ranks' last chunk-0 F's still ahead in this scan order
         * (an op not yet scanned is where it started); with none ahead it never begins. */
        int x2 = T, r2 = -1;
        for (int q = 0; q < p; q++) {
          int t = vp_t(v, q, 0)[m - 1];
          if ((t > x || (t == x && q > 0)) && t < x2) x2 = t, r2 = q;
        }
        if (r2 < 0) {
          x = end; /* the rest is steady state */
          break;
        }
        phase = 2, x = x2, r = r2; /* on from the cell after it */
        continue;
      }
      if (phase == 0 && implicit) continue;
      int dep = -1, d;
      if (e == 0 && r > 0) dep = vp_t(v, r - 1, 0)[k];
      if (e == 1 && r < p - 1) dep = vp_t(v, r + 1, 1)[k];
      if (e == 2 && r > 0) dep = vp_t(v, r - 1, 2)[k];
      if (e == 3 && r < p - 1) dep = vp_t(v, r + 1, 3)[k];
      if (e >= 1 && e <= 3 && (d = vp_t(v, r, e - 1)[k]) > dep) dep = d;
      if (e == 4 && (d = vp_kth_i(v, r, k)) > dep) dep = d;
      if (k > 0 && (d = vp_t(v, r, e)[k - 1]) > dep) dep = d;
      int *occ = &v->occ[(size_t)r * T], *mem = &v->mem[(size_t)r * T], to = x;
      if (implicit) { /* the earliest free slot where memory stays in */
        for (int y = dep + 1; y < x && to == x; y++) {
          if (occ[y]) continue;
          occ[x] = 0, occ[y] = c;
          if (vp_implicit(v, r, y, x, peak, 0)) to = y;
          occ[y] = 0, occ[x] = c;
        }
        if (to < x) {
          occ[x] = 0, occ[to] = c, vp_t(v, r, e)[k] = to;
          vp_implicit(v, r, to, x, INT_MAX, 1);
        }
        continue;
      }
      /* the earliest free slot after dep where memory stays in: for a forward, from where the
       * memory up to x leaves room for one more (scanned down from x, it only grows) */
      int lo = dep + 1;
      if (e < 2)
        for (int y = x - 1; y >= lo; y--)
          if (mem[y] + 1 > peak) {
            lo = y + 1;
            break;
          }
      for (int y = lo; y < x; y++)
        if (!occ[y]) {
          to = y;
          break;
        }
      if (to == x) continue;
      occ[x] = 0, occ[to] = c, vp_t(v, r, e)[k] = to;
      if (e < 2 || e == 4)
        for (int y = to; y < x; y++) mem[y] += e < 2 ? 1 : -1;
    }
  }
}

/* Rank r's slots as sched_vblock_slots gives them: each op's kind + 1, with the W's placed as
 * vp_put_w places them (no curve kept). */
static void vp_kinds(vpat *v, int r) {
  int *occ = &v->occ[(size_t)r * v->T], due = 0, nw = 0;
  for (int x = 0; x < v->T; x++) {
    int c = occ[x];
    if (c && vp_kind(c) != 4) {
      due += vp_kind(c) == 2 || vp_kind(c) == 3;
      occ[x] = 1 + vp_kind(c);
    } else if (due > 0 && nw < 2 * v->m) {
      occ[x] = 1 + 4, nw++, due--;
    } else {
      occ[x] = 0;
    }
  }
}

int *sched_vblock_slots(int p, int m, int half, int *T) {
  /* the last block ends by 6(m + p); the W's still due after it take at most 2m more */
  vpat v = {.p = p, .m = m, .T = 6 * (m + p) + 2 * m + 16};
  v.t = core_malloc(sizeof(int) * (size_t)p * 6 * m);
  v.occ = core_calloc((size_t)p * v.T, sizeof(int));
  v.mem = core_malloc(sizeof(int) * (size_t)p * v.T);
  v.due = core_malloc(sizeof(int) * (size_t)p * v.T);
  int g = half ? (p % 2 == 0 ? 3 : 0) : (p % 3 == 0 ? 2 : 0);
  for (int r = 0; r < p; r++) {
    int base[4] = {r, 2 * p - 1 - r, 2 * p + g + r, 4 * p + g - 1 - r};
    if (half) base[0] = 2 * r, base[1] = 3 * p - 2 - r, base[2] = 3 * p + g + 2 * r - 1, base[3] = 6 * p + g - 2 - r;
    for (int e = 0; e < 4; e++)
      for (int k = 0; k < m; k++) {
        int x = base[e] + 6 * k;
        vp_t(&v, r, e)[k] = x, v.occ[(size_t)r * v.T + x] = vp_code(e, k);
      }
    vp_put_w(&v, r);
  }
  core_progress_phase("ordering compute ops, the building block's two passes:", 2.0 * v.T, "slots");
  vp_squeeze(&v, 0);
  vp_squeeze(&v, 1);
  core_progress_phase("ordering compute ops:", 0, "ops placed");
  for (int r = 0; r < p; r++) vp_kinds(&v, r);
  free(v.t), free(v.mem), free(v.due);
  *T = v.T;
  return v.occ;
}
