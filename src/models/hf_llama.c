/*
 * Hugging Face LLaMA directories and sharded weights. Reads LlamaConfig
 * (config.json, model_type "llama") into the family's switches, refusing what
 * the model cannot honour (rope_scaling other than null, biases, an activation
 * other than silu, head_dim other than hidden_size / num_attention_heads);
 * writes LlamaConfig back. Opens the weights of a directory as one set: a
 * single model.safetensors, or the shards that model.safetensors.index.json's
 * weight_map names (each opened once; a named shard that is missing is an
 * error naming the index and the shard).
 * Leaves out: rope scaling variants, Meta's original consolidated.*.pth
 * checkpoints, and writing shards (export writes one file).
 */
#include "models/model_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "core/dtype.h"

#include "io/fileio.h"
#include "models/hf_impl.h"

/* ------------------------------------------------------------ config */

/* An integer field in lo..hi; dflt < 0: required. */
static ct_status cfg_int(const cJSON *root, const char *key, int dflt, int lo, int hi, int *out,
                         const char *path) {
    bool found = false;
    ct_status st = hf_json_int(root, key, lo, hi, out, dflt < 0 ? NULL : &found, path);
    if (!st && dflt >= 0 && !found) *out = dflt;
    return st;
}

static ct_status cfg_num(const cJSON *root, const char *key, double dflt, double *out,
                         const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return CT_OK;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))
        return CT_ERR(CT_ERR_FORMAT, "%s: field \"%s\" must be a positive number", path, key);
    *out = v->valuedouble;
    return CT_OK;
}

/* A boolean field that must be false (or absent) for this model. */
static ct_status cfg_false(const cJSON *root, const char *key, const char *what,
                           const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return CT_OK;
    return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" must be false or absent: %s are not supported",
                  path, key, what);
}

ct_status hf_llama_config(ct_model_config *cfg, const cJSON *root, const char *path) {
    ct_status st;
    int L = 0, C = 0, F = 0, NH = 0, NKV = 0, V = 0, ctx = 0;
    /* the ranges of the YAML keys model.* (hf_impl.h) */
    if ((st = cfg_int(root, "num_hidden_layers", -1, 1, HF_MAX_LAYERS, &L, path)) ||
        (st = cfg_int(root, "hidden_size", -1, 1, HF_MAX_EMBD, &C, path)) ||
        (st = cfg_int(root, "intermediate_size", -1, 1, HF_MAX_FFN, &F, path)) ||
        (st = cfg_int(root, "num_attention_heads", -1, 1, HF_MAX_HEADS, &NH, path)) ||
        (st = cfg_int(root, "num_key_value_heads", NH, 1, HF_MAX_HEADS, &NKV, path)) ||
        (st = cfg_int(root, "vocab_size", -1, 2, HF_MAX_VOCAB, &V, path)) ||
        (st = cfg_int(root, "max_position_embeddings", 2048, 1, HF_MAX_CTX, &ctx, path)))
        return st;
    if (C % NH)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"num_attention_heads\" = %d does not divide "
                      "\"hidden_size\" = %d", path, NH, C);
    if (NH % NKV)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"num_key_value_heads\" = %d does not divide "
                      "\"num_attention_heads\" = %d", path, NKV, NH);
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(root, "head_dim");
    if (hd && !cJSON_IsNull(hd) && (!cJSON_IsNumber(hd) || hd->valuedouble != C / NH))
        return CT_ERR(CT_ERR_FORMAT, "%s: \"head_dim\" must equal hidden_size / "
                      "num_attention_heads = %d", path, C / NH);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        const cJSON *type = cJSON_IsObject(rs) ? cJSON_GetObjectItemCaseSensitive(rs, "rope_type")
                                               : NULL;
        if (!type && cJSON_IsObject(rs)) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
        st = CT_ERR(CT_ERR_FORMAT, "%s: \"rope_scaling\"%s%s%s is not supported: expected null "
                    "(plain RoPE)", path, cJSON_IsString(type) ? " of type \"" : "",
                    cJSON_IsString(type) ? type->valuestring : "",
                    cJSON_IsString(type) ? "\"" : "");
        return st;
    }
    if ((st = cfg_false(root, "attention_bias", "attention biases", path)) ||
        (st = cfg_false(root, "mlp_bias", "MLP biases", path)))
        return st;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return CT_ERR(CT_ERR_FORMAT, "%s: \"hidden_act\" %s%s%s is not supported: expected "
                      "\"silu\"", path, cJSON_IsString(act) ? "\"" : "",
                      cJSON_IsString(act) ? act->valuestring : "(not a string)",
                      cJSON_IsString(act) ? "\"" : "");
    double eps, theta;
    if ((st = cfg_num(root, "rms_norm_eps", 1e-6, &eps, path)) ||
        (st = cfg_num(root, "rope_theta", 10000.0, &theta, path)))
        return st;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && !cJSON_IsNull(tie) && !cJSON_IsBool(tie))
        return CT_ERR(CT_ERR_FORMAT, "%s: \"tie_word_embeddings\" must be true or false", path);
    float attn_drop;
    if ((st = hf_json_prob(root, "attention_dropout", 0.0, &attn_drop, path))) return st;
    ct_model_config_llama(cfg, L, NH, NKV, C, F, V, ctx);
    cfg->attn_pdrop = attn_drop;
    cfg->norm_eps = (float)eps;
    cfg->rope_theta = (float)theta;
    cfg->tied_head = tie && cJSON_IsTrue(tie);
    st = ct_model_config_validate(cfg);
    if (st) ct_error_prefix("%s", path);
    return st;
}

cJSON *hf_llama_config_json(const ct_model *m) {
    const ct_model_config *c = &m->cfg;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(root, "model_type", "llama");
    cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddNumberToObject(root, "hidden_size", c->n_embd);
    cJSON_AddNumberToObject(root, "intermediate_size", c->n_ffn);
    cJSON_AddNumberToObject(root, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(root, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(root, "num_key_value_heads", c->n_kv_head);
    cJSON_AddNumberToObject(root, "head_dim", c->n_embd / c->n_head);
    cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(root, "max_position_embeddings", c->n_ctx);
    cJSON_AddNumberToObject(root, "rms_norm_eps", ct_f32_decimal(c->norm_eps));
    cJSON_AddNumberToObject(root, "rope_theta", ct_f32_decimal(c->rope_theta));
    cJSON_AddNullToObject(root, "rope_scaling");
    cJSON_AddBoolToObject(root, "attention_bias", false);
    cJSON_AddBoolToObject(root, "mlp_bias", false);
    cJSON_AddNumberToObject(root, "attention_dropout", ct_f32_decimal(c->attn_pdrop));
    cJSON_AddNumberToObject(root, "initializer_range", 0.02);
    cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tied_head);
    cJSON_AddStringToObject(root, "torch_dtype", "float32");
    return root;
}

/* ------------------------------------------------------- weight sets */

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A shard name from the index: a plain file name inside the directory. */
static bool safe_shard_name(const char *s) {
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

ct_status hf_weights_open(hf_weights *w, const char *dir) {
    memset(w, 0, sizeof *w);
    char path[HF_PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(w->index_path, sizeof w->index_path, "%s/model.safetensors.index.json", dir);
    ct_status st;
    if (file_exists(path) || !file_exists(w->index_path)) {
        w->index_path[0] = '\0';
        w->files = calloc(1, sizeof *w->files);
        if (!w->files) return CT_ERR(CT_ERR_OOM, "out of memory opening %s", path);
        if ((st = ct_st_open(&w->files[0], path))) {
            if (!file_exists(path))
                ct_error_hint("a Hugging Face model directory holds model.safetensors or "
                              "model.safetensors.index.json and its shards");
            hf_weights_close(w);
            return st;
        }
        w->n = 1;
        return CT_OK;
    }
    if ((st = ct_json_read_object(w->index_path, &w->index))) {
        hf_weights_close(w);
        return st;
    }
    const cJSON *map = w->index ? cJSON_GetObjectItemCaseSensitive(w->index, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        /* the message first: closing clears w->index_path */
        st = CT_ERR(CT_ERR_FORMAT, "%s: expected a JSON object with a \"weight_map\" object "
                    "(tensor name -> shard file)%s", w->index_path,
                    map ? ", but \"weight_map\" is not an object" : "");
        hf_weights_close(w);
        return st;
    }
    w->map = map;
    int n = cJSON_GetArraySize(map);
    w->files = calloc((size_t)(n ? n : 1), sizeof *w->files);
    w->names = calloc((size_t)(n ? n : 1), sizeof *w->names);
    if (!w->files || !w->names) {
        st = CT_ERR(CT_ERR_OOM, "out of memory reading %s", w->index_path);
        hf_weights_close(w);
        return st;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || !safe_shard_name(e->valuestring)) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: weight_map[\"%s\"] must name a file in the "
                        "directory", w->index_path, e->string);
            hf_weights_close(w);
            return st;
        }
        int have = 0;
        while (have < w->n && strcmp(w->names[have], e->valuestring) != 0) have++;
        if (have < w->n) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
        if (!file_exists(path)) {
            st = CT_ERR(CT_ERR_IO, "%s names shard '%s' (for tensor '%s'), but %s does not "
                        "exist", w->index_path, e->valuestring, e->string, path);
            ct_error_hint("download every shard the index lists into the model directory");
            hf_weights_close(w);
            return st;
        }
        w->names[w->n] = e->valuestring;
        if ((st = ct_st_open(&w->files[w->n], path))) {
            hf_weights_close(w);
            return st;
        }
        w->n++;
    }
    return CT_OK;
}

void hf_weights_close(hf_weights *w) {
    for (int i = 0; i < w->n; i++) ct_st_close(w->files[i]);
    free(w->files);
    free(w->names);
    cJSON_Delete(w->index);
    memset(w, 0, sizeof *w);
}

const ct_st_tensor *hf_weights_find(const hf_weights *w, const char *name,
                                    const ct_safetensors **file) {
    if (w->map) {
        /* the shard the index names, if it does */
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(w->map, name);
        if (cJSON_IsString(e)) {
            for (int i = 0; i < w->n; i++) {
                if (strcmp(w->names[i], e->valuestring) != 0) continue;
                *file = w->files[i];
                return ct_st_find(w->files[i], name);
            }
        }
    }
    for (int i = 0; i < w->n; i++) {
        const ct_st_tensor *t = ct_st_find(w->files[i], name);
        if (t) {
            *file = w->files[i];
            return t;
        }
    }
    *file = NULL;
    return NULL;
}

const char *hf_weights_where(const hf_weights *w) {
    return w->map ? w->index_path : (w->n ? ct_st_path(w->files[0]) : "?");
}
