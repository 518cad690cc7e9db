/*
 * The tokenizer on disk: which files a path names (a directory holding
 * encoder.json + vocab.bpe, tokenizer.json or vocab.json + merges.txt; one of
 * those files, whose directory is meant; a tokenizer.json by another name),
 * the record of the files a tokenizer was read from, and writing them beside
 * a model's weights under Hugging Face's names, so that a run directory or
 * checkpoint loads with its own tokenizer (ctrain sample --tokenizer RUN_DIR)
 * and with transformers' AutoTokenizer.
 * Leaves out: parsing the files (tokenizer_load.c, tokenizer_spm.c) and
 * comparing identities (tokenizer_ident.c).
 */
#include "data/tokenizer/tokenizer_impl.h"
#include "io/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The names a tokenizer's files go by in a directory; the first four are
 * the pairs, tokenizer.json the Hugging Face file, the last two its extras. */
static const char *const tf_names[] = {"encoder.json",   "vocab.bpe",
                                       "vocab.json",     "merges.txt",
                                       "tokenizer.json", "tokenizer_config.json",
                                       "special_tokens_map.json"};
#define TF_N_NAMES (sizeof tf_names / sizeof *tf_names)
#define TF_HF_EXTRAS 5 /* tf_names[5..]: beside a Hugging Face file */

static bool tf_is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Owned "dir/name"; NULL (error set) on OOM. */
static char *tf_join(const char *dir, size_t dlen, const char *name) {
    size_t n = dlen + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) {
        CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
        return NULL;
    }
    snprintf(p, n, "%.*s/%s", (int)dlen, dir, name);
    return p;
}

/* Record path (taking ownership) as a file of t saved under save_as. */
static ct_status tf_record(ct_tokenizer *t, char *path, const char *save_as) {
    if (!path) return ct_last_status();
    CT_ASSERT(t->n_files < CT_TOK_FILES_MAX);
    t->files[t->n_files] = path;
    t->save_as[t->n_files++] = save_as;
    return CT_OK;
}

/* tokenizer_config.json and special_tokens_map.json beside a Hugging Face
 * file in dir[0..dlen): they travel with it. */
static ct_status tf_record_extras(ct_tokenizer *t, const char *dir, size_t dlen) {
    for (size_t k = TF_HF_EXTRAS; k < TF_N_NAMES; k++) {
        char *p = tf_join(dir, dlen, tf_names[k]);
        if (!p) return ct_last_status();
        if (!tf_is_file(p)) {
            free(p);
            continue;
        }
        ct_status st = tf_record(t, p, tf_names[k]);
        if (st) return st;
    }
    return CT_OK;
}

/* A GPT-2 pair of dir: enc and bpe are the names there. */
static ct_status tf_load_pair(ct_tokenizer *t, const char *dir, const char *enc, const char *bpe,
                              bool hf) {
    size_t dlen = strlen(dir);
    char *pe = tf_join(dir, dlen, enc), *pb = pe ? tf_join(dir, dlen, bpe) : NULL;
    if (!pe || !pb) {
        free(pe);
        return ct_last_status();
    }
    ct_status st = tok_load_gpt2_files(t, pe, pb);
    if (st) {
        free(pe);
        free(pb);
        return st;
    }
    tf_record(t, pe, "vocab.json");
    tf_record(t, pb, "merges.txt");
    return hf ? tf_record_extras(t, dir, dlen) : CT_OK;
}

static ct_status tf_load_hf(ct_tokenizer *t, const char *path) {
    ct_status st = tok_load_hf_file(t, path);
    if (st) return st;
    char *p = strdup(path);
    if (!p) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
    if ((st = tf_record(t, p, "tokenizer.json"))) return st;
    const char *slash = strrchr(path, '/');
    return slash ? tf_record_extras(t, path, (size_t)(slash - path)) : tf_record_extras(t, ".", 1);
}

/* Which files directory dir holds, in order of preference. */
static ct_status tf_load_dir(ct_tokenizer *t, const char *dir) {
    size_t dlen = strlen(dir);
    bool has[TF_N_NAMES];
    for (size_t k = 0; k < 5; k++) {
        char *p = tf_join(dir, dlen, tf_names[k]);
        if (!p) return ct_last_status();
        has[k] = tf_is_file(p);
        free(p);
    }
    if (has[0] || has[1]) return tf_load_pair(t, dir, "encoder.json", "vocab.bpe", false);
    if (has[4]) {
        char *p = tf_join(dir, dlen, "tokenizer.json");
        if (!p) return ct_last_status();
        ct_status st = tf_load_hf(t, p);
        free(p);
        return st;
    }
    if (has[2] || has[3]) return tf_load_pair(t, dir, "vocab.json", "merges.txt", true);
    ct_status st = CT_ERR(CT_ERR_IO, "tokenizer %s: holds neither encoder.json + vocab.bpe nor "
                          "tokenizer.json nor vocab.json + merges.txt", dir);
    ct_error_hint("scripts/fetch_data.sh puts GPT-2's encoder.json and vocab.bpe in data/gpt2-tokenizer");
    return st;
}

/* A file whose name says its directory is meant (one of a pair, a Hugging
 * Face extra, a model's config.json). */
static bool tf_names_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!strcmp(base, "config.json")) return true;
    for (size_t k = 0; k < TF_N_NAMES; k++)
        if (k != 4 && !strcmp(base, tf_names[k])) return true;
    return false;
}

ct_status ct_tokenizer_load(ct_tokenizer **out, const char *path) {
    CT_ASSERT(out && path);
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        char ebuf[128];
        if (strerror_r(errno, ebuf, sizeof ebuf) != 0) snprintf(ebuf, sizeof ebuf, "error %d", errno);
        ct_status st = CT_ERR(CT_ERR_IO, "tokenizer %s: %s", path, ebuf);
        ct_error_hint("give a directory holding encoder.json + vocab.bpe, vocab.json + merges.txt or "
                      "tokenizer.json (scripts/fetch_data.sh puts GPT-2's in data/gpt2-tokenizer, "
                      "LLaMA's in data/llama-tokenizer)");
        return st;
    }
    ct_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
    ct_status st;
    if (S_ISDIR(sb.st_mode)) {
        st = tf_load_dir(t, path);
    } else if (tf_names_dir(path)) {
        /* --tokenizer DIR/encoder.json means DIR */
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
        st = dir ? tf_load_dir(t, dir) : CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
        if (st) ct_error_prefix("tokenizer %s names its directory", path);
        free(dir);
    } else {
        st = tf_load_hf(t, path);
    }
    if (st) {
        ct_tokenizer_free(t);
        return st;
    }
    *out = t;
    return CT_OK;
}

int ct_tokenizer_num_files(const ct_tokenizer *t) { return t->n_files; }

const char *ct_tokenizer_file(const ct_tokenizer *t, int i, const char **save_as) {
    if (i < 0 || i >= t->n_files) return NULL;
    if (save_as) *save_as = t->save_as[i];
    return t->files[i];
}

/* ---------------------------------------------------------------- writing */

static ct_status tf_copy(const char *from, const char *to) {
    char *data = NULL;
    size_t len = 0;
    ct_status st = ct_file_read_all(from, &data, &len);
    if (!st) st = ct_file_write_atomic(to, data, len);
    free(data);
    return st;
}

/* Same directory (the same inode), so nothing is to be copied onto itself. */
static bool tf_same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

ct_status ct_tokenizer_save_files(const ct_tokenizer *t, const char *dir) {
    CT_ASSERT(t && dir);
    if (t->n_files == 0) return CT_OK;
    const char *slash = strrchr(t->files[0], '/');
    char *src = slash ? strndup(t->files[0], slash == t->files[0] ? 1 : (size_t)(slash - t->files[0]))
                      : strdup(".");
    if (!src) return CT_ERR(CT_ERR_OOM, "tokenizer: out of memory");
    bool same = tf_same_dir(src, dir);
    free(src);
    if (same) return CT_OK;
    size_t dlen = strlen(dir);
    ct_status st = CT_OK;
    for (int i = 0; i < t->n_files && !st; i++) {
        char *to = tf_join(dir, dlen, t->save_as[i]);
        st = to ? tf_copy(t->files[i], to) : ct_last_status();
        free(to);
    }
    if (st) return st;
    /* names that are not t's would be read instead of (or beside) t's */
    for (size_t k = 0; k < TF_N_NAMES; k++) {
        bool mine = false;
        for (int i = 0; i < t->n_files; i++) mine = mine || !strcmp(t->save_as[i], tf_names[k]);
        if (mine) continue;
        char *p = tf_join(dir, dlen, tf_names[k]);
        if (!p) return ct_last_status();
        if (remove(p) != 0 && errno != ENOENT) {
            st = CT_ERR(CT_ERR_IO, "%s: cannot remove this tokenizer file of another tokenizer: %s", p,
                        strerror(errno));
            free(p);
            return st;
        }
        free(p);
    }
    return CT_OK;
}

bool ct_tokenizer_dir_has_files(const char *dir) {
    size_t dlen = strlen(dir);
    for (size_t k = 0; k < TF_N_NAMES; k++) {
        char *p = tf_join(dir, dlen, tf_names[k]);
        if (!p) {
            ct_error_clear();
            return false;
        }
        bool has = tf_is_file(p);
        free(p);
        if (has) return true;
    }
    return false;
}

ct_status ct_tokenizer_copy_files(const char *from_dir, const char *to_dir, const char **names, int *n) {
    CT_ASSERT(from_dir && to_dir && n);
    *n = 0;
    size_t flen = strlen(from_dir), tlen = strlen(to_dir);
    for (size_t k = 0; k < TF_N_NAMES; k++) {
        char *from = tf_join(from_dir, flen, tf_names[k]);
        if (!from) return ct_last_status();
        if (!tf_is_file(from)) {
            free(from);
            continue;
        }
        char *to = tf_join(to_dir, tlen, tf_names[k]);
        ct_status st = to ? tf_copy(from, to) : ct_last_status();
        free(from);
        free(to);
        if (st) return st;
        if (names) names[*n] = tf_names[k];
        (*n)++;
    }
    return CT_OK;
}
