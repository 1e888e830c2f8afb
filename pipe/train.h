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
  const char *init_from; /* GPT-2 weights (llm.c .bin, model.safetensors) the run starts from (step 0, fresh optimizer) */
  int allow_nonfinite;   /* --allow-nonfinite: take NaN/Inf weights from --init-from */
  /* limits checked before anything is built or allocated: --max-memory as given (NULL:
   * $BRIGADE_MAX_MEMORY or the machine's memory), --max-instructions (0: none) */
  const char *max_memory;
  double max_instructions;
  int *stopped_by;      /* out, may be NULL: the signal that stopped the run early, 0 if none */
  int *report;          /* out, may be NULL: after an error, 1 (every rank failed alike), 2 (this rank
                         * failed, others did not) or 0 (another rank's error, reported there) */
} pipe_train_opts;

/* Runs after MPI_Init. Returns CORE_OK, or an error status with the message set. Start-up
 * (config, checkpoint.dir's lock, data, model, --log-json, --resume) is agreed by every rank
 * before the first step: when it failed on some ranks only, every rank returns the worst status,
 * and *report says which ranks' messages are the errors (the others only say that another rank
 * failed). World rank 0 holds checkpoint.dir's lock (pipe_ckpt_lock_take) until it returns.
 * During start-up SIGTERM, SIGINT and SIGUSR1 have their default action (the process ends at once).
 * From the first step on, one of them (SIGUSR1 is the one mpirun passes on to every rank) on any
 * rank stops the run at the end of the step in progress: every rank learns of it there, the
 * checkpoint of that step is written (with checkpoint.dir), and the run ends with CORE_OK and
 * *stopped_by set. A second such signal to a process ends it at once. */
int pipe_train(const pipe_train_opts *o);

#endif
