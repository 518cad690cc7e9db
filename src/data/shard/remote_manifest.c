/*
 * The manifest of a remote dataset (see shard_remote.h): checking its
 * entries, listing a split's shards, keeping a copy of it in the disk cache
 * beside the blocks (block 0 of a key made from its displayed URL), and
 * reading that copy when the server cannot be reached or data.offline is set;
 * and the manifest fields prepare writes for each shard.
 * Leaves out: fetching and checking blocks (shard_remote.c), HTTP and S3
 * (remote.c).
 */
#include "data/shard/shard_remote_int.h"

#include "core/dtype.h"
#include "data/shard/shard.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define MANIFEST_MAX ((size_t)256 << 20) /* bytes: a larger manifest.json is refused */

/* ---------------------------------------------------------------- cache keys */

/* xxh3-128 of text as 32 hex digits: a cache key. */
static void key_of(const char *text, size_t len, char key[33]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(text, len));
    for (int i = 0; i < 16; i++) snprintf(key + 2 * i, 3, "%02x", c.digest[i]);
}

void remote_shard_key(const char *disp, const char *hash, int64_t bytes, char key[33]) {
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
        free(v[i].side_url);
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

/* An entry's "sidecar": {"file", "bytes", "xxh3_128"} (prepare --format
 * sft), into out->side_*; nothing when the entry has none. */
static ct_status parse_sidecar(const char *murl, const char *base, const char *shard,
                               const cJSON *e, ct_remote_shard_info *out) {
    const cJSON *side = cJSON_GetObjectItemCaseSensitive(e, "sidecar");
    if (!side) return CT_OK;
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(side, "file");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(side, "xxh3_128");
    const char *f = cJSON_IsString(file) ? file->valuestring : NULL;
    double bytes = num_field(side, "bytes");
    if (!cJSON_IsObject(side) || !f || !f[0] || strchr(f, '/') || !strcmp(f, "..") ||
        strlen(f) > 255 || bytes < 0 || bytes > (double)((int64_t)1 << 48) ||
        bytes != (double)(int64_t)bytes || !cJSON_IsString(h) || strlen(h->valuestring) != 32 ||
        !is_hex(h->valuestring, 32))
        return CT_ERR(CT_ERR_FORMAT, "%s: shard %s: \"sidecar\" needs a plain \"file\" name, "
                      "its \"bytes\" and its \"xxh3_128\" (32 hex digits)", murl, shard);
    size_t ul = strlen(base) + strlen(f) + 1;
    if (!(out->side_url = malloc(ul))) return CT_ERR(CT_ERR_OOM, "out of memory reading %s", murl);
    snprintf(out->side_url, ul, "%s%s", base, f);
    out->side_bytes = (int64_t)bytes;
    memcpy(out->side_hash, h->valuestring, 33);
    return CT_OK;
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
    ct_status st = parse_sidecar(murl, base, f, e, out);
    if (st) return st;
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

void remote_net_reason(char *buf, size_t cap, const char *err, const char *disp) {
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
        remote_shard_key(disp, v[i].hash, v[i].bytes, key);
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
    if (ctx->net == REMOTE_NET_OFF) {
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
            remote_net_reason(ctx->net_why, sizeof ctx->net_why, ct_last_error(), disp);
            ct_error_clear();
            ctx->net = REMOTE_NET_DOWN;
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
        char why[REMOTE_ERR_MAX];
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
        if (ctx->net == REMOTE_NET_DOWN)
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
