/* The CUDA table's device collectives (NCCL, kernels/cuda/coll_cuda.cu) on this machine's GPU,
 * in a communicator of one rank: the only one a single GPU allows (NCCL refuses two ranks of
 * a communicator on one device). Every entry then copies or leaves its data, so the test checks
 * the calls themselves: the unique id, the communicator's set-up and teardown, each collective's
 * arguments and streams, and the asynchronous reduce-scatter's events (its result must be there
 * once wait() has ordered later ops after it). ZeRO's use of the entries across ranks is tested
 * without a GPU by tests/zero/test_coll.c over a fake table.
 * Without a usable GPU the tests skip, saying why; with BRIGADE_REQUIRE_GPU=1 (make test-gpu)
 * that is a failure. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/coll.h"
#include "kernels/ops.h"

static const kernels_ops *G;

static void need_gpu(void) {
  if (kernels_get_ops("cuda", &G) == CORE_OK) {
    cr_assert(G->coll, "the cuda table offers no collectives");
    return;
  }
  const char *e = getenv("BRIGADE_REQUIRE_GPU");
  if (e && strcmp(e, "1") == 0) cr_assert_fail("a GPU is required: %s", core_error_msg());
  fprintf(stderr, "[----] test_coll_gpu: NCCL tests skipped: %s\n", core_error_msg());
  cr_skip_test("no usable GPU: %s", core_error_msg());
}

enum { N = 1000 };

static float *dev_from(const float *h, size_t n) {
  float *d = G->alloc(n * sizeof(float));
  cr_assert(d);
  G->to_device(d, h, n * sizeof(float));
  return d;
}

static void expect_host(const char *what, const float *want, const float *dev, size_t n) {
  float *got = malloc(n * sizeof(float));
  G->to_host(got, dev, n * sizeof(float)); /* waits for every op issued before it */
  for (size_t i = 0; i < n; i++)
    cr_assert(got[i] == want[i], "%s[%zu]: %g, expected %g", what, i, got[i], want[i]);
  free(got);
}

Test(coll_gpu, one_rank_communicator) {
  need_gpu();
  const kernels_coll *c = G->coll;
  unsigned char dev_id[KERNELS_COLL_DEVICE_ID_BYTES], zero_id[KERNELS_COLL_DEVICE_ID_BYTES] = {0};
  cr_assert_eq(c->device_id(dev_id), CORE_OK, "%s", core_error_msg());
  cr_assert(memcmp(dev_id, zero_id, sizeof dev_id), "the GPU's UUID is all zeros");
  unsigned char uid[KERNELS_COLL_UNIQUE_ID_BYTES];
  cr_assert_eq(c->unique_id(uid), CORE_OK, "%s", core_error_msg());
  kernels_coll_comm *comm = NULL;
  cr_assert_eq(c->comm_init(&comm, uid, 1, 0), CORE_OK, "%s", core_error_msg());
  cr_assert(comm);

  float h[N], z[N];
  for (int i = 0; i < N; i++) h[i] = (float)i * 0.25f - 100.0f, z[i] = 0.0f;
  size_t counts[1] = {N};

  float *x = dev_from(h, N);
  cr_assert_eq(c->all_reduce(comm, x, N), CORE_OK, "%s", core_error_msg());
  expect_host("all_reduce", h, x, N);

  float *r = dev_from(z, N);
  cr_assert_eq(c->reduce_scatter(comm, x, r, N), CORE_OK, "%s", core_error_msg());
  expect_host("reduce_scatter", h, r, N);

  float *rv = dev_from(z, N);
  cr_assert_eq(c->reduce_scatterv(comm, x, rv, counts), CORE_OK, "%s", core_error_msg());
  expect_host("reduce_scatterv", h, rv, N);

  float *g = dev_from(z, N);
  cr_assert_eq(c->all_gather(comm, x, g, N), CORE_OK, "%s", core_error_msg());
  expect_host("all_gather", h, g, N);
  cr_assert_eq(c->all_gather(comm, g, g, N), CORE_OK, "%s", core_error_msg()); /* in place */
  expect_host("all_gather in place", h, g, N);

  cr_assert_eq(c->all_gatherv(comm, g, counts), CORE_OK, "%s", core_error_msg());
  expect_host("all_gatherv", h, g, N);

  /* the asynchronous reduce-scatter: it must see the op issued before it (the scale), and an op
   * issued after wait() must see its result (the copy) */
  for (int slot = 0; slot < KERNELS_COLL_SLOTS; slot++) {
    float *src = dev_from(z, N), *dst = dev_from(z, N), *after = dev_from(z, N);
    G->copy(src, x, N);
    G->scale(src, 2.0f, N);
    cr_assert_eq(c->reduce_scatterv_async(comm, slot, src, dst, counts), CORE_OK, "%s", core_error_msg());
    cr_assert_neq(c->reduce_scatterv_async(comm, slot, src, dst, counts), CORE_OK,
                  "a second collective in a busy slot must be refused");
    cr_assert_eq(c->wait(comm, slot), CORE_OK, "%s", core_error_msg());
    G->copy(after, dst, N);
    float twice[N];
    for (int i = 0; i < N; i++) twice[i] = 2.0f * h[i];
    expect_host("reduce_scatterv_async, then a copy after wait", twice, after, N);
    cr_assert_eq(c->wait(comm, slot), CORE_OK, "wait on an idle slot is a no-op");
    G->free(src), G->free(dst), G->free(after);
  }
  cr_assert_neq(c->wait(comm, KERNELS_COLL_SLOTS), CORE_OK, "a slot that does not exist");

  /* point-to-point tickets without data (one rank has no peer to send to: n = 0 makes no NCCL
   * call, but the ticket's events, its busy state, wait_p2p and sync all run) */
  cr_assert_eq(c->send(comm, 0, x, 0, 0), CORE_OK, "%s", core_error_msg());
  cr_assert_neq(c->send(comm, 0, x, 0, 0), CORE_OK, "a busy ticket must be refused");
  cr_assert_eq(c->recv(comm, KERNELS_COLL_TICKETS - 1, x, 0, 0), CORE_OK, "%s", core_error_msg());
  cr_assert_neq(c->recv(comm, KERNELS_COLL_TICKETS, x, 0, 0), CORE_OK, "a ticket that does not exist");
  cr_assert_eq(c->wait_p2p(comm, 0), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(c->wait_p2p(comm, KERNELS_COLL_TICKETS - 1), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(c->wait_p2p(comm, 0), CORE_OK, "wait on an idle ticket is a no-op");
  cr_assert_eq(c->send(comm, 0, x, 0, 0), CORE_OK, "a ticket waited for may be used again: %s", core_error_msg());
  cr_assert_eq(c->wait_p2p(comm, 0), CORE_OK, "%s", core_error_msg());
  cr_assert_eq(c->sync(comm, 30.0), CORE_OK, "%s", core_error_msg());

  c->comm_free(comm);
  G->free(x), G->free(r), G->free(rv), G->free(g);
}
