/*
 * The tokenizer on disk: the files a tokenizer records, writing them into a
 * model directory under Hugging Face's names (a stale tokenizer of another
 * format there removed, its own directory left alone), copying a directory's
 * tokenizer files (what a checkpoint does), and the identity comparison with
 * its message. On GPT-2's real files (scripts/fetch_data.sh).
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char tmpdir[128];

/* data/gpt2-tokenizer from the build directory, the repository or this file. */
static const char *find_gpt2_dir(void) {
    static char from_file[512];
    static const char *const candidates[] = {"../data/gpt2-tokenizer", "data/gpt2-tokenizer",
                                             "../../data/gpt2-tokenizer"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/vocab.bpe", candidates[i]);
        if (ct_tmpdir_size(p) > 0) return candidates[i];
    }
    const char *at = strstr(__FILE__, "tests/unit/");
    if (at) {
        char p[600];
        snprintf(from_file, sizeof from_file, "%.*sdata/gpt2-tokenizer", (int)(at - __FILE__), __FILE__);
        snprintf(p, sizeof p, "%s/vocab.bpe", from_file);
        if (ct_tmpdir_size(p) > 0) return from_file;
    }
    return NULL;
}

static bool has(const char *dir, const char *name) {
    char p[512];
    return ct_tmpdir_size(ct_tmpdir_join(p, sizeof p, dir, name)) >= 0;
}

static void test_files(const ct_tokenizer *t, const char *gpt2_dir) {
    /* what was read, and the names it is saved under */
    CHECK(ct_tokenizer_num_files(t) == 2);
    const char *as0 = NULL, *as1 = NULL;
    const char *f0 = ct_tokenizer_file(t, 0, &as0), *f1 = ct_tokenizer_file(t, 1, &as1);
    CHECK(f0 && strstr(f0, "encoder.json") && as0 && !strcmp(as0, "vocab.json"));
    CHECK(f1 && strstr(f1, "vocab.bpe") && as1 && !strcmp(as1, "merges.txt"));
    CHECK(ct_tokenizer_file(t, 2, NULL) == NULL && ct_tokenizer_file(t, -1, NULL) == NULL);

    /* saved into a model directory holding a stale tokenizer of other formats */
    char dir[256], p[512];
    ct_tmpdir_join(dir, sizeof dir, tmpdir, "model");
    CHECK(mkdir(dir, 0777) == 0);
    CHECK(!ct_tokenizer_dir_has_files(dir));
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "encoder.json"), "{}", 2) == 0);
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "tokenizer.json"), "{}", 2) == 0);
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, "config.json"), "{}", 2) == 0);
    CHECK(ct_tokenizer_dir_has_files(dir));
    CHECK_MSG(ct_tokenizer_save_files(t, dir) == CT_OK, "%s", ct_last_error());
    CHECK(has(dir, "vocab.json") && has(dir, "merges.txt"));
    CHECK(!has(dir, "encoder.json") && !has(dir, "tokenizer.json") && !has(dir, "vocab.bpe"));
    CHECK(has(dir, "config.json")); /* not a tokenizer file: left alone */
    ct_tokenizer *back = NULL;
    CHECK_MSG(ct_tokenizer_load(&back, dir) == CT_OK, "%s", ct_last_error());
    CHECK(back && !strcmp(ct_tokenizer_identity(back), ct_tokenizer_identity(t)));
    /* saving a tokenizer into the directory it came from changes nothing */
    if (back) {
        CHECK(ct_tokenizer_save_files(back, dir) == CT_OK);
        CHECK(has(dir, "vocab.json") && has(dir, "merges.txt"));
    }
    ct_tokenizer_free(back);
    CHECK(ct_tokenizer_save_files(t, gpt2_dir) == CT_OK && !has(gpt2_dir, "vocab.json"));

    /* a checkpoint's copy */
    char ck[256], empty[256];
    ct_tmpdir_join(ck, sizeof ck, tmpdir, "ck");
    ct_tmpdir_join(empty, sizeof empty, tmpdir, "empty");
    CHECK(mkdir(ck, 0777) == 0 && mkdir(empty, 0777) == 0);
    const char *names[CT_TOK_FILES_MAX];
    int n = -1;
    CHECK(ct_tokenizer_copy_files(empty, ck, names, &n) == CT_OK && n == 0 && ct_tmpdir_count(ck) == 0);
    CHECK(ct_tokenizer_copy_files(dir, ck, names, &n) == CT_OK && n == 2);
    CHECK(n == 2 && !strcmp(names[0], "vocab.json") && !strcmp(names[1], "merges.txt"));
    CHECK(ct_tmpdir_count(ck) == 2);

    /* the identity of a directory, and of one without a tokenizer */
    ct_tok_info a, b, none;
    CHECK(ct_tok_info_of_dir(&a, ck) == CT_OK && !strcmp(a.identity, ct_tokenizer_identity(t)) &&
          a.vocab_size == 50257 && !strcmp(a.where, ck));
    CHECK(ct_tok_info_of_dir(&none, empty) == CT_OK && none.identity[0] == 0);
    CHECK(ct_tok_info_of_shards(&none, empty) == CT_OK && none.identity[0] == 0);
    CHECK(ct_tok_info_match(&a, "A", &none, "B") == CT_OK);
    ct_tok_info_of(&b, t, gpt2_dir);
    CHECK(ct_tok_info_match(&a, "A", &b, "B") == CT_OK);
    snprintf(b.identity, sizeof b.identity, "spm-bpe:0123456789abcdef");
    b.vocab_size = 32000;
    CHECK(ct_tok_info_match(&a, "model X", &b, "data Y") == CT_ERR_ARG);
    const char *msg = ct_last_error();
    CHECK_MSG(strstr(msg, "model X") && strstr(msg, "data Y") && strstr(msg, a.identity) &&
              strstr(msg, "spm-bpe:0123456789abcdef") && strstr(msg, "50257") && strstr(msg, "32000") &&
              strstr(msg, ck) && ct_last_hint()[0], "%s", msg);
}

int main(void) {
    const char *gpt2_dir = find_gpt2_dir();
    if (!gpt2_dir) {
        fprintf(stderr, "test_tokenizer_files: GPT-2's tokenizer files are missing\n  hint: run "
                        "scripts/fetch_data.sh at the repository root\n");
        return 1;
    }
    if (!ct_tmpdir_make(tmpdir, sizeof tmpdir, "tokenizer_files")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    ct_tokenizer *t = NULL;
    CHECK_MSG(ct_tokenizer_load(&t, gpt2_dir) == CT_OK, "load %s: %s", gpt2_dir, ct_last_error());
    if (t) test_files(t, gpt2_dir);
    ct_tokenizer_free(t);
    ct_tmpdir_remove(tmpdir);
    return ct_test_result("test_tokenizer_files");
}
