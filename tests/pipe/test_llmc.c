/* GPT-2 weights in and out (llm.c's .bin, Hugging Face's model.safetensors): brigade's initial
 * weights written in either format and trained from with --init-from give the plain run's
 * losses bit for bit in one process, and within 1e-5 at p=2 x d=2 under ZeRO-3 (each rank
 * reading only its shard); `convert` of a 2-stage checkpoint to either format reads back as the
 * checkpoint's values; a file that does not fit the model is refused naming the tensor and both
 * shapes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "layers/layers.h"
#include "pipe/ckpt.h"
#include "pipe/hfst.h"
#include "pipe/llmc.h"
#include "tests/pipe/train_run.h"

/* configs/tiny.cfg's model at its seed, whole, in one chunk */
static void tiny(layers_model *m, layers_chunk *ch) {
  core_config *c;
  cr_assert_eq(core_config_load(&c, "configs/tiny.cfg"), 0);
  memset(m, 0, sizeof *m);
  cr_assert_eq(layers_model_build(m, c, 256), 0, "%s", core_error_msg());
  core_config_free(c);
  kernels_cpu_init(1);
  cr_assert_eq(layers_chunk_init(ch, m, 0, m->n, kernels_cpu_ops(), 1, m->T, 1), 0);
}

static void write_initial(const char *path) {
  layers_model m;
  layers_chunk ch;
  tiny(&m, &ch);
  float *params[64] = {0};
  for (int i = 0; i < m.n; i++) params[i] = ch.layers[i].params;
  cr_assert_eq(pipe_llmc_write(path, &m, params), 0, "%s", core_error_msg());
  layers_chunk_free(&ch);
  layers_model_free(&m);
}

Test(llmc, layers_read_back_in_any_window) {
  char path[] = "/tmp/brigade_llmc_XXXXXX";
  close(mkstemp(path));
  write_initial(path);
  layers_model m;
  layers_chunk ch;
  tiny(&m, &ch);
  pipe_llmc h;
  cr_assert_eq(pipe_llmc_open(&h, path), 0, "%s", core_error_msg());
  cr_assert_eq(h.version, 3);
  cr_assert_eq(h.Vp, 256); /* 256 is a multiple of 128 already */
  cr_assert_eq(pipe_llmc_check_model(&h, &m), 0, "%s", core_error_msg());
  for (int i = 0; i < m.n; i++) {
    size_t n = m.layers[i].nparams;
    if (!n) continue;
    float *got = calloc(n, sizeof(float));
    size_t cuts[][2] = {{0, n}, {n / 3, n / 3 + 1}, {n / 5, n - n / 7}};
    for (int k = 0; k < 3; k++) {
      memset(got, 0xff, sizeof(float) * n);
      cr_assert_eq(pipe_llmc_read_layer(&h, &m, i, cuts[k][0], cuts[k][1], got), 0, "%s", core_error_msg());
      cr_assert(!memcmp(got, ch.layers[i].params + cuts[k][0], sizeof(float) * (cuts[k][1] - cuts[k][0])),
                "layer %d window %d differs", i, k);
    }
    free(got);
  }
  pipe_llmc_close(&h);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  unlink(path);
}

Test(llmc, training_from_the_file_is_training_from_the_seed, .timeout = 200) {
  char path[] = "/tmp/brigade_llmc_XXXXXX", log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(path));
  close(mkstemp(log));
  write_initial(path);
  run_log ref, got;
  train_read(0, log, &ref, "--set gradient_accumulation_steps=4");
  train_read(0, log, &got, "--set gradient_accumulation_steps=4 --init-from %s", path);
  same_bits(&ref, &got, "--init-from, one process");
  train_read(4, log, &got, "--set gradient_accumulation_steps=2 --set pipeline.stages=2 --set zero_optimization.stage=3 "
             "--set pipeline.schedule=interleaved --set pipeline.virtual_stages=2 --init-from %s", path);
  close_to(&ref, &got, 0, "--init-from, p=2 x d=2 ZeRO-3");
  unlink(path), unlink(log);
}

Test(llmc, convert_writes_the_checkpoints_values, .timeout = 120) {
  char dir[] = "/tmp/brigade_llmc_ck_XXXXXX", path[] = "/tmp/brigade_llmc_XXXXXX", cmd[1024];
  cr_assert(mkdtemp(dir));
  close(mkstemp(path));
  char stp[] = "/tmp/brigade_st_XXXXXX";
  close(mkstemp(stp));
  snprintf(cmd, sizeof cmd, TEST_MPI_ENV " mpirun -np 2 %s/brigade train configs/tiny.cfg --set train.steps=2 "
           "--set pipeline.stages=2 --set checkpoint.dir=%s 1>&2 && %s/brigade convert %s %s --to llmc 1>&2 && "
           "%s/brigade convert %s %s --to safetensors 1>&2", test_build_dir(), dir, test_build_dir(), dir, path,
           test_build_dir(), dir, stp);
  cr_assert_eq(test_sh(cmd), 0);
  pipe_ckpt_reader r;
  snprintf(cmd, sizeof cmd, "%s/step_00000002/rank_00000.ckpt", dir);
  cr_assert_eq(pipe_ckpt_open(&r, cmd), 0, "%s", core_error_msg());
  layers_model m;
  layers_chunk ch;
  tiny(&m, &ch);
  pipe_llmc h;
  pipe_hfst st;
  cr_assert_eq(pipe_llmc_open(&h, path), 0, "%s", core_error_msg());
  cr_assert_eq(pipe_hfst_open(&st, stp), 0, "%s", core_error_msg());
  cr_assert_eq(pipe_hfst_check_model(&st, &m), 0, "%s", core_error_msg());
  pipe_ckpt_reader r1; /* stage 1's layers are in the second rank file */
  snprintf(cmd, sizeof cmd, "%s/step_00000002/rank_00001.ckpt", dir);
  cr_assert_eq(pipe_ckpt_open(&r1, cmd), 0, "%s", core_error_msg());
  for (int i = 0; i < m.n; i++) {
    size_t n = m.layers[i].nparams;
    if (!n) continue;
    char name[64];
    snprintf(name, sizeof name, "layer.%d.params", i);
    float *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
    cr_assert_eq(pipe_ckpt_get(pipe_ckpt_find(&r, name) ? &r : &r1, name, PIPE_CKPT_F32, want, n), 0);
    cr_assert_eq(pipe_llmc_read_layer(&h, &m, i, 0, n, got), 0);
    cr_assert(!memcmp(want, got, sizeof(float) * n), "layer %d differs after the llm.c round trip", i);
    cr_assert_eq(pipe_hfst_read_layer(&st, &m, i, 0, n, got), 0, "%s", core_error_msg());
    cr_assert(!memcmp(want, got, sizeof(float) * n), "layer %d differs after the safetensors round trip", i);
    free(want), free(got);
  }
  pipe_llmc_close(&h);
  pipe_hfst_close(&st);
  pipe_ckpt_close(&r), pipe_ckpt_close(&r1);
  unlink(stp);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  remove_tree(dir);
  unlink(path);
}

Test(llmc, a_file_of_another_shape_is_refused) {
  char path[] = "/tmp/brigade_llmc_XXXXXX";
  close(mkstemp(path));
  write_initial(path);
  char *out = NULL;
  int rc = train_capture(&out, "--set train.steps=1 --set model.seq_len=16 --init-from %s", path);
  cr_assert(rc == 2 && strstr(out, "wpe: the file holds [32, 32], the model [16, 32] (model.seq_len must be 32)"),
            "exit %d: %s", rc, out);
  free(out);
  FILE *f = fopen(path, "r+b"); /* cut short */
  cr_assert(f);
  cr_assert_eq(ftruncate(fileno(f), 5000), 0);
  fclose(f);
  rc = train_capture(&out, "--set train.steps=1 --init-from %s", path);
  cr_assert(rc == 2 && strstr(out, "5000 bytes, but its header describes"), "exit %d: %s", rc, out);
  free(out);
  f = fopen(path, "wb");
  fputs("not a checkpoint at all, but long enough to hold a header of 1024 bytes? no", f);
  fclose(f);
  rc = train_capture(&out, "--set train.steps=1 --init-from %s", path);
  cr_assert(rc == 2 && strstr(out, "shorter than llm.c's 1024-byte header"), "exit %d: %s", rc, out);
  free(out);
  unlink(path);
}

/* llm.c's bf16 files (version 5): the same tensors at 2 bytes each, read as the bf16 values. */
Test(llmc, bf16_files_read_as_their_values) {
  char path[] = "/tmp/brigade_llmc_XXXXXX", half[] = "/tmp/brigade_llmc_XXXXXX";
  close(mkstemp(path));
  close(mkstemp(half));
  write_initial(path);
  FILE *in = fopen(path, "rb"), *out = fopen(half, "wb");
  int32_t hd[256];
  cr_assert_eq(fread(hd, sizeof hd, 1, in), 1);
  hd[1] = 5;
  fwrite(hd, sizeof hd, 1, out);
  float x;
  while (fread(&x, sizeof x, 1, in) == 1) {
    uint16_t b = kernels_f32_to_bf16(x);
    fwrite(&b, sizeof b, 1, out);
  }
  fclose(in), fclose(out);
  layers_model m;
  layers_chunk ch;
  tiny(&m, &ch);
  pipe_llmc h;
  cr_assert_eq(pipe_llmc_open(&h, half), 0, "%s", core_error_msg());
  cr_assert_eq(h.version, 5);
  for (int i = 0; i < m.n; i++) {
    size_t n = m.layers[i].nparams;
    float *got = malloc(sizeof(float) * (n ? n : 1));
    cr_assert_eq(pipe_llmc_read_layer(&h, &m, i, 0, n, got), 0, "%s", core_error_msg());
    for (size_t k = 0; k < n; k++)
      cr_assert_eq(got[k], kernels_bf16_to_f32(kernels_f32_to_bf16(ch.layers[i].params[k])), "layer %d value %zu", i, k);
    free(got);
  }
  pipe_llmc_close(&h);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  unlink(path), unlink(half);
}

/* ---- Hugging Face GPT-2 model.safetensors ---- */

typedef struct {
  char name[64];
  float *data; /* as the file holds it (Conv1D weights [in, out]) */
  size_t n;
  int rank;
  size_t shape[2];
} st_tensor;

/* the tiny model's initial weights under GPT-2's Hugging Face names (prefix "" or
 * "transformer."), Conv1D weights transposed to [in, out] */
static void write_safetensors(const char *path, const char *prefix) {
  layers_model m;
  layers_chunk ch;
  tiny(&m, &ch);
  size_t C = (size_t)m.C, V = (size_t)m.V, T = (size_t)m.T;
  int L = m.n - 4;
  st_tensor *t = calloc((size_t)(4 + 12 * L), sizeof(st_tensor));
  int nt = 0;
#define ADD(ptr, count, r, s0, s1, ...)                                                        \
  (snprintf(t[nt].name, sizeof t[nt].name, __VA_ARGS__), t[nt].data = malloc(sizeof(float) * (count)), \
   memcpy(t[nt].data, ptr, sizeof(float) * (count)), t[nt].n = count, t[nt].rank = r, t[nt].shape[0] = s0, \
   t[nt++].shape[1] = s1)
  const float *e = ch.layers[0].params;
  ADD(e, V * C, 2, V, C, "%swte.weight", prefix);
  ADD(e + V * C, T * C, 2, T, C, "%swpe.weight", prefix);
  const size_t rows[4] = {3 * C, C, 4 * C, C}, cols[4] = {C, C, C, 4 * C}; /* brigade's [out, in] */
  for (int b = 0; b < L; b++) {
    const float *p = ch.layers[1 + b].params;
    size_t at = 0;
    const char *ln[2] = {"ln_1", "ln_2"}, *lin[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    for (int part = 0; part < 2; part++) {
      ADD(p + at, C, 1, C, 0, "%sh.%d.%s.weight", prefix, b, ln[part]), at += C;
      ADD(p + at, C, 1, C, 0, "%sh.%d.%s.bias", prefix, b, ln[part]), at += C;
      for (int q = 2 * part; q < 2 * part + 2; q++) {
        size_t o = rows[q], in = cols[q];
        float *tr = malloc(sizeof(float) * o * in); /* [in, out] */
        for (size_t r = 0; r < o; r++)
          for (size_t c = 0; c < in; c++) tr[c * o + r] = p[at + r * in + c];
        ADD(tr, o * in, 2, in, o, "%sh.%d.%s.weight", prefix, b, lin[q]), at += o * in;
        free(tr);
        ADD(p + at, o, 1, o, 0, "%sh.%d.%s.bias", prefix, b, lin[q]), at += o;
      }
    }
    cr_assert_eq(at, ch.layers[1 + b].nparams);
  }
  const float *lnf = ch.layers[m.n - 3].params;
  ADD(lnf, C, 1, C, 0, "%sln_f.weight", prefix);
  ADD(lnf + C, C, 1, C, 0, "%sln_f.bias", prefix);
#undef ADD
  char *hdr = NULL;
  size_t hn = 0, off = 0;
  FILE *mf = open_memstream(&hdr, &hn);
  fprintf(mf, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int i = 0; i < nt; i++) {
    fprintf(mf, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu", t[i].name, t[i].shape[0]);
    if (t[i].rank == 2) fprintf(mf, ",%zu", t[i].shape[1]);
    fprintf(mf, "],\"data_offsets\":[%zu,%zu]}", off, off + 4 * t[i].n);
    off += 4 * t[i].n;
  }
  fprintf(mf, "}");
  fclose(mf);
  FILE *f = fopen(path, "wb");
  uint64_t len = hn;
  fwrite(&len, 8, 1, f), fwrite(hdr, 1, hn, f);
  for (int i = 0; i < nt; i++) fwrite(t[i].data, sizeof(float), t[i].n, f), free(t[i].data);
  fclose(f);
  free(hdr), free(t);
  layers_chunk_free(&ch);
  layers_model_free(&m);
}

/* The safetensors file at path with `from` in its JSON header replaced by `to` (the data, whose
 * offsets count from the header's end, unchanged). */
static void rewrite_header(const char *path, const char *from, const char *to) {
  FILE *f = fopen(path, "rb");
  cr_assert(f);
  fseek(f, 0, SEEK_END);
  size_t size = (size_t)ftell(f);
  char *all = malloc(size + 1);
  fseek(f, 0, SEEK_SET);
  cr_assert_eq(fread(all, 1, size, f), size);
  fclose(f);
  uint64_t n;
  memcpy(&n, all, 8);
  all[size] = 0;
  char *hdr = strndup(all + 8, (size_t)n), *at = strstr(hdr, from);
  cr_assert(at, "'%s' is not in the header", from);
  char *out = NULL;
  size_t on = 0;
  FILE *mf = open_memstream(&out, &on);
  fprintf(mf, "%.*s%s%s", (int)(at - hdr), hdr, to, at + strlen(from));
  fclose(mf);
  f = fopen(path, "wb");
  uint64_t len = on;
  fwrite(&len, 8, 1, f), fwrite(out, 1, on, f), fwrite(all + 8 + n, 1, size - 8 - (size_t)n, f);
  fclose(f);
  free(all), free(hdr), free(out);
}

/* Opened, checked against the tiny model and every layer read: CORE_OK, or the first error. */
static int read_all_safetensors(const char *path) {
  layers_model m;
  layers_chunk ch;
  tiny(&m, &ch);
  pipe_hfst h;
  int rc = pipe_hfst_open(&h, path);
  if (!rc) rc = pipe_hfst_check_model(&h, &m);
  for (int i = 0; i < m.n && !rc; i++) {
    if (m.layers[i].tied_to >= 0) continue;
    size_t n = m.layers[i].nparams;
    float *dst = malloc(sizeof(float) * (n + 1));
    rc = pipe_hfst_read_layer(&h, &m, i, 0, n, dst);
    free(dst);
  }
  if (h.f) pipe_hfst_close(&h);
  layers_chunk_free(&ch);
  layers_model_free(&m);
  return rc;
}

/* A tensor must have the shape GPT-2's file gives it, not only its number of values: a Conv1D
 * weight flattened to one dimension (read past its buffer before) or stored the other way round
 * (read as the wrong values before) is refused, naming both shapes; sizes that are not whole
 * numbers in range, or a table of another rank, are malformed. */
Test(llmc, safetensors_of_other_shapes_are_refused) {
  char path[] = "/tmp/brigade_st_shape_XXXXXX";
  close(mkstemp(path));
  const char *qkv = "\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[32,96]";
  const struct {
    const char *from, *to, *want;
  } cases[] = {
      {qkv, "\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[3072]",
       "tensor 'h.0.attn.c_attn.weight' is [3072], the model's [32, 96]"},
      {qkv, "\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[96,32]",
       "tensor 'h.0.attn.c_attn.weight' is [96, 32], the model's [32, 96]"},
      {"\"shape\":[256,32]", "\"shape\":[1e300,32]", "tensor 'wte.weight' has a malformed entry"},
      {"\"shape\":[256,32]", "\"shape\":[-256,-32]", "tensor 'wte.weight' has a malformed entry"},
      {"\"shape\":[256,32]", "\"shape\":[8192]", "tensor 'wte.weight' has 1 dimensions, not 2"},
      {"\"shape\":[32,32]", "\"shape\":[16,64]", "tensor 'wpe.weight' is [16, 64], not [positions, 32]"},
  };
  write_safetensors(path, "");
  cr_assert_eq(read_all_safetensors(path), 0, "the file as written: %s", core_error_msg());
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    write_safetensors(path, "");
    rewrite_header(path, cases[k].from, cases[k].to);
    cr_assert_neq(read_all_safetensors(path), 0, "case %zu read", k);
    cr_assert(strstr(core_error_msg(), cases[k].want), "case %zu: %s", k, core_error_msg());
  }
  unlink(path);
}

Test(llmc, hugging_face_safetensors_train_from_the_seed, .timeout = 200) {
  char path[] = "/tmp/brigade_st_XXXXXX", log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(path));
  close(mkstemp(log));
  run_log ref, got;
  train_read(0, log, &ref, "--set gradient_accumulation_steps=4");
  write_safetensors(path, "");
  train_read(0, log, &got, "--set gradient_accumulation_steps=4 --init-from %s", path);
  same_bits(&ref, &got, "--init-from model.safetensors, one process");
  write_safetensors(path, "transformer.");
  train_read(4, log, &got, "--set gradient_accumulation_steps=2 --set pipeline.stages=2 --set zero_optimization.stage=3 "
             "--init-from %s", path);
  close_to(&ref, &got, 0, "--init-from model.safetensors (transformer. prefix), p=2 x d=2 ZeRO-3");
  char *out = NULL;
  int rc = train_capture(&out, "--set train.steps=1 --set model.d_model=64 --init-from %s", path);
  cr_assert(rc == 2 && strstr(out, "wte.weight: the file holds [256, 32], the model [256, 64]"), "exit %d: %s", rc, out);
  free(out);
  unlink(path), unlink(log);
}

/* data.order = "sequential" (a reference trainer's order, for fine-tuning comparisons) draws the
 * same batches under any layout: 4 stages give one process's losses bit for bit, 2 x 2 within
 * 1e-5; and it is another order than the random one. */
Test(llmc, sequential_order_under_any_layout, .timeout = 200) {
  char log[] = "/tmp/brigade_train_XXXXXX";
  close(mkstemp(log));
  run_log ref, got, rnd;
  const char *seq = "--set data.order=sequential --set train.eval_interval=5 --set train.steps=10";
  train_read(0, log, &ref, "%s --set gradient_accumulation_steps=4", seq);
  train_read(4, log, &got, "%s --set gradient_accumulation_steps=4 --set pipeline.stages=4", seq);
  same_bits(&ref, &got, "sequential, p=4");
  train_read(4, log, &got, "%s --set gradient_accumulation_steps=2 --set pipeline.stages=2", seq);
  close_to(&ref, &got, 0, "sequential, p=2 x d=2");
  train_read(0, log, &rnd, "--set train.eval_interval=5 --set train.steps=10 --set gradient_accumulation_steps=4");
  cr_assert(ref.loss[0] != rnd.loss[0], "the sequential order drew the random order's first batch");
  unlink(log);
}

/* Bad files, each one clear error (exit 2) naming the file and what is wrong: a safetensors
 * header that is not JSON, a tensor whose bytes lie past the file's end, an llm.c version brigade
 * does not read, and a NaN among the weights (taken only with --allow-nonfinite). */
Test(llmc, bad_files_are_refused_naming_what, .timeout = 120) {
  char path[] = "/tmp/brigade_bad_XXXXXX", *out = NULL;
  close(mkstemp(path));
  FILE *f = fopen(path, "wb");
  uint64_t n = 12;
  fwrite(&n, 8, 1, f), fputs("{not json!!}", f), fclose(f);
  int rc = train_capture(&out, "--set train.steps=1 --init-from %s", path);
  cr_assert(rc == 2 && strstr(out, path), "exit %d: %s", rc, out);
  free(out);
  write_safetensors(path, "");
  f = fopen(path, "r+b"); /* cut the data short: the last tensors point past the end */
  fseek(f, 0, SEEK_END);
  cr_assert_eq(ftruncate(fileno(f), ftell(f) - 100), 0);
  fclose(f);
  rc = train_capture(&out, "--set train.steps=1 --init-from %s", path);
  cr_assert(rc == 2 && strstr(out, "tensor 'ln_f.bias': bytes ["), "exit %d: %s", rc, out);
  free(out);
  write_initial(path);
  int32_t version = 4;
  f = fopen(path, "r+b");
  fseek(f, 4, SEEK_SET), fwrite(&version, 4, 1, f), fclose(f);
  rc = train_capture(&out, "--set train.steps=1 --init-from %s", path);
  cr_assert(rc == 2 && strstr(out, "llm.c checkpoint version 4"), "exit %d: %s", rc, out);
  free(out);
  write_initial(path);
  float nan = NAN;
  f = fopen(path, "r+b");
  fseek(f, 1024 + 4 * 100, SEEK_SET), fwrite(&nan, 4, 1, f), fclose(f); /* wte's value 100 */
  rc = train_capture(&out, "--set train.steps=1 --init-from %s", path);
  cr_assert(rc == 2 && strstr(out, "layer 0 ('wte') holds nan at its value 100"), "exit %d: %s", rc, out);
  free(out);
  rc = train_capture(&out, "--set train.steps=1 --init-from %s --allow-nonfinite", path);
  /* loaded as asked: the NaN reaches the loss, and the first step stops on its gradient */
  cr_assert(rc == 1 && !strstr(out, "holds nan") && strstr(out, "val loss nan") &&
                strstr(out, "step 1: the gradient norm is not finite"),
            "exit %d: %s", rc, out);
  free(out);
  unlink(path);
}

/* llm.c file -> brigade checkpoint directory -> llm.c file is byte for byte the original; the
 * directory resumes across 4 stages, and at 2 stages x 2 ZeRO-2 replicas, to the losses of
 * --init-from of the file in one process (a step-0 checkpoint: fresh optimizer state). */
Test(llmc, llmc_file_to_checkpoint_and_back, .timeout = 200) {
  char path[] = "/tmp/brigade_llmc_XXXXXX", back[] = "/tmp/brigade_llmc_XXXXXX", dir[] = "/tmp/brigade_llmc_ck_XXXXXX";
  char log[] = "/tmp/brigade_train_XXXXXX", cmd[1024];
  close(mkstemp(path)), close(mkstemp(back)), close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  write_initial(path);
  snprintf(cmd, sizeof cmd, "%s/brigade convert %s %s/ck 1>&2 && %s/brigade convert %s/ck %s --to llmc 1>&2 && cmp %s %s",
           test_build_dir(), path, dir, test_build_dir(), dir, back, path, back);
  cr_assert_eq(test_sh(cmd), 0, "the round trip changed the file");
  run_log ref, got;
  train_read(0, log, &ref, "--set gradient_accumulation_steps=4 --init-from %s", path);
  train_read(4, log, &got, "--set gradient_accumulation_steps=4 --set pipeline.stages=4 --resume %s/ck", dir);
  same_bits(&ref, &got, "resumed from the converted checkpoint, p=4");
  train_read(4, log, &got, "--set gradient_accumulation_steps=2 --set pipeline.stages=2 --set zero_optimization.stage=2 "
             "--resume %s/ck", dir);
  close_to(&ref, &got, 0, "resumed from the converted checkpoint, p=2 x d=2 ZeRO-2");
  remove_tree(dir);
  unlink(path), unlink(back), unlink(log);
}

/* Imported weights against an independent fp32 reference: PyTorch (float64) computes the loss
 * of the llm.c file's GPT-2 on the first sequential batches of the corpus; brigade's first-step
 * loss from --init-from, in one process and across 4 stages, is within 1e-5 of it. Skipped,
 * saying so, where PyTorch is not installed. */
Test(llmc, imported_weights_match_pytorch, .timeout = 200) {
  if (test_sh("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
    cr_skip_test("PyTorch (python3-torch) is not installed: no reference to compare the imported weights with");
    return;
  }
  char path[] = "/tmp/brigade_llmc_XXXXXX", log[] = "/tmp/brigade_train_XXXXXX", cmd[1024], *out = NULL;
  close(mkstemp(path)), close(mkstemp(log));
  write_initial(path);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/fixtures/ref_gpt2_loss.py %s data/kjv.txt 4 4", path);
  cr_assert_eq(test_capture(cmd, &out), 0, "%s", out);
  double ref = atof(out);
  free(out);
  run_log got;
  const char *seq = "--set data.order=sequential --set train.steps=1 --set train.eval_interval=0 "
                    "--set gradient_accumulation_steps=4";
  train_read(0, log, &got, "%s --init-from %s", seq, path);
  cr_assert(fabs(got.loss[0] - ref) <= 1e-5 * ref, "brigade %.9g, PyTorch %.9g", got.loss[0], ref);
  double one = got.loss[0];
  train_read(4, log, &got, "%s --set pipeline.stages=4 --init-from %s", seq, path);
  cr_assert_eq(got.loss[0], one, "4 stages: %.9g, one process %.9g", got.loss[0], one);
  unlink(path), unlink(log);
}

/* Reproducing a reference run: from an llm.c file, 5 steps of fine-tuning across 4 stages in the
 * sequential order (AdamW 0.9/0.999, eps 1e-8, no decay, constant lr, no clipping) against
 * PyTorch (float64) doing the same: the validation loss before the first update (the step-0
 * record), every step's loss and the last validation loss within 1e-5 relative; and the file
 * exported from the run's checkpoint has, in the reference, brigade's last validation loss.
 * Skipped, saying so, where PyTorch is not installed. */
Test(llmc, fine_tuning_matches_pytorch, .timeout = 300) {
  if (test_sh("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
    cr_skip_test("PyTorch (python3-torch) is not installed: no reference trainer to compare fine-tuning with");
    return;
  }
  char path[] = "/tmp/brigade_llmc_XXXXXX", val[] = "/tmp/brigade_val_XXXXXX", out_bin[] = "/tmp/brigade_llmc_XXXXXX";
  char log[] = "/tmp/brigade_train_XXXXXX", dir[] = "/tmp/brigade_llmc_ck_XXXXXX", cmd[2048], *out = NULL;
  close(mkstemp(path)), close(mkstemp(val)), close(mkstemp(out_bin)), close(mkstemp(log));
  cr_assert(mkdtemp(dir));
  write_initial(path);
  snprintf(cmd, sizeof cmd, "tail -c 20000 data/kjv.txt > %s", val); /* text the training batches never reach */
  cr_assert_eq(test_sh(cmd), 0);
  run_log got;
  train_read(4, log, &got,
             "--set data.order=sequential --set train.steps=5 --set train.eval_interval=5 --set train.eval_batches=2 "
             "--set data.val_path=%s --set gradient_clipping=0 --set scheduler.type=constant "
             "--set 'optimizer.params.betas=[0.9,0.999]' --set optimizer.params.weight_decay=0 "
             "--set gradient_accumulation_steps=4 --set pipeline.stages=4 --set checkpoint.dir=%s --init-from %s",
             val, dir, path);
  cr_assert_eq(got.n, 5);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/fixtures/ref_gpt2_loss.py %s data/kjv.txt 4 4 --steps 5 --lr 3e-3 "
           "--val %s 2", path, val);
  cr_assert_eq(test_capture(cmd, &out), 0, "%s", out);
  double ref_val0 = -1, ref_val = -1, ref_loss[5];
  int nl = 0;
  for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
    if (strncmp(l, "val0 ", 5) == 0) ref_val0 = atof(l + 5);
    else if (strncmp(l, "val ", 4) == 0) ref_val = atof(l + 4);
    else if (strncmp(l, "loss ", 5) == 0 && nl < 5) ref_loss[nl++] = atof(l + 5);
  }
  free(out);
  cr_assert_eq(nl, 5, "the reference printed %d losses", nl);
  cr_assert(fabs(got.val0 - ref_val0) <= 1e-5 * ref_val0, "step 0 val loss: brigade %.9g, PyTorch %.9g", got.val0, ref_val0);
  for (int s = 0; s < 5; s++)
    cr_assert(fabs(got.loss[s] - ref_loss[s]) <= 1e-5 * ref_loss[s], "step %d loss: brigade %.9g, PyTorch %.9g", s + 1,
              got.loss[s], ref_loss[s]);
  cr_assert(fabs(got.val[4] - ref_val) <= 1e-5 * ref_val, "last val loss: brigade %.9g, PyTorch %.9g", got.val[4], ref_val);
  snprintf(cmd, sizeof cmd, "%s/brigade convert %s %s --to llmc 1>&2", test_build_dir(), dir, out_bin);
  cr_assert_eq(test_sh(cmd), 0, "%s", cmd);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/fixtures/ref_gpt2_loss.py %s %s 2 4", out_bin, val);
  cr_assert_eq(test_capture(cmd, &out), 0, "%s", out);
  double exported = atof(out);
  free(out);
  cr_assert(fabs(exported - got.val[4]) <= 1e-5 * exported, "the exported file's val loss %.9g, brigade's last %.9g",
            exported, got.val[4]);
  /* the same checkpoint as model.safetensors, read by the safetensors package where installed (else
   * the reference's own reading of the format): the same weights, so the same loss */
  snprintf(cmd, sizeof cmd, "%s/brigade convert %s %s.safetensors --to safetensors 1>&2", test_build_dir(), dir, out_bin);
  cr_assert_eq(test_sh(cmd), 0, "%s", cmd);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/fixtures/ref_gpt2_loss.py %s.safetensors %s 2 4 --heads 4", out_bin, val);
  cr_assert_eq(test_capture(cmd, &out), 0, "%s", out);
  double st = atof(out);
  free(out);
  cr_assert(fabs(st - exported) <= 1e-12 * exported, "model.safetensors' loss %.17g, the llm.c file's %.17g", st, exported);
  snprintf(cmd, sizeof cmd, "%s.safetensors", out_bin);
  unlink(cmd);
  remove_tree(dir);
  unlink(path), unlink(val), unlink(out_bin), unlink(log);
}

/* llm.c file -> a brigade checkpoint written across 4 stages x 2 ZeRO-2 replicas (train.steps
 * = 0 writes the imported state in the run's layout) -> llm.c file: byte for byte the original;
 * and the same checkpoint reshaped (resumed with no step to take into another directory) to 2
 * stages x 2 ZeRO-3 replicas, then exported to model.safetensors and back: the same bytes. */
Test(llmc, round_trip_through_a_pipelined_zero_checkpoint, .timeout = 200) {
  char path[] = "/tmp/brigade_llmc_XXXXXX", back[] = "/tmp/brigade_llmc_XXXXXX", dir[] = "/tmp/brigade_llmc_ck_XXXXXX";
  char cmd[2048];
  close(mkstemp(path)), close(mkstemp(back));
  cr_assert(mkdtemp(dir));
  write_initial(path);
  snprintf(cmd, sizeof cmd, TEST_MPI_ENV " mpirun -np 8 %s/brigade train configs/tiny.cfg --set train.steps=0 "
           "--set pipeline.stages=4 --set zero_optimization.stage=2 --set gradient_accumulation_steps=2 "
           "--set checkpoint.dir=%s/a --init-from %s 1>&2 && ls %s/a/step_00000000/rank_00003.ckpt >/dev/null && "
           "%s/brigade convert %s/a %s --to llmc 1>&2 && cmp %s %s",
           test_build_dir(), dir, path, dir, test_build_dir(), dir, back, path, back);
  cr_assert_eq(test_sh(cmd), 0, "%s", cmd);
  snprintf(cmd, sizeof cmd, TEST_MPI_ENV " mpirun -np 4 %s/brigade train configs/tiny.cfg --set train.steps=0 "
           "--set pipeline.stages=2 --set zero_optimization.stage=3 --set gradient_accumulation_steps=2 "
           "--set checkpoint.dir=%s/b --resume %s/a 1>&2 && %s/brigade convert %s/b %s/st --to safetensors 1>&2 && "
           "%s/brigade convert %s/st %s/c --heads 4 1>&2 && %s/brigade convert %s/c %s/back.bin --to llmc 1>&2 && "
           "cmp %s %s/back.bin", /* a file of its own: convert never writes over one */
           test_build_dir(), dir, dir, test_build_dir(), dir, dir, test_build_dir(), dir, dir, test_build_dir(), dir, dir,
           path, dir);
  cr_assert_eq(test_sh(cmd), 0, "%s", cmd);
  remove_tree(dir);
  unlink(path), unlink(back);
}
