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
 * reordering does; W's are then placed again. The slots give each rank its order (zb.c times it
 * under the costs and checks the memory budget as for its other constructors). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"

typedef struct {
  int p, m, T;
  int *t;   /* [(r * 6 + e) * m + k]: slot of rank r's k-th op of kind e: 0 F chunk 0, 1 F chunk 1,
             * 2 I chunk 1, 3 I chunk 0, 4 W (2m of them) */
  int *occ; /* [r * T + slot]: 1 + e * m + k, or 0 */
  int *mem; /* [r * T + slot]: forwards minus W's up to and including the slot */
  int *due; /* [r * T + slot]: with W's implicit (one in each free slot while any is due), the
             * W's due after the slot */
} vpat;

static int *vp_t(vpat *v, int r, int e) { return &v->t[((size_t)r * 6 + e) * v->m]; }
static int vp_kind(const vpat *v, int c) { return (c - 1) / v->m < 4 ? (c - 1) / v->m : 4; }

/* Rank r's W's into its free slots, each after its I, oldest first; the rank's memory curve. */
static void vp_put_w(vpat *v, int r) {
  int *occ = &v->occ[(size_t)r * v->T], *mem = &v->mem[(size_t)r * v->T], *w = vp_t(v, r, 4);
  int nw = 0, due = 0, cur = 0;
  for (int x = 0; x < v->T; x++) {
    int c = occ[x];
    if (c && vp_kind(v, c) == 4) occ[x] = c = 0; /* the W's placed before */
    if (c) {
      int e = vp_kind(v, c);
      cur += e < 2, due += e == 2 || e == 3;
    } else if (due > 0 && nw < 2 * v->m) { /* always: the bound keeps the compiler quiet */
      occ[x] = 1 + 4 * v->m + nw, w[nw++] = x, due--, cur--;
    }
    mem[x] = cur;
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
      int e = vp_kind(v, occ[x]);
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

/* One pass in time order moving ops to the earliest free slot their inputs allow: in the
 * warm-up and the cool-down with the W's placed (implicit = 0), then in the cool-down with the
 * W's implicit (implicit = 1). Memory stays within the peak it starts with. */
static void vp_squeeze(vpat *v, int implicit) {
  int p = v->p, m = v->m, T = v->T, peak = 0, phase = 0;
  if (implicit) {
    for (int r = 0; r < p; r++) { /* the W's out, the curves from scratch */
      int *occ = &v->occ[(size_t)r * T];
      for (int x = 0; x < T; x++) {
        if (occ[x] && vp_kind(v, occ[x]) == 4) occ[x] = 0;
        v->mem[(size_t)r * T + x] = -1, v->due[(size_t)r * T + x] = -1;
      }
      vp_implicit(v, r, 0, T, INT_MAX, 1);
    }
  }
  for (size_t i = 0; i < (size_t)p * T; i++) peak = v->mem[i] > peak ? v->mem[i] : peak;
  int *orig = core_malloc(sizeof(int) * (size_t)p * T);
  memcpy(orig, v->occ, sizeof(int) * (size_t)p * T);
  for (int x = 0; x < T; x++) {
    core_progress_at((double)implicit * T + x); /* a column of p slots at a time */
    for (int r = 0; r < p; r++) {
      int c = orig[(size_t)r * T + x];
      if (!c) continue;
      int e = vp_kind(v, c), k = c - 1 - e * m;
      if (phase == 0 && e == 3 && r == 0) phase = 1;
      if (phase == 1 || (phase == 0 && implicit)) {
        if (phase == 1 && e == 0 && k == m - 1) phase = 2;
        continue;
      }
      int dep = -1, d;
      if (e == 0 && r > 0) dep = vp_t(v, r - 1, 0)[k];
      if (e == 1 && r < p - 1) dep = vp_t(v, r + 1, 1)[k];
      if (e == 2 && r > 0) dep = vp_t(v, r - 1, 2)[k];
      if (e == 3 && r < p - 1) dep = vp_t(v, r + 1, 3)[k];
      if (e >= 1 && e <= 3 && (d = vp_t(v, r, e - 1)[k]) > dep) dep = d;
      if (e == 4 && (d = vp_kth_i(v, r, k)) > dep) dep = d;
      if (k > 0 && (d = vp_t(v, r, e)[k - 1]) > dep) dep = d;
      int *occ = &v->occ[(size_t)r * T], *mem = &v->mem[(size_t)r * T], to = x, hi = -INT_MAX;
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
      for (int y = x - 1; y > dep; y--) { /* the earliest free slot where memory stays in */
        hi = mem[y] > hi ? mem[y] : hi;
        if (!occ[y] && (e > 1 || hi + 1 <= peak)) to = y;
      }
      if (to == x) continue;
      occ[x] = 0, occ[to] = c, vp_t(v, r, e)[k] = to;
      if (e < 2 || e == 4)
        for (int y = to; y < x; y++) mem[y] += e < 2 ? 1 : -1;
    }
  }
  free(orig);
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
        vp_t(&v, r, e)[k] = x, v.occ[(size_t)r * v.T + x] = 1 + e * m + k;
      }
    vp_put_w(&v, r);
  }
  core_progress_phase("ordering compute ops, the building block's two passes:", 2.0 * v.T, "slots");
  vp_squeeze(&v, 0);
  vp_squeeze(&v, 1);
  core_progress_phase("ordering compute ops:", 0, "ops placed");
  for (int r = 0; r < p; r++) vp_put_w(&v, r);
  for (size_t i = 0; i < (size_t)p * v.T; i++) v.occ[i] = v.occ[i] ? 1 + vp_kind(&v, v.occ[i]) : 0;
  free(v.t), free(v.mem), free(v.due);
  *T = v.T;
  return v.occ;
}
