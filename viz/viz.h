/* viz/viz.h: pictures of timeline events (simulated or measured), and a reader for the traces
 * brigade writes. Only timeline events come in: viz knows nothing of MPI, layers or programs.
 *
 * Times: a timeline in cost units (tl->unit "unit", simulations) or in seconds (tl->unit "s",
 * measured runs). The writers take tl->makespan and tl->bubble_rate as given (run
 * sched_timeline_stats first); a timeline whose makespan is 0 but which has events gets them
 * computed from its events with sched_timeline_stats' definition. Writers refuse a timeline that
 * fails viz_check (CORE_EINPUT); failing to write a file is CORE_ERUNTIME. */
#ifndef BRIGADE_VIZ_VIZ_H
#define BRIGADE_VIZ_VIZ_H

#include <stddef.h>
#include <stdio.h>

#include "schedule/events.h"

/* CORE_OK, or CORE_EINPUT naming the first problem: p or v below 1, an event whose rank is not
 * in [0, p), whose op is unknown, whose times are not finite or which ends before it starts. */
int viz_check(const sched_timeline *tl);

/* Checks tl, then writes it to path with fw (viz_fwrite_trace, viz_fwrite_svg). A write that
 * fails removes what it left only when path is a regular file: a device (/dev/full), a FIFO or
 * a symbolic link named as the output stays where it is. */
int viz_write_file(const sched_timeline *tl, const char *path, int (*fw)(const sched_timeline *, FILE *));

/* The event's display name: "F3" (op letter and micro-batch; " c1" appended for the chunk when
 * v > 1), "SEND_ACT 3 -> r2" / "RECV_GRAD 3 <- r1" for transfers, the op name for the rest
 * ("LOAD_MICROBATCH 3", "REDUCE_TIED_GRADS <-> r3", "OPTIMIZER_STEP"). */
void viz_event_name(const sched_timeline *tl, const sched_event *e, char *buf, size_t n);

/* Chrome trace event JSON (opens in Perfetto and chrome://tracing). One row per rank: pid 1,
 * tid = rank + 1 (Perfetto takes pid 0 and tid 0 for the Linux idle task), named "rank N" and
 * ordered by thread_name / thread_sort_index metadata events. One complete event ("ph":"X") per
 * timeline event: "name" as viz_event_name, "cat" the op name (FORWARD, SEND_ACT, ...),
 * "ts"/"dur" in microseconds (a cost unit is drawn as 1000 us, a second as 1e6 us), "args"
 * {mb, chunk, stage, peer, start, end} with start/end the exact times in the timeline's unit.
 * "otherData" holds brigade's metadata: generator "brigade", version 1, schedule, unit,
 * us_per_unit, p, v, m, makespan, bubble_rate, so the file reads back exactly. The fwrite form
 * writes to an open stream (stdout, a memory stream). */
int viz_write_trace(const sched_timeline *tl, const char *path);
int viz_fwrite_trace(const sched_timeline *tl, FILE *f);
/* Reads a trace viz_write_trace wrote into *tl (initialised here; sched_timeline_free it on
 * success, nothing to free on failure). Events come back in file order, identical to the ones
 * written (args.start/end when present; otherwise ts/dur converted back, within rounding).
 * Metadata rows ("ph":"M") are skipped. CORE_EINPUT, with file:line:col where it applies, for
 * a missing or unreadable file, malformed or truncated JSON, a file that is not a brigade trace
 * (no otherData.generator "brigade"), another format version, missing fields, wrong field
 * types and values out of range (rank >= p, chunk >= v, unknown op, end < start, ...). */
int viz_read_trace(const char *path, sched_timeline *tl);

/* SVG Gantt chart for a slide: one row per viz_rows row, rank 0 on top; a colour per compute
 * kind (F blue, B green, I orange, W purple; later chunks lighter when v > 1), micro-batch numbers in the boxes that fit
 * them, tail ops (REDUCE_TIED_GRADS, REDUCE_GRADS, OPTIMIZER_STEP) grey, loads and transfers as
 * thin strips under their row, idle time as the empty row background; a time axis with round
 * ticks, a legend, a title with the schedule, p, v, m and the bubble rate in percent, and a
 * subtitle with the makespan and the idle fraction (1 - compute time / (p * step)); right of
 * each row the share of the step that rank is not computing. Each compute event is exactly one
 * <rect class="op X"> (X its letter), so tools and tests can count them. */
int viz_write_svg(const sched_timeline *tl, const char *path);
int viz_fwrite_svg(const sched_timeline *tl, FILE *f);

/* Terminal chart: a header line (schedule, p, v, m, bubble rate, makespan, the time of one
 * column), one line per viz_rows row ("rank  0 |...|", or "ranks 2-999999: no events"), and a
 * legend line; no line is longer than `width`
 * (at least 10 columns of chart are drawn, whatever width says). A timeline in whole units that
 * fits gets one column per unit; otherwise time is scaled to the width. Each column shows the
 * op covering most of it, idle counting as a candidate: F, B, I, W in upper case for even
 * micro-batches and lower case for odd ones (so neighbours stay apart: "FfFfBBbb"), '#' for a
 * tail op, '.' for idle. Loads and transfers are not drawn. */
void viz_write_ascii(const sched_timeline *tl, FILE *f, int width);

/* The rows a chart draws, in rank order: one per rank that has events, and one for each run of
 * consecutive ranks that have none (a run of one rank is that rank's own row; a longer run is
 * one row, "ranks A-B", drawn as having no events). So a chart grows with the events, at
 * most 2n + 1 rows for n events, not with the rank count a trace claims: a trace of 2 events
 * that says p = 1000000 draws 3 rows. tl must pass viz_check. Returns the row count; *rows
 * (caller frees) gets each row's first and last rank. */
typedef struct {
  int first, last;
} viz_row;
int viz_rows(const sched_timeline *tl, viz_row **rows);

/* Per-rank bubble statistics, with sched_timeline_stats' definitions: busy is compute time, span
 * runs from the rank's first compute start to its last compute end, idle = span - busy (as in
 * the simulator's table), and bubble = (longest span - busy) / longest span, the rank's share of
 * the step spent idle, whose mean over the ranks is the timeline's bubble rate. */
typedef struct {
  double busy, first, last, span, idle;
  double bubble;
  int ops; /* compute events */
} viz_rank_stat;

/* Fills out[0..p) when out is not NULL; returns the bubble rate (0 for an empty timeline). */
double viz_stats(const sched_timeline *tl, viz_rank_stat *out);
/* The table: rank, compute ops, busy, span, idle, bubble %; then a summary line. */
void viz_write_stats(const sched_timeline *tl, FILE *f);
/* tl's makespan and bubble rate, or both computed from the events when tl->makespan is 0. */
void viz_summary(const sched_timeline *tl, double *makespan, double *bubble_rate);

#endif
