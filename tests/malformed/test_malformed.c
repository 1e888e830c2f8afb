/* Untrusted input through the real program: every case of tests/malformed/ (configs, schedule
 * CSVs, traces, checkpoints) and generated data files must end with exit status 2 and one line
 * "brigade: error: ..." naming the file (verifier excerpts may follow, indented), never a crash,
 * a hang or another status. A config or CSV case may say what else the message must hold in a
 * first line "# expect: TEXT" (or "# expect: TEXT | TEXT"). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common/mpirun.h"

#define MAL "tests/malformed"
/* `brigade train` initialises MPI even as one process, and Open MPI leaks at init. */
#define TRAIN_ENV "ASAN_OPTIONS=detect_leaks=0 timeout 120 "

/* Runs a shell command line; returns its exit status, stdout+stderr in *out (caller frees). */
static int run(const char *cmd, char **out) {
  int rc = test_capture(cmd, out);
  cr_assert(rc >= 0, "could not run %s", cmd);
  return rc;
}

/* The "# expect: TEXT" of a case file, or "" */
static void expectation(const char *path, char *buf, size_t n) {
  buf[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return;
  char line[512];
  if (fgets(line, sizeof line, f) && strncmp(line, "# expect: ", 10) == 0) {
    line[strcspn(line, "\n")] = 0;
    snprintf(buf, n, "%s", line + 10);
  }
  fclose(f);
}

/* Exit 2; the first line is the only one starting "brigade: error: " and every other line is an
 * indented excerpt; the message holds each of want[] (NULL-terminated). */
static void expect_bad(const char *cmd, const char *const *want) {
  char *out;
  int rc = run(cmd, &out);
  cr_expect_eq(rc, 2, "'%s' exited %d:\n%s", cmd, rc, out);
  cr_expect(strncmp(out, "brigade: error: ", 16) == 0, "'%s' does not start with the error line:\n%s", cmd, out);
  int lines = 0;
  for (const char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
    if (lines++ > 0) cr_expect(*l == ' ', "'%s' printed a second unindented line:\n%s", cmd, out);
  }
  cr_expect(lines >= 1 && out[strlen(out) - 1] == '\n', "'%s': %s", cmd, out);
  for (int i = 0; want[i]; i++) /* each part of "A | B" */
    for (const char *p = want[i]; *p;) {
      size_t len = strstr(p, " | ") ? (size_t)(strstr(p, " | ") - p) : strlen(p);
      char part[512];
      snprintf(part, sizeof part, "%.*s", (int)len, p);
      cr_expect(strstr(out, part), "'%s': message lacks '%s':\n%s", cmd, part, out);
      p += len + (p[len] ? 3 : 0);
    }
  free(out);
}

/* Runs cmd_fmt (with %s for the file) on every file of dir ending in ext. */
static int each_case(const char *dir, const char *ext, const char *cmd_fmt) {
  DIR *d = opendir(dir);
  cr_assert(d, "no %s", dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name), el = strlen(ext);
    if (len <= el || strcmp(e->d_name + len - el, ext) != 0) continue;
    char path[512], cmd[2048], want[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    snprintf(cmd, sizeof cmd, cmd_fmt, test_build_dir(), path);
    expectation(path, want, sizeof want);
    const char *w[] = {path, want, NULL};
    expect_bad(cmd, w);
    n++;
  }
  closedir(d);
  return n;
}

Test(malformed, configs, .timeout = 600) {
  cr_assert_geq(each_case(MAL "/cfg", ".cfg", TRAIN_ENV "%s/brigade train %s"), 15);
}

Test(malformed, schedule_csvs) {
  cr_assert_geq(each_case(MAL "/csv", ".csv", "timeout 60 %s/brigade sim --schedule-file %s"), 15);
}

Test(malformed, traces) {
  cr_assert_geq(each_case(MAL "/json", ".json", "timeout 60 %s/brigade plot %s -o /tmp/brigade_malformed.svg"), 10);
  remove("/tmp/brigade_malformed.svg");
}

/* ---- data files (llm.c token files: 256 int32 header, magic 20240520, version 1, count) ---- */

static const char *MODEL =
    "train = { steps = 1; };\n"
    "model = { seq_len = 8; d_model = 8; n_heads = 2;\n"
    "  layers = ({ type = \"embedding\"; name = \"e\"; }, { type = \"lm_head\"; name = \"h\"; },\n"
    "    { type = \"cross_entropy\"; name = \"l\"; }); };\n";

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert(f, "cannot write %s", path);
  if (n) cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

static size_t token_file(unsigned char *buf, int32_t magic, int32_t version, int32_t count, size_t ntok) {
  int32_t hdr[256] = {magic, version, count};
  memcpy(buf, hdr, sizeof hdr);
  for (size_t i = 0; i < ntok; i++) buf[sizeof hdr + 2 * i] = (unsigned char)('a' + i % 26), buf[sizeof hdr + 2 * i + 1] = 0;
  return sizeof hdr + 2 * ntok;
}

Test(malformed, data_files, .timeout = 600) {
  char dir[] = "/tmp/brigade_mal_XXXXXX";
  cr_assert(mkdtemp(dir));
  static unsigned char buf[4096];
  char path[600], cfg[600], text[2048], cmd[2048];
  /* each case: its bytes into DIR/name, a config pointing at it, brigade train */
  for (int i = 0; i < 9; i++) {
    size_t n = 0;
    const char *name = "", *want = "";
    switch (i) {
    case 0: name = "truncated_header.bin", want = "truncated header", n = token_file(buf, 20240520, 1, 10, 0) - 700; break;
    case 1: name = "bad_version.bin", want = "unsupported version 7", n = token_file(buf, 20240520, 7, 100, 100); break;
    case 2: name = "count_too_big.bin", want = "header says 1000000 tokens but the file holds 100", n = token_file(buf, 20240520, 1, 1000000, 100); break;
    case 3: name = "negative_count.bin", want = "header says -5 tokens", n = token_file(buf, 20240520, 1, -5, 100); break;
    case 4: name = "zero_count.bin", want = "fewer than one sequence", n = token_file(buf, 20240520, 1, 0, 0); break;
    case 5: name = "empty.bin", want = "fewer than one sequence", n = 0; break;
    case 6: name = "a_directory", want = "is not a regular file", n = 0; break;
    /* more tokens than the header counts (two files joined: the second was dropped silently) */
    case 7: name = "count_too_small.bin", want = "header says 100 tokens but the file holds 300", n = token_file(buf, 20240520, 1, 100, 300); break;
    case 8: name = "odd_byte.bin", want = "header says 100 tokens but the file holds 100 and an odd byte", n = token_file(buf, 20240520, 1, 100, 100) + 1; break;
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (i == 6) cr_assert_eq(mkdir(path, 0755), 0);
    else write_file(path, buf, n);
    snprintf(cfg, sizeof cfg, "%s/%s.cfg", dir, name);
    snprintf(text, sizeof text, "data = { path = \"%s\"; val_fraction = 0.0; };\n%s", path, MODEL);
    write_file(cfg, text, strlen(text));
    snprintf(cmd, sizeof cmd, TRAIN_ENV "%s/brigade train %s", test_build_dir(), cfg);
    const char *w[] = {path, want, cfg, NULL};
    expect_bad(cmd, w);
    remove(cfg);
    if (i == 6) rmdir(path);
    else remove(path);
  }
  rmdir(dir);
}

/* ---- checkpoints: DIR/latest names step_N, DIR/step_N/rank_00000.ckpt ---- */

static void copy_file(const char *from, const char *to) {
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
  cr_assert_eq(test_sh(cmd), 0);
}

Test(malformed, checkpoints, .timeout = 900) {
  char dir[] = "/tmp/brigade_malck_XXXXXX";
  cr_assert(mkdtemp(dir));
  char sub[600], rankf[700], latest[600], cfg[600], cmd[2048];
  snprintf(sub, sizeof sub, "%s/step_00000001", dir);
  snprintf(rankf, sizeof rankf, "%s/rank_00000.ckpt", sub);
  snprintf(latest, sizeof latest, "%s/latest", dir);
  snprintf(cfg, sizeof cfg, "%s/run.cfg", dir);
  char text[2048];
  snprintf(text, sizeof text, "data = { path = \"data/kjv.txt\"; };\n%s", MODEL);
  write_file(cfg, text, strlen(text));
  cr_assert_eq(mkdir(sub, 0755), 0);
  write_file(latest, "step_00000001\n", 14);

  /* every file of tests/malformed/ckpt as the rank file: train --resume and sample */
  DIR *d = opendir(MAL "/ckpt");
  cr_assert(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".ckpt") != 0) continue;
    char src[512];
    snprintf(src, sizeof src, MAL "/ckpt/%s", e->d_name);
    copy_file(src, rankf);
    /* names the rank file, or the checkpoint directory for the saved config */
    const char *w[] = {dir, NULL};
    snprintf(cmd, sizeof cmd, TRAIN_ENV "%s/brigade train %s --resume %s", test_build_dir(), cfg, dir);
    expect_bad(cmd, w);
    snprintf(cmd, sizeof cmd, "timeout 60 %s/brigade sample --checkpoint %s --prompt a --tokens 2", test_build_dir(), dir);
    expect_bad(cmd, w);
    n++;
  }
  closedir(d);
  cr_assert_geq(n, 10);

  /* the directory around the file */
  struct {
    const char *latest, *want;
  } dirs[] = {
      {"", "is malformed"},
      {"../../etc\n", "is malformed"},
      {"step_00000001/../../etc\n", "is malformed"}, /* a step name that leaves DIR */
      {"step_00000099\n", "step_00000099"},
      {NULL, "no complete checkpoint there"},
  };
  copy_file(MAL "/ckpt/no_layers.ckpt", rankf);
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    if (dirs[i].latest) write_file(latest, dirs[i].latest, strlen(dirs[i].latest));
    else remove(latest);
    const char *w[] = {dir, dirs[i].want, NULL};
    snprintf(cmd, sizeof cmd, TRAIN_ENV "%s/brigade train %s --resume %s", test_build_dir(), cfg, dir);
    expect_bad(cmd, w);
    snprintf(cmd, sizeof cmd, "timeout 60 %s/brigade sample --checkpoint %s --prompt a --tokens 2", test_build_dir(), dir);
    expect_bad(cmd, w);
  }
  /* the rank file is a directory */
  write_file(latest, "step_00000001\n", 14);
  remove(rankf);
  cr_assert_eq(mkdir(rankf, 0755), 0);
  const char *w[] = {rankf, "not a regular file", NULL};
  snprintf(cmd, sizeof cmd, "timeout 60 %s/brigade sample --checkpoint %s --prompt a --tokens 2", test_build_dir(), dir);
  expect_bad(cmd, w);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  test_sh(cmd);
}
