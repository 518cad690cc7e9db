/*
 * The loader's public calls (include/ctrain/loader.h) over its two seams:
 * at open, the source of the spec (data/shard/source.h: files or a URL),
 * the kind of its shards' examples (kind.h: token windows or instruction
 * examples) and the order that kind's examples go in (order.h); then the
 * consumer's position (epoch, index), which moves one batch per
 * ct_loader_next, and positions, skips and resets. The order is a pure
 * function of (epoch, index), so the prefetch ring (loader_ring.c) and the
 * read-ahead (loader_ahead.c) compute the same batches; both read through
 * loader_batch.c. Nothing here asks which source, kind or order it has.
 * Leaves out: reading a batch (loader_batch.c) and the threads.
 */
#include "data/loader/loader_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOADER_PREFETCH_MAX 4096
#define LOADER_WHERE_MAX 4200 /* "token N of PATH" */

ct_loader_opts ct_loader_opts_default(void) {
    ct_loader_opts o;
    memset(&o, 0, sizeof o);
    o.split = "train";
    o.B = 1;
    o.T = 1;
    o.world = 1;
    o.prefetch = 2;
    o.packing = true;
    o.accum = 1;
    o.cache_ttl_s = -1;
    o.retries = -1;
    return o;
}

bool ct_loader_split_missing(const char *spec, const char *split) {
    return ct_source_split_missing(spec, split);
}

/* ------------------------------------------------------------------ opening */

static ct_status check_opts(const ct_loader_opts *o) {
    const char *split = o->split ? o->split : "train";
    if (o->B < 1 || o->T < 1)
        return CT_ERR(CT_ERR_ARG, "loader for data.%s: batch shape B=%d T=%d, expected both "
                      ">= 1", split, o->B, o->T);
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return CT_ERR(CT_ERR_ARG, "loader for data.%s: rank %d of world %d, expected 0 <= rank "
                      "< world", split, o->rank, o->world);
    if (o->prefetch < 0 || o->prefetch > LOADER_PREFETCH_MAX)
        return CT_ERR(CT_ERR_ARG, "data.prefetch = %d, expected 0..%d", o->prefetch,
                      LOADER_PREFETCH_MAX);
    if (o->vocab_size < 0)
        return CT_ERR(CT_ERR_ARG, "loader for data.%s: vocab_size %d, expected >= 0 (0: "
                      "unchecked)", split, o->vocab_size);
    if (!o->spec || !o->spec[0])
        return CT_ERR(CT_ERR_ARG, "data.%s is empty: expected a shard file, glob or directory",
                      split);
    if (o->accum < 0)
        return CT_ERR(CT_ERR_ARG, "loader for data.%s: accum %d, expected >= 1 (0: 1)", split,
                      o->accum);
    return CT_OK;
}

/* The source, the kind of its examples, their order. */
static ct_status open_data(ct_loader *l, const ct_loader_opts *o) {
    ct_source_opts so = {
        .spec = o->spec, .split = l->split_name, .vocab_size = o->vocab_size,
        .cache_dir = o->cache_dir, .cache_limit = o->cache_limit, .cache_ttl_s = o->cache_ttl_s,
        .readahead = o->readahead, .retries = o->retries, .timeout_s = o->timeout_s,
        .offline = o->offline,
    };
    ct_status st = ct_source_open(&l->src, &so);
    if (st) return st;
    loader_kind_opts ko = {
        .B = o->B, .T = o->T, .vocab_size = o->vocab_size, .rank = o->rank, .spec = o->spec,
        .split = l->split_name,
    };
    if ((st = loader_kind_open(&l->kind, l->src, &ko))) return st;
    loader_order_opts oo = {
        .B = l->kind->rows, .world = o->world, .shuffle = o->shuffle, .seed = o->seed,
        .accum = o->accum > 0 ? o->accum : 1, .packing = o->packing,
        .group_by_length = o->group_by_length, .spec = o->spec, .split = l->split_name,
    };
    if ((st = loader_order_open(&l->order, l->kind, &oo))) return st;
    loader_order *ord = l->order;
    if ((st = ord->i->loc_new(ord, &l->cons_loc)) || (st = ord->i->loc_new(ord, &l->look_loc)) ||
        (st = ord->i->loc_new(ord, &l->read_loc)) || (st = ord->i->seek(ord, l->cons_loc, 0)))
        return st;
    l->per_epoch = ord->i->batches(ord, l->cons_loc);
    l->rows0 = ord->i->rows(ord, l->cons_loc);
    return CT_OK;
}

ct_status ct_loader_init(ct_loader **out, const ct_loader_opts *opts) {
    *out = NULL;
    ct_status st = check_opts(opts);
    if (st) return st;
    ct_loader *l = calloc(1, sizeof *l);
    if (!l) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    l->B = opts->B;
    l->T = opts->T;
    l->BT = (int64_t)opts->B * opts->T;
    l->rank = opts->rank;
    l->world = opts->world;
    l->prefetch = opts->prefetch;
    l->packing = opts->packing;
    snprintf(l->split_name, sizeof l->split_name, "%s", opts->split ? opts->split : "train");
    if ((st = open_data(l, opts))) goto fail;
    if ((st = loader_ahead_start(l))) goto fail;
    if (l->prefetch > 0 && (st = loader_ring_start(l))) goto fail;
    *out = l;
    return CT_OK;
fail:
    ct_loader_free(l);
    return st;
}

void ct_loader_free(ct_loader *l) {
    if (!l) return;
    loader_ring_stop(l);
    loader_ahead_stop(l);
    if (l->order) {
        l->order->i->loc_free(l->order, l->cons_loc);
        l->order->i->loc_free(l->order, l->look_loc);
        l->order->i->loc_free(l->order, l->read_loc);
    }
    loader_order_close(l->order);
    loader_kind_close(l->kind);
    ct_source_close(l->src);
    free(l);
}

/* ------------------------------------------------------------- the consumer */

/* Where n >= 0 batches past the consumer lead, with look_loc put on that
 * epoch when it is another (CT_ERR_OOM when its plan cannot be built:
 * nothing moved). */
static ct_status cons_step(ct_loader *l, int64_t n, int64_t *epoch, int64_t *index) {
    *epoch = l->epoch;
    *index = l->index;
    if (n < l->per_epoch - l->index) {
        *index += n; /* inside the consumer's epoch */
        return CT_OK;
    }
    ct_status st = loader_order_advance(l->order, l->look_loc, epoch, index, n);
    if (st == CT_OK) st = l->order->i->seek(l->order, l->look_loc, *epoch);
    return st;
}

/* Move the consumer to (epoch, index); look_loc is on epoch when it is not
 * the consumer's, and becomes the consumer's locator. Cannot fail. */
static void cons_move(ct_loader *l, int64_t epoch, int64_t index) {
    if (epoch != l->epoch) {
        loader_loc *t = l->cons_loc;
        l->cons_loc = l->look_loc;
        l->look_loc = t;
    }
    l->epoch = epoch;
    l->index = index;
    l->per_epoch = l->order->i->batches(l->order, l->cons_loc);
}

ct_status ct_loader_next_batch(ct_loader *l, ct_loader_batch *b) {
    double t0 = ct_time_s();
    /* where the batch leads first, so an epoch that cannot be planned leaves
     * the ring alone */
    int64_t ne, ni, counted = 0;
    ct_status st = cons_step(l, 1, &ne, &ni);
    if (st == CT_OK) {
        if (l->prefetch > 0)
            st = loader_ring_pop(l, b->inputs, b->targets, b->pos, &counted);
        else
            st = loader_read_at(l, l->read_loc, l->epoch, l->index, b->inputs, b->targets,
                                b->pos, &counted);
    }
    if (st == CT_OK) {
        cons_move(l, ne, ni);
        b->counted = counted;
        b->positions = !l->kind->plain_pos;
        if (b->pos && l->kind->plain_pos) /* row by row: no division per token */
            for (int64_t r = 0; r < l->BT; r += l->T)
                for (int t = 0; t < l->T; t++) b->pos[r + t] = t;
        loader_ahead_moved(l, false);
    }
    l->wait_last = ct_time_s() - t0;
    l->wait_total += l->wait_last;
    return st;
}

ct_status ct_loader_next_pos(ct_loader *l, int32_t *inputs, int32_t *targets, int32_t *pos) {
    ct_loader_batch b = {.inputs = inputs, .targets = targets, .pos = pos};
    return ct_loader_next_batch(l, &b);
}

ct_status ct_loader_next(ct_loader *l, int32_t *inputs, int32_t *targets) {
    return ct_loader_next_pos(l, inputs, targets, NULL);
}

void ct_loader_reset(ct_loader *l) {
    /* epoch 0 is always at hand (its plan is kept): cannot fail */
    ct_status st = l->order->i->seek(l->order, l->look_loc, 0);
    CT_ASSERT(st == CT_OK);
    (void)st;
    cons_move(l, 0, 0);
    if (l->prefetch > 0) loader_ring_restart(l);
    loader_ahead_moved(l, true);
}

/* ------------------------------------------------------------- positions */

/* Position mode bits (ct_loader_pos.shuffled): the order's and the kind's. */
static int32_t pos_mode(const ct_loader *l) { return l->order->mode | l->kind->mode; }

/* The first example of rank's batch `index` in loc's epoch: its shard and
 * first token, or -1/-1 for a batch of empty rows. */
static void first_of(ct_loader *l, loader_loc *loc, int rank, int64_t index, int32_t *shard,
                     int64_t *offset) {
    int64_t x;
    if (!l->order->i->first(l->order, loc, rank, index, &x)) {
        *shard = -1;
        *offset = -1;
        return;
    }
    l->kind->i->where(l->kind, x, shard, offset);
}

void ct_loader_get_pos(ct_loader *l, ct_loader_pos *out) {
    memset(out, 0, sizeof *out);
    out->epoch = l->epoch;
    out->index = l->index;
    first_of(l, l->cons_loc, l->rank, l->index, &out->shard, &out->offset);
    out->shuffled = pos_mode(l);
}

/* A position's mode bits in words: "shuffled", "sequential packed instruction rows", ... */
static const char *pos_mode_name(int32_t m, char *buf, size_t cap) {
    if (!(m & 2)) return m & 1 ? "shuffled" : "sequential";
    snprintf(buf, cap, "%s instruction-row (packing %s, group_by_length %s)",
             m & 1 ? "shuffled" : "sequential", m & 4 ? "on" : "off", m & 8 ? "on" : "off");
    return buf;
}

/* "token N of PATH", or "a batch of empty rows" for shard -1. */
static const char *pos_where(const ct_loader *l, int32_t shard, int64_t offset, char *buf,
                             size_t cap) {
    if (shard < 0) snprintf(buf, cap, "a batch of empty rows");
    else snprintf(buf, cap, "token %" PRId64 " of %s", offset, l->src->names[shard]);
    return buf;
}

ct_status ct_loader_set_pos(ct_loader *l, const ct_loader_pos *pos) {
    int32_t mine = pos_mode(l);
    if (pos->shuffled != mine) {
        char a[96], b[96];
        if ((pos->shuffled & ~1) == 0 && (mine & ~1) == 0)
            return CT_ERR(CT_ERR_ARG, "loader position: taken from a %s loader, but this one "
                          "is %s (data.shuffle differs)", pos_mode_name(pos->shuffled, a, sizeof a),
                          pos_mode_name(mine, b, sizeof b));
        if (pos->shuffled < 0 || (pos->shuffled & ~15))
            return CT_ERR(CT_ERR_ARG, "loader position: unknown mode %" PRId32 " (expected "
                          "mode bits 1 shuffle, 2 instruction rows, 4 packing, 8 "
                          "group_by_length)", pos->shuffled);
        ct_status st = CT_ERR(CT_ERR_ARG, "loader position: taken from a %s loader, but this "
                              "one is %s", pos_mode_name(pos->shuffled, a, sizeof a),
                              pos_mode_name(mine, b, sizeof b));
        ct_error_hint("the position was saved with other data (plain or instruction shards) or "
                      "other data.shuffle, data.packing or data.group_by_length");
        return st;
    }
    if (pos->epoch < 0)
        return CT_ERR(CT_ERR_ARG, "loader position: epoch %" PRId64 ", expected >= 0",
                      pos->epoch);
    loader_order *o = l->order;
    ct_status st = o->i->seek(o, l->look_loc, pos->epoch);
    if (st) return st;
    int64_t per = o->i->batches(o, l->look_loc);
    if (pos->index < 0 || pos->index >= per) {
        st = CT_ERR(CT_ERR_ARG, "loader position: index %" PRId64 " is outside epoch %" PRId64
                    ": rank %d takes %" PRId64 " batches in it (expected 0..%" PRId64 ")",
                    pos->index, pos->epoch, l->rank, per, per - 1);
        ct_error_hint("the position was saved with other shards, batch shape, seed, world size "
                      "or train.grad_accum");
        return st;
    }
    if (pos->shard < -1 || pos->shard >= l->src->n || (pos->shard == -1) != (pos->offset == -1))
        return CT_ERR(CT_ERR_ARG, "loader position: shard %" PRId32 " is out of range (offset %"
                      PRId64 "): the loader has %d shard(s) (-1 with offset -1: a batch of empty "
                      "rows)", pos->shard, pos->offset, l->src->n);
    int32_t s;
    int64_t off;
    first_of(l, l->look_loc, l->rank, pos->index, &s, &off);
    if ((s != pos->shard || off != pos->offset) && l->rank != 0) {
        /* a position rank 0 took (the one a checkpoint keeps) fits too */
        int32_t s0;
        int64_t off0;
        first_of(l, l->look_loc, 0, pos->index, &s0, &off0);
        if (s0 == pos->shard && off0 == pos->offset) {
            s = s0;
            off = off0;
        }
    }
    if (s != pos->shard || off != pos->offset) {
        char here[LOADER_WHERE_MAX], there[LOADER_WHERE_MAX];
        st = CT_ERR(CT_ERR_ARG, "loader position: epoch %" PRId64 " index %" PRId64 " starts "
                    "with %s here, but the position says %s", pos->epoch, pos->index,
                    pos_where(l, s, off, here, sizeof here),
                    pos_where(l, pos->shard, pos->offset, there, sizeof there));
        ct_error_hint("the position was saved with other shards, batch shape, seed, rank or "
                      "world size");
        return st;
    }
    cons_move(l, pos->epoch, pos->index);
    if (l->prefetch > 0) loader_ring_restart(l);
    loader_ahead_moved(l, true);
    return CT_OK;
}

ct_status ct_loader_skip(ct_loader *l, int64_t n) {
    if (n < 0)
        return CT_ERR(CT_ERR_ARG, "loader skip: %" PRId64 " batches, expected >= 0", n);
    int64_t e, i;
    ct_status st = cons_step(l, n, &e, &i);
    if (st) return st;
    cons_move(l, e, i);
    if (l->prefetch > 0 && n > 0) loader_ring_drop(l, n);
    if (n > 0) loader_ahead_moved(l, true);
    return CT_OK;
}

/* ------------------------------------------------------------- the data */

int64_t ct_loader_counted_ahead(ct_loader *l, int64_t n) {
    if (n <= 0) return 0;
    loader_order *o = l->order;
    loader_loc *loc = l->cons_loc;
    int64_t e = l->epoch, i = l->index, total = 0;
    for (;;) {
        int64_t per = o->i->batches(o, loc);
        int64_t take = n < per - i ? n : per - i;
        total += o->i->counted(o, loc, i, i + take);
        n -= take;
        if (n == 0) return total;
        e++;
        i = 0;
        loc = l->look_loc;
        if (o->i->seek(o, loc, e)) return -1;
    }
}

int64_t ct_loader_batches_in_epoch(ct_loader *l, int64_t epoch) {
    if (epoch < 0) return -1;
    if (epoch == l->epoch) return l->per_epoch;
    if (l->order->i->seek(l->order, l->look_loc, epoch)) return -1;
    return l->order->i->batches(l->order, l->look_loc);
}

bool ct_loader_is_sft(const ct_loader *l) { return l && (l->kind->mode & 2); }

bool ct_loader_masked(const ct_loader *l) { return l->kind->cnt != NULL; }

bool ct_loader_sft_stats_get(const ct_loader *l, ct_loader_sft_stats *out) {
    memset(out, 0, sizeof *out);
    if (!l) return false;
    return l->kind->i->stats(l->kind, l->rows0, out);
}

const char *ct_loader_describe(const ct_loader *l, char *buf, size_t cap) {
    ct_loader_sft_stats st;
    if (cap) buf[0] = '\0';
    if (!l->kind->i->stats(l->kind, l->rows0, &st) ||
        !l->kind->i->describe(l->kind, &st, l->packing, buf, cap))
        if (cap) buf[0] = '\0';
    return buf;
}

double ct_loader_wait_s(const ct_loader *l) { return l->wait_last; }
double ct_loader_wait_total_s(const ct_loader *l) { return l->wait_total; }
int64_t ct_loader_batches_per_epoch(const ct_loader *l) { return l->per_epoch; }
int64_t ct_loader_total_tokens(const ct_loader *l) { return l->kind->total_tokens; }
int ct_loader_num_shards(const ct_loader *l) { return l->src->n; }

bool ct_loader_get_remote_stats(const ct_loader *l, ct_loader_remote_stats *out) {
    memset(out, 0, sizeof *out);
    ct_source_stats s;
    if (!l || !l->src->i->stats(l->src, &s)) return false;
    out->blocks_fetched = s.blocks_fetched;
    out->bytes_fetched = s.bytes_fetched;
    out->disk_hits = s.disk_hits;
    out->memory_hits = s.memory_hits;
    out->bad_blocks = s.bad_blocks;
    out->cache_write_errors = s.cache_write_errors;
    out->read_wait_s = s.read_wait_s;
    return true;
}
