/* pipe/trainer.h: a training run's state, shared by pipe/train.c (set-up, the step loop, stopping)
 * and pipe/train_report.c (what the run tells: its start-up lines, each step's log line and
 * --log-json record, the memory it measured against the simulator's, the measured timeline and the
 * prediction beside it). Not a public interface. */
#ifndef BRIGADE_PIPE_TRAINER_H
#define BRIGADE_PIPE_TRAINER_H

#include <stdio.h>

#include "core/mem.h"
#include "pipe/ckpt.h"
#include "pipe/ckpt_model.h"
#include "pipe/data.h"
#include "pipe/topo.h"
#include "pipe/train_internal.h"
#include "pipe/worker.h"

typedef struct {
  train_cfg cfg;
  pipe_topo topo;
  pipe_data data;
  layers_model model;
  int *bounds; /* [p*v + 1] layer ranges of the virtual stages */
  sched_program prog, eval_prog; /* eval_prog: none (zeroed) when eval_n is 0 */
  pipe_worker worker, eval_worker;
  int eval_lo, eval_n; /* this replica's share of an evaluation: global micro-batches [lo, lo + n) */
  pipe_runner rn;
  FILE *log_json;
  double *act_report; /* world rank 0: [7p] per rank activation and parameter memory (report_memory),
                       * until the next --log-json record carries them */
  kernels_coll_comm *pcomm; /* the pipeline's device communicator (NULL: transfers over MPI) */
  char pipe_why[160];       /* why the transfers go through host copies over MPI */
  const char *init_from;    /* --init-from: GPT-2 weights (llm.c or safetensors) */
  int allow_nonfinite;      /* --allow-nonfinite: NaN/Inf weights from it are taken */
  core_mem_limit mem;       /* --max-memory, $BRIGADE_MAX_MEMORY or the machine's (cfg.lim points here) */
  char **peer_names;        /* [p]: "rank R (stage s) on HOST", how timeouts name a pipeline peer */
  pipe_ckpt_lock lock;      /* world rank 0: checkpoint.dir's, for the run's life */
  char *desc;               /* the model and optimizer, as checkpoints record them (pipe_ckpt_model_describe) */
  pipe_ckpt_info resumed;   /* --resume: where from */
  int pv_program;           /* the program checks the last update in the next step (VALIDATE) */
} trainer;

/* A step's log line held back until its update is checked (post-validation in the next step):
 * the norm, the skip and the scale it reports are known only then. */
typedef struct {
  long step;
  double loss, lr, ms, val, norm, scale; /* norm, scale, skipped: what the step's check found */
  double dp_reduce, dp_gather;           /* rank 0's ZeRO traffic in the step, taken when it ends */
  int has_val, held, skipped;
} step_record;

enum { NREPORT = 9 }; /* figures per rank in report_memory */

/* World rank 0: the step's line every print_every steps (and the last, and with a validation
 * loss), and its --log-json record (the first also carries report_memory's figures). */
void train_log_step(trainer *tr, const step_record *sr);
/* The measured timeline of one step (tl: this rank's events): gathered on the pipeline's rank 0
 * of the first replica, written as trace.path and its .svg, with the simulator's prediction from
 * the measured op times logged beside it (collective over the pipeline). */
int train_write_trace(trainer *tr, sched_timeline *tl);
/* After the first step: each rank's activation and parameter memory, measured, predicted and
 * allocated, printed by world rank 0 and kept for the next --log-json record (collective). */
void train_report_memory(trainer *tr);
/* The start-up lines: where a resumed run comes from, every rank's host and device, the
 * transfers' path, the model, the layout, ZeRO's memory and traffic, the cut (collective). */
void train_announce(trainer *tr, const char *resume);

#endif
