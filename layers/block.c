/* layers/block.c: causal multi-head self-attention, and the pre-LayerNorm transformer block
 *   res2 = x + proj(attention(qkv(ln1(x))));  out = res2 + fc_proj(gelu(fc(ln2(res2))))
 * as in GPT-2 / llm.c. backward_input writes into the W stash the inner output gradients that
 * backward_weight needs later (zero-bubble schedules run the two apart); the layer's own output
 * gradient it reads in place (dout), which stays as it is until the weight gradient. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "layers/internal.h"


/* ---- parameter layout: offsets in floats ---- */

typedef struct {
  size_t ln1w, ln1b, wqkv, bqkv, wproj, bproj, ln2w, ln2b, wfc, bfc, wfp, bfp, total;
} block_params;

static block_params block_layout(const layer *l, int full) {
  size_t C = (size_t)l->C, H = (size_t)l->hidden, at = 0;
  block_params p;
  p.ln1w = at, at += full ? C : 0;
  p.ln1b = at, at += full ? C : 0;
  p.wqkv = at, at += 3 * C * C;
  p.bqkv = at, at += 3 * C;
  p.wproj = at, at += C * C;
  p.bproj = at, at += C;
  p.ln2w = at, at += full ? C : 0;
  p.ln2b = at, at += full ? C : 0;
  p.wfc = at, at += full ? H * C : 0;
  p.bfc = at, at += full ? H : 0;
  p.wfp = at, at += full ? C * H : 0;
  p.bfp = at, at += full ? C : 0;
  p.total = at;
  return p;
}

/* ---- stash layout, per micro-batch of N = B*T positions ---- */

/* What forward keeps for the backward: what the weight gradient reads too (the stash), and what
 * only backward_input reads (the I stash: q, k, v, the attention probabilities, the MLP's
 * pre-activation), which a split backward frees at I; apart, what backward_input keeps for
 * backward_weight (the W stash: output gradients of the inner matmuls and norms). Offsets of
 * qkv, att and (without recompute_gelu) fch are into the I stash, the others into the stash.
 * With recompute_gelu the block keeps no GELU output (fchg): the weight gradient of the MLP's
 * projection runs the GELU again from the pre-activation (fch, which then stays in the stash
 * until that W), into scratch, with the same op: the same bits. With recompute_layernorm it keeps
 * no LayerNorm output (ln1, ln2; their means and reciprocal deviations stay, which the input
 * gradient reads): the weight gradients of the qkv and fc projections run the LayerNorm again
 * from the block's input and res2, into scratch. A W runs on gathered parameters under ZeRO-3
 * too, so the LayerNorm's weights are there. */
typedef struct {
  size_t ln1, mean1, rstd1, atty, res2, ln2, mean2, rstd2, fchg;
  size_t total;
  size_t qkv, att, fch;
  size_t itotal;
} block_stash;
typedef struct {
  size_t g_fch, g_ln2, g_res2, g_qkv, g_ln1;
  size_t total;
} block_wstash;

static block_stash stash_layout(const layer *l, int B, int T, int full) {
  size_t N = (size_t)B * T, C = (size_t)l->C, H = (size_t)l->hidden, at = 0;
  block_stash s;
  int rl = full && l->recompute_layernorm;
  s.ln1 = at, at += full && !rl ? N * C : 0;
  s.mean1 = at, at += full ? N : 0;
  s.rstd1 = at, at += full ? N : 0;
  s.atty = at, at += N * C;
  s.res2 = at, at += full ? N * C : 0;
  s.ln2 = at, at += full && !rl ? N * C : 0;
  s.mean2 = at, at += full ? N : 0;
  s.rstd2 = at, at += full ? N : 0;
  int rg = full && l->recompute_gelu;
  s.fchg = at, at += full && !rg ? N * H : 0;
  if (rg) s.fch = at, at += N * H;
  s.total = at, at = 0;
  s.qkv = at, at += N * 3 * C;
  s.att = at, at += l->att_floats ? l->att_floats : (size_t)B * l->NH * T * T;
  if (!rg) s.fch = at, at += full ? N * H : 0;
  s.itotal = at;
  return s;
}

static block_wstash wstash_layout(const layer *l, int B, int T, int full) {
  size_t N = (size_t)B * T, C = (size_t)l->C, H = (size_t)l->hidden, at = 0;
  block_wstash w;
  w.g_fch = at, at += full ? N * H : 0;
  w.g_ln2 = at, at += full ? N * C : 0;
  w.g_res2 = at, at += full ? N * C : 0;
  w.g_qkv = at, at += N * 3 * C;
  w.g_ln1 = at, at += full ? N * C : 0;
  w.total = at;
  return w;
}

/* The heads split d_model: where the two keys were set (or that a default applies) is named, as
 * either may be the one to change, from the file or from --set. */
static int dims_check(layer *l, const core_config *c) {
  if (l->NH < 1 || l->C % l->NH != 0) {
    char wc[256], wh[256];
    if (core_config_where(c, "model.d_model", -1, wc, sizeof wc)) snprintf(wc, sizeof wc, "the default");
    if (core_config_where(c, "model.n_heads", -1, wh, sizeof wh)) snprintf(wh, sizeof wh, "the default");
    return core_error_set(CORE_EINPUT, "%s: d_model %d must be a multiple of n_heads %d (model.d_model: %s; "
                          "model.n_heads: %s)", l->where, l->C, l->NH, wc, wh);
  }
  l->out_width = l->C;
  return CORE_OK;
}

/* ---- causal_attention alone: qkv linear, attention, output projection ---- */

static int attn_configure(layer *l, const core_config *c, int i) { return dims_check(l, c); }
static size_t attn_params(const layer *l) { return block_layout(l, 0).total; }
static double attn_flops(const layer *l) { return 2.0 * 4 * l->C * l->C + 2.0 * l->T * l->C; }
static size_t attn_stash(const layer *l, int B, int T) { return stash_layout(l, B, T, 0).total; }
static size_t attn_istash(const layer *l, int B, int T) { return stash_layout(l, B, T, 0).itotal; }
static size_t attn_wstash(const layer *l, int B, int T) { return wstash_layout(l, B, T, 0).total; }
static size_t attn_scratch(const layer *l, int B, int T) { return (size_t)B * T * l->C + kernels_attention_scratch_floats(T); }

static void init_common(const layer *l, const layers_window *w, uint64_t seed, block_params o) {
  size_t C = (size_t)l->C, H = (size_t)l->hidden;
  float proj_std = 0.02f / sqrtf(2.0f * (l->nblocks > 0 ? l->nblocks : 1));
  layers_fill(w, 0, o.total, 0.0f);
  core_rng r = core_rng_keyed(seed, (uint64_t)l->index, 0, 0);
  layers_normal(w, o.wqkv, 3 * C * C, 0.02f, &r);
  layers_normal(w, o.wproj, C * C, proj_std, &r);
  if (o.wfc != o.bfc) {
    layers_normal(w, o.wfc, H * C, 0.02f, &r);
    layers_normal(w, o.wfp, C * H, proj_std, &r);
    layers_fill(w, o.ln1w, C, 1.0f);
    layers_fill(w, o.ln2w, C, 1.0f);
  }
}

static void attn_init(const layer *l, const layers_window *w, uint64_t seed) { init_common(l, w, seed, block_layout(l, 0)); }

/* attention core forward from `x` (the input of the qkv projection) into `y`, plus `res` when
 * not NULL (the block's residual, added by the projection's op) */
static void attn_core_forward(const layer *l, const kernels_ops *ops, float *y, const float *x, const float *res,
                              float *st, float *ist, block_stash s, block_params o, const float *p, int B, int T) {
  int N = B * T, C = l->C;
  layers_linear_forward(ops, ist + s.qkv, x, p + o.wqkv, p + o.bqkv, N, C, 3 * C);
  ops->attention_forward(st + s.atty, ist + s.att, ist + s.qkv, B, T, C, l->NH);
  ops->linear_forward(y, st + s.atty, p + o.wproj, p + o.bproj, res, N, C, C);
}

/* gradient dy of the projection's output -> dx of the qkv projection's input; stores g_qkv */
static void attn_core_backward_input(const layer *l, const kernels_ops *ops, float *dx, const float *dy,
                                     const float *ist, float *wst, float *scratch, block_stash s,
                                     block_wstash w, block_params o, const float *p, int B, int T) {
  int N = B * T, C = l->C;
  float *datty = scratch, *sc = scratch + (size_t)N * C;
  layers_linear_backward_input(ops, datty, dy, p + o.wproj, N, C, C);
  ops->attention_backward(wst + w.g_qkv, sc, datty, ist + s.qkv, ist + s.att, B, T, C, l->NH);
  layers_linear_backward_input(ops, dx, wst + w.g_qkv, p + o.wqkv, N, C, 3 * C);
}

static void attn_core_backward_weight(const layer *l, const kernels_ops *ops, const float *dy, const float *x,
                                      const float *st, const float *wst, block_stash s, block_wstash w,
                                      block_params o, float *g, int B, int T) {
  int N = B * T, C = l->C;
  layers_linear_backward_weight(ops, g + o.wproj, g + o.bproj, dy, st + s.atty, N, C, C);
  layers_linear_backward_weight(ops, g + o.wqkv, g + o.bqkv, wst + w.g_qkv, x, N, C, 3 * C);
}

static void attn_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  attn_core_forward(l, ops, io->out, io->in, NULL, io->stash, io->istash, stash_layout(l, io->B, io->T, 0),
                    block_layout(l, 0), l->params, io->B, io->T);
}
static void attn_backward_input(const layer *l, const kernels_ops *ops, const layer_io *io) {
  block_wstash w = wstash_layout(l, io->B, io->T, 0);
  attn_core_backward_input(l, ops, io->din, io->dout, io->istash, io->wstash, io->scratch,
                           stash_layout(l, io->B, io->T, 0), w, block_layout(l, 0), l->params, io->B, io->T);
}
static void attn_backward_weight(const layer *l, const kernels_ops *ops, const layer_io *io) {
  block_wstash w = wstash_layout(l, io->B, io->T, 0);
  attn_core_backward_weight(l, ops, io->dout, io->in, io->stash, io->wstash,
                            stash_layout(l, io->B, io->T, 0), w, block_layout(l, 0), l->grads, io->B, io->T);
}
const layer_type layers_attention = {"causal_attention", LAYER_IN_HIDDEN, attn_configure, attn_params, attn_flops, attn_stash, attn_scratch, attn_init, attn_forward, attn_backward_input, attn_backward_weight, 0, attn_wstash, attn_istash};

/* ---- transformer_block ---- */

static int block_configure(layer *l, const core_config *c, int i) {
  int64_t ratio;
  int rc = core_config_elem_int(c, "model.layers", i, "mlp_ratio", 4, &ratio);
  if (!rc && (ratio < 1 || ratio > 64)) {
    char w[256];
    core_config_elem_where(c, "model.layers", i, "mlp_ratio", w, sizeof w);
    rc = core_error_set(CORE_EINPUT, "model.layers.[%d].mlp_ratio must be in [1, 64] (%s)", i, w);
  }
  if (rc) return rc;
  l->hidden = (int)ratio * l->C;
  l->eps = 1e-5;
  rc = core_config_elem_bool(c, "model.layers", i, "recompute_gelu", 0, &l->recompute_gelu);
  if (!rc) rc = core_config_elem_bool(c, "model.layers", i, "recompute_layernorm", 0, &l->recompute_layernorm);
  return rc ? rc : dims_check(l, c);
}
static size_t block_params_n(const layer *l) { return block_layout(l, 1).total; }
static double block_flops(const layer *l) {
  return 2.0 * (4.0 * l->C * l->C + 2.0 * l->C * l->hidden) + 2.0 * l->T * l->C;
}
static size_t block_stash_n(const layer *l, int B, int T) { return stash_layout(l, B, T, 1).total; }
static size_t block_istash_n(const layer *l, int B, int T) { return stash_layout(l, B, T, 1).itotal; }
static size_t block_wstash_n(const layer *l, int B, int T) { return wstash_layout(l, B, T, 1).total; }
/* block_backward_weight's recompute needs N*hidden (GELU) or N*C and a mean and rstd (2N) */
static size_t block_scratch(const layer *l, int B, int T) {
  size_t N = (size_t)B * T, mlp = N * ((size_t)l->hidden + l->C), ln = N * ((size_t)l->C + 2);
  return (mlp > ln ? mlp : ln) + kernels_attention_scratch_floats(T);
}
static void block_init(const layer *l, const layers_window *w, uint64_t seed) { init_common(l, w, seed, block_layout(l, 1)); }

static void block_forward(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int B = io->B, T = io->T, N = B * T, C = l->C, H = l->hidden;
  block_stash s = stash_layout(l, B, T, 1);
  block_params o = block_layout(l, 1);
  const float *p = l->params;
  float *st = io->stash, *ist = io->istash;
  /* the LayerNorm outputs in scratch under recompute_layernorm: each is dead once its projection has run */
  float *ln1 = l->recompute_layernorm ? io->scratch : st + s.ln1, *ln2 = l->recompute_layernorm ? io->scratch : st + s.ln2;
  ops->layernorm_forward(ln1, st + s.mean1, st + s.rstd1, io->in, p + o.ln1w, p + o.ln1b, N, C, (float)l->eps);
  attn_core_forward(l, ops, st + s.res2, ln1, io->in, st, ist, s, o, p, B, T); /* res2 = attn(ln1) + x */
  ops->layernorm_forward(ln2, st + s.mean2, st + s.rstd2, st + s.res2, p + o.ln2w, p + o.ln2b, N, C, (float)l->eps);
  float *fch = (l->recompute_gelu ? st : ist) + s.fch, *fchg = l->recompute_gelu ? io->scratch : st + s.fchg;
  layers_linear_forward(ops, fch, ln2, p + o.wfc, p + o.bfc, N, C, H);
  ops->gelu_forward(fchg, fch, (size_t)N * H);
  ops->linear_forward(io->out, fchg, p + o.wfp, p + o.bfp, st + s.res2, N, H, C); /* + res2 */
}

static void block_backward_input(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int B = io->B, T = io->T, N = B * T, C = l->C, H = l->hidden;
  block_stash s = stash_layout(l, B, T, 1);
  block_wstash w = wstash_layout(l, B, T, 1);
  block_params o = block_layout(l, 1);
  const float *p = l->params;
  float *st = io->stash, *ist = io->istash, *ws = io->wstash, *tmp = io->scratch; /* tmp: N*H, then N*C + 2T for the attention core */
  size_t NC = (size_t)N * C;
  layers_linear_backward_input(ops, tmp, io->dout, p + o.wfp, N, H, C);      /* d gelu out */
  ops->gelu_backward(ws + w.g_fch, (l->recompute_gelu ? st : ist) + s.fch, tmp, (size_t)N * H); /* d fc out */
  layers_linear_backward_input(ops, ws + w.g_ln2, ws + w.g_fch, p + o.wfc, N, C, H);
  ops->layernorm_backward_input(ws + w.g_res2, ws + w.g_ln2, st + s.res2, p + o.ln2w, st + s.mean2, st + s.rstd2, N, C);
  ops->axpy(ws + w.g_res2, 1.0f, io->dout, NC);                              /* residual */
  attn_core_backward_input(l, ops, ws + w.g_ln1, ws + w.g_res2, ist, ws, tmp, s, w, o, p, B, T);
  ops->layernorm_backward_input(io->din, ws + w.g_ln1, io->in, p + o.ln1w, st + s.mean1, st + s.rstd1, N, C);
  ops->axpy(io->din, 1.0f, ws + w.g_res2, NC);                               /* residual */
}

static void block_backward_weight(const layer *l, const kernels_ops *ops, const layer_io *io) {
  int B = io->B, T = io->T, N = B * T, C = l->C, H = l->hidden;
  block_stash s = stash_layout(l, B, T, 1);
  block_wstash w = wstash_layout(l, B, T, 1);
  block_params o = block_layout(l, 1);
  const float *p = l->params;
  float *g = l->grads, *st = io->stash, *ws = io->wstash, *fchg = st + s.fchg, *ln1 = st + s.ln1, *ln2 = st + s.ln2;
  /* what recompute_* left out, again as forward ran it, into scratch (one at a time: [N*C] and
   * a mean and rstd [2N] that equal the stash's) */
  float *sc = io->scratch, *ms = io->scratch + (size_t)N * C;
  if (l->recompute_gelu) ops->gelu_forward(fchg = sc, st + s.fch, (size_t)N * H);
  layers_linear_backward_weight(ops, g + o.wfp, g + o.bfp, io->dout, fchg, N, H, C);
  if (l->recompute_layernorm)
    ops->layernorm_forward(ln2 = sc, ms, ms + N, st + s.res2, p + o.ln2w, p + o.ln2b, N, C, (float)l->eps);
  layers_linear_backward_weight(ops, g + o.wfc, g + o.bfc, ws + w.g_fch, ln2, N, C, H);
  ops->layernorm_backward_weight(g + o.ln2w, g + o.ln2b, ws + w.g_ln2, st + s.res2, st + s.mean2, st + s.rstd2, N, C);
  if (l->recompute_layernorm)
    ops->layernorm_forward(ln1 = sc, ms, ms + N, io->in, p + o.ln1w, p + o.ln1b, N, C, (float)l->eps);
  attn_core_backward_weight(l, ops, ws + w.g_res2, ln1, st, ws, s, w, o, g, B, T);
  ops->layernorm_backward_weight(g + o.ln1w, g + o.ln1b, ws + w.g_ln1, io->in, st + s.mean1, st + s.rstd1, N, C);
}
const layer_type layers_block = {"transformer_block", LAYER_IN_HIDDEN, block_configure, block_params_n, block_flops, block_stash_n, block_scratch, block_init, block_forward, block_backward_input, block_backward_weight, 0, block_wstash_n, block_istash_n};
