/* schedule/ir.h: the instruction set and programs (one instruction stream per rank).
 *
 * Pipeline shape: p ranks (pipeline stages), v chunks per rank, m micro-batches, S = p*v
 * virtual stages. Chunk c of rank r holds virtual stage stage_of[r*v + c]; the standard
 * (interleaved) placement is c*p + r, the V placement (zb-v) puts chunk 1 of rank r at 2p-1-r.
 * A compute-only program (F/B/I/W) is what the compilers produce and CSV files hold; lowering
 * (schedule/lower.c) turns it into a full program with transfers, loads and the step's tail. */
#ifndef BRIGADE_SCHEDULE_IR_H
#define BRIGADE_SCHEDULE_IR_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  SCHED_LOAD_MICROBATCH = 0, /* first virtual stage: inputs; last virtual stage: labels */
  SCHED_FORWARD,             /* F: forward of one chunk for one micro-batch */
  SCHED_BACKWARD,            /* B: full backward (input and weight gradients) */
  SCHED_BACKWARD_INPUT,      /* I: input-gradient half of a split backward */
  SCHED_BACKWARD_WEIGHT,     /* W: weight-gradient half of a split backward */
  SCHED_SEND_ACT,
  SCHED_RECV_ACT,
  SCHED_SEND_GRAD,
  SCHED_RECV_GRAD,
  SCHED_REDUCE_TIED_GRADS, /* between the ranks holding the first and the last virtual stage */
  SCHED_REDUCE_GRADS,      /* data-parallel gradient reduction */
  SCHED_OPTIMIZER_STEP,
  /* ZeRO-3 (schedule/gather.c): a chunk's parameters are sharded over its data-parallel group;
   * GATHER_PARAMS all-gathers them into a gather buffer (issued here, it runs beside compute;
   * the chunk's next compute op waits for it), RELEASE_PARAMS drops them. chunk set, mb -1. */
  SCHED_GATHER_PARAMS,
  SCHED_RELEASE_PARAMS,
  /* Activation offload (schedule/offload.c): OFFLOAD copies a (chunk, micro-batch) pair's
   * activations (both parts) to host memory on the rank's device-to-host copy stream, issued
   * after the pair's forward work; its device memory is free once the copy ends. RELOAD copies
   * them back on the host-to-device stream before the pair's backward work, which waits for it.
   * mb, chunk and slot set, peer -1. */
  SCHED_OFFLOAD,
  SCHED_RELOAD,
  /* Optimizer post-validation (schedule/validate.c): the previous step's update was made before
   * the global gradient norm and overflow flag were known; here they are. If that update must
   * change (clipping, or an fp16 overflow skip), it is redone and the step starts again from its
   * first instruction. Everything before it is forward work whose transfers all lie before the
   * peers' VALIDATEs too, so every rank can start again alone. chunk, mb, peer -1. */
  SCHED_VALIDATE,
  SCHED_OP_COUNT
} sched_op;

typedef struct {
  uint8_t op;    /* sched_op */
  int32_t mb;    /* micro-batch, -1 when none (tail instructions) */
  int32_t chunk; /* chunk on this rank (0..v-1), -1 when none */
  int32_t peer;  /* other rank for transfers and tied reduction, -1 otherwise */
  int32_t slot;  /* activation buffer slot of (chunk, mb) on this rank, -1 when none */
  int32_t aslot; /* the slot's other part (see below), -1 when none */
} sched_instr;

/* A (chunk, micro-batch) pair's activations are two parts. Its slot (`slot`, one of nslots) is
 * live from the first instruction naming the pair to the last: what the weight gradient needs
 * (each weighted layer's input and output gradient, the W stash, tokens, targets). Its other
 * part (`aslot`, one of naslots) holds what only the forward and the input gradient use
 * (attention scores, the MLP's pre-activation, the chunk's output and input gradient), live
 * from the same first instruction to the pair's last instruction that is not its
 * BACKWARD_WEIGHT: a split backward frees it once its I (and the SEND_GRAD after it) are done.
 * Instructions of the pair after that carry aslot -1. sched_pair_ranges gives both ranges. */

typedef enum {
  SCHED_GPIPE = 0,
  SCHED_1F1B,
  SCHED_INTERLEAVED,
  SCHED_ZB_H1, /* zero-bubble, 1F1B's memory */
  SCHED_ZB_H2, /* zero-bubble, about twice 1F1B's memory */
  SCHED_ZB_V,  /* zero-bubble, two chunks per rank in a V, 1F1B's memory */
  SCHED_DUALPIPE_V, /* DeepSeek's DualPipe cut in half (DualPipeV): the V of zb-v, a fixed order */
  SCHED_ZB_AUTO,    /* zero-bubble under a memory limit (the paper's automatic scheduler) */
  SCHED_V_MIN,      /* V shape, memory floor((p+4)/3) stages' activations */
  SCHED_V_HALF,     /* V shape, memory floor((p+2)/2) */
  SCHED_V_ZB,       /* V shape, memory p, zero bubble at equal costs (zb-v's algorithm) */
  SCHED_INFERENCE, /* forward only (evaluation): every rank runs its F's in micro-batch order */
  SCHED_CUSTOM, /* imported from a schedule file */
  SCHED_FAMILY_COUNT
} sched_family;

typedef struct {
  int len, cap;
  sched_instr *ins;
} sched_stream;

typedef struct {
  sched_family family;
  int p, v, m;       /* ranks, chunks per rank, micro-batches */
  int tied;          /* 1: the first and last virtual stages share a weight (REDUCE_TIED_GRADS) */
  int forward_only;  /* 1: no backward, no tail (evaluation) */
  int *stage_of;     /* [p*v]: virtual stage of (rank, chunk) */
  int *rank_of;      /* [p*v]: rank of virtual stage s */
  int *chunk_of;     /* [p*v]: chunk of virtual stage s on its rank */
  int *nslots;       /* [p]: activation slots each rank allocates (0 until lowered) */
  int *naslots;      /* [p]: their other parts (aslot) each rank allocates (0 until lowered) */
  /* the family's memory promise per rank, in stages' activations (sched_memory_cap), which
   * lowering keeps; 0 = none (interleaved, dualpipev, inference, imported orders) */
  double mem_cap;
  /* ZeRO-3: 0 = no gathers (parameters whole on every rank); > 0 = every compute op runs on a
   * gathered chunk and at most this many chunks are gathered at once on a rank */
  int gather_limit;
  sched_stream *streams; /* [p] */
} sched_program;

const char *sched_op_name(sched_op op);        /* "FORWARD", ... */
char sched_op_letter(sched_op op);             /* 'F', 'B', 'I', 'W' for compute, 0 otherwise */
static inline int sched_op_is_compute(sched_op op) { return op >= SCHED_FORWARD && op <= SCHED_BACKWARD_WEIGHT; } /* F, B, I, W */
/* SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD: point-to-point transfers. A run of them, consecutive
 * in a rank's stream, is posted together (sends first) and completes as a whole: what the
 * simulator and the workers take as the transfers' meaning. The verifier's replay proves a
 * program under stricter semantics (blocking, unbuffered, one transfer at a time), which these
 * only relax: it may refuse an order they would run (two ranks each sending before receiving),
 * never accept one they cannot. */
static inline int sched_is_p2p(sched_op op) { return op >= SCHED_SEND_ACT && op <= SCHED_RECV_GRAD; }
const char *sched_family_name(sched_family f); /* "gpipe", "1f1b", "interleaved", "custom" */
/* zb-v, dualpipev, v-min, v-half, v-zb: two chunks per rank, chunk 1 of rank r is stage 2p-1-r */
int sched_family_is_v(sched_family f);
/* the families zb.c list-schedules: zb-h1, zb-h2, zb-auto, zb-v and the v-* ones */
int sched_family_is_zb(sched_family f);
int sched_family_parse(const char *name, sched_family *out); /* CORE_EINPUT on unknown name */

/* A program with empty streams and the given placement (NULL stage_of: c*p + r). */
int sched_program_init(sched_program *pr, sched_family f, int p, int v, int m, const int *stage_of);
void sched_program_free(sched_program *pr);
/* Appends in to rank's stream (rank in range), growing it by doubling; inline, since lowering
 * and the compilers push every instruction (sched_push_grow is the rare path). */
void sched_push_grow(sched_program *pr, int rank);
static inline void sched_push(sched_program *pr, int rank, sched_instr in) {
  if ((unsigned)rank >= (unsigned)pr->p || pr->streams[rank].len == pr->streams[rank].cap)
    sched_push_grow(pr, rank); /* asserts the rank */
  sched_stream *st = &pr->streams[rank];
  st->ins[st->len++] = in;
}
/* Makes room for n instructions in rank's stream at once (no doubling past what is needed). */
void sched_reserve(sched_program *pr, int rank, size_t n);
/* Pushes a compute action of virtual stage s (F/B/I/W) on the rank that holds s. */
void sched_push_action(sched_program *pr, sched_op op, int s, int mb);
int sched_program_equal(const sched_program *a, const sched_program *b);
size_t sched_program_count(const sched_program *pr); /* instructions over all ranks */
/* 1 when some backward is split (a BACKWARD_WEIGHT instruction anywhere): the weight gradient of
 * a micro-batch may then run long after its input gradient */
int sched_program_splits_backward(const sched_program *pr);
int sched_nstages(const sched_program *pr);           /* p*v */
/* Rank r's (chunk, micro-batch) pairs, index chunk * m + mb, arrays of v*m: the first and last
 * instruction using each and the last that is not a BACKWARD_WEIGHT (where its aslot part
 * ends), -1 for a pair the stream does not name. A pair is used by the instructions naming it,
 * and by the FORWARD of the next virtual stage when that stage is on the same rank (it takes the
 * pair's output in place of a transfer: sched_local_input). OFFLOAD and RELOAD count for first
 * and last, not for alast (they move the parts; they use neither). */
void sched_pair_ranges(const sched_program *pr, int r, int *first, int *last, int *alast);
/* lp[c], c < v: the chunk of rank r whose output a FORWARD of chunk c takes without a transfer
 * (the previous virtual stage, when rank r holds it), or -1: sched_local_input's answer is
 * lp[chunk] * m + mb for a FORWARD whose lp[chunk] >= 0. */
void sched_local_chunks(const sched_program *pr, int r, int *lp);
/* sched_local_input from that table, for an instruction whose chunk is in range. */
static inline int sched_local_pair(const int *lp, int m, const sched_instr *in) {
  return in->op == SCHED_FORWARD && lp[in->chunk] >= 0 ? lp[in->chunk] * m + in->mb : -1;
}
/* The pair (index as above) whose output instruction `in` of rank r takes without a transfer: a
 * FORWARD whose previous virtual stage is on rank r; -1 otherwise. (Inline: every pass over a
 * stream asks it of every instruction.) */
static inline int sched_local_input(const sched_program *pr, int r, const sched_instr *in) {
  if (in->op != SCHED_FORWARD || in->chunk < 0 || in->chunk >= pr->v || in->mb < 0 || in->mb >= pr->m) return -1;
  int s = pr->stage_of[r * pr->v + in->chunk];
  if (s == 0 || pr->rank_of[s - 1] != r) return -1;
  return pr->chunk_of[s - 1] * pr->m + in->mb;
}
/* The pair whose output gradient instruction `in` of rank r writes without a transfer: a
 * BACKWARD or BACKWARD_INPUT whose previous virtual stage is on rank r hands its input gradient
 * to that stage's pair (into its buffers, as a RECV_GRAD would); -1 otherwise. That pair must be
 * on the device then: an offload window of it ends there. */
static inline int sched_local_grad(const sched_program *pr, int r, const sched_instr *in) {
  if ((in->op != SCHED_BACKWARD && in->op != SCHED_BACKWARD_INPUT) || in->chunk < 0 || in->chunk >= pr->v ||
      in->mb < 0 || in->mb >= pr->m)
    return -1;
  int s = pr->stage_of[r * pr->v + in->chunk];
  if (s == 0 || pr->rank_of[s - 1] != r) return -1;
  return pr->chunk_of[s - 1] * pr->m + in->mb;
}

/* "0F3" style action text of a compute instruction on rank r (stage index is virtual). */
void sched_action_str(const sched_program *pr, int rank, const sched_instr *in, char *buf, size_t n);
/* One-line readable form of any instruction, e.g. "SEND_ACT mb=3 chunk=0 peer=2 slot=1". */
void sched_instr_str(const sched_instr *in, char *buf, size_t n);

#endif
