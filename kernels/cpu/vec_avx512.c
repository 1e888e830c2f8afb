/* kernels/cpu/vec_avx512.c: the vector loops on 16 lanes (AVX-512F), for CPUs that have it (chosen
 * at run time, kernels_cpu_vec_get); the same bits as vec_sse.c. See vec_body.h. */
#define VEC_W 16
#define VEC_TABLE kernels_cpu_vec_avx512
#include "kernels/cpu/vec_body.h"
