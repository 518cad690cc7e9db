/*
 * The read-ahead thread of a loader whose source fetches (ct_source_i.ahead:
 * remote shards): it keeps the data of the next batches present (in the
 * disk cache) before the reader needs them.
 * The order is a pure function of (epoch, index), so the thread walks the
 * very positions the reader will take, from the consumer's position on, up to
 * data.readahead bytes ahead; each rank fetches only its own batches. A pass
 * starts again when the consumer has moved a quarter of the way, or at once
 * after set_pos, skip or reset.
 * A fetch that runs out of retries marks its blocks failed in the source and
 * the pass goes on; the reader tries them once more when it gets there, so a
 * run stops only at a batch that cannot be read then, never earlier.
 * Leaves out: fetching and what it costs (the source), the batches' content.
 */
#include "data/loader/loader_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RA_MAX_BATCHES ((int64_t)1 << 20) /* most batches one pass looks ahead */

/* ------------------------------------------------------------ read-ahead */

/* A pass's ranges go to the source's read-ahead, which charges them. */
typedef struct ra_walk {
    ct_source *src;
    ct_source_pass pass;
    bool spent; /* the budget ran out */
} ra_walk;

static bool ra_span(void *arg, int32_t shard, int64_t start, int64_t count) {
    ra_walk *w = arg;
    if (!w->src->i->ahead(w->src, &w->pass, shard, start, count)) w->spent = true;
    return !w->spent;
}

/* One pass from (e0, i0): make the data of the next batches present, up to
 * the budget. Returns how many batches ahead it got. */
static int64_t ra_pass(ct_loader *l, int64_t e0, int64_t i0, uint64_t gen) {
    ra_walk w;
    memset(&w, 0, sizeof w);
    w.src = l->src;
    w.pass.budget = l->src->ahead_budget;
    int64_t k;
    for (k = 0; k < l->ra_batches; k++) {
        int64_t e = e0, i = i0;
        if (loader_order_advance(l->order, l->ra_loc, &e, &i, k) ||
            loader_batch_ranges(l, l->ra_loc, e, i, ra_span, &w)) {
            ct_error_clear(); /* no memory for a plan now: the reader will say so */
            break;
        }
        if (w.spent) break;
        pthread_mutex_lock(&l->ra_mu);
        bool moved = l->ra_stop || l->ra_gen != gen;
        pthread_mutex_unlock(&l->ra_mu);
        if (moved) break;
    }
    return k;
}

static void *ra_main(void *arg) {
    ct_loader *l = arg;
    pthread_mutex_lock(&l->ra_mu);
    int64_t need = 0; /* batches the consumer must take before the next pass */
    uint64_t seen_gen = (uint64_t)-1;
    int64_t pe = 0, pi = 0; /* where the last pass started */
    for (;;) {
        while (!l->ra_stop && seen_gen == l->ra_gen &&
               (l->ra_epoch - pe) * l->ra_per_epoch + (l->ra_index - pi) < need)
            pthread_cond_wait(&l->ra_cv, &l->ra_mu);
        if (l->ra_stop) break;
        seen_gen = l->ra_gen;
        pe = l->ra_epoch;
        pi = l->ra_index;
        pthread_mutex_unlock(&l->ra_mu);
        int64_t got = ra_pass(l, pe, pi, seen_gen);
        pthread_mutex_lock(&l->ra_mu);
        need = got / 4 > 1 ? got / 4 : 1;
    }
    pthread_mutex_unlock(&l->ra_mu);
    return NULL;
}

ct_status loader_ahead_start(ct_loader *l) {
    if (!l->src->i->ahead) return CT_OK;
    int64_t per_batch = (l->BT + 1) * 4;
    l->ra_batches = l->src->readahead / per_batch + 2;
    if (l->ra_batches > RA_MAX_BATCHES) l->ra_batches = RA_MAX_BATCHES;
    ct_status st = l->order->i->loc_new(l->order, &l->ra_loc);
    if (st) return st;
    l->ra_per_epoch = l->per_epoch;
    pthread_mutex_init(&l->ra_mu, NULL);
    pthread_cond_init(&l->ra_cv, NULL);
    l->ra_sync = true;
    if (pthread_create(&l->ra_thread, NULL, ra_main, l) != 0)
        return CT_ERR(CT_ERR_IO, "data.%s: cannot start the read-ahead thread", l->split_name);
    l->ra_running = true;
    return CT_OK;
}

void loader_ahead_stop(ct_loader *l) {
    if (l->ra_running) {
        pthread_mutex_lock(&l->ra_mu);
        l->ra_stop = true;
        pthread_cond_signal(&l->ra_cv);
        pthread_mutex_unlock(&l->ra_mu);
        pthread_join(l->ra_thread, NULL);
        l->ra_running = false;
    }
    if (l->ra_sync) {
        pthread_mutex_destroy(&l->ra_mu);
        pthread_cond_destroy(&l->ra_cv);
        l->ra_sync = false;
    }
    if (l->order) l->order->i->loc_free(l->order, l->ra_loc);
    l->ra_loc = NULL;
}

void loader_ahead_moved(ct_loader *l, bool jump) {
    if (!l->ra_running) return;
    pthread_mutex_lock(&l->ra_mu);
    l->ra_epoch = l->epoch;
    l->ra_index = l->index;
    l->ra_per_epoch = l->per_epoch;
    if (jump) l->ra_gen++;
    pthread_cond_signal(&l->ra_cv);
    pthread_mutex_unlock(&l->ra_mu);
}
