/*
 * Whose tokenizer is whose: the tokenizer a model directory carries (its
 * tokenizer files, loaded for their identity), the one a set of shards was
 * prepared with (the identity ctrain prepare wrote into manifest.json beside
 * them), and the comparison that refuses a pair that differ, naming both.
 * Token ids fitting the model's vocabulary prove nothing (LLaMA's 32,000 ids
 * fit GPT-2's 50,257), so the identity (a hash of the vocabulary, merges and
 * special tokens) is what is compared.
 * Leaves out: reading tokenizer files (tokenizer_files.c) and deciding which
 * sources a command must check (the trainer, the CLI).
 */
#include "ctrain/data.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool ti_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool ti_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

void ct_tok_info_of(ct_tok_info *out, const ct_tokenizer *t, const char *where) {
    memset(out, 0, sizeof *out);
    snprintf(out->identity, sizeof out->identity, "%s", ct_tokenizer_identity(t));
    out->vocab_size = ct_tokenizer_vocab_size(t);
    snprintf(out->where, sizeof out->where, "%s", where);
    snprintf(out->load, sizeof out->load, "%s", where);
}

ct_status ct_tok_info_of_dir(ct_tok_info *out, const char *dir) {
    memset(out, 0, sizeof *out);
    if (!ti_is_dir(dir) || !ct_tokenizer_dir_has_files(dir)) return CT_OK;
    ct_tokenizer *t = NULL;
    ct_status st = ct_tokenizer_load(&t, dir);
    if (st) return st;
    ct_tok_info_of(out, t, dir);
    ct_tokenizer_free(t);
    return CT_OK;
}

/* "kind:16 hex digits", as ct_tokenizer_identity makes them. */
static bool ti_valid_identity(const char *s) {
    const char *colon = strchr(s, ':');
    if (!colon || colon == s || strlen(colon + 1) != 16 || strlen(s) >= sizeof ((ct_tok_info *)0)->identity)
        return false;
    for (const char *p = colon + 1; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

/* Whether file `base` is among the manifest's shards[].file. */
static bool ti_lists_shard(const cJSON *man, const char *base) {
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(man, "shards");
    for (const cJSON *e = cJSON_IsArray(sh) ? sh->child : NULL; e; e = e->next) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
        if (cJSON_IsString(f) && !strcmp(f->valuestring, base)) return true;
    }
    return false;
}

/* Manifest format ctrain-shards/1 (data/prepare/prepare.c writes it):
 *   {"format": "ctrain-shards/1", "tokenizer": {"path": as given to prepare,
 *    "abs_path": resolved (newer manifests), "identity": "kind:hex",
 *    "vocab_size": N, "kind", "eot", "bos", "document_token", "files": [...]},
 *    "shards": [{"file": "train_000000.bin", ...}], ...} */
ct_status ct_tok_info_of_shards(ct_tok_info *out, const char *spec) {
    memset(out, 0, sizeof *out);
    char dir[CT_TOK_WHERE_MAX - 16], shard[CT_TOK_WHERE_MAX - 16] = "";
    if (ti_is_dir(spec)) {
        snprintf(dir, sizeof dir, "%s", spec);
    } else {
        if (strpbrk(spec, "*?[")) {
            glob_t g;
            if (glob(spec, 0, NULL, &g) != 0) return CT_OK; /* the loader says what is wrong */
            snprintf(shard, sizeof shard, "%s", g.gl_pathc ? g.gl_pathv[0] : "");
            globfree(&g);
        } else {
            snprintf(shard, sizeof shard, "%s", spec);
        }
        if (!shard[0] || !ti_exists(shard)) return CT_OK;
        const char *slash = strrchr(shard, '/');
        if (!slash) snprintf(dir, sizeof dir, ".");
        else snprintf(dir, sizeof dir, "%.*s", slash == shard ? 1 : (int)(slash - shard), shard);
    }
    char path[CT_TOK_WHERE_MAX];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (!ti_exists(path)) return CT_OK;
    cJSON *man = NULL;
    ct_status st = ct_json_read_object(path, &man);
    if (st) {
        ct_error_hint("%s describes the shards beside it (ctrain prepare writes it): run prepare "
                      "again, or remove the file to train without a tokenizer check", path);
        return st;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(man, "format");
    /* plain and instruction (sft) shards record the tokenizer alike */
    if (!cJSON_IsString(fmt) || (strncmp(fmt->valuestring, "ctrain-shards/", 14) != 0 &&
                                 strncmp(fmt->valuestring, "ctrain-sft/", 11) != 0)) {
        cJSON_Delete(man); /* another program's manifest: it says nothing of ours */
        return CT_OK;
    }
    if (shard[0]) {
        const char *slash = strrchr(shard, '/');
        if (!ti_lists_shard(man, slash ? slash + 1 : shard)) {
            cJSON_Delete(man); /* a shard from elsewhere beside this manifest */
            return CT_OK;
        }
    }
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(man, "tokenizer");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(tk, "identity");
    if (!cJSON_IsString(id) || !ti_valid_identity(id->valuestring)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: tokenizer.identity is %s, expected a string like "
                    "\"gpt2-bpe:0123456789abcdef\"", path,
                    !id ? "missing" : cJSON_IsString(id) ? "malformed" : "not a string");
        ct_error_hint("run ctrain prepare again to rewrite the manifest");
        cJSON_Delete(man);
        return st;
    }
    snprintf(out->identity, sizeof out->identity, "%s", id->valuestring);
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(tk, "vocab_size");
    if (cJSON_IsNumber(vs) && vs->valuedouble > 0 && vs->valuedouble < 1e9)
        out->vocab_size = (int64_t)vs->valuedouble;
    snprintf(out->where, sizeof out->where, "%s", path);
    const cJSON *given = cJSON_GetObjectItemCaseSensitive(tk, "path");
    const cJSON *abs = cJSON_GetObjectItemCaseSensitive(tk, "abs_path");
    if (cJSON_IsString(given)) snprintf(out->origin, sizeof out->origin, "%s", given->valuestring);
    if (cJSON_IsString(abs) && ti_exists(abs->valuestring))
        snprintf(out->load, sizeof out->load, "%s", abs->valuestring);
    else if (cJSON_IsString(given) && ti_exists(given->valuestring))
        snprintf(out->load, sizeof out->load, "%s", given->valuestring);
    cJSON_Delete(man);
    return CT_OK;
}

/* "50257 tokens, the tokenizer files in DIR" or "..., SHARDS/manifest.json:
 * prepared with --tokenizer PATH". */
static void ti_describe(char *buf, size_t cap, const ct_tok_info *x) {
    char n[48] = "";
    if (x->vocab_size > 0) snprintf(n, sizeof n, "%lld tokens, ", (long long)x->vocab_size);
    if (x->origin[0])
        snprintf(buf, cap, "%s%s: prepared with --tokenizer %s", n, x->where, x->origin);
    else
        snprintf(buf, cap, "%sthe tokenizer files in %s", n, x->where);
}

ct_status ct_tok_info_match(const ct_tok_info *a, const char *a_name, const ct_tok_info *b,
                            const char *b_name) {
    if (!a->identity[0] || !b->identity[0] || !strcmp(a->identity, b->identity)) return CT_OK;
    char da[2 * CT_TOK_WHERE_MAX + 64], db[2 * CT_TOK_WHERE_MAX + 64];
    ti_describe(da, sizeof da, a);
    ti_describe(db, sizeof db, b);
    ct_status st = CT_ERR(CT_ERR_ARG, "tokenizer mismatch: %s uses tokenizer %s (%s), but %s uses %s (%s)",
                          a_name, a->identity, da, b_name, b->identity, db);
    ct_error_hint("the same ids stand for other text under another tokenizer: use one tokenizer "
                  "throughout (ctrain prepare --tokenizer MODEL_DIR tokenises text with a model's own)");
    return st;
}
