#include "zero/lr.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

int zero_lr_parse_kind(const char *name, zero_lr_kind *out) {
  if (strcasecmp(name, "constant") == 0) *out = ZERO_LR_CONSTANT;
  else if (strcasecmp(name, "WarmupLR") == 0) *out = ZERO_LR_WARMUP;
  else if (strcasecmp(name, "WarmupCosineLR") == 0 || strcasecmp(name, "cosine") == 0)
    *out = ZERO_LR_WARMUP_COSINE;
  else
    return core_error_set(CORE_EINPUT, "unknown scheduler.type '%s' (expected constant, WarmupLR or WarmupCosineLR)", name);
  return CORE_OK;
}

double zero_lr_at(const zero_lr *s, long step) {
  if (s->kind == ZERO_LR_CONSTANT) return s->lr;
  if (step < s->warmup) return s->lr * (double)(step + 1) / (double)s->warmup;
  if (s->kind == ZERO_LR_WARMUP) return s->lr;
  long decay = s->total - s->warmup;
  if (decay <= 0) return s->lr;
  double frac = (double)(step - s->warmup) / (double)decay;
  if (frac > 1) frac = 1;
  return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1 + cos(M_PI * frac));
}
