/* layers/layers.h: layer types and the model they make.
 *
 * A model is a list of layers. Between layers flows one float tensor per micro-batch,
 * [B, T, width] (width: d_model for hidden states, vocab for logits); the embedding reads token
 * ids and the loss reads targets instead. Each layer type knows its shapes, parameter count,
 * FLOPs, stash size, init, forward, backward_input (gradient w.r.t. its input) and
 * backward_weight (gradient w.r.t. its weights, accumulated), the last two as separate calls
 * because zero-bubble schedules run them at different times. What backward_weight needs from
 * backward_input (output gradients of inner matmuls) is written into the layer's stash.
 *
 * Parameters of a chunk live in one flat buffer, gradients in another; a layer holds views
 * (params, grads) into them, set by layers_chunk_init. */
#ifndef BRIGADE_LAYERS_LAYERS_H
#define BRIGADE_LAYERS_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "kernels/ops.h"

typedef enum { LAYER_IN_HIDDEN = 0, LAYER_IN_TOKENS } layer_input;

typedef struct layer_type layer_type;

/* Where a layer's init writes: parameters [lo, hi) of the layer, at p[0 .. hi - lo). An init
 * draws every value from its own keyed stream whatever the window, so a window of the shard a
 * ZeRO-3 replica owns holds exactly the values of the whole layer's init. */
typedef struct {
  float *p;
  size_t lo, hi;
} layers_window;

typedef struct {
  const layer_type *type;
  char name[64];  /* as the user gave it (or "<type><index>"), never rewritten */
  int index;      /* brigade's global index in the model */
  char where[96]; /* config location for messages, "configs/tiny.cfg:14" */
  /* dimensions */
  int T, C, V, NH; /* sequence length, width, vocabulary, heads */
  int hidden;      /* MLP width of a transformer block */
  int recompute_gelu; /* transformer block: keeps the MLP's pre-activation only; its GELU runs
                       * again where the backward needs the output (N*hidden floats a slot less) */
  int recompute_layernorm; /* transformer block: keeps no LayerNorm output; the weight gradients
                            * run the two LayerNorms again (2*N*C floats a slot less) */
  int bias;        /* linear: has a bias */
  int in_width, out_width;
  int tied_to;       /* lm_head: index of the embedding whose weight it shares, or -1 */
  int nblocks;       /* transformer blocks in the model (GPT-2's scaled init of projections) */
  double eps;        /* layernorm */
  size_t nparams;
  float *params, *grads; /* views into the chunk's flat buffers */
  /* attention and blocks in a chunk: the attention cache per micro-batch of the chunk's B and T
   * in its table (ops->attention_cache_floats); 0 (the model's layers, the memory model):
   * B*NH*T*T, the probabilities */
  size_t att_floats;
} layer;

/* What one call works on: one micro-batch of B sequences of length T. */
typedef struct {
  int B, T;
  const float *in;        /* [B*T*in_width], NULL for the embedding */
  const int32_t *tokens;  /* embedding input [B*T] */
  const int32_t *targets; /* loss targets [B*T] */
  float *out;             /* [B*T*out_width]; loss layer: per-position losses */
  float *stash;           /* [stash_floats]: what backward needs, kept between F and B/W */
  float *istash;          /* [istash_floats]: what only backward_input needs, kept between F and I */
  float *wstash;          /* [wstash_floats]: what backward_weight needs from backward_input */
  const float *dout;      /* gradient of out (unchanged from backward_input to backward_weight
                           * of the slot); NULL for the loss layer */
  float *din;             /* gradient of in, overwritten by backward_input; NULL for embedding */
  float grad_scale;       /* loss layer: d(loss)/d(position loss), e.g. 1 / (B*T*m) */
  float *scratch;         /* [scratch_floats] temporary, not kept */
  int round;              /* the chunk's act_round; cross_entropy rounds its logits as it reads
                           * them and its gradient as it writes it (the chunk does not) */
} layer_io;

struct layer_type {
  const char *name;
  layer_input input;
  /* Reads the layer's own keys from config element i of model.layers; dims are set already. */
  int (*configure)(layer *l, const core_config *c, int i);
  size_t (*num_params)(const layer *l);
  double (*flops_per_token)(const layer *l); /* forward; backward counts twice this */
  size_t (*stash_floats)(const layer *l, int B, int T);
  size_t (*scratch_floats)(const layer *l, int B, int T);
  void (*init)(const layer *l, const layers_window *w, uint64_t seed);
  void (*forward)(const layer *l, const kernels_ops *ops, const layer_io *io);
  void (*backward_input)(const layer *l, const kernels_ops *ops, const layer_io *io);
  void (*backward_weight)(const layer *l, const kernels_ops *ops, const layer_io *io);
  /* 1: the layer's stash is its input, turned into the cache in place by forward (the loss:
   * probabilities over the logits), and backward_input writes din over that same buffer when it
   * is the previous layer's output; stash_floats is then 0. Sound because no layer's backward
   * reads its own output: the logits are dead once the loss has them. */
  int stash_in_input;
  /* Floats backward_input leaves for backward_weight (the W stash): kept per slot from I to W
   * when the schedule splits the backward, shared by the slots of a chunk when it never does. */
  size_t (*wstash_floats)(const layer *l, int B, int T);
  /* Floats of what forward keeps for backward_input alone (io->istash), which a split backward
   * frees at I; NULL: none. backward_weight must not read it. */
  size_t (*istash_floats)(const layer *l, int B, int T);
};

const layer_type *layers_find_type(const char *name);

/* The model: every layer of the config, in order. */
typedef struct {
  int n;
  layer *layers;
  int T, C, V, NH;
  uint64_t seed;
  int built;
} layers_model;

/* Builds the layer list from model.* of the config; an error names the config line. Building
 * into a model that is already built is an error. */
int layers_model_build(layers_model *m, const core_config *c, int vocab_from_data);
void layers_model_free(layers_model *m);
/* Sizes the attention cache (att_floats) of each attention and block layer of m for micro-batches
 * of B as the named backend's table will at the given precision (0 fp32, 1 bf16, 2 fp16:
 * kernels_attention_cache_floats), so that slot sizes counted without the table (plans, the memory
 * model) are the ones a chunk allocates with it. */
void layers_model_size_attention(layers_model *m, const char *backend, int precision, int B);
/* The row length of an lm_head's logits (its out_width): V rounded up to a multiple of 64. The
 * rows' padding (zeros where it is read) lets a GPU run the head's three products at padded,
 * tensor-core-friendly sizes without copying the logits (kernels/ops.h, gemm_ld); the weights
 * stay [V, C]. An lm_head must feed the cross_entropy, which knows the padding. */
int layers_logits_ld(int V);
size_t layers_model_params(const layers_model *m);

/* Where one buffer of a slot lives: in the slot's home part, its aside part, or the region the
 * slots of a chunk share (LAYERS_BWD), at off floats. */
enum { LAYERS_HOME = 0, LAYERS_ASIDE = 1, LAYERS_BWD = 2 };
typedef struct {
  size_t off;
  uint8_t part;
} layers_buf;

/* ---- a chunk: the contiguous layers [lo, hi) of one virtual stage, with its own flat
 * parameter and gradient buffers and `nslots` activation slots (one per in-flight micro-batch,
 * as the compiled schedule says). Every buffer below that the ops work on (params, grads,
 * slots, tokens, targets, scratch, ws) lives in the table's memory (ops->alloc: device memory
 * for "cuda"): host code reaches it only through ops->to_host / to_device, or through the
 * functions here that do (loss_sum, set_batch). ---- */
typedef struct {
  const kernels_ops *ops;
  int lo, hi, n; /* layer range; n = hi - lo */
  int B, T, nslots;
  layer *layers; /* copies of the model's layers with params/grads bound to the buffers below */
  float *params, *grads;
  size_t nparams;
  size_t *param_off; /* [n] offsets into params/grads */
  /* A slot is two parts (slot_layout in model.c). Its home part (one per slot) holds what a
   * weight gradient reads: weighted layers' inputs and output gradients, stashes, W stashes. Its
   * aside part holds what only the forward and backward_input use (I stashes such as attention
   * probabilities, outputs no W reads, the chunk's output and input gradient); a slot borrows
   * one of naside such parts (layers_chunk_bind), which a split backward gives back at I, so a
   * rank keeps as many as it has forwards open, not as many as it has W's pending. A layer whose
   * stash is its input (stash_in_input) has no stash of its own, and the layer before it no
   * separate dout: the three N x V buffers of logits, probabilities and their gradient are one.
   * A chunk whose backwards are never split (layers_chunk_share_backward) keeps the W stashes
   * and the inner layers' douts (those of all but its last layer) once, in `bwd`, for all its
   * slots: they live only within one full backward. */
  size_t in_floats;                       /* the chunk's input (0 when it takes token ids) */
  size_t home_floats, aside_floats, bwd_floats;
  size_t slot_floats;                     /* home + aside: one slot's activations */
  layers_buf in, din;                     /* the chunk's input and its gradient */
  layers_buf *out, *stash, *istash, *dout, *wstash; /* [n] */
  float *slots;                           /* [nslots * home_floats] */
  float *aside;                           /* [naside * aside_floats] */
  int naside;
  int *bound;                             /* [nslots]: the aside part slot s uses, -1 none */
  float *bwd;                             /* [bwd_floats], or NULL */
  int32_t *tokens, *targets;              /* [nslots * B*T] */
  float *scratch;
  int first_takes_tokens, last_is_loss;
  /* activation checkpointing: a slot keeps only the chunk's input and its output's gradient
   * (home), its input's gradient and its output (aside); the layers' outputs and stashes live in
   * one workspace (the full layout, home part then aside part at ws_aside), recomputed by the
   * backward. Needs the weight gradient right after the input gradient (full B). */
  int ckpt;
  float *ws;
  size_t ws_aside;
  /* mixed precision, emulated: every layer output and input gradient is rounded to bf16 (1) or
   * fp16 (2) as it is stored; 0 keeps fp32 */
  int act_round;
  /* gradients held elsewhere (ZeRO-2): when grad_dest is set, the chunk has no gradient buffer
   * (grads is NULL) and each layer's weight gradient goes where grad_dest(grad_ctx, offset, n)
   * says, asked right before that layer's backward_weight; offset and n are the layer's range
   * in the flat parameter buffer. The destination must hold what the layer adds into ("+="). */
  float *(*grad_dest)(void *ctx, size_t off, size_t n);
  void *grad_ctx;
  float *host_losses; /* [B*T] host memory: the losses of a slot, read back for their sum */
  /* A tied lm_head whose embedding is in the same chunk keeps no copy of wte: its params view
   * is the embedding's wte (param_off[tied_head] = the embedding's), which the flat buffer,
   * nparams and the optimizer hold once; its weight gradient goes to tied_grads (V*C floats),
   * added into wte's at REDUCE_TIED_GRADS (layers_chunk_fold_tied), the sum the pipeline forms
   * when the two ends sit on different ranks, in the same order. -1 / NULL when none. */
  int tied_head;
  float *tied_grads;
} layers_chunk;

/* CORE_ERUNTIME when the backend runs out of memory (the chunk is then freed). ops NULL: host
 * memory, for chunks built only to measure them. */
int layers_chunk_init(layers_chunk *ch, const layers_model *m, int lo, int hi, const kernels_ops *ops,
                      int B, int T, int nslots);
/* ZeRO-3: the same chunk without parameter and gradient buffers (params and grads NULL, as are
 * the layers' views): the owner binds a gathered parameter buffer before each use
 * (layers_chunk_bind_params) and sends gradients elsewhere (layers_chunk_external_grads). */
int layers_chunk_init_sharded(layers_chunk *ch, const layers_model *m, int lo, int hi, const kernels_ops *ops,
                              int B, int T, int nslots);
/* REDUCE_TIED_GRADS within a chunk: wte_grads (the embedding's wte gradient, wherever the chunk's
 * gradients live) += the head's tied_grads, which are then zeroed; nothing without a tied head. */
void layers_chunk_fold_tied(layers_chunk *ch, float *wte_grads);
/* The layers' views onto params (nparams floats of the table's memory), or NULL: none. */
void layers_chunk_bind_params(layers_chunk *ch, float *params);
/* The initial values of the chunk's flat parameters [lo, hi) into out (host memory, hi - lo
 * floats), drawn as the whole chunk's init draws them: a shard of them is the same bits. */
void layers_chunk_param_values(const layers_chunk *ch, uint64_t seed, size_t lo, size_t hi, float *out);
void layers_chunk_free(layers_chunk *ch);
/* activations in (a chunk whose first layer is the loss turns them into its probabilities) */
float *layers_chunk_input(const layers_chunk *ch, int slot);
float *layers_chunk_grad_input(const layers_chunk *ch, int slot);  /* gradient of the input */
float *layers_chunk_output(const layers_chunk *ch, int slot);      /* output of the last layer */
float *layers_chunk_grad_output(const layers_chunk *ch, int slot); /* its gradient */
int32_t *layers_chunk_tokens(const layers_chunk *ch, int slot);
int32_t *layers_chunk_targets(const layers_chunk *ch, int slot);
size_t layers_chunk_io_floats(const layers_chunk *ch); /* floats of the input activation */
size_t layers_chunk_out_floats(const layers_chunk *ch);
void layers_chunk_forward(layers_chunk *ch, int slot);
/* grad_scale: d(objective)/d(per-position loss), used by a loss layer */
void layers_chunk_backward_input(layers_chunk *ch, int slot, float grad_scale);
void layers_chunk_backward_weight(layers_chunk *ch, int slot);
double layers_chunk_loss_sum(const layers_chunk *ch, int slot); /* sum of per-position losses */
/* A micro-batch's token ids and targets (host arrays of B*T, either may be NULL) into a slot. */
void layers_chunk_set_batch(layers_chunk *ch, int slot, const int32_t *tokens, const int32_t *targets);
/* bytes of one slot (the memory model's act_bytes) */
size_t layers_chunk_slot_bytes(const layers_chunk *ch);
/* bytes of one aside part (a slot's share that a split backward frees at I) */
size_t layers_chunk_aside_bytes(const layers_chunk *ch);
/* output of the chunk's layer i (0-based in the chunk) for a slot; not under checkpointing */
float *layers_chunk_layer_output(const layers_chunk *ch, int slot, int i);
/* The aside pool: naside parts instead of one per slot (before first use; the bindings restart
 * as slot s -> part s for s < naside); CORE_ERUNTIME when the backend runs out of memory. */
int layers_chunk_aside_pool(layers_chunk *ch, int naside);
/* Slot `slot` uses aside part `aside` from now on (a pair's first instruction binds it); -1: none
 * (the pair gave it back), and the layers then see NULL for what lived there. */
void layers_chunk_bind(layers_chunk *ch, int slot, int aside);
/* floats of one slot of the model's layers [lo, hi) with micro-batch B, without building the
 * chunk: the same layout layers_chunk_init allocates (no checkpointing); shared: the layout of
 * layers_chunk_share_backward, whose one shared region's floats go to *bwd (may be NULL) */
size_t layers_slot_floats(const layers_model *m, int lo, int hi, int B, int shared, size_t *bwd);
/* The same, and the floats of its two parts (home, aside; any may be NULL). */
size_t layers_slot_parts(const layers_model *m, int lo, int hi, int B, int shared, size_t *home, size_t *aside,
                         size_t *bwd);
/* Drops the chunk's gradient buffer: from now on weight gradients go where dest says (see
 * grad_dest above). Before the first backward. */
void layers_chunk_external_grads(layers_chunk *ch, float *(*dest)(void *ctx, size_t off, size_t n), void *ctx);
/* Switches the chunk to activation checkpointing (before its first use); CORE_ERUNTIME when the
 * backend runs out of memory. */
int layers_chunk_checkpoint(layers_chunk *ch);
/* For a chunk whose every backward is full (backward_input then at once backward_weight, on the
 * same slot, nothing between): the W stashes and inner douts move out of the slots into one
 * region (bwd) the slots share. Before its first use; not with checkpointing (whose workspace is
 * shared already). CORE_ERUNTIME when the backend runs out of memory. */
int layers_chunk_share_backward(layers_chunk *ch);

/* Which parameters of a layer get weight decay: matrices and embeddings yes, biases and norm
 * gains no (mask[i] = 1 for decay), as GPT-2 training does. */
void layers_decay_mask(const layer *l, uint8_t *mask);

#endif
