/* schedule/verify.c: the one verifier for every program, compiled or imported.
 *
 * A program passes when
 *   1. every instruction's fields are in range and transfers name the rank of the neighbouring
 *      virtual stage;
 *   2. every (stage, micro-batch) has exactly one F and one backward (B, or I then W);
 *   3. replaying the streams with blocking, unbuffered send/recv semantics (a send completes only
 *      when its receiver is at the matching receive) runs to the end, with every op's inputs
 *      present when it runs: loads before first/last-stage forwards, activations received (or
 *      produced on the same rank) before forwards, gradients before backwards, F before its
 *      backward, I before its W, all backwards of a rank before REDUCE_GRADS;
 *   4. a buffer slot is never given to two (chunk, micro-batch) pairs whose live ranges (first to
 *      last instruction naming them) overlap, nor a slot's other part (aslot) to two whose
 *      shorter ranges (first to last instruction but a BACKWARD_WEIGHT) do, and both are within
 *      the rank's allocation.
 * The first failure is reported with the rank, the instruction index and an excerpt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/progress.h"
#include "schedule/internal.h"

void sched_excerpt(const sched_program *pr, int r, int i, char *buf, size_t n) {
  const sched_stream *st = &pr->streams[r];
  size_t k = 0;
  buf[0] = 0;
  for (int j = i - 2; j <= i + 2; j++) {
    if (j < 0 || j >= st->len || k >= n) continue;
    char s[96];
    sched_instr_str(&st->ins[j], s, sizeof s);
    int w = snprintf(buf + k, n - k, "    %s rank %d #%d: %s\n", j == i ? ">" : " ", r, j, s);
    if (w < 0) break;
    k += (size_t)w;
  }
  if (k > 0 && k < n && buf[k - 1] == '\n') buf[k - 1] = 0;
}

static int fail_at(const sched_program *pr, int r, int i, const char *what) {
  char ex[1024];
  sched_excerpt(pr, r, i, ex, sizeof ex);
  /* composed here, not a user's value: precisions keep them whole (core_error_set cuts a bare %s) */
  return core_error_set(CORE_EINPUT, "rank %d instruction %d: %.*s\n%.*s", r, i, (int)strlen(what), what, (int)strlen(ex), ex);
}

int sched_fail_at(const sched_program *pr, int r, int i, const char *what) { return fail_at(pr, r, i, what); }

static int needs_chunk(sched_op op) {
  return op <= SCHED_RECV_GRAD; /* loads, compute and transfers name (chunk, micro-batch) */
}

/* Fields in range, transfers aimed at the right neighbour, at most one VALIDATE per rank: the
 * first failure in rank and stream order. On the way, one pass for what the later checks count:
 * *seen gets a bit (1 << op) for each opcode the program has; ccnt the compute ops, as
 * sched_check_compute counts them, and *dup_r, *dup_i the first that repeats one (-1 when none);
 * pcnt the transfers (check_pairs); vat[r] rank r's VALIDATE (-1 when none). */
static int scan(const sched_program *pr, unsigned *seen, unsigned char *ccnt, int *dup_r, int *dup_i, int *pcnt,
                int *vat) {
  int S = pr->p * pr->v, m = pr->m;
  size_t n = (size_t)S * (size_t)m;
  char msg[160];
  *seen = 0, *dup_r = *dup_i = -1;
  for (int r = 0; r < pr->p; r++) vat[r] = -1;
  for (int r = 0; r < pr->p; r++)
    for (int i = 0; i < pr->streams[r].len; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      if (in->op >= SCHED_OP_COUNT) return fail_at(pr, r, i, "unknown opcode");
      *seen |= 1u << in->op;
      if (in->op == SCHED_VALIDATE) {
        if (vat[r] >= 0) return fail_at(pr, r, i, "a second VALIDATE in one step");
        if (in->chunk != -1 || in->mb != -1 || in->peer != -1)
          return fail_at(pr, r, i, "VALIDATE names a chunk, micro-batch or peer");
        if (pr->forward_only) return fail_at(pr, r, i, "VALIDATE in a forward-only program (nothing is updated)");
        vat[r] = i;
        continue;
      }
      if (in->op == SCHED_REDUCE_TIED_GRADS && in->peer != -1 &&
          (in->peer < 0 || in->peer >= pr->p || in->peer == r))
        return fail_at(pr, r, i, "tied-gradient reduction names an invalid peer rank");
      if (in->op == SCHED_GATHER_PARAMS || in->op == SCHED_RELEASE_PARAMS) {
        if (!pr->gather_limit)
          return fail_at(pr, r, i, "a parameter gather or release in a program whose parameters are not sharded "
                                   "(gather_limit 0)");
        if (in->chunk < 0 || in->chunk >= pr->v || in->mb != -1 || in->peer != -1) {
          snprintf(msg, sizeof msg, "a gather or release names chunk %d of %d (and no micro-batch, no peer)",
                   in->chunk, pr->v);
          return fail_at(pr, r, i, msg);
        }
      }
      if (in->op == SCHED_OFFLOAD || in->op == SCHED_RELOAD) {
        if (in->chunk < 0 || in->chunk >= pr->v || in->mb < 0 || in->mb >= pr->m || in->peer != -1) {
          snprintf(msg, sizeof msg, "an offload or reload names chunk %d micro-batch %d (v=%d, m=%d) and no peer",
                   in->chunk, in->mb, pr->v, pr->m);
          return fail_at(pr, r, i, msg);
        }
        continue;
      }
      if (!needs_chunk((sched_op)in->op)) continue;
      if (in->chunk < 0 || in->chunk >= pr->v || in->mb < 0 || in->mb >= pr->m) {
        snprintf(msg, sizeof msg, "chunk or micro-batch out of range (v=%d, m=%d)", pr->v, pr->m);
        return fail_at(pr, r, i, msg);
      }
      int s = sched_stage_at(pr, r, in), want = -2;
      switch (in->op) {
      case SCHED_SEND_ACT: want = s + 1 < S ? pr->rank_of[s + 1] : -1; break;
      case SCHED_RECV_ACT: want = s > 0 ? pr->rank_of[s - 1] : -1; break;
      case SCHED_SEND_GRAD: want = s > 0 ? pr->rank_of[s - 1] : -1; break;
      case SCHED_RECV_GRAD: want = s + 1 < S ? pr->rank_of[s + 1] : -1; break;
      case SCHED_LOAD_MICROBATCH:
        if (s != 0 && s != S - 1) return fail_at(pr, r, i, "load on a stage that is neither first nor last");
        break;
      default: break;
      }
      if (want == -1) return fail_at(pr, r, i, "transfer past the end of the pipeline");
      if (want >= 0 && (in->peer != want || want == r)) {
        snprintf(msg, sizeof msg, "transfer names peer %d, but the neighbouring stage is on rank %d",
                 in->peer, want);
        return fail_at(pr, r, i, msg);
      }
      size_t k = (size_t)s * (size_t)m + (size_t)in->mb; /* in range: checked above */
      switch (in->op) {
      case SCHED_FORWARD:
      case SCHED_BACKWARD:
      case SCHED_BACKWARD_INPUT:
      case SCHED_BACKWARD_WEIGHT: {
        unsigned char *c = &ccnt[4 * k + (size_t)(in->op - SCHED_FORWARD)];
        if (*c && *dup_r < 0) *dup_r = r, *dup_i = i;
        *c = 1;
        break;
      }
      case SCHED_SEND_ACT: pcnt[k + (size_t)m]++; break; /* [dir][receiving stage][mb] */
      case SCHED_RECV_ACT: pcnt[k]--; break;
      case SCHED_SEND_GRAD: pcnt[n + k - (size_t)m]++; break;
      case SCHED_RECV_GRAD: pcnt[n + k]--; break;
      default: break;
      }
    }
  return CORE_OK;
}

static const char dup_msg[] = "duplicate compute op (this stage and micro-batch already ran it)";

/* Every (stage, micro-batch) has one forward and one backward, by the counts of
 * sched_check_compute (cnt: [stage][mb][F, B, I, W]). */
static int compute_verdict(const sched_program *pr, const unsigned char *cnt) {
  int S = pr->p * pr->v, m = pr->m, rc = CORE_OK;
  for (int s = 0; s < S && !rc; s++)
    for (int j = 0; j < m && !rc; j++) {
      const unsigned char *c = &cnt[4 * ((size_t)s * m + j)];
      const char *what = NULL;
      if (!c[0]) what = "has no forward";
      else if (c[1] && (c[2] || c[3])) what = "has both a full backward and a split one";
      else if (pr->forward_only && (c[1] || c[2] || c[3])) what = "has a backward in a forward-only program";
      else if (pr->forward_only) what = NULL;
      else if (!c[1] && !c[2] && !c[3]) what = "has no backward";
      else if (!c[1] && !c[2]) what = "has a weight-gradient backward (W) but no input-gradient one (I)";
      else if (!c[1] && !c[3]) what = "has an input-gradient backward (I) but no weight-gradient one (W)";
      if (what)
        rc = core_error_set(CORE_EINPUT, "virtual stage %d micro-batch %d (rank %d chunk %d) %s", s,
                            j, pr->rank_of[s], pr->chunk_of[s], what);
    }
  return rc;
}

int sched_check_compute(const sched_program *pr) {
  int S = pr->p * pr->v, m = pr->m;
  size_t n = (size_t)S * (size_t)m;
  unsigned char *cnt = core_calloc(n, 4); /* F, B, I, W counts, saturating */
  int rc = CORE_OK;
  for (int r = 0; r < pr->p && !rc; r++)
    for (int i = 0; i < pr->streams[r].len && !rc; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      if (in->op >= SCHED_OP_COUNT) rc = fail_at(pr, r, i, "unknown opcode");
      else if (!sched_op_is_compute((sched_op)in->op)) continue;
      else if (in->chunk < 0 || in->chunk >= pr->v || in->mb < 0 || in->mb >= m)
        rc = fail_at(pr, r, i, "chunk or micro-batch out of range");
      else {
        int kind = in->op - SCHED_FORWARD; /* F=0, B=1, I=2, W=3 */
        unsigned char *c = &cnt[4 * ((size_t)sched_stage_at(pr, r, in) * m + in->mb) + kind];
        if (*c) rc = fail_at(pr, r, i, dup_msg);
        *c = 1;
      }
    }
  if (!rc) rc = compute_verdict(pr, cnt);
  free(cnt);
  return rc;
}

/* Every send has exactly one receive and every receive one send. Messages are keyed by
 * (direction, receiving stage, micro-batch); cnt (scan's) holds sends minus receives of each. The
 * counts are compared before the replay so a missing partner is named as such rather than as the
 * deadlock it would cause. */
static int check_pairs(const sched_program *pr, const int *cnt) {
  int m = pr->m;
  size_t n = (size_t)pr->p * (size_t)pr->v * (size_t)m;
  int rc = CORE_OK, unmatched = 0;
  for (size_t k = 0; k < 2 * n; k++) unmatched |= cnt[k];
  for (int r = 0; r < pr->p && !rc && unmatched; r++) /* find the first instruction without a partner */
    for (int i = 0; i < pr->streams[r].len && !rc; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      int s = sched_stage_at(pr, r, in), c = 0;
      const char *want = NULL;
      switch (in->op) {
      case SCHED_SEND_ACT: c = cnt[(size_t)(s + 1) * m + in->mb], want = "RECV_ACT"; break;
      case SCHED_RECV_ACT: c = -cnt[(size_t)s * m + in->mb], want = "SEND_ACT"; break;
      case SCHED_SEND_GRAD: c = cnt[n + (size_t)(s - 1) * m + in->mb], want = "RECV_GRAD"; break;
      case SCHED_RECV_GRAD: c = -cnt[n + (size_t)s * m + in->mb], want = "SEND_GRAD"; break;
      default: break;
      }
      if (c > 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s has no matching partner: rank %d has no %s for it",
                 sched_op_name((sched_op)in->op), in->peer, want);
        rc = fail_at(pr, r, i, msg);
      }
    }
  return rc;
}

/* Replay state. Per (stage, micro-batch): bit flags of what has happened. */
enum { HAS_INPUT = 1, HAS_LABELS = 2, HAS_ACT = 4, FWD_DONE = 8, HAS_GRAD = 16, BWD_DONE = 32, W_DONE = 64 };

typedef struct {
  const sched_program *pr;
  int S, m;
  unsigned char *st; /* [S*m] flags */
  int *pc;
  int *bwd_left; /* per rank: backward completions still to come before REDUCE_GRADS */
} replay;

static unsigned char *flags(replay *rp, int s, int j) { return &rp->st[(size_t)s * rp->m + j]; }

/* Executes local instruction i of rank r; returns 0 ok, else fails. */
static int exec_local(replay *rp, int r, int i, const sched_instr *in) {
  const sched_program *pr = rp->pr;
  int s = sched_stage_at(pr, r, in), S = rp->S;
  unsigned char *f = s >= 0 && in->mb >= 0 ? flags(rp, s, in->mb) : NULL;
  switch (in->op) {
  case SCHED_LOAD_MICROBATCH:
    if (s == 0) *f |= HAS_INPUT;
    if (s == S - 1) *f |= HAS_LABELS;
    return 0;
  case SCHED_FORWARD:
    if (s == 0 && !(*f & HAS_INPUT)) return fail_at(pr, r, i, "forward of the first stage before its LOAD_MICROBATCH");
    if (s > 0 && !(*f & HAS_ACT)) return fail_at(pr, r, i, "forward before its input activation was received");
    if (s == S - 1 && !(*f & HAS_LABELS)) return fail_at(pr, r, i, "forward of the last stage before its labels were loaded");
    *f |= FWD_DONE;
    if (s + 1 < S && pr->rank_of[s + 1] == r) *flags(rp, s + 1, in->mb) |= HAS_ACT;
    return 0;
  case SCHED_BACKWARD:
  case SCHED_BACKWARD_INPUT:
    if (!(*f & FWD_DONE)) return fail_at(pr, r, i, "backward before the forward of the same stage and micro-batch");
    if (s < S - 1 && !(*f & HAS_GRAD)) return fail_at(pr, r, i, "backward before its output gradient was received");
    *f |= BWD_DONE;
    if (s > 0 && pr->rank_of[s - 1] == r) *flags(rp, s - 1, in->mb) |= HAS_GRAD;
    if (in->op == SCHED_BACKWARD) rp->bwd_left[r]--;
    return 0;
  case SCHED_BACKWARD_WEIGHT:
    if (!(*f & BWD_DONE)) return fail_at(pr, r, i, "weight-gradient backward (W) before its input-gradient backward (I)");
    *f |= W_DONE;
    rp->bwd_left[r]--;
    return 0;
  case SCHED_REDUCE_GRADS:
    if (rp->bwd_left[r] > 0) return fail_at(pr, r, i, "REDUCE_GRADS before every backward of this rank finished");
    return 0;
  default: return 0; /* OPTIMIZER_STEP, local tied reduction */
  }
}

static int is_transfer(const sched_instr *in) {
  return sched_is_p2p((sched_op)in->op) || (in->op == SCHED_REDUCE_TIED_GRADS && in->peer >= 0);
}

/* Do instruction a on rank ra and b on rank rb form one rendezvous? */
static int matches(const sched_program *pr, int ra, const sched_instr *a, int rb, const sched_instr *b) {
  if (a->peer != rb || b->peer != ra) return 0;
  if (a->op == SCHED_REDUCE_TIED_GRADS) return b->op == SCHED_REDUCE_TIED_GRADS;
  if (a->mb != b->mb || b->chunk < 0) return 0;
  int sa = sched_stage_at(pr, ra, a), sb = sched_stage_at(pr, rb, b);
  switch (a->op) {
  case SCHED_SEND_ACT: return b->op == SCHED_RECV_ACT && sb == sa + 1;
  case SCHED_RECV_ACT: return b->op == SCHED_SEND_ACT && sa == sb + 1;
  case SCHED_SEND_GRAD: return b->op == SCHED_RECV_GRAD && sb == sa - 1;
  case SCHED_RECV_GRAD: return b->op == SCHED_SEND_GRAD && sa == sb - 1;
  default: return 0;
  }
}

/* Completes a matched send/receive pair (or tied reduction): the send side needs its data. */
static int exec_pair(replay *rp, int r, const sched_instr *in, int q, const sched_instr *other) {
  const sched_program *pr = rp->pr;
  if (in->op == SCHED_REDUCE_TIED_GRADS) return 0;
  int send_r = (in->op == SCHED_SEND_ACT || in->op == SCHED_SEND_GRAD) ? r : q;
  const sched_instr *snd = send_r == r ? in : other, *rcv = send_r == r ? other : in;
  int recv_r = send_r == r ? q : r;
  int ss = sched_stage_at(pr, send_r, snd), rs = sched_stage_at(pr, recv_r, rcv);
  unsigned char *fs = flags(rp, ss, snd->mb), *fr = flags(rp, rs, rcv->mb);
  if (snd->op == SCHED_SEND_ACT) {
    if (!(*fs & FWD_DONE)) return fail_at(pr, send_r, rp->pc[send_r], "activation sent before its forward ran");
    *fr |= HAS_ACT;
  } else {
    if (!(*fs & BWD_DONE)) return fail_at(pr, send_r, rp->pc[send_r], "gradient sent before its backward ran");
    *fr |= HAS_GRAD;
  }
  return 0;
}

/* Why rank r cannot go on: a transfer with no partner at all, or a cycle of waits. */
static int report_stuck(replay *rp) {
  const sched_program *pr = rp->pr;
  for (int r = 0; r < pr->p; r++) {
    if (rp->pc[r] >= pr->streams[r].len) continue;
    const sched_instr *in = &pr->streams[r].ins[rp->pc[r]];
    int q = in->peer, found = 0;
    if (q >= 0 && q < pr->p)
      for (int k = rp->pc[q]; k < pr->streams[q].len && !found; k++)
        found = matches(pr, r, in, q, &pr->streams[q].ins[k]);
    if (!found) {
      char msg[160];
      snprintf(msg, sizeof msg, "%s has no matching partner left on rank %d",
               sched_op_name((sched_op)in->op), q);
      return fail_at(pr, r, rp->pc[r], msg);
    }
  }
  char buf[2048];
  size_t k = 0;
  for (int r = 0; r < pr->p && k < sizeof buf; r++) {
    if (rp->pc[r] >= pr->streams[r].len) continue;
    char s[96];
    sched_instr_str(&pr->streams[r].ins[rp->pc[r]], s, sizeof s);
    int w = snprintf(buf + k, sizeof buf - k, "\n    rank %d waits at #%d: %s", r, rp->pc[r], s);
    if (w < 0) break;
    k += (size_t)w;
  }
  return core_error_set(CORE_EINPUT, "deadlock with blocking send/recv: every rank left waits for "
                                     "a partner that waits elsewhere:%.*s", (int)strlen(buf), buf);
}

static int replay_run(replay *rp) {
  const sched_program *pr = rp->pr;
  int p = pr->p;
  int *queue = core_malloc(sizeof(int) * (size_t)p), *queued = core_calloc((size_t)p, sizeof(int));
  int qh = 0, qt = 0, rc = 0;
  unsigned tick = 0;
  double done = 0;
  for (int r = 0; r < p; r++) queue[qt++ % p] = r, queued[r] = 1;
  while (qh != qt && !rc) {
    int r = queue[qh++ % p];
    queued[r] = 0;
    const sched_instr *ins = pr->streams[r].ins;
    int i = rp->pc[r], len = pr->streams[r].len; /* rp->pc[r] while r runs */
    for (; i < len && !rc; i++) {
      const sched_instr *in = &ins[i];
      if (i + 8 < len) __builtin_prefetch(in + 8); /* the ranks take turns: too many streams for the hardware to follow */
      core_progress_tick(&tick, done++);
      if (!is_transfer(in)) {
        rc = exec_local(rp, r, i, in);
        continue;
      }
      int q = in->peer;
      if (rp->pc[q] >= pr->streams[q].len) break;
      const sched_instr *other = &pr->streams[q].ins[rp->pc[q]];
      if (!matches(pr, r, in, q, other)) break; /* q will look at us when it gets to its transfer */
      rp->pc[r] = i;
      rc = exec_pair(rp, r, in, q, other);
      rp->pc[q]++, done++;
      if (!queued[q]) queue[qt++ % p] = q, queued[q] = 1, __builtin_prefetch(other + 1); /* what q reads next */
    }
    rp->pc[r] = i;
  }
  free(queue), free(queued);
  if (rc) return rc;
  for (int r = 0; r < p; r++)
    if (rp->pc[r] < pr->streams[r].len) return report_stuck(rp);
  return CORE_OK;
}

/* Rank r's two pools at once (u = 0: the slots over each pair's range [first, last]; u = 1:
 * their other parts over [first, alast]): an instruction of a pair inside the range names a
 * buffer of the pool that no other live pair holds, the one the pair's first instruction named;
 * outside it, none. A range may end at a local forward that takes the pair's output
 * (sched_pair_ranges). held: [2][v*m] scratch. */
static int check_pools(const sched_program *pr, int r, const int *first, const int *const end[2], int *held, const int *lp) {
  const sched_stream *st = &pr->streams[r];
  size_t keys = (size_t)pr->v * (size_t)pr->m;
  int n[2] = {pr->nslots[r], pr->naslots[r]}, rc = CORE_OK;
  static const char *const what[2] = {"buffer slot", "other part of a buffer slot"};
  int *owner[2];
  for (int u = 0; u < 2; u++) {
    owner[u] = core_malloc(sizeof(int) * (size_t)(n[u] > 0 ? n[u] : 1));
    for (int s = 0; s < n[u]; s++) owner[u][s] = -1;
  }
  for (size_t k = 0; k < 2 * keys; k++) held[k] = -1;
  char msg[200];
  for (int i = 0; i < st->len && !rc; i++) {
    const sched_instr *in = &st->ins[i];
    if (in->op == SCHED_OFFLOAD || in->op == SCHED_RELOAD) { /* the pair's buffers given up, or taken anew */
      int k = in->chunk * pr->m + in->mb;
      for (int u = 0; u < 2 && !rc; u++) {
        int sl = u ? in->aslot : in->slot, *own = owner[u], *hd = held + (size_t)u * keys;
        if (i > end[u][k]) {
          if (sl != -1) {
            snprintf(msg, sizeof msg, "names %s %d after the pair's last use of it", what[u], sl);
            rc = fail_at(pr, r, i, msg);
          }
        } else if (in->op == SCHED_OFFLOAD) {
          if (sl != hd[k]) {
            snprintf(msg, sizeof msg, "offloads %s %d, not the pair's (%d)", what[u], sl, hd[k]);
            rc = fail_at(pr, r, i, msg);
          } else {
            own[sl] = -1;
          }
        } else if (sl < 0 || sl >= n[u]) {
          snprintf(msg, sizeof msg, "%s %d outside the rank's %d", what[u], sl, n[u]);
          rc = fail_at(pr, r, i, msg);
        } else if (own[sl] >= 0) {
          snprintf(msg, sizeof msg, "reloads into %s %d, still live with chunk %d micro-batch %d", what[u], sl,
                   own[sl] / pr->m, own[sl] % pr->m);
          rc = fail_at(pr, r, i, msg);
        } else {
          own[sl] = k, hd[k] = sl;
        }
      }
      continue;
    }
    if (!needs_chunk((sched_op)in->op)) continue;
    int k = in->chunk * pr->m + in->mb, kp = sched_local_pair(lp, pr->m, in);
    /* most instructions: inside the pair's range, naming its slot, and inside the other part's
     * naming that, or past it naming none; no range ends here and no local input: nothing to do */
    if (kp < 0 && i > first[k] && i < end[0][k] && in->slot == held[k] &&
        (i < end[1][k] ? in->aslot == held[keys + (size_t)k] : i > end[1][k] && in->aslot == -1))
      continue;
    for (int u = 0; u < 2 && !rc; u++) {
      int sl = u ? in->aslot : in->slot, *own = owner[u], *hd = held + (size_t)u * keys;
      if (i > first[k] && i <= end[u][k] && sl == hd[k]) { /* the common case: the pair's own, still */
        if (end[u][k] == i) own[sl] = -1;
      } else if (i > end[u][k]) {
        if (sl != -1) {
          snprintf(msg, sizeof msg, "names %s %d after the pair's last use of it", what[u], sl);
          rc = fail_at(pr, r, i, msg);
        }
      } else if (sl < 0 || sl >= n[u]) {
        snprintf(msg, sizeof msg, "%s %d outside the rank's %d", what[u], sl, n[u]);
        rc = fail_at(pr, r, i, msg);
      } else if (i > first[k]) {
        snprintf(msg, sizeof msg, "%s %d is not the one the pair's first instruction named (%d)", what[u], sl, hd[k]);
        rc = fail_at(pr, r, i, msg);
      } else if (own[sl] >= 0) {
        snprintf(msg, sizeof msg, "%s %d is still live with chunk %d micro-batch %d", what[u], sl, own[sl] / pr->m,
                 own[sl] % pr->m);
        rc = fail_at(pr, r, i, msg);
      } else {
        own[sl] = end[u][k] == i ? -1 : k, hd[k] = sl;
      }
      if (!rc && kp >= 0 && kp != k && end[u][kp] == i && hd[kp] >= 0) own[hd[kp]] = -1; /* its output taken */
    }
  }
  free(owner[0]), free(owner[1]);
  return rc;
}

static int check_slots(const sched_program *pr) {
  size_t keys = (size_t)pr->v * (size_t)pr->m;
  int *first = core_malloc(sizeof(int) * keys), *last = core_malloc(sizeof(int) * keys);
  int *alast = core_malloc(sizeof(int) * keys), *held = core_malloc(sizeof(int) * 2 * keys), rc = CORE_OK;
  int *lp = core_malloc(sizeof(int) * (size_t)pr->v);
  const int *const end[2] = {last, alast};
  for (int r = 0; r < pr->p && !rc; r++) {
    sched_pair_ranges(pr, r, first, last, alast);
    sched_local_chunks(pr, r, lp);
    rc = check_pools(pr, r, first, end, held, lp);
  }
  free(first), free(last), free(alast), free(held), free(lp);
  return rc;
}

/* ZeRO-3: every compute op runs on a gathered chunk, a chunk is gathered only when it is not and
 * released only when it is, at most gather_limit chunks are gathered at once, and none is left
 * gathered at the end of the step. */
static int check_gathers(const sched_program *pr) {
  if (!pr->gather_limit) return CORE_OK;
  unsigned char *on = core_malloc((size_t)pr->v);
  int rc = CORE_OK;
  char msg[200];
  for (int r = 0; r < pr->p && !rc; r++) {
    const sched_stream *st = &pr->streams[r];
    int n = 0;
    memset(on, 0, (size_t)pr->v);
    for (int i = 0; i < st->len && !rc; i++) {
      const sched_instr *in = &st->ins[i];
      if (in->op == SCHED_GATHER_PARAMS) {
        if (on[in->chunk]) rc = fail_at(pr, r, i, "gathers a chunk whose parameters are gathered already");
        else if (++n > pr->gather_limit) {
          snprintf(msg, sizeof msg, "%d chunks gathered at once, more than the program's limit of %d", n,
                   pr->gather_limit);
          rc = fail_at(pr, r, i, msg);
        }
        on[in->chunk] = 1;
      } else if (in->op == SCHED_RELEASE_PARAMS) {
        if (!on[in->chunk]) rc = fail_at(pr, r, i, "releases a chunk whose parameters are not gathered");
        on[in->chunk] = 0, n--;
      } else if (sched_op_is_compute((sched_op)in->op) && !on[in->chunk]) {
        snprintf(msg, sizeof msg, "%s on chunk %d, whose parameters are not gathered (ZeRO-3: a GATHER_PARAMS of "
                 "the chunk must come first)", sched_op_name((sched_op)in->op), in->chunk);
        rc = fail_at(pr, r, i, msg);
      }
    }
    for (int c = 0; c < pr->v && !rc; c++)
      if (on[c]) {
        snprintf(msg, sizeof msg, "chunk %d is still gathered at the end of the step (no RELEASE_PARAMS)", c);
        rc = fail_at(pr, r, st->len - 1, msg);
      }
  }
  free(on);
  return rc;
}

/* Activation offload: a pair is offloaded only after its forward ran and while its activations
 * are on the device; no instruction uses it (nor a local FORWARD takes its output, nor a local
 * backward hands it its gradient: sched_local_grad) between its OFFLOAD and its RELOAD; a RELOAD
 * follows its OFFLOAD; nothing is left on the host at the end.
 * (Each copy stream runs its copies one at a time in issue order: the runtime has one stream
 * per direction, the simulator one lane per direction.) */
static int check_offloads(const sched_program *pr) {
  int km = pr->v * pr->m, rc = CORE_OK;
  unsigned char *state = core_malloc((size_t)km); /* 0 not yet used, 1 on the device, 2 on the host */
  char msg[200];
  for (int r = 0; r < pr->p && !rc; r++) {
    const sched_stream *st = &pr->streams[r];
    memset(state, 0, (size_t)km);
    for (int i = 0; i < st->len && !rc; i++) {
      const sched_instr *in = &st->ins[i];
      if (in->chunk < 0 || in->mb < 0 || in->chunk >= pr->v || in->mb >= pr->m) continue;
      int k = in->chunk * pr->m + in->mb, kp = sched_local_input(pr, r, in);
      if (kp < 0) kp = sched_local_grad(pr, r, in); /* (an instruction has one or the other) */
      if (in->op == SCHED_OFFLOAD) {
        if (state[k] != 1) rc = fail_at(pr, r, i, state[k] ? "offloads activations that are on the host already"
                                                            : "offloads a pair before its forward made its activations");
        state[k] = 2;
      } else if (in->op == SCHED_RELOAD) {
        if (state[k] != 2) rc = fail_at(pr, r, i, "reloads a pair whose activations are not on the host (no OFFLOAD before it)");
        state[k] = 1;
      } else {
        if (state[k] == 2 || (kp >= 0 && state[kp] == 2)) {
          snprintf(msg, sizeof msg, "%s uses activations that are on the host (a RELOAD of chunk %d micro-batch %d must "
                   "come first)", sched_op_name((sched_op)in->op), state[k] == 2 ? in->chunk : kp / pr->m,
                   state[k] == 2 ? in->mb : kp % pr->m);
          rc = fail_at(pr, r, i, msg);
        }
        state[k] = 1;
      }
    }
    for (int k = 0; k < km && !rc; k++)
      if (state[k] == 2) {
        snprintf(msg, sizeof msg, "chunk %d micro-batch %d is still on the host at the end of the step (no RELOAD)",
                 k / pr->m, k % pr->m);
        rc = fail_at(pr, r, st->len - 1, msg);
      }
  }
  free(state);
  return rc;
}

int sched_verify(const sched_program *pr) {
  size_t n = (size_t)pr->p * (size_t)pr->v * (size_t)pr->m;
  unsigned char *ccnt = core_calloc(n, 4); /* F, B, I, W of each (stage, micro-batch) */
  int *pcnt = core_calloc(2 * n, sizeof(int));
  int *vat = core_malloc(sizeof(int) * (size_t)(pr->p > 0 ? pr->p : 1));
  unsigned seen;
  int dup_r, dup_i;
  int rc = scan(pr, &seen, ccnt, &dup_r, &dup_i, pcnt, vat);
  if (!rc && dup_r >= 0) rc = fail_at(pr, dup_r, dup_i, dup_msg);
  if (!rc) rc = compute_verdict(pr, ccnt);
  if (!rc) rc = check_gathers(pr);
  /* (without these instructions the two checks cannot fail) */
  if (!rc && (seen & (1u << SCHED_OFFLOAD | 1u << SCHED_RELOAD))) rc = check_offloads(pr);
  if (!rc) rc = check_pairs(pr, pcnt);
  free(ccnt), free(pcnt);
  if (!rc && (seen & 1u << SCHED_VALIDATE)) rc = sched_check_validate(pr, vat);
  free(vat);
  if (rc) return rc;
  replay rp = {.pr = pr, .S = pr->p * pr->v, .m = pr->m};
  rp.st = core_calloc((size_t)rp.S * (size_t)rp.m, 1);
  rp.pc = core_calloc((size_t)pr->p, sizeof(int));
  rp.bwd_left = core_calloc((size_t)pr->p, sizeof(int));
  for (int s = 0; s < rp.S && !pr->forward_only; s++) rp.bwd_left[pr->rank_of[s]] += pr->m;
  rc = replay_run(&rp);
  free(rp.st), free(rp.pc), free(rp.bwd_left);
  if (!rc) rc = check_slots(pr);
  return rc;
}
