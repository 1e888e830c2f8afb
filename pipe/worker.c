#include "pipe/worker.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/progress.h"
#include "kernels/coll.h"

int pipe_tag(const sched_program *pr, int dst_stage, int mb, int is_grad) {
  return ((mb * pr->p * pr->v) + dst_stage) * 2 + is_grad;
}

int pipe_worker_init(pipe_worker *w, const sched_program *pr, int rank, MPI_Comm comm, pipe_exec ex) {
  memset(w, 0, sizeof *w);
  w->pr = pr, w->rank = rank, w->comm = comm, w->ex = ex;
  w->timeout_s = 60;
  int *ub, flag = 0;
  /* the bound is the job's, an attribute of MPI_COMM_WORLD only: Open MPI puts none on a split
   * communicator such as the pipeline's (MPI's least bound, 32767, would then refuse m * S * 2 >
   * 32767 that MPI takes) */
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  w->tag_ub = flag ? *ub : 32767;
  long max_tag = ((long)pr->m * pr->p * pr->v) * 2 + 1; /* past the transfers' 2mS - 1: the tied exchange's 2mS */
  if (max_tag > w->tag_ub)
    return core_error_set(CORE_EINPUT, "m * stages too large for MPI tags (%ld > %d)", max_tag, w->tag_ub);
  int ns = pr->naslots[rank] > 0 ? pr->naslots[rank] : 1;
  w->slot_req = core_malloc(sizeof(MPI_Request) * 2 * (size_t)ns);
  w->slot_peer = core_calloc(2 * (size_t)ns, sizeof(int));
  w->recv_req = core_malloc(sizeof(MPI_Request) * 2 * (size_t)ns);
  w->recv_at = core_calloc(2 * (size_t)ns, sizeof(int));
  w->recv_n = core_calloc(2 * (size_t)ns, sizeof(size_t));
  w->recv_ev = core_malloc(sizeof(int) * 2 * (size_t)ns);
  for (int i = 0; i < 2 * ns; i++) w->recv_ev[i] = -1;
  for (int i = 0; i < 2 * ns; i++) w->slot_req[i] = w->recv_req[i] = MPI_REQUEST_NULL;
  return CORE_OK;
}

/* Transfers read and fill only the parts of slots named by aslot (a pair's transfers all fall in
 * its aslot range), so sends in flight, receives and tickets are kept per aslot. */
static int nslots(const pipe_worker *w) { return w->pr->naslots[w->rank] > 0 ? w->pr->naslots[w->rank] : 1; }

int pipe_worker_use_device(pipe_worker *w, const kernels_coll *dc, kernels_coll_comm *comm) {
  if ((long)nslots(w) * 4 > KERNELS_COLL_TICKETS)
    return core_error_set(CORE_EINPUT, "rank %d holds %d activation slots; device transfers name at most %d",
                          w->rank, nslots(w), KERNELS_COLL_TICKETS / 4);
  if (!w->ex.device_buffer) return core_error_set(CORE_EINPUT, "the executor offers no device buffers");
  w->dc = dc, w->dcomm = comm;
  free(w->tpend);
  w->tpend = core_calloc((size_t)nslots(w) * 4, 1);
  return CORE_OK;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Polls a request until it completes or the timeout, counted from start, has passed (then it is
 * left in flight: the job is ending). */
static void finish_bounded(const pipe_worker *w, MPI_Request *req, double start) {
  int done = *req == MPI_REQUEST_NULL;
  while (!done && MPI_Test(req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    if (now() - start > w->timeout_s) break;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

void pipe_worker_free(pipe_worker *w) {
  free(w->tpend);
  w->tpend = NULL;
  double start = now(); /* bounded: after a failed step a peer may never take a send, and a
                         * receive already matched may wait on a peer that is gone */
  for (int k = 0; w->slot_req && k < 2 * nslots(w); k++) finish_bounded(w, &w->slot_req[k], start);
  for (int k = 0; w->recv_req && k < 2 * nslots(w); k++) { /* receives a failed step left posted */
    if (w->recv_req[k] != MPI_REQUEST_NULL) MPI_Cancel(&w->recv_req[k]);
    finish_bounded(w, &w->recv_req[k], start);
  }
  free(w->slot_req), free(w->slot_peer), free(w->recv_req), free(w->recv_at), free(w->recv_n), free(w->recv_ev);
  w->slot_req = NULL, w->slot_peer = NULL, w->recv_req = NULL, w->recv_at = NULL, w->recv_n = NULL;
  w->recv_ev = NULL;
}

static int fail(const pipe_worker *w, int i, const sched_instr *in, const char *what) {
  char s[96];
  sched_instr_str(in, s, sizeof s);
  return core_error_set(CORE_ERUNTIME, "rank %d instruction %d (%s): %s", w->rank, i, s, what);
}

/* Waits for a request to or from rank peer, polling so that a stuck peer becomes a timeout, not
 * a hang. */
static int wait_req(pipe_worker *w, MPI_Request *req, MPI_Status *st, int i, const sched_instr *in, int peer) {
  double start = now();
  int done = 0, spins = 0;
  while (!done) {
    if (MPI_Test(req, &done, st) != MPI_SUCCESS) return fail(w, i, in, "MPI error");
    if (done) break;
    if (w->ex.idle) w->ex.idle(w->ex.ctx);
    if (++spins > 1000) {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL); /* yield the core: ranks share cores on small machines */
      if (now() - start > w->timeout_s) {
        char msg[256];
        if (w->peer_names && peer >= 0)
          snprintf(msg, sizeof msg, "timed out after %g s waiting for %s (train.timeout)", w->timeout_s, w->peer_names[peer]);
        else
          snprintf(msg, sizeof msg, "timed out after %g s waiting for rank %d (train.timeout)", w->timeout_s, peer);
        return fail(w, i, in, msg);
      }
    }
  }
  return CORE_OK;
}

static int stage_of(const pipe_worker *w, const sched_instr *in) {
  return w->pr->stage_of[w->rank * w->pr->v + in->chunk];
}

/* A slot's earlier sends must be complete before the slot is written again. */
static int drain_slot(pipe_worker *w, int slot, int i, const sched_instr *in) {
  for (int k = 0; k < 2; k++) {
    MPI_Request *r = &w->slot_req[2 * slot + k];
    if (*r != MPI_REQUEST_NULL) { /* the slot's earlier send, to the rank it went to */
      int rc = wait_req(w, r, MPI_STATUS_IGNORE, i, in, w->slot_peer[2 * slot + k]);
      if (rc) return rc;
    }
  }
  return CORE_OK;
}

/* ---- the device path: tickets on the communication queue ---- */

static int dev_fail(const pipe_worker *w, int i, const sched_instr *in) {
  return core_error_prefix("rank %d instruction %d (%s)", w->rank, i, sched_op_name((sched_op)in->op));
}

/* Later ops wait for ticket t's transfer (the host does not). */
static int dev_wait(pipe_worker *w, int t, int i, const sched_instr *in) {
  if (!w->tpend[t]) return CORE_OK;
  w->tpend[t] = 0;
  return w->dc->wait_p2p(w->dcomm, t) ? dev_fail(w, i, in) : CORE_OK;
}

static int dev_wait_slot(pipe_worker *w, int slot, int i, const sched_instr *in) {
  for (int k = 0; k < 4; k++) {
    int rc = dev_wait(w, slot * 4 + k, i, in);
    if (rc) return rc;
  }
  return CORE_OK;
}

static int dev_transfer(pipe_worker *w, int i, const sched_instr *in) {
  int t = in->aslot * 4 + (in->op - SCHED_SEND_ACT);
  int rc = dev_wait(w, t, i, in); /* the ticket's last transfer, before it is used again */
  if (rc) return rc;
  size_t n = 0;
  float *buf = w->ex.device_buffer(w->ex.ctx, in, &n);
  int send = in->op == SCHED_SEND_ACT || in->op == SCHED_SEND_GRAD;
  rc = send ? w->dc->send(w->dcomm, t, buf, n, in->peer) : w->dc->recv(w->dcomm, t, buf, n, in->peer);
  if (rc) return dev_fail(w, i, in);
  w->tpend[t] = 1;
  return CORE_OK;
}

/* After the step's last transfer (before its tail, whose reductions read results back to the
 * host, or at its end): nothing in flight, and a stuck peer becomes an error, not a hang. */
static int dev_finish(pipe_worker *w, int i, const sched_instr *in) {
  for (int s = 0; s < nslots(w); s++) {
    int rc = dev_wait_slot(w, s, i, in);
    if (rc) return rc;
  }
  w->dsynced = 1;
  if (w->dc->sync(w->dcomm, w->timeout_s))
    return core_error_prefix("rank %d instruction %d (%s), waiting for the step's transfers", w->rank, i,
                             sched_op_name((sched_op)in->op));
  return CORE_OK;
}

/* ---- the MPI path (and the device path's entry) ---- */

static int op_send(pipe_worker *w, int i, const sched_instr *in) {
  if (w->dc) return dev_transfer(w, i, in);
  int grad = in->op == SCHED_SEND_GRAD;
  int dst = stage_of(w, in) + (grad ? -1 : 1);
  int tag = pipe_tag(w->pr, dst, in->mb, grad);
  MPI_Request *r = &w->slot_req[2 * in->aslot + grad];
  if (*r != MPI_REQUEST_NULL) { /* before the executor refills the buffer (staging) */
    int rc = wait_req(w, r, MPI_STATUS_IGNORE, i, in, w->slot_peer[2 * in->aslot + grad]);
    if (rc) return rc;
  }
  w->slot_peer[2 * in->aslot + grad] = in->peer;
  size_t n = 0;
  float *buf = w->ex.buffer(w->ex.ctx, in, &n);
  if (n > INT_MAX) return fail(w, i, in, "the message is more floats than an MPI count holds (2^31 - 1)");
  int err = w->synchronous ? MPI_Issend(buf, (int)n, MPI_FLOAT, in->peer, tag, w->comm, r)
                           : MPI_Isend(buf, (int)n, MPI_FLOAT, in->peer, tag, w->comm, r);
  return err == MPI_SUCCESS ? CORE_OK : fail(w, i, in, "MPI_Isend failed");
}

/* Completes receive k (aslot * 2 + is_grad) if one is posted: waits for it, checks its length and
 * hands it to the executor. */
static int finish_recv(pipe_worker *w, int k) {
  if (w->recv_req[k] == MPI_REQUEST_NULL) return CORE_OK;
  int i = w->recv_at[k];
  const sched_instr *in = &w->pr->streams[w->rank].ins[i];
  MPI_Status st;
  int rc = wait_req(w, &w->recv_req[k], &st, i, in, in->peer);
  if (rc) return rc;
  int got = 0;
  size_t n = w->recv_n[k];
  MPI_Get_count(&st, MPI_FLOAT, &got);
  if ((size_t)got != n) {
    char msg[128];
    snprintf(msg, sizeof msg, "received %d floats, expected %zu (shapes of the two stages differ)", got, n);
    return fail(w, i, in, msg);
  }
  if (w->ex.received) w->ex.received(w->ex.ctx, in);
  if (w->tl && w->recv_ev[k] >= 0 && w->recv_ev[k] < w->tl->n) /* a traced step: the receive lasted until now */
    w->tl->ev[w->recv_ev[k]].end = MPI_Wtime() - w->t0;
  w->recv_ev[k] = -1;
  return CORE_OK;
}

/* The receives posted into a slot's parts, complete before an op that may read them. */
static int finish_slot_recvs(pipe_worker *w, int slot) {
  int rc = finish_recv(w, 2 * slot);
  return rc ? rc : finish_recv(w, 2 * slot + 1);
}

/* A receive is posted here and completed before the next op on its slot (its consumer): the rank
 * computes meanwhile, as the simulator's transfer lane has it. In a traced step its event runs
 * from the post to the data's arrival, as the simulator draws it. */
static int op_recv(pipe_worker *w, int i, const sched_instr *in) {
  if (w->dc) return dev_transfer(w, i, in);
  int rc = drain_slot(w, in->aslot, i, in);
  int grad = in->op == SCHED_RECV_GRAD, k = 2 * in->aslot + grad;
  if (!rc) rc = finish_recv(w, k); /* (a slot's part holds one receive at a time) */
  if (rc) return rc;
  size_t n = 0;
  float *buf = w->ex.buffer(w->ex.ctx, in, &n);
  if (n > INT_MAX) return fail(w, i, in, "the message is more floats than an MPI count holds (2^31 - 1)");
  int tag = pipe_tag(w->pr, stage_of(w, in), in->mb, grad);
  if (MPI_Irecv(buf, (int)n, MPI_FLOAT, in->peer, tag, w->comm, &w->recv_req[k]) != MPI_SUCCESS)
    return fail(w, i, in, "MPI_Irecv failed");
  w->recv_at[k] = i, w->recv_n[k] = n, w->recv_ev[k] = -1;
  return CORE_OK;
}

static int op_exec(pipe_worker *w, int i, const sched_instr *in) {
  if (w->dc && in->aslot >= 0) { /* the slot's transfers land (receives) or leave (sends) first */
    int rc = dev_wait_slot(w, in->aslot, i, in);
    if (rc) return rc;
  }
  if (w->dc && in->chunk < 0 && !w->dsynced) { /* the tail: every transfer of the step is issued */
    int rc = dev_finish(w, i, in);
    if (rc) return rc;
  }
  if (in->aslot >= 0 && (in->op == SCHED_LOAD_MICROBATCH || in->op == SCHED_FORWARD)) {
    int rc = drain_slot(w, in->aslot, i, in); /* about to overwrite the slot */
    if (rc) return rc;
  }
  int rc = w->ex.run(w->ex.ctx, in);
  return rc ? core_error_prefix("rank %d instruction %d (%s)", w->rank, i, sched_op_name((sched_op)in->op)) : CORE_OK;
}

/* A traced step: ops on a device backend return before the device has run them (and on the
 * device path a transfer returns once issued), so the host's clock alone would time the issue,
 * charge a kernel to whichever later instruction first waits for the device (a staged send's
 * to_host, the tail's reductions), and show transfers as instant. So each traced instruction's
 * end is taken once the device has finished it, its transfer included. On the device path the
 * compute queue first waits for every transfer in flight, then the host for both queues through
 * the communicator's sync, bounded by the timeout (the compute queue may be waiting for a peer's
 * transfer, and a plain device sync would wait for ever on a peer that never comes). Transfers
 * on the device path then block like unbuffered send/recv, an order the verified program already
 * allows. On the MPI path a receive stays posted: its event's end is set when it lands
 * (finish_recv), before its consumer's clock starts. Untraced steps are not touched. */
static int trace_wait(pipe_worker *w, int i, const sched_instr *in) {
  if (w->dc) {
    for (int s = 0; s < nslots(w); s++) {
      int rc = dev_wait_slot(w, s, i, in);
      if (rc) return rc;
    }
    if (w->dc->sync(w->dcomm, w->timeout_s))
      return core_error_prefix("rank %d instruction %d (%s), waiting for the device in a traced step", w->rank, i,
                               sched_op_name((sched_op)in->op));
    return CORE_OK;
  }
  if (w->ex.sync) w->ex.sync(w->ex.ctx);
  return CORE_OK;
}

/* VALIDATE (post-validation): the previous step's update checked; when it changed, the step
 * starts again (pipe_worker_step sees w->again). */
static int op_validate(pipe_worker *w, int i, const sched_instr *in) {
  int again = 0;
  if (w->ex.validate && w->ex.validate(w->ex.ctx, &again))
    return core_error_prefix("rank %d instruction %d (%s)", w->rank, i, sched_op_name((sched_op)in->op));
  w->again = again;
  return CORE_OK;
}

/* Every transfer of the step so far complete (the sends: their partners took them, all before
 * their own VALIDATE), so the step can start again with no message in flight. */
static int settle_transfers(pipe_worker *w, int i, const sched_instr *in) {
  if (w->dc) {
    int rc = dev_finish(w, i, in);
    w->dsynced = 0;
    return rc;
  }
  for (int k = 0; k < 2 * nslots(w); k++) {
    int rc = finish_recv(w, k);
    if (!rc && w->slot_req[k] != MPI_REQUEST_NULL)
      rc = wait_req(w, &w->slot_req[k], MPI_STATUS_IGNORE, i, in, w->slot_peer[k]);
    if (rc) return rc;
  }
  return CORE_OK;
}

typedef int (*op_fn)(pipe_worker *, int, const sched_instr *);

/* The one table from opcode to executor. */
static const op_fn op_table[SCHED_OP_COUNT] = {
    [SCHED_LOAD_MICROBATCH] = op_exec, [SCHED_FORWARD] = op_exec,
    [SCHED_BACKWARD] = op_exec,        [SCHED_BACKWARD_INPUT] = op_exec,
    [SCHED_BACKWARD_WEIGHT] = op_exec, [SCHED_SEND_ACT] = op_send,
    [SCHED_RECV_ACT] = op_recv,        [SCHED_SEND_GRAD] = op_send,
    [SCHED_RECV_GRAD] = op_recv,       [SCHED_REDUCE_TIED_GRADS] = op_exec,
    [SCHED_REDUCE_GRADS] = op_exec,    [SCHED_OPTIMIZER_STEP] = op_exec,
    [SCHED_GATHER_PARAMS] = op_exec,   [SCHED_RELEASE_PARAMS] = op_exec,
    [SCHED_OFFLOAD] = op_exec,         [SCHED_RELOAD] = op_exec,
    [SCHED_VALIDATE] = op_validate,
};

/* Whether instruction i of the stream is a transfer and so is the next: a run to post together. */
static int run_goes_on(const sched_stream *st, int i) {
  return i + 1 < st->len && sched_is_p2p((sched_op)st->ins[i].op) && sched_is_p2p((sched_op)st->ins[i + 1].op);
}

/* The end of a traced step: its copy instructions' events (from event ev0 on) take the times
 * the executor measured on the device, where it has them; the copy clock stops. */
static void trace_copies(pipe_worker *w, int ev0) {
  if (!w->tl) return;
  for (int e = ev0, n = 0; w->ex.copy_span && e < w->tl->n; e++) {
    sched_event *x = &w->tl->ev[e];
    double start, end;
    if (x->op != SCHED_OFFLOAD && x->op != SCHED_RELOAD) continue;
    if (!w->ex.copy_span(w->ex.ctx, n++, &start, &end)) x->start = start - w->t0, x->end = end - w->t0;
  }
  if (w->ex.trace) w->ex.trace(w->ex.ctx, 0);
  w->clock_on = 0;
}

int pipe_worker_step(pipe_worker *w) {
  const sched_stream *st = &w->pr->streams[w->rank];
  int ev0 = w->tl ? w->tl->n : 0;
  w->dsynced = 0, w->again = 0;
  if (w->clock_on && w->ex.trace) w->ex.trace(w->ex.ctx, 0), w->clock_on = 0; /* a traced step that failed */
  if (w->ex.begin) w->ex.begin(w->ex.ctx);
  /* the device path posts a run of consecutive transfers as one group, so that none waits for
   * another on the communication queue (a traced step issues them one by one) */
  int grouping = w->dc && w->dc->group && !w->tl, grouped = 0;
  for (int i = 0; i < st->len; i++) {
    const sched_instr *in = &st->ins[i];
    if (in->op >= SCHED_OP_COUNT) return fail(w, i, in, "unknown opcode");
    if (w->tl && i == 0 && w->ex.sync) w->ex.sync(w->ex.ctx); /* work queued before the step is not its own */
    if (w->tl && !w->clock_on && w->ex.trace) w->ex.trace(w->ex.ctx, 1), w->clock_on = 1; /* (once: not on a restart) */
    int rc = CORE_OK;
    if (!w->dc && in->aslot >= 0 && !sched_is_p2p((sched_op)in->op)) { /* an op on a slot: its receives land first */
      rc = finish_slot_recvs(w, in->aslot);
      if (rc) return rc;
    }
    double t0 = w->tl ? MPI_Wtime() : 0;
    if (grouping && !grouped && run_goes_on(st, i)) {
      if (w->dc->group(w->dcomm, 1)) return dev_fail(w, i, in);
      grouped = 1;
    }
    rc = op_table[in->op](w, i, in);
    if (grouped && (rc || !run_goes_on(st, i))) { /* the run's last transfer (or a failure in it) */
      grouped = 0;
      int end = w->dc->group(w->dcomm, 0);
      if (!rc && end) rc = dev_fail(w, i, in);
    }
    if (!rc && w->tl) rc = trace_wait(w, i, in);
    if (rc) return rc;
    if (w->ex.retired) w->ex.retired(w->ex.ctx, i, in);
    if (w->progress && in->mb >= 0) core_progress_at(in->mb + 1);
    if (w->tl) {
      sched_event e = {.rank = w->rank, .op = in->op, .mb = in->mb, .chunk = in->chunk,
                       .stage = in->chunk >= 0 ? stage_of(w, in) : -1, .peer = in->peer,
                       .start = t0 - w->t0, .end = MPI_Wtime() - w->t0};
      sched_timeline_add(w->tl, e);
      if (!w->dc && (in->op == SCHED_RECV_ACT || in->op == SCHED_RECV_GRAD)) /* its end comes when it lands */
        w->recv_ev[2 * in->aslot + (in->op == SCHED_RECV_GRAD)] = w->tl->n - 1;
    }
    if (w->again) { /* post-validation redid the previous update: the step from its start */
      w->again = 0;
      int rc2 = settle_transfers(w, i, in);
      if (rc2) return rc2;
      if (w->ex.again) w->ex.again(w->ex.ctx);
      if (w->tl) w->tl->n = ev0; /* a traced step: the attempt thrown away leaves no events (its receives are done) */
      i = -1;
    }
  }
  trace_copies(w, ev0);
  /* the step ends with no send in flight: buffers may change before the next step (the device
   * path: unless the tail has waited for them already) */
  if (w->dc && (!st->len || w->dsynced)) return CORE_OK;
  return settle_transfers(w, st->len - 1, &st->ins[st->len - 1]);
}
