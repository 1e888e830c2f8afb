/* core/file.h: opening input files that must be regular files. */
#ifndef BRIGADE_CORE_FILE_H
#define BRIGADE_CORE_FILE_H

#include <stdio.h>

/* Opens path for reading ("rb") if it is a regular file. A FIFO, a directory or a device is an
 * error "<what> <path> is not a regular file" (CORE_EINPUT), found without blocking: a FIFO
 * nobody writes to would otherwise hold the open for ever. An open that fails is
 * "cannot open <what> <path>: <reason>" (CORE_EINPUT). */
int core_file_open_regular(const char *path, const char *what, FILE **f);

#endif
