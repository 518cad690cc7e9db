/*
 * Remote token shards (see shard_remote.h): the context (the disk cache, the
 * memory tier, whether the network may be used), the per-block states of a
 * shard (absent, on disk, being fetched, failed), and fetching runs of blocks
 * checked against the manifest.
 * A block's state is this process's knowledge only: the disk cache is shared
 * and may lose a block at any time (eviction by another run), so a reader
 * that finds a block gone fetches it again (once, when the server could not
 * be reached at the start; never under data.offline).
 * Leaves out: the manifest (remote_manifest.c), HTTP and S3 (remote.c), the
 * read-ahead order (data/loader/loader_ahead.c).
 */
#include "data/shard/shard_remote_int.h"

#include "core/dtype.h"
#include "data/shard/shard.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* A block's state in this process. FAILED: the last fetch ran out of retries
 * (the reader tries once more itself, the read-ahead passes over it); BAD: its
 * content is wrong (header, vocabulary), which no fetch mends. */
enum { BLK_ABSENT = 0, BLK_ON_DISK = 1, BLK_FETCHING = 2, BLK_FAILED = 3, BLK_BAD = 4 };
#define BLK_STATE 0x0f
#define BLK_CHECKED 0x10 /* header and vocabulary checked in this process */

ct_remote_data_opts ct_remote_data_opts_default(void) {
    ct_remote_data_opts o;
    memset(&o, 0, sizeof o);
    o.cache_limit = (int64_t)10 << 30;
    o.cache_ttl_s = 7 * 24 * 3600.0;
    o.readahead = (int64_t)256 << 20;
    o.net = ct_remote_opts_default();
    return o;
}

/* ---------------------------------------------------------------- context */

ct_status ct_remote_ctx_open(ct_remote_ctx **out, const ct_remote_data_opts *o) {
    *out = NULL;
    ct_remote_ctx *c = calloc(1, sizeof *c);
    if (!c) return CT_ERR(CT_ERR_OOM, "out of memory for remote data");
    c->o = *o;
    c->net = o->offline ? REMOTE_NET_OFF : REMOTE_NET_ON;
    if (o->cache_dir && o->cache_dir[0]) snprintf(c->cache_dir, sizeof c->cache_dir, "%s", o->cache_dir);
    else ct_blockcache_default_dir(c->cache_dir, sizeof c->cache_dir);
    c->o.cache_dir = c->cache_dir;
    pthread_mutex_init(&c->mu, NULL);
    ct_status st = ct_blockcache_open(&c->cache, c->cache_dir, o->cache_limit, o->cache_ttl_s);
    for (int i = 0; st == CT_OK && i < CT_REMOTE_MEM_SLOTS; i++)
        if (!(c->slots[i].data = malloc((size_t)CT_REMOTE_BLOCK_BYTES)))
            st = CT_ERR(CT_ERR_OOM, "out of memory for remote data's memory tier");
    if (st) {
        ct_remote_ctx_close(c);
        return st;
    }
    *out = c;
    return CT_OK;
}

void ct_remote_ctx_close(ct_remote_ctx *c) {
    if (!c) return;
    for (int i = 0; i < CT_REMOTE_MEM_SLOTS; i++) free(c->slots[i].data);
    ct_blockcache_close(c->cache);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const ct_remote_data_opts *ct_remote_ctx_opts(const ct_remote_ctx *c) { return &c->o; }

void ct_remote_ctx_stats(ct_remote_ctx *c, ct_remote_data_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------------ shard */

struct ct_rshard {
    ct_remote_ctx *ctx;
    char *url;
    char disp[CT_PATH_MAX];
    char key[33]; /* the cache's name for this shard */
    int64_t bytes, ntok, n_blocks;
    int tsize, vocab;
    uint64_t *hashes; /* manifest's, or NULL */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *state;   /* (n_blocks) BLK_* | BLK_CHECKED */
    char err_msg[REMOTE_ERR_MAX], err_hint[REMOTE_ERR_MAX];
    ct_status err;
};

ct_status ct_rshard_open(ct_rshard **out, ct_remote_ctx *ctx, ct_remote_shard_info *info,
                         int vocab_size) {
    *out = NULL;
    ct_rshard *s = calloc(1, sizeof *s);
    int64_t nb = (info->bytes + CT_REMOTE_BLOCK_BYTES - 1) / CT_REMOTE_BLOCK_BYTES;
    if (!s || !(s->state = calloc((size_t)nb, 1))) {
        free(s);
        return CT_ERR(CT_ERR_OOM, "out of memory for a remote shard");
    }
    s->ctx = ctx;
    s->url = info->url;
    s->hashes = info->blocks;
    info->url = NULL;
    info->blocks = NULL;
    ct_remote_display(s->url, s->disp, sizeof s->disp);
    s->bytes = info->bytes;
    s->ntok = info->ntok;
    s->tsize = info->tsize;
    s->n_blocks = nb;
    s->vocab = vocab_size;
    remote_shard_key(s->disp, info->hash, info->bytes, s->key);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    *out = s;
    return CT_OK;
}

void ct_rshard_close(ct_rshard *s) {
    if (!s) return;
    /* the memory tier must not name a freed shard */
    pthread_mutex_lock(&s->ctx->mu);
    for (int i = 0; i < CT_REMOTE_MEM_SLOTS; i++)
        if (s->ctx->slots[i].owner == s) s->ctx->slots[i].owner = NULL;
    pthread_mutex_unlock(&s->ctx->mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->url);
    free(s->hashes);
    free(s->state);
    free(s);
}

const char *ct_rshard_url(const ct_rshard *s) { return s->disp; }

static size_t block_len(const ct_rshard *s, int64_t b) {
    int64_t left = s->bytes - b * CT_REMOTE_BLOCK_BYTES;
    return (size_t)(left < CT_REMOTE_BLOCK_BYTES ? left : CT_REMOTE_BLOCK_BYTES);
}

static void stat_add(ct_remote_ctx *c, int64_t *f, int64_t v) {
    pthread_mutex_lock(&c->mu);
    *f += v;
    pthread_mutex_unlock(&c->mu);
}

/* The first use of block b in this process: the header (block 0) against the
 * manifest, and every token below the model's vocabulary. */
static ct_status check_block(ct_rshard *s, int64_t b, const uint8_t *d, size_t len) {
    int64_t lo = b * CT_REMOTE_BLOCK_BYTES;
    if (b == 0) {
        uint32_t magic = ct_le_load_u32(d), version = ct_le_load_u32(d + 4);
        uint32_t ntok = ct_le_load_u32(d + 8);
        int tsize = version == 1 ? 2 : version == 2 ? 4 : 0;
        if (magic != CT_SHARD_MAGIC || tsize != s->tsize || (int64_t)ntok != s->ntok)
            return CT_ERR(CT_ERR_FORMAT, "%s: header (magic %" PRIu32 ", version %" PRIu32 ", %"
                          PRIu32 " tokens) does not match the manifest (%" PRId64 " tokens of "
                          "%d bytes)", s->disp, magic, version, ntok, s->ntok, s->tsize);
    }
    if (s->vocab <= 0) return CT_OK;
    int64_t from = lo < CT_SHARD_HEADER_BYTES ? CT_SHARD_HEADER_BYTES : lo;
    for (int64_t p = from; p < lo + (int64_t)len; p += s->tsize) {
        const uint8_t *q = d + (p - lo);
        uint32_t t = s->tsize == 2 ? ct_le_load_u16(q) : ct_le_load_u32(q);
        if (t >= (uint32_t)s->vocab) {
            ct_status st = CT_ERR(CT_ERR_ARG, "%s: token %" PRIu32 " at index %" PRId64 " is out "
                                  "of range: the model's vocab_size is %d (expected 0..%d)",
                                  s->disp, t, (p - CT_SHARD_HEADER_BYTES) / s->tsize, s->vocab,
                                  s->vocab - 1);
            ct_error_hint("the shards were made for a different vocabulary than the model");
            return st;
        }
    }
    return CT_OK;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)}, rem;
    while (nanosleep(&ts, &rem) != 0 && errno == EINTR) ts = rem;
}

/* Fetch blocks [b0, b0+nb) in one request into buf, each checked against the
 * manifest; a mismatch is fetched again (data.retries), as a truncated or
 * corrupted transfer would be. */
static ct_status fetch_run(ct_rshard *s, int64_t b0, int64_t nb, uint8_t *buf) {
    ct_remote_ctx *c = s->ctx;
    ct_remote_opts down = c->o.net;
    down.retries = 0; /* the server was not there a moment ago: one try per block */
    const ct_remote_opts *net = c->net == REMOTE_NET_DOWN ? &down : &c->o.net;
    int64_t off = b0 * CT_REMOTE_BLOCK_BYTES, end = (b0 + nb) * CT_REMOTE_BLOCK_BYTES;
    if (end > s->bytes) end = s->bytes;
    if (c->net == REMOTE_NET_OFF) {
        ct_status st = CT_ERR(CT_ERR_IO, "%s: block %" PRId64 " is not in the disk cache, and "
                              "data.offline=true fetches nothing (the cache held %" PRId64 " of "
                              "the %" PRId64 " blocks of data.%s's shards at the start)", s->disp,
                              b0, c->cached_blocks, c->blocks, c->split);
        ct_error_hint("run with the network (data.offline=false) to fetch the rest, then "
                      "train.resume=auto");
        return st;
    }
    double wait = net->backoff_s > 0 ? net->backoff_s : 0.5;
    for (int attempt = 0;; attempt++) {
        ct_status st = ct_remote_get_range(s->url, off, end - off, buf, net);
        if (st && c->net == REMOTE_NET_DOWN) {
            char why[REMOTE_ERR_MAX];
            remote_net_reason(why, sizeof why, ct_last_error(), s->disp);
            ct_error_clear();
            st = CT_ERR(CT_ERR_IO, "%s: block %" PRId64 " is not in the disk cache, and the server "
                        "cannot be reached (%s); the cache held %" PRId64 " of the %" PRId64
                        " blocks of data.%s's shards at the start", s->disp, b0, why,
                        c->cached_blocks, c->blocks, c->split);
            ct_error_hint("start the server or mend the network, then train.resume=auto");
        }
        if (st) return st;
        int64_t bad = -1;
        for (int64_t b = b0; s->hashes && b < b0 + nb && bad < 0; b++)
            if (ct_block_hash(buf + (b - b0) * CT_REMOTE_BLOCK_BYTES, block_len(s, b)) !=
                s->hashes[b])
                bad = b;
        if (bad < 0) {
            pthread_mutex_lock(&s->ctx->mu);
            s->ctx->st.blocks_fetched += nb;
            s->ctx->st.bytes_fetched += end - off;
            pthread_mutex_unlock(&s->ctx->mu);
            return CT_OK;
        }
        stat_add(s->ctx, &s->ctx->st.bad_blocks, 1);
        if (attempt >= net->retries) {
            st = CT_ERR(CT_ERR_IO, "%s: block %" PRId64 " (bytes %" PRId64 "..%" PRId64 ") does "
                        "not match the manifest's hash after %d attempts", s->disp, bad,
                        bad * CT_REMOTE_BLOCK_BYTES,
                        bad * CT_REMOTE_BLOCK_BYTES + (int64_t)block_len(s, bad), attempt + 1);
            ct_error_hint("the object changed after its manifest was written (prepare it "
                          "again), or something between here and the server corrupts data");
            return st;
        }
        ct_log(CT_LOG_WARN, "%s: block %" PRId64 " does not match the manifest's hash; fetching "
               "it again (attempt %d of %d)", s->disp, bad, attempt + 2, net->retries + 1);
        sleep_s(wait);
        wait = wait * 2 > 8 ? 8 : wait * 2;
    }
}

/* Keep fetched blocks on disk; a cache that cannot take them (full disk) is
 * warned about once and the run goes on from memory. */
static void keep_blocks(ct_rshard *s, int64_t b0, int64_t nb, const uint8_t *buf) {
    for (int64_t b = b0; b < b0 + nb; b++) {
        ct_status st = ct_blockcache_put(s->ctx->cache, s->key, b,
                                         buf + (b - b0) * CT_REMOTE_BLOCK_BYTES, block_len(s, b));
        if (st == CT_OK) continue;
        pthread_mutex_lock(&s->ctx->mu);
        s->ctx->st.cache_write_errors++;
        bool warn = !s->ctx->warned_cache_write;
        s->ctx->warned_cache_write = true;
        pthread_mutex_unlock(&s->ctx->mu);
        if (warn)
            ct_log(CT_LOG_WARN, "data.cache_dir: %s; reading on without caching (blocks are "
                   "fetched again when needed)", ct_last_error());
        ct_error_clear();
    }
}

/* Record a failure of blocks [b0, b0+nb) from the error slot (BLK_FAILED or
 * BLK_BAD); wakes waiters. */
static void fail_blocks(ct_rshard *s, int64_t b0, int64_t nb, ct_status st, int how) {
    pthread_mutex_lock(&s->mu);
    s->err = st;
    snprintf(s->err_msg, sizeof s->err_msg, "%s", ct_last_error());
    snprintf(s->err_hint, sizeof s->err_hint, "%s", ct_last_hint());
    for (int64_t b = b0; b < b0 + nb; b++)
        s->state[b] = (uint8_t)((s->state[b] & BLK_CHECKED) | how);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static ct_status stored_error(ct_rshard *s) {
    ct_status st = ct_error_set(s->err ? s->err : CT_ERR_IO, __FILE__, __LINE__, "%s", s->err_msg);
    if (s->err_hint[0]) ct_error_hint("%s", s->err_hint);
    return st;
}

/* Check a block in hand (first use only) and mark it present. */
static ct_status settle_block(ct_rshard *s, int64_t b, const uint8_t *d) {
    pthread_mutex_lock(&s->mu);
    bool checked = s->state[b] & BLK_CHECKED;
    pthread_mutex_unlock(&s->mu);
    ct_status st = checked ? CT_OK : check_block(s, b, d, block_len(s, b));
    if (st) {
        fail_blocks(s, b, 1, st, BLK_BAD);
        return st;
    }
    pthread_mutex_lock(&s->mu);
    s->state[b] = BLK_ON_DISK | BLK_CHECKED;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return CT_OK;
}

/* Block b into buf: from the disk cache, else the network (also when the
 * read-ahead gave up on it: the network may be back by now). */
static ct_status load_block(ct_rshard *s, int64_t b, uint8_t *buf) {
    size_t len = block_len(s, b);
    uint64_t expect = s->hashes ? s->hashes[b] : 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while ((s->state[b] & BLK_STATE) == BLK_FETCHING) pthread_cond_wait(&s->cv, &s->mu);
        if ((s->state[b] & BLK_STATE) == BLK_BAD) {
            ct_status st = stored_error(s);
            pthread_mutex_unlock(&s->mu);
            return st;
        }
        uint8_t checked = s->state[b] & BLK_CHECKED;
        s->state[b] = BLK_FETCHING | checked; /* ours: others wait */
        pthread_mutex_unlock(&s->mu);
        if (ct_blockcache_get(s->ctx->cache, s->key, b, buf, len, expect)) {
            stat_add(s->ctx, &s->ctx->st.disk_hits, 1);
            return settle_block(s, b, buf);
        }
        double t0 = ct_time_s();
        ct_status st = fetch_run(s, b, 1, buf);
        pthread_mutex_lock(&s->ctx->mu);
        s->ctx->st.read_wait_s += ct_time_s() - t0;
        pthread_mutex_unlock(&s->ctx->mu);
        if (st) {
            fail_blocks(s, b, 1, st, BLK_FAILED);
            return st;
        }
        keep_blocks(s, b, 1, buf);
        return settle_block(s, b, buf);
    }
}

/* Copy bytes [off, off+n) of block b (n within it) through the memory tier. */
static ct_status read_in_block(ct_rshard *s, int64_t b, int64_t off, int64_t n, uint8_t *dst) {
    ct_remote_ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < CT_REMOTE_MEM_SLOTS; i++) {
        mem_slot *m = &c->slots[i];
        if (m->owner == s && m->block == b) {
            memcpy(dst, m->data + off, (size_t)n);
            m->used = ++c->clock;
            c->st.memory_hits++;
            pthread_mutex_unlock(&c->mu);
            return CT_OK;
        }
    }
    pthread_mutex_unlock(&c->mu);
    uint8_t *buf = malloc((size_t)CT_REMOTE_BLOCK_BYTES);
    if (!buf) return CT_ERR(CT_ERR_OOM, "out of memory reading %s", s->disp);
    ct_status st = load_block(s, b, buf);
    if (st == CT_OK) {
        memcpy(dst, buf + off, (size_t)n);
        pthread_mutex_lock(&c->mu);
        mem_slot *lru = &c->slots[0];
        for (int i = 1; i < CT_REMOTE_MEM_SLOTS; i++)
            if (c->slots[i].used < lru->used) lru = &c->slots[i];
        uint8_t *old = lru->data;
        lru->data = buf; /* swap buffers: no copy under the lock */
        buf = old;
        lru->owner = s;
        lru->block = b;
        lru->len = block_len(s, b);
        lru->used = ++c->clock;
        pthread_mutex_unlock(&c->mu);
    }
    free(buf);
    return st;
}

ct_status ct_rshard_read(ct_rshard *s, int64_t off, int64_t len, void *dst) {
    if (off < 0 || len < 0 || off > s->bytes || len > s->bytes - off)
        return CT_ERR(CT_ERR_ARG, "%s: cannot read %" PRId64 " bytes at %" PRId64 ": the shard "
                      "is %" PRId64 " bytes", s->disp, len, off, s->bytes);
    uint8_t *d = dst;
    while (len > 0) {
        int64_t b = off / CT_REMOTE_BLOCK_BYTES, in = off - b * CT_REMOTE_BLOCK_BYTES;
        int64_t n = CT_REMOTE_BLOCK_BYTES - in < len ? CT_REMOTE_BLOCK_BYTES - in : len;
        ct_status st = read_in_block(s, b, in, n, d);
        if (st) return st;
        d += n;
        off += n;
        len -= n;
    }
    return CT_OK;
}

ct_status ct_rshard_prefetch(ct_rshard *s, int64_t off, int64_t len, int64_t *fetched) {
    *fetched = 0;
    if (len <= 0 || off < 0 || off >= s->bytes) return CT_OK;
    if (len > s->bytes - off) len = s->bytes - off;
    int64_t b = off / CT_REMOTE_BLOCK_BYTES, last = (off + len - 1) / CT_REMOTE_BLOCK_BYTES;
    uint8_t *buf = NULL;
    ct_status st = CT_OK;
    while (b <= last && st == CT_OK) {
        /* the run of consecutive blocks from b that nobody has or fetches */
        int64_t run = 0;
        pthread_mutex_lock(&s->mu);
        for (int64_t k = b; k < s->n_blocks && run < CT_REMOTE_RUN_BLOCKS; k++) {
            int state = s->state[k] & BLK_STATE;
            /* failed blocks are left to the reader, which reports them */
            if (state == BLK_FETCHING || state == BLK_FAILED || state == BLK_BAD) break;
            /* past the range asked, a run grows only into blocks nobody has
             * touched (the next ones of a sequential read) */
            if (k > last && state != BLK_ABSENT) break;
            pthread_mutex_unlock(&s->mu);
            bool have = ct_blockcache_has(s->ctx->cache, s->key, k, block_len(s, k));
            pthread_mutex_lock(&s->mu);
            if ((s->state[k] & BLK_STATE) != state) break; /* another thread got there */
            if (have) {
                s->state[k] = (uint8_t)((s->state[k] & BLK_CHECKED) | BLK_ON_DISK);
                break;
            }
            s->state[k] = (uint8_t)((s->state[k] & BLK_CHECKED) | BLK_FETCHING);
            run++;
        }
        pthread_mutex_unlock(&s->mu);
        if (st) break;
        if (run == 0) {
            b++;
            continue;
        }
        if (!buf && !(buf = malloc((size_t)(CT_REMOTE_BLOCK_BYTES * CT_REMOTE_RUN_BLOCKS)))) {
            st = CT_ERR(CT_ERR_OOM, "out of memory reading %s", s->disp);
            fail_blocks(s, b, run, st, BLK_FAILED);
            break;
        }
        if ((st = fetch_run(s, b, run, buf))) {
            fail_blocks(s, b, run, st, BLK_FAILED);
            break;
        }
        keep_blocks(s, b, run, buf);
        for (int64_t k = b; k < b + run && st == CT_OK; k++)
            st = settle_block(s, k, buf + (k - b) * CT_REMOTE_BLOCK_BYTES);
        *fetched += run;
        b += run;
    }
    free(buf);
    return st;
}

/* ------------------------------------------------------- whole objects */

/* xxh3-128 of data as 32 hex digits, as prepare writes it into the manifest. */
static void hash128_hex(const void *data, size_t len, char hex[33]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
}

ct_status ct_remote_get_object(ct_remote_ctx *c, const char *url, int64_t bytes,
                               const char *hash, void **data) {
    *data = NULL;
    char disp[CT_PATH_MAX], key[33], got_hash[33];
    ct_remote_display(url, disp, sizeof disp);
    remote_shard_key(disp, hash, bytes, key);
    /* the cache: one block holding the object, used when whole and matching */
    char *copy = NULL;
    size_t len = 0;
    double stored;
    if (ct_blockcache_get_all(c->cache, key, 0, (size_t)bytes, &copy, &len, &stored)) {
        hash128_hex(copy, len, got_hash);
        if ((int64_t)len == bytes && !strcmp(got_hash, hash)) {
            stat_add(c, &c->st.disk_hits, 1);
            *data = copy;
            return CT_OK;
        }
        free(copy);
    }
    if (c->net == REMOTE_NET_OFF) {
        ct_status st = CT_ERR(CT_ERR_IO, "%s is not in the disk cache, and data.offline=true "
                              "fetches nothing", disp);
        ct_error_hint("run with the network (data.offline=false) to fetch it, then "
                      "train.resume=auto");
        return st;
    }
    ct_remote_opts down = c->o.net;
    down.retries = 0; /* the server was not there a moment ago: one try */
    const ct_remote_opts *net = c->net == REMOTE_NET_DOWN ? &down : &c->o.net;
    double wait = net->backoff_s > 0 ? net->backoff_s : 0.5;
    for (int attempt = 0;; attempt++) {
        double t0 = ct_time_s();
        ct_status st = ct_remote_get(url, (size_t)bytes, &copy, &len, net);
        pthread_mutex_lock(&c->mu);
        c->st.read_wait_s += ct_time_s() - t0;
        pthread_mutex_unlock(&c->mu);
        if (st && c->net == REMOTE_NET_DOWN) {
            char why[REMOTE_ERR_MAX];
            remote_net_reason(why, sizeof why, ct_last_error(), disp);
            ct_error_clear();
            st = CT_ERR(CT_ERR_IO, "%s is not in the disk cache, and the server cannot be "
                        "reached (%s)", disp, why);
            ct_error_hint("start the server or mend the network, then train.resume=auto");
        }
        if (st) return st;
        hash128_hex(copy, len, got_hash);
        if ((int64_t)len == bytes && !strcmp(got_hash, hash)) {
            pthread_mutex_lock(&c->mu);
            c->st.blocks_fetched++;
            c->st.bytes_fetched += (int64_t)len;
            pthread_mutex_unlock(&c->mu);
            break;
        }
        free(copy);
        copy = NULL;
        stat_add(c, &c->st.bad_blocks, 1);
        if (attempt >= net->retries) {
            st = CT_ERR(CT_ERR_IO, "%s: %zu bytes that do not match the manifest (%" PRId64
                        " bytes, xxh3_128 %s) after %d attempts", disp, len, bytes, hash,
                        attempt + 1);
            ct_error_hint("the object changed after its manifest was written (prepare it "
                          "again), or something between here and the server corrupts data");
            return st;
        }
        ct_log(CT_LOG_WARN, "%s does not match the manifest's hash; fetching it again (attempt "
               "%d of %d)", disp, attempt + 2, net->retries + 1);
        sleep_s(wait);
        wait = wait * 2 > 8 ? 8 : wait * 2;
    }
    /* kept for later runs; a cache that cannot take it is no error */
    if (ct_blockcache_put(c->cache, key, 0, copy, len)) {
        pthread_mutex_lock(&c->mu);
        c->st.cache_write_errors++;
        bool warn = !c->warned_cache_write;
        c->warned_cache_write = true;
        pthread_mutex_unlock(&c->mu);
        if (warn)
            ct_log(CT_LOG_WARN, "data.cache_dir: %s; reading on without caching (blocks are "
                   "fetched again when needed)", ct_last_error());
        ct_error_clear();
    }
    *data = copy;
    return CT_OK;
}
