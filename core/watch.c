/* core/watch.c: the watchdog of core/watch.h. */
#include "core/watch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_t thread;
static atomic_int running;
static double limit;
static int rank = -1;
static _Atomic(const char *) current; /* the wait under way, NULL between waits */
static _Atomic long long since;       /* when it began, ns on the monotonic clock */

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *watch(void *arg) {
  (void)arg;
  while (atomic_load(&running)) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    const char *w = atomic_load(&current); /* since is stored before current: it is this wait's */
    if (w && (double)(now_ns() - atomic_load(&since)) * 1e-9 > limit) {
      char who[32] = "";
      if (rank >= 0) snprintf(who, sizeof who, "[rank %d] ", rank);
      fprintf(stderr, "brigade: error: %stimed out after %g s in %s (train.timeout): a rank it waits for stopped "
              "answering\n", who, limit, w);
      fflush(stderr);
      _exit(1); /* the main thread is inside MPI: nothing else can be done from here */
    }
  }
  return NULL;
}

int core_watch_start(double limit_s, int r) {
  if (atomic_load(&running)) return 0;
  limit = limit_s, rank = r;
  atomic_store(&running, 1);
  if (pthread_create(&thread, NULL, watch, NULL) != 0) {
    atomic_store(&running, 0);
    return -1;
  }
  return 0;
}

void core_watch_begin(const char *what) {
  atomic_store(&since, now_ns());
  atomic_store(&current, what);
}

void core_watch_end(void) { atomic_store(&current, NULL); }

void core_watch_stop(void) {
  if (!atomic_load(&running)) return;
  atomic_store(&running, 0);
  pthread_join(thread, NULL);
  atomic_store(&current, NULL);
}
