#include "tests/common/fake_coll.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"

enum { MAXD = 64 };

fake_coll_calls fake_calls;
int fake_shared, fake_fail, fake_coll_errors;

typedef struct {
  int pending, is_send;
  float *buf;       /* the caller's (device) buffer */
  float *data;      /* recv: what arrived, until wait_p2p */
  size_t n;
  uint64_t hash;    /* send: the buffer's contents when sent */
} ticket;

/* a transfer issued inside an open group, run when the group closes */
typedef struct {
  int t, is_send, peer;
  float *buf;
  size_t n;
} gop;

enum { MAXG = 256 };

struct kernels_coll_comm {
  MPI_Comm comm;
  int grouped, ngroup;
  gop g[MAXG];
  int nranks, rank;
  int pending[2]; /* an async reduce-scatter issued, run at wait */
  const float *send[2];
  float *recv[2];
  int counts[2][MAXD];
  ticket t[KERNELS_COLL_TICKETS];
};

static int world_rank(void) {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

static void fake_error(const char *what, int t) {
  fake_coll_errors++;
  fprintf(stderr, "fake coll: rank %d: %s (ticket %d)\n", world_rank(), what, t);
}

static void *dev(const void *p, const char *entry) {
  if (!p) return NULL;
  if (!((uintptr_t)p & KERNELS_FAKEDEV_TAG)) {
    fprintf(stderr, "fake coll %s: %p is a host pointer, not device memory\n", entry, p);
    abort();
  }
  return (void *)((uintptr_t)p & ~KERNELS_FAKEDEV_TAG);
}

static int mpi_fail(const char *entry) { return core_error_set(CORE_ERUNTIME, "fake coll: %s failed", entry); }

static uint64_t hash_of(const float *x, size_t n) {
  const unsigned char *b = (const unsigned char *)x;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* ---- identity, set-up ---- */

static int f_device_id(unsigned char id[KERNELS_COLL_DEVICE_ID_BYTES]) {
  fake_calls.device_id++;
  memset(id, 0xab, KERNELS_COLL_DEVICE_ID_BYTES);
  int r = world_rank();
  if (!fake_shared) memcpy(id, &r, sizeof r);
  return CORE_OK;
}

/* The maker's world rank and a serial number, then filler: distinct across makers and calls. */
static int f_unique_id(unsigned char id[KERNELS_COLL_UNIQUE_ID_BYTES]) {
  fake_calls.unique_id++;
  static int serial;
  int r = world_rank();
  for (int i = 0; i < KERNELS_COLL_UNIQUE_ID_BYTES; i++) id[i] = (unsigned char)(i * 31 + 7 * serial + r + 1);
  memcpy(id, &r, sizeof r);
  memcpy(id + sizeof r, &serial, sizeof serial);
  serial++;
  return CORE_OK;
}

/* Splits the world by id (collective over MPI_COMM_WORLD), then checks what the caller handed
 * around: the same id, nranks and a distinct rank everywhere. */
static int f_comm_init(kernels_coll_comm **out, const unsigned char id[KERNELS_COLL_UNIQUE_ID_BYTES], int nranks,
                       int rank) {
  fake_calls.comm_init++;
  *out = NULL;
  int maker, serial;
  memcpy(&maker, id, sizeof maker);
  memcpy(&serial, id + sizeof maker, sizeof serial);
  kernels_coll_comm *c = calloc(1, sizeof *c);
  MPI_Comm_split(MPI_COMM_WORLD, maker * 4096 + serial % 4096, rank, &c->comm);
  int size, me;
  MPI_Comm_size(c->comm, &size);
  MPI_Comm_rank(c->comm, &me);
  unsigned char root[KERNELS_COLL_UNIQUE_ID_BYTES];
  memcpy(root, id, sizeof root);
  MPI_Bcast(root, (int)sizeof root, MPI_BYTE, 0, c->comm);
  int bad = nranks != size || rank != me || nranks > MAXD || memcmp(root, id, sizeof root) != 0, anybad = 0;
  MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, c->comm);
  if (anybad) {
    MPI_Comm_free(&c->comm), free(c);
    return core_error_set(CORE_ERUNTIME, "fake coll: comm_init given different ids, or a wrong rank / size");
  }
  c->nranks = nranks, c->rank = rank;
  *out = c;
  return CORE_OK;
}

static void f_comm_free(kernels_coll_comm *c) {
  if (!c) return;
  fake_calls.comm_free++;
  if (c->pending[0] || c->pending[1]) fake_error("comm_free with an async reduce-scatter never waited for", -1);
  for (int t = 0; t < KERNELS_COLL_TICKETS; t++) {
    if (c->t[t].pending) fake_error("comm_free with a transfer never waited for", t);
    free(c->t[t].data);
  }
  MPI_Comm_free(&c->comm);
  free(c);
}

/* ---- collectives ---- */

static int f_all_reduce(kernels_coll_comm *c, float *x, size_t n) {
  fake_calls.all_reduce++;
  if (fake_fail) return mpi_fail("all_reduce");
  return MPI_Allreduce(MPI_IN_PLACE, dev(x, "all_reduce"), (int)n, MPI_FLOAT, MPI_SUM, c->comm) ? mpi_fail("all_reduce") : CORE_OK;
}

static int f_reduce_scatter(kernels_coll_comm *c, const float *send, float *recv, size_t count) {
  fake_calls.reduce_scatter++;
  return MPI_Reduce_scatter_block(dev(send, "reduce_scatter"), dev(recv, "reduce_scatter"), (int)count, MPI_FLOAT,
                                  MPI_SUM, c->comm)
             ? mpi_fail("reduce_scatter")
             : CORE_OK;
}

static int rsv(kernels_coll_comm *c, const float *send, float *recv, const int *counts) {
  float *s = dev(send, "reduce_scatterv"), *r = counts[c->rank] ? dev(recv, "reduce_scatterv") : NULL;
  return MPI_Reduce_scatter(s, r, counts, MPI_FLOAT, MPI_SUM, c->comm) ? mpi_fail("reduce_scatterv") : CORE_OK;
}

static int f_reduce_scatterv(kernels_coll_comm *c, const float *send, float *recv, const size_t *counts) {
  fake_calls.reduce_scatterv++;
  int ic[MAXD];
  for (int q = 0; q < c->nranks; q++) ic[q] = (int)counts[q];
  return rsv(c, send, recv, ic);
}

static int f_all_gather(kernels_coll_comm *c, const float *send, float *recv, size_t count) {
  fake_calls.all_gather++;
  float *r = dev(recv, "all_gather");
  const float *s = send == recv + (size_t)c->rank * count ? MPI_IN_PLACE : dev(send, "all_gather");
  return MPI_Allgather(s, (int)count, MPI_FLOAT, r, (int)count, MPI_FLOAT, c->comm) ? mpi_fail("all_gather") : CORE_OK;
}

static int f_all_gatherv(kernels_coll_comm *c, float *buf, const size_t *counts) {
  fake_calls.all_gatherv++;
  int ic[MAXD], displs[MAXD], off = 0;
  for (int q = 0; q < c->nranks; q++) ic[q] = (int)counts[q], displs[q] = off, off += ic[q];
  return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, dev(buf, "all_gatherv"), ic, displs, MPI_FLOAT, c->comm)
             ? mpi_fail("all_gatherv")
             : CORE_OK;
}

static int f_async(kernels_coll_comm *c, int slot, const float *send, float *recv, const size_t *counts) {
  fake_calls.async++;
  if (slot < 0 || slot > 1 || c->pending[slot])
    return core_error_set(CORE_ERUNTIME, "fake coll: async reduce-scatter into slot %d, busy or not a slot", slot);
  dev(send, "reduce_scatterv_async"), dev(recv, "reduce_scatterv_async");
  c->pending[slot] = 1, c->send[slot] = send, c->recv[slot] = recv;
  for (int q = 0; q < c->nranks; q++) c->counts[slot][q] = (int)counts[q]; /* read now, as coll.h says */
  return CORE_OK;
}

static int f_wait(kernels_coll_comm *c, int slot) {
  fake_calls.wait++;
  if (!c->pending[slot]) return CORE_OK;
  c->pending[slot] = 0;
  return rsv(c, c->send[slot], c->recv[slot], c->counts[slot]);
}

/* ---- point-to-point ---- */

static int ticket_free(kernels_coll_comm *c, int t, const char *entry) {
  if (t < 0 || t >= KERNELS_COLL_TICKETS) return core_error_set(CORE_ERUNTIME, "fake coll: %s: no ticket %d", entry, t);
  if (c->t[t].pending) return core_error_set(CORE_ERUNTIME, "fake coll: %s: ticket %d still in flight", entry, t);
  return CORE_OK;
}

/* Inside a group: the transfer waits for the group's end. */
static int defer(kernels_coll_comm *c, int t, int is_send, float *buf, size_t n, int peer) {
  for (int k = 0; k < c->ngroup; k++)
    if (c->g[k].t == t) return core_error_set(CORE_ERUNTIME, "fake coll: ticket %d twice in one group", t);
  if (c->ngroup == MAXG) return core_error_set(CORE_ERUNTIME, "fake coll: more than %d transfers in a group", MAXG);
  if (n) dev(buf, is_send ? "send" : "recv");
  c->g[c->ngroup++] = (gop){t, is_send, peer, buf, n};
  return CORE_OK;
}

static int f_send(kernels_coll_comm *c, int t, const float *buf, size_t n, int peer) {
  fake_calls.send++;
  int rc = ticket_free(c, t, "send");
  if (rc) return rc;
  if (c->grouped) return defer(c, t, 1, (float *)buf, n, peer);
  const float *h = n ? dev(buf, "send") : NULL;
  if (MPI_Ssend(h, (int)n, MPI_FLOAT, peer, 0, c->comm)) return mpi_fail("send");
  c->t[t] = (ticket){.pending = 1, .is_send = 1, .buf = (float *)buf, .n = n, .hash = n ? hash_of(h, n) : 0};
  return CORE_OK;
}

static int f_recv(kernels_coll_comm *c, int t, float *buf, size_t n, int peer) {
  fake_calls.recv++;
  int rc = ticket_free(c, t, "recv");
  if (rc) return rc;
  if (c->grouped) return defer(c, t, 0, buf, n, peer);
  if (n) dev(buf, "recv");
  float *data = malloc(sizeof(float) * (n ? n : 1));
  MPI_Status st;
  int got = 0;
  if (MPI_Recv(data, (int)n, MPI_FLOAT, peer, 0, c->comm, &st)) {
    free(data);
    return mpi_fail("recv");
  }
  MPI_Get_count(&st, MPI_FLOAT, &got);
  if ((size_t)got != n) {
    free(data);
    return core_error_set(CORE_ERUNTIME, "fake coll: recv from rank %d: %d floats sent, %zu expected", peer, got, n);
  }
  c->t[t] = (ticket){.pending = 1, .buf = buf, .data = data, .n = n};
  return CORE_OK;
}

static int f_wait_p2p(kernels_coll_comm *c, int t) {
  fake_calls.wait_p2p++;
  if (t < 0 || t >= KERNELS_COLL_TICKETS) return core_error_set(CORE_ERUNTIME, "fake coll: wait_p2p: no ticket %d", t);
  ticket *k = &c->t[t];
  if (!k->pending) return CORE_OK;
  if (k->is_send && k->n && hash_of(dev(k->buf, "wait_p2p"), k->n) != k->hash)
    fake_error("a sent buffer changed before its transfer was waited for", t);
  if (!k->is_send && k->n) memcpy(dev(k->buf, "wait_p2p"), k->data, sizeof(float) * k->n);
  free(k->data);
  *k = (ticket){0};
  return CORE_OK;
}

/* A group runs all its transfers at its end, posted together (MPI_Issend / MPI_Irecv, then one
 * wait for all): a group whose order only works when its transfers overlap completes, as NCCL's
 * does; one transfer at a time it might not. */
static int f_group(kernels_coll_comm *c, int begin) {
  fake_calls.group++;
  if (begin) {
    if (c->grouped) return core_error_set(CORE_ERUNTIME, "fake coll: group opened twice");
    c->grouped = 1, c->ngroup = 0;
    return CORE_OK;
  }
  if (!c->grouped) return core_error_set(CORE_ERUNTIME, "fake coll: no group to close");
  c->grouped = 0;
  int n = c->ngroup, rc = CORE_OK;
  MPI_Request req[MAXG];
  MPI_Status st[MAXG];
  float *data[MAXG];
  for (int k = 0; k < n; k++) {
    gop *o = &c->g[k];
    data[k] = o->is_send ? NULL : malloc(sizeof(float) * (o->n ? o->n : 1));
    int e = o->is_send ? MPI_Issend(o->n ? dev(o->buf, "send") : NULL, (int)o->n, MPI_FLOAT, o->peer, 0, c->comm, &req[k])
                       : MPI_Irecv(data[k], (int)o->n, MPI_FLOAT, o->peer, 0, c->comm, &req[k]);
    if (e) return mpi_fail("group");
  }
  if (MPI_Waitall(n, req, st)) return mpi_fail("group");
  for (int k = 0; k < n; k++) {
    gop *o = &c->g[k];
    int got = 0;
    if (!o->is_send) MPI_Get_count(&st[k], MPI_FLOAT, &got);
    if (!o->is_send && (size_t)got != o->n) {
      free(data[k]);
      rc = core_error_set(CORE_ERUNTIME, "fake coll: recv from rank %d: %d floats sent, %zu expected", o->peer, got, o->n);
      continue;
    }
    c->t[o->t] = o->is_send ? (ticket){.pending = 1, .is_send = 1, .buf = o->buf, .n = o->n,
                                       .hash = o->n ? hash_of(dev(o->buf, "send"), o->n) : 0}
                            : (ticket){.pending = 1, .buf = o->buf, .data = data[k], .n = o->n};
  }
  c->ngroup = 0;
  return rc;
}

/* Everything already ran; what sync can check is that the caller waited for its transfers. */
static int f_sync(kernels_coll_comm *c, double timeout_s) {
  fake_calls.sync++;
  (void)timeout_s;
  for (int t = 0; t < KERNELS_COLL_TICKETS; t++)
    if (c->t[t].pending) fake_error("sync with a transfer not waited for", t);
  return CORE_OK;
}

static const kernels_coll table = {
    .name = "fake",
    .device_id = f_device_id,
    .unique_id = f_unique_id,
    .comm_init = f_comm_init,
    .comm_free = f_comm_free,
    .all_reduce = f_all_reduce,
    .reduce_scatter = f_reduce_scatter,
    .reduce_scatterv = f_reduce_scatterv,
    .all_gather = f_all_gather,
    .all_gatherv = f_all_gatherv,
    .reduce_scatterv_async = f_async,
    .wait = f_wait,
    .send = f_send,
    .recv = f_recv,
    .wait_p2p = f_wait_p2p,
    .group = f_group,
    .sync = f_sync,
};

const kernels_coll *fake_coll(void) { return &table; }
