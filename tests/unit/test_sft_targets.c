/*
 * ct_sft_targets, the one-pass fill of a row's targets from a sidecar's loss
 * mask, against ct_sft_counts token by token: random examples and masks,
 * random ranges starting at any bit of a mask byte, lengths 1..300, the
 * count it returns and the -1 after the range's last token.
 * Leaves out: the sidecar format itself (test_sft.c) and the loader's rows
 * (test_loader_sft.c).
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "data/shard/sft_shard.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NTOK 5000

static uint64_t rng_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

int main(void) {
    char tmp[256], path[512];
    if (!ct_tmpdir_make(tmp, sizeof tmp, "sft_targets")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    ct_tmpdir_join(path, sizeof path, tmp, "a.sft");
    /* examples of 1..60 tokens, about a third of their tokens counted */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    uint8_t mask[64];
    ct_sft_writer *w = NULL;
    CHECK(ct_sft_writer_open(&w, path) == CT_OK);
    for (int64_t at = 0; w && at < NTOK;) {
        int64_t n = 1 + (int64_t)(rng_next(&x) % 60);
        if (n > NTOK - at) n = NTOK - at;
        for (int64_t k = 0; k < n; k++) mask[k] = k > 0 && rng_next(&x) % 3 == 0;
        CHECK(ct_sft_writer_add(w, mask, n) == CT_OK);
        at += n;
    }
    CHECK(w && ct_sft_writer_commit(w) == CT_OK);
    static uint8_t bytes[1 << 16];
    long len = ct_tmpdir_read(path, bytes, sizeof bytes);
    ct_sft_shard *s = NULL;
    CHECK(len > 0 && ct_sft_open_bytes(&s, path, bytes, (size_t)len, NTOK, "a.bin") == CT_OK);
    if (s) {
        int32_t in[301], tg[301];
        int64_t checked = 0;
        for (int r = 0; r < 4000; r++) {
            int64_t n = 1 + (int64_t)(rng_next(&x) % 300);
            int64_t start = (int64_t)(rng_next(&x) % (uint64_t)(NTOK - n + 1));
            for (int64_t t = 0; t < n; t++) in[t] = (int32_t)(1000 + start + t);
            tg[n] = 12345; /* past the row: untouched */
            int64_t kept = ct_sft_targets(s, start, n, in, tg), want = 0, bad = 0;
            for (int64_t t = 0; t < n; t++) {
                bool on = t + 1 < n && ct_sft_counts(s, start + t + 1);
                want += on;
                bad += tg[t] != (on ? in[t + 1] : -1);
            }
            CHECK_MSG(bad == 0 && kept == want && tg[n] == 12345,
                      "start %lld n %lld: %lld targets differ, kept %lld want %lld", (long long)start,
                      (long long)n, (long long)bad, (long long)kept, (long long)want);
            checked += kept;
        }
        CHECK(checked > 1000); /* the masks were not empty */
    }
    ct_sft_close(s);
    ct_tmpdir_remove(tmp);
    return ct_test_result("test_sft_targets");
}
