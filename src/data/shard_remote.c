/*
 * Remote token shards (see shard_remote.h): the manifest, the per-block
 * states of a shard (absent, on disk, being fetched, failed), fetching runs
 * of blocks checked against the manifest, the memory tier, and the manifest
 * fields prepare writes for each shard.
 * A block's state is this process's knowledge only: the disk cache is shared
 * and may lose a block at any time (eviction by another run), so a reader
 * that finds a block gone fetches it again.
 * Leaves out: HTTP and S3 (remote.c), the read-ahead order (loader_remote.c).
 */
#include "data/shard_remote.h"

#include "core/dtype.h"
#include "ctrain/config.h" /* CT_PATH_MAX */
#include "data/shard.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define MANIFEST_MAX ((size_t)256 << 20) /* bytes: a larger manifest.json is refused */
#define ERR_MAX 1024

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

typedef struct mem_slot {
    const ct_rshard *owner; /* NULL: free */
    int64_t block;
    uint64_t used;          /* LRU clock */
    size_t len;
    uint8_t *data;          /* block_bytes */
} mem_slot;

/* How a context reaches the network (set by ct_remote_list, before any shard
 * is opened on it). */
enum { NET_ON = 0, NET_DOWN = 1, NET_OFF = 2 };

struct ct_remote_ctx {
    ct_remote_data_opts o;
    char cache_dir[CT_PATH_MAX];
    ct_blockcache *cache;
    pthread_mutex_t mu; /* slots, clock, stats */
    mem_slot slots[CT_REMOTE_MEM_SLOTS];
    uint64_t clock;
    ct_remote_data_stats st;
    bool warned_cache_write;
    /* NET_DOWN: the server could not be reached when the manifest was asked
     * for, and the cached copy stands in (a missing block gets one attempt);
     * NET_OFF: data.offline (no request at all) */
    int net;
    char net_why[ERR_MAX];          /* NET_DOWN: what the manifest's request met */
    char split[8];                  /* "train" | "val", for messages */
    int64_t cached_blocks, blocks;  /* of the split's shards, when the copy was taken */
};

ct_status ct_remote_ctx_open(ct_remote_ctx **out, const ct_remote_data_opts *o) {
    *out = NULL;
    ct_remote_ctx *c = calloc(1, sizeof *c);
    if (!c) return CT_ERR(CT_ERR_OOM, "out of memory for remote data");
    c->o = *o;
    c->net = o->offline ? NET_OFF : NET_ON;
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

/* ---------------------------------------------------------------- cache keys */

/* xxh3-128 of text as 32 hex digits: a cache key. */
static void key_of(const char *text, size_t len, char key[33]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(text, len));
    for (int i = 0; i < 16; i++) snprintf(key + 2 * i, 3, "%02x", c.digest[i]);
}

/* A shard's key: where it is (as displayed: no credentials or query) and what
 * it holds, so a dataset prepared again at the same URL never reads an older
 * one's blocks. */
static void shard_key(const char *disp, const char *hash, int64_t bytes, char key[33]) {
    char id[CT_PATH_MAX + 64];
    int idl = snprintf(id, sizeof id, "%s\n%s\n%" PRId64, disp, hash, bytes);
    key_of(id, (size_t)(idl < (int)sizeof id ? idl : (int)sizeof id - 1), key);
}

/* A manifest's key: its URL as displayed (block 0 of it holds the text). */
static void manifest_key(const char *disp, char key[33]) {
    char id[CT_PATH_MAX + 32];
    int idl = snprintf(id, sizeof id, "manifest\n%s", disp);
    key_of(id, (size_t)(idl < (int)sizeof id ? idl : (int)sizeof id - 1), key);
}

/* ---------------------------------------------------------------- manifest */

void ct_remote_shard_info_free(ct_remote_shard_info *v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) {
        free(v[i].url);
        free(v[i].blocks);
    }
    free(v);
}

static int cmp_info(const void *a, const void *b) {
    return strcmp(((const ct_remote_shard_info *)a)->url, ((const ct_remote_shard_info *)b)->url);
}

static bool is_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return s[n] == '\0';
}

static double num_field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* One manifest entry into *out (url = base + file). */
static ct_status parse_entry(const char *murl, const char *base, const cJSON *e,
                             ct_remote_shard_info *out) {
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(e, "file");
    const char *f = cJSON_IsString(file) ? file->valuestring : NULL;
    if (!f || !f[0] || strchr(f, '/') || !strcmp(f, "..") || strlen(f) > 255)
        return CT_ERR(CT_ERR_FORMAT, "%s: a shard's \"file\" is missing or not a plain file name",
                      murl);
    double tokens = num_field(e, "tokens"), version = num_field(e, "version");
    double bytes = num_field(e, "bytes");
    if (tokens < 1 || tokens > INT32_MAX || tokens != (double)(int64_t)tokens ||
        (version != 1 && version != 2))
        return CT_ERR(CT_ERR_FORMAT, "%s: shard %s: \"tokens\" (1..%d) or \"version\" (1 or 2) "
                      "missing or out of range", murl, f, INT32_MAX);
    out->ntok = (int64_t)tokens;
    out->tsize = version == 1 ? 2 : 4;
    int64_t expect = CT_SHARD_HEADER_BYTES + out->ntok * out->tsize;
    if (bytes >= 0 && bytes != (double)expect)
        return CT_ERR(CT_ERR_FORMAT, "%s: shard %s: \"bytes\" is %.0f but %" PRId64 " tokens of "
                      "%d bytes make %" PRId64, murl, f, bytes, out->ntok, out->tsize, expect);
    out->bytes = expect;
    size_t ul = strlen(base) + strlen(f) + 1;
    if (!(out->url = malloc(ul))) return CT_ERR(CT_ERR_OOM, "out of memory reading %s", murl);
    snprintf(out->url, ul, "%s%s", base, f);
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(e, "xxh3_128");
    if (cJSON_IsString(h) && strlen(h->valuestring) == 32 && is_hex(h->valuestring, 32))
        memcpy(out->hash, h->valuestring, 33);
    const cJSON *bl = cJSON_GetObjectItemCaseSensitive(e, "blocks");
    double bb = num_field(e, "block_bytes");
    if (!cJSON_IsArray(bl)) return CT_OK; /* an older manifest: lengths are checked, no hashes */
    if (bb != (double)CT_REMOTE_BLOCK_BYTES)
        return CT_ERR(CT_ERR_FORMAT, "%s: shard %s: \"block_bytes\" is %.0f, expected %" PRId64,
                      murl, f, bb, CT_REMOTE_BLOCK_BYTES);
    int64_t nb = (expect + CT_REMOTE_BLOCK_BYTES - 1) / CT_REMOTE_BLOCK_BYTES;
    if (cJSON_GetArraySize(bl) != nb)
        return CT_ERR(CT_ERR_FORMAT, "%s: shard %s lists %d block hashes, expected %" PRId64
                      " for %" PRId64 " bytes", murl, f, cJSON_GetArraySize(bl), nb, expect);
    if (!(out->blocks = calloc((size_t)nb, sizeof *out->blocks)))
        return CT_ERR(CT_ERR_OOM, "out of memory reading %s", murl);
    int64_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, bl) {
        if (!cJSON_IsString(x) || strlen(x->valuestring) != 16 || !is_hex(x->valuestring, 16))
            return CT_ERR(CT_ERR_FORMAT, "%s: shard %s: block hash %" PRId64 " is not 16 hex "
                          "digits", murl, f, i);
        out->blocks[i++] = strtoull(x->valuestring, NULL, 16);
    }
    out->block_bytes = CT_REMOTE_BLOCK_BYTES;
    out->n_blocks = nb;
    return CT_OK;
}

/* A shard URL without a manifest: its header gives the size. */
static ct_status info_from_header(const char *url, const ct_remote_opts *net,
                                  ct_remote_shard_info *out) {
    uint8_t h[12];
    ct_status st = ct_remote_get_range(url, 0, sizeof h, h, net);
    if (st) return st;
    uint32_t magic = ct_le_load_u32(h), version = ct_le_load_u32(h + 4);
    uint32_t ntok = ct_le_load_u32(h + 8);
    if (magic != CT_SHARD_MAGIC || (version != 1 && version != 2) || ntok < 1 ||
        ntok > (uint32_t)INT32_MAX)
        return CT_ERR(CT_ERR_FORMAT, "%s: not a token shard (magic %" PRIu32 ", version %" PRIu32
                      ", expected %d and 1 or 2)", url, magic, version, CT_SHARD_MAGIC);
    out->ntok = ntok;
    out->tsize = version == 1 ? 2 : 4;
    out->bytes = CT_SHARD_HEADER_BYTES + out->ntok * out->tsize;
    int64_t size;
    if ((st = ct_remote_size(url, &size, net))) return st;
    if (size != out->bytes)
        return CT_ERR(CT_ERR_FORMAT, "%s: the header says %" PRId64 " tokens of %d bytes (%"
                      PRId64 " bytes) but the object is %" PRId64 " bytes", url, out->ntok,
                      out->tsize, out->bytes, size);
    if (!(out->url = strdup(url))) return CT_ERR(CT_ERR_OOM, "out of memory");
    return CT_OK;
}

ct_status ct_remote_manifest_parse(const char *text, size_t len, const char *murl,
                                   const char *base, const char *split, const char *fname,
                                   ct_remote_shard_info **out, int *n, int *vocab_size) {
    *out = NULL;
    *n = 0;
    *vocab_size = 0;
    cJSON *m = cJSON_ParseWithLength(text, len);
    const cJSON *shards = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "shards") : NULL;
    if (!cJSON_IsArray(shards)) {
        cJSON_Delete(m);
        return CT_ERR(CT_ERR_FORMAT, "%s: expected a ctrain prepare manifest (a JSON object with "
                      "a \"shards\" array)", murl);
    }
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(m, "tokenizer");
    double vs = cJSON_IsObject(tk) ? num_field(tk, "vocab_size") : -1;
    if (vs > 0 && vs <= INT32_MAX) *vocab_size = (int)vs;
    int cap = cJSON_GetArraySize(shards), cnt = 0, other = 0;
    ct_remote_shard_info *v = calloc((size_t)(cap ? cap : 1), sizeof *v);
    if (!v) {
        cJSON_Delete(m);
        return CT_ERR(CT_ERR_OOM, "out of memory reading %s", murl);
    }
    ct_status st = CT_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, shards) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "split");
        if (fname) {
            if (!cJSON_IsString(f) || strcmp(f->valuestring, fname)) continue;
        } else if (!cJSON_IsString(sp) || strcmp(sp->valuestring, split)) {
            other++;
            continue;
        }
        if ((st = parse_entry(murl, base, e, &v[cnt]))) break;
        cnt++;
    }
    cJSON_Delete(m);
    if (!st && cnt == 0) {
        if (fname)
            st = CT_ERR(CT_ERR_FORMAT, "%s does not list %s", murl, fname);
        else if (other)
            st = CT_ERR(CT_ERR_IO, "%s: lists no %s shards (its %d shard(s) are another split's: "
                        "`ctrain prepare` made no %s split)", murl, split, other, split);
        else
            st = CT_ERR(CT_ERR_FORMAT, "%s: lists no shards", murl);
    }
    if (!st) qsort(v, (size_t)cnt, sizeof *v, cmp_info); /* the order a local directory has */
    /* two entries of one file would read its windows twice an epoch */
    for (int i = 0; !st && i + 1 < cnt; i++)
        if (!strcmp(v[i].url, v[i + 1].url))
            st = CT_ERR(CT_ERR_FORMAT, "%s lists %s twice", murl, v[i].url + strlen(base));
    if (st) { /* entry cnt may hold what parse_entry had allocated when it failed */
        ct_remote_shard_info_free(v, cnt < cap ? cnt + 1 : cnt);
        return st;
    }
    *out = v;
    *n = cnt;
    return CT_OK;
}

/* "3 h 12 min", "45 s": an age for messages. */
static void fmt_age(char *buf, size_t cap, double s) {
    if (s < 0) s = 0;
    if (s < 90) snprintf(buf, cap, "%.0f s", s);
    else if (s < 5400) snprintf(buf, cap, "%.0f min", s / 60);
    else if (s < 48 * 3600) snprintf(buf, cap, "%.0f h %.0f min", floor(s / 3600), fmod(s / 60, 60));
    else snprintf(buf, cap, "%.1f days", s / 86400);
}

/* The reason in a transport error, without the URL it starts with (the
 * message names it) and the count of the one quick attempt. */
static void net_reason(char *buf, size_t cap, const char *err, const char *disp) {
    size_t dl = strlen(disp);
    if (!strncmp(err, disp, dl) && !strncmp(err + dl, ": ", 2)) err += dl + 2;
    snprintf(buf, cap, "%s", err);
    char *cut = strstr(buf, " after 1 attempt (");
    if (!cut) cut = strstr(buf, ", on each of 1 attempt (");
    if (cut) *cut = '\0';
}

/* How many blocks of the listed shards the disk cache holds (into ctx). */
static void count_cached(ct_remote_ctx *ctx, const ct_remote_shard_info *v, int n) {
    ctx->cached_blocks = ctx->blocks = 0;
    for (int i = 0; i < n; i++) {
        char disp[CT_PATH_MAX], key[33];
        ct_remote_display(v[i].url, disp, sizeof disp);
        shard_key(disp, v[i].hash, v[i].bytes, key);
        int64_t nb = (v[i].bytes + CT_REMOTE_BLOCK_BYTES - 1) / CT_REMOTE_BLOCK_BYTES;
        for (int64_t k = 0; k < nb; k++) {
            int64_t left = v[i].bytes - k * CT_REMOTE_BLOCK_BYTES;
            size_t len = (size_t)(left < CT_REMOTE_BLOCK_BYTES ? left : CT_REMOTE_BLOCK_BYTES);
            ctx->cached_blocks += ct_blockcache_has(ctx->cache, key, k, len);
        }
        ctx->blocks += nb;
    }
}

/* The lone shard spec without a manifest: usable, checked by length only. */
static ct_status list_lone_shard(const char *spec, const ct_remote_opts *net, const char *why,
                                 ct_remote_shard_info **out, int *n) {
    char disp[CT_PATH_MAX];
    ct_remote_shard_info *v = calloc(1, sizeof *v);
    if (!v) return CT_ERR(CT_ERR_OOM, "out of memory");
    ct_status st = info_from_header(spec, net, v);
    if (st) {
        ct_remote_shard_info_free(v, 1);
        return st;
    }
    ct_log(CT_LOG_WARN, "%s: no manifest.json beside it (%s): its blocks are checked for "
           "length only (a ctrain prepare output has hashes for every block)",
           ct_remote_display(spec, disp, sizeof disp), why);
    *out = v;
    *n = 1;
    return CT_OK;
}

ct_status ct_remote_list(ct_remote_ctx *ctx, const char *spec, const char *split,
                         ct_remote_shard_info **out, int *n, int *vocab_size, char **manifest,
                         size_t *manifest_len) {
    *out = NULL;
    *n = 0;
    *vocab_size = 0;
    *manifest = NULL;
    *manifest_len = 0;
    const ct_remote_opts *net = &ctx->o.net;
    snprintf(ctx->split, sizeof ctx->split, "%s", split);
    size_t sl = strlen(spec);
    bool one = sl > 4 && !strcmp(spec + sl - 4, ".bin");
    char base[CT_PATH_MAX], murl[CT_PATH_MAX + 16], disp[CT_PATH_MAX], mkey[33];
    if (sl + 2 > sizeof base) return CT_ERR(CT_ERR_ARG, "data.%s: URL too long", split);
    if (one) {
        const char *slash = strrchr(spec, '/');
        snprintf(base, sizeof base, "%.*s", (int)(slash - spec + 1), spec);
    } else {
        snprintf(base, sizeof base, "%s%s", spec, spec[sl - 1] == '/' ? "" : "/");
    }
    snprintf(murl, sizeof murl, "%smanifest.json", base);
    ct_remote_display(murl, disp, sizeof disp);
    manifest_key(disp, mkey);
    /* the cached copy, and whether every block of the split is there with it */
    char *copy = NULL, *text = NULL;
    size_t copy_len = 0, len = 0;
    double stored = 0;
    bool have_copy = ct_blockcache_get_all(ctx->cache, mkey, 0, MANIFEST_MAX, &copy, &copy_len, &stored);
    ct_status st = CT_OK;
    bool transient = false, use_copy = false;
    if (ctx->net == NET_OFF) {
        if (!have_copy) {
            st = CT_ERR(CT_ERR_IO, "data.offline=true, and the disk cache (%s) holds no copy of %s",
                        ctx->cache_dir, disp);
            ct_error_hint("run once with the network (data.offline=false) to fill the cache, with "
                          "the same data.cache_dir");
            return st;
        }
        use_copy = true;
    } else {
        /* a warm cache needs one answer from the server, not every retry */
        ct_remote_opts quick = *net;
        if (have_copy) quick.retries = 0;
        st = ct_remote_get_ex(murl, MANIFEST_MAX, &text, &len, &quick, &transient);
        if (st && transient && have_copy) {
            net_reason(ctx->net_why, sizeof ctx->net_why, ct_last_error(), disp);
            ct_error_clear();
            ctx->net = NET_DOWN;
            use_copy = true;
        }
    }
    if (use_copy) {
        text = copy;
        len = copy_len;
        copy = NULL;
        st = CT_OK;
    }
    free(copy);
    if (st && one && !transient) {
        /* a lone shard: usable without a manifest, checked by length only */
        char why[512];
        snprintf(why, sizeof why, "%s", ct_last_error());
        ct_error_clear();
        return list_lone_shard(spec, net, why, out, n);
    }
    if (st && transient) {
        char why[ERR_MAX];
        snprintf(why, sizeof why, "%s", ct_last_error());
        ct_error_clear();
        st = CT_ERR(CT_ERR_IO, "%s; the server cannot be reached, and nothing of this dataset is "
                    "in the disk cache (%s) to read instead", why, ctx->cache_dir);
        ct_error_hint("check that the server is up and reachable (a run that has cached the "
                      "dataset then trains without it), or raise data.retries for a flaky link");
        return st;
    }
    if (st) { /* an answer: the URL is in the message; the caller names the key */
        ct_error_hint("the URL must name a ctrain prepare output (a directory with its "
                      "manifest.json) or one shard");
        return st;
    }
    st = ct_remote_manifest_parse(text, len, disp, base, split, one ? strrchr(spec, '/') + 1 : NULL,
                                  out, n, vocab_size);
    if (st) {
        if (use_copy) ct_error_prefix("the disk cache's copy of it");
        free(text);
        return st;
    }
    if (!use_copy) {
        /* kept for a later run without the server; a cache that cannot take it is no error */
        if (ct_blockcache_put(ctx->cache, mkey, 0, text, len)) ct_error_clear();
    } else {
        count_cached(ctx, *out, *n);
        char age[48], held[96];
        fmt_age(age, sizeof age, (double)time(NULL) - stored);
        if (ctx->cached_blocks == ctx->blocks)
            snprintf(held, sizeof held, "every one of the %" PRId64 " blocks", ctx->blocks);
        else
            snprintf(held, sizeof held, "%" PRId64 " of the %" PRId64 " blocks (a block it "
                     "lacks stops the run)", ctx->cached_blocks, ctx->blocks);
        if (ctx->net == NET_DOWN)
            ct_log(CT_LOG_WARN, "data.%s: %s cannot be reached (%s): reading the dataset from "
                   "the disk cache instead (its copy of the manifest is %s old; the cache holds "
                   "%s of the %s split)", split, disp, ctx->net_why, age, held, split);
        else
            ct_log(CT_LOG_INFO, "data.%s: data.offline: %s from the disk cache (its copy is %s "
                   "old; the cache holds %s of the %s split)", split, disp, age, held, split);
    }
    *manifest = text;
    *manifest_len = len;
    return CT_OK;
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
    char err_msg[ERR_MAX], err_hint[ERR_MAX];
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
    shard_key(s->disp, info->hash, info->bytes, s->key);
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
    const ct_remote_opts *net = c->net == NET_DOWN ? &down : &c->o.net;
    int64_t off = b0 * CT_REMOTE_BLOCK_BYTES, end = (b0 + nb) * CT_REMOTE_BLOCK_BYTES;
    if (end > s->bytes) end = s->bytes;
    if (c->net == NET_OFF) {
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
        if (st && c->net == NET_DOWN) {
            char why[ERR_MAX];
            net_reason(why, sizeof why, ct_last_error(), s->disp);
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

/* -------------------------------------------------------- prepare's side */

ct_status ct_shard_hash_manifest(const char *path, cJSON *entry) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return CT_ERR(CT_ERR_IO, "%s: cannot open to hash: %s", path, strerror(errno));
    uint8_t *buf = malloc((size_t)CT_REMOTE_BLOCK_BYTES);
    cJSON *arr = cJSON_CreateArray();
    ct_status st = CT_OK;
    if (!buf || !arr) {
        st = CT_ERR(CT_ERR_OOM, "out of memory hashing %s", path);
        goto done;
    }
    XXH3_state_t whole;
    XXH3_128bits_reset(&whole);
    int64_t total = 0;
    for (;;) {
        size_t got = 0;
        while (got < (size_t)CT_REMOTE_BLOCK_BYTES) {
            ssize_t r = read(fd, buf + got, (size_t)CT_REMOTE_BLOCK_BYTES - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                st = CT_ERR(CT_ERR_IO, "%s: read error while hashing: %s", path, strerror(errno));
                goto done;
            }
            if (r == 0) break;
            got += (size_t)r;
        }
        if (got == 0) break;
        XXH3_128bits_update(&whole, buf, got);
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)ct_block_hash(buf, got));
        cJSON_AddItemToArray(arr, cJSON_CreateString(hex));
        total += (int64_t)got;
        if (got < (size_t)CT_REMOTE_BLOCK_BYTES) break;
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&whole));
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
    cJSON_AddNumberToObject(entry, "bytes", (double)total);
    cJSON_AddStringToObject(entry, "xxh3_128", hex);
    cJSON_AddNumberToObject(entry, "block_bytes", (double)CT_REMOTE_BLOCK_BYTES);
    cJSON_AddItemToObject(entry, "blocks", arr);
    arr = NULL;
done:
    cJSON_Delete(arr);
    free(buf);
    close(fd);
    return st;
}
