/* Finite-difference gradient checks of every layer type, through chunks as training runs them:
 * weight gradients of each layer and the gradient w.r.t. a chunk's input activations. fp32
 * central differences; tolerances below are stated per check. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"
#include "layers/layers.h"

static const char *model_cfg =
    "model = { vocab_size = 16; seq_len = 5; d_model = 8; n_heads = 2;\n"
    "  layers = ( { type = \"embedding\"; name = \"wte\"; },\n"
    "             { type = \"transformer_block\"; },\n"
    "             { type = \"layernorm\"; },\n"
    "             { type = \"linear\"; out = 12; },\n"
    "             { type = \"gelu\"; },\n"
    "             { type = \"linear\"; out = 8; bias = false; },\n"
    "             { type = \"causal_attention\"; },\n"
    "             { type = \"lm_head\"; tie = \"wte\"; },\n"
    "             { type = \"cross_entropy\"; } ); };\n"
    "train = { seed = 5; };\n";

static layers_model build(void) {
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, model_cfg, "grad.cfg"), CORE_OK, "%s", core_error_msg());
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 16), CORE_OK, "%s", core_error_msg());
  core_config_free(c);
  return m;
}

enum { B = 2, T = 5 };

/* Slot s's token ids, targets and input activations, drawn from r in that order. */
static void fill_slot(layers_chunk *ch, int s, core_rng *r) {
  for (int i = 0; i < B * T; i++) {
    layers_chunk_tokens(ch, s)[i] = (int32_t)core_rng_below(r, 16);
    layers_chunk_targets(ch, s)[i] = (int32_t)core_rng_below(r, 16);
  }
  float *in = layers_chunk_input(ch, s);
  for (size_t i = 0; i < layers_chunk_io_floats(ch); i++) in[i] = core_rng_normal(r);
}

static void fill_batch(layers_chunk *ch) {
  core_rng r = core_rng_keyed(1, 2, 3, 4);
  fill_slot(ch, 0, &r);
}

/* mean loss of the chunk's slot 0 (the chunk ends in the loss) */
static double loss(layers_chunk *ch) {
  layers_chunk_forward(ch, 0);
  return layers_chunk_loss_sum(ch, 0) / (B * T);
}

/* Directional derivatives: for a direction d over a whole tensor, the analytic sum(g * d)
 * against (L(x + eps d) - L(x - eps d)) / 2 eps. Summing over the tensor lifts the signal far
 * above fp32 rounding of the loss (about 1e-7 relative), so the tolerance can be tight: 2%
 * relative plus 1e-5 absolute. Weights are scaled up 10x from init so every path carries
 * signal, and eps = 1e-4: larger steps see the curvature (3e-4 already misses by 10% on the
 * block), smaller ones the rounding. Mutating a kernel by 5% (layernorm bias gradient) or 10%
 * (softmax backward) fails this test. Checks whose derivative is too small to mean anything
 * are counted and most must be significant. */
static int significant, total;

static void check(const char *what, double an, double fd) {
  double tol = 2e-2 * fmax(fabs(an), fabs(fd)) + 1e-5;
  cr_assert(fabs(an - fd) <= tol, "%s: analytic %.6g, finite difference %.6g", what, an, fd);
  total++;
  significant += fabs(an) > 1e-3;
}

static double central(layers_chunk *ch, float *x, size_t n, const float *d, float eps) {
  float *save = malloc(sizeof(float) * n);
  memcpy(save, x, sizeof(float) * n);
  for (size_t i = 0; i < n; i++) x[i] = save[i] + eps * d[i];
  double up = loss(ch);
  for (size_t i = 0; i < n; i++) x[i] = save[i] - eps * d[i];
  double dn = loss(ch);
  memcpy(x, save, sizeof(float) * n);
  free(save);
  return (up - dn) / (2 * (double)eps);
}

static double plain(layers_chunk *ch, float *x, size_t n, const float *d, float eps) {
  return central(ch, x, n, d, eps);
}

/* A direction that follows the sign of the analytic gradient, with random weights in {0.75, 1}
 * (and a random sign on one element in 32): the directional derivative is then large, so
 * the comparison is above fp32 noise, and a wrong sign or scale anywhere still shows. */
static float *random_direction(const float *g, size_t n, uint64_t key) {
  core_rng r = core_rng_keyed(99, key, 0, 0);
  float *d = malloc(sizeof(float) * (n ? n : 1));
  for (size_t i = 0; i < n; i++) {
    uint64_t u = core_rng_u64(&r);
    float mag = u & 1 ? 1.0f : 0.75f, sign = (u & 62) == 0 ? (u & 64 ? 1.0f : -1.0f) : (g[i] >= 0 ? 1.0f : -1.0f);
    d[i] = mag * sign;
  }
  return d;
}

static void gradcheck_chunk(int lo) {
  layers_model m = build();
  layers_chunk ch;
  kernels_cpu_init(1);
  cr_assert_eq(layers_chunk_init(&ch, &m, lo, m.n, kernels_cpu_ops(), B, T, 1), CORE_OK);
  fill_batch(&ch);
  for (size_t i = 0; i < ch.nparams; i++) ch.params[i] *= 10.0f;
  size_t nin = layers_chunk_io_floats(&ch);
  float *in0 = malloc(sizeof(float) * (nin ? nin : 1)); /* a chunk that starts with the loss */
  memcpy(in0, layers_chunk_input(&ch, 0), sizeof(float) * nin); /* turns its input into probabilities */
  loss(&ch);
  memset(ch.grads, 0, sizeof(float) * ch.nparams);
  layers_chunk_backward_input(&ch, 0, 1.0f / (B * T));
  layers_chunk_backward_weight(&ch, 0);
  layers_chunk_fold_tied(&ch, ch.grads); /* a head sharing wte: the whole wte gradient (wte at 0) */
  float *din = malloc(sizeof(float) * (nin ? nin : 1));
  memcpy(din, layers_chunk_grad_input(&ch, 0), sizeof(float) * nin);
  memcpy(layers_chunk_input(&ch, 0), in0, sizeof(float) * nin);
  free(in0);
  const float eps = 1e-4f;
  significant = total = 0;
  for (int li = 0; li < ch.n; li++) {
    size_t n = ch.layers[li].nparams;
    for (int rep = 0; rep < 3 && n; rep++) {
      const float *g = ch.grads + ch.param_off[li];
      float *d = random_direction(g, n, (uint64_t)(li * 10 + rep));
      double an = 0;
      for (size_t i = 0; i < n; i++) an += (double)g[i] * d[i];
      char what[128];
      snprintf(what, sizeof what, "weights of layer %s (%s), direction %d", ch.layers[li].name, ch.layers[li].type->name, rep);
      check(what, an, plain(&ch, ch.params + ch.param_off[li], n, d, eps));
      free(d);
    }
  }
  for (int rep = 0; rep < 3 && nin; rep++) { /* gradient w.r.t. the chunk's input */
    float *d = random_direction(din, nin, (uint64_t)(1000 + rep));
    double an = 0;
    for (size_t i = 0; i < nin; i++) an += (double)din[i] * d[i];
    char what[128];
    snprintf(what, sizeof what, "input of the chunk from layer %d (%s), direction %d", lo, ch.layers[0].type->name, rep);
    check(what, an, plain(&ch, layers_chunk_input(&ch, 0), nin, d, eps));
    free(d);
  }
  cr_assert(significant * 4 >= total * 3, "only %d of %d checks had a derivative above 1e-3", significant, total);
  free(din);
  layers_chunk_free(&ch);
  layers_model_free(&m);
}

Test(gradcheck, whole_model_weights) { gradcheck_chunk(0); }
Test(gradcheck, from_block_input) { gradcheck_chunk(1); }
Test(gradcheck, from_linear_input) { gradcheck_chunk(3); }
Test(gradcheck, from_gelu_input) { gradcheck_chunk(4); }
Test(gradcheck, from_attention_input) { gradcheck_chunk(6); }
Test(gradcheck, from_head_input) { gradcheck_chunk(7); }
Test(gradcheck, from_loss_input) { gradcheck_chunk(8); }

/* The loss keeps its probabilities over the logits, and its backward writes the logits'
 * gradient over them: one N x V buffer where there were three (logits, probabilities, their
 * gradient). The gradients are checked above; here the layout, and the memory model's copy. */
Test(model, loss_keeps_its_cache_over_the_logits) {
  layers_model m = build();
  const size_t N = B * T, V = (size_t)layers_logits_ld(16); /* the logits' rows: 16 classes padded to 64 */
  layers_chunk all, nohead, loss_only;
  cr_assert_eq(layers_chunk_init(&all, &m, 0, m.n, kernels_cpu_ops(), B, T, 1), CORE_OK);
  cr_assert_eq(layers_chunk_init(&nohead, &m, 0, m.n - 1, kernels_cpu_ops(), B, T, 1), CORE_OK);
  cr_assert_eq(layers_chunk_init(&loss_only, &m, m.n - 1, m.n, kernels_cpu_ops(), B, T, 1), CORE_OK);
  int head = m.n - 2, xent = m.n - 1;
  cr_assert(all.stash[xent].off == all.out[head].off && all.stash[xent].part == all.out[head].part,
            "the probabilities are not over the logits");
  cr_assert(all.dout[head].off == all.out[head].off && all.dout[head].part == all.out[head].part,
            "the logits' gradient is not over them");
  /* the head's weight gradient reads that gradient: the buffer lives in the slot's home part */
  cr_assert_eq(all.out[head].part, LAYERS_HOME);
  /* adding the loss costs its losses and their (unused) gradient, and saves the head's dout */
  cr_assert_eq(all.slot_floats, nohead.slot_floats + 2 * N - N * V, "%zu vs %zu", all.slot_floats, nohead.slot_floats);
  /* a chunk that is only the loss keeps its cache over its input, and its din apart */
  cr_assert(loss_only.stash[0].off == loss_only.in.off && loss_only.stash[0].part == loss_only.in.part);
  cr_assert_eq(loss_only.slot_floats, 2 * N * V + 2 * N);
  cr_assert_eq(layers_slot_floats(&m, 0, m.n, B, 0, NULL), all.slot_floats);
  cr_assert_eq(layers_slot_floats(&m, m.n - 1, m.n, B, 0, NULL), loss_only.slot_floats);
  layers_chunk_free(&all), layers_chunk_free(&nohead), layers_chunk_free(&loss_only);
  layers_model_free(&m);
}

/* ReLU has a kink at 0: checked on its own, with inputs kept away from it. */
Test(gradcheck, relu) {
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, "model = { vocab_size = 16; seq_len = 5; d_model = 8; layers = ( "
               "{ type = \"embedding\"; }, { type = \"relu\"; }, { type = \"lm_head\"; }, "
               "{ type = \"cross_entropy\"; } ); };", "relu.cfg"), CORE_OK);
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 16), CORE_OK, "%s", core_error_msg());
  layers_chunk ch;
  cr_assert_eq(layers_chunk_init(&ch, &m, 1, m.n, kernels_cpu_ops(), B, T, 1), CORE_OK);
  fill_batch(&ch);
  for (size_t i = 0; i < ch.nparams; i++) ch.params[i] *= 30.0f;
  float *in = layers_chunk_input(&ch, 0);
  size_t nin = layers_chunk_io_floats(&ch);
  for (size_t i = 0; i < nin; i++) in[i] = in[i] >= 0 ? in[i] + 0.1f : in[i] - 0.1f;
  loss(&ch);
  layers_chunk_backward_input(&ch, 0, 1.0f / (B * T));
  const float *din = layers_chunk_grad_input(&ch, 0);
  int zeros = 0;
  for (size_t i = 0; i < nin; i++) {
    if (in[i] < 0) {
      cr_assert_eq(din[i], 0.0f);
      zeros++;
      continue;
    }
    float *d = calloc(nin, sizeof(float));
    d[i] = 1.0f;
    check("relu input", din[i], plain(&ch, in, nin, d, 1e-2f));
    free(d);
  }
  cr_assert(zeros > 0 && zeros < (int)nin);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  core_config_free(c);
}

Test(gradcheck, split_backward_equals_interleaved_order) {
  /* B then W for the whole chunk gives the same bits as any later W: W reads only the stash */
  layers_model m = build();
  layers_chunk a, b;
  cr_assert_eq(layers_chunk_init(&a, &m, 0, m.n, kernels_cpu_ops(), B, T, 2), CORE_OK);
  cr_assert_eq(layers_chunk_init(&b, &m, 0, m.n, kernels_cpu_ops(), B, T, 2), CORE_OK);
  fill_batch(&a), fill_batch(&b);
  memcpy(layers_chunk_tokens(&a, 1), layers_chunk_tokens(&a, 0), sizeof(int32_t) * B * T);
  memcpy(layers_chunk_targets(&a, 1), layers_chunk_targets(&a, 0), sizeof(int32_t) * B * T);
  memcpy(layers_chunk_tokens(&b, 1), layers_chunk_tokens(&a, 0), sizeof(int32_t) * B * T);
  memcpy(layers_chunk_targets(&b, 1), layers_chunk_targets(&a, 0), sizeof(int32_t) * B * T);
  /* a: F0 B0 W0 F1 B1 W1; b: F0 F1 I0 I1 W0 W1 */
  layers_chunk_forward(&a, 0), layers_chunk_backward_input(&a, 0, 0.1f), layers_chunk_backward_weight(&a, 0);
  layers_chunk_forward(&a, 1), layers_chunk_backward_input(&a, 1, 0.1f), layers_chunk_backward_weight(&a, 1);
  layers_chunk_forward(&b, 0), layers_chunk_forward(&b, 1);
  layers_chunk_backward_input(&b, 0, 0.1f), layers_chunk_backward_input(&b, 1, 0.1f);
  layers_chunk_backward_weight(&b, 0), layers_chunk_backward_weight(&b, 1);
  cr_assert(memcmp(a.grads, b.grads, sizeof(float) * a.nparams) == 0);
  layers_chunk_free(&a), layers_chunk_free(&b);
  layers_model_free(&m);
}

/* Shared backward buffers (layers_chunk_share_backward) change where the W stashes and inner
 * gradients live, not a bit of the result: GPipe's order F0 F1 B0 B1 (each B full) on three
 * slots gives the same weight gradients and input gradients as per-slot buffers, and the slots
 * are smaller. */
Test(gradcheck, shared_backward_buffers_same_bits) {
  layers_model m = build();
  for (int lo = 0; lo <= 1; lo++) { /* the whole model; and from the block, with an input gradient */
    layers_chunk a, b;
    cr_assert_eq(layers_chunk_init(&a, &m, lo, m.n, kernels_cpu_ops(), B, T, 3), CORE_OK);
    cr_assert_eq(layers_chunk_init(&b, &m, lo, m.n, kernels_cpu_ops(), B, T, 3), CORE_OK);
    size_t plain = layers_chunk_slot_bytes(&b);
    cr_assert_eq(layers_chunk_share_backward(&b), CORE_OK);
    cr_assert_lt(layers_chunk_slot_bytes(&b), plain);
    cr_assert_eq(layers_chunk_checkpoint(&b), CORE_EINPUT, "a shared chunk was checkpointed");
    layers_chunk *both[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
      core_rng r = core_rng_keyed(7, (uint64_t)lo, 0, 0);
      for (int s = 0; s < 3; s++) fill_slot(both[k], s, &r);
      for (int s = 0; s < 3; s++) layers_chunk_forward(both[k], s);
      for (int s = 0; s < 3; s++) layers_chunk_backward_input(both[k], s, 0.1f), layers_chunk_backward_weight(both[k], s);
    }
    cr_assert(memcmp(a.grads, b.grads, sizeof(float) * a.nparams) == 0, "weight gradients differ (lo %d)", lo);
    for (int s = 0; s < 3; s++)
      cr_assert(memcmp(layers_chunk_grad_input(&a, s), layers_chunk_grad_input(&b, s),
                       sizeof(float) * layers_chunk_io_floats(&a)) == 0, "input gradient of slot %d differs", s);
    layers_chunk_free(&a), layers_chunk_free(&b);
  }
  layers_model_free(&m);
}

static void bad_model(const char *text, const char *needle) {
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, text, "bad.cfg"), CORE_OK, "%s", core_error_msg());
  layers_model m = {0};
  core_error_clear();
  cr_assert_eq(layers_model_build(&m, c, 16), CORE_EINPUT, "accepted: %s", text);
  cr_assert(strstr(core_error_msg(), needle), "'%s' lacks '%s'", core_error_msg(), needle);
  core_config_free(c);
}

Test(model, bad_models_name_the_layers) {
  bad_model("model = { d_model = 8; n_heads = 2; layers = ( { type = \"embedding\"; },\n"
            "{ type = \"linear\"; name = \"fc\"; out = 6; },\n{ type = \"transformer_block\"; name = \"blk\"; },\n"
            "{ type = \"lm_head\"; }, { type = \"cross_entropy\"; } ); };",
            "layer 'blk' (bad.cfg:3) takes width 8, but the layer before it, 'fc' (bad.cfg:2), gives 6");
  bad_model("model = { layers = ( { type = \"linear\"; }, { type = \"cross_entropy\"; } ); };", "must be an embedding");
  bad_model("model = { layers = ( { type = \"embedding\"; }, { type = \"warp\"; } ); };", "unknown layer type 'warp'");
  bad_model("model = { layers = ( { type = \"embedding\"; }, { type = \"lm_head\"; } ); };", "must be cross_entropy");
  bad_model("model = { layers = ( { type = \"embedding\"; }, { type = \"lm_head\"; tie = \"nope\"; }, { type = \"cross_entropy\"; } ); };", "names no embedding");
  bad_model("model = { d_model = 10; n_heads = 3; layers = ( { type = \"embedding\"; }, { type = \"transformer_block\"; }, { type = \"lm_head\"; }, { type = \"cross_entropy\"; } ); };", "multiple of n_heads");
  bad_model("model = { vocab_size = 4; layers = ( { type = \"embedding\"; }, { type = \"lm_head\"; }, { type = \"cross_entropy\"; } ); };", "smaller than the data's vocabulary");
  bad_model("model = { layers = ( { type = \"embedding\"; }, { type = \"transformer_block\"; repeat = 0; } ); };", "repeat must be in");
  bad_model("model = { };", "model.layers is missing");
  /* a loss in the middle: its backward would drop the gradient of the layers after it */
  bad_model("model = { layers = ( { type = \"embedding\"; }, { type = \"lm_head\"; },\n{ type = \"cross_entropy\"; name = \"mid\"; },\n"
            "{ type = \"linear\"; out = 16; }, { type = \"cross_entropy\"; } ); };",
            "layer 'mid' (bad.cfg:2) is a cross_entropy before the last layer");
  bad_model("model = { vocab_size = 16; d_model = 16; layers = ( { type = \"embedding\"; },\n"
            "{ type = \"cross_entropy\"; name = \"a\"; }, { type = \"cross_entropy\"; } ); };",
            "layer 'a' (bad.cfg:2) is a cross_entropy before the last layer");
}

Test(model, names_kept_and_built_once) {
  layers_model m = build();
  cr_assert_str_eq(m.layers[0].name, "wte");
  cr_assert_str_eq(m.layers[1].name, "transformer_block1");
  cr_assert_eq(m.layers[7].tied_to, 0);
  core_config *c;
  core_config_load_string(&c, model_cfg, "grad.cfg");
  cr_assert_eq(layers_model_build(&m, c, 16), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "already built"));
  core_config_free(c);
  layers_model_free(&m);
}

/* A slot's aside part (attention probabilities, the MLP's pre-activation, outputs no weight
 * gradient reads, the chunk's output and input gradient) is what a split backward gives back at
 * I: the weight gradient runs with it gone (the layers see NULL there) and reused by the next
 * micro-batch, and gives the bits of a chunk that keeps whole slots. Chunks starting at each kind
 * of layer; one aside part shared by two slots. */
Test(gradcheck, weight_gradient_never_reads_the_aside_part) {
  layers_model m = build();
  const int starts[] = {0, 1, 2, 3, 4, 6, 7};
  for (size_t t = 0; t < sizeof starts / sizeof starts[0]; t++) {
    int lo = starts[t];
    layers_chunk a, b;
    cr_assert_eq(layers_chunk_init(&a, &m, lo, m.n, kernels_cpu_ops(), B, T, 2), CORE_OK);
    cr_assert_eq(layers_chunk_init(&b, &m, lo, m.n, kernels_cpu_ops(), B, T, 2), CORE_OK);
    cr_assert_eq(layers_chunk_aside_pool(&b, 1), CORE_OK);
    cr_assert_gt(layers_chunk_aside_bytes(&b), 0, "layers %d..: nothing aside", lo);
    cr_assert_lt(layers_chunk_aside_bytes(&b), layers_chunk_slot_bytes(&b));
    layers_chunk *both[2] = {&a, &b};
    size_t nin = layers_chunk_io_floats(&a);
    float *din[2][2];
    for (int k = 0; k < 2; k++) {
      core_rng r = core_rng_keyed(9, (uint64_t)lo, 0, 0);
      for (int s = 0; s < 2; s++) {
        if (k == 1) layers_chunk_bind(&b, s, 0);
        fill_slot(both[k], s, &r);
        layers_chunk_forward(both[k], s);
        layers_chunk_backward_input(both[k], s, 0.1f);
        din[k][s] = malloc(sizeof(float) * (nin ? nin : 1));
        if (nin) memcpy(din[k][s], layers_chunk_grad_input(both[k], s), sizeof(float) * nin);
        if (k == 1) layers_chunk_bind(&b, s, -1); /* given back at I */
      }
      for (int s = 0; s < 2; s++) layers_chunk_backward_weight(both[k], s);
    }
    cr_assert(memcmp(a.grads, b.grads, sizeof(float) * a.nparams) == 0, "weight gradients differ (layers %d..)", lo);
    for (int s = 0; s < 2; s++) {
      cr_assert(memcmp(din[0][s], din[1][s], sizeof(float) * nin) == 0, "input gradient %d differs (layers %d..)", s, lo);
      free(din[0][s]), free(din[1][s]);
    }
    layers_chunk_free(&a), layers_chunk_free(&b);
  }
  layers_model_free(&m);
}

/* The block's scratch holds what its weight gradient runs again: N x hidden for the GELU, or a
 * LayerNorm's N x C output and its mean and rstd (2N). With hidden < 2 (d_model 1, mlp_ratio 1)
 * the second is the larger, and the scratch was sized by the first: ASan saw layernorm_forward
 * write past it at B = 8, T = 1. */
Test(gradcheck, block_scratch_holds_a_recomputed_layernorm) {
  const char *text = "model = { vocab_size = 5; seq_len = 1; d_model = 1; n_heads = 1; layers = (\n"
                     "  { type = \"embedding\"; },\n"
                     "  { type = \"transformer_block\"; mlp_ratio = 1; recompute_layernorm = true; },\n"
                     "  { type = \"lm_head\"; }, { type = \"cross_entropy\"; } ); };\n";
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, text, "d1.cfg"), CORE_OK, "%s", core_error_msg());
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 5), CORE_OK, "%s", core_error_msg());
  core_config_free(c);
  const layer *l = &m.layers[1];
  cr_assert_eq(l->hidden, 1);
  for (int b = 1; b <= 16; b *= 2)
    cr_assert_geq(l->type->scratch_floats(l, b, 1), (size_t)b * (l->C + 2), "B=%d: scratch %zu floats", b,
                  l->type->scratch_floats(l, b, 1));
  layers_model_free(&m);
}

/* A layer name longer than the 63 characters a layer keeps was cut short, and a tie naming it
 * whole then "names no embedding layer"; such a name is refused, naming its place. */
Test(gradcheck, long_layer_names_are_refused) {
  char name[80], text[512];
  memset(name, 'e', 70), name[70] = 0;
  snprintf(text, sizeof text, "model = { vocab_size = 5; seq_len = 4; d_model = 8; n_heads = 2; layers = (\n"
           "  { type = \"embedding\"; name = \"%s\"; },\n  { type = \"lm_head\"; tie = \"%s\"; },\n"
           "  { type = \"cross_entropy\"; } ); };\n", name, name);
  core_config *c;
  cr_assert_eq(core_config_load_string(&c, text, "long.cfg"), CORE_OK, "%s", core_error_msg());
  layers_model m = {0};
  cr_assert_eq(layers_model_build(&m, c, 5), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "model.layers.[0].name is 70 characters; a name may have at most 63 (long.cfg:2)"),
            "%s", core_error_msg());
  core_config_free(c);
}

/* recompute_gelu and recompute_layernorm: a block that keeps its MLP's pre-activation only, or no
 * LayerNorm output, or both, and runs them again for the weight gradients gives the same bits
 * (weight gradients, input gradients) as one that keeps them, in the zero-bubble order (F0 F1 I0
 * I1 W0 W1) with the aside parts given back at I (where a plain block keeps the pre-activation: W
 * must not need it there), and each slot is smaller by what it leaves out: N x hidden floats, 2 N
 * x C, or both. */
Test(gradcheck, recompute_same_bits_smaller_slots) {
  static const char *const keys[] = {"recompute_gelu = true;", "recompute_layernorm = true;",
                                     "recompute_gelu = true; recompute_layernorm = true;"};
  layers_model m = build();
  const size_t N = B * T, C = (size_t)m.layers[1].C, H = (size_t)m.layers[1].hidden;
  const size_t less[] = {N * H, 2 * N * C, N * H + 2 * N * C};
  for (int v = 0; v < 3; v++) {
    layers_model mr = {0};
    const char *plain_blk = "{ type = \"transformer_block\"; }";
    const char *at = strstr(model_cfg, plain_blk);
    cr_assert(at);
    char text[2048];
    snprintf(text, sizeof text, "%.*s{ type = \"transformer_block\"; %s }%s", (int)(at - model_cfg), model_cfg, keys[v],
             at + strlen(plain_blk));
    core_config *c;
    cr_assert_eq(core_config_load_string(&c, text, "recompute.cfg"), CORE_OK, "%s", core_error_msg());
    cr_assert_eq(layers_model_build(&mr, c, 16), CORE_OK, "%s", core_error_msg());
    core_config_free(c);
    for (int lo = 0; lo <= 1; lo++) {
      layers_chunk a, b;
      cr_assert_eq(layers_chunk_init(&a, &m, lo, m.n, kernels_cpu_ops(), B, T, 2), CORE_OK);
      cr_assert_eq(layers_chunk_init(&b, &mr, lo, mr.n, kernels_cpu_ops(), B, T, 2), CORE_OK);
      cr_assert_eq(layers_chunk_aside_pool(&a, 2), CORE_OK);
      cr_assert_eq(layers_chunk_aside_pool(&b, 2), CORE_OK);
      cr_assert_eq(layers_chunk_slot_bytes(&a) - layers_chunk_slot_bytes(&b), sizeof(float) * less[v],
                   "%s: slots of %zu and %zu bytes", keys[v], layers_chunk_slot_bytes(&a), layers_chunk_slot_bytes(&b));
      layers_chunk *both[2] = {&a, &b};
      size_t nin = layers_chunk_io_floats(&a);
      float *din[2][2];
      for (int k = 0; k < 2; k++) {
        core_rng r = core_rng_keyed(11, (uint64_t)lo, 0, 0);
        for (int s = 0; s < 2; s++) fill_slot(both[k], s, &r);
        for (int s = 0; s < 2; s++) layers_chunk_bind(both[k], s, s), layers_chunk_forward(both[k], s);
        for (int s = 0; s < 2; s++) {
          layers_chunk_backward_input(both[k], s, 0.1f);
          din[k][s] = malloc(sizeof(float) * (nin ? nin : 1));
          if (nin) memcpy(din[k][s], layers_chunk_grad_input(both[k], s), sizeof(float) * nin);
          layers_chunk_bind(both[k], s, -1); /* given back at I */
        }
        for (int s = 0; s < 2; s++) layers_chunk_backward_weight(both[k], s);
      }
      cr_assert(memcmp(a.grads, b.grads, sizeof(float) * a.nparams) == 0, "%s: weight gradients differ (layers %d..)",
                keys[v], lo);
      for (int s = 0; s < 2; s++) {
        cr_assert(memcmp(din[0][s], din[1][s], sizeof(float) * nin) == 0, "%s: input gradient %d differs (layers %d..)",
                  keys[v], s, lo);
        free(din[0][s]), free(din[1][s]);
      }
      layers_chunk_free(&a), layers_chunk_free(&b);
    }
    layers_model_free(&mr);
  }
  layers_model_free(&m);
}

/* ZeRO-3 draws only its shard: every window of a chunk's initial parameters (across layer
 * boundaries, inside one matrix, one value) is the same bits as that part of the whole chunk's
 * init, and a sharded chunk holds no parameter or gradient buffer at all. */
Test(model, windowed_init_is_the_whole_init) {
  layers_model m = build();
  layers_chunk ch;
  cr_assert_eq(layers_chunk_init(&ch, &m, 0, m.n, NULL, B, T, 1), CORE_OK);
  size_t n = ch.nparams;
  float *part = malloc(sizeof(float) * n);
  for (int d = 1; d <= 7; d += 2) /* shards of d replicas, the last one short */
    for (int r = 0; r < d; r++) {
      size_t sh = (n + (size_t)d - 1) / (size_t)d, lo = (size_t)r * sh, hi = lo + sh > n ? n : lo + sh;
      memset(part, 0xff, sizeof(float) * n);
      layers_chunk_param_values(&ch, m.seed, lo, hi, part);
      cr_assert(memcmp(part, ch.params + lo, sizeof(float) * (hi - lo)) == 0, "shard %d of %d differs", r, d);
    }
  size_t cuts[][2] = {{0, 1}, {n - 1, n}, {ch.param_off[1] - 3, ch.param_off[1] + 5}, {17, n / 2 + 3}};
  for (int k = 0; k < 4; k++) {
    layers_chunk_param_values(&ch, m.seed, cuts[k][0], cuts[k][1], part);
    cr_assert(memcmp(part, ch.params + cuts[k][0], sizeof(float) * (cuts[k][1] - cuts[k][0])) == 0, "window %d", k);
  }
  layers_chunk sh;
  cr_assert_eq(layers_chunk_init_sharded(&sh, &m, 0, m.n, NULL, B, T, 1), CORE_OK);
  cr_assert_null(sh.params);
  cr_assert_null(sh.grads);
  cr_assert_eq(sh.nparams, n);
  for (int i = 0; i < sh.n; i++) cr_assert_null(sh.layers[i].params);
  layers_chunk_bind_params(&sh, ch.params);
  cr_assert_eq(sh.layers[2].params, ch.params + ch.param_off[2]);
  layers_chunk_bind_params(&sh, NULL);
  layers_chunk_free(&sh);
  free(part);
  layers_chunk_free(&ch);
  layers_model_free(&m);
}
