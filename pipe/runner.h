/* pipe/runner.h: the executor the stage worker calls on one rank: the chunks of the model this
 * rank holds, their activation slots, the optimizer state, and what each non-transfer
 * instruction means for them. */
#ifndef BRIGADE_PIPE_RUNNER_H
#define BRIGADE_PIPE_RUNNER_H

#include <stdint.h>

#include "layers/layers.h"
#include "pipe/data.h"
#include "pipe/topo.h"
#include "pipe/worker.h"
#include "schedule/ir.h"
#include "zero/zero.h"

/* The largest train.steps and fp16.hysteresis a config may give; a checkpoint's step and
 * hysteresis_left are held to them too (pipe/ckpt_model.c). */
enum { PIPE_MAX_STEPS = 1 << 30, PIPE_MAX_HYSTERESIS = 1 << 20 };

typedef struct {
  char type[16]; /* "adamw" or "sgd" */
  double lr, beta1, beta2, eps, weight_decay, momentum, clip;
} pipe_optim;

typedef struct {
  const sched_program *pr; /* the program being run (training or evaluation) */
  const pipe_topo *topo;
  int v;
  layers_chunk *chunks; /* [v], chunk c holds virtual stage pr->stage_of[rank*v + c] */
  zero_buffer *zb;        /* [v] ZeRO partitioning of each chunk's flat buffers */
  float **opt_m, **opt_v; /* [v] optimizer state of the owned range (zero_state_len floats) */
  uint8_t **decay;        /* [v] weight-decay masks */
  size_t **druns;         /* [v] the owned range's runs of equal decay: starts, then the end (built once) */
  int *ndruns;
  const pipe_data *data;
  uint64_t seed;
  long step;      /* training step (selects the batches) */
  int split;      /* PIPE_TRAIN or PIPE_VAL */
  int m;          /* micro-batches of the program */
  long mb0;       /* global index of the program's micro-batch 0 on this replica (pipe_runner_use) */
  int *slot_of;   /* [v * m] current slot of (chunk, micro-batch) */
  double loss_sum; /* sum of per-position losses on this rank (last stage): pipe_runner_loss_sum */
  float grad_scale;
  pipe_optim opt;
  double lr;       /* learning rate of this step */
  long opt_t;      /* optimizer steps taken (Adam's t) */
  double grad_norm; /* of the last step, before clipping */
  int tied_emb_chunk, tied_head_chunk, tied_head_layer; /* -1 when not on this rank */
  int head_tied;   /* the model ties its head to the embedding */
  /* mixed precision (emulated on the CPU: compute in fp32, round on store) */
  int precision;     /* 0 fp32, 1 bf16, 2 fp16 */
  float **master;    /* [v] fp32 master weights of the owned range (precision > 0, or offload) */
  /* ZeRO-Offload: the optimizer state and the fp32 master in host memory (opt_ops: the CPU's
   * table), the update on the host; hgrad [v] a host copy of the owned gradients */
  int offload;
  const kernels_ops *opt_ops;
  float **hgrad;
  float grad_scale_base; /* 1/(m B T d); the loss layer gets this times the loss scale */
  double loss_scale; /* fp16: current scale (1 otherwise) */
  int dynamic_scale, scale_window, hysteresis, hyst_left, good_steps;
  double min_scale;
  int skipped;       /* the last step overflowed and was skipped everywhere */
  /* optimizer post-validation: OPTIMIZER_STEP updates at once with this rank's gradients,
   * assuming neither clipping nor an overflow skip, while the norm's reduction is in flight
   * (pv_req); pipe_runner_validate completes it and, where the global result says clipping or a
   * skip should have applied, restores the update's inputs (pv_save: [v] p, m, v of the owned
   * range, saved before the update) and does what the synchronous step would have done. */
  int post_validation;
  float **pv_save;
  const kernels_ops *pv_ops; /* the table pv_save's buffers came from */
  /* AdamW instead writes the update into a second set of arrays (adamw_to: pv_p, pv_m, pv_v, [v]
   * each, from the tables pv_pops and pv_ops) and swaps them in, so the old state stays whole for
   * a rollback at no copy; the parameters swap with it (the master, ZeRO-3's shard, or the
   * chunk's whole buffer, the layers rebound). SGD, and ZeRO-1/2 across replicas, copy. */
  float **pv_p, **pv_m, **pv_v;
  const kernels_ops *pv_pops;
  MPI_Request pv_req[2];
  double pv_sum[2];  /* local, then global: the squared norm; the overflow flag */
  int pv_pending;
  long rollbacks;    /* updates redone so far (clipping fired, or an overflow skipped the step) */
  double pv_lr;      /* the learning rate the eager update used (a redo uses it again) */
  /* eager: nothing for the norm to decide (no clipping, no fp16 scaling), so the update is never
   * redone: no copies, the gradients cleared at once (pv_zeroed), the reduction completed at the
   * next update or when the trainer asks (the norm only for the log) */
  int pv_eager, pv_zeroed;
  /* after an update was redone, the next PIPE_PV_BACKOFF updates are synchronous (the norm first,
   * as without post-validation; their VALIDATEs find nothing to check), then eager again: where
   * clipping fires often, steps are not started again one after another */
  int pv_sync_left;
  /* what the last check found for its step: the norm, a skip, the fp16 scale after it */
  double pv_norm, pv_scale;
  int pv_skipped;
  long pv_step;      /* the step it belongs to (0-based, as step) */
  /* The learning rate at a number of updates made (the schedule; NULL: lr stays as set): after a
   * VALIDATE that undid a skipped step, the running step's rate follows the count again. */
  double (*lr_at)(const void *ctx, long updates);
  const void *lr_ctx;
  double act_step0;  /* act_live when the running step began (a step that starts again returns to it) */
  long restarts;     /* steps started again after a VALIDATE redid the previous update */
  /* activation offload on a device table: per (chunk, micro-batch), the host copy of its parts
   * while offloaded (home, then the aside part when it had one: off_aside) */
  float **off_host;
  unsigned char *off_aside;
  int *off_wait;              /* [v * m] the reload ticket the pair's next instruction waits for, -1 none */
  int **slot_wait, **aside_wait; /* [v][slots], [v][aside parts]: the offload ticket still reading it, -1 none */
  const kernels_ops *off_ops; /* the table the copies and host buffers belong to */
  int offload_poison;         /* fill offloaded parts with NaN (fakedev, BRIGADE_OFFLOAD_POISON=1) */
  int last_copy;              /* the ticket of the last copy issued, -1 once a traced step waited for it */
  /* a traced step on a table that times its copies on the device (copy_clock): the copy
   * instructions run so far (each its copy group), and MPI_Wtime when the clock started */
  int copy_clocked, ncopy;
  double copy_t0;
  double timeout_s;  /* the device path's waits for collectives (train.timeout) */
  /* host memory for what crosses to and from the backend's (pipe_runner_free releases it) */
  int32_t *htok, *htgt;   /* [B*T] a micro-batch's tokens and targets */
  float **stage;          /* [nstage * 4] transfer staging per (slot, direction), device backends */
  char *stage_pinned;     /* [nstage * 4] 1: from stage_ops->host_alloc (page-locked on a GPU), 0: malloc */
  const kernels_ops *stage_ops;
  int nstage;
  size_t stage_floats;
  /* device memory: the step's losses not yet read back ([loss_cap * loss_bt], nloss used) */
  float *dloss, *hloss;
  int nloss, loss_cap;
  size_t loss_bt;
  const kernels_ops *loss_ops;
  /* the program's (chunk, micro-batch) pairs, [v * m]: first, last, and last instruction but
   * its W (sched_pair_ranges), set by pipe_runner_use */
  int *pfirst, *plast, *palast;
  size_t pcap;
  /* activation memory in use on this rank, in bytes: the slots of live pairs (both parts), less
   * the aside parts given back (a split backward's I); act_peak is its largest value over the
   * steps run with act_pr (the training program: pipe_runner_use sets it on first use) */
  double act_live, act_peak;
  const sched_program *act_pr;
  /* ZeRO-3: ngbuf gather buffers of gbuf_floats each (the table's memory), gbuf_chunk[k] the
   * chunk whose parameters buffer k holds (-1 free); gbuf_of[c] the buffer chunk c is bound to
   * (-1 released). param_live/param_peak: parameter bytes this rank holds now and at most (the
   * shards, and the gather buffers in use) */
  float **gbuf;
  MPI_Request *gbuf_req; /* [ngbuf] the all-gather still in flight into buffer k (host memory) */
  int *gbuf_chunk, *gbuf_of, ngbuf;
  size_t gbuf_floats;
  const kernels_ops *gbuf_ops;
  double param_live, param_peak;
} pipe_runner;

/* ZeRO-3: a pool of `limit` gather buffers, as large as the largest chunk's parameters (the
 * program's gather_limit, the most chunks it holds gathered at once). */
int pipe_runner_gather_pool(pipe_runner *rn, int limit);
/* ZeRO-3, a replica without a share of an evaluation: every chunk gathered and released in the
 * order of the stages it holds, the all-gathers its group's evaluation program makes. */
int pipe_runner_join_gathers(pipe_runner *rn);

/* Whether a table's buffers are host memory the runner may hand to MPI directly. */
int pipe_host_memory(const kernels_ops *ops);
void pipe_runner_free(pipe_runner *rn);

/* Copies the owned parameters to the master weights and rounds the working copy
 * (CORE_ERUNTIME: out of backend memory). */
int pipe_runner_init_master(pipe_runner *rn);

/* Post-validation: completes the step's norm reduction and, where clipping or an overflow skip
 * should have applied, rolls the eager update back and redoes it as the synchronous step would,
 * bit for bit; then the gradients are cleared. Every rank calls it after each training step
 * (nothing to do without post_validation). */
int pipe_runner_validate(pipe_runner *rn);
enum { PIPE_PV_BACKOFF = 10 };
/* The same at a VALIDATE instruction, inside the next step: *again = 1 when the previous update
 * was redone or undone, so the parameters the step's forwards so far used have changed and the
 * step must start again from its first instruction (the worker does). The running step's
 * learning rate and loss-layer scale are brought up to date (lr_at, the fp16 scale). */
int pipe_runner_validate_at(pipe_runner *rn, int *again);

pipe_exec pipe_runner_exec(pipe_runner *rn);
/* loss_sum, with the losses of forwards still on the device read back and added first. */
double pipe_runner_loss_sum(pipe_runner *rn);
/* Sets the program (and its micro-batch count) the next step will run, and which global
 * micro-batch its micro-batch 0 is (the data a LOAD draws). A pair's slot borrows its aside part
 * (aslot) at the instructions naming it and gives it back after the last that is not its W. */
void pipe_runner_use(pipe_runner *rn, const sched_program *pr, long mb0);

#endif
