/*
 * Rows of whole examples from instruction shards (include/ctrain/loader.h,
 * "Instruction data"): recognising them, opening the .sft sidecars beside the
 * shards, the row plan of an epoch (order, shuffle, grouping by length,
 * packing), reading one batch's rows, and the consumer's position.
 * A plan is a pure function of (seed, epoch, B, T, world, accum, packing,
 * group_by_length, the shards). It is built the first time its epoch is
 * needed and shared by reference count between the caller's thread and the
 * prefetch thread through a small locked cache; each thread keeps its own
 * reference in its locator, the consumer one more for its current epoch, and
 * epoch 0's stays for reset. Unshuffled data has one plan for every epoch.
 * Leaves out: instruction data at URLs (the remote source refuses it) and the
 * windows of plain shards (loader_order.c).
 */
#include "data/loader/loader_int.h"

#include "data/shard/sft_shard.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SFT_FORMAT "ctrain-sft/1"
#define SFT_GROUP_RUN 50 /* group_by_length sorts runs of 50*B*world examples */
#define SFT_CACHE 3      /* plans kept for the other thread (beyond those in use) */
#define SFT_PATH_MAX 4096

/* The rows of one epoch: immutable once built, freed with its last reference. */
typedef struct sft_plan {
    int64_t epoch;        /* built for this epoch (0 for all of them when unshuffled) */
    int64_t rows;         /* rows that hold examples */
    int64_t batches;      /* micro-batches per rank: rows padded to B*world*accum, / (B*world) */
    int32_t *ex;          /* (E) example ids in row order */
    int32_t *row_start;   /* (rows + 1) row i holds ex[row_start[i] .. row_start[i+1]) */
    int64_t *counted_cum; /* (rows + 1) counted targets in the rows before row i */
    int refs;             /* the cache's and the users' references; under loader_sft.mu */
    uint64_t used;        /* clock of its last hand-out (cache eviction) */
} sft_plan;

struct loader_sft {
    ct_sft_shard **side; /* (n_shards) the sidecars */
    int64_t *ex_cum;     /* (n_shards + 1) examples in the shards before shard s */
    int64_t E;           /* examples */
    int32_t *len;        /* (E) tokens example x fills in its row: min(its tokens, T) */
    int32_t *cnt;        /* (E) its counted targets there */
    int64_t fixed;       /* batches per epoch when the same in every epoch, else -1 */
    ct_loader_sft_stats stats;
    sft_plan *plan0;     /* epoch 0's, kept for reset */
    sft_plan *cons;      /* the consumer's: that of l->epoch (the caller's thread only) */
    pthread_mutex_t mu;  /* guards cache[], clock and every plan's refs and used */
    bool mu_ready;
    sft_plan *cache[SFT_CACHE];
    uint64_t clock;
};

/* ------------------------------------------------------------ recognising */

bool loader_sft_manifest_says_sft(const char *text, size_t len) {
    /* most manifests are plain ones: no parse unless the name is there */
    if (!text || !strstr(text, SFT_FORMAT)) return false;
    cJSON *m = cJSON_ParseWithLength(text, len);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "format");
    bool yes = cJSON_IsString(f) && !strcmp(f->valuestring, SFT_FORMAT);
    cJSON_Delete(m);
    return yes;
}

ct_status loader_sft_detect(const ct_loader *l, bool *is_sft) {
    *is_sft = false;
    ct_source *src = l->src;
    int with = -1, without = -1;
    for (int i = 0; i < l->n_shards && (with < 0 || without < 0); i++) {
        if (src->i->has_side(src, i, ".sft")) {
            if (with < 0) with = i;
        } else if (without < 0) {
            without = i;
        }
    }
    if (with >= 0 && without >= 0) {
        char side[SFT_PATH_MAX];
        if (src->i->side_name(src, with, ".sft", side, sizeof side)) ct_error_clear();
        ct_status st = CT_ERR(CT_ERR_FORMAT, "the shards mix instruction data and plain tokens: "
                              "%s has its sidecar %s, but %s has no .sft beside it",
                              l->paths[with], side, l->paths[without]);
        ct_error_hint("keep one `ctrain prepare` output per directory (`--format sft` writes a "
                      ".sft beside every shard)");
        return st;
    }
    size_t mlen = 0;
    const char *m = with >= 0 ? NULL : src->i->manifest(src, &mlen);
    *is_sft = with >= 0 || loader_sft_manifest_says_sft(m, mlen);
    return CT_OK;
}

/* ------------------------------------------------------------------ plans */

static void plan_free(sft_plan *p) {
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
static ct_status plan_build(const ct_loader *l, int64_t epoch, sft_plan **out) {
    const struct loader_sft *x = l->sft;
    int64_t E = x->E, T = l->T;
    int64_t run = (int64_t)SFT_GROUP_RUN * l->B * l->world;
    if (run > E) run = E;
    *out = NULL;
    uint64_t *keys = NULL;
    sft_plan *p = calloc(1, sizeof *p);
    if (p) {
        p->ex = malloc((size_t)E * sizeof *p->ex);
        p->row_start = malloc(((size_t)E + 1) * sizeof *p->row_start);
        p->counted_cum = malloc(((size_t)E + 1) * sizeof *p->counted_cum);
    }
    if (l->group_by_length) keys = malloc((size_t)run * sizeof *keys);
    if (!p || !p->ex || !p->row_start || !p->counted_cum || (l->group_by_length && !keys)) {
        free(keys);
        plan_free(p);
        return CT_ERR(CT_ERR_OOM, "out of memory for the row plan of %" PRId64 " examples "
                      "(epoch %" PRId64 ")", E, epoch);
    }
    p->epoch = epoch;
    int32_t *ex = p->ex;
    for (int64_t i = 0; i < E; i++) ex[i] = (int32_t)i;
    if (l->shuffle) {
        /* Fisher-Yates driven by splitmix64, as the shard order of plain data */
        uint64_t state = loader_order_key(l->seed, epoch, 0);
        for (int64_t i = E - 1; i > 0; i--) {
            state += 0x9e3779b97f4a7c15ull;
            int64_t j = (int64_t)(loader_mix64(state) % (uint64_t)(i + 1));
            int32_t t = ex[i];
            ex[i] = ex[j];
            ex[j] = t;
        }
    }
    if (l->group_by_length) {
        /* longest first, stable: sort (T - n, place in the run) */
        for (int64_t lo = 0; lo < E; lo += run) {
            int64_t n = E - lo < run ? E - lo : run;
            for (int64_t k = 0; k < n; k++)
                keys[k] = (uint64_t)(T - x->len[ex[lo + k]]) << 32 | (uint64_t)k;
            qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
            for (int64_t k = 0; k < n; k++) keys[k] = (uint64_t)ex[lo + (int64_t)(keys[k] & 0xffffffffu)];
            for (int64_t k = 0; k < n; k++) ex[lo + k] = (int32_t)keys[k];
        }
    }
    /* rows: an example joins the row when it fits what is left, else starts one */
    int64_t r = 0, used = 0;
    for (int64_t k = 0; k < E; k++) {
        int64_t n = x->len[ex[k]];
        if (k == 0 || !l->packing || used + n > T) {
            p->row_start[r++] = (int32_t)k;
            used = 0;
        }
        used += n;
    }
    p->row_start[r] = (int32_t)E;
    p->rows = r;
    p->counted_cum[0] = 0;
    for (int64_t i = 0; i < r; i++) {
        int64_t c = 0;
        for (int64_t k = p->row_start[i]; k < p->row_start[i + 1]; k++) c += x->cnt[ex[k]];
        p->counted_cum[i + 1] = p->counted_cum[i] + c;
    }
    int64_t per_batch = (int64_t)l->B * l->world, step = per_batch * l->accum;
    p->batches = (r + step - 1) / step * step / per_batch;
    free(keys);
    *out = p;
    return CT_OK;
}

/* The plans of different epochs differ only when shuffled. */
static int64_t plan_key(const ct_loader *l, int64_t epoch) { return l->shuffle ? epoch : 0; }

/* Under mu: drop a reference. */
static void plan_unref_locked(sft_plan *p) {
    if (p && --p->refs == 0) plan_free(p);
}

/* One more reference to p (held by the caller already). */
static sft_plan *plan_ref(const ct_loader *l, sft_plan *p) {
    pthread_mutex_lock(&l->sft->mu);
    p->refs++;
    pthread_mutex_unlock(&l->sft->mu);
    return p;
}

static void plan_put(const ct_loader *l, sft_plan *p) {
    if (!p) return;
    pthread_mutex_lock(&l->sft->mu);
    plan_unref_locked(p);
    pthread_mutex_unlock(&l->sft->mu);
}

/* Under mu: a new reference to the cached plan of key, or NULL. */
static sft_plan *cache_find_locked(struct loader_sft *x, int64_t key) {
    for (int c = 0; c < SFT_CACHE; c++) {
        sft_plan *q = x->cache[c];
        if (q && q->epoch == key) {
            q->refs++;
            q->used = ++x->clock;
            return q;
        }
    }
    return NULL;
}

/* A reference to epoch's plan: from the cache, else built (outside the lock,
 * so the other thread is not held up) and cached in place of the least
 * recently used one. */
static ct_status plan_get(const ct_loader *l, int64_t epoch, sft_plan **out) {
    struct loader_sft *x = l->sft;
    int64_t key = plan_key(l, epoch);
    pthread_mutex_lock(&x->mu);
    *out = cache_find_locked(x, key);
    pthread_mutex_unlock(&x->mu);
    if (*out) return CT_OK;
    sft_plan *p;
    ct_status st = plan_build(l, key, &p);
    if (st) return st;
    pthread_mutex_lock(&x->mu);
    *out = cache_find_locked(x, key); /* built meanwhile by the other thread? */
    if (!*out) {
        int victim = 0;
        for (int c = 0; c < SFT_CACHE; c++) {
            if (!x->cache[c]) {
                victim = c;
                break;
            }
            if (x->cache[c]->used < x->cache[victim]->used) victim = c;
        }
        plan_unref_locked(x->cache[victim]);
        p->refs = 2; /* the cache's and the caller's */
        p->used = ++x->clock;
        x->cache[victim] = p;
        *out = p;
        p = NULL;
    }
    pthread_mutex_unlock(&x->mu);
    plan_free(p);
    return CT_OK;
}

/* loc's plan of epoch: kept in loc while it stays in that epoch. */
static ct_status loc_plan(const ct_loader *l, loader_locator *loc, int64_t epoch,
                          const sft_plan **out) {
    if (!loc->plan || loc->plan->epoch != plan_key(l, epoch)) {
        sft_plan *p;
        ct_status st = plan_get(l, epoch, &p);
        if (st) return st;
        plan_put(l, loc->plan);
        loc->plan = p;
    }
    *out = loc->plan;
    return CT_OK;
}

ct_status loader_sft_batches(const ct_loader *l, loader_locator *loc, int64_t epoch,
                             int64_t *out) {
    if (l->sft->fixed >= 0) {
        *out = l->sft->fixed;
        return CT_OK;
    }
    const sft_plan *p;
    ct_status st = loc_plan(l, loc, epoch, &p);
    if (st) return st;
    *out = p->batches;
    return CT_OK;
}

/* ---------------------------------------------------------------- opening */

ct_status loader_sft_open(ct_loader *l, const ct_loader_opts *o) {
    int n = l->n_shards;
    struct loader_sft *x = calloc(1, sizeof *x);
    if (!x) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    l->sft = x;
    l->packing = o->packing;
    l->group_by_length = o->group_by_length;
    l->accum = o->accum > 0 ? o->accum : 1;
    if ((int64_t)l->B * l->world > ((int64_t)1 << 40) / l->accum)
        return CT_ERR(CT_ERR_ARG, "loader for data.%s: %d rows x %d ranks x %d micro-batches "
                      "per step is too many rows per step", l->split_name, l->B, l->world,
                      l->accum);
    if (pthread_mutex_init(&x->mu, NULL) != 0)
        return CT_ERR(CT_ERR_OOM, "cannot create the loader's plan lock");
    x->mu_ready = true;
    x->side = calloc((size_t)n, sizeof *x->side);
    x->ex_cum = calloc((size_t)n + 1, sizeof *x->ex_cum);
    if (!x->side || !x->ex_cum) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    char side[SFT_PATH_MAX];
    ct_status st;
    ct_source *src = l->src;
    for (int i = 0; i < n; i++) {
        if (o->vocab_size > 0 && (st = src->i->check_tokens(src, i, o->vocab_size))) return st;
        ct_source_bytes b;
        if ((st = src->i->side_name(src, i, ".sft", side, sizeof side)) ||
            (st = src->i->side_open(src, i, ".sft", CT_SFT_HEADER_BYTES, ct_sft_file_msgs(), &b)) ||
            (st = ct_sft_open_mem(&x->side[i], side, b.data, b.len, b.release, src->ntok[i],
                                  l->paths[i])))
            return st;
        l->total_tokens += src->ntok[i];
        x->ex_cum[i + 1] = x->ex_cum[i] + ct_sft_num_examples(x->side[i]);
    }
    int64_t E = x->E = x->ex_cum[n];
    if (E > INT32_MAX - 1)
        return CT_ERR(CT_ERR_ARG, "%s: %" PRId64 " examples, more than a loader takes (%d)",
                      o->spec, E, INT32_MAX - 1);
    x->len = malloc((size_t)E * sizeof *x->len);
    x->cnt = malloc((size_t)E * sizeof *x->cnt);
    if (!x->len || !x->cnt) return CT_ERR(CT_ERR_OOM, "out of memory for %" PRId64 " examples", E);
    int64_t in_rows = 0, longest = 0;
    for (int s = 0; s < n; s++) {
        for (int64_t j = 0; j < ct_sft_num_examples(x->side[s]); j++) {
            int64_t a, b, id = x->ex_cum[s] + j;
            ct_sft_example_range(x->side[s], j, &a, &b);
            int64_t len = b - a;
            if (len > longest) longest = len;
            if (len > l->T) {
                x->stats.truncated++;
                len = l->T;
            }
            x->len[id] = (int32_t)len;
            /* an example's first token never counts: [a, a+len) = targets 1..len-1 */
            x->cnt[id] = (int32_t)ct_sft_count_range(x->side[s], a, a + len);
            in_rows += len;
            x->stats.counted += x->cnt[id];
        }
    }
    if ((st = plan_get(l, 0, &x->plan0))) return st;
    x->cons = plan_ref(l, x->plan0);
    x->fixed = l->shuffle && l->packing ? -1 : x->plan0->batches;
    l->per_epoch = x->plan0->batches;
    x->stats.examples = E;
    x->stats.rows = x->plan0->rows;
    x->stats.fill = (double)in_rows / ((double)x->plan0->rows * l->T);
    if (x->stats.truncated > 0 && l->rank == 0)
        ct_log(CT_LOG_WARN, "data.%s: %" PRId64 " of %" PRId64 " examples in %s are longer than "
               "a row of %d tokens (the longest has %" PRId64 "); each keeps its first %d "
               "tokens. `ctrain prepare --format sft --max-len %d` cuts or drops them when "
               "preparing", l->split_name, x->stats.truncated, E, o->spec, l->T, longest, l->T,
               l->T);
    return CT_OK;
}

void loader_sft_close(ct_loader *l) {
    struct loader_sft *x = l->sft;
    if (!x) return;
    /* the threads are stopped: no lock needed */
    loader_locator *locs[] = {&l->cons_loc, &l->read_loc, &l->ra_loc};
    for (size_t i = 0; i < sizeof locs / sizeof *locs; i++) {
        plan_unref_locked(locs[i]->plan);
        locs[i]->plan = NULL;
    }
    plan_unref_locked(x->cons);
    plan_unref_locked(x->plan0);
    for (int c = 0; c < SFT_CACHE; c++) plan_unref_locked(x->cache[c]);
    if (x->side)
        for (int i = 0; i < l->n_shards; i++) ct_sft_close(x->side[i]);
    free(x->side);
    free(x->ex_cum);
    free(x->len);
    free(x->cnt);
    if (x->mu_ready) pthread_mutex_destroy(&x->mu);
    free(x);
    l->sft = NULL;
}

/* ---------------------------------------------------------------- reading */

/* The shard of example id and its first token there. */
static void example_at(const ct_loader *l, int64_t id, int *shard, int64_t *start) {
    const struct loader_sft *x = l->sft;
    int lo = 0, hi = l->n_shards; /* ex_cum[lo] <= id < ex_cum[hi] */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (x->ex_cum[mid] <= id) lo = mid;
        else hi = mid;
    }
    int64_t end;
    ct_sft_example_range(x->side[lo], id - x->ex_cum[lo], start, &end);
    *shard = lo;
}

ct_status loader_sft_read(ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index,
                          int32_t *in, int32_t *tg, int32_t *pos) {
    const struct loader_sft *x = l->sft;
    const sft_plan *p;
    ct_status st = loc_plan(l, loc, epoch, &p);
    if (st) return st;
    CT_ASSERT(index >= 0 && index < p->batches);
    int64_t T = l->T, row0 = (index * l->world + l->rank) * l->B;
    for (int b = 0; b < l->B; b++) {
        int64_t row = row0 + b, c = 0;
        int32_t *ri = in + b * T, *rt = tg + b * T, *rp = pos ? pos + b * T : NULL;
        int64_t k0 = row < p->rows ? p->row_start[row] : 0;
        int64_t k1 = row < p->rows ? p->row_start[row + 1] : 0; /* empty rows: none */
        for (int64_t k = k0; k < k1; k++) {
            int32_t id = p->ex[k];
            int s;
            int64_t a, n = x->len[id];
            example_at(l, id, &s, &a);
            CT_ASSERT(c + n <= T);
            if ((st = l->src->i->read(l->src, s, a, n, ri + c))) return st;
            /* token t+1's bit says whether predicting it from token t counts */
            for (int64_t t = 0; t < n; t++) {
                rt[c + t] = t + 1 < n && ct_sft_counts(x->side[s], a + t + 1) ? ri[c + t + 1] : -1;
                if (rp) rp[c + t] = (int32_t)t;
            }
            c += n;
        }
        for (int64_t k = c; k < T; k++) { /* padding */
            ri[k] = 0;
            rt[k] = -1;
            if (rp) rp[k] = (int32_t)(k - c);
        }
    }
    return CT_OK;
}

void loader_sft_willneed(const ct_loader *l, loader_locator *loc, int64_t epoch, int64_t index) {
    const sft_plan *p;
    if (loc_plan(l, loc, epoch, &p)) {
        ct_error_clear(); /* only a hint; the read reports it */
        return;
    }
    int64_t r0 = (index * l->world + l->rank) * l->B, r1 = r0 + l->B;
    if (r0 >= p->rows) return;
    if (r1 > p->rows) r1 = p->rows;
    int cur = -1;
    int64_t lo = 0, hi = 0; /* tokens [lo, hi) of shard cur, merged while contiguous */
    for (int64_t k = p->row_start[r0]; k <= p->row_start[r1]; k++) {
        int s = -1;
        int64_t a = 0, n = 0;
        if (k < p->row_start[r1]) {
            example_at(l, p->ex[k], &s, &a);
            n = l->sft->len[p->ex[k]];
            if (s == cur && a == hi) {
                hi += n;
                continue;
            }
        }
        if (cur >= 0) l->src->i->willneed(l->src, cur, lo, hi - lo);
        cur = s;
        lo = a;
        hi = a + n;
    }
}

/* --------------------------------------------------------------- position */

/* The first example of rank's batch `index` in plan p: its shard and first
 * token there; -1/-1 for a batch of empty rows. */
static void first_example(const ct_loader *l, const sft_plan *p, int rank, int64_t index,
                          int32_t *shard, int64_t *offset) {
    int64_t row = (index * l->world + rank) * l->B;
    if (row >= p->rows) {
        *shard = -1;
        *offset = -1;
        return;
    }
    int s;
    example_at(l, p->ex[p->row_start[row]], &s, offset);
    *shard = s;
}

/* A reference to epoch's plan for the consumer: its own when it is there. */
static ct_status cons_get(ct_loader *l, int64_t epoch, sft_plan **out) {
    struct loader_sft *x = l->sft;
    if (x->cons->epoch == plan_key(l, epoch)) {
        *out = plan_ref(l, x->cons);
        return CT_OK;
    }
    return plan_get(l, epoch, out);
}

ct_status loader_sft_step(ct_loader *l, int64_t n, int64_t *epoch, int64_t *index,
                          struct sft_plan **pin) {
    int64_t e = l->epoch, i = l->index;
    ct_status st;
    if (n < l->per_epoch - i) {
        i += n; /* inside the consumer's epoch: its plan is pinned */
    } else if ((st = loader_advance(l, &l->cons_loc, &e, &i, n))) {
        return st;
    }
    if ((st = cons_get(l, e, pin))) return st;
    *epoch = e;
    *index = i;
    return CT_OK;
}

void loader_sft_commit(ct_loader *l, int64_t epoch, int64_t index, struct sft_plan *pin) {
    struct loader_sft *x = l->sft;
    plan_put(l, x->cons);
    x->cons = pin;
    l->epoch = epoch;
    l->index = index;
    l->per_epoch = pin->batches;
}

void loader_sft_unpin(ct_loader *l, struct sft_plan *pin) { plan_put(l, pin); }

void loader_sft_reset(ct_loader *l) {
    loader_sft_commit(l, 0, 0, plan_ref(l, l->sft->plan0));
}

void loader_sft_get_pos(ct_loader *l, ct_loader_pos *out) {
    memset(out, 0, sizeof *out);
    out->epoch = l->epoch;
    out->index = l->index;
    first_example(l, l->sft->cons, l->rank, l->index, &out->shard, &out->offset);
    out->shuffled = loader_pos_mode(l);
}

/* "token N of PATH", or "an empty batch" for shard -1. */
static const char *where(const ct_loader *l, int32_t shard, int64_t offset, char *buf,
                         size_t cap) {
    if (shard < 0) snprintf(buf, cap, "a batch of empty rows");
    else snprintf(buf, cap, "the example at token %" PRId64 " of %s", offset, l->paths[shard]);
    return buf;
}

ct_status loader_sft_set_pos(ct_loader *l, const ct_loader_pos *pos) {
    sft_plan *p;
    ct_status st = cons_get(l, pos->epoch, &p);
    if (st) return st;
    if (pos->index < 0 || pos->index >= p->batches) {
        st = CT_ERR(CT_ERR_ARG, "loader position: index %" PRId64 " is outside epoch %" PRId64
                    ": rank %d takes %" PRId64 " batches in it (expected 0..%" PRId64 ")",
                    pos->index, pos->epoch, l->rank, p->batches, p->batches - 1);
        ct_error_hint("the position was saved with other shards, batch shape, seed, world size "
                      "or train.grad_accum");
        plan_put(l, p);
        return st;
    }
    if (pos->shard < -1 || pos->shard >= l->n_shards || (pos->shard == -1) != (pos->offset == -1)) {
        plan_put(l, p);
        return CT_ERR(CT_ERR_ARG, "loader position: shard %" PRId32 " offset %" PRId64 " is out "
                      "of range: the loader has %d shard(s) (-1/-1: a batch of empty rows)",
                      pos->shard, pos->offset, l->n_shards);
    }
    int32_t s;
    int64_t off;
    first_example(l, p, l->rank, pos->index, &s, &off);
    if ((s != pos->shard || off != pos->offset) && l->rank != 0) {
        /* a position rank 0 took (the one a checkpoint keeps) fits too */
        int32_t s0;
        int64_t off0;
        first_example(l, p, 0, pos->index, &s0, &off0);
        if (s0 == pos->shard && off0 == pos->offset) {
            s = s0;
            off = off0;
        }
    }
    if (s != pos->shard || off != pos->offset) {
        char here[SFT_PATH_MAX + 64], there[SFT_PATH_MAX + 64];
        st = CT_ERR(CT_ERR_ARG, "loader position: epoch %" PRId64 " index %" PRId64 " starts "
                    "with %s here, but the position says %s", pos->epoch, pos->index,
                    where(l, s, off, here, sizeof here),
                    where(l, pos->shard, pos->offset, there, sizeof there));
        ct_error_hint("the position was saved with other shards, batch shape, seed, rank or "
                      "world size");
        plan_put(l, p);
        return st;
    }
    loader_sft_commit(l, pos->epoch, pos->index, p);
    return CT_OK;
}

/* ------------------------------------------------------------- public calls */

bool ct_loader_is_sft(const ct_loader *l) { return l && l->sft; }

int64_t ct_loader_counted_ahead(ct_loader *l, int64_t n) {
    if (n <= 0) return 0;
    int64_t rows_per = (int64_t)l->world * l->B; /* rows of one index, all ranks */
    if (!l->sft) return n * rows_per * l->T;
    const sft_plan *p = l->sft->cons;
    int64_t e = l->epoch, i = l->index, total = 0;
    for (;;) {
        /* indices [i, i + take) of epoch e are rows [i*rows_per, (i+take)*rows_per) */
        int64_t take = n < p->batches - i ? n : p->batches - i;
        int64_t r0 = i * rows_per, r1 = (i + take) * rows_per;
        if (r0 > p->rows) r0 = p->rows;
        if (r1 > p->rows) r1 = p->rows;
        total += p->counted_cum[r1] - p->counted_cum[r0];
        n -= take;
        if (n == 0) return total;
        e++;
        i = 0;
        if (loc_plan(l, &l->cons_loc, e, &p)) return -1;
    }
}

int64_t ct_loader_batches_in_epoch(ct_loader *l, int64_t epoch) {
    if (epoch < 0) return -1;
    if (!l->sft) return l->per_epoch;
    if (plan_key(l, epoch) == l->sft->cons->epoch) return l->sft->cons->batches;
    int64_t n;
    return loader_sft_batches(l, &l->cons_loc, epoch, &n) ? -1 : n;
}

bool ct_loader_sft_stats_get(const ct_loader *l, ct_loader_sft_stats *out) {
    memset(out, 0, sizeof *out);
    if (!l || !l->sft) return false;
    *out = l->sft->stats;
    return true;
}
