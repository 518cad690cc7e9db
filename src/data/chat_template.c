/*
 * Chat templates (data/chat_template.h): finding a model's chat_template
 * (chat_template.jinja, or tokenizer_config.json's string or "default" entry),
 * its special tokens, rendering conversations through the Jinja subset with
 * the variables transformers.js passes, and the assistant spans found by
 * rendering the conversation's prefixes.
 * Leaves out: the Jinja language (data/jinja*.c), tokenising.
 */
#include "data/chat_template.h"
#include "data/jinja.h"
#include "data/jinja_impl.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct ct_chat_template {
    ct_jinja *tpl;
    cJSON *tokens; /* object: special token name -> text */
    char *name;    /* owned */
};

/* The special tokens transformers.js passes to the template (SPECIAL_TOKEN_ATTRIBUTES). */
static const char *const chat_token_keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                              "pad_token", "cls_token", "mask_token"};
#define CHAT_N_TOKEN_KEYS (sizeof chat_token_keys / sizeof chat_token_keys[0])

void ct_chat_template_free(ct_chat_template *t) {
    if (!t) return;
    ct_jinja_free(t->tpl);
    cJSON_Delete(t->tokens);
    free(t->name);
    free(t);
}

const char *ct_chat_template_name(const ct_chat_template *t) { return t->name; }

const char *ct_chat_template_token(const ct_chat_template *t, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t->tokens, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Add the special tokens of config cfg that tokens lacks: a non-empty string,
 * or an AddedToken object's "content". */
static ct_status chat_add_tokens(cJSON *tokens, const cJSON *cfg) {
    for (size_t i = 0; i < CHAT_N_TOKEN_KEYS; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, chat_token_keys[i]);
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (!cJSON_IsString(v) || !v->valuestring[0] || cJSON_HasObjectItem(tokens, chat_token_keys[i])) continue;
        if (!cJSON_AddStringToObject(tokens, chat_token_keys[i], v->valuestring))
            return CT_ERR(CT_ERR_OOM, "out of memory for a chat template's special tokens");
    }
    return CT_OK;
}

/* The template text of a config's chat_template (borrowed from cfg). */
static ct_status chat_template_text(const cJSON *cfg, const char *file, const char **text) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(v)) {
        *text = v->valuestring;
        return CT_OK;
    }
    if (!v || cJSON_IsNull(v)) {
        ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: no chat_template (the model ships no chat template)", file);
        ct_error_hint("give one with --chat-template FILE (a .jinja file, or a JSON file with a chat_template)");
        return st;
    }
    if (cJSON_IsArray(v)) {
        char names[512] = "";
        size_t o = 0;
        for (const cJSON *e = v->child; e; e = e->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (!cJSON_IsString(name) || !cJSON_IsString(tpl))
                return CT_ERR(CT_ERR_FORMAT, "%s: chat_template is a list whose entries are not all {\"name\": string, "
                              "\"template\": string}", file);
            if (strcmp(name->valuestring, "default") == 0) {
                *text = tpl->valuestring;
                return CT_OK;
            }
            if (o < sizeof names - 1)
                o += (size_t)snprintf(names + o, sizeof names - o, "%s\"%s\"", o ? ", " : "", name->valuestring);
        }
        ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: chat_template lists templates named %s but none named \"default\"",
                              file, o ? names : "(none)");
        ct_error_hint("pick one with --chat-template FILE");
        return st;
    }
    return CT_ERR(CT_ERR_FORMAT, "%s: chat_template is neither a string nor a list of {\"name\", \"template\"}", file);
}

static ct_status chat_make(ct_chat_template **out, const char *text, size_t len, const char *name, cJSON *tokens) {
    ct_chat_template *t = calloc(1, sizeof *t);
    size_t nlen = strlen(name);
    if (t) t->name = malloc(nlen + 1);
    if (!t || !t->name) {
        free(t);
        cJSON_Delete(tokens);
        return CT_ERR(CT_ERR_OOM, "out of memory for a chat template");
    }
    memcpy(t->name, name, nlen + 1);
    t->tokens = tokens;
    ct_status st = ct_jinja_parse(&t->tpl, text, len, name, NULL);
    if (st) {
        ct_chat_template_free(t);
        return st;
    }
    *out = t;
    return CT_OK;
}

ct_status ct_chat_template_from_text(ct_chat_template **out, const char *text, size_t len, const char *name,
                                     const char *bos, const char *eos) {
    *out = NULL;
    cJSON *tokens = cJSON_CreateObject();
    if (!tokens || (bos && !cJSON_AddStringToObject(tokens, "bos_token", bos)) ||
        (eos && !cJSON_AddStringToObject(tokens, "eos_token", eos))) {
        cJSON_Delete(tokens);
        return CT_ERR(CT_ERR_OOM, "out of memory for a chat template");
    }
    return chat_make(out, text, len, name ? name : "chat template", tokens);
}

static bool chat_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* dir + "/" + name, malloc'd. */
static char *chat_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) snprintf(p, a + b + 2, "%s%s%s", dir, a && dir[a - 1] == '/' ? "" : "/", name);
    return p;
}

/* Special tokens from dir/tokenizer_config.json into tokens, when it exists. */
static ct_status chat_tokens_of_dir(cJSON *tokens, const char *dir) {
    char *cfg_path = chat_join(dir, "tokenizer_config.json");
    if (!cfg_path) return CT_ERR(CT_ERR_OOM, "out of memory");
    ct_status st = CT_OK;
    if (chat_is_file(cfg_path)) {
        cJSON *cfg = NULL;
        st = ct_json_read_object(cfg_path, &cfg);
        if (!st) st = chat_add_tokens(tokens, cfg);
        cJSON_Delete(cfg);
    }
    free(cfg_path);
    return st;
}

/* A config file's template and tokens. */
static ct_status chat_load_config(ct_chat_template **out, const char *cfg_path, const char *tokens_dir) {
    cJSON *cfg = NULL, *tokens = cJSON_CreateObject();
    const char *text = NULL;
    char *name = NULL;
    ct_status st = tokens ? ct_json_read_object(cfg_path, &cfg) : CT_ERR(CT_ERR_OOM, "out of memory");
    if (!st) st = chat_template_text(cfg, cfg_path, &text);
    if (!st) st = chat_add_tokens(tokens, cfg);
    if (!st && tokens_dir) st = chat_tokens_of_dir(tokens, tokens_dir);
    if (!st) {
        size_t n = strlen(cfg_path) + 32;
        name = malloc(n);
        if (!name) st = CT_ERR(CT_ERR_OOM, "out of memory");
        else snprintf(name, n, "%s (chat_template)", cfg_path);
    }
    if (!st) {
        st = chat_make(out, text, strlen(text), name, tokens);
        tokens = NULL;
    }
    free(name);
    cJSON_Delete(tokens);
    cJSON_Delete(cfg);
    return st;
}

/* A template's text from a file, with the tokens of tokens_dir's config. */
static ct_status chat_load_text(ct_chat_template **out, const char *file, const char *text, size_t len,
                                const char *tokens_dir) {
    cJSON *tokens = cJSON_CreateObject();
    ct_status st = tokens ? CT_OK : CT_ERR(CT_ERR_OOM, "out of memory");
    if (!st && tokens_dir) st = chat_tokens_of_dir(tokens, tokens_dir);
    if (st) {
        cJSON_Delete(tokens);
        return st;
    }
    return chat_make(out, text, len, file, tokens);
}

ct_status ct_chat_template_load(ct_chat_template **out, const char *path) {
    CT_ASSERT(out && path);
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        ct_status st = CT_ERR(CT_ERR_IO, "%s: no such file or directory (looking for a chat template)", path);
        ct_error_hint("give the model directory holding tokenizer_config.json");
        return st;
    }
    if (!S_ISDIR(sb.st_mode)) return chat_load_config(out, path, NULL);
    char *jinja = chat_join(path, "chat_template.jinja"), *cfg = chat_join(path, "tokenizer_config.json");
    ct_status st = CT_OK;
    if (!jinja || !cfg) {
        st = CT_ERR(CT_ERR_OOM, "out of memory");
    } else if (chat_is_file(jinja)) {
        char *text = NULL;
        size_t len = 0;
        st = ct_file_read_all(jinja, &text, &len);
        if (!st) st = chat_load_text(out, jinja, text, len, path);
        free(text);
    } else if (chat_is_file(cfg)) {
        st = chat_load_config(out, cfg, NULL);
    } else {
        st = CT_ERR(CT_ERR_IO, "%s: no tokenizer_config.json or chat_template.jinja (where a model keeps its chat "
                    "template)", path);
        ct_error_hint("give the model directory, or the template with --chat-template FILE");
    }
    free(jinja);
    free(cfg);
    return st;
}

ct_status ct_chat_template_load_file(ct_chat_template **out, const char *file, const char *tokens_dir) {
    CT_ASSERT(out && file);
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    ct_status st = ct_file_read_all(file, &text, &len);
    if (st) return st;
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) i++;
    cJSON *probe = i < len && text[i] == '{' ? cJSON_ParseWithLength(text, len) : NULL;
    if (cJSON_IsObject(probe)) {
        if (!cJSON_HasObjectItem(probe, "chat_template"))
            st = CT_ERR(CT_ERR_FORMAT, "%s: a JSON object without a chat_template", file);
        else
            st = chat_load_config(out, file, tokens_dir);
    } else {
        st = chat_load_text(out, file, text, len, tokens_dir);
    }
    cJSON_Delete(probe);
    free(text);
    return st;
}

/* ------------------------------------------------------------ rendering */

/* Render messages[0..n) (references: nothing is copied). */
static ct_status chat_render_n(const ct_chat_template *t, const cJSON *messages, size_t n, bool agp, char **text,
                               size_t *len) {
    cJSON *vars = cJSON_CreateObject();
    cJSON *list = vars ? cJSON_AddArrayToObject(vars, "messages") : NULL;
    ct_status st = CT_OK;
    if (!list) {
        cJSON_Delete(vars);
        return CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    }
    size_t i = 0;
    for (cJSON *m = messages->child; m && i < n && !st; m = m->next, i++)
        if (!cJSON_AddItemReferenceToArray(list, m)) st = CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    if (!st && !cJSON_AddBoolToObject(vars, "add_generation_prompt", agp))
        st = CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    for (cJSON *k = t->tokens->child; k && !st; k = k->next)
        if (!cJSON_AddItemReferenceToObject(vars, k->string, k))
            st = CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    if (!st) st = ct_jinja_render(t->tpl, vars, text, len);
    cJSON_Delete(vars);
    return st;
}

ct_status ct_chat_render_json(const ct_chat_template *t, const cJSON *messages, bool agp, char **text, size_t *len) {
    CT_ASSERT(t && text);
    *text = NULL;
    if (!cJSON_IsArray(messages)) return CT_ERR(CT_ERR_ARG, "a conversation is a JSON array of messages");
    return chat_render_n(t, messages, (size_t)cJSON_GetArraySize(messages), agp, text, len);
}

/* msgs as a JSON array of {"role", "content"} objects. */
static ct_status chat_msgs_json(const ct_chat_msg *msgs, size_t n, cJSON **out) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        CT_ASSERT(msgs[i].role && msgs[i].content);
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddItemToArray(a, m) || !cJSON_AddStringToObject(m, "role", msgs[i].role) ||
            !cJSON_AddStringToObject(m, "content", msgs[i].content)) {
            if (m && !m->prev) cJSON_Delete(m);
            cJSON_Delete(a);
            a = NULL;
        }
    }
    *out = a;
    return a ? CT_OK : CT_ERR(CT_ERR_OOM, "out of memory for a conversation");
}

ct_status ct_chat_render(const ct_chat_template *t, const ct_chat_msg *msgs, size_t n, bool agp, char **text,
                         size_t *len) {
    CT_ASSERT(t && text && (msgs || n == 0));
    *text = NULL;
    cJSON *a = NULL;
    ct_status st = chat_msgs_json(msgs, n, &a);
    if (!st) st = chat_render_n(t, a, n, agp, text, len);
    cJSON_Delete(a);
    return st;
}

/* ------------------------------------------------------------ spans */

static bool chat_starts(const char *s, size_t n, const char *pre, size_t k) { return k <= n && memcmp(s, pre, k) == 0; }

static ct_status chat_span_fail(const ct_chat_template *t, size_t i, const char *what, const char *a, size_t an,
                                const char *b, size_t bn) {
    size_t at = 0;
    while (at < an && at < bn && a[at] == b[at]) at++;
    ct_status st = CT_ERR(CT_ERR_FORMAT,
                          "%s: cannot find the assistant span of message %zu: the render of the conversation %s is "
                          "not the start of the whole conversation's render (they differ at byte %zu)",
                          t->name, i, what, at);
    ct_error_hint("spans need a template whose renders of a conversation's first messages begin the render of the "
                  "whole, as most chat templates' do");
    return st;
}

static const char *chat_find(const char *hay, size_t n, const char *needle, size_t k) {
    if (k == 0) return hay;
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(hay + i, needle, k) == 0) return hay + i;
    return NULL;
}

ct_status ct_chat_render_spans_json(const ct_chat_template *t, const cJSON *messages, char **text, size_t *len,
                                    ct_chat_span **spans, size_t *n_spans) {
    CT_ASSERT(t && text && spans && n_spans);
    *text = NULL;
    *spans = NULL;
    *n_spans = 0;
    if (len) *len = 0;
    if (!cJSON_IsArray(messages)) return CT_ERR(CT_ERR_ARG, "a conversation is a JSON array of messages");
    size_t n = (size_t)cJSON_GetArraySize(messages), rn = 0;
    char *r = NULL;
    ct_status st = chat_render_n(t, messages, n, false, &r, &rn);
    if (st) return st;
    ct_chat_span *out = calloc(n ? n : 1, sizeof *out);
    if (!out) {
        free(r);
        return CT_ERR(CT_ERR_OOM, "out of memory for spans");
    }
    const char *eos = ct_chat_template_token(t, "eos_token");
    size_t eos_n = eos ? strlen(eos) : 0, k = 0, i = 0;
    for (const cJSON *m = messages->child; m && !st; m = m->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant") != 0) continue;
        /* where the assistant's turn starts: after the generation prompt */
        char *a = NULL, *b = NULL;
        size_t an = 0, bn = 0;
        st = chat_render_n(t, messages, i, true, &a, &an);
        if (!st && !chat_starts(r, rn, a, an)) {
            free(a);
            a = NULL;
            st = chat_render_n(t, messages, i, false, &a, &an);
            if (!st && !chat_starts(r, rn, a, an))
                st = chat_span_fail(t, i, "before it", a, an, r, rn);
        }
        /* where it ends */
        if (!st) st = chat_render_n(t, messages, i + 1, false, &b, &bn);
        size_t turn_end = 0;
        if (!st && !chat_starts(b, bn, a, an)) st = chat_span_fail(t, i, "through it", b, bn, r, rn);
        if (!st && chat_starts(r, rn, b, bn)) {
            turn_end = bn;
        } else if (!st) {
            /* b = r[0..p) + a conversation-end suffix (starting with EOS) that r ends with too */
            size_t common = 0;
            while (common < bn && common < rn && b[common] == r[common]) common++;
            bool found = false;
            for (size_t p = common + 1; eos_n && p-- > an;) {
                size_t tail = bn - p;
                if (chat_starts(b + p, tail, eos, eos_n) && tail <= rn && memcmp(r + rn - tail, b + p, tail) == 0) {
                    turn_end = p;
                    found = true;
                    break;
                }
            }
            if (!found) st = chat_span_fail(t, i, "through it", b, bn, r, rn);
        }
        if (!st) {
            size_t start = an, content_end = an;
            const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
            if (cJSON_IsString(content)) {
                /* the content as it is, else trimmed (templates that strip() or |trim it) */
                jstr cs = {content->valuestring, strlen(content->valuestring)};
                const char *hit = chat_find(r + an, turn_end - an, cs.p, cs.n);
                if (!hit) {
                    cs = ju_trim(cs, true, true);
                    hit = chat_find(r + an, turn_end - an, cs.p, cs.n);
                }
                if (hit) {
                    start = (size_t)(hit - r);
                    content_end = start + cs.n;
                }
            }
            /* the markup after the content, without the whitespace that ends the turn */
            size_t end = content_end + ju_trim((jstr){r + content_end, turn_end - content_end}, false, true).n;
            out[k++] = (ct_chat_span){i, start, end};
        }
        free(a);
        free(b);
    }
    if (st) {
        free(out);
        free(r);
        return st;
    }
    if (!k) {
        free(out);
        out = NULL;
    }
    *text = r;
    if (len) *len = rn;
    *spans = out;
    *n_spans = k;
    return CT_OK;
}

ct_status ct_chat_render_spans(const ct_chat_template *t, const ct_chat_msg *msgs, size_t n, char **text,
                               size_t *len, ct_chat_span **spans, size_t *n_spans) {
    CT_ASSERT(msgs || n == 0);
    cJSON *a = NULL;
    ct_status st = chat_msgs_json(msgs, n, &a);
    if (!st) st = ct_chat_render_spans_json(t, a, text, len, spans, n_spans);
    else {
        *text = NULL;
        *spans = NULL;
        *n_spans = 0;
    }
    cJSON_Delete(a);
    return st;
}
