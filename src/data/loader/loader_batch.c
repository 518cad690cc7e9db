/*
 * One batch of a loader's rank: the order lays it out as rows of examples,
 * the kind fills each row (tokens, targets, positions) and names the token
 * ranges it reads, which are merged here into runs for the source's hints
 * and read-ahead. Neither the order nor the kind is asked what it is.
 * Leaves out: when batches are read (loader_ring.c, loader.c) and fetching
 * (loader_ahead.c).
 */
#include "data/loader/loader_int.h"

ct_status loader_read_at(ct_loader *l, loader_loc *loc, int64_t epoch, int64_t index, int32_t *in,
                         int32_t *tg, int32_t *pos, int64_t *counted) {
    loader_order *o = l->order;
    const loader_kind *k = l->kind;
    loader_batch b;
    ct_status st = o->i->seek(o, loc, epoch);
    if (st == CT_OK) st = o->i->batch(o, loc, l->rank, index, &b);
    if (st) return st;
    int64_t w = k->width, total = 0;
    for (int r = 0; r < b.rows; r++) {
        int64_t c;
        int32_t *rp = k->plain_pos || !pos ? NULL : pos + r * w;
        st = k->i->fill_row(k, b.ex + b.row_start[r], b.row_start[r + 1] - b.row_start[r],
                            in + r * w, tg + r * w, rp, &c);
        if (st) return st;
        total += c;
    }
    *counted = total;
    return CT_OK;
}

/* Runs of ranges, handed on when the next range does not continue one. */
typedef struct span_merge {
    loader_span_fn fn;
    void *arg;
    int32_t shard; /* -1: none open */
    int64_t lo, hi;
    bool stopped;
} span_merge;

static void span_flush(span_merge *m) {
    if (m->shard >= 0 && !m->stopped && !m->fn(m->arg, m->shard, m->lo, m->hi - m->lo))
        m->stopped = true;
    m->shard = -1;
}

static void span_add(void *arg, int32_t shard, int64_t start, int64_t count) {
    span_merge *m = arg;
    if (m->shard == shard && start == m->hi) {
        m->hi += count;
        return;
    }
    span_flush(m);
    m->shard = shard;
    m->lo = start;
    m->hi = start + count;
}

ct_status loader_batch_ranges(ct_loader *l, loader_loc *loc, int64_t epoch, int64_t index,
                              loader_span_fn fn, void *arg) {
    loader_order *o = l->order;
    const loader_kind *k = l->kind;
    loader_batch b;
    ct_status st = o->i->seek(o, loc, epoch);
    if (st == CT_OK) st = o->i->batch(o, loc, l->rank, index, &b);
    if (st) return st;
    span_merge m = {fn, arg, -1, 0, 0, false};
    for (int r = 0; r < b.rows && !m.stopped; r++)
        k->i->ranges(k, b.ex + b.row_start[r], b.row_start[r + 1] - b.row_start[r], span_add, &m);
    span_flush(&m);
    return CT_OK;
}

static bool willneed_span(void *arg, int32_t shard, int64_t start, int64_t count) {
    ct_source *src = arg;
    src->i->willneed(src, shard, start, count);
    return true;
}

void loader_willneed(ct_loader *l, loader_loc *loc, int64_t epoch, int64_t index) {
    if (loader_batch_ranges(l, loc, epoch, index, willneed_span, l->src))
        ct_error_clear(); /* only a hint; the read reports it */
}
