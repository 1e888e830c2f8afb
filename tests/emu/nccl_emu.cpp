// tests/emu/nccl_emu.cpp: NCCL for the CUDA emulator, over MPI, so that kernels/cuda/coll_cuda.cu
// (the backend's device collectives and the pipeline's device transfers) runs without a GPU.
//
// Each emulated communicator is an MPI communicator of its members (MPI_Comm_create_group, a
// collective of the members only, as ncclCommInitRank is). Its world ranks are gathered through
// the id's maker: ncclGetUniqueId writes the maker's world rank and a serial into the id, every
// member sends the maker its (rank, world rank) and the maker sends the table back.
//
// Like everything in the emulator, work runs when it is issued: a send or receive outside a
// group is a blocking MPI_Send / MPI_Recv, a collective the matching MPI collective (sums in
// MPI's order, not NCCL's). Inside ncclGroupStart / ncclGroupEnd the calls are queued; at the
// group's end its sends and receives are posted together (MPI_Isend / MPI_Irecv), its collectives
// run in issue order, and then the transfers are waited for: no transfer of a group waits for
// another, as NCCL promises. So a program whose transfers need more than that (a send that
// completes only because the host went on while the GPU's stream waited) hangs here.
//
// What a call writes (a receive's buffer, a collective's output) is held back, the buffer
// filled with NaN, until the stream it was issued on is waited for, and what it reads must not
// change before then (tests/emu/emu.cpp's streams and events, emu_call_done).
//
// Checked as NCCL's contract asks: float data only, buffers inside emulated device allocations
// (a host pointer given to NCCL aborts), work on a non-default stream, ranks and roots in range,
// a group closed as often as it was opened.
#define OMPI_SKIP_MPICXX 1 // the C API only
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

bool emu_is_device_range(const void *p, size_t bytes);

namespace {

struct Id {
  char magic[8];
  int maker; // world rank of the process that made it
  int serial;
};
static_assert(sizeof(Id) <= NCCL_UNIQUE_ID_BYTES, "the id fits NCCL's");
const char kMagic[8] = "emuNCCL";

enum Kind { kSend, kRecv, kAllReduce, kReduce, kReduceScatter, kAllGather, kBroadcast };

struct Op {
  Kind kind;
  const float *send;
  float *recv;
  size_t count;
  int root; // peer of a send or receive
  ncclComm_t comm;
  cudaStream_t stream;
};

int serial;             // ids made by this process
int depth;              // ncclGroupStart calls not yet closed
std::vector<Op> queued; // the open group's calls

[[noreturn]] void die(const char *what) {
  fprintf(stderr, "tests/emu (NCCL): %s\n", what);
  fflush(stderr);
  abort();
}

} // namespace

struct ncclComm {
  MPI_Comm mpi;
  int nranks, rank;
  long sent, received, grouped, collectives; // with EMU_NCCL_STATS=1, printed when it is destroyed
};

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclSystemError: return "unhandled system error (emulated: an MPI call failed)";
  case ncclInvalidArgument: return "invalid argument";
  case ncclInvalidUsage: return "invalid usage";
  default: return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return ncclInvalidUsage; // the emulation's ids travel over MPI
  Id u;
  memcpy(u.magic, kMagic, sizeof u.magic);
  MPI_Comm_rank(MPI_COMM_WORLD, &u.maker);
  u.serial = serial++;
  memset(id->internal, 0, sizeof id->internal);
  memcpy(id->internal, &u, sizeof u);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  Id u;
  memcpy(&u, id.internal, sizeof u);
  if (memcmp(u.magic, kMagic, sizeof u.magic) != 0 || nranks < 1 || rank < 0 || rank >= nranks)
    return ncclInvalidArgument;
  int me = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (u.maker < 0 || u.maker >= size || nranks > size) return ncclInvalidArgument;
  const int tag = 30000 + u.serial % 2000; // this id's messages (the standard's tags reach 32767)
  std::vector<int> world((size_t)nranks, -1);
  if (me == u.maker) { // the table of world ranks, from every member
    world[(size_t)rank] = me;
    for (int k = 1; k < nranks; k++) {
      int m[2];
      if (MPI_Recv(m, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return ncclSystemError;
      if (m[0] < 0 || m[0] >= nranks || world[(size_t)m[0]] >= 0) die("ncclCommInitRank: two members gave one rank");
      world[(size_t)m[0]] = m[1];
    }
    for (int q = 0; q < nranks; q++)
      if (world[(size_t)q] != me && MPI_Send(world.data(), nranks, MPI_INT, world[(size_t)q], tag, MPI_COMM_WORLD))
        return ncclSystemError;
  } else {
    int m[2] = {rank, me};
    if (MPI_Send(m, 2, MPI_INT, u.maker, tag, MPI_COMM_WORLD) != MPI_SUCCESS ||
        MPI_Recv(world.data(), nranks, MPI_INT, u.maker, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return ncclSystemError;
  }
  MPI_Group all, members;
  MPI_Comm_group(MPI_COMM_WORLD, &all);
  MPI_Group_incl(all, nranks, world.data(), &members);
  ncclComm *c = new ncclComm{MPI_COMM_NULL, nranks, rank, 0, 0, 0, 0};
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &c->mpi);
  MPI_Group_free(&members), MPI_Group_free(&all);
  if (rc != MPI_SUCCESS) {
    delete c;
    return ncclSystemError;
  }
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  const char *stats = getenv("EMU_NCCL_STATS");
  if (stats && strcmp(stats, "1") == 0) {
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    fprintf(stderr, "tests/emu (NCCL): world rank %d, rank %d of %d: %ld sends, %ld receives (%ld of them in "
            "groups), %ld collectives\n", me, c->rank, c->nranks, c->sent, c->received, c->grouped, c->collectives);
  }
  MPI_Comm_free(&c->mpi);
  delete c;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) { // its peers may be gone: no collective call
  delete c;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
  if (!c) return ncclInvalidArgument;
  *e = ncclSuccess; // everything has run already
  return ncclSuccess;
}

namespace {

ncclResult_t mpi(int rc) { return rc == MPI_SUCCESS ? ncclSuccess : ncclSystemError; }

const char *kind_name(Kind k) {
  static const char *const names[] = {"ncclSend", "ncclRecv", "ncclAllReduce", "ncclReduce", "ncclReduceScatter",
                                      "ncclAllGather", "ncclBroadcast"};
  return names[k];
}

// What call o reads (none: 0 bytes) and writes on this rank.
void ranges(const Op &o, size_t *in_bytes, size_t *out_bytes) {
  const ncclComm *c = o.comm;
  size_t in = o.count * sizeof(float), out = in;
  if (o.kind == kReduceScatter) in *= (size_t)c->nranks;
  if (o.kind == kAllGather) out *= (size_t)c->nranks;
  uintptr_t sa = (uintptr_t)o.send, ra = (uintptr_t)o.recv;
  bool writes = o.kind != kSend && !(o.kind == kReduce && c->rank != o.root) &&
                !(o.kind == kBroadcast && c->rank == o.root && o.send == o.recv); // the root's own data, unchanged
  bool reads_input = o.kind != kRecv && !(o.kind == kBroadcast && c->rank != o.root) &&
                     (!writes || o.kind == kBroadcast || sa + in <= ra || ra + out <= sa); // not in place
  *in_bytes = reads_input ? in : 0, *out_bytes = writes ? out : 0;
}

// Call o is about to run: the inputs of its stream's earlier calls that it overwrites are settled.
void will_run(const Op &o) {
  size_t in, out;
  ranges(o, &in, &out);
  emu_stream_writes(o.stream, o.recv, out);
}

// The call o has run: what it read and wrote, to the emulator's stream bookkeeping
// (emu_call_done: the input compared when the call is waited for, the output held back).
void hold(const Op &o) {
  size_t in, out;
  ranges(o, &in, &out);
  emu_call_done(o.stream, kind_name(o.kind), in ? o.send : nullptr, in, out ? o.recv : nullptr, out);
}

// A collective, run now (the buffers are checked where they are given).
ncclResult_t collective(const Op &o) {
  MPI_Comm m = o.comm->mpi;
  int n = (int)o.count, me = o.comm->rank;
  switch (o.kind) {
  case kAllReduce:
    return mpi(MPI_Allreduce(o.send == o.recv ? MPI_IN_PLACE : o.send, o.recv, n, MPI_FLOAT, MPI_SUM, m));
  case kReduce:
    return mpi(MPI_Reduce(o.send == o.recv && me == o.root ? MPI_IN_PLACE : o.send, o.recv, n, MPI_FLOAT, MPI_SUM,
                          o.root, m));
  case kReduceScatter: {
    std::vector<float> in(o.send, o.send + o.count * (size_t)o.comm->nranks); // the input may hold the output
    return mpi(MPI_Reduce_scatter_block(in.data(), o.recv, n, MPI_FLOAT, MPI_SUM, m));
  }
  case kAllGather:
    if (o.send == o.recv + (size_t)me * o.count)
      return mpi(MPI_Allgather(MPI_IN_PLACE, 0, MPI_FLOAT, o.recv, n, MPI_FLOAT, m));
    return mpi(MPI_Allgather(o.send, n, MPI_FLOAT, o.recv, n, MPI_FLOAT, m));
  case kBroadcast:
    if (me == o.root && o.send != o.recv) memmove(o.recv, o.send, o.count * sizeof(float));
    return mpi(MPI_Bcast(o.recv, n, MPI_FLOAT, o.root, m));
  default: return ncclInternalError;
  }
}

ncclResult_t issue(Kind kind, const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                   ncclComm_t comm, cudaStream_t stream, const char *what) {
  if (!comm || type != ncclFloat || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  if (count > (size_t)0x7fffffff) return ncclInvalidArgument; // one MPI count
  emu_check_stream_call(stream, what);
  size_t n = count * sizeof(float), in = kind == kReduceScatter ? n * (size_t)comm->nranks : n;
  size_t out = kind == kAllGather ? n * (size_t)comm->nranks : n;
  bool reads = kind != kRecv, writes = kind != kSend;
  if (reads && count && !(kind == kBroadcast && comm->rank != root) && !emu_is_device_range(send, in))
    die("a send buffer is not inside one device allocation (a host pointer given to NCCL?)");
  if (writes && count && !(kind == kReduce && comm->rank != root) && !emu_is_device_range(recv, out))
    die("a receive buffer is not inside one device allocation (a host pointer given to NCCL?)");
  Op o{kind, (const float *)send, (float *)recv, count, root, comm, stream};
  comm->sent += kind == kSend, comm->received += kind == kRecv;
  comm->collectives += kind != kSend && kind != kRecv;
  comm->grouped += depth > 0 && (kind == kSend || kind == kRecv);
  if (depth > 0) {
    queued.push_back(o);
    return ncclSuccess;
  }
  if (!count) return ncclSuccess;
  will_run(o);
  ncclResult_t r = kind == kSend   ? mpi(MPI_Send(send, (int)count, MPI_FLOAT, root, 0, comm->mpi))
                   : kind == kRecv ? mpi(MPI_Recv(recv, (int)count, MPI_FLOAT, root, 0, comm->mpi, MPI_STATUS_IGNORE))
                                   : collective(o);
  if (r == ncclSuccess) hold(o);
  return r;
}

} // namespace

ncclResult_t ncclGroupStart(void) {
  depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (depth == 0) return ncclInvalidUsage;
  if (--depth > 0) return ncclSuccess;
  std::vector<Op> ops;
  ops.swap(queued);
  std::vector<MPI_Request> req;
  ncclResult_t r = ncclSuccess;
  for (const Op &o : ops)
    if (o.count) will_run(o);
  for (const Op &o : ops) // the transfers first, all posted
    if (o.count && (o.kind == kSend || o.kind == kRecv)) {
      MPI_Request q;
      int rc = o.kind == kSend ? MPI_Isend(o.send, (int)o.count, MPI_FLOAT, o.root, 0, o.comm->mpi, &q)
                               : MPI_Irecv(o.recv, (int)o.count, MPI_FLOAT, o.root, 0, o.comm->mpi, &q);
      if (rc != MPI_SUCCESS) r = ncclSystemError;
      else req.push_back(q);
    }
  for (const Op &o : ops)
    if (o.count && o.kind != kSend && o.kind != kRecv && r == ncclSuccess) r = collective(o);
  if (!req.empty() && MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE) != MPI_SUCCESS)
    r = ncclSystemError;
  for (const Op &o : ops)
    if (o.count && r == ncclSuccess) hold(o);
  return r;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (comm && peer == comm->rank) return ncclInvalidArgument;
  return issue(kSend, buf, nullptr, count, type, peer, comm, stream, "ncclSend");
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  if (comm && peer == comm->rank) return ncclInvalidArgument;
  return issue(kRecv, nullptr, buf, count, type, peer, comm, stream, "ncclRecv");
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return ncclInvalidArgument;
  return issue(kAllReduce, send, recv, count, type, 0, comm, stream, "ncclAllReduce");
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return ncclInvalidArgument;
  return issue(kReduce, send, recv, count, type, root, comm, stream, "ncclReduce");
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return ncclInvalidArgument;
  return issue(kReduceScatter, send, recv, recvcount, type, 0, comm, stream, "ncclReduceScatter");
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  return issue(kAllGather, send, recv, sendcount, type, 0, comm, stream, "ncclAllGather");
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return issue(kBroadcast, send, recv, count, type, root, comm, stream, "ncclBroadcast");
}
