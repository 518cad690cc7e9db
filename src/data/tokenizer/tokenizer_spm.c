/*
 * SentencePiece-style BPE with byte fallback, the tokenizer LLaMA-family
 * models ship as a Hugging Face tokenizer.json: checking the file's settings
 * (normalizer, Metaspace pre-tokenizer, model options), building the tables
 * (decoded token bytes, one-character tokens by code point, <0xXX> byte
 * tokens, merge ranks, BOS/EOS), encoding a text segment and decoding ids.
 * Encoding is token-for-token llama-tokenizer-js's and Hugging Face's: spaces
 * become "▁", a "▁" is put in front, each character maps to its token or to
 * the byte tokens of its UTF-8, then merges run by rank (of equal ranks the
 * leftmost first) over a linked list with a heap.
 * Leaves out: Unigram models, regex normalizers, NFKC and the other
 * normalizers (refused), sampling-based BPE dropout (refused).
 */
#include "data/tokenizer/tokenizer_impl.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SPM_MARK "\xE2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's space */
#define SPM_MARK_CP 0x2581u

static const cJSON *spm_get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static bool spm_is(const cJSON *v, const char *s) { return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0; }

/* A JSON value for a message: a quoted string, or its kind. */
static const char *spm_show(char *buf, size_t cap, const cJSON *v) {
    if (cJSON_IsString(v)) return tok_load_quote(buf, cap, v->valuestring, strlen(v->valuestring));
    snprintf(buf, cap, "%s", !v ? "missing" : cJSON_IsNull(v) ? "null" : "not a string");
    return buf;
}

bool tok_spm_detect(const cJSON *root) { return cJSON_IsTrue(spm_get(spm_get(root, "model"), "byte_fallback")); }

static ct_status spm_normalizers(tok_spm *spm, const char *path, const cJSON *norm);
static ct_status spm_pretokenizer(tok_spm *spm, const char *path, const cJSON *pt);
static ct_status spm_model_options(const char *path, const cJSON *model);

bool tok_spm_is_form(const cJSON *root, const char *path) {
    if (!tok_spm_detect(root)) return false;
    tok_spm spm = {.prepend = TOK_PREPEND_NEVER};
    ct_status st = spm_model_options(path, spm_get(root, "model"));
    if (!st) st = spm_normalizers(&spm, path, spm_get(root, "normalizer"));
    if (!st) st = spm_pretokenizer(&spm, path, spm_get(root, "pre_tokenizer"));
    if (st) ct_error_clear(); /* the generic pipeline says what it makes of the file */
    return st == CT_OK;
}

/* ------------------------------------------------------- settings */

/* One normalizer (key names it in messages). */
static ct_status spm_normalizer(tok_spm *spm, const char *path, const char *key, const cJSON *n) {
    const cJSON *type = spm_get(n, "type");
    char q[96];
    if (spm_is(type, "Prepend")) {
        if (!spm_is(spm_get(n, "prepend"), SPM_MARK))
            return CT_ERR(CT_ERR_FORMAT, "%s: %s.prepend is %s; only SentencePiece's \"" SPM_MARK "\" is supported",
                          path, key, spm_show(q, sizeof q, spm_get(n, "prepend")));
        spm->prepend = TOK_PREPEND_ALWAYS;
        return CT_OK;
    }
    if (spm_is(type, "Replace")) {
        if (!spm_is(spm_get(spm_get(n, "pattern"), "String"), " ") || !spm_is(spm_get(n, "content"), SPM_MARK))
            return CT_ERR(CT_ERR_FORMAT,
                          "%s: %s is not Replace {\"pattern\": {\"String\": \" \"}, \"content\": \"" SPM_MARK
                          "\"}, the only replacement supported",
                          path, key);
        spm->replace_space = true;
        return CT_OK;
    }
    ct_status st = CT_ERR(CT_ERR_FORMAT,
                          "%s: %s.type is %s; a SentencePiece-style tokenizer supports the normalizers Prepend \"" SPM_MARK
                          "\" and Replace \" \" -> \"" SPM_MARK "\" (alone or in a Sequence)",
                          path, key, spm_show(q, sizeof q, type));
    ct_error_hint("ctrain supports GPT-2-style byte-level BPE and SentencePiece-style BPE with byte fallback "
                  "(LLaMA's tokenizer.json)");
    return st;
}

static ct_status spm_normalizers(tok_spm *spm, const char *path, const cJSON *norm) {
    if (!norm || cJSON_IsNull(norm)) return CT_OK;
    if (!spm_is(spm_get(norm, "type"), "Sequence")) return spm_normalizer(spm, path, "normalizer", norm);
    const cJSON *list = spm_get(norm, "normalizers");
    if (!cJSON_IsArray(list)) return CT_ERR(CT_ERR_FORMAT, "%s: normalizer.normalizers is not an array", path);
    int i = 0;
    for (const cJSON *n = list->child; n; n = n->next, i++) {
        char key[64];
        snprintf(key, sizeof key, "normalizer.normalizers[%d]", i);
        ct_status st = spm_normalizer(spm, path, key, n);
        if (st) return st;
    }
    return CT_OK;
}

/* The pre-tokenizer: none, or Metaspace (alone or the only step of a Sequence). */
static ct_status spm_pretokenizer(tok_spm *spm, const char *path, const cJSON *pt) {
    if (!pt || cJSON_IsNull(pt)) return CT_OK;
    const char *key = "pre_tokenizer";
    if (spm_is(spm_get(pt, "type"), "Sequence") && cJSON_GetArraySize(spm_get(pt, "pretokenizers")) == 1) {
        pt = cJSON_GetArrayItem(spm_get(pt, "pretokenizers"), 0);
        key = "pre_tokenizer.pretokenizers[0]";
    }
    char q[96];
    if (!spm_is(spm_get(pt, "type"), "Metaspace")) {
        ct_status st = CT_ERR(CT_ERR_FORMAT,
                              "%s: %s.type is %s; a SentencePiece-style tokenizer (model.byte_fallback true) "
                              "supports no pre_tokenizer or Metaspace",
                              path, key, spm_show(q, sizeof q, spm_get(pt, "type")));
        return st;
    }
    const cJSON *rep = spm_get(pt, "replacement"), *split = spm_get(pt, "split");
    const cJSON *scheme = spm_get(pt, "prepend_scheme"), *add = spm_get(pt, "add_prefix_space");
    if (rep && !spm_is(rep, SPM_MARK))
        return CT_ERR(CT_ERR_FORMAT, "%s: %s.replacement is %s; only \"" SPM_MARK "\" is supported", path, key,
                      spm_show(q, sizeof q, rep));
    if (split && !cJSON_IsBool(split))
        return CT_ERR(CT_ERR_FORMAT, "%s: %s.split is not true or false", path, key);
    tok_prepend p = TOK_PREPEND_ALWAYS;
    if (scheme && !cJSON_IsNull(scheme)) {
        if (spm_is(scheme, "always")) p = TOK_PREPEND_ALWAYS;
        else if (spm_is(scheme, "first")) p = TOK_PREPEND_FIRST;
        else if (spm_is(scheme, "never")) p = TOK_PREPEND_NEVER;
        else
            return CT_ERR(CT_ERR_FORMAT, "%s: %s.prepend_scheme is %s, expected \"always\", \"first\" or \"never\"",
                          path, key, spm_show(q, sizeof q, scheme));
    } else if (add && !cJSON_IsNull(add)) {
        if (!cJSON_IsBool(add)) return CT_ERR(CT_ERR_FORMAT, "%s: %s.add_prefix_space is not true or false", path, key);
        p = cJSON_IsTrue(add) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    }
    spm->replace_space = true;
    spm->split_all = !split || cJSON_IsTrue(split); /* older files have no "split": they always split */
    if (spm->prepend == TOK_PREPEND_NEVER) {
        /* a normalizer's Prepend comes first: the text then starts with "▁" and Metaspace adds none */
        spm->prepend = p;
        spm->prepend_unless_mark = true;
    }
    return CT_OK;
}

/* model options other than GPT-2-style BPE's must be off */
static ct_status spm_model_options(const char *path, const cJSON *model) {
    const cJSON *prefix = spm_get(model, "continuing_subword_prefix"), *suffix = spm_get(model, "end_of_word_suffix");
    const cJSON *dropout = spm_get(model, "dropout");
    if (cJSON_IsTrue(spm_get(model, "ignore_merges")))
        return CT_ERR(CT_ERR_FORMAT, "%s: model.ignore_merges is true; SentencePiece-style BPE merges every piece", path);
    if ((cJSON_IsString(prefix) && prefix->valuestring[0]) || (cJSON_IsString(suffix) && suffix->valuestring[0]))
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: model.continuing_subword_prefix or model.end_of_word_suffix is set; SentencePiece-style "
                      "BPE has neither",
                      path);
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return CT_ERR(CT_ERR_FORMAT, "%s: model.dropout is %g; only deterministic BPE (null or 0) is supported", path,
                      dropout->valuedouble);
    return CT_OK;
}

/* ------------------------------------------------------- tables */

static size_t spm_cp_slot(uint32_t cp, size_t mask) { return (size_t)(cp * 0x9E3779B1u) & mask; }

static int32_t spm_char_id(const tok_spm *spm, uint32_t cp) {
    if (cp < 128) return spm->ascii_id[cp];
    for (size_t i = spm_cp_slot(cp, spm->cp_mask);; i = (i + 1) & spm->cp_mask) {
        if (spm->cp_key[i] == cp) return spm->cp_id[i];
        if (spm->cp_key[i] == 0) return -1;
    }
}

/* The code point of the valid UTF-8 sequence s[0..k). */
static uint32_t spm_cp(const uint8_t *s, size_t k) {
    if (k == 1) return s[0];
    uint32_t cp = s[0] & (0x7Fu >> k);
    for (size_t i = 1; i < k; i++) cp = cp << 6 | (s[i] & 0x3Fu);
    return cp;
}

/* The byte of a "<0xHH>" spelling, or -1. */
static int spm_byte_token(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Token bytes (decoded), flags, the character and byte maps, the special list. */
static ct_status spm_tokens(ct_tokenizer *t, const load_builder *b) {
    tok_spm *spm = &t->spm;
    int32_t max_id = -1;
    size_t total = 0, n_special = 0;
    for (size_t k = 0; k < b->n_e; k++) {
        if (b->e[k].id > max_id) max_id = b->e[k].id;
        total += b->e[k].len;
        n_special += b->e[k].special;
    }
    if (max_id < 0) return CT_ERR(CT_ERR_FORMAT, "%s: model.vocab is empty", b->vocab_file);
    t->n_ids = max_id + 1;
    size_t slots = 16;
    while (slots < 2 * b->n_e) slots *= 2;
    t->tok_off = malloc((size_t)t->n_ids * sizeof *t->tok_off);
    t->tok_len = malloc((size_t)t->n_ids * sizeof *t->tok_len);
    t->tok_bytes = malloc(total + 1);
    t->special = malloc((n_special + 1) * sizeof *t->special);
    spm->flags = calloc((size_t)t->n_ids, 1);
    spm->cp_key = calloc(slots, sizeof *spm->cp_key);
    spm->cp_id = malloc(slots * sizeof *spm->cp_id);
    if (!t->tok_off || !t->tok_len || !t->tok_bytes || !t->special || !spm->flags || !spm->cp_key || !spm->cp_id)
        return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for %d tokens", (int)t->n_ids);
    spm->cp_mask = slots - 1;
    for (int32_t i = 0; i < t->n_ids; i++) t->tok_len[i] = TOK_NO_TOKEN;
    for (int i = 0; i < 128; i++) spm->ascii_id[i] = -1;
    for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
    size_t off = 0;
    for (size_t k = 0; k < b->n_e; k++) {
        const load_entry *e = &b->e[k];
        const uint8_t *u = (const uint8_t *)e->s;
        if (t->tok_len[e->id] != TOK_NO_TOKEN) {
            char q[96];
            return CT_ERR(CT_ERR_FORMAT, "%s: id %d is given to two tokens (one is %s)", b->vocab_file, (int)e->id,
                          tok_load_quote(q, sizeof q, e->s, e->len));
        }
        t->tok_off[e->id] = (uint32_t)off;
        int byte = e->raw ? -1 : spm_byte_token(e->s, e->len);
        if (e->raw && e->special) {
            memcpy(t->tok_bytes + off, e->s, e->len);
            off += e->len;
            spm->flags[e->id] |= TOK_SPM_SPECIAL;
            t->special[t->n_special++] = e->id;
        } else if (byte >= 0) {
            t->tok_bytes[off++] = (char)byte;
            spm->flags[e->id] |= TOK_SPM_BYTE;
            if (t->byte_id[byte] < 0) t->byte_id[byte] = e->id;
        } else {
            /* a token of the vocabulary, or an added one that is not special (Gemma's
             * "\n\n", "▁▁"): "▁" decodes as a space, as the decoder's Replace has it */
            if (e->len >= 3 && memcmp(e->s, SPM_MARK, 3) == 0 && !e->raw) spm->flags[e->id] |= TOK_SPM_LEAD_MARK;
            for (size_t i = 0; i < e->len;) {
                if (i + 3 <= e->len && memcmp(e->s + i, SPM_MARK, 3) == 0) {
                    t->tok_bytes[off++] = ' ';
                    i += 3;
                } else {
                    t->tok_bytes[off++] = e->s[i++];
                }
            }
            size_t n = e->len ? tok_utf8_seq(u, e->len) : 0;
            if (n && n == e->len && (!e->raw || e->in_model)) { /* a one-character token */
                uint32_t cp = spm_cp(u, n);
                if (cp < 128) {
                    spm->ascii_id[cp] = e->id;
                } else {
                    size_t i = spm_cp_slot(cp, spm->cp_mask);
                    while (spm->cp_key[i]) i = (i + 1) & spm->cp_mask;
                    spm->cp_key[i] = cp;
                    spm->cp_id[i] = e->id;
                }
            }
        }
        t->tok_len[e->id] = (uint32_t)(off - t->tok_off[e->id]);
    }
    ct_status sp = tok_load_specials(t, b);
    if (sp) return sp;
    /* pieces may start at a "▁" after another character when no token holds that */
    spm->split_safe = true;
    for (size_t k = 0; k < b->n_e && spm->split_safe; k++) {
        const load_entry *e = &b->e[k];
        for (size_t i = 1; i + 3 <= e->len; i++)
            if (memcmp(e->s + i, SPM_MARK, 3) == 0 && (i < 3 || memcmp(e->s + i - 3, SPM_MARK, 3) != 0))
                spm->split_safe = false;
    }
    return CT_OK;
}

/* Id of the token spelled s, or -1. */
static int32_t spm_find(const load_builder *b, const char *s) {
    int32_t k = tok_load_find(b, s, strlen(s));
    return k < 0 ? -1 : b->e[k].id;
}

/* unk_token, and the byte tokens byte fallback needs. */
static ct_status spm_bytes(ct_tokenizer *t, const load_builder *b, const cJSON *model) {
    const cJSON *unk = spm_get(model, "unk_token");
    char q[96];
    t->spm.unk = -1;
    if (cJSON_IsString(unk) && (t->spm.unk = spm_find(b, unk->valuestring)) < 0)
        return CT_ERR(CT_ERR_FORMAT, "%s: model.unk_token %s is not a token of model.vocab", b->vocab_file,
                      spm_show(q, sizeof q, unk));
    for (int v = 0; v < 256; v++) {
        if (t->byte_id[v] >= 0) continue;
        if (t->spm.unk < 0)
            return CT_ERR(CT_ERR_FORMAT,
                          "%s: model.byte_fallback is true but model.vocab has no byte token <0x%02X> and there is no "
                          "model.unk_token",
                          b->vocab_file, v);
        t->byte_id[v] = t->spm.unk; /* as Hugging Face does for a missing byte token */
    }
    return CT_OK;
}

static ct_status spm_merges(ct_tokenizer *t, const load_builder *b) {
    ct_status st = tok_pairs_init(&t->pairs, b->n_m);
    if (st) return st;
    char *joined = NULL;
    size_t cap = 0;
    for (size_t r = 0; r < b->n_m; r++) {
        const load_merge *m = &b->m[r];
        int32_t ka = tok_load_find(b, m->a, m->alen), kb = tok_load_find(b, m->b, m->blen);
        char q[96];
        if (ka < 0 || kb < 0) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: model.merges[%" PRId64 "]: merge symbol %s is not a token of model.vocab",
                        b->merges_file, m->where,
                        ka < 0 ? tok_load_quote(q, sizeof q, m->a, m->alen) : tok_load_quote(q, sizeof q, m->b, m->blen));
            break;
        }
        size_t need = (size_t)m->alen + m->blen;
        if (need > cap) {
            char *p = realloc(joined, 2 * need);
            if (!p) {
                st = CT_ERR(CT_ERR_OOM, "tokenizer: out of memory joining merges");
                break;
            }
            joined = p;
            cap = 2 * need;
        }
        memcpy(joined, m->a, m->alen);
        memcpy(joined + m->alen, m->b, m->blen);
        int32_t kab = tok_load_find(b, joined, need);
        if (kab < 0) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: model.merges[%" PRId64 "]: merged symbol %s is not a token of model.vocab",
                        b->merges_file, m->where, tok_load_quote(q, sizeof q, joined, need));
            break;
        }
        /* a pair listed twice is refused (Hugging Face would keep its later rank) */
        const tok_pair *dup = tok_pair_find(&t->pairs, b->e[ka].id, b->e[kb].id);
        if (dup) {
            st = tok_load_dup_merge(b, m, &b->m[dup->rank]);
            break;
        }
        tok_pairs_set(&t->pairs, b->e[ka].id, b->e[kb].id, (int32_t)r, b->e[kab].id, false);
        b->m[r].ida = b->e[ka].id;
        b->m[r].idb = b->e[kb].id;
    }
    free(joined);
    t->n_merges = (int64_t)b->n_m;
    return st;
}

/* A bos_token / eos_token value of tokenizer_config.json: "text" or {"content": "text"}. */
static ct_status spm_config_token(const load_builder *b, const char *file, const cJSON *cfg, const char *key,
                                  int32_t *id) {
    const cJSON *v = spm_get(cfg, key);
    if (!v || cJSON_IsNull(v)) return CT_OK;
    if (cJSON_IsObject(v)) v = spm_get(v, "content");
    char q[96];
    if (!cJSON_IsString(v))
        return CT_ERR(CT_ERR_FORMAT, "%s: %s is not a string or {\"content\": string}", file, key);
    if ((*id = spm_find(b, v->valuestring)) < 0)
        return CT_ERR(CT_ERR_FORMAT, "%s: %s %s is not a token of %s", file, key, spm_show(q, sizeof q, v),
                      b->vocab_file);
    return CT_OK;
}

/* BOS and EOS: tokenizer_config.json, else the post_processor's leading
 * special token and </s>, else <s> and </s>. */
static ct_status spm_bos_eos(ct_tokenizer *t, const load_builder *b, const cJSON *root, const char *path) {
    t->bos = spm_find(b, "<s>");
    t->eot = spm_find(b, "</s>");
    const cJSON *pp = spm_get(root, "post_processor");
    if (spm_is(spm_get(pp, "type"), "TemplateProcessing")) {
        const cJSON *first = cJSON_GetArrayItem(spm_get(pp, "single"), 0);
        const cJSON *name = spm_get(spm_get(first, "SpecialToken"), "id");
        if (cJSON_IsString(name)) {
            const cJSON *ids = spm_get(spm_get(spm_get(pp, "special_tokens"), name->valuestring), "ids");
            const cJSON *id0 = cJSON_GetArrayItem(ids, 0);
            int32_t id = !cJSON_IsNumber(id0) ? spm_find(b, name->valuestring)
                         : id0->valuedouble >= 0 && id0->valuedouble < t->n_ids ? (int32_t)id0->valuedouble
                                                                                 : -1;
            if (id < 0 || id >= t->n_ids || t->tok_len[id] == TOK_NO_TOKEN) {
                char q[96];
                return CT_ERR(CT_ERR_FORMAT, "%s: post_processor.single[0].SpecialToken.id %s is not a token", path,
                              spm_show(q, sizeof q, name));
            }
            t->bos = id;
        }
    }
    /* tokenizer_config.json beside tokenizer.json */
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
        if (!st) st = spm_config_token(b, cfg_path, cfg, "bos_token", &t->bos);
        if (!st) st = spm_config_token(b, cfg_path, cfg, "eos_token", &t->eot);
        cJSON_Delete(cfg);
    }
    free(cfg_path);
    return st;
}

ct_status tok_spm_tables(ct_tokenizer *t, const load_builder *b, const cJSON *model) {
    ct_status st = spm_tokens(t, b);
    if (!st) st = spm_bytes(t, b, model);
    if (!st) st = spm_merges(t, b);
    return st;
}

ct_status tok_spm_build(ct_tokenizer *t, load_builder *b, const cJSON *root, const char *path) {
    tok_spm *spm = &t->spm;
    t->kind = CT_TOK_KIND_SPM_BPE;
    spm->prepend = TOK_PREPEND_NEVER;
    const cJSON *model = spm_get(root, "model");
    ct_status st = spm_model_options(path, model);
    if (!st) st = spm_normalizers(spm, path, spm_get(root, "normalizer"));
    if (!st) st = spm_pretokenizer(spm, path, spm_get(root, "pre_tokenizer"));
    if (!st) st = tok_spm_tables(t, b, model);
    if (!st) st = spm_bos_eos(t, b, root, path);
    if (st) return st;
    t->adds_bos = true; /* LLaMA's documents start with BOS, as Hugging Face's tokenizer adds it */
    /* the settings and per-id kinds are part of the identity */
    size_t n_extra = 16 + (size_t)t->n_ids;
    uint8_t *extra = malloc(n_extra);
    if (!extra) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory hashing the identity");
    extra[0] = (uint8_t)spm->prepend;
    extra[1] = spm->prepend_unless_mark;
    extra[2] = spm->replace_space;
    extra[3] = spm->split_all;
    int32_t ids[3] = {t->bos, t->eot, spm->unk};
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 4; j++) extra[4 + 4 * k + j] = (uint8_t)((uint32_t)ids[k] >> (8 * j));
    memcpy(extra + 16, spm->flags, (size_t)t->n_ids);
    st = tok_load_identity(t, b, "spm-bpe", extra, n_extra);
    free(extra);
    return st;
}

void tok_spm_free(tok_spm *spm) {
    free(spm->cp_key);
    free(spm->cp_id);
    free(spm->flags);
    spm->cp_key = NULL;
    spm->cp_id = NULL;
    spm->flags = NULL;
}

/* ------------------------------------------------------- encoding */

static void spm_queue(const ct_tokenizer *t, ct_tok_state *s, int32_t i, int32_t j) {
    const tok_pair *p = tok_pair_find(&t->pairs, s->sym[i].id, s->sym[j].id);
    if (p) tok_heap_push(s->heap, &s->heap_n, (bpe_cand){p->rank, i, s->sym[i].id, s->sym[j].id, p->merged});
}

/* BPE of one piece w[0..n) into out (room for n ids); returns the count.
 * Each character becomes its token, or the byte tokens of its UTF-8 (so do
 * bytes that start no valid sequence); then the lowest-ranked adjacent pair
 * merges, of equal ranks the leftmost, until none is left. */
static size_t spm_bpe(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, int32_t *out) {
    bpe_sym *sym = s->sym;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t len = tok_utf8_seq(w + i, n - i);
        int32_t id = len ? spm_char_id(&t->spm, spm_cp(w + i, len)) : -1;
        if (!len) len = 1;
        if (id >= 0) sym[k++].id = id;
        else
            for (size_t j = 0; j < len; j++) sym[k++].id = t->byte_id[w[i + j]];
        i += len;
    }
    return tok_bpe_merge(t, s, k, out);
}

size_t tok_bpe_merge(const ct_tokenizer *t, ct_tok_state *s, size_t k, int32_t *out) {
    bpe_sym *sym = s->sym;
    for (size_t i = 0; i < k; i++) {
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < k ? (int32_t)i + 1 : -1;
    }
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < k; i++) spm_queue(t, s, (int32_t)i, (int32_t)i + 1);
    while (s->heap_n) {
        bpe_cand c = tok_heap_pop(s->heap, &s->heap_n);
        int32_t r = sym[c.pos].next;
        if (sym[c.pos].id != c.left || r < 0 || sym[r].id != c.right) continue; /* stale */
        sym[c.pos].id = c.merged;
        sym[r].id = -1;
        sym[c.pos].next = sym[r].next;
        if (sym[r].next >= 0) sym[sym[r].next].prev = c.pos;
        if (sym[c.pos].prev >= 0) spm_queue(t, s, sym[c.pos].prev, c.pos);
        if (sym[c.pos].next >= 0) spm_queue(t, s, c.pos, sym[c.pos].next);
    }
    size_t m = 0;
    for (int32_t i = 0; k && i >= 0; i = sym[i].next) out[m++] = sym[i].id;
    return m;
}

/* Append the ids of one piece, through the word cache when it is short. */
ct_status tok_spm_piece(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *w, size_t n, ct_tokens *out) {
    ct_status st = tok_tokens_reserve(out, n);
    if (st) return st;
    uint64_t h = 0;
    if (n <= TOK_CACHE_MAX_WORD) {
        h = tok_cache_hash(w, n);
        const tok_cache_slot *c = tok_cache_find(s, w, n, h);
        if (c) {
            memcpy(out->ids + out->n, s->ids + c->ids_off, c->n_ids * sizeof *out->ids);
            out->n += c->n_ids;
            return CT_OK;
        }
    }
    if ((st = tok_state_scratch(s, n))) return st;
    size_t k = spm_bpe(t, s, w, n, s->word);
    memcpy(out->ids + out->n, s->word, k * sizeof *out->ids);
    out->n += k;
    if (n <= TOK_CACHE_MAX_WORD) tok_cache_put(s, w, n, h, s->word, k);
    return CT_OK;
}

/* Normalise the segment into s->norm: the "▁" prefix, spaces as "▁". */
static ct_status spm_normalise(const tok_spm *spm, ct_tok_state *s, const uint8_t *text, size_t n, bool at_start,
                               size_t *m) {
    bool pre = spm->prepend == TOK_PREPEND_ALWAYS || (spm->prepend == TOK_PREPEND_FIRST && at_start);
    if (pre && spm->prepend_unless_mark &&
        ((spm->replace_space && text[0] == ' ') || (n >= 3 && memcmp(text, SPM_MARK, 3) == 0)))
        pre = false;
    size_t spaces = 0;
    if (spm->replace_space)
        for (const uint8_t *p = text; (p = memchr(p, ' ', (size_t)(text + n - p))) != NULL; p++) spaces++;
    size_t need = n + 2 * spaces + 3;
    if (need > s->norm_cap) {
        uint8_t *p = realloc(s->norm, need);
        if (!p) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory for a %zu-byte text", n);
        s->norm = p;
        s->norm_cap = need;
    }
    uint8_t *o = s->norm;
    if (pre) {
        memcpy(o, SPM_MARK, 3);
        o += 3;
    }
    if (!spaces) {
        memcpy(o, text, n);
        o += n;
    } else {
        for (size_t i = 0; i < n; i++) {
            if (text[i] == ' ') {
                memcpy(o, SPM_MARK, 3);
                o += 3;
            } else {
                *o++ = text[i];
            }
        }
    }
    *m = (size_t)(o - s->norm);
    return CT_OK;
}

ct_status tok_spm_encode(const ct_tokenizer *t, ct_tok_state *s, const uint8_t *text, size_t n, bool at_start,
                         ct_tokens *out) {
    const tok_spm *spm = &t->spm;
    if (n == 0) return CT_OK;
    size_t m = 0;
    ct_status st = spm_normalise(spm, s, text, n, at_start, &m);
    if (st) return st;
    /* Pieces: Metaspace's split starts one at every "▁"; otherwise the merges
     * run over the whole segment, which gives the same ids as pieces that
     * start at each "▁" after another character when no token holds "▁"
     * after another character (no merge can then join across such a point).
     * Pieces keep the heap small and let the word cache work. */
    const uint8_t *w = s->norm;
    bool split = spm->split_all || spm->split_safe, prev_mark = false;
    size_t start = 0;
    for (size_t i = 0; i < m && !st;) {
        size_t k = tok_utf8_seq(w + i, m - i);
        bool mark = k == 3 && w[i] == 0xE2 && w[i + 1] == 0x96 && w[i + 2] == 0x81;
        if (mark && split && i > start && (spm->split_all || !prev_mark)) {
            st = tok_spm_piece(t, s, w + start, i - start, out);
            start = i;
        }
        prev_mark = mark;
        i += k ? k : 1;
    }
    if (!st) st = tok_spm_piece(t, s, w + start, m - start, out);
    tok_state_trim(s);
    return st;
}

/* ------------------------------------------------------- decoding */

size_t tok_spm_decode(const ct_tokenizer *t, const int32_t *ids, size_t n, char *p) {
    const tok_spm *spm = &t->spm;
    bool strip = spm->prepend != TOK_PREPEND_NEVER; /* the next token's "▁" was added by encode */
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        const char *b = t->tok_bytes + t->tok_off[id];
        size_t len = t->tok_len[id];
        uint8_t f = spm->flags[id];
        if (f & TOK_SPM_SPECIAL) {
            strip = spm->prepend == TOK_PREPEND_ALWAYS; /* encode gives each piece its own "▁" */
        } else {
            if (strip && (f & TOK_SPM_LEAD_MARK)) {
                b++;
                len--;
            }
            strip = false;
        }
        memcpy(p + o, b, len);
        o += len;
    }
    return o;
}
