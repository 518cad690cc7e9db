/*
 * Instruction-tuning sidecars: a validating reader (mmap, or bytes in
 * memory) and an atomic writer. Read with explicit little-endian loads, so
 * nothing depends on alignment or the host's byte order.
 * Leaves out: the tokens themselves (data/shard/shard.c reads the .bin).
 */
#include "data/shard/sft_shard.h"

#include "core/dtype.h"
#include "data/shard/shard.h"
#include "io/fileio.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * File format (train_NNNNNN.sft beside train_NNNNNN.bin; version 1):
 *
 *   header: 32 bytes, little-endian
 *     [0]   int32 magic 20261125
 *     [4]   int32 version 1
 *     [8]   int64 N: examples in the shard (>= 1)
 *     [16]  int64 T: tokens in the shard (>= 1; must equal the .bin header's count)
 *     [24]  int64 C: counted tokens (the number of bits set in the mask)
 *   offsets: N + 1 little-endian int64 at byte 32. Example i is the shard's
 *     tokens [offsets[i], offsets[i+1]); offsets[0] = 0, strictly
 *     increasing, offsets[N] = T. Examples never straddle two shards.
 *   mask: ceil(T / 8) bytes at byte 32 + 8 (N + 1). Bit (i & 7) (least
 *     significant first) of byte i >> 3 is set when token i's prediction
 *     counts: the bit sits on the TARGET token, set for completion and
 *     assistant tokens (and the EOS that ends them), clear for prompt,
 *     system and user turns and template markup. The first token of an
 *     example is never set (nothing inside the example predicts it). Bits
 *     past T are zero.
 *
 * The file size must be exactly 32 + 8 (N + 1) + ceil(T / 8).
 */

struct ct_sft_shard {
    char *path;
    const uint8_t *map; /* the whole file */
    size_t map_len;     /* bytes */
    void (*release)(const void *map, size_t len); /* gives map back at close */
    int64_t n, ntok, counted;
    const uint8_t *offsets; /* map + 32: n + 1 int64 */
    const uint8_t *mask;    /* map + 32 + 8 (n + 1): ceil(ntok / 8) bytes */
};

static int64_t sft_i64(const uint8_t *p) { return (int64_t)ct_le_load_u64(p); }

static int popcount8(uint8_t b) {
    int c = 0;
    for (; b; b &= (uint8_t)(b - 1)) c++;
    return c;
}

ct_status ct_sft_sidecar_path(char *buf, size_t cap, const char *shard_path) {
    size_t n = strlen(shard_path);
    if (n >= 4 && !strcmp(shard_path + n - 4, ".bin")) n -= 4;
    int k = snprintf(buf, cap, "%.*s.sft", (int)n, shard_path);
    if (k < 0 || (size_t)k >= cap)
        return CT_ERR(CT_ERR_ARG, "%s: path too long for its sidecar's name", shard_path);
    return CT_OK;
}

/* Check everything the format says (see above) against the shard's count. */
static ct_status sft_validate(ct_sft_shard *s, int64_t shard_tokens, const char *shard_name) {
    const char *path = s->path;
    int64_t fsize = (int64_t)s->map_len;
    const uint8_t *m = s->map;
    uint32_t magic = ct_le_load_u32(m), version = ct_le_load_u32(m + 4);
    ct_status st;
    if (magic != CT_SFT_MAGIC) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: bad magic number %" PRIu32 ", expected %d (a ctrain SFT sidecar)", path,
                    magic, CT_SFT_MAGIC);
        ct_error_hint("the file is not an SFT sidecar; `ctrain prepare --format sft` writes them");
        return st;
    }
    if (version != CT_SFT_VERSION)
        return CT_ERR(CT_ERR_FORMAT, "%s: unknown SFT sidecar version %" PRIu32 ", expected %d", path, version,
                      CT_SFT_VERSION);
    int64_t n = sft_i64(m + 8), ntok = sft_i64(m + 16), counted = sft_i64(m + 24);
    if (ntok != shard_tokens) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: the sidecar describes %" PRId64 " tokens but its shard %s holds %" PRId64,
                    path, ntok, shard_name, shard_tokens);
        ct_error_hint("the shard and its sidecar come from different runs; run ctrain prepare --format sft again");
        return st;
    }
    if (ntok < 1 || ntok > ((int64_t)1 << 40))
        return CT_ERR(CT_ERR_FORMAT, "%s: token count %" PRId64 " out of range", path, ntok);
    if (n < 1 || n > ntok)
        return CT_ERR(CT_ERR_FORMAT, "%s: example count %" PRId64 " out of range: expected 1..%" PRId64
                      " (every example holds a token)", path, n, ntok);
    int64_t mask_bytes = (ntok + 7) / 8;
    int64_t expect = CT_SFT_HEADER_BYTES + 8 * (n + 1) + mask_bytes;
    if (fsize != expect) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: %s: the header says %" PRId64 " examples and %" PRId64
                    " tokens (%" PRId64 " bytes) but the file is %" PRId64 " bytes", path,
                    fsize < expect ? "truncated" : "trailing bytes", n, ntok, expect, fsize);
        if (fsize < expect) ct_error_hint("the sidecar was not completely written or copied; write it again");
        return st;
    }
    const uint8_t *off = m + CT_SFT_HEADER_BYTES, *mask = off + 8 * (n + 1);
    int64_t prev = sft_i64(off);
    if (prev != 0)
        return CT_ERR(CT_ERR_FORMAT, "%s: example 0 starts at token %" PRId64 ", expected 0", path, prev);
    for (int64_t i = 1; i <= n; i++) {
        int64_t o = sft_i64(off + 8 * i);
        if (o <= prev || o > ntok)
            return CT_ERR(CT_ERR_FORMAT, "%s: example %" PRId64 " ends at token %" PRId64 " after starting at %" PRId64
                          ": offsets must increase strictly up to the token count %" PRId64, path, i - 1, o, prev, ntok);
        if (mask[prev >> 3] >> (prev & 7) & 1)
            return CT_ERR(CT_ERR_FORMAT, "%s: example %" PRId64 "'s first token (%" PRId64 ") is marked as counted; "
                          "nothing in its example comes before it", path, i - 1, prev);
        prev = o;
    }
    if (prev != ntok)
        return CT_ERR(CT_ERR_FORMAT, "%s: the last example ends at token %" PRId64 ", but the shard holds %" PRId64,
                      path, prev, ntok);
    if (ntok & 7) {
        uint8_t unused = (uint8_t)(0xFFu << (ntok & 7));
        if (mask[mask_bytes - 1] & unused)
            return CT_ERR(CT_ERR_FORMAT, "%s: mask bits past token %" PRId64 " are set", path, ntok);
    }
    int64_t bits = 0;
    for (int64_t i = 0; i < mask_bytes; i++) bits += popcount8(mask[i]);
    if (bits != counted)
        return CT_ERR(CT_ERR_FORMAT, "%s: the header counts %" PRId64 " tokens but the mask marks %" PRId64, path,
                      counted, bits);
    s->n = n;
    s->ntok = ntok;
    s->counted = counted;
    s->offsets = off;
    s->mask = mask;
    return CT_OK;
}

static ct_sft_shard *sft_new(const char *path) {
    ct_sft_shard *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
        return NULL;
    }
    return s;
}

static const ct_file_map_msgs sft_msgs = {
    .noun = "SFT sidecar",
    .missing_hint = "an instruction-tuning shard needs the .sft beside its .bin; `ctrain prepare --format sft` "
                    "writes both",
    .short_what = "header of an SFT sidecar",
    .short_hint = "the file is truncated or not an SFT sidecar",
};

const ct_file_map_msgs *ct_sft_file_msgs(void) { return &sft_msgs; }

static void sft_unmap(const void *map, size_t len) { ct_file_unmap(map, len); }
static void sft_free(const void *map, size_t len) {
    (void)len;
    free((void *)map);
}

ct_status ct_sft_open(ct_sft_shard **out, const char *path, const ct_shard *shard) {
    *out = NULL;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "sft sidecar: empty path");
    const void *map = NULL;
    size_t len = 0;
    ct_status st = ct_file_map(path, CT_SFT_HEADER_BYTES, &sft_msgs, &map, &len);
    if (st) return st;
    return ct_sft_open_mem(out, path, map, len, sft_unmap, ct_shard_ntokens(shard),
                           ct_shard_path(shard));
}

ct_status ct_sft_open_mem(ct_sft_shard **out, const char *name, const void *data, size_t len,
                          void (*release)(const void *data, size_t len), int64_t shard_tokens,
                          const char *shard_name) {
    *out = NULL;
    ct_sft_shard *s = sft_new(name);
    if (!s) {
        if (release) release(data, len);
        return ct_last_status();
    }
    s->map = data;
    s->map_len = len;
    s->release = release;
    ct_status st;
    if (len < CT_SFT_HEADER_BYTES)
        st = CT_ERR(CT_ERR_FORMAT, "%s: %zu bytes, shorter than the %d-byte header of an SFT sidecar", name, len,
                    CT_SFT_HEADER_BYTES);
    else
        st = sft_validate(s, shard_tokens, shard_name);
    if (st) {
        ct_sft_close(s);
        return st;
    }
    *out = s;
    return CT_OK;
}

ct_status ct_sft_open_bytes(ct_sft_shard **out, const char *name, const void *data, size_t len,
                            int64_t shard_tokens, const char *shard_name) {
    *out = NULL;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return CT_ERR(CT_ERR_OOM, "%s: out of memory (%zu bytes)", name, len);
    if (len) memcpy(copy, data, len);
    return ct_sft_open_mem(out, name, copy, len, sft_free, shard_tokens, shard_name);
}

void ct_sft_close(ct_sft_shard *s) {
    if (!s) return;
    if (s->release) s->release(s->map, s->map_len);
    free(s->path);
    free(s);
}

const char *ct_sft_path(const ct_sft_shard *s) { return s->path; }
int64_t ct_sft_num_examples(const ct_sft_shard *s) { return s->n; }
int64_t ct_sft_num_tokens(const ct_sft_shard *s) { return s->ntok; }
int64_t ct_sft_counted_tokens(const ct_sft_shard *s) { return s->counted; }

void ct_sft_example_range(const ct_sft_shard *s, int64_t i, int64_t *start, int64_t *end) {
    CT_ASSERT(i >= 0 && i < s->n);
    *start = sft_i64(s->offsets + 8 * i);
    *end = sft_i64(s->offsets + 8 * (i + 1));
}

int64_t ct_sft_example_of(const ct_sft_shard *s, int64_t pos) {
    CT_ASSERT(pos >= 0 && pos < s->ntok);
    int64_t lo = 0, hi = s->n - 1; /* the last example whose start <= pos */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (sft_i64(s->offsets + 8 * mid) <= pos) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

bool ct_sft_counts(const ct_sft_shard *s, int64_t i) {
    CT_ASSERT(i >= 0 && i < s->ntok);
    return (s->mask[i >> 3] >> (i & 7)) & 1;
}

int64_t ct_sft_targets(const ct_sft_shard *s, int64_t start, int64_t n, const int32_t *in,
                       int32_t *tg) {
    CT_ASSERT(start >= 0 && n >= 1 && n <= s->ntok - start);
    const uint8_t *m = s->mask;
    int64_t kept = 0;
    for (int64_t t = 0; t + 1 < n; t++) {
        int64_t i = start + t + 1;
        int32_t on = (m[i >> 3] >> (i & 7)) & 1;
        tg[t] = on ? in[t + 1] : -1;
        kept += on;
    }
    tg[n - 1] = -1;
    return kept;
}

int64_t ct_sft_count_range(const ct_sft_shard *s, int64_t start, int64_t end) {
    CT_ASSERT(start >= 0 && start <= end && end <= s->ntok);
    int64_t c = 0, i = start;
    for (; i < end && (i & 7); i++) c += (s->mask[i >> 3] >> (i & 7)) & 1;
    for (; i + 8 <= end; i += 8) c += popcount8(s->mask[i >> 3]);
    for (; i < end; i++) c += (s->mask[i >> 3] >> (i & 7)) & 1;
    return c;
}

ct_status ct_sft_read_mask(const ct_sft_shard *s, int64_t start, int64_t count, uint8_t *mask) {
    if (start < 0 || count < 0 || start > s->ntok || count > s->ntok - start)
        return CT_ERR(CT_ERR_ARG, "%s: mask range [%" PRId64 ", %" PRId64 ") outside the %" PRId64 " tokens", s->path,
                      start, start + count, s->ntok);
    for (int64_t k = 0; k < count; k++) {
        int64_t i = start + k;
        mask[k] = (s->mask[i >> 3] >> (i & 7)) & 1;
    }
    return CT_OK;
}

/* ------------------------------------------------------------- writer */

struct ct_sft_writer {
    char *path;
    int64_t *offsets; /* [n + 1] */
    int64_t n, cap_off;
    uint8_t *mask;    /* [ceil(ntok / 8)] */
    int64_t ntok, cap_mask, counted;
};

ct_status ct_sft_writer_open(ct_sft_writer **out, const char *path) {
    *out = NULL;
    ct_sft_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path)) || !(w->offsets = malloc(64 * sizeof *w->offsets))) {
        if (w) free(w->path);
        free(w);
        return CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
    }
    w->cap_off = 64;
    w->offsets[0] = 0;
    *out = w;
    return CT_OK;
}

ct_status ct_sft_writer_add(ct_sft_writer *w, const uint8_t *mask, int64_t n) {
    if (n < 1) return CT_ERR(CT_ERR_ARG, "%s: an example of %" PRId64 " tokens", w->path, n);
    if (mask[0])
        return CT_ERR(CT_ERR_ARG, "%s: example %" PRId64 "'s first token is marked as counted", w->path, w->n);
    if (w->n + 2 > w->cap_off) {
        int64_t cap = 2 * w->cap_off;
        int64_t *v = realloc(w->offsets, (size_t)cap * sizeof *v);
        if (!v) return CT_ERR(CT_ERR_OOM, "%s: out of memory", w->path);
        w->offsets = v;
        w->cap_off = cap;
    }
    int64_t need = (w->ntok + n + 7) / 8;
    if (need > w->cap_mask) {
        int64_t cap = w->cap_mask ? w->cap_mask : 4096;
        while (cap < need) cap *= 2;
        uint8_t *v = realloc(w->mask, (size_t)cap);
        if (!v) return CT_ERR(CT_ERR_OOM, "%s: out of memory", w->path);
        memset(v + w->cap_mask, 0, (size_t)(cap - w->cap_mask));
        w->mask = v;
        w->cap_mask = cap;
    }
    for (int64_t k = 0; k < n; k++) {
        if (!mask[k]) continue;
        int64_t i = w->ntok + k;
        w->mask[i >> 3] |= (uint8_t)(1u << (i & 7));
        w->counted++;
    }
    w->ntok += n;
    w->offsets[++w->n] = w->ntok;
    return CT_OK;
}

int64_t ct_sft_writer_examples(const ct_sft_writer *w) { return w->n; }
int64_t ct_sft_writer_tokens(const ct_sft_writer *w) { return w->ntok; }
int64_t ct_sft_writer_counted(const ct_sft_writer *w) { return w->counted; }

ct_status ct_sft_writer_commit(ct_sft_writer *w) {
    ct_status st;
    ct_afile *f = NULL;
    if (w->n == 0) {
        st = CT_ERR(CT_ERR_ARG, "%s: no example to write", w->path);
        goto done;
    }
    uint8_t head[CT_SFT_HEADER_BYTES] = {0};
    ct_le_store_u32(head, CT_SFT_MAGIC);
    ct_le_store_u32(head + 4, CT_SFT_VERSION);
    ct_le_store_u64(head + 8, (uint64_t)w->n);
    ct_le_store_u64(head + 16, (uint64_t)w->ntok);
    ct_le_store_u64(head + 24, (uint64_t)w->counted);
    if ((st = ct_afile_open(&f, w->path)) || (st = ct_afile_write(f, head, sizeof head))) goto done;
    for (int64_t i = 0; i <= w->n; i++) {
        uint8_t b[8];
        ct_le_store_u64(b, (uint64_t)w->offsets[i]);
        if ((st = ct_afile_write(f, b, sizeof b))) goto done;
    }
    if ((st = ct_afile_write(f, w->mask, (size_t)((w->ntok + 7) / 8)))) goto done;
    st = ct_afile_commit(f);
    f = NULL;
done:
    ct_afile_abort(f);
    w->n = 0; /* consumed */
    ct_sft_writer_abort(w);
    return st;
}

void ct_sft_writer_abort(ct_sft_writer *w) {
    if (!w) return;
    free(w->offsets);
    free(w->mask);
    free(w->path);
    free(w);
}
