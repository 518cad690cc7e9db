/*
 * What both orders share (order.h): choosing one for a kind's examples,
 * moving a position forward across epochs, and the keyed mixing every
 * permutation is drawn from.
 * Leaves out: the orders themselves (order_stream.c, order_plan.c).
 */
#include "data/loader/order.h"

/* splitmix64's finaliser: a bijective 64-bit mix. */
uint64_t loader_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Key of one permutation: the shard order of an epoch (what = 0) or the
 * examples of shard what - 1 in that epoch. */
uint64_t loader_order_key(uint64_t seed, int64_t epoch, int64_t what) {
    return loader_mix64(loader_mix64(loader_mix64(seed) ^ (uint64_t)epoch) ^ (uint64_t)what);
}

ct_status loader_order_open(loader_order **out, const loader_kind *k, const loader_order_opts *o) {
    *out = NULL;
    /* examples that each fill a row need no plan: any of them fits any row */
    const loader_order_i *i = k->len ? &loader_order_plan_i : &loader_order_stream_i;
    return i->open(out, k, o);
}

void loader_order_close(loader_order *o) {
    if (o) o->i->close(o);
}

ct_status loader_order_advance(loader_order *o, loader_loc *loc, int64_t *epoch, int64_t *index,
                               int64_t n) {
    CT_ASSERT(n >= 0);
    if (o->fixed > 0) { /* the same batch count in every epoch */
        *epoch += n / o->fixed;
        *index += n % o->fixed;
        if (*index >= o->fixed) {
            *index -= o->fixed;
            (*epoch)++;
        }
        return CT_OK;
    }
    int64_t e = *epoch, i = *index;
    while (n > 0) {
        ct_status st = o->i->seek(o, loc, e);
        if (st) return st;
        int64_t per = o->i->batches(o, loc);
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
