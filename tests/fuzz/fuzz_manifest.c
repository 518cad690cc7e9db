/*
 * Fuzz the remote dataset manifest reader (ct_remote_manifest_parse,
 * src/data/shard/shard_remote.c): the input is the manifest.json a server returns
 * for a data.train URL, read for the train split, for the val split, and for
 * one named shard.
 * Oracles: a failed parse names the manifest's URL; what parses lists shards
 * whose URLs are the base plus a plain file name (no '/', never "." or ".."),
 * each URL once, sorted, whose sizes follow from their token counts (1024 +
 * tokens x 2 or 4 bytes), with either no block hashes or exactly one per
 * 1 MiB block; the named-shard read yields that shard alone.
 */
#include "fuzz.h"

#include "data/shard/shard.h"
#include "data/shard/shard_remote.h"

#define MURL "http://127.0.0.1:9/data/manifest.json"
#define BASE "http://127.0.0.1:9/data/"

static void check_list(const ct_remote_shard_info *v, int n, const char *fname) {
    size_t bl = strlen(BASE);
    for (int i = 0; i < n; i++) {
        const ct_remote_shard_info *s = &v[i];
        if (!s->url || strncmp(s->url, BASE, bl) != 0) fuzz_fail("shard %d: URL %s", i, s->url);
        const char *f = s->url + bl;
        if (!f[0] || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, ".."))
            fuzz_fail("shard %d: file name '%s' is not a plain name", i, f);
        if (fname && strcmp(f, fname)) fuzz_fail("asked for %s, got %s", fname, f);
        if (i && strcmp(v[i - 1].url, s->url) >= 0)
            fuzz_fail("shards not sorted or listed twice: %s, %s", v[i - 1].url, s->url);
        if (s->ntok < 1 || (s->tsize != 2 && s->tsize != 4) ||
            s->bytes != CT_SHARD_HEADER_BYTES + s->ntok * s->tsize)
            fuzz_fail("shard %s: %lld tokens of %d bytes in %lld bytes", f, (long long)s->ntok,
                      s->tsize, (long long)s->bytes);
        int64_t nb = (s->bytes + CT_REMOTE_BLOCK_BYTES - 1) / CT_REMOTE_BLOCK_BYTES;
        if (s->blocks ? s->n_blocks != nb || s->block_bytes != CT_REMOTE_BLOCK_BYTES
                      : s->n_blocks != 0)
            fuzz_fail("shard %s: %lld block hashes for %lld blocks", f, (long long)s->n_blocks,
                      (long long)nb);
    }
    if (fname && n != 1) fuzz_fail("asked for %s, got %d shards", fname, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *splits[] = {"train", "val"};
    for (int k = 0; k < 3; k++) {
        ct_remote_shard_info *v = NULL;
        int n = 0, vocab = 0;
        const char *fname = k == 2 ? "train_000000.bin" : NULL;
        ct_error_clear();
        ct_status st = ct_remote_manifest_parse((const char *)data, size, MURL, BASE,
                                                splits[k & 1], fname, &v, &n, &vocab);
        fuzz_check_error(st, "ct_remote_manifest_parse", MURL);
        if (st == CT_OK) {
            if (n < 1 || !v) fuzz_fail("parsed but listed %d shards", n);
            if (vocab < 0) fuzz_fail("vocab_size %d", vocab);
            check_list(v, n, fname);
        }
        ct_remote_shard_info_free(v, n);
    }
    return 0;
}
