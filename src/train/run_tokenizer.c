/*
 * The run's tokenizer (see run_tokenizer.h): every source that names one
 * (the checkpoint resumed, model.init_from, data.train's and data.val's
 * manifests) must name the same; the files of the first that has them go
 * into run.dir, whence ct_ckpt_save copies them into each checkpoint.
 * Leaves out: what an identity is (data/tokenizer_ident.c).
 */
#include "train/run_tokenizer.h"

#include "ctrain/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_TOK_SOURCES 4

typedef struct run_tok_src {
    char name[CT_PATH_MAX + 48]; /* "model.init_from = DIR", for messages */
    const char *path;            /* the directory or shard spec */
    bool model;                  /* a model directory, not shards */
    ct_tok_info info;
} run_tok_src;

static ct_status run_tok_add(run_tok_src *s, int *n, const char *key, const char *path, bool model) {
    run_tok_src *x = &s[*n];
    if (key) snprintf(x->name, sizeof x->name, "%s = %s", key, path);
    else snprintf(x->name, sizeof x->name, "the checkpoint resumed (%s)", path);
    x->path = path;
    x->model = model;
    ct_status st = model ? ct_tok_info_of_dir(&x->info, path) : ct_tok_info_of_shards(&x->info, path);
    if (st && model) {
        /* a tokenizer ctrain cannot read (WordPiece, Unigram, ...): nothing to compare */
        ct_log(CT_LOG_WARN, "%s: its tokenizer files do not load (%s): the run's tokenizer is not "
               "checked against it", x->name, ct_last_error());
        ct_error_clear();
        memset(&x->info, 0, sizeof x->info);
        st = CT_OK;
    }
    if (st) {
        ct_error_prefix("%s", x->name);
        return st;
    }
    (*n)++;
    return CT_OK;
}

/* Every source that names a tokenizer, model directories first. */
static ct_status run_tok_sources(const ct_config *cfg, const char *resume_dir, run_tok_src *s, int *n) {
    *n = 0;
    ct_status st = CT_OK;
    if (resume_dir && resume_dir[0]) st = run_tok_add(s, n, NULL, resume_dir, true);
    if (!st && cfg->model.init_from[0]) st = run_tok_add(s, n, "model.init_from", cfg->model.init_from, true);
    if (!st && cfg->data.train[0]) st = run_tok_add(s, n, "data.train", cfg->data.train, false);
    if (!st && cfg->data.val[0]) st = run_tok_add(s, n, "data.val", cfg->data.val, false);
    return st;
}

static ct_status run_tok_agree(const run_tok_src *s, int n) {
    for (int i = 0; i < n; i++) {
        for (int j = i + 1; j < n; j++) {
            if (!ct_tok_info_match(&s[i].info, s[i].name, &s[j].info, s[j].name)) continue;
            if (s[i].model && !s[j].model)
                ct_error_hint("tokenise the text again with the model's own tokenizer (ctrain prepare "
                              "--tokenizer %s --out NEW_DIR ...), or start from a model that uses the "
                              "shards' tokenizer", s[i].path);
            else if (!s[i].model && !s[j].model)
                ct_error_hint("prepare data.train and data.val with the same tokenizer");
            return CT_ERR_ARG;
        }
    }
    return CT_OK;
}

ct_status run_tokenizer_check(const ct_config *cfg, const char *resume_dir) {
    run_tok_src *s = calloc(RUN_TOK_SOURCES, sizeof *s);
    if (!s) return CT_ERR(CT_ERR_OOM, "out of memory checking the tokenizers");
    int n;
    ct_status st = run_tok_sources(cfg, resume_dir, s, &n);
    if (!st) st = run_tok_agree(s, n);
    free(s);
    return st;
}

/* The tokenizer of source x, loaded from what it names, when that still is
 * x's tokenizer; NULL otherwise (logged). */
static ct_tokenizer *run_tok_files(const run_tok_src *x) {
    ct_tokenizer *t = NULL;
    if (ct_tokenizer_load(&t, x->info.load)) {
        ct_log(CT_LOG_WARN, "%s: its tokenizer %s does not load (%s)", x->name, x->info.load,
               ct_last_error());
        ct_error_clear();
        return NULL;
    }
    if (strcmp(ct_tokenizer_identity(t), x->info.identity) != 0) {
        ct_log(CT_LOG_WARN, "%s: the tokenizer at %s is %s now, but %s names %s: it changed since, and "
               "is not used", x->name, x->info.load, ct_tokenizer_identity(t), x->info.where,
               x->info.identity);
        ct_tokenizer_free(t);
        return NULL;
    }
    return t;
}

ct_status run_tokenizer_write(const ct_config *cfg, const char *resume_dir, const char *dir) {
    run_tok_src *s = calloc(RUN_TOK_SOURCES, sizeof *s);
    if (!s) return CT_ERR(CT_ERR_OOM, "out of memory writing the tokenizer");
    int n;
    ct_status st = run_tok_sources(cfg, resume_dir, s, &n);
    if (!st) st = run_tok_agree(s, n);
    const run_tok_src *known = NULL;
    ct_tokenizer *t = NULL;
    for (int i = 0; !st && i < n && !t; i++) {
        if (!s[i].info.identity[0]) continue;
        if (!known) known = &s[i];
        if (s[i].info.load[0]) {
            if ((t = run_tok_files(&s[i]))) known = &s[i];
        }
    }
    if (st) {
        /* checked at setup; a file changed since */
    } else if (t) {
        st = ct_tokenizer_save_files(t, dir);
        if (!st)
            ct_log(CT_LOG_INFO, "tokenizer %s (%s) saved in %s beside the weights", ct_tokenizer_identity(t),
                   known->info.load, dir);
        else
            ct_error_prefix("saving the run's tokenizer (%s) in run.dir", known->info.load);
    } else if (known) {
        ct_log(CT_LOG_WARN, "%s names tokenizer %s (%s), but its files are not at hand: %s gets no "
               "tokenizer files (copy them there to sample with --tokenizer %s)", known->name,
               known->info.identity, known->info.origin[0] ? known->info.origin : known->info.where,
               dir, dir);
        /* an older tokenizer there would speak for this run */
        if (ct_tokenizer_dir_has_files(dir))
            ct_log(CT_LOG_WARN, "%s holds tokenizer files from before this run: remove them if they "
                   "are not %s", dir, known->info.identity);
    } else if (ct_tokenizer_dir_has_files(dir)) {
        ct_log(CT_LOG_WARN, "%s holds tokenizer files from before this run, and the run names no "
               "tokenizer (no manifest.json beside the shards, no tokenizer beside the starting "
               "model): they are kept, and copied into checkpoints; remove them if they are not "
               "this model's", dir);
    }
    ct_tokenizer_free(t);
    free(s);
    return st;
}
