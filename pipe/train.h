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
} pipe_train_opts;

/* Runs after MPI_Init. Returns CORE_OK, or an error status with the message set. */
int pipe_train(const pipe_train_opts *o);

#endif
