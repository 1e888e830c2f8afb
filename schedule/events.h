/* schedule/events.h: timeline events, the one type shared by the simulator, real runs and viz/.
 * Times are in seconds for real runs and in cost units for simulations (timeline.unit says). */
#ifndef BRIGADE_SCHEDULE_EVENTS_H
#define BRIGADE_SCHEDULE_EVENTS_H

#include "schedule/ir.h"

typedef struct {
  int rank;
  uint8_t op;  /* sched_op */
  int mb;      /* -1 when none */
  int chunk;   /* -1 when none */
  int stage;   /* virtual stage, -1 when none */
  int peer;    /* -1 when none */
  double start, end;
} sched_event;

typedef struct {
  char schedule[32]; /* family name, e.g. "1f1b" */
  /* "unit" for simulations in cost units, "s" for measured runs, "s, predicted" for simulations
   * in seconds (sim CONFIG, tune: costs from FLOPs) */
  char unit[16];
  int p, v, m;
  double makespan;
  double bubble_rate;
  int n, cap;
  sched_event *ev;
} sched_timeline;

void sched_timeline_init(sched_timeline *tl, const char *schedule, const char *unit, int p, int v,
                         int m);
void sched_timeline_add(sched_timeline *tl, sched_event e);
/* Makes room for n events at once (a simulation knows how many it will add). */
void sched_timeline_reserve(sched_timeline *tl, size_t n);
void sched_timeline_free(sched_timeline *tl);
/* Whether a timeline's unit is seconds (measured or predicted), and measured seconds. */
static inline int sched_unit_is_seconds(const char *u) { return u[0] == 's' && (u[1] == 0 || u[1] == ','); }
static inline int sched_unit_is_measured(const char *u) { return u[0] == 's' && u[1] == 0; }
/* Recomputes makespan and bubble_rate (1 - mean busy / max span, compute ops only) from events. */
void sched_timeline_stats(sched_timeline *tl);

#endif
