/*
 * The plan order (order.h) of examples with their own lengths (instruction
 * examples; include/ctrain/loader.h, "Instruction data", gives the rules):
 * the plan of an epoch is its examples' order (a seeded Fisher-Yates
 * permutation, or 0..E-1), runs of 50*B*world examples sorted longest first
 * (group_by_length), rows filled greedily (packing) or one example each,
 * and empty rows up to whole optimizer steps of all ranks.
 * A plan is a pure function of (seed, epoch, B, world, accum, packing,
 * group_by_length, the kind's lengths). It is built the first time its epoch
 * is needed and shared by reference count between the threads through a
 * small locked cache; each locator keeps a reference to the plan of its
 * epoch, and epoch 0's stays for reset (seeking epoch 0 never fails).
 * Unshuffled data has one plan for every epoch.
 * Leaves out: what an example is and reading it (the kind), streams of
 * whole-row examples (order_stream.c).
 */
#include "data/loader/order.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_GROUP_RUN 50 /* group_by_length sorts runs of 50*B*world examples */
#define PLAN_CACHE 3      /* plans kept for the other threads (beyond those in use) */

/* The rows of one epoch: immutable once built, freed with its last reference. */
typedef struct plan {
    int64_t epoch;        /* built for this epoch (0 for all of them when unshuffled) */
    int64_t rows;         /* rows that hold examples */
    int64_t batches;      /* micro-batches per rank: rows padded to B*world*accum, / (B*world) */
    int32_t *ex;          /* (E) example ids in row order */
    int32_t *row_start;   /* (rows + 1) row i holds ex[row_start[i] .. row_start[i+1]) */
    int64_t *counted_cum; /* (rows + 1) counted targets in the rows before row i */
    int refs;             /* the cache's and the users' references; under plan_order.mu */
    uint64_t used;        /* clock of its last hand-out (cache eviction) */
} plan;

typedef struct plan_order {
    loader_order base;
    const loader_kind *k;
    int B, world, accum;
    bool shuffle, packing, group_by_length;
    uint64_t seed;
    plan *plan0;        /* epoch 0's, kept for reset */
    pthread_mutex_t mu; /* guards cache[], clock and every plan's refs and used */
    bool mu_ready;
    plan *cache[PLAN_CACHE];
    uint64_t clock;
} plan_order;

typedef struct plan_loc {
    loader_loc base;
    plan *p;           /* a reference to the plan of base.epoch, or NULL */
    int64_t *ex;       /* (cap) the examples of the batch laid out last */
    size_t cap;
    int32_t *row_start; /* (B + 1) */
} plan_loc;

/* ------------------------------------------------------------------ plans */

static void plan_free(plan *p) {
    if (!p) return;
    free(p->ex);
    free(p->row_start);
    free(p->counted_cum);
    free(p);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The plan of epoch (see loader.h): order, shuffle, groups, rows, padding. */
static ct_status plan_build(const plan_order *o, int64_t epoch, plan **out) {
    const loader_kind *k = o->k;
    int64_t E = k->n, T = k->width;
    int64_t run = (int64_t)PLAN_GROUP_RUN * o->B * o->world;
    if (run > E) run = E;
    *out = NULL;
    uint64_t *keys = NULL;
    plan *p = calloc(1, sizeof *p);
    if (p) {
        p->ex = malloc((size_t)E * sizeof *p->ex);
        p->row_start = malloc(((size_t)E + 1) * sizeof *p->row_start);
        p->counted_cum = malloc(((size_t)E + 1) * sizeof *p->counted_cum);
    }
    if (o->group_by_length) keys = malloc((size_t)run * sizeof *keys);
    if (!p || !p->ex || !p->row_start || !p->counted_cum || (o->group_by_length && !keys)) {
        free(keys);
        plan_free(p);
        return CT_ERR(CT_ERR_OOM, "out of memory for the row plan of %" PRId64 " examples "
                      "(epoch %" PRId64 ")", E, epoch);
    }
    p->epoch = epoch;
    int32_t *ex = p->ex;
    for (int64_t i = 0; i < E; i++) ex[i] = (int32_t)i;
    if (o->shuffle) {
        /* Fisher-Yates driven by splitmix64, as the shard order of a stream */
        uint64_t state = loader_order_key(o->seed, epoch, 0);
        for (int64_t i = E - 1; i > 0; i--) {
            state += 0x9e3779b97f4a7c15ull;
            int64_t j = (int64_t)(loader_mix64(state) % (uint64_t)(i + 1));
            int32_t t = ex[i];
            ex[i] = ex[j];
            ex[j] = t;
        }
    }
    if (o->group_by_length) {
        /* longest first, stable: sort (T - n, place in the run) */
        for (int64_t lo = 0; lo < E; lo += run) {
            int64_t n = E - lo < run ? E - lo : run;
            for (int64_t j = 0; j < n; j++)
                keys[j] = (uint64_t)(T - k->len[ex[lo + j]]) << 32 | (uint64_t)j;
            qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
            for (int64_t j = 0; j < n; j++) keys[j] = (uint64_t)ex[lo + (int64_t)(keys[j] & 0xffffffffu)];
            for (int64_t j = 0; j < n; j++) ex[lo + j] = (int32_t)keys[j];
        }
    }
    /* rows: an example joins the row when it fits what is left, else starts one */
    int64_t r = 0, used = 0;
    for (int64_t j = 0; j < E; j++) {
        int64_t n = k->len[ex[j]];
        if (j == 0 || !o->packing || used + n > T) {
            p->row_start[r++] = (int32_t)j;
            used = 0;
        }
        used += n;
    }
    p->row_start[r] = (int32_t)E;
    p->rows = r;
    p->counted_cum[0] = 0;
    for (int64_t i = 0; i < r; i++) {
        int64_t c = 0;
        for (int64_t j = p->row_start[i]; j < p->row_start[i + 1]; j++)
            c += k->cnt ? k->cnt[ex[j]] : k->len[ex[j]] - 1; /* no mask: all but the last */
        p->counted_cum[i + 1] = p->counted_cum[i] + c;
    }
    int64_t per_batch = (int64_t)o->B * o->world, step = per_batch * o->accum;
    p->batches = (r + step - 1) / step * step / per_batch;
    free(keys);
    *out = p;
    return CT_OK;
}

/* The plans of different epochs differ only when shuffled. */
static int64_t plan_key(const plan_order *o, int64_t epoch) { return o->shuffle ? epoch : 0; }

/* Under mu (or with no other thread left): drop a reference. */
static void plan_unref_locked(plan *p) {
    if (p && --p->refs == 0) plan_free(p);
}

static void plan_put(plan_order *o, plan *p) {
    if (!p) return;
    pthread_mutex_lock(&o->mu);
    plan_unref_locked(p);
    pthread_mutex_unlock(&o->mu);
}

/* Under mu: a new reference to the cached plan of key, or NULL. */
static plan *cache_find_locked(plan_order *o, int64_t key) {
    if (key == 0) { /* epoch 0's never leaves */
        o->plan0->refs++;
        return o->plan0;
    }
    for (int c = 0; c < PLAN_CACHE; c++) {
        plan *q = o->cache[c];
        if (q && q->epoch == key) {
            q->refs++;
            q->used = ++o->clock;
            return q;
        }
    }
    return NULL;
}

/* A reference to epoch's plan: from the cache, else built (outside the lock,
 * so the other threads are not held up) and cached in place of the least
 * recently used one. */
static ct_status plan_get(plan_order *o, int64_t epoch, plan **out) {
    int64_t key = plan_key(o, epoch);
    pthread_mutex_lock(&o->mu);
    *out = cache_find_locked(o, key);
    pthread_mutex_unlock(&o->mu);
    if (*out) return CT_OK;
    plan *p;
    ct_status st = plan_build(o, key, &p);
    if (st) return st;
    pthread_mutex_lock(&o->mu);
    *out = cache_find_locked(o, key); /* built meanwhile by another thread? */
    if (!*out) {
        int victim = 0;
        for (int c = 0; c < PLAN_CACHE; c++) {
            if (!o->cache[c]) {
                victim = c;
                break;
            }
            if (o->cache[c]->used < o->cache[victim]->used) victim = c;
        }
        plan_unref_locked(o->cache[victim]);
        p->refs = 2; /* the cache's and the caller's */
        p->used = ++o->clock;
        o->cache[victim] = p;
        *out = p;
        p = NULL;
    }
    pthread_mutex_unlock(&o->mu);
    plan_free(p);
    return CT_OK;
}

/* ---------------------------------------------------------------- the order */

static void plan_close(loader_order *base) {
    plan_order *o = (plan_order *)base;
    /* every locator is freed: no other thread */
    plan_unref_locked(o->plan0);
    for (int c = 0; c < PLAN_CACHE; c++) plan_unref_locked(o->cache[c]);
    if (o->mu_ready) pthread_mutex_destroy(&o->mu);
    free(o);
}

static ct_status plan_open(loader_order **out, const loader_kind *k, const loader_order_opts *opt) {
    *out = NULL;
    plan_order *o = calloc(1, sizeof *o);
    if (!o) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    o->base.i = &loader_order_plan_i;
    o->base.mode = (opt->shuffle ? 1 : 0) | (opt->packing ? 4 : 0) | (opt->group_by_length ? 8 : 0);
    o->k = k;
    o->B = opt->B;
    o->world = opt->world;
    o->accum = opt->accum > 0 ? opt->accum : 1;
    o->shuffle = opt->shuffle;
    o->packing = opt->packing;
    o->group_by_length = opt->group_by_length;
    o->seed = opt->seed;
    ct_status st = CT_OK;
    if ((int64_t)o->B * o->world > ((int64_t)1 << 40) / o->accum)
        st = CT_ERR(CT_ERR_ARG, "loader for data.%s: %d rows x %d ranks x %d micro-batches "
                    "per step is too many rows per step", opt->split, o->B, o->world, o->accum);
    else if (k->n > INT32_MAX - 1)
        st = CT_ERR(CT_ERR_ARG, "%s: %" PRId64 " %ss, more than a loader takes (%d)", opt->spec,
                    k->n, k->noun, INT32_MAX - 1);
    else if (pthread_mutex_init(&o->mu, NULL) != 0)
        st = CT_ERR(CT_ERR_OOM, "cannot create the loader's plan lock");
    else
        o->mu_ready = true;
    if (st == CT_OK && (st = plan_build(o, 0, &o->plan0)) == CT_OK) o->plan0->refs = 1;
    if (st) {
        plan_close(&o->base);
        return st;
    }
    o->base.fixed = o->shuffle && o->packing ? -1 : o->plan0->batches;
    *out = &o->base;
    return CT_OK;
}

static ct_status plan_loc_new(loader_order *base, loader_loc **out) {
    plan_order *o = (plan_order *)base;
    *out = NULL;
    plan_loc *loc = calloc(1, sizeof *loc);
    if (!loc || !(loc->row_start = calloc((size_t)o->B + 1, sizeof *loc->row_start))) {
        free(loc);
        return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    }
    loc->base.epoch = -1;
    *out = &loc->base;
    return CT_OK;
}

static void plan_loc_free(loader_order *base, loader_loc *l) {
    plan_loc *loc = (plan_loc *)l;
    if (!loc) return;
    plan_put((plan_order *)base, loc->p);
    free(loc->ex);
    free(loc->row_start);
    free(loc);
}

static ct_status plan_seek(loader_order *base, loader_loc *l, int64_t epoch) {
    plan_order *o = (plan_order *)base;
    plan_loc *loc = (plan_loc *)l;
    if (!loc->p || loc->p->epoch != plan_key(o, epoch)) {
        plan *p;
        ct_status st = plan_get(o, epoch, &p);
        if (st) return st;
        plan_put(o, loc->p);
        loc->p = p;
    }
    l->epoch = epoch;
    return CT_OK;
}

static int64_t plan_batches(const loader_order *base, const loader_loc *l) {
    (void)base;
    return ((const plan_loc *)l)->p->batches;
}

static int64_t plan_rows(const loader_order *base, const loader_loc *l) {
    (void)base;
    return ((const plan_loc *)l)->p->rows;
}

static ct_status plan_batch(loader_order *base, loader_loc *l, int rank, int64_t index,
                            loader_batch *out) {
    plan_order *o = (plan_order *)base;
    plan_loc *loc = (plan_loc *)l;
    const plan *p = loc->p;
    CT_ASSERT(p && index >= 0 && index < p->batches);
    /* rows [row0, row0 + B); those past p->rows are empty */
    int64_t row0 = (index * o->world + rank) * o->B;
    int64_t r0 = row0 < p->rows ? row0 : p->rows;
    int64_t r1 = row0 + o->B < p->rows ? row0 + o->B : p->rows;
    int64_t k0 = p->row_start[r0], n = p->row_start[r1] - k0;
    if ((size_t)n > loc->cap) {
        size_t cap = loc->cap * 2 > (size_t)n ? loc->cap * 2 : (size_t)n;
        int64_t *ex = realloc(loc->ex, cap * sizeof *ex);
        if (!ex)
            return CT_ERR(CT_ERR_OOM, "out of memory for a batch of %" PRId64 " examples", n);
        loc->ex = ex;
        loc->cap = cap;
    }
    for (int64_t j = 0; j < n; j++) loc->ex[j] = p->ex[k0 + j];
    for (int b = 0; b <= o->B; b++) {
        int64_t r = row0 + b < p->rows ? row0 + b : p->rows;
        loc->row_start[b] = (int32_t)(p->row_start[r] - k0);
    }
    out->rows = o->B;
    out->ex = loc->ex;
    out->row_start = loc->row_start;
    return CT_OK;
}

static bool plan_first(loader_order *base, loader_loc *l, int rank, int64_t index, int64_t *x) {
    const plan_order *o = (const plan_order *)base;
    const plan *p = ((const plan_loc *)l)->p;
    int64_t row = (index * o->world + rank) * o->B;
    if (row >= p->rows) return false;
    *x = p->ex[p->row_start[row]];
    return true;
}

static int64_t plan_counted(const loader_order *base, const loader_loc *l, int64_t i0,
                            int64_t i1) {
    const plan_order *o = (const plan_order *)base;
    const plan *p = ((const plan_loc *)l)->p;
    /* indices [i0, i1) are rows [i0*rows_per, i1*rows_per) */
    int64_t rows_per = (int64_t)o->world * o->B;
    int64_t r0 = i0 * rows_per, r1 = i1 * rows_per;
    if (r0 > p->rows) r0 = p->rows;
    if (r1 > p->rows) r1 = p->rows;
    return p->counted_cum[r1] - p->counted_cum[r0];
}

const loader_order_i loader_order_plan_i = {
    .name = "plan",
    .open = plan_open,
    .close = plan_close,
    .loc_new = plan_loc_new,
    .loc_free = plan_loc_free,
    .seek = plan_seek,
    .batches = plan_batches,
    .rows = plan_rows,
    .batch = plan_batch,
    .first = plan_first,
    .counted = plan_counted,
};
