/*
 * The remote source (source.h): a `ctrain prepare` output at an http(s)://
 * or s3:// URL, listed from its manifest (ct_remote_list: from the disk
 * cache when the server cannot be reached or data.offline is set), each
 * shard read by byte ranges of whole blocks through the disk block cache and
 * a small memory tier, every block checked against the manifest's hash and,
 * when it is first used, its tokens against the model's vocabulary
 * (shard_remote.c). Read-ahead passes fetch the blocks of the batches ahead
 * of the reader, up to data.readahead bytes.
 * Leaves out: HTTP and S3 (remote.c), the manifest (remote_manifest.c), which
 * batches come next (the loader's read-ahead thread).
 */
#include "data/shard/source.h"

#include "core/dtype.h"
#include "ctrain/config.h" /* CT_PATH_MAX */
#include "data/shard/shard.h"
#include "data/shard/shard_remote.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REMOTE_CHUNK 4096 /* tokens decoded per remote read */
#define AHEAD_MIN_BLOCKS 4 /* the least a read-ahead pass may fetch */

typedef struct remote_source {
    ct_source base;
    ct_remote_ctx *ctx;
    ct_rshard **shards; /* (n) */
    int *tsize;         /* (n) bytes per token */
    ct_remote_shard_info *side; /* (n) side_url, side_bytes, side_hash of each (the rest unused) */
    char *manifest;     /* the manifest's text (NULL: a lone shard without one) */
    size_t manifest_len;
    char spec_disp[CT_PATH_MAX];
} remote_source;

static bool remote_claims(const char *spec) { return ct_remote_is_url(spec); }

static ct_remote_data_opts remote_opts(const ct_source_opts *o) {
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

static void remote_close(ct_source *src) {
    remote_source *s = (remote_source *)src;
    if (s->shards)
        for (int i = 0; i < src->n; i++) ct_rshard_close(s->shards[i]);
    ct_remote_ctx_close(s->ctx); /* after every shard on it */
    free(s->shards);
    free(s->tsize);
    ct_remote_shard_info_free(s->side, src->n);
    free(s->manifest);
    ct_source_base_free(src);
    free(s);
}

static ct_status remote_open(ct_source **out, const ct_source_opts *o) {
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
    remote_source *s = calloc(1, sizeof *s);
    if (!s) return CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    s->base.i = &ct_source_remote_i;
    ct_remote_display(o->spec, s->spec_disp, sizeof s->spec_disp);
    ct_remote_shard_info *info = NULL;
    int n = 0, vocab = 0;
    ct_status st = ct_remote_ctx_open(&s->ctx, &ro);
    if (st == CT_OK)
        st = ct_remote_list(s->ctx, o->spec, o->split, &info, &n, &vocab, &s->manifest,
                            &s->manifest_len);
    if (st == CT_OK && o->vocab_size > 0 && vocab > o->vocab_size) {
        st = CT_ERR(CT_ERR_ARG, "data.%s: %s was prepared with a tokenizer of %d tokens, more "
                    "than the model's vocab_size %d", o->split, s->spec_disp, vocab,
                    o->vocab_size);
        ct_error_hint("the shards were made for a different vocabulary than the model");
    }
    if (st == CT_OK && (st = ct_source_base_alloc(&s->base, &ct_source_remote_i, n)) == CT_OK) {
        s->shards = calloc((size_t)(n > 0 ? n : 1), sizeof *s->shards);
        s->tsize = calloc((size_t)(n > 0 ? n : 1), sizeof *s->tsize);
        s->side = calloc((size_t)(n > 0 ? n : 1), sizeof *s->side);
        if (!s->shards || !s->tsize || !s->side)
            st = CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    }
    for (int i = 0; st == CT_OK && i < n; i++) {
        s->base.ntok[i] = info[i].ntok;
        s->tsize[i] = info[i].tsize;
        s->side[i].side_url = info[i].side_url; /* taken over */
        info[i].side_url = NULL;
        s->side[i].side_bytes = info[i].side_bytes;
        memcpy(s->side[i].side_hash, info[i].side_hash, sizeof s->side[i].side_hash);
        st = ct_rshard_open(&s->shards[i], s->ctx, &info[i], o->vocab_size);
        if (st == CT_OK && !(s->base.names[i] = strdup(ct_rshard_url(s->shards[i]))))
            st = CT_ERR(CT_ERR_OOM, "out of memory for the loader");
    }
    ct_remote_shard_info_free(info, n);
    if (st) {
        remote_close(&s->base);
        return st;
    }
    s->base.readahead = ct_remote_ctx_opts(s->ctx)->readahead;
    s->base.ahead_budget = s->base.readahead / CT_REMOTE_BLOCK_BYTES;
    if (s->base.ahead_budget < AHEAD_MIN_BLOCKS) s->base.ahead_budget = AHEAD_MIN_BLOCKS;
    *out = &s->base;
    return CT_OK;
}

/* ------------------------------------------------------------ the tokens */

/* Tokens through the block cache, decoded. */
static ct_status remote_read(ct_source *src, int i, int64_t start, int64_t count, int32_t *out) {
    remote_source *s = (remote_source *)src;
    int64_t ntok = src->ntok[i];
    int tsize = s->tsize[i];
    if (start < 0 || count < 0 || start > ntok || count > ntok - start)
        return CT_ERR(CT_ERR_ARG, "%s: cannot read %" PRId64 " tokens from %" PRId64 ": the "
                      "shard holds %" PRId64, src->names[i], count, start, ntok);
    uint8_t buf[REMOTE_CHUNK * 4];
    for (int64_t done = 0; done < count; done += REMOTE_CHUNK) {
        int64_t n = count - done < REMOTE_CHUNK ? count - done : REMOTE_CHUNK;
        ct_status st = ct_rshard_read(s->shards[i], CT_SHARD_HEADER_BYTES + (start + done) * tsize,
                                      n * tsize, buf);
        if (st) return st;
        for (int64_t k = 0; k < n; k++) {
            uint32_t t = tsize == 2 ? ct_le_load_u16(buf + 2 * k) : ct_le_load_u32(buf + 4 * k);
            if (t > (uint32_t)INT32_MAX)
                return CT_ERR(CT_ERR_FORMAT, "%s: token %" PRIu32 " at position %" PRId64 " is "
                              "out of range", src->names[i], t, start + done + k);
            out[done + k] = (int32_t)t;
        }
    }
    return CT_OK;
}

/* Checked block by block as they arrive (shard_remote.c). */
static ct_status remote_check_tokens(ct_source *src, int i, int vocab) {
    (void)src;
    (void)i;
    (void)vocab;
    return CT_OK;
}

/* The read-ahead fetches remote blocks; a hint has nothing to add. */
static void remote_willneed(ct_source *src, int i, int64_t start, int64_t count) {
    (void)src;
    (void)i;
    (void)start;
    (void)count;
}

static bool remote_ahead(ct_source *src, ct_source_pass *p, int i, int64_t start,
                         int64_t count) {
    remote_source *s = (remote_source *)src;
    int64_t tsize = s->tsize[i], fetched;
    int64_t lo = (CT_SHARD_HEADER_BYTES + start * tsize) / CT_REMOTE_BLOCK_BYTES;
    int64_t hi = (CT_SHARD_HEADER_BYTES + (start + count) * tsize - 1) / CT_REMOTE_BLOCK_BYTES;
    /* a sequential read's shared block is charged once */
    if (p->started && p->last_shard == i && lo <= p->last_unit) lo = p->last_unit + 1;
    if (lo > hi) return true;
    if (p->spent + hi - lo + 1 > p->budget) return false;
    p->spent += hi - lo + 1;
    p->started = true;
    p->last_shard = i;
    p->last_unit = hi;
    int64_t first = lo * CT_REMOTE_BLOCK_BYTES, bytes = (hi + 1) * CT_REMOTE_BLOCK_BYTES - first;
    /* from the first whole token of block lo, one token past block hi */
    int64_t t0 = (first - CT_SHARD_HEADER_BYTES) / tsize;
    if (t0 < 0) t0 = 0;
    if (ct_rshard_prefetch(s->shards[i], CT_SHARD_HEADER_BYTES + t0 * tsize,
                           (bytes / tsize + 1) * tsize, &fetched))
        ct_error_clear(); /* the blocks are marked failed: the reader tries them again */
    return true;
}

/* ------------------------------------------------------ files beside them */

/* The manifest's file beside shard i, when its name ends with suffix. */
static const ct_remote_shard_info *side_of(const remote_source *s, int i, const char *suffix) {
    const char *u = s->side[i].side_url;
    size_t n = u ? strlen(u) : 0, k = strlen(suffix);
    return n > k && !strcmp(u + n - k, suffix) ? &s->side[i] : NULL;
}

static bool remote_has_side(ct_source *src, int i, const char *suffix) {
    return side_of((remote_source *)src, i, suffix) != NULL;
}

static ct_status remote_side_name(ct_source *src, int i, const char *suffix, char *buf,
                                  size_t cap) {
    const ct_remote_shard_info *side = side_of((remote_source *)src, i, suffix);
    if (side) {
        ct_remote_display(side->side_url, buf, cap);
        return CT_OK;
    }
    return ct_source_side_path(buf, cap, src->names[i], suffix);
}

static void remote_free_bytes(const void *data, size_t len) {
    (void)len;
    free((void *)data);
}

static ct_status remote_side_open(ct_source *src, int i, const char *suffix, size_t min_bytes,
                                  const ct_file_map_msgs *msgs, ct_source_bytes *out) {
    memset(out, 0, sizeof *out);
    remote_source *s = (remote_source *)src;
    const ct_remote_shard_info *side = side_of(s, i, suffix);
    char name[CT_PATH_MAX];
    if (!side) {
        /* the manifest lists no such file beside this shard */
        ct_source_side_path(name, sizeof name, src->names[i], suffix);
        ct_status st = CT_ERR(CT_ERR_IO, "cannot open %s %s: the manifest lists none beside %s",
                              msgs && msgs->noun ? msgs->noun : "file", name, src->names[i]);
        if (msgs && msgs->missing_hint) ct_error_hint("%s", msgs->missing_hint);
        return st;
    }
    ct_remote_display(side->side_url, name, sizeof name);
    if ((size_t)side->side_bytes < min_bytes) {
        ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: the manifest says %" PRId64 " bytes, shorter "
                              "than the %zu-byte %s", name, side->side_bytes, min_bytes,
                              msgs && msgs->short_what ? msgs->short_what : "minimum");
        if (msgs && msgs->short_hint) ct_error_hint("%s", msgs->short_hint);
        return st;
    }
    void *data;
    ct_status st = ct_remote_get_object(s->ctx, side->side_url, side->side_bytes,
                                        side->side_hash, &data);
    if (st) return st;
    out->data = data;
    out->len = (size_t)side->side_bytes;
    out->release = remote_free_bytes;
    return CT_OK;
}

static const char *remote_manifest(ct_source *src, size_t *len) {
    remote_source *s = (remote_source *)src;
    *len = s->manifest_len;
    return s->manifest;
}

static bool remote_stats(ct_source *src, ct_source_stats *out) {
    ct_remote_data_stats r;
    ct_remote_ctx_stats(((remote_source *)src)->ctx, &r);
    out->blocks_fetched = r.blocks_fetched;
    out->bytes_fetched = r.bytes_fetched;
    out->disk_hits = r.disk_hits;
    out->memory_hits = r.memory_hits;
    out->bad_blocks = r.bad_blocks;
    out->cache_write_errors = r.cache_write_errors;
    out->read_wait_s = r.read_wait_s;
    return true;
}

const ct_source_i ct_source_remote_i = {
    .name = "remote",
    .claims = remote_claims,
    .open = remote_open,
    .close = remote_close,
    .read = remote_read,
    .check_tokens = remote_check_tokens,
    .willneed = remote_willneed,
    .ahead = remote_ahead,
    .has_side = remote_has_side,
    .side_name = remote_side_name,
    .side_open = remote_side_open,
    .manifest = remote_manifest,
    .stats = remote_stats,
};
