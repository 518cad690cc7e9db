/*
 * The disk tier of remote data: fixed-size blocks of remote objects kept as
 * files under one directory (data.cache_dir), shared by every process and
 * rank on the machine, with a size limit (LRU eviction by last use), a time
 * to live, and a checksum per block so a corrupt, partial or stale file is
 * never used.
 * Layout: DIR/<key>/<index>.blk, key a 32-hex-digit name of the object (the
 * caller's choice: URL and content hash), each file a 32-byte header
 * ("CTBLK001", data bytes, xxh3-64 of the data, fetch time) and the data.
 * Files appear by rename, so a reader sees a whole block or none.
 * Leaves out: fetching (data/shard/remote.c), what a block holds (data/shard/shard_remote.c).
 */
#ifndef CT_BLOCKCACHE_H
#define CT_BLOCKCACHE_H

#include "ctrain/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ct_blockcache ct_blockcache;

typedef struct ct_blockcache_stats {
    int64_t hits, misses;  /* get calls that found / did not find a usable block */
    int64_t corrupt;       /* files dropped: bad header, length or checksum */
    int64_t expired;       /* files dropped: older than the time to live */
    int64_t evicted;       /* files removed to stay under the limit */
    int64_t puts, put_bytes;
    int64_t bytes;         /* this process's estimate of the directory's size */
} ct_blockcache_stats;

/* Open (creating) the cache directory dir, limited to limit bytes (> 0), where
 * blocks older than ttl_s seconds count as absent (0: no expiry). Scans the
 * directory once for its size (and evicts when it is over). Returns owned *out.
 * Errors: CT_ERR_IO (dir cannot be made or written; names it), CT_ERR_OOM. */
ct_status ct_blockcache_open(ct_blockcache **out, const char *dir, int64_t limit, double ttl_s);
void ct_blockcache_close(ct_blockcache *c); /* NULL is fine */

/* Block idx of object key into buf (exactly len bytes). true when the file
 * exists, is whole, passes its own checksum and, when expect != 0, carries
 * that xxh3-64 (the manifest's); a file that fails is deleted. Thread-safe. */
bool ct_blockcache_get(ct_blockcache *c, const char *key, int64_t idx, void *buf, size_t len,
                       uint64_t expect);
/* Block idx of key whatever its length (a whole small object, such as a
 * manifest, kept as one block): owned *out (malloc, NUL-terminated beyond
 * *len; release with free), *stored the Unix time it was put. false (nothing
 * allocated) when it is absent, expired, fails its checksum or is larger than
 * max bytes. Thread-safe. */
bool ct_blockcache_get_all(ct_blockcache *c, const char *key, int64_t idx, size_t max, char **out,
                           size_t *len, double *stored);
/* Whether a usable block is there, without reading its data (header only). */
bool ct_blockcache_has(ct_blockcache *c, const char *key, int64_t idx, size_t len);
/* Store block idx of key (atomic: temp file and rename), then evict the least
 * recently used blocks while the directory is over its limit. A full disk is
 * not an error for the caller's read (the data is in hand): it returns
 * CT_ERR_IO naming the file, and the caller may go on uncached. */
ct_status ct_blockcache_put(ct_blockcache *c, const char *key, int64_t idx, const void *buf,
                            size_t len);
void ct_blockcache_get_stats(ct_blockcache *c, ct_blockcache_stats *out);

/* The default directory: $XDG_CACHE_HOME/ctrain/shards, else
 * $HOME/.cache/ctrain/shards, else /tmp/ctrain-shards-<uid>. Into buf. */
const char *ct_blockcache_default_dir(char *buf, size_t cap);

/* xxh3-64 of a block, as the manifest and the cache use it. */
uint64_t ct_block_hash(const void *data, size_t len);

#endif
