/*
 * The tokenizer oracle shared by fuzz_tok_gpt2.c and fuzz_tok_json.c: a
 * loaded tokenizer round-trips text. For every sample text (fixed ones and
 * pieces of the input): valid UTF-8 encodes, every id has bytes, and decode
 * gives the text back; invalid UTF-8 is refused without ids (and, GPT-2,
 * encodes with CT_TOK_LOSSY and decodes to the same bytes); GPT-2 with
 * CT_TOK_ALLOW_SPECIAL round-trips too. SentencePiece round-trips only the
 * texts its vocabulary can spell: the strict check is skipped for texts
 * holding U+2581 (its space mark) and for vocabularies in which some byte
 * falls back to unk_token, nor (Metaspace) for texts that start with a space,
 * whose first space its decoder drops as Hugging Face's does, nor for texts
 * holding an added token that is not special (the piece after it gets its own
 * "▁", as in Hugging Face: fuzz_tok_holds_added). A tokenizer.json
 * read by the generic pipeline round-trips strictly only when its pipeline
 * keeps the text (no normalizer, prefix space, Metaspace, removed split or
 * stripped added token: fuzz_tok_keeps_text); whatever it is, encoding with a
 * fresh state gives the ids a reused one (its word cache) gives. Not a
 * harness itself.
 */
#ifndef CT_FUZZ_TOK_H
#define CT_FUZZ_TOK_H

#include "fuzz.h"

#include "ctrain/data.h"
#include "data/tokenizer/tokenizer_impl.h"

#define FUZZ_TOK_TEXT_MAX 512 /* bytes of an input piece encoded (keeps runs fast) */

static const char *const fuzz_tok_samples[] = {
    "",
    "Hello world! It's 2024, isn't it?",
    "  leading spaces\tand\ttabs\n\nnew  lines   ",
    "na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x99\x82 "
    "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
    "<|endoftext|>text after<|endoftext|><s></s>",
    "int main(void) { return x->y[3] != 0 ? 1 : -1; } // c",
    "'s 've 're 'll 'd 'S 'M n't",
    "\xE2\x96\x81mark\xE2\x96\x81 and a\xE2\x96\x81" "b",
    "\x01\x7F \r\n\x0B\x0C",
};

/* Every byte value has a token of its own (no fallback to unk_token). */
static inline bool fuzz_tok_all_bytes(const ct_tokenizer *t) {
    for (int v = 0; v < 256; v++)
        if (t->byte_id[v] < 0 || (t->kind == CT_TOK_KIND_SPM_BPE && t->spm.unk >= 0 &&
                                  t->byte_id[v] == t->spm.unk))
            return false;
    return true;
}

static inline void fuzz_tok_show(char *buf, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
    }
    buf[o < cap ? o : cap - 1] = '\0';
}

/* Whether t's pipeline gives back the text it encodes: the fixed forms, or a
 * generic byte-level pipeline that changes no text. */
static inline bool fuzz_tok_keeps_text(const ct_tokenizer *t) {
    if (!t->hf) return true;
    if (!t->hf->byte_level || t->hf->n_norm) return false;
    for (int i = 0; i < t->hf->n_pre; i++) {
        const tok_pre_step *p = &t->hf->pre[i];
        if (p->kind == TOK_PRE_METASPACE || p->prefix_space || (p->kind == TOK_PRE_SPLIT && p->how == TOK_SPLIT_REMOVED))
            return false;
    }
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].lstrip || t->added[i].rstrip) return false;
    return true;
}

/* Encode text with flags, check the ids, decode, and when strict compare. */
static inline void fuzz_tok_one(const ct_tokenizer *t, ct_tok_state *state, const char *text,
                                size_t len, int flags, bool strict) {
    ct_tokens ids = {0};
    ct_error_clear();
    ct_status st = ct_tokenizer_encode(t, state, text, len, flags, &ids);
    bool valid = ct_utf8_valid_prefix(text, len) == len;
    char shown[200];
    if (st) {
        const char *e = ct_last_error();
        if (!e[0]) fuzz_fail("ct_tokenizer_encode failed (%s) with an empty error", ct_status_str(st));
        if (ids.n) fuzz_fail("a failed encode appended %zu ids", ids.n);
        if (st == CT_ERR_OOM) return;
        fuzz_tok_show(shown, sizeof shown, text, len);
        if (valid || (flags & CT_TOK_LOSSY))
            fuzz_fail("ct_tokenizer_encode refused %s text \"%s\" (flags %d): %s",
                      valid ? "valid" : "lossy", shown, flags, e);
        return;
    }
    if (!valid && !(flags & CT_TOK_LOSSY)) {
        fuzz_tok_show(shown, sizeof shown, text, len);
        fuzz_fail("ct_tokenizer_encode accepted invalid UTF-8 \"%s\" without CT_TOK_LOSSY", shown);
    }
    int vocab = ct_tokenizer_vocab_size(t);
    for (size_t i = 0; i < ids.n; i++) {
        size_t bl = 0;
        if (ids.ids[i] < 0 || ids.ids[i] >= vocab || !ct_tokenizer_token_bytes(t, ids.ids[i], &bl))
            fuzz_fail("encode gave id %d (vocabulary of %d) that has no bytes", (int)ids.ids[i], vocab);
    }
    /* a fresh state (an empty word cache) gives the same ids */
    ct_tokens fresh = {0};
    if (state && ct_tokenizer_encode(t, NULL, text, len, flags, &fresh) == CT_OK &&
        (fresh.n != ids.n || (ids.n && memcmp(fresh.ids, ids.ids, ids.n * sizeof *ids.ids)))) {
        fuzz_tok_show(shown, sizeof shown, text, len);
        fuzz_fail("encoding \"%s\" (flags %d) gave %zu ids with a reused state, %zu with a fresh one", shown, flags,
                  ids.n, fresh.n);
    }
    ct_tokens_free(&fresh);
    char *back = NULL;
    size_t blen = 0;
    ct_error_clear();
    st = ct_tokenizer_decode(t, ids.ids, ids.n, &back, &blen);
    if (st && st != CT_ERR_OOM) fuzz_fail("decode of encoded ids failed: %s", ct_last_error());
    if (!st && back[blen] != '\0') fuzz_fail("decode's text is not NUL-terminated");
    if (!st && strict && (blen != len || memcmp(back, text, len) != 0)) {
        char got[200];
        fuzz_tok_show(shown, sizeof shown, text, len);
        fuzz_tok_show(got, sizeof got, back, blen);
        fuzz_fail("decode(encode(x)) != x (%s tokenizer, flags %d, %zu ids):\n  x      = \"%s\"\n"
                  "  decode = \"%s\"",
                  t->kind == CT_TOK_KIND_GPT2_BPE ? "byte-level" : "SentencePiece", flags, ids.n, shown,
                  got);
    }
    free(back);
    ct_tokens_free(&ids);
}

/* Whether text holds an added token matched without CT_TOK_ALLOW_SPECIAL (one
 * not special). SentencePiece's normalizer (Prepend "▁") runs on each piece
 * between added tokens, as Hugging Face's does ("</s>x" gives "</s>", "▁x"),
 * so the piece after one comes back with a space before it. */
static inline bool fuzz_tok_holds_added(const ct_tokenizer *t, const char *text, size_t len) {
    for (size_t i = 0; i < t->n_added; i++) {
        size_t bl = 0;
        const char *b = t->added[i].special ? NULL : ct_tokenizer_token_bytes(t, t->added[i].id, &bl);
        for (size_t k = 0; b && bl && k + bl <= len; k++)
            if (!memcmp(text + k, b, bl)) return true;
    }
    return false;
}

static inline void fuzz_tok_text(const ct_tokenizer *t, ct_tok_state *state, const char *text,
                                 size_t len) {
    if (len > FUZZ_TOK_TEXT_MAX) len = FUZZ_TOK_TEXT_MAX;
    bool keeps = fuzz_tok_keeps_text(t);
    bool gpt2 = t->kind == CT_TOK_KIND_GPT2_BPE && keeps;
    bool has_mark = false;
    for (size_t i = 0; i + 2 < len && !has_mark; i++)
        has_mark = !memcmp(text + i, "\xE2\x96\x81", 3);
    bool strict = gpt2 || (!has_mark && fuzz_tok_all_bytes(t) && keeps);
    if (t->hf && !t->hf->byte_level) strict = false; /* its decoder is not its normalizer's inverse */
    /* Metaspace puts no "▁" before a text that starts with a space, but its decoder (as
     * Hugging Face's) drops the first one all the same */
    if (t->kind == CT_TOK_KIND_SPM_BPE && t->spm.prepend_unless_mark && len && text[0] == ' ') strict = false;
    if (t->kind == CT_TOK_KIND_SPM_BPE && fuzz_tok_holds_added(t, text, len)) strict = false;
    fuzz_tok_one(t, state, text, len, 0, strict);
    if (t->kind == CT_TOK_KIND_GPT2_BPE) {
        fuzz_tok_one(t, state, text, len, CT_TOK_LOSSY, gpt2);
        if (ct_utf8_valid_prefix(text, len) == len)
            fuzz_tok_one(t, state, text, len, CT_TOK_ALLOW_SPECIAL, gpt2);
    }
}

/* The oracle on a loaded tokenizer; extra[0..n_extra) are pieces of the input. */
static inline void fuzz_tok_check(const ct_tokenizer *t, const fuzz_part *extra, int n_extra) {
    int vocab = ct_tokenizer_vocab_size(t);
    if (vocab < 1) fuzz_fail("loaded tokenizer has vocabulary size %d", vocab);
    int32_t eot = ct_tokenizer_eot(t), bos = ct_tokenizer_bos(t);
    if (eot < -1 || eot >= vocab || bos < -1 || bos >= vocab)
        fuzz_fail("eot %d / bos %d outside the vocabulary of %d", (int)eot, (int)bos, vocab);
    const char *id = ct_tokenizer_identity(t);
    if (!id || (strncmp(id, "gpt2-bpe:", 9) && strncmp(id, "spm-bpe:", 8) && strncmp(id, "hf-bpe:", 7) &&
                strncmp(id, "hf-spm:", 7)))
        fuzz_fail("tokenizer identity '%s'", id ? id : "(null)");
    ct_tok_state *state = ct_tok_state_new(t);
    if (!state) return;
    for (size_t i = 0; i < sizeof fuzz_tok_samples / sizeof *fuzz_tok_samples; i++)
        fuzz_tok_text(t, state, fuzz_tok_samples[i], strlen(fuzz_tok_samples[i]));
    for (int i = 0; i < n_extra; i++) fuzz_tok_text(t, state, (const char *)extra[i].p, extra[i].n);
    /* decode refuses ids outside the vocabulary */
    int32_t bad[2] = {0, vocab};
    char *text = NULL;
    size_t len = 0;
    ct_error_clear();
    ct_status st = ct_tokenizer_decode(t, bad, 2, &text, &len);
    if (st == CT_OK) fuzz_fail("decode accepted id %d of a vocabulary of %d", vocab, vocab);
    free(text);
    ct_tok_state_free(state);
}

#endif
