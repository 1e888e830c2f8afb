/* schedule/size.c: what compiling and simulating a shape takes, from the shape alone.
 *
 * Counts. P = p v m (virtual stage, micro-batch) pairs. Compute ops C: one F per pair, then a full
 * B (gpipe, 1f1b, interleaved), an I and a W (the zero-bubble and V families), or a mix
 * (dualpipev: rank r splits 2(p-r-1) + r + 1 of its backwards); inference runs F only. Every
 * boundary between consecutive virtual stages on different ranks (S - 1 of them, S - 2 in a V,
 * none when p = 1) carries one activation per micro-batch, and in training one gradient back, each
 * a SEND and a RECV. Loads: one before each first- and last-stage forward. The tail: REDUCE_GRADS
 * and OPTIMIZER_STEP per rank, REDUCE_TIED_GRADS on the one or two ranks of the tied stages.
 * ZeRO-3: a GATHER_PARAMS and a RELEASE_PARAMS per run of a chunk's compute ops: one run per
 * chunk when kept gathered or when a rank has one chunk, at most one per compute op otherwise.
 * Offload: at most an OFFLOAD and a RELOAD per pair, another two for a gradient received long
 * before its backward, and per split pair another two for its W's part (offload.c); a bound, as
 * the placement keeps only the copies that hide.
 *
 * Bytes, from the structures as they are (sizes of this build; a sched_instr is 24 bytes): the
 * peak is the largest of
 *   - the zero-bubble constructors (zb.c): their orders (two of 3P entries of four ints), F and I
 *     end times, W queues, the compute program; v-half and v-min's building block (vblock.c) adds
 *     four slot grids of p x (6(m + p) + 2m + 16) ints and its slot table;
 *   - lowering (lower.c): the compute program, the dataflow's times (24 bytes per pair, 8 per
 *     compute op), the per-op records (32 bytes; the step-by-step build adds 4, and 32 more for a
 *     program with a memory promise), the transfer table (2 per pair of 28 bytes; the build adds
 *     16 per transfer and its pending lists, 16 more) and the full program (the direct placement's
 *     keys, arrivals and per-rank lists, 32 bytes per transfer, are freed before the build takes
 *     its tables: at most as much);
 *   - placing offloads (offload.c): the program, its simulated start and end times, the
 *     simulation's own tables, the candidates of one rank (two windows of a pair, about 100
 *     bytes each), its stream rebuilt;
 *   - verifying: the program and a few bytes per pair;
 *   - simulating (sim.c) `steps` steps: the program, two arrival times per pair (one step at a
 *     time; with offloads, five more figures per pair and memory events per step), and with
 *     events one sched_event (40 bytes) per instruction and step.
 * tests/schedule/test_size.c checks the counts against compiled programs and the bytes against
 * what compiling and simulating allocate. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/mem.h"
#include "schedule/internal.h"

enum { B_INSTR = sizeof(sched_instr), B_EVENT = sizeof(sched_event), B_RANK = 512 };

static double maxd(double a, double b) { return a > b ? a : b; }

void sched_size_estimate(const sched_shape *sh, int steps, int events, sched_size *out) {
  memset(out, 0, sizeof *out);
  double p = sh->p > 0 ? sh->p : 1, v = sh->v > 0 ? sh->v : 1, m = sh->m > 0 ? sh->m : 1, S = p * v;
  int fwd_only = sh->family == SCHED_INFERENCE, isv = sched_family_is_v(sh->family);
  double P = S * m, C;
  if (fwd_only) C = P;
  else if (sched_family_is_zb(sh->family)) C = 3 * P;
  else if (sh->family == SCHED_DUALPIPE_V) C = 2 * P + p * (p - 1) + p * (p + 1) / 2;
  else C = 2 * P;
  double hops = p == 1 ? 0 : isv ? S - 2 : S - 1;
  double X = hops * m * (fwd_only ? 1 : 2); /* transfers, each a SEND and a RECV */
  double loads = S == 1 ? m : 2 * m;
  double tail = fwd_only ? 0 : 2 * p + (sh->tied ? (isv || p == 1 ? 1 : 2) : 0); /* one rank holds both ends */
  double gathers = 0, copies = 0;
  if (sh->zero3) gathers = sh->keep_gathered || v == 1 ? 2 * S : 2 * C;
  /* two per window: forward work to backward work, a gradient received early to its backward,
   * a split pair's I to its W */
  if (sh->offload && !fwd_only) copies = (C > 2 * P ? 6 : 4) * P;
  double validates = sh->post_validation && !fwd_only ? p : 0; /* one VALIDATE per rank */
  double I = C + 2 * X + loads + tail + gathers + copies + validates;
  out->pairs = P, out->compute = C, out->instructions = I;

  double zb = 0;
  if (sched_family_is_zb(sh->family)) {
    zb = 2 * 4 * 4.0 * C + 16 * P + 4 * P + B_INSTR * C + B_RANK * p;
    if (sh->family == SCHED_V_HALF || sh->family == SCHED_V_MIN) {
      double T = 6 * (m + p) + 2 * m + 16;
      zb += 4 * 4 * p * T + 4 * 6 * p * m;
    }
  } else if (sh->family == SCHED_DUALPIPE_V) {
    zb = B_INSTR * C + 8 * m;
  }
  double lower = B_INSTR * C + 24 * P + 8 * C + 68 * C + 2 * 28 * (P + 1) + 32 * X +
                 B_INSTR * (I - gathers - copies) + B_RANK * p;
  double gather = sh->zero3 ? B_INSTR * I * (1 + 1 / p) + 20 * C / p : 0; /* one rank's stream rebuilt at a time */
  double k = steps > 1 ? steps : 1;
  /* with offloads the simulator also keeps per pair its copies' times and ranges, and a memory
   * event (32 bytes) for each change of a pair's memory, up to twice as many as it holds */
  double sim1 = B_INSTR * I + 16 * P + 12 * v * m + (copies > 0 ? 28 * P + 64 * (3 * P + copies) : 0);
  double offload = copies > 0 ? sim1 + 16 * I + 3 * 112 * v * m + 12 * v * m + B_INSTR * I / p : 0;
  double verify = B_INSTR * I + 13 * P;
  double sim = B_INSTR * I + 16 * P + 12 * v * m + (copies > 0 ? 28 * P + 64 * (3 * P + copies) * k : 0) +
               (events ? (double)B_EVENT * I * k : 0);
  out->bytes = maxd(maxd(maxd(zb, lower), offload), maxd(maxd(gather, verify), sim));
  out->events = events ? I * k : 0;
}

int sched_events_check(double instructions, int steps, const char *what) {
  double events = instructions * (steps > 1 ? steps : 1);
  if (events <= 2147483647.0) return CORE_OK;
  return core_error_set(CORE_EINPUT, "%s: about %.3g instructions for each of %d steps is %.3g timeline events, more than "
                        "the 2147483647 a timeline can hold: fewer steps, or no chart or trace", what, instructions, steps,
                        events);
}

/* "--stages 4096" or "pipeline.stages = 4096" */
static void named(char *buf, size_t n, const char *name, int value) {
  snprintf(buf, n, "%s%s%d", name, strncmp(name, "--", 2) == 0 ? " " : " = ", value);
}

int sched_size_check(const sched_shape *sh, const sched_size *sz, const sched_limits *lim, const char *const names[3]) {
  /* a program's counters (stream lengths, timeline events) are ints: past that, nothing can hold it */
  double most = lim->max_instructions > 0 && lim->max_instructions < 2147483647.0 ? lim->max_instructions : 2147483647.0;
  int over_i = sz->instructions > most;
  int over_b = lim->max_bytes > 0 && sz->bytes > lim->max_bytes;
  if (!over_i && !over_b && sz->events > 0) { /* a timeline's count is an int too */
    char what[48];
    snprintf(what, sizeof what, "schedule %s", sched_family_name(sh->family));
    return sched_events_check(sz->instructions, (int)(sz->events / sz->instructions + 0.5), what);
  }
  if (!over_i && !over_b) return CORE_OK;
  char p[64], v[64] = "", m[64], bytes[32], limit[32];
  named(p, sizeof p, names[0], sh->p);
  if (sh->v != 1) {
    char t[56];
    named(t, sizeof t, names[1], sh->v);
    snprintf(v, sizeof v, ", %s", t);
  }
  named(m, sizeof m, names[2], sh->m);
  core_mem_str(sz->bytes, bytes, sizeof bytes);
  core_mem_str(lim->max_bytes, limit, sizeof limit);
  char mem[300] = "", ins[200] = "";
  if (over_b)
    snprintf(mem, sizeof mem, "more than the memory limit, %s (%s%s)", limit, lim->mem_what,
             strncmp(lim->mem_what, "this machine", 12) ? "" : "; --max-memory or BRIGADE_MAX_MEMORY sets a lower one");
  int hard = lim->max_instructions <= 0 || most < lim->max_instructions; /* the ints' limit, not the user's */
  if (over_i && hard) snprintf(ins, sizeof ins, "more than the %.0f instructions a program can hold", most);
  else if (over_i && over_b) snprintf(ins, sizeof ins, "more than %s %.0f", lim->instr_name, most);
  else if (over_i) snprintf(ins, sizeof ins, "more than %s %.0f (raise it to build this anyway)", lim->instr_name, most);
  /* the parts are this message's own: kept whole (a %s without precision is cut, core/error.h) */
  return core_error_set(CORE_EINPUT, "schedule %s with %.60s%.60s, %.60s is too large to build: about %.3g instructions "
                        "(%.3g compute ops) and %.40s to compile and simulate, estimated from the shape; that is "
                        "%.300s%s%.200s",
                        sched_family_name(sh->family), p, v, m, sz->instructions, sz->compute, bytes, mem,
                        over_b && over_i ? ", and " : "", ins);
}
