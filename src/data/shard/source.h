/*
 * The source seam: where the bytes of a loader's shards come from, chosen
 * once when the loader opens, as a backend is (one table of functions,
 * ct_source_i, per source):
 *   local   files on disk (a shard file, a glob, or a directory), mapped
 *           read-only (source_local.c);
 *   remote  a `ctrain prepare` output at an http(s):// or s3:// URL, read by
 *           byte ranges of whole blocks through the disk block cache, every
 *           block checked against the manifest (source_remote.c).
 * Above the seam (the loader, its order, the example kinds) shards are
 * numbers 0..n-1 with a name and a token count: nothing asks which source
 * it has. A source also serves the files that travel beside a shard (the
 * .sft sidecar of instruction data) and the dataset's manifest.
 * Adding a source: a ct_source_i in its own file and one line in
 * source_registry[] (source.c); see docs/data.md.
 * Leaves out: the order of reads and what the tokens mean (the loader).
 */
#ifndef CT_SOURCE_H
#define CT_SOURCE_H

#include "ctrain/core.h"
#include "io/fileio.h" /* ct_file_map_msgs */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ct_source ct_source;

/* What a source is opened with: the data key's spec and the remote
 * settings (0 / NULL / -1: the defaults, as in ct_loader_opts). */
typedef struct ct_source_opts {
    const char *spec;      /* shard file, glob, directory or URL (borrowed) */
    const char *split;     /* "train" | "val" */
    int vocab_size;        /* > 0: tokens must be below it (check_tokens; remote: per block) */
    const char *cache_dir; /* remote: data.cache_dir */
    int64_t cache_limit;   /* remote: data.cache_limit, bytes */
    double cache_ttl_s;    /* remote: data.cache_ttl; -1: default */
    int64_t readahead;     /* remote: data.readahead, bytes */
    int retries;           /* remote: data.retries; -1: default */
    double timeout_s;      /* remote: data.timeout_s; 0: default */
    bool offline;          /* remote: data.offline */
} ct_source_opts;

/* What one read-ahead pass has spent (ct_source_i.ahead): in the source's own
 * unit (remote: blocks), against a budget. Zero it, set budget, then pass it
 * to every ahead call of the pass. */
typedef struct ct_source_pass {
    int64_t budget, spent;
    int32_t last_shard; /* the source's memory of the last range (0 at the start) */
    int64_t last_unit;
    bool started;
} ct_source_pass;

/* Bytes that belong to a source (a mapped file, or memory it fetched):
 * release(data, len) gives them back. */
typedef struct ct_source_bytes {
    const void *data;
    size_t len;
    void (*release)(const void *data, size_t len);
} ct_source_bytes;

/* Counters of a source that fetches (remote); zeros for local ones. */
typedef struct ct_source_stats {
    int64_t blocks_fetched, bytes_fetched; /* from the network */
    int64_t disk_hits, memory_hits;        /* served by the disk cache / memory tier */
    int64_t bad_blocks;                    /* fetched blocks that failed the manifest's hash */
    int64_t cache_write_errors;            /* blocks the cache could not keep */
    double read_wait_s;                    /* seconds reads waited on the network */
} ct_source_stats;

typedef struct ct_source_i {
    const char *name; /* "local", "remote" */
    /* Whether this source reads spec (a URL scheme, ...). The last source of
     * the registry takes every spec. */
    bool (*claims)(const char *spec);
    /* List and open the split's shards (sorted by name, the base fields
     * below filled in). Returns owned *out; release with close. Errors name
     * the spec or the shard. */
    ct_status (*open)(ct_source **out, const ct_source_opts *o);
    void (*close)(ct_source *s);
    /* Tokens [start, start+count) of shard i into out (int32). Thread-safe.
     * CT_ERR_ARG outside the shard; CT_ERR_FORMAT for a token above
     * INT32_MAX; remote: CT_ERR_IO when a block cannot be had. */
    ct_status (*read)(ct_source *s, int i, int64_t start, int64_t count, int32_t *out);
    /* Every token of shard i below vocab: CT_ERR_ARG naming the first that
     * is not (its shard and index). Sources that check tokens as they arrive
     * (remote: each block when first used) return CT_OK here. */
    ct_status (*check_tokens)(ct_source *s, int i, int vocab);
    /* A hint: tokens [start, start+count) of shard i are read soon. */
    void (*willneed)(ct_source *s, int i, int64_t start, int64_t count);
    /* Read-ahead (NULL: the source needs none): make tokens [start,
     * start+count) of shard i present before they are read, charging the
     * pass. false when the pass's budget is spent (nothing fetched then).
     * A fetch that fails is left to the read that needs it. */
    bool (*ahead)(ct_source *s, ct_source_pass *p, int i, int64_t start, int64_t count);
    /* The file beside shard i whose name is the shard's with ".bin"
     * replaced by suffix (".sft"): whether it is there (has_side), its name
     * for messages (side_name: a path or a URL as displayed), its bytes
     * (side_open: CT_ERR_FORMAT when shorter than min_bytes; msgs words the
     * errors: "cannot open <noun>", the hint when it is missing), checked
     * (remote: against the manifest's hash). */
    bool (*has_side)(ct_source *s, int i, const char *suffix);
    ct_status (*side_name)(ct_source *s, int i, const char *suffix, char *buf, size_t cap);
    ct_status (*side_open)(ct_source *s, int i, const char *suffix, size_t min_bytes,
                           const ct_file_map_msgs *msgs, ct_source_bytes *out);
    /* The dataset's manifest.json as text (local: the one beside the first
     * shard, when readable; remote: the one the shards were listed from);
     * NULL when there is none. Owned by s. */
    const char *(*manifest)(ct_source *s, size_t *len);
    /* Counters (false, zeros, when the source fetches nothing). */
    bool (*stats)(ct_source *s, ct_source_stats *out);
} ct_source_i;

/* The fields every source fills in at open; its own state follows them. */
struct ct_source {
    const ct_source_i *i;
    int n;             /* shards */
    char **names;      /* (n) paths, or URLs as displayed (no credentials), sorted */
    int64_t *ntok;     /* (n) tokens of each shard */
    int64_t readahead;    /* bytes a read-ahead pass covers; 0 when ahead is NULL */
    int64_t ahead_budget; /* what one pass may spend (ct_source_pass.budget) */
};

extern const ct_source_i ct_source_local_i;
extern const ct_source_i ct_source_remote_i;

/* Open o->spec with the first source in the registry that claims it.
 * Returns owned *out; release with ct_source_close. */
ct_status ct_source_open(ct_source **out, const ct_source_opts *o);
void ct_source_close(ct_source *s); /* NULL is fine */

/* For the sources: the base fields for n shards (names and ntok zeroed),
 * freed by ct_source_base_free. */
ct_status ct_source_base_alloc(ct_source *s, const ct_source_i *i, int n);
void ct_source_base_free(ct_source *s);
/* True when spec is a directory holding another split's shards
 * (<other>_*.bin) but none of split's (ct_loader_split_missing). */
bool ct_source_split_missing(const char *spec, const char *split);
/* The name of the file beside shard path `name` with ".bin" replaced by
 * suffix (appended when there is no ".bin"). CT_ERR_ARG when it does not fit. */
ct_status ct_source_side_path(char *buf, size_t cap, const char *name, const char *suffix);

#endif
