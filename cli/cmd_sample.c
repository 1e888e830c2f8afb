/* cli/cmd_sample.c: `brigade sample --checkpoint DIR [--prompt TEXT] [--tokens N]
 * [--temperature T] [--seed S] [--vocab vocab.json --merges merges.txt]`. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "pipe/sample.h"

int cli_sample(int argc, char **argv) {
  pipe_sample_opts o = {.prompt = "", .tokens = 200, .temperature = 0.8, .seed = 1};
  int rc = CORE_OK, seed = 1;
  for (int i = 1; i < argc && !rc; i++) {
    cli_arg(&argc, argv, i);
    const char *v = NULL;
    if (strcmp(argv[i], "--checkpoint") == 0) rc = cli_take(argc, argv, &i, &o.checkpoint);
    else if (strcmp(argv[i], "--prompt") == 0) rc = cli_take(argc, argv, &i, &o.prompt);
    else if (strcmp(argv[i], "--vocab") == 0) rc = cli_take(argc, argv, &i, &o.vocab);
    else if (strcmp(argv[i], "--merges") == 0) rc = cli_take(argc, argv, &i, &o.merges);
    else if (strcmp(argv[i], "--tokenizer") == 0) rc = cli_take(argc, argv, &i, &o.tokenizer);
    else if (strcmp(argv[i], "--tokens") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &v))) rc = cli_parse_int("--tokens", v, 0, 1 << 20, &o.tokens);
    } else if (strcmp(argv[i], "--temperature") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &v))) rc = cli_parse_double("--temperature", v, 0, &o.temperature);
    } else if (strcmp(argv[i], "--seed") == 0) {
      if (!(rc = cli_take(argc, argv, &i, &v))) rc = cli_parse_int("--seed", v, 0, 1 << 30, &seed);
    } else rc = core_error_set(CORE_EINPUT, "sample: unknown option '%s'", argv[i]);
  }
  if (!rc && !o.checkpoint) rc = core_error_set(CORE_EINPUT, "usage: brigade sample --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature T] [--seed S] [--vocab vocab.json --merges merges.txt] [--tokenizer gpt2_tokenizer.bin]");
  o.seed = (uint64_t)seed;
  kernels_cpu_init(1);
  if (!rc) rc = pipe_sample(&o, stdout);
  if (rc) {
    fprintf(stderr, "brigade: error: %s\n", core_error_msg());
    return core_error_code() == CORE_EINPUT ? 2 : 1;
  }
  return 0;
}
