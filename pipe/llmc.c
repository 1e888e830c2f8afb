/* pipe/llmc.c: llm.c's GPT-2 checkpoints in and out (see llmc.h). */
#include "pipe/llmc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"

enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPW, FCPB, LNFW, LNFB, NT };

/* values of each tensor (all layers) */
static void sizes(int Vp, int maxT, int L, int C, long long *n) {
  long long c = C, l = L;
  n[WTE] = (long long)Vp * c, n[WPE] = (long long)maxT * c;
  n[LN1W] = n[LN1B] = n[LN2W] = n[LN2B] = l * c;
  n[QKVW] = l * 3 * c * c, n[QKVB] = l * 3 * c;
  n[PROJW] = l * c * c, n[PROJB] = l * c;
  n[FCW] = l * 4 * c * c, n[FCB] = l * 4 * c;
  n[FCPW] = l * c * 4 * c, n[FCPB] = l * c;
  n[LNFW] = n[LNFB] = c;
}

int pipe_llmc_open(pipe_llmc *h, const char *path) {
  memset(h, 0, sizeof *h);
  snprintf(h->path, sizeof h->path, "%s", path);
  h->f = fopen(path, "rb");
  if (!h->f) return core_error_set(CORE_EINPUT, "cannot open %s: %s", path, strerror(errno));
  int32_t hd[256];
  if (fread(hd, sizeof(int32_t), 256, h->f) != 256) {
    int err = ferror(h->f) ? errno : 0; /* a directory opens, then cannot be read (EISDIR) */
    pipe_llmc_close(h);
    if (err) return core_error_set(CORE_EINPUT, "cannot read %s: %s", path, strerror(err));
    return core_error_set(CORE_EINPUT, "%s: shorter than llm.c's 1024-byte header", path);
  }
  if (hd[0] != PIPE_LLMC_MAGIC) {
    pipe_llmc_close(h);
    return core_error_set(CORE_EINPUT, "%s: not an llm.c GPT-2 checkpoint (magic %d, expected %d)", path, hd[0],
                          PIPE_LLMC_MAGIC);
  }
  h->version = hd[1], h->maxT = hd[2], h->V = hd[3], h->L = hd[4], h->NH = hd[5], h->C = hd[6], h->Vp = hd[7];
  if (h->version != 3 && h->version != 5) {
    pipe_llmc_close(h);
    return core_error_set(CORE_EINPUT, "%s: llm.c checkpoint version %d (3: fp32 and 5: bf16 are read)", path,
                          h->version);
  }
  if (h->Vp == 0) h->Vp = h->V; /* older files before the padded vocabulary */
  if (h->maxT < 1 || h->V < 1 || h->L < 1 || h->NH < 1 || h->C < 1 || h->Vp < h->V || h->C % h->NH ||
      h->maxT > 1 << 20 || h->V > 1 << 24 || h->Vp > 1 << 24 || h->L > 4096 || h->C > 1 << 16) {
    pipe_llmc_close(h);
    return core_error_set(CORE_EINPUT, "%s: implausible header: max_seq_len %d, vocab_size %d, padded %d, layers %d, "
                          "heads %d, channels %d", path, h->maxT, h->V, h->Vp, h->L, h->NH, h->C);
  }
  long long n[NT], at = 0;
  sizes(h->Vp, h->maxT, h->L, h->C, n);
  for (int k = 0; k < NT; k++) h->off[k] = at, at += n[k];
  long long esize = h->version == 3 ? 4 : 2;
  if (fseek(h->f, 0, SEEK_END) != 0 || ftell(h->f) != 1024 + at * esize) {
    long long len = ftell(h->f);
    pipe_llmc_close(h);
    return core_error_set(CORE_EINPUT, "%s: %lld bytes, but its header describes %lld (1024 + %lld values of %lld bytes)",
                          path, len, 1024 + at * esize, at, esize);
  }
  return CORE_OK;
}

void pipe_llmc_close(pipe_llmc *h) {
  if (h->f) fclose(h->f);
  h->f = NULL;
}

static int is(const layer *l, const char *type) { return strcmp(l->type->name, type) == 0; }

int pipe_llmc_check_model(const pipe_llmc *h, const layers_model *m) {
  int L = m->n - 4;
  if (m->n < 5 || !is(&m->layers[0], "embedding") || !is(&m->layers[m->n - 3], "layernorm") ||
      !is(&m->layers[m->n - 2], "lm_head") || !is(&m->layers[m->n - 1], "cross_entropy") ||
      m->layers[m->n - 2].tied_to != 0)
    return core_error_set(CORE_EINPUT, "%s: llm.c's GPT-2 needs model.layers = embedding, transformer_block x L, "
                          "layernorm, lm_head tied to the embedding, cross_entropy", h->path);
  for (int i = 1; i <= L; i++)
    if (!is(&m->layers[i], "transformer_block"))
      return core_error_set(CORE_EINPUT, "%s: layer %d ('%s', %s) is a %s, llm.c's GPT-2 has transformer blocks there",
                            h->path, i, m->layers[i].name, m->layers[i].where, m->layers[i].type->name);
  if (L != h->L)
    return core_error_set(CORE_EINPUT, "%s: the file holds %d transformer blocks, the model %d (model.layers)", h->path,
                          h->L, L);
  const layer *e = &m->layers[0];
  if (e->V != h->V || e->C != h->C)
    return core_error_set(CORE_EINPUT, "%s: wte: the file holds [%d, %d] (vocab_size, channels), the model [%d, %d] "
                          "(model.vocab_size, model.d_model)", h->path, h->V, h->C, e->V, e->C);
  if (e->T != h->maxT)
    return core_error_set(CORE_EINPUT, "%s: wpe: the file holds [%d, %d], the model [%d, %d] (model.seq_len must be "
                          "%d)", h->path, h->maxT, h->C, e->T, e->C, h->maxT);
  for (int i = 1; i <= L; i++) {
    const layer *b = &m->layers[i];
    if (b->C != h->C || b->NH != h->NH || b->hidden != 4 * h->C)
      return core_error_set(CORE_EINPUT, "%s: block %d ('%s'): the file's has width %d, %d heads, MLP %d; the model's "
                            "%d, %d, %d (model.d_model, model.n_heads, the block's hidden)", h->path, i - 1, b->name,
                            h->C, h->NH, 4 * h->C, b->C, b->NH, b->hidden);
  }
  return CORE_OK;
}

int pipe_gpt2_check_shape(const layers_model *m, const char *name) {
  const char *want = "embedding, transformer_block x L, layernorm, lm_head tied to the embedding, cross_entropy";
  int n = m->n;
  if (n < 5)
    return core_error_set(CORE_EINPUT, "%s: the model is not GPT-2-shaped (%s): it has %d layers, GPT-2 at least 5",
                          name, want, n);
  for (int i = 0; i < n; i++) {
    const layer *l = &m->layers[i];
    const char *type = i == 0 ? "embedding" : i == n - 3 ? "layernorm" : i == n - 2 ? "lm_head" : i == n - 1 ? "cross_entropy"
                                                                                                     : "transformer_block";
    if (!is(l, type))
      return core_error_set(CORE_EINPUT, "%s: the model is not GPT-2-shaped (%s): layer %d ('%s') is a %s, GPT-2 has "
                            "a %s there", name, want, i, l->name, l->type->name, type);
    if (i == n - 2 && l->tied_to != 0)
      return core_error_set(CORE_EINPUT, "%s: the model is not GPT-2-shaped (%s): its lm_head '%s' is not tied to the "
                            "embedding '%s'", name, want, l->name, m->layers[0].name);
    if (i == n - 3 && l->eps != 1e-5) /* neither file records it: a converted model would normalize otherwise */
      return core_error_set(CORE_EINPUT, "%s: the model is not GPT-2-shaped (%s): its final layernorm '%s' has eps %g, "
                            "GPT-2's is 1e-5 (neither llm.c's file nor safetensors records it)", name, want, l->name, l->eps);
    if (i > 0 && i < n - 3 && l->hidden != 4 * l->C)
      return core_error_set(CORE_EINPUT, "%s: the model is not GPT-2-shaped (%s): block '%s' (layer %d) has an MLP of "
                            "%d, GPT-2's is 4 x d_model = %d", name, want, l->name, i, l->hidden, 4 * l->C);
  }
  return CORE_OK;
}

/* count values of the file from value `at` (fp32 or bf16) into dst as fp32 */
static int read_values(const pipe_llmc *h, long long at, size_t count, float *dst) {
  if (!count) return CORE_OK;
  long long esize = h->version == 3 ? 4 : 2;
  if (fseek(h->f, 1024 + at * esize, SEEK_SET) != 0) return core_error_set(CORE_ERUNTIME, "%s: seek failed", h->path);
  if (h->version == 3) {
    if (fread(dst, sizeof(float), count, h->f) != count) return core_error_set(CORE_EINPUT, "%s: short read", h->path);
    return CORE_OK;
  }
  uint16_t buf[4096];
  for (size_t done = 0; done < count;) {
    size_t k = count - done < 4096 ? count - done : 4096;
    if (fread(buf, sizeof(uint16_t), k, h->f) != k) return core_error_set(CORE_EINPUT, "%s: short read", h->path);
    for (size_t i = 0; i < k; i++) dst[done + i] = kernels_bf16_to_f32(buf[i]);
    done += k;
  }
  return CORE_OK;
}

/* The file region behind segment k of a layer's flat parameters: a list of (file value, count). */
typedef struct {
  long long at;
  size_t n;
} seg;

static int layer_segments(const pipe_llmc *h, const layers_model *m, int li, seg *s) {
  size_t C = (size_t)h->C;
  if (li == 0) { /* wte's first V rows, then wpe */
    s[0] = (seg){h->off[WTE], (size_t)h->V * C}, s[1] = (seg){h->off[WPE], (size_t)h->maxT * C};
    return 2;
  }
  if (li == m->n - 2) { /* the tied head: wte */
    s[0] = (seg){h->off[WTE], (size_t)h->V * C};
    return 1;
  }
  if (li == m->n - 3) {
    s[0] = (seg){h->off[LNFW], C}, s[1] = (seg){h->off[LNFB], C};
    return 2;
  }
  if (li >= 1 && li <= h->L) { /* block li - 1: its slice of each stacked tensor, in llm.c's order */
    long long n[NT];
    sizes(h->Vp, h->maxT, h->L, h->C, n);
    int k = 0;
    for (int t = LN1W; t <= FCPB; t++) {
      size_t per = (size_t)(n[t] / h->L);
      s[k++] = (seg){h->off[t] + (long long)(li - 1) * (long long)per, per};
    }
    return k;
  }
  return 0;
}

int pipe_llmc_read_layer(const pipe_llmc *h, const layers_model *m, int li, size_t lo, size_t hi, float *dst) {
  seg s[NT];
  int ns = layer_segments(h, m, li, s);
  size_t at = 0; /* the segment's first value in the layer's flat parameters */
  for (int k = 0; k < ns; at += s[k].n, k++) {
    size_t a = at > lo ? at : lo, b = at + s[k].n < hi ? at + s[k].n : hi;
    if (b <= a) continue;
    int rc = read_values(h, s[k].at + (long long)(a - at), b - a, dst + (a - lo));
    if (rc) return rc;
  }
  if (at != m->layers[li].nparams)
    return core_error_set(CORE_EINPUT, "%s: layer %d ('%s') has %zu parameters, the file's tensors for it %zu", h->path,
                          li, m->layers[li].name, m->layers[li].nparams, at);
  return CORE_OK;
}

int pipe_llmc_write(const char *path, const layers_model *m, float *const *params) {
  const layer *e = &m->layers[0];
  pipe_llmc h = {.version = 3, .maxT = e->T, .V = e->V, .L = m->n - 4, .NH = m->n > 1 ? m->layers[1].NH : 0,
                 .C = e->C, .Vp = (e->V + 127) / 128 * 128};
  snprintf(h.path, sizeof h.path, "%s", path);
  int rc = pipe_llmc_check_model(&h, m);
  if (rc) return rc;
  long long n[NT];
  sizes(h.Vp, h.maxT, h.L, h.C, n);
  char *tmp = core_str_join(path, ".tmp");
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    core_error_set(CORE_ERUNTIME, "cannot write %s: %s", tmp, strerror(errno));
    free(tmp);
    return CORE_ERUNTIME;
  }
  int32_t hd[256] = {PIPE_LLMC_MAGIC, 3, h.maxT, h.V, h.L, h.NH, h.C, h.Vp};
  int ok = fwrite(hd, sizeof hd, 1, f) == 1;
  size_t C = (size_t)h.C;
  /* wte (then its zero padding rows), wpe */
  ok = ok && fwrite(params[0], sizeof(float), (size_t)h.V * C, f) == (size_t)h.V * C;
  for (size_t i = 0; ok && i < (size_t)(h.Vp - h.V) * C; i++) {
    float z = 0;
    ok = fwrite(&z, sizeof z, 1, f) == 1;
  }
  ok = ok && fwrite(params[0] + (size_t)h.V * C, sizeof(float), (size_t)h.maxT * C, f) == (size_t)h.maxT * C;
  /* each stacked tensor: every block's slice of it, in block order */
  size_t at = 0;
  for (int t = LN1W; t <= FCPB && ok; t++) {
    size_t per = (size_t)(n[t] / h.L);
    for (int b = 1; b <= h.L && ok; b++) ok = fwrite(params[b] + at, sizeof(float), per, f) == per;
    at += per;
  }
  ok = ok && fwrite(params[m->n - 3], sizeof(float), 2 * C, f) == 2 * C; /* lnfw, lnfb */
  ok = fflush(f) == 0 && ok;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    remove(tmp);
    free(tmp);
    return core_error_set(CORE_ERUNTIME, "writing %s failed: %s", path, strerror(err));
  }
  free(tmp);
  return CORE_OK;
}
