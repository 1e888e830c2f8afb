/* schedule/partition.c: min-max contiguous partitioning.
 * The objective is the slowest piece. For a bound X, cutting greedily from the left gives the
 * fewest pieces that each stay within X; binary search finds the smallest X that needs at most
 * k pieces, and pieces are then split (largest first) until there are exactly k: splitting never
 * makes the largest piece larger, so the result stays optimal and no piece is empty. */
#include "schedule/partition.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

int sched_part_parse(const char *name, sched_part_method *out) {
  if (!strcasecmp(name, "uniform")) *out = SCHED_PART_UNIFORM;
  else if (!strcasecmp(name, "parameters")) *out = SCHED_PART_PARAMETERS;
  else if (!strcasecmp(name, "cost") || !strcasecmp(name, "flops")) *out = SCHED_PART_COST;
  else if (!strcasecmp(name, "explicit")) *out = SCHED_PART_EXPLICIT;
  else
    return core_error_set(CORE_EINPUT, "unknown partition method '%s' (expected uniform, "
                          "parameters, cost or explicit)", name);
  return CORE_OK;
}

/* Pieces needed when no piece may exceed x (INT_MAX-ish if one layer alone exceeds it). */
static int pieces_within(const double *w, int n, double x, int *bounds, int k) {
  int count = 0;
  double sum = 0;
  if (bounds) bounds[0] = 0;
  for (int i = 0; i < n; i++) {
    if (w[i] > x) return n + 1;
    if (i > 0 && sum + w[i] > x) {
      count++;
      if (bounds && count < k) bounds[count] = i;
      sum = 0;
    }
    sum += w[i];
  }
  return count + 1;
}

static double piece(const double *w, const int *b, int s) {
  double t = 0;
  for (int i = b[s]; i < b[s + 1]; i++) t += w[i];
  return t;
}

/* Splits the heaviest multi-layer piece in two, at its most balanced cut. */
static void split_one(const double *w, int *b, int *have) {
  int best = -1;
  double bw = -1;
  for (int s = 0; s < *have; s++)
    if (b[s + 1] - b[s] > 1 && piece(w, b, s) > bw) bw = piece(w, b, s), best = s;
  CORE_ASSERT(best >= 0);
  int cut = b[best] + 1;
  double left = w[b[best]], total = bw, err = left > total - left ? left - (total - left) : (total - left) - left;
  for (int i = b[best] + 2; i < b[best + 1]; i++) {
    left += w[i - 1];
    double e = left > total - left ? left - (total - left) : (total - left) - left;
    if (e < err) err = e, cut = i;
  }
  memmove(&b[best + 2], &b[best + 1], sizeof(int) * (size_t)(*have - best));
  b[best + 1] = cut;
  (*have)++;
}

static void minmax(const double *w, int n, int k, int *bounds) {
  double lo = 0, hi = 0;
  for (int i = 0; i < n; i++) {
    hi += w[i];
    if (w[i] > lo) lo = w[i];
  }
  for (int it = 0; it < 200 && hi - lo > 1e-12 * (hi > 1 ? hi : 1); it++) {
    double mid = 0.5 * (lo + hi);
    if (pieces_within(w, n, mid, NULL, k) <= k) hi = mid;
    else lo = mid;
  }
  int have = pieces_within(w, n, hi, bounds, k);
  CORE_ASSERT(have <= k);
  bounds[have] = n;
  while (have < k) split_one(w, bounds, &have);
}

int sched_partition(sched_part_method method, const double *weights, int n, int k,
                    const int *given, int *bounds) {
  if (k < 1) return core_error_set(CORE_EINPUT, "cannot cut the model into %d pieces", k);
  if (n < k)
    return core_error_set(CORE_EINPUT, "the model has %d layers, fewer than the %d pieces of the "
                          "pipeline (stages x virtual stages): no stage may be empty", n, k);
  switch (method) {
  case SCHED_PART_UNIFORM:
    for (int s = 0, at = 0; s <= k; s++) {
      bounds[s] = at;
      at += n / k + (s < n % k);
    }
    bounds[k] = n;
    return CORE_OK;
  case SCHED_PART_EXPLICIT:
    if (!given) return core_error_set(CORE_EINPUT, "explicit partition needs boundaries");
    if (given[0] != 0 || given[k] != n)
      return core_error_set(CORE_EINPUT, "partition boundaries must start at 0 and end at %d (the "
                            "number of layers); got %d and %d", n, given[0], given[k]);
    for (int s = 0; s < k; s++)
      if (given[s + 1] <= given[s])
        return core_error_set(CORE_EINPUT, "partition boundaries must increase (piece %d would "
                              "hold layers [%d, %d))", s, given[s], given[s + 1]);
    memcpy(bounds, given, sizeof(int) * (size_t)(k + 1));
    return CORE_OK;
  default:
    for (int i = 0; i < n; i++)
      if (!(weights[i] >= 0))
        return core_error_set(CORE_EINPUT, "layer %d has a negative or invalid weight", i);
    minmax(weights, n, k, bounds);
    return CORE_OK;
  }
}

double sched_partition_max(const double *weights, int k, const int *bounds) {
  double mx = 0;
  for (int s = 0; s < k; s++) {
    double t = piece(weights, bounds, s);
    if (t > mx) mx = t;
  }
  return mx;
}
