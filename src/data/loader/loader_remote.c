/*
 * The loader over remote shards (http://, https://, s3://): opening them from
 * the dataset's manifest, and the read-ahead thread that keeps the blocks of
 * the next batches in the disk cache before the reader needs them.
 * The order is a pure function of (epoch, index), so the thread walks the
 * very positions the reader will take, from the consumer's position on, up to
 * data.readahead bytes of blocks ahead; each rank fetches only the blocks of
 * its own windows. A pass starts again when the consumer has moved a quarter
 * of the way, or at once after set_pos, skip or reset.
 * A fetch that runs out of retries marks its blocks failed in the shard and
 * the pass goes on; the reader tries them once more when it gets there, so a
 * run stops only at a batch that cannot be read then, never earlier.
 * Instruction data (a `ctrain prepare --format sft` output) at a URL is
 * recognised by its manifest and refused for now. The manifest comes from
 * the disk cache when the server cannot be reached or data.offline is set
 * (ct_remote_list).
 * Leaves out: the fetching itself (shard_remote.c).
 */
#include "data/loader/loader_int.h"

#include "ctrain/config.h" /* CT_PATH_MAX */
#include "data/shard/shard_remote.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RA_MAX_BATCHES ((int64_t)1 << 20) /* most batches one pass looks ahead */
#define RA_MIN_BLOCKS 4

static ct_remote_data_opts remote_opts(const ct_loader_opts *o) {
    ct_remote_data_opts r = ct_remote_data_opts_default();
    if (o->cache_dir && o->cache_dir[0]) r.cache_dir = o->cache_dir;
    if (o->cache_limit > 0) r.cache_limit = o->cache_limit;
    if (o->cache_ttl_s >= 0) r.cache_ttl_s = o->cache_ttl_s;
    if (o->readahead > 0) r.readahead = o->readahead;
    if (o->retries >= 0) r.net.retries = o->retries;
    if (o->timeout_s > 0) r.net.timeout_s = o->timeout_s;
    r.offline = o->offline;
    return r;
}

/* Refuse instruction data: its manifest (text, from ct_remote_list; NULL for
 * a lone shard without one) says ctrain-sft/1. */
static ct_status remote_refuse_sft(const char *spec, const char *text, size_t len) {
    if (!text || !loader_sft_manifest_says_sft(text, len)) return CT_OK;
    char disp[CT_PATH_MAX];
    ct_status st = CT_ERR(CT_ERR_ARG, "%s: instruction data from URLs is not supported yet; "
                          "this `ctrain prepare --format sft` output must be read from a local "
                          "directory", ct_remote_display(spec, disp, sizeof disp));
    ct_error_hint("download the directory (shards, .sft sidecars and manifest.json) and point "
                  "the data key at it");
    return st;
}

ct_status loader_remote_open(ct_loader *l, const ct_loader_opts *o) {
    ct_remote_data_opts ro = remote_opts(o);
    /* the read-ahead must fit the cache twice over, or it evicts what it fetched */
    int64_t need = 2 * ro.readahead + 4 * CT_REMOTE_BLOCK_BYTES;
    if (ro.cache_limit < need) {
        ct_status st = CT_ERR(CT_ERR_ARG, "data.cache_limit is %" PRId64 " bytes, less than "
                              "twice data.readahead (%" PRId64 ") plus four blocks: %" PRId64
                              " bytes", ro.cache_limit, ro.readahead, need);
        ct_error_hint("raise data.cache_limit or lower data.readahead");
        return st;
    }
    ct_status st = ct_remote_ctx_open(&l->remote, &ro);
    if (st) return st;
    ct_remote_shard_info *info = NULL;
    int n = 0, vocab = 0;
    char *manifest = NULL;
    size_t mlen = 0;
    if ((st = ct_remote_list(l->remote, o->spec, l->split_name, &info, &n, &vocab, &manifest,
                             &mlen)))
        return st;
    st = remote_refuse_sft(o->spec, manifest, mlen);
    free(manifest);
    if (st) {
        ct_remote_shard_info_free(info, n);
        return st;
    }
    if (o->vocab_size > 0 && vocab > o->vocab_size) {
        char disp[CT_PATH_MAX];
        st = CT_ERR(CT_ERR_ARG, "data.%s: %s was prepared with a tokenizer of %d tokens, more "
                    "than the model's vocab_size %d", l->split_name,
                    ct_remote_display(o->spec, disp, sizeof disp), vocab, o->vocab_size);
        ct_error_hint("the shards were made for a different vocabulary than the model");
        ct_remote_shard_info_free(info, n);
        return st;
    }
    l->n_shards = n;
    l->shards = calloc((size_t)n, sizeof *l->shards);
    l->paths = calloc((size_t)n, sizeof *l->paths);
    if (!l->shards || !l->paths) st = CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    for (int i = 0; st == CT_OK && i < n; i++) {
        st = ct_shard_open_remote(&l->shards[i], l->remote, &info[i], o->vocab_size);
        if (st == CT_OK && !(l->paths[i] = strdup(ct_shard_path(l->shards[i]))))
            st = CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    }
    ct_remote_shard_info_free(info, n);
    return st;
}

/* ------------------------------------------------------------ read-ahead */

/* One pass from (e0, i0): make the blocks of the next batches present, up to
 * the budget. Returns how many batches ahead it got. */
static int64_t ra_pass(ct_loader *l, int64_t e0, int64_t i0, uint64_t gen) {
    int64_t tsize = 4, fetched;
    int64_t budget = l->ra_budget_blocks, blocks = 0;
    int32_t last_s = -1;
    int64_t last_b = -1;
    int64_t k;
    for (k = 0; k < l->ra_batches; k++) {
        int64_t e = e0, i = i0;
        (void)loader_advance(l, &l->ra_loc, &e, &i, k); /* plain shards: cannot fail */
        int32_t s;
        int64_t off;
        loader_locate(l, &l->ra_loc, e, i, &s, &off);
        const ct_shard *sh = l->shards[s];
        tsize = ct_shard_token_bytes(sh);
        int64_t lo = (CT_SHARD_HEADER_BYTES + off * tsize) / CT_REMOTE_BLOCK_BYTES;
        int64_t hi = (CT_SHARD_HEADER_BYTES + (off + l->BT + 1) * tsize - 1) / CT_REMOTE_BLOCK_BYTES;
        if (s == last_s && lo <= last_b) lo = last_b + 1; /* a sequential read's shared block */
        if (lo > hi) continue;
        blocks += hi - lo + 1;
        if (blocks > budget) break;
        last_s = s;
        last_b = hi;
        int64_t first = lo * CT_REMOTE_BLOCK_BYTES, bytes = (hi + 1) * CT_REMOTE_BLOCK_BYTES - first;
        int64_t t0 = (first - CT_SHARD_HEADER_BYTES) / tsize;
        if (t0 < 0) t0 = 0;
        if (ct_shard_prefetch(sh, t0, bytes / tsize + 1, &fetched))
            ct_error_clear(); /* the blocks are marked failed: the reader tries them again */
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
               (l->ra_epoch - pe) * l->per_epoch + (l->ra_index - pi) < need)
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

ct_status loader_remote_start(ct_loader *l) {
    int64_t per_batch = (l->BT + 1) * 4;
    const ct_remote_data_opts *ro = ct_remote_ctx_opts(l->remote);
    l->ra_batches = ro->readahead / per_batch + 2;
    if (l->ra_batches > RA_MAX_BATCHES) l->ra_batches = RA_MAX_BATCHES;
    l->ra_budget_blocks = ro->readahead / CT_REMOTE_BLOCK_BYTES;
    if (l->ra_budget_blocks < RA_MIN_BLOCKS) l->ra_budget_blocks = RA_MIN_BLOCKS;
    ct_status st = loader_locator_init(&l->ra_loc, l->n_shards);
    if (st) return st;
    pthread_mutex_init(&l->ra_mu, NULL);
    pthread_cond_init(&l->ra_cv, NULL);
    l->ra_sync = true;
    if (pthread_create(&l->ra_thread, NULL, ra_main, l) != 0)
        return CT_ERR(CT_ERR_IO, "data.%s: cannot start the read-ahead thread", l->split_name);
    l->ra_running = true;
    return CT_OK;
}

void loader_remote_stop(ct_loader *l) {
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
    loader_locator_free(&l->ra_loc);
}

void loader_remote_moved(ct_loader *l, bool jump) {
    if (!l->ra_running) return;
    pthread_mutex_lock(&l->ra_mu);
    l->ra_epoch = l->epoch;
    l->ra_index = l->index;
    if (jump) l->ra_gen++;
    pthread_cond_signal(&l->ra_cv);
    pthread_mutex_unlock(&l->ra_mu);
}

void loader_remote_close(ct_loader *l) {
    ct_remote_ctx_close(l->remote);
    l->remote = NULL;
}

bool ct_loader_get_remote_stats(const ct_loader *l, ct_loader_remote_stats *out) {
    memset(out, 0, sizeof *out);
    if (!l || !l->remote) return false;
    ct_remote_data_stats s;
    ct_remote_ctx_stats(l->remote, &s);
    out->blocks_fetched = s.blocks_fetched;
    out->bytes_fetched = s.bytes_fetched;
    out->disk_hits = s.disk_hits;
    out->memory_hits = s.memory_hits;
    out->bad_blocks = s.bad_blocks;
    out->cache_write_errors = s.cache_write_errors;
    out->read_wait_s = s.read_wait_s;
    return true;
}
