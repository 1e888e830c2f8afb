/* viz/viz.h: writers for timeline events (simulated or measured) and a reader for the traces
 * brigade writes. Only timeline events come in: viz knows nothing of MPI, layers or programs. */
#ifndef BRIGADE_VIZ_VIZ_H
#define BRIGADE_VIZ_VIZ_H

#include <stdio.h>

#include "schedule/events.h"

/* Chrome trace event JSON (Perfetto, chrome://tracing): one row per rank, complete events
 * named "F3" (op letter and micro-batch, plus ".c1" for chunk 1 when v > 1); brigade's metadata
 * (schedule, unit, p, v, m, makespan, bubble_rate) in "otherData" so it can be read back. */
int viz_write_trace(const sched_timeline *tl, const char *path);
int viz_read_trace(const char *path, sched_timeline *tl);
/* SVG Gantt chart: ranks as rows, a colour per op kind, micro-batch numbers in the boxes, a time
 * axis, a legend and a title with the schedule and its bubble rate. */
int viz_write_svg(const sched_timeline *tl, const char *path);
/* Terminal chart: one line per rank, at most `width` columns of time. */
void viz_write_ascii(const sched_timeline *tl, FILE *f, int width);

#endif
