/* cli/main.c: the brigade program: one binary, subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "kernels/ops.h"

static const char usage[] =
    "usage: brigade <command> [options]\n"
    "\n"
    "commands:\n"
    "  compile   compile a pipeline schedule into per-rank instruction streams\n"
    "            --schedule gpipe|1f1b|interleaved|zb-h1|zb-h2|zb-auto|zb-v|v-zb|v-half|v-min|\n"
    "                       dualpipev|inference\n"
    "            --stages P [--virtual V] --microbatches M [--mem-limit X (zb-auto)]\n"
    "            [--max-pending-w N] [--tied] [--format actions|instructions|csv|csv-comm] [-o FILE]\n"
    "            [--cost-f T] [--cost-b T] [--cost-w T] [--comm T] [--w-stash F]: the costs it is\n"
    "            compiled under (F: the part of a slot a pending W holds, default 1)\n"
    "  sim       simulate a schedule under a cost model (no MPI, no model)\n"
    "            shape flags as for compile, or --schedule-file FILE.csv;\n"
    "            [--cost-f T] [--cost-b T] [--cost-w T] [--comm T] [--cost-tied T] [--cost-reduce T]\n"
    "            [--cost-step T]\n"
    "            [--act-bytes N] [--json] [--trace FILE.json] [--svg FILE.svg] [--ascii]\n"
    "            or: sim CONFIG [--set key=value ...] [--gflops G]: predict a training config's step\n"
    "            from per-layer FLOPs (stage forward = FLOPs / G, backward twice that);\n"
    "            [--dp D] [--dp-gbps BW]: D replicas per stage, ZeRO's collectives at BW GB/s\n"
    "  tune      search schedule family, virtual stages, micro-batches and partition for the\n"
    "            fastest predicted step that fits a per-rank memory limit:\n"
    "            tune CONFIG --memory BYTES [--set key=value ...] [--gflops G] [--top K] [--svg FILE]\n"
    "  train     train a model: train CONFIG [--set key=value ...] [--log-json FILE] [--resume DIR]\n"
    "            [--init-from FILE [--allow-nonfinite]] (start from GPT-2 weights: llm.c's .bin or\n"
    "            model.safetensors)\n"
    "            (one process, or under mpirun -np N for pipeline stages x data replicas)\n"
    "  compile, sim, tune, train: [--max-instructions N] (default 2^25; tune: 2^20 per candidate)\n"
    "            [--max-memory BYTES] (default $BRIGADE_MAX_MEMORY, else the machine's memory): what\n"
    "            is too large for them is refused from an estimate before it is built\n"
    "  sample    generate text from a checkpoint: sample --checkpoint DIR --prompt TEXT\n"
    "            [--tokens N] [--temperature T] [--seed S] [--vocab vocab.json --merges merges.txt]\n"
    "  plot      draw a trace brigade wrote: plot TRACE.json [-o FILE.svg] [--ascii]\n"
    "  tokenize  a text as an llm.c token file with GPT-2's BPE:\n"
    "            tokenize --vocab vocab.json --merges merges.txt TEXT OUT\n"
    "  convert   a checkpoint as GPT-2 weights: convert CHECKPOINT_DIR OUT --to llmc|safetensors,\n"
    "            or GPT-2 weights as a checkpoint: convert FILE CHECKPOINT_DIR [--heads N]\n"
    "  help      this text\n";

int main(int argc, char **argv) {
  kernels_cpu_reexec(argv);
  if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "compile") == 0) return cli_compile(argc - 1, argv + 1);
  if (strcmp(cmd, "sim") == 0) return cli_sim(argc - 1, argv + 1);
  if (strcmp(cmd, "plot") == 0) return cli_plot(argc - 1, argv + 1);
  if (strcmp(cmd, "train") == 0) return cli_train(argc - 1, argv + 1);
  if (strcmp(cmd, "tune") == 0) return cli_tune(argc - 1, argv + 1);
  if (strcmp(cmd, "sample") == 0) return cli_sample(argc - 1, argv + 1);
  if (strcmp(cmd, "convert") == 0) return cli_convert(argc - 1, argv + 1);
  if (strcmp(cmd, "tokenize") == 0) return cli_tokenize(argc - 1, argv + 1);
  fprintf(stderr, "brigade: error: unknown command '%s' (see 'brigade help')\n", cmd);
  return 2;
}
