/* pipe/ckpt_model.h: saving and loading the training state through pipe/ckpt.c.
 * DIR/step_NNNNNNNN/rank_RRRRR.ckpt holds, for each layer a rank owns, the records
 * "layer.<index>.params", ".adam_m", ".adam_v" (by the model's global layer index, so any
 * layout can read them), plus "step" and "opt_t", "model" (pipe_ckpt_model_describe: the model
 * and optimizer a resume must match) and "layout" (i64 stages, replicas, chunks per rank, ZeRO
 * stage: which rank files make the checkpoint); DIR/latest names the last complete step, replaced
 * by rename once every rank has written. Checkpoints written before "model" and "layout" load
 * as before: their model is checked against the config record of rank_00000. */
#ifndef BRIGADE_PIPE_CKPT_MODEL_H
#define BRIGADE_PIPE_CKPT_MODEL_H

#include <stdint.h>

#include "core/config.h"
#include "layers/layers.h"
#include "pipe/runner.h"

/* What a resume must match, as "key = value" lines (caller frees): model.vocab_size, seq_len,
 * d_model, n_heads, the layer list (types, repeats, ties), each layer's widths, heads, MLP, bias
 * and eps, and with cfg the precision and optimizer.type (cfg NULL: a weights-only checkpoint,
 * which any optimizer and precision may take). Never the layout. */
char *pipe_ckpt_model_describe(const core_config *cfg, const layers_model *m);

/* Saves step `step` (collective); desc: pipe_ckpt_model_describe of the run. The rank files go
 * into DIR/step_N.saving, which replaces DIR/step_N whole once every rank has written; a failed
 * save removes what it wrote (its temporary files, the staging directory) and leaves step_N and
 * latest as they were. */
int pipe_ckpt_model_save(const char *dir, const pipe_runner *rn, const pipe_topo *topo, long step,
                         const core_config *cfg, const char *desc);

typedef struct {
  long step;         /* the next step to run */
  char sub[1400];    /* the step directory read */
  int64_t layout[4]; /* stages, replicas, chunks per rank, ZeRO stage of the run that wrote it */
  int has_layout;    /* 0: a checkpoint from before the layout record */
} pipe_ckpt_info;

/* Loads the state of this rank's layers from the checkpoint DIR/latest names (or the step
 * directory DIR). Before a tensor is read: with desc, the model and optimizer it was written with
 * are compared with desc (a difference names the key and both values, CORE_EINPUT), and every
 * rank file of its layout must be there (a missing one is named, with the layout). */
int pipe_ckpt_model_load(const char *dir, pipe_runner *rn, const char *desc, pipe_ckpt_info *info);

/* Every layer's parameters of the latest checkpoint, whole, from whichever rank file holds them:
 * params[i] (host memory, caller frees; untouched for layers without parameters). */
int pipe_ckpt_model_params(const char *dir, const layers_model *m, float **params);
/* A step-0 checkpoint of weights only (DIR/step_00000000/rank_00000.ckpt, every layer; optimizer
 * state zero; the given config text as its record) and DIR/latest, written under DIR's lock:
 * `train --resume DIR` under any layout, optimizer and precision starts from those weights as
 * --init-from does. */
int pipe_ckpt_model_write_weights(const char *dir, const layers_model *m, const char *config_text, float *const *params);
/* The effective config (text, caller frees) and vocabulary saved with the latest checkpoint. */
int pipe_ckpt_model_config(const char *dir, char **text, int64_t *vocab);

#endif
