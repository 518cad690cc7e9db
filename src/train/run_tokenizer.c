/*
 * The run's tokenizer (see run_tokenizer.h): every source that names one
 * (the checkpoint resumed, model.init_from, data.tokenizer, data.train's and
 * data.val's manifests) must name the same; the files of the first that has
 * them go into run.dir, whence ct_ckpt_save copies them into each checkpoint.
 * A model whose own files do not load is refused unless data.tokenizer
 * stands for them: the shards' tokenizer never goes beside another's model.
 * The chat template instruction shards were rendered with (their manifest's
 * "chat_template") goes into run.dir's tokenizer_config.json with them.
 * Leaves out: what an identity is (data/tokenizer/tokenizer_ident.c).
 */
#include "train/run_tokenizer.h"

#include "ctrain/data.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* The chat template shards source x's manifest records (ctrain prepare
 * --format sft: {"name", "template", "special_tokens"}), owned; NULL when it
 * records none (or x is a model directory). */
static cJSON *run_tok_template(const run_tok_src *x) {
    size_t n = strlen(x->info.where);
    if (x->kind != RUN_TOK_SHARDS || n < 13 || strcmp(x->info.where + n - 13, "manifest.json") != 0)
        return NULL;
    cJSON *man = NULL;
    if (ct_json_read_object(x->info.where, &man)) {
        ct_error_clear(); /* read at setup; said then */
        return NULL;
    }
    cJSON *rec = cJSON_DetachItemFromObjectCaseSensitive(man, "chat_template");
    cJSON_Delete(man);
    if (rec && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(rec, "template"))) {
        ct_log(CT_LOG_WARN, "%s: chat_template has no \"template\" string: it is not saved with the run", x->info.where);
        cJSON_Delete(rec);
        rec = NULL;
    }
    return rec;
}

/* The text of token id (NUL-terminated into buf[cap]), or "". */
static const char *run_tok_text(const ct_tokenizer *t, int32_t id, char *buf, size_t cap) {
    size_t n = 0;
    const char *b = id >= 0 ? ct_tokenizer_token_bytes(t, id, &n) : NULL;
    buf[0] = '\0';
    if (b && n < cap) {
        memcpy(buf, b, n);
        buf[n] = '\0';
    }
    return buf;
}

/* Write template record rec (from `from`) into dir/tokenizer_config.json,
 * which the tokenizer t's files were just saved beside: its chat_template,
 * and each special token the template rendered with that the config does not
 * name. A SentencePiece tokenizer reads bos_token and eos_token from that
 * file (they are part of its identity), so those are added only when they
 * are the tokenizer's own. A chat_template.jinja there (which readers prefer)
 * gets the template too. */
static ct_status run_tok_write_template(const ct_tokenizer *t, const cJSON *rec, const char *from, const char *dir) {
    char path[CT_PATH_MAX + 32], jinja[CT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    const char *text = cJSON_GetObjectItemCaseSensitive(rec, "template")->valuestring;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(rec, "name");
    struct stat sb;
    cJSON *cfg = NULL;
    ct_status st = stat(path, &sb) == 0 ? ct_json_read_object(path, &cfg) : CT_OK;
    if (!st && !cfg && !(cfg = cJSON_CreateObject())) st = CT_ERR(CT_ERR_OOM, "out of memory");
    if (st) return st;
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    bool replaced = old && !cJSON_IsNull(old) && !(cJSON_IsString(old) && !strcmp(old->valuestring, text));
    cJSON *v = cJSON_CreateString(text);
    if (!v) st = CT_ERR(CT_ERR_OOM, "out of memory");
    else if (old) cJSON_ReplaceItemInObjectCaseSensitive(cfg, "chat_template", v);
    else cJSON_AddItemToObject(cfg, "chat_template", v);
    bool spm = ct_tokenizer_kind(t) == CT_TOK_KIND_SPM_BPE;
    char own[256];
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(rec, "special_tokens");
    for (const cJSON *k = cJSON_IsObject(toks) ? toks->child : NULL; !st && k; k = k->next) {
        if (!cJSON_IsString(k) || cJSON_HasObjectItem(cfg, k->string)) continue;
        bool bos = !strcmp(k->string, "bos_token"), eos = !strcmp(k->string, "eos_token");
        if (spm && (bos || eos) &&
            strcmp(k->valuestring, run_tok_text(t, bos ? ct_tokenizer_bos(t) : ct_tokenizer_eot(t), own, sizeof own))) {
            ct_log(CT_LOG_WARN, "the chat template of %s renders with %s \"%s\", but the tokenizer's is \"%s\": "
                   "%s is left out of %s (it would change the tokenizer)", from, k->string, k->valuestring, own,
                   k->string, path);
            continue;
        }
        if (!cJSON_AddStringToObject(cfg, k->string, k->valuestring)) st = CT_ERR(CT_ERR_OOM, "out of memory");
    }
    char *out = st ? NULL : cJSON_Print(cfg);
    if (!st && !out) st = CT_ERR(CT_ERR_OOM, "out of memory");
    if (!st) {
        size_t n = strlen(out);
        out[n] = '\n'; /* cJSON_Print's NUL; the file ends with a newline */
        st = ct_file_write_atomic(path, out, n + 1);
    }
    if (!st && stat(jinja, &sb) == 0) st = ct_file_write_atomic(jinja, text, strlen(text));
    if (!st)
        ct_log(CT_LOG_INFO, "chat template %s (from %s) saved in %s%s", cJSON_IsString(name) ? name->valuestring : "",
               from, path, replaced ? ", replacing the one there before" : "");
    free(out);
    cJSON_Delete(cfg);
    return st;
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
    /* the chat template instruction shards were rendered with: data.train's, else data.val's */
    cJSON *tpl = NULL;
    const run_tok_src *tpl_src = NULL;
    for (int i = 0; !st && i < n && !tpl; i++)
        if ((tpl = run_tok_template(&s[i]))) tpl_src = &s[i];
    if (st) {
        /* checked at setup; a file changed since */
    } else if (t) {
        st = ct_tokenizer_save_files(t, dir);
        if (!st)
            ct_log(CT_LOG_INFO, "tokenizer %s (%s) saved in %s beside the weights", ct_tokenizer_identity(t),
                   known->info.load, dir);
        else
            ct_error_prefix("saving the run's tokenizer (%s) in run.dir", known->info.load);
        if (!st && tpl) {
            st = run_tok_write_template(t, tpl, tpl_src->name, dir);
            if (st) ct_error_prefix("saving the chat template of %s in run.dir", tpl_src->name);
        }
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
    if (!st && tpl && !t)
        ct_log(CT_LOG_WARN, "%s records the chat template its conversations were rendered with, but the run has no "
               "tokenizer files to keep it beside: give `ctrain chat` the template with --chat-template", tpl_src->name);
    cJSON_Delete(tpl);
    ct_tokenizer_free(t);
    free(s);
    return st;
}
