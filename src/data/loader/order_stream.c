/*
 * The stream order (order.h) of examples that each fill a whole row, the
 * windows of plain shards: llm.c's sequential order, or the seeded shuffled
 * one, both pure functions of (epoch, index) with random access and no
 * stored plan.
 * Sequential (data.shuffle=false): rank r's m-th batch of shard s is its
 * example (m*world + r), so a step of all ranks reads world consecutive
 * windows of one shard; a shard that cannot hold another whole step is left
 * for the next (wrapping to the first after the last).
 * Shuffled: each epoch visits the shards in a seeded permutation and the
 * examples of each shard in a seeded permutation (a Feistel network, so no
 * shard's order is stored), both functions of (seed, epoch, shard); global
 * example g of the epoch goes to rank g % world, and the last N % world of
 * the epoch's N examples are left out (a different set each epoch).
 * Leaves out: examples of their own lengths (order_plan.c), reading.
 */
#include "data/loader/order.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct stream_order {
    loader_order base;
    const loader_kind *k;
    int n;             /* shards */
    int world;
    bool shuffle;
    uint64_t seed;
    int64_t *wins;     /* (n) examples of shard s */
    int64_t *seq_cum;  /* (n + 1) sequential: this rank's batches before shard s */
    int64_t per_epoch; /* batches per rank per epoch */
} stream_order;

typedef struct stream_loc {
    loader_loc base;
    int64_t perm_epoch; /* epoch of order[] and start[]; -1: none yet */
    int32_t *order;     /* (n) shards in this epoch's visiting order */
    int64_t *start;     /* (n + 1) global example index where order[j] begins */
    int64_t ex;         /* the batch laid out last: one example */
    int32_t row_start[2];
} stream_loc;

#define FEISTEL_ROUNDS 6

/* Image of i under a keyed permutation of [0, n): a balanced Feistel network
 * over the smallest even bit width that holds n, walking the cycle until the
 * value falls back inside [0, n) (a bijection of [0, n) since the network is
 * one of [0, 2^bits)). Random access in O(1) memory, so no shard's window
 * order is ever stored. */
static int64_t feistel_permute(int64_t i, int64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 0;
    while (bits < 62 && ((uint64_t)1 << bits) < (uint64_t)n) bits++;
    bits += bits & 1;
    int h = bits / 2;
    uint64_t mask = ((uint64_t)1 << h) - 1;
    uint64_t rk[FEISTEL_ROUNDS];
    for (int r = 0; r < FEISTEL_ROUNDS; r++) rk[r] = loader_mix64(key + (uint64_t)r);
    uint64_t x = (uint64_t)i;
    do {
        uint64_t left = x >> h, right = x & mask;
        for (int r = 0; r < FEISTEL_ROUNDS; r++) {
            uint64_t t = left ^ (loader_mix64(rk[r] ^ right) & mask);
            left = right;
            right = t;
        }
        x = left << h | right;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

/* Fill loc with epoch's shard order (Fisher-Yates driven by splitmix64) and
 * where each shard's examples begin in that epoch's global order. */
static void stream_permute(const stream_order *o, stream_loc *loc, int64_t epoch) {
    int n = o->n;
    for (int i = 0; i < n; i++) loc->order[i] = i;
    uint64_t state = loader_order_key(o->seed, epoch, 0);
    for (int i = n - 1; i > 0; i--) {
        state += 0x9e3779b97f4a7c15ull;
        int j = (int)(loader_mix64(state) % (uint64_t)(i + 1));
        int32_t t = loc->order[i];
        loc->order[i] = loc->order[j];
        loc->order[j] = t;
    }
    loc->start[0] = 0;
    for (int j = 0; j < n; j++) loc->start[j + 1] = loc->start[j] + o->wins[loc->order[j]];
    loc->perm_epoch = epoch;
}

/* Largest j in [0, n) with a[j] <= k, for ascending a with a[0] <= k < a[n]. */
static int upper_index(const int64_t *a, int n, int64_t k) {
    int lo = 0, hi = n; /* a[lo] <= k < a[hi] */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (a[mid] <= k) lo = mid;
        else hi = mid;
    }
    return lo;
}

static void stream_close(loader_order *base) {
    stream_order *o = (stream_order *)base;
    free(o->wins);
    free(o->seq_cum);
    free(o);
}

static ct_status stream_open(loader_order **out, const loader_kind *k,
                             const loader_order_opts *opt) {
    *out = NULL;
    stream_order *o = calloc(1, sizeof *o);
    if (!o) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    o->base.i = &loader_order_stream_i;
    o->base.mode = opt->shuffle ? 1 : 0;
    o->k = k;
    o->n = k->n_groups;
    o->world = opt->world;
    o->shuffle = opt->shuffle;
    o->seed = opt->seed;
    o->wins = calloc((size_t)o->n + 1, sizeof *o->wins);
    o->seq_cum = calloc((size_t)o->n + 1, sizeof *o->seq_cum);
    if (!o->wins || !o->seq_cum) {
        stream_close(&o->base);
        return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    }
    for (int s = 0; s < o->n; s++) {
        o->wins[s] = k->group_start[s + 1] - k->group_start[s];
        /* sequential: a step of all ranks takes world consecutive examples of
         * one shard, so every rank takes as many from it as one rank at
         * world*B would */
        o->seq_cum[s + 1] = o->seq_cum[s] + o->wins[s] / o->world;
    }
    ct_status st = CT_OK;
    if (o->shuffle) {
        o->per_epoch = k->n / o->world;
        if (o->per_epoch < 1)
            st = CT_ERR(CT_ERR_ARG, "%s: %" PRId64 " %ss of %" PRId64 " tokens in all, fewer "
                        "than the %d ranks", opt->spec, k->n, k->noun, k->span, o->world);
    } else {
        o->per_epoch = o->seq_cum[o->n];
        /* world examples in a row overlap by span - width tokens (a window's last) */
        if (o->per_epoch < 1)
            st = CT_ERR(CT_ERR_ARG, "%s: no shard holds the %" PRId64 " tokens one sequential "
                        "step of %d rank(s) needs (ranks * B*T + 1)", opt->spec,
                        (int64_t)o->world * k->width + k->span - k->width, o->world);
    }
    if (st) {
        stream_close(&o->base);
        return st;
    }
    o->base.fixed = o->per_epoch;
    *out = &o->base;
    return CT_OK;
}

static ct_status stream_loc_new(loader_order *base, loader_loc **out) {
    stream_order *o = (stream_order *)base;
    *out = NULL;
    stream_loc *loc = calloc(1, sizeof *loc);
    if (loc) {
        loc->order = calloc((size_t)o->n + 1, sizeof *loc->order);
        loc->start = calloc((size_t)o->n + 1, sizeof *loc->start);
    }
    if (!loc || !loc->order || !loc->start) {
        if (loc) {
            free(loc->order);
            free(loc->start);
        }
        free(loc);
        return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    }
    loc->base.epoch = -1;
    loc->perm_epoch = -1;
    *out = &loc->base;
    return CT_OK;
}

static void stream_loc_free(loader_order *base, loader_loc *l) {
    (void)base;
    stream_loc *loc = (stream_loc *)l;
    if (!loc) return;
    free(loc->order);
    free(loc->start);
    free(loc);
}

static ct_status stream_seek(loader_order *base, loader_loc *l, int64_t epoch) {
    (void)base;
    l->epoch = epoch; /* the shard permutation is drawn when a batch needs it */
    return CT_OK;
}

static int64_t stream_batches(const loader_order *base, const loader_loc *loc) {
    (void)loc;
    return ((const stream_order *)base)->per_epoch;
}

static int64_t stream_rows(const loader_order *base, const loader_loc *loc) {
    (void)loc;
    const stream_order *o = (const stream_order *)base;
    return o->per_epoch * o->world * o->k->rows;
}

static ct_status stream_batch(loader_order *base, loader_loc *l, int rank, int64_t index,
                              loader_batch *out) {
    stream_order *o = (stream_order *)base;
    stream_loc *loc = (stream_loc *)l;
    int64_t epoch = l->epoch;
    CT_ASSERT(epoch >= 0 && index >= 0 && index < o->per_epoch);
    int32_t s;
    int64_t w;
    if (!o->shuffle) {
        /* this rank's k-th example of shard s is the shard's (k*world + rank)-th */
        s = upper_index(o->seq_cum, o->n, index);
        w = (index - o->seq_cum[s]) * o->world + rank;
    } else {
        if (loc->perm_epoch != epoch) stream_permute(o, loc, epoch);
        int64_t g = index * o->world + rank; /* global example index in the epoch */
        int j = upper_index(loc->start, o->n, g);
        s = loc->order[j];
        w = feistel_permute(g - loc->start[j], o->wins[s], loader_order_key(o->seed, epoch, s + 1));
    }
    loc->ex = o->k->group_start[s] + w;
    loc->row_start[0] = 0;
    loc->row_start[1] = 1;
    out->rows = 1;
    out->ex = &loc->ex;
    out->row_start = loc->row_start;
    return CT_OK;
}

static bool stream_first(loader_order *o, loader_loc *loc, int rank, int64_t index,
                         int64_t *x) {
    loader_batch b;
    (void)stream_batch(o, loc, rank, index, &b); /* never fails */
    *x = b.ex[0];
    return true;
}

static int64_t stream_counted(const loader_order *base, const loader_loc *loc, int64_t i0,
                              int64_t i1) {
    (void)loc;
    const stream_order *o = (const stream_order *)base;
    CT_ASSERT(o->k->cnt == NULL); /* every target of a whole-row example counts */
    return (i1 - i0) * o->world * o->k->rows * o->k->width;
}

const loader_order_i loader_order_stream_i = {
    .name = "stream",
    .open = stream_open,
    .close = stream_close,
    .loc_new = stream_loc_new,
    .loc_free = stream_loc_free,
    .seek = stream_seek,
    .batches = stream_batches,
    .rows = stream_rows,
    .batch = stream_batch,
    .first = stream_first,
    .counted = stream_counted,
};
