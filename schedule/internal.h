/* schedule/internal.h: helpers shared by the files of schedule/ (not a public interface). */
#ifndef BRIGADE_SCHEDULE_INTERNAL_H
#define BRIGADE_SCHEDULE_INTERNAL_H

#include "schedule/schedule.h"

/* Virtual stage of instruction `in` on rank r (-1 when it names no chunk). */
static inline int sched_stage_at(const sched_program *pr, int r, const sched_instr *in) {
  return in->chunk >= 0 && in->chunk < pr->v ? pr->stage_of[r * pr->v + in->chunk] : -1;
}

/* Time of one compute op of virtual stage s under the cost model. */
double sched_op_cost(const sched_costs *c, sched_op op, int s);
/* sched_op_cost of F, B, I, W of each of S virtual stages, [s][op - SCHED_FORWARD] (4 S doubles,
 * free() it): what the passes that cost every op look up. */
double *sched_cost_table(const sched_costs *c, int S);

/* zb.c's list scheduler skips a variant once a run of another shows every decision would come
 * out the same under it, and every constructor stops trying variants once the best order reaches
 * the least span and end any order can have (1, the default); 0 runs every variant, for tests
 * that check the skips change nothing. */
extern int sched_zb_skip_repeats;
/* The micro-batch rounds' compute order of zb-h1, zb-h2 or zb-auto (the second order
 * sched_compile weighs against the list scheduler's), for tests. */
int sched_compile_compute_rounds(const sched_shape *sh, const sched_costs *costs, sched_program *out, double *rank_end);

/* Refuses costs under which a step of S virtual stages and m micro-batches could reach a time a
 * double cannot hold (every op one after another, each after a hop, bounds every time). */
int sched_costs_check(const sched_costs *c, int S, int m);

/* Every (stage, micro-batch) has exactly one F and one backward (B, or I and W), each on the
 * rank holding that stage; fields in range. Works on compute-only and on full programs. */
int sched_check_compute(const sched_program *pr);

/* The verifier's error for rank r's instruction i (with an excerpt of the stream): CORE_EINPUT. */
int sched_fail_at(const sched_program *pr, int r, int i, const char *what);
/* VALIDATE (validate.c): none, or one per rank after only loads, forwards and activation
 * transfers whose partners all come before their own rank's VALIDATE. at[r]: rank r's only
 * VALIDATE, its fields checked (sched_verify's scan finds it), or -1. */
int sched_check_validate(const sched_program *pr, const int *at);

/* Readable excerpt of rank r's stream around instruction i (multi-line, into buf). */
void sched_excerpt(const sched_program *pr, int r, int i, char *buf, size_t n);

/* Zero-bubble and V families (zb.c, zb_rounds.c): fills pr's streams by list scheduling under the costs and
 * the family's memory cap; sh->max_pending_w > 0 also bounds the pending W's per rank. */
/* rounds 0: the list scheduler's variants and the V constructors; 1: only the micro-batch rounds
 * (zb-h1, zb-h2, zb-auto; sched_compile weighs both orders and keeps the faster). rank_end, when
 * not NULL (p doubles), receives each rank's end with every op as early as its order allows:
 * the rounds time their ops that way, so these are sched_asap_end's figures (rounds 1 only). */
int sched_compile_zb(sched_program *pr, const sched_shape *sh, const sched_costs *costs, int rounds, double *rank_end);

/* Memory of rank r's stream by the rule of sched_rank_stats.peak_memory, a whole pair counting
 * `unit` (1/v: stages' activations, sim's peak_memory; 1: chunk slots): the peak and the peak
 * slot count (peak_activations). When not NULL, at_mem / at_slots receive what the stream holds
 * at each instruction and at_last the index of the last instruction of that instruction's
 * (chunk, micro-batch). Works on compute-only and full programs. */
void sched_stream_memory(const sched_program *pr, int r, double w_stash, double unit, double *peak_mem,
                         int *peak_slots, double *at_mem, int *at_slots, int *at_last);
/* The same with weights per chunk of the rank: a pair counts full[c] from its first instruction
 * to the last that is not its W (its aslot part ends there), wpart[c] from then to its last. */
void sched_stream_memory_of(const sched_program *pr, int r, const double *full, const double *wpart,
                            double *peak_mem, int *peak_slots, double *at_mem, int *at_slots, int *at_last);

/* v-half (half = 1) or v-min's building block (vblock.c) for p ranks and m micro-batches, as
 * slots of one op: [r * *T + x] is 0 where rank r is free, else the op's kind: 1 F of chunk 0,
 * 2 F of chunk 1, 3 I of chunk 1, 4 I of chunk 0, 5 W (the oldest pending). Taken in slot order
 * (every rank at slot x before any at x + 1), every op comes after its inputs. free() it. */
int *sched_vblock_slots(int p, int m, int half, int *T);

/* ---- finish.c: a full program's loads, tail and buffer slots (lowering, the schedule-file
 * import and the offload placement) ---- */
/* Whether compute op `op` of virtual stage s (of S) comes after a LOAD_MICROBATCH: the first and
 * last stages' forwards (tokens, targets). */
static inline int sched_takes_load(int op, int s, int S) { return op == SCHED_FORWARD && (s == 0 || s == S - 1); }
/* Appends compute instruction in to rank r's stream, after the LOAD_MICROBATCH it needs when it
 * is a forward of the first or last virtual stage (tokens / targets). */
void sched_push_compute(sched_program *out, int r, sched_instr in);
/* The step's tail (REDUCE_TIED_GRADS where tied, REDUCE_GRADS, OPTIMIZER_STEP) appended to every
 * rank. */
void sched_append_tail(sched_program *out);
/* Rank r's activation slots (and their aside parts) assigned by liveness, as few as the most
 * pairs live at once; OFFLOAD gives a pair's back and RELOAD takes whichever is free. */
void sched_assign_slots(sched_program *out, int r);
/* The same, for a program with activation offload placed by planned times: at[i] is when
 * instruction i of rank r takes its buffers (its planned start; a RELOAD's, when it is issued),
 * free_at[i] when an OFFLOAD at i stops reading them (its copy's planned end). Buffers an offload
 * still reads go to no pair that takes them before then (the runner would make it wait); the
 * other buffers are taken as sched_assign_slots takes them. */
void sched_assign_slots_at(sched_program *out, int r, const double *at, const double *free_at);

/* The end of the last compute op of a compute-only program run as early as its dependencies
 * allow (lowering's first step): no lowering of it simulates to a shorter makespan. rank_end
 * (NULL, or [p]): each rank's, which no lowering's op of that rank ends before. */
int sched_asap_end(const sched_program *compute, const sched_costs *costs, double *end, double *rank_end);
/* Each rank's least compute end in any order of pr's ops (one chunk per rank, m micro-batches,
 * ct sched_cost_table's, comm the hop) that keeps a memory budget of cap chunk slots, a pending
 * W counting ws (and zb-h1 / zb-h2's open-forward limits, by pr->family), into end[p]. Rank r
 * (stage s) runs nothing before a forward has come down stages 0 .. s-1, and no I (or B) before
 * micro-batch 0's gradient has come back up from the last stage; until then only forwards can
 * run (no W is pending), at most as many as the budget holds open, so the rest of that wait is
 * idle. At the other end, its last micro-batch's I waits from that F's end for the F's and I's of
 * the stages after it, and meanwhile the rank has only the work the budget let it keep (its
 * other open forwards' I's and W's, its pending W's): the rest of that wait is idle too. Then its
 * ops' time. */
void sched_budget_ends(const sched_program *pr, const double *ct, double comm, double cap, double ws, int m,
                       double *end);
/* Its bound on the work (compute time) a rank can have left beside the I and W of its last
 * micro-batch once that micro-batch's F has run: o open forwards (that one among them, so o - 1
 * I's and W's of cost i + w) and q pending W's (w each), within the budget (o + ws q <= cap, with
 * the budget's own tolerance, 1 <= o <= omax, o + q <= m), the most over whole o and q. */
double sched_left_at_last_forward(double cap, double ws, int omax, int m, double i, double w);
/* The least makespan any order of the ops of out (one chunk per rank) that keeps sh's memory
 * budget, lowered, can simulate to in one step under the barrier: the latest of
 * sched_budget_ends, then the step's tail (reduce, the norm, the update); floor_end (NULL, or
 * [p]) gets each rank's. sched_compile skips the second order of zb-h1/h2/auto when the first
 * reaches this and either has no bubble or has a longest span no longer than the first rank's
 * floor (that rank starts at 0, so no order's bubble rate is smaller). */
double sched_order_bound(const sched_shape *sh, const sched_program *out, const sched_costs *costs, double *floor_end);
/* 1 (the default): sched_compile skips the second order as above, and does not lower it when its
 * compute order shows it cannot win (keep_faster); 0 always builds, lowers and simulates it, for
 * tests that check the skips change nothing. */
extern int sched_skip_second_order;
/* How many second orders sched_compile has built (counted for tests of the skip). */
extern long sched_second_orders_built;

/* sched_lower, choosing how transfers are placed: directly where that is on time and needs no
 * memory beyond the compute order's, else by the build (SCHED_LOWER_DIRECT_FIRST, what
 * sched_lower does), or by the build alone (for tests that compare the two). info, when not
 * NULL, says how it went. */
typedef enum { SCHED_LOWER_DIRECT_FIRST, SCHED_LOWER_BUILD } sched_lower_mode;
typedef struct {
  int placed_directly; /* the direct placement placed the program (else the build did) */
  /* and every check it makes of being on time held with no tolerance: the simulator then runs
   * every compute op at its ASAP time to the bit (one step, the tail aside), the times below */
  int exact;
  double *first, *last; /* NULL, or [p] the caller's: each rank's first compute start and last
                         * compute end with every op as early as the order allows */
} sched_lower_info;
int sched_lower_how(const sched_program *compute, const sched_costs *costs, sched_program *out, sched_lower_mode how,
                    sched_lower_info *info);
/* A program lowering placed on time to the bit (info->exact, with first and last asked for; no
 * tied reduction, not forward-only): its one-step makespan under the barrier (the latest end plus
 * the reduce, then the norm and the update) and its longest span, as sched_simulate_time gives
 * them, bitwise (test_sim checks it over its grid), without simulating it. */
void sched_exact_times(const sched_program *pr, const sched_costs *c, const sched_lower_info *info, double *makespan,
                       double *span);

/* sched_simulate's times alone: one step under the barrier, no memory counted (the ranks' peak
 * fields are 0), for comparing programs by time (keep_faster). */
int sched_simulate_time(const sched_program *pr, const sched_costs *c, sched_sim_result *res);

/* Simulates one step of pr (sched_simulate's times) and fills ts[r][i] / te[r][i] with the start and end
 * of rank r's instruction i (a transfer or copy: the rank's clock when it issued it). */
int sched_sim_times(const sched_program *pr, const sched_costs *c, double **ts, double **te);

/* sched_simulate_steps running every step, none copied from the one before (sim.c's repeat): the
 * reference the tests hold the copies to. */
int sched_simulate_steps_all(const sched_program *pr, const sched_costs *c, int steps, sched_step_sync sync,
                             sched_sim_result *res, sched_timeline *tl);

#endif
