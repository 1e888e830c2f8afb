/* kernels/cpu/vec_avx2.c: the vector loops on 8 lanes (AVX2), for CPUs that have it (chosen at
 * run time, kernels_cpu_vec_get); the same bits as vec_sse.c. See vec_body.h. */
#define VEC_W 8
#define VEC_TABLE kernels_cpu_vec_avx2
#include "kernels/cpu/vec_body.h"
