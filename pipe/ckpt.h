/* pipe/ckpt.h: checkpoint files: named records (one per parameter tensor, optimizer state,
 * counters, the config), so a checkpoint is independent of how the model is cut into stages.
 *
 * Layout: "BRIGADE\0", u32 version, then records {u32 name length, name, u32 dtype, u64 count,
 * data}, then a trailer {u32 record count, u64 FNV-1a hash of every byte before it}. Written to
 * PATH.<pid>.tmp (the writer's own name), flushed and synced, renamed, and the directory synced,
 * so a crash never leaves a half-written PATH. The reader treats the file as untrusted: sizes are
 * checked against the file before use, and the hash must match. */
#ifndef BRIGADE_PIPE_CKPT_H
#define BRIGADE_PIPE_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { PIPE_CKPT_F32 = 0, PIPE_CKPT_I64 = 1, PIPE_CKPT_BYTES = 2 };

typedef struct {
  FILE *f;
  char path[1024], tmp[1040];
  uint64_t hash;
  uint32_t nrec;
  int failed;
} pipe_ckpt_writer;

int pipe_ckpt_create(pipe_ckpt_writer *w, const char *path);
int pipe_ckpt_put(pipe_ckpt_writer *w, const char *name, int dtype, const void *data, uint64_t count);
int pipe_ckpt_commit(pipe_ckpt_writer *w); /* trailer, fsync, rename */
void pipe_ckpt_abort(pipe_ckpt_writer *w);  /* removes the temporary file */

/* fsync of a directory (parent: of the one holding path), so a rename or a new entry in it
 * survives a crash; 0, or -1 with errno set. */
int pipe_ckpt_sync_dir(const char *path, int parent);
/* mkdir -p; 0, or -1 with errno set (ENOTDIR: path is something else). */
int pipe_ckpt_mkdirs(const char *path);

/* One writer per checkpoint directory: DIR/.lock, held with flock(2) for the run's life and
 * naming its holder ("pid P host H"). A second run is refused (CORE_EINPUT) with the holder's pid
 * and host. The kernel drops the lock of a process that dies; the pid it left in the file is then
 * taken over, *note (n bytes) saying so. On a file system without locks the pid and host in the
 * file decide: a live process of this host, or any of another host, holds it. Released (the file
 * emptied, then closed) by pipe_ckpt_lock_release. */
typedef struct {
  int fd, held;
  char path[1100];
} pipe_ckpt_lock;
int pipe_ckpt_lock_take(pipe_ckpt_lock *lk, const char *dir, char *note, size_t n);
void pipe_ckpt_lock_release(pipe_ckpt_lock *lk);

typedef struct {
  const char *name;
  int dtype;
  uint64_t count;
  const unsigned char *data;
} pipe_ckpt_record;

typedef struct {
  unsigned char *buf;
  size_t size;
  uint32_t nrec;
  pipe_ckpt_record *rec;
  char path[1024];
} pipe_ckpt_reader;

int pipe_ckpt_open(pipe_ckpt_reader *r, const char *path);
void pipe_ckpt_close(pipe_ckpt_reader *r);
const pipe_ckpt_record *pipe_ckpt_find(const pipe_ckpt_reader *r, const char *name);
/* Copies a record into out; an error names the record if it is missing or its type or size
 * differs from what the caller expects. */
int pipe_ckpt_get(const pipe_ckpt_reader *r, const char *name, int dtype, void *out, uint64_t count);
/* The same checks, then only values [from, from + n) of the record into out (a ZeRO shard). */
int pipe_ckpt_get_part(const pipe_ckpt_reader *r, const char *name, int dtype, uint64_t count, uint64_t from,
                       uint64_t n, void *out);

#endif
