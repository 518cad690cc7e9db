/*
 * Loader internals. The files stand in layers, each using only those below
 * it (never a sibling):
 *   loader.c         the public calls: opening (a source, a kind, an order),
 *                    the consumer's position, get/set_pos, skip, reset
 *   loader_ring.c    the prefetch thread and its ring of batches
 *   loader_ahead.c   the read-ahead thread of a source that fetches
 *   loader_batch.c   one batch: the order's rows of examples, filled by the kind
 *   order*.c         which examples make each batch (order.h)
 *   kind*.c          what an example is and how it fills a row (kind.h)
 *   data/shard/source*.c  where the shards' bytes come from (source.h)
 * Leaves out: anything a user of ct_loader sees; include/ctrain/loader.h holds
 * the public contract.
 */
#ifndef CT_LOADER_INT_H
#define CT_LOADER_INT_H

#include "ctrain/loader.h"
#include "data/loader/kind.h"
#include "data/loader/order.h"
#include "data/shard/source.h"

#include <pthread.h>

/* One batch read ahead. */
typedef struct loader_slot {
    int32_t *in, *tg;     /* (B*T) each */
    int32_t *pos;         /* (B*T), or NULL when the kind's positions are plain */
    int64_t counted;      /* its targets >= 0 */
    int64_t epoch, index; /* the position it was read at */
} loader_slot;

#define LOADER_MSG_MAX 1024

struct ct_loader {
    /* fixed at init; read by every thread */
    int B, T, rank, world, prefetch;
    int64_t BT; /* tokens per batch */
    bool packing; /* data.packing as asked (the plan order packs) */
    char split_name[32]; /* "train" | "val" */
    ct_source *src;      /* where the shards' bytes come from */
    loader_kind *kind;   /* what one example is */
    loader_order *order; /* which examples make each batch */
    int64_t rows0;       /* rows of epoch 0 that hold examples (statistics) */

    /* the consumer (the caller's thread) */
    int64_t epoch, index;   /* position of the next batch ct_loader_next returns */
    int64_t per_epoch;      /* batches this rank takes in that epoch */
    loader_loc *cons_loc;   /* on the consumer's epoch (its plan kept) */
    loader_loc *look_loc;   /* the consumer's look at other epochs (skip, set_pos, ahead) */
    loader_loc *read_loc;   /* reads: the thread's when prefetch > 0, else the caller's */
    double wait_last, wait_total; /* seconds */

    /* the prefetch ring (loader_ring.c); everything below is guarded by mu */
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
    loader_loc *ra_loc;     /* the read-ahead thread's */
    int64_t ra_batches;     /* how far a pass looks, in batches */
    int64_t ra_epoch, ra_index, ra_per_epoch; /* the consumer's position, as last told */
    uint64_t ra_gen;        /* bumped by set_pos, skip and reset */
    bool ra_stop;
};

/* loader_batch.c: one batch of this rank. */
/* Read batch (epoch, index) through loc into in and tg (B*T each) and, when
 * the kind's positions are not plain, pos (B*T); *counted: its targets >= 0. */
ct_status loader_read_at(ct_loader *l, loader_loc *loc, int64_t epoch, int64_t index, int32_t *in,
                         int32_t *tg, int32_t *pos, int64_t *counted);
/* The token ranges batch (epoch, index) reads, merged where they run on in
 * one shard: fn(arg, shard, start, count), in reading order. fn returns
 * false to stop. CT_ERR_OOM when the order cannot lay out the batch. */
typedef bool (*loader_span_fn)(void *arg, int32_t shard, int64_t start, int64_t count);
ct_status loader_batch_ranges(ct_loader *l, loader_loc *loc, int64_t epoch, int64_t index,
                              loader_span_fn fn, void *arg);
/* Hint the source that batch (epoch, index) is read soon (errors ignored). */
void loader_willneed(ct_loader *l, loader_loc *loc, int64_t epoch, int64_t index);

/* loader_ring.c: the prefetch thread. */
ct_status loader_ring_start(ct_loader *l); /* allocate the ring, start the thread */
void loader_ring_stop(ct_loader *l);       /* stop and join; free the ring */
/* Next ready batch (blocks while none), or the thread's error; pos (NULL:
 * not wanted) gets the slot's positions when it has them. */
ct_status loader_ring_pop(ct_loader *l, int32_t *in, int32_t *tg, int32_t *pos,
                          int64_t *counted);
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

#endif
