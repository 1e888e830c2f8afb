/* Partitioner: min-max optimality against brute force, non-empty pieces, clear errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "schedule/partition.h"

/* Best possible largest piece, by trying every way to cut (small n only). */
static double brute(const double *w, int n, int k, int start) {
  if (k == 1) {
    double t = 0;
    for (int i = start; i < n; i++) t += w[i];
    return t;
  }
  double best = INFINITY, t = 0;
  for (int end = start + 1; end <= n - (k - 1); end++) {
    t += w[end - 1];
    double rest = brute(w, n, k - 1, end);
    double m = t > rest ? t : rest;
    if (m < best) best = m;
  }
  return best;
}

Test(partition, minmax_is_optimal) {
  unsigned seed = 7;
  for (int trial = 0; trial < 300; trial++) {
    int n = 1 + trial % 11, k = 1 + (trial / 11) % n;
    double w[16];
    for (int i = 0; i < n; i++) w[i] = (double)((seed = seed * 1664525u + 1013904223u) >> 20) / 100.0;
    if (trial % 5 == 0) w[0] = 1000; /* an embedding much heavier than the rest */
    int b[17];
    cr_assert_eq(sched_partition(SCHED_PART_COST, w, n, k, NULL, b), CORE_OK, "%s", core_error_msg());
    cr_assert_eq(b[0], 0);
    cr_assert_eq(b[k], n);
    for (int s = 0; s < k; s++) cr_assert(b[s + 1] > b[s], "piece %d empty (n=%d k=%d)", s, n, k);
    double got = sched_partition_max(w, k, b), want = brute(w, n, k, 0);
    cr_assert(fabs(got - want) <= 1e-9 * want, "n=%d k=%d: max %g, optimum %g", n, k, got, want);
  }
}

Test(partition, uniform_and_explicit) {
  int b[5];
  cr_assert_eq(sched_partition(SCHED_PART_UNIFORM, NULL, 10, 4, NULL, b), CORE_OK);
  int want[5] = {0, 3, 6, 8, 10};
  cr_assert(memcmp(b, want, sizeof want) == 0);
  int given[4] = {0, 2, 7, 10};
  cr_assert_eq(sched_partition(SCHED_PART_EXPLICIT, NULL, 10, 3, given, b), CORE_OK);
  cr_assert(memcmp(b, given, sizeof given) == 0);
  int bad1[4] = {0, 7, 7, 10}, bad2[4] = {0, 2, 7, 9};
  cr_assert_eq(sched_partition(SCHED_PART_EXPLICIT, NULL, 10, 3, bad1, b), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "must increase"));
  cr_assert_eq(sched_partition(SCHED_PART_EXPLICIT, NULL, 10, 3, bad2, b), CORE_EINPUT);
}

Test(partition, fewer_layers_than_pieces) {
  int b[9];
  double w[5] = {1, 1, 1, 1, 1};
  cr_assert_eq(sched_partition(SCHED_PART_PARAMETERS, w, 5, 8, NULL, b), CORE_EINPUT);
  cr_assert(strstr(core_error_msg(), "5 layers, fewer than the 8 pieces"), "%s", core_error_msg());
  sched_part_method m;
  cr_assert_eq(sched_part_parse("cost", &m), CORE_OK);
  cr_assert_eq(sched_part_parse("random", &m), CORE_EINPUT);
}
