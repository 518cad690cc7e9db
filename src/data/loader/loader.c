/*
 * Batch loader over llm.c token shards (see shard.h for the format): finding
 * and validating the shards, the sequential (llm.c) and shuffled orders, exact
 * positions, and the public calls. The order is a pure function of
 * (epoch, index), so a position is two integers and resuming, skipping and the
 * prefetch thread all compute batches the same way. loader_order.c computes
 * the order and reads windows; loader_ring.c holds the prefetch thread; both
 * sit below this file.
 * Instruction shards (.sft sidecars) are recognised here and batched by
 * loader_sft.c as rows of whole examples.
 * Leaves out: document boundaries of plain shards (windows cross them, as in
 * llm.c) and sharding by anything but windows.
 */
#include "data/loader/loader_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOADER_PREFETCH_MAX 4096

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

/* ------------------------------------------------------------------ order */

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

/* Open the source, then validate and count the windows of every shard. */
static ct_status open_shards(ct_loader *l, const ct_loader_opts *o) {
    ct_source_opts so = {
        .spec = o->spec, .split = l->split_name, .vocab_size = o->vocab_size,
        .cache_dir = o->cache_dir, .cache_limit = o->cache_limit, .cache_ttl_s = o->cache_ttl_s,
        .readahead = o->readahead, .retries = o->retries, .timeout_s = o->timeout_s,
        .offline = o->offline,
    };
    ct_status st = ct_source_open(&l->src, &so);
    if (st) return st;
    l->n_shards = l->src->n;
    l->paths = l->src->names;
    bool sft = false;
    if ((st = loader_sft_detect(l, &sft))) return st;
    if (sft) return loader_sft_open(l, o);
    int n = l->n_shards;
    l->wins = calloc((size_t)n, sizeof *l->wins);
    l->seq_cum = calloc((size_t)n + 1, sizeof *l->seq_cum);
    if (!l->wins || !l->seq_cum) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    int64_t BT = l->BT, stride = BT * l->world;
    for (int i = 0; i < n; i++) {
        int64_t ntok = l->src->ntok[i];
        if (ntok < BT + 1) {
            /* the caller's prefix names its own settings (train.* or eval's flags) */
            st = CT_ERR(CT_ERR_ARG, "%s: shard has %" PRId64 " tokens, fewer than one batch "
                        "of %d rows x %d tokens needs (%" PRId64 ")", l->paths[i], ntok, o->B,
                        o->T, BT + 1);
            return st;
        }
        if (o->vocab_size > 0 && (st = l->src->i->check_tokens(l->src, i, o->vocab_size)))
            return st;
        l->total_tokens += ntok;
        l->wins[i] = (ntok - 1) / BT;
        l->n_windows += l->wins[i];
        /* sequential: the k-th global window of world*B*T tokens (+1) holds one
         * window of every rank, so all ranks take the same number from a
         * shard, as one rank at world*B would */
        int64_t seq = (ntok - 1) / stride;
        l->seq_cum[i + 1] = l->seq_cum[i] + seq;
    }
    if (l->shuffle) {
        l->per_epoch = l->n_windows / l->world;
        if (l->per_epoch < 1)
            return CT_ERR(CT_ERR_ARG, "%s: %" PRId64 " windows of %" PRId64 " tokens in all, "
                          "fewer than the %d ranks", o->spec, l->n_windows, BT + 1, l->world);
    } else {
        l->per_epoch = l->seq_cum[n];
        if (l->per_epoch < 1)
            return CT_ERR(CT_ERR_ARG, "%s: no shard holds the %" PRId64 " tokens one "
                          "sequential step of %d rank(s) needs (ranks * B*T + 1)", o->spec,
                          stride + 1, l->world);
    }
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
    l->shuffle = opts->shuffle;
    l->seed = opts->seed;
    snprintf(l->split_name, sizeof l->split_name, "%s", opts->split ? opts->split : "train");
    if ((st = open_shards(l, opts))) goto fail;
    if ((st = loader_locator_init(&l->cons_loc, l->n_shards))) goto fail;
    if ((st = loader_locator_init(&l->read_loc, l->n_shards))) goto fail;
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
    loader_sft_close(l);
    ct_source_close(l->src);
    free(l->wins);
    free(l->seq_cum);
    loader_locator_free(&l->cons_loc);
    loader_locator_free(&l->read_loc);
    free(l);
}

/* --------------------------------------------------------------- batches */

ct_status ct_loader_next_pos(ct_loader *l, int32_t *inputs, int32_t *targets, int32_t *pos) {
    double t0 = ct_time_s();
    ct_status st = CT_OK;
    /* instruction data: where the batch leads, with its epoch's plan, before
     * taking it, so a plan that cannot be built leaves the ring alone */
    struct sft_plan *pin = NULL;
    int64_t ne = 0, ni = 0;
    if (l->sft) st = loader_sft_step(l, 1, &ne, &ni, &pin);
    if (st == CT_OK) {
        if (l->prefetch > 0) {
            st = loader_ring_pop(l, inputs, targets, pos);
        } else {
            st = loader_read_at(l, &l->read_loc, l->epoch, l->index, inputs, targets, pos);
        }
    }
    if (st == CT_OK) {
        if (l->sft) {
            loader_sft_commit(l, ne, ni, pin);
        } else {
            (void)loader_advance(l, NULL, &l->epoch, &l->index, 1); /* plain: cannot fail */
            if (pos)
                for (int64_t k = 0; k < l->BT; k++) pos[k] = (int32_t)(k % l->T);
        }
        loader_ahead_moved(l, false);
    } else if (pin) {
        loader_sft_unpin(l, pin);
    }
    l->wait_last = ct_time_s() - t0;
    l->wait_total += l->wait_last;
    return st;
}

ct_status ct_loader_next(ct_loader *l, int32_t *inputs, int32_t *targets) {
    return ct_loader_next_pos(l, inputs, targets, NULL);
}

void ct_loader_reset(ct_loader *l) {
    l->epoch = 0;
    l->index = 0;
    if (l->sft) loader_sft_reset(l);
    if (l->prefetch > 0) loader_ring_restart(l);
    loader_ahead_moved(l, true);
}

int32_t loader_pos_mode(const ct_loader *l) {
    int32_t m = l->shuffle ? 1 : 0;
    if (l->sft) m |= 2 | (l->packing ? 4 : 0) | (l->group_by_length ? 8 : 0);
    return m;
}

void ct_loader_get_pos(ct_loader *l, ct_loader_pos *out) {
    if (l->sft) {
        loader_sft_get_pos(l, out);
        return;
    }
    memset(out, 0, sizeof *out);
    out->epoch = l->epoch;
    out->index = l->index;
    loader_locate(l, &l->cons_loc, l->epoch, l->index, &out->shard, &out->offset);
    out->shuffled = l->shuffle ? 1 : 0;
}

/* A position's mode bits in words: "shuffled", "sequential packed instruction rows", ... */
static const char *pos_mode_name(int32_t m, char *buf, size_t cap) {
    if (!(m & 2)) return m & 1 ? "shuffled" : "sequential";
    snprintf(buf, cap, "%s instruction-row (packing %s, group_by_length %s)",
             m & 1 ? "shuffled" : "sequential", m & 4 ? "on" : "off", m & 8 ? "on" : "off");
    return buf;
}

ct_status ct_loader_set_pos(ct_loader *l, const ct_loader_pos *pos) {
    int32_t mine = loader_pos_mode(l);
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
    if (l->sft) {
        ct_status st = loader_sft_set_pos(l, pos);
        if (st) return st;
        if (l->prefetch > 0) loader_ring_restart(l);
        loader_ahead_moved(l, true);
        return CT_OK;
    }
    if (pos->index < 0 || pos->index >= l->per_epoch)
        return CT_ERR(CT_ERR_ARG, "loader position: index %" PRId64 " is outside the epoch: "
                      "rank %d takes %" PRId64 " batches per epoch (expected 0..%" PRId64 ")",
                      pos->index, l->rank, l->per_epoch, l->per_epoch - 1);
    if (pos->shard < 0 || pos->shard >= l->n_shards)
        return CT_ERR(CT_ERR_ARG, "loader position: shard %" PRId32 " is out of range: the "
                      "loader has %d shard(s)", pos->shard, l->n_shards);
    int32_t s;
    int64_t off;
    loader_locate(l, &l->cons_loc, pos->epoch, pos->index, &s, &off);
    if ((s != pos->shard || off != pos->offset) && l->rank != 0) {
        /* a position rank 0 took (the one a checkpoint keeps) fits too */
        int32_t s0;
        int64_t off0;
        loader_locate_rank(l, &l->cons_loc, 0, pos->epoch, pos->index, &s0, &off0);
        if (s0 == pos->shard && off0 == pos->offset) {
            s = s0;
            off = off0;
        }
    }
    if (s != pos->shard || off != pos->offset) {
        ct_status st = CT_ERR(CT_ERR_ARG, "loader position: epoch %" PRId64 " index %" PRId64
                              " is the window at token %" PRId64 " of %s here, but the position "
                              "says token %" PRId64 " of %s", pos->epoch, pos->index, off,
                              l->paths[s], pos->offset, l->paths[pos->shard]);
        ct_error_hint("the position was saved with other shards, batch shape, seed, rank or "
                      "world size");
        return st;
    }
    l->epoch = pos->epoch;
    l->index = pos->index;
    if (l->prefetch > 0) loader_ring_restart(l);
    loader_ahead_moved(l, true);
    return CT_OK;
}

ct_status ct_loader_skip(ct_loader *l, int64_t n) {
    if (n < 0)
        return CT_ERR(CT_ERR_ARG, "loader skip: %" PRId64 " batches, expected >= 0", n);
    if (l->sft) {
        struct sft_plan *pin = NULL;
        int64_t e, i;
        ct_status st = loader_sft_step(l, n, &e, &i, &pin);
        if (st) return st;
        loader_sft_commit(l, e, i, pin);
    } else {
        (void)loader_advance(l, NULL, &l->epoch, &l->index, n); /* plain: cannot fail */
    }
    if (l->prefetch > 0 && n > 0) loader_ring_drop(l, n);
    if (n > 0) loader_ahead_moved(l, true);
    return CT_OK;
}

double ct_loader_wait_s(const ct_loader *l) { return l->wait_last; }
double ct_loader_wait_total_s(const ct_loader *l) { return l->wait_total; }
int64_t ct_loader_batches_per_epoch(const ct_loader *l) { return l->per_epoch; }
int64_t ct_loader_total_tokens(const ct_loader *l) { return l->total_tokens; }
int ct_loader_num_shards(const ct_loader *l) { return l->n_shards; }

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
