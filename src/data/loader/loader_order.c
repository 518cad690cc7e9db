/*
 * The order of a loader's windows and their reading: the sequential (llm.c)
 * and seeded shuffled orders as pure functions of (epoch, index), locators
 * that map a position to a shard and offset, and the read of one batch. Both
 * the public calls (loader.c) and the prefetch thread (loader_ring.c) call
 * down into this file; instruction data's rows are loader_sft.c's.
 */
#include "data/loader/loader_int.h"

#include <stdlib.h>
#include <string.h>

/* splitmix64's finaliser: a bijective 64-bit mix. */
uint64_t loader_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Key of one permutation: the shard order of an epoch (what = 0) or the
 * windows of shard what - 1 in that epoch. */
uint64_t loader_order_key(uint64_t seed, int64_t epoch, int64_t what) {
    return loader_mix64(loader_mix64(loader_mix64(seed) ^ (uint64_t)epoch) ^ (uint64_t)what);
}

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
 * where each shard's windows begin in that epoch's global window order. */
static void locator_set_epoch(const ct_loader *l, loader_locator *loc, int64_t epoch) {
    int n = l->n_shards;
    for (int i = 0; i < n; i++) loc->order[i] = i;
    uint64_t state = loader_order_key(l->seed, epoch, 0);
    for (int i = n - 1; i > 0; i--) {
        state += 0x9e3779b97f4a7c15ull;
        int j = (int)(loader_mix64(state) % (uint64_t)(i + 1));
        int32_t t = loc->order[i];
        loc->order[i] = loc->order[j];
        loc->order[j] = t;
    }
    loc->start[0] = 0;
    for (int j = 0; j < n; j++) loc->start[j + 1] = loc->start[j] + l->wins[loc->order[j]];
    loc->epoch = epoch;
}

ct_status loader_locator_init(loader_locator *loc, int n_shards) {
    loc->epoch = -1;
    loc->plan = NULL;
    loc->order = calloc((size_t)n_shards, sizeof *loc->order);
    loc->start = calloc((size_t)n_shards + 1, sizeof *loc->start);
    if (!loc->order || !loc->start) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    return CT_OK;
}

void loader_locator_free(loader_locator *loc) {
    free(loc->order);
    free(loc->start);
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

void loader_locate_rank(const ct_loader *l, loader_locator *loc, int rank, int64_t epoch,
                        int64_t index, int32_t *shard, int64_t *offset) {
    CT_ASSERT(epoch >= 0 && index >= 0 && index < l->per_epoch);
    if (!l->shuffle) {
        /* this rank's k-th window of shard s is at (k*world + rank)*B*T */
        int s = upper_index(l->seq_cum, l->n_shards, index);
        *shard = s;
        *offset = ((index - l->seq_cum[s]) * l->world + rank) * l->BT;
        return;
    }
    if (loc->epoch != epoch) locator_set_epoch(l, loc, epoch);
    int64_t g = index * l->world + rank; /* global window index in the epoch */
    int j = upper_index(loc->start, l->n_shards, g);
    int32_t s = loc->order[j];
    int64_t w = feistel_permute(g - loc->start[j], l->wins[s],
                                loader_order_key(l->seed, epoch, s + 1));
    *shard = s;
    *offset = w * l->BT;
}

void loader_locate(const ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index,
                   int32_t *shard, int64_t *offset) {
    loader_locate_rank(l, loc, l->rank, epoch, index, shard, offset);
}

ct_status loader_advance(const ct_loader *l, loader_locator *loc, int64_t *epoch, int64_t *index,
                         int64_t n) {
    CT_ASSERT(n >= 0);
    if (l->sft) {
        /* instruction data: an epoch's batch count may be its own */
        int64_t e = *epoch, i = *index, per;
        while (n > 0) {
            ct_status st = loader_sft_batches(l, loc, e, &per);
            if (st) return st;
            if (n < per - i) {
                i += n;
                break;
            }
            n -= per - i;
            e++;
            i = 0;
        }
        *epoch = e;
        *index = i;
        return CT_OK;
    }
    *epoch += n / l->per_epoch;
    *index += n % l->per_epoch;
    if (*index >= l->per_epoch) {
        *index -= l->per_epoch;
        (*epoch)++;
    }
    return CT_OK;
}

ct_status loader_read_at(ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index,
                         int32_t *in, int32_t *tg, int32_t *pos) {
    if (l->sft) return loader_sft_read(l, loc, epoch, index, in, tg, pos);
    int32_t s;
    int64_t off;
    loader_locate(l, loc, epoch, index, &s, &off);
    /* targets are the inputs moved by one, plus the window's last token */
    ct_status st = l->src->i->read(l->src, s, off, l->BT, in);
    if (st) return st;
    memcpy(tg, in + 1, (size_t)(l->BT - 1) * sizeof *tg);
    return l->src->i->read(l->src, s, off + l->BT, 1, tg + l->BT - 1);
}

/* ------------------------------------------------------------ init / free */

