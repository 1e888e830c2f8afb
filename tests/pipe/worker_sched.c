/* A stage-worker check under mpirun with a synthetic model, so every schedule family's transfers
 * are exercised for real: forward adds (stage+1) to its input, backward doubles the gradient
 * and adds the stage index; each rank checks every value it receives against the closed form.
 * Messages are 64 KiB (above the shared-memory eager limit) and --sync uses MPI_Issend, so a
 * send completes only when its receive is posted: ordering mistakes cannot hide in buffering.
 * --idle: the last rank sleeps 2 ms in each forward, so the others wait for it on MPI, and the
 * run fails unless the worker called the executor's idle hook while they waited.
 *   mpirun -np P worker_sched --schedule S --stages P [--virtual V] --microbatches M [--sync]
 *          [--tied] [--steps N] [--idle] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "pipe/worker.h"
#include "schedule/schedule.h"

#define NF 16384

typedef struct {
  const sched_program *pr;
  int rank, S, m;
  MPI_Comm comm;
  float *in_act, *out_act, *grad_out, *grad_in; /* [nslots][NF] */
  int *slot_of;                                 /* [v*m] current slot of (chunk, mb) */
  int *f_count, *b_count, *i_done;              /* [v*m] */
  int errors;
  int slow;   /* --idle on the last rank: each forward sleeps 2 ms */
  long idles; /* calls of the idle hook */
} stub;

static void idle(void *ctx) { ((stub *)ctx)->idles++; }

static double expect_in(int s, int mb) { return mb * 1000 + 0.5 + s * (s + 1) / 2.0; }
static double expect_gout(const stub *x, int s, int mb) {
  double g = mb + 7.0; /* at the last stage, from the labels */
  for (int k = x->S - 1; k > s; k--) g = g * 2 + k;
  return g;
}

static float *at(float *base, int slot) { return base + (size_t)slot * NF; }

static void check(stub *x, int ok, const char *what, int s, int mb, double got, double want) {
  if (ok) return;
  if (x->errors++ < 5)
    fprintf(stderr, "rank %d: %s of stage %d mb %d is %g, expected %g\n", x->rank, what, s, mb, got, want);
}

static int run(void *ctx, const sched_instr *in) {
  stub *x = ctx;
  const sched_program *pr = x->pr;
  int s = in->chunk >= 0 ? pr->stage_of[x->rank * pr->v + in->chunk] : -1;
  int key = in->chunk * x->m + in->mb;
  if (in->chunk >= 0) x->slot_of[key] = in->slot;
  switch (in->op) {
  case SCHED_LOAD_MICROBATCH:
    if (s == 0)
      for (int i = 0; i < NF; i++) at(x->in_act, in->slot)[i] = (float)(in->mb * 1000 + 0.5);
    if (s == x->S - 1)
      for (int i = 0; i < NF; i++) at(x->grad_out, in->slot)[i] = (float)(in->mb + 7.0);
    return 0;
  case SCHED_FORWARD: {
    if (x->slow) nanosleep(&(struct timespec){0, 2000000}, NULL);
    if (s > 0 && pr->rank_of[s - 1] == x->rank) { /* the V turn: input from our own chunk */
      int src = x->slot_of[pr->chunk_of[s - 1] * x->m + in->mb];
      memcpy(at(x->in_act, in->slot), at(x->out_act, src), sizeof(float) * NF);
    }
    float *a = at(x->in_act, in->slot), *o = at(x->out_act, in->slot);
    check(x, a[0] == (float)expect_in(s, in->mb) && a[NF - 1] == a[0], "input", s, in->mb, a[0], expect_in(s, in->mb));
    for (int i = 0; i < NF; i++) o[i] = a[i] + (float)(s + 1);
    x->f_count[key]++;
    return 0;
  }
  case SCHED_BACKWARD:
  case SCHED_BACKWARD_INPUT: {
    if (s < x->S - 1 && pr->rank_of[s + 1] == x->rank) {
      int src = x->slot_of[pr->chunk_of[s + 1] * x->m + in->mb];
      memcpy(at(x->grad_out, in->slot), at(x->grad_in, src), sizeof(float) * NF);
    }
    float *g = at(x->grad_out, in->slot), *d = at(x->grad_in, in->slot);
    double want = expect_gout(x, s, in->mb);
    check(x, g[0] == (float)want && g[NF - 1] == g[0], "output gradient", s, in->mb, g[0], want);
    check(x, x->f_count[key] == 1, "forwards before backward", s, in->mb, x->f_count[key], 1);
    for (int i = 0; i < NF; i++) d[i] = g[i] * 2 + (float)s;
    if (in->op == SCHED_BACKWARD) x->b_count[key]++;
    else x->i_done[key] = 1;
    return 0;
  }
  case SCHED_BACKWARD_WEIGHT:
    check(x, x->i_done[key] == 1, "I before W", s, in->mb, x->i_done[key], 1);
    x->b_count[key]++;
    return 0;
  case SCHED_REDUCE_TIED_GRADS: {
    if (in->peer < 0) return 0;
    double mine = x->rank, theirs = -1;
    MPI_Sendrecv(&mine, 1, MPI_DOUBLE, in->peer, 999, &theirs, 1, MPI_DOUBLE, in->peer, 999, x->comm,
                 MPI_STATUS_IGNORE);
    check(x, theirs == in->peer, "tied partner", -1, -1, theirs, in->peer);
    return 0;
  }
  default: return 0;
  }
}

static float *buffer(void *ctx, const sched_instr *in, size_t *n) {
  stub *x = ctx;
  *n = NF;
  x->slot_of[in->chunk * x->m + in->mb] = in->slot;
  switch (in->op) {
  case SCHED_SEND_ACT: return at(x->out_act, in->slot);
  case SCHED_RECV_ACT: return at(x->in_act, in->slot);
  case SCHED_SEND_GRAD: return at(x->grad_in, in->slot);
  default: return at(x->grad_out, in->slot);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sched_shape sh = {.family = SCHED_1F1B, .p = size, .v = 1, .m = 4};
  int sync = 0, steps = 2, idle_check = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--schedule") && i + 1 < argc) sched_family_parse(argv[++i], &sh.family);
    else if (!strcmp(argv[i], "--stages") && i + 1 < argc) sh.p = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--virtual") && i + 1 < argc) sh.v = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--microbatches") && i + 1 < argc) sh.m = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sync")) sync = 1;
    else if (!strcmp(argv[i], "--tied")) sh.tied = 1;
    else if (!strcmp(argv[i], "--idle")) idle_check = 1;
  }
  sched_costs c = sched_costs_unit();
  sched_program pr;
  if (sh.p != size || sched_compile(&sh, &c, &pr)) {
    fprintf(stderr, "rank %d: %s\n", rank, sh.p != size ? "stages != ranks" : core_error_msg());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int ns = pr.nslots[rank], keys = pr.v * pr.m;
  stub x = {.pr = &pr, .rank = rank, .S = pr.p * pr.v, .m = pr.m, .comm = MPI_COMM_WORLD};
  x.in_act = calloc((size_t)ns * NF, sizeof(float));
  x.out_act = calloc((size_t)ns * NF, sizeof(float));
  x.grad_out = calloc((size_t)ns * NF, sizeof(float));
  x.grad_in = calloc((size_t)ns * NF, sizeof(float));
  x.slot_of = calloc((size_t)keys, sizeof(int));
  x.f_count = calloc((size_t)keys, sizeof(int));
  x.b_count = calloc((size_t)keys, sizeof(int));
  x.i_done = calloc((size_t)keys, sizeof(int));
  x.slow = idle_check && rank == size - 1;
  pipe_exec ex = {.ctx = &x, .run = run, .buffer = buffer, .idle = idle_check ? idle : NULL};
  pipe_worker w;
  int rc = pipe_worker_init(&w, &pr, rank, MPI_COMM_WORLD, ex);
  w.synchronous = sync;
  w.timeout_s = 20;
  for (int s = 0; s < steps && !rc; s++) {
    memset(x.f_count, 0, sizeof(int) * (size_t)keys);
    memset(x.b_count, 0, sizeof(int) * (size_t)keys);
    memset(x.i_done, 0, sizeof(int) * (size_t)keys);
    rc = pipe_worker_step(&w);
    for (int k = 0; k < keys && !rc; k++)
      check(&x, x.f_count[k] == 1 && x.b_count[k] == 1, "F/B count", k / pr.m, k % pr.m, x.f_count[k] * 10 + x.b_count[k], 11);
  }
  if (rc) fprintf(stderr, "worker_sched: %s\n", core_error_msg());
  pipe_worker_free(&w);
  long idles = 0;
  MPI_Allreduce(&x.idles, &idles, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (idle_check && rank == 0) printf("worker_sched: the idle hook ran %ld time(s) over the ranks\n", idles);
  int bad = rc || x.errors || (idle_check && idles == 0), any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("worker_sched %s p=%d v=%d m=%d%s: %s\n", sched_family_name(sh.family), sh.p, sh.v, sh.m, sync ? " sync" : "", any ? "FAILED" : "ok");
  free(x.in_act), free(x.out_act), free(x.grad_out), free(x.grad_in);
  free(x.slot_of), free(x.f_count), free(x.b_count), free(x.i_done);
  sched_program_free(&pr);
  MPI_Finalize();
  return any ? 1 : 0;
}
