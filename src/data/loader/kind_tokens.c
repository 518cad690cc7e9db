/*
 * The token-window kind (kind.h) of plain llm.c shards: example w of shard s
 * is the window of B*T+1 tokens at token w*B*T, and it fills a whole batch:
 * row b is tokens [p + b*T, p + b*T + T), targets the same moved by one, so
 * the window's last token is the last row's last target. Shard s holds
 * (ntok - 1) / (B*T) windows; every target counts; positions are 0..T-1.
 * Leaves out: document boundaries (windows cross them, as in llm.c), which
 * windows come when (order_stream.c), where the bytes come from (the source).
 */
#include "data/loader/kind.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct tokens_kind {
    loader_kind base;
    ct_source *src;
    int64_t BT; /* tokens per batch */
} tokens_kind;

/* Plain shards are whatever no other kind claims. */
static ct_status tokens_detect(ct_source *src, bool *yes) {
    (void)src;
    *yes = true;
    return CT_OK;
}

static void tokens_close(loader_kind *base) {
    loader_kind_base_free(base);
    free(base);
}

static ct_status tokens_open(loader_kind **out, ct_source *src, const loader_kind_opts *o) {
    *out = NULL;
    tokens_kind *k = calloc(1, sizeof *k);
    if (!k) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    *out = &k->base;
    ct_status st = loader_kind_base_init(&k->base, &loader_kind_tokens_i, src->n);
    if (st) return st;
    k->src = src;
    k->BT = (int64_t)o->B * o->T;
    k->base.width = k->BT;
    k->base.rows = 1;
    k->base.span = k->BT + 1;
    k->base.noun = "window";
    k->base.plain_pos = true;
    for (int i = 0; i < src->n; i++) {
        int64_t ntok = src->ntok[i];
        if (ntok < k->BT + 1)
            /* the caller's prefix names its own settings (train.* or eval's flags) */
            return CT_ERR(CT_ERR_ARG, "%s: shard has %" PRId64 " tokens, fewer than one batch "
                          "of %d rows x %d tokens needs (%" PRId64 ")", src->names[i], ntok, o->B,
                          o->T, k->BT + 1);
        if (o->vocab_size > 0 && (st = src->i->check_tokens(src, i, o->vocab_size))) return st;
        k->base.total_tokens += ntok;
        k->base.group_start[i + 1] = k->base.group_start[i] + (ntok - 1) / k->BT;
    }
    k->base.n = k->base.group_start[src->n];
    return CT_OK;
}

static void tokens_where(const loader_kind *base, int64_t x, int32_t *shard, int64_t *offset) {
    const tokens_kind *k = (const tokens_kind *)base;
    int s = loader_kind_group_of(base, x);
    *shard = s;
    *offset = (x - base->group_start[s]) * k->BT;
}

static ct_status tokens_fill_row(const loader_kind *base, const int64_t *ex, int n, int32_t *in,
                                 int32_t *tg, int32_t *pos, int64_t *counted) {
    const tokens_kind *k = (const tokens_kind *)base;
    (void)pos;
    CT_ASSERT(n == 1);
    int32_t s;
    int64_t off, BT = k->BT;
    tokens_where(base, ex[0], &s, &off);
    /* targets are the inputs moved by one, plus the window's last token */
    ct_status st = k->src->i->read(k->src, s, off, BT, in);
    if (st) return st;
    memcpy(tg, in + 1, (size_t)(BT - 1) * sizeof *tg);
    if ((st = k->src->i->read(k->src, s, off + BT, 1, tg + BT - 1))) return st;
    *counted = BT;
    return CT_OK;
}

static void tokens_ranges(const loader_kind *base, const int64_t *ex, int n, loader_range_fn fn,
                          void *arg) {
    for (int j = 0; j < n; j++) {
        int32_t s;
        int64_t off;
        tokens_where(base, ex[j], &s, &off);
        fn(arg, s, off, base->span);
    }
}

static bool tokens_stats(const loader_kind *base, int64_t rows, ct_loader_sft_stats *out) {
    (void)base;
    (void)rows;
    memset(out, 0, sizeof *out);
    return false;
}

static bool tokens_describe(const loader_kind *base, const ct_loader_sft_stats *st, bool packing,
                            char *buf, size_t cap) {
    (void)base;
    (void)st;
    (void)packing;
    if (cap) buf[0] = '\0';
    return false;
}

const loader_kind_i loader_kind_tokens_i = {
    .name = "tokens",
    .detect = tokens_detect,
    .open = tokens_open,
    .close = tokens_close,
    .fill_row = tokens_fill_row,
    .ranges = tokens_ranges,
    .where = tokens_where,
    .stats = tokens_stats,
    .describe = tokens_describe,
};
