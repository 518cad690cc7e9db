/*
 * Fuzz the SFT sidecar reader (ct_sft_open_bytes, src/data/shard/sft_shard.c): the
 * input is a train_NNNNNN.sft file (example offsets and the loss mask of a
 * shard), as read from disk or fetched from a URL; the shard's token count is
 * taken from the sidecar's own header when it is small, else a fixed one, so
 * both agreement and disagreement are reached.
 * Oracles: a failed open names the sidecar; an open sidecar's examples tile
 * [0, tokens) in order, ct_sft_example_of inverts them, no example's first
 * token counts, the counted-token total equals the mask's set bits, and
 * ct_sft_read_mask agrees with ct_sft_counts token by token.
 */
#include "fuzz.h"

#include "core/dtype.h"
#include "data/shard/sft_shard.h"

#define NAME "fuzz/train_000000.sft"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t tokens = 100;
    if (size >= 24) {
        int64_t t = (int64_t)ct_le_load_u64(data + 16);
        if (t >= 1 && t <= (1 << 20)) tokens = t; /* the header's own count, when sane */
    }
    ct_sft_shard *s = NULL;
    ct_error_clear();
    ct_status st = ct_sft_open_bytes(&s, NAME, data, size, tokens, "fuzz/train_000000.bin");
    fuzz_check_error(st, "ct_sft_open_bytes", NAME);
    if (st) return 0;
    int64_t n = ct_sft_num_examples(s), T = ct_sft_num_tokens(s), counted = 0, prev_end = 0;
    if (n < 1 || T != tokens) fuzz_fail("%lld examples over %lld tokens (shard %lld)",
                                        (long long)n, (long long)T, (long long)tokens);
    uint8_t *mask = malloc((size_t)T);
    if (!mask) fuzz_fail("out of memory");
    if (ct_sft_read_mask(s, 0, T, mask)) fuzz_fail("read_mask of the whole shard failed");
    for (int64_t i = 0; i < n; i++) {
        int64_t a, b;
        ct_sft_example_range(s, i, &a, &b);
        if (a != prev_end || b <= a || b > T)
            fuzz_fail("example %lld is [%lld, %lld) after %lld", (long long)i, (long long)a,
                      (long long)b, (long long)prev_end);
        if (ct_sft_counts(s, a)) fuzz_fail("example %lld's first token counts", (long long)i);
        if (ct_sft_example_of(s, a) != i || ct_sft_example_of(s, b - 1) != i)
            fuzz_fail("example_of does not find example %lld", (long long)i);
        prev_end = b;
    }
    if (prev_end != T) fuzz_fail("examples end at %lld of %lld", (long long)prev_end, (long long)T);
    for (int64_t k = 0; k < T; k++) {
        if ((mask[k] != 0) != ct_sft_counts(s, k))
            fuzz_fail("token %lld: read_mask and counts disagree", (long long)k);
        counted += mask[k] != 0;
    }
    if (counted != ct_sft_counted_tokens(s))
        fuzz_fail("%lld set bits, counted_tokens says %lld", (long long)counted,
                  (long long)ct_sft_counted_tokens(s));
    free(mask);
    ct_sft_close(s);
    return 0;
}
