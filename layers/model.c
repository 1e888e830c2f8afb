/* layers/model.c: the registry that builds a model from model.* of the config, and chunks. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "layers/internal.h"

static const layer_type *const all_types[] = {
    &layers_embedding, &layers_block, &layers_attention, &layers_linear, &layers_relu,
    &layers_gelu, &layers_layernorm, &layers_lm_head, &layers_cross_entropy,
};

const layer_type *layers_find_type(const char *name) {
  for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++)
    if (strcmp(all_types[i]->name, name) == 0) return all_types[i];
  return NULL;
}

static int model_dims(layers_model *m, const core_config *c, int vocab_from_data) {
  int64_t V, T, C, NH, seed;
  int rc = core_config_get_int_range(c, "model.vocab_size", vocab_from_data, 1, 1 << 24, &V);
  if (!rc) rc = core_config_get_int_range(c, "model.seq_len", 64, 1, 1 << 16, &T);
  if (!rc) rc = core_config_get_int_range(c, "model.d_model", 64, 1, 1 << 16, &C);
  if (!rc) rc = core_config_get_int_range(c, "model.n_heads", 4, 1, 1 << 10, &NH);
  if (!rc) rc = core_config_get_int(c, "train.seed", 1337, &seed);
  if (rc) return rc;
  if (V < vocab_from_data) {
    char w[256];
    core_config_where(c, "model.vocab_size", -1, w, sizeof w);
    return core_error_set(CORE_EINPUT, "model.vocab_size = %lld is smaller than the data's vocabulary %d (%s)",
                          (long long)V, vocab_from_data, w);
  }
  m->V = (int)V, m->T = (int)T, m->C = (int)C, m->NH = (int)NH, m->seed = (uint64_t)seed;
  return CORE_OK;
}

/* Expands model.layers (with `repeat`) into m->layers; returns the config element of each. */
static int expand(layers_model *m, const core_config *c, int **elem_out) {
  int n = core_config_list_len(c, "model.layers"), total = 0, rc = CORE_OK;
  if (n == 0) {
    char w[256];
    if (core_config_where(c, "model.layers", -1, w, sizeof w) != CORE_OK) snprintf(w, sizeof w, "%s", core_config_name(c));
    return core_error_set(CORE_EINPUT, "model.layers is missing or empty (%s)", w);
  }
  for (int i = 0; i < n && !rc; i++) {
    int64_t rep;
    rc = core_config_elem_int(c, "model.layers", i, "repeat", 1, &rep);
    if (!rc && (rep < 1 || rep > 4096)) {
      char w[256]; /* the member's place: a --set of it leaves the element on its file line */
      core_config_elem_where(c, "model.layers", i, "repeat", w, sizeof w);
      rc = core_error_set(CORE_EINPUT, "model.layers.[%d].repeat must be in [1, 4096] (%s)", i, w);
    }
    total += (int)rep;
  }
  if (rc) return rc;
  m->layers = core_calloc((size_t)total, sizeof(layer));
  int *elem = core_malloc(sizeof(int) * (size_t)total);
  for (int i = 0; i < n && !rc; i++) {
    int64_t rep;
    const char *type, *name;
    core_config_elem_int(c, "model.layers", i, "repeat", 1, &rep);
    rc = core_config_elem_string(c, "model.layers", i, "type", NULL, &type);
    if (!rc) rc = core_config_elem_string(c, "model.layers", i, "name", NULL, &name);
    char w[96]; /* the layer's place: its type's (a --set of the type makes it another layer) */
    core_config_elem_where(c, "model.layers", i, "type", w, sizeof w);
    if (!rc && !type) rc = core_error_set(CORE_EINPUT, "model.layers.[%d] has no type (%s)", i, w);
    const layer_type *t = rc ? NULL : layers_find_type(type);
    if (!rc && !t)
      rc = core_error_set(CORE_EINPUT, "model.layers.[%d]: unknown layer type '%s' (%s); known: embedding, "
                          "transformer_block, causal_attention, linear, relu, gelu, layernorm, lm_head, "
                          "cross_entropy", i, type, w);
    /* a member only another type reads would be ignored without a word: an error, as an unknown key is */
    static const char *const own[][2] = {{"out", "linear"}, {"bias", "linear"}, {"eps", "layernorm"},
                                         {"mlp_ratio", "transformer_block"}, {"recompute_gelu", "transformer_block"},
                                         {"recompute_layernorm", "transformer_block"}};
    for (size_t k = 0; t && !rc && k < sizeof own / sizeof own[0]; k++) {
      char path[128], kw[256];
      snprintf(path, sizeof path, "model.layers.[%d].%s", i, own[k][0]);
      if (strcmp(t->name, own[k][1]) == 0 || !core_config_has(c, path)) continue;
      core_config_elem_where(c, "model.layers", i, own[k][0], kw, sizeof kw);
      rc = core_error_set(CORE_EINPUT, "model.layers.[%d].%s is a key of %s layers; this layer is a %s (%s)", i,
                          own[k][0], own[k][1], t->name, kw);
    }
    if (!rc && name && strlen(name) + (rep > 1 ? 11 : 0) >= sizeof m->layers[0].name) { /* kept whole: a tie names it */
      char wn[256];
      core_config_elem_where(c, "model.layers", i, "name", wn, sizeof wn);
      rc = core_error_set(CORE_EINPUT, "model.layers.[%d].name is %zu characters; a name may have at most %zu%s (%s)", i,
                          strlen(name), sizeof m->layers[0].name - 1 - (rep > 1 ? 11 : 0),
                          rep > 1 ? " with its repeat's .N" : "", wn);
    }
    for (int r = 0; r < rep && !rc; r++) {
      layer *l = &m->layers[m->n];
      l->type = t, l->index = m->n, l->tied_to = -1;
      snprintf(l->where, sizeof l->where, "%s", w);
      if (name && rep == 1) snprintf(l->name, sizeof l->name, "%s", name);
      else if (name) snprintf(l->name, sizeof l->name, "%s.%d", name, r);
      else snprintf(l->name, sizeof l->name, "%s%d", t->name, m->n);
      elem[m->n++] = i;
    }
  }
  *elem_out = elem;
  return rc;
}

static int chain(layers_model *m, const core_config *c, const int *elem) {
  int nblocks = 0;
  for (int i = 0; i < m->n; i++) nblocks += m->layers[i].type == &layers_block;
  for (int i = 0; i < m->n; i++) {
    layer *l = &m->layers[i], *prev = i ? &m->layers[i - 1] : NULL;
    l->T = m->T, l->C = m->C, l->V = m->V, l->NH = m->NH, l->nblocks = nblocks;
    if ((l->type->input == LAYER_IN_TOKENS) != (i == 0))
      return core_error_set(CORE_EINPUT, i == 0 ? "layer '%s' (%s) is first but does not take token ids; "
                            "the first layer must be an embedding" : "layer '%s' (%s) takes token ids, so it "
                            "must be the first layer", l->name, l->where);
    if (l->type == &layers_cross_entropy && i + 1 < m->n) /* its backward ignores what comes after it */
      return core_error_set(CORE_EINPUT, "layer '%s' (%s) is a cross_entropy before the last layer: the loss "
                            "must be the last layer, and only the last", l->name, l->where);
    l->in_width = prev ? prev->out_width : 0;
    l->out_width = l->in_width;
    if (l->type->configure) {
      int rc = l->type->configure(l, c, elem[i]);
      if (rc) return rc;
    }
    if (prev && prev->type == &layers_lm_head && l->type != &layers_cross_entropy)
      return core_error_set(CORE_EINPUT, "layer '%s' (%s) follows the lm_head '%s', which must feed the "
                            "cross_entropy (its logits' rows are padded for it)", l->name, l->where, prev->name);
    int want = (l->type == &layers_block || l->type == &layers_attention) ? m->C
               : l->type == &layers_cross_entropy ? (prev && prev->type == &layers_lm_head ? layers_logits_ld(m->V) : m->V)
                                                  : -1;
    if (prev && want > 0 && prev->out_width != want)
      return core_error_set(CORE_EINPUT, "layer '%s' (%s) takes width %d, but the layer before it, '%s' (%s), "
                            "gives %d: the shapes do not chain", l->name, l->where, want, prev->name,
                            prev->where, prev->out_width);
  }
  layer *last = &m->layers[m->n - 1];
  if (last->type != &layers_cross_entropy)
    return core_error_set(CORE_EINPUT, "the last layer, '%s' (%s), must be cross_entropy (the loss)", last->name, last->where);
  return CORE_OK;
}

static int resolve_ties(layers_model *m, const core_config *c, const int *elem) {
  for (int i = 0; i < m->n; i++) {
    layer *l = &m->layers[i];
    const char *tie = NULL;
    int rc = core_config_elem_string(c, "model.layers", elem[i], "tie", NULL, &tie);
    if (rc) return rc;
    if (!tie) continue;
    char w[256]; /* where `tie` was set */
    core_config_elem_where(c, "model.layers", elem[i], "tie", w, sizeof w);
    if (l->type != &layers_lm_head)
      return core_error_set(CORE_EINPUT, "layer '%s' (%s): only an lm_head can be tied", l->name, w);
    for (int k = 0; k < m->n; k++)
      if (strcmp(m->layers[k].name, tie) == 0 && m->layers[k].type == &layers_embedding) l->tied_to = k;
    if (l->tied_to < 0)
      return core_error_set(CORE_EINPUT, "layer '%s' (%s): tie = \"%s\" names no embedding layer", l->name, w, tie);
    if (l->in_width != m->C)
      return core_error_set(CORE_EINPUT, "layer '%s' (%s): a tied head takes width %d, got %d", l->name, l->where, m->C, l->in_width);
  }
  return CORE_OK;
}

void layers_model_size_attention(layers_model *m, const char *backend, int precision, int B) {
  for (int i = 0; i < m->n; i++) {
    layer *l = &m->layers[i];
    if (l->type == &layers_attention || l->type == &layers_block)
      l->att_floats = kernels_attention_cache_floats(backend, precision, B, m->T, l->C, l->NH);
  }
}

int layers_model_build(layers_model *m, const core_config *c, int vocab_from_data) {
  if (m->built) return core_error_set(CORE_EINPUT, "the model is already built; build a model once");
  memset(m, 0, sizeof *m);
  int *elem = NULL;
  int rc = model_dims(m, c, vocab_from_data);
  if (!rc) rc = expand(m, c, &elem);
  if (!rc) rc = chain(m, c, elem);
  if (!rc) rc = resolve_ties(m, c, elem);
  for (int i = 0; i < m->n && !rc; i++) m->layers[i].nparams = m->layers[i].type->num_params(&m->layers[i]);
  free(elem);
  if (rc) {
    free(m->layers);
    memset(m, 0, sizeof *m);
    return rc;
  }
  m->built = 1;
  return CORE_OK;
}

void layers_model_free(layers_model *m) {
  free(m->layers);
  memset(m, 0, sizeof *m);
}

size_t layers_model_params(const layers_model *m) {
  size_t n = 0;
  for (int i = 0; i < m->n; i++) n += m->layers[i].nparams;
  return n;
}

/* ---- chunks ---- */

/* The table whose memory the chunk's buffers live in (chunks built only to measure sizes may
 * have none: host memory then). */
static const kernels_ops *mem(const layers_chunk *ch) { return ch->ops ? ch->ops : kernels_cpu_ops(); }

/* Zeroed backend memory, or NULL with *rc set (a GPU out of memory is an error, not a crash). */
static void *balloc(layers_chunk *ch, size_t bytes, const char *what, int *rc) {
  if (*rc) return NULL;
  void *p = mem(ch)->alloc(bytes ? bytes : sizeof(float));
  if (!p) *rc = core_error_set(CORE_ERUNTIME, "backend %s: out of memory allocating %zu bytes (%s of layers %d..%d)",
                               mem(ch)->name, bytes, what, ch->lo, ch->hi - 1);
  return p;
}

/* Whether layer l's weight gradient reads its input (then the input is kept to its W). */
static int w_reads_input(const layer *l) { return l->nparams > 0 && l->type->input == LAYER_IN_HIDDEN; }

static layers_buf put(size_t *sz, int part, size_t n) {
  layers_buf b = {sz[part], (uint8_t)part};
  sz[part] += n;
  return b;
}

/* Where a chunk's buffers go (o NULL: only count). */
typedef struct {
  layers_buf *in, *din, *out, *stash, *istash, *dout, *wstash; /* in, din: one; the others [n] */
} slot_places;

/* The activation layout of the n layers ls (a chunk), as two parts of a slot and sz[part] floats
 * each (sz[LAYERS_BWD]: the shared region). The home part holds what a weight gradient reads:
 * each weighted layer's input (a layer's output when the next layer's W reads it, the chunk's
 * input when the first layer's does) and output gradient, the stashes, the W stashes. The aside
 * part holds the rest: the I stashes (attention probabilities and the like), outputs no W reads
 * (the chunk's own output among them), gradients of layers without weights, the gradient of the
 * chunk's input. A layer whose stash is its input (stash_in_input) gets no stash: its stash is
 * the previous layer's output, or the slot's input when it is first; and the layer before it gets
 * no dout of its own, since backward_input writes din over the stash. shared: the W stashes, and
 * the douts of all but the last layer that have their own, go into one region for all slots. */
static void slot_layout(const layer *ls, int n, int B, int T, int shared, slot_places o, size_t sz[3]) {
  size_t N = (size_t)B * T;
  sz[0] = sz[1] = sz[2] = 0;
  layers_buf in = {0, LAYERS_HOME}, din = {0, LAYERS_ASIDE};
  if (ls[0].type->input != LAYER_IN_TOKENS) {
    size_t w = N * (size_t)ls[0].in_width;
    in = put(sz, w_reads_input(&ls[0]) ? LAYERS_HOME : LAYERS_ASIDE, w);
    din = put(sz, LAYERS_ASIDE, w);
  }
  if (o.in) *o.in = in, *o.din = din;
  layers_buf prev = in; /* the previous layer's output, the slot's input for the first */
  for (int i = 0; i < n; i++) {
    const layer *l = &ls[i], *nx = i + 1 < n ? &ls[i + 1] : NULL;
    size_t out_n = N * (size_t)l->out_width;
    int into_stash = nx && nx->type->stash_in_input; /* the next layer's stash, and our dout */
    layers_buf out = put(sz, nx && (w_reads_input(nx) || (into_stash && l->nparams)) ? LAYERS_HOME : LAYERS_ASIDE, out_n);
    layers_buf st = l->type->stash_in_input ? prev : put(sz, LAYERS_HOME, l->type->stash_floats(l, B, T));
    layers_buf ist = put(sz, LAYERS_ASIDE, l->type->istash_floats ? l->type->istash_floats(l, B, T) : 0);
    layers_buf d = into_stash ? out : shared && nx ? put(sz, LAYERS_BWD, out_n)
                 : put(sz, l->nparams ? LAYERS_HOME : LAYERS_ASIDE, out_n);
    layers_buf w = put(sz, shared ? LAYERS_BWD : LAYERS_HOME, l->type->wstash_floats(l, B, T));
    if (o.out) o.out[i] = out, o.stash[i] = st, o.istash[i] = ist, o.dout[i] = d, o.wstash[i] = w;
    prev = out;
  }
}

size_t layers_slot_parts(const layers_model *m, int lo, int hi, int B, int shared, size_t *home, size_t *aside,
                         size_t *bwd) {
  slot_places none = {0};
  size_t sz[3];
  slot_layout(m->layers + lo, hi - lo, B, m->T, shared, none, sz);
  if (home) *home = sz[LAYERS_HOME];
  if (aside) *aside = sz[LAYERS_ASIDE];
  if (bwd) *bwd = sz[LAYERS_BWD];
  return sz[LAYERS_HOME] + sz[LAYERS_ASIDE];
}

size_t layers_slot_floats(const layers_model *m, int lo, int hi, int B, int shared, size_t *bwd) {
  return layers_slot_parts(m, lo, hi, B, shared, NULL, NULL, bwd);
}

static slot_places chunk_places(layers_chunk *ch) {
  return (slot_places){&ch->in, &ch->din, ch->out, ch->stash, ch->istash, ch->dout, ch->wstash};
}

/* (Re)allocates the slots' two pools: nslots home parts, naside aside parts, slot s using aside
 * part s while there are as many. */
static void alloc_pools(layers_chunk *ch, int naside, int *rc) {
  mem(ch)->free(ch->slots), mem(ch)->free(ch->aside);
  ch->slots = ch->aside = NULL;
  ch->naside = naside;
  ch->slots = balloc(ch, sizeof(float) * (size_t)ch->nslots * ch->home_floats, "activation slots", rc);
  ch->aside = balloc(ch, sizeof(float) * (size_t)naside * ch->aside_floats, "activation slots' aside parts", rc);
  for (int s = 0; s < ch->nslots; s++) ch->bound[s] = s < naside ? s : -1;
}

static void set_layout(layers_chunk *ch, int shared) {
  size_t sz[3];
  slot_layout(ch->layers, ch->n, ch->B, ch->T, shared, chunk_places(ch), sz);
  ch->home_floats = sz[LAYERS_HOME], ch->aside_floats = sz[LAYERS_ASIDE], ch->bwd_floats = sz[LAYERS_BWD];
  ch->slot_floats = ch->home_floats + ch->aside_floats;
}

void layers_chunk_param_values(const layers_chunk *ch, uint64_t seed, size_t lo, size_t hi, float *out) {
  for (int i = 0; i < ch->n; i++) { /* each layer's part of [lo, hi), in the layer's own window */
    if (i == ch->tied_head) continue; /* its values are the embedding's wte, drawn by the same keys */
    size_t a = ch->param_off[i], b = a + ch->layers[i].nparams;
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    if (b <= a) continue;
    layers_window w = {.p = out + (a - lo), .lo = a - ch->param_off[i], .hi = b - ch->param_off[i]};
    ch->layers[i].type->init(&ch->layers[i], &w, seed);
  }
}

void layers_chunk_fold_tied(layers_chunk *ch, float *wte_grads) {
  if (ch->tied_head < 0) return;
  size_t n = ch->layers[ch->tied_head].nparams;
  ch->ops->axpy(wte_grads, 1.0f, ch->tied_grads, n);
  ch->ops->zero(ch->tied_grads, n);
}

void layers_chunk_bind_params(layers_chunk *ch, float *params) {
  ch->params = params;
  for (int i = 0; i < ch->n; i++) ch->layers[i].params = params ? params + ch->param_off[i] : NULL;
}

static int chunk_init(layers_chunk *ch, const layers_model *m, int lo, int hi, const kernels_ops *ops, int B, int T,
                      int nslots, int sharded);

int layers_chunk_init(layers_chunk *ch, const layers_model *m, int lo, int hi, const kernels_ops *ops,
                      int B, int T, int nslots) {
  return chunk_init(ch, m, lo, hi, ops, B, T, nslots, 0);
}

int layers_chunk_init_sharded(layers_chunk *ch, const layers_model *m, int lo, int hi, const kernels_ops *ops,
                              int B, int T, int nslots) {
  return chunk_init(ch, m, lo, hi, ops, B, T, nslots, 1);
}

static int chunk_init(layers_chunk *ch, const layers_model *m, int lo, int hi, const kernels_ops *ops, int B, int T,
                      int nslots, int sharded) {
  memset(ch, 0, sizeof *ch);
  if (lo < 0 || hi > m->n || lo >= hi) return core_error_set(CORE_EINPUT, "empty chunk [%d, %d)", lo, hi);
  ch->ops = ops, ch->lo = lo, ch->hi = hi, ch->n = hi - lo, ch->B = B, ch->T = T;
  ch->nslots = nslots > 0 ? nslots : 1;
  ch->layers = core_malloc(sizeof(layer) * (size_t)ch->n);
  memcpy(ch->layers, m->layers + lo, sizeof(layer) * (size_t)ch->n);
  for (int i = 0; i < ch->n; i++) { /* the attention cache this table keeps (its size depends on the path) */
    layer *l = &ch->layers[i];
    if ((l->type == &layers_attention || l->type == &layers_block) && ops && ops->attention_cache_floats)
      l->att_floats = ops->attention_cache_floats(B, T, l->C, l->NH);
  }
  ch->first_takes_tokens = ch->layers[0].type->input == LAYER_IN_TOKENS;
  ch->last_is_loss = ch->layers[ch->n - 1].type == &layers_cross_entropy;
  size_t N = (size_t)B * T, scratch = 0;
  int rc = CORE_OK;
  ch->param_off = core_malloc(sizeof(size_t) * (size_t)ch->n);
  ch->tied_head = -1;
  for (int i = 0; i < ch->n; i++) {
    int k = ch->layers[i].tied_to - lo; /* a tied head whose embedding is in this chunk shares its wte */
    if (ch->layers[i].tied_to >= 0 && k >= 0 && k < i) {
      ch->tied_head = i, ch->param_off[i] = ch->param_off[k]; /* wte is the embedding's first V*C */
      continue;
    }
    ch->param_off[i] = ch->nparams, ch->nparams += ch->layers[i].nparams;
  }
  /* one flat buffer each in the backend's memory; layers hold views. Parameters are
   * initialised from (seed, layer index) on the host, then copied over. Sharded (ZeRO-3): no
   * buffer at all here; the owner binds a gathered one before each use. */
  if (!sharded) {
    float *host = core_calloc(ch->nparams ? ch->nparams : 1, sizeof(float));
    layers_chunk_param_values(ch, m->seed, 0, ch->nparams, host);
    ch->params = balloc(ch, sizeof(float) * ch->nparams, "parameters", &rc);
    ch->grads = balloc(ch, sizeof(float) * ch->nparams, "gradients", &rc);
    if (!rc) mem(ch)->to_device(ch->params, host, sizeof(float) * ch->nparams);
    free(host);
  }
  if (ch->tied_head >= 0) /* the head's own gradient, added into wte's at REDUCE_TIED_GRADS */
    ch->tied_grads = balloc(ch, sizeof(float) * ch->layers[ch->tied_head].nparams, "tied head gradients", &rc);
  for (int i = 0; i < ch->n && !rc; i++) {
    layer *l = &ch->layers[i];
    l->params = ch->params ? ch->params + ch->param_off[i] : NULL;
    l->grads = ch->grads ? ch->grads + ch->param_off[i] : NULL;
  }
  if (!rc && ch->tied_head >= 0) ch->layers[ch->tied_head].grads = ch->tied_grads;
  size_t nb = sizeof(layers_buf) * (size_t)ch->n;
  ch->out = core_malloc(nb), ch->stash = core_malloc(nb), ch->istash = core_malloc(nb);
  ch->dout = core_malloc(nb), ch->wstash = core_malloc(nb);
  ch->bound = core_malloc(sizeof(int) * (size_t)ch->nslots);
  set_layout(ch, 0);
  ch->in_floats = ch->first_takes_tokens ? 0 : N * (size_t)ch->layers[0].in_width;
  for (int i = 0; i < ch->n; i++) {
    size_t s = ch->layers[i].type->scratch_floats(&ch->layers[i], B, T);
    scratch = s > scratch ? s : scratch;
  }
  alloc_pools(ch, ch->nslots, &rc);
  ch->tokens = balloc(ch, sizeof(int32_t) * (size_t)ch->nslots * N, "tokens", &rc);
  ch->targets = balloc(ch, sizeof(int32_t) * (size_t)ch->nslots * N, "targets", &rc);
  ch->scratch = balloc(ch, sizeof(float) * (scratch ? scratch : 1), "scratch", &rc);
  ch->host_losses = core_calloc(N ? N : 1, sizeof(float));
  if (rc) layers_chunk_free(ch);
  return rc;
}

void layers_chunk_free(layers_chunk *ch) {
  const kernels_ops *o = mem(ch);
  free(ch->layers), free(ch->param_off), free(ch->out), free(ch->stash), free(ch->istash), free(ch->dout);
  free(ch->wstash), free(ch->bound);
  free(ch->host_losses);
  o->free(ch->params), o->free(ch->grads), o->free(ch->slots), o->free(ch->aside), o->free(ch->tokens);
  o->free(ch->targets), o->free(ch->scratch), o->free(ch->ws), o->free(ch->bwd), o->free(ch->tied_grads);
  memset(ch, 0, sizeof *ch);
}

void layers_chunk_external_grads(layers_chunk *ch, float *(*dest)(void *ctx, size_t off, size_t n), void *ctx) {
  mem(ch)->free(ch->grads);
  ch->grads = NULL;
  for (int i = 0; i < ch->n; i++) ch->layers[i].grads = i == ch->tied_head ? ch->tied_grads : NULL;
  ch->grad_dest = dest, ch->grad_ctx = ctx;
}

int layers_chunk_checkpoint(layers_chunk *ch) {
  if (ch->ckpt) return CORE_OK;
  if (ch->bwd) return core_error_set(CORE_EINPUT, "a chunk that shares its backward buffers cannot be checkpointed");
  int rc = CORE_OK;
  ch->ckpt = 1;
  /* one full layout, shared: its home part first, then its aside part */
  ch->ws = balloc(ch, sizeof(float) * ch->slot_floats, "checkpointing workspace", &rc);
  ch->ws_aside = ch->home_floats;
  /* a slot: the input and the output's gradient (home), the input's gradient and the output */
  ch->home_floats = ch->aside_floats = ch->in_floats + layers_chunk_out_floats(ch);
  ch->slot_floats = ch->home_floats + ch->aside_floats;
  alloc_pools(ch, ch->naside, &rc);
  return rc;
}

int layers_chunk_share_backward(layers_chunk *ch) {
  if (ch->ckpt) return core_error_set(CORE_EINPUT, "a checkpointed chunk shares its workspace already");
  if (ch->bwd) return CORE_OK;
  int rc = CORE_OK;
  set_layout(ch, 1);
  alloc_pools(ch, ch->naside, &rc);
  ch->bwd = balloc(ch, sizeof(float) * ch->bwd_floats, "shared backward buffers", &rc);
  return rc;
}

int layers_chunk_aside_pool(layers_chunk *ch, int naside) {
  if (naside == ch->naside) return CORE_OK;
  if (naside < 1) naside = 1;
  int rc = CORE_OK;
  alloc_pools(ch, naside, &rc);
  return rc;
}

void layers_chunk_bind(layers_chunk *ch, int slot, int aside) {
  CORE_ASSERT(slot >= 0 && slot < ch->nslots && aside >= -1 && aside < ch->naside);
  ch->bound[slot] = aside;
}

static float *home_of(const layers_chunk *ch, int slot) { return ch->slots + (size_t)slot * ch->home_floats; }
/* NULL while the slot has no aside part: what only I reads is gone (a W must not look). */
static float *aside_of(const layers_chunk *ch, int slot) {
  return ch->bound[slot] < 0 ? NULL : ch->aside + (size_t)ch->bound[slot] * ch->aside_floats;
}
/* A buffer of the slot's layout (or, checkpointing, of the workspace's); NULL in a missing part. */
static float *at(const layers_chunk *ch, int slot, layers_buf b) {
  if (b.part == LAYERS_BWD) return ch->bwd + b.off;
  if (ch->ckpt) return ch->ws + (b.part == LAYERS_ASIDE ? ch->ws_aside : 0) + b.off;
  float *base = b.part == LAYERS_HOME ? home_of(ch, slot) : aside_of(ch, slot);
  return base ? base + b.off : NULL;
}
float *layers_chunk_input(const layers_chunk *ch, int slot) {
  return ch->ckpt ? home_of(ch, slot) : at(ch, slot, ch->in);
}
float *layers_chunk_grad_input(const layers_chunk *ch, int slot) {
  return ch->ckpt ? aside_of(ch, slot) : at(ch, slot, ch->din);
}
float *layers_chunk_output(const layers_chunk *ch, int slot) {
  return ch->ckpt ? aside_of(ch, slot) + ch->in_floats : at(ch, slot, ch->out[ch->n - 1]);
}
float *layers_chunk_grad_output(const layers_chunk *ch, int slot) {
  return ch->ckpt ? home_of(ch, slot) + ch->in_floats : at(ch, slot, ch->dout[ch->n - 1]);
}
float *layers_chunk_layer_output(const layers_chunk *ch, int slot, int i) {
  CORE_ASSERT(!ch->ckpt && i >= 0 && i < ch->n);
  return at(ch, slot, ch->out[i]);
}
int32_t *layers_chunk_tokens(const layers_chunk *ch, int slot) { return ch->tokens + (size_t)slot * ch->B * ch->T; }
int32_t *layers_chunk_targets(const layers_chunk *ch, int slot) { return ch->targets + (size_t)slot * ch->B * ch->T; }
size_t layers_chunk_io_floats(const layers_chunk *ch) { return ch->in_floats; }
size_t layers_chunk_out_floats(const layers_chunk *ch) {
  return (size_t)ch->B * ch->T * (size_t)ch->layers[ch->n - 1].out_width;
}
size_t layers_chunk_slot_bytes(const layers_chunk *ch) { return ch->slot_floats * sizeof(float); }
size_t layers_chunk_aside_bytes(const layers_chunk *ch) { return ch->aside_floats * sizeof(float); }

/* The io of layer i for a slot: inputs are the previous layer's output (or the slot's input).
 * With checkpointing the layers work in the workspace, which has the full layout. */
static layer_io io_of(const layers_chunk *ch, int slot, int i) {
  layer_io io = {.B = ch->B, .T = ch->T, .tokens = layers_chunk_tokens(ch, slot),
                 .targets = layers_chunk_targets(ch, slot), .scratch = ch->scratch, .round = ch->act_round};
  io.in = i ? at(ch, slot, ch->out[i - 1]) : (ch->first_takes_tokens ? NULL : at(ch, slot, ch->in));
  io.out = at(ch, slot, ch->out[i]);
  io.stash = at(ch, slot, ch->stash[i]);
  io.istash = at(ch, slot, ch->istash[i]);
  io.dout = at(ch, slot, ch->dout[i]);
  io.din = i ? at(ch, slot, ch->dout[i - 1]) : at(ch, slot, ch->din);
  io.wstash = at(ch, slot, ch->wstash[i]);
  return io;
}

static void round_store(const layers_chunk *ch, float *x, size_t n) {
  if (ch->act_round == 1) ch->ops->round_bf16(x, n);
  else ch->ops->round_fp16(x, n);
}

/* Layer i's output is rounded as stored unless it is the losses (they stay fp32) or the logits
 * of a cross_entropy in the same chunk, which rounds them as it reads them (the same values,
 * one pass over B x T x V fewer). Its input gradient, likewise, is rounded as it is written. */
static int rounds_output(const layers_chunk *ch, int i) {
  return ch->act_round && ch->layers[i].type != &layers_cross_entropy &&
         !(i + 1 < ch->n && ch->layers[i + 1].type == &layers_cross_entropy);
}

static void run_forward(layers_chunk *ch, int slot) {
  if (ch->ckpt) ch->ops->copy(at(ch, slot, ch->in), layers_chunk_input(ch, slot), ch->in_floats);
  for (int i = 0; i < ch->n; i++) {
    layer_io io = io_of(ch, slot, i);
    ch->layers[i].type->forward(&ch->layers[i], ch->ops, &io);
    if (rounds_output(ch, i)) round_store(ch, io.out, (size_t)ch->B * ch->T * (size_t)ch->layers[i].out_width);
  }
}

void layers_chunk_forward(layers_chunk *ch, int slot) {
  run_forward(ch, slot);
  if (ch->ckpt) /* keep only the output */
    ch->ops->copy(layers_chunk_output(ch, slot), at(ch, slot, ch->out[ch->n - 1]), layers_chunk_out_floats(ch));
}

void layers_chunk_backward_input(layers_chunk *ch, int slot, float grad_scale) {
  if (ch->ckpt) { /* recompute the forward (same bits), then take the received gradient */
    run_forward(ch, slot);
    ch->ops->copy(at(ch, slot, ch->dout[ch->n - 1]), layers_chunk_grad_output(ch, slot), layers_chunk_out_floats(ch));
  }
  for (int i = ch->n - 1; i >= 0; i--) {
    layer_io io = io_of(ch, slot, i);
    io.grad_scale = grad_scale;
    if (i == 0 && ch->first_takes_tokens) continue; /* no gradient w.r.t. token ids */
    ch->layers[i].type->backward_input(&ch->layers[i], ch->ops, &io);
    if (ch->act_round && ch->layers[i].type != &layers_cross_entropy)
      round_store(ch, io.din, (size_t)ch->B * ch->T * (size_t)ch->layers[i].in_width);
  }
  if (ch->ckpt) ch->ops->copy(layers_chunk_grad_input(ch, slot), at(ch, slot, ch->din), ch->in_floats);
}

void layers_chunk_backward_weight(layers_chunk *ch, int slot) {
  for (int i = ch->n - 1; i >= 0; i--) {
    layer_io io = io_of(ch, slot, i);
    layer *l = &ch->layers[i];
    if (ch->grad_dest && l->nparams && i != ch->tied_head) l->grads = ch->grad_dest(ch->grad_ctx, ch->param_off[i], l->nparams);
    ch->layers[i].type->backward_weight(&ch->layers[i], ch->ops, &io);
  }
}

double layers_chunk_loss_sum(const layers_chunk *ch, int slot) {
  float *l = ch->host_losses;
  ch->ops->to_host(l, layers_chunk_output(ch, slot), sizeof(float) * (size_t)ch->B * ch->T);
  double s = 0;
  for (int i = 0; i < ch->B * ch->T; i++) s += l[i];
  return s;
}

void layers_chunk_set_batch(layers_chunk *ch, int slot, const int32_t *tokens, const int32_t *targets) {
  size_t bytes = sizeof(int32_t) * (size_t)ch->B * ch->T;
  if (tokens) mem(ch)->to_device(layers_chunk_tokens(ch, slot), tokens, bytes);
  if (targets) mem(ch)->to_device(layers_chunk_targets(ch, slot), targets, bytes);
}

void layers_decay_mask(const layer *l, uint8_t *mask) {
  size_t C = (size_t)l->C, H = (size_t)l->hidden, n = l->nparams;
  memset(mask, 0, n);
  if (l->type == &layers_embedding || l->type == &layers_lm_head) {
    memset(mask, 1, n);
  } else if (l->type == &layers_linear) {
    memset(mask, 1, (size_t)l->out_width * l->in_width);
  } else if (l->type == &layers_attention || l->type == &layers_block) {
    int full = l->type == &layers_block;
    size_t at = full ? 2 * C : 0;          /* ln1 */
    memset(mask + at, 1, 3 * C * C), at += 3 * C * C + 3 * C; /* wqkv, bqkv */
    memset(mask + at, 1, C * C), at += C * C + C;             /* wproj, bproj */
    if (full) {
      at += 2 * C;                                             /* ln2 */
      memset(mask + at, 1, H * C), at += H * C + H;            /* wfc, bfc */
      memset(mask + at, 1, C * H);                             /* wfp */
    }
  }
}
