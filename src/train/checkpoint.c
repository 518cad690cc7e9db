/*
 * The checkpoint store (see checkpoint.h for the layout and the guarantees).
 * This file holds the file-level helpers, the manifest (writing and
 * validating parsing), and the five operations: save, verify, list, latest,
 * read_blob.
 */
#include "train/checkpoint.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "ctrain/data.h"
#include "io/fileio.h"

#define CKPT_PATH_MAX 4096
#define CKPT_IO_CHUNK ((size_t)1 << 20) /* bytes per read while hashing */
#define CKPT_ZSTD_LEVEL 3
#define CKPT_MANIFEST "MANIFEST.json"
#define CKPT_WEIGHTS "model.safetensors"
#define CKPT_GEN_CONFIG "generation_config.json"
#define CKPT_CONFIG "config.json"
/* a LoRA run's checkpoint holds the adapter (PEFT files), not the frozen base */
#define CKPT_ADAPTER "adapter_model.safetensors"
#define CKPT_ADAPTER_CONFIG "adapter_config.json"
#define CKPT_HASH_KEY "\"manifest_xxh64\""
#define CKPT_MAX_EXACT 9007199254740992.0 /* 2^53: larger JSON numbers lose digits */

/* ---------------------------------------------------------------- helpers */

static ct_status ckpt_errno(const char *what, const char *path, int err) {
    char ebuf[128];
    if (strerror_r(err, ebuf, sizeof ebuf) != 0) snprintf(ebuf, sizeof ebuf, "error %d", err);
    ct_status st = CT_ERR(CT_ERR_IO, "%s: %s: %s", path, what, ebuf);
    if (err == ENOSPC || err == EDQUOT || err == EFBIG)
        ct_error_hint("no room (disk, quota or file size limit): free space or set run.dir "
                      "elsewhere; the earlier checkpoints are untouched");
    else if (err == EACCES || err == EPERM || err == EROFS)
        ct_error_hint("check the permissions of the run directory");
    return st;
}

/* out = a "/" b, checked against cap. */
static ct_status ckpt_join(char *out, size_t cap, const char *a, const char *b) {
    int k = snprintf(out, cap, "%s/%s", a, b);
    if (k < 0 || (size_t)k >= cap) return CT_ERR(CT_ERR_ARG, "%s/%s: path too long", a, b);
    return CT_OK;
}

static bool ckpt_valid_blob_name(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok || n >= CT_CKPT_NAME_MAX) return false;
    }
    return n > 0;
}

/* fsync a directory; filesystems that cannot answer EINVAL, which is fine. */
static ct_status ckpt_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ckpt_errno("cannot open directory for fsync", dir, errno);
    ct_status st = CT_OK;
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        st = ckpt_errno("fsync of directory failed", dir, errno);
    close(fd);
    return st;
}

/* Stream a file in CKPT_IO_CHUNK pieces through xxh64, handing each piece to
 * sink (may be NULL); its size and hash go to *size, *hash. fsync it when sync. */
typedef void (*ckpt_sink)(void *user, const uint8_t *p, size_t n);
static ct_status ckpt_stream_file(const char *path, bool sync, ckpt_sink sink, void *user,
                                  uint64_t *size, uint64_t *hash) {
    ct_status st = CT_OK;
    XXH64_state_t *xs = XXH64_createState();
    uint8_t *buf = malloc(CKPT_IO_CHUNK);
    int fd = -1;
    uint64_t total = 0;
    if (!xs || !buf) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory reading", path);
        goto done;
    }
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        st = ckpt_errno("cannot open", path, errno);
        goto done;
    }
    XXH64_reset(xs, 0);
    for (ssize_t got; (got = read(fd, buf, CKPT_IO_CHUNK)) != 0;) {
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            st = ckpt_errno("read failed", path, errno);
            goto done;
        }
        XXH64_update(xs, buf, (size_t)got);
        if (sink) sink(user, buf, (size_t)got);
        total += (uint64_t)got;
    }
    if (sync && fsync(fd) != 0) {
        st = ckpt_errno("fsync failed", path, errno);
        goto done;
    }
    *size = total;
    *hash = XXH64_digest(xs);
done:
    if (fd >= 0 && close(fd) != 0 && st == CT_OK) st = ckpt_errno("close failed", path, errno);
    free(buf);
    XXH64_freeState(xs);
    return st;
}

/* ---------------------------------------------------------------- manifest */

typedef struct ckpt_file {
    char name[128];
    uint64_t size, hash; /* the file as stored */
    bool is_blob;
    bool zstd;
    char blob[CT_CKPT_NAME_MAX + 1];
    uint64_t raw_size, raw_hash; /* a blob's bytes before compression */
} ckpt_file;

typedef struct ckpt_manifest {
    int64_t step;
    int64_t n_params;
    char *signature; /* owned, never NULL after parsing */
    ckpt_file *files;
    int n_files;
} ckpt_manifest;

static void manifest_free(ckpt_manifest *m) {
    free(m->signature);
    free(m->files);
    memset(m, 0, sizeof *m);
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void CT_PRINTF(2, 3) sb_printf(sbuf *s, const char *fmt, ...) {
    if (s->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
        s->oom = true;
        return;
    }
    if (s->len + (size_t)k + 1 > s->cap) {
        size_t cap = (s->len + (size_t)k + 1) * 2;
        char *np = realloc(s->p, cap);
        s->oom = !np;
        if (!np) return;
        s->p = np;
        s->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(s->p + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
    s->len += (size_t)k;
}

/* Write dir/MANIFEST.json atomically; m->signature is not used, `signature`
 * (NULL: none) is written JSON-escaped. */
static ct_status manifest_write(const char *dir, const ckpt_manifest *m, const char *signature) {
    char path[CKPT_PATH_MAX];
    ct_status st = ckpt_join(path, sizeof path, dir, CKPT_MANIFEST);
    if (st) return st;
    cJSON *sig = cJSON_CreateString(signature ? signature : "");
    char *sig_json = sig ? cJSON_PrintUnformatted(sig) : NULL;
    cJSON_Delete(sig);
    sbuf s = {0};
    if (!sig_json) s.oom = true;
    sb_printf(&s, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"step\": %" PRId64 ",\n",
              CT_CKPT_FORMAT, CT_CKPT_VERSION, m->step);
    sb_printf(&s, "  \"signature\": %s,\n  \"n_params\": %" PRId64 ",\n  \"files\": [\n",
              sig_json ? sig_json : "\"\"", m->n_params);
    for (int i = 0; i < m->n_files; i++) {
        const ckpt_file *f = &m->files[i];
        sb_printf(&s, "    {\"name\": \"%s\", \"size\": %" PRIu64 ", \"xxh64\": \"%016" PRIx64 "\"",
                  f->name, f->size, f->hash);
        if (f->is_blob)
            sb_printf(&s, ", \"blob\": \"%s\", \"compression\": \"%s\", \"raw_size\": %" PRIu64
                      ", \"raw_xxh64\": \"%016" PRIx64 "\"",
                      f->blob, f->zstd ? "zstd" : "none", f->raw_size, f->raw_hash);
        sb_printf(&s, "}%s\n", i + 1 < m->n_files ? "," : "");
    }
    sb_printf(&s, "  ],\n  ");
    /* the hash covers every byte before its own key */
    uint64_t h = s.oom ? 0 : XXH64(s.p, s.len, 0);
    sb_printf(&s, "%s: \"%016" PRIx64 "\"\n}\n", CKPT_HASH_KEY, h);
    free(sig_json);
    if (s.oom) {
        free(s.p);
        return CT_ERR(CT_ERR_OOM, "%s: out of memory writing the manifest", path);
    }
    st = ct_file_write_atomic(path, s.p, s.len);
    free(s.p);
    return st;
}

static ct_status json_hex64(const cJSON *o, const char *key, const char *path, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
    bool ok = s && strlen(s) == 16;
    for (int i = 0; ok && i < 16; i++)
        ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
    if (!ok)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" must be 16 lowercase hex digits, found %s", path,
                      key, s ? s : "no such string");
    *out = (uint64_t)strtoull(s, NULL, 16);
    return CT_OK;
}

static ct_status json_count(const cJSON *o, const char *key, const char *path, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > CKPT_MAX_EXACT ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" must be a whole number >= 0", path, key);
    *out = (uint64_t)v->valuedouble;
    return CT_OK;
}

static ct_status manifest_file(const cJSON *o, const char *path, ckpt_file *f) {
    ct_status st;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    /* a plain file name: no path separators, not hidden, fits f->name */
    if (!cJSON_IsObject(o) || !cJSON_IsString(name) || !name->valuestring[0] ||
        name->valuestring[0] == '.' || strchr(name->valuestring, '/') ||
        strlen(name->valuestring) >= sizeof f->name)
        return CT_ERR(CT_ERR_FORMAT, "%s: each \"files\" entry must be an object with a plain "
                      "file \"name\"", path);
    snprintf(f->name, sizeof f->name, "%s", name->valuestring);
    if ((st = json_count(o, "size", path, &f->size))) return st;
    if ((st = json_hex64(o, "xxh64", path, &f->hash))) return st;
    const cJSON *blob = cJSON_GetObjectItemCaseSensitive(o, "blob");
    if (!blob) return CT_OK;
    if (!cJSON_IsString(blob) || !ckpt_valid_blob_name(blob->valuestring))
        return CT_ERR(CT_ERR_FORMAT, "%s: file %s: \"blob\" must be a name of [A-Za-z0-9_-]",
                      path, f->name);
    f->is_blob = true;
    snprintf(f->blob, sizeof f->blob, "%s", blob->valuestring);
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(o, "compression");
    if (!cJSON_IsString(comp) ||
        (strcmp(comp->valuestring, "zstd") != 0 && strcmp(comp->valuestring, "none") != 0))
        return CT_ERR(CT_ERR_FORMAT, "%s: file %s: \"compression\" must be \"zstd\" or \"none\"",
                      path, f->name);
    f->zstd = strcmp(comp->valuestring, "zstd") == 0;
    if ((st = json_count(o, "raw_size", path, &f->raw_size))) return st;
    return json_hex64(o, "raw_xxh64", path, &f->raw_hash);
}

/* Read and validate dir/MANIFEST.json (its own hash first). */
static ct_status manifest_read(const char *dir, ckpt_manifest *m) {
    char path[CKPT_PATH_MAX];
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    memset(m, 0, sizeof *m);
    ct_status st = ckpt_join(path, sizeof path, dir, CKPT_MANIFEST);
    if (st) return st;
    if ((st = ct_file_read_all(path, &text, &len))) {
        ct_error_hint("not a complete checkpoint: %s is written last, so a directory without it "
                      "was never finished", CKPT_MANIFEST);
        return st;
    }
    if (strlen(text) != len) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: holds a NUL byte, expected JSON text", path);
        goto fail;
    }
    /* the last occurrence of the key; an escaped copy inside a string has \" */
    const char *key = NULL;
    for (const char *p = strstr(text, CKPT_HASH_KEY); p; p = strstr(p + 1, CKPT_HASH_KEY)) key = p;
    /* format and version first, so a newer layout gets the version message */
    root = cJSON_ParseWithLength(text, len);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, CT_CKPT_FORMAT)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: not a checkpoint manifest (%s)", path,
                    !root ? "invalid JSON" : "expected \"format\": \"" CT_CKPT_FORMAT "\"");
        goto fail;
    }
    uint64_t version = 0, step = 0, n_params = 0;
    if ((st = json_count(root, "version", path, &version))) goto fail;
    if (version != CT_CKPT_VERSION) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: checkpoint format version %" PRIu64 ", this build reads "
                    "version %d", path, version, CT_CKPT_VERSION);
        if (version > CT_CKPT_VERSION) ct_error_hint("it was written by a newer ctrain");
        goto fail;
    }
    uint64_t want = 0, got = key ? XXH64(text, (size_t)(key - text), 0) : 0;
    if ((st = json_hex64(root, "manifest_xxh64", path, &want))) goto fail;
    if (!key || want != got) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: manifest_xxh64 is %016" PRIx64 " but the manifest's "
                    "text hashes to %016" PRIx64 ": the manifest is damaged", path, want, got);
        goto fail;
    }
    if ((st = json_count(root, "step", path, &step))) goto fail;
    if ((st = json_count(root, "n_params", path, &n_params))) goto fail;
    m->step = (int64_t)step;
    m->n_params = (int64_t)n_params;
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(root, "signature");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsString(sig) || !cJSON_IsArray(files)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: expected a \"signature\" string and a \"files\" array",
                    path);
        goto fail;
    }
    size_t sl = strlen(sig->valuestring) + 1;
    m->signature = malloc(sl);
    int n = cJSON_GetArraySize(files);
    m->files = calloc(n > 0 ? (size_t)n : 1, sizeof *m->files);
    if (!m->signature || !m->files) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    memcpy(m->signature, sig->valuestring, sl);
    m->n_files = n;
    bool has_weights = false, has_config = false;
    for (int i = 0; i < n; i++) {
        ckpt_file *f = &m->files[i];
        if ((st = manifest_file(cJSON_GetArrayItem(files, i), path, f))) goto fail;
        for (int j = 0; j < i; j++) {
            if (!strcmp(m->files[j].name, f->name) ||
                (f->is_blob && m->files[j].is_blob && !strcmp(m->files[j].blob, f->blob))) {
                st = CT_ERR(CT_ERR_FORMAT, "%s: file %s is listed twice", path, f->name);
                goto fail;
            }
        }
        has_weights |= !strcmp(f->name, CKPT_WEIGHTS) || !strcmp(f->name, CKPT_ADAPTER);
        has_config |= !strcmp(f->name, CKPT_CONFIG) || !strcmp(f->name, CKPT_ADAPTER_CONFIG);
    }
    if (!has_weights || !has_config) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: does not list %s", path,
                    has_weights ? CKPT_CONFIG " (or " CKPT_ADAPTER_CONFIG ")"
                                : CKPT_WEIGHTS " (or " CKPT_ADAPTER ")");
        goto fail;
    }
    cJSON_Delete(root);
    free(text);
    return CT_OK;
fail:
    cJSON_Delete(root);
    free(text);
    manifest_free(m);
    return st;
}

/* ---------------------------------------------------------------- save */

ct_ckpt_opts ct_ckpt_opts_default(void) {
    ct_ckpt_opts o = {.compress = false, .keep_last = 0, .keep_also = -1, .signature = NULL};
    return o;
}

ct_status ct_ckpt_signature(const ct_model *m, char *buf, size_t cap) {
    static const char *arch[CT_ARCH_COUNT] = {"gpt2", "llama"};
    static const char *norm[CT_NORM_COUNT] = {"layernorm", "rmsnorm"};
    static const char *pos[CT_POS_COUNT] = {"learned", "rope"};
    static const char *mlp[CT_MLP_COUNT] = {"gelu", "swiglu"};
    const ct_model_config *c = ct_model_get_config(m);
    int k = snprintf(buf, cap, "%s n_layer=%d n_head=%d n_kv_head=%d n_embd=%d n_ffn=%d "
                     "vocab_size=%d n_ctx=%d norm=%s pos=%s mlp=%s bias=%d tied=%d numel=%zu",
                     arch[c->arch], c->n_layer, c->n_head, c->n_kv_head, c->n_embd, c->n_ffn,
                     c->vocab_size, c->n_ctx, norm[c->norm], pos[c->pos], mlp[c->mlp],
                     (int)c->bias, (int)c->tied_head, ct_model_numel(m));
    /* the family switches, only when set: a GPT-2's or plain LLaMA's
     * signature stays what earlier versions wrote */
    bool family = (c->family != CT_FAMILY_GPT2 && c->family != CT_FAMILY_LLAMA) ||
                  c->head_dim || c->qkv_bias || c->o_bias || c->qk_norm ||
                  c->rope_scaling.type != CT_ROPE_DEFAULT;
    if (family && k >= 0 && (size_t)k < cap) {
        const ct_rope_scaling *r = &c->rope_scaling;
        int k2 = snprintf(buf + k, cap - (size_t)k, " family=%s head_dim=%d qkv_bias=%d "
                          "o_bias=%d qk_norm=%d rope_scaling=%d/%g/%g/%g/%d",
                          ct_model_family_name(c->family), ct_model_head_dim(c),
                          (int)c->qkv_bias, (int)c->o_bias, (int)c->qk_norm, (int)r->type,
                          (double)r->factor, (double)r->low_freq_factor,
                          (double)r->high_freq_factor, r->original_max_pos);
        k = k2 < 0 ? k2 : k + k2;
    }
    const ct_lora_opts *lo = ct_model_lora(m);
    if (lo && k >= 0 && (size_t)k < cap) {
        /* the frozen base is part of what a LoRA run is: its hash, so that a
         * resume on other base weights is refused */
        const uint16_t *b16 = ct_model_params_bf16(m);
        uint64_t h;
        ct_status hs = ct_model_base_xxh64((ct_model *)m, &h);
        if (hs) return hs;
        char targets[128];
        ct_lora_targets_format(c, lo->targets, targets, sizeof targets);
        int k2 = snprintf(buf + k, cap - (size_t)k, " lora r=%d alpha=%g dropout=%g targets=%s "
                          "base=%s base_xxh64=%016llx", lo->r, (double)lo->alpha,
                          (double)lo->dropout, targets, b16 ? "bf16" : "fp32",
                          (unsigned long long)h);
        if (k2 >= 0 && lo->save_modules && (size_t)(k + k2) < cap) {
            /* only when set: earlier adapters' signatures stay as they were */
            int k3 = snprintf(buf + k + k2, cap - (size_t)(k + k2), " modules_to_save=%u",
                              (unsigned)lo->save_modules);
            k2 = k3 < 0 ? k3 : k2 + k3;
        }
        k = k2 < 0 ? k2 : k + k2;
    }
    if (k < 0 || (size_t)k >= cap)
        return CT_ERR(CT_ERR_ARG, "model signature needs %d bytes, the buffer holds %zu", k + 1,
                      cap);
    return CT_OK;
}

/* Write one blob into dir as NAME.bin or NAME.bin.zst, hashing the raw and
 * the stored bytes on the way; the zstd output goes through a bounded buffer. */
static ct_status save_blob(const char *dir, const ct_ckpt_blob *b, bool compress, ckpt_file *f) {
    ct_status st = CT_OK;
    ct_afile *af = NULL;
    ZSTD_CCtx *cc = NULL;
    void *zbuf = NULL;
    XXH64_state_t *xs = NULL;
    char path[CKPT_PATH_MAX];
    snprintf(f->name, sizeof f->name, "%s.bin%s", b->name, compress ? ".zst" : "");
    snprintf(f->blob, sizeof f->blob, "%s", b->name);
    f->is_blob = true;
    f->zstd = compress;
    f->raw_size = b->size;
    f->raw_hash = XXH64(b->data, b->size, 0);
    if ((st = ckpt_join(path, sizeof path, dir, f->name))) return st;
    if ((st = ct_afile_open(&af, path))) return st;
    if (!compress) {
        if ((st = ct_afile_write(af, b->data, b->size))) goto fail;
        f->size = b->size;
        f->hash = f->raw_hash;
        return ct_afile_commit(af);
    }
    size_t zcap = ZSTD_CStreamOutSize();
    cc = ZSTD_createCCtx();
    zbuf = malloc(zcap);
    xs = XXH64_createState();
    if (!cc || !zbuf || !xs) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory compressing", path);
        goto fail;
    }
    XXH64_reset(xs, 0);
    size_t zr = ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, CKPT_ZSTD_LEVEL);
    if (!ZSTD_isError(zr)) zr = ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    if (!ZSTD_isError(zr)) zr = ZSTD_CCtx_setPledgedSrcSize(cc, (unsigned long long)b->size);
    ZSTD_inBuffer in = {b->data, b->size, 0};
    uint64_t stored = 0;
    for (size_t left = 1; !ZSTD_isError(zr) && left != 0;) {
        ZSTD_outBuffer out = {zbuf, zcap, 0};
        left = zr = ZSTD_compressStream2(cc, &out, &in, ZSTD_e_end);
        if (ZSTD_isError(zr)) break;
        XXH64_update(xs, zbuf, out.pos);
        stored += out.pos;
        if ((st = ct_afile_write(af, zbuf, out.pos))) goto fail;
    }
    if (ZSTD_isError(zr)) {
        st = CT_ERR(CT_ERR_IO, "%s: zstd compression failed: %s", path, ZSTD_getErrorName(zr));
        goto fail;
    }
    f->size = stored;
    f->hash = XXH64_digest(xs);
    XXH64_freeState(xs);
    free(zbuf);
    ZSTD_freeCCtx(cc);
    return ct_afile_commit(af);
fail:
    ct_afile_abort(af);
    XXH64_freeState(xs);
    free(zbuf);
    ZSTD_freeCCtx(cc);
    return st;
}

/* Stale temporary directory "step_*.tmp-<pid>[-...]": its writer is gone, or
 * (own) it is ours and no save of ours is running. */
static bool ckpt_is_stale_tmp(const char *name, bool own_is_stale) {
    const char *t = strstr(name, ".tmp-");
    if (strncmp(name, "step_", 5) != 0 || !t) return false;
    char *end = NULL;
    long pid = strtol(t + 5, &end, 10);
    if (end == t + 5 || pid <= 0 || (*end != '\0' && *end != '-')) return true; /* not ours */
    if ((pid_t)pid == getpid()) return own_is_stale;
    return ct_pid_gone(pid);
}

static int ckpt_cmp_step(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Steps of ckdir's finished checkpoints, ascending; removes stale temporary
 * directories on the way. A missing ckdir gives 0 steps. */
static ct_status ckpt_scan(const char *ckdir, bool own_is_stale, int64_t **steps, int *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(ckdir);
    if (!d) {
        if (errno == ENOENT) return CT_OK;
        return ckpt_errno("cannot list checkpoints", ckdir, errno);
    }
    ct_status st = CT_OK;
    int cap = 0;
    struct dirent *e;
    char path[CKPT_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (ckpt_is_stale_tmp(s, own_is_stale)) {
            if (ckpt_join(path, sizeof path, ckdir, s) == CT_OK) {
                if (ct_remove_tree(path)) ct_log(CT_LOG_INFO, "removed unfinished checkpoint %s", path);
                else ct_log(CT_LOG_WARN, "could not remove unfinished checkpoint %s", path);
            }
            continue;
        }
        size_t k = 5;
        if (strncmp(s, "step_", 5) != 0 || !s[k]) continue;
        while (s[k] >= '0' && s[k] <= '9') k++;
        if (s[k] != '\0' || k - 5 > 18) continue; /* not step_<digits> */
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *ns = realloc(*steps, (size_t)cap * sizeof *ns);
            if (!ns) {
                st = CT_ERR(CT_ERR_OOM, "%s: out of memory listing checkpoints", ckdir);
                break;
            }
            *steps = ns;
        }
        (*steps)[(*n)++] = strtoll(s + 5, NULL, 10);
    }
    closedir(d);
    if (st) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return st;
    }
    if (*n) qsort(*steps, (size_t)*n, sizeof **steps, ckpt_cmp_step);
    return CT_OK;
}

/* Keep the keep_last highest steps, `keep` always among them, and keep_also
 * besides (not counted in keep_last; -1: none). A checkpoint is renamed to a
 * temporary name before it is removed. Failures only warn: the new
 * checkpoint is already safe. */
static void ckpt_prune(const char *ckdir, int64_t keep, int keep_last, int64_t keep_also) {
    int64_t *steps = NULL;
    int n = 0;
    if (ckpt_scan(ckdir, false, &steps, &n) != CT_OK) {
        ct_log(CT_LOG_WARN, "not pruning old checkpoints: %s", ct_last_error());
        return;
    }
    int kept = 1; /* `keep` itself */
    for (int i = n - 1; i >= 0; i--) {
        if (steps[i] == keep || steps[i] == keep_also) continue;
        if (kept < keep_last) {
            kept++;
            continue;
        }
        char dir[CKPT_PATH_MAX], gone[CKPT_PATH_MAX];
        int k1 = snprintf(dir, sizeof dir, "%s/step_%08lld", ckdir, (long long)steps[i]);
        int k2 = snprintf(gone, sizeof gone, "%s.tmp-%ld-pruned", dir, (long)getpid());
        if (k1 < 0 || k2 < 0 || (size_t)k2 >= sizeof gone) continue;
        if (rename(dir, gone) != 0 || !ct_remove_tree(gone))
            ct_log(CT_LOG_WARN, "could not remove old checkpoint %s (errno %d)", dir, errno);
    }
    free(steps);
}

void ct_ckpt_prune(const char *run_dir, int64_t keep, int keep_last, int64_t keep_also) {
    char ckdir[CKPT_PATH_MAX];
    int k = snprintf(ckdir, sizeof ckdir, "%s/checkpoints", run_dir);
    if (keep_last > 0 && k > 0 && (size_t)k < sizeof ckdir)
        ckpt_prune(ckdir, keep, keep_last, keep_also);
}

ct_status ct_ckpt_save(const char *run_dir, int64_t step, ct_model *model,
                       const ct_ckpt_blob *blobs, int n_blobs, const ct_ckpt_opts *o,
                       char *out_dir, size_t cap) {
    CT_ASSERT(model && n_blobs >= 0 && (n_blobs == 0 || blobs));
    ct_ckpt_opts defaults = ct_ckpt_opts_default();
    if (!o) o = &defaults;
    if (!run_dir || !run_dir[0]) return CT_ERR(CT_ERR_ARG, "checkpoint: empty run directory");
    if (step < 0) return CT_ERR(CT_ERR_ARG, "checkpoint: step %lld is negative", (long long)step);
    if (o->keep_last < 0)
        return CT_ERR(CT_ERR_ARG, "checkpoint: keep_last = %d, expected >= 0", o->keep_last);
    for (int i = 0; i < n_blobs; i++) {
        CT_ASSERT(blobs[i].name && (blobs[i].data || blobs[i].size == 0));
        if (!ckpt_valid_blob_name(blobs[i].name))
            return CT_ERR(CT_ERR_ARG, "checkpoint blob name \"%s\": expected 1 to %d characters "
                          "of [A-Za-z0-9_-]", blobs[i].name, CT_CKPT_NAME_MAX);
        for (int j = 0; j < i; j++)
            if (!strcmp(blobs[i].name, blobs[j].name))
                return CT_ERR(CT_ERR_ARG, "checkpoint blob \"%s\" given twice", blobs[i].name);
    }
    char ckdir[CKPT_PATH_MAX], final[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], old[CKPT_PATH_MAX];
    int k1 = snprintf(ckdir, sizeof ckdir, "%s/checkpoints", run_dir);
    int k2 = snprintf(final, sizeof final, "%s/step_%08lld", ckdir, (long long)step);
    int k3 = snprintf(tmp, sizeof tmp, "%s.tmp-%ld", final, (long)getpid());
    int k4 = snprintf(old, sizeof old, "%s-replaced", tmp);
    if (k1 < 0 || k2 < 0 || k3 < 0 || k4 < 0 || (size_t)k4 >= sizeof old)
        return CT_ERR(CT_ERR_ARG, "%s: run directory path too long", run_dir);
    if (out_dir && (size_t)k2 >= cap)
        return CT_ERR(CT_ERR_ARG, "checkpoint path %s needs %d bytes, out_dir holds %zu", final,
                      k2 + 1, cap);

    ckpt_manifest man = {.step = step, .n_params = (int64_t)ct_model_numel(model)};
    man.files = calloc((size_t)n_blobs + 3 + CT_TOK_FILES_MAX, sizeof *man.files);
    if (!man.files) return CT_ERR(CT_ERR_OOM, "checkpoint: out of memory");
    ct_status st = ct_mkdir_p(ckdir);
    if (st) {
        ct_error_prefix("cannot write a checkpoint in run directory %s", run_dir);
        free(man.files);
        return st;
    }
    /* a temp directory of ours is left over from an earlier process with our pid */
    int64_t *ignored = NULL;
    int n_ignored = 0;
    if (ckpt_scan(ckdir, true, &ignored, &n_ignored) == CT_OK) free(ignored);
    if (mkdir(tmp, 0777) != 0) {
        st = ckpt_errno("cannot create checkpoint directory", tmp, errno);
        free(man.files);
        return st;
    }

    /* 1. weights (HF layout; a LoRA run's adapter in PEFT's), then each blob */
    bool lora = ct_model_lora(model) != NULL;
    if (lora)
        st = ct_model_lora_save_peft(model, tmp, "");
    else
        st = ct_model_save_hf(model, tmp, CKPT_WEIGHTS, false, true);
    if (st) goto fail;
    static const char *hf_files[3] = {CKPT_CONFIG, CKPT_WEIGHTS, CKPT_GEN_CONFIG};
    static const char *peft_files[2] = {CKPT_ADAPTER_CONFIG, CKPT_ADAPTER};
    for (int i = 0; i < (lora ? 2 : 3); i++) {
        char path[CKPT_PATH_MAX];
        if (i == 2) { /* generation_config.json: written when the model has token ids */
            if ((st = ckpt_join(path, sizeof path, tmp, CKPT_GEN_CONFIG))) goto fail;
            if (access(path, F_OK) != 0) continue;
        }
        ckpt_file *f = &man.files[man.n_files++];
        snprintf(f->name, sizeof f->name, "%s", lora ? peft_files[i] : hf_files[i]);
        if ((st = ckpt_join(path, sizeof path, tmp, f->name))) goto fail;
        if ((st = ckpt_stream_file(path, true, NULL, NULL, &f->size, &f->hash))) goto fail; /* fsyncs again */
    }
    /* the run's tokenizer files (the trainer puts them in run_dir) beside the weights */
    const char *tok_names[CT_TOK_FILES_MAX];
    int n_tok = 0;
    if ((st = ct_tokenizer_copy_files(run_dir, tmp, tok_names, &n_tok))) goto fail;
    for (int i = 0; i < n_tok; i++) {
        ckpt_file *f = &man.files[man.n_files++];
        char path[CKPT_PATH_MAX];
        snprintf(f->name, sizeof f->name, "%s", tok_names[i]);
        if ((st = ckpt_join(path, sizeof path, tmp, f->name))) goto fail;
        if ((st = ckpt_stream_file(path, true, NULL, NULL, &f->size, &f->hash))) goto fail;
    }
    for (int i = 0; i < n_blobs; i++)
        if ((st = save_blob(tmp, &blobs[i], o->compress, &man.files[man.n_files++]))) goto fail;
    /* 2. the manifest last, then the directory itself */
    if ((st = manifest_write(tmp, &man, o->signature))) goto fail;
    if ((st = ckpt_sync_dir(tmp))) goto fail;

    /* 3. into place (a checkpoint of the same step is replaced) */
    bool replacing = access(final, F_OK) == 0;
    if (replacing && rename(final, old) != 0) {
        st = ckpt_errno("cannot move the existing checkpoint aside", final, errno);
        goto fail;
    }
    if (rename(tmp, final) != 0) {
        st = ckpt_errno("cannot rename the finished checkpoint into place", final, errno);
        if (replacing) rename(old, final);
        goto fail;
    }
    st = ckpt_sync_dir(ckdir);
    if (st == CT_OK) st = ckpt_sync_dir(run_dir); /* checkpoints/ may be new */
    if (replacing && !ct_remove_tree(old))
        ct_log(CT_LOG_WARN, "could not remove replaced checkpoint %s", old);
    free(man.files);
    if (st) return st; /* renamed, but its durability is not confirmed */
    if (out_dir) snprintf(out_dir, cap, "%s", final);
    if (o->keep_last > 0) ckpt_prune(ckdir, step, o->keep_last, o->keep_also);
    return CT_OK;
fail:
    ct_remove_tree(tmp);
    free(man.files);
    ct_error_prefix("checkpoint step %lld not saved", (long long)step);
    return st;
}

/* ---------------------------------------------------------------- read */

/* Where a blob's stored bytes go while they are read: copied or decoded
 * through zstd into `out` (read_blob), or, with out NULL, decoded through the
 * small window `win` and only hashed and counted (verify: the raw bytes are
 * checked without holding them). */
typedef struct blob_sink {
    uint8_t *out;
    size_t cap, pos;    /* cap: the manifest's raw_size (either mode) */
    uint8_t *win;       /* verify: ZSTD_DStreamOutSize() bytes */
    size_t wcap;
    XXH64_state_t *xh;  /* verify: the running hash of the decoded bytes */
    ZSTD_DCtx *dc;      /* NULL: copy */
    size_t zr;          /* zstd: 0 once the frame is complete */
    const char *err;    /* the first decoding problem (reported after the hash check) */
} blob_sink;

static void blob_sink_put(void *user, const uint8_t *p, size_t n) {
    blob_sink *b = user;
    if (b->err) return;
    if (!b->dc) {
        if (n > b->cap - b->pos) b->err = "larger than the manifest's raw_size";
        else memcpy(b->out + b->pos, p, n);
        b->pos += b->err ? 0 : n;
        return;
    }
    ZSTD_inBuffer zi = {p, n, 0};
    while (!b->err && zi.pos < zi.size) {
        /* read_blob decodes into place; verify into the window, never
         * further than raw_size in all */
        size_t room = b->out ? b->cap - b->pos : b->cap - b->pos + 1;
        ZSTD_outBuffer zo = b->out ? (ZSTD_outBuffer){b->out + b->pos, room, 0}
                                   : (ZSTD_outBuffer){b->win, room < b->wcap ? room : b->wcap, 0};
        size_t in0 = zi.pos;
        if (b->zr == 0) b->err = "data after the end of the zstd frame";
        else if (ZSTD_isError(b->zr = ZSTD_decompressStream(b->dc, &zo, &zi)))
            b->err = ZSTD_getErrorName(b->zr);
        else if (zi.pos == in0 && zo.pos == 0) /* stuck: the output is full */
            b->err = zo.size ? "the zstd decoder made no progress"
                             : "decompresses to more bytes than the manifest's raw_size";
        if (b->err) break;
        if (b->xh) XXH64_update(b->xh, zo.dst, zo.pos);
        b->pos += zo.pos;
        if (b->pos > b->cap) b->err = "decompresses to more bytes than the manifest's raw_size";
    }
}

/* After the whole stored file went through the sink: the decoded bytes
 * against the manifest's raw_size and raw_xxh64 (NULL when they agree). */
static const char *blob_sink_finish(blob_sink *b, const ckpt_file *f) {
    if (b->err) return b->err;
    if (f->zstd && b->zr != 0) return "the zstd frame is incomplete";
    if (b->pos != b->cap) return "decompresses to fewer bytes than raw_size";
    uint64_t h = b->xh ? XXH64_digest(b->xh) : XXH64(b->out, b->cap, 0);
    if (h != f->raw_hash) return "the decoded bytes do not match the manifest's raw_xxh64";
    return NULL;
}

/* Every file against its manifest entry, each read once. A compressed blob
 * is also decoded on the way (through a small window, hashed and counted, the
 * raw bytes never held) and must give the raw size and hash the entry says,
 * or a checkpoint would verify and then fail to load. */
static ct_status verify_files(const char *dir, const ckpt_manifest *m) {
    blob_sink b = {.wcap = ZSTD_DStreamOutSize()};
    ct_status st = CT_OK;
    for (int i = 0; i < m->n_files && !st; i++) {
        const ckpt_file *f = &m->files[i];
        char path[CKPT_PATH_MAX];
        uint64_t size = 0, hash = 0;
        bool zblob = f->is_blob && f->zstd;
        if (zblob && !b.dc) {
            b.win = malloc(b.wcap);
            b.xh = XXH64_createState();
            b.dc = ZSTD_createDCtx();
            if (!b.win || !b.xh || !b.dc) {
                st = CT_ERR(CT_ERR_OOM, "%s: out of memory verifying compressed blobs", dir);
                break;
            }
        }
        if (zblob) {
            ZSTD_DCtx_reset(b.dc, ZSTD_reset_session_only);
            XXH64_reset(b.xh, 0);
            b.cap = f->raw_size > (uint64_t)SIZE_MAX - 1 ? SIZE_MAX - 1 : (size_t)f->raw_size;
            b.pos = 0;
            b.zr = 1;
            b.err = NULL;
        }
        if ((st = ckpt_join(path, sizeof path, dir, f->name))) break;
        if ((st = ckpt_stream_file(path, false, zblob ? blob_sink_put : NULL, &b, &size, &hash)))
            break;
        const char *err = NULL;
        if (size != f->size)
            st = CT_ERR(CT_ERR_FORMAT, "%s: %" PRIu64 " bytes, the manifest says %" PRIu64
                        " (truncated or overwritten)", path, size, f->size);
        else if (hash != f->hash)
            st = CT_ERR(CT_ERR_FORMAT, "%s: xxh64 %016" PRIx64 ", the manifest says %016" PRIx64
                        " (the file is damaged)", path, hash, f->hash);
        /* a stored blob is its raw bytes: the raw fields must say the same */
        else if (f->is_blob && !f->zstd && (f->raw_size != f->size || f->raw_hash != f->hash))
            st = CT_ERR(CT_ERR_FORMAT, "%s: raw size %" PRIu64 " and raw_xxh64 %016" PRIx64
                        " differ from the stored file's (uncompressed)", path, f->raw_size,
                        f->raw_hash);
        else if (zblob && (err = blob_sink_finish(&b, f)))
            st = CT_ERR(CT_ERR_FORMAT, "%s: %s (the manifest says raw size %" PRIu64
                        ", raw_xxh64 %016" PRIx64 ")", path, err, f->raw_size, f->raw_hash);
    }
    ZSTD_freeDCtx(b.dc);
    XXH64_freeState(b.xh);
    free(b.win);
    return st;
}

static ct_status check_signature(const char *dir, const ckpt_manifest *m, const char *signature) {
    if (!signature || !strcmp(signature, m->signature)) return CT_OK;
    ct_status st = CT_ERR(CT_ERR_ARG, "%s: checkpoint of model \"%s\", but this run's model is "
                          "\"%s\"", dir, m->signature[0] ? m->signature : "(no signature)",
                          signature);
    ct_error_hint("resume with the model settings the run was started with, or use another "
                  "run.dir");
    return st;
}

ct_status ct_ckpt_verify(const char *ckpt_dir, const char *signature, int64_t *step) {
    ckpt_manifest m;
    ct_status st = manifest_read(ckpt_dir, &m);
    if (st) return st;
    st = check_signature(ckpt_dir, &m, signature);
    if (!st) st = verify_files(ckpt_dir, &m);
    if (!st && step) *step = m.step;
    manifest_free(&m);
    return st;
}

ct_status ct_ckpt_list(const char *run_dir, int64_t **steps, int *n) {
    char ckdir[CKPT_PATH_MAX];
    *steps = NULL;
    *n = 0;
    ct_status st = ckpt_join(ckdir, sizeof ckdir, run_dir, "checkpoints");
    return st ? st : ckpt_scan(ckdir, false, steps, n);
}

ct_status ct_ckpt_latest(const char *run_dir, const char *signature, char *out_dir, size_t cap,
                         int64_t *step) {
    char ckdir[CKPT_PATH_MAX], dir[CKPT_PATH_MAX];
    int64_t *steps = NULL;
    int n = 0;
    ct_status st = ckpt_join(ckdir, sizeof ckdir, run_dir, "checkpoints");
    if (!st) st = ckpt_scan(ckdir, false, &steps, &n);
    if (st) return st;
    for (int i = n - 1; i >= 0; i--) {
        int k = snprintf(dir, sizeof dir, "%s/step_%08lld", ckdir, (long long)steps[i]);
        if (k < 0 || (size_t)k >= sizeof dir) continue;
        int64_t got = -1;
        st = ct_ckpt_verify(dir, signature, &got);
        if (st == CT_OK && got != steps[i])
            st = CT_ERR(CT_ERR_FORMAT, "%s: the manifest is for step %lld", dir, (long long)got);
        if (st == CT_ERR_ARG || st == CT_ERR_OOM) goto done;
        if (st) {
            ct_log(CT_LOG_WARN, "checkpoint step_%08lld is not usable, trying an older one: %s",
                   (long long)steps[i], ct_last_error());
            continue;
        }
        if (out_dir && (size_t)k >= cap) {
            st = CT_ERR(CT_ERR_ARG, "checkpoint path %s needs %d bytes, out_dir holds %zu", dir,
                        k + 1, cap);
            goto done;
        }
        if (out_dir) snprintf(out_dir, cap, "%s", dir);
        if (step) *step = got;
        goto done;
    }
    st = CT_ERR(CT_ERR_IO, "no valid checkpoint in %s (%d found%s)", ckdir, n,
                n ? ", none verified" : "");
    if (n) ct_error_hint("the warnings above say what is wrong with each one");
done:
    free(steps);
    return st;
}

ct_status ct_ckpt_read_blob(const char *ckpt_dir, const char *name, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    if (!name || !ckpt_valid_blob_name(name))
        return CT_ERR(CT_ERR_ARG, "checkpoint blob name \"%s\": expected [A-Za-z0-9_-]",
                      name ? name : "(null)");
    ckpt_manifest m;
    ct_status st = manifest_read(ckpt_dir, &m);
    if (st) return st;
    const ckpt_file *f = NULL;
    for (int i = 0; i < m.n_files && !f; i++)
        if (m.files[i].is_blob && !strcmp(m.files[i].blob, name)) f = &m.files[i];
    char path[CKPT_PATH_MAX];
    blob_sink b = {.zr = 1};
    if (!f) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: the checkpoint has no blob \"%s\"", ckpt_dir, name);
        goto done;
    }
    if ((st = ckpt_join(path, sizeof path, ckpt_dir, f->name))) goto done;
    if (f->raw_size > (uint64_t)SIZE_MAX - 1 || (!f->zstd && f->raw_size != f->size)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: raw size %" PRIu64 " does not fit its stored size %"
                    PRIu64, path, f->raw_size, f->size);
        goto done;
    }
    b.cap = (size_t)f->raw_size;
    b.out = malloc(b.cap ? b.cap : 1);
    b.dc = f->zstd ? ZSTD_createDCtx() : NULL;
    if (!b.out || (f->zstd && !b.dc)) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory reading %" PRIu64 " bytes", path, f->raw_size);
        goto done;
    }
    uint64_t stored = 0, h = 0;
    if ((st = ckpt_stream_file(path, false, blob_sink_put, &b, &stored, &h))) goto done;
    if (stored != f->size || h != f->hash) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: %" PRIu64 " bytes with xxh64 %016" PRIx64 ", the manifest "
                    "says %" PRIu64 " bytes with %016" PRIx64, path, stored, h, f->size, f->hash);
        goto done;
    }
    if ((b.err = blob_sink_finish(&b, f))) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: %s", path, b.err);
        goto done;
    }
    *data = b.out;
    *size = b.cap;
    b.out = NULL;
done:
    ZSTD_freeDCtx(b.dc);
    free(b.out);
    manifest_free(&m);
    return st;
}
