/*
 * The data loader over llm.c token shards (see below). Needs only the core
 * types: the trainer, the evaluator and tools use it alike.
 */
#ifndef CT_LOADER_H
#define CT_LOADER_H

#include "ctrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif
/* --------------------------------------------------------------- loader */

/*
 * Batches of B x T tokens from llm.c token shards, streamed from read-only
 * mappings (shards need not fit in RAM), optionally read ahead by a background
 * thread, with an exact, serialisable position.
 *
 * A window is B*T+1 consecutive tokens of one shard starting at a multiple of
 * B*T; row b of the batch is tokens [p + b*T, p + b*T + T), targets shifted by
 * one.
 *
 * data.shuffle=false (llm.c's order): micro-batch m reads the window at token
 * (m*world + rank)*B*T of the current shard; when the world*B*T+1 tokens of
 * the next step of all ranks no longer fit, every rank moves to the next shard
 * (wrapping to the first) and starts again at rank*B*T. So world ranks at B
 * read exactly the rows one rank at world*B reads. Shards shorter than
 * world*B*T+1 tokens are passed over.
 *
 * data.shuffle=true: each epoch visits the shards in a seeded permutation of
 * their order and, within each shard, its windows in a seeded permutation;
 * both depend only on (seed, epoch, shard). Window i of that epoch order goes
 * to rank i % world; when the window count N is not a multiple of world, the
 * last N % world windows of the epoch's order are left out (a different set
 * each epoch), so every rank takes N / world batches per epoch and all ranks
 * change epoch together.
 *
 * One loader is used by one thread at a time (its own prefetch thread aside).
 */
typedef struct ct_loader ct_loader; /* opaque */

typedef struct ct_loader_opts {
    const char *spec;  /* shard file, glob or directory (borrowed during init) */
    const char *split; /* "train" | "val": a directory's <split>_*.bin; names data.<split>
                        * in errors */
    int B, T;          /* rows per micro-batch, tokens per row */
    int vocab_size;    /* every token must be < vocab_size; 0: unchecked */
    bool shuffle;      /* false: sequential llm.c order */
    uint64_t seed;     /* shuffle seed */
    int rank, world;   /* 0 <= rank < world */
    int prefetch;      /* batches a background thread reads ahead; 0: read on the
                        * caller's thread */
    /* instruction shards (see "Instruction data" below); ignored for plain ones */
    bool packing;         /* several examples per row (data.packing, default true) */
    bool group_by_length; /* data.group_by_length (default false) */
    int accum;            /* micro-batches per optimizer step on each rank (train.grad_accum;
                           * default 1, 0 taken as 1): an epoch is padded to whole steps */
    /* remote specs (http://, https://, s3://: a `ctrain prepare` output read
     * by byte ranges through a disk cache); 0 / NULL / -1: the defaults */
    const char *cache_dir; /* data.cache_dir (default ~/.cache/ctrain/shards) */
    int64_t cache_limit;   /* data.cache_limit, bytes (default 10 GiB) */
    double cache_ttl_s;    /* data.cache_ttl, seconds; 0: never expire; -1: default (7 days) */
    int64_t readahead;     /* data.readahead, bytes fetched ahead (default 256 MiB) */
    int retries;           /* data.retries (-1: default 5) */
    double timeout_s;      /* data.timeout_s (0: default 30) */
    bool offline;          /* data.offline: read the disk cache only (manifest and blocks),
                            * never the network */
} ct_loader_opts;

/* split "train", B = T = 1, no vocabulary check, sequential, seed 0, rank 0 of
 * 1, prefetch 2, packing on, group_by_length off, accum 1, remote settings at
 * their defaults; spec NULL (must be set). */
CT_API ct_loader_opts ct_loader_opts_default(void);

/* The exact position of a loader: plain data, fixed size (32 bytes, no
 * padding); a checkpoint stores its five fields. (epoch, index) alone fix the
 * next batch; shard and offset say where it lies and let ct_loader_set_pos
 * check that the position belongs to these shards, this batch shape, seed,
 * rank and mode. */
typedef struct ct_loader_pos {
    int64_t epoch;    /* completed passes over the data */
    int64_t index;    /* micro-batches this rank has taken in this epoch */
    int64_t offset;   /* first token of the next batch's window in its shard */
    int32_t shard;    /* that shard's index in the sorted shard list */
    int32_t shuffled; /* 1: taken from a shuffled loader; 0: sequential */
} ct_loader_pos;

/* Open the shards named by opts->spec (a file, a glob, or a directory, where
 * <split>_*.bin files are taken, else every *.bin; sorted by path). Every
 * shard's header is validated and, when vocab_size > 0, every token is checked
 * to be < vocab_size (one pass over the mapped tokens). Starts the prefetch
 * thread when opts->prefetch > 0. Returns owned *out; release with
 * ct_loader_free. Borrows opts.
 * Instruction data (see below): every sidecar is opened and validated
 * against its shard, and one warning is logged (rank 0) when examples are
 * longer than T.
 * Errors: CT_ERR_ARG (bad options; a shard shorter than one window; a token
 * >= vocab_size, naming the shard and the token's index; no window for this
 * rank; fewer shuffled windows than ranks),
 * CT_ERR_IO (missing file, no match, cannot start the thread, a missing
 * sidecar), CT_ERR_FORMAT (bad shard or sidecar, a sidecar that does not
 * match its shard, shards with and without sidecars; naming the path),
 * CT_ERR_OOM. */
CT_API ct_status ct_loader_init(ct_loader **out, const ct_loader_opts *opts);
/* Stop and join the prefetch thread, unmap the shards, free l. NULL is fine. */
CT_API void ct_loader_free(ct_loader *l);
/* Fill inputs(B,T) and targets(B,T) (caller-owned, B*T int32 each) with the
 * next batch and move past it. Blocks only while the prefetch ring is empty.
 * An error while reading (also one met by the prefetch thread, carried over
 * with its message) is returned when the failing batch is reached; the
 * position stays on that batch, so later calls return the same error until
 * ct_loader_set_pos, ct_loader_skip or ct_loader_reset moves it.
 * Errors: CT_ERR_FORMAT (a version 2 token above INT32_MAX when vocab_size
 * is 0), CT_ERR_ARG. */
CT_API ct_status ct_loader_next(ct_loader *l, int32_t *inputs, int32_t *targets);
/* Back to the first batch of epoch 0 (what init starts with); drops batches
 * read ahead and restarts the prefetch thread there. */
CT_API void ct_loader_reset(ct_loader *l);
/* The position of the next batch ct_loader_next returns (never counting
 * batches only read ahead). Call it from the thread that calls
 * ct_loader_next (it updates a cache inside l). */
CT_API void ct_loader_get_pos(ct_loader *l, ct_loader_pos *out);
/* Continue from pos (from ct_loader_get_pos of a loader over the same shards,
 * B, T, seed, world and mode, of this rank or of rank 0, since (epoch, index)
 * is the same on every rank): from here on the batches are exactly
 * those an uninterrupted loader would have returned. Drops batches read ahead
 * and restarts the prefetch thread. Borrows pos.
 * Errors: CT_ERR_ARG when pos does not fit this loader (negative epoch, index
 * past the epoch, shard out of range, shard/offset not where (epoch, index)
 * lead, other mode); the loader is then unchanged. */
CT_API ct_status ct_loader_set_pos(ct_loader *l, const ct_loader_pos *pos);
/* Skip n >= 0 micro-batches: the same position as taking n batches, without
 * reading them (batches already read ahead are reused). CT_ERR_ARG for n < 0. */
CT_API ct_status ct_loader_skip(ct_loader *l, int64_t n);
/* Seconds the last ct_loader_next spent before returning (waiting for the
 * prefetch thread, or reading when prefetch is 0), and the total over all
 * calls since init. */
CT_API double ct_loader_wait_s(const ct_loader *l);
CT_API double ct_loader_wait_total_s(const ct_loader *l);
/* True when spec is a directory holding another split's shards
 * (<other>_*.bin, as `ctrain prepare` names them) but none of `split`: a
 * directory without a validation split, whose *.bin would be training data.
 * ct_loader_init refuses such a directory for that split. */
CT_API bool ct_loader_split_missing(const char *spec, const char *split);
/* Micro-batches this rank takes per epoch. Instruction data: in the epoch of
 * the next batch ct_loader_next returns (see ct_loader_batches_in_epoch). */
CT_API int64_t ct_loader_batches_per_epoch(const ct_loader *l);
/* Tokens in all shards (instruction data: the examples' tokens as stored,
 * before any cut to T). */
CT_API int64_t ct_loader_total_tokens(const ct_loader *l);
CT_API int ct_loader_num_shards(const ct_loader *l);

/*
 * Instruction data. A directory whose manifest.json says "format":
 * "ctrain-sft/1" (`ctrain prepare --format sft`) holds shards with .sft
 * sidecars (data/shard/sft_shard.h): example boundaries and a loss mask. Its loader
 * yields rows of whole examples instead of windows. The shards are taken as
 * instruction data when any of them has a sidecar beside it (x.bin -> x.sft)
 * or the manifest.json beside the first shard says "ctrain-sft/1"; then every
 * shard must have one (a mix is CT_ERR_FORMAT naming a shard of each kind).
 *
 * Examples: the shards in sorted order, each shard's examples in order,
 * numbered 0..E-1. An example longer than T keeps its first T tokens (counted
 * in ct_loader_sft_stats; prepare --max-len avoids it): its length n below is
 * min(tokens, T).
 * Epoch order: data.shuffle=false: 0..E-1; true: a permutation seeded by
 * (seed, epoch): with mix64 splitmix64's finaliser (z = x + 0x9e3779b97f4a7c15;
 * z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9; z = (z ^ z >> 27) * 0x94d049bb133111eb;
 * z ^ z >> 31, all mod 2^64), state = mix64(mix64(mix64(seed) ^ epoch) ^ 0),
 * order = [0..E-1], then for i = E-1 down to 1: state += 0x9e3779b97f4a7c15,
 * j = mix64(state) % (i + 1), swap order[i] and order[j].
 * group_by_length: the order is cut into runs of 50*B*world examples (the
 * last run may be shorter) and each run is sorted by length n, longest first
 * (stable: equal lengths keep their order).
 * Rows: packing=false: one example per row. packing=true: greedily in epoch
 * order, an example joins the current row when it fits in what is left of
 * the row's T tokens, else it starts the next row.
 * A row: example x_0..x_{n-1} placed at column p gives inputs[p+k] = x_k,
 * pos[p+k] = k, targets[p+k] = x_{k+1} when k+1 < n and token k+1's mask bit
 * is set, else -1. Columns after the last example are padding: input 0,
 * target -1, pos 0, 1, 2, ... from the first padding column.
 * Batches: the epoch's rows are followed by empty rows (all padding) up to a
 * multiple of B*world*accum rows; global micro-batch g is rows [g*B, g*B+B)
 * and rank r's m-th micro-batch of the epoch is g = m*world + r. So an epoch
 * is a whole number of optimizer steps (batches_per_epoch / accum), every
 * example is seen once per epoch, and world ranks at B see the rows one rank
 * at world*B sees. Only shuffle with packing makes the row count, and so the
 * batch count, differ from epoch to epoch.
 * Positions (ct_loader_pos) and resume work as for plain shards, with
 * ct_loader_pos.shuffled a set of mode bits: 1 shuffle, 2 instruction rows,
 * 4 packing, 8 group_by_length (a plain loader's are 0 or 1, as before), and
 * shard/offset naming the first example of this rank's batch (its shard and
 * its first token there), or -1/-1 for a batch of empty rows. set_pos takes
 * a position only from a loader of the same mode bits.
 * The row plan of an epoch (O(E) memory) is built the first time that epoch
 * is needed and shared by the caller's and the prefetch thread.
 * At a URL (http://, https://, s3://) instruction data reads as plain shards
 * do, through the disk cache: the manifest lists each shard's sidecar (its
 * bytes and xxh3_128), fetched whole when the loader opens, checked, and
 * kept in the cache (a changed one is CT_ERR_IO naming its URL).
 */
CT_API bool ct_loader_is_sft(const ct_loader *l);
/* ct_loader_next that also writes pos (B*T int32, caller-owned): each
 * token's position inside its example (see above; ct_model_set_positions
 * takes it). Plain shards: pos = 0..T-1 in every row. Same errors, and
 * CT_ERR_OOM when the next epoch's row plan cannot be built. ct_loader_next
 * on instruction data is this call without pos. */
CT_API ct_status ct_loader_next_pos(ct_loader *l, int32_t *inputs, int32_t *targets,
                                    int32_t *pos);
/* One batch with what a training step needs beside the tokens. */
typedef struct ct_loader_batch {
    int32_t *inputs, *targets; /* (B*T) each, caller-owned: filled */
    int32_t *pos;              /* (B*T) caller-owned, or NULL: each token's position in
                                * its example (0..T-1 in every row of plain shards) */
    int64_t counted;           /* out: targets >= 0, what the batch's mean loss is over */
    bool positions;            /* out: rows hold examples with positions of their own
                                * (instruction data): pass pos to ct_model_set_positions;
                                * false: every row is 0..T-1 (pass NULL) */
} ct_loader_batch;
/* ct_loader_next_pos that also says what the trainer weighs the batch by
 * and how its positions go. Same errors. */
CT_API ct_status ct_loader_next_batch(ct_loader *l, ct_loader_batch *b);
/* Whether targets can be -1 (a loss mask, padding rows: instruction data),
 * so a batch's counted targets may be fewer than B*T. */
CT_API bool ct_loader_masked(const ct_loader *l);
/* A line about the data for a run's log (instruction data: examples, rows,
 * packing, fill, counted targets), into buf; "" when there is nothing to
 * add (plain shards). Returns buf. */
CT_API const char *ct_loader_describe(const ct_loader *l, char *buf, size_t cap);
/* Counted targets (>= 0) of the next n micro-batches this loader returns,
 * summed over all world ranks' batches at those indices (global batches
 * m*world + r): what an optimizer step's loss is divided by. The n batches
 * may run into the following epochs. Does not move the position; call it
 * from the thread that calls ct_loader_next. Plain shards: n*world*B*T.
 * 0 for n <= 0; -1 when a row plan cannot be built (out of memory). */
CT_API int64_t ct_loader_counted_ahead(ct_loader *l, int64_t n);
typedef struct ct_loader_sft_stats {
    int64_t examples;       /* E */
    int64_t truncated;      /* examples cut to T tokens */
    int64_t rows;           /* rows of epoch 0 before the empty ones */
    int64_t counted;        /* counted targets in one epoch */
    double fill;            /* share of those rows' columns holding example tokens */
} ct_loader_sft_stats;
/* Micro-batches this rank takes in epoch `epoch` (>= 0): with packing and
 * shuffle the row count differs from epoch to epoch (the first call for an
 * epoch builds its plan, O(E)). Call it from the thread that calls
 * ct_loader_next. Plain shards: the same as ct_loader_batches_per_epoch.
 * -1 for a negative epoch, or when the plan cannot be built (out of memory). */
CT_API int64_t ct_loader_batches_in_epoch(ct_loader *l, int64_t epoch);
/* false (zeros) for plain shards. */
CT_API bool ct_loader_sft_stats_get(const ct_loader *l, ct_loader_sft_stats *out);

/* Counters of a loader over remote shards (false, zeros, for local ones). */
typedef struct ct_loader_remote_stats {
    int64_t blocks_fetched, bytes_fetched; /* from the network */
    int64_t disk_hits, memory_hits;        /* blocks the disk cache / memory tier served */
    int64_t bad_blocks;                    /* fetched blocks that failed the manifest's hash */
    int64_t cache_write_errors;            /* blocks the cache could not keep */
    double read_wait_s;                    /* seconds the reads waited on the network */
} ct_loader_remote_stats;
CT_API bool ct_loader_get_remote_stats(const ct_loader *l, ct_loader_remote_stats *out);


#ifdef __cplusplus
}
#endif
#endif
