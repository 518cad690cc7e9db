/*
 * The run's tokenizer (see run_tokenizer.h): every source that names one
 * (the checkpoint resumed, model.init_from, data.tokenizer, data.train's and
 * data.val's manifests) must name the same; the files of the first that has
 * them go into run.dir, whence ct_ckpt_save copies them into each checkpoint.
 * A model whose own files do not load is refused unless data.tokenizer
 * stands for them: the shards' tokenizer never goes beside another's model.
 * Leaves out: what an identity is (data/tokenizer_ident.c).
 */
#include "train/run_tokenizer.h"

#include "ctrain/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_TOK_SOURCES 5

typedef enum run_tok_kind {
    RUN_TOK_MODEL = 0,  /* the checkpoint resumed or model.init_from: the model's own files */
    RUN_TOK_GIVEN = 1,  /* data.tokenizer: the model's tokenizer, as the user names it */
    RUN_TOK_SHARDS = 2, /* data.train, data.val: the tokenizer their manifest names */
    RUN_TOK_KIND_COUNT
} run_tok_kind;

typedef struct run_tok_src {
    char name[CT_PATH_MAX + 48]; /* "model.init_from = DIR", for messages */
    const char *path;            /* the directory, tokenizer or shard spec */
    run_tok_kind kind;
    ct_tok_info info;
} run_tok_src;

/* A model directory whose tokenizer files do not load (a WordPiece or
 * Unigram tokenizer.json, say): nothing to compare the shards with, and
 * nothing of the model's to put beside its weights. Refused, unless
 * data.tokenizer names the model's tokenizer in a form ctrain reads. */
static ct_status run_tok_unreadable(run_tok_src *x, const ct_config *cfg, bool log) {
    char why[1024];
    snprintf(why, sizeof why, "%s", ct_last_error());
    ct_error_clear();
    memset(&x->info, 0, sizeof x->info);
    if (cfg->data.tokenizer[0]) {
        if (log)
            ct_log(CT_LOG_INFO, "%s: its tokenizer files do not load (%s): data.tokenizer = %s "
                   "stands for them", x->name, why, cfg->data.tokenizer);
        return CT_OK;
    }
    ct_status st = CT_ERR(CT_ERR_ARG, "%s: the model's tokenizer files do not load (%s), so the "
                          "shards cannot be checked against them, and run.dir would get no "
                          "tokenizer of the model's", x->name, why);
    ct_error_hint("give the model's tokenizer in a form ctrain reads (tokenizer.json of byte-level "
                  "or SentencePiece BPE, or vocab.json + merges.txt): data.tokenizer=PATH (ctrain "
                  "train --tokenizer PATH); it is checked against the shards and saved in run.dir");
    return st;
}

static ct_status run_tok_add(run_tok_src *s, int *n, const ct_config *cfg, const char *key,
                             const char *path, run_tok_kind kind, bool log) {
    run_tok_src *x = &s[*n];
    if (key) snprintf(x->name, sizeof x->name, "%s = %s", key, path);
    else snprintf(x->name, sizeof x->name, "the checkpoint resumed (%s)", path);
    x->path = path;
    x->kind = kind;
    ct_status st = CT_OK;
    if (kind == RUN_TOK_MODEL) {
        if (ct_tok_info_of_dir(&x->info, path)) st = run_tok_unreadable(x, cfg, log);
    } else if (kind == RUN_TOK_GIVEN) {
        ct_tokenizer *t = NULL;
        if (!(st = ct_tokenizer_load(&t, path))) ct_tok_info_of(&x->info, t, path);
        ct_tokenizer_free(t);
    } else {
        st = ct_tok_info_of_shards(&x->info, path);
    }
    if (st) {
        if (kind != RUN_TOK_MODEL) ct_error_prefix("%s", x->name);
        return st;
    }
    (*n)++;
    return CT_OK;
}

/* Every source that names a tokenizer: the model's first, then data.tokenizer,
 * then the shards'. log: say what data.tokenizer stands for (once a run). */
static ct_status run_tok_sources(const ct_config *cfg, const char *resume_dir, run_tok_src *s, int *n,
                                 bool log) {
    *n = 0;
    ct_status st = CT_OK;
    if (resume_dir && resume_dir[0])
        st = run_tok_add(s, n, cfg, NULL, resume_dir, RUN_TOK_MODEL, log);
    if (!st && cfg->model.init_from[0])
        st = run_tok_add(s, n, cfg, "model.init_from", cfg->model.init_from, RUN_TOK_MODEL, log);
    if (!st && cfg->data.tokenizer[0])
        st = run_tok_add(s, n, cfg, "data.tokenizer", cfg->data.tokenizer, RUN_TOK_GIVEN, log);
    if (!st && cfg->data.train[0])
        st = run_tok_add(s, n, cfg, "data.train", cfg->data.train, RUN_TOK_SHARDS, log);
    if (!st && cfg->data.val[0])
        st = run_tok_add(s, n, cfg, "data.val", cfg->data.val, RUN_TOK_SHARDS, log);
    return st;
}

static ct_status run_tok_agree(const run_tok_src *s, int n) {
    for (int i = 0; i < n; i++) {
        for (int j = i + 1; j < n; j++) {
            if (!ct_tok_info_match(&s[i].info, s[i].name, &s[j].info, s[j].name)) continue;
            if (s[i].kind != RUN_TOK_SHARDS && s[j].kind == RUN_TOK_SHARDS)
                ct_error_hint("tokenise the text again with the model's own tokenizer (ctrain prepare "
                              "--tokenizer %s --out NEW_DIR ...), or start from a model that uses the "
                              "shards' tokenizer", s[i].path);
            else if (s[i].kind == RUN_TOK_MODEL && s[j].kind == RUN_TOK_GIVEN)
                ct_error_hint("data.tokenizer stands for the model's own tokenizer: the model's "
                              "files load, so leave it unset, or give that same tokenizer");
            else if (s[i].kind == RUN_TOK_SHARDS && s[j].kind == RUN_TOK_SHARDS)
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
    ct_status st = run_tok_sources(cfg, resume_dir, s, &n, true);
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
    ct_status st = run_tok_sources(cfg, resume_dir, s, &n, false);
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
