/* pipe/hfst.c: Hugging Face GPT-2 safetensors in (see hfst.h). */
#include "pipe/hfst.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"

int pipe_hfst_sniff(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char b[9];
  int ok = fread(b, 1, 9, f) == 9;
  fclose(f);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
  return ok && n > 1 && n < (1u << 30) && b[8] == '{';
}

/* the tensor named prefix + name, or NULL */
static const core_json *tensor(const pipe_hfst *h, const char *name) {
  char full[128];
  snprintf(full, sizeof full, "%s%s", h->prefix, name);
  return core_json_get(h->hdr, full);
}

/* JSON number j as an integer in [0, hi]; 0 if it is not one. */
static int whole(const core_json *j, long long hi, long long *out) {
  if (!core_json_is(j, CORE_JSON_NUMBER) || !(j->num >= 0 && j->num <= (double)hi) || j->num != (double)(long long)j->num)
    return 0;
  *out = (long long)j->num;
  return 1;
}

/* "[a, b]" of a shape, into buf */
static const char *shape_str(const long long *sh, int rank, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", sh[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* A tensor's dtype bytes (4 F32, 2 F16, -2 BF16), shape (rank 1 to 4, each size a whole number
 * below 2^31, at most 2^60 values in all) and where its bytes begin in the data; CORE_EINPUT
 * naming it when any of that is malformed, its byte range does not hold its shape or lies past
 * the data, or (want_rank > 0) its shape is not want[0 .. want_rank). */
static int info(const pipe_hfst *h, const char *name, const long long *want, int want_rank, int *esize, long long *shape,
                int *rank, long long *begin) {
  const core_json *t = tensor(h, name), *sh, *off;
  if (!t) return core_error_set(CORE_EINPUT, "%s: no tensor '%s%s' (a GPT-2 model.safetensors holds one)", h->path, h->prefix, name);
  const char *d = NULL;
  long long end = 0, count = 1;
  int ok = !core_json_get_string(t, "dtype", &d) && !core_json_get_array(t, "shape", &sh) &&
           !core_json_get_array(t, "data_offsets", &off) && core_json_len(off) == 2 && core_json_len(sh) >= 1 &&
           core_json_len(sh) <= 4 && whole(core_json_at(off, 0), 1LL << 62, begin) &&
           whole(core_json_at(off, 1), 1LL << 62, &end);
  *rank = ok ? (int)core_json_len(sh) : 0;
  for (int i = 0; i < *rank && ok; i++) {
    ok = whole(core_json_at(sh, (size_t)i), (1LL << 31) - 1, &shape[i]);
    if (ok && shape[i] > 0 && count > (1LL << 60) / shape[i]) ok = 0;
    if (ok) count *= shape[i];
  }
  if (!ok)
    return core_error_set(CORE_EINPUT, "%s: tensor '%s%s' has a malformed entry (a dtype, a shape of 1 to 4 whole sizes "
                          "below 2^31, two whole data_offsets)", h->path, h->prefix, name);
  *esize = !strcmp(d, "F32") ? 4 : (!strcmp(d, "F16") || !strcmp(d, "BF16")) ? (d[0] == 'B' ? -2 : 2) : 0;
  if (!*esize) return core_error_set(CORE_EINPUT, "%s: tensor '%s%s' is %s (F32, F16 and BF16 are read)", h->path, h->prefix, name, d);
  int same = want_rank <= 0 || want_rank == *rank;
  for (int i = 0; i < want_rank && same; i++) same = shape[i] == want[i];
  if (!same) {
    char a[96], b[96];
    return core_error_set(CORE_EINPUT, "%s: tensor '%s%s' is %s, the model's %s", h->path, h->prefix, name,
                          shape_str(shape, *rank, a, sizeof a), shape_str(want, want_rank, b, sizeof b));
  }
  if (end - *begin != count * (*esize < 0 ? -*esize : *esize))
    return core_error_set(CORE_EINPUT, "%s: tensor '%s%s': its byte range does not hold its shape", h->path, h->prefix, name);
  if (end > h->size - h->data)
    return core_error_set(CORE_EINPUT, "%s: tensor '%s%s': bytes [%lld, %lld) of the data, which holds %lld", h->path,
                          h->prefix, name, *begin, end, h->size - h->data);
  return CORE_OK;
}

int pipe_hfst_open(pipe_hfst *h, const char *path) {
  memset(h, 0, sizeof *h);
  snprintf(h->path, sizeof h->path, "%s", path);
  h->f = fopen(path, "rb");
  if (!h->f) return core_error_set(CORE_EINPUT, "cannot open %s: %s", path, strerror(errno));
  unsigned char b[8];
  uint64_t n = 0;
  if (fread(b, 1, 8, h->f) == 8)
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
  if (n < 2 || n > (1u << 30)) {
    pipe_hfst_close(h);
    return core_error_set(CORE_EINPUT, "%s: not a safetensors file (header length %llu)", path, (unsigned long long)n);
  }
  if (fseek(h->f, 0, SEEK_END) == 0) h->size = ftell(h->f);
  if (h->size < 8 + (long long)n || fseek(h->f, 8, SEEK_SET) != 0) { /* before allocating what it claims */
    pipe_hfst_close(h);
    return core_error_set(CORE_EINPUT, "%s: shorter than its header", path);
  }
  char *text = malloc(n);
  int rc = text && fread(text, 1, n, h->f) == n ? core_json_parse(text, n, path, &h->hdr)
                                                : core_error_set(CORE_EINPUT, "%s: shorter than its header", path);
  free(text);
  if (rc || !core_json_is(h->hdr, CORE_JSON_OBJECT)) {
    pipe_hfst_close(h);
    return rc ? rc : core_error_set(CORE_EINPUT, "%s: the safetensors header is not a JSON object", path);
  }
  h->data = 8 + (long long)n;
  if (!core_json_get(h->hdr, "wte.weight") && core_json_get(h->hdr, "transformer.wte.weight"))
    snprintf(h->prefix, sizeof h->prefix, "transformer.");
  int es, r;
  long long sh[4], at;
  rc = info(h, "wte.weight", NULL, 0, &es, sh, &r, &at);
  if (!rc && r != 2) rc = core_error_set(CORE_EINPUT, "%s: tensor '%swte.weight' has %d dimensions, not 2 ([vocabulary, width])", path, h->prefix, r);
  if (!rc) h->V = (int)sh[0], h->C = (int)sh[1];
  if (!rc) rc = info(h, "wpe.weight", NULL, 0, &es, sh, &r, &at);
  if (!rc && (r != 2 || sh[1] != h->C)) {
    char a[96];
    rc = core_error_set(CORE_EINPUT, "%s: tensor '%swpe.weight' is %s, not [positions, %d] (wte.weight's width)", path,
                        h->prefix, shape_str(sh, r, a, sizeof a), h->C);
  }
  if (!rc) h->maxT = (int)sh[0];
  while (!rc) { /* the blocks: h.0 .. h.L-1 */
    char name[64];
    snprintf(name, sizeof name, "h.%d.ln_1.weight", h->L);
    if (!tensor(h, name)) break;
    h->L++;
  }
  if (rc) pipe_hfst_close(h);
  return rc;
}

void pipe_hfst_close(pipe_hfst *h) {
  if (h->f) fclose(h->f);
  if (h->hdr) core_json_free(h->hdr);
  h->f = NULL, h->hdr = NULL;
}

static int is(const layer *l, const char *type) { return strcmp(l->type->name, type) == 0; }

int pipe_hfst_check_model(const pipe_hfst *h, const layers_model *m) {
  int L = m->n - 4;
  if (m->n < 5 || !is(&m->layers[0], "embedding") || !is(&m->layers[m->n - 3], "layernorm") ||
      !is(&m->layers[m->n - 2], "lm_head") || !is(&m->layers[m->n - 1], "cross_entropy") || m->layers[m->n - 2].tied_to != 0)
    return core_error_set(CORE_EINPUT, "%s: GPT-2 needs model.layers = embedding, transformer_block x L, layernorm, "
                          "lm_head tied to the embedding, cross_entropy", h->path);
  for (int i = 1; i <= L; i++) /* each layer between the embedding and ln_f a block, before counting them */
    if (!is(&m->layers[i], "transformer_block"))
      return core_error_set(CORE_EINPUT, "%s: layer %d ('%s') is a %s, GPT-2 has a transformer_block there (model.layers)",
                            h->path, i, m->layers[i].name, m->layers[i].type->name);
  if (L != h->L)
    return core_error_set(CORE_EINPUT, "%s: the file holds %d blocks (h.0 .. h.%d), the model %d (model.layers)", h->path,
                          h->L, h->L - 1, L);
  const layer *e = &m->layers[0];
  if (e->V != h->V || e->C != h->C)
    return core_error_set(CORE_EINPUT, "%s: wte.weight: the file holds [%d, %d], the model [%d, %d] (model.vocab_size, "
                          "model.d_model)", h->path, h->V, h->C, e->V, e->C);
  if (e->T != h->maxT)
    return core_error_set(CORE_EINPUT, "%s: wpe.weight: the file holds [%d, %d], the model [%d, %d] (model.seq_len must be %d)",
                          h->path, h->maxT, h->C, e->T, e->C, h->maxT);
  for (int i = 1; i <= L; i++)
    if (m->layers[i].hidden != 4 * h->C)
      return core_error_set(CORE_EINPUT, "%s: h.%d.mlp.c_fc.weight: the file holds [%d, %d], the model [%d, %d] (layer %d "
                            "'%s': mlp_ratio must be 4)", h->path, i - 1, h->C, 4 * h->C, h->C, m->layers[i].hidden, i,
                            m->layers[i].name);
  return CORE_OK;
}

/* n values from byte `at` of the data (esize 4 F32, 2 F16, -2 BF16) as fp32 */
static int read_at(const pipe_hfst *h, long long at, int esize, size_t n, float *dst) {
  if (!n) return CORE_OK;
  int bytes = esize < 0 ? -esize : esize;
  if (fseek(h->f, h->data + at, SEEK_SET) != 0) return core_error_set(CORE_ERUNTIME, "%s: seek failed", h->path);
  if (bytes == 4) return fread(dst, 4, n, h->f) == n ? CORE_OK : core_error_set(CORE_EINPUT, "%s: short read", h->path);
  uint16_t buf[4096];
  for (size_t done = 0; done < n;) {
    size_t k = n - done < 4096 ? n - done : 4096;
    if (fread(buf, 2, k, h->f) != k) return core_error_set(CORE_EINPUT, "%s: short read", h->path);
    for (size_t i = 0; i < k; i++) dst[done + i] = esize < 0 ? kernels_bf16_to_f32(buf[i]) : kernels_f16_to_f32(buf[i]);
    done += k;
  }
  return CORE_OK;
}

/* Values [a, b) of tensor `name`, whose shape must be want[0 .. rank) (one or two sizes), as
 * brigade lays it out (rows of the transposed [in, out] Conv1D weight when conv), into dst. */
static int read_tensor(const pipe_hfst *h, const char *name, int conv, const long long *want, int want_rank, size_t a,
                       size_t b, float *dst) {
  int es, rank;
  long long sh[4], at;
  int rc = info(h, name, want, want_rank, &es, sh, &rank, &at);
  if (rc) return rc;
  size_t count = want_rank == 2 ? (size_t)(want[0] * want[1]) : (size_t)want[0];
  int bytes = es < 0 ? -es : es;
  if (!conv) return read_at(h, at + (long long)a * bytes, es, b - a, dst);
  long long in = want[0], out = want[1]; /* stored [in, out]; brigade's element (o, i) is the file's (i, o) */
  float *all = malloc(sizeof(float) * count);
  if (!all) return core_error_set(CORE_ERUNTIME, "out of memory reading %s", name);
  rc = read_at(h, at, es, count, all);
  for (size_t k = a; k < b && !rc; k++) {
    size_t o = k / (size_t)in, i = k % (size_t)in;
    dst[k - a] = all[i * (size_t)out + o];
  }
  free(all);
  return rc;
}

int pipe_hfst_read_layer(const pipe_hfst *h, const layers_model *m, int li, size_t lo, size_t hi, float *dst) {
  long long C = h->C;
  struct {
    char name[64];
    int conv, rank;
    long long shape[2]; /* as the file must hold it: [n], or [rows, cols] (Conv1D: [in, out]) */
    size_t n;
  } seg[12];
  int ns = 0;
  /* the next tensor: a Conv1D weight or not, its shape (d1 0: one dimension), its name */
#define SEG(conv_, d0, d1, ...)                                                                                        \
  (snprintf(seg[ns].name, sizeof seg[ns].name, __VA_ARGS__), seg[ns].conv = conv_, seg[ns].rank = (d1) != 0 ? 2 : 1,       \
   seg[ns].shape[0] = d0, seg[ns].shape[1] = d1, seg[ns++].n = (size_t)((d1) != 0 ? (d0) * (d1) : (d0)))
  if (li == 0) SEG(0, h->V, C, "wte.weight"), SEG(0, h->maxT, C, "wpe.weight");
  else if (li == m->n - 2) SEG(0, h->V, C, "wte.weight");
  else if (li == m->n - 3) SEG(0, C, 0, "ln_f.weight"), SEG(0, C, 0, "ln_f.bias");
  else if (li >= 1 && li <= h->L) {
    int b = li - 1;
    SEG(0, C, 0, "h.%d.ln_1.weight", b), SEG(0, C, 0, "h.%d.ln_1.bias", b);
    SEG(1, C, 3 * C, "h.%d.attn.c_attn.weight", b), SEG(0, 3 * C, 0, "h.%d.attn.c_attn.bias", b);
    SEG(1, C, C, "h.%d.attn.c_proj.weight", b), SEG(0, C, 0, "h.%d.attn.c_proj.bias", b);
    SEG(0, C, 0, "h.%d.ln_2.weight", b), SEG(0, C, 0, "h.%d.ln_2.bias", b);
    SEG(1, C, 4 * C, "h.%d.mlp.c_fc.weight", b), SEG(0, 4 * C, 0, "h.%d.mlp.c_fc.bias", b);
    SEG(1, 4 * C, C, "h.%d.mlp.c_proj.weight", b), SEG(0, C, 0, "h.%d.mlp.c_proj.bias", b);
  }
#undef SEG
  size_t at = 0;
  for (int k = 0; k < ns; at += seg[k].n, k++) {
    size_t a = at > lo ? at : lo, b = at + seg[k].n < hi ? at + seg[k].n : hi;
    if (b <= a) continue;
    int rc = read_tensor(h, seg[k].name, seg[k].conv, seg[k].shape, seg[k].rank, a - at, b - at, dst + (a - lo));
    if (rc) return rc;
  }
  if (at != m->layers[li].nparams)
    return core_error_set(CORE_EINPUT, "%s: layer %d ('%s') has %zu parameters, the file's tensors for it %zu", h->path, li,
                          m->layers[li].name, m->layers[li].nparams, at);
  return CORE_OK;
}

int pipe_hfst_write(const char *path, const layers_model *m, float *const *params) {
  const layer *e = &m->layers[0];
  pipe_hfst h = {.V = e->V, .C = e->C, .maxT = e->T, .L = m->n - 4};
  snprintf(h.path, sizeof h.path, "%s", path);
  int rc = pipe_hfst_check_model(&h, m);
  if (rc) return rc;
  size_t C = (size_t)h.C, V = (size_t)h.V, T = (size_t)h.maxT;
  /* the tensors in file order: name, source, count, Conv1D [out, in] -> [in, out] */
  typedef struct {
    char name[64];
    const float *src;
    size_t n, rows, cols; /* rows x cols as brigade holds it; conv: written transposed */
    int conv;
  } ten;
  int nt = 0, cap = 4 + 12 * h.L;
  ten *t = core_calloc((size_t)cap, sizeof(ten));
#define T_(src_, n_, conv_, rows_, cols_, ...)                                                          \
  (snprintf(t[nt].name, sizeof t[nt].name, __VA_ARGS__), t[nt].src = src_, t[nt].n = n_, t[nt].conv = conv_, \
   t[nt].rows = rows_, t[nt++].cols = cols_)
  T_(params[0], V * C, 0, V, C, "wte.weight");
  T_(params[0] + V * C, T * C, 0, T, C, "wpe.weight");
  const size_t rows[4] = {3 * C, C, 4 * C, C}, cols[4] = {C, C, C, 4 * C};
  const char *ln[2] = {"ln_1", "ln_2"}, *lin[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
  for (int b = 0; b < h.L; b++) {
    const float *p = params[1 + b];
    size_t at = 0;
    for (int part = 0; part < 2; part++) {
      T_(p + at, C, 0, C, 1, "h.%d.%s.weight", b, ln[part]), at += C;
      T_(p + at, C, 0, C, 1, "h.%d.%s.bias", b, ln[part]), at += C;
      for (int q = 2 * part; q < 2 * part + 2; q++) {
        T_(p + at, rows[q] * cols[q], 1, rows[q], cols[q], "h.%d.%s.weight", b, lin[q]), at += rows[q] * cols[q];
        T_(p + at, rows[q], 0, rows[q], 1, "h.%d.%s.bias", b, lin[q]), at += rows[q];
      }
    }
  }
  T_(params[m->n - 3], C, 0, C, 1, "ln_f.weight");
  T_(params[m->n - 3] + C, C, 0, C, 1, "ln_f.bias");
#undef T_
  char *hdr = NULL;
  size_t hn = 0, off = 0;
  FILE *mf = open_memstream(&hdr, &hn);
  if (!mf) {
    free(t);
    return core_error_set(CORE_ERUNTIME, "%s: out of memory for the safetensors header", path);
  }
  fprintf(mf, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int i = 0; i < nt; i++) {
    if (t[i].conv) fprintf(mf, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu]", t[i].name, t[i].cols, t[i].rows);
    else if (t[i].cols > 1) fprintf(mf, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu]", t[i].name, t[i].rows, t[i].cols);
    else fprintf(mf, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu]", t[i].name, t[i].rows);
    fprintf(mf, ",\"data_offsets\":[%zu,%zu]}", off, off + 4 * t[i].n);
    off += 4 * t[i].n;
  }
  fputc('}', mf);
  fflush(mf); /* hn is the header's length so far: pad it so the data starts 8-byte aligned */
  for (size_t pad = (8 - hn % 8) % 8; pad > 0; pad--) fputc(' ', mf);
  fclose(mf);
  char *tmp = core_str_join(path, ".tmp");
  FILE *f = fopen(tmp, "wb");
  int ok = f != NULL;
  uint64_t len = hn;
  unsigned char lb[8];
  for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(len >> (8 * i));
  ok = ok && fwrite(lb, 1, 8, f) == 8 && fwrite(hdr, 1, hn, f) == hn;
  float *buf = NULL;
  for (int i = 0; i < nt && ok; i++) {
    const float *src = t[i].src;
    if (t[i].conv) { /* [out, in] -> [in, out] */
      buf = core_realloc(buf, sizeof(float) * t[i].n);
      for (size_t r = 0; r < t[i].rows; r++)
        for (size_t c = 0; c < t[i].cols; c++) buf[c * t[i].rows + r] = src[r * t[i].cols + c];
      src = buf;
    }
    ok = fwrite(src, sizeof(float), t[i].n, f) == t[i].n;
  }
  free(buf), free(hdr), free(t);
  if (f) ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    remove(tmp);
    free(tmp);
    return core_error_set(CORE_ERUNTIME, "writing %s failed: %s", path, strerror(err));
  }
  free(tmp);
  return CORE_OK;
}
