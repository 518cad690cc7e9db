/*
 * ct_prepare_run in-process (so the sanitizer build covers it): text files
 * and JSONL with bad lines, the token stream against ct_tokenizer_encode,
 * chunks served from the cache on a second run, threads, validation split,
 * shard size, and that a failing run leaves the output directory untouched.
 * Needs the GPT-2 tokenizer files in ../data/gpt2-tokenizer (tests run in
 * the build directory; scripts/fetch_data.sh puts them there).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrain/data.h"
#include "data/prepare/prepare.h"
#include "data/shard/shard.h"
#include "unit/ct_tmpdir.h"

static const char *TOK = "../data/gpt2-tokenizer";

/* Tokens of every shard of `split` in out, concatenated. */
static ct_tokens read_split(const char *out, const char *split) {
    ct_tokens v = {0};
    for (int i = 0;; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", out, split, i);
        ct_shard *s;
        if (ct_shard_open(&s, path)) break;
        for (int64_t k = 0; k < ct_shard_ntokens(s); k++)
            ct_tokens_push(&v, (int32_t)ct_shard_token(s, k));
        ct_shard_close(s);
    }
    ct_error_clear();
    return v;
}

static void expect_docs(ct_tokens *want, const ct_tokenizer *t, const char *const *docs, int n) {
    for (int i = 0; i < n; i++) {
        ct_tokens_push(want, ct_tokenizer_eot(t));
        CHECK(ct_tokenizer_encode(t, NULL, docs[i], strlen(docs[i]), 0, want) == CT_OK);
    }
}

static bool same(const ct_tokens *a, const ct_tokens *b) {
    return a->n == b->n && (a->n == 0 || !memcmp(a->ids, b->ids, a->n * sizeof *a->ids));
}

int main(void) {
    ct_tokenizer *tok;
    if (ct_tokenizer_load(&tok, TOK)) {
        fprintf(stderr, "test_prepare: %s: %s\n  run scripts/fetch_data.sh (bootstrap does)\n",
                TOK, ct_last_error());
        return 1;
    }
    char dir[64], p[512], out[512], cache[512];
    CHECK(ct_tmpdir_make(dir, sizeof dir, "prepare") != NULL);
    static const char *const docs[] = {"The quick brown fox.\n", "Zwölf Boxkämpfer — 1234 🙂\n",
                                       "int main(void) { return 0; }\n"};
    mkdir(ct_tmpdir_join(p, sizeof p, dir, "src"), 0777);
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "src/d%d.txt", i);
        ct_tmpdir_join(p, sizeof p, dir, name);
        CHECK(ct_tmpdir_write(p, docs[i], strlen(docs[i])) == 0);
    }
    const char *jl = "{\"text\": \"json one\"}\n\n{\"text\": 3}\n{\"text\": \"json two\"}\n";
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "src/e.jsonl"), jl, strlen(jl)) == 0);

    char srcdir[512];
    ct_tmpdir_join(srcdir, sizeof srcdir, dir, "src");
    const char *inputs[] = {srcdir};
    ct_tmpdir_join(cache, sizeof cache, dir, "cache");
    ct_prepare_opts o = {0};
    o.tokenizer = TOK;
    o.inputs = inputs;
    o.n_inputs = 1;
    o.cache_dir = cache;
    o.cache_disk_limit = 1 << 20;
    o.cache_mem_limit = 1 << 20;
    o.threads = 2;

    /* bad JSONL lines fail by default; the output directory is not created */
    ct_prepare_report r;
    o.out_dir = ct_tmpdir_join(out, sizeof out, dir, "out_fail");
    o.cache_dir = NULL; /* (a failed run's chunks would be cached too) */
    CHECK(ct_prepare_run(&o, &r) == CT_ERR_FORMAT);
    o.cache_dir = cache;
    CHECK(strstr(ct_last_error(), "e.jsonl: 1 bad JSONL line (line 3: field \"text\" is not a "
                 "string)") != NULL);
    CHECK(ct_tmpdir_size(out) == -1);

    /* skipped: the text files (path order: d0 d1 d2), then the good JSONL lines */
    o.skip_bad_lines = true;
    o.out_dir = ct_tmpdir_join(out, sizeof out, dir, "out1");
    CHECK(ct_prepare_run(&o, &r) == CT_OK);
    ct_tokens want = {0};
    expect_docs(&want, tok, docs, 3);
    static const char *const jdocs[] = {"json one", "json two"};
    expect_docs(&want, tok, jdocs, 2);
    ct_tokens got = read_split(out, "train");
    CHECK(same(&got, &want));
    CHECK(r.documents == 5 && r.bad_lines == 1 && r.docs_tokenized == 5);
    CHECK(r.tokens == (int64_t)want.n && r.train_tokens == r.tokens && r.val_tokens == 0);
    ct_tokens_free(&got);

    /* second run: the text chunks come from the cache (the JSONL chunk has a
     * bad line, so it is tokenised again); the stream is the same */
    o.out_dir = ct_tmpdir_join(out, sizeof out, dir, "out2");
    CHECK(ct_prepare_run(&o, &r) == CT_OK);
    got = read_split(out, "train");
    CHECK(same(&got, &want));
    CHECK_MSG(r.docs_tokenized == 2 && r.chunks_cached == r.chunks - 1,
              "tokenised %lld, cached %lld of %lld", (long long)r.docs_tokenized,
              (long long)r.chunks_cached, (long long)r.chunks);
    CHECK(r.cache.disk_hits + r.cache.mem_hits == r.chunks_cached);
    ct_tokens_free(&got);

    /* one thread, no cache, small shards and a validation split: same stream */
    o.threads = 1;
    o.cache_dir = NULL;
    o.cache_mem_limit = 0;
    o.shard_tokens = 7;
    o.val_tokens = 1;
    o.out_dir = ct_tmpdir_join(out, sizeof out, dir, "out3");
    CHECK(ct_prepare_run(&o, &r) == CT_OK);
    ct_tokens val = read_split(out, "val"), train = read_split(out, "train");
    ct_tokens first = {0};
    expect_docs(&first, tok, docs, 1);
    CHECK(same(&val, &first)); /* one whole document */
    CHECK(val.n + train.n == want.n && !memcmp(train.ids, want.ids + val.n, train.n * 4));
    CHECK(r.train_shards == (int)((train.n + 6) / 7) && r.val_documents == 1);
    ct_tokens_free(&val);
    ct_tokens_free(&train);
    ct_tokens_free(&first);

    /* an existing output needs overwrite; a failed overwrite keeps it */
    CHECK(ct_prepare_run(&o, &r) == CT_ERR_ARG);
    int before = ct_tmpdir_count(out);
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "src/bad.txt"), "caf\xe9\n", 5) == 0);
    o.overwrite = true;
    CHECK(ct_prepare_run(&o, &r) == CT_ERR_FORMAT);
    CHECK(strstr(ct_last_error(), "bad.txt: invalid UTF-8 at byte offset 3 (line 1)") != NULL);
    CHECK(ct_tmpdir_count(out) == before);
    o.lossy = true;
    CHECK(ct_prepare_run(&o, &r) == CT_OK);

    ct_tokens_free(&want);
    ct_tokenizer_free(tok);
    ct_tmpdir_remove(dir);
    return ct_test_result("test_prepare");
}
