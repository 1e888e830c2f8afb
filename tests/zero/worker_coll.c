/* tests/zero/worker_coll.c: ZeRO's device-collectives path (ops->coll, NCCL on a GPU) on a
 * machine without a GPU. Run under mpirun with d ranks (one data-parallel group); exits 0 when
 * every check passed on every rank.
 *
 * The coll table is a table, so the test supplies a fake one over MPI (tests/common/fake_coll.h):
 * fakedev memory only, distinct device identities or, in "shared" mode, the same on every rank
 * (ranks sharing a GPU). Its asynchronous reduce-scatter does nothing when issued and the whole
 * collective when waited for: it reads the bucket and writes the accumulator as late as a
 * communication stream may, so zero.c touching either before wait(slot) changes results.
 *
 * For ZeRO stages 0, 1 and 2 (buckets smaller than the buffer, overlap on and off, kept ranges)
 * and three layouts (shards uneven, even, and one replica owning nothing when d = 3), the same
 * two-step sequence (zero_init, zero_keep/zero_buckets, per micro-batch zero_grad_dest +
 * zero_after_backward, zero_reduce, zero_wait, an update of the owned range, zero_finish) runs on
 *   cpu     host memory, MPI
 *   host    fakedev memory, no coll: MPI through host copies
 *   nccl    fakedev memory + the fake coll: the device path
 *   shared  the same, identities equal: must fall back to MPI through host copies
 *   env0    the same, identities distinct, BRIGADE_NCCL=0: must fall back too
 * Gradients and parameters are dyadic rationals with few bits, so every sum is exact in any
 * order: each variant's reduced gradients and gathered parameters must equal, bit for bit, the
 * sums computed here on the host (and so each other's). The byte accounting must be the same on
 * every path; the device path must make no host copy inside zero_* and hold no host staging in
 * zero_grad_bytes; the fallbacks must not create a communicator. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/coll.h"
#include "kernels/ops.h"
#include "tests/common/fake_coll.h"
#include "zero/zero.h"

enum { MAXD = 8 };

static int world_rank, fails;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      if (fails++ < 20) {                                                                          \
        fprintf(stderr, "worker_coll: rank %d: ", world_rank);                                    \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static MPI_Comm fake_group; /* the group zero/ runs on */

/* ---- fakedev tables that count host copies made inside zero_* ---- */

static int in_zero;
static long zero_copies;
static void count_to_device(void *dst, const void *src, size_t bytes) {
  zero_copies += in_zero;
  kernels_fakedev_ops()->to_device(dst, src, bytes);
}
static void count_to_host(void *dst, const void *src, size_t bytes) {
  zero_copies += in_zero;
  kernels_fakedev_ops()->to_host(dst, src, bytes);
}
#define Z(call) (in_zero = 1, rcz = (call), in_zero = 0, rcz)
static int rcz;
static float *zp;
#define ZP(call) (in_zero = 1, zp = (call), in_zero = 0, zp)

/* ---- layouts and the sequence ---- */

typedef struct {
  const char *name;
  int nl;
  size_t sizes[16];
  int kept[2]; /* layer indices whose gradients stay whole (stage 2), -1: none */
  size_t bucket;
} layout;

static const layout layouts[] = {
    {"uneven", 10, {40, 17, 96, 33, 64, 8, 120, 50, 3, 77}, {0, 5}, 130},          /* n = 508 */
    {"even", 11, {40, 17, 96, 33, 64, 8, 120, 50, 3, 77, 2}, {10, -1}, 150},       /* n = 510 */
    {"tiny", 2, {1, 3}, {-1, -1}, 3},                                              /* d = 3: one empty shard */
    {"small buckets", 10, {40, 17, 96, 33, 64, 8, 120, 50, 3, 77}, {0, -1}, 60},   /* layers larger than a bucket */
};

enum { STEPS = 2, MBS = 2 };

/* a gradient value: a multiple of 1/16 in [-1/2, 1/2] */
static float grad_of(int r, int step, int mb, size_t i) {
  return (float)((int)((r * 7 + step * 5 + mb * 3 + i * 5) % 17) - 8) / 16.0f;
}
static float param0(size_t i) { return (float)((int)((i * 13) % 64) - 32) / 8.0f; }

typedef struct {
  float *res; /* reduced gradients and parameters of every step, as read back */
  size_t nres;
  double acct[STEPS][3];
  double grad_bytes;
  int nccl;
  long copies;
} result;

static void push(result *o, const float *x, size_t n) {
  o->res = realloc(o->res, sizeof(float) * (o->nres + n + 1));
  memcpy(o->res + o->nres, x, sizeof(float) * n);
  o->nres += n;
}

static void run(const kernels_ops *ops, const layout *L, int stage, int overlap, const char *var, result *o) {
  int d, r;
  MPI_Comm_size(fake_group, &d);
  MPI_Comm_rank(fake_group, &r);
  memset(o, 0, sizeof *o);
  size_t n = 0, off[17], largest = 0;
  for (int l = 0; l < L->nl; l++) off[l] = n, n += L->sizes[l];
  off[L->nl] = n;
  for (int l = 0; l < L->nl; l++)
    if (l != L->kept[0] && l != L->kept[1] && L->sizes[l] > largest) largest = L->sizes[l];
  float *h = malloc(sizeof(float) * n), *pexp = malloc(sizeof(float) * n), *G = malloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) h[i] = pexp[i] = param0(i);
  float *params = ops->alloc(sizeof(float) * n), *grads = stage < 2 ? ops->alloc(sizeof(float) * n) : NULL;
  float *gsrc = ops->alloc(sizeof(float) * n);
  ops->to_device(params, h, sizeof(float) * n);
  zero_buffer z;
  zero_copies = 0;
  int rc = Z(zero_init(&z, stage, fake_group, params, grads, n, ops));
  CHECK(!rc, "%s: zero_init: %s", var, core_error_msg());
  for (int k = 0; k < 2 && stage == 2 && !rc; k++)
    if (L->kept[k] >= 0) rc = Z(zero_keep(&z, off[L->kept[k]], off[L->kept[k] + 1]));
  if (!rc && stage == 2) rc = Z(zero_buckets(&z, L->bucket, overlap, largest));
  CHECK(!rc, "%s: zero_keep / zero_buckets: %s", var, core_error_msg());
  for (int step = 0; step < STEPS && !rc; step++) {
    for (int mb = 0; mb < MBS; mb++) {
      for (size_t i = 0; i < n; i++) h[i] = grad_of(r, step, mb, i);
      ops->to_device(gsrc, h, sizeof(float) * n);
      for (int l = L->nl - 1; l >= 0; l--) { /* layers arrive last first */
        float *dst = stage < 2 ? grads + off[l] : ZP(zero_grad_dest(&z, off[l], L->sizes[l]));
        if (stage == 2 && (l == L->kept[0] || l == L->kept[1])) /* a kept layer's gradient stays in its range */
          CHECK(dst && dst == zero_kept(&z, off[l], off[l + 1]), "%s: layer %d is kept, its gradient goes elsewhere", var, l);
        ops->axpy(dst, 1.0f, gsrc + off[l], L->sizes[l]);
      }
      rc = Z(zero_after_backward(&z));
      CHECK(!rc, "%s: zero_after_backward: %s", var, core_error_msg());
    }
    rc = rc ? rc : Z(zero_reduce(&z));
    CHECK(!rc, "%s: zero_reduce: %s", var, core_error_msg());
    int syncs = fake_calls.sync;
    rc = rc ? rc : Z(zero_wait(&z, 30.0));
    CHECK(!rc, "%s: zero_wait: %s", var, core_error_msg());
    CHECK(fake_calls.sync - syncs == z.nccl, "%s: zero_wait made %d syncs on the %s path", var, fake_calls.sync - syncs,
          z.nccl ? "device" : "MPI");
    size_t lo, hi;
    zero_range(&z, &lo, &hi);
    for (size_t i = 0; i < n; i++) {
      G[i] = 0;
      for (int q = 0; q < d; q++)
        for (int mb = 0; mb < MBS; mb++) G[i] += grad_of(q, step, mb, i);
      pexp[i] -= 0.25f * G[i];
    }
    ops->to_host(h, zero_grad(&z), sizeof(float) * (hi - lo));
    push(o, h, hi - lo);
    CHECK(memcmp(h, G + lo, sizeof(float) * (hi - lo)) == 0, "%s: step %d: the reduced gradient of [%zu, %zu) is not the sum",
          var, step, lo, hi);
    o->acct[step][0] = z.bytes_reduce, o->acct[step][1] = z.bytes_gather, o->acct[step][2] = z.reduce_scatters;
    { /* the byte accounting, from zero.h's description (per step; run() never resets it) */
      size_t shard = (n + (size_t)d - 1) / (size_t)d, kept = 0, mine_out = hi - lo;
      double want = 0;
      for (int k = 0; k < 2 && stage == 2; k++)
        if (L->kept[k] >= 0) {
          size_t a = off[L->kept[k]], b = off[L->kept[k] + 1];
          kept += b - a;
          want += 2.0 * 4 * (double)(b - a) * (d - 1) / d; /* all-reduced whole */
          size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
          mine_out -= y > x ? y - x : 0;
        }
      if (stage == 0) want = d > 1 ? 2.0 * 4 * (double)n * (d - 1) / d : 0;
      if (stage == 1) want = 4.0 * (double)shard * (d - 1);
      if (stage == 2) want += MBS * 4.0 * (double)(n - kept - mine_out); /* every bucket but my part of it */
      want *= step + 1;
      CHECK(fabs(z.bytes_reduce - want) <= 1e-9 * want, "%s: step %d: bytes_reduce %.17g, expected %.17g", var, step,
            z.bytes_reduce, want);
      if (stage == 2) CHECK(z.reduce_scatters >= MBS, "%s: %g reduce-scatters in a step of %d micro-batches", var,
                            z.reduce_scatters, MBS);
    }
    ops->axpy(params + lo, -0.25f, zero_grad(&z), hi - lo);
    rc = rc ? rc : Z(zero_finish(&z));
    CHECK(!rc, "%s: zero_finish: %s", var, core_error_msg());
    ops->to_host(h, params, sizeof(float) * n);
    push(o, h, n);
    CHECK(memcmp(h, pexp, sizeof(float) * n) == 0, "%s: step %d: the gathered parameters are not the updated ones", var,
          step);
  }
  o->grad_bytes = zero_grad_bytes(&z);
  if (!rc) { /* optimizer state: the owned range, whole tensors <-> shards and back (checkpoints) */
    size_t lo, hi, len = zero_state_len(&z);
    zero_range(&z, &lo, &hi);
    CHECK(len == hi - lo, "%s: zero_state_len %zu for the range [%zu, %zu)", var, len, lo, hi);
    float *shard = ops->alloc(sizeof(float) * (len + 1)), *back = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) h[i] = param0(i * 3 + 1);
    zero_take_shard(&z, h, shard);
    ops->to_host(back, shard, sizeof(float) * len);
    CHECK(memcmp(back, h + lo, sizeof(float) * len) == 0, "%s: zero_take_shard did not take [%zu, %zu)", var, lo, hi);
    memset(back, 0, sizeof(float) * n);
    CHECK(zero_gather_state(&z, shard, back) == CORE_OK, "%s: zero_gather_state: %s", var, core_error_msg());
    CHECK(memcmp(back, h, sizeof(float) * n) == 0, "%s: zero_gather_state did not give the whole tensor back", var);
    /* gradient memory, from zero.h: the full buffer (+ ZeRO-1's accumulator and MPI staging), or
     * ZeRO-2's accumulator, buckets and kept ranges */
    size_t shard_n = (n + (size_t)d - 1) / (size_t)d, out = n, cap;
    for (int k = 0; k < 2; k++)
      if (L->kept[k] >= 0) out -= L->sizes[L->kept[k]];
    cap = L->bucket < largest ? largest : L->bucket;
    cap = cap < out ? cap : out;
    double want = stage == 0 ? n : stage == 1 ? n + (double)shard_n * (z.nccl ? 1 : d + 2)
                                              : (double)shard_n + (overlap ? 2.0 : 1.0) * (double)cap + (double)(n - out);
    CHECK(o->grad_bytes == 4 * want, "%s: zero_grad_bytes %g, expected %g", var, o->grad_bytes, 4 * want);
    ops->free(shard), free(back);
  }
  o->nccl = z.nccl;
  o->copies = zero_copies;
  in_zero = 1;
  zero_free(&z);
  in_zero = 0;
  ops->free(params), ops->free(grads), ops->free(gsrc);
  free(h), free(pexp), free(G);
}

enum { V_CPU, V_HOST, V_NCCL, V_SHARED, V_ENV0, NV };
static const char *vname[NV] = {"cpu", "host", "nccl", "shared", "env0"};

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  fake_group = MPI_COMM_WORLD;
  int d;
  MPI_Comm_size(fake_group, &d);
  if (d > MAXD) {
    fprintf(stderr, "worker_coll: at most %d ranks\n", MAXD);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  kernels_ops host = *kernels_fakedev_ops(), dev_ops = host;
  host.to_device = dev_ops.to_device = count_to_device;
  host.to_host = dev_ops.to_host = count_to_host;
  host.coll = NULL;
  dev_ops.coll = fake_coll();
  int runs = 0;
  for (size_t li = 0; li < sizeof layouts / sizeof layouts[0]; li++) {
    const layout *L = &layouts[li];
    for (int stage = 0; stage <= 2; stage++) {
      for (int overlap = 0; overlap <= (stage == 2); overlap++) {
        result res[NV];
        int ncalls[NV];
        for (int v = 0; v < NV; v++) {
          char var[128];
          snprintf(var, sizeof var, "%s stage %d%s d=%d, %s", L->name, stage, overlap ? " overlap" : "", d, vname[v]);
          const kernels_ops *ops = v == V_CPU ? kernels_cpu_ops() : v == V_HOST ? &host : &dev_ops;
          fake_shared = v == V_SHARED;
          if (v == V_ENV0) setenv("BRIGADE_NCCL", "0", 1);
          memset(&fake_calls, 0, sizeof fake_calls);
          run(ops, L, stage, overlap, var, &res[v]);
          unsetenv("BRIGADE_NCCL");
          ncalls[v] = fake_calls.all_reduce + fake_calls.reduce_scatter + fake_calls.reduce_scatterv + fake_calls.all_gather +
                      fake_calls.all_gatherv + fake_calls.async;
          int expect_nccl = v == V_NCCL && d > 1;
          CHECK(res[v].nccl == expect_nccl, "%s: z->nccl is %d, expected %d", var, res[v].nccl, expect_nccl);
          if (v >= V_NCCL) CHECK(fake_calls.device_id == (d > 1 && v != V_ENV0), "%s: device_id called %d times", var, fake_calls.device_id);
          CHECK(fake_calls.comm_init == expect_nccl && fake_calls.comm_free == expect_nccl,
                "%s: %d communicators made, %d freed (expected %d)", var, fake_calls.comm_init, fake_calls.comm_free, expect_nccl);
          CHECK(fake_calls.unique_id == (expect_nccl && world_rank == 0), "%s: unique_id called %d times", var, fake_calls.unique_id);
          if (expect_nccl) {
            CHECK(res[v].copies == 0, "%s: %ld host copies inside zero_* on the device path", var, res[v].copies);
            CHECK(ncalls[v] > 0, "%s: no collective went through the coll table", var);
            if (stage == 2 && overlap) CHECK(fake_calls.async > 0 && fake_calls.wait >= fake_calls.async, "%s: %d async reduce-scatters, %d waits", var, fake_calls.async, fake_calls.wait);
            if (stage == 2 && !overlap) CHECK(fake_calls.async == 0, "%s: async reduce-scatter without overlap", var);
          } else {
            CHECK(ncalls[v] == 0, "%s: %d collectives went through the coll table on the MPI path", var, ncalls[v]);
            if (v != V_CPU && d > 1) CHECK(res[v].copies > 0, "%s: the MPI path made no host copies", var);
          }
          if (v != V_CPU) {
            CHECK(res[v].nres == res[V_CPU].nres && memcmp(res[v].res, res[V_CPU].res, sizeof(float) * res[v].nres) == 0,
                  "%s: results differ from cpu's", var);
            CHECK(memcmp(res[v].acct, res[V_CPU].acct, sizeof res[v].acct) == 0,
                  "%s: byte accounting differs from cpu's (bytes_reduce %g / %g, bytes_gather %g / %g, reduce_scatters %g / %g)",
                  var, res[v].acct[STEPS - 1][0], res[V_CPU].acct[STEPS - 1][0], res[v].acct[STEPS - 1][1],
                  res[V_CPU].acct[STEPS - 1][1], res[v].acct[STEPS - 1][2], res[V_CPU].acct[STEPS - 1][2]);
            /* zero_grad_bytes: the device path holds no stage-1 host staging ([shard * d] + [shard]) */
            size_t shard = 0, n = 0;
            for (int l = 0; l < L->nl; l++) n += L->sizes[l];
            shard = (n + (size_t)d - 1) / (size_t)d;
            double want = res[V_CPU].grad_bytes - (expect_nccl && stage == 1 ? 4.0 * (double)shard * (d + 1) : 0);
            CHECK(res[v].grad_bytes == want, "%s: zero_grad_bytes %g, expected %g", var, res[v].grad_bytes, want);
          }
          runs++;
        }
        for (int v = 0; v < NV; v++) free(res[v].res);
      }
    }
  }
  { /* a failing collective comes back from zero_reduce as an error with its message */
    float *p = dev_ops.alloc(sizeof(float) * 8), *g = dev_ops.alloc(sizeof(float) * 8);
    zero_buffer z;
    int rc = zero_init(&z, 0, fake_group, p, g, 8, &dev_ops);
    fake_fail = 1;
    if (!rc) rc = zero_reduce(&z);
    fake_fail = 0;
    CHECK(rc == CORE_ERUNTIME && strstr(core_error_msg(), "gradient all-reduce: fake coll: all_reduce failed"),
          "a failed all-reduce gave %d \"%s\"", rc, core_error_msg());
    zero_free(&z);
    dev_ops.free(p), dev_ops.free(g);
  }
  int all = 0;
  fails += fake_coll_errors;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) fprintf(stderr, "worker_coll: d=%d, %d runs, %d failed checks\n", d, runs, all);
  MPI_Finalize();
  return all ? 1 : 0;
}
