/*
 * One line of instruction data to one example (data/prepare/sft_prepare.h): the
 * kind told by its keys, the tokens, and the loss mask. Every example's text
 * is encoded whole (prompt + completion, or the rendered conversation), and
 * its bytes are tied to the tokens by matching each token's bytes against
 * the text (ct_sft_token_offsets; in the text as the tokenizer's Unicode
 * normalizer leaves it, for Qwen's NFC), so the ids are exactly those of
 * encoding the whole text at once and the mask follows the text:
 *  - a prompt/completion token counts when it reaches past the prompt's end
 *    (its last byte is the completion's); a token that starts in the prompt
 *    and ends in the completion counts (see sft_prepare.h for TRL's rule);
 *  - a conversation token counts when any of its bytes lies inside an
 *    assistant span, as transformers' return_assistant_tokens_mask marks
 *    every token from the one holding a span's first character to the one
 *    holding its last.
 * Leaves out: shards, splits, limits (sft_prepare.c).
 */
#include "data/prepare/sft_prepare.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/chat/chat_template.h"

struct ct_sft_encoder {
    ct_tokenizer *tok;
    ct_tok_state *state;
    int32_t bos, eos;
    ct_chat_template *tpl;   /* NULL until loaded, or when there is none */
    bool tpl_tried;          /* the tokenizer directory's was looked for */
    char *tok_dir;           /* where the model's template is looked for */
    char *buf;               /* the Alpaca prompt */
    size_t buf_cap;
    char *text;              /* prompt + completion */
    size_t text_cap;
    size_t *offs;            /* token offsets of a conversation */
    size_t offs_cap;
};

const char *ct_sft_kind_name(ct_sft_kind k) {
    switch (k) {
    case CT_SFT_KIND_PROMPT_COMPLETION: return "prompt_completion";
    case CT_SFT_KIND_ALPACA: return "alpaca";
    case CT_SFT_KIND_MESSAGES: return "messages";
    default: return "?";
    }
}

void ct_sft_example_free(ct_sft_example *ex) {
    ct_tokens_free(&ex->ids);
    free(ex->mask);
    ex->mask = NULL;
    ex->mask_cap = 0;
}

/* The directory a --tokenizer path stands for (itself, or the directory of
 * the file it names); owned, NULL on OOM. */
static char *sft_tokenizer_dir(const char *path) {
    struct stat sb;
    size_t n = strlen(path);
    char *d = malloc(n + 2);
    if (!d) return NULL;
    memcpy(d, path, n + 1);
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        char *slash = strrchr(d, '/');
        if (slash == d) d[1] = '\0';
        else if (slash) *slash = '\0';
        else strcpy(d, ".");
    }
    return d;
}

ct_status ct_sft_encoder_init(ct_sft_encoder **out, const char *tokenizer, const char *chat_template) {
    *out = NULL;
    ct_sft_encoder *e = calloc(1, sizeof *e);
    if (!e) return CT_ERR(CT_ERR_OOM, "out of memory");
    ct_status st;
    if ((st = ct_tokenizer_load(&e->tok, tokenizer))) goto fail;
    if (!(e->state = ct_tok_state_new(e->tok))) {
        st = ct_last_status();
        goto fail;
    }
    e->bos = ct_tokenizer_bos(e->tok);
    e->eos = ct_tokenizer_eot(e->tok);
    if (e->bos < 0 || e->eos < 0) {
        /* GPT-2's own files have <|endoftext|> or nothing; a tokenizer.json (LLaMA, Llama 3, Qwen,
         * Gemma) takes its BOS from the post_processor and its EOS from tokenizer_config.json */
        bool gpt2_files = !strncmp(ct_tokenizer_identity(e->tok), "gpt2-bpe:", 9);
        st = CT_ERR(CT_ERR_FORMAT, "%s: the tokenizer has no %s, which %s each prompt/completion example", tokenizer,
                    e->bos < 0 ? "document token (a BOS its post_processor adds, <s>, or <|endoftext|>)"
                               : "EOS (tokenizer_config.json's eos_token, </s> or <|endoftext|>)",
                    e->bos < 0 ? "starts" : "ends");
        if (!gpt2_files)
            ct_error_hint("name them in tokenizer_config.json (\"bos_token\", \"eos_token\") beside tokenizer.json");
        goto fail;
    }
    if (!(e->tok_dir = sft_tokenizer_dir(tokenizer))) {
        st = CT_ERR(CT_ERR_OOM, "out of memory");
        goto fail;
    }
    if (chat_template) {
        if ((st = ct_chat_template_load_file(&e->tpl, chat_template, e->tok_dir)) ||
            (st = ct_chat_template_use_tokenizer(e->tpl, e->tok)))
            goto fail;
        e->tpl_tried = true;
    }
    *out = e;
    return CT_OK;
fail:
    ct_sft_encoder_free(e);
    return st;
}

void ct_sft_encoder_free(ct_sft_encoder *e) {
    if (!e) return;
    ct_chat_template_free(e->tpl);
    ct_tok_state_free(e->state);
    ct_tokenizer_free(e->tok);
    free(e->tok_dir);
    free(e->buf);
    free(e->text);
    free(e->offs);
    free(e);
}

const ct_tokenizer *ct_sft_encoder_tokenizer(const ct_sft_encoder *e) { return e->tok; }
int32_t ct_sft_encoder_bos(const ct_sft_encoder *e) { return e->bos; }
int32_t ct_sft_encoder_eos(const ct_sft_encoder *e) { return e->eos; }
const char *ct_sft_encoder_template(const ct_sft_encoder *e) {
    return e->tpl ? ct_chat_template_name(e->tpl) : NULL;
}
const ct_chat_template *ct_sft_encoder_chat_template(const ct_sft_encoder *e) { return e->tpl; }

/* ------------------------------------------------------ token offsets */

/* Bytes of decode(ids[0..n)), n <= 2, or -1 on error. */
static int64_t decoded_len(const ct_tokenizer *t, const int32_t *ids, size_t n) {
    char *s;
    size_t len;
    if (ct_tokenizer_decode(t, ids, n, &s, &len)) return -1;
    free(s);
    return (int64_t)len;
}

/* SentencePiece: whether token i's leading space is the "▁" encode put
 * before a piece rather than a space of the text. The decoder drops exactly
 * those (decode(encode(x)) == x), so ask it: at the start, whether decoding
 * the token alone loses a byte; after token i-1, whether decoding the pair
 * does. */
static bool spm_prefix_mark(const ct_tokenizer *t, const int32_t *ids, size_t i, size_t tl) {
    if (i == 0) return decoded_len(t, ids, 1) == (int64_t)tl - 1;
    int64_t one = decoded_len(t, ids + i - 1, 1), two = decoded_len(t, ids + i - 1, 2);
    return one >= 0 && two == one + (int64_t)tl - 1;
}

/* ct_sft_token_offsets over the text the tokens spell (normalised). */
static ct_status offsets_match(const ct_tokenizer *t, const char *text, size_t len, const int32_t *ids, size_t n,
                               size_t *start) {
    static const char mark[] = "\xE2\x96\x81"; /* "▁" */
    bool spm = ct_tokenizer_kind(t) == CT_TOK_KIND_SPM_BPE;
    size_t p = 0;
    for (size_t i = 0; i < n; i++) {
        size_t tl;
        const char *tb = ct_tokenizer_token_bytes(t, ids[i], &tl);
        if (!tb) return CT_ERR(CT_ERR_FORMAT, "token id %d at position %zu is not in the vocabulary", (int)ids[i], i);
        start[i] = p;
        size_t j = 0;
        if (spm && tl && tb[0] == ' ') {
            /* an added "▁" where the text has no space; where it has one, the decoder tells */
            bool space = p < len && (text[p] == ' ' || (len - p >= 3 && !memcmp(text + p, mark, 3)));
            if (!space || spm_prefix_mark(t, ids, i, tl)) j = 1;
        }
        for (; j < tl; j++) {
            char c = tb[j];
            if (p < len && text[p] == c) p++;
            else if (spm && c == ' ' && len - p >= 3 && !memcmp(text + p, mark, 3))
                p += 3; /* a "▁" in the text, which SentencePiece reads as a space */
            else
                return CT_ERR(CT_ERR_FORMAT, "token %zu (id %d) does not match the text at byte %zu", i, (int)ids[i],
                              p);
        }
    }
    start[n] = p;
    if (p != len)
        return CT_ERR(CT_ERR_FORMAT, "the %zu tokens spell %zu of the text's %zu bytes", n, p, len);
    return CT_OK;
}

ct_status ct_sft_token_offsets(const ct_tokenizer *t, const char *text, size_t len, const int32_t *ids, size_t n,
                               size_t *start) {
    char *norm = NULL;
    size_t nlen = len, *from = NULL;
    ct_status st = ct_tokenizer_unicode_map(t, text, len, &norm, &nlen, &from);
    if (st || !norm) return st ? st : offsets_match(t, text, len, ids, n, start);
    /* Qwen's NFC: the tokens spell the composed text; each offset back to
     * the text's bytes (a token inside a changed run starts where it does) */
    if (!(st = offsets_match(t, norm, nlen, ids, n, start)))
        for (size_t i = 0; i <= n; i++) start[i] = from[start[i]];
    else
        ct_error_prefix("in the text as the tokenizer normalises it (Unicode form)");
    free(norm);
    free(from);
    return st;
}

/* ------------------------------------------------------------ lines */

static ct_status ex_reserve(ct_sft_example *ex, size_t n) {
    if (n <= ex->mask_cap) return CT_OK;
    size_t cap = ex->mask_cap ? ex->mask_cap : 256;
    while (cap < n) cap *= 2;
    uint8_t *m = realloc(ex->mask, cap);
    if (!m) return CT_ERR(CT_ERR_OOM, "out of memory for an example of %zu tokens", n);
    ex->mask = m;
    ex->mask_cap = cap;
    return CT_OK;
}

/* A JSON escape \u0000 in raw[0..n) (cJSON would cut the string there). */
static bool has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return true;
        i++; /* the escaped character */
    }
    return false;
}

/* Room for n + 1 token offsets in e->offs. */
static ct_status offs_reserve(ct_sft_encoder *e, size_t n) {
    if (n + 1 <= e->offs_cap) return CT_OK;
    size_t c = e->offs_cap ? e->offs_cap : 256;
    while (c < n + 1) c *= 2;
    size_t *v = realloc(e->offs, c * sizeof *v);
    if (!v) return CT_ERR(CT_ERR_OOM, "out of memory for %zu token offsets", n + 1);
    e->offs = v;
    e->offs_cap = c;
    return CT_OK;
}

/* prompt + completion (both NUL-terminated): the document token, the
 * encoding of the two texts as one, EOS. A token counts when it ends past
 * the prompt (token k covers bytes [a, b) of the text: b > |prompt|; a token
 * of no byte, SentencePiece's own "▁", when it sits at or after it); EOS
 * counts. */
static ct_status ex_prompt_completion(ct_sft_encoder *e, ct_sft_example *ex, const char *prompt, const char *pfield,
                                      const char *completion, const char *cfield, bool *bad, char *why, size_t cap) {
    size_t pl = strlen(prompt), cl = strlen(completion), at;
    if ((at = ct_utf8_valid_prefix(prompt, pl)) < pl || (at = ct_utf8_valid_prefix(completion, cl)) < cl) {
        snprintf(why, cap, "invalid UTF-8 in field \"%s\" at byte %zu of its text", at < pl ? pfield : cfield, at);
        *bad = true;
        return CT_OK;
    }
    if (pl + cl + 1 > e->text_cap) {
        char *t = realloc(e->text, pl + cl + 1);
        if (!t) return CT_ERR(CT_ERR_OOM, "out of memory for an example of %zu bytes", pl + cl);
        e->text = t;
        e->text_cap = pl + cl + 1;
    }
    memcpy(e->text, prompt, pl);
    memcpy(e->text + pl, completion, cl + 1);
    ct_status st;
    if ((st = ct_tokens_push(&ex->ids, e->bos)) || (st = ex_reserve(ex, 1))) return st;
    ex->mask[0] = 0;
    if ((st = ct_tokenizer_encode(e->tok, e->state, e->text, pl + cl, 0, &ex->ids))) return st;
    size_t n = ex->ids.n - 1;
    if ((st = ex_reserve(ex, ex->ids.n + 1)) || (st = offs_reserve(e, n))) return st;
    if ((st = ct_sft_token_offsets(e->tok, e->text, pl + cl, ex->ids.ids + 1, n, e->offs))) {
        ct_error_prefix("the tokens of a prompt and its completion");
        return st;
    }
    for (size_t k = 0; k < n; k++) {
        size_t a = e->offs[k], b = e->offs[k + 1];
        ex->mask[1 + k] = b > pl || (a == b && a >= pl);
    }
    if ((st = ct_tokens_push(&ex->ids, e->eos))) return st;
    ex->mask[ex->ids.n - 1] = 1;
    return CT_OK;
}

/* A string field: NULL with the reason in why when absent or not a string. */
static const char *str_field(const cJSON *j, const char *key, char *why, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) snprintf(why, cap, "no field \"%s\"", key);
    else if (!cJSON_IsString(v) || !v->valuestring) snprintf(why, cap, "field \"%s\" is not a string", key);
    else return v->valuestring;
    return NULL;
}

static ct_status load_template(ct_sft_encoder *e) {
    if (e->tpl) return CT_OK;
    if (!e->tpl_tried) {
        e->tpl_tried = true;
        if (ct_chat_template_load(&e->tpl, e->tok_dir) == CT_OK) return ct_chat_template_use_tokenizer(e->tpl, e->tok);
        e->tpl = NULL;
    }
    ct_status st = CT_ERR(CT_ERR_ARG, "messages need a chat template, and %s has none: %s", e->tok_dir,
                          ct_last_error()[0] ? ct_last_error() : "no tokenizer_config.json");
    ct_error_hint("pass --chat-template FILE (a .jinja file, or a JSON file with a chat_template), or use a "
                  "tokenizer directory whose tokenizer_config.json has one");
    return st;
}

/* A conversation (borrowed messages, vars): render, encode whole, mark the
 * tokens inside assistant spans. */
static ct_status ex_conversation(ct_sft_encoder *e, ct_sft_example *ex, const cJSON *msgs, const cJSON *vars,
                                 bool *bad, char *why, size_t cap) {
    int i = 0, assistants = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m)) snprintf(why, cap, "messages[%d] is not an object", i);
        else if (!cJSON_IsString(role)) snprintf(why, cap, "messages[%d].role is %s", i, role ? "not a string" : "missing");
        else if (!cJSON_IsString(content))
            snprintf(why, cap, "messages[%d].content is %s", i, content ? "not a string" : "missing");
        else {
            assistants += !strcmp(role->valuestring, "assistant");
            continue;
        }
        *bad = true;
        return CT_OK;
    }
    if (!assistants) {
        snprintf(why, cap, i ? "no assistant message: nothing to learn" : "field \"messages\" is empty");
        *bad = true;
        return CT_OK;
    }
    ct_status st = load_template(e);
    if (st) return st;
    char *text = NULL;
    size_t len = 0, n_spans = 0;
    ct_chat_span *spans = NULL;
    st = ct_chat_render_spans_json(e->tpl, msgs, vars, &text, &len, &spans, &n_spans);
    if (st == CT_ERR_ARG || st == CT_ERR_FORMAT) {
        /* the template refuses this conversation (roles out of order, ...) */
        snprintf(why, cap, "%s", ct_last_error());
        ct_error_clear();
        *bad = true;
        return CT_OK;
    }
    if (st) return st;
    size_t n0 = ex->ids.n;
    st = ct_tokenizer_encode(e->tok, e->state, text, len, CT_TOK_ADDED_TOKENS, &ex->ids);
    if (st == CT_ERR_FORMAT) {
        snprintf(why, cap, "the rendered conversation is not valid UTF-8 at byte %zu", ct_utf8_valid_prefix(text, len));
        ct_error_clear();
        *bad = true;
        st = CT_OK;
        goto done;
    }
    size_t n = ex->ids.n - n0;
    if (st || (st = ex_reserve(ex, ex->ids.n))) goto done;
    if ((st = offs_reserve(e, n))) goto done;
    if ((st = ct_sft_token_offsets(e->tok, text, len, ex->ids.ids + n0, n, e->offs))) {
        ct_error_prefix("the tokens of a rendered conversation");
        goto done;
    }
    /* token k covers bytes [a, b): it counts when that range meets a span
     * [s, t); a token of no byte (SentencePiece's own "▁") when it sits
     * inside one. Spans come in text order, so one pass walks both. */
    size_t sp = 0, counted = 0;
    for (size_t k = 0; k < n; k++) {
        size_t a = e->offs[k], b = e->offs[k + 1];
        while (sp < n_spans && spans[sp].end <= a) sp++; /* spans wholly before the token */
        bool in = sp < n_spans && (a == b ? spans[sp].start <= a : spans[sp].start < b);
        ex->mask[n0 + k] = in;
        counted += in;
    }
    if (n) {
        counted -= ex->mask[n0];
        ex->mask[n0] = 0; /* nothing inside the example predicts its first token */
    }
    if (!counted) {
        snprintf(why, cap, "the template renders no assistant token (%zu assistant span%s)", n_spans,
                 n_spans == 1 ? "" : "s");
        *bad = true;
    }
done:
    free(text);
    free(spans);
    return st;
}

/* A conversation (line j: "messages", and TRL's "tools" and
 * "chat_template_kwargs"): render, encode whole, mark the tokens inside
 * assistant spans. */
static ct_status ex_messages(ct_sft_encoder *e, ct_sft_example *ex, const cJSON *j, bool *bad, char *why,
                             size_t cap) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (!cJSON_IsArray(msgs)) {
        snprintf(why, cap, "field \"messages\" is not an array");
        *bad = true;
        return CT_OK;
    }
    cJSON *vars = NULL;
    ct_status st = ct_chat_conv_vars(j, true, &msgs, &vars);
    if (st == CT_ERR_ARG) {
        snprintf(why, cap, "%s", ct_last_error());
        ct_error_clear();
        *bad = true;
        return CT_OK;
    }
    if (st) return st;
    st = ex_conversation(e, ex, msgs, vars, bad, why, cap);
    cJSON_Delete(vars);
    return st;
}

ct_status ct_sft_encode_line(ct_sft_encoder *e, const char *line, size_t len, ct_sft_example *ex, bool *bad,
                             char *why, size_t cap) {
    ex->ids.n = 0;
    *bad = true;
    why[0] = 0;
    size_t at = ct_utf8_valid_prefix(line, len);
    if (at < len) {
        snprintf(why, cap, "invalid UTF-8 at byte %zu of the line", at);
        return CT_OK;
    }
    if (has_nul_escape(line, len)) {
        snprintf(why, cap, "a string holds \\u0000");
        return CT_OK;
    }
    cJSON *j = cJSON_ParseWithLength(line, len);
    if (!j || !cJSON_IsObject(j)) {
        snprintf(why, cap, j ? "not a JSON object" : "not valid JSON");
        cJSON_Delete(j);
        return CT_OK;
    }
    bool has_msgs = cJSON_HasObjectItem(j, "messages");
    bool has_pc = cJSON_HasObjectItem(j, "prompt") || cJSON_HasObjectItem(j, "completion");
    bool has_alpaca = cJSON_HasObjectItem(j, "instruction") || cJSON_HasObjectItem(j, "output");
    ct_status st = CT_OK;
    *bad = false;
    if (has_msgs + has_pc + has_alpaca > 1) {
        snprintf(why, cap, "keys of more than one kind (%s%s%s%s%s): an example is one of them",
                 has_msgs ? "messages" : "", has_msgs && has_pc ? ", " : "", has_pc ? "prompt/completion" : "",
                 has_alpaca ? ", " : "", has_alpaca ? "instruction/output" : "");
        *bad = true;
    } else if (has_msgs) {
        ex->kind = CT_SFT_KIND_MESSAGES;
        st = ex_messages(e, ex, j, bad, why, cap);
    } else if (has_pc) {
        ex->kind = CT_SFT_KIND_PROMPT_COMPLETION;
        const char *p = str_field(j, "prompt", why, cap), *c = p ? str_field(j, "completion", why, cap) : NULL;
        if (!p || !c) *bad = true;
        else if (!c[0]) {
            snprintf(why, cap, "field \"completion\" is empty");
            *bad = true;
        } else {
            st = ex_prompt_completion(e, ex, p, "prompt", c, "completion", bad, why, cap);
        }
    } else if (has_alpaca) {
        ex->kind = CT_SFT_KIND_ALPACA;
        const char *ins = str_field(j, "instruction", why, cap), *out = ins ? str_field(j, "output", why, cap) : NULL;
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
        if (!ins || !out) {
            *bad = true;
        } else if (in && !cJSON_IsNull(in) && !cJSON_IsString(in)) {
            snprintf(why, cap, "field \"input\" is not a string");
            *bad = true;
        } else if (!out[0]) {
            snprintf(why, cap, "field \"output\" is empty");
            *bad = true;
        } else {
            const char *input = cJSON_IsString(in) ? in->valuestring : "";
            size_t need = strlen(CT_SFT_ALPACA_INPUT) + strlen(ins) + strlen(input) + 1;
            if (need > e->buf_cap) {
                char *b = realloc(e->buf, need);
                if (!b) {
                    cJSON_Delete(j);
                    return CT_ERR(CT_ERR_OOM, "out of memory for an Alpaca prompt of %zu bytes", need);
                }
                e->buf = b;
                e->buf_cap = need;
            }
            if (input[0]) snprintf(e->buf, e->buf_cap, CT_SFT_ALPACA_INPUT, ins, input);
            else snprintf(e->buf, e->buf_cap, CT_SFT_ALPACA_NO_INPUT, ins);
            st = ex_prompt_completion(e, ex, e->buf, "instruction", out, "output", bad, why, cap);
        }
    } else {
        snprintf(why, cap, "no \"prompt\"/\"completion\", \"instruction\"/\"output\" or \"messages\" field");
        *bad = true;
    }
    cJSON_Delete(j);
    if (st) *bad = false;
    if (*bad) ex->ids.n = 0;
    return st;
}
