/* pipe/ckpt_model.h: saving and loading the training state through pipe/ckpt.c.
 * DIR/step_NNNNNNNN/rank_RRRRR.ckpt holds, for each layer a rank owns, the records
 * "layer.<index>.params", ".adam_m", ".adam_v" (by the model's global layer index, so any
 * layout can read them), plus "step" and "opt_t"; DIR/latest names the last complete step,
 * replaced by rename once every rank has written. */
#ifndef BRIGADE_PIPE_CKPT_MODEL_H
#define BRIGADE_PIPE_CKPT_MODEL_H

#include <stdint.h>

#include "core/config.h"
#include "layers/layers.h"
#include "pipe/runner.h"

int pipe_ckpt_model_save(const char *dir, const pipe_runner *rn, const pipe_topo *topo, long step,
                         const core_config *cfg);
/* Loads the state of this rank's layers from the checkpoint DIR/latest names; *step is the
 * next step to run. */
int pipe_ckpt_model_load(const char *dir, pipe_runner *rn, const pipe_topo *topo, long *step);

/* Every layer's parameters of the latest checkpoint, whole, from whichever rank file holds them:
 * params[i] (host memory, caller frees; untouched for layers without parameters). */
int pipe_ckpt_model_params(const char *dir, const layers_model *m, float **params);
/* A step-0 checkpoint of weights only (DIR/step_00000000/rank_00000.ckpt, every layer; optimizer
 * state zero; the given config text as its record) and DIR/latest: `train --resume DIR` under any
 * layout starts from those weights as --init-from does. */
int pipe_ckpt_model_write_weights(const char *dir, const layers_model *m, const char *config_text, float *const *params);
/* The effective config (text, caller frees) and vocabulary saved with the latest checkpoint. */
int pipe_ckpt_model_config(const char *dir, char **text, int64_t *vocab);

#endif
