/*
 * Hostile and damaged files a fuzzing campaign found accepted silently, one
 * section each: tokenizer files (an empty token, a merge listed twice, a
 * stray id of 16,000,000, in encoder.json + vocab.bpe, a GPT-2 tokenizer.json
 * and a SentencePiece-style one), a tokenised-data cache entry whose
 * checksum verifies but whose ids are not the vocabulary's (prepare must
 * refuse it, tokenise again and replace it), the temp files a killed atomic
 * writer leaves (removed only for dead pids), and a malformed hw.json in a
 * run directory (a warning, and no hardware section).
 * Builds its own small tokenizers; needs no downloaded data.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cJSON.h>

#include "ct_test.h"
#include "ctrain/data.h"
#include "data/prepare/cache.h"
#include "data/prepare/prepare.h"
#include "data/shard/shard.h"
#include "io/fileio.h"
#include "tools/report.h"
#include "unit/ct_tmpdir.h"

static char tmp[128];

/* ------------------------------------------------------------ helpers */

/* Every log line at WARN and up, joined, to check what was warned. */
static char logged[16384];
static void log_keep(ct_log_level level, const char *msg, void *user) {
    (void)user;
    if (level < CT_LOG_WARN) return;
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof logged - n, "%s\n", msg);
}

static void write_json(const char *path, const cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    CHECK(s && ct_tmpdir_write(path, s, strlen(s)) == 0);
    free(s);
}

static void write_text(const char *path, const char *s) { CHECK(ct_tmpdir_write(path, s, strlen(s)) == 0); }

/* Load expecting CT_ERR_FORMAT with the file and each fragment in the message. */
static void expect_refused(int line, const char *path, const char *file, const char *f1, const char *f2) {
    ct_tokenizer *t = NULL;
    ct_status st = ct_tokenizer_load(&t, path);
    const char *msg = ct_last_error();
    bool ok = st == CT_ERR_FORMAT && !t && strstr(msg, file) && strstr(msg, f1) && (!f2 || strstr(msg, f2));
    CHECK_MSG(ok, "line %d: load(%s) gave %s \"%s\"; wanted CT_ERR_FORMAT naming %s with \"%s\" \"%s\"", line,
              path, ct_status_str(st), st ? msg : "", file, f1, f2 ? f2 : "");
    ct_tokenizer_free(t);
}

static void expect_loads(int line, const char *path) {
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, path) == CT_OK, "line %d: load(%s): %s", line, path, ct_last_error());
    ct_tokenizer_free(t);
}

/* GPT-2's byte alphabet (written independently of the library): the
 * code point showing byte b, as UTF-8 in out. */
static void byte_glyph(int b, char out[3]) {
    int cp = b, extra = 0;
    bool shown = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!shown) {
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) extra++;
        cp = 256 + extra;
    }
    memset(out, 0, 3);
    if (cp < 0x80) {
        out[0] = (char)cp;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
    }
}

/* GPT-2 style: the 256 byte tokens, "ab" (256), <|endoftext|> (257). */
static cJSON *gpt2_vocab(void) {
    cJSON *o = cJSON_CreateObject();
    for (int b = 0; b < 256; b++) {
        char g[3];
        byte_glyph(b, g);
        cJSON_AddNumberToObject(o, g, b);
    }
    cJSON_AddNumberToObject(o, "ab", 256);
    cJSON_AddNumberToObject(o, "<|endoftext|>", 257);
    return o;
}

static const char *gpt2_dir(const char *name, const cJSON *vocab, const char *bpe, char *dir, size_t cap) {
    char p[600];
    ct_tmpdir_join(dir, cap, tmp, name);
    CHECK(ct_mkdir_p(dir) == CT_OK);
    write_json(ct_tmpdir_join(p, sizeof p, dir, "encoder.json"), vocab);
    write_text(ct_tmpdir_join(p, sizeof p, dir, "vocab.bpe"), bpe);
    return dir;
}

/* A GPT-2 tokenizer.json around vocab (owned by the result) and merges. */
static cJSON *gpt2_hf(cJSON *vocab, const char *const *merges, int n) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "ByteLevel");
    cJSON_AddFalseToObject(pt, "add_prefix_space");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *eot = cJSON_CreateObject();
    cJSON_AddNumberToObject(eot, "id", 257);
    cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
    cJSON_AddTrueToObject(eot, "special");
    cJSON_AddItemToArray(added, eot);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON *m = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(m, cJSON_CreateString(merges[i]));
    return root;
}

#define SPM_MARK "\xE2\x96\x81"

/* SentencePiece style: <unk> <s> </s>, <0x00>..<0xFF> (3..258), then
 * "▁" "a" "b" "ab" "▁a" (259..263); merges "a b", "▁ a". */
static cJSON *spm_json(void) {
    cJSON *root = cJSON_CreateObject();
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    static const char *const names[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", i);
        cJSON_AddStringToObject(a, "content", names[i]);
        cJSON_AddTrueToObject(a, "special");
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddItemToObject(root, "normalizer",
                          cJSON_Parse("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", "
                                      "\"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": "
                                      "{\"String\": \" \"}, \"content\": \"\\u2581\"}]}"));
    cJSON_AddNullToObject(root, "pre_tokenizer");
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddTrueToObject(model, "byte_fallback");
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(vocab, names[i], i);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        cJSON_AddNumberToObject(vocab, name, 3 + b);
    }
    static const char *const extra[] = {SPM_MARK, "a", "b", "ab", SPM_MARK "a"};
    for (int i = 0; i < 5; i++) cJSON_AddNumberToObject(vocab, extra[i], 259 + i);
    cJSON *m = cJSON_AddArrayToObject(model, "merges");
    cJSON_AddItemToArray(m, cJSON_CreateString("a b"));
    cJSON_AddItemToArray(m, cJSON_CreateString(SPM_MARK " a"));
    return root;
}

static cJSON *model_of(cJSON *root) { return cJSON_GetObjectItemCaseSensitive(root, "model"); }
static cJSON *vocab_of(cJSON *root) { return cJSON_GetObjectItemCaseSensitive(model_of(root), "vocab"); }
static cJSON *merges_of(cJSON *root) { return cJSON_GetObjectItemCaseSensitive(model_of(root), "merges"); }

/* ------------------------------------------------------------ tokenizer files */

static void test_gpt2_files(void) {
    char dir[512], enc[600], bpe[600];
    cJSON *v = gpt2_vocab();
    gpt2_dir("g_ok", v, "#version: 0.2\na b\n", dir, sizeof dir);
    expect_loads(__LINE__, dir);

    /* an empty-string token */
    cJSON_AddNumberToObject(v, "", 258);
    gpt2_dir("g_empty", v, "#version: 0.2\na b\n", dir, sizeof dir);
    ct_tmpdir_join(enc, sizeof enc, dir, "encoder.json");
    expect_refused(__LINE__, dir, enc, "token \"\" (id 258) is the empty string", NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(v, "");

    /* a merge listed twice (also apart, and with CRLF line ends) */
    gpt2_dir("g_dup", v, "#version: 0.2\na b\na b\n", dir, sizeof dir);
    ct_tmpdir_join(bpe, sizeof bpe, dir, "vocab.bpe");
    expect_refused(__LINE__, dir, bpe, ":3: merge \"a\" \"b\" is listed twice", "(first at line 2)");
    cJSON_AddNumberToObject(v, "ba", 258);
    gpt2_dir("g_dup2", v, "#version: 0.2\na b\nb a\r\na b\r\n", dir, sizeof dir);
    expect_refused(__LINE__, dir, "vocab.bpe:4: merge \"a\" \"b\"", "(first at line 2)", NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(v, "ba");

    /* a stray id of 16,000,000 (below 2^24, but 260 tokens) */
    cJSON_AddNumberToObject(v, "ba", 16000000);
    gpt2_dir("g_huge", v, "#version: 0.2\na b\n", dir, sizeof dir);
    ct_tmpdir_join(enc, sizeof enc, dir, "encoder.json");
    expect_refused(__LINE__, dir, enc, "token \"ba\" has id 16000000", "only 259 tokens");
    cJSON_DeleteItemFromObjectCaseSensitive(v, "ba");
    /* the bound: 259 tokens may use ids up to 2 * 259 - 1 = 517, not 518 */
    cJSON_AddNumberToObject(v, "ba", 517);
    gpt2_dir("g_gap_ok", v, "#version: 0.2\na b\n", dir, sizeof dir);
    expect_loads(__LINE__, dir);
    cJSON_DeleteItemFromObjectCaseSensitive(v, "ba");
    cJSON_AddNumberToObject(v, "ba", 518);
    gpt2_dir("g_gap_bad", v, "#version: 0.2\na b\n", dir, sizeof dir);
    expect_refused(__LINE__, dir, "encoder.json", "token \"ba\" has id 518", "at most 517 here");
    cJSON_Delete(v);
}

static void test_gpt2_hf(void) {
    char p[600];
    static const char *const one[] = {"a b"}, *const twice[] = {"a b", "b a", "a b"};
    cJSON *v = gpt2_vocab();
    cJSON_AddNumberToObject(v, "ba", 258);
    cJSON *root = gpt2_hf(v, one, 1);
    ct_tmpdir_join(p, sizeof p, tmp, "hf_ok.json");
    write_json(p, root);
    expect_loads(__LINE__, p);

    cJSON_AddNumberToObject(vocab_of(root), "", 259);
    ct_tmpdir_join(p, sizeof p, tmp, "hf_empty.json");
    write_json(p, root);
    expect_refused(__LINE__, p, p, "model.vocab: token \"\" (id 259) is the empty string", NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(vocab_of(root), "");

    cJSON_Delete(root);
    root = gpt2_hf(gpt2_vocab(), twice, 3);
    cJSON_AddNumberToObject(vocab_of(root), "ba", 258);
    ct_tmpdir_join(p, sizeof p, tmp, "hf_dup.json");
    write_json(p, root);
    expect_refused(__LINE__, p, p, "model.merges[2]: merge \"a\" \"b\" is listed twice", "first at model.merges[0]");
    /* as ["a", "b"] pairs too */
    cJSON *m = merges_of(root);
    while (cJSON_GetArraySize(m)) cJSON_DeleteItemFromArray(m, 0);
    const char *ab[2] = {"a", "b"};
    cJSON_AddItemToArray(m, cJSON_CreateStringArray(ab, 2));
    cJSON_AddItemToArray(m, cJSON_CreateStringArray(ab, 2));
    write_json(p, root);
    expect_refused(__LINE__, p, p, "model.merges[1]: merge \"a\" \"b\" is listed twice", "first at model.merges[0]");
    cJSON_Delete(root);

    /* a stray id, in model.vocab and in added_tokens */
    root = gpt2_hf(gpt2_vocab(), one, 1);
    cJSON_AddNumberToObject(vocab_of(root), "ba", 16000000);
    ct_tmpdir_join(p, sizeof p, tmp, "hf_huge.json");
    write_json(p, root);
    expect_refused(__LINE__, p, p, "token \"ba\" has id 16000000", "expected ids that number the tokens");
    cJSON_DeleteItemFromObjectCaseSensitive(vocab_of(root), "ba");
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", 16000000);
    cJSON_AddStringToObject(a, "content", "<|pad|>");
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), a);
    write_json(p, root);
    expect_refused(__LINE__, p, p, "token \"<|pad|>\" has id 16000000", NULL);
    cJSON_Delete(root);
}

static void test_spm(void) {
    char dir[512], p[600];
    cJSON *root = spm_json();
    ct_tmpdir_join(dir, sizeof dir, tmp, "spm");
    CHECK(ct_mkdir_p(dir) == CT_OK);
    ct_tmpdir_join(p, sizeof p, dir, "tokenizer.json");
    write_json(p, root);
    expect_loads(__LINE__, dir);

    cJSON_AddNumberToObject(vocab_of(root), "", 264);
    write_json(p, root);
    expect_refused(__LINE__, dir, p, "model.vocab: token \"\" (id 264) is the empty string", NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(vocab_of(root), "");

    cJSON_AddItemToArray(merges_of(root), cJSON_CreateString("a b"));
    write_json(p, root);
    expect_refused(__LINE__, dir, p, "model.merges[2]: merge \"a\" \"b\" is listed twice",
                   "first at model.merges[0]");
    cJSON_DeleteItemFromArray(merges_of(root), 2);

    cJSON_AddNumberToObject(vocab_of(root), "ba", 16000000);
    write_json(p, root);
    expect_refused(__LINE__, dir, p, "token \"ba\" has id 16000000", "only 265 tokens");
    cJSON_Delete(root);
}

/* ------------------------------------------------------------ the cache */

/* The one entry file under cache dir (NULL when not exactly one) into path. */
static const char *only_entry(const char *cache, char *path, size_t cap) {
    int found = 0;
    DIR *d = opendir(cache);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strlen(e->d_name) != 2) continue;
        char sub[700];
        snprintf(sub, sizeof sub, "%s/%.2s", cache, e->d_name);
        DIR *s = opendir(sub);
        struct dirent *f;
        while (s && (f = readdir(s))) {
            size_t n = strlen(f->d_name);
            if (n > 4 && !strcmp(f->d_name + n - 4, ".tok")) {
                int k = snprintf(path, cap, "%s/%s", sub, f->d_name);
                found += k > 0 && (size_t)k < cap ? 1 : 100; /* a path that does not fit: no answer */
            }
        }
        if (s) closedir(s);
    }
    if (d) closedir(d);
    return found == 1 ? path : NULL;
}

/* Rewrite the entry's tokens (same count) with ids, and its checksum to match. */
static void forge_entry(const char *path, const int32_t *ids, int64_t n) {
    static uint8_t buf[1 << 16];
    long len = ct_tmpdir_read(path, buf, sizeof buf);
    CHECK(len == 40 + 4 * n);
    if (len != 40 + 4 * n) return;
    memcpy(buf + 40, ids, (size_t)n * 4); /* little-endian hosts only, like the rest of the suite */
    uint64_t h = XXH64(buf + 40, (size_t)n * 4, 0);
    for (int k = 0; k < 8; k++) buf[16 + k] = (uint8_t)(h >> (8 * k));
    CHECK(ct_tmpdir_write(path, buf, (size_t)len) == 0);
}

/* Tokens of the entry file at path (its header count), into ids (cap). */
static int64_t entry_tokens(const char *path, int32_t *ids, int64_t cap) {
    static uint8_t buf[1 << 16];
    long len = ct_tmpdir_read(path, buf, sizeof buf);
    if (len < 40 || (len - 40) / 4 > cap) return -1;
    memcpy(ids, buf + 40, (size_t)(len - 40));
    return (len - 40) / 4;
}

static ct_tokens read_train(const char *out) {
    ct_tokens v = {0};
    char path[600];
    snprintf(path, sizeof path, "%s/train_000000.bin", out);
    ct_shard *s = NULL;
    CHECK_MSG(ct_shard_open(&s, path) == CT_OK, "%s", ct_last_error());
    for (int64_t k = 0; s && k < ct_shard_ntokens(s); k++) ct_tokens_push(&v, (int32_t)ct_shard_token(s, k));
    ct_shard_close(s);
    return v;
}

static bool same(const ct_tokens *a, const ct_tokens *b) {
    return a->n == b->n && (a->n == 0 || !memcmp(a->ids, b->ids, a->n * sizeof *a->ids));
}

/* A cache entry whose checksum verifies but whose ids the tokenizer never
 * produces: prepare warns, tokenises the text again, writes the right
 * tokens to the shard and replaces the entry. */
static void test_cache_ids(void) {
    char tok[512], src[600], cache[600], out[600], entry[700];
    cJSON *v = gpt2_vocab();
    gpt2_dir("cache_tok", v, "#version: 0.2\na b\n", tok, sizeof tok);
    cJSON_Delete(v);
    ct_tmpdir_join(src, sizeof src, tmp, "cache_src.txt");
    write_text(src, "ab ab abba\n");
    ct_tmpdir_join(cache, sizeof cache, tmp, "cache_dir");
    const char *inputs[] = {src};
    ct_prepare_opts o = {0};
    o.tokenizer = tok;
    o.inputs = inputs;
    o.n_inputs = 1;
    o.cache_dir = cache;
    o.cache_disk_limit = 1 << 20;
    o.cache_mem_limit = 1 << 20;
    o.threads = 1;
    o.overwrite = true;
    o.out_dir = ct_tmpdir_join(out, sizeof out, tmp, "cache_out");
    ct_prepare_report r;
    CHECK_MSG(ct_prepare_run(&o, &r) == CT_OK, "%s", ct_last_error());
    ct_tokens want = read_train(out);
    CHECK(want.n >= 5 && want.ids[0] == 257);
    CHECK(only_entry(cache, entry, sizeof entry) != NULL);
    int32_t ids[64];
    int64_t n = entry_tokens(entry, ids, 64);
    CHECK(n == (int64_t)want.n);
    if (n != (int64_t)want.n || n < 3) {
        ct_tokens_free(&want);
        return;
    }

    /* forged ids: past the vocabulary, negative, far past it */
    const int32_t bad_ids[] = {60000, -1, 16000000};
    for (int k = 0; k < 3; k++) {
        int32_t f[64];
        memcpy(f, ids, (size_t)n * 4);
        f[2] = bad_ids[k];
        forge_entry(entry, f, n);
        logged[0] = '\0';
        ct_log_set(log_keep, NULL);
        ct_status st = ct_prepare_run(&o, &r);
        ct_log_set(NULL, NULL);
        CHECK_MSG(st == CT_OK, "%s", ct_last_error());
        ct_tokens got = read_train(out);
        CHECK_MSG(same(&got, &want), "forged id %d reached the shard", (int)bad_ids[k]);
        char needle[96];
        snprintf(needle, sizeof needle, "token id %d at position 2 is not in the vocabulary (ids 0..257)",
                 (int)bad_ids[k]);
        CHECK_MSG(strstr(logged, needle) && strstr(logged, "was refused") && strstr(logged, src),
                  "warning: %s", logged);
        CHECK(r.chunks_cached == 0 && r.docs_tokenized == 1);
        ct_tokens_free(&got);
        /* the entry was replaced with what the tokenizer gives */
        int32_t now[64];
        CHECK(entry_tokens(entry, now, 64) == n && !memcmp(now, ids, (size_t)n * 4));
    }
    /* a structure that is not this chunk's: no document token at the start */
    int32_t f[64];
    memcpy(f, ids, (size_t)n * 4);
    f[0] = 'a' - 0; /* byte token of 'a' is id 'a' here */
    forge_entry(entry, f, n);
    logged[0] = '\0';
    ct_log_set(log_keep, NULL);
    CHECK(ct_prepare_run(&o, &r) == CT_OK);
    ct_log_set(NULL, NULL);
    ct_tokens got = read_train(out);
    CHECK(same(&got, &want));
    CHECK_MSG(strstr(logged, "0 document starts (id 257), not one at the start, expected 1 documents"),
              "warning: %s", logged);
    ct_tokens_free(&got);
    /* and a clean run after: served from the cache, nothing warned */
    logged[0] = '\0';
    ct_log_set(log_keep, NULL);
    CHECK(ct_prepare_run(&o, &r) == CT_OK);
    ct_log_set(NULL, NULL);
    CHECK_MSG(r.chunks_cached == 1 && logged[0] == '\0', "cached %lld; log: %s", (long long)r.chunks_cached,
              logged);
    got = read_train(out);
    CHECK(same(&got, &want));
    ct_tokens_free(&got);
    ct_tokens_free(&want);
}

/* The cache itself: a put of a key a get returned from disk replaces the
 * file; one it did not return is only marked used. */
static void test_cache_replace(void) {
    char dir[600];
    ct_tmpdir_join(dir, sizeof dir, tmp, "cache_replace");
    ct_cache_key k = ct_cache_key_of("x", 1, "ns");
    const int32_t a[3] = {1, 2, 3}, b[3] = {4, 5, 6};
    ct_cache *c = NULL;
    CHECK(ct_cache_open(&c, dir, 1 << 20, 0) == CT_OK);
    if (!c) return;
    CHECK(ct_cache_put(c, k, a, 3) == CT_OK);
    CHECK(ct_cache_put(c, k, b, 3) == CT_OK); /* not returned by a get: kept */
    ct_cache_close(c);
    int32_t *t = NULL;
    int64_t n = 0;
    bool found = false;
    CHECK(ct_cache_open(&c, dir, 1 << 20, 0) == CT_OK);
    if (!c) return;
    CHECK(ct_cache_get(c, k, &t, &n, &found) == CT_OK && found && n == 3 && !memcmp(t, a, sizeof a));
    free(t);
    CHECK(ct_cache_put(c, k, b, 3) == CT_OK); /* the caller refused what it got */
    ct_cache_close(c);
    CHECK(ct_cache_open(&c, dir, 1 << 20, 0) == CT_OK);
    if (!c) return;
    t = NULL;
    CHECK(ct_cache_get(c, k, &t, &n, &found) == CT_OK && found && n == 3 && t && !memcmp(t, b, sizeof b));
    free(t);
    ct_cache_stats s;
    ct_cache_get_stats(c, &s);
    CHECK(s.disk_entries == 1);
    ct_cache_close(c);
}

/* ------------------------------------------------------------ stale temp files */

static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    int status;
    waitpid(p, &status, 0);
    return (long)p;
}

static void test_stale_tmp(void) {
    char dir[600], p[700];
    ct_tmpdir_join(dir, sizeof dir, tmp, "run");
    CHECK(ct_mkdir_p(dir) == CT_OK);
    long dead = dead_pid(), live = (long)getppid();
    char name[64];
    const char *gone[] = {"config.yaml.tmp.%ld", "metrics.jsonl.tmp.%ld"};
    const char *kept[] = {"config.yaml.tmp.%ldx", ".tmp.%ld", "notes.tmp", "a.tmp.0", "a.tmp.-%ld"};
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, gone[i], dead);
        write_text(ct_tmpdir_join(p, sizeof p, dir, name), "x");
    }
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, kept[i], dead);
        write_text(ct_tmpdir_join(p, sizeof p, dir, name), "x");
    }
    snprintf(name, sizeof name, "metrics.jsonl.tmp.%ld", live); /* a live writer's */
    write_text(ct_tmpdir_join(p, sizeof p, dir, name), "x");
    snprintf(name, sizeof name, "report.html.tmp.%ld", (long)getpid()); /* this process's */
    write_text(ct_tmpdir_join(p, sizeof p, dir, name), "x");
    snprintf(name, sizeof name, "sub.tmp.%ld", dead); /* a directory */
    CHECK(ct_mkdir_p(ct_tmpdir_join(p, sizeof p, dir, name)) == CT_OK);
    snprintf(name, sizeof name, "link.tmp.%ld", dead); /* a symlink */
    CHECK(symlink("/nonexistent", ct_tmpdir_join(p, sizeof p, dir, name)) == 0);
    CHECK(ct_tmpdir_count(dir) == 11);

    CHECK(ct_afile_remove_stale(dir) == 2);
    CHECK(ct_tmpdir_count(dir) == 9);
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, gone[i], dead);
        CHECK(ct_tmpdir_size(ct_tmpdir_join(p, sizeof p, dir, name)) < 0);
    }
    snprintf(name, sizeof name, "metrics.jsonl.tmp.%ld", live);
    CHECK(ct_tmpdir_size(ct_tmpdir_join(p, sizeof p, dir, name)) == 1);
    CHECK(ct_afile_remove_stale(dir) == 0);
    ct_tmpdir_join(p, sizeof p, tmp, "absent");
    CHECK(ct_afile_remove_stale(p) == 0);
}

/* ------------------------------------------------------------ hw.json */

static void test_hw_json(void) {
    char dir[600], p[700];
    ct_tmpdir_join(dir, sizeof dir, tmp, "report");
    CHECK(ct_mkdir_p(dir) == CT_OK);
    write_text(ct_tmpdir_join(p, sizeof p, dir, "metrics.jsonl"), "{\"step\": 1, \"split\": \"train\", \"loss\": 3}\n");
    ct_tmpdir_join(p, sizeof p, dir, "hw.json");
    static const char *const bad[][2] = {
        {"{\"cpu_model\": \"X<b>\", \"ram_bytes\": 12", "not valid JSON (parsing stopped at byte offset"},
        {"[\"cpu_model\", \"X<b>\"]", "found another JSON value"},
        {"{\"cpu_model\": \"X<b>\"} {\"more\": 1}", "found more after byte offset 21"},
        {"", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + 1; i++) {
        if (i < sizeof bad / sizeof bad[0]) {
            write_text(p, bad[i][0]);
        } else { /* an object, a NUL byte, then more: the NUL must not hide the rest */
            static const char nul[] = "{\"cpu_model\": \"X<b>\"}\0{\"more\": 1}";
            CHECK(ct_tmpdir_write(p, nul, sizeof nul - 1) == 0);
        }
        const char *why = i < sizeof bad / sizeof bad[0] ? bad[i][1] : "found more after byte offset 21";
        logged[0] = '\0';
        ct_log_set(log_keep, NULL);
        ct_report_data *d = NULL;
        ct_status st = ct_report_load(&d, dir);
        ct_log_set(NULL, NULL);
        CHECK_MSG(st == CT_OK, "%s", ct_last_error());
        CHECK_MSG(strstr(logged, p) && strstr(logged, why) && strstr(logged, "hardware section out"),
                  "case %zu: warning: %s", i, logged);
        char *html = NULL;
        size_t len = 0;
        if (d) CHECK(ct_report_render(d, 0, &html, &len) == CT_OK);
        if (html) {
            CHECK_MSG(!strstr(html, "X&lt;b&gt;") && !strstr(html, "<table class=\"hw\">") &&
                          strstr(html, "hw.json is damaged"),
                      "case %zu: the page shows the damaged hw.json", i);
        }
        free(html);
        ct_report_free(d);
    }
    /* a good one: no warning, the table */
    write_text(p, "{\"cpu_model\": \"X<b>\"}\n");
    logged[0] = '\0';
    ct_log_set(log_keep, NULL);
    ct_report_data *d = NULL;
    CHECK(ct_report_load(&d, dir) == CT_OK);
    ct_log_set(NULL, NULL);
    CHECK_MSG(logged[0] == '\0', "%s", logged);
    char *html = NULL;
    size_t len = 0;
    if (d) CHECK(ct_report_render(d, 0, &html, &len) == CT_OK);
    if (html) CHECK(strstr(html, "<th>cpu_model</th><td>X&lt;b&gt;</td>") != NULL);
    free(html);
    ct_report_free(d);
}

int main(void) {
    if (!ct_tmpdir_make(tmp, sizeof tmp, "hostile")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_gpt2_files();
    test_gpt2_hf();
    test_spm();
    test_cache_replace();
    test_cache_ids();
    test_stale_tmp();
    test_hw_json();
    int rc = ct_test_result("test_hostile_files");
    if (rc == 0) ct_tmpdir_remove(tmp);
    return rc;
}
