/*
 * SentencePiece-BPE tokenizer tests: LLaMA's vocabulary in
 * data/llama-tokenizer (run scripts/fetch_data.sh first) with ids known from
 * llama-tokenizer-js, and small handcrafted tokenizer.json files for what the
 * corpus rarely shows: merge order and ties, the normalizer form against the
 * Metaspace forms (prefix rules, splitting), special tokens, byte fallback and
 * a missing byte token, a vocabulary where pieces must not be cut, BOS/EOS
 * from post_processor and tokenizer_config.json, decoding, files of a kind not
 * supported, and a vocabulary over 65,536 ids that `prepare` writes as
 * version 2 (uint32) shards which the loader reads back.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/data.h"
#include "ctrain/train.h"
#include "data/prepare/prepare.h"
#include "data/shard/shard.h"
#include "data/tokenizer/tokenizer_impl.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[128];

/* ------------------------------------------------------------ helpers */

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

/* decode(ids) == want */
static void expect_decode(int line, const ct_tokenizer *t, const int32_t *ids, size_t n, const char *want) {
    char *back = NULL;
    size_t len = 0;
    ct_status st = ct_tokenizer_decode(t, ids, n, &back, &len);
    CHECK_MSG(st == CT_OK && len == strlen(want) && memcmp(back, want, len) == 0,
              "line %d: decode gave \"%s\", expected \"%s\"", line, back ? back : "(error)", want);
    free(back);
}
#define EXPECT_DECODE(t, want, ...)                                                       \
    do {                                                                                  \
        static const int32_t ids_[] = {__VA_ARGS__};                                     \
        expect_decode(__LINE__, t, ids_, sizeof ids_ / sizeof ids_[0], want);             \
    } while (0)

static void write_json(const char *path, cJSON *o) {
    char *s = cJSON_Print(o);
    CHECK(s && ct_tmpdir_write(path, s, strlen(s)) == 0);
    free(s);
}

/* A small SentencePiece-style tokenizer.json: <unk> <s> </s> (ids 0-2, added
 * as special), the 256 byte tokens <0x00>..<0xFF> (ids 3-258), then `extra`
 * from id 259 on, `merges` in rank order, and the JSON texts of the
 * normalizer and pre_tokenizer (NULL: null). */
typedef struct spec {
    const char *normalizer, *pre_tokenizer, *post_processor;
    const char *const *extra;
    int n_extra;
    const char *const *merges;
    int n_merges;
    int skip_byte;      /* a byte token left out, or -1 */
    bool no_unk;        /* no model.unk_token */
    const char *model_key, *model_value; /* one more model member (JSON text), or NULL */
} spec;

#define NORMALIZER_FORM                                                                              \
    "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, " \
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}"

static cJSON *parse_or_null(const char *text) {
    cJSON *j = text ? cJSON_Parse(text) : cJSON_CreateNull();
    CHECK_MSG(j != NULL, "test JSON does not parse: %s", text);
    return j;
}

static cJSON *spec_json(const spec *sp) {
    cJSON *root = cJSON_CreateObject();
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    static const char *const names[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", i);
        cJSON_AddStringToObject(a, "content", names[i]);
        cJSON_AddBoolToObject(a, "special", true);
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddItemToObject(root, "normalizer", parse_or_null(sp->normalizer));
    cJSON_AddItemToObject(root, "pre_tokenizer", parse_or_null(sp->pre_tokenizer));
    if (sp->post_processor) cJSON_AddItemToObject(root, "post_processor", parse_or_null(sp->post_processor));
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddBoolToObject(model, "byte_fallback", true);
    if (!sp->no_unk) cJSON_AddStringToObject(model, "unk_token", "<unk>");
    if (sp->model_key) cJSON_AddItemToObject(model, sp->model_key, parse_or_null(sp->model_value));
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(vocab, names[i], i);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        if (b != sp->skip_byte) cJSON_AddNumberToObject(vocab, name, 3 + b);
    }
    for (int i = 0; i < sp->n_extra; i++) cJSON_AddNumberToObject(vocab, sp->extra[i], 259 + i);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < sp->n_merges; i++) cJSON_AddItemToArray(merges, cJSON_CreateString(sp->merges[i]));
    return root;
}

/* Write sp as DIR/tokenizer.json (DIR = tmpdir/name) and load it. */
static ct_tokenizer *spec_load(const spec *sp, const char *name, char *dir, size_t cap) {
    char p[600];
    ct_tmpdir_join(dir, cap, tmpdir, name);
    CHECK(ct_mkdir_p(dir) == CT_OK);
    cJSON *j = spec_json(sp);
    write_json(ct_tmpdir_join(p, sizeof p, dir, "tokenizer.json"), j);
    cJSON_Delete(j);
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "load %s: %s", name, ct_last_error());
    return t;
}

static void expect_load_fail(int line, const char *path, const char *f1, const char *f2) {
    ct_tokenizer *t = NULL;
    ct_status st = ct_tokenizer_load(&t, path);
    const char *msg = ct_last_error();
    CHECK_MSG(st == CT_ERR_FORMAT && !t && strstr(msg, path) && strstr(msg, f1) && (!f2 || strstr(msg, f2)),
              "line %d: expected CT_ERR_FORMAT naming %s, \"%s\"%s%s%s; got %d: %s", line, path, f1, f2 ? " and \"" : "",
              f2 ? f2 : "", f2 ? "\"" : "", (int)st, msg);
    ct_tokenizer_free(t);
}

/* The toy vocabulary: ids from 259 on. */
enum { MK = 259, A, B, C, MK2, MKA, MKB, AB, BC, AA, MKAB, X, Y, E_ACUTE };
static const char *const toy_tokens[] = {"\xE2\x96\x81", "a", "b", "c", "\xE2\x96\x81\xE2\x96\x81",
                                         "\xE2\x96\x81" "a", "\xE2\x96\x81" "b", "ab", "bc", "aa",
                                         "\xE2\x96\x81" "ab", "x", "y", "\xC3\xA9"};
static const char *const toy_merges[] = {"\xE2\x96\x81 \xE2\x96\x81", "a a", "\xE2\x96\x81 a", "\xE2\x96\x81 b",
                                         "a b", "b c", "\xE2\x96\x81" "a b"};
#define TOY(norm, pre)                                                                                        \
    (spec) { norm, pre, NULL, toy_tokens, (int)(sizeof toy_tokens / sizeof *toy_tokens), toy_merges,          \
             (int)(sizeof toy_merges / sizeof *toy_merges), -1, false, NULL, NULL }

/* ------------------------------------------------------------ toy vocabularies */

static void test_toy_normalizer(void) {
    char dir[512];
    spec sp = TOY(NORMALIZER_FORM, NULL);
    ct_tokenizer *t = spec_load(&sp, "toy_norm", dir, sizeof dir);
    if (!t) return;
    CHECK(ct_tokenizer_kind(t) == CT_TOK_KIND_SPM_BPE);
    CHECK(ct_tokenizer_vocab_size(t) == E_ACUTE + 1);
    CHECK(ct_tokenizer_bos(t) == 1 && ct_tokenizer_eot(t) == 2);
    CHECK(strncmp(ct_tokenizer_identity(t), "spm-bpe:", 8) == 0);
    CHECK(t->spm.split_safe && !t->spm.split_all);
    EXPECT_IDS(t, "a", 0, MKA);
    ct_tokens v = {0};
    CHECK(enc(t, NULL, "", 0, 0, &v) && v.n == 0); /* no "▁" for the empty text */
    /* "▁a▁▁b": "▁ ▁" has the lowest rank, then "▁ a"; "▁ b" is left stale */
    EXPECT_IDS(t, "a  b", 0, MKA, MK2, B);
    /* equal ranks merge leftmost first: "▁ a a a" -> "▁" "aa" "a" */
    EXPECT_IDS(t, "aaa", 0, MK, AA, A);
    /* rank order: "▁ a" (2) before "b c" (5) before "▁a b" (6) */
    EXPECT_IDS(t, "abc", 0, MKA, BC);
    EXPECT_IDS(t, "ab", 0, MKAB);
    /* the Prepend normalizer puts "▁" before a leading space too */
    EXPECT_IDS(t, " a", 0, MK2, A);
    EXPECT_IDS(t, " ", 0, MK2);
    /* byte fallback: "ü" (C3 BC) and "€" (E2 82 AC) are no tokens; "é" is */
    EXPECT_IDS(t, "x\xC3\xBC\xC3\xA9\xE2\x82\xAC", 0, MK, X, 3 + 0xC3, 3 + 0xBC, E_ACUTE, 3 + 0xE2, 3 + 0x82,
               3 + 0xAC);
    EXPECT_IDS(t, "a\nb", 0, MKA, 3 + '\n', B);
    /* special tokens: text unless allowed; each piece gets its own "▁" */
    EXPECT_IDS(t, "a<s>a", 0, MKA, 3 + '<', 3 + 's', 3 + '>', A);
    EXPECT_IDS(t, "a<s>a", CT_TOK_ALLOW_SPECIAL, MKA, 1, MKA);
    EXPECT_IDS(t, "<s></s>", CT_TOK_ALLOW_SPECIAL, 1, 2);
    EXPECT_IDS(t, "<unk>b", CT_TOK_ALLOW_SPECIAL, 0, MKB);
    /* invalid UTF-8: refused with its offset, or bytes in lossy mode */
    CHECK(ct_tokenizer_encode(t, NULL, "ab\xFF", 3, 0, &v) == CT_ERR_FORMAT && v.n == 0);
    CHECK(strstr(ct_last_error(), "byte offset 2") != NULL);
    CHECK(enc(t, NULL, "ab\xFF\xC3", 4, CT_TOK_LOSSY, &v));
    static const int32_t lossy[] = {MKAB, 3 + 0xFF, 3 + 0xC3};
    CHECK(ids_equal(&v, lossy, 3));
    expect_decode(__LINE__, t, v.ids, v.n, "ab\xFF\xC3");
    ct_tokens_free(&v);
    /* decode: "▁" is a space, the added prefix is dropped at the start and after special tokens */
    EXPECT_DECODE(t, "a  b", MKA, MK2, B);
    EXPECT_DECODE(t, " a", MK2, A);
    EXPECT_DECODE(t, "a<s>a", MKA, 1, MKA);
    EXPECT_DECODE(t, "a<s> a", MKA, 1, MK2, A);
    EXPECT_DECODE(t, "x\xC3\xBC", MK, X, 3 + 0xC3, 3 + 0xBC);
    EXPECT_DECODE(t, "b a", B, MKA); /* no prefix to drop on a token without "▁" */
    expect_decode(__LINE__, t, NULL, 0, "");
    size_t len = 0;
    const char *bytes = ct_tokenizer_token_bytes(t, MKAB, &len);
    CHECK(bytes && len == 3 && memcmp(bytes, " ab", 3) == 0);
    bytes = ct_tokenizer_token_bytes(t, 3 + 0x41, &len);
    CHECK(bytes && len == 1 && bytes[0] == 'A');
    char *text = NULL;
    static const int32_t bad_id[] = {MKA, 5000};
    CHECK(ct_tokenizer_decode(t, bad_id, 2, &text, NULL) == CT_ERR_ARG && !text);
    CHECK(strstr(ct_last_error(), "position 1") != NULL);
    ct_tokenizer_free(t);
}

static void test_toy_metaspace(void) {
    char dir[512];
    /* the older form: Metaspace with add_prefix_space, splitting at every "▁" */
    spec sp = TOY(NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"add_prefix_space\": true}");
    ct_tokenizer *t = spec_load(&sp, "toy_meta_old", dir, sizeof dir);
    if (t) {
        CHECK(t->spm.split_all && t->spm.prepend == TOK_PREPEND_ALWAYS && t->spm.prepend_unless_mark);
        EXPECT_IDS(t, "a  b", 0, MKA, MK, MKB); /* pieces "▁a" "▁" "▁b" */
        EXPECT_IDS(t, " a", 0, MKA);            /* no second "▁" before a leading space */
        EXPECT_IDS(t, "\xE2\x96\x81" "a", 0, MKA);
        EXPECT_IDS(t, "a<s>a", CT_TOK_ALLOW_SPECIAL, MKA, 1, MKA);
        EXPECT_DECODE(t, "a b", MKA, MKB);
    }
    char id_old[32];
    snprintf(id_old, sizeof id_old, "%s", t ? ct_tokenizer_identity(t) : "");
    ct_tokenizer_free(t);
    /* the newer form: prepend_scheme first, no split */
    sp = TOY(NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", "
                   "\"split\": false}");
    t = spec_load(&sp, "toy_meta_first", dir, sizeof dir);
    if (t) {
        CHECK(!t->spm.split_all && t->spm.prepend == TOK_PREPEND_FIRST);
        CHECK(strcmp(id_old, ct_tokenizer_identity(t)) != 0); /* the settings are part of the identity */
        EXPECT_IDS(t, "a  b", 0, MKA, MK2, B);
        EXPECT_IDS(t, "a<s>a", CT_TOK_ALLOW_SPECIAL, MKA, 1, A);
        EXPECT_IDS(t, "<s>a", CT_TOK_ALLOW_SPECIAL, 1, A);
        EXPECT_DECODE(t, "a<s>a", MKA, 1, A);
        EXPECT_DECODE(t, "<s> a", 1, MKA); /* only the very first prefix is dropped */
    }
    ct_tokenizer_free(t);
    /* prepend_scheme never, in a one-step Sequence */
    sp = TOY(NULL, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Metaspace\", \"prepend_scheme\": "
                   "\"never\"}]}");
    t = spec_load(&sp, "toy_meta_never", dir, sizeof dir);
    if (t) {
        EXPECT_IDS(t, "ab", 0, AB);
        EXPECT_IDS(t, "b a", 0, B, MKA);
        EXPECT_DECODE(t, " ab", MK, AB);
    }
    ct_tokenizer_free(t);
}

/* A vocabulary with a token that holds "▁" after another character: the text
 * must then not be cut into pieces at such a "▁". */
static void test_toy_unsafe_split(void) {
    static const char *const tokens[] = {"\xE2\x96\x81", "x", "y", "x\xE2\x96\x81", "x\xE2\x96\x81y"};
    static const char *const merges[] = {"x \xE2\x96\x81", "x\xE2\x96\x81 y"};
    spec sp = {NORMALIZER_FORM, NULL, NULL, tokens, 5, merges, 2, -1, false, NULL, NULL};
    char dir[512];
    ct_tokenizer *t = spec_load(&sp, "toy_unsafe", dir, sizeof dir);
    if (!t) return;
    CHECK(!t->spm.split_safe);
    EXPECT_IDS(t, "x y", 0, 259, 263); /* "▁" "x▁y": a merge across the space */
    EXPECT_IDS(t, "y x", 0, 259, 261, 259, 260); /* no "y▁" merge */
    ct_tokenizer_free(t);
}

static void test_toy_bytes_and_ids(void) {
    char dir[512], p[600];
    /* a missing byte token falls back to <unk> */
    spec sp = TOY(NORMALIZER_FORM, NULL);
    sp.skip_byte = 'A';
    ct_tokenizer *t = spec_load(&sp, "toy_nobyte", dir, sizeof dir);
    if (t) EXPECT_IDS(t, "A", 0, MK, 0);
    ct_tokenizer_free(t);
    /* ... and is an error without one */
    sp.no_unk = true;
    cJSON *j = spec_json(&sp);
    write_json(ct_tmpdir_join(p, sizeof p, dir, "tokenizer.json"), j);
    cJSON_Delete(j);
    expect_load_fail(__LINE__, p, "<0x41>", "unk_token");
    /* BOS from post_processor; then tokenizer_config.json overrides both */
    sp = TOY(NORMALIZER_FORM, NULL);
    sp.post_processor = "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<unk>\", "
                        "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": "
                        "{\"<unk>\": {\"id\": \"<unk>\", \"ids\": [0], \"tokens\": [\"<unk>\"]}}}";
    t = spec_load(&sp, "toy_ids", dir, sizeof dir);
    if (t) CHECK(ct_tokenizer_bos(t) == 0 && ct_tokenizer_eot(t) == 2);
    ct_tokenizer_free(t);
    const char *cfg = "{\"bos_token\": {\"content\": \"</s>\", \"lstrip\": false}, \"eos_token\": \"<s>\"}";
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "tokenizer_config.json"), cfg, strlen(cfg)) == 0);
    t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "%s", ct_last_error());
    if (t) CHECK(ct_tokenizer_bos(t) == 2 && ct_tokenizer_eot(t) == 1);
    ct_tokenizer_free(t);
    cfg = "{\"bos_token\": \"<bos>\"}";
    CHECK(ct_tmpdir_write(p, cfg, strlen(cfg)) == 0);
    expect_load_fail(__LINE__, dir, "tokenizer_config.json", "bos_token \"<bos>\" is not a token");
    CHECK(ct_tmpdir_write(p, "{\"bos", 5) == 0);
    expect_load_fail(__LINE__, dir, "tokenizer_config.json", "not a JSON object");
}

/* Files of kinds not supported: CT_ERR_FORMAT naming the file and the key. */
static void test_unsupported(void) {
    char dir[512], p[600];
    ct_tmpdir_join(dir, sizeof dir, tmpdir, "unsupported");
    CHECK(ct_mkdir_p(dir) == CT_OK);
    ct_tmpdir_join(p, sizeof p, dir, "tokenizer.json");
    struct {
        const char *normalizer, *pre, *key, *value, *f1, *f2;
    } cases[] = {
        {NULL, NULL, "type", "\"WordPiece\"", "model.type is WordPiece", "supported"},
        {NULL, NULL, "type", "\"Unigram\"", "model.type is Unigram", "byte_fallback"},
        {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, "
         "{\"type\": \"BertNormalizer\"}]}",
         NULL, NULL, NULL, "normalizer.normalizers[1].type is \"BertNormalizer\"", "Prepend"},
        {"{\"type\": \"Lowercase\"}", NULL, NULL, NULL, "normalizer.type is \"Lowercase\"", NULL},
        {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}, "
         "\"content\": \"\\u2581\"}]}",
         NULL, NULL, NULL, "normalizer.normalizers[0]", "Replace"},
        {"{\"type\": \"Prepend\", \"prepend\": 5}", NULL, NULL, NULL, "normalizer.prepend is not a string", NULL},
        {NULL, "{\"type\": \"Whitespace\"}", NULL, NULL, "pre_tokenizer.type is \"Whitespace\"", "Metaspace"},
        {NULL, "{\"type\": \"ByteLevel\"}", NULL, NULL, "pre_tokenizer.type is \"ByteLevel\"", NULL},
        {NULL, "{\"type\": \"Metaspace\", \"replacement\": \"_\"}", NULL, NULL, "pre_tokenizer.replacement", NULL},
        {NULL, "{\"type\": \"Metaspace\", \"prepend_scheme\": \"sometimes\"}", NULL, NULL,
         "pre_tokenizer.prepend_scheme is \"sometimes\"", NULL},
        {NULL, "{\"type\": \"Metaspace\", \"split\": 1}", NULL, NULL, "pre_tokenizer.split", NULL},
        {NORMALIZER_FORM, NULL, "dropout", "0.1", "model.dropout", NULL},
        {NORMALIZER_FORM, NULL, "end_of_word_suffix", "\"</w>\"", "model.end_of_word_suffix", NULL},
        {NORMALIZER_FORM, NULL, "continuing_subword_prefix", "\"##\"", "model.continuing_subword_prefix", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spec sp = TOY(cases[i].normalizer, cases[i].pre);
        bool type = cases[i].key && !strcmp(cases[i].key, "type");
        sp.model_key = type ? NULL : cases[i].key;
        sp.model_value = cases[i].value;
        cJSON *j = spec_json(&sp);
        if (type)
            cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "model"), "type",
                                                   parse_or_null(cases[i].value));
        write_json(p, j);
        cJSON_Delete(j);
        expect_load_fail(__LINE__, p, cases[i].f1, cases[i].f2);
    }
    /* BPE without byte fallback and not byte-level */
    spec sp = TOY(NULL, "{\"type\": \"Metaspace\"}");
    cJSON *j = spec_json(&sp);
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "model"), "byte_fallback",
                                           cJSON_CreateFalse());
    write_json(p, j);
    cJSON_Delete(j);
    expect_load_fail(__LINE__, p, "not ByteLevel", "byte_fallback");
    /* merges naming what is not in the vocabulary */
    static const char *const bad_merges[][1] = {{"a q"}, {"a c"}};
    for (int i = 0; i < 2; i++) {
        sp = TOY(NORMALIZER_FORM, NULL);
        sp.merges = bad_merges[i];
        sp.n_merges = 1;
        j = spec_json(&sp);
        write_json(p, j);
        cJSON_Delete(j);
        expect_load_fail(__LINE__, p, "model.merges[0]", i == 0 ? "\"q\" is not a token" : "\"ac\" is not a token");
    }
}

/* ------------------------------------------------------------ LLaMA's vocabulary */

static const char *const pieces[] = {"a", "Z", "the", "\xC3\xA9", "e\xCC\x81", "\xE4\xB8\xAD", "1", "42", "'", " ",
                                     "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\xE2\x96\x81", "\xE3\x80\x80", "!",
                                     ".", "\xF0\x9F\x98\x80", "\x00", "ing", "ed", "<s>", "\xEE\x80\x80",
                                     "\xF0\xA0\x80\x80", "-", "Hello", " world", "\xEF\xBB\xBF"};

static size_t random_text(char *buf, size_t cap, uint64_t *rng) {
    size_t n = 0;
    int k = 1 + (int)((*rng >> 33) % 60);
    for (int i = 0; i < k; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        const char *p = pieces[(*rng >> 33) % (sizeof pieces / sizeof *pieces)];
        size_t len = p[0] ? strlen(p) : 1; /* "\x00" is one NUL byte */
        if (n + len > cap) break;
        memcpy(buf + n, p, len);
        n += len;
    }
    return n;
}

static void test_llama(const char *dir) {
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "load %s: %s", dir, ct_last_error());
    if (!t) return;
    CHECK(ct_tokenizer_kind(t) == CT_TOK_KIND_SPM_BPE && ct_tokenizer_vocab_size(t) == 32000);
    CHECK(ct_tokenizer_bos(t) == 1 && ct_tokenizer_eot(t) == 2);
    CHECK(t->spm.split_safe && t->spm.prepend == TOK_PREPEND_ALWAYS && !t->spm.prepend_unless_mark);
    /* ids from llama-tokenizer-js */
    EXPECT_IDS(t, "Hello world!", 0, 15043, 3186, 29991);
    EXPECT_IDS(t, "a  b", 0, 263, 29871, 289);
    EXPECT_IDS(t, " ", 0, 259);
    EXPECT_IDS(t, "\n", 0, 29871, 13);
    EXPECT_DECODE(t, "Hello world!", 15043, 3186, 29991);
    EXPECT_DECODE(t, "<s>Hello world!</s>", 1, 15043, 3186, 29991, 2); /* special tokens give their text */
    /* the pieces of the text give the ids of the whole text, with a fresh state and a reused
     * one (the word cache), and decode back to the text */
    ct_tokenizer *whole = NULL;
    CHECK(ct_tokenizer_load(&whole, dir) == CT_OK);
    if (whole) whole->spm.split_safe = false;
    ct_tok_state *s = ct_tok_state_new(t), *ws = whole ? ct_tok_state_new(whole) : NULL;
    ct_tokens a = {0}, b = {0}, c = {0};
    uint64_t rng = 42;
    int bad = 0, bad_rt = 0;
    static char text[1 << 16];
    for (int i = 0; i < 3000 && ws && s; i++) {
        size_t n = random_text(text, sizeof text, &rng);
        if (i == 2999) { /* one long text: 60 KB */
            n = 0;
            while (n + 400 < sizeof text) n += random_text(text + n, 400, &rng);
        }
        /* a fresh state (empty cache) for every tenth text: making one costs more than encoding */
        bool fresh = i % 10 == 0;
        bool ok = enc(t, s, text, n, 0, &a) && enc(whole, ws, text, n, 0, &b) &&
                  (!fresh || enc(t, NULL, text, n, 0, &c));
        if (!ok || a.n != b.n || memcmp(a.ids, b.ids, a.n * sizeof *a.ids) ||
            (fresh && (a.n != c.n || memcmp(a.ids, c.ids, a.n * sizeof *a.ids))))
            bad++;
        char *back = NULL;
        size_t len = 0;
        if (ct_tokenizer_decode(t, a.ids, a.n, &back, &len) != CT_OK) {
            bad_rt++;
            continue;
        }
        /* a literal "▁" comes back as a space */
        size_t j = 0, k = 0;
        bool same = true;
        while (j < n && k < len && same) {
            if (j + 3 <= n && memcmp(text + j, "\xE2\x96\x81", 3) == 0) {
                same = back[k] == ' ';
                j += 3;
            } else {
                same = back[k] == text[j];
                j++;
            }
            k++;
        }
        if (!same || j != n || k != len) bad_rt++;
        free(back);
    }
    CHECK_MSG(bad == 0, "%d texts encode differently in pieces, whole or with a fresh state", bad);
    CHECK_MSG(bad_rt == 0, "%d texts do not decode back", bad_rt);
    ct_tokens_free(&a);
    ct_tokens_free(&b);
    ct_tokens_free(&c);
    ct_tok_state_free(s);
    ct_tok_state_free(ws);
    ct_tokenizer_free(whole);
    ct_tokenizer_free(t);
}

/* ------------------------------------------------------------ shards */

/* Tokens of shard path (version checked), into out. */
static void read_shard(const char *path, int version, ct_tokens *out) {
    ct_shard *sh = NULL;
    CHECK_MSG(ct_shard_open(&sh, path) == CT_OK, "%s", ct_last_error());
    if (!sh) return;
    CHECK(ct_shard_token_bytes(sh) == (version == 1 ? 2 : 4));
    int64_t n = ct_shard_ntokens(sh);
    out->n = 0;
    for (int64_t i = 0; i < n; i++) ct_tokens_push(out, (int32_t)ct_shard_token(sh, i));
    ct_shard_close(sh);
}

/* prepare with a vocabulary of 70,000 ids writes version 2 shards that the
 * loader reads; with the toy vocabulary, version 1. */
static void test_wide_shards(void) {
    enum { N_IDS = 70000, HI_MK = 65600, HI_Z, HI_MKZ, HI_ZZ };
    static const char *const tokens[] = {"\xE2\x96\x81", "z", "\xE2\x96\x81z", "zz"};
    static const char *const merges[] = {"\xE2\x96\x81 z", "z z"};
    spec sp = {NORMALIZER_FORM, NULL, NULL, NULL, 0, merges, 2, -1, false, NULL, NULL};
    cJSON *j = spec_json(&sp);
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "model"), "vocab");
    for (int i = 0; i < 4; i++) cJSON_AddNumberToObject(vocab, tokens[i], HI_MK + i);
    for (int id = 259; id < N_IDS; id++) { /* filler, never produced by the text */
        if (id >= HI_MK && id < HI_MK + 4) continue;
        char name[24];
        snprintf(name, sizeof name, "<fill%d>", id);
        cJSON_AddNumberToObject(vocab, name, id);
    }
    char dir[512], p[600], out[600], text_path[600];
    ct_tmpdir_join(dir, sizeof dir, tmpdir, "wide");
    CHECK(ct_mkdir_p(dir) == CT_OK);
    write_json(ct_tmpdir_join(p, sizeof p, dir, "tokenizer.json"), j);
    cJSON_Delete(j);
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, dir) == CT_OK, "%s", ct_last_error());
    if (!t) return;
    CHECK(ct_tokenizer_vocab_size(t) == N_IDS);
    const char *text = "z zz zzz\nq z";
    /* pieces "▁z" "▁zz" "▁zzz\nq" "▁z"; "▁ z" merges before "z z" */
    EXPECT_IDS(t, text, 0, HI_MKZ, HI_MKZ, HI_Z, HI_MKZ, HI_ZZ, 3 + '\n', 3 + 'q', HI_MKZ);
    ct_tokens want = {0};
    ct_tokens_push(&want, ct_tokenizer_bos(t));
    CHECK(ct_tokenizer_encode(t, NULL, text, strlen(text), 0, &want) == CT_OK);
    ct_tmpdir_join(text_path, sizeof text_path, tmpdir, "wide.txt");
    CHECK(ct_tmpdir_write(text_path, text, strlen(text)) == 0);

    for (int pass = 0; pass < 2; pass++) { /* 0: 70,000 ids, version 2; 1: the toy vocabulary, version 1 */
        char toy[512];
        ct_tokenizer *tt = t;
        if (pass == 1) {
            spec ts = TOY(NORMALIZER_FORM, NULL);
            tt = spec_load(&ts, "toy_shards", toy, sizeof toy);
            if (!tt) break;
            want.n = 0;
            ct_tokens_push(&want, ct_tokenizer_bos(tt));
            CHECK(ct_tokenizer_encode(tt, NULL, text, strlen(text), 0, &want) == CT_OK);
        }
        ct_tmpdir_join(out, sizeof out, tmpdir, pass ? "wide_out1" : "wide_out2");
        const char *inputs[1] = {text_path};
        ct_prepare_opts o;
        memset(&o, 0, sizeof o);
        o.tokenizer = pass ? toy : dir;
        o.out_dir = out;
        o.inputs = inputs;
        o.n_inputs = 1;
        o.threads = 1;
        CHECK_MSG(ct_prepare_run(&o, NULL) == CT_OK, "prepare: %s", ct_last_error());
        ct_tokens got = {0};
        int version = pass ? 1 : 2;
        read_shard(ct_tmpdir_join(p, sizeof p, out, "train_000000.bin"), version, &got);
        CHECK_MSG(got.n == want.n && memcmp(got.ids, want.ids, got.n * sizeof *got.ids) == 0,
                  "pass %d: the shard holds BOS + the text's ids", pass);
        if (pass == 0) {
            /* the loader reads the uint32 tokens, and checks them against the vocabulary */
            ct_loader_opts lo = ct_loader_opts_default();
            lo.spec = out;
            lo.T = (int)want.n - 1;
            lo.vocab_size = N_IDS;
            lo.prefetch = 0;
            ct_loader *l = NULL;
            CHECK_MSG(ct_loader_init(&l, &lo) == CT_OK, "loader: %s", ct_last_error());
            int32_t in[16], tg[16];
            if (l && lo.T <= 16) {
                CHECK(ct_loader_next(l, in, tg) == CT_OK);
                CHECK(memcmp(in, want.ids, (size_t)lo.T * sizeof *in) == 0);
                CHECK(memcmp(tg, want.ids + 1, (size_t)lo.T * sizeof *tg) == 0);
            }
            ct_loader_free(l);
            lo.vocab_size = HI_MK; /* smaller than the ids the shard holds */
            l = NULL;
            CHECK(ct_loader_init(&l, &lo) != CT_OK && !l);
        }
        ct_tokens_free(&got);
        if (pass == 1) ct_tokenizer_free(tt);
    }
    ct_tokens_free(&want);
    ct_tokenizer_free(t);
}

/* ------------------------------------------------------------ main */

static const char *find_llama_dir(void) {
    static const char *const candidates[] = {"../data/llama-tokenizer", "data/llama-tokenizer",
                                             "../../data/llama-tokenizer"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/tokenizer.json", candidates[i]);
        if (ct_tmpdir_size(p) > 0) return candidates[i];
    }
    return NULL;
}

int main(void) {
    const char *llama = find_llama_dir();
    if (!llama) {
        fprintf(stderr, "test_tokenizer_spm: LLaMA's tokenizer is missing (looked for ../data/llama-tokenizer from "
                        "the build directory)\n  hint: run scripts/fetch_data.sh at the repository root\n");
        return 1;
    }
    if (!ct_tmpdir_make(tmpdir, sizeof tmpdir, "tokspm")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_toy_normalizer();
    test_toy_metaspace();
    test_toy_unsafe_split();
    test_toy_bytes_and_ids();
    test_unsupported();
    test_llama(llama);
    test_wide_shards();
    CHECK(ct_tmpdir_remove(tmpdir) == 0);
    return ct_test_result("test_tokenizer_spm");
}
