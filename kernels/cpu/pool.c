/* kernels/cpu/pool.c: the CPU table's workers for the ops that are not GEMMs.
 *
 * `threads` (the config key, at most 256 here) is the number of workers every op splits its work
 * over, GEMMs included (blas_cpu.c then runs OpenBLAS on one thread and splits C itself): the calling
 * thread and threads - 1 workers started once (kernels_cpu_init), never inside a step. GEMMs and
 * these ops never run at the same time (each op returns when its work is done), so the cores
 * are shared, not oversubscribed. Every op splits its work so that each output element is
 * computed by one worker with the same arithmetic in the same order as one thread would: the
 * results are the same bits whatever `threads` is.
 *
 * A job is published under a mutex with a generation count; workers sleep on a condition
 * variable between jobs and the caller waits for the last of them on another. */
#include <pthread.h>
#include <stdlib.h>

#include "kernels/cpu/cpu.h"

enum { MAX_WORKERS = 256 };

static struct {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int nthreads; /* workers + the caller; 1 = no pool */
  unsigned long gen;
  int pending;
  kernels_cpu_task fn;
  void *ctx;
  size_t n, step; /* the job: parts [k * step, min((k + 1) * step, n)) for k < parts */
  int parts;
} P = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0, 0, NULL, NULL, 0, 0, 0};

static void run_part(int k) {
  size_t lo = (size_t)k * P.step, hi = lo + P.step < P.n ? lo + P.step : P.n;
  if (lo < hi) P.fn(P.ctx, lo, hi);
}

static void *worker(void *arg) {
  int id = (int)(size_t)arg; /* 1 .. nthreads - 1: part id of each job */
  unsigned long seen = 0;
  pthread_mutex_lock(&P.mu);
  for (;;) {
    while (P.gen == seen) pthread_cond_wait(&P.go, &P.mu);
    seen = P.gen;
    int mine = id < P.parts;
    pthread_mutex_unlock(&P.mu);
    if (mine) run_part(id);
    pthread_mutex_lock(&P.mu);
    if (mine && --P.pending == 0) pthread_cond_signal(&P.done);
  }
  return NULL;
}

static int started_total = 1; /* the caller, and the workers started */

void kernels_cpu_pool_init(int threads) {
  if (started_total > 1 || threads <= 1) return; /* once per process, sized by the first caller asking for more than one */
  if (threads > MAX_WORKERS) threads = MAX_WORKERS;
  int n = 1;
  for (int i = 1; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void *)(size_t)i) != 0) break; /* fewer workers: still correct */
    pthread_detach(t);
    n++;
  }
  pthread_mutex_lock(&P.mu);
  P.nthreads = started_total = n;
  pthread_mutex_unlock(&P.mu);
}

int kernels_cpu_pool_threads(void) { return P.nthreads; }

void kernels_cpu_pool_use(int threads) {
  pthread_mutex_lock(&P.mu);
  P.nthreads = threads < 1 ? 1 : threads > started_total ? started_total : threads;
  pthread_mutex_unlock(&P.mu);
}

void kernels_cpu_parallel(size_t n, size_t grain, size_t align, kernels_cpu_task fn, void *ctx) {
  if (!n) return;
  if (!align) align = 1;
  int t = P.nthreads;
  if (t > 1 && grain && n / grain < (size_t)t) t = (int)(n / grain);
  if (t <= 1) {
    fn(ctx, 0, n);
    return;
  }
  size_t step = (n + (size_t)t - 1) / (size_t)t;
  step = (step + align - 1) / align * align; /* parts start on multiples of align */
  int parts = (int)((n + step - 1) / step);
  pthread_mutex_lock(&P.mu);
  P.fn = fn, P.ctx = ctx, P.n = n, P.step = step, P.parts = parts, P.pending = parts - 1;
  P.gen++;
  pthread_cond_broadcast(&P.go);
  pthread_mutex_unlock(&P.mu);
  run_part(0);
  pthread_mutex_lock(&P.mu);
  while (P.pending > 0) pthread_cond_wait(&P.done, &P.mu);
  pthread_mutex_unlock(&P.mu);
}
