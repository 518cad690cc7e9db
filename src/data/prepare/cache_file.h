/*
 * One entry file of the tokenised-data cache (internal to data/prepare/cache.c): its
 * path under the cache directory, an atomic write, a fully checked read, the
 * mtime stamp that records a use, and removal of temp files left behind by
 * interrupted writers. The format is specified in cache_file.c.
 * Leaves out: the index, byte limits and recency order (data/prepare/cache.c).
 */
#ifndef CT_CACHE_FILE_H
#define CT_CACHE_FILE_H

#include "data/prepare/cache.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#define CT_CACHE_FILE_DIR_MAX 4000 /* bytes of the cache directory's path */
#define CT_CACHE_FILE_PATH_CAP (CT_CACHE_FILE_DIR_MAX + 128) /* dir + "/ab/" + name + suffix */

/* The 32 lowercase hex digits naming key k's file (key.hi, then key.lo). */
void ct_cache_file_name(ct_cache_key k, char name[33]);
/* DIR/ab/<name>.tok into buf (CT_CACHE_FILE_PATH_CAP bytes; dir no longer
 * than CT_CACHE_FILE_DIR_MAX). */
void ct_cache_file_path(const char *dir, ct_cache_key k, char *buf);
/* Whether a directory entry's name is a fan-out directory's ("3f"). */
bool ct_cache_file_is_fanout(const char *name);
/* Parse "<32 lowercase hex>.tok" found under fan-out `fan` into *k; false
 * for any other name (a file that is not ours). */
bool ct_cache_file_parse_name(const char *name, const char *fan, ct_cache_key *k);

/* Write key's n tokens (borrowed) to DIR/ab/<name>.tok atomically: a temp
 * file DIR/ab/<name>.<pid>-<seq>.tmp created with O_EXCL (seq: a number
 * unique within the calling cache), the fan-out directory made when missing,
 * mtime set to `when`, fsync, rename. Fills path (CT_CACHE_FILE_PATH_CAP
 * bytes). Returns 0 or an errno value with *what naming the failed step;
 * never leaves the temp file behind. Thread-safe (touches no shared state). */
int ct_cache_file_write(const char *dir, ct_cache_key key, const int32_t *tokens, int64_t n,
                        struct timespec when, uint64_t seq, char *path, const char **what);

typedef enum ct_cache_file_result {
    CT_CACHE_FILE_HIT = 0,
    CT_CACHE_FILE_MISSING = 1,    /* no such file: a plain miss */
    CT_CACHE_FILE_UNREADABLE = 2, /* permissions, I/O error: a miss, file left alone */
    CT_CACHE_FILE_CORRUPT = 3,    /* bad header, size, key or checksum: drop the file */
    CT_CACHE_FILE_OOM = 4,
    CT_CACHE_FILE_COUNT
} ct_cache_file_result;

/* Read and check key's entry at path. On CT_CACHE_FILE_HIT *tokens is owned
 * (release with free) and holds *n tokens. *sb is the opened file's stat
 * (zeroed when the file could not be opened); for CT_CACHE_FILE_CORRUPT, why
 * says what was wrong and at which offset. Thread-safe. */
ct_cache_file_result ct_cache_file_read(const char *path, ct_cache_key key, int32_t **tokens,
                                        int64_t *n, struct stat *sb, char *why, size_t whycap);

/* Record a use: set path's mtime (and atime) to `when`; when that is not
 * allowed (a file another user owns) fall back to "now". Best effort. */
void ct_cache_file_touch(const char *path, struct timespec when);

/* A *.tmp file met while scanning: removed unless the writer named in it
 * (the pid) may still be running and the file is younger than an hour. */
void ct_cache_file_stray(const char *path, const char *name);

#endif
