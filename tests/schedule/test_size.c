/* Sizes known before building (schedule/size.c): the estimate's instruction count is the compiled
 * program's for every family (ZeRO-3's reshard runs with several chunks: a bound), its bytes are
 * at least the program's own and grow linearly, and a shape over a limit is refused at once, the
 * message naming the shape as the user gave it, the estimate and the limit. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "schedule/schedule.h"

static const char *const flags[3] = {"--stages", "--virtual", "--microbatches"};

static int chunks_of(sched_family f) { return sched_family_is_v(f) || f == SCHED_INTERLEAVED ? 2 : 1; }

/* 1 when the shape compiled and was checked, 0 when the family refuses it (dualpipev m < 2p) */
static int check_count(sched_shape sh) {
  sched_program pr;
  sched_costs c = sched_costs_unit();
  if (sched_compile(&sh, &c, &pr) != CORE_OK) return 0;
  sched_size sz;
  sched_size_estimate(&sh, 1, 0, &sz);
  double real = (double)sched_program_count(&pr), compute = 0;
  for (int r = 0; r < pr.p; r++)
    for (int i = 0; i < pr.streams[r].len; i++) compute += sched_op_is_compute((sched_op)pr.streams[r].ins[i].op);
  const char *what = sched_family_name(sh.family);
  cr_assert_eq(sz.compute, compute, "%s p=%d v=%d m=%d: %g compute ops estimated, %g built", what, sh.p, sh.v, sh.m,
               sz.compute, compute);
  if (sh.zero3 && !sh.keep_gathered && sh.v > 1)
    cr_assert(sz.instructions >= real, "%s p=%d m=%d zero3: bound %g < %g", what, sh.p, sh.m, sz.instructions, real);
  else
    cr_assert_eq(sz.instructions, real, "%s p=%d v=%d m=%d tied=%d zero3=%d keep=%d: %g instructions estimated, %g built",
                 what, sh.p, sh.v, sh.m, sh.tied, sh.zero3, sh.keep_gathered, sz.instructions, real);
  cr_assert(sz.bytes >= sizeof(sched_instr) * real, "%s: %g bytes for %g instructions", what, sz.bytes, real);
  sched_program_free(&pr);
  return 1;
}

Test(size, instruction_count_is_the_compiled_programs) {
  int checked = 0;
  for (int f = 0; f < SCHED_CUSTOM; f++)
    for (int p = 1; p <= 5; p++)
      for (int m = 1; m <= 11; m += 2)
        for (int tied = 0; tied < 2; tied++) {
          sched_shape sh = {.family = (sched_family)f, .p = p, .v = chunks_of((sched_family)f), .m = m, .tied = tied,
                            .post_validation = (p + m) % 2}; /* half the shapes with a VALIDATE per rank */
          checked += check_count(sh);
          if (f == SCHED_INTERLEAVED) sh.v = 3, checked += check_count(sh);
        }
  cr_assert_gt(checked, 600, "only %d shapes compiled", checked);
}

Test(size, zero3_gathers_counted_or_bounded) {
  sched_family fams[] = {SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1, SCHED_ZB_V};
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++)
    for (int p = 1; p <= 4; p++)
      for (int keep = 0; keep < 2; keep++) {
        sched_shape sh = {.family = fams[f], .p = p, .v = chunks_of(fams[f]), .m = 2 * p + 1, .zero3 = 1,
                          .keep_gathered = keep, .prefetch = 1};
        cr_assert(check_count(sh), "%s p=%d keep=%d did not compile", sched_family_name(fams[f]), p, keep);
      }
}

/* Offload keeps only the copies that hide: the estimate is a bound, and the program's count with
 * none placed. */
Test(size, offload_copies_bounded) {
  sched_family fams[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_ZB_H1, SCHED_ZB_V, SCHED_INTERLEAVED};
  for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
    int copied = 0; /* shapes with copies (on 2 ranks a family may have none: none would save a slot) */
    for (int p = 2; p <= 4; p++) {
      sched_shape sh = {.family = fams[f], .p = p, .v = chunks_of(fams[f]), .m = 3 * p, .offload = SCHED_OFFLOAD_FULL};
      sched_costs c = sched_costs_unit();
      c.offload = 0.25;
      sched_program pr;
      cr_assert_eq(sched_compile(&sh, &c, &pr), CORE_OK, "%s", core_error_msg());
      sched_size sz, none;
      sched_size_estimate(&sh, 1, 0, &sz);
      sh.offload = 0;
      sched_size_estimate(&sh, 1, 0, &none);
      double real = (double)sched_program_count(&pr);
      cr_assert(real <= sz.instructions && real >= none.instructions, "%s p=%d: %g built, bound %g, %g without copies",
                sched_family_name(fams[f]), p, real, sz.instructions, none.instructions);
      copied += real > none.instructions;
      sched_program_free(&pr);
    }
    cr_assert(copied > 0, "%s: no shape with copies", sched_family_name(fams[f]));
  }
}

Test(size, bytes_grow_with_the_program_not_faster) {
  for (int f = 0; f < SCHED_CUSTOM; f++) {
    sched_shape a = {.family = (sched_family)f, .p = 64, .v = chunks_of((sched_family)f), .m = 1024}, b = a;
    b.m = 4096;
    sched_size x, y, e;
    sched_size_estimate(&a, 1, 0, &x), sched_size_estimate(&b, 1, 0, &y), sched_size_estimate(&b, 4, 1, &e);
    double ri = y.instructions / x.instructions, rb = y.bytes / x.bytes;
    cr_assert(rb <= 1.05 * ri, "%s: 4x the micro-batches, %gx the instructions, %gx the bytes", sched_family_name(a.family),
              ri, rb);
    cr_assert(e.bytes >= y.bytes, "%s: events make it smaller?", sched_family_name(a.family));
    /* per instruction, everything held at once: a few hundred bytes, not more */
    cr_assert(y.bytes / y.instructions < 400, "%s: %g bytes per instruction", sched_family_name(a.family),
              y.bytes / y.instructions);
  }
}

Test(size, over_a_limit_is_refused_at_once_naming_the_shape) {
  sched_shape sh = {.family = SCHED_1F1B, .p = 65536, .v = 1, .m = 1 << 20};
  sched_limits lim = {.max_instructions = 33554432, .instr_name = "--max-instructions", .max_bytes = 16e9,
                      .mem_what = "this machine's memory"};
  clock_t t0 = clock();
  sched_size sz;
  sched_size_estimate(&sh, 1, 0, &sz);
  cr_assert_eq(sched_size_check(&sh, &sz, &lim, flags), CORE_EINPUT);
  cr_assert((double)(clock() - t0) / CLOCKS_PER_SEC < 0.1);
  const char *msg = core_error_msg();
  cr_assert(strstr(msg, "--stages 65536") && strstr(msg, "--microbatches 1048576") && !strstr(msg, "--virtual"), "%s", msg);
  cr_assert(strstr(msg, "TiB") && strstr(msg, "memory limit") && strstr(msg, "--max-instructions 33554432"), "%s", msg);
  cr_assert(sz.instructions > 4e11, "%g", sz.instructions);

  /* within memory, over the instruction limit: says so and how to go on */
  sched_shape mid = {.family = SCHED_INTERLEAVED, .p = 4096, .v = 2, .m = 4096};
  sched_size_estimate(&mid, 1, 0, &sz);
  lim.max_bytes = 1e15;
  cr_assert_eq(sched_size_check(&mid, &sz, &lim, flags), CORE_EINPUT);
  msg = core_error_msg();
  cr_assert(strstr(msg, "--virtual 2") && strstr(msg, "raise it") && !strstr(msg, "memory limit"), "%s", msg);

  /* config keys are named as keys */
  static const char *const keys[3] = {"pipeline.stages", "pipeline.virtual_stages", "gradient_accumulation_steps"};
  lim.max_instructions = 0, lim.max_bytes = 1000, lim.mem_what = "--max-memory 1000";
  sched_shape small = {.family = SCHED_GPIPE, .p = 2, .v = 1, .m = 64};
  sched_size_estimate(&small, 1, 0, &sz);
  cr_assert_eq(sched_size_check(&small, &sz, &lim, keys), CORE_EINPUT);
  msg = core_error_msg();
  cr_assert(strstr(msg, "pipeline.stages = 2") && strstr(msg, "gradient_accumulation_steps = 64") &&
                strstr(msg, "(--max-memory 1000)") && !strstr(msg, "sets a lower one"), "%s", msg);

  /* no limits given: only what a program's int counters can hold */
  lim = (sched_limits){0};
  cr_assert_eq(sched_size_check(&small, &sz, &lim, keys), CORE_OK);
  sched_size_estimate(&sh, 1, 0, &sz);
  cr_assert_eq(sched_size_check(&sh, &sz, &lim, flags), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "a program can hold"), "%s", core_error_msg());
}
