/*
 * The tokenised-data cache: token sequences keyed by the content hash of the
 * text they came from (XXH3-128) together with the tokenizer's identity, so a
 * second `ctrain prepare` over unchanged input does no tokenisation.
 * Two tiers: a memory tier bounded in bytes, and a disk tier under a cache
 * directory bounded in bytes; both evict least-recently-used entries first.
 * Disk entries are written atomically and carry a checksum; a corrupt or
 * truncated entry is dropped and counted as a miss, never returned.
 * Thread-safe: one cache may be used by many threads at once, and several
 * processes may share one directory (atomic renames, no locks).
 * Leaves out: caching anything but token sequences, file locking, and a
 * global byte limit across processes (each process trims by what it knows).
 */
#ifndef CT_CACHE_H
#define CT_CACHE_H

#include "ctrain/core.h"

#include <stdint.h>

typedef struct ct_cache ct_cache; /* opaque */

/* What one entry counts against the limits. Memory tier: a fixed overhead
 * (the index node with its hash-chain and LRU links, a bucket slot, two
 * allocations' headers) plus 4 bytes per token. Disk tier: the file's size,
 * a header plus 4 bytes per token. */
#define CT_CACHE_MEM_ENTRY_BYTES 128
#define CT_CACHE_DISK_HEADER_BYTES 40

typedef struct ct_cache_key {
    uint64_t lo, hi;
} ct_cache_key;

/* Key of `len` bytes of content under `ns` (the tokenizer identity; any
 * NUL-terminated string). Different ns give different keys for one content. */
ct_cache_key ct_cache_key_of(const void *data, size_t len, const char *ns);

typedef struct ct_cache_stats {
    int64_t mem_hits, disk_hits, misses;
    int64_t mem_evictions, disk_evictions;
    int64_t mem_bytes, disk_bytes;       /* bytes held now */
    int64_t mem_entries, disk_entries;   /* entries held now */
    int64_t bytes_read, bytes_written;   /* disk traffic of this session */
    int64_t corrupt;                     /* disk entries dropped as corrupt */
} ct_cache_stats;

/* Open a cache. dir: the disk tier's directory (created when missing), or
 * NULL / "" for memory only. disk_limit, mem_limit: bytes (0 disables that
 * tier). Entries live in dir/ab/<32 hex digits>.tok (format in
 * data/prepare/cache_file.c). Entries already on disk are indexed (oldest use first,
 * by mtime), temp files of interrupted writers removed, and the disk tier
 * trimmed to disk_limit at open. Returns owned *out; release with
 * ct_cache_close. Errors: CT_ERR_IO naming dir, CT_ERR_ARG, CT_ERR_OOM. */
ct_status ct_cache_open(ct_cache **out, const char *dir, int64_t disk_limit, int64_t mem_limit);
void ct_cache_close(ct_cache *c); /* NULL is fine */

/* Look key up: memory tier first, then disk (a disk hit is promoted to the
 * memory tier). On a hit *found = true and *tokens is an owned copy (release
 * with free) of *n tokens. On a miss *found = false, *tokens = NULL. Errors
 * are only CT_ERR_OOM; unreadable or corrupt entries count as misses. */
ct_status ct_cache_get(ct_cache *c, ct_cache_key key, int32_t **tokens, int64_t *n,
                       bool *found);

/* Store n tokens under key in both tiers (borrows tokens), evicting least
 * recently used entries to stay within the limits. An entry larger than a
 * tier's limit is not stored in that tier. A key is a content hash, so one
 * this process already has on disk is only marked used, not rewritten, unless
 * a lookup handed that file out and the caller refused it (a put after a
 * lookup of the same key rewrites it). Disk write failures (full disk,
 * read-only dir) are not errors: the entry is skipped, a warning logged once.
 * Errors: CT_ERR_OOM. */
ct_status ct_cache_put(ct_cache *c, ct_cache_key key, const int32_t *tokens, int64_t n);

/* A snapshot of the counters. Thread-safe. */
void ct_cache_get_stats(const ct_cache *c, ct_cache_stats *out);

/* One human line for the CLI, e.g. "cache: 120 hits (80 memory, 40 disk),
 * 3 misses, 2 evictions, 1.2 MB on disk" (evictions of both tiers; powers of
 * 1024; ", N corrupt" appended when entries were dropped). Writes at most cap
 * bytes into buf, always NUL-terminated when cap > 0. */
void ct_cache_format_stats(const ct_cache_stats *s, char *buf, size_t cap);

#endif
