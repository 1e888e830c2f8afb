/* viz/trace.c: Chrome trace event JSON, written and read back. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "viz/viz.h"

/* Simulations are in cost units: one unit is drawn as one millisecond. */
static double us_per_unit(const sched_timeline *tl) { return strcmp(tl->unit, "s") == 0 ? 1e6 : 1e3; }

static void event_name(const sched_timeline *tl, const sched_event *e, char *buf, size_t n) {
  char l = sched_op_letter((sched_op)e->op);
  if (l && tl->v > 1) snprintf(buf, n, "%c%d.c%d", l, e->mb, e->chunk);
  else if (l) snprintf(buf, n, "%c%d", l, e->mb);
  else if (e->mb >= 0) snprintf(buf, n, "%s %d %s r%d", sched_op_name((sched_op)e->op), e->mb,
                                (e->op == SCHED_SEND_ACT || e->op == SCHED_SEND_GRAD) ? "->" : "<-", e->peer);
  else snprintf(buf, n, "%s", sched_op_name((sched_op)e->op));
}

int viz_write_trace(const sched_timeline *tl, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return core_error_set(CORE_ERUNTIME, "cannot write %s: %s", path, strerror(errno));
  double k = us_per_unit(tl);
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"generator\":\"brigade\",\"schedule\":");
  core_json_write_string(f, tl->schedule);
  fprintf(f, ",\"unit\":");
  core_json_write_string(f, tl->unit);
  fprintf(f, ",\"p\":%d,\"v\":%d,\"m\":%d,\"makespan\":%.17g,\"bubble_rate\":%.17g},\n\"traceEvents\":[\n",
          tl->p, tl->v, tl->m, tl->makespan, tl->bubble_rate);
  for (int r = 0; r < tl->p; r++)
    fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}},\n", r, r);
  for (int i = 0; i < tl->n; i++) {
    const sched_event *e = &tl->ev[i];
    char name[64];
    event_name(tl, e, name, sizeof name);
    fprintf(f, "{\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"name\":\"%s\",\"cat\":\"%s\",\"ts\":%.17g,\"dur\":%.17g,"
               "\"args\":{\"op\":%d,\"mb\":%d,\"chunk\":%d,\"stage\":%d,\"peer\":%d,\"start\":%.17g,\"end\":%.17g}}%s\n",
            e->rank, name, sched_op_name((sched_op)e->op), e->start * k, (e->end - e->start) * k, e->op,
            e->mb, e->chunk, e->stage, e->peer, e->start, e->end, i + 1 < tl->n ? "," : "");
  }
  fprintf(f, "]}\n");
  if (ferror(f) | (fclose(f) != 0)) return core_error_set(CORE_ERUNTIME, "writing %s failed", path);
  return CORE_OK;
}

static int num(const core_json *o, const char *key, double *out) {
  const core_json *v = core_json_get(o, key);
  if (!v || v->type != CORE_JSON_NUMBER) return -1;
  *out = v->num;
  return 0;
}

static int read_meta(const char *path, const core_json *root, sched_timeline *tl) {
  const core_json *meta = core_json_get(root, "otherData");
  const core_json *sch = meta ? core_json_get(meta, "schedule") : NULL;
  const core_json *unit = meta ? core_json_get(meta, "unit") : NULL;
  double p, v, m, mk, br;
  if (!meta || !sch || sch->type != CORE_JSON_STRING || !unit || unit->type != CORE_JSON_STRING ||
      num(meta, "p", &p) || num(meta, "v", &v) || num(meta, "m", &m) || num(meta, "makespan", &mk) ||
      num(meta, "bubble_rate", &br))
    return core_error_set(CORE_EINPUT, "%s is not a brigade trace (its otherData lacks schedule, "
                          "unit, p, v, m, makespan or bubble_rate)", path);
  if (p < 1 || p > 1 << 16 || v < 1 || v > 64 || m < 1 || m > 1 << 24)
    return core_error_set(CORE_EINPUT, "%s: implausible shape p=%g v=%g m=%g", path, p, v, m);
  sched_timeline_init(tl, sch->str, unit->str, (int)p, (int)v, (int)m);
  tl->makespan = mk, tl->bubble_rate = br;
  return CORE_OK;
}

static int read_event(const sched_timeline *tl, const core_json *ev, sched_event *e) {
  const core_json *args = core_json_get(ev, "args");
  double tid, op, mb, chunk, stage, peer, start, end;
  if (!args || num(ev, "tid", &tid) || num(args, "op", &op) || num(args, "mb", &mb) ||
      num(args, "chunk", &chunk) || num(args, "stage", &stage) || num(args, "peer", &peer) ||
      num(args, "start", &start) || num(args, "end", &end))
    return -1;
  if (tid < 0 || tid >= tl->p || op < 0 || op >= SCHED_OP_COUNT || end < start) return -1;
  *e = (sched_event){.rank = (int)tid, .op = (uint8_t)op, .mb = (int)mb, .chunk = (int)chunk,
                     .stage = (int)stage, .peer = (int)peer, .start = start, .end = end};
  return 0;
}

int viz_read_trace(const char *path, sched_timeline *tl) {
  memset(tl, 0, sizeof *tl);
  FILE *f = fopen(path, "rb");
  if (!f) return core_error_set(CORE_EINPUT, "cannot open trace %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0, k;
  char *buf = core_malloc(cap);
  while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) buf = core_realloc(buf, cap *= 2);
  }
  fclose(f);
  core_json *root;
  int rc = core_json_parse(buf, n, path, &root);
  free(buf);
  if (rc) return rc;
  rc = read_meta(path, root, tl);
  const core_json *events = rc ? NULL : core_json_get(root, "traceEvents");
  if (!rc && (!events || events->type != CORE_JSON_ARRAY))
    rc = core_error_set(CORE_EINPUT, "%s: no traceEvents array", path);
  int idx = 0;
  for (const core_json *ev = events ? events->child : NULL; ev && !rc; ev = ev->next, idx++) {
    const core_json *ph = core_json_get(ev, "ph");
    if (!ph || ph->type != CORE_JSON_STRING) {
      rc = core_error_set(CORE_EINPUT, "%s: event %d has no phase", path, idx);
      break;
    }
    if (strcmp(ph->str, "X") != 0) continue; /* metadata rows */
    sched_event e;
    if (read_event(tl, ev, &e)) rc = core_error_set(CORE_EINPUT, "%s: event %d is malformed", path, idx);
    else sched_timeline_add(tl, e);
  }
  core_json_free(root);
  if (rc) sched_timeline_free(tl);
  return rc;
}
