/* layers/basic.c: linear, relu, gelu, layernorm, embedding, lm_head, cross_entropy. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "layers/internal.h"

/* ---- shared helpers ---- */

/* core_rng_normal takes two draws of a splitmix64 stream: skipping k values is one addition */
static void skip_normals(core_rng *r, size_t k) { r->state += 2 * (uint64_t)k * 0x9e3779b97f4a7c15ull; }

static void clip(const layers_window *w, size_t off, size_t n, size_t *a, size_t *b) {
  *a = off > w->lo ? off : w->lo;
  *b = off + n < w->hi ? off + n : w->hi;
  if (*b < *a) *b = *a;
}

void layers_normal(const layers_window *w, size_t off, size_t n, float std, core_rng *r) {
  size_t a, b;
  clip(w, off, n, &a, &b);
  if (b == a) {
    skip_normals(r, n);
    return;
  }
  skip_normals(r, a - off);
  for (size_t i = a; i < b; i++) w->p[i - w->lo] = std * core_rng_normal(r);
  skip_normals(r, off + n - b);
}

void layers_fill(const layers_window *w, size_t off, size_t n, float value) {
  size_t a, b;
  clip(w, off, n, &a, &b);
  for (size_t i = a; i < b; i++) w->p[i - w->lo] = value;
}

void layers_linear_forward(const kernels_ops *ops, float *out, const float *in, const float *w,
                           const float *b, int N, int C, int OC) {
  ops->linear_forward(out, in, w, b, NULL, N, C, OC);
}

void layers_linear_backward_input(const kernels_ops *ops, float *din, const float *dout,
                                  const float *w, int N, int C, int OC) {
  ops->gemm(din, dout, w, N, C, OC, 0, 0, 1.0f, 0.0f);
}

void layers_linear_backward_weight(const kernels_ops *ops, float *dw, float *db, const float *dout,
                                   const float *in, int N, int C, int OC) {
  ops->gemm(dw, dout, in, OC, C, N, 1, 0, 1.0f, 1.0f);
  if (db) ops->bias_grad(db, dout, N, OC);
}

static size_t zero(const layer *l, int B, int T) { return 0; }

/* ---- linear: out = in W^T + b, W [out, in] ---- */

static int linear_configure(layer *l, const core_config *c, int i) {
  int64_t out, bias;
  int rc = core_config_elem_int(c, "model.layers", i, "out", l->C, &out);
  if (!rc && (out < 1 || out > (1 << 24))) {
    char w[256];
    core_config_elem_where(c, "model.layers", i, "out", w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "model.layers.[%d].out must be in [1, 16777216] (%s)", i, w);
  }
  if (rc) return rc;
  int b = 1;
  rc = core_config_elem_bool(c, "model.layers", i, "bias", 1, &b);
  bias = b;
  l->out_width = (int)out;
  l->bias = (int)bias;
  return rc;
}
static size_t linear_params(const layer *l) {
  return (size_t)l->out_width * l->in_width + (l->bias ? (size_t)l->out_width : 0);
}
static double linear_flops(const layer *l) { return 2.0 * l->out_width * l->in_width; }
static void linear_init(const layer *l, const layers_window *w, uint64_t seed) {
  core_rng r = core_rng_keyed(seed, (uint64_t)l->index, 0, 0);
  size_t nw = (size_t)l->out_width * l->in_width;
  layers_normal(w, 0, nw, 0.02f, &r);
  if (l->bias) layers_fill(w, nw, (size_t)l->out_width, 0.0f);
}
static void linear_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  size_t nw = (size_t)l->out_width * l->in_width;
  layers_linear_forward(ops, io->out, io->in, l->params, l->bias ? l->params + nw : NULL,
                        io->B * io->T, l->in_width, l->out_width);
}
static void linear_backward_input(const layer *l, const kernels_ops *ops, const layer_io *io) {
  layers_linear_backward_input(ops, io->din, io->dout, l->params, io->B * io->T, l->in_width, l->out_width);
}
static void linear_backward_weight(const layer *l, const kernels_ops *ops, const layer_io *io) {
  size_t nw = (size_t)l->out_width * l->in_width;
  layers_linear_backward_weight(ops, l->grads, l->bias ? l->grads + nw : NULL, io->dout, io->in,
                                io->B * io->T, l->in_width, l->out_width);
}
const layer_type layers_linear = {"linear", LAYER_IN_HIDDEN, linear_configure, linear_params, linear_flops, zero, zero, linear_init, linear_forward, linear_backward_input, linear_backward_weight, 0, zero, NULL};

/* ---- relu and gelu: no weights ---- */

static size_t no_params(const layer *l) { return 0; }
static double act_flops(const layer *l) { return 8.0 * l->in_width; }
static void no_init(const layer *l, const layers_window *w, uint64_t seed) {}
static void no_weight(const layer *l, const kernels_ops *ops, const layer_io *io) {}
static void relu_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  ops->relu_forward(io->out, io->in, (size_t)io->B * io->T * l->in_width);
}
static void relu_backward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  ops->relu_backward(io->din, io->in, io->dout, (size_t)io->B * io->T * l->in_width);
}
static void gelu_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  ops->gelu_forward(io->out, io->in, (size_t)io->B * io->T * l->in_width);
}
static void gelu_backward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  ops->gelu_backward(io->din, io->in, io->dout, (size_t)io->B * io->T * l->in_width);
}
const layer_type layers_relu = {"relu", LAYER_IN_HIDDEN, NULL, no_params, act_flops, zero, zero, no_init, relu_forward, relu_backward, no_weight, 0, zero, NULL};
const layer_type layers_gelu = {"gelu", LAYER_IN_HIDDEN, NULL, no_params, act_flops, zero, zero, no_init, gelu_forward, gelu_backward, no_weight, 0, zero, NULL};

/* ---- layernorm: w, b [C]; stash mean, rstd [N] ---- */

static int ln_configure(layer *l, const core_config *c, int i) {
  double eps;
  int rc = core_config_elem_float(c, "model.layers", i, "eps", 1e-5, &eps);
  if (!rc && !(eps > 0 && eps < 1)) {
    char w[256];
    core_config_elem_where(c, "model.layers", i, "eps", w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "model.layers.[%d].eps must be in (0, 1) (%s)", i, w);
  }
  l->eps = eps;
  return rc;
}
static size_t ln_params(const layer *l) { return 2 * (size_t)l->in_width; }
static double ln_flops(const layer *l) { return 8.0 * l->in_width; }
static size_t ln_stash(const layer *l, int B, int T) { return 2 * (size_t)B * T; }
static void ln_init(const layer *l, const layers_window *w, uint64_t seed) {
  layers_fill(w, 0, (size_t)l->in_width, 1.0f);
  layers_fill(w, (size_t)l->in_width, (size_t)l->in_width, 0.0f);
}
static void ln_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int N = io->B * io->T;
  ops->layernorm_forward(io->out, io->stash, io->stash + N, io->in, l->params, l->params + l->in_width,
                         N, l->in_width, (float)l->eps);
}
static void ln_backward_input(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int N = io->B * io->T;
  ops->layernorm_backward_input(io->din, io->dout, io->in, l->params, io->stash, io->stash + N, N, l->in_width);
}
static void ln_backward_weight(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int N = io->B * io->T;
  ops->layernorm_backward_weight(l->grads, l->grads + l->in_width, io->dout, io->in, io->stash,
                                 io->stash + N, N, l->in_width);
}
const layer_type layers_layernorm = {"layernorm", LAYER_IN_HIDDEN, ln_configure, ln_params, ln_flops, ln_stash, zero, ln_init, ln_forward, ln_backward_input, ln_backward_weight, 0, zero, NULL};

/* ---- embedding: wte [V, C], wpe [T, C]; tokens in, hidden out ---- */

static int emb_configure(layer *l, const core_config *c, int i) {
  l->out_width = l->C;
  return CORE_OK;
}
static size_t emb_params(const layer *l) { return ((size_t)l->V + l->T) * l->C; }
static double emb_flops(const layer *l) { return l->C; }
static void emb_init(const layer *l, const layers_window *w, uint64_t seed) {
  core_rng r = core_rng_keyed(seed, (uint64_t)l->index, 0, 0);
  layers_normal(w, 0, (size_t)l->V * l->C, 0.02f, &r);
  core_rng r2 = core_rng_keyed(seed, (uint64_t)l->index, 1, 0);
  layers_normal(w, (size_t)l->V * l->C, (size_t)l->T * l->C, 0.01f, &r2);
}
static void emb_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  ops->embedding_forward(io->out, io->tokens, l->params, l->params + (size_t)l->V * l->C, io->B, io->T, l->C);
}
static void emb_backward_input(const layer *l, const kernels_ops *ops, const layer_io *io) {}
static void emb_backward_weight(const layer *l, const kernels_ops *ops, const layer_io *io) {
  ops->embedding_backward(l->grads, l->grads + (size_t)l->V * l->C, io->dout, io->tokens, io->B, io->T, l->C);
}
const layer_type layers_embedding = {"embedding", LAYER_IN_TOKENS, emb_configure, emb_params, emb_flops, zero, zero, emb_init, emb_forward, emb_backward_input, emb_backward_weight, 0, zero, NULL};

/* ---- lm_head: logits = in W^T, W [V, C]; tied: its own copy of the embedding's wte, kept equal
 * by REDUCE_TIED_GRADS (gradients summed across the two copies) ---- */

int layers_logits_ld(int V) { return (V + 63) / 64 * 64; }

static int head_configure(layer *l, const core_config *c, int i) {
  l->out_width = layers_logits_ld(l->V);
  return CORE_OK; /* `tie` is resolved by the registry, which knows the other layers */
}
static size_t head_params(const layer *l) { return (size_t)l->V * l->in_width; }
static double head_flops(const layer *l) { return 2.0 * l->V * l->in_width; }
static void head_init(const layer *l, const layers_window *w, uint64_t seed) {
  /* a tied head starts from the embedding's wte: same keys, same stream */
  core_rng r = core_rng_keyed(seed, (uint64_t)(l->tied_to >= 0 ? l->tied_to : l->index), 0, 0);
  layers_normal(w, 0, (size_t)l->V * l->in_width, 0.02f, &r);
}
/* logits [N, ld] (ld = out_width) = in [N, C] W^T, W [V, C]; the logits' padding columns may be
 * overwritten (gemm_ld), and their gradient's padding is zeros (the cross_entropy writes it so) */
static void head_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int N = io->B * io->T, C = l->in_width, ld = l->out_width;
  ops->gemm_ld(io->out, io->in, l->params, N, l->V, C, 0, 1, 1.0f, 0.0f, C, C, ld);
}
static void head_backward_input(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int N = io->B * io->T, C = l->in_width, ld = l->out_width;
  ops->gemm_ld(io->din, io->dout, l->params, N, C, l->V, 0, 0, 1.0f, 0.0f, ld, C, C);
}
static void head_backward_weight(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int N = io->B * io->T, C = l->in_width, ld = l->out_width;
  ops->gemm_ld(l->grads, io->dout, io->in, l->V, C, N, 1, 0, 1.0f, 1.0f, ld, C, C);
}
const layer_type layers_lm_head = {"lm_head", LAYER_IN_HIDDEN, head_configure, head_params, head_flops, zero, zero, head_init, head_forward, head_backward_input, head_backward_weight, 0, zero, NULL};

/* ---- cross_entropy: logits [N, V] (in rows of in_width >= V floats: an lm_head's padded rows)
 * + targets -> per-position losses [N]. Its stash is its input:
 * forward turns the logits into probabilities in place, backward turns those into the logits'
 * gradient in place (when the logits come from the layer before it in the chunk) ---- */

static int xent_configure(layer *l, const core_config *c, int i) {
  l->out_width = 1;
  return CORE_OK;
}
static double xent_flops(const layer *l) { return 4.0 * l->in_width; }
static void xent_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  ops->xent_forward(io->out, io->stash, io->in, io->targets, io->B * io->T, l->V, l->in_width, io->round);
}
static void xent_backward_input(const layer *l, const kernels_ops *ops, const layer_io *io) {
  ops->xent_backward(io->din, io->stash, io->targets, io->grad_scale, io->B * io->T, l->V, l->in_width, io->round);
}
const layer_type layers_cross_entropy = {"cross_entropy", LAYER_IN_HIDDEN, xent_configure, no_params, xent_flops, zero, zero, no_init, xent_forward, xent_backward_input, no_weight, 1, zero, NULL};
