#include "pipe/ckpt_model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "pipe/ckpt.h"

/* ---- what a checkpoint was written with ---- */

static void add(char **text, size_t *len, const char *key, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add(char **text, size_t *len, const char *key, const char *fmt, ...) {
  char v[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  size_t k = strlen(key) + strlen(v) + 5;
  *text = core_realloc(*text, *len + k);
  *len += (size_t)snprintf(*text + *len, k, "%s = %s\n", key, v);
}

char *pipe_ckpt_model_describe(const core_config *cfg, const layers_model *m) {
  char *t = NULL;
  size_t n = 0;
  add(&t, &n, "model.vocab_size", "%d", m->V);
  add(&t, &n, "model.seq_len", "%d", m->T);
  add(&t, &n, "model.d_model", "%d", m->C);
  add(&t, &n, "model.n_heads", "%d", m->NH);
  /* the layer list, repeats written out as runs: "embedding, transformer_block x6, ..." (cut
   * short on a long list: the per-layer lines below hold the rest) */
  char list[400] = "", run[96];
  for (int i = 0, j; i < m->n; i = j) {
    const layer *l = &m->layers[i];
    for (j = i + 1; j < m->n && m->layers[j].type == l->type && l->tied_to < 0 && m->layers[j].tied_to < 0; j++) {}
    int k = snprintf(run, sizeof run, "%s%s", i ? ", " : "", l->type->name);
    if (j - i > 1) k += snprintf(run + k, sizeof run - (size_t)k, " x%d", j - i);
    if (l->tied_to >= 0) snprintf(run + k, sizeof run - (size_t)k, " (tied to layer %d)", l->tied_to);
    if (strlen(list) + strlen(run) >= sizeof list - 8) {
      strcat(list, ", ...");
      break;
    }
    strcat(list, run);
  }
  add(&t, &n, "model.layers", "%d layers: %s", m->n, list);
  for (int i = 0; i < m->n; i++) { /* what the list leaves out: widths, MLP, bias, eps (not the user's names) */
    const layer *l = &m->layers[i];
    char key[32];
    snprintf(key, sizeof key, "layer %d", i);
    add(&t, &n, key, "%s, width %d -> %d, heads %d, hidden %d, bias %d, eps %.9g, %zu parameters", l->type->name,
        l->in_width, l->out_width, l->NH, l->hidden, l->bias, l->eps, l->nparams);
  }
  if (cfg) { /* a weights-only checkpoint (convert) has no optimizer state: any run may take it */
    int bf = 0, fp = 0;
    const char *opt = "AdamW";
    if (core_config_get_bool(cfg, "bf16.enabled", 0, &bf) || core_config_get_bool(cfg, "fp16.enabled", 0, &fp) ||
        core_config_get_string(cfg, "optimizer.type", "AdamW", &opt))
      core_error_clear(), opt = "AdamW"; /* the run's was checked; an old checkpoint's, read as far as it goes */
    add(&t, &n, "precision", "%s", bf ? "bf16" : fp ? "fp16" : "fp32");
    add(&t, &n, "optimizer.type", "%s", strcasecmp(opt, "sgd") == 0 ? "SGD" : "AdamW"); /* Adam runs as AdamW */
  }
  return t;
}

/* One "key = value" line of a description at *p: key and value into k and v, *p moved to the
 * next line; 0 at the end. */
static int desc_line(const char **p, char *k, size_t kn, char *v, size_t vn) {
  while (**p) {
    const char *s = *p, *nl = strchr(s, '\n'), *eq = strstr(s, " = ");
    size_t len = nl ? (size_t)(nl - s) : strlen(s);
    *p = s + len + (nl != NULL);
    if (!eq || eq >= s + len) continue; /* not a line of ours */
    snprintf(k, kn, "%.*s", (int)(eq - s), s);
    snprintf(v, vn, "%.*s", (int)(s + len - eq - 3), eq + 3);
    return 1;
  }
  return 0;
}

/* The value of key in a description, into v; 0 if absent. */
static int desc_get(const char *d, const char *key, char *v, size_t n) {
  char k[64];
  while (desc_line(&d, k, sizeof k, v, n))
    if (strcmp(k, key) == 0) return 1;
  return 0;
}

/* Every key of the checkpoint's description (saved) against the run's (mine), in the saved
 * order: the first that differs is the error, naming it and both values. A key the run does not
 * have is not compared. The two are walked side by side (the same keys in the same order unless
 * a model differs, which model.layers says first); a key out of step is looked up. */
static int compare_desc(const char *sub, const char *saved, const char *mine) {
  char ka[64], a[512], kb[64], b[512];
  const char *q = mine;
  while (desc_line(&saved, ka, sizeof ka, a, sizeof a)) {
    const char *at = q;
    int found = desc_line(&at, kb, sizeof kb, b, sizeof b) && strcmp(ka, kb) == 0;
    if (found) q = at;
    else found = desc_get(mine, ka, b, sizeof b);
    if (found && strcmp(a, b) != 0)
      return core_error_set(CORE_EINPUT, "checkpoint %s was written with %s = %.500s; this run has %s = %.500s (a "
                            "resumed run keeps the model and optimizer it was saved with; only the layout may change)",
                            sub, ka, a, ka, b);
  }
  return CORE_OK;
}

/* The description a checkpoint written before the "model" record implies: its saved config
 * (rank_00000 holds it), built as that run built its model; NULL (nothing to compare) without
 * one. The optimizer and precision only when the config says them (convert wrote none). */
static int old_desc(const pipe_ckpt_reader *r, char **out) {
  *out = NULL;
  const pipe_ckpt_record *c = pipe_ckpt_find(r, "config");
  if (!c) return CORE_OK;
  int64_t vocab = 256;
  int rc = pipe_ckpt_find(r, "vocab") ? pipe_ckpt_get(r, "vocab", PIPE_CKPT_I64, &vocab, 1) : CORE_OK;
  if (!rc && (vocab < 1 || vocab > (1 << 24)))
    rc = core_error_set(CORE_EINPUT, "checkpoint %s: vocabulary %lld is not in [1, %d]", r->path, (long long)vocab, 1 << 24);
  char *text = core_malloc(c->count + 1), name[1100];
  memcpy(text, c->data, c->count);
  text[c->count] = 0;
  snprintf(name, sizeof name, "%s (saved config)", r->path);
  core_config *cfg = NULL;
  layers_model m = {0};
  if (!rc) rc = core_config_load_string(&cfg, text, name);
  if (!rc) rc = layers_model_build(&m, cfg, (int)vocab);
  if (!rc) *out = pipe_ckpt_model_describe(core_config_has(cfg, "optimizer") ? cfg : NULL, &m);
  if (m.built) layers_model_free(&m);
  if (cfg) core_config_free(cfg);
  free(text);
  return rc ? core_error_prefix("checkpoint %s", r->path) : CORE_OK;
}

/* Whole optimizer-state tensors of every chunk (gathered from the ZeRO shards; collective). */
static int gather_states(const pipe_runner *rn, float ***m, float ***v) {
  *m = core_calloc((size_t)rn->v, sizeof(float *));
  *v = core_calloc((size_t)rn->v, sizeof(float *));
  int rc = CORE_OK;
  for (int c = 0; c < rn->v && !rc; c++) {
    size_t n = rn->chunks[c].nparams;
    (*m)[c] = core_calloc(n ? n : 1, sizeof(float));
    (*v)[c] = core_calloc(n ? n : 1, sizeof(float));
    rc = zero_gather_state(&rn->zb[c], rn->opt_m[c], (*m)[c]);
    if (!rc) rc = zero_gather_state(&rn->zb[c], rn->opt_v[c], (*v)[c]);
  }
  return rc;
}

static void free_states(const pipe_runner *rn, float **m, float **v) {
  for (int c = 0; c < rn->v; c++) free(m[c]), free(v[c]);
  free(m), free(v);
}

/* Host copies of each chunk's parameters: mixed precision saves the fp32 master weights
 * (gathered), not the rounded working copy. (*p is allocated whole even when a gather fails.) */
static int gather_params(const pipe_runner *rn, float ***p) {
  *p = core_calloc((size_t)rn->v, sizeof(float *));
  int rc = CORE_OK;
  for (int c = 0; c < rn->v; c++) {
    const layers_chunk *ch = &rn->chunks[c];
    (*p)[c] = core_calloc(ch->nparams + 1, sizeof(float));
    if (rc) continue;
    if (rn->master) rc = zero_gather_state(&rn->zb[c], rn->master[c], (*p)[c]);
    else if (rn->zb[c].stage == 3) rc = zero_gather_state(&rn->zb[c], rn->zb[c].pshard, (*p)[c]);
    else ch->ops->to_host((*p)[c], ch->params, sizeof(float) * ch->nparams);
  }
  return rc;
}

static int put_layers(pipe_ckpt_writer *w, const pipe_runner *rn, float **full_m, float **full_v, float **full_p) {
  int rc = CORE_OK;
  for (int c = 0; c < rn->v && !rc; c++) {
    const layers_chunk *ch = &rn->chunks[c];
    for (int i = 0; i < ch->n && !rc; i++) {
      const layer *l = &ch->layers[i];
      size_t off = ch->param_off[i];
      char name[128];
      snprintf(name, sizeof name, "layer.%d.name", l->index); /* the user's own, for whoever reads the file */
      rc = pipe_ckpt_put(w, name, PIPE_CKPT_BYTES, l->name, strlen(l->name));
      snprintf(name, sizeof name, "layer.%d.params", l->index);
      if (!rc) rc = pipe_ckpt_put(w, name, PIPE_CKPT_F32, full_p[c] + off, l->nparams);
      snprintf(name, sizeof name, "layer.%d.adam_m", l->index);
      if (!rc) rc = pipe_ckpt_put(w, name, PIPE_CKPT_F32, full_m[c] + off, l->nparams);
      snprintf(name, sizeof name, "layer.%d.adam_v", l->index);
      if (!rc) rc = pipe_ckpt_put(w, name, PIPE_CKPT_F32, full_v[c] + off, l->nparams);
    }
  }
  return rc;
}

/* Removes a directory of rank files (and their temporary files) and the directory itself; one
 * that does not exist is not an error. */
static int remove_rank_dir(const char *sub) {
  DIR *d = opendir(sub);
  if (!d) return errno == ENOENT ? CORE_OK : core_error_set(CORE_ERUNTIME, "cannot open %s: %s", sub, strerror(errno));
  struct dirent *e;
  int rc = CORE_OK;
  while (!rc && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
    if (unlink(path) != 0) rc = core_error_set(CORE_ERUNTIME, "cannot remove %s: %s", path, strerror(errno));
  }
  closedir(d);
  if (!rc && rmdir(sub) != 0) rc = core_error_set(CORE_ERUNTIME, "cannot remove %s: %s", sub, strerror(errno));
  return rc;
}

/* Puts the complete staging directory in place of step_N: by one atomic exchange where step_N
 * exists (an earlier run's save of the same step, which `latest` may name), so that a crash
 * leaves one whole checkpoint or the other, never a mix; the old one's files then go. Where the
 * file system cannot exchange, the old directory is moved aside first. */
static int install_step(const char *staging, const char *sub) {
  struct stat st;
  if (stat(sub, &st) != 0) {
    if (rename(staging, sub) != 0) return core_error_set(CORE_ERUNTIME, "cannot rename %s to %s: %s", staging, sub, strerror(errno));
    return CORE_OK;
  }
  if (renameat2(AT_FDCWD, staging, AT_FDCWD, sub, RENAME_EXCHANGE) == 0) return remove_rank_dir(staging);
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
    return core_error_set(CORE_ERUNTIME, "cannot exchange %s with %s: %s", staging, sub, strerror(errno));
  char old[1200];
  snprintf(old, sizeof old, "%s.old", sub);
  int rc = remove_rank_dir(old);
  if (!rc && rename(sub, old) != 0) rc = core_error_set(CORE_ERUNTIME, "cannot rename %s: %s", sub, strerror(errno));
  /* from here until the next rename, step_N is missing: the loader takes step_N.old then */
  if (!rc && rename(staging, sub) != 0) {
    rc = core_error_set(CORE_ERUNTIME, "cannot rename %s to %s: %s", staging, sub, strerror(errno));
    rename(old, sub); /* the old one back where latest names it */
  }
  return rc ? rc : remove_rank_dir(old);
}

/* DIR/latest -> step_N, replaced by rename (the writer's own temporary name) and the directory
 * synced: the step directory's entry and latest's survive a crash. */
static int write_latest(const char *dir, long step) {
  char latest[1100], tmp[1140];
  snprintf(latest, sizeof latest, "%s/latest", dir);
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", latest, (long)getpid());
  FILE *f = fopen(tmp, "w");
  int ok = f && fprintf(f, "step_%08ld\n", step) > 0;
  if (f) ok &= fflush(f) == 0 && fsync(fileno(f)) == 0, ok &= fclose(f) == 0;
  ok = ok && rename(tmp, latest) == 0;
  int err = errno;
  if (!ok) unlink(tmp);
  else if (pipe_ckpt_sync_dir(dir, 0) != 0) ok = 0, err = errno;
  return ok ? CORE_OK : core_error_set(CORE_ERUNTIME, "cannot write %s: %s", latest, strerror(err));
}

int pipe_ckpt_model_save(const char *dir, const pipe_runner *rn, const pipe_topo *topo, long step,
                         const core_config *cfg, const char *desc) {
  /* the rank files go into a staging directory of their own, which becomes step_N only once
   * every rank has written its file: a save that fails, or a crash, never touches a step
   * directory `latest` may name, nor mixes two runs' rank files in one */
  char sub[1024], staging[1100], path[1200];
  snprintf(sub, sizeof sub, "%s/step_%08ld", dir, step);
  snprintf(staging, sizeof staging, "%s.saving", sub);
  float **full_m, **full_v, **full_p;
  int rc = gather_params(rn, &full_p), wrote = 0;
  int rs = gather_states(rn, &full_m, &full_v); /* (a collective every rank makes, whatever rc) */
  if (!rc) rc = rs;
  int rs0 = topo->world_rank == 0 ? remove_rank_dir(staging) : CORE_OK; /* a crashed save's */
  MPI_Bcast(&rs0, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!rc && rs0) rc = topo->world_rank == 0 ? rs0 : core_error_set(CORE_ERUNTIME, "rank 0 could not clear %s", staging);
  if (!rc && topo->data == 0) { /* replicas hold the same state: one copy per stage */
    if (pipe_ckpt_mkdirs(staging) != 0) rc = core_error_set(CORE_ERUNTIME, "cannot create %s: %s", staging, strerror(errno));
    snprintf(path, sizeof path, "%s/rank_%05d.ckpt", staging, topo->stage);
    pipe_ckpt_writer w;
    if (!rc) rc = pipe_ckpt_create(&w, path);
    if (!rc) {
      int64_t st = step, t = rn->opt_t;
      /* what resuming checks before it reads a tensor: the model and optimizer, and the layout
       * whose rank files make the checkpoint (stages, replicas, chunks per rank, ZeRO stage) */
      int64_t layout[4] = {topo->p, topo->d, rn->v, rn->zb ? rn->zb[0].stage : 0};
      rc = pipe_ckpt_put(&w, "model", PIPE_CKPT_BYTES, desc, strlen(desc));
      if (!rc) rc = pipe_ckpt_put(&w, "layout", PIPE_CKPT_I64, layout, 4);
      if (!rc) rc = put_layers(&w, rn, full_m, full_v, full_p);
      double scale = rn->loss_scale;
      int64_t good = rn->good_steps, hyst = rn->hyst_left;
      if (!rc && rn->precision == 2) rc = pipe_ckpt_put(&w, "loss_scale", PIPE_CKPT_BYTES, &scale, sizeof scale);
      if (!rc && rn->precision == 2) rc = pipe_ckpt_put(&w, "good_steps", PIPE_CKPT_I64, &good, 1);
      if (!rc && rn->precision == 2) rc = pipe_ckpt_put(&w, "hysteresis_left", PIPE_CKPT_I64, &hyst, 1);
      if (!rc) rc = pipe_ckpt_put(&w, "step", PIPE_CKPT_I64, &st, 1);
      if (!rc) rc = pipe_ckpt_put(&w, "opt_t", PIPE_CKPT_I64, &t, 1);
      int64_t vocab = rn->chunks[0].layers[0].V; /* the model's vocabulary, for `brigade sample` */
      if (!rc) rc = pipe_ckpt_put(&w, "vocab", PIPE_CKPT_I64, &vocab, 1);
      if (!rc && topo->stage == 0) { /* the effective config, for the record */
        char *text = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&text, &n);
        if (!f) {
          rc = core_error_set(CORE_ERUNTIME, "out of memory for the checkpoint's config record");
        } else {
          core_config_write(cfg, f);
          fclose(f);
          rc = pipe_ckpt_put(&w, "config", PIPE_CKPT_BYTES, text, n);
        }
        free(text);
      }
      if (!rc) {
        rc = pipe_ckpt_commit(&w);
        wrote = rc == CORE_OK;
      } else {
        pipe_ckpt_abort(&w); /* its own temporary file, nothing else */
      }
      if (rc) core_error_prefix("saving the checkpoint of step %ld", step);
    }
  }
  free_states(rn, full_m, full_v);
  for (int c = 0; c < rn->v; c++) free(full_p[c]);
  free(full_p);
  /* `latest` moves only when every rank has written its file */
  int bad = rc != CORE_OK, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) { /* the staging directory goes again, with its rank files; step_N and latest stay */
    if (wrote) unlink(path);
    MPI_Barrier(MPI_COMM_WORLD);
    if (topo->world_rank == 0) rmdir(staging);
    return rc ? rc : core_error_set(CORE_ERUNTIME, "another rank failed to save step %ld", step);
  }
  if (topo->world_rank == 0) rc = install_step(staging, sub);
  if (!rc && topo->world_rank == 0) rc = write_latest(dir, step);
  return rc;
}

/* Whether a step directory's entry is a complete rank file (rank_R.ckpt, not a .tmp), and its
 * path into path. */
static int rank_file(const char *sub, const char *name, char *path, size_t n) {
  if (strncmp(name, "rank_", 5) != 0 || !strstr(name, ".ckpt") || strstr(name, ".tmp")) return 0;
  snprintf(path, n, "%s/%s", sub, name);
  return 1;
}

/* The training counters of one rank file. */
typedef struct {
  int64_t step, opt_t, good, hyst;
  double scale;
  int scaler; /* the fp16 scaler's records were read */
} ckpt_counters;

/* Reads the counters of rank file r and refuses values no run writes (a checkpoint is input):
 * step in [0, PIPE_MAX_STEPS] (train.steps' bound); opt_t in [0, step] (a skipped fp16 step
 * advances step, not opt_t); under fp16, loss_scale finite and > 0, good_steps (clean steps
 * since the last overflow) in [0, opt_t] and hysteresis_left in [1, PIPE_MAX_HYSTERESIS]
 * (fp16.hysteresis' bound; it is reset to fp16.hysteresis before it reaches 0). */
static int read_counters(const pipe_ckpt_reader *r, int precision, ckpt_counters *k) {
  memset(k, 0, sizeof *k);
  int rc = pipe_ckpt_get(r, "step", PIPE_CKPT_I64, &k->step, 1);
  if (!rc) rc = pipe_ckpt_get(r, "opt_t", PIPE_CKPT_I64, &k->opt_t, 1);
  if (rc) return rc;
  if (k->step < 0 || k->step > PIPE_MAX_STEPS)
    return core_error_set(CORE_EINPUT, "checkpoint %s: step %lld is not in [0, %d]", r->path, (long long)k->step,
                          PIPE_MAX_STEPS);
  if (k->opt_t < 0 || k->opt_t > k->step)
    return core_error_set(CORE_EINPUT, "checkpoint %s: opt_t %lld is not in [0, %lld] (the optimizer steps "
                          "taken cannot outnumber the steps)", r->path, (long long)k->opt_t, (long long)k->step);
  /* a checkpoint of a run without fp16 has no scaler: the config's initial state applies */
  if (precision != 2 || pipe_ckpt_get(r, "loss_scale", PIPE_CKPT_BYTES, &k->scale, sizeof k->scale) ||
      pipe_ckpt_get(r, "good_steps", PIPE_CKPT_I64, &k->good, 1) ||
      pipe_ckpt_get(r, "hysteresis_left", PIPE_CKPT_I64, &k->hyst, 1))
    return CORE_OK;
  k->scaler = 1;
  if (!(isfinite(k->scale) && k->scale > 0))
    return core_error_set(CORE_EINPUT, "checkpoint %s: loss_scale %g is not a finite number > 0", r->path, k->scale);
  if (k->good < 0 || k->good > k->opt_t)
    return core_error_set(CORE_EINPUT, "checkpoint %s: good_steps %lld is not in [0, %lld] (clean steps cannot "
                          "outnumber the optimizer steps, opt_t)", r->path, (long long)k->good, (long long)k->opt_t);
  if (k->hyst < 1 || k->hyst > PIPE_MAX_HYSTERESIS)
    return core_error_set(CORE_EINPUT, "checkpoint %s: hysteresis_left %lld is not in [1, %d]", r->path,
                          (long long)k->hyst, PIPE_MAX_HYSTERESIS);
  return CORE_OK;
}

/* Every rank file of one checkpoint was written after the same step, with the same scaler
 * state: counters that differ mean rank files of different steps or runs were put together. */
static int same_counters(const char *sub, const char *first, const ckpt_counters *a, const char *name,
                         const ckpt_counters *b) {
  const struct {
    const char *what;
    double x, y; /* every value checked above is a double exactly */
  } f[] = {
      {"step", (double)a->step, (double)b->step},
      {"opt_t", (double)a->opt_t, (double)b->opt_t},
      {"fp16 scaler records (1: present)", a->scaler, b->scaler},
      {"loss_scale", a->scaler ? a->scale : 0, b->scaler ? b->scale : 0},
      {"good_steps", (double)a->good, (double)b->good},
      {"hysteresis_left", (double)a->hyst, (double)b->hyst},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i].x != f[i].y)
      return core_error_set(CORE_EINPUT, "checkpoint %s mixes rank files of different steps or runs: %s has %s "
                            "%.17g, %s has %s %.17g", sub, first, f[i].what, f[i].x, name, f[i].what, f[i].y);
  return CORE_OK;
}

/* What of a chunk's flat buffers this rank reads: parameters [plo, phi) (the ZeRO-3 shard, else
 * all), optimizer state [slo, shi) (the owned range). */
typedef struct {
  size_t plo, phi, slo, shi;
} window;

/* The part of layer record `name` (the chunk's values [off, off + n)) inside [lo, hi), to
 * dst + (its start - lo); the whole record is checked either way. */
static int get_window(const pipe_ckpt_reader *r, const char *name, size_t off, size_t n, size_t lo, size_t hi,
                      float *dst) {
  size_t a = off > lo ? off : lo, b = off + n < hi ? off + n : hi;
  if (b <= a) return pipe_ckpt_get_part(r, name, PIPE_CKPT_F32, n, 0, 0, dst); /* checked, nothing taken */
  return pipe_ckpt_get_part(r, name, PIPE_CKPT_F32, n, a - off, b - a, dst + (a - lo));
}

/* What a rank file says about the checkpoint, checked before any tensor is read: its layout
 * (the first file that has the record; every rank file it implies must be there) and, with desc
 * (the run's description), the model and optimizer it was written with. A checkpoint written
 * before those records has its config in rank_00000 only: the model is checked when that file is
 * met; its layout is not known. */
static int check_file(const char *sub, const pipe_ckpt_reader *r, const char *desc, int *model_checked,
                      pipe_ckpt_info *info) {
  int rc = CORE_OK;
  if (desc && !*model_checked) {
    const pipe_ckpt_record *m = pipe_ckpt_find(r, "model");
    char *saved = NULL;
    if (m) {
      saved = core_malloc(m->count + 1);
      memcpy(saved, m->data, m->count);
      saved[m->count] = 0;
    } else {
      rc = old_desc(r, &saved);
    }
    *model_checked = m || saved;
    if (!rc && saved) rc = compare_desc(sub, saved, desc);
    free(saved);
  }
  if (rc || info->has_layout || !pipe_ckpt_find(r, "layout")) return rc;
  int64_t *l = info->layout;
  rc = pipe_ckpt_get(r, "layout", PIPE_CKPT_I64, l, 4);
  if (!rc && !(l[0] >= 1 && l[0] <= 1 << 16 && l[1] >= 1 && l[1] <= 1 << 20 && l[2] >= 1 && l[2] <= 64 && l[3] >= 0 &&
               l[3] <= 3))
    rc = core_error_set(CORE_EINPUT, "checkpoint %s: layout (%lld stages, %lld replicas, %lld chunks per rank, ZeRO "
                        "stage %lld) is not one a run writes", r->path, (long long)l[0], (long long)l[1],
                        (long long)l[2], (long long)l[3]);
  info->has_layout = !rc;
  for (long long q = 0; !rc && q < l[0]; q++) { /* one rank file per stage */
    char path[1500];
    struct stat st;
    snprintf(path, sizeof path, "%s/rank_%05lld.ckpt", sub, q);
    if (stat(path, &st) != 0)
      rc = core_error_set(CORE_EINPUT, "checkpoint %s lacks rank_%05lld.ckpt: it was written by %lld stage(s) x %lld "
                          "replica(s) (%lld chunk(s) per rank, ZeRO stage %lld), one rank file per stage, "
                          "rank_00000.ckpt .. rank_%05lld.ckpt", sub, q, (long long)l[0], (long long)l[1],
                          (long long)l[2], (long long)l[3], (long long)l[0] - 1);
  }
  return rc;
}

/* Copies the records of every layer this rank owns from whichever rank file holds them. */
static int load_layers(const char *sub, pipe_runner *rn, const window *win, float **full_p, float **full_m,
                       float **full_v, const char *desc, pipe_ckpt_info *info) {
  DIR *d = opendir(sub);
  if (!d) return core_error_set(CORE_EINPUT, "cannot open checkpoint %s: %s", sub, strerror(errno));
  int total = 0, found = 0, nfiles = 0, rc = CORE_OK, model_checked = 0;
  ckpt_counters first = {0};
  char first_name[256] = "";
  for (int c = 0; c < rn->v; c++) total += rn->chunks[c].n;
  char *seen = core_calloc((size_t)total + 1, 1); /* each layer from one rank file only */
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    char path[2048];
    if (!rank_file(sub, e->d_name, path, sizeof path)) continue;
    pipe_ckpt_reader r;
    rc = pipe_ckpt_open(&r, path);
    if (rc) break;
    ckpt_counters cnt;
    rc = check_file(sub, &r, desc, &model_checked, info);
    if (!rc) rc = read_counters(&r, rn->precision, &cnt);
    if (!rc && nfiles++ == 0) first = cnt, snprintf(first_name, sizeof first_name, "%s", e->d_name);
    else if (!rc) rc = same_counters(sub, first_name, &first, e->d_name, &cnt);
    if (rc) {
      pipe_ckpt_close(&r);
      break;
    }
    for (int c = 0, k = 0; c < rn->v && !rc; c++) {
      layers_chunk *ch = &rn->chunks[c];
      for (int i = 0; i < ch->n && !rc; i++, k++) {
        layer *l = &ch->layers[i];
        char name[128];
        snprintf(name, sizeof name, "layer.%d.params", l->index);
        if (!pipe_ckpt_find(&r, name)) continue;
        if (seen[k]++) {
          rc = core_error_set(CORE_EINPUT, "checkpoint %s holds layer %d in more than one rank file (%s is one): "
                              "rank files of another run?", sub, l->index, e->d_name);
          break;
        }
        rc = get_window(&r, name, ch->param_off[i], l->nparams, win[c].plo, win[c].phi, full_p[c]);
        snprintf(name, sizeof name, "layer.%d.adam_m", l->index);
        if (!rc) rc = get_window(&r, name, ch->param_off[i], l->nparams, win[c].slo, win[c].shi, full_m[c]);
        snprintf(name, sizeof name, "layer.%d.adam_v", l->index);
        if (!rc) rc = get_window(&r, name, ch->param_off[i], l->nparams, win[c].slo, win[c].shi, full_v[c]);
        found++;
      }
    }
    pipe_ckpt_close(&r);
  }
  closedir(d);
  free(seen);
  if (!rc && nfiles == 0) /* not a different model: no rank file at all */
    rc = core_error_set(CORE_EINPUT, "checkpoint %s holds no rank file (rank_00000.ckpt, ...): an emptied or "
                        "incomplete checkpoint", sub);
  if (!rc && found < total)
    rc = core_error_set(CORE_EINPUT, "checkpoint %s lacks %d of this rank's %d layers (a different model?)", sub,
                        total - found, total);
  if (!rc && nfiles > 0) { /* checked above: within [0, PIPE_MAX_STEPS] and int's range */
    info->step = first.step, rn->opt_t = first.opt_t;
    /* the fp16 scaler goes on where it was when this run scales dynamically; a static
     * fp16.loss_scale in the config is this run's, whatever the checkpoint's */
    if (first.scaler && rn->dynamic_scale)
      rn->loss_scale = first.scale, rn->good_steps = (int)first.good, rn->hyst_left = (int)first.hyst;
    else if (first.scaler && rn->precision == 2 && first.scale != rn->loss_scale && rn->topo->world_rank == 0)
      core_log(CORE_LOG_WARN, "checkpoint %s was saved at fp16 loss scale %g; this run's static fp16.loss_scale = %g "
               "applies", sub, first.scale, rn->loss_scale);
  }
  return rc;
}

/* DIR/latest -> DIR/step_N, checked */
/* DIR/latest names the newest complete step; DIR may also be one step directory itself
 * (DIR/step_N, holding rank files), to go back to an older checkpoint. */
static int latest_dir(const char *dir, char *sub, size_t n) {
  char latest[1100], name[256] = "", rank0[1100];
  snprintf(latest, sizeof latest, "%s/latest", dir);
  snprintf(rank0, sizeof rank0, "%s/rank_00000.ckpt", dir);
  struct stat st;
  if (stat(latest, &st) != 0 && stat(rank0, &st) == 0 && S_ISREG(st.st_mode)) {
    snprintf(sub, n, "%s", dir);
    return CORE_OK;
  }
  FILE *f = fopen(latest, "r");
  if (!f) return core_error_set(CORE_EINPUT, "checkpoint directory %s: no complete checkpoint there (%s: %s)", dir, latest, strerror(errno));
  int ok = fscanf(f, "%255s", name) == 1 && strncmp(name, "step_", 5) == 0 && !strchr(name, '/');
  fclose(f);
  if (!ok) return core_error_set(CORE_EINPUT, "checkpoint directory %s: %s is malformed", dir, latest);
  snprintf(sub, n, "%s/%s", dir, name);
  /* a save that replaced step_N where the file system cannot exchange directories moves the old
   * one to step_N.old first: stopped between its two renames, step_N.old is the complete one */
  char old[1400];
  snprintf(old, sizeof old, "%s.old", sub);
  if (stat(sub, &st) != 0 && errno == ENOENT && stat(old, &st) == 0 && S_ISDIR(st.st_mode)) {
    static int said; /* once, by world rank 0: every rank of every run reads it, up to three times */
    int init = 0, rank = 0;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!said++ && rank == 0)
      core_log(CORE_LOG_WARN, "%s names %s, which is missing (a save stopped while replacing it): using %s", latest, name, old);
    snprintf(sub, n, "%s", old);
  }
  return CORE_OK;
}

int pipe_ckpt_model_config(const char *dir, char **text, int64_t *vocab) {
  char sub[1400], path[1500];
  int rc = latest_dir(dir, sub, sizeof sub);
  if (rc) return rc;
  snprintf(path, sizeof path, "%s/rank_00000.ckpt", sub);
  pipe_ckpt_reader r;
  rc = pipe_ckpt_open(&r, path);
  if (rc) return rc;
  const pipe_ckpt_record *c = pipe_ckpt_find(&r, "config");
  if (!c) rc = core_error_set(CORE_EINPUT, "checkpoint %s has no config record", path);
  *vocab = 256; /* checkpoints without the record come from byte-level runs */
  if (!rc && pipe_ckpt_find(&r, "vocab")) rc = pipe_ckpt_get(&r, "vocab", PIPE_CKPT_I64, vocab, 1);
  if (!rc && (*vocab < 1 || *vocab > (1 << 24)))
    rc = core_error_set(CORE_EINPUT, "checkpoint %s: vocabulary %lld is not in [1, %d]", path, (long long)*vocab, 1 << 24);
  if (!rc) {
    *text = core_malloc(c->count + 1);
    memcpy(*text, c->data, c->count);
    (*text)[c->count] = 0;
  }
  pipe_ckpt_close(&r);
  return rc;
}

int pipe_ckpt_model_load(const char *dir, pipe_runner *rn, const char *desc, pipe_ckpt_info *info) {
  memset(info, 0, sizeof *info);
  char *sub = info->sub;
  int rc = latest_dir(dir, sub, sizeof info->sub);
  if (rc) return rc;
  info->step = -1;
  float **full_m = core_calloc((size_t)rn->v, sizeof(float *)), **full_v = core_calloc((size_t)rn->v, sizeof(float *));
  float **full_p = core_calloc((size_t)rn->v, sizeof(float *));
  window *win = core_calloc((size_t)rn->v, sizeof(window));
  for (int c = 0; c < rn->v; c++) {
    size_t n = rn->chunks[c].nparams;
    window *w = &win[c];
    w->phi = w->shi = n;
    if (rn->zb && rn->zb[c].stage == 3) /* ZeRO-3 reads its shard only, never the chunk's whole */
      zero_range(&rn->zb[c], &w->plo, &w->phi), w->slo = w->plo, w->shi = w->phi;
    full_p[c] = core_calloc(w->phi - w->plo + 1, sizeof(float));
    full_m[c] = core_calloc(w->shi - w->slo + 1, sizeof(float));
    full_v[c] = core_calloc(w->shi - w->slo + 1, sizeof(float));
  }
  rc = load_layers(sub, rn, win, full_p, full_m, full_v, desc, info);
  for (int c = 0; c < rn->v && !rc && rn->zb && rn->zb[c].stage == 3; c++) { /* the shard is all there is */
    zero_buffer *z = &rn->zb[c];
    size_t len = z->hi - z->lo;
    const kernels_ops *ops = rn->chunks[c].ops, *mem = z->state_ops ? z->state_ops : ops; /* the state's table */
    ops->to_device(z->pshard, full_p[c], sizeof(float) * len);
    if (rn->master) mem->to_device(rn->master[c], full_p[c], sizeof(float) * len);
    if (rn->precision == 1) ops->round_bf16(z->pshard, len);
    else if (rn->precision == 2) ops->round_fp16(z->pshard, len);
    mem->to_device(rn->opt_m[c], full_m[c], sizeof(float) * len);
    mem->to_device(rn->opt_v[c], full_v[c], sizeof(float) * len);
  }
  for (int c = 0; c < rn->v && !rc && !(rn->zb && rn->zb[c].stage == 3); c++) { /* each rank keeps its ZeRO shard of the state */
    layers_chunk *ch = &rn->chunks[c];
    ch->ops->to_device(ch->params, full_p[c], sizeof(float) * ch->nparams);
    if (rn->master && rn->zb) zero_take_shard(&rn->zb[c], full_p[c], rn->master[c]); /* the saved weights are the masters */
    if (rn->precision == 1) ch->ops->round_bf16(ch->params, ch->nparams);
    else if (rn->precision == 2) ch->ops->round_fp16(ch->params, ch->nparams);
    if (rn->zb) {
      zero_take_shard(&rn->zb[c], full_m[c], rn->opt_m[c]);
      zero_take_shard(&rn->zb[c], full_v[c], rn->opt_v[c]);
    } else {
      ch->ops->to_device(rn->opt_m[c], full_m[c], sizeof(float) * ch->nparams);
      ch->ops->to_device(rn->opt_v[c], full_v[c], sizeof(float) * ch->nparams);
    }
  }
  for (int c = 0; c < rn->v; c++) free(full_p[c]);
  free(full_p), free(win);
  free_states(rn, full_m, full_v);
  if (!rc && info->step < 0) rc = core_error_set(CORE_EINPUT, "checkpoint %s has no step record", sub);
  return rc;
}

int pipe_ckpt_model_params(const char *dir, const layers_model *m, float **params) {
  char sub[1400];
  int rc = latest_dir(dir, sub, sizeof sub);
  if (rc) return rc;
  DIR *d = opendir(sub);
  if (!d) return core_error_set(CORE_EINPUT, "cannot open checkpoint %s: %s", sub, strerror(errno));
  struct dirent *e;
  while (!rc && (e = readdir(d))) {
    char path[2048];
    if (!rank_file(sub, e->d_name, path, sizeof path)) continue;
    pipe_ckpt_reader r;
    if ((rc = pipe_ckpt_open(&r, path))) break;
    for (int i = 0; i < m->n && !rc; i++) {
      char name[64];
      snprintf(name, sizeof name, "layer.%d.params", i);
      if (!m->layers[i].nparams || !pipe_ckpt_find(&r, name)) continue;
      if (params[i]) { /* two runs' rank files in one step directory, as the trainer's loader refuses */
        rc = core_error_set(CORE_EINPUT, "checkpoint %s holds layer %d ('%s') in more than one rank file (%s is one): "
                            "rank files of two runs?", sub, i, m->layers[i].name, e->d_name);
        break;
      }
      params[i] = core_malloc(sizeof(float) * m->layers[i].nparams);
      rc = pipe_ckpt_get(&r, name, PIPE_CKPT_F32, params[i], m->layers[i].nparams);
    }
    pipe_ckpt_close(&r);
  }
  closedir(d);
  for (int i = 0; i < m->n && !rc; i++)
    if (m->layers[i].nparams && !params[i])
      rc = core_error_set(CORE_EINPUT, "checkpoint %s has no record of layer %d ('%s')", sub, i, m->layers[i].name);
  return rc;
}

int pipe_ckpt_model_write_weights(const char *dir, const layers_model *m, const char *config_text, float *const *params) {
  char sub[1024], path[1200], note[1400];
  pipe_ckpt_lock lock; /* one writer per checkpoint directory, a conversion too */
  int rc = pipe_ckpt_lock_take(&lock, dir, note, sizeof note);
  if (rc) return rc;
  if (note[0]) core_log(CORE_LOG_WARN, "%s: %s", dir, note);
  /* staged and installed as a training run's save is: whatever step_00000000 a run wrote in the
   * meantime is replaced whole, never mixed with this file */
  char staging[1100];
  snprintf(sub, sizeof sub, "%s/step_00000000", dir);
  snprintf(staging, sizeof staging, "%s.saving", sub);
  rc = remove_rank_dir(staging);
  if (!rc && pipe_ckpt_mkdirs(staging) != 0) rc = core_error_set(CORE_ERUNTIME, "cannot create %s: %s", staging, strerror(errno));
  snprintf(path, sizeof path, "%s/rank_00000.ckpt", staging);
  pipe_ckpt_writer w;
  if (!rc) rc = pipe_ckpt_create(&w, path);
  if (rc) {
    pipe_ckpt_lock_release(&lock);
    return rc;
  }
  size_t most = 1;
  for (int i = 0; i < m->n; i++) most = m->layers[i].nparams > most ? m->layers[i].nparams : most;
  float *zeros = core_calloc(most, sizeof(float));
  char *desc = pipe_ckpt_model_describe(NULL, m); /* weights only: any optimizer and precision take it */
  int64_t layout[4] = {1, 1, 1, 0};
  rc = pipe_ckpt_put(&w, "model", PIPE_CKPT_BYTES, desc, strlen(desc));
  if (!rc) rc = pipe_ckpt_put(&w, "layout", PIPE_CKPT_I64, layout, 4);
  free(desc);
  for (int i = 0; i < m->n && !rc; i++) {
    const layer *l = &m->layers[i];
    char name[128];
    snprintf(name, sizeof name, "layer.%d.name", i);
    rc = pipe_ckpt_put(&w, name, PIPE_CKPT_BYTES, l->name, strlen(l->name));
    snprintf(name, sizeof name, "layer.%d.params", i);
    if (!rc) rc = pipe_ckpt_put(&w, name, PIPE_CKPT_F32, l->nparams ? params[i] : zeros, l->nparams);
    snprintf(name, sizeof name, "layer.%d.adam_m", i);
    if (!rc) rc = pipe_ckpt_put(&w, name, PIPE_CKPT_F32, zeros, l->nparams);
    snprintf(name, sizeof name, "layer.%d.adam_v", i);
    if (!rc) rc = pipe_ckpt_put(&w, name, PIPE_CKPT_F32, zeros, l->nparams);
  }
  free(zeros);
  int64_t zero = 0, vocab = m->layers[0].V;
  if (!rc) rc = pipe_ckpt_put(&w, "step", PIPE_CKPT_I64, &zero, 1);
  if (!rc) rc = pipe_ckpt_put(&w, "opt_t", PIPE_CKPT_I64, &zero, 1);
  if (!rc) rc = pipe_ckpt_put(&w, "vocab", PIPE_CKPT_I64, &vocab, 1);
  if (!rc) rc = pipe_ckpt_put(&w, "config", PIPE_CKPT_BYTES, config_text, strlen(config_text));
  if (!rc) rc = pipe_ckpt_commit(&w);
  else pipe_ckpt_abort(&w);
  if (!rc) rc = install_step(staging, sub);
  else remove_rank_dir(staging);
  if (!rc) rc = write_latest(dir, 0);
  pipe_ckpt_lock_release(&lock);
  return rc;
}
