/* kernels/cpu/vec_sse.c: the vector loops on 4 lanes (SSE, every x86-64 has it); see vec_body.h */
#define VEC_W 4
#define VEC_TABLE kernels_cpu_vec_sse
#include "kernels/cpu/vec_body.h"
