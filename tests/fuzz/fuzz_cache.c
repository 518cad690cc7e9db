/*
 * Fuzz the tokenised-data cache's entry reader (src/data/prepare/cache.c,
 * cache_file.c): the input is the entry file of one key in a cache directory,
 * opened with ct_cache_open (disk tier only) and looked up with ct_cache_get.
 * An entry guards itself with its key and an XXH64 of the payload; where the
 * input holds zeros in those fields the right values are filled in, so the
 * fuzzer gets past them (seeds come with both forms).
 * Oracles: the lookup hits exactly when the file is a well-formed entry of
 * the key (magic, version 1, size 40 + 4N, key, checksum), and then returns
 * the file's N tokens; anything else is a miss, never an error or a crash.
 */
#include "fuzz.h"

#include "core/dtype.h"
#include "data/prepare/cache.h"
#include "data/prepare/cache_file.h"

#include <xxhash.h>

static const ct_cache_key key = {.lo = 0x0123456789abcdefull, .hi = 0xfedcba9876543210ull};

static bool all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("cache");
    static char cdir[FUZZ_PATH_MAX], path[CT_CACHE_FILE_PATH_CAP], fan[CT_CACHE_FILE_PATH_CAP];
    if (!cdir[0]) {
        fuzz_mkdir(fuzz_join(cdir, dir, "cache"));
        ct_cache_file_path(cdir, key, path);
        memcpy(fan, path, sizeof fan);
        *strrchr(fan, '/') = '\0';
        fuzz_mkdir(fan);
    }
    uint8_t *in = malloc(size ? size : 1);
    if (!in) return 0;
    if (size) memcpy(in, data, size);
    if (size >= CT_CACHE_DISK_HEADER_BYTES) {
        if (all_zero(in + 24, 16)) {
            ct_le_store_u64(in + 24, key.lo);
            ct_le_store_u64(in + 32, key.hi);
        }
        if (all_zero(in + 16, 8))
            ct_le_store_u64(in + 16, XXH64(in + CT_CACHE_DISK_HEADER_BYTES,
                                           size - CT_CACHE_DISK_HEADER_BYTES, 0));
    }
    fuzz_write(path, in, size);

    bool good = size >= CT_CACHE_DISK_HEADER_BYTES && !memcmp(in, "CTTK", 4) &&
                ct_le_load_u32(in + 4) == 1 && (size - CT_CACHE_DISK_HEADER_BYTES) % 4 == 0 &&
                ct_le_load_u64(in + 8) == (size - CT_CACHE_DISK_HEADER_BYTES) / 4 &&
                ct_le_load_u64(in + 24) == key.lo && ct_le_load_u64(in + 32) == key.hi &&
                ct_le_load_u64(in + 16) == XXH64(in + CT_CACHE_DISK_HEADER_BYTES,
                                                 size - CT_CACHE_DISK_HEADER_BYTES, 0);
    ct_cache *c = NULL;
    ct_error_clear();
    ct_status st = ct_cache_open(&c, cdir, (int64_t)1 << 30, 0);
    fuzz_check_error(st, "ct_cache_open", cdir);
    if (st) fuzz_fail("ct_cache_open failed on a directory holding one entry: %s", ct_last_error());
    int32_t *tokens = NULL;
    int64_t n = 0;
    bool found = false;
    ct_error_clear();
    st = ct_cache_get(c, key, &tokens, &n, &found);
    if (st && st != CT_ERR_OOM) fuzz_fail("ct_cache_get failed (%s): %s", ct_status_str(st), ct_last_error());
    if (!st) {
        if (found != good)
            fuzz_fail("ct_cache_get %s a %s entry", found ? "returned" : "missed",
                      good ? "well-formed" : "malformed");
        if (found) {
            if ((uint64_t)n * 4 + CT_CACHE_DISK_HEADER_BYTES != size)
                fuzz_fail("hit of %lld tokens from a %zu-byte entry", (long long)n, size);
            for (int64_t i = 0; i < n; i++)
                if ((uint32_t)tokens[i] != ct_le_load_u32(in + CT_CACHE_DISK_HEADER_BYTES + 4 * i))
                    fuzz_fail("token %lld of the hit differs from the file", (long long)i);
        }
    }
    free(tokens);
    ct_cache_close(c);
    unlink(path);
    free(in);
    return 0;
}
