/*
 * Fuzz the llm.c token shard reader (src/data/shard/shard.c): the input is the .bin
 * file. Oracles: a failed open names the file; an open shard's size is the
 * 1024-byte header plus its tokens exactly; every token reads back the same
 * through ct_shard_token and ct_shard_read (or, above INT32_MAX, is refused
 * naming the file); ct_shard_find_token_ge agrees with a plain scan; a range
 * outside the shard is refused, never read.
 */
#include "fuzz.h"

#include "data/shard/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("shard");
    char path[FUZZ_PATH_MAX];
    fuzz_join(path, dir, "in.bin");
    fuzz_write(path, data, size);

    ct_shard *s = NULL;
    ct_error_clear();
    ct_status st = ct_shard_open(&s, path);
    fuzz_check_error(st, "ct_shard_open", path);
    if (st) return 0;

    int64_t n = ct_shard_ntokens(s);
    int tb = ct_shard_token_bytes(s);
    if (n < 1 || (tb != 2 && tb != 4) || (uint64_t)n * (uint64_t)tb + CT_SHARD_HEADER_BYTES != size)
        fuzz_fail("open shard of %zu bytes claims %lld tokens of %d bytes", size, (long long)n, tb);
    uint32_t max = 0;
    int64_t first_big = -1;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = data + CT_SHARD_HEADER_BYTES + i * tb;
        uint32_t want = tb == 2 ? (uint32_t)(p[0] | p[1] << 8)
                                : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                      (uint32_t)p[3] << 24;
        uint32_t got = ct_shard_token(s, i);
        if (got != want) fuzz_fail("token %lld reads %u, the file holds %u", (long long)i, got, want);
        if (got > max) max = got;
        if (first_big < 0 && got > (uint32_t)INT32_MAX) first_big = i;
    }
    int32_t *all = malloc((size_t)n * sizeof *all);
    if (all) {
        ct_error_clear();
        st = ct_shard_read(s, 0, n, all);
        if (first_big >= 0) {
            if (st == CT_OK) fuzz_fail("ct_shard_read returned token %lld above INT32_MAX",
                                       (long long)first_big);
            fuzz_check_error(st, "ct_shard_read", path);
        } else if (st) {
            fuzz_fail("ct_shard_read of the whole shard failed: %s", ct_last_error());
        } else {
            for (int64_t i = 0; i < n; i++)
                if ((uint32_t)all[i] != ct_shard_token(s, i))
                    fuzz_fail("ct_shard_read token %lld differs", (long long)i);
        }
        free(all);
    }
    int32_t one;
    ct_error_clear();
    if (ct_shard_read(s, n, 1, &one) == CT_OK) fuzz_fail("read past the last token succeeded");
    if (ct_shard_read(s, -1, 1, &one) == CT_OK) fuzz_fail("read before the first token succeeded");
    if (ct_shard_read(s, 1, n, &one) == CT_OK) fuzz_fail("read of one token too many succeeded");

    /* find_token_ge against a scan, at a few limits */
    uint32_t limits[4] = {0, max, max / 2 + 1, max + 1u};
    for (int k = 0; k < 4; k++) {
        if (k == 3 && max == UINT32_MAX) continue;
        int64_t want = -1;
        for (int64_t i = 0; i < n && want < 0; i++)
            if (ct_shard_token(s, i) >= limits[k]) want = i;
        int64_t got = ct_shard_find_token_ge(s, limits[k]);
        if (got != want)
            fuzz_fail("ct_shard_find_token_ge(%u) = %lld, a scan finds %lld", limits[k],
                      (long long)got, (long long)want);
    }
    ct_shard_willneed(s, n - 1, 1000);
    ct_shard_willneed(s, -5, 10);
    ct_shard_close(s);
    return 0;
}
