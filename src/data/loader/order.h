/*
 * The order of a loader's examples: which examples make micro-batch `index`
 * of epoch `epoch` on a rank, as a pure function of (seed, epoch, the kind's
 * examples, B, world[, accum, packing, group_by_length]), so a position is
 * two integers and resuming, skipping, the prefetch ring and the read-ahead
 * all find batches the same way. It works on example indices and the kind's
 * base fields only. Two orders, chosen by what the examples are:
 *   stream  (order_stream.c) examples that each fill a whole row (the
 *           kind's len is NULL: windows of plain shards): llm.c's sequential
 *           order, or a seeded permutation of the shards and, inside each, of
 *           its examples; random access in O(shards) memory, no plan.
 *   plan    (order_plan.c) examples of their own lengths: a plan per epoch
 *           (a seeded permutation of all examples, runs sorted by length,
 *           greedy packing into rows, empty rows up to whole optimizer
 *           steps), built when first needed and shared between threads.
 * Either way rank r's m-th micro-batch of an epoch is the global batch
 * m*world + r, so world ranks at B read the rows one rank reads at world*B.
 * Each thread that finds batches owns a locator: the order's cache for one
 * epoch (its shard permutation, or a reference to its plan).
 * Leaves out: reading (the kind), the threads (loader_ring.c,
 * loader_ahead.c), the public calls (loader.c).
 */
#ifndef CT_LOADER_ORDER_H
#define CT_LOADER_ORDER_H

#include "data/loader/kind.h"

typedef struct loader_order loader_order;

/* A thread's place in the order: the epoch it was put on (-1: none yet),
 * and the order's cache for that epoch after it. */
typedef struct loader_loc {
    int64_t epoch;
} loader_loc;

/* One batch as the order lays it out: `rows` rows (the kind's rows per
 * batch), row r holding examples ex[row_start[r] .. row_start[r+1]) in that
 * order (an empty row: padding only). Borrowed from the locator until it
 * lays out another batch. */
typedef struct loader_batch {
    int rows;
    const int64_t *ex;
    const int32_t *row_start; /* (rows + 1) */
} loader_batch;

typedef struct loader_order_opts {
    int B, world;         /* rows per micro-batch of a rank (the kind's rows), ranks */
    bool shuffle;
    uint64_t seed;
    int accum;            /* micro-batches per optimizer step: epochs are whole steps (plan) */
    bool packing;         /* several examples per row (plan) */
    bool group_by_length; /* runs of 50*B*world examples sorted by length (plan) */
    const char *spec;     /* for messages */
    const char *split;
} loader_order_opts;

typedef struct loader_order_i {
    const char *name; /* "stream", "plan" */
    /* Open over kind k (borrowed). Errors: CT_ERR_ARG when no batch can be
     * made (too few examples for the ranks), CT_ERR_OOM. */
    ct_status (*open)(loader_order **out, const loader_kind *k, const loader_order_opts *o);
    void (*close)(loader_order *o); /* after every locator is freed */
    ct_status (*loc_new)(loader_order *o, loader_loc **out);
    void (*loc_free)(loader_order *o, loader_loc *loc); /* NULL is fine */
    /* Put loc on epoch (>= 0): build or find what it needs. CT_ERR_OOM when
     * a plan cannot be built; loc is then unchanged. */
    ct_status (*seek)(loader_order *o, loader_loc *loc, int64_t epoch);
    /* Micro-batches a rank takes in loc's epoch. */
    int64_t (*batches)(const loader_order *o, const loader_loc *loc);
    /* Rows that hold examples in loc's epoch (all ranks). */
    int64_t (*rows)(const loader_order *o, const loader_loc *loc);
    /* Micro-batch `index` (0 <= index < batches) of rank in loc's epoch.
     * CT_ERR_OOM when the locator cannot hold its examples. */
    ct_status (*batch)(loader_order *o, loader_loc *loc, int rank, int64_t index,
                       loader_batch *out);
    /* The first example of micro-batch `index` of rank in loc's epoch (a
     * resume position names it); false for a batch of empty rows. */
    bool (*first)(loader_order *o, loader_loc *loc, int rank, int64_t index, int64_t *x);
    /* Counted targets of micro-batches [i0, i1) of loc's epoch, summed over
     * the batches of every rank at those indices. */
    int64_t (*counted)(const loader_order *o, const loader_loc *loc, int64_t i0, int64_t i1);
} loader_order_i;

/* The fields every order fills in at open. */
struct loader_order {
    const loader_order_i *i;
    int32_t mode;   /* position mode bits (ct_loader_pos.shuffled): 1 shuffle, 4 packing,
                     * 8 group_by_length */
    int64_t fixed;  /* batches per epoch when every epoch has as many; -1 otherwise */
};

extern const loader_order_i loader_order_stream_i;
extern const loader_order_i loader_order_plan_i;

/* order.c */
/* The order for kind k's examples: stream when each fills a whole row. */
ct_status loader_order_open(loader_order **out, const loader_kind *k, const loader_order_opts *o);
void loader_order_close(loader_order *o); /* NULL is fine */
/* Move (epoch, index) forward by n >= 0 batches (through loc when epochs
 * differ in length: CT_ERR_OOM when a plan cannot be built; nothing moved). */
ct_status loader_order_advance(loader_order *o, loader_loc *loc, int64_t *epoch, int64_t *index,
                               int64_t n);
/* splitmix64's finaliser and the key of one permutation of (seed, epoch):
 * what = 0 the shard order (and all examples of a plan), what = s + 1 the
 * examples of shard s. */
uint64_t loader_mix64(uint64_t x);
uint64_t loader_order_key(uint64_t seed, int64_t epoch, int64_t what);

#endif
