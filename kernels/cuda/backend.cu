// kernels/cuda/backend.cu: finding a usable GPU for backend = "cuda".
//
// What exists: device detection with one clear error when there is no usable GPU (this
// machine and CI have none: cudaGetDeviceCount reports an insufficient driver). What does not
// exist yet: the CUDA implementations of the op table (kernels/ops.h); until they are written,
// a machine with a GPU gets an error saying so instead of a half-working backend.
#include <cuda_runtime.h>

extern "C" {
#include "kernels/ops.h"
int core_error_set(int code, const char *fmt, ...); // core/error.h is C11, not C++
}

static const int kRuntimeError = 1; // CORE_ERUNTIME

extern "C" int kernels_cuda_get_ops(const kernels_ops **out) {
  *out = nullptr;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return core_error_set(kRuntimeError, "backend \"cuda\": no usable GPU (%s); use backend \"cpu\"",
                          cudaGetErrorString(e));
  if (n == 0) return core_error_set(kRuntimeError, "backend \"cuda\": no GPU found; use backend \"cpu\"");
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) prop.name[0] = 0;
  return core_error_set(kRuntimeError,
                        "backend \"cuda\": found %d GPU(s) (%s), but the CUDA op table is not "
                        "written yet; use backend \"cpu\"",
                        n, prop.name);
}
