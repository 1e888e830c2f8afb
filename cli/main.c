/* cli/main.c: the brigade program: one binary, subcommands. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "kernels/ops.h"

/* One entry per command: its one-line purpose and its whole usage, printed by
 * `brigade CMD --help` (or `brigade help CMD`); `brigade help` prints every entry. */
struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
  const char *usage;
};

static const struct command commands[] = {
    {"train", cli_train, "train a model (one process, or under mpirun -np N: stages x replicas)",
     "usage: brigade train CONFIG [--set key=value ...] [--log-json FILE] [--resume DIR]\n"
     "                    [--init-from FILE [--allow-nonfinite]]\n"
     "  CONFIG             a libconfig file: model, data, train, pipeline, zero, checkpoint,\n"
     "                     trace (keys: docs/reference.md)\n"
     "  --set key=value    override one config key (repeatable), e.g. --set train.steps=5\n"
     "  --log-json FILE    one JSON record per step (loss, lr, grad norm, tokens/s, memory)\n"
     "  --resume DIR       continue from a checkpoint directory, in any pipeline layout\n"
     "  --init-from FILE   start from GPT-2 weights: llm.c's .bin or model.safetensors\n"
     "  --allow-nonfinite  accept NaN/Inf weights in FILE\n"
     "  --max-memory BYTES refuse, before allocating, what this machine's ranks would not fit in\n"
     "                     (default $BRIGADE_MAX_MEMORY, else the machine's memory)\n"
     "  --max-instructions N  the most instructions its program may have (default 2^25)\n"
     "run across ranks: mpirun -np N build/brigade train CONFIG (N = stages x data replicas)\n"},
    {"sim", cli_sim, "simulate a schedule under a cost model (no MPI, no model)",
     "usage: brigade sim --schedule FAMILY --stages P --microbatches M [shape and cost flags]\n"
     "       brigade sim --schedule-file FILE.csv [cost flags]\n"
     "       brigade sim CONFIG [--set key=value ...] [--gflops G] [--dp D] [--dp-gbps BW]\n"
     "shape (as for compile): --schedule, --stages, --virtual V, --microbatches, --mem-limit X,\n"
     "  --max-pending-w N, --tied, --w-stash F, --zero3 [--keep-gathered] [--prefetch N],\n"
     "  --offload none|full|auto --cost-offload T --offload-gbps G (activations to host memory)\n"
     "costs: --cost-f T --cost-b T --cost-w T --comm T --cost-tied T --cost-reduce T\n"
     "  --cost-step T --cost-gather T --cost-norm T (time units per op; default 1 for F/B/W, 0 for\n"
     "  the rest; norm: the gradient norm's all-reduce before an update)\n"
     "steps: --steps N (consecutive steps; JSON steady_step_time: the mean of steps 2..N)\n"
     "  --step-sync barrier|post-validation|eager (every rank's update waits for the slowest\n"
     "  rank's norm; or each rank steps on its own and checks at the next step's VALIDATE; or\n"
     "  never waits: no clipping, no fp16 scaling) default barrier, a config's own for sim CONFIG\n"
     "  --act-bytes N      bytes of one activation slot (memory figures in bytes)\n"
     "outputs: --json (bubble rate, makespan, peak memory per rank), --trace FILE.json (Chrome\n"
     "  trace), --svg FILE.svg, --ascii (a chart in the terminal)\n"
     "CONFIG form: predicts a training config's step from per-layer FLOPs at G GFLOP/s (50)\n"
     "  (backward twice the forward); D replicas per stage, ZeRO's collectives at BW GB/s\n"
     "limits: --max-instructions N (default 2^25), --max-memory BYTES (default $BRIGADE_MAX_MEMORY,\n"
     "  else the machine's memory): a shape over either is refused before it is built\n"},
    {"compile", cli_compile, "compile a pipeline schedule into per-rank instruction streams",
     "usage: brigade compile --schedule FAMILY --stages P [--virtual V] --microbatches M\n"
     "                       [--format actions|instructions|csv|csv-comm] [-o FILE]\n"
     "  FAMILY: gpipe 1f1b interleaved zb-h1 zb-h2 zb-auto zb-v v-zb v-half v-min dualpipev\n"
     "          inference\n"
     "  --mem-limit X      zb-auto's per-rank memory, in one stage's activations (default P)\n"
     "  --max-pending-w N  cap on deferred weight-gradient ops per rank\n"
     "  --tied             the first and last layers share a weight (adds REDUCE_TIED_GRADS)\n"
     "  --post-validation  place VALIDATE: where each rank checks the previous step's update\n"
     "                     (optimizer post-validation; sim --step-sync post-validation sets it)\n"
     "  --zero3 [--keep-gathered] [--prefetch N]  place GATHER/RELEASE_PARAMS (ZeRO-3)\n"
     "  --offload none|full|auto  place OFFLOAD/RELOAD of activations (auto: under --mem-limit X),\n"
     "                     with a slot's copy time --cost-offload T, or --act-bytes N --offload-gbps G\n"
     "  --cost-f T --cost-b T --cost-w T --comm T --w-stash F: the costs it is compiled\n"
     "                     under (F: the part of a slot a pending W holds, default 1); --cost-gather T\n"
     "                     too, which places offload beside ZeRO-3's gathers\n"
     "  --max-instructions N --max-memory BYTES  refuse a shape over them before building it\n"
     "                     (defaults 2^25 and $BRIGADE_MAX_MEMORY, else the machine's memory)\n"
     "The program is verified (complete, deadlock-free, within its memory) before it is written.\n"},
    {"tune", cli_tune, "search schedules and shapes for the fastest step under a memory limit",
     "usage: brigade tune CONFIG --memory BYTES [--set key=value ...] [--gflops G] [--top K]\n"
     "                   [--dp D] [--dp-gbps BW] [--svg FILE]\n"
     "  --memory BYTES     per-rank memory limit: 1.5e9, 512M, 80G, 80GiB (binary K/M/G/T)\n"
     "  --gflops G         the rate per-layer FLOPs are costed at\n"
     "  --top K            print the K best candidates\n"
     "  --dp D --dp-gbps BW  D replicas per stage; ZeRO stages compared at BW GB/s\n"
     "  --svg FILE         the best candidate's simulated timeline\n"
     "  --max-instructions N --max-memory BYTES  candidates over them are skipped, not built\n"
     "                     (defaults 2^20 per candidate and $BRIGADE_MAX_MEMORY, else the machine's memory)\n"},
    {"plot", cli_plot, "draw a trace brigade wrote (simulated or measured)",
     "usage: brigade plot TRACE.json [-o FILE.svg] [--ascii]\n"
     "  TRACE.json         a Chrome trace from `sim --trace` or a training run's trace.path\n"
     "  -o FILE.svg        an SVG Gantt chart, one row per rank, bubbles shown\n"
     "  --ascii            a chart in the terminal\n"},
    {"sample", cli_sample, "generate text from a checkpoint",
     "usage: brigade sample --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature T]\n"
     "                     [--seed S] [--vocab vocab.json --merges merges.txt |\n"
     "                      --tokenizer gpt2_tokenizer.bin]\n"
     "  --prompt TEXT      the text to continue (default: none)\n"
     "  byte-level models read and print bytes; GPT-2 vocabularies need the tokenizer files\n"},
    {"tokenize", cli_tokenize, "a text as an llm.c token file with GPT-2's BPE",
     "usage: brigade tokenize --vocab vocab.json --merges merges.txt TEXT OUT\n"
     "  OUT is an llm.c token file (uint16 ids after a 256-int32 header), for data.path\n"},
    {"convert", cli_convert, "GPT-2 weights to a checkpoint, or a checkpoint to GPT-2 weights",
     "usage: brigade convert CHECKPOINT_DIR OUT --to llmc|safetensors\n"
     "       brigade convert FILE CHECKPOINT_DIR [--heads N]\n"
     "  FILE is llm.c's .bin or Hugging Face's model.safetensors (found from its content);\n"
     "  --heads N gives the head count, which a safetensors file does not record\n"},
};
enum { NCOMMANDS = (int)(sizeof commands / sizeof commands[0]) };

static void print_overview(FILE *f) {
  fputs("usage: brigade <command> [options]\n\ncommands:\n", f);
  for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fputs("  help      this text; `brigade help COMMAND` or `brigade COMMAND --help` for one\n"
        "            command's options (each as --name value or --name=value)\n",
        f);
}

static const struct command *find_command(const char *name) {
  for (int i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

static int is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

int main(int argc, char **argv) {
  kernels_cpu_setup();
  /* a write past the file-size limit (ulimit -f) fails with EFBIG and is reported as the error it
   * is, the temporary file removed, rather than killing the process mid-write */
  signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    print_overview(stderr);
    return 2;
  }
  if (strcmp(argv[1], "help") == 0 || is_help(argv[1])) {
    if (argc < 3 || is_help(argv[2])) {
      print_overview(stdout);
      return 0;
    }
    const struct command *c = find_command(argv[2]);
    if (!c) {
      fprintf(stderr, "brigade: error: unknown command '%s' (see 'brigade help')\n", argv[2]);
      return 2;
    }
    fputs(c->usage, stdout);
    return 0;
  }
  const struct command *c = find_command(argv[1]);
  if (!c) {
    fprintf(stderr, "brigade: error: unknown command '%s' (see 'brigade help')\n", argv[1]);
    return 2;
  }
  /* `--help` anywhere among a command's arguments prints its usage, even as a flag's value (a
   * prompt "-h" is given as --prompt=-h); everything else goes to the command's own parser. */
  for (int i = 2; i < argc; i++)
    if (is_help(argv[i])) {
      fputs(c->usage, stdout);
      return 0;
    }
  /* every option also takes the form --name=value: the commands' option loops split it
   * (cli_arg) where an option stands, into room given here */
  char **av = malloc(sizeof(char *) * (2 * (size_t)argc + 1));
  if (!av) {
    fprintf(stderr, "brigade: error: out of memory\n");
    return 1;
  }
  int n = argc - 1;
  memcpy(av, argv + 1, sizeof(char *) * (size_t)n);
  av[n] = NULL;
  int rc = c->run(n, av);
  free(av);
  return rc;
}
