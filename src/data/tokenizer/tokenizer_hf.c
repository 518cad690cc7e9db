/*
 * Reading a Hugging Face tokenizer.json generically (the files of Llama 3,
 * Qwen2.5/Qwen3, SmolLM2, Gemma 3 and their like): the normalizer (NFC, NFD,
 * NFKC, NFKD, Prepend, Replace of a string, Sequence), the pre_tokenizer
 * (Split by a regex or a string with any of the five behaviours, ByteLevel,
 * Metaspace, Digits, Sequence), the BPE model (byte-level, or
 * SentencePiece-style with byte_fallback; ignore_merges), the added tokens'
 * flags, the post_processor's BOS/EOS (TemplateProcessing) and
 * tokenizer_config.json's bos_token / eos_token, and the identity over all of
 * it. Encoding runs in tokenizer_pipe.c; the tables come from the builders of
 * tokenizer_load.c (byte-level) and tokenizer_spm.c (SentencePiece-style).
 * Leaves out (refused with CT_ERR_FORMAT naming the file and JSON key):
 * WordPiece, Unigram and WordLevel models, other normalizers (Lowercase,
 * Strip, BertNormalizer, Precompiled, Replace of a regex), other
 * pre-tokenizers (Whitespace, Punctuation, BertPreTokenizer, ...), BPE over
 * characters without byte_fallback, dropout, subword prefixes and suffixes,
 * added tokens with single_word, or normalized beside a normalizer.
 */
#include "data/tokenizer/tokenizer_impl.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#define HF_MARK "\xE2\x96\x81" /* U+2581, SentencePiece's space */
#define HF_NORMALIZERS "NFC, NFD, NFKC, NFKD, Prepend, Replace (of a String) and Sequence"
#define HF_PRETOKENIZERS "Split, ByteLevel, Metaspace, Digits and Sequence"
#define HF_MAX_STEPS 64

static const cJSON *hf_get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static bool hf_is(const cJSON *v, const char *s) { return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0; }

static const char *hf_show(char *buf, size_t cap, const cJSON *v) {
    if (cJSON_IsString(v)) return tok_load_quote(buf, cap, v->valuestring, strlen(v->valuestring));
    snprintf(buf, cap, "%s", !v ? "missing" : cJSON_IsNull(v) ? "null" : "not a string");
    return buf;
}

/* The settings as canonical bytes, hashed into the identity. */
typedef struct hf_sig {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} hf_sig;

static void sig_put(hf_sig *g, const void *data, size_t k) {
    if (g->oom) return;
    if (g->n + k > g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 1024;
        while (cap < g->n + k) cap *= 2;
        uint8_t *q = realloc(g->p, cap);
        if (!q) {
            g->oom = true;
            return;
        }
        g->p = q;
        g->cap = cap;
    }
    memcpy(g->p + g->n, data, k);
    g->n += k;
}

static void sig_int(hf_sig *g, int64_t v) {
    uint8_t le[8];
    for (int k = 0; k < 8; k++) le[k] = (uint8_t)((uint64_t)v >> (8 * k));
    sig_put(g, le, 8);
}

static void sig_str(hf_sig *g, const char *s, size_t n) {
    sig_int(g, (int64_t)n);
    sig_put(g, s, n);
}

/* An owned copy of a JSON string, or NULL (error set) on OOM. */
static char *hf_dup(const char *s, size_t *len) {
    *len = strlen(s);
    char *p = malloc(*len + 1);
    if (!p) CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
    else memcpy(p, s, *len + 1);
    return p;
}

/* ------------------------------------------------------- normalizer */

static ct_status hf_norm_step(tok_hf *hf, hf_sig *g, const char *path, const char *key, const cJSON *n) {
    const cJSON *type = hf_get(n, "type");
    char q[96];
    static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
    if (hf->n_norm == HF_MAX_STEPS) return CT_ERR(CT_ERR_FORMAT, "%s: %s: more than %d normalizers", path, key, HF_MAX_STEPS);
    tok_norm_step *st = &hf->norm[hf->n_norm];
    memset(st, 0, sizeof *st);
    for (int k = 0; k < 4; k++)
        if (hf_is(type, forms[k])) {
            st->kind = (tok_norm_kind)k;
            hf->n_norm++;
            sig_int(g, st->kind);
            return CT_OK;
        }
    if (hf_is(type, "Prepend")) {
        const cJSON *pre = hf_get(n, "prepend");
        if (!cJSON_IsString(pre))
            return CT_ERR(CT_ERR_FORMAT, "%s: %s.prepend is %s, expected a string", path, key, hf_show(q, sizeof q, pre));
        st->kind = TOK_NORM_PREPEND;
        if (!(st->s = hf_dup(pre->valuestring, &st->s_len))) return ct_last_status();
        hf->n_norm++;
        sig_int(g, st->kind);
        sig_str(g, st->s, st->s_len);
        return CT_OK;
    }
    if (hf_is(type, "Replace")) {
        const cJSON *pat = hf_get(n, "pattern"), *from = hf_get(pat, "String"), *to = hf_get(n, "content");
        if (!cJSON_IsString(from) || !from->valuestring[0] || !cJSON_IsString(to)) {
            ct_status e = CT_ERR(CT_ERR_FORMAT,
                                 "%s: %s: a Replace normalizer needs {\"pattern\": {\"String\": non-empty text}, "
                                 "\"content\": text}%s",
                                 path, key, hf_get(pat, "Regex") ? " (a Regex pattern is not supported)" : "");
            return e;
        }
        st->kind = TOK_NORM_REPLACE;
        if (!(st->s = hf_dup(from->valuestring, &st->s_len))) return ct_last_status();
        hf->n_norm++;
        if (!(st->to = hf_dup(to->valuestring, &st->to_len))) return ct_last_status();
        sig_int(g, st->kind);
        sig_str(g, st->s, st->s_len);
        sig_str(g, st->to, st->to_len);
        return CT_OK;
    }
    if (hf_is(type, "Sequence")) {
        const cJSON *list = hf_get(n, "normalizers");
        if (!cJSON_IsArray(list)) return CT_ERR(CT_ERR_FORMAT, "%s: %s.normalizers is not an array", path, key);
        int i = 0;
        for (const cJSON *c = list->child; c; c = c->next, i++) {
            char sub[200];
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", key, i);
            ct_status e = hf_norm_step(hf, g, path, sub, c);
            if (e) return e;
        }
        return CT_OK;
    }
    ct_status e = CT_ERR(CT_ERR_FORMAT, "%s: %s.type is %s; the normalizers supported are " HF_NORMALIZERS, path, key,
                         hf_show(q, sizeof q, type));
    ct_error_hint("ctrain reads BPE tokenizers (GPT-2, LLaMA, Llama 3, Qwen, SmolLM2, Gemma and their like); "
                  "a normalizer it does not know would change the text silently, so it is refused");
    return e;
}

/* ------------------------------------------------------- pre_tokenizer */

static ct_status hf_behavior(const char *path, const char *key, const cJSON *v, tok_split_how *how) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    for (int k = 0; k < TOK_SPLIT_COUNT; k++)
        if (cJSON_IsString(v) && !strcmp(v->valuestring, names[k])) {
            *how = (tok_split_how)k;
            return CT_OK;
        }
    char q[96];
    return CT_ERR(CT_ERR_FORMAT,
                  "%s: %s.behavior is %s, expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous",
                  path, key, hf_show(q, sizeof q, v));
}

static ct_status hf_pre_step(tok_hf *hf, hf_sig *g, const char *path, const char *key, const cJSON *p) {
    const cJSON *type = hf_get(p, "type");
    char q[96], where[320];
    if (hf_is(type, "Sequence")) {
        const cJSON *list = hf_get(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return CT_ERR(CT_ERR_FORMAT, "%s: %s.pretokenizers is not an array", path, key);
        int i = 0;
        for (const cJSON *c = list->child; c; c = c->next, i++) {
            char sub[200];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", key, i);
            ct_status e = hf_pre_step(hf, g, path, sub, c);
            if (e) return e;
        }
        return CT_OK;
    }
    if (hf->n_pre == HF_MAX_STEPS)
        return CT_ERR(CT_ERR_FORMAT, "%s: %s: more than %d pre-tokenizers", path, key, HF_MAX_STEPS);
    tok_pre_step *st = &hf->pre[hf->n_pre];
    memset(st, 0, sizeof *st);
    ct_status e = CT_OK;
    if (hf_is(type, "Split")) {
        const cJSON *pat = hf_get(p, "pattern"), *rx = hf_get(pat, "Regex"), *str = hf_get(pat, "String");
        const cJSON *inv = hf_get(p, "invert");
        st->kind = TOK_PRE_SPLIT;
        if ((e = hf_behavior(path, key, hf_get(p, "behavior"), &st->how))) return e;
        if (inv && !cJSON_IsBool(inv)) return CT_ERR(CT_ERR_FORMAT, "%s: %s.invert is not true or false", path, key);
        st->invert = cJSON_IsTrue(inv);
        hf->n_pre++;
        sig_int(g, 100 + st->kind);
        sig_int(g, st->how);
        sig_int(g, st->invert);
        if (cJSON_IsString(rx)) {
            snprintf(where, sizeof where, "%s: %s.pattern.Regex", path, key);
            if ((e = tok_regex_compile(&st->re, &st->jit, rx->valuestring, strlen(rx->valuestring), where))) return e;
            sig_str(g, "Regex", 5);
            sig_str(g, rx->valuestring, strlen(rx->valuestring));
        } else if (cJSON_IsString(str)) {
            if (!(st->s = hf_dup(str->valuestring, &st->s_len))) return ct_last_status();
            sig_str(g, "String", 6);
            sig_str(g, st->s, st->s_len);
        } else {
            return CT_ERR(CT_ERR_FORMAT, "%s: %s.pattern is not {\"Regex\": text} or {\"String\": text}", path, key);
        }
        return CT_OK;
    }
    if (hf_is(type, "ByteLevel")) {
        const cJSON *aps = hf_get(p, "add_prefix_space"), *ur = hf_get(p, "use_regex");
        if ((aps && !cJSON_IsBool(aps) && !cJSON_IsNull(aps)) || (ur && !cJSON_IsBool(ur) && !cJSON_IsNull(ur)))
            return CT_ERR(CT_ERR_FORMAT, "%s: %s.add_prefix_space / use_regex is not true or false", path, key);
        st->kind = TOK_PRE_BYTELEVEL;
        st->prefix_space = cJSON_IsTrue(aps);
        hf->n_pre++;
        hf->byte_level = true;
        if (!cJSON_IsFalse(ur)) { /* the default: GPT-2's pattern, Isolated */
            snprintf(where, sizeof where, "%s: %s (GPT-2's pattern)", path, key);
            if ((e = tok_regex_compile(&st->re, &st->jit, tok_gpt2_pattern, strlen(tok_gpt2_pattern), where))) return e;
        }
        sig_int(g, 100 + st->kind);
        sig_int(g, st->prefix_space);
        sig_int(g, st->re != NULL);
        return CT_OK;
    }
    if (hf_is(type, "Metaspace")) {
        const cJSON *rep = hf_get(p, "replacement"), *split = hf_get(p, "split");
        const cJSON *scheme = hf_get(p, "prepend_scheme"), *add = hf_get(p, "add_prefix_space");
        if (rep && !hf_is(rep, HF_MARK))
            return CT_ERR(CT_ERR_FORMAT, "%s: %s.replacement is %s; only \"" HF_MARK "\" is supported", path, key,
                          hf_show(q, sizeof q, rep));
        if (split && !cJSON_IsBool(split)) return CT_ERR(CT_ERR_FORMAT, "%s: %s.split is not true or false", path, key);
        st->kind = TOK_PRE_METASPACE;
        st->prepend = TOK_PREPEND_ALWAYS;
        if (scheme && !cJSON_IsNull(scheme)) {
            if (hf_is(scheme, "always")) st->prepend = TOK_PREPEND_ALWAYS;
            else if (hf_is(scheme, "first")) st->prepend = TOK_PREPEND_FIRST;
            else if (hf_is(scheme, "never")) st->prepend = TOK_PREPEND_NEVER;
            else
                return CT_ERR(CT_ERR_FORMAT, "%s: %s.prepend_scheme is %s, expected \"always\", \"first\" or \"never\"",
                              path, key, hf_show(q, sizeof q, scheme));
        } else if (add && !cJSON_IsNull(add)) {
            if (!cJSON_IsBool(add))
                return CT_ERR(CT_ERR_FORMAT, "%s: %s.add_prefix_space is not true or false", path, key);
            st->prepend = cJSON_IsTrue(add) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
        }
        st->split = !split || cJSON_IsTrue(split); /* older files have no "split": they always split */
        hf->n_pre++;
        sig_int(g, 100 + st->kind);
        sig_int(g, st->prepend);
        sig_int(g, st->split);
        return CT_OK;
    }
    if (hf_is(type, "Digits")) {
        const cJSON *ind = hf_get(p, "individual_digits");
        if (ind && !cJSON_IsBool(ind))
            return CT_ERR(CT_ERR_FORMAT, "%s: %s.individual_digits is not true or false", path, key);
        st->kind = TOK_PRE_DIGITS;
        st->individual = cJSON_IsTrue(ind);
        hf->n_pre++;
        sig_int(g, 100 + st->kind);
        sig_int(g, st->individual);
        return CT_OK;
    }
    e = CT_ERR(CT_ERR_FORMAT, "%s: %s.type is %s; the pre-tokenizers supported are " HF_PRETOKENIZERS, path, key,
               hf_show(q, sizeof q, type));
    ct_error_hint("a pre-tokenizer ctrain does not know would split the text otherwise than the model's, so it "
                  "is refused rather than approximated");
    return e;
}

/* ------------------------------------------------------- model, added tokens */

static ct_status hf_model(tok_hf *hf, hf_sig *g, const char *path, const cJSON *model) {
    const cJSON *prefix = hf_get(model, "continuing_subword_prefix"), *suffix = hf_get(model, "end_of_word_suffix");
    const cJSON *dropout = hf_get(model, "dropout"), *bf = hf_get(model, "byte_fallback");
    if ((cJSON_IsString(prefix) && prefix->valuestring[0]) || (cJSON_IsString(suffix) && suffix->valuestring[0]))
        return CT_ERR(CT_ERR_FORMAT, "%s: model.%s is set; only BPE without subword prefixes or suffixes is supported",
                      path, cJSON_IsString(prefix) && prefix->valuestring[0] ? "continuing_subword_prefix"
                                                                             : "end_of_word_suffix");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return CT_ERR(CT_ERR_FORMAT, "%s: model.dropout is %g; only deterministic BPE (null or 0) is supported", path,
                      dropout->valuedouble);
    hf->ignore_merges = cJSON_IsTrue(hf_get(model, "ignore_merges"));
    if (hf->byte_level && cJSON_IsTrue(bf))
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: pre_tokenizer.type is \"ByteLevel\" (or holds a ByteLevel step) and model.byte_fallback is "
                      "true; a byte-level vocabulary has a token for every byte, a byte-fallback one is not byte-level",
                      path);
    if (!hf->byte_level && !cJSON_IsTrue(bf)) {
        ct_status e = CT_ERR(CT_ERR_FORMAT,
                             "%s: the pre_tokenizer is not ByteLevel and model.byte_fallback is not true: BPE over "
                             "characters with an unknown token is not supported",
                             path);
        ct_error_hint("ctrain reads byte-level BPE (a ByteLevel pre-tokenizer) and SentencePiece-style BPE with "
                      "byte_fallback");
        return e;
    }
    sig_int(g, hf->byte_level);
    sig_int(g, hf->ignore_merges);
    return CT_OK;
}

/* Added tokens' flags beyond lstrip/rstrip (tokenizer_load.c reads those). */
static ct_status hf_added_flags(const tok_hf *hf, const char *path, const cJSON *root) {
    const cJSON *added = hf_get(root, "added_tokens");
    int i = 0;
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next, i++) {
        if (cJSON_IsTrue(hf_get(a, "single_word")))
            return CT_ERR(CT_ERR_FORMAT, "%s: added_tokens[%d].single_word is true; not supported", path, i);
        if (cJSON_IsTrue(hf_get(a, "normalized")) && hf->n_norm > 0)
            return CT_ERR(CT_ERR_FORMAT,
                          "%s: added_tokens[%d].normalized is true beside a normalizer; only tokens matched in the "
                          "text as written (normalized false) are supported",
                          path, i);
    }
    return CT_OK;
}

/* ------------------------------------------------------- BOS, EOS */

static int32_t hf_find(const load_builder *b, const char *s) {
    int32_t k = tok_load_find(b, s, strlen(s));
    return k < 0 ? -1 : b->e[k].id;
}

/* The id of a post_processor's SpecialToken named `name`. */
static ct_status hf_pp_token(const ct_tokenizer *t, const load_builder *b, const char *path, const char *key,
                             const cJSON *pp, const cJSON *name, int32_t *id) {
    char q[96];
    if (!cJSON_IsString(name)) return CT_ERR(CT_ERR_FORMAT, "%s: %s.id is not a string", path, key);
    const cJSON *id0 = cJSON_GetArrayItem(hf_get(hf_get(hf_get(pp, "special_tokens"), name->valuestring), "ids"), 0);
    *id = cJSON_IsNumber(id0) ? (id0->valuedouble >= 0 && id0->valuedouble < t->n_ids ? (int32_t)id0->valuedouble : -1)
                              : hf_find(b, name->valuestring);
    if (*id < 0 || *id >= t->n_ids || t->tok_len[*id] == TOK_NO_TOKEN)
        return CT_ERR(CT_ERR_FORMAT, "%s: %s.id %s is not a token", path, key, hf_show(q, sizeof q, name));
    return CT_OK;
}

/* TemplateProcessing's single template: [SpecialToken]? Sequence A [SpecialToken]?;
 * ByteLevel changes no ids; a Sequence of those. */
static ct_status hf_post(const ct_tokenizer *t, const load_builder *b, const char *path, const char *key,
                         const cJSON *pp, int32_t *bos, int32_t *eos) {
    if (!pp || cJSON_IsNull(pp)) return CT_OK;
    const cJSON *type = hf_get(pp, "type");
    char q[96], sub[200];
    if (hf_is(type, "ByteLevel")) return CT_OK;
    if (hf_is(type, "Sequence")) {
        const cJSON *list = hf_get(pp, "processors");
        if (!cJSON_IsArray(list)) return CT_ERR(CT_ERR_FORMAT, "%s: %s.processors is not an array", path, key);
        int i = 0;
        for (const cJSON *c = list->child; c; c = c->next, i++) {
            snprintf(sub, sizeof sub, "%s.processors[%d]", key, i);
            ct_status e = hf_post(t, b, path, sub, c, bos, eos);
            if (e) return e;
        }
        return CT_OK;
    }
    if (!hf_is(type, "TemplateProcessing"))
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: %s.type is %s; the post-processors supported are TemplateProcessing, ByteLevel and "
                      "Sequence",
                      path, key, hf_show(q, sizeof q, type));
    const cJSON *single = hf_get(pp, "single");
    if (!cJSON_IsArray(single)) return CT_ERR(CT_ERR_FORMAT, "%s: %s.single is not an array", path, key);
    bool seen_a = false;
    int i = 0;
    for (const cJSON *c = single->child; c; c = c->next, i++) {
        const cJSON *sp = hf_get(c, "SpecialToken"), *seq = hf_get(c, "Sequence");
        snprintf(sub, sizeof sub, "%s.single[%d].SpecialToken", key, i);
        if (seq) {
            if (seen_a) return CT_ERR(CT_ERR_FORMAT, "%s: %s.single names the sequence twice", path, key);
            seen_a = true;
        } else if (sp) {
            int32_t id = -1;
            ct_status e = hf_pp_token(t, b, path, sub, pp, hf_get(sp, "id"), &id);
            if (e) return e;
            if (!seen_a && *bos < 0) *bos = id;
            if (seen_a) *eos = id;
        } else {
            return CT_ERR(CT_ERR_FORMAT, "%s: %s.single[%d] is neither a SpecialToken nor a Sequence", path, key, i);
        }
    }
    return CT_OK;
}

/* bos_token / eos_token of tokenizer_config.json beside path, when there. */
static ct_status hf_config(const load_builder *b, const char *path, int32_t *bos, int32_t *eos) {
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    char *cfg_path = malloc(dlen + 32);
    if (!cfg_path) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
    memcpy(cfg_path, path, dlen);
    strcpy(cfg_path + dlen, "tokenizer_config.json");
    struct stat sb;
    ct_status st = CT_OK;
    if (stat(cfg_path, &sb) == 0) {
        cJSON *cfg = NULL;
        st = ct_json_read_object(cfg_path, &cfg);
        const char *keys[2] = {"bos_token", "eos_token"};
        int32_t *out[2] = {bos, eos};
        for (int k = 0; k < 2 && !st; k++) {
            const cJSON *v = hf_get(cfg, keys[k]);
            if (!v || cJSON_IsNull(v)) continue;
            if (cJSON_IsObject(v)) v = hf_get(v, "content");
            char q[96];
            if (!cJSON_IsString(v))
                st = CT_ERR(CT_ERR_FORMAT, "%s: %s is not a string or {\"content\": string}", cfg_path, keys[k]);
            else if ((*out[k] = hf_find(b, v->valuestring)) < 0)
                st = CT_ERR(CT_ERR_FORMAT, "%s: %s %s is not a token of %s", cfg_path, keys[k], hf_show(q, sizeof q, v),
                            b->vocab_file);
        }
        cJSON_Delete(cfg);
    }
    free(cfg_path);
    return st;
}

/* ------------------------------------------------------- lookups */

/* spelling -> id over every entry, for ignore_merges (byte-level: the token's
 * bytes, which is what a piece holds; else the spelling, "▁" and all). */
static ct_status hf_vocab_map(ct_tokenizer *t, const load_builder *b) {
    tok_hf *hf = t->hf;
    size_t slots = 16, total = 0;
    while (slots < 2 * b->n_e) slots *= 2;
    for (size_t k = 0; k < b->n_e; k++) total += hf->byte_level ? t->tok_len[b->e[k].id] : b->e[k].len;
    hf->voc_slot = malloc(slots * sizeof *hf->voc_slot);
    hf->voc_keys = malloc(total + 1);
    hf->voc_off = malloc((size_t)t->n_ids * sizeof *hf->voc_off);
    hf->voc_len = malloc((size_t)t->n_ids * sizeof *hf->voc_len);
    if (!hf->voc_slot || !hf->voc_keys || !hf->voc_off || !hf->voc_len)
        return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for the vocabulary map");
    memset(hf->voc_slot, 0xFF, slots * sizeof *hf->voc_slot);
    hf->voc_mask = slots - 1;
    size_t off = 0;
    for (size_t k = 0; k < b->n_e; k++) {
        int32_t id = b->e[k].id;
        const char *key = hf->byte_level ? t->tok_bytes + t->tok_off[id] : b->e[k].s;
        uint32_t len = hf->byte_level ? t->tok_len[id] : b->e[k].len;
        memcpy(hf->voc_keys + off, key, len);
        hf->voc_off[id] = (uint32_t)off;
        hf->voc_len[id] = len;
        off += len;
        size_t i = (size_t)XXH3_64bits(key, len) & hf->voc_mask;
        while (hf->voc_slot[i] >= 0) i = (i + 1) & hf->voc_mask;
        hf->voc_slot[i] = id;
    }
    return CT_OK;
}

static int hf_cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* SentencePiece-style: the characters some token holds just before a "▁";
 * a piece may start at any other "▁" (no merge can join across it). */
static ct_status hf_glue(tok_hf *hf, const load_builder *b) {
    size_t cap = 16;
    hf->glue = malloc(cap * sizeof *hf->glue);
    if (!hf->glue) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
    for (size_t k = 0; k < b->n_e; k++) {
        const uint8_t *s = (const uint8_t *)b->e[k].s;
        size_t len = b->e[k].len, prev = 0, i = 0;
        bool has_prev = false;
        while (i < len) {
            size_t n = tok_utf8_seq(s + i, len - i);
            if (!n) n = 1;
            if (has_prev && n == 3 && !memcmp(s + i, HF_MARK, 3)) {
                size_t pn = i - prev;
                uint32_t cp = pn == 1 ? s[prev] : s[prev] & (0x7Fu >> pn);
                for (size_t j = 1; j < pn; j++) cp = cp << 6 | (s[prev + j] & 0x3Fu);
                bool known = false;
                for (size_t j = 0; j < hf->n_glue && !known; j++) known = hf->glue[j] == cp;
                if (!known) {
                    if (hf->n_glue == cap) {
                        uint32_t *q = realloc(hf->glue, 2 * cap * sizeof *q);
                        if (!q) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
                        hf->glue = q;
                        cap *= 2;
                    }
                    hf->glue[hf->n_glue++] = cp;
                }
            }
            has_prev = true;
            prev = i;
            i += n;
        }
    }
    qsort(hf->glue, hf->n_glue, sizeof *hf->glue, hf_cmp_u32);
    return CT_OK;
}

/* ------------------------------------------------------- which reader */

bool tok_hf_is_gpt2_form(const cJSON *root) {
    const cJSON *model = hf_get(root, "model");
    const cJSON *norm = hf_get(root, "normalizer");
    const cJSON *pt = hf_get(root, "pre_tokenizer");
    const cJSON *pp = hf_get(root, "post_processor");
    const cJSON *prefix = hf_get(model, "continuing_subword_prefix");
    const cJSON *suffix = hf_get(model, "end_of_word_suffix");
    if (norm && !cJSON_IsNull(norm)) return false;
    if (cJSON_IsTrue(hf_get(model, "ignore_merges")) ||
        cJSON_IsTrue(hf_get(model, "byte_fallback")))
        return false;
    if ((cJSON_IsString(prefix) && prefix->valuestring[0]) || (cJSON_IsString(suffix) && suffix->valuestring[0]))
        return false;
    if (pp && !cJSON_IsNull(pp) && !hf_is(hf_get(pp, "type"), "ByteLevel"))
        return false; /* a TemplateProcessing's BOS is the generic pipeline's */
    /* GPT-2's pre-tokenizer: ByteLevel (alone or as the only step of a
     * Sequence) without add_prefix_space, with its regex */
    if (hf_is(hf_get(pt, "type"), "Sequence")) {
        const cJSON *steps = hf_get(pt, "pretokenizers");
        if (cJSON_GetArraySize(steps) != 1) return false;
        pt = cJSON_GetArrayItem(steps, 0);
    }
    return hf_is(hf_get(pt, "type"), "ByteLevel") &&
           !cJSON_IsTrue(hf_get(pt, "add_prefix_space")) &&
           !cJSON_IsFalse(hf_get(pt, "use_regex"));
}

/* ------------------------------------------------------- building */

static uint32_t hf_ovec(const pcre2_code *re) {
    uint32_t n = 0;
    if (!re) return 0;
    pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &n);
    return n + 1;
}

ct_status tok_hf_build(ct_tokenizer *t, load_builder *b, const cJSON *root, const char *path) {
    hf_sig g = {0};
    tok_hf *hf = calloc(1, sizeof *hf);
    if (!hf) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
    t->hf = hf;
    hf->norm = calloc(HF_MAX_STEPS, sizeof *hf->norm);
    hf->pre = calloc(HF_MAX_STEPS, sizeof *hf->pre);
    if (!hf->norm || !hf->pre) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
    static const char tag[] = "tokenizer.json pipeline v1";
    sig_put(&g, tag, sizeof tag);
    const cJSON *model = hf_get(root, "model"), *norm = hf_get(root, "normalizer"), *pt = hf_get(root, "pre_tokenizer");
    ct_status st = CT_OK;
    if (norm && !cJSON_IsNull(norm)) st = hf_norm_step(hf, &g, path, "normalizer", norm);
    sig_int(&g, -1);
    if (!st && pt && !cJSON_IsNull(pt)) st = hf_pre_step(hf, &g, path, "pre_tokenizer", pt);
    sig_int(&g, -1);
    if (!st) st = hf_model(hf, &g, path, model);
    if (!st) st = hf_added_flags(hf, path, root);
    if (st) goto done;
    for (int i = 0; i < hf->n_pre; i++)
        if (hf_ovec(hf->pre[i].re) > hf->ovec) hf->ovec = hf_ovec(hf->pre[i].re);
    /* the tables: GPT-2's byte alphabet, or SentencePiece-style tokens with byte fallback */
    if (hf->byte_level) {
        t->kind = CT_TOK_KIND_GPT2_BPE;
        st = tok_load_byte_tables(t, b);
        if (!st) st = tok_load_merge_table(t, b, false);
    } else {
        t->kind = CT_TOK_KIND_SPM_BPE;
        st = tok_spm_tables(t, b, model);
        if (!st) st = hf_glue(hf, b);
        /* decoding drops the "▁" encoding put before a text */
        t->spm.prepend = TOK_PREPEND_NEVER;
        for (int i = 0; i < hf->n_norm; i++)
            if (hf->norm[i].kind == TOK_NORM_PREPEND && !strcmp(hf->norm[i].s, HF_MARK))
                t->spm.prepend = TOK_PREPEND_ALWAYS;
        for (int i = 0; i < hf->n_pre; i++)
            if (hf->pre[i].kind == TOK_PRE_METASPACE && t->spm.prepend == TOK_PREPEND_NEVER)
                t->spm.prepend = hf->pre[i].prepend;
    }
    if (!st && hf->ignore_merges) st = hf_vocab_map(t, b);
    if (st) goto done;
    /* BOS, EOS, and the token that starts each document */
    int32_t pp_bos = -1, pp_eos = -1, cfg_bos = -1, cfg_eos = -1;
    if ((st = hf_post(t, b, path, "post_processor", hf_get(root, "post_processor"), &pp_bos, &pp_eos))) goto done;
    if ((st = hf_config(b, path, &cfg_bos, &cfg_eos))) goto done;
    int32_t eot_text = hf_find(b, "<|endoftext|>");
    t->adds_bos = pp_bos >= 0;
    t->bos = pp_bos >= 0 ? pp_bos : eot_text >= 0 ? eot_text : cfg_eos >= 0 ? cfg_eos : pp_eos;
    t->eot = cfg_eos >= 0 ? cfg_eos : pp_eos >= 0 ? pp_eos : eot_text >= 0 ? eot_text : hf_find(b, "</s>");
    int64_t ids[5] = {t->bos, t->eot, t->adds_bos, cfg_bos, t->spm.unk};
    for (int k = 0; k < 5; k++) sig_int(&g, ids[k]);
    for (size_t i = 0; i < t->n_added; i++) {
        sig_int(&g, t->added[i].id);
        sig_int(&g, t->added[i].special | t->added[i].lstrip << 1 | t->added[i].rstrip << 2);
    }
    if (!hf->byte_level) sig_put(&g, t->spm.flags, (size_t)t->n_ids);
    if (g.oom) {
        st = CT_ERR(CT_ERR_OOM, "tokenizer: out of memory hashing the identity");
        goto done;
    }
    st = tok_load_identity(t, b, hf->byte_level ? "hf-bpe" : "hf-spm", g.p, g.n);
done:
    free(g.p);
    return st;
}

void tok_hf_free(tok_hf *hf) {
    if (!hf) return;
    for (int i = 0; i < hf->n_norm; i++) {
        free(hf->norm[i].s);
        free(hf->norm[i].to);
    }
    for (int i = 0; i < hf->n_pre; i++) {
        pcre2_code_free(hf->pre[i].re);
        free(hf->pre[i].s);
    }
    free(hf->norm);
    free(hf->pre);
    free(hf->voc_slot);
    free(hf->voc_keys);
    free(hf->voc_off);
    free(hf->voc_len);
    free(hf->glue);
    free(hf);
}
