/*
 * The generic tokenizer.json pipeline (src/data/tokenizer/tokenizer_hf.c, _pipe.c,
 * _regex.c) on small handcrafted files, for what the real files
 * (tests/golden/test_hf_tok_parity.py) never show: the regex rewriting
 * (JavaScript's \s, \d, \w, ".", "$", \p{..}, (?i:...) against PCRE2's),
 * the five Split behaviours and invert, Digits, ByteLevel's prefix space,
 * NFC/NFKC, Prepend/Replace, ignore_merges, lstrip/rstrip, lossy bytes,
 * BOS/EOS from post_processor and tokenizer_config.json, the identity, and
 * the refusals of what is not supported (file and key named).
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/data.h"
#include "data/tokenizer/tokenizer_impl.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[128];

/* ------------------------------------------------------------ regexes */

/* The matches of a JavaScript regex over text, as "a|b|c" (matches only). */
static bool rx_matches(const char *pattern, const char *text, const char *want) {
    pcre2_code *re = NULL;
    bool jit = false;
    if (tok_regex_compile(&re, &jit, pattern, strlen(pattern), "test") != CT_OK) {
        fprintf(stderr, "  compile %s: %s\n", pattern, ct_last_error());
        return false;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    char got[512] = "";
    size_t o = 0, n = strlen(text), g = 0;
    while (o <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)text, n, o, 0, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (g) got[g++] = '|';
        memcpy(got + g, text + ov[0], ov[1] - ov[0]);
        g += ov[1] - ov[0];
        got[g] = '\0';
        o = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (strcmp(got, want)) fprintf(stderr, "  %s on \"%s\": got \"%s\", want \"%s\"\n", pattern, text, got, want);
    return !strcmp(got, want);
}

static void expect_rx_refused(const char *pattern, const char *why) {
    pcre2_code *re = NULL;
    bool jit;
    ct_error_clear();
    ct_status st = tok_regex_compile(&re, &jit, pattern, strlen(pattern), "FILE: pre_tokenizer.pattern.Regex");
    const char *msg = ct_last_error();
    CHECK_MSG(st == CT_ERR_FORMAT && !re && strstr(msg, "FILE: pre_tokenizer.pattern.Regex") && strstr(msg, why),
              "%s: got %d \"%s\", wanted \"%s\"", pattern, (int)st, msg, why);
    pcre2_code_free(re);
}

static void test_regex(void) {
    /* JavaScript's \s has U+FEFF and not U+0085; PCRE2's the other way round */
    CHECK(rx_matches("\\s+", "a\xEF\xBB\xBF" "b\xC2\x85" "c \t", "\xEF\xBB\xBF| \t"));
    CHECK(rx_matches("[^\\s]+", "a\xC2\x85 b", "a\xC2\x85|b"));
    /* \d and \w are ASCII; \p{N} and \p{L} are not */
    CHECK(rx_matches("\\d+", "12\xD9\xA3" "4", "12|4"));
    CHECK(rx_matches("\\p{N}+", "12\xD9\xA3" "4", "12\xD9\xA3" "4"));
    CHECK(rx_matches("\\w+", "ab\xC3\xA9" "c_1", "ab|c_1"));
    CHECK(rx_matches("\\p{L}+", "ab\xC3\xA9" "c_1", "ab\xC3\xA9" "c"));
    CHECK(rx_matches("\\p{Lu}\\p{Ll}+", "Hello WORLD \xC3\x89t\xC3\xA9", "Hello|\xC3\x89t\xC3\xA9"));
    /* "." stops at line terminators; "$" is the end, never before a final newline */
    CHECK(rx_matches(".+", "ab\ncd\xE2\x80\xA8" "e", "ab|cd|e"));
    CHECK(rx_matches("b$", "ab\n", ""));
    CHECK(rx_matches("b$", "ab", "b"));
    /* (?i:...) as transformers.js rewrites it: ASCII letters only, so no long s */
    CHECK(rx_matches("(?i:'s|'ll)", "'S 'lL '\xC5\xBF 's", "'S|'lL|'s"));
    CHECK(rx_matches("(?i:[a-c]x)", "AX bX Cx dx", "AX|bX|Cx"));
    /* lookahead, quantifiers, escapes */
    CHECK(rx_matches("\\s+(?!\\S)|\\s+", "a   b  ", "  | |  "));
    CHECK(rx_matches("\\p{N}{1,3}", "12345", "123|45"));
    CHECK(rx_matches("\\u00e9|\\u{1F600}|\\x41", "\xC3\xA9" "A\xF0\x9F\x98\x80", "\xC3\xA9|A|\xF0\x9F\x98\x80"));
    CHECK(rx_matches("[\\uD83D\\uDE00]", "\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80")); /* a surrogate pair is one */
    CHECK(rx_matches("\\bab\\b", "ab abc \xC3\xA9" "ab", "ab|ab")); /* \b is ASCII: é is no word character */
    CHECK(rx_matches("[^]", "\n", "\n"));
    CHECK(rx_matches("a[]|b", "ab", "b"));
    /* what is not supported is refused, naming where and why */
    expect_rx_refused("\\p{Han}+", "\\p{Han}");
    expect_rx_refused("\\p{Script=Latin}", "not supported");
    expect_rx_refused("(?i)abc", "inline flags");
    expect_rx_refused("(?s:.)", "inline flags");
    expect_rx_refused("(?i:\xC3\xA9)", "beyond ASCII");
    expect_rx_refused("(ab", "without its )");
    expect_rx_refused("a{x}", "quantifier");
    expect_rx_refused("[z-a]", "out of order");
    expect_rx_refused("(?<=a+)b", "PCRE2 refused");
    expect_rx_refused("\\q", "u flag");
}

/* ------------------------------------------------------------ toy files */

/* GPT-2's byte alphabet: byte b as a code point. */
static uint32_t byte_cp(uint8_t b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    uint32_t next = 256;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) next++;
    return next;
}

/* raw bytes -> their byte-alphabet spelling (UTF-8) in out. */
static const char *spell(const char *raw, char *out) {
    size_t o = 0;
    for (const uint8_t *p = (const uint8_t *)raw; *p; p++) {
        uint32_t cp = byte_cp(*p);
        if (cp < 0x80) out[o++] = (char)cp;
        else {
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[o] = '\0';
    return out;
}

/* A byte-level tokenizer.json: the 256 bytes (id = byte value), then extra
 * tokens from 256 (raw text; each must be a merge of the two halves listed in
 * merges, "a b" raw), <|endoftext|> special at 256 + n_extra, and the given
 * JSON texts (NULL: left out) for normalizer, pre_tokenizer, post_processor.
 * Written as dir/tokenizer.json (dir made); returns dir. */
typedef struct toy {
    const char *const *extra;
    size_t n_extra;
    const char *const (*merges)[2];
    size_t n_merges;
    const char *normalizer, *pre, *post, *model_extra, *added_extra, *config;
} toy;

static const char *toy_write(const char *name, const toy *y) {
    static char dir[600];
    ct_tmpdir_join(dir, sizeof dir, tmpdir, name);
    CHECK(ct_mkdir_p(dir) == CT_OK);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    char buf[256], raw[2] = {0, 0};
    for (int b = 1; b < 256; b++) {
        raw[0] = (char)b;
        cJSON_AddNumberToObject(vocab, spell(raw, buf), b);
    }
    cJSON_AddNumberToObject(vocab, "\xC4\x80", 0); /* byte 0: U+0100 */
    for (size_t i = 0; i < y->n_extra; i++) cJSON_AddNumberToObject(vocab, spell(y->extra[i], buf), 256 + (int)i);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (size_t i = 0; i < y->n_merges; i++) {
        char a[64], b[64];
        const char *pair[2] = {spell(y->merges[i][0], a), spell(y->merges[i][1], b)};
        cJSON_AddItemToArray(merges, cJSON_CreateStringArray(pair, 2));
    }
    if (y->model_extra) {
        cJSON *x = cJSON_Parse(y->model_extra);
        for (cJSON *c = x ? x->child : NULL; c; c = c->next) cJSON_AddItemReferenceToObject(model, c->string, c);
        cJSON_AddItemToObject(root, "_model_extra", x);
    }
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *eot = cJSON_CreateObject();
    cJSON_AddNumberToObject(eot, "id", 256 + (double)y->n_extra);
    cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
    cJSON_AddTrueToObject(eot, "special");
    cJSON_AddItemToArray(added, eot);
    if (y->added_extra) {
        cJSON *x = cJSON_Parse(y->added_extra);
        CHECK(x != NULL);
        while (x && x->child) cJSON_AddItemToArray(added, cJSON_DetachItemViaPointer(x, x->child));
        cJSON_Delete(x);
    }
    const char *parts[3] = {y->normalizer, y->pre, y->post};
    const char *keys[3] = {"normalizer", "pre_tokenizer", "post_processor"};
    for (int k = 0; k < 3; k++) {
        cJSON *v = parts[k] ? cJSON_Parse(parts[k]) : cJSON_CreateNull();
        CHECK_MSG(v != NULL, "bad JSON %s", parts[k]);
        cJSON_AddItemToObject(root, keys[k], v);
    }
    char *s = cJSON_Print(root);
    char p[700];
    CHECK(s && ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "tokenizer.json"), s, strlen(s)) == 0);
    free(s);
    cJSON_Delete(root);
    ct_tmpdir_join(p, sizeof p, dir, "tokenizer_config.json");
    remove(p);
    if (y->config) CHECK(ct_tmpdir_write(p, y->config, strlen(y->config)) == 0);
    return dir;
}

static ct_tokenizer *toy_load(const char *name, const toy *y) {
    ct_tokenizer *t = NULL;
    const char *dir = toy_write(name, y);
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "load %s: %s", name, ct_last_error());
    return t;
}

/* ids of text; -1 terminates want */
static void expect(int line, const ct_tokenizer *t, const char *text, int flags, const int32_t *want) {
    ct_tokens got = {0};
    ct_status st = ct_tokenizer_encode(t, NULL, text, strlen(text), flags, &got);
    size_t n = 0;
    while (want[n] >= 0) n++;
    bool ok = st == CT_OK && got.n == n && (n == 0 || !memcmp(got.ids, want, n * sizeof *want));
    CHECK_MSG(ok, "line %d: encoding \"%s\" (%s)", line, text, st ? ct_last_error() : "");
    if (!ok) {
        fprintf(stderr, "  got:");
        for (size_t i = 0; i < got.n; i++) fprintf(stderr, " %d", (int)got.ids[i]);
        fprintf(stderr, "\n");
    }
    ct_tokens_free(&got);
}
#define EXPECT(t, text, flags, ...)                         \
    do {                                                    \
        static const int32_t w_[] = {__VA_ARGS__, -1};      \
        expect(__LINE__, t, text, flags, w_);               \
    } while (0)

#define SPLIT(how, extra) "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"" how "\"" extra "}"

static const char *const dash_extra[] = {"x-", "-x", "--"};
static const char *const dash_merges[][2] = {{"x", "-"}, {"-", "x"}, {"-", "-"}};
#define XD 256 /* x- */
#define DX 257 /* -x */
#define DD 258 /* -- */

/* The five behaviours and invert on "x-x--x" (the merges x-, -x, -- show the pieces). */
static void test_split(void) {
    const struct {
        const char *pre;
        int32_t want[8];
    } cases[] = {
        {NULL, {XD, XD, DX, -1}},
        {SPLIT("Isolated", ""), {'x', '-', 'x', '-', '-', 'x', -1}},
        {SPLIT("Removed", ""), {'x', 'x', 'x', -1}},
        {SPLIT("MergedWithPrevious", ""), {XD, XD, '-', 'x', -1}},
        {SPLIT("MergedWithNext", ""), {'x', DX, '-', DX, -1}},
        {SPLIT("Contiguous", ""), {'x', '-', 'x', DD, 'x', -1}},
        {SPLIT("Removed", ", \"invert\": true"), {'-', '-', '-', -1}},
        {SPLIT("Isolated", ", \"invert\": true"), {'x', '-', 'x', '-', '-', 'x', -1}},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"-+\"}, \"behavior\": \"Isolated\"}", {'x', '-', 'x', DD, 'x', -1}},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"x\"}, \"behavior\": \"MergedWithNext\", \"invert\": false}",
         {XD, XD, '-', 'x', -1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        toy y = {dash_extra, 3, dash_merges, 3, NULL, cases[i].pre, NULL, NULL, NULL, NULL};
        if (!cases[i].pre) y.pre = "{\"type\": \"ByteLevel\", \"use_regex\": false, \"add_prefix_space\": false}";
        else {
            static char seq[512];
            snprintf(seq, sizeof seq,
                     "{\"type\": \"Sequence\", \"pretokenizers\": [%s, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
                     cases[i].pre);
            y.pre = seq;
        }
        ct_tokenizer *t = toy_load("split", &y);
        if (!t) continue;
        CHECK(ct_tokenizer_kind(t) == CT_TOK_KIND_GPT2_BPE && !strncmp(ct_tokenizer_identity(t), "hf-bpe:", 7));
        expect(__LINE__ * 100 + (int)i, t, "x-x--x", 0, cases[i].want);
        ct_tokenizer_free(t);
    }
}

/* Digits, ByteLevel's prefix space and regex, ignore_merges, the HF merge order. */
static void test_pretokenizers(void) {
    static const char *const extra[] = {"12", " x", "ab", "abc", "bc"};
    static const char *const merges[][2] = {{"1", "2"}, {" ", "x"}, {"b", "c"}, {"a", "b"}, {"ab", "c"}};
    toy y = {extra, 5, merges, 5, NULL, NULL, NULL, NULL, NULL, NULL};
    y.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", \"individual_digits\": true}, "
            "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}]}";
    ct_tokenizer *t = toy_load("digits", &y);
    if (t) {
        EXPECT(t, "x123", 0, 'x', '1', '2', '3');
        /* HF's order: b c (rank 2) before a b (rank 3): "a" "bc" */
        EXPECT(t, "abc", 0, 'a', 260);
        ct_tokenizer_free(t);
    }
    y.pre = "{\"type\": \"Digits\", \"individual_digits\": false}";
    y.pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}, {\"type\": \"ByteLevel\", "
            "\"add_prefix_space\": true}]}";
    if ((t = toy_load("digits2", &y))) {
        EXPECT(t, "123x", 0, ' ', 256, '3', 257); /* " 123" then " x": a prefix space on each piece */
        ct_tokenizer_free(t);
    }
    /* ignore_merges: a piece that is a token is that token, whatever the merges say */
    y.pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}";
    y.model_extra = "{\"ignore_merges\": true}";
    if ((t = toy_load("ignore", &y))) {
        EXPECT(t, "abc", 0, 259);
        EXPECT(t, "abcc", 0, 'a', 260, 'c');
        ct_tokenizer_free(t);
    }
}

/* NFC and NFKC through utf8proc, Prepend and Replace. */
static void test_normalizers(void) {
    static const char *const extra[] = {"\xC3\xA9", "fi"};
    static const char *const merges[][2] = {{"\xC3", "\xA9"}, {"f", "i"}};
    toy y = {extra, 2, merges, 2, "{\"type\": \"NFC\"}",
             "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}", NULL, NULL, NULL, NULL};
    ct_tokenizer *t = toy_load("nfc", &y);
    if (t) {
        EXPECT(t, "e\xCC\x81", 0, 256);        /* e + combining acute -> é */
        EXPECT(t, "\xEF\xAC\x81", 0, 0xEF, 0xAC, 0x81); /* the ligature fi stays under NFC */
        char *back = NULL;
        int32_t ids[1] = {256};
        CHECK(ct_tokenizer_decode(t, ids, 1, &back, NULL) == CT_OK && back && !strcmp(back, "\xC3\xA9"));
        free(back);
        ct_tokenizer_free(t);
    }
    y.normalizer = "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, {\"type\": \"Prepend\", "
                   "\"prepend\": \"<\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \"i\"}, \"content\": \"ii\"}]}";
    if ((t = toy_load("nfkc", &y))) {
        EXPECT(t, "\xEF\xAC\x81", 0, '<', 257, 'i'); /* fi -> "fi" -> "<fi" -> "<fii" */
        EXPECT(t, "", 0, -1);                       /* nothing to prepend to */
        ct_tokenizer_free(t);
    }
}

/* text through ct_tokenizer_unicode_map: the normal form want and, for
 * each of its bytes and its end, the byte of text it came from. */
static void expect_map(int line, const ct_tokenizer *t, const char *text, const char *want, const size_t *from) {
    char *norm = NULL;
    size_t n = 0, *fr = NULL, len = strlen(text);
    ct_status st = ct_tokenizer_unicode_map(t, text, len, &norm, &n, &fr);
    if (!want) {
        CHECK_MSG(st == CT_OK && !norm && !fr && n == len, "line %d: \"%s\" stays as it is", line, text);
        return;
    }
    bool ok = st == CT_OK && norm && n == strlen(want) && !memcmp(norm, want, n) && fr;
    for (size_t i = 0; ok && i <= n; i++) ok = fr[i] == from[i];
    CHECK_MSG(ok, "line %d: the normal form of \"%s\" and where its bytes come from (%s)", line, text,
              st ? ct_last_error() : "");
    if (!ok && fr) {
        fprintf(stderr, "  got %zu bytes, from:", n);
        for (size_t i = 0; i <= n; i++) fprintf(stderr, " %zu", fr[i]);
        fprintf(stderr, "\n");
    }
    free(norm);
    free(fr);
}
#define EXPECT_MAP(t, text, want, ...)                    \
    do {                                                  \
        static const size_t f_[] = {__VA_ARGS__};         \
        expect_map(__LINE__, t, text, want, f_);          \
    } while (0)

/* Where the bytes Qwen's NFC leaves come from (what SFT masks go by). */
static void test_unicode_map(void) {
    toy y = {NULL, 0, NULL, 0, "{\"type\": \"NFC\"}",
             "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}", NULL, NULL, NULL, NULL};
    ct_tokenizer *t = toy_load("nfcmap", &y);
    if (!t) return;
    EXPECT_MAP(t, "plain \xC3\xA9 caf\xC3\xA9 \xE4\xB8\x80", NULL, 0);     /* composed already */
    EXPECT_MAP(t, "xe\xCC\x81y", "x\xC3\xA9y", 0, 1, 1, 4, 5);             /* e + U+0301 -> U+00E9 */
    EXPECT_MAP(t, "x\xCC\x81\xCC\xA8.", "x\xCC\xA8\xCC\x81.", 0, 1, 1, 1, 1, 5, 6); /* marks reordered */
    EXPECT_MAP(t, "\xE1\x84\x80\xE1\x85\xA1", "\xEA\xB0\x80", 0, 0, 0, 6);  /* jamo -> a syllable */
    /* U+212B -> U+00C5; the ideograph after it (no boundary between) maps one to one */
    EXPECT_MAP(t, "\xE2\x84\xAB\xE4\xB8\x80", "\xC3\x85\xE4\xB8\x80", 0, 0, 3, 4, 5, 6);
    EXPECT_MAP(t, "\xCC\x81 a", NULL, 0);                          /* a lone mark stays */
    EXPECT_MAP(t, "a\nb\xE2\x84\xAB", "a\nb\xC3\x85", 0, 1, 2, 3, 3, 6);
    char *norm = NULL;
    size_t n = 0, *fr = NULL;
    CHECK(ct_tokenizer_unicode_map(t, "\xE2\x84", 2, &norm, &n, &fr) != CT_OK && !norm && !fr); /* cut UTF-8 */
    ct_error_clear();
    ct_tokenizer_free(t);
    y.normalizer = NULL;
    if ((t = toy_load("nonorm", &y))) {
        EXPECT_MAP(t, "xe\xCC\x81y", NULL, 0); /* no normalizer: the tokens spell the text */
        ct_tokenizer_free(t);
    }
}

/* Added tokens: lstrip / rstrip, special or not, flags, longest match. */
static void test_added(void) {
    toy y = {NULL, 0, NULL, 0, NULL, "{\"type\": \"ByteLevel\"}", NULL, NULL,
             "[{\"id\": 257, \"content\": \"<a>\", \"special\": false, \"lstrip\": true, \"rstrip\": true},"
             " {\"id\": 258, \"content\": \"<a>b\", \"special\": true},"
             " {\"id\": 259, \"content\": \"<b>\", \"special\": false}]",
             NULL};
    ct_tokenizer *t = toy_load("added", &y);
    if (!t) return;
    EXPECT(t, "x  <a>\t y", 0, 'x', 257, 'y');           /* not special: matched without a flag; strips */
    EXPECT(t, "x <b> y", 0, 'x', ' ', 259, ' ', 'y');    /* no strip */
    EXPECT(t, "<a>b", 0, 257, 'b');                       /* the special one only on request */
    EXPECT(t, "<a>b", CT_TOK_ALLOW_SPECIAL, 258);         /* then the longest match wins */
    EXPECT(t, "<|endoftext|>", CT_TOK_ALLOW_SPECIAL, 256);
    /* lossy: invalid bytes are a word of their own between valid text */
    EXPECT(t, "a\xFF\xFE" "b", CT_TOK_LOSSY, 'a', 0xFF, 0xFE, 'b');
    ct_tokenizer_free(t);
}

/* BOS and EOS: post_processor, tokenizer_config.json, <|endoftext|>. */
static void test_bos_eos(void) {
    toy y = {NULL, 0, NULL, 0, NULL, "{\"type\": \"ByteLevel\"}", NULL, NULL,
             "[{\"id\": 257, \"content\": \"<s>\", \"special\": true}, {\"id\": 258, \"content\": \"</s>\", "
             "\"special\": true}]",
             NULL};
    ct_tokenizer *t = toy_load("bos0", &y);
    if (t) { /* no post-processor BOS: documents start with <|endoftext|>, as GPT-2's and Qwen's */
        CHECK(ct_tokenizer_bos(t) == 256 && ct_tokenizer_eot(t) == 256 && !ct_tokenizer_adds_bos(t));
        ct_tokenizer_free(t);
    }
    y.post = "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": \"TemplateProcessing\", "
             "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
             "\"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], \"special_tokens\": "
             "{\"<s>\": {\"id\": \"<s>\", \"ids\": [257]}}}]}";
    if ((t = toy_load("bos1", &y))) {
        CHECK(ct_tokenizer_bos(t) == 257 && ct_tokenizer_eot(t) == 258 && ct_tokenizer_adds_bos(t));
        ct_tokenizer_free(t);
    }
    y.config = "{\"eos_token\": {\"content\": \"<|endoftext|>\"}, \"bos_token\": \"<s>\"}";
    if ((t = toy_load("bos2", &y))) {
        CHECK(ct_tokenizer_bos(t) == 257 && ct_tokenizer_eot(t) == 256);
        ct_tokenizer_free(t);
    }
    y.config = "{\"eos_token\": \"<nope>\"}";
    ct_tokenizer *bad = NULL;
    const char *dir = toy_write("bos3", &y);
    CHECK(ct_tokenizer_load(&bad, dir) == CT_ERR_FORMAT && strstr(ct_last_error(), "tokenizer_config.json") &&
          strstr(ct_last_error(), "eos_token"));
    ct_tokenizer_free(bad);
}

/* One identity per tokenizer: the same file twice gives the same; any setting changed, another. */
static void test_identity(void) {
    toy y = {dash_extra, 3, dash_merges, 3, NULL, "{\"type\": \"ByteLevel\", \"use_regex\": false}", NULL, NULL, NULL,
             NULL};
    char ids[6][32];
    const char *pres[] = {"{\"type\": \"ByteLevel\", \"use_regex\": false}",
                          "{\"type\": \"ByteLevel\", \"use_regex\": false}",
                          "{\"type\": \"ByteLevel\", \"use_regex\": true}",
                          "{\"type\": \"Sequence\", \"pretokenizers\": [" SPLIT("Isolated", "") ", {\"type\": \"ByteLevel\"}]}",
                          "{\"type\": \"Sequence\", \"pretokenizers\": [" SPLIT("Removed", "") ", {\"type\": \"ByteLevel\"}]}",
                          NULL};
    for (int i = 0; i < 6; i++) {
        y.pre = pres[i] ? pres[i] : pres[0];
        y.normalizer = i == 5 ? "{\"type\": \"NFC\"}" : NULL;
        ct_tokenizer *t = toy_load("ident", &y);
        snprintf(ids[i], sizeof ids[i], "%s", t ? ct_tokenizer_identity(t) : "");
        ct_tokenizer_free(t);
    }
    CHECK_MSG(!strcmp(ids[0], ids[1]) && !strncmp(ids[0], "hf-bpe:", 7), "%s vs %s", ids[0], ids[1]);
    for (int i = 1; i < 6; i++)
        for (int j = i + 1; j < 6; j++) CHECK_MSG(strcmp(ids[i], ids[j]) != 0, "%d and %d: %s", i, j, ids[i]);
    /* GPT-2's form (ByteLevel with its regex, no post-processor BOS) keeps its own kind */
    y.pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}";
    y.normalizer = NULL;
    ct_tokenizer *t = toy_load("ident_gpt2", &y);
    CHECK(t && !strncmp(ct_tokenizer_identity(t), "gpt2-bpe:", 9) && !t->hf);
    ct_tokenizer_free(t);
}

/* What is not supported: CT_ERR_FORMAT naming the file and the key. */
static void test_refused(void) {
    const struct {
        const char *normalizer, *pre, *post, *model_extra, *added, *want;
    } cases[] = {
        {"{\"type\": \"Lowercase\"}", NULL, NULL, NULL, NULL, "normalizer.type is \"Lowercase\""},
        {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Strip\"}]}", NULL, NULL, NULL,
         NULL, "normalizer.normalizers[1].type is \"Strip\""},
        {"{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, \"content\": \"_\"}", NULL, NULL, NULL, NULL,
         "a Regex pattern is not supported"},
        {NULL, "{\"type\": \"Whitespace\"}", NULL, NULL, NULL, "pre_tokenizer.type is \"Whitespace\""},
        {NULL, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
               "\"\\\\p{Greek}\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}",
         NULL, NULL, NULL, "pre_tokenizer.pretokenizers[0].pattern.Regex"},
        {NULL, "{\"type\": \"Metaspace\", \"replacement\": \"_\"}", NULL, NULL, NULL, "pre_tokenizer.replacement"},
        {NULL, NULL, "{\"type\": \"RobertaProcessing\"}", NULL, NULL, "post_processor.type is \"RobertaProcessing\""},
        {NULL, NULL, NULL, "{\"dropout\": 0.5}", NULL, "model.dropout"},
        {NULL, NULL, NULL, "{\"continuing_subword_prefix\": \"##\"}", NULL, "model.continuing_subword_prefix"},
        {NULL, NULL, NULL, "{\"byte_fallback\": true}", NULL, "byte_fallback"},
        {NULL, NULL, NULL, NULL, "[{\"id\": 300, \"content\": \"<w>\", \"single_word\": true}]",
         "added_tokens[1].single_word"},
        {"{\"type\": \"NFC\"}", NULL, NULL, NULL, "[{\"id\": 300, \"content\": \"<w>\", \"normalized\": true}]",
         "added_tokens[1].normalized"},
        /* a raw byte that is not UTF-8 (a fuzzer's find: it made every text fail to normalise) */
        {"{\"type\": \"Replace\", \"pattern\": {\"String\": \"e\"}, \"content\": \"e\xf8\xf8" "e\"}", NULL,
         NULL, NULL, NULL, "not valid UTF-8 at byte offset"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        toy y = {NULL, 0, NULL, 0, cases[i].normalizer, cases[i].pre, cases[i].post, cases[i].model_extra,
                 cases[i].added, NULL};
        if (!y.pre) y.pre = "{\"type\": \"ByteLevel\", \"use_regex\": false}";
        const char *dir = toy_write("refused", &y);
        ct_tokenizer *t = NULL;
        ct_error_clear();
        ct_status st = ct_tokenizer_load(&t, dir);
        const char *msg = ct_last_error();
        CHECK_MSG(st == CT_ERR_FORMAT && !t && strstr(msg, "refused/tokenizer.json") && strstr(msg, cases[i].want),
                  "case %zu: got %d \"%s\", wanted \"%s\"", i, (int)st, msg, cases[i].want);
        ct_tokenizer_free(t);
    }
    /* not byte-level and no byte fallback */
    toy y = {NULL, 0, NULL, 0, NULL, "{\"type\": \"Digits\"}", NULL, NULL, NULL, NULL};
    const char *dir = toy_write("refused", &y);
    ct_tokenizer *t = NULL;
    CHECK(ct_tokenizer_load(&t, dir) == CT_ERR_FORMAT && strstr(ct_last_error(), "not ByteLevel") &&
          strstr(ct_last_error(), "byte_fallback"));
    ct_tokenizer_free(t);
}

/* A SentencePiece-style vocabulary through the generic pipeline (Gemma's
 * layout: Replace " " -> "▁", a Split on " " that then never matches, byte
 * fallback), with a token that holds "▁" after another character. */
static void test_spm_generic(void) {
    char dir[600], p[700];
    ct_tmpdir_join(dir, sizeof dir, tmpdir, "gemmaish");
    CHECK(ct_mkdir_p(dir) == CT_OK);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddTrueToObject(model, "byte_fallback");
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    const char *base[] = {"<pad>", "<eos>", "<bos>", "<unk>"};
    for (int i = 0; i < 4; i++) cJSON_AddNumberToObject(vocab, base[i], i);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        cJSON_AddNumberToObject(vocab, name, 4 + b);
    }
    const char *toks[] = {"\xE2\x96\x81", "a", "b", ">", "\xE2\x96\x81" "a", ">\xE2\x96\x81", ">\xE2\x96\x81" "a"};
    for (int i = 0; i < 7; i++) cJSON_AddNumberToObject(vocab, toks[i], 260 + i);
    const char *mg[][2] = {{">", "\xE2\x96\x81"}, {">\xE2\x96\x81", "a"}, {"\xE2\x96\x81", "a"}};
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < 3; i++) cJSON_AddItemToArray(merges, cJSON_CreateStringArray(mg[i], 2));
    cJSON_AddItemToObject(root, "normalizer",
                          cJSON_Parse("{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xE2\x96\x81\"}"));
    cJSON_AddItemToObject(root, "pre_tokenizer",
                          cJSON_Parse("{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": "
                                      "\"MergedWithPrevious\", \"invert\": false}"));
    cJSON_AddItemToObject(root, "post_processor",
                          cJSON_Parse("{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": "
                                      "\"<bos>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
                                      "\"special_tokens\": {\"<bos>\": {\"id\": \"<bos>\", \"ids\": [2]}}}"));
    cJSON_AddItemToObject(root, "added_tokens",
                          cJSON_Parse("[{\"id\": 0, \"content\": \"<pad>\", \"special\": true}, {\"id\": 1, \"content\": "
                                      "\"<eos>\", \"special\": true}, {\"id\": 2, \"content\": \"<bos>\", \"special\": "
                                      "true}, {\"id\": 3, \"content\": \"<unk>\", \"special\": true}, {\"id\": 267, "
                                      "\"content\": \"\\n\\n\", \"special\": false}]"));
    char *s = cJSON_Print(root);
    CHECK(s && ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "tokenizer.json"), s, strlen(s)) == 0);
    free(s);
    cJSON_Delete(root);
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "%s", ct_last_error());
    if (!t) return;
    CHECK(ct_tokenizer_kind(t) == CT_TOK_KIND_SPM_BPE && !strncmp(ct_tokenizer_identity(t), "hf-spm:", 7));
    CHECK(ct_tokenizer_bos(t) == 2 && ct_tokenizer_adds_bos(t) && ct_tokenizer_vocab_size(t) == 268);
    /* no "▁" in front; ">▁a" merges across the "▁" (a piece cut there would give
     * "▁a"); "c" falls back to its byte; "\n\n" is an added token */
    EXPECT(t, "a> a b", 0, 261, 266, 260, 262);
    EXPECT(t, "a > a\n\nc", 0, 261, 260, 266, 267, 4 + 'c');
    int32_t ids[] = {261, 260, 266, 267, 4 + 'c'};
    char *back = NULL;
    CHECK(ct_tokenizer_decode(t, ids, 5, &back, NULL) == CT_OK && back && !strcmp(back, "a > a\n\nc"));
    free(back);
    ct_tokenizer_free(t);
}

int main(void) {
    if (!ct_tmpdir_make(tmpdir, sizeof tmpdir, "tokhf")) {
        fprintf(stderr, "test_tokenizer_hf: cannot make a temporary directory\n");
        return 1;
    }
    test_regex();
    test_split();
    test_pretokenizers();
    test_normalizers();
    test_unicode_map();
    test_added();
    test_bos_eos();
    test_identity();
    test_refused();
    test_spm_generic();
    ct_tmpdir_remove(tmpdir);
    return ct_test_result("test_tokenizer_hf");
}
