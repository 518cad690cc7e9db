/*
 * Token shards that live at http(s):// or s3:// URLs: a `ctrain prepare`
 * output read through its manifest (which lists the shards, their sizes, a
 * hash per shard and one per block), by byte ranges of whole blocks, through
 * the disk block cache, with a small memory tier of decoded blocks in front.
 * A block is used only when it matches the manifest's hash; a block that
 * cannot be had after data.retries is an error naming the URL. The manifest
 * is cached too, so a warm cache trains without the server (data.offline, or
 * when the server cannot be reached).
 * Leaves out: HTTP and S3 themselves (data/shard/remote.c), the order of reads and
 * how far ahead to fetch (data/loader/loader_ahead.c); the source over these
 * shards (source_remote.c).
 */
#ifndef CT_SHARD_REMOTE_H
#define CT_SHARD_REMOTE_H

#include "ctrain/core.h"
#include "data/shard/blockcache.h"
#include "data/shard/remote.h"

#include <stdbool.h>
#include <stdint.h>

#define CT_REMOTE_BLOCK_BYTES ((int64_t)1 << 20) /* what prepare hashes and the cache holds */
#define CT_REMOTE_RUN_BLOCKS 16                  /* most blocks one request fetches */
#define CT_REMOTE_MEM_SLOTS 8                    /* decoded blocks kept in memory, per loader */
/* Memory a loader over remote shards holds: the memory tier, the read-ahead's
 * fetch buffer, and the reader's block (what `ctrain plan` counts). */
#define CT_REMOTE_MEMORY_BYTES \
    ((CT_REMOTE_MEM_SLOTS + CT_REMOTE_RUN_BLOCKS + 1) * CT_REMOTE_BLOCK_BYTES)

/* data.* settings for remote shards. */
typedef struct ct_remote_data_opts {
    const char *cache_dir; /* NULL or "": ct_blockcache_default_dir */
    int64_t cache_limit;   /* bytes */
    double cache_ttl_s;    /* 0: blocks never expire */
    int64_t readahead;     /* bytes of shard data fetched ahead of the reader */
    bool offline;          /* data.offline: the disk cache only, never the network */
    ct_remote_opts net;    /* retries, timeout, backoff */
} ct_remote_data_opts;
ct_remote_data_opts ct_remote_data_opts_default(void);

/* What the shards of one loader share: the disk cache, the settings, the
 * memory tier. Thread-safe. */
typedef struct ct_remote_ctx ct_remote_ctx;
ct_status ct_remote_ctx_open(ct_remote_ctx **out, const ct_remote_data_opts *o);
void ct_remote_ctx_close(ct_remote_ctx *c); /* after every shard on it is closed */
const ct_remote_data_opts *ct_remote_ctx_opts(const ct_remote_ctx *c);

/* One shard as its manifest lists it. */
typedef struct ct_remote_shard_info {
    char *url;           /* owned */
    int64_t bytes, ntok; /* file size, tokens */
    int tsize;           /* bytes per token */
    char hash[33];       /* xxh3-128 of the file, hex; "" when the manifest has none */
    int64_t block_bytes; /* block size of blocks[] */
    int64_t n_blocks;
    uint64_t *blocks;    /* (n_blocks) xxh3-64 per block, owned; NULL: none listed */
    /* the file the manifest lists beside it (prepare --format sft's .sft) */
    char *side_url;      /* owned; NULL: none */
    int64_t side_bytes;  /* its size */
    char side_hash[33];  /* xxh3-128 of it, hex */
} ct_remote_shard_info;
void ct_remote_shard_info_free(ct_remote_shard_info *v, int n);

/* The shards of split ("train" | "val") named by spec: a directory URL (its
 * manifest.json) or one shard's URL (its sibling manifest.json describes it;
 * without one, sizes come from the shard's header and blocks are checked for
 * length only). *vocab_size: the manifest tokenizer's, or 0. Owned *out, and
 * owned *manifest (its text, NUL-terminated beyond *manifest_len; NULL for a
 * lone shard without one; release with free).
 * The manifest is kept in ctx's disk cache beside the blocks. When the
 * server cannot be reached (a failure retries may cure; with a cached copy,
 * after one attempt) or ctx is offline (data.offline), the cached copy
 * stands in for it: one warning names the URL, the reason, the copy's age and
 * how many of the split's blocks the cache holds, and from then on ctx
 * fetches nothing (offline) or tries a missing block once (the server was
 * down), so a run goes as far as the cache holds and no further. Without a
 * copy: CT_ERR_IO saying the server cannot be reached and that nothing of the
 * dataset is cached (offline: that there is no copy). */
ct_status ct_remote_list(ct_remote_ctx *ctx, const char *spec, const char *split,
                         ct_remote_shard_info **out, int *n, int *vocab_size, char **manifest,
                         size_t *manifest_len);

/* The shards of split listed by a manifest's text (what ct_remote_list does
 * after fetching it): murl names the manifest in errors, base is prepended
 * to each file name; fname non-NULL takes that one file's entry whatever its
 * split. Each entry is checked (a plain file name, tokens and version in
 * range, bytes and block hashes consistent with them, no file twice). */
ct_status ct_remote_manifest_parse(const char *text, size_t len, const char *murl,
                                   const char *base, const char *split, const char *fname,
                                   ct_remote_shard_info **out, int *n, int *vocab_size);

/* An open remote shard. Reads are thread-safe. */
typedef struct ct_rshard ct_rshard;
/* Takes over info->url and info->blocks (info is cleared). vocab_size > 0:
 * every token of a block is checked to be below it when the block is first
 * used, and the first block's header against the manifest. */
ct_status ct_rshard_open(ct_rshard **out, ct_remote_ctx *ctx, ct_remote_shard_info *info,
                         int vocab_size);
void ct_rshard_close(ct_rshard *s);
const char *ct_rshard_url(const ct_rshard *s);
/* Bytes [off, off+len) of the shard file into dst, fetching what is missing. */
ct_status ct_rshard_read(ct_rshard *s, int64_t off, int64_t len, void *dst);
/* Make bytes [off, off+len) present in the disk cache (fetching whole blocks,
 * consecutive missing ones in one request). *fetched: blocks fetched now. */
ct_status ct_rshard_prefetch(ct_rshard *s, int64_t off, int64_t len, int64_t *fetched);

/* A whole object the manifest lists beside a shard (a .sft sidecar): url,
 * its size and its xxh3-128 (32 hex digits). From the disk cache (one block
 * holds all of it) when there and whole, else fetched whole (data.retries;
 * a body that does not match the hash is fetched again, as a corrupted
 * block is) and kept in the cache. Under data.offline, or when the server
 * could not be reached for the manifest, as a block would be. Returns owned
 * *data (malloc; release with free) of exactly bytes bytes. Errors name the
 * URL: CT_ERR_IO (not cached and not fetched; never matching its hash),
 * CT_ERR_OOM. Thread-safe. */
ct_status ct_remote_get_object(ct_remote_ctx *ctx, const char *url, int64_t bytes,
                               const char *hash, void **data);

/* Counters of one context's shards, for metrics and the report. */
typedef struct ct_remote_data_stats {
    int64_t blocks_fetched, bytes_fetched; /* from the network */
    int64_t disk_hits, memory_hits;        /* blocks served by the disk cache / memory tier */
    int64_t bad_blocks;                    /* fetched blocks that failed the manifest's hash */
    int64_t cache_write_errors;            /* blocks that could not be kept (full disk) */
    double read_wait_s;                    /* time the loader's reads spent fetching */
} ct_remote_data_stats;
void ct_remote_ctx_stats(ct_remote_ctx *c, ct_remote_data_stats *out);

/* prepare: the manifest fields of one shard file written at path (bytes,
 * xxh3_128, block_bytes, blocks[]), added to the cJSON object entry. */
struct cJSON;
ct_status ct_shard_hash_manifest(const char *path, struct cJSON *entry);

#endif
