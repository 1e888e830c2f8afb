/* kernels/ops.c: finding a backend's op table by name. This is the one place that knows which
 * backends the build has; layers only ever see a kernels_ops pointer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"

#if BRIGADE_CUDA
/* Defined by kernels/cuda/ when the build has it: fills *out, or returns CORE_ERUNTIME with a
 * message (no driver, no GPU) when the CUDA table cannot be used on this machine. */
int kernels_cuda_get_ops(const kernels_ops **out);
void kernels_cuda_describe(char *buf, size_t n);
#endif

static int local_rank = -1;
void kernels_set_local_rank(int r) { local_rank = r; }
int kernels_local_rank(void) { return local_rank; }

void kernels_describe_device(const kernels_ops *ops, char *buf, size_t n) {
  if (!ops || strcmp(ops->name, "cpu") == 0) {
    snprintf(buf, n, "CPU");
    return;
  }
#if BRIGADE_CUDA
  if (strcmp(ops->name, "cuda") == 0) {
    kernels_cuda_describe(buf, n);
    return;
  }
#endif
  snprintf(buf, n, "%s (a test backend: the CPU behind device pointers)", ops->name);
}

size_t kernels_attention_cache_floats(const char *backend, int precision, int B, int T, int C, int NH) {
  const char *e = getenv("BRIGADE_CUDA_ATTENTION");
  int fused = backend && !strcmp(backend, "cuda") && precision == 1 && kernels_fused_attention_shape(T, C, NH) &&
              !(e && !strcmp(e, "gemm"));
  return fused ? kernels_fused_attention_floats(B, T, NH, C / NH) : (size_t)B * (size_t)NH * (size_t)T * (size_t)T;
}

int kernels_get_ops(const char *backend, const kernels_ops **out) {
  *out = NULL;
  if (!backend)
    return core_error_set(CORE_EINPUT, "no backend named (expected cpu, cuda or fakedev)");
  if (strcmp(backend, "cpu") == 0) {
    *out = kernels_cpu_ops();
    return CORE_OK;
  }
  if (strcmp(backend, "fakedev") == 0) {
    *out = kernels_fakedev_ops();
    return CORE_OK;
  }
  if (strcmp(backend, "cuda") == 0) {
#if BRIGADE_CUDA
    return kernels_cuda_get_ops(out);
#else
    return core_error_set(CORE_ERUNTIME,
                          "backend \"cuda\": this build has no CUDA backend (build with nvcc "
                          "installed and kernels/cuda/*.cu present, or use backend \"cpu\")");
#endif
  }
  return core_error_set(CORE_EINPUT, "unknown backend \"%s\" (expected cpu, cuda or fakedev)",
                        backend);
}
