/*
 * Chat templates (data/chat/chat_template.h): finding a model's chat_template
 * (chat_template.jinja, or tokenizer_config.json's string or "default" entry),
 * its special tokens (the config files', then the tokenizer's), TRL's
 * conversation objects, and rendering conversations through the Jinja subset
 * with the variables transformers.js passes.
 * Leaves out: the Jinja language (data/jinja*.c), the assistant spans
 * (chat_spans.c), tokenising.
 */
#include "data/chat/chat_template.h"
#include "data/chat/chat_template_impl.h"
#include "data/chat/jinja.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct ct_chat_template {
    ct_jinja *tpl;
    cJSON *tokens;     /* object: special token name -> text */
    unsigned declared; /* bit k: a config file names chat_token_keys[k] (perhaps as null) */
    char tclass[64];   /* the config's tokenizer_class without "Fast" ("" when none names one) */
    char *name;        /* owned */
    char *text;        /* owned: the template's source, NUL-terminated */
    size_t text_len;
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
    free(t->text);
    free(t);
}

const char *ct_chat_template_name(const ct_chat_template *t) { return t->name; }

const char *ct_chat_template_token(const ct_chat_template *t, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t->tokens, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* What the config files said beyond the tokens' texts. */
typedef struct chat_seen {
    unsigned declared; /* bit k: a file names chat_token_keys[k] (perhaps as null) */
    char tclass[64];   /* the first tokenizer_class named, without "Fast" */
} chat_seen;

/* Add the special tokens of config cfg that tokens lacks: a non-empty string,
 * or an AddedToken object's "content". seen (may be NULL) gets a bit for
 * each key cfg names, whatever its value, and its tokenizer_class; a key
 * declared before (by a file read earlier, perhaps as null: a token turned
 * off) is not taken. */
static ct_status chat_add_tokens(cJSON *tokens, const cJSON *cfg, chat_seen *seen) {
    unsigned before = seen ? seen->declared : 0;
    unsigned *declared = seen ? &seen->declared : NULL;
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer_class");
    if (seen && !seen->tclass[0] && cJSON_IsString(cls) && strlen(cls->valuestring) < sizeof seen->tclass) {
        strcpy(seen->tclass, cls->valuestring);
        size_t n = strlen(seen->tclass);
        if (n > 4 && !strcmp(seen->tclass + n - 4, "Fast")) seen->tclass[n - 4] = '\0';
    }
    for (size_t i = 0; i < CHAT_N_TOKEN_KEYS; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, chat_token_keys[i]);
        if (!v || (before >> i & 1)) continue;
        if (declared) *declared |= 1u << i;
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

static ct_status chat_make(ct_chat_template **out, const char *text, size_t len, const char *name, cJSON *tokens,
                           const chat_seen *seen) {
    ct_chat_template *t = calloc(1, sizeof *t);
    size_t nlen = strlen(name);
    if (t) t->name = malloc(nlen + 1);
    if (t && t->name) t->text = malloc(len + 1);
    if (!t || !t->name || !t->text) {
        if (t) free(t->name);
        free(t);
        cJSON_Delete(tokens);
        return CT_ERR(CT_ERR_OOM, "out of memory for a chat template");
    }
    memcpy(t->name, name, nlen + 1);
    memcpy(t->text, text, len);
    t->text[len] = '\0';
    t->text_len = len;
    t->tokens = tokens;
    if (seen) {
        t->declared = seen->declared;
        memcpy(t->tclass, seen->tclass, sizeof t->tclass);
    }
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
    return chat_make(out, text, len, name ? name : "chat template", tokens, NULL);
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

/* Special tokens from dir's tokenizer_config.json, then (for the keys it
 * does not name) its special_tokens_map.json, as transformers reads them. */
static ct_status chat_tokens_of_dir(cJSON *tokens, const char *dir, chat_seen *seen) {
    static const char *const files[] = {"tokenizer_config.json", "special_tokens_map.json"};
    ct_status st = CT_OK;
    for (size_t f = 0; f < 2 && !st; f++) {
        char *path = chat_join(dir, files[f]);
        if (!path) return CT_ERR(CT_ERR_OOM, "out of memory");
        if (chat_is_file(path)) {
            cJSON *cfg = NULL;
            st = ct_json_read_object(path, &cfg);
            if (!st) st = chat_add_tokens(tokens, cfg, seen);
            cJSON_Delete(cfg);
        }
        free(path);
    }
    return st;
}

/* A config file's template and tokens (then tokens_dir's, when not NULL). */
static ct_status chat_load_config(ct_chat_template **out, const char *cfg_path, const char *tokens_dir) {
    cJSON *cfg = NULL, *tokens = cJSON_CreateObject();
    const char *text = NULL;
    char *name = NULL;
    chat_seen seen = {0};
    ct_status st = tokens ? ct_json_read_object(cfg_path, &cfg) : CT_ERR(CT_ERR_OOM, "out of memory");
    if (!st) st = chat_template_text(cfg, cfg_path, &text);
    if (!st) st = chat_add_tokens(tokens, cfg, &seen);
    if (!st && tokens_dir) st = chat_tokens_of_dir(tokens, tokens_dir, &seen);
    if (!st) {
        size_t n = strlen(cfg_path) + 32;
        name = malloc(n);
        if (!name) st = CT_ERR(CT_ERR_OOM, "out of memory");
        else snprintf(name, n, "%s (chat_template)", cfg_path);
    }
    if (!st) {
        st = chat_make(out, text, strlen(text), name, tokens, &seen);
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
    chat_seen seen = {0};
    ct_status st = tokens ? CT_OK : CT_ERR(CT_ERR_OOM, "out of memory");
    if (!st && tokens_dir) st = chat_tokens_of_dir(tokens, tokens_dir, &seen);
    if (st) {
        cJSON_Delete(tokens);
        return st;
    }
    return chat_make(out, text, len, file, tokens, &seen);
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
        st = chat_load_config(out, cfg, path); /* path: its special_tokens_map.json too */
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

const char *ct_chat_template_source(const ct_chat_template *t, size_t *len) {
    if (len) *len = t->text_len;
    return t->text;
}

cJSON *ct_chat_template_record(const ct_chat_template *t) {
    cJSON *r = cJSON_CreateObject();
    cJSON *tok = r ? cJSON_Duplicate(t->tokens, true) : NULL;
    if (!tok || !cJSON_AddStringToObject(r, "name", t->name) || !cJSON_AddStringToObject(r, "template", t->text) ||
        !cJSON_AddItemToObject(r, "special_tokens", tok)) {
        if (tok && !tok->prev) cJSON_Delete(tok);
        cJSON_Delete(r);
        CT_ERR(CT_ERR_OOM, "out of memory recording a chat template");
        return NULL;
    }
    return r;
}

/* Whether the single token of text s is a token of tok (text that encodes,
 * added tokens matched, to one id whose bytes are s). */
static bool chat_tok_has(const ct_tokenizer *tok, const char *s) {
    ct_tokens ids = {0};
    bool one = ct_tokenizer_encode(tok, NULL, s, strlen(s), CT_TOK_ADDED_TOKENS, &ids) == CT_OK && ids.n == 1;
    size_t n = 0;
    const char *b = one ? ct_tokenizer_token_bytes(tok, ids.ids[0], &n) : NULL;
    bool same = b && n == strlen(s) && memcmp(b, s, n) == 0;
    ct_tokens_free(&ids);
    ct_error_clear();
    return same;
}

/* The text of token id, NUL-terminated into buf[cap], or NULL. */
static const char *chat_tok_text(const ct_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    size_t n = 0;
    const char *b = id >= 0 ? ct_tokenizer_token_bytes(tok, id, &n) : NULL;
    if (!b || !n || n >= cap || ct_utf8_valid_prefix(b, n) != n || memchr(b, '\0', n)) return NULL;
    memcpy(buf, b, n);
    buf[n] = '\0';
    return buf;
}

ct_status ct_chat_template_use_tokenizer(ct_chat_template *t, const ct_tokenizer *tok) {
    CT_ASSERT(t && tok);
    char bos[256], eos[256];
    const char *vals[4] = {NULL, NULL, NULL, NULL}; /* bos_token, eos_token, unk_token, pad_token */
    /* the defaults of the tokenizer class the config names, as transformers
     * constructs it (PreTrainedTokenizerFast, Llama 3's: none) */
    static const struct {
        const char *cls, *vals[4];
    } classes[] = {
        {"PreTrainedTokenizer", {NULL, NULL, NULL, NULL}},
        {"GPT2Tokenizer", {"<|endoftext|>", "<|endoftext|>", "<|endoftext|>", NULL}},
        {"Qwen2Tokenizer", {NULL, "<|endoftext|>", "<|endoftext|>", "<|endoftext|>"}},
        {"LlamaTokenizer", {"<s>", "</s>", "<unk>", NULL}},
        {"GemmaTokenizer", {"<bos>", "<eos>", "<unk>", "<pad>"}},
    };
    size_t c = 0, nc = sizeof classes / sizeof classes[0];
    while (c < nc && strcmp(classes[c].cls, t->tclass) != 0) c++;
    if (c < nc) {
        memcpy(vals, classes[c].vals, sizeof vals);
    } else if (ct_tokenizer_kind(tok) == CT_TOK_KIND_SPM_BPE) {
        /* LlamaTokenizer's defaults: <s>, </s>, <unk> (the BOS and EOS the tokenizer uses) */
        vals[0] = chat_tok_text(tok, ct_tokenizer_bos(tok), bos, sizeof bos);
        vals[1] = chat_tok_text(tok, ct_tokenizer_eot(tok), eos, sizeof eos);
        vals[2] = chat_tok_has(tok, "<unk>") ? "<unk>" : NULL;
    } else {
        /* GPT2Tokenizer's: <|endoftext|> for all three */
        vals[0] = vals[1] = vals[2] = chat_tok_text(tok, ct_tokenizer_eot(tok), eos, sizeof eos);
    }
    static const char *const keys[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    for (size_t i = 0; i < 4; i++) {
        size_t k = 0;
        while (strcmp(chat_token_keys[k], keys[i]) != 0) k++;
        if (!vals[i] || (t->declared >> k & 1) || cJSON_HasObjectItem(t->tokens, keys[i])) continue;
        if (!cJSON_AddStringToObject(t->tokens, keys[i], vals[i]))
            return CT_ERR(CT_ERR_OOM, "out of memory for a chat template's special tokens");
    }
    return CT_OK;
}

/* ------------------------------------------------------------ rendering */

/* After a render error naming an undefined special token the template does
 * not have: say where templates get them. */
static void chat_hint_undefined(const ct_chat_template *t) {
    const char *e = ct_last_error();
    for (size_t k = 0; k < CHAT_N_TOKEN_KEYS; k++) {
        char pat[48];
        snprintf(pat, sizeof pat, "'%s' is undefined", chat_token_keys[k]);
        if (!strstr(e, pat) || cJSON_HasObjectItem(t->tokens, chat_token_keys[k])) continue;
        ct_error_hint("%s is a special token: templates get it from tokenizer_config.json or special_tokens_map.json "
                      "beside the tokenizer, or from the tokenizer itself; give the tokenizer (--tokenizer DIR), or "
                      "the template as a JSON file with \"%s\" beside its \"chat_template\"", chat_token_keys[k],
                      chat_token_keys[k]);
        return;
    }
}

ct_status ct_chat_conv_vars(const cJSON *conv, bool other_keys, const cJSON **messages, cJSON **vars) {
    CT_ASSERT(messages && vars);
    *messages = NULL;
    *vars = NULL;
    if (cJSON_IsArray(conv)) {
        *messages = conv;
        return CT_OK;
    }
    if (!cJSON_IsObject(conv))
        return CT_ERR(CT_ERR_ARG, "a conversation is a JSON array of messages, or an object with \"messages\"");
    if (!cJSON_HasObjectItem(conv, "messages"))
        return CT_ERR(CT_ERR_ARG, "expected a JSON array of messages ([{\"role\": ..., \"content\": ...}, ...]), or an "
                      "object with \"messages\" (and \"tools\", \"chat_template_kwargs\")");
    const cJSON *msgs = NULL, *tools = NULL, *kw = NULL;
    for (const cJSON *e = conv->child; e; e = e->next) {
        if (!strcmp(e->string, "messages")) msgs = e;
        else if (!strcmp(e->string, "tools")) tools = e;
        else if (!strcmp(e->string, "chat_template_kwargs")) kw = e;
        else if (!other_keys)
            return CT_ERR(CT_ERR_ARG, "a conversation object has \"messages\", \"tools\" and \"chat_template_kwargs\", "
                          "not \"%s\"", e->string);
    }
    if (!cJSON_IsArray(msgs))
        return CT_ERR(CT_ERR_ARG, "\"messages\" is %s, expected an array of messages", msgs ? "not an array" : "missing");
    if (tools && !cJSON_IsArray(tools) && !cJSON_IsNull(tools))
        return CT_ERR(CT_ERR_ARG, "\"tools\" is not an array (of the tools' JSON schemas)");
    if (kw && !cJSON_IsObject(kw) && !cJSON_IsNull(kw))
        return CT_ERR(CT_ERR_ARG, "\"chat_template_kwargs\" is not an object (of the template's variables)");
    cJSON *v = NULL;
    if (cJSON_IsArray(tools) || cJSON_IsObject(kw)) {
        v = cJSON_CreateObject();
        bool ok = v != NULL;
        if (ok && cJSON_IsArray(tools)) ok = cJSON_AddItemToObject(v, "tools", cJSON_Duplicate(tools, true));
        for (const cJSON *e = cJSON_IsObject(kw) ? kw->child : NULL; ok && e; e = e->next) {
            cJSON *d = cJSON_Duplicate(e, true);
            cJSON_DeleteItemFromObjectCaseSensitive(v, e->string); /* a kwarg overrides tools, as in JavaScript */
            ok = d && cJSON_AddItemToObject(v, e->string, d);
            if (!ok) cJSON_Delete(d);
        }
        if (!ok) {
            cJSON_Delete(v);
            return CT_ERR(CT_ERR_OOM, "out of memory for a conversation's variables");
        }
    }
    *messages = msgs;
    *vars = v;
    return CT_OK;
}

ct_status chat_render_n(const ct_chat_template *t, const cJSON *messages, size_t n, const cJSON *vars, bool agp,
                        char **text, size_t *len) {
    cJSON *g = cJSON_CreateObject();
    cJSON *list = g ? cJSON_AddArrayToObject(g, "messages") : NULL;
    ct_status st = CT_OK;
    if (!list) {
        cJSON_Delete(g);
        return CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    }
    size_t i = 0;
    for (cJSON *m = messages->child; m && i < n && !st; m = m->next, i++)
        if (!cJSON_AddItemReferenceToArray(list, m)) st = CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    if (!st && (!cJSON_AddBoolToObject(g, "add_generation_prompt", agp) || !cJSON_AddNullToObject(g, "tools") ||
                !cJSON_AddNullToObject(g, "documents")))
        st = CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    /* the engine takes the last of a name given twice */
    for (cJSON *k = t->tokens->child; k && !st; k = k->next)
        if (!cJSON_AddItemReferenceToObject(g, k->string, k))
            st = CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    for (cJSON *k = cJSON_IsObject(vars) ? vars->child : NULL; k && !st; k = k->next)
        if (!cJSON_AddItemReferenceToObject(g, k->string, k))
            st = CT_ERR(CT_ERR_OOM, "out of memory rendering a chat template");
    if (!st) st = ct_jinja_render(t->tpl, g, text, len);
    if (st == CT_ERR_ARG) chat_hint_undefined(t);
    cJSON_Delete(g);
    return st;
}

ct_status ct_chat_render_json(const ct_chat_template *t, const cJSON *messages, const cJSON *vars, bool agp,
                              char **text, size_t *len) {
    CT_ASSERT(t && text);
    *text = NULL;
    if (!cJSON_IsArray(messages)) return CT_ERR(CT_ERR_ARG, "a conversation is a JSON array of messages");
    return chat_render_n(t, messages, (size_t)cJSON_GetArraySize(messages), vars, agp, text, len);
}

ct_status chat_msgs_json(const ct_chat_msg *msgs, size_t n, cJSON **out) {
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
    if (!st) st = chat_render_n(t, a, n, NULL, agp, text, len);
    cJSON_Delete(a);
    return st;
}
