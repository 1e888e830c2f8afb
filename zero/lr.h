/* zero/lr.h: learning-rate schedules (DeepSpeed's scheduler.type names where they exist). */
#ifndef BRIGADE_ZERO_LR_H
#define BRIGADE_ZERO_LR_H

typedef enum {
  ZERO_LR_CONSTANT = 0,
  ZERO_LR_WARMUP,        /* DeepSpeed's name (whose default warm-up is logarithmic from 0): linear
                          * warm-up from lr / warmup at the first step, then constant */
  ZERO_LR_WARMUP_COSINE, /* linear warm-up, then cosine decay to min_lr at total_steps */
} zero_lr_kind;

typedef struct {
  zero_lr_kind kind;
  double lr;       /* peak learning rate */
  double min_lr;   /* floor of the cosine decay */
  long warmup;     /* warm-up steps */
  long total;      /* steps of the run (cosine reaches min_lr there) */
} zero_lr;

int zero_lr_parse_kind(const char *name, zero_lr_kind *out); /* "constant", "WarmupLR", "WarmupCosineLR" */
/* Learning rate of step (0-based). */
double zero_lr_at(const zero_lr *s, long step);

#endif
