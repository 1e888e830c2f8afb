/* schedule/schedule.h: compilers, lowering, verifier, simulator and schedule files.
 *
 *   sched_compile_compute  shape -> compute-only program (F/B/I/W per rank, in order)
 *   sched_lower            compute-only -> full program (transfers, loads, tail, buffer slots)
 *   sched_verify           any full program -> CORE_OK, or CORE_EINPUT with rank, index, excerpt
 *   sched_simulate         full program + cost model -> per-rank stats and timeline events
 *   sched_compile          the first three in a row
 * Everything here is pure: no MPI, no layers. */
#ifndef BRIGADE_SCHEDULE_SCHEDULE_H
#define BRIGADE_SCHEDULE_SCHEDULE_H

#include <stdio.h>

#include "schedule/events.h"
#include "schedule/ir.h"

typedef struct {
  sched_family family;
  int p, v, m;
  int tied; /* first and last virtual stage share a weight */
  /* zero-bubble families: at most this many W's pending (I done, W not yet) per rank, which
   * bounds the slots a rank holds; 0 = the family's default (zb.c). Other families: must be 0. */
  int max_pending_w;
  /* zb-auto: memory limit per rank in units of one stage's full activations (M_B: a chunk's open
   * forward counts 1/v, a pending W w_stash/v); 0 = p, 1F1B's. Other families: must be 0. */
  double mem_limit;
  /* ZeRO-3 (schedule/gather.c): 1 adds GATHER_PARAMS / RELEASE_PARAMS around every chunk's
   * compute; keep_gathered: a chunk stays gathered from its first compute op of the step to its
   * last (reshard_after_forward = false), else it is gathered for each run of its forwards and
   * again for each run of its backward ops; prefetch: a run's gather is issued that many runs
   * early (0: right before it), so at most prefetch + 1 chunks are gathered at once. */
  int zero3, keep_gathered, prefetch;
  /* activation offload (schedule/offload.c), one of sched_offload_mode; offload_limit: "auto"'s
   * memory limit per rank in stages' activations (M_B, as peak_memory counts) */
  int offload;
  double offload_limit;
  /* optimizer post-validation (schedule/validate.c): 1 puts one VALIDATE per rank into the
   * step, after the longest run of forward work every rank can redo alone */
  int post_validation;
} sched_shape;

/* Which activations go to host memory: none; every pair whose time between its forward and its
 * backward hides both copies; or the fewest (longest gaps first) that bring every rank's peak
 * under offload_limit. */
typedef enum { SCHED_OFFLOAD_NONE = 0, SCHED_OFFLOAD_FULL, SCHED_OFFLOAD_AUTO } sched_offload_mode;

/* Cost model: times of one op of one chunk (one virtual stage) on one micro-batch. A full
 * BACKWARD costs b + w. stage_f/b/w, when not NULL, give per-virtual-stage times instead. */
typedef struct {
  double f, b, w;
  double comm;      /* latency added on each cross-rank dependency; occupies neither device */
  double tied;      /* REDUCE_TIED_GRADS */
  double reduce;    /* REDUCE_GRADS */
  double step;      /* OPTIMIZER_STEP */
  double act_bytes; /* bytes of one activation slot (memory model); 0 = not known */
  /* memory model: the part of a chunk's activations a pending W still holds once its I has run
   * (each linear's input and output gradient), as a fraction in (0, 1]; 0 = the whole slot */
  double w_stash;
  /* data-parallel gradient traffic a weight gradient waits for, added to each BACKWARD and
   * BACKWARD_WEIGHT: ZeRO-2's per-micro-batch reduce-scatter when it is not overlapped */
  double dp_w;
  const double *stage_f, *stage_b, *stage_w, *stage_dp_w;
  /* per virtual stage, when not NULL: bytes of one slot (both parts) and its W stash fraction,
   * the figures of the runtime's own buffers; the compilers keep to the scalars above */
  const double *stage_act_bytes, *stage_w_stash;
  /* ZeRO-3: time of one chunk's parameter all-gather (per virtual stage when stage_gather is
   * not NULL), on the rank's communication lane beside its compute; stage_param_bytes, when not
   * NULL, the bytes of one gathered chunk (the memory model's gather buffers) */
  double gather;
  const double *stage_gather, *stage_param_bytes;
  /* per virtual stage, when not NULL: the bytes one of its gathers brings in (its replicas'
   * shards), summed per rank as gather_bytes */
  const double *stage_gather_bytes;
  /* the all-reduce of the gradient norm (and overflow flag) before an update: under a barrier
   * it delays every rank's OPTIMIZER_STEP; under post-validation it overlaps the next step */
  double norm;
  /* activation offload: time to copy one (chunk, micro-batch) pair's activations one way, or,
   * when 0, its bytes (stage_act_bytes / act_bytes) over offload_gbps GB/s */
  double offload, offload_gbps;
} sched_costs;

/* How consecutive steps meet at the optimizer (sched_simulate_steps). BARRIER: every rank's
 * OPTIMIZER_STEP waits for the last rank to reach its own, plus the norm's all-reduce (what a
 * synchronous clip or overflow check does). POST_VALIDATION: each rank steps as soon as its own
 * ops of the step are done; the norm's reduction overlaps the next step. */
typedef enum { SCHED_STEP_BARRIER, SCHED_STEP_POST_VALIDATION, SCHED_STEP_EAGER } sched_step_sync;
/* (EAGER: each rank steps as soon as its own ops are done and never waits for the norm, which
 * decides nothing: post-validation with no clipping and no fp16 loss scaling.) */
/* How a family's steps meet by default (training's optimizer.post_validation default too):
 * post-validation for the zero-bubble and V families, whose ranks end their steps staggered;
 * a barrier for the rest. */
sched_step_sync sched_default_step_sync(sched_family f);
/* How a program's steps meet: post-validation when it checks the last update inside the next
 * step (it has VALIDATEs), else a barrier. */
sched_step_sync sched_program_step_sync(const sched_program *pr);

/* A family's memory cap per rank in stages' activations (M_B), what sim's peak_memory stays
 * within: gpipe m, 1f1b and zb-h1 p, zb-h2 2p - 1, zb-v and v-zb p, v-half floor((p+2)/2),
 * v-min floor((p+4)/3), zb-auto its mem_limit; INFINITY for the others. */
double sched_memory_cap(const sched_shape *sh);
/* costs->w_stash, or 1 when it is 0 */
double sched_w_stash(const sched_costs *c);

/* Unit costs F = B = W = 1, everything else 0. */
sched_costs sched_costs_unit(void);

/* ---- sizes (size.c): what compiling and simulating a shape takes, known before building it ----
 * From the shape alone, in O(1): the instructions of the lowered program (compute ops,
 * transfers, loads, the step's tail, ZeRO-3's gathers; exact but for dualpipev's split backwards
 * and ZeRO-3's reshard runs, which are bounded) and the most bytes held at once while it is
 * compiled (the compiler's tables, lowering's, the offload placement's, the program) and
 * simulated for `steps` steps (with `events`, also one timeline event per instruction and step).
 * A shape is refused from these before anything is built, so a run never finds out by running
 * out of memory. */
typedef struct {
  double pairs;        /* (virtual stage, micro-batch) pairs, p v m */
  double compute;      /* compute instructions */
  double instructions; /* all instructions of the lowered program, all ranks */
  double bytes;        /* peak bytes compiling and simulating it */
  double events;       /* timeline events the simulation records (instructions x steps; 0 without) */
} sched_size;

void sched_size_estimate(const sched_shape *sh, int steps, int events, sched_size *out);

/* What a command may build: at most max_instructions instructions (0: no limit; raised with the
 * flag or key instr_name) and max_bytes bytes (0: no limit; mem_what says where it comes from,
 * e.g. "this machine's memory"). */
typedef struct {
  double max_instructions;
  const char *instr_name;
  double max_bytes;
  const char *mem_what;
} sched_limits;

/* CORE_EINPUT when the shape is over a limit: the message names the shape as the user gave it
 * (names[0..2]: how p, v and m were given, flags such as "--stages" or keys such as
 * "pipeline.stages"; v only when it is not 1), the estimate and the limit it passes. */
int sched_size_check(const sched_shape *sh, const sched_size *sz, const sched_limits *lim, const char *const names[3]);
/* CORE_EINPUT, naming `what`, when a simulation of `steps` steps recording one timeline event per
 * instruction and step would count more events than an int holds (sched_size_check asks it of a
 * shape's estimate; a schedule file's program asks it of its own count). */
int sched_events_check(double instructions, int steps, const char *what);

/* CORE_EINPUT when family cannot run v chunks per rank (1 for gpipe, 1f1b and zb-h1/h2/auto, 2
 * for the V families, 2 or more for interleaved). The message names v as the user gave it: name
 * is a flag ("--virtual": "got --virtual 2") or a key ("pipeline.virtual_stages": "got
 * pipeline.virtual_stages = 2"); where, when not NULL, is put at its end in parentheses (the
 * key's config line or --set). sched_compile_compute checks it with "--virtual". */
int sched_check_virtual(sched_family family, int v, const char *name, const char *where);

/* costs: the zero-bubble families place W by list scheduling under them. */
int sched_compile_compute(const sched_shape *sh, const sched_costs *costs, sched_program *out);
int sched_lower(const sched_program *compute, const sched_costs *costs, sched_program *out);
int sched_compile(const sched_shape *sh, const sched_costs *costs, sched_program *out);
int sched_verify(const sched_program *pr);
/* ZeRO-3: adds GATHER_PARAMS / RELEASE_PARAMS to a full program (sh's keep_gathered and
 * prefetch) and sets its gather_limit; sched_compile does it when sh->zero3. */
int sched_place_gathers(sched_program *pr, int keep_gathered, int prefetch);

typedef struct {
  double busy;  /* compute time */
  double span;  /* first compute start to last compute end */
  double idle;  /* span - busy */
  double start, end;
  int peak_activations; /* live (chunk, micro-batch) activation slots at once */
  /* peak activation memory in stages' full activations (M_B): a (chunk, micro-batch) counts 1/v
   * from its first instruction to its last that is not its W (its I or B, or the SEND_GRAD after
   * it), w_stash/v from there to its last instruction, as the runtime holds its two parts */
  double peak_memory;
  double peak_bytes;    /* the same in bytes: a pair counts act_bytes, then w_stash of it */
  int peak_gathered;        /* ZeRO-3: chunks gathered at once, at most */
  double peak_gather_bytes; /* the same in bytes (stage_param_bytes), 0 when not given */
  double gather_time;       /* time its gathers occupy the rank's communication lane */
  double gather_bytes;      /* bytes its gathers bring in (stage_gather_bytes), 0 when not given */
  /* activation offload: pairs this rank offloads, the pairs it keeps (a backward, but no
   * offload), and the time its copies occupy the two copy streams together. With offloads,
   * peak_memory and peak_bytes follow time: a pair is freed when its OFFLOAD ends and held
   * again from its RELOAD's start (and, as without, from its first instruction's start to its
   * last's end) */
  int offloaded, kept;
  double copy_time;
  /* peak_bytes counted in instruction order, as a runtime counts what it holds after each
   * instruction: an offloaded pair leaves at its OFFLOAD and comes back at its RELOAD (without
   * offloads, peak_bytes itself) */
  double order_peak_bytes;
} sched_rank_stats;

typedef struct {
  int p;
  int steps;            /* consecutive steps simulated */
  /* of them, those run instruction by instruction; the others repeat the last of these shifted
   * (once a step starts where the one before started, shifted, every later step is that step
   * shifted again: equal up to rounding, see sim.c) */
  int steps_run;
  double makespan;      /* all ops of all steps, tail included */
  /* the time from one step's end (its last OPTIMIZER_STEP) to the next's, averaged over steps
   * 2..N; with one step, the makespan */
  double steady_step_time;
  double bubble_rate;   /* 1 - mean(busy) / max(span) */
  double idle_fraction; /* 1 - sum(busy) / (p * makespan) */
  sched_rank_stats *ranks;
} sched_sim_result;

/* Replays a full program; tl (may be NULL) receives one event per instruction. One step, its
 * OPTIMIZER_STEPs under a barrier. */
int sched_simulate(const sched_program *pr, const sched_costs *c, sched_sim_result *res,
                   sched_timeline *tl);
/* The same for `steps` consecutive steps of the program: a rank's next step begins after its
 * own OPTIMIZER_STEP; the steps meet at the optimizer as `sync` says. Busy, span and bubble
 * figures cover all steps. */
int sched_simulate_steps(const sched_program *pr, const sched_costs *c, int steps, sched_step_sync sync,
                         sched_sim_result *res, sched_timeline *tl);
void sched_sim_result_free(sched_sim_result *res);

/* Time to copy one of virtual stage s's activation slots one way (sched_costs.offload, or its
 * bytes over offload_gbps); -1 when the costs give neither. */
double sched_offload_cost(const sched_costs *c, int s);
/* Places OFFLOAD / RELOAD in a full program (schedule/offload.c) as mode says, under the costs:
 * each OFFLOAD right after its pair's forward work, each RELOAD where, by the simulated times of
 * the program, it ends before the pair's backward work needs it. AUTO refuses (CORE_EINPUT,
 * naming the rank and its peak) a limit no placement meets; with fewest, each pair it took is
 * left on the device again, the last taken first, where its plan keeps the limit without it
 * (the least room between the plan and the simulation: sched_compile checks the program by
 * simulation and places it again with fewest 0 when a rank is over). Verified after. */
int sched_place_offload(sched_program *pr, const sched_costs *c, sched_offload_mode mode, double limit, int fewest);
/* offload auto places its pairs by planned times, which hold a reload from when the plan issues
 * it; the simulator can start one later (after a receive the instruction before it waits for),
 * so a rank could hold more than the limit. build(ctx, limit, fewest, out) makes the program with
 * auto's copies placed under limit (and whatever follows them, VALIDATE), or leaves *out unset
 * on an error; it is simulated, and where a rank is over the limit, built again with every pair
 * the greedy took (the fewest, tried first, leave the least room), then under a limit lower by
 * the excess (at most 3 times), and refused (CORE_EINPUT) if still over. sched_compile and
 * sim --schedule-file place auto offload through it. */
int sched_offload_within(double limit, const sched_costs *costs, sched_program *out,
                         int (*build)(void *ctx, double limit, int fewest, sched_program *out), void *ctx);
/* Places one VALIDATE per rank (schedule/validate.c) at the end of its validation prefix: the
 * longest start of its stream of loads, forwards and activation transfers whose every transfer
 * has its partner in the partner's prefix too. Nothing in a forward-only program. */
int sched_place_validate(sched_program *pr);

/* PyTorch pipelining's schedule CSV: one row per rank, one compute action per cell ("0F3"). */
int sched_csv_write(const sched_program *pr, FILE *f);
/* The same with the full program's transfers as PyTorch's lowered format writes them. */
int sched_csv_write_comm(const sched_program *pr, FILE *f);
int sched_csv_read(const char *path, sched_program *compute_out);
int sched_csv_parse(const char *text, const char *name, sched_program *compute_out);
/* A schedule file as a full, verified program. Compute actions only: lowered under the costs
 * (sched_lower). With PyTorch's communication actions: built in the file's own order, each
 * transfer where the file puts it, loads before the first and last stage's forwards and the
 * step's tail added, so what `compile --format csv-comm` writes reads back as the same program.
 * tied: the first and last virtual stage share a weight. */
int sched_csv_read_program(const char *path, int tied, const sched_costs *costs, sched_program *out);
int sched_csv_parse_program(const char *text, const char *name, int tied, const sched_costs *costs,
                            sched_program *out);
/* A text listing of the full instruction streams, one instruction per line. */
void sched_write_listing(const sched_program *pr, FILE *f);
/* Compute actions only, one rank per line ("rank 0: 0F0 0F1 0B0 ..."). */
void sched_write_actions(const sched_program *pr, FILE *f);

#endif
