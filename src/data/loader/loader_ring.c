/*
 * The loader's prefetch thread: it reads the batches the consumer will take
 * next, in that order, into a ring of `prefetch` slots. One mutex guards the
 * ring; the thread sleeps on not_full, the consumer on not_empty (no busy
 * waiting). Slot contents are written and read outside the lock: the thread
 * only writes the slot after the last ready one, which the consumer does not
 * touch until the thread publishes it, and the consumer only reads ready
 * slots, which the thread does not touch until the consumer frees them.
 * A restart (reset, set_pos, a long skip) empties the ring and bumps `gen`,
 * so a read already under way is dropped instead of published.
 * Waking a sleeping thread costs a system call (about 10 us on small VMs,
 * more than reading a batch from the page cache), so the consumer wakes the
 * thread only when the ring falls to half full, not after every batch, and
 * both sides signal after unlocking so the woken thread does not block on the
 * mutex at once.
 * Leaves out: more than one reader thread (one keeps up with a training step
 * by orders of magnitude).
 */
#include "data/loader/loader_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copy this thread's last error into the loader (under mu). */
static void ring_keep_error(ct_loader *l, ct_status st) {
    l->err = st;
    snprintf(l->err_msg, sizeof l->err_msg, "%s", ct_last_error());
    snprintf(l->err_hint, sizeof l->err_hint, "%s", ct_last_hint());
    snprintf(l->err_site, sizeof l->err_site, "%s", ct_last_site());
}

static void *ring_main(void *arg) {
    ct_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && (l->count == l->prefetch || l->err != CT_OK))
            pthread_cond_wait(&l->not_full, &l->mu);
        if (l->stop) break;
        uint64_t gen = l->gen;
        int64_t epoch = l->prod_epoch, index = l->prod_index;
        loader_slot *slot = &l->slots[(l->head + l->count) % l->prefetch];
        pthread_mutex_unlock(&l->mu);

        ct_status st = loader_read_at(l, l->read_loc, epoch, index, slot->in, slot->tg,
                                      slot->pos, &slot->counted);
        int64_t next_epoch = epoch, next_index = index;
        if (st == CT_OK)
            st = loader_order_advance(l->order, l->read_loc, &next_epoch, &next_index, 1);
        /* ask the source for the following batch while the consumer works */
        if (st == CT_OK) loader_willneed(l, l->read_loc, next_epoch, next_index);

        pthread_mutex_lock(&l->mu);
        if (gen != l->gen) continue; /* restarted meanwhile: drop this read */
        if (st != CT_OK) {
            ring_keep_error(l, st);
        } else {
            slot->epoch = epoch;
            slot->index = index;
            l->prod_epoch = next_epoch;
            l->prod_index = next_index;
            l->count++;
        }
        pthread_mutex_unlock(&l->mu);
        pthread_cond_signal(&l->not_empty); /* no system call unless the consumer waits */
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

ct_status loader_ring_start(ct_loader *l) {
    l->slots = calloc((size_t)l->prefetch, sizeof *l->slots);
    if (!l->slots) return CT_ERR(CT_ERR_OOM, "out of memory for the prefetch ring");
    for (int i = 0; i < l->prefetch; i++) {
        l->slots[i].in = malloc((size_t)l->BT * sizeof(int32_t));
        l->slots[i].tg = malloc((size_t)l->BT * sizeof(int32_t));
        bool pos = !l->kind->plain_pos;
        if (pos) l->slots[i].pos = malloc((size_t)l->BT * sizeof(int32_t));
        if (!l->slots[i].in || !l->slots[i].tg || (pos && !l->slots[i].pos))
            return CT_ERR(CT_ERR_OOM, "out of memory for the prefetch ring (%d batches of "
                          "%lld tokens)", l->prefetch, (long long)l->BT);
    }
    if (pthread_mutex_init(&l->mu, NULL) != 0)
        return CT_ERR(CT_ERR_OOM, "cannot create the prefetch ring's mutex");
    if (pthread_cond_init(&l->not_empty, NULL) != 0) {
        pthread_mutex_destroy(&l->mu);
        return CT_ERR(CT_ERR_OOM, "cannot create the prefetch ring's condition");
    }
    if (pthread_cond_init(&l->not_full, NULL) != 0) {
        pthread_cond_destroy(&l->not_empty);
        pthread_mutex_destroy(&l->mu);
        return CT_ERR(CT_ERR_OOM, "cannot create the prefetch ring's condition");
    }
    l->sync_ready = true;
    l->head = l->count = 0;
    l->prod_epoch = l->epoch;
    l->prod_index = l->index;
    l->err = CT_OK;
    l->stop = false;
    int rc = pthread_create(&l->thread, NULL, ring_main, l);
    if (rc != 0) {
        ct_status st = CT_ERR(CT_ERR_IO, "cannot start the loader's prefetch thread: %s",
                              strerror(rc));
        ct_error_hint("set data.prefetch=0 to read on the training thread");
        return st;
    }
    l->running = true;
    return CT_OK;
}

void loader_ring_stop(ct_loader *l) {
    if (l->running) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_signal(&l->not_full);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        l->running = false;
    }
    if (l->sync_ready) {
        pthread_cond_destroy(&l->not_full);
        pthread_cond_destroy(&l->not_empty);
        pthread_mutex_destroy(&l->mu);
        l->sync_ready = false;
    }
    if (l->slots) {
        for (int i = 0; i < l->prefetch; i++) {
            free(l->slots[i].in);
            free(l->slots[i].tg);
            free(l->slots[i].pos);
        }
        free(l->slots);
        l->slots = NULL;
    }
}

/* Re-raise the thread's error on the consumer's thread, keeping its site. */
static ct_status ring_raise(ct_status st, const char *msg, const char *hint, const char *site) {
    char file[128];
    int line = 0;
    snprintf(file, sizeof file, "%s", site);
    char *colon = strrchr(file, ':');
    if (colon) {
        line = atoi(colon + 1);
        *colon = '\0';
    }
    ct_error_set(st, file[0] ? file : "loader_ring.c", line, "%s", msg);
    if (hint[0]) ct_error_hint("%s", hint);
    return st;
}

ct_status loader_ring_pop(ct_loader *l, int32_t *in, int32_t *tg, int32_t *pos,
                          int64_t *counted) {
    pthread_mutex_lock(&l->mu);
    while (l->count == 0 && l->err == CT_OK) pthread_cond_wait(&l->not_empty, &l->mu);
    if (l->count == 0) {
        ct_status st = l->err;
        char msg[LOADER_MSG_MAX], hint[LOADER_MSG_MAX], site[128];
        memcpy(msg, l->err_msg, sizeof msg);
        memcpy(hint, l->err_hint, sizeof hint);
        memcpy(site, l->err_site, sizeof site);
        pthread_mutex_unlock(&l->mu);
        return ring_raise(st, msg, hint, site);
    }
    const loader_slot *slot = &l->slots[l->head];
    pthread_mutex_unlock(&l->mu);

    /* the ring delivers batches in exactly the consumer's order */
    CT_ASSERT(slot->epoch == l->epoch && slot->index == l->index);
    memcpy(in, slot->in, (size_t)l->BT * sizeof *in);
    memcpy(tg, slot->tg, (size_t)l->BT * sizeof *tg);
    if (pos && slot->pos) memcpy(pos, slot->pos, (size_t)l->BT * sizeof *pos);
    *counted = slot->counted;

    pthread_mutex_lock(&l->mu);
    l->head = (l->head + 1) % l->prefetch;
    l->count--;
    /* the thread sleeps only on a full ring: wake it once, at half full */
    bool wake = l->count == l->prefetch / 2;
    pthread_mutex_unlock(&l->mu);
    if (wake) pthread_cond_signal(&l->not_full);
    return CT_OK;
}

/* Under mu: empty the ring and point the thread at the consumer's position. */
static void ring_restart_locked(ct_loader *l) {
    l->gen++;
    l->head = l->count = 0;
    l->err = CT_OK;
    l->prod_epoch = l->epoch;
    l->prod_index = l->index;
    pthread_cond_signal(&l->not_full);
}

void loader_ring_restart(ct_loader *l) {
    pthread_mutex_lock(&l->mu);
    ring_restart_locked(l);
    pthread_mutex_unlock(&l->mu);
}

void loader_ring_drop(ct_loader *l, int64_t n) {
    pthread_mutex_lock(&l->mu);
    if (n <= l->count) {
        l->head = (int)((l->head + n) % l->prefetch);
        l->count -= (int)n;
        pthread_cond_signal(&l->not_full);
    } else {
        ring_restart_locked(l);
    }
    pthread_mutex_unlock(&l->mu);
}
