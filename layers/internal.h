/* layers/internal.h: what the layer files share. */
#ifndef BRIGADE_LAYERS_INTERNAL_H
#define BRIGADE_LAYERS_INTERNAL_H

#include "core/rng.h"
#include "layers/layers.h"

extern const layer_type layers_linear, layers_relu, layers_gelu, layers_layernorm, layers_embedding,
    layers_lm_head, layers_cross_entropy, layers_attention, layers_block;

/* Parameters [off, off + n) of the window's layer: normal(0, std) draws from r, or `value`; only
 * what lies inside the window is written, and r moves past all n values either way. */
void layers_normal(const layers_window *w, size_t off, size_t n, float std, core_rng *r);
void layers_fill(const layers_window *w, size_t off, size_t n, float value);
void layers_linear_forward(const kernels_ops *ops, float *out, const float *in, const float *w,
                           const float *b, int N, int C, int OC);
void layers_linear_backward_input(const kernels_ops *ops, float *din, const float *dout,
                                  const float *w, int N, int C, int OC);
void layers_linear_backward_weight(const kernels_ops *ops, float *dw, float *db, const float *dout,
                                   const float *in, int N, int C, int OC);

#endif
