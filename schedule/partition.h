/* schedule/partition.h: cutting a list of n layers into k contiguous, non-empty pieces
 * (k = p*v: piece s is virtual stage s). Pure: it sees one weight per layer, not the layers. */
#ifndef BRIGADE_SCHEDULE_PARTITION_H
#define BRIGADE_SCHEDULE_PARTITION_H

typedef enum {
  SCHED_PART_UNIFORM = 0, /* equal layer counts (the first n % k pieces get one more) */
  SCHED_PART_PARAMETERS,  /* balance parameter counts: minimise the largest piece */
  SCHED_PART_COST,        /* balance per-layer costs (FLOPs or measured times): min-max */
  SCHED_PART_EXPLICIT,    /* boundaries given by the user */
} sched_part_method;

int sched_part_parse(const char *name, sched_part_method *out);
/* weights: [n] (ignored by uniform and explicit); given: [k+1] boundaries for explicit
 * (0 = b0 < b1 < ... < bk = n). Writes bounds[k+1]: piece s is layers [bounds[s], bounds[s+1]). */
int sched_partition(sched_part_method method, const double *weights, int n, int k,
                    const int *given, int *bounds);
/* The largest piece's total weight. */
double sched_partition_max(const double *weights, int k, const int *bounds);

#endif
