/*
 * GPT-2 tokenizer tests, on the real vocabulary in data/gpt2-tokenizer (run
 * scripts/fetch_data.sh first) and on small handcrafted ones: known encodings
 * taken from the gpt-3-encoder reference, special tokens, round trips, invalid
 * UTF-8 (strict offsets, lossy byte round trips), tokenizer.json loading and
 * identity, malformed files, the reference's comma-keyed merge ranks, heap BPE
 * against the plain loop, JIT against the interpreter, the word cache past its
 * limits, and several threads sharing one tokenizer.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/data.h"
#include "data/tokenizer/tokenizer_impl.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[128];
static const char *gpt2_dir;

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Encode, expecting success; the ids are returned in *out (caller frees). */
static bool enc(const ct_tokenizer *t, ct_tok_state *s, const char *text, size_t len, int flags, ct_tokens *out) {
    out->n = 0;
    ct_status st = ct_tokenizer_encode(t, s, text, len, flags, out);
    if (st) fprintf(stderr, "  encode failed: %s\n", ct_last_error());
    return st == CT_OK;
}

static bool ids_equal(const ct_tokens *a, const int32_t *b, size_t n) {
    return a->n == n && (n == 0 || memcmp(a->ids, b, n * sizeof *b) == 0);
}

static void print_ids(const char *what, const ct_tokens *v) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < v->n && i < 40; i++) fprintf(stderr, " %d", (int)v->ids[i]);
    fprintf(stderr, "%s\n", v->n > 40 ? " ..." : "");
}

#define EXPECT_IDS(t, text, flags, ...)                                                   \
    do {                                                                                  \
        static const int32_t want_[] = {__VA_ARGS__};                                    \
        ct_tokens got_ = {0};                                                             \
        bool ok_ = enc(t, NULL, text, strlen(text), flags, &got_) &&                      \
                   ids_equal(&got_, want_, sizeof want_ / sizeof want_[0]);               \
        CHECK_MSG(ok_, "encoding of \"%s\"", text);                                       \
        if (!ok_) print_ids("got", &got_);                                                \
        ct_tokens_free(&got_);                                                            \
    } while (0)

/* decode(ids) == text[0..len) */
static bool round_trips(const ct_tokenizer *t, const ct_tokens *ids, const char *text, size_t len) {
    char *back = NULL;
    size_t n = 0;
    if (ct_tokenizer_decode(t, ids->ids, ids->n, &back, &n)) return false;
    bool ok = n == len && memcmp(back, text, len) == 0 && back[n] == '\0';
    free(back);
    return ok;
}

/* GPT-2's byte alphabet, written independently of the library: the code
 * point that shows byte b in encoder.json and vocab.bpe, as UTF-8 in out. */
static size_t byte_glyph(int b, char out[3]) {
    int cp = b, extra = 0;
    bool shown = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!shown) {
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) extra++;
        cp = 256 + extra;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* A small vocabulary: the 256 byte tokens (ids 0..255 in byte order), then
 * `extra` (byte-alphabet spellings) from id 256 on, plus <|endoftext|> last.
 * Returns an owned cJSON object. */
static cJSON *small_vocab(const char *const *extra, int n_extra, bool eot) {
    cJSON *o = cJSON_CreateObject();
    for (int b = 0; b < 256; b++) {
        char g[3] = {0};
        byte_glyph(b, g);
        cJSON_AddNumberToObject(o, g, b);
    }
    for (int i = 0; i < n_extra; i++) cJSON_AddNumberToObject(o, extra[i], 256 + i);
    if (eot) cJSON_AddNumberToObject(o, "<|endoftext|>", 256 + n_extra);
    return o;
}

static void write_json(const char *path, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    CHECK(s && ct_tmpdir_write(path, s, strlen(s)) == 0);
    free(s);
}

/* dir/encoder.json + dir/vocab.bpe from a vocab object and merge lines. */
static void write_gpt2_dir(const char *dir, cJSON *vocab, const char *bpe_text) {
    char p[512];
    CHECK(ct_mkdir_p(dir) == CT_OK);
    write_json(ct_tmpdir_join(p, sizeof p, dir, "encoder.json"), vocab);
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "vocab.bpe"), bpe_text, strlen(bpe_text)) == 0);
}

/* Load expecting failure with `code` and every fragment in the message. */
static void expect_load_fail(int line, const char *path, ct_status code, const char *f1, const char *f2) {
    ct_tokenizer *t = NULL;
    ct_status st = ct_tokenizer_load(&t, path);
    const char *msg = ct_last_error();
    bool ok = st == code && !t && (!f1 || strstr(msg, f1)) && (!f2 || strstr(msg, f2));
    CHECK_MSG(ok, "line %d: load(%s) gave %s \"%s\", wanted %s with \"%s\" \"%s\"", line, path, ct_status_str(st), msg,
              ct_status_str(code), f1 ? f1 : "", f2 ? f2 : "");
    ct_tokenizer_free(t);
}

/* ------------------------------------------------------------ the real vocabulary */

static void test_known(const ct_tokenizer *t) {
    CHECK(ct_tokenizer_vocab_size(t) == 50257);
    CHECK(ct_tokenizer_eot(t) == 50256);
    const char *id = ct_tokenizer_identity(t);
    CHECK_MSG(strlen(id) == 25 && strncmp(id, "gpt2-bpe:", 9) == 0 && strspn(id + 9, "0123456789abcdef") == 16,
              "identity '%s'", id);
    /* ids from the gpt-3-encoder reference */
    EXPECT_IDS(t, "Hello world", 0, 15496, 995);
    EXPECT_IDS(t, " <|endoftext|>", 0, 1279, 91, 437, 1659, 5239, 91, 29);
    EXPECT_IDS(t, " <|endoftext|>", CT_TOK_ALLOW_SPECIAL, 220, 50256);
    EXPECT_IDS(t, "It's 2024, isn't it?", 0, 1026, 338, 48609, 11, 2125, 470, 340, 30);
    EXPECT_IDS(t, "  hello   world  ", 0, 220, 23748, 220, 220, 995, 220, 220);
    EXPECT_IDS(t, "na\xC3\xAFve caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80", 0, 2616, 38776, 40304, 220,
               40792, 23877, 229, 30325, 222);
    EXPECT_IDS(t, "line1\n\nline2\t\tend ", 0, 1370, 16, 198, 198, 1370, 17, 197, 197, 437, 220);
    EXPECT_IDS(t, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0, 24794, 24794, 24794, 24794, 24794, 24794, 24794,
               24794, 24794, 7252);
    /* special tokens: only with the flag, whole, longest at a position */
    EXPECT_IDS(t, "<|endoftext|>", CT_TOK_ALLOW_SPECIAL, 50256);
    EXPECT_IDS(t, "<|endoftext|><|endoftext|>", CT_TOK_ALLOW_SPECIAL, 50256, 50256);
    EXPECT_IDS(t, "Hello<|endoftext|>world", CT_TOK_ALLOW_SPECIAL, 15496, 50256, 6894);
    EXPECT_IDS(t, "<|endoftext|", CT_TOK_ALLOW_SPECIAL, 27, 91, 437, 1659, 5239, 91);
    /* empty text: no ids, not an error */
    ct_tokens v = {0};
    CHECK(enc(t, NULL, "", 0, 0, &v) && v.n == 0);
    CHECK(enc(t, NULL, NULL, 0, CT_TOK_LOSSY, &v) && v.n == 0);
    /* encode appends */
    CHECK(ct_tokens_push(&v, 7) == CT_OK);
    CHECK(ct_tokenizer_encode(t, NULL, "Hello world", 11, 0, &v) == CT_OK);
    CHECK(v.n == 3 && v.ids[0] == 7 && v.ids[1] == 15496 && v.ids[2] == 995);
    ct_tokens_free(&v);
    CHECK(v.ids == NULL && v.n == 0 && v.cap == 0);
    ct_tokens_free(&v); /* twice is fine */
}

static void test_decode(const ct_tokenizer *t) {
    size_t len = 99;
    const char *b = ct_tokenizer_token_bytes(t, 15496, &len);
    CHECK(b && len == 5 && memcmp(b, "Hello", 5) == 0);
    b = ct_tokenizer_token_bytes(t, 995, &len);
    CHECK(b && len == 6 && memcmp(b, " world", 6) == 0);
    b = ct_tokenizer_token_bytes(t, 50256, &len);
    CHECK(b && len == 13 && memcmp(b, "<|endoftext|>", 13) == 0);
    CHECK(ct_tokenizer_token_bytes(t, 50257, &len) == NULL && len == 0);
    CHECK(ct_tokenizer_token_bytes(t, -1, &len) == NULL);
    /* a token may be part of a character: 447 is the first two bytes of U+2019 */
    b = ct_tokenizer_token_bytes(t, 447, &len);
    CHECK(b && len == 2 && (unsigned char)b[0] == 0xE2 && (unsigned char)b[1] == 0x80);

    int32_t bad[] = {15496, 995, 50257};
    char *text = (char *)1;
    CHECK(ct_tokenizer_decode(t, bad, 3, &text, &len) == CT_ERR_ARG && text == NULL);
    CHECK_MSG(strstr(ct_last_error(), "50257") && strstr(ct_last_error(), "position 2"), "%s", ct_last_error());
    int32_t neg[] = {-5};
    CHECK(ct_tokenizer_decode(t, neg, 1, &text, &len) == CT_ERR_ARG);
    CHECK(ct_tokenizer_decode(t, NULL, 0, &text, &len) == CT_OK && text && len == 0 && text[0] == '\0');
    free(text);
}

static const char *const varied[] = {
    "The quick brown fox jumps over the lazy dog.",
    "It's we've they're I'm you'd she'll 'S 'T IT'S it\xE2\x80\x99s",
    "int main(void) {\n\treturn 0; // done\n}\n",
    "{\"key\": [1, 2.5e-3, null], \"\\u00e9\": true}",
    "   leading and trailing   \n\n\t\r\n",
    "\xE4\xB8\xAD\xE6\x96\x87 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",
    "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",
    "cafe\xCC\x81 caf\xC3\xA9 \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D",
    "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 123456789 \xD9\xA3\xD9\xA4",
    "a\xEF\xBB\xBF" "b\xC2\x85" "c\xE1\xA0\x8E" "d\xE2\x80\x8B" "e\xE3\x80\x80" "f\xE2\x80\xA8g",
    ("\x01\x02\x7f zero\x00" "byte inside"),
};

static void test_round_trip(const ct_tokenizer *t) {
    ct_tok_state *s = ct_tok_state_new(t);
    CHECK(s != NULL);
    ct_tokens v = {0}, w = {0};
    for (size_t i = 0; i < sizeof varied / sizeof varied[0]; i++) {
        size_t len = strlen(varied[i]);
        if (i == sizeof varied / sizeof varied[0] - 1) len += 1 + strlen(varied[i] + len + 1); /* keep the NUL */
        CHECK_MSG(enc(t, s, varied[i], len, 0, &v) && round_trips(t, &v, varied[i], len), "round trip %zu", i);
        /* the same ids with a fresh state, with the lossy flag and with specials allowed */
        CHECK(enc(t, NULL, varied[i], len, CT_TOK_LOSSY | CT_TOK_ALLOW_SPECIAL, &w) && ids_equal(&w, v.ids, v.n));
        /* never reads past len */
        if (len > 3) {
            CHECK(enc(t, s, varied[i], 3, CT_TOK_LOSSY, &w) && round_trips(t, &w, varied[i], 3));
        }
    }
    ct_tokens_free(&v);
    ct_tokens_free(&w);
    ct_tok_state_free(s);
    ct_tok_state_free(NULL);
}

typedef struct bad_utf8 {
    const char *text;
    size_t len;
    size_t offset; /* of the first bad byte */
} bad_utf8;

static void test_invalid_utf8(const ct_tokenizer *t) {
    static const bad_utf8 cases[] = {
        {"ab\xE2\x82", 4, 2},                 /* truncated at the end */
        {"abc\xE2\x82" "d", 6, 3},            /* truncated in the middle */
        {"\xF0\x9F\x98", 3, 0},               /* truncated 4-byte */
        {"\xC0\xAF", 2, 0},                   /* overlong '/' */
        {"x\xE0\x80\xAF", 4, 1},              /* overlong 3-byte */
        {"xy\xF0\x80\x80\xAF", 6, 2},         /* overlong 4-byte */
        {"ok \xED\xA0\x80", 6, 3},            /* high surrogate */
        {"ok \xED\xBF\xBF", 6, 3},            /* low surrogate */
        {"\xF4\x90\x80\x80", 4, 0},           /* above U+10FFFF */
        {"hello\xFF", 6, 5},                  /* 0xFF */
        {"\xFE\xFF", 2, 0},
        {"\x80", 1, 0},                       /* stray continuation */
        {"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\xF8", 10, 9},
        {"\xC3\xA9\xC3", 3, 2},
    };
    ct_tokens v = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_utf8 *c = &cases[i];
        CHECK(ct_tokens_push(&v, 42) == CT_OK);
        ct_status st = ct_tokenizer_encode(t, NULL, c->text, c->len, 0, &v);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte offset %zu ", c->offset);
        CHECK_MSG(st == CT_ERR_FORMAT && strstr(ct_last_error(), want), "case %zu: %s: '%s'", i, ct_status_str(st),
                  ct_last_error());
        CHECK_MSG(v.n == 1 && v.ids[0] == 42, "case %zu appended %zu ids", i, v.n - 1);
        /* lossy: encodes, and the ids give back the exact bytes */
        v.n = 0;
        CHECK_MSG(ct_tokenizer_encode(t, NULL, c->text, c->len, CT_TOK_LOSSY, &v) == CT_OK &&
                      round_trips(t, &v, c->text, c->len),
                  "lossy case %zu", i);
        v.n = 0;
    }
    /* offsets past the 8-byte ASCII fast path, at every alignment */
    char buf[1100];
    for (size_t at = 1000; at < 1010; at++) {
        memset(buf, 'a', sizeof buf);
        for (size_t k = 0; k < at; k += 7) buf[k] = ' ';
        buf[at] = (char)0xC3;
        buf[at + 1] = 'x';
        ct_status st = ct_tokenizer_encode(t, NULL, buf, sizeof buf, 0, &v);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte offset %zu ", at);
        CHECK_MSG(st == CT_ERR_FORMAT && strstr(ct_last_error(), want) && v.n == 0, "offset %zu: '%s'", at,
                  ct_last_error());
    }
    /* lossy on random bytes: no crash, exact round trip, same as strict where valid */
    ct_tok_state *s = ct_tok_state_new(t);
    static const unsigned char pool[] = {0x00, 0x20, 'a', 'Z', '1', '\'', 's', '\n', 0x80, 0xBF, 0xC2, 0xC3, 0xE0,
                                         0xE2, 0xED, 0xF0, 0xF4, 0xF5, 0xFF, 0xA0, 0x9F, 0x98, 0x85};
    unsigned char r[64];
    int bad = 0;
    for (int it = 0; it < 3000; it++) {
        size_t n = 1 + rnd() % sizeof r;
        for (size_t k = 0; k < n; k++) r[k] = it % 2 ? (unsigned char)rnd() : pool[rnd() % sizeof pool];
        v.n = 0;
        if (ct_tokenizer_encode(t, s, (const char *)r, n, CT_TOK_LOSSY, &v) != CT_OK ||
            !round_trips(t, &v, (const char *)r, n))
            bad++;
    }
    CHECK_MSG(bad == 0, "%d random byte strings failed the lossy round trip", bad);
    /* a lossy run is its own word: the valid text around it encodes as if alone */
    ct_tokens a = {0}, b = {0};
    CHECK(enc(t, s, "Hello\xFF world", 12, CT_TOK_LOSSY, &v));
    CHECK(enc(t, s, "Hello", 5, 0, &a) && enc(t, s, " world", 6, 0, &b));
    CHECK(v.n == a.n + 1 + b.n && v.ids[a.n] == t->byte_id[0xFF] && memcmp(v.ids, a.ids, a.n * 4) == 0 &&
          memcmp(v.ids + a.n + 1, b.ids, b.n * 4) == 0);
    ct_tokens_free(&a);
    ct_tokens_free(&b);
    ct_tokens_free(&v);
    ct_tok_state_free(s);
}

/* Long runs of one class (the pattern's greedy repeats and lookahead) with the
 * JIT and with the interpreter; a mixed text with both engines. */
static void test_engines(ct_tokenizer *t) {
    size_t n = 300000;
    char *text = malloc(n);
    const char fills[] = {' ', 'x', '7', '-', '\n'};
    ct_tokens v = {0}, w = {0};
    ct_tok_state *s = ct_tok_state_new(t);
    bool jit = t->jit;
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(text, fills[f], n);
        text[n - 1] = 'y'; /* whitespace before a letter: \s+(?!\S) backtracks */
        t->jit = jit;
        CHECK_MSG(enc(t, s, text, n, 0, &v) && round_trips(t, &v, text, n), "run of '%c'", fills[f]);
        tok_set_jit(t, false);
        CHECK_MSG(enc(t, s, text, n, 0, &w) && ids_equal(&w, v.ids, v.n), "interpreter, run of '%c'", fills[f]);
    }
    /* mixed text from tricky pieces */
    static const char *const pieces[] = {"a", "Zz", " ", "  ", "\t", "\n", "\r\n", "'s", "'S", "'ll", "1", "42", ".",
                                         "!?", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xC2\xA0",
                                         "\xC2\x85", "\xEF\xBB\xBF", "\xE2\x80\xA8", "\xE3\x80\x80", "\xE1\xA0\x8E"};
    size_t o = 0;
    while (o + 8 < n) {
        const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
        size_t k = strlen(p);
        memcpy(text + o, p, k);
        o += k;
    }
    t->jit = jit;
    CHECK(enc(t, s, text, o, 0, &v) && round_trips(t, &v, text, o));
    tok_set_jit(t, false);
    CHECK(enc(t, s, text, o, 0, &w) && ids_equal(&w, v.ids, v.n));
    t->jit = jit;
    fprintf(stderr, "  (pattern engine: %s)\n", jit ? "PCRE2 JIT" : "PCRE2 interpreter");
    ct_tokens_free(&v);
    ct_tokens_free(&w);
    ct_tok_state_free(s);
    free(text);
}

/* The heap BPE against the reference's plain loop, word by word. */
static void test_bpe_paths(const ct_tokenizer *t) {
    ct_tok_state *s = ct_tok_state_new(t);
    enum { MAXW = 700 };
    uint8_t w[MAXW];
    int32_t a[MAXW], b[MAXW];
    static const char *const alpha[] = {"abcdefghijklmnopqrstuvwxyz", " etaoinshrdlu", "\"',.!?()[]{}-_ ", "0123456789",
                                        "aaaaab", " \t\n"};
    int bad = 0;
    for (int it = 0; it < 4000; it++) {
        size_t n = 2 + rnd() % (it % 50 == 0 ? MAXW - 2 : 24);
        const char *al = alpha[it % 6];
        size_t an = strlen(al);
        for (size_t k = 0; k < n; k++) w[k] = it % 7 == 6 ? (uint8_t)rnd() : (uint8_t)al[rnd() % an];
        size_t ka = tok_bpe_word(t, s, w, n, a, true), kb = tok_bpe_word(t, s, w, n, b, false);
        if (ka != kb || memcmp(a, b, ka * sizeof *a) != 0) bad++;
    }
    CHECK_MSG(bad == 0, "%d words where heap BPE and the reference loop differ", bad);
    ct_tok_state_free(s);
}

/* More distinct words than the cache holds: it grows, then empties, and the
 * ids never change. */
static void test_cache_limits(const ct_tokenizer *t) {
    size_t words = 70000, cap = words * 12;
    char *text = malloc(cap);
    size_t o = 0;
    for (size_t i = 0; i < words; i++) {
        text[o++] = ' ';
        uint32_t x = (uint32_t)i * 2654435761u;
        for (int k = 0; k < 7; k++, x /= 26) text[o++] = (char)('a' + x % 26);
    }
    ct_tok_state *s = ct_tok_state_new(t);
    ct_tokens v = {0}, w = {0}, part = {0};
    CHECK(enc(t, s, text, o, 0, &v));
    CHECK(enc(t, s, text, o, 0, &w) && ids_equal(&w, v.ids, v.n)); /* second pass: cache hits and refills */
    /* in pieces, each with a fresh state (each word starts with a space, so
     * cutting before a word does not change the split) */
    w.n = 0;
    for (size_t p = 0; p < o; p += 8 * 5000) {
        size_t e = p + 8 * 5000 < o ? p + 8 * 5000 : o;
        CHECK(enc(t, NULL, text + p, e - p, 0, &part));
        for (size_t k = 0; k < part.n; k++) CHECK(ct_tokens_push(&w, part.ids[k]) == CT_OK);
    }
    CHECK(ids_equal(&w, v.ids, v.n));
    CHECK(round_trips(t, &v, text, o));
    ct_tokens_free(&v);
    ct_tokens_free(&w);
    ct_tokens_free(&part);
    ct_tok_state_free(s);
    free(text);
}

typedef struct worker {
    const ct_tokenizer *t;
    const char *text;
    size_t len;
    ct_tokens out;
    ct_status st;
} worker;

static void *worker_run(void *arg) {
    worker *w = arg;
    ct_tok_state *s = ct_tok_state_new(w->t);
    w->st = s ? CT_OK : CT_ERR_OOM;
    /* many small calls, as `ctrain prepare` makes per document */
    for (size_t o = 0; o < w->len && !w->st;) {
        size_t e = o + 4096 < w->len ? o + 4096 : w->len;
        while (e < w->len && w->text[e] != '\n') e++;
        w->st = ct_tokenizer_encode(w->t, s, w->text + o, e - o, 0, &w->out);
        o = e;
    }
    ct_tok_state_free(s);
    return NULL;
}

static void test_threads(const ct_tokenizer *t) {
    size_t n = 400000, o = 0;
    char *text = malloc(n + 256);
    while (o < n) {
        const char *p = varied[rnd() % 10];
        size_t k = strlen(p);
        memcpy(text + o, p, k);
        o += k;
        text[o++] = rnd() % 3 ? ' ' : '\n';
    }
    worker single = {t, text, o, {0}, CT_OK};
    worker_run(&single);
    CHECK(single.st == CT_OK && round_trips(t, &single.out, text, o));
    enum { NT = 4 };
    worker ws[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        ws[i] = (worker){t, text, o, {0}, CT_OK};
        CHECK(pthread_create(&th[i], NULL, worker_run, &ws[i]) == 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(ws[i].st == CT_OK && ids_equal(&ws[i].out, single.out.ids, single.out.n), "thread %d", i);
        ct_tokens_free(&ws[i].out);
    }
    ct_tokens_free(&single.out);
    free(text);
}

/* ------------------------------------------------------------ tokenizer.json */

/* tokenizer.json equivalent to dir's encoder.json + vocab.bpe; merges as "a b"
 * strings or as [a, b] pairs; drop_last leaves the last merge out;
 * eot_special marks <|endoftext|> special in added_tokens. */
static void write_hf(const char *out_path, const char *dir, bool pairs, bool drop_last, bool eot_special) {
    char p[512], *enc_text = NULL, *bpe = NULL;
    size_t len;
    CHECK(ct_file_read_all(ct_tmpdir_join(p, sizeof p, dir, "encoder.json"), &enc_text, &len) == CT_OK);
    CHECK(ct_file_read_all(ct_tmpdir_join(p, sizeof p, dir, "vocab.bpe"), &bpe, &len) == CT_OK);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_CreateObject(), *merges = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *eot = cJSON_CreateObject();
    cJSON_AddNumberToObject(eot, "id", 50256);
    cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
    cJSON_AddBoolToObject(eot, "special", eot_special);
    cJSON_AddItemToArray(added, eot);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "ByteLevel");
    cJSON_AddFalseToObject(pt, "add_prefix_space");
    cJSON_AddTrueToObject(pt, "use_regex");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddItemToObject(model, "vocab", cJSON_Parse(enc_text));
    /* merge lines: skip the #version line and the empty string after the last newline */
    char **lines = malloc(60000 * sizeof *lines);
    size_t count = 0;
    for (char *q = bpe; q && *q && count < 60000;) {
        char *nl = strchr(q, '\n');
        if (nl) *nl = '\0';
        lines[count++] = q;
        q = nl ? nl + 1 : NULL;
    }
    CHECK(count > 1 && strncmp(lines[0], "#version", 8) == 0);
    for (size_t i = 1; i < count - (drop_last ? 1 : 0); i++) {
        char *line = lines[i];
        if (pairs) {
            char *sp = strchr(line, ' ');
            *sp = '\0';
            const char *ab[2] = {line, sp + 1};
            cJSON_AddItemToArray(merges, cJSON_CreateStringArray(ab, 2));
        } else {
            cJSON_AddItemToArray(merges, cJSON_CreateString(line));
        }
    }
    free(lines);
    cJSON_AddItemToObject(model, "merges", merges);
    cJSON_AddItemToObject(root, "model", model);
    write_json(out_path, root);
    cJSON_Delete(root);
    free(enc_text);
    free(bpe);
}

static void test_hf_json(const ct_tokenizer *ref) {
    char d1[512], d2[512], f3[512], f4[512], f5[512];
    ct_tmpdir_join(d1, sizeof d1, tmpdir, "hf_strings");
    ct_tmpdir_join(d2, sizeof d2, tmpdir, "hf_pairs");
    CHECK(ct_mkdir_p(d1) == CT_OK && ct_mkdir_p(d2) == CT_OK);
    char p[600];
    write_hf(ct_tmpdir_join(p, sizeof p, d1, "tokenizer.json"), gpt2_dir, false, false, true);
    write_hf(ct_tmpdir_join(p, sizeof p, d2, "tokenizer.json"), gpt2_dir, true, false, true);
    write_hf(ct_tmpdir_join(f3, sizeof f3, tmpdir, "dropped.json"), gpt2_dir, false, true, true);
    write_hf(ct_tmpdir_join(f4, sizeof f4, tmpdir, "nospecial.json"), gpt2_dir, false, false, false);
    ct_tmpdir_join(f5, sizeof f5, d2, "tokenizer.json");
    const char *same[] = {d1, d2, f5};
    ct_tokens a = {0}, b = {0};
    for (int i = 0; i < 3; i++) {
        ct_tokenizer *t = NULL;
        CHECK_MSG(ct_tokenizer_load(&t, same[i]) == CT_OK, "load %s: %s", same[i], ct_last_error());
        if (!t) continue;
        CHECK_MSG(strcmp(ct_tokenizer_identity(t), ct_tokenizer_identity(ref)) == 0, "identity %s vs %s",
                  ct_tokenizer_identity(t), ct_tokenizer_identity(ref));
        CHECK(ct_tokenizer_vocab_size(t) == 50257 && ct_tokenizer_eot(t) == 50256);
        for (size_t k = 0; k < sizeof varied / sizeof varied[0]; k++) {
            int fl = CT_TOK_ALLOW_SPECIAL;
            CHECK(enc(t, NULL, varied[k], strlen(varied[k]), fl, &a) &&
                  enc(ref, NULL, varied[k], strlen(varied[k]), fl, &b) && ids_equal(&a, b.ids, b.n));
        }
        CHECK(enc(t, NULL, "x<|endoftext|>", 14, CT_TOK_ALLOW_SPECIAL, &a) && a.n == 2 && a.ids[1] == 50256);
        ct_tokenizer_free(t);
    }
    /* one merge fewer, or <|endoftext|> not special: another identity */
    const char *other[] = {f3, f4};
    for (int i = 0; i < 2; i++) {
        ct_tokenizer *t = NULL;
        CHECK_MSG(ct_tokenizer_load(&t, other[i]) == CT_OK, "load %s: %s", other[i], ct_last_error());
        if (!t) continue;
        CHECK(strcmp(ct_tokenizer_identity(t), ct_tokenizer_identity(ref)) != 0);
        /* an added token that is not special is part of ordinary text, as Hugging Face
         * matches it: its id without any flag */
        if (i == 1) CHECK(enc(t, NULL, "x<|endoftext|>", 14, 0, &a) && a.n == 2 && a.ids[1] == 50256);
        ct_tokenizer_free(t);
    }
    ct_tokens_free(&a);
    ct_tokens_free(&b);
}

/* ------------------------------------------------------------ small vocabularies */

/* Plain BPE on a toy vocabulary: overlapping pairs merge leftmost first. */
static void test_toy_bpe(void) {
    static const char *const extra[] = {"aa", "ab", "aab"};
    cJSON *v = small_vocab(extra, 3, true);
    char dir[512];
    write_gpt2_dir(ct_tmpdir_join(dir, sizeof dir, tmpdir, "toy"), v, "#version: 0.2\na a\na b\naa b\n");
    cJSON_Delete(v);
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "%s", ct_last_error());
    if (!t) return;
    CHECK(ct_tokenizer_vocab_size(t) == 260 && ct_tokenizer_eot(t) == 259);
    EXPECT_IDS(t, "aaa", 0, 256, 'a');
    EXPECT_IDS(t, "aab", 0, 258);
    EXPECT_IDS(t, "aaab", 0, 256, 257);
    EXPECT_IDS(t, "aaaa", 0, 256, 256);
    EXPECT_IDS(t, "ba", 0, 'b', 'a');
    EXPECT_IDS(t, "x<|endoftext|>", CT_TOK_ALLOW_SPECIAL, 'x', 259);
    ct_tokenizer_free(t);

    /* A merge ranked before the one that makes its left symbol: the reference
     * merges every (p, q) in one pass before it looks at (pq, p), so "pqpq"
     * is [pq, pq], not [pqp, q]. */
    static const char *const extra2[] = {"pq", "pqp"};
    v = small_vocab(extra2, 2, false);
    write_gpt2_dir(ct_tmpdir_join(dir, sizeof dir, tmpdir, "toy2"), v, "#version: 0.2\npq p\np q\n");
    cJSON_Delete(v);
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "%s", ct_last_error());
    if (!t) return;
    EXPECT_IDS(t, "pqpq", 0, 256, 256);
    EXPECT_IDS(t, "pqpqp", 0, 256, 257); /* then (pq, p) in the next pass */
    EXPECT_IDS(t, "pqp", 0, 257);
    ct_tokenizer_free(t);
}

/* gpt-3-encoder keys ranks by the pair joined with a comma, so ("\",", "\"")
 * gets the rank of the merge ("\"", ",\""). Expected ids come from the
 * reference's Encoder.js run with this vocabulary. */
static void test_comma_aliases(void) {
    static const char *const extra[] = {"\",", ",\"", "\",\"", "\"\"", "\",\"\""};
    cJSON *v = small_vocab(extra, 5, false);
    char dir[512];
    write_gpt2_dir(ct_tmpdir_join(dir, sizeof dir, tmpdir, "commas"), v, "#version: 0.2\n\" ,\n, \"\n\" ,\"\n\" \"\n");
    cJSON_Delete(v);
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "%s", ct_last_error());
    if (!t) return;
    EXPECT_IDS(t, "\",\"", 0, 258);
    EXPECT_IDS(t, "\"\",\"", 0, 34, 258);
    EXPECT_IDS(t, "\"\",\"\"", 0, 34, 258, 34);
    EXPECT_IDS(t, "\"\"\",\",\"", 0, 259, 256, 258);
    EXPECT_IDS(t, "\",\",\"", 0, 256, 258);
    EXPECT_IDS(t, "\"\"\"\"", 0, 259, 259);
    EXPECT_IDS(t, ",,\"", 0, 44, 257);
    ct_tokenizer_free(t);
    /* With the four merges in every order, every string of '"' and ',' up to
     * 12 long: heap BPE == the plain loop. Some orders make a real pair and an
     * alias share the rank being applied, with overlapping occurrences, which
     * the heap hands to the plain loop. */
    static const char *const merges[4] = {"\" ,", ", \"", "\" ,\"", "\" \""};
    int bad = 0, orders = 0;
    for (int perm = 0; perm < 24; perm++) {
        int idx[4] = {0, 1, 2, 3}, f = perm;
        for (int k = 0; k < 4; k++) { /* the perm-th permutation, factorial base */
            int j = k + f % (4 - k);
            f /= 4 - k;
            int tmp = idx[k];
            idx[k] = idx[j];
            idx[j] = tmp;
        }
        char bpe[128];
        snprintf(bpe, sizeof bpe, "#version: 0.2\n%s\n%s\n%s\n%s\n", merges[idx[0]], merges[idx[1]], merges[idx[2]],
                 merges[idx[3]]);
        v = small_vocab(extra, 5, false);
        write_gpt2_dir(dir, v, bpe);
        cJSON_Delete(v);
        if (ct_tokenizer_load(&t, dir) != CT_OK) {
            CHECK_MSG(false, "%s", ct_last_error());
            continue;
        }
        orders++;
        ct_tok_state *s = ct_tok_state_new(t);
        uint8_t w[12];
        int32_t a[12], b[12];
        for (int n = 2; n <= 12; n++) {
            for (uint32_t m = 0; m < (1u << n); m++) {
                for (int k = 0; k < n; k++) w[k] = (m >> k & 1) ? ',' : '"';
                size_t ka = tok_bpe_word(t, s, w, (size_t)n, a, true), kb = tok_bpe_word(t, s, w, (size_t)n, b, false);
                if (ka != kb || memcmp(a, b, ka * sizeof *a) != 0) bad++;
            }
        }
        ct_tok_state_free(s);
        ct_tokenizer_free(t);
    }
    CHECK(orders == 24);
    CHECK_MSG(bad == 0, "%d comma words where heap BPE and the reference loop differ", bad);

    /* An alias and a real pair of the same rank overlapping in one word:
     * [",#] ["] [#,"] holds (",# + ") and (" + #,") at rank 4. The reference
     * takes the rightmost, so the word ends as [",#] ["#,"]. (Ids from
     * Encoder.js with this vocabulary.) */
    static const char *const extra3[] = {"\",", "\",#", ",\"", "#,\"", "\"#,\"", "\",#\""};
    v = small_vocab(extra3, 6, false);
    write_gpt2_dir(dir, v, "#version: 0.2\n\" ,\n\", #\n, \"\n# ,\"\n\" #,\"\n");
    cJSON_Delete(v);
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "%s", ct_last_error());
    if (!t) return;
    EXPECT_IDS(t, "\",#\"#,\"", 0, 257, 260);
    EXPECT_IDS(t, "\",#\"#,\"#,\"", 0, 257, 260, 259);
    EXPECT_IDS(t, "\",#\"", 0, 261);
    ct_tokenizer_free(t);
}

static void test_malformed(void) {
    char dir[512], p[600];
    static const char *const extra[] = {"ab"};
    cJSON *v = small_vocab(extra, 1, true);
    /* bad JSON in encoder.json */
    ct_tmpdir_join(dir, sizeof dir, tmpdir, "bad_json");
    write_gpt2_dir(dir, v, "#version: 0.2\na b\n");
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "encoder.json"), "{\"a\": 1, ", 9) == 0);
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "encoder.json", "not valid JSON");
    /* a merge line with one symbol, and with three */
    ct_tmpdir_join(dir, sizeof dir, tmpdir, "bad_line");
    write_gpt2_dir(dir, v, "#version: 0.2\na b\nab\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "vocab.bpe:3:", "two symbols");
    write_gpt2_dir(dir, v, "#version: 0.2\na b\n\na b c\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "vocab.bpe:3:", "blank line");
    write_gpt2_dir(dir, v, "#version: 0.2\na b c\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "vocab.bpe:2:", "two symbols");
    /* a merge naming an unknown symbol, and one whose result is unknown */
    write_gpt2_dir(dir, v, "#version: 0.2\na b\nab zz\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "vocab.bpe:3:", "\"zz\" is not a token");
    write_gpt2_dir(dir, v, "#version: 0.2\na b\nab c\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "vocab.bpe:3:", "\"abc\" is not a token");
    /* without the #version line the first line is a merge; a trailing blank line is fine */
    write_gpt2_dir(dir, v, "a b\n\n");
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "%s", ct_last_error());
    if (t) {
        EXPECT_IDS(t, "ab", 0, 256);
        CHECK(t->n_merges == 1);
    }
    ct_tokenizer_free(t);
    /* missing vocab.bpe, missing directory, empty directory */
    CHECK(remove(ct_tmpdir_join(p, sizeof p, dir, "vocab.bpe")) == 0);
    expect_load_fail(__LINE__, dir, CT_ERR_IO, "vocab.bpe", NULL);
    expect_load_fail(__LINE__, "/nonexistent/tokenizer", CT_ERR_IO, "/nonexistent/tokenizer", NULL);
    CHECK(strstr(ct_last_hint(), "fetch_data.sh") != NULL);
    ct_tmpdir_join(dir, sizeof dir, tmpdir, "empty_dir");
    CHECK(ct_mkdir_p(dir) == CT_OK);
    expect_load_fail(__LINE__, dir, CT_ERR_IO, "neither encoder.json", NULL);
    /* duplicate id, id out of range, a missing byte token, a token outside the byte alphabet */
    ct_tmpdir_join(dir, sizeof dir, tmpdir, "bad_vocab");
    cJSON_AddNumberToObject(v, "ba", 256);
    write_gpt2_dir(dir, v, "#version: 0.2\na b\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "id 256 is given to two tokens", NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(v, "ba");
    cJSON_AddNumberToObject(v, "ba", -3);
    write_gpt2_dir(dir, v, "#version: 0.2\na b\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "\"ba\" is not an integer", NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(v, "ba");
    cJSON_AddNumberToObject(v, "b a", 300);
    write_gpt2_dir(dir, v, "#version: 0.2\na b\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "U+0020", "byte alphabet");
    cJSON_DeleteItemFromObjectCaseSensitive(v, "b a");
    cJSON_DeleteItemFromObjectCaseSensitive(v, "z");
    write_gpt2_dir(dir, v, "#version: 0.2\na b\n");
    expect_load_fail(__LINE__, dir, CT_ERR_FORMAT, "no token for byte 0x7A", NULL);
    cJSON_Delete(v);

    /* tokenizer.json: not BPE, another pre-tokenizer, a bad merge entry, bad JSON */
    const char *cases[][3] = {
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model.type is WordPiece", NULL},
        {"{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
         "not ByteLevel", NULL},
        {"{\"normalizer\": {\"type\": \"Lowercase\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": "
         "{\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
         "normalizer.type is \"Lowercase\"", NULL},
        {"{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": "
         "\"Whitespace\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
         "pre_tokenizer.pretokenizers[1].type is \"Whitespace\"", NULL},
        {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\p{Han}+\"}, \"behavior\": "
         "\"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
         "pre_tokenizer.pattern.Regex", "\\p{Han}"},
        {"{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}, "
         "\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
         "pre_tokenizer.behavior is \"Sideways\"", NULL},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "model.type is Unigram", NULL},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
         "\"merges\": [\"a\"]}}",
         "model.merges[0]", "two symbols"},
        {"{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
         "\"merges\": 3}}",
         "model.merges is not an array", NULL},
        {"{\"model\": [", "not valid JSON", NULL},
        {"[1, 2]", "expected a JSON object", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_tmpdir_join(p, sizeof p, tmpdir, "bad_tokenizer.json");
        CHECK(ct_tmpdir_write(p, cases[i][0], strlen(cases[i][0])) == 0);
        expect_load_fail(__LINE__, p, CT_ERR_FORMAT, cases[i][1], cases[i][2] ? cases[i][2] : "bad_tokenizer.json");
    }
    /* a merge naming an unknown symbol in tokenizer.json */
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "pre_tokenizer"), "type", "ByteLevel");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", small_vocab(extra, 1, false));
    cJSON *m = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddItemToArray(m, cJSON_CreateString("a b"));
    const char *pair[2] = {"ab", "q\xC4\x80"};
    cJSON_AddItemToArray(m, cJSON_CreateStringArray(pair, 2));
    write_json(p, root);
    expect_load_fail(__LINE__, p, CT_ERR_FORMAT, "model.merges[1]", "is not a token");
    cJSON_Delete(root);
}

/* ------------------------------------------------------------ main */

static const char *find_gpt2_dir(void) {
    static const char *const candidates[] = {"../data/gpt2-tokenizer", "data/gpt2-tokenizer", "../../data/gpt2-tokenizer"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/vocab.bpe", candidates[i]);
        if (ct_tmpdir_size(p) > 0) return candidates[i];
    }
    return NULL;
}

int main(void) {
    gpt2_dir = find_gpt2_dir();
    if (!gpt2_dir) {
        fprintf(stderr, "test_tokenizer: GPT-2's tokenizer files are missing (looked for ../data/gpt2-tokenizer "
                        "from the build directory)\n  hint: run scripts/fetch_data.sh at the repository root\n");
        return 1;
    }
    if (!ct_tmpdir_make(tmpdir, sizeof tmpdir, "tokenizer")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, gpt2_dir) == CT_OK, "load %s: %s", gpt2_dir, ct_last_error());
    if (t) {
        test_known(t);
        test_decode(t);
        test_round_trip(t);
        test_invalid_utf8(t);
        test_engines(t);
        test_bpe_paths(t);
        test_cache_limits(t);
        test_threads(t);
        test_hf_json(t);
        /* loading twice gives the same identity */
        ct_tokenizer *t2 = NULL;
        CHECK(ct_tokenizer_load(&t2, gpt2_dir) == CT_OK && t2 &&
              strcmp(ct_tokenizer_identity(t2), ct_tokenizer_identity(t)) == 0);
        ct_tokenizer_free(t2);
    }
    ct_tokenizer_free(t);
    ct_tokenizer_free(NULL);
    test_toy_bpe();
    test_comma_aliases();
    test_malformed();
    CHECK(ct_tmpdir_remove(tmpdir) == 0);
    return ct_test_result("test_tokenizer");
}
