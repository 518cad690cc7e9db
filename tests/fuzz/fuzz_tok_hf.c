/*
 * Fuzz the generic tokenizer.json pipeline (src/data/tokenizer/tokenizer_hf.c, _pipe.c,
 * _regex.c): the input is a JSON object whose normalizer, pre_tokenizer,
 * post_processor, added_tokens and model options (ignore_merges,
 * byte_fallback, dropout, unk_token, ...) are put into a tokenizer.json around
 * a fixed small vocabulary (byte-level, or SentencePiece-style with byte
 * fallback when the input's model.byte_fallback is true), so the fuzzer
 * spends its time on the pipeline (any regex goes through the JavaScript ->
 * PCRE2 rewriting), not on spelling a vocabulary; after the first NUL byte
 * come texts to encode. An input that is no JSON object is written as the
 * file itself. Oracles: a failed load names the file; a loaded tokenizer
 * passes fuzz_tok.h's checks (ids in the vocabulary, decode, round trip when
 * the pipeline keeps the text, a fresh state gives the ids a reused one
 * gives); loading the file again gives the same identity.
 */
#include "fuzz_tok.h"

#include <cJSON.h>

/* GPT-2's byte alphabet: byte b as UTF-8 into out (NUL-terminated). */
static void hf_byte_spell(uint8_t b, char *out) {
    uint32_t cp = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        cp = 256;
        for (uint32_t c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) cp++;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = '\0';
    }
}

/* Merges over the byte alphabet ("\xC4\xA0" is a space) or SentencePiece's "▁". */
static const char *const hf_bl_merges[][2] = {
    {"t", "h"}, {"h", "e"}, {"th", "e"}, {"\xC4\xA0", "t"}, {"\xC4\xA0t", "he"}, {"i", "n"}, {"in", "g"}, {"1", "2"},
    {"12", "3"}, {"\xC4\xA0", "\xC4\xA0"}, {"e", "r"}, {"<", "|"}, {"\xC4\x8A", "\xC4\x8A"}, {"'", "s"},
    {"a", "n"}, {"an", "d"}, {"\xC3\x83", "\xC2\xA9"}, /* the bytes of "é" */
};
static const char *const hf_spm_merges[][2] = {
    {"t", "h"}, {"h", "e"}, {"th", "e"}, {"\xE2\x96\x81", "t"}, {"\xE2\x96\x81t", "he"}, {"i", "n"}, {"in", "g"},
    {"\xE2\x96\x81", "\xE2\x96\x81"}, {"e", "r"}, {">", "\xE2\x96\x81"}, {"a", "n"}, {"an", "d"},
};

/* The fixed vocabulary and merges into model (byte-level or SentencePiece-style). */
static void hf_fixed_model(cJSON *model, bool spm) {
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *merges = cJSON_AddArrayToObject(model, "merges");
    int id = 0;
    char name[16];
    if (spm) {
        const char *base[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81"};
        for (int i = 0; i < 4; i++) cJSON_AddNumberToObject(vocab, base[i], id++);
        for (int b = 0; b < 256; b++) {
            snprintf(name, sizeof name, "<0x%02X>", b);
            cJSON_AddNumberToObject(vocab, name, id++);
        }
        for (int c = 0x21; c < 0x7F; c++) {
            name[0] = (char)c;
            name[1] = '\0';
            cJSON_AddNumberToObject(vocab, name, id++);
        }
    } else {
        for (int b = 0; b < 256; b++) {
            hf_byte_spell((uint8_t)b, name);
            cJSON_AddNumberToObject(vocab, name, id++);
        }
    }
    size_t n = spm ? sizeof hf_spm_merges / sizeof *hf_spm_merges : sizeof hf_bl_merges / sizeof *hf_bl_merges;
    for (size_t i = 0; i < n; i++) {
        const char *const *m = spm ? hf_spm_merges[i] : hf_bl_merges[i];
        char joined[32];
        snprintf(joined, sizeof joined, "%s%s", m[0], m[1]);
        if (!cJSON_GetObjectItemCaseSensitive(vocab, joined)) cJSON_AddNumberToObject(vocab, joined, id++);
        cJSON_AddItemToArray(merges, cJSON_CreateStringArray(m, 2));
    }
}

/* The tokenizer.json for input object in. Returns owned text, or NULL. */
static char *hf_build(const cJSON *in) {
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(in, "model");
    bool spm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(opts, "byte_fallback"));
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    for (const cJSON *c = cJSON_IsObject(opts) ? opts->child : NULL; c; c = c->next)
        if (c->string && strcmp(c->string, "vocab") && strcmp(c->string, "merges") &&
            !cJSON_GetObjectItemCaseSensitive(model, c->string))
            cJSON_AddItemToObject(model, c->string, cJSON_Duplicate(c, true));
    if (!cJSON_GetObjectItemCaseSensitive(model, "type")) cJSON_AddStringToObject(model, "type", "BPE");
    if (spm && !cJSON_GetObjectItemCaseSensitive(model, "unk_token")) cJSON_AddStringToObject(model, "unk_token", "<unk>");
    hf_fixed_model(model, spm);
    static const char *const keys[] = {"normalizer", "pre_tokenizer", "post_processor", "added_tokens"};
    for (size_t k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, keys[k]);
        if (v) cJSON_AddItemToObject(root, keys[k], cJSON_Duplicate(v, true));
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("tok_hf");
    char path[FUZZ_PATH_MAX];
    fuzz_join(path, dir, "tokenizer.json");
    fuzz_part parts[8];
    int n = fuzz_split(data, size, parts, 8);
    cJSON *in = cJSON_ParseWithLength((const char *)parts[0].p, parts[0].n);
    char *text = cJSON_IsObject(in) ? hf_build(in) : NULL;
    cJSON_Delete(in);
    if (text) fuzz_write(path, text, strlen(text));
    else fuzz_write(path, parts[0].p, parts[0].n);
    free(text);

    ct_tokenizer *t = NULL;
    ct_error_clear();
    ct_status st = ct_tokenizer_load(&t, path);
    fuzz_check_error(st, "ct_tokenizer_load", path);
    if (st) return 0;
    /* the same file, the same identity */
    ct_tokenizer *again = NULL;
    if (ct_tokenizer_load(&again, path) == CT_OK && strcmp(ct_tokenizer_identity(t), ct_tokenizer_identity(again)))
        fuzz_fail("one file, two identities: %s and %s", ct_tokenizer_identity(t), ct_tokenizer_identity(again));
    ct_tokenizer_free(again);
    fuzz_tok_check(t, parts + 1, n - 1);
    ct_tokenizer_free(t);
    return 0;
}
