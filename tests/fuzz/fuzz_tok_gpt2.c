/*
 * Fuzz the GPT-2 tokenizer loader for OpenAI's files (src/data/tokenizer/tokenizer_load.c)
 * and the encoder: the input is encoder.json and vocab.bpe, split at the first
 * NUL byte (no NUL: at the middle), written into a directory that is loaded.
 * Oracles: a failed load names the directory; a loaded tokenizer round-trips
 * text (fuzz_tok.h), the fixed samples and both halves of the input.
 */
#include "fuzz_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("tok_gpt2");
    char enc[FUZZ_PATH_MAX], bpe[FUZZ_PATH_MAX];
    fuzz_join(enc, dir, "encoder.json");
    fuzz_join(bpe, dir, "vocab.bpe");
    fuzz_part parts[2];
    if (fuzz_split(data, size, parts, 2) < 2) {
        parts[0].n = size / 2;
        parts[1].p = data + size / 2;
        parts[1].n = size - size / 2;
    }
    fuzz_write(enc, parts[0].p, parts[0].n);
    fuzz_write(bpe, parts[1].p, parts[1].n);

    ct_tokenizer *t = NULL;
    ct_error_clear();
    ct_status st = ct_tokenizer_load(&t, dir);
    fuzz_check_error(st, "ct_tokenizer_load", dir);
    if (st) return 0;
    if (ct_tokenizer_kind(t) != CT_TOK_KIND_GPT2_BPE)
        fuzz_fail("encoder.json + vocab.bpe loaded as kind %d", (int)ct_tokenizer_kind(t));
    fuzz_tok_check(t, parts, 2);
    ct_tokenizer_free(t);
    return 0;
}
