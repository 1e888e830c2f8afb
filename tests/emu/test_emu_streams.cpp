// The CUDA emulator's stream ordering (tests/emu/emu.cpp): what an asynchronous copy writes stays
// hidden (NaN) until its stream is waited for, what it reads must not be written before then, and
// what it writes must not be written over from another stream meanwhile. The races abort the
// process (SIGABRT); the same sequences with the event waits a GPU needs run through. These are
// the checks test_train_emu's runs rely on to catch a missing wait in the backend.
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>

#include "cuda_runtime.h"

namespace {

struct Two {
  cudaStream_t s1, s2;
  cudaEvent_t e;
  float *x, *y, *z;
};

Two setup() {
  Two t;
  cr_assert_eq(cudaStreamCreateWithFlags(&t.s1, cudaStreamNonBlocking), cudaSuccess);
  cr_assert_eq(cudaStreamCreateWithFlags(&t.s2, cudaStreamNonBlocking), cudaSuccess);
  cr_assert_eq(cudaEventCreateWithFlags(&t.e, cudaEventDisableTiming), cudaSuccess);
  cr_assert_eq(cudaMalloc(&t.x, 16), cudaSuccess);
  cr_assert_eq(cudaMalloc(&t.y, 16), cudaSuccess);
  cr_assert_eq(cudaMalloc(&t.z, 16), cudaSuccess);
  float v[4] = {1, 2, 3, 4};
  cudaMemcpyAsync(t.x, v, 16, cudaMemcpyHostToDevice, t.s1); // pageable source: staged at once
  cudaStreamSynchronize(t.s1);
  return t;
}

void done(Two &t) {
  cudaStreamSynchronize(t.s1), cudaStreamSynchronize(t.s2);
  cudaFree(t.x), cudaFree(t.y), cudaFree(t.z);
}

float host_first(cudaStream_t s, const float *d) { // a copy to pageable memory returns when done
  float h[4];
  cudaMemcpyAsync(h, d, 16, cudaMemcpyDeviceToHost, s);
  return h[0];
}

} // namespace

Test(emu_streams, a_result_is_hidden_until_its_stream_is_waited_for) {
  Two t = setup();
  cudaMemcpyAsync(t.y, t.x, 16, cudaMemcpyDeviceToDevice, t.s1);
  cr_expect(isnan(host_first(t.s2, t.y)), "another stream read the copy's result without waiting");
  cudaEventRecord(t.e, t.s1);
  cudaStreamWaitEvent(t.s2, t.e, 0);
  cr_expect_eq(host_first(t.s2, t.y), 1, "after the wait");
  done(t);
}

Test(emu_streams, later_work_on_the_same_stream_sees_a_result) {
  Two t = setup();
  cudaMemcpyAsync(t.y, t.x, 16, cudaMemcpyDeviceToDevice, t.s1);
  cudaMemcpyAsync(t.z, t.y, 16, cudaMemcpyDeviceToDevice, t.s1);
  cr_expect_eq(host_first(t.s1, t.z), 1);
  done(t);
}

/* y = x on s1, then x set to 0 on s2: a write-after-read race unless s2 waits for s1's event */
static void copy_then_overwrite_input(Two &t, bool wait) {
  cudaMemcpyAsync(t.y, t.x, 16, cudaMemcpyDeviceToDevice, t.s1); // reads x
  if (wait) cudaEventRecord(t.e, t.s1), cudaStreamWaitEvent(t.s2, t.e, 0);
  cudaMemsetAsync(t.x, 0, 16, t.s2);
  cudaStreamSynchronize(t.s1);
}

Test(emu_streams, overwriting_an_input_before_the_wait_aborts, .signal = SIGABRT) {
  Two t = setup();
  copy_then_overwrite_input(t, false);
}

Test(emu_streams, overwriting_an_input_after_the_wait_runs) {
  Two t = setup();
  copy_then_overwrite_input(t, true);
  cr_expect_eq(host_first(t.s1, t.y), 1);
  done(t);
}

Test(emu_streams, writing_over_a_result_before_the_wait_aborts, .signal = SIGABRT) {
  Two t = setup();
  cudaMemcpyAsync(t.y, t.x, 16, cudaMemcpyDeviceToDevice, t.s1); // writes y
  cudaMemsetAsync(t.y, 0, 16, t.s2);                              // a write-after-write race
}

Test(emu_streams, a_copy_to_pageable_memory_is_a_point_its_stream_reached) {
  Two t = setup();
  cudaMemcpyAsync(t.y, t.x, 16, cudaMemcpyDeviceToDevice, t.s1);
  cr_expect_eq(host_first(t.s1, t.y), 1);
  cudaMemsetAsync(t.x, 0, 16, t.s2); // the copy of x is over: no race
  done(t);
}
