/* core/watch.h: a watchdog for waits that cannot poll. MPI's blocking collectives (the gradient
 * norm's all-reduce, ZeRO's reduce-scatters and all-gathers) wait for every rank of their group;
 * a rank that stops answering (stopped, or stuck in a device call) would leave the others waiting
 * for ever. A wait marked with core_watch_begin("the gradient norm's all-reduce") that lasts past
 * the limit ends the process: one line naming the wait on stderr, exit 1, after which mpirun ends
 * the job. One thread, started by core_watch_start (the trainer's, with train.timeout), sleeping
 * between checks; begin and end are two atomic stores and cost nothing without it. Waits are not
 * nested. */
#ifndef BRIGADE_CORE_WATCH_H
#define BRIGADE_CORE_WATCH_H

/* Starts the thread: waits longer than limit_s seconds end the process. rank >= 0 is named in the
 * message ("[rank 3] "). Returns 0, or -1 when the thread cannot start (waits are then unbounded). */
int core_watch_start(double limit_s, int rank);
void core_watch_begin(const char *what); /* what: a string that outlives the wait */
void core_watch_end(void);
void core_watch_stop(void);

#endif
