/* core/progress.h: progress lines for work that may run long. A task says what it is
 * ("compiling 1f1b p=4096 v=1 m=512", "step 3"), its phases how far they are. Nothing shows in a
 * task's first 2 seconds (most end sooner); then one line every 5 seconds through core_log:
 *   brigade: compiling 1f1b p=1024 v=1 m=4096: lowering: 2097152 of 8388608 compute ops (25%), 6 s
 * and when it ends, if it said anything, how long it took. BRIGADE_PROGRESS=SECONDS in the
 * environment sets both delays (0: no lines at all). A task started inside another (the tuner's
 * candidates, each compiled) keeps quiet until it stops, its phases and counts too: the outer
 * task's lines go on. Single-threaded: the callers are the main thread's loops. */
#ifndef BRIGADE_CORE_PROGRESS_H
#define BRIGADE_CORE_PROGRESS_H

void core_progress_start(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A phase of the task, with the count it goes to (0: not known) and the count's unit. */
void core_progress_phase(const char *phase, double total, const char *unit);
/* How far the phase is; reads the clock (a vDSO call) and prints when a line is due. */
void core_progress_at(double done);
void core_progress_stop(void);

/* For hot loops: core_progress_at every 16384th call, counted in *k. */
static inline void core_progress_tick(unsigned *k, double done) {
  if (!(++*k & 0x3fffu)) core_progress_at(done);
}

#endif
