/*
 * Chat templates (data/chat/chat_template.h): loading (tokenizer_config.json with a
 * string or a list of named templates, chat_template.jinja first, AddedToken
 * special tokens, --chat-template files, the errors), rendering with
 * ct_chat_msg, and the assistant spans on each of the seven templates of
 * tests/golden/chat_templates (LLaMA-2, TinyLlama/Zephyr, Mistral, Mixtral,
 * ChatML/Qwen2, Phi-3, Gemma): every span covers exactly the assistant's
 * (trimmed) content and the end-of-turn markup after it, starts right after
 * the generation prompt, and a template whose prefixes do not render as
 * prefixes is refused; Qwen3's, whose turns render otherwise when they are
 * the last (its thinking). The special tokens a template gets from a
 * tokenizer, TRL's conversation objects, errors naming an undefined value.
 * Also the encode flag chat text is tokenised with,
 * CT_TOK_ADDED_TOKENS: every added token (special or not) becomes its id,
 * while the default and CT_TOK_ALLOW_SPECIAL keep their behaviour. The parity
 * of the rendered text itself with @huggingface/jinja is
 * tests/golden/test_chat_template.py's.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/data.h"
#include "data/chat/chat_template.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static char root[1024]; /* the repository, from this file's path */
static char tmpdir[128];

static void find_root(void) {
    snprintf(root, sizeof root, "%s", __FILE__);
    char *p = strstr(root, "/tests/unit/test_chat_template.c");
    if (p) *p = '\0';
    else snprintf(root, sizeof root, "..");
}

static const char *tpl_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/tests/golden/chat_templates/%s.json", root, name);
    return buf;
}

typedef struct family {
    const char *name;
    const char *prompt_end;  /* what the text before each span ends with */
    const char *markup;      /* what follows the content inside the span */
    const char *last_markup; /* the same for the conversation's last message (NULL: markup) */
    bool system;             /* takes a system message */
    bool trims;              /* strips the content */
} family;

static const family FAMILIES[] = {
    {"llama2", "[/INST] ", " </s>", NULL, true, true},
    {"tinyllama", "<|assistant|>\n", "</s>", NULL, true, false},
    {"mistral", "[/INST] ", "</s>", NULL, true, false},
    {"mixtral", "[/INST]", "</s>", NULL, false, false},
    {"qwen2", "<|im_start|>assistant\n", "<|im_end|>", NULL, true, false},
    {"phi3", "<|assistant|>\n", "<|end|>", "<|end|>\n<|endoftext|>", true, false},
    {"gemma", "<start_of_turn>model\n", "<end_of_turn>", NULL, false, true},
};

static bool ends_with(const char *s, size_t n, const char *suf) {
    size_t k = strlen(suf);
    return k <= n && memcmp(s + n - k, suf, k) == 0;
}

/* The spans of conv on family f: each covers the content (trimmed[i] when
 * the template strips it) + markup; an empty content's span is the markup
 * after whitespace. */
static void check_spans(const family *f, const ct_chat_template *t, const ct_chat_msg *conv, size_t n,
                        const char *const *trimmed) {
    char *text = NULL;
    size_t len = 0, ns = 0;
    ct_chat_span *spans = NULL;
    ct_status st = ct_chat_render_spans(t, conv, n, &text, &len, &spans, &ns);
    CHECK_MSG(st == CT_OK, "%s: %s", f->name, ct_last_error());
    if (st) return;
    /* the text is the plain render */
    char *plain = NULL;
    size_t plen = 0;
    CHECK(ct_chat_render(t, conv, n, false, &plain, &plen) == CT_OK && plen == len && memcmp(plain, text, len) == 0);
    free(plain);
    size_t want = 0, k = 0;
    for (size_t i = 0; i < n; i++) want += strcmp(conv[i].role, "assistant") == 0;
    CHECK_MSG(ns == want, "%s: %zu spans, want %zu", f->name, ns, want);
    for (size_t i = 0; i < n && k < ns; i++) {
        if (strcmp(conv[i].role, "assistant") != 0) continue;
        const ct_chat_span *s = &spans[k++];
        const char *markup = i == n - 1 && f->last_markup ? f->last_markup : f->markup;
        const char *content = f->trims ? trimmed[i] : conv[i].content;
        size_t cn = strlen(content), pad = 0;
        if (!cn) { /* spaces of the template's around an empty content: compare without them */
            while (s->start + pad < s->end && text[s->start + pad] == ' ') pad++;
            while (*markup == ' ') markup++;
        }
        size_t mn = strlen(markup);
        bool ok = s->message == i && s->start <= s->end && s->end <= len && s->end - s->start == pad + cn + mn &&
                  memcmp(text + s->start + pad, content, cn) == 0 &&
                  memcmp(text + s->start + pad + cn, markup, mn) == 0 &&
                  (cn == 0 || ends_with(text, s->start, f->prompt_end));
        CHECK_MSG(ok, "%s: message %zu: span [%zu, %zu) is \"%.*s\", want \"%s%s\" after \"...%s\"", f->name, i,
                  s->start, s->end, (int)(s->end > s->start && s->end <= len ? s->end - s->start : 0),
                  text + s->start, content, markup, f->prompt_end);
        /* spans are in order and do not overlap */
        if (k > 1) CHECK(spans[k - 2].end <= s->start);
    }
    free(spans);
    free(text);
}

static void test_spans(void) {
    for (size_t fi = 0; fi < sizeof FAMILIES / sizeof FAMILIES[0]; fi++) {
        const family *f = &FAMILIES[fi];
        char path[1200];
        ct_chat_template *t = NULL;
        ct_status st = ct_chat_template_load(&t, tpl_path(path, sizeof path, f->name));
        CHECK_MSG(st == CT_OK, "%s: %s", f->name, ct_last_error());
        if (st) continue;
        /* two exchanges, content with spaces around it and text that looks like markup */
        const ct_chat_msg c1[] = {{"user", "Hello, how are you?"},
                                  {"assistant", "  I'm fine. </s> <|im_end|> thanks  "},
                                  {"user", "Tell me more"},
                                  {"assistant", "Sure: {{ x }}"}};
        const char *t1[] = {NULL, "I'm fine. </s> <|im_end|> thanks", NULL, "Sure: {{ x }}"};
        check_spans(f, t, c1, 4, t1);
        /* ending with a user message; unicode; empty assistant content */
        const ct_chat_msg c2[] = {{"user", "q1"}, {"assistant", "ünïcødé 😀"}, {"user", "q2"}, {"assistant", ""},
                                  {"user", "q3"}};
        const char *t2[] = {NULL, "ünïcødé 😀", NULL, "", NULL};
        check_spans(f, t, c2, 5, t2);
        if (f->system) {
            const ct_chat_msg c3[] = {{"system", "Be brief."}, {"user", "2+2?"}, {"assistant", "4"}};
            const char *t3[] = {NULL, NULL, "4"};
            check_spans(f, t, c3, 3, t3);
        }
        ct_chat_template_free(t);
    }
    /* a template whose renders of prefixes are not prefixes is refused, naming the message */
    ct_chat_template *t = NULL;
    const char *src = "{% for m in messages %}{{ m.content }}|{% endfor %}{{ messages | length }}";
    CHECK(ct_chat_template_from_text(&t, src, strlen(src), "counting", NULL, "</s>") == CT_OK);
    const ct_chat_msg c[] = {{"user", "a"}, {"assistant", "b"}, {"user", "c"}};
    char *text = NULL;
    size_t len = 0, ns = 0;
    ct_chat_span *spans = NULL;
    CHECK(ct_chat_render_spans(t, c, 3, &text, &len, &spans, &ns) == CT_ERR_FORMAT && !text && !spans);
    CHECK_MSG(strstr(ct_last_error(), "counting") && strstr(ct_last_error(), "message 1"), "%s", ct_last_error());
    /* no assistant message: no spans, the text all the same */
    CHECK(ct_chat_render_spans(t, c, 1, &text, &len, &spans, &ns) == CT_OK && ns == 0 && !spans && text &&
          strcmp(text, "a|1") == 0);
    free(text);
    ct_chat_template_free(t);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    CHECK(ct_tmpdir_write(ct_tmpdir_join(path, sizeof path, dir, name), text, strlen(text)) == 0);
}

static char *render1(const ct_chat_template *t, bool agp) {
    const ct_chat_msg m[] = {{"user", "hi"}};
    char *text = NULL;
    if (ct_chat_render(t, m, 1, agp, &text, NULL)) fprintf(stderr, "  render: %s\n", ct_last_error());
    return text;
}

static void test_loading(void) {
    char dir[512], path[600];
    ct_chat_template *t = NULL;
    /* a list of named templates: "default"; AddedToken-style special tokens */
    snprintf(dir, sizeof dir, "%s/m1", tmpdir);
    mkdir(dir, 0755);
    write_file(dir, "tokenizer_config.json",
               "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"</s>\", "
               "\"pad_token\": null, \"unk_token\": \"\", \"chat_template\": [{\"name\": \"tool_use\", \"template\": "
               "\"T\"}, {\"name\": \"default\", \"template\": \"{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"
               "{{ unk_token is defined }}{{ pad_token is defined }}\"}]}");
    CHECK_MSG(ct_chat_template_load(&t, dir) == CT_OK, "%s", ct_last_error());
    char *s = t ? render1(t, false) : NULL;
    CHECK_MSG(s && strcmp(s, "<s>hi</s>falsefalse") == 0, "got %s", s ? s : "(null)");
    CHECK(t && strcmp(ct_chat_template_token(t, "bos_token"), "<s>") == 0 && !ct_chat_template_token(t, "pad_token"));
    CHECK(t && strstr(ct_chat_template_name(t), "tokenizer_config.json (chat_template)"));
    free(s);
    ct_chat_template_free(t);
    t = NULL;
    /* the path of the config itself works too */
    CHECK(ct_chat_template_load(&t, ct_tmpdir_join(path, sizeof path, dir, "tokenizer_config.json")) == CT_OK);
    ct_chat_template_free(t);
    t = NULL;
    /* chat_template.jinja comes first; tokens still from the config */
    write_file(dir, "chat_template.jinja", "J{{ bos_token }}{% if add_generation_prompt %}G{% endif %}\n");
    CHECK(ct_chat_template_load(&t, dir) == CT_OK);
    s = t ? render1(t, true) : NULL;
    CHECK_MSG(s && strcmp(s, "J<s>G") == 0, "got %s", s ? s : "(null)");
    free(s);
    ct_chat_template_free(t);
    t = NULL;
    /* --chat-template FILE: text, with the tokens of a directory */
    snprintf(path, sizeof path, "%s/t.jinja", tmpdir);
    CHECK(ct_tmpdir_write(path, "[{{ eos_token }}]", 17) == 0);
    CHECK(ct_chat_template_load_file(&t, path, dir) == CT_OK);
    s = t ? render1(t, false) : NULL;
    CHECK(s && strcmp(s, "[</s>]") == 0);
    free(s);
    ct_chat_template_free(t);
    t = NULL;
    CHECK(ct_chat_template_load_file(&t, path, NULL) == CT_OK); /* no tokens: eos_token undefined */
    s = t ? render1(t, false) : NULL;
    CHECK(s && strcmp(s, "[]") == 0);
    free(s);
    ct_chat_template_free(t);
    t = NULL;
    /* errors */
    snprintf(dir, sizeof dir, "%s/m2", tmpdir);
    mkdir(dir, 0755);
    CHECK(ct_chat_template_load(&t, dir) == CT_ERR_IO && !t && strstr(ct_last_error(), "tokenizer_config.json"));
    write_file(dir, "tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
    CHECK(ct_chat_template_load(&t, dir) == CT_ERR_FORMAT && strstr(ct_last_error(), "no chat_template") &&
          strstr(ct_last_hint(), "--chat-template"));
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"rag\", \"template\": \"x\"}]}");
    CHECK(ct_chat_template_load(&t, dir) == CT_ERR_FORMAT && strstr(ct_last_error(), "\"rag\"") &&
          strstr(ct_last_error(), "\"default\""));
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": 5}");
    CHECK(ct_chat_template_load(&t, dir) == CT_ERR_FORMAT);
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": \"{% for m in messages %}\\n{{ m | map }}\"}");
    CHECK(ct_chat_template_load(&t, dir) == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "tokenizer_config.json (chat_template):2:") && strstr(ct_last_error(), "'map'"));
    write_file(dir, "tokenizer_config.json", "{not json");
    CHECK(ct_chat_template_load(&t, dir) == CT_ERR_FORMAT);
    CHECK(ct_chat_template_load(&t, "/nonexistent/model") == CT_ERR_IO);
    snprintf(path, sizeof path, "%s/c.json", tmpdir);
    CHECK(ct_tmpdir_write(path, "{\"eos_token\": \"x\"}", 18) == 0);
    CHECK(ct_chat_template_load_file(&t, path, NULL) == CT_ERR_FORMAT && strstr(ct_last_error(), "chat_template"));
    CHECK(!t);
    ct_chat_template_free(NULL);
}

static void test_render(void) {
    char path[1200];
    ct_chat_template *t = NULL;
    CHECK(ct_chat_template_load(&t, tpl_path(path, sizeof path, "gemma")) == CT_OK);
    if (!t) return;
    const ct_chat_msg ok[] = {{"user", " Hi "}, {"assistant", "Hello"}};
    char *text = NULL;
    size_t len = 0;
    CHECK(ct_chat_render(t, ok, 2, true, &text, &len) == CT_OK);
    const char *want = "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
                       "<start_of_turn>model\n";
    CHECK_MSG(text && len == strlen(want) && strcmp(text, want) == 0, "got %s", text ? text : "(null)");
    free(text);
    /* raise_exception: CT_ERR_ARG with the template's message */
    const ct_chat_msg bad[] = {{"system", "x"}, {"user", "y"}};
    CHECK(ct_chat_render(t, bad, 2, false, &text, &len) == CT_ERR_ARG && !text &&
          strstr(ct_last_error(), "System role not supported") && strstr(ct_last_error(), "gemma.json"));
    /* JSON messages: not an array */
    cJSON *obj = cJSON_CreateObject();
    CHECK(ct_chat_render_json(t, obj, NULL, false, &text, &len) == CT_ERR_ARG);
    cJSON_Delete(obj);
    ct_chat_template_free(t);
}

/* A SentencePiece-style tokenizer.json of byte tokens only, with <s>, </s>
 * and <|im_start|> special and <tool> an added token that is not special. */
static void test_added_tokens(void) {
    cJSON *doc = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(doc, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddTrueToObject(model, "byte_fallback");
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON_AddArrayToObject(model, "merges");
    cJSON_AddNumberToObject(vocab, "<unk>", 0);
    cJSON_AddNumberToObject(vocab, "<s>", 1);
    cJSON_AddNumberToObject(vocab, "</s>", 2);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        cJSON_AddNumberToObject(vocab, name, 3 + b);
    }
    cJSON *added = cJSON_AddArrayToObject(doc, "added_tokens");
    const struct {
        const char *text;
        int id;
        bool special;
    } add[] = {{"<unk>", 0, true}, {"<s>", 1, true}, {"</s>", 2, true}, {"<|im_start|>", 259, true},
               {"<tool>", 260, false}};
    for (size_t i = 0; i < sizeof add / sizeof add[0]; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", add[i].id);
        cJSON_AddStringToObject(a, "content", add[i].text);
        cJSON_AddBoolToObject(a, "special", add[i].special);
        cJSON_AddItemToArray(added, a);
    }
    char dir[256], path[320];
    snprintf(dir, sizeof dir, "%s/tok", tmpdir);
    mkdir(dir, 0755);
    char *json = cJSON_PrintUnformatted(doc);
    CHECK(json && ct_tmpdir_write(ct_tmpdir_join(path, sizeof path, dir, "tokenizer.json"), json, strlen(json)) == 0);
    free(json);
    cJSON_Delete(doc);
    ct_tokenizer *tok = NULL;
    CHECK_MSG(ct_tokenizer_load(&tok, dir) == CT_OK, "%s", ct_last_error());
    if (!tok) return;
    const char *text = "x<tool>y<|im_start|></s>";
    ct_tokens ids = {0};
    /* every added token: the markup and <tool> become ids; x and y byte tokens (no "▁": no normalizer) */
    CHECK(ct_tokenizer_encode(tok, NULL, text, strlen(text), CT_TOK_ADDED_TOKENS, &ids) == CT_OK);
    const int32_t want[] = {3 + 'x', 260, 3 + 'y', 259, 2};
    CHECK_MSG(ids.n == sizeof want / sizeof want[0] && memcmp(ids.ids, want, sizeof want) == 0, "got %zu ids", ids.n);
    /* the same with CT_TOK_ALLOW_SPECIAL */
    ids.n = 0;
    CHECK(ct_tokenizer_encode(tok, NULL, text, strlen(text), CT_TOK_ALLOW_SPECIAL, &ids) == CT_OK);
    CHECK(ids.n == sizeof want / sizeof want[0] && memcmp(ids.ids, want, sizeof want) == 0);
    /* by default only <tool>: an added token that is not special is part of ordinary
     * text (as Hugging Face matches it); the special ones stay text */
    ids.n = 0;
    CHECK(ct_tokenizer_encode(tok, NULL, text, strlen(text), 0, &ids) == CT_OK);
    bool special = false, tool = false;
    for (size_t i = 0; i < ids.n; i++) {
        special |= ids.ids[i] == 259 || ids.ids[i] == 2;
        tool |= ids.ids[i] == 260;
    }
    CHECK(!special && tool);
    ct_tokens_free(&ids);
    /* the special tokens a template gets from the tokenizer (LlamaTokenizer's defaults), unless a
     * config names them (null: off) */
    const char *src = "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token is defined }}";
    ct_chat_template *t = NULL;
    CHECK(ct_chat_template_from_text(&t, src, strlen(src), "tokens", NULL, NULL) == CT_OK);
    CHECK(t && ct_chat_template_use_tokenizer(t, tok) == CT_OK);
    char *s = t ? render1(t, false) : NULL;
    CHECK_MSG(s && strcmp(s, "<s>|</s>|<unk>|false") == 0, "got %s", s ? s : "(null)");
    free(s);
    ct_chat_template_free(t);
    t = NULL;
    write_file(dir, "special_tokens_map.json", "{\"bos_token\": null, \"eos_token\": {\"content\": \"<|im_start|>\"}}");
    snprintf(path, sizeof path, "%s/t2.jinja", tmpdir);
    CHECK(ct_tmpdir_write(path, src, strlen(src)) == 0);
    CHECK(ct_chat_template_load_file(&t, path, dir) == CT_OK && ct_chat_template_use_tokenizer(t, tok) == CT_OK);
    s = t ? render1(t, false) : NULL;
    CHECK_MSG(s && strcmp(s, "|<|im_start|>|<unk>|false") == 0, "got %s", s ? s : "(null)");
    free(s);
    ct_chat_template_free(t);
    ct_tokenizer_free(tok);
}

/* The spans of a JSON conversation (with vars), as text: "span1|span2|...". */
static char *spans_text(const ct_chat_template *t, const char *conv_json, const char *vars_json) {
    cJSON *conv = cJSON_Parse(conv_json), *vars = vars_json ? cJSON_Parse(vars_json) : NULL;
    char *text = NULL, *out = calloc(1, 4096);
    size_t len = 0, ns = 0, o = 0;
    ct_chat_span *spans = NULL;
    if (conv && out && ct_chat_render_spans_json(t, conv, vars, &text, &len, &spans, &ns) == CT_OK) {
        for (size_t i = 0; i < ns && o < 4000; i++)
            o += (size_t)snprintf(out + o, 4096 - o, "%s%.*s", i ? "|" : "", (int)(spans[i].end - spans[i].start),
                                  text + spans[i].start);
    } else if (out) {
        snprintf(out, 4096, "error: %s", ct_last_error());
    }
    free(text);
    free(spans);
    cJSON_Delete(conv);
    cJSON_Delete(vars);
    return out;
}

/* Qwen3: turns before the last user query lose their thinking in the whole render (so the
 * render through such a turn is not a prefix of it); a tool call with no content; the empty
 * thinking block of enable_thinking false belongs to the prompt. */
static void test_qwen3_spans(void) {
    char path[1200];
    ct_chat_template *t = NULL;
    CHECK_MSG(ct_chat_template_load(&t, tpl_path(path, sizeof path, "qwen3")) == CT_OK, "%s", ct_last_error());
    if (!t) return;
    char *s = spans_text(t,
                         "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
                         "\"<think>\\nr1\\n</think>\\n\\nb\"}, {\"role\": \"user\", \"content\": \"c\"}, {\"role\": "
                         "\"assistant\", \"content\": \"d\", \"reasoning_content\": \"r2\"}]",
                         NULL);
    CHECK_MSG(strcmp(s, "b<|im_end|>|<think>\nr2\n</think>\n\nd<|im_end|>") == 0, "got %s", s);
    free(s);
    s = spans_text(t,
                   "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"\", "
                   "\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"x\": 1}}]}, {\"role\": \"tool\", "
                   "\"content\": \"42\"}, {\"role\": \"assistant\", \"content\": \"It is 42.\"}]",
                   "{\"enable_thinking\": false}");
    CHECK_MSG(strcmp(s, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>|"
                        "It is 42.<|im_end|>") == 0,
              "got %s", s);
    free(s);
    ct_chat_template_free(t);
}

/* TRL's conversation objects, and errors that name an undefined value. */
static void test_conv_vars(void) {
    cJSON *c = cJSON_Parse("{\"messages\": [], \"tools\": [{\"name\": \"f\"}], \"chat_template_kwargs\": "
                           "{\"enable_thinking\": false, \"tools\": null}}");
    const cJSON *msgs = NULL;
    cJSON *vars = NULL;
    CHECK(ct_chat_conv_vars(c, false, &msgs, &vars) == CT_OK && cJSON_IsArray(msgs) && vars);
    /* a kwarg overrides tools, as JavaScript's spread does */
    CHECK(cJSON_IsFalse(cJSON_GetObjectItem(vars, "enable_thinking")) && cJSON_IsNull(cJSON_GetObjectItem(vars, "tools")));
    cJSON_Delete(vars);
    cJSON_Delete(c);
    const char *bad[] = {"{\"messages\": {}}", "{\"messages\": [], \"tools\": 1}",
                         "{\"messages\": [], \"chat_template_kwargs\": []}", "{\"messages\": [], \"id\": 1}", "{}", "3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = cJSON_Parse(bad[i]);
        CHECK_MSG(ct_chat_conv_vars(c, false, &msgs, &vars) == CT_ERR_ARG && !vars && !msgs, "%s", bad[i]);
        cJSON_Delete(c);
    }
    c = cJSON_Parse("{\"messages\": [], \"id\": 1}");
    CHECK(ct_chat_conv_vars(c, true, &msgs, &vars) == CT_OK && msgs && !vars);
    cJSON_Delete(c);
    /* an undefined special token is named, with where templates get it */
    ct_chat_template *t = NULL;
    const char *src = "{% for m in messages %}{{ m.content + eos_token }}{% endfor %}";
    CHECK(ct_chat_template_from_text(&t, src, strlen(src), "eos.jinja", NULL, NULL) == CT_OK);
    char *s = t ? render1(t, false) : NULL;
    CHECK_MSG(!s && strstr(ct_last_error(), "'eos_token' is undefined") && strstr(ct_last_error(), "eos.jinja:1") &&
                  strstr(ct_last_hint(), "special token"),
              "%s / %s", ct_last_error(), ct_last_hint());
    ct_chat_template_free(t);
    src = "{{ messages[0]['nope'] | trim }}";
    CHECK(ct_chat_template_from_text(&t, src, strlen(src), "nope.jinja", NULL, NULL) == CT_OK);
    s = t ? render1(t, false) : NULL;
    CHECK_MSG(!s && strstr(ct_last_error(), "'messages[0]['nope']' is undefined"), "%s", ct_last_error());
    ct_chat_template_free(t);
}

int main(void) {
    find_root();
    if (!ct_tmpdir_make(tmpdir, sizeof tmpdir, "chat")) {
        fprintf(stderr, "test_chat_template: cannot make a temporary directory\n");
        return 1;
    }
    test_spans();
    test_loading();
    test_render();
    test_added_tokens();
    test_qwen3_spans();
    test_conv_vars();
    ct_tmpdir_remove(tmpdir);
    return ct_test_result("test_chat_template");
}
