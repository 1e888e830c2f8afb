/* pipe/train.h: the training loop. One code path for every layout: the model is cut into
 * p*v chunks, a schedule is compiled and verified, and every rank's stage worker executes its
 * stream each step; a single process is the p = 1, d = 1 case of the same loop. */
#ifndef BRIGADE_PIPE_TRAIN_H
#define BRIGADE_PIPE_TRAIN_H

typedef struct {
  const char *config;
  const char **sets; /* --set key=value */
  int nsets;
  const char *log_json; /* one JSON object per step, rank 0 */
  const char *resume;   /* checkpoint directory to continue from */
  int *stopped_by;      /* out, may be NULL: the signal that stopped the run early, 0 if none */
} pipe_train_opts;

/* Runs after MPI_Init. Returns CORE_OK, or an error status with the message set.
 * SIGTERM, SIGINT or SIGUSR1 (the one mpirun passes on to every rank) on any rank stops the run
 * at the end of the step in progress: every rank learns of it there, the checkpoint of that step
 * is written (with checkpoint.dir), and the run ends with CORE_OK and *stopped_by set. A second
 * such signal to a process ends it at once. */
int pipe_train(const pipe_train_opts *o);

#endif
