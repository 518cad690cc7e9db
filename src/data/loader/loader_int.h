/*
 * Loader internals shared by loader.c (shards, positions, the public calls),
 * loader_order.c (the order and the reads, below both others) and
 * loader_ring.c (the prefetch thread and its ring of batches), loader_sft.c
 * (rows of whole examples from instruction shards) and loader_ahead.c (the
 * read-ahead of sources that fetch).
 * Leaves out: anything a user of ct_loader sees; include/ctrain/loader.h holds
 * the public contract.
 */
#ifndef CT_LOADER_INT_H
#define CT_LOADER_INT_H

#include "ctrain/loader.h"

#include <pthread.h>

#include "data/shard/source.h"

struct sft_plan;
struct loader_sft;

/* Maps (epoch, index) to (shard, offset). The shuffled shard order of one
 * epoch is cached; each thread that locates batches owns one locator.
 * Instruction data: plan holds a reference to the row plan of the epoch this
 * locator used last (loader_sft.c; released by loader_sft_close). */
typedef struct loader_locator {
    int64_t epoch;  /* epoch of order[] and start[]; -1: none yet */
    int32_t *order; /* (n_shards) shards in this epoch's visiting order */
    int64_t *start; /* (n_shards + 1) global window index where order[j] begins */
    struct sft_plan *plan; /* instruction data: NULL or a counted reference */
} loader_locator;

/* One batch read ahead. */
typedef struct loader_slot {
    int32_t *in, *tg;     /* (B*T) each */
    int32_t *pos;         /* (B*T) instruction data only, else NULL */
    int64_t epoch, index; /* the position it was read at */
} loader_slot;

#define LOADER_MSG_MAX 1024

struct ct_loader {
    /* fixed at init; read by both threads */
    int B, T, rank, world, prefetch;
    int64_t BT; /* tokens per batch */
    bool shuffle;
    uint64_t seed;
    char split_name[32]; /* "train" | "val" */
    ct_source *src;    /* where the shards' bytes come from (data/shard/source.h) */
    int n_shards;      /* src->n */
    char **paths;      /* src->names: (n_shards) sorted */
    int64_t total_tokens;
    int64_t *wins;     /* (n_shards) windows of shard s: (ntok - 1) / BT */
    int64_t *seq_cum;  /* (n_shards + 1) sequential: this rank's windows before shard s */
    int64_t n_windows; /* sum of wins */
    int64_t per_epoch; /* batches this rank takes per epoch (instruction data:
                        * in the consumer's epoch; the caller's thread only) */
    struct loader_sft *sft; /* instruction data (loader_sft.c); NULL for plain shards */
    bool packing, group_by_length; /* instruction data's options */
    int accum;                     /* instruction data: micro-batches per step, >= 1 */

    /* the consumer (the caller's thread) */
    int64_t epoch, index;     /* position of the next batch ct_loader_next returns */
    loader_locator cons_loc;  /* get_pos / set_pos checks */
    loader_locator read_loc;  /* reads: the thread's when prefetch > 0, else the caller's */
    double wait_last, wait_total; /* seconds */

    /* the prefetch ring; everything below is guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    bool sync_ready; /* mu and the conditions were initialised */
    bool running;    /* the thread was started (joined in free) */
    loader_slot *slots;    /* (prefetch) */
    int head, count;       /* ready batches: slots[head .. head+count) mod prefetch */
    int64_t prod_epoch, prod_index; /* position the thread reads next */
    uint64_t gen;          /* bumped by every restart: a read begun before is dropped */
    bool stop;
    ct_status err;         /* the thread's read error, waiting for the consumer */
    char err_msg[LOADER_MSG_MAX], err_hint[LOADER_MSG_MAX], err_site[128];
    pthread_t thread;

    /* the read-ahead thread (loader_ahead.c), for sources that fetch */
    pthread_mutex_t ra_mu;  /* guards the ra_ fields below it */
    pthread_cond_t ra_cv;
    bool ra_sync, ra_running;
    pthread_t ra_thread;
    loader_locator ra_loc;  /* the read-ahead thread's */
    int64_t ra_batches;     /* how far a pass looks, in batches */
    int64_t ra_epoch, ra_index; /* the consumer's position, as last told */
    uint64_t ra_gen;        /* bumped by set_pos, skip and reset */
    bool ra_stop;
};

/* loader_order.c: the order and the reads. A locator for n_shards shards
 * (release with loader_locator_free, also after a failed init). */
ct_status loader_locator_init(loader_locator *loc, int n_shards);
void loader_locator_free(loader_locator *loc);
/* Read the batch at (epoch, index) into in and tg (B*T each), and pos
 * (B*T, or NULL) for instruction data; plain shards leave pos alone. */
ct_status loader_read_at(ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index,
                         int32_t *in, int32_t *tg, int32_t *pos);
/* Locate (epoch, index): the shard and the token offset of its window. */
void loader_locate(const ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index,
                   int32_t *shard, int64_t *offset);
/* loader_locate for any rank of the loader's world. */
void loader_locate_rank(const ct_loader *l, loader_locator *loc, int rank, int64_t epoch,
                        int64_t index, int32_t *shard, int64_t *offset);
/* Move (epoch, index) forward by n >= 0 batches. Plain shards: always CT_OK
 * (loc unused); instruction data: the batch counts of the epochs passed come
 * from loc's plans (CT_ERR_OOM when one cannot be built; nothing moved). */
ct_status loader_advance(const ct_loader *l, loader_locator *loc, int64_t *epoch, int64_t *index,
                         int64_t n);
/* splitmix64's finaliser and the key of one permutation of (seed, epoch):
 * what = 0 the shard order (and the examples of instruction data), what =
 * s + 1 the windows of shard s. */
uint64_t loader_mix64(uint64_t x);
uint64_t loader_order_key(uint64_t seed, int64_t epoch, int64_t what);

/* loader_ring.c: the prefetch thread. */
ct_status loader_ring_start(ct_loader *l); /* allocate the ring, start the thread */
void loader_ring_stop(ct_loader *l);       /* stop and join; free the ring */
/* Next ready batch (blocks while none), or the thread's error; pos (NULL:
 * not wanted) gets the slot's positions when it has them. */
ct_status loader_ring_pop(ct_loader *l, int32_t *in, int32_t *tg, int32_t *pos);
/* Drop every ready batch; the thread reads on from the consumer's position. */
void loader_ring_restart(ct_loader *l);
/* The consumer skipped n batches: drop them if ready, else restart. */
void loader_ring_drop(ct_loader *l, int64_t n);

/* loader_ahead.c: the read-ahead thread of a source that fetches (one
 * with ct_source_i.ahead), started when the loader opens. */
ct_status loader_ahead_start(ct_loader *l); /* nothing when the source needs none */
void loader_ahead_stop(ct_loader *l);       /* before the source closes */
/* The consumer moved (jump: not by one batch, so the pass starts over). */
void loader_ahead_moved(ct_loader *l, bool jump);

/* loader_sft.c: rows of whole examples (include/ctrain/loader.h,
 * "Instruction data"). */
/* Whether the source's shards are instruction data: a sidecar beside a
 * shard, or the manifest saying ctrain-sft/1. CT_ERR_FORMAT when some
 * shards have sidecars and some do not. */
ct_status loader_sft_detect(const ct_loader *l, bool *is_sft);
/* Whether a manifest's text says "format": "ctrain-sft/1". */
bool loader_sft_manifest_says_sft(const char *text, size_t len);
/* Open the sidecars of the source's shards, check the tokens, measure the
 * examples, build epoch 0's plan; sets l->sft, total_tokens, per_epoch. */
ct_status loader_sft_open(ct_loader *l, const ct_loader_opts *o);
/* Release every plan (the threads are stopped) and the sidecars. */
void loader_sft_close(ct_loader *l);
/* The batch at (epoch, index) of this rank into in, tg and pos (NULL: not
 * wanted). */
ct_status loader_sft_read(ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index,
                          int32_t *in, int32_t *tg, int32_t *pos);
/* Micro-batches per rank in epoch (through loc's plan). */
ct_status loader_sft_batches(const ct_loader *l, loader_locator *loc, int64_t epoch,
                             int64_t *out);
/* Ask the kernel for the pages of the batch at (epoch, index) (a hint). */
void loader_sft_willneed(const ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index);
/* Consumer side (the caller's thread), which keeps the plan of l->epoch
 * pinned. step: the position n >= 0 batches past the consumer's, and a
 * reference to its epoch's plan (CT_ERR_OOM when it cannot be built); then
 * exactly one of commit (move there, pin it) or unpin (stay). */
ct_status loader_sft_step(ct_loader *l, int64_t n, int64_t *epoch, int64_t *index,
                          struct sft_plan **pin);
void loader_sft_commit(ct_loader *l, int64_t epoch, int64_t index, struct sft_plan *pin);
void loader_sft_unpin(ct_loader *l, struct sft_plan *pin);
/* Back to epoch 0, index 0 (epoch 0's plan stays built: cannot fail). */
void loader_sft_reset(ct_loader *l);
void loader_sft_get_pos(ct_loader *l, ct_loader_pos *out);
/* set_pos for instruction data, after the mode bits were compared. */
ct_status loader_sft_set_pos(ct_loader *l, const ct_loader_pos *pos);
/* Position mode bits (ct_loader_pos.shuffled) of this loader. */
int32_t loader_pos_mode(const ct_loader *l);

#endif
