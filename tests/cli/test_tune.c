/* `brigade tune` as a user runs it: a table and an SVG, or one error line and exit 2. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common/mpirun.h"

static int brigade(const char *args, char **out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s/brigade %s", test_build_dir(), args);
  int rc = test_capture(cmd, out);
  cr_assert(rc >= 0, "could not run %s", cmd);
  return rc;
}

Test(cli_tune, generous_limit_prints_the_table_and_the_svg) {
  char svg[] = "/tmp/brigade_tune_XXXXXX";
  close(mkstemp(svg));
  remove(svg);
  char args[512], *out;
  snprintf(args, sizeof args, "tune configs/tiny.cfg --set pipeline.stages=4 --memory 1G --gflops 10 --top 3 --svg %s", svg);
  cr_assert_eq(brigade(args, &out), 0, "%s", out);
  cr_assert(strstr(out, "family") && strstr(out, "partition") && strstr(out, "step (ms)") && strstr(out, "bubble") &&
                strstr(out, "peak memory"), "%s", out);
  cr_assert(strstr(out, "\n  1  ") && strstr(out, "\n  3  ") && !strstr(out, "\n  4  "), "%s", out);
  cr_assert(strstr(out, "wrote "), "%s", out);
  free(out);
  FILE *f = fopen(svg, "r");
  cr_assert(f, "no %s", svg);
  char head[512] = {0};
  cr_assert(fread(head, 1, sizeof head - 1, f) > 0 && strstr(head, "<svg"), "%s", head);
  fclose(f);
  remove(svg);
}

Test(cli_tune, bad_input_is_one_line_and_exit_2) {
  const char *bad[] = {
      "tune configs/tiny.cfg --set pipeline.stages=4 --memory 1000",
      "tune configs/tiny.cfg",
      "tune --memory 1G",
      "tune configs/tiny.cfg --memory -5",
      "tune configs/tiny.cfg --memory 12x",
      "tune configs/tiny.cfg --memory 1G --top 0",
      "tune configs/tiny.cfg --memory 1G --gflops 0",
      "tune configs/tiny.cfg --memory 1G --bogus",
      "tune configs/tiny.cfg --memory 1G --set pipeline.stages=16",
      "tune /nonexistent.cfg --memory 1G",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *out;
    int rc = brigade(bad[i], &out);
    cr_assert_eq(rc, 2, "'%s' exited %d: %s", bad[i], rc, out);
    cr_assert(strncmp(out, "brigade: error: ", 16) == 0, "'%s': %s", bad[i], out);
    cr_assert(strchr(out, '\n') == out + strlen(out) - 1, "'%s' printed more than one line: %s", bad[i], out);
    if (i == 0) cr_assert(strstr(out, "no candidate fits in --memory 1000 bytes: the smallest peak found is"), "%s", out);
    free(out);
  }
}
