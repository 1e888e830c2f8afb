/* schedule/csv.c: schedule files and listings.
 *
 * The CSV format is PyTorch pipelining's: one row per rank, one action per cell, written
 * {stage}{F|I|W|B}{microbatch} with the *virtual* stage index ("0F0", "5B3"); also its
 * overlapped pairs ("(0F7;7B3)OVERLAP_F_B", the two compute actions in order) and its lowered
 * format's transfers ("0SEND_F0", "1RECV_F0", "1SEND_B0", "0RECV_B0"; checked, then replaced by
 * brigade's own lowering) and UNSHARD / RESHARD / REDUCE_GRAD (no compute: skipped). Empty cells are
 * skipped; lines starting with '#' are comments; a UTF-8 byte order mark at the start (as
 * spreadsheets save) is skipped. The placement is read off the file: a rank's chunks are its
 * stages in increasing order (so c*p + r for interleaved files, and the V shape for zb-v
 * files). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "schedule/internal.h"

int sched_csv_write(const sched_program *pr, FILE *f) {
  for (int r = 0; r < pr->p; r++) {
    int first = 1;
    for (int i = 0; i < pr->streams[r].len; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      if (!sched_op_is_compute((sched_op)in->op)) continue;
      char a[32];
      sched_action_str(pr, r, in, a, sizeof a);
      fprintf(f, "%s%s", first ? "" : ",", a);
      first = 0;
    }
    fputc('\n', f);
  }
  return ferror(f) ? core_error_set(CORE_ERUNTIME, "writing schedule CSV: %s", strerror(errno))
                   : CORE_OK;
}

typedef struct {
  int rank, stage, mb;
  int line, col; /* where the cell is, for messages */
  char op;
} action;

typedef struct {
  action *a;
  int n, cap;
} actions;

static void actions_push(actions *as, action x) {
  if (as->n == as->cap) {
    as->cap = as->cap ? 2 * as->cap : 256;
    as->a = core_realloc(as->a, sizeof(action) * (size_t)as->cap);
  }
  as->a[as->n++] = x;
}

/* Limits of sched_program_init: S = p*v <= 2^20 virtual stages, m <= 2^24 micro-batches. */
enum { MAX_STAGES = 1 << 20, MAX_MB = 1 << 24 };

/* The action names a cell may hold after its stage index: compute ops (op = the letter; "BW" is
 * an older name of W), PyTorch's communication actions (checked against the compute order they
 * imply, then replaced by brigade's own lowering: op s / r / S / R for SEND_F / RECV_F / SEND_B /
 * RECV_B), and the actions with no compute in them (op 'x': UNSHARD, RESHARD, REDUCE_GRAD). */
static const struct {
  const char *name;
  char op;
} names[] = {{"SEND_F", 's'},  {"RECV_F", 'r'},  {"SEND_B", 'S'},      {"RECV_B", 'R'}, {"UNSHARD", 'x'},
             {"RESHARD", 'x'}, {"REDUCE_GRAD", 'x'}, {"BW", 'W'}, {"F", 'F'},      {"I", 'I'},
             {"W", 'W'},       {"B", 'B'}};

static int bad_cell(const char *name, int line, int col, const char *b, const char *e) {
  /* the cell as printable text: a binary file must not put control bytes on the terminal */
  char shown[41];
  int len = (int)(e - b) > 40 ? 40 : (int)(e - b);
  for (int i = 0; i < len; i++) shown[i] = isprint((unsigned char)b[i]) ? b[i] : '?';
  shown[len] = 0;
  return core_error_set(CORE_EINPUT, "%s:%d:%d: bad action '%s' (expected {stage}{F|I|W|B}{microbatch}, "
                        "e.g. 0F3; PyTorch's SEND_F, RECV_F, SEND_B, RECV_B; or (0F7;7B3)OVERLAP_F_B)",
                        name, line, col, shown);
}

/* Parses one action [b, e) into x; returns CORE_OK or an error naming line and column. */
static int parse_action(const char *name, int line, int col, const char *b, const char *e, action *x) {
  const char *q = b;
  long stage = 0, mb = 0;
  int nd = 0;
  while (q < e && isdigit((unsigned char)*q) && nd < 9) stage = stage * 10 + (*q++ - '0'), nd++;
  char op = 0;
  for (size_t k = 0; nd > 0 && !op && k < sizeof names / sizeof names[0]; k++) {
    size_t l = strlen(names[k].name);
    if ((size_t)(e - q) >= l && strncmp(q, names[k].name, l) == 0 && (q + l == e || isdigit((unsigned char)q[l])))
      op = names[k].op, q += l;
  }
  int nm = 0;
  while (op && q < e && isdigit((unsigned char)*q) && nm < 9) mb = mb * 10 + (*q++ - '0'), nm++;
  if (!op || q != e || (nm == 0 && op != 'x')) return bad_cell(name, line, col, b, e);
  if (stage >= MAX_STAGES || mb >= MAX_MB)
    return core_error_set(CORE_EINPUT, "%s:%d:%d: %s index too large in '%.*s' (at most %d)", name, line, col,
                          stage >= MAX_STAGES ? "stage" : "micro-batch", (int)(e - b), b,
                          (stage >= MAX_STAGES ? MAX_STAGES : MAX_MB) - 1);
  *x = (action){.rank = x->rank, .stage = (int)stage, .mb = (int)mb, .line = line, .col = col, .op = op};
  return CORE_OK;
}

/* One cell: an action, or PyTorch's overlapped pair "(0F7;7B3)OVERLAP_F_B", whose compute actions
 * run one after the other in the order written. */
static int parse_cell(const char *name, int line, int col, const char *b, const char *e, actions *as, int rank) {
  static const char ov[] = ")OVERLAP_F_B";
  size_t lo = sizeof ov - 1;
  if (*b != '(') {
    action x = {.rank = rank};
    int rc = parse_action(name, line, col, b, e, &x);
    if (!rc && x.op != 'x') actions_push(as, x);
    return rc;
  }
  if ((size_t)(e - b) < lo + 2 || strncmp(e - lo, ov, lo) != 0) return bad_cell(name, line, col, b, e);
  int n = 0;
  for (const char *c = b + 1, *end = e - lo; c < end;) {
    const char *ce = c;
    while (ce < end && *ce != ';') ce++;
    const char *ab = c, *ae = ce;
    while (ab < ae && isspace((unsigned char)*ab)) ab++;
    while (ae > ab && isspace((unsigned char)ae[-1])) ae--;
    action x = {.rank = rank};
    int rc = parse_action(name, line, col + (int)(ab - b), ab, ae, &x);
    if (rc) return rc;
    if (!strchr("FIWB", x.op))
      return core_error_set(CORE_EINPUT, "%s:%d:%d: an OVERLAP_F_B pair holds compute actions only", name, line,
                            col);
    actions_push(as, x), n++;
    c = ce + 1;
  }
  return n > 0 ? CORE_OK : bad_cell(name, line, col, b, e);
}

static int parse_rows(const char *text, const char *name, actions *as, int *nranks) {
  const char *s = text;
  int line = 0, rank = 0;
  while (*s) {
    const char *eol = strchr(s, '\n');
    if (!eol) eol = s + strlen(s);
    line++;
    const char *t = s;
    while (t < eol && isspace((unsigned char)*t)) t++;
    if (t < eol && *t != '#') {
      const char *c = s;
      while (c <= eol) {
        const char *ce = c;
        while (ce < eol && *ce != ',') ce++;
        const char *b = c, *e = ce;
        while (b < e && isspace((unsigned char)*b)) b++;
        while (e > b && isspace((unsigned char)e[-1])) e--;
        if (e > b) {
          int rc = parse_cell(name, line, (int)(b - s) + 1, b, e, as, rank);
          if (rc) return rc;
        }
        c = ce + 1;
      }
      if (++rank > (1 << 16)) return core_error_set(CORE_EINPUT, "%s: too many rows", name);
    }
    s = *eol ? eol + 1 : eol;
  }
  *nranks = rank;
  if (rank == 0) return core_error_set(CORE_EINPUT, "%s: no rows (one row of actions per rank)", name);
  return CORE_OK;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Reads the placement off the actions: stage -> rank, each rank the same number of stages. */
static int build_placement(const char *name, const actions *as, int p, int *v_out, int *m_out,
                           int **stage_of_out) {
  int S = 0, m = 0, top = 0, top_stage = 0;
  for (int i = 0; i < as->n; i++) {
    if (as->a[i].stage + 1 > S) S = as->a[i].stage + 1, top_stage = i;
    if (as->a[i].mb + 1 > m) m = as->a[i].mb + 1, top = i;
  }
  /* every stage needs a forward of every micro-batch: a file with fewer actions than S*m is
   * refused here, before anything is sized by S*m; a stage index beyond the file's action count
   * cannot be right whatever the micro-batches, so that cell is the one named */
  if ((long long)S * m > as->n) {
    int by_stage = S > as->n;
    const action *t = &as->a[by_stage ? top_stage : top];
    return core_error_set(CORE_EINPUT, "%s:%d:%d: %s %d needs forwards of %d micro-batches "
                          "on each of %d stages, more than the file's %d actions", name, t->line,
                          t->col, by_stage ? "stage" : "micro-batch", by_stage ? S - 1 : m - 1, m, S,
                          as->n);
  }
  int *owner = core_malloc(sizeof(int) * (size_t)(S ? S : 1));
  for (int s = 0; s < S; s++) owner[s] = -1;
  int rc = CORE_OK;
  for (int i = 0; i < as->n && !rc; i++) {
    int s = as->a[i].stage, r = as->a[i].rank;
    if (owner[s] >= 0 && owner[s] != r)
      rc = core_error_set(CORE_EINPUT, "%s: stage %d appears on rank %d and on rank %d", name, s,
                          owner[s], r);
    owner[s] = r;
  }
  for (int s = 0; s < S && !rc; s++)
    if (owner[s] < 0) rc = core_error_set(CORE_EINPUT, "%s: stage %d has no actions", name, s);
  if (!rc && S % p != 0)
    rc = core_error_set(CORE_EINPUT, "%s: %d stages cannot be split evenly over %d ranks", name, S, p);
  int v = S / (p ? p : 1);
  int *fill = core_calloc((size_t)p, sizeof(int));
  int *stage_of = core_malloc(sizeof(int) * (size_t)(S ? S : 1));
  for (int s = 0; s < S && !rc; s++) {
    int r = owner[s];
    if (fill[r] == v)
      rc = core_error_set(CORE_EINPUT, "%s: rank %d holds more than %d stages (every rank must "
                          "hold the same number)", name, r, v);
    else
      stage_of[r * v + fill[r]++] = s;
  }
  for (int r = 0; r < p && !rc; r++) {
    if (fill[r] != v)
      rc = core_error_set(CORE_EINPUT, "%s: rank %d holds %d stages, expected %d", name, r,
                          fill[r], v);
    else
      qsort(&stage_of[r * v], (size_t)v, sizeof(int), cmp_int);
  }
  free(owner), free(fill);
  if (rc) {
    free(stage_of);
    return rc;
  }
  *v_out = v, *m_out = m, *stage_of_out = stage_of;
  return CORE_OK;
}

static int is_compute(char op) { return op == 'F' || op == 'I' || op == 'W' || op == 'B'; }

/* A file in PyTorch's lowered format (with SEND_F / RECV_F / SEND_B / RECV_B) is checked against
 * the compute order it implies: every cross-rank hop of every micro-batch has exactly one send,
 * on the producing stage's rank after the op that produces the data, and one receive, on the
 * consuming stage's rank before the op that consumes it (a forward's output goes from stage s
 * to s + 1, SEND_F naming s and RECV_F s + 1; an input gradient from s + 1 to s, SEND_B naming
 * s + 1 and RECV_B s); none where both stages share a rank. brigade then lowers the compute order
 * itself (its transfers are placed by the cost model and verified deadlock-free). A file with no
 * communication actions is not checked here. */
static int check_comm(const char *name, const actions *as, const sched_program *pr) {
  int S = pr->p * pr->v, m = pr->m, any = 0;
  for (int i = 0; i < as->n && !any; i++) any = !is_compute(as->a[i].op);
  if (!any) return CORE_OK;
  size_t n = (size_t)S * (size_t)m;
  /* per (stage, mb): index in the file of its F, its gradient-producing op (B or I), and of each
   * kind of transfer action (-1: none) */
  int *at = core_malloc(sizeof(int) * 6 * n);
  for (size_t i = 0; i < 6 * n; i++) at[i] = -1;
  const char kinds[] = "FGsrSR"; /* G: B or I */
  int rc = CORE_OK;
  for (int i = 0; i < as->n && !rc; i++) {
    const action *a = &as->a[i];
    char k = a->op == 'B' || a->op == 'I' ? 'G' : a->op;
    const char *w = strchr(kinds, k);
    if (!w || a->op == 'W') continue;
    if (a->stage >= S || a->mb >= m) {
      rc = core_error_set(CORE_EINPUT, "%s:%d:%d: stage %d, micro-batch %d: no such compute action in the file",
                          name, a->line, a->col, a->stage, a->mb);
      break;
    }
    int *slot = &at[(size_t)(w - kinds) * n + (size_t)a->stage * m + a->mb];
    if (*slot >= 0)
      rc = core_error_set(CORE_EINPUT, "%s:%d:%d: a second %c action for stage %d, micro-batch %d", name,
                          a->line, a->col, a->op, a->stage, a->mb);
    *slot = i;
  }
  /* hop h of micro-batch j: data from stage `from` to `to`; the send names `from`, the receive `to` */
  for (int s = 0; s < S && !rc; s++)
    for (int dir = 0; dir < 2 && !rc; dir++) {
      int from = dir ? s + 1 : s, to = dir ? s : s + 1;
      if (s + 1 >= S || (dir && pr->forward_only)) continue;
      int cross = pr->rank_of[from] != pr->rank_of[to];
      for (int j = 0; j < m && !rc; j++) {
        int prod = at[(size_t)(dir ? 1 : 0) * n + (size_t)from * m + j];
        int cons = at[(size_t)(dir ? 1 : 0) * n + (size_t)to * m + j];
        int snd = at[(size_t)(dir ? 4 : 2) * n + (size_t)from * m + j];
        int rcv = at[(size_t)(dir ? 5 : 3) * n + (size_t)to * m + j];
        const char *sn = dir ? "SEND_B" : "SEND_F", *rn = dir ? "RECV_B" : "RECV_F";
        const action *pa = &as->a[prod], *ca = &as->a[cons];
        if (!cross && (snd >= 0 || rcv >= 0)) {
          const action *x = &as->a[snd >= 0 ? snd : rcv];
          rc = core_error_set(CORE_EINPUT, "%s:%d:%d: stages %d and %d are both on rank %d: no transfer between "
                              "them", name, x->line, x->col, from, to, pr->rank_of[from]);
        } else if (cross && snd < 0) {
          rc = core_error_set(CORE_EINPUT, "%s:%d:%d: %d%s%d missing on rank %d after this action", name, pa->line,
                              pa->col, from, sn, j, pr->rank_of[from]);
        } else if (cross && rcv < 0) {
          rc = core_error_set(CORE_EINPUT, "%s:%d:%d: %d%s%d missing on rank %d before this action", name, ca->line,
                              ca->col, to, rn, j, pr->rank_of[to]);
        } else if (cross && (as->a[snd].rank != pa->rank || snd < prod)) {
          rc = core_error_set(CORE_EINPUT, "%s:%d:%d: %d%s%d must come after %d%c%d on rank %d", name,
                              as->a[snd].line, as->a[snd].col, from, sn, j, from, pa->op, j, pa->rank);
        } else if (cross && (as->a[rcv].rank != ca->rank || rcv > cons)) {
          rc = core_error_set(CORE_EINPUT, "%s:%d:%d: %d%s%d must come before %d%c%d on rank %d", name,
                              as->a[rcv].line, as->a[rcv].col, to, rn, j, to, ca->op, j, ca->rank);
        }
      }
    }
  /* a transfer action naming a hop that does not exist (off the ends of the pipeline) */
  for (int i = 0; i < as->n && !rc; i++) {
    const action *a = &as->a[i];
    int bad = (a->op == 's' && a->stage == S - 1) || (a->op == 'r' && a->stage == 0) ||
              (a->op == 'S' && a->stage == 0) || (a->op == 'R' && a->stage == S - 1) ||
              (pr->forward_only && (a->op == 'S' || a->op == 'R'));
    if (bad) rc = core_error_set(CORE_EINPUT, "%s:%d:%d: no stage to transfer to or from here", name, a->line, a->col);
  }
  free(at);
  return rc;
}

/* PyTorch's lowered format: each rank's compute actions with its transfers where the program
 * has them (SEND_F / RECV_F / SEND_B / RECV_B), loads and the step's tail left out. */
int sched_csv_write_comm(const sched_program *pr, FILE *f) {
  for (int r = 0; r < pr->p; r++) {
    int first = 1;
    for (int i = 0; i < pr->streams[r].len; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      char a[48];
      int s = in->chunk >= 0 && in->chunk < pr->v ? pr->stage_of[r * pr->v + in->chunk] : -1;
      switch ((sched_op)in->op) {
      case SCHED_SEND_ACT: snprintf(a, sizeof a, "%dSEND_F%d", s, in->mb); break;
      case SCHED_RECV_ACT: snprintf(a, sizeof a, "%dRECV_F%d", s, in->mb); break;
      case SCHED_SEND_GRAD: snprintf(a, sizeof a, "%dSEND_B%d", s, in->mb); break;
      case SCHED_RECV_GRAD: snprintf(a, sizeof a, "%dRECV_B%d", s, in->mb); break;
      default:
        if (!sched_op_is_compute((sched_op)in->op)) continue;
        sched_action_str(pr, r, in, a, sizeof a);
      }
      fprintf(f, "%s%s", first ? "" : ",", a);
      first = 0;
    }
    fputc('\n', f);
  }
  return ferror(f) ? core_error_set(CORE_ERUNTIME, "writing schedule CSV: %s", strerror(errno)) : CORE_OK;
}

/* The compute program of a file; keep (may be NULL) receives its actions in file order. */
static int csv_parse(const char *text, const char *name, sched_program *out, actions *keep) {
  actions as = {0};
  int p = 0, v = 0, m = 0, *stage_of = NULL;
  if (strncmp(text, "\xef\xbb\xbf", 3) == 0) text += 3; /* UTF-8 byte order mark (spreadsheets) */
  int rc = parse_rows(text, name, &as, &p);
  if (!rc && as.n == 0) rc = core_error_set(CORE_EINPUT, "%s: no actions", name);
  if (!rc) rc = build_placement(name, &as, p, &v, &m, &stage_of);
  if (!rc) rc = sched_program_init(out, SCHED_CUSTOM, p, v, m, stage_of);
  if (!rc) {
    out->forward_only = 1; /* a file of forwards only is an evaluation schedule */
    for (int i = 0; i < as.n; i++) out->forward_only &= as.a[i].op == 'F' || !is_compute(as.a[i].op);
    for (int i = 0; i < as.n; i++) {
      if (!is_compute(as.a[i].op)) continue;
      sched_op op = as.a[i].op == 'F'   ? SCHED_FORWARD
                    : as.a[i].op == 'B' ? SCHED_BACKWARD
                    : as.a[i].op == 'I' ? SCHED_BACKWARD_INPUT
                                        : SCHED_BACKWARD_WEIGHT;
      sched_push_action(out, op, as.a[i].stage, as.a[i].mb);
    }
    rc = sched_check_compute(out);
    if (rc) core_error_prefix("%s", name);
    if (!rc) rc = check_comm(name, &as, out);
    if (rc) sched_program_free(out);
  }
  free(stage_of);
  if (!rc && keep) *keep = as;
  else free(as.a);
  return rc;
}

int sched_csv_parse(const char *text, const char *name, sched_program *out) {
  return csv_parse(text, name, out, NULL);
}

/* The full program of a file with transfers (checked by check_comm): each rank's actions in file
 * order, a transfer going to or coming from the rank of the neighbouring stage it implies. */
static void build_full(const actions *as, const sched_program *compute, sched_program *out) {
  for (int i = 0; i < as->n; i++) {
    const action *a = &as->a[i];
    int s = a->stage, r = compute->rank_of[s];
    sched_instr in = {.mb = a->mb, .chunk = compute->chunk_of[s], .peer = -1, .slot = -1, .aslot = -1};
    switch (a->op) {
    case 's': in.op = SCHED_SEND_ACT, in.peer = compute->rank_of[s + 1]; break;
    case 'r': in.op = SCHED_RECV_ACT, in.peer = compute->rank_of[s - 1]; break;
    case 'S': in.op = SCHED_SEND_GRAD, in.peer = compute->rank_of[s - 1]; break;
    case 'R': in.op = SCHED_RECV_GRAD, in.peer = compute->rank_of[s + 1]; break;
    case 'F': in.op = SCHED_FORWARD; break;
    case 'B': in.op = SCHED_BACKWARD; break;
    case 'I': in.op = SCHED_BACKWARD_INPUT; break;
    case 'W': in.op = SCHED_BACKWARD_WEIGHT; break;
    default: continue; /* UNSHARD, RESHARD, REDUCE_GRAD */
    }
    if (sched_op_is_compute((sched_op)in.op)) sched_push_compute(out, r, in);
    else sched_push(out, r, in);
  }
  if (!out->forward_only) sched_append_tail(out);
  for (int r = 0; r < out->p; r++) sched_assign_slots(out, r);
}

int sched_csv_parse_program(const char *text, const char *name, int tied, const sched_costs *costs,
                            sched_program *out) {
  sched_program compute;
  actions as = {0};
  int rc = csv_parse(text, name, &compute, &as), comm = 0;
  if (rc) return rc;
  compute.tied = tied;
  for (int i = 0; i < as.n && !comm; i++) comm = !is_compute(as.a[i].op) && as.a[i].op != 'x';
  if (!comm) {
    rc = sched_lower(&compute, costs, out);
    if (rc) core_error_prefix("%s", name);
  } else {
    rc = sched_program_init(out, compute.family, compute.p, compute.v, compute.m, compute.stage_of);
    if (!rc) {
      out->tied = tied, out->forward_only = compute.forward_only;
      build_full(&as, &compute, out);
    }
  }
  sched_program_free(&compute);
  free(as.a);
  if (!rc && (rc = sched_verify(out)) != CORE_OK) {
    sched_program_free(out);
    core_error_prefix("%s failed verification", name);
  }
  return rc;
}

/* The whole file, NUL-terminated, into *text (to free). */
static int read_text(const char *path, char **text) {
  FILE *f = fopen(path, "rb");
  if (!f) return core_error_set(CORE_EINPUT, "cannot open schedule file %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = core_malloc(cap);
  size_t k;
  while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (n + 1 == cap) {
      if (cap > ((size_t)1 << 30)) {
        fclose(f), free(buf);
        return core_error_set(CORE_EINPUT, "%s: schedule file larger than 1 GiB", path);
      }
      buf = core_realloc(buf, cap *= 2);
    }
  }
  fclose(f);
  buf[n] = 0;
  if (memchr(buf, 0, n)) {
    free(buf);
    return core_error_set(CORE_EINPUT, "%s: binary data in a schedule file", path);
  }
  *text = buf;
  return CORE_OK;
}

int sched_csv_read(const char *path, sched_program *out) {
  char *text;
  int rc = read_text(path, &text);
  if (!rc) rc = sched_csv_parse(text, path, out), free(text);
  return rc;
}

int sched_csv_read_program(const char *path, int tied, const sched_costs *costs, sched_program *out) {
  char *text;
  int rc = read_text(path, &text);
  if (!rc) rc = sched_csv_parse_program(text, path, tied, costs, out), free(text);
  return rc;
}

void sched_write_listing(const sched_program *pr, FILE *f) {
  fprintf(f, "# %s p=%d v=%d m=%d, %zu instructions\n", sched_family_name(pr->family), pr->p,
          pr->v, pr->m, sched_program_count(pr));
  for (int r = 0; r < pr->p; r++) {
    fprintf(f, "rank %d (%d activation slots):\n", r, pr->nslots[r]);
    for (int i = 0; i < pr->streams[r].len; i++) {
      char s[96];
      sched_instr_str(&pr->streams[r].ins[i], s, sizeof s);
      fprintf(f, "  %4d  %s\n", i, s);
    }
  }
}

void sched_write_actions(const sched_program *pr, FILE *f) {
  for (int r = 0; r < pr->p; r++) {
    fprintf(f, "rank %d:", r);
    for (int i = 0; i < pr->streams[r].len; i++) {
      const sched_instr *in = &pr->streams[r].ins[i];
      if (!sched_op_is_compute((sched_op)in->op)) continue;
      char a[32];
      sched_action_str(pr, r, in, a, sizeof a);
      fprintf(f, " %s", a);
    }
    fputc('\n', f);
  }
}
