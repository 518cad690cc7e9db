/*
 * llm.c token shards: mmap reader with a fully validated header, and an
 * atomic streaming writer. Tokens are read with explicit little-endian loads,
 * so the reader has no alignment or host byte-order assumptions.
 * Leaves out: shards at URLs (source_remote.c), batching and shuffling (the
 * loader).
 */
#define _DEFAULT_SOURCE /* madvise */
#include "data/shard/shard.h"

#include "core/dtype.h"
#include "io/fileio.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * File format (llm.c, dev/data/data_common.py write_datafile):
 *
 *   header: 256 little-endian int32 (1024 bytes)
 *     [0]  magic 20240520
 *     [1]  version: 1 = tokens are uint16, 2 = tokens are uint32
 *     [2]  number of tokens N (>= 1)
 *     [3..255] zero (ignored on read)
 *   tokens: N little-endian uint16 (version 1) or uint32 (version 2)
 *
 * The file size must be exactly 1024 + N * token size: anything shorter is
 * truncated, anything longer has trailing bytes; both are errors.
 * Also read, never written: llm.c's LLaMA-3 shards (magic 20240801,
 * version 7, uint32 tokens), which are the same layout under other numbers.
 */

#define SHARD_MAGIC_LLAMA3 20240801
#define SHARD_VERSION_LLAMA3 7

struct ct_shard {
    char *path;
    const uint8_t *map; /* the whole file */
    size_t map_len;    /* bytes */
    const uint8_t *tokens; /* map + 1024 */
    int64_t ntok;
    int tsize;         /* bytes per token: 2 or 4 */
};

static int32_t shard_i32(const uint8_t *p) {
    uint32_t u = ct_le_load_u32(p);
    return u <= (uint32_t)INT32_MAX ? (int32_t)u : -(int32_t)(~u) - 1;
}

ct_status ct_shard_open(ct_shard **out, const char *path) {
    ct_status st = CT_OK;
    *out = NULL;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "shard: empty path");
    ct_shard *s = calloc(1, sizeof *s);
    if (!s) return CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
    size_t plen = strlen(path) + 1;
    s->path = malloc(plen);
    if (!s->path) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    memcpy(s->path, path, plen);

    static const ct_file_map_msgs msgs = {
        .noun = "token shard",
        .missing_hint = "check data.train / data.val; `ctrain prepare` writes shards",
        .short_what = "header of an llm.c token shard",
        .short_hint = "the file is truncated or not a token shard",
    };
    const void *map = NULL;
    st = ct_file_map(path, CT_SHARD_HEADER_BYTES, &msgs, &map, &s->map_len);
    if (st != CT_OK) goto fail;
    s->map = map;
    int64_t fsize = (int64_t)s->map_len;

    int32_t magic = shard_i32(s->map), version = shard_i32(s->map + 4);
    int64_t ntok = shard_i32(s->map + 8);
    if (magic == CT_SHARD_MAGIC && version == 1) {
        s->tsize = 2;
    } else if (magic == CT_SHARD_MAGIC && version == 2) {
        s->tsize = 4;
    } else if (magic == SHARD_MAGIC_LLAMA3 && version == SHARD_VERSION_LLAMA3) {
        s->tsize = 4;
    } else if (magic != CT_SHARD_MAGIC && magic != SHARD_MAGIC_LLAMA3) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: bad magic number %" PRId32 ", expected %d (an llm.c "
                    "token shard)", path, magic, CT_SHARD_MAGIC);
        ct_error_hint("the file is not a token shard; make shards with `ctrain prepare`");
        goto fail;
    } else {
        st = CT_ERR(CT_ERR_FORMAT, "%s: unknown shard version %" PRId32 ", expected 1 (uint16 "
                    "tokens) or 2 (uint32 tokens)", path, version);
        goto fail;
    }
    if (ntok < 0) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: header token count %" PRId64 " is negative", path, ntok);
        goto fail;
    }
    if (ntok == 0) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: shard holds no tokens (header token count is 0)", path);
        goto fail;
    }
    int64_t expect = CT_SHARD_HEADER_BYTES + ntok * s->tsize;
    if (fsize < expect) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: truncated: the header says %" PRId64 " tokens of %d "
                    "bytes (%" PRId64 " bytes with the header) but the file is %" PRId64 " bytes",
                    path, ntok, s->tsize, expect, fsize);
        ct_error_hint("the shard was not completely written or copied; write it again");
        goto fail;
    }
    if (fsize > expect) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: %" PRId64 " trailing bytes: the header says %" PRId64
                    " tokens of %d bytes (%" PRId64 " bytes with the header) but the file is %"
                    PRId64 " bytes", path, fsize - expect, ntok, s->tsize, expect, fsize);
        goto fail;
    }
    s->tokens = s->map + CT_SHARD_HEADER_BYTES;
    s->ntok = ntok;
    *out = s;
    return CT_OK;
fail:
    ct_shard_close(s);
    return st;
}

void ct_shard_close(ct_shard *s) {
    if (!s) return;
    ct_file_unmap(s->map, s->map_len);
    free(s->path);
    free(s);
}

const char *ct_shard_path(const ct_shard *s) { return s->path; }
int64_t ct_shard_ntokens(const ct_shard *s) { return s->ntok; }
int ct_shard_token_bytes(const ct_shard *s) { return s->tsize; }

uint32_t ct_shard_token(const ct_shard *s, int64_t i) {
    CT_ASSERT(i >= 0 && i < s->ntok);
    const uint8_t *p = s->tokens + (size_t)i * (size_t)s->tsize;
    return s->tsize == 2 ? ct_le_load_u16(p) : ct_le_load_u32(p);
}

ct_status ct_shard_read(const ct_shard *s, int64_t start, int64_t count, int32_t *out) {
    if (start < 0 || count < 0 || start > s->ntok || count > s->ntok - start)
        return CT_ERR(CT_ERR_ARG, "%s: cannot read %" PRId64 " tokens from %" PRId64 ": the "
                      "shard holds %" PRId64, s->path, count, start, s->ntok);
    const uint8_t *p = s->tokens + (size_t)start * (size_t)s->tsize;
    if (s->tsize == 2) {
        for (int64_t i = 0; i < count; i++) out[i] = (int32_t)ct_le_load_u16(p + 2 * i);
        return CT_OK;
    }
    for (int64_t i = 0; i < count; i++) {
        uint32_t t = ct_le_load_u32(p + 4 * i);
        if (t > (uint32_t)INT32_MAX)
            return CT_ERR(CT_ERR_FORMAT, "%s: token %" PRIu32 " at position %" PRId64 " is out "
                          "of range", s->path, t, start + i);
        out[i] = (int32_t)t;
    }
    return CT_OK;
}

#define SHARD_SCAN_BLOCK 4096 /* tokens per max-reduction in ct_shard_find_token_ge */

/* Largest token of [p, p + n tokens): branch-free so the compiler vectorises it. */
static uint32_t shard_block_max(const uint8_t *p, int64_t n, int tsize) {
    uint32_t mx = 0;
    if (tsize == 2) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t t = ct_le_load_u16(p + 2 * i);
            mx = t > mx ? t : mx;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            uint32_t t = ct_le_load_u32(p + 4 * i);
            mx = t > mx ? t : mx;
        }
    }
    return mx;
}

int64_t ct_shard_find_token_ge(const ct_shard *s, uint32_t limit) {
    for (int64_t b = 0; b < s->ntok; b += SHARD_SCAN_BLOCK) {
        int64_t n = s->ntok - b < SHARD_SCAN_BLOCK ? s->ntok - b : SHARD_SCAN_BLOCK;
        const uint8_t *p = s->tokens + (size_t)b * (size_t)s->tsize;
        if (shard_block_max(p, n, s->tsize) < limit) continue;
        for (int64_t i = 0; i < n; i++)
            if (ct_shard_token(s, b + i) >= limit) return b + i;
    }
    return -1;
}

void ct_shard_willneed(const ct_shard *s, int64_t start, int64_t count) {
    if (start < 0) {
        count += start;
        start = 0;
    }
    if (count > s->ntok - start) count = s->ntok - start;
    if (count <= 0) return;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uintptr_t lo = (uintptr_t)(s->tokens + (size_t)start * (size_t)s->tsize);
    uintptr_t hi = lo + (size_t)count * (size_t)s->tsize;
    lo -= lo % (uintptr_t)page; /* the mapping starts on a page, so this stays inside it */
    (void)posix_madvise((void *)lo, (size_t)(hi - lo), POSIX_MADV_WILLNEED);
}

void ct_shard_drop_pages(const ct_shard *s) {
    if (!s || !s->map_len) return;
    /* a read-only file mapping: the pages leave this process (its RSS) and stay
     * in the page cache; a later read faults them back in */
    (void)madvise((void *)s->map, s->map_len, MADV_DONTNEED);
}

#define SHARD_CHUNK 65536 /* tokens per write */

struct ct_shard_writer {
    ct_afile *f;
    char *path;
    int version, tsize;
    int64_t n;
    uint8_t *buf; /* SHARD_CHUNK tokens, encoded */
};

ct_status ct_shard_writer_open(ct_shard_writer **out, const char *path, int version) {
    *out = NULL;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "shard write: empty path");
    if (version != 1 && version != 2)
        return CT_ERR(CT_ERR_ARG, "%s: shard version %d, expected 1 (uint16 tokens) or 2 "
                      "(uint32 tokens)", path, version);
    ct_status st = CT_OK;
    ct_shard_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path)) || !(w->buf = calloc(SHARD_CHUNK, 4))) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }
    w->version = version;
    w->tsize = version == 1 ? 2 : 4;
    /* the header's token count is patched in at commit (buf is zeroed) */
    ct_le_store_u32(w->buf, (uint32_t)CT_SHARD_MAGIC);
    ct_le_store_u32(w->buf + 4, (uint32_t)version);
    if ((st = ct_afile_open(&w->f, path)) != CT_OK) goto fail;
    if ((st = ct_afile_write(w->f, w->buf, CT_SHARD_HEADER_BYTES)) != CT_OK) goto fail;
    *out = w;
    return CT_OK;
fail:
    ct_shard_writer_abort(w);
    return st;
}

ct_status ct_shard_writer_append(ct_shard_writer *w, const uint32_t *tokens, int64_t n) {
    if (n < 0 || w->n + n > INT32_MAX)
        return CT_ERR(CT_ERR_ARG, "%s: %" PRId64 " tokens; a shard holds 1 to %d", w->path,
                      w->n + n, INT32_MAX);
    for (int64_t off = 0; off < n; off += SHARD_CHUNK) {
        int64_t cnt = n - off < SHARD_CHUNK ? n - off : SHARD_CHUNK;
        for (int64_t i = 0; i < cnt; i++) {
            uint32_t t = tokens[off + i];
            if (w->tsize == 2) {
                if (t > 65535u) {
                    ct_status st = CT_ERR(CT_ERR_ARG, "%s: token %" PRIu32 " at position %" PRId64
                                          " does not fit a version 1 shard (uint16 tokens)",
                                          w->path, t, w->n + off + i);
                    ct_error_hint("write version 2 shards (uint32 tokens) for vocabularies over "
                                  "65536");
                    return st;
                }
                ct_le_store_u16(w->buf + 2 * i, (uint16_t)t);
            } else {
                ct_le_store_u32(w->buf + 4 * i, t);
            }
        }
        ct_status st = ct_afile_write(w->f, w->buf, (size_t)cnt * (size_t)w->tsize);
        if (st) return st;
    }
    w->n += n;
    return CT_OK;
}

int64_t ct_shard_writer_count(const ct_shard_writer *w) { return w->n; }

ct_status ct_shard_writer_commit(ct_shard_writer *w) {
    ct_status st;
    if (w->n < 1) {
        st = CT_ERR(CT_ERR_ARG, "%s: a shard holds at least one token", w->path);
    } else {
        uint8_t count[4];
        ct_le_store_u32(count, (uint32_t)w->n);
        st = ct_afile_pwrite(w->f, 8, count, sizeof count);
        if (st == CT_OK) {
            st = ct_afile_commit(w->f);
            w->f = NULL;
        }
    }
    ct_shard_writer_abort(w);
    return st;
}

void ct_shard_writer_abort(ct_shard_writer *w) {
    if (!w) return;
    ct_afile_abort(w->f);
    free(w->buf);
    free(w->path);
    free(w);
}

ct_status ct_shard_write(const char *path, const uint32_t *tokens, int64_t n, int version) {
    if (n < 1 || n > INT32_MAX)
        return CT_ERR(CT_ERR_ARG, "%s: %" PRId64 " tokens; a shard holds 1 to %d",
                      path ? path : "shard", n, INT32_MAX);
    if (!tokens) return CT_ERR(CT_ERR_ARG, "%s: tokens is NULL", path ? path : "shard");
    ct_shard_writer *w;
    ct_status st = ct_shard_writer_open(&w, path, version);
    if (st) return st;
    if ((st = ct_shard_writer_append(w, tokens, n))) {
        ct_shard_writer_abort(w);
        return st;
    }
    return ct_shard_writer_commit(w);
}
