/*
 * Loader internals shared by loader.c (shards, positions, the public calls),
 * loader_order.c (the order and the reads, below both others) and
 * loader_ring.c (the prefetch thread and its ring of batches).
 * Leaves out: anything a user of ct_loader sees; include/ctrain/loader.h holds
 * the public contract.
 */
#ifndef CT_LOADER_INT_H
#define CT_LOADER_INT_H

#include "ctrain/loader.h"

#include <pthread.h>

#include "data/shard.h"

/* Maps (epoch, index) to (shard, offset). The shuffled shard order of one
 * epoch is cached; each thread that locates batches owns one locator. */
typedef struct loader_locator {
    int64_t epoch;  /* epoch of order[] and start[]; -1: none yet */
    int32_t *order; /* (n_shards) shards in this epoch's visiting order */
    int64_t *start; /* (n_shards + 1) global window index where order[j] begins */
} loader_locator;

/* One batch read ahead. */
typedef struct loader_slot {
    int32_t *in, *tg;     /* (B*T) each */
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
    int n_shards;
    ct_shard **shards; /* (n_shards) */
    char **paths;      /* (n_shards) sorted */
    int64_t total_tokens;
    int64_t *wins;     /* (n_shards) windows of shard s: (ntok - 1) / BT */
    int64_t *seq_cum;  /* (n_shards + 1) sequential: this rank's windows before shard s */
    int64_t n_windows; /* sum of wins */
    int64_t per_epoch; /* batches this rank takes per epoch */

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

    /* remote shards (loader_remote.c); remote is NULL for local ones */
    struct ct_remote_ctx *remote;
    pthread_mutex_t ra_mu;  /* guards the ra_ fields below it */
    pthread_cond_t ra_cv;
    bool ra_sync, ra_running;
    pthread_t ra_thread;
    loader_locator ra_loc;  /* the read-ahead thread's */
    int64_t ra_batches, ra_budget_blocks; /* how far a pass looks: batches, blocks */
    int64_t ra_epoch, ra_index; /* the consumer's position, as last told */
    uint64_t ra_gen;        /* bumped by set_pos, skip and reset */
    bool ra_stop;
};

/* loader_order.c: the order and the reads. A locator for n_shards shards
 * (release with loader_locator_free, also after a failed init). */
ct_status loader_locator_init(loader_locator *loc, int n_shards);
void loader_locator_free(loader_locator *loc);
/* Read the batch at (epoch, index) into in and tg (B*T each). */
ct_status loader_read_at(ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index,
                         int32_t *in, int32_t *tg);
/* Locate (epoch, index): the shard and the token offset of its window. */
void loader_locate(const ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index,
                   int32_t *shard, int64_t *offset);
/* loader_locate for any rank of the loader's world. */
void loader_locate_rank(const ct_loader *l, loader_locator *loc, int rank, int64_t epoch,
                        int64_t index, int32_t *shard, int64_t *offset);
/* Move (epoch, index) forward by n >= 0 batches. */
void loader_advance(const ct_loader *l, int64_t *epoch, int64_t *index, int64_t n);

/* loader_ring.c: the prefetch thread. */
ct_status loader_ring_start(ct_loader *l); /* allocate the ring, start the thread */
void loader_ring_stop(ct_loader *l);       /* stop and join; free the ring */
/* Next ready batch (blocks while none), or the thread's error. */
ct_status loader_ring_pop(ct_loader *l, int32_t *in, int32_t *tg);
/* Drop every ready batch; the thread reads on from the consumer's position. */
void loader_ring_restart(ct_loader *l);
/* The consumer skipped n batches: drop them if ready, else restart. */
void loader_ring_drop(ct_loader *l, int64_t n);

/* loader_remote.c: remote shards and their read-ahead thread. */
ct_status loader_remote_open(ct_loader *l, const ct_loader_opts *o); /* fills shards, paths */
ct_status loader_remote_start(ct_loader *l);
void loader_remote_stop(ct_loader *l);  /* before the shards close */
void loader_remote_close(ct_loader *l); /* after the shards close */
/* The consumer moved (jump: not by one batch, so the pass starts over). */
void loader_remote_moved(ct_loader *l, bool jump);

#endif
