/*
 * The instruction-example kind (kind.h; include/ctrain/loader.h,
 * "Instruction data"): shards with .sft sidecars (data/shard/sft_shard.h)
 * beside them, or whose manifest says ctrain-sft/1. Example j of shard s is
 * its sidecar's example j; it fills min(its tokens, T) columns of a row
 * (longer ones keep their first T tokens), token k at position k, its
 * target the next token when that token's mask bit is set, else -1. The
 * columns after a row's examples are padding: input 0, target -1, positions
 * counting on from 0.
 * Leaves out: which examples share a row and when (order_plan.c), where the
 * bytes come from (the source: files beside the shards, or fetched).
 */
#include "data/loader/kind.h"

#include "data/shard/sft_shard.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SFT_FORMAT "ctrain-sft/1"
#define SFT_SUFFIX ".sft"
#define SFT_NAME_MAX 4096

typedef struct sft_kind {
    loader_kind base;
    ct_source *src;
    int T;
    ct_sft_shard **side; /* (n_shards) the sidecars */
    int32_t *len;        /* (E) tokens example x fills in its row: min(its tokens, T) */
    int32_t *cnt;        /* (E) its counted targets there */
    ct_loader_sft_stats stats; /* examples, truncated, counted (rows and fill: the order's) */
    int64_t row_tokens;  /* the sum of len: the columns examples fill in an epoch */
    char split[32];
} sft_kind;

/* ------------------------------------------------------------ recognising */

/* Whether a manifest's text says "format": "ctrain-sft/1". */
static bool manifest_says_sft(const char *text, size_t len) {
    /* most manifests are plain ones: no parse unless the name is there */
    if (!text || !strstr(text, SFT_FORMAT)) return false;
    cJSON *m = cJSON_ParseWithLength(text, len);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "format");
    bool yes = cJSON_IsString(f) && !strcmp(f->valuestring, SFT_FORMAT);
    cJSON_Delete(m);
    return yes;
}

/* A sidecar beside some shard, or the manifest saying so; every shard or
 * none must have one. */
static ct_status sft_detect(ct_source *src, bool *yes) {
    *yes = false;
    int with = -1, without = -1;
    for (int i = 0; i < src->n && (with < 0 || without < 0); i++) {
        if (src->i->has_side(src, i, SFT_SUFFIX)) {
            if (with < 0) with = i;
        } else if (without < 0) {
            without = i;
        }
    }
    if (with >= 0 && without >= 0) {
        char side[SFT_NAME_MAX];
        if (src->i->side_name(src, with, SFT_SUFFIX, side, sizeof side)) {
            ct_error_clear();
            snprintf(side, sizeof side, "(a .sft)");
        }
        ct_status st = CT_ERR(CT_ERR_FORMAT, "the shards mix instruction data and plain tokens: "
                              "%s has its sidecar %s, but %s has no .sft beside it",
                              src->names[with], side, src->names[without]);
        ct_error_hint("keep one `ctrain prepare` output per directory (`--format sft` writes a "
                      ".sft beside every shard)");
        return st;
    }
    size_t mlen = 0;
    const char *m = with >= 0 ? NULL : src->i->manifest(src, &mlen);
    *yes = with >= 0 || manifest_says_sft(m, mlen);
    return CT_OK;
}

/* ---------------------------------------------------------------- opening */

static void sft_close(loader_kind *base) {
    sft_kind *k = (sft_kind *)base;
    if (k->side)
        for (int i = 0; i < base->n_groups; i++) ct_sft_close(k->side[i]);
    free(k->side);
    free(k->len);
    free(k->cnt);
    loader_kind_base_free(base);
    free(k);
}

static ct_status sft_open(loader_kind **out, ct_source *src, const loader_kind_opts *o) {
    *out = NULL;
    sft_kind *k = calloc(1, sizeof *k);
    if (!k) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    *out = &k->base;
    int n = src->n;
    ct_status st = loader_kind_base_init(&k->base, &loader_kind_sft_i, n);
    if (st) return st;
    k->src = src;
    k->T = o->T;
    snprintf(k->split, sizeof k->split, "%s", o->split);
    k->base.width = o->T;
    k->base.rows = o->B;
    k->base.noun = "example";
    k->base.mode = 2; /* instruction rows */
    if (!(k->side = calloc((size_t)n, sizeof *k->side)))
        return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    char side[SFT_NAME_MAX];
    int64_t *ex_cum = k->base.group_start;
    for (int i = 0; i < n; i++) {
        if (o->vocab_size > 0 && (st = src->i->check_tokens(src, i, o->vocab_size))) return st;
        ct_source_bytes b;
        if ((st = src->i->side_name(src, i, SFT_SUFFIX, side, sizeof side)) ||
            (st = src->i->side_open(src, i, SFT_SUFFIX, CT_SFT_HEADER_BYTES, ct_sft_file_msgs(),
                                    &b)) ||
            (st = ct_sft_open_mem(&k->side[i], side, b.data, b.len, b.release, src->ntok[i],
                                  src->names[i])))
            return st;
        k->base.total_tokens += src->ntok[i];
        ex_cum[i + 1] = ex_cum[i] + ct_sft_num_examples(k->side[i]);
    }
    int64_t E = k->base.n = ex_cum[n];
    if (E > INT32_MAX - 1)
        return CT_ERR(CT_ERR_ARG, "%s: %" PRId64 " examples, more than a loader takes (%d)",
                      o->spec, E, INT32_MAX - 1);
    k->len = malloc((size_t)(E ? E : 1) * sizeof *k->len);
    k->cnt = malloc((size_t)(E ? E : 1) * sizeof *k->cnt);
    if (!k->len || !k->cnt) return CT_ERR(CT_ERR_OOM, "out of memory for %" PRId64 " examples", E);
    k->base.len = k->len;
    k->base.cnt = k->cnt;
    int64_t longest = 0;
    for (int s = 0; s < n; s++) {
        for (int64_t j = 0; j < ct_sft_num_examples(k->side[s]); j++) {
            int64_t a, b, id = ex_cum[s] + j;
            ct_sft_example_range(k->side[s], j, &a, &b);
            int64_t len = b - a;
            if (len > longest) longest = len;
            if (len > o->T) {
                k->stats.truncated++;
                len = o->T;
            }
            k->len[id] = (int32_t)len;
            /* an example's first token never counts: [a, a+len) = targets 1..len-1 */
            k->cnt[id] = (int32_t)ct_sft_count_range(k->side[s], a, a + len);
            k->row_tokens += len;
            k->stats.counted += k->cnt[id];
        }
    }
    k->stats.examples = E;
    if (k->stats.truncated > 0 && o->rank == 0)
        ct_log(CT_LOG_WARN, "data.%s: %" PRId64 " of %" PRId64 " examples in %s are longer than "
               "a row of %d tokens (the longest has %" PRId64 "); each keeps its first %d "
               "tokens. `ctrain prepare --format sft --max-len %d` cuts or drops them when "
               "preparing", o->split, k->stats.truncated, E, o->spec, o->T, longest, o->T, o->T);
    return CT_OK;
}

/* ---------------------------------------------------------------- reading */

static void sft_where(const loader_kind *base, int64_t x, int32_t *shard, int64_t *offset) {
    const sft_kind *k = (const sft_kind *)base;
    int s = loader_kind_group_of(base, x);
    int64_t end;
    ct_sft_example_range(k->side[s], x - base->group_start[s], offset, &end);
    *shard = s;
}

static ct_status sft_fill_row(const loader_kind *base, const int64_t *ex, int n, int32_t *in,
                              int32_t *tg, int32_t *pos, int64_t *counted) {
    const sft_kind *k = (const sft_kind *)base;
    int64_t T = k->T, c = 0, kept = 0;
    for (int j = 0; j < n; j++) {
        int64_t x = ex[j], a, len = k->len[x];
        int32_t s;
        sft_where(base, x, &s, &a);
        CT_ASSERT(c + len <= T);
        ct_status st = k->src->i->read(k->src, s, a, len, in + c);
        if (st) return st;
        /* token t+1's bit says whether predicting it from token t counts */
        kept += ct_sft_targets(k->side[s], a, len, in + c, tg + c);
        if (pos)
            for (int64_t t = 0; t < len; t++) pos[c + t] = (int32_t)t;
        c += len;
    }
    for (int64_t t = c; t < T; t++) { /* padding */
        in[t] = 0;
        tg[t] = -1;
        if (pos) pos[t] = (int32_t)(t - c);
    }
    *counted = kept;
    return CT_OK;
}

static void sft_ranges(const loader_kind *base, const int64_t *ex, int n, loader_range_fn fn,
                       void *arg) {
    const sft_kind *k = (const sft_kind *)base;
    for (int j = 0; j < n; j++) {
        int32_t s;
        int64_t a;
        sft_where(base, ex[j], &s, &a);
        fn(arg, s, a, k->len[ex[j]]);
    }
}

/* ------------------------------------------------------------- statistics */

static bool sft_stats(const loader_kind *base, int64_t rows, ct_loader_sft_stats *out) {
    const sft_kind *k = (const sft_kind *)base;
    *out = k->stats;
    out->rows = rows;
    /* fill: the share of the rows' columns examples take */
    out->fill = out->rows > 0 ? (double)k->row_tokens / ((double)out->rows * k->T) : 0.0;
    return true;
}

static bool sft_describe(const loader_kind *base, const ct_loader_sft_stats *st, bool packing,
                         char *buf, size_t cap) {
    const sft_kind *k = (const sft_kind *)base;
    snprintf(buf, cap, "instruction data: %lld examples in %lld rows of %d tokens "
             "(data.packing=%s, %.0f%% of the columns hold example tokens), %lld "
             "counted targets per epoch", (long long)st->examples, (long long)st->rows, k->T,
             packing ? "true" : "false", 100.0 * st->fill, (long long)st->counted);
    return true;
}

const loader_kind_i loader_kind_sft_i = {
    .name = "sft",
    .detect = sft_detect,
    .open = sft_open,
    .close = sft_close,
    .fill_row = sft_fill_row,
    .ranges = sft_ranges,
    .where = sft_where,
    .stats = sft_stats,
    .describe = sft_describe,
};
