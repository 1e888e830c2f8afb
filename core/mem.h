/* core/mem.h: byte counts as users write and read them, and the memory limit a command keeps to
 * (the machine's memory, or a lower one from --max-memory / BRIGADE_MAX_MEMORY), so that work too
 * large for it is refused from an estimate before anything is allocated. */
#ifndef BRIGADE_CORE_MEM_H
#define BRIGADE_CORE_MEM_H

#include <stddef.h>

/* "1000000", "1.5e9", "512M", "80G", "80GiB": bytes, K/M/G/T being powers of 1024, rounded down
 * to whole bytes. CORE_EINPUT naming `what` (a flag or variable) unless it is >= 1 and <= 1e18. */
int core_mem_parse(const char *what, const char *text, double *out);
/* "949248 bytes", "1.682 MiB", "23.42 GiB", "2.25 TiB", "45.1 PiB" */
void core_mem_str(double bytes, char *buf, size_t n);
/* The machine's physical memory in bytes (sysconf), 0 when it cannot be read. */
double core_mem_physical(void);

/* For commands that build and free large tables one after another (compile, sim, tune): freed
 * memory stays in the process for the next table rather than going back to the system, so each
 * table does not fault in fresh pages (some 0.5 ms a megabyte on a virtual machine). Tables up to
 * 32 MiB (glibc's largest threshold) come from the heap, which is not trimmed. Not for training:
 * its buffers live for the whole run. Does nothing where the C library is not glibc. */
void core_mem_keep_freed(void);

/* The memory limit: flag_value (the text given to --max-memory, NULL when none), else
 * $BRIGADE_MAX_MEMORY, else the machine's memory. *what receives how a message names it, e.g.
 * "--max-memory 1G", "BRIGADE_MAX_MEMORY=1G", "this machine's memory". CORE_EINPUT
 * when the flag or the variable is not a byte count. *limit is 0 (no limit) when the machine's
 * memory cannot be read. */
typedef struct {
  double bytes;
  char what[96];
} core_mem_limit;
int core_mem_limit_get(const char *flag_value, core_mem_limit *out);

#endif
