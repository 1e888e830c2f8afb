#!/bin/sh
# `make test`'s run of the CUDA emulator: the GPU op harness (tests/gpu/test_ops_gpu.c) on
# kernels/cuda compiled as host code ($BRIGADE_BUILD/emu/test_ops_emu, see the Makefile), the
# threads of each block run in order, then in reverse (a missing barrier fails one of the two).
# Stops at the first order that fails; the last Criterion synthesis line is the one counted.
set -e
for order in fwd rev; do
  EMU_ORDER=$order BRIGADE_TEST_BACKEND=cuda BRIGADE_REQUIRE_GPU=1 \
    ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS} "$BRIGADE_BUILD/emu/test_ops_emu" "$@"
done
