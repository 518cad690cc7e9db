/*
 * File helpers: atomic writes (write a temp file beside the target, fsync,
 * rename over the target, fsync the directory), whole-file reads for small
 * text files, read-only whole-file mmap, and mkdir -p. A reader of `path` sees either the old file or the
 * complete new one, never a torn write, even across a crash.
 * Leaves out: file locking and Windows; POSIX 2008 only.
 */
#ifndef CT_FILEIO_H
#define CT_FILEIO_H

#include "ctrain/core.h"

#include <stddef.h>

/* An atomic write in progress: opaque. */
typedef struct ct_afile ct_afile;

/* Start an atomic write of `path`: creates `path.tmp.<pid>` in the same
 * directory (truncating a stale one). Returns owned *out; finish it with
 * exactly one of ct_afile_commit or ct_afile_abort.
 * Errors: CT_ERR_IO (cannot create the temp file), CT_ERR_OOM, CT_ERR_ARG. */
ct_status ct_afile_open(ct_afile **out, const char *path);
/* Append `bytes` bytes (buffered). CT_ERR_IO naming the file and the system
 * error (ENOSPC included). After an error the write is poisoned: later writes
 * and commit fail, and the caller should call ct_afile_abort. */
ct_status ct_afile_write(ct_afile *f, const void *data, size_t bytes);
/* Bytes written so far. */
int64_t ct_afile_tell(const ct_afile *f);
/* Overwrite bytes already written, e.g. a header whose counts are known only
 * at the end (borrows data). The range must lie within what was written.
 * Errors: CT_ERR_ARG (range), CT_ERR_IO (poisons the write, as above). */
ct_status ct_afile_pwrite(ct_afile *f, int64_t offset, const void *data, size_t bytes);
/* fflush, fsync, fclose, rename onto the target, fsync the directory.
 * Always consumes f: on failure the temp file is removed and the target is
 * left as it was (CT_ERR_IO naming the path and the system error). */
ct_status ct_afile_commit(ct_afile *f);
/* Drop the write: close and remove the temp file, free f. NULL is fine. */
void ct_afile_abort(ct_afile *f);

/* Remove what interrupted atomic writes (a SIGKILL, a crash between
 * ct_afile_open and commit or abort) left in dir: files named
 * "<name>.tmp.<pid>", ct_afile_open's pattern, whose writer `pid` is gone
 * (ct_pid_gone). A live pid's file, this process's, every other name,
 * symlinks and subdirectories are left alone. Not recursive. Best effort:
 * returns the number of files removed (0 when dir cannot be read). */
int ct_afile_remove_stale(const char *dir);

/* One-shot atomic write of a memory buffer (borrows data). CT_ERR_IO. */
ct_status ct_file_write_atomic(const char *path, const void *data, size_t bytes);

/* Read a whole (small) file. Returns owned *out (malloc'd, with a NUL after
 * the last byte; release with free) and its length in *len (may be NULL).
 * Errors: CT_ERR_IO (missing, unreadable, a directory), CT_ERR_OOM. */
ct_status ct_file_read_all(const char *path, char **out, size_t *len);

/* Read a whole (small) file holding one JSON object (config.json,
 * adapter_config.json, index and baseline files). Returns owned *out (release
 * with cJSON_Delete). Errors: those of ct_file_read_all, and CT_ERR_FORMAT
 * "PATH: not a JSON object" with the byte offset where parsing stopped, or
 * saying another JSON value was found. */
struct cJSON;
ct_status ct_json_read_object(const char *path, struct cJSON **out);

/* How ct_file_map words its errors, so each reader keeps its own messages.
 * Every field may be NULL. */
typedef struct ct_file_map_msgs {
    const char *noun;         /* "cannot open <noun>: <err>"; NULL: "cannot open: <err>" */
    const char *missing_hint; /* the hint when the file does not exist */
    const char *short_what;   /* "file is N bytes, shorter than the <min>-byte <short_what>";
                               * NULL: "minimum" */
    const char *short_hint;   /* the hint after that error */
} ct_file_map_msgs;

/* Map a whole regular file read-only (MAP_PRIVATE); the descriptor is closed
 * before returning. Returns owned *map and its length in *len (release with
 * ct_file_unmap); both are NULL / 0 on failure, and for an empty file when
 * min_bytes is 0. msgs may be NULL.
 * Errors: CT_ERR_IO (cannot open, not a regular file, too large to map, mmap
 * failed), CT_ERR_FORMAT (shorter than min_bytes), CT_ERR_ARG (empty path). */
ct_status ct_file_map(const char *path, size_t min_bytes, const ct_file_map_msgs *msgs,
                      const void **map, size_t *len);
/* Release a mapping from ct_file_map. NULL is fine. */
void ct_file_unmap(const void *map, size_t len);

/* Create a directory and any missing parents (mode 0777 & ~umask). Fine when
 * it exists. CT_ERR_IO when a component exists as a non-directory or mkdir
 * fails. */
ct_status ct_mkdir_p(const char *path);

/* rm -r path (a file or a directory; absent is fine). Best effort: false
 * when something stayed. */
bool ct_remove_tree(const char *path);

/* True when no process `pid` (> 0) exists: what a temporary file or directory
 * named after its writer's pid uses to tell a dead writer's leftovers from a
 * live one's work. This process and pids we may not signal count as alive. */
bool ct_pid_gone(long pid);

#endif
