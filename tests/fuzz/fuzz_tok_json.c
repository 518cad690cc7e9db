/*
 * Fuzz the Hugging Face tokenizer.json loader (src/data/tokenizer/tokenizer_load.c,
 * GPT-2 byte-level BPE; src/data/tokenizer/tokenizer_spm.c, SentencePiece BPE with byte
 * fallback) and both encoders: the input is tokenizer.json and, after the
 * first NUL byte when there is one, the tokenizer_config.json beside it.
 * Oracles: a failed load names the file at fault (either lies in the
 * directory); a loaded tokenizer round-trips text
 * (fuzz_tok.h), the fixed samples and the pieces of the input.
 */
#include "fuzz_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("tok_json");
    char path[FUZZ_PATH_MAX], cfg[FUZZ_PATH_MAX];
    fuzz_join(path, dir, "tokenizer.json");
    fuzz_join(cfg, dir, "tokenizer_config.json");
    fuzz_part parts[2];
    int n = fuzz_split(data, size, parts, 2);
    fuzz_write(path, parts[0].p, parts[0].n);
    if (n > 1) fuzz_write(cfg, parts[1].p, parts[1].n);
    else unlink(cfg);

    ct_tokenizer *t = NULL;
    ct_error_clear();
    ct_status st = ct_tokenizer_load(&t, path);
    /* names tokenizer.json, or tokenizer_config.json when that is at fault */
    fuzz_check_error(st, "ct_tokenizer_load", dir);
    if (st) return 0;
    fuzz_tok_check(t, parts, n);
    ct_tokenizer_free(t);
    return 0;
}
