/* viz/trace.c: Chrome trace event JSON, written and read back.
 *
 * The layout keeps to what Perfetto's JSON importer reads: only the top-level keys it knows
 * (displayTimeUnit first, otherData, traceEvents), no arrays inside events, no \u escapes in
 * brigade's own names, metadata events without a timestamp, pid/tid starting at 1. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "core/progress.h"
#include "viz/viz.h"

enum { TRACE_VERSION = 1, TRACE_PID = 1 };

/* What runs beside a rank's compute goes on rows of its own, since Perfetto draws only events
 * that nest (a receive lasts from its post to its data's arrival while the rank computes on; an
 * offload and a reload run at once on the two copy streams): rank r's compute is row r + 1, its
 * copies to the host row p + 1 + r, its transfers row 2p + 1 + r, its copies back row
 * 3p + 1 + r. (Traces of older brigades, with transfers on the compute rows and both copies on
 * the copy row, read too.) */
enum { ROW_COMPUTE, ROW_TO_HOST, ROW_TRANSFERS, ROW_BACK, ROWS };
static int row_kind(int op) {
  return op == SCHED_OFFLOAD ? ROW_TO_HOST : op == SCHED_RELOAD ? ROW_BACK : sched_is_p2p((sched_op)op) ? ROW_TRANSFERS : ROW_COMPUTE;
}
static int row_of(const sched_timeline *tl, const sched_event *e) { return e->rank + 1 + row_kind(e->op) * tl->p; }

/* A cost unit is drawn as one millisecond, a second as a second. */
static double us_per_unit(const char *unit) { return sched_unit_is_seconds(unit) ? 1e6 : 1e3; }

/* Starts the next element of traceEvents: a separator before all but the first. */
static void next_event(FILE *f, int *count) { fputs((*count)++ ? ",\n{" : "{", f); }

static void write_meta(FILE *f, int *count, const char *what, int tid, const char *key,
                       const char *str, int num) {
  next_event(f, count);
  fprintf(f, "\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d", what, TRACE_PID);
  if (tid > 0) fprintf(f, ",\"tid\":%d", tid);
  fprintf(f, ",\"args\":{\"%s\":", key);
  if (str)
    core_json_write_string(f, str);
  else
    fprintf(f, "%d", num);
  fputs("}}", f);
}

int viz_fwrite_trace(const sched_timeline *tl, FILE *f) {
  int rc = viz_check(tl);
  if (rc) return rc;
  double k = us_per_unit(tl->unit), makespan, bubble;
  viz_summary(tl, &makespan, &bubble);
  fputs("{\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"generator\":\"brigade\",", f);
  fprintf(f, "\"version\":%d,\"schedule\":", TRACE_VERSION);
  core_json_write_string(f, tl->schedule);
  fputs(",\"unit\":", f);
  core_json_write_string(f, tl->unit);
  fputs(",\"us_per_unit\":", f);
  core_json_write_number(f, k);
  fprintf(f, ",\"p\":%d,\"v\":%d,\"m\":%d,\"makespan\":", tl->p, tl->v, tl->m);
  core_json_write_number(f, makespan);
  fputs(",\"bubble_rate\":", f);
  core_json_write_number(f, bubble);
  fputs("},\n\"traceEvents\":[\n", f);

  char label[128];
  int count = 0;
  snprintf(label, sizeof label, "brigade %s p=%d v=%d m=%d (%s)", tl->schedule, tl->p, tl->v, tl->m,
           sched_unit_is_measured(tl->unit) ? "measured" : sched_unit_is_seconds(tl->unit) ? "simulated" : "simulated, 1 unit = 1 ms");
  write_meta(f, &count, "process_name", 0, "name", label, 0);
  int used[ROWS] = {1, 0, 0, 0}; /* the side rows, under each rank's, when there are such events */
  for (int i = 0; i < tl->n; i++) used[row_kind(tl->ev[i].op)] = 1;
  static const char *const row_name[ROWS] = {"", " copies to host", " transfers", " copies back"};
  static const int row_order[ROWS] = {0, 2, 1, 3}; /* compute, transfers, copies out, copies back */
  for (int r = 0; r < tl->p; r++)
    for (int w = 0; w < ROWS; w++) {
      if (!used[w]) continue;
      snprintf(label, sizeof label, "rank %d%s", r, row_name[w]);
      write_meta(f, &count, "thread_name", w * tl->p + r + 1, "name", label, 0);
      write_meta(f, &count, "thread_sort_index", w * tl->p + r + 1, "sort_index", NULL, ROWS * r + row_order[w]);
    }
  unsigned tick = 0;
  core_progress_start("writing the trace");
  core_progress_phase("", tl->n, "events");
  for (int i = 0; i < tl->n; i++) {
    const sched_event *e = &tl->ev[i];
    core_progress_tick(&tick, i);
    viz_event_name(tl, e, label, sizeof label);
    next_event(f, &count);
    fputs("\"name\":", f);
    core_json_write_string(f, label);
    fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":", sched_op_name((sched_op)e->op));
    core_json_write_number(f, e->start * k);
    fputs(",\"dur\":", f);
    core_json_write_number(f, (e->end - e->start) * k);
    fprintf(f,
            ",\"pid\":%d,\"tid\":%d,\"args\":{\"mb\":%d,\"chunk\":%d,\"stage\":%d,\"peer\":%d,"
            "\"start\":",
            TRACE_PID, row_of(tl, e), e->mb, e->chunk, e->stage, e->peer);
    core_json_write_number(f, e->start);
    fputs(",\"end\":", f);
    core_json_write_number(f, e->end);
    fputs("}}", f);
  }
  core_progress_stop();
  fputs("\n]}\n", f);
  return CORE_OK;
}

int viz_write_trace(const sched_timeline *tl, const char *path) { return viz_write_file(tl, path, viz_fwrite_trace); }

/* ---- reading ---- */

static int not_ours(const char *path) {
  return core_error_set(CORE_EINPUT,
                        "%s is not a brigade trace (no otherData.generator \"brigade\"); brigade "
                        "reads the traces it wrote itself (brigade sim --trace, or a training run)",
                        path);
}

static int at(const core_json *j, const char *what) {
  return core_error_set(CORE_EINPUT, "%s:%d:%d: %s", j->src, j->line, j->col, what);
}

static int read_meta(const char *path, const core_json *root, sched_timeline *tl, double *upu) {
  const core_json *meta = core_json_get(root, "otherData");
  const core_json *gen = core_json_get(meta, "generator");
  if (!core_json_is(gen, CORE_JSON_STRING) || strcmp(gen->str, "brigade") != 0)
    return not_ours(path);
  const char *schedule, *unit;
  int version, p, v, m, rc;
  double makespan, bubble;
  if ((rc = core_json_get_int(meta, "version", 0, INT_MAX, &version))) return rc;
  if (version != TRACE_VERSION)
    return core_error_set(
        CORE_EINPUT, "%s: trace format version %d is not supported (this brigade reads version %d)",
        path, version, TRACE_VERSION);
  if ((rc = core_json_get_string(meta, "schedule", &schedule)) ||
      (rc = core_json_get_string(meta, "unit", &unit)) ||
      (rc = core_json_get_number(meta, "us_per_unit", upu)) ||
      (rc = core_json_get_int(meta, "p", 1, 1 << 20, &p)) ||
      (rc = core_json_get_int(meta, "v", 1, 1 << 10, &v)) ||
      (rc = core_json_get_int(meta, "m", 1, INT_MAX, &m)) ||
      (rc = core_json_get_number(meta, "makespan", &makespan)) ||
      (rc = core_json_get_number(meta, "bubble_rate", &bubble)))
    return rc;
  if (strlen(schedule) >= sizeof tl->schedule)
    return at(core_json_get(meta, "schedule"), "'schedule' is longer than 31 bytes");
  if (strlen(unit) >= sizeof tl->unit)
    return at(core_json_get(meta, "unit"), "'unit' is longer than 15 bytes");
  if (!(*upu > 0)) return at(core_json_get(meta, "us_per_unit"), "'us_per_unit' must be positive");
  if (makespan < 0) return at(core_json_get(meta, "makespan"), "'makespan' must not be negative");
  sched_timeline_init(tl, schedule, unit, p, v, m);
  tl->makespan = makespan, tl->bubble_rate = bubble;
  return CORE_OK;
}

static int op_of(const char *name, sched_op *op) {
  for (int o = 0; o < SCHED_OP_COUNT; o++)
    if (strcmp(sched_op_name((sched_op)o), name) == 0) {
      *op = (sched_op)o;
      return 0;
    }
  return -1;
}

/* One complete event into *e. */
static int read_event(const sched_timeline *tl, const core_json *ev, double upu, sched_event *e) {
  const core_json *args;
  const char *name, *cat;
  int tid, rc;
  double ts, dur;
  sched_op op;
  if ((rc = core_json_get_string(ev, "name", &name)) ||
      (rc = core_json_get_string(ev, "cat", &cat)) ||
      (rc = core_json_get_int(ev, "tid", 1, ROWS * tl->p, &tid)) ||
      (rc = core_json_get_number(ev, "ts", &ts)) || (rc = core_json_get_number(ev, "dur", &dur)) ||
      (rc = core_json_get_object(ev, "args", &args)))
    return rc;
  if (op_of(cat, &op))
    return at(core_json_get(ev, "cat"), "'cat' is not one of brigade's op names");
  if (dur < 0) return at(core_json_get(ev, "dur"), "'dur' must not be negative");
  int row = (tid - 1) / tl->p, kind = row_kind(op);
  /* what the row may hold: its own kind; older traces also held transfers on the compute rows
   * and reloads on the copy row */
  int fits = row == kind || (row == ROW_COMPUTE && kind == ROW_TRANSFERS) || (row == ROW_TO_HOST && kind == ROW_BACK);
  if (!fits)
    return at(core_json_get(ev, "tid"), (row == ROW_TO_HOST || row == ROW_BACK) && kind == ROW_TO_HOST
                                            ? "'tid' names the copies-back row but the event is an OFFLOAD (its row is "
                                              "the copies to the host)"
                                        : row == ROW_TO_HOST || row == ROW_BACK ? "'tid' names a copy row but the event is not a copy"
                                        : row == ROW_TRANSFERS ? "'tid' names a transfer row but the event is not a transfer"
                                                               : "a copy event is not on its rank's copy row");
  *e = (sched_event){.rank = tid - 1 - row * tl->p, .op = (uint8_t)op};
  if ((rc = core_json_get_int(args, "mb", -1, INT_MAX, &e->mb)) ||
      (rc = core_json_get_int(args, "chunk", -1, tl->v - 1, &e->chunk)) ||
      (rc = core_json_get_int(args, "stage", -1, tl->p * tl->v - 1, &e->stage)) ||
      (rc = core_json_get_int(args, "peer", -1, tl->p - 1, &e->peer)))
    return rc;
  if (core_json_get(args, "start") || core_json_get(args, "end")) {
    if ((rc = core_json_get_number(args, "start", &e->start)) ||
        (rc = core_json_get_number(args, "end", &e->end)))
      return rc;
  } else { /* a trace written by something else: microseconds back to the timeline's unit */
    e->start = ts / upu, e->end = (ts + dur) / upu;
  }
  if (!(e->end >= e->start)) return at(args, "the event ends before it starts");
  return CORE_OK;
}

static int read_events(const core_json *root, sched_timeline *tl, double upu) {
  const core_json *events = NULL;
  int rc = core_json_get_array(root, "traceEvents", &events);
  if (rc) return rc;
  for (size_t i = 0; !rc && i < events->len; i++) {
    const core_json *ev = events->items[i];
    const char *ph;
    if (!core_json_is(ev, CORE_JSON_OBJECT)) return at(ev, "a trace event must be an object");
    if ((rc = core_json_get_string(ev, "ph", &ph))) return rc;
    if (strcmp(ph, "M") == 0) continue; /* process and thread names */
    if (strcmp(ph, "X") != 0)
      return at(core_json_get(ev, "ph"), "unexpected event phase: a brigade trace holds complete "
                                         "('X') and metadata ('M') events only");
    sched_event e;
    if (!(rc = read_event(tl, ev, upu, &e))) sched_timeline_add(tl, e);
  }
  return rc;
}

int viz_read_trace(const char *path, sched_timeline *tl) {
  memset(tl, 0, sizeof *tl);
  core_json *root;
  int rc = core_json_parse_file(path, &root);
  if (rc) return rc;
  double upu = 0;
  if (!core_json_is(root, CORE_JSON_OBJECT)) rc = not_ours(path);
  if (!rc) rc = read_meta(path, root, tl, &upu);
  if (!rc) rc = read_events(root, tl, upu);
  if (!rc && (rc = viz_check(tl))) core_error_prefix("%s", path); /* what no writer would draw */
  core_json_free(root);
  if (rc) sched_timeline_free(tl);
  return rc;
}
