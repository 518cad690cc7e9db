/*
 * Hugging Face directories of the LLaMA layout and sharded weights. Reads the
 * configs of the families that share LLaMA's tensor names (model_type
 * "llama": Llama 1-3.x, TinyLlama, SmolLM2; "mistral"; "qwen2": Qwen2,
 * Qwen2.5; "qwen3"; "gemma3_text": Gemma 3 270M and 1B) into the family's
 * switches: head_dim, q/k norms, q,k,v (and o_proj) biases, RoPE scaling
 * (rope_scaling or transformers 5's rope_parameters: default, linear,
 * llama3), Gemma's norms, GeGLU, embedding scale and sliding layers
 * (sliding_window with sliding_window_pattern or layer_types), the special
 * token ids; and refuses what the model cannot honour, naming the file, the
 * key and its value (other RoPE scalings, a sliding window outside Gemma 3,
 * MLP biases, another activation, mixtures of experts, logit soft-capping).
 * Writes each family's config back. Opens the weights of a directory as one
 * set: a single model.safetensors, or the shards that
 * model.safetensors.index.json's weight_map names (each opened once; a named
 * shard that is missing is an error naming the index and the shard).
 * Leaves out: sliding windows outside Gemma 3, a query scale other than
 * 1/sqrt(head_dim), Meta's original consolidated.*.pth checkpoints, and
 * writing shards (export writes one file).
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

/* A boolean field (absent or null: dflt). */
static ct_status cfg_bool(const cJSON *root, const char *key, bool dflt, bool *out,
                          const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = dflt;
        return CT_OK;
    }
    if (!cJSON_IsBool(v))
        return CT_ERR(CT_ERR_FORMAT, "%s: field \"%s\" must be true or false", path, key);
    *out = cJSON_IsTrue(v);
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

/* The RoPE scaling of the object rs (rope_scaling, or rope_parameters
 * whose rope_theta the caller read) into *out; key names it in messages. */
static ct_status cfg_rope_scaling(const cJSON *rs, const char *key, ct_rope_scaling *out,
                                  const char *path) {
    *out = (ct_rope_scaling){CT_ROPE_DEFAULT, 1.0f, 0, 0, 0};
    if (!rs || cJSON_IsNull(rs)) return CT_OK;
    if (!cJSON_IsObject(rs))
        return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" must be null or an object", path, key);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type"); /* the older name */
    const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
    if (!t)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" has no \"rope_type\" string", path, key);
    if (!strcmp(t, "default")) return CT_OK;
    if (strcmp(t, "linear") != 0 && strcmp(t, "llama3") != 0) {
        ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" of rope_type \"%s\" is not supported: "
                              "expected null, or rope_type default, linear or llama3", path, key,
                              t);
        ct_error_hint("dynamic, yarn and longrope (Phi-3's LongRoPE) scalings are not built; "
                      "a model that uses one would train with the wrong positions");
        return st;
    }
    double factor = 0;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(rs, "factor");
    if (!cJSON_IsNumber(f) || !(f->valuedouble > 0) || !isfinite(f->valuedouble))
        return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\".factor must be a positive number", path, key);
    factor = f->valuedouble;
    out->factor = (float)factor;
    if (!strcmp(t, "linear")) {
        out->type = CT_ROPE_LINEAR;
        return CT_OK;
    }
    out->type = CT_ROPE_LLAMA3;
    const char *names[2] = {"low_freq_factor", "high_freq_factor"};
    float *dst[2] = {&out->low_freq_factor, &out->high_freq_factor};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rs, names[i]);
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble))
            return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\".%s must be a positive number (llama3)",
                          path, key, names[i]);
        *dst[i] = (float)v->valuedouble;
    }
    if (!(out->high_freq_factor > out->low_freq_factor))
        return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\": high_freq_factor (%g) must exceed "
                      "low_freq_factor (%g)", path, key, (double)out->high_freq_factor,
                      (double)out->low_freq_factor);
    ct_status st = hf_json_int(rs, "original_max_position_embeddings", 1, HF_MAX_CTX,
                               &out->original_max_pos, NULL, path);
    if (st) ct_error_prefix("\"%s\"", key);
    return st;
}

/* bos_token_id, pad_token_id (an integer or null) and eos_token_id (an
 * integer, a list of up to 4, or null) of root into cfg. */
ct_status hf_token_ids(ct_model_config *cfg, const cJSON *root, const char *path) {
    const char *one[2] = {"bos_token_id", "pad_token_id"};
    bool *has[2] = {&cfg->has_bos, &cfg->has_pad};
    int *id[2] = {&cfg->bos_token_id, &cfg->pad_token_id};
    ct_status st;
    for (int i = 0; i < 2; i++) {
        if ((st = hf_json_int(root, one[i], 0, HF_MAX_VOCAB, id[i], has[i], path))) return st;
    }
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    cfg->n_eos = 0;
    if (!e || cJSON_IsNull(e)) return CT_OK;
    if (cJSON_IsNumber(e)) return hf_json_int(root, "eos_token_id", 0, HF_MAX_VOCAB,
                                              &cfg->eos_token_id[cfg->n_eos++], NULL, path);
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) > 4)
        return CT_ERR(CT_ERR_FORMAT, "%s: field \"eos_token_id\" must be an integer or a list of "
                      "at most 4 integers", path);
    const cJSON *x;
    cJSON_ArrayForEach(x, e) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble > HF_MAX_VOCAB)
            return CT_ERR(CT_ERR_FORMAT, "%s: \"eos_token_id\" holds %s: expected token ids in "
                          "0..%d", path, cJSON_IsNumber(x) ? "a number out of range" :
                          "something other than a number", HF_MAX_VOCAB);
        cfg->eos_token_id[cfg->n_eos++] = (int)x->valuedouble;
    }
    return CT_OK;
}

/* Refuse a sliding window that binds: Mistral's sliding_window (absent:
 * MistralConfig's 4096), Qwen's use_sliding_window / layer_types. */
static ct_status cfg_window(const cJSON *root, ct_family fam, int n_ctx, const char *path) {
    if (fam == CT_FAMILY_GEMMA3) return CT_OK; /* its windows are built: gemma_window */
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (cJSON_IsArray(lt)) {
        const cJSON *x;
        int l = 0;
        cJSON_ArrayForEach(x, lt) {
            if (!cJSON_IsString(x) || strcmp(x->valuestring, "full_attention") != 0)
                return CT_ERR(CT_ERR_FORMAT, "%s: \"layer_types\"[%d] is %s%s%s: only "
                              "\"full_attention\" layers are supported (sliding-window "
                              "attention is not built)", path, l, cJSON_IsString(x) ? "\"" : "",
                              cJSON_IsString(x) ? x->valuestring : "not a string",
                              cJSON_IsString(x) ? "\"" : "");
            l++;
        }
    }
    if (fam == CT_FAMILY_QWEN2 || fam == CT_FAMILY_QWEN3) {
        bool use = false;
        ct_status st = cfg_bool(root, "use_sliding_window", false, &use, path);
        if (st) return st;
        if (use)
            return CT_ERR(CT_ERR_FORMAT, "%s: \"use_sliding_window\" is true: sliding-window "
                          "attention is not built (expected false, as the published Qwen "
                          "models have it)", path);
        return CT_OK;
    }
    if (fam != CT_FAMILY_MISTRAL) return CT_OK;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (w && cJSON_IsNull(w)) return CT_OK;
    int win = 4096; /* MistralConfig's default when the key is absent */
    if (w) {
        ct_status st = hf_json_int(root, "sliding_window", 1, INT32_MAX, &win, NULL, path);
        if (st) return st;
    }
    if (win >= n_ctx) return CT_OK; /* never binds: every key is within the window */
    ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: \"sliding_window\" = %d%s is shorter than "
                          "max_position_embeddings = %d: sliding-window attention is not built",
                          path, win, w ? "" : " (MistralConfig's default, the key is absent)",
                          n_ctx);
    ct_error_hint("Mistral 7B v0.3 and later have \"sliding_window\": null; v0.1's window of "
                  "4096 is refused rather than trained as full attention");
    return st;
}

/* Keys whose presence means a mixture of experts (not built). */
static ct_status cfg_no_moe(const cJSON *root, const char *path) {
    const char *keys[] = {"num_experts", "num_local_experts", "n_routed_experts",
                          "num_experts_per_tok"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
            return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" is set: mixture-of-experts layers are not "
                          "supported", path, keys[i]);
    }
    return CT_OK;
}

/* Gemma 3's attention and layer pattern: query_pre_attn_scalar equal to the
 * head size (the kernels scale by 1/sqrt(head_dim)), no soft-capping, the
 * sliding window, and which layers slide (layer_types, else
 * sliding_window_pattern: every P-th layer is global) into *cfg. */
static ct_status gemma_window(ct_model_config *cfg, const cJSON *root, int HS, int L,
                              const char *path) {
    ct_status st;
    int qs = HS;
    if ((st = cfg_int(root, "query_pre_attn_scalar", 256, 1, HF_MAX_EMBD, &qs, path))) return st;
    if (qs != HS)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"query_pre_attn_scalar\" = %d differs from head_dim = "
                      "%d: attention scaled by another size than the head's is not built", path,
                      qs, HS);
    const char *caps[2] = {"final_logit_softcapping", "attn_logit_softcapping"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, caps[i]);
        if (v && !cJSON_IsNull(v))
            return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" is set: logit soft-capping is not built "
                          "(Gemma 3 has it null)", path, caps[i]);
    }
    if ((st = cfg_false(root, "use_bidirectional_attention", "bidirectional attention masks",
                        path)))
        return st;
    int W = 4096, P = 6; /* Gemma3TextConfig's defaults */
    if ((st = cfg_int(root, "sliding_window", 4096, 1, INT32_MAX, &W, path)) ||
        (st = cfg_int(root, "sliding_window_pattern", 6, 1, HF_MAX_LAYERS, &P, path)))
        return st;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        /* the list must be a pattern: every P-th layer global (P = the first
         * global layer's index + 1), or all sliding (P = 0) */
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != L)
            return CT_ERR(CT_ERR_FORMAT, "%s: \"layer_types\" must be a list of %d layer types",
                          path, L);
        P = 0;
        for (int l = 0; l < L && !P; l++) {
            const cJSON *x = cJSON_GetArrayItem(lt, l);
            if (cJSON_IsString(x) && !strcmp(x->valuestring, "full_attention")) P = l + 1;
        }
        for (int l = 0; l < L; l++) {
            const cJSON *x = cJSON_GetArrayItem(lt, l);
            bool full = P && (l + 1) % P == 0;
            const char *want = full ? "full_attention" : "sliding_attention";
            if (!cJSON_IsString(x) || strcmp(x->valuestring, want) != 0)
                return CT_ERR(CT_ERR_FORMAT, "%s: \"layer_types\"[%d] is %s%s%s, expected \"%s\": "
                              "only a repeating pattern (every layer whose number is a multiple of %d global) is built",
                              path, l, cJSON_IsString(x) ? "\"" : "",
                              cJSON_IsString(x) ? x->valuestring : "not a string",
                              cJSON_IsString(x) ? "\"" : "", want, P ? P : L + 1);
        }
    }
    double local = 10000.0;
    if ((st = cfg_num(root, "rope_local_base_freq", 10000.0, &local, path))) return st;
    cfg->sliding_window = W;
    cfg->sliding_pattern = P;
    cfg->rope_local_theta = (float)local;
    return CT_OK;
}

ct_status hf_llama_config(ct_model_config *cfg, const cJSON *root, ct_family fam,
                          const char *path) {
    ct_status st;
    int L = 0, C = 0, F = 0, NH = 0, NKV = 0, V = 0, ctx = 0;
    const char *mt = ct_model_family_name(fam);
    /* the ranges of the YAML keys model.* (hf_impl.h) */
    if ((st = cfg_int(root, "num_hidden_layers", -1, 1, HF_MAX_LAYERS, &L, path)) ||
        (st = cfg_int(root, "hidden_size", -1, 1, HF_MAX_EMBD, &C, path)) ||
        (st = cfg_int(root, "intermediate_size", -1, 1, HF_MAX_FFN, &F, path)) ||
        (st = cfg_int(root, "num_attention_heads", -1, 1, HF_MAX_HEADS, &NH, path)) ||
        (st = cfg_int(root, "num_key_value_heads", NH, 1, HF_MAX_HEADS, &NKV, path)) ||
        (st = cfg_int(root, "vocab_size", -1, 2, HF_MAX_VOCAB, &V, path)) ||
        (st = cfg_int(root, "max_position_embeddings", 2048, 1, HF_MAX_CTX, &ctx, path)))
        return st;
    if ((st = cfg_no_moe(root, path))) return st;
    /* head_dim: Qwen3Config's default is 128, Gemma3TextConfig's 256; the
     * others' hidden / heads */
    int HS = 0;
    int hs_dflt = fam == CT_FAMILY_QWEN3 ? 128 : fam == CT_FAMILY_GEMMA3 ? 256 : 0;
    if ((st = cfg_int(root, "head_dim", hs_dflt, 1, HF_MAX_EMBD, &HS, path))) return st;
    if (!HS && C % NH)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"num_attention_heads\" = %d does not divide "
                      "\"hidden_size\" = %d (and there is no \"head_dim\")", path, NH, C);
    if (NH % NKV)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"num_key_value_heads\" = %d does not divide "
                      "\"num_attention_heads\" = %d", path, NKV, NH);
    if (fam == CT_FAMILY_QWEN2 && HS && HS * NH != C)
        return CT_ERR(CT_ERR_FORMAT, "%s: \"head_dim\" = %d: a qwen2 model's head size is "
                      "hidden_size / num_attention_heads = %d", path, HS, C / NH);
    /* RoPE: rope_theta and rope_scaling, or transformers 5's rope_parameters */
    double eps, theta;
    ct_rope_scaling rope;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp))
            return CT_ERR(CT_ERR_FORMAT, "%s: \"rope_parameters\" must be an object", path);
        if ((st = cfg_num(rp, "rope_theta", 10000.0, &theta, path)) ||
            (st = cfg_rope_scaling(rp, "rope_parameters", &rope, path)))
            return st;
    } else if ((st = cfg_num(root, "rope_theta", 10000.0, &theta, path)) ||
               (st = cfg_rope_scaling(cJSON_GetObjectItemCaseSensitive(root, "rope_scaling"),
                                      "rope_scaling", &rope, path))) {
        return st;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor") &&
        !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor"))) {
        const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor");
        if (!cJSON_IsNumber(pr) || pr->valuedouble != 1.0)
            return CT_ERR(CT_ERR_FORMAT, "%s: \"partial_rotary_factor\" must be 1: rotary "
                          "embeddings on part of a head are not supported", path);
    }
    /* biases: Llama and Qwen3 read attention_bias (all of q, k, v, o);
     * Qwen2 always has q, k, v biases; Mistral none */
    bool attn_bias = false;
    if (fam == CT_FAMILY_LLAMA || fam == CT_FAMILY_QWEN3 || fam == CT_FAMILY_GEMMA3) {
        if ((st = cfg_bool(root, "attention_bias", false, &attn_bias, path))) return st;
    } else if ((st = cfg_false(root, "attention_bias", "attention biases on this family", path))) {
        return st;
    }
    if ((st = cfg_false(root, "mlp_bias", "MLP biases", path))) return st;
    /* the activation: SiLU (SwiGLU), or Gemma's tanh GELU (GeGLU), which its
     * config names hidden_activation */
    const char *act_key = fam == CT_FAMILY_GEMMA3 ? "hidden_activation" : "hidden_act";
    const char *act_want = fam == CT_FAMILY_GEMMA3 ? "gelu_pytorch_tanh" : "silu";
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, act_key);
    if (act && !cJSON_IsNull(act) &&
        (!cJSON_IsString(act) || strcmp(act->valuestring, act_want) != 0))
        return CT_ERR(CT_ERR_FORMAT, "%s: \"%s\" %s%s%s is not supported: expected \"%s\"",
                      path, act_key, cJSON_IsString(act) ? "\"" : "",
                      cJSON_IsString(act) ? act->valuestring : "(not a string)",
                      cJSON_IsString(act) ? "\"" : "", act_want);
    if ((st = cfg_window(root, fam, ctx, path))) return st;
    if ((st = cfg_num(root, "rms_norm_eps", 1e-6, &eps, path))) return st;
    bool tied = false;
    if ((st = cfg_bool(root, "tie_word_embeddings", fam == CT_FAMILY_GEMMA3, &tied, path)))
        return st;
    float attn_drop;
    if ((st = hf_json_prob(root, "attention_dropout", 0.0, &attn_drop, path))) return st;
    ct_model_config_llama(cfg, L, NH, NKV, C, F, V, ctx);
    model_family_defaults(cfg, fam);
    cfg->head_dim = HS && HS * NH != C ? HS : 0;
    cfg->qkv_bias = fam == CT_FAMILY_QWEN2 || attn_bias;
    cfg->o_bias = attn_bias;
    if (fam == CT_FAMILY_GEMMA3 && (st = gemma_window(cfg, root, ct_model_head_dim(cfg), L, path)))
        return st;
    cfg->rope_scaling = rope;
    cfg->attn_pdrop = attn_drop;
    cfg->norm_eps = (float)eps;
    cfg->rope_theta = (float)theta;
    cfg->tied_head = tied;
    if ((st = hf_token_ids(cfg, root, path))) return st;
    st = ct_model_config_validate(cfg);
    if (st) ct_error_prefix("%s (model_type \"%s\")", path, mt);
    return st;
}

static const char *const family_arch[CT_FAMILY_COUNT] = {
    "GPT2LMHeadModel",  "LlamaForCausalLM", "MistralForCausalLM",
    "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Gemma3ForCausalLM"};

void hf_add_token_ids(cJSON *root, const ct_model_config *c) {
    if (c->has_bos) cJSON_AddNumberToObject(root, "bos_token_id", c->bos_token_id);
    if (c->n_eos == 1) {
        cJSON_AddNumberToObject(root, "eos_token_id", c->eos_token_id[0]);
    } else if (c->n_eos > 1) {
        cJSON *e = cJSON_AddArrayToObject(root, "eos_token_id");
        for (int i = 0; e && i < c->n_eos; i++)
            cJSON_AddItemToArray(e, cJSON_CreateNumber(c->eos_token_id[i]));
    }
    if (c->has_pad) cJSON_AddNumberToObject(root, "pad_token_id", c->pad_token_id);
}

cJSON *hf_llama_config_json(const ct_model *m) {
    const ct_model_config *c = &m->cfg;
    ct_family fam = c->family;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(family_arch[fam]));
    cJSON_AddStringToObject(root, "model_type", ct_model_family_name(fam));
    if (fam == CT_FAMILY_GEMMA3)
        cJSON_AddStringToObject(root, "hidden_activation", "gelu_pytorch_tanh");
    else
        cJSON_AddStringToObject(root, "hidden_act", "silu");
    cJSON_AddNumberToObject(root, "hidden_size", c->n_embd);
    cJSON_AddNumberToObject(root, "intermediate_size", c->n_ffn);
    cJSON_AddNumberToObject(root, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(root, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(root, "num_key_value_heads", c->n_kv_head);
    if (fam != CT_FAMILY_QWEN2) cJSON_AddNumberToObject(root, "head_dim", ct_model_head_dim(c));
    cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(root, "max_position_embeddings", c->n_ctx);
    cJSON_AddNumberToObject(root, "rms_norm_eps", ct_f32_decimal(c->norm_eps));
    cJSON_AddNumberToObject(root, "rope_theta", ct_f32_decimal(c->rope_theta));
    const ct_rope_scaling *r = &c->rope_scaling;
    if (r->type == CT_ROPE_DEFAULT) {
        cJSON_AddNullToObject(root, "rope_scaling");
    } else {
        cJSON *rs = cJSON_AddObjectToObject(root, "rope_scaling");
        if (rs) {
            cJSON_AddStringToObject(rs, "rope_type", r->type == CT_ROPE_LINEAR ? "linear" : "llama3");
            cJSON_AddNumberToObject(rs, "factor", ct_f32_decimal(r->factor));
            if (r->type == CT_ROPE_LLAMA3) {
                cJSON_AddNumberToObject(rs, "low_freq_factor", ct_f32_decimal(r->low_freq_factor));
                cJSON_AddNumberToObject(rs, "high_freq_factor",
                                        ct_f32_decimal(r->high_freq_factor));
                cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                                        r->original_max_pos);
            }
        }
    }
    if (fam == CT_FAMILY_LLAMA || fam == CT_FAMILY_QWEN3 || fam == CT_FAMILY_GEMMA3)
        cJSON_AddBoolToObject(root, "attention_bias", c->o_bias);
    if (fam == CT_FAMILY_GEMMA3) {
        cJSON_AddNumberToObject(root, "query_pre_attn_scalar", ct_model_head_dim(c));
        cJSON_AddNullToObject(root, "final_logit_softcapping");
        cJSON_AddNullToObject(root, "attn_logit_softcapping");
        cJSON_AddNumberToObject(root, "sliding_window", c->sliding_window);
        if (c->sliding_pattern > 0)
            cJSON_AddNumberToObject(root, "sliding_window_pattern", c->sliding_pattern);
        cJSON *lt = cJSON_AddArrayToObject(root, "layer_types");
        for (int l = 0; lt && l < c->n_layer; l++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(ct_model_layer_slides(c, l)
                                                            ? "sliding_attention"
                                                            : "full_attention"));
        cJSON_AddNumberToObject(root, "rope_local_base_freq",
                                ct_f32_decimal(c->rope_local_theta));
    }
    if (fam == CT_FAMILY_LLAMA) cJSON_AddBoolToObject(root, "mlp_bias", false);
    if (fam == CT_FAMILY_MISTRAL) cJSON_AddNullToObject(root, "sliding_window");
    if (fam == CT_FAMILY_QWEN2 || fam == CT_FAMILY_QWEN3) {
        cJSON_AddBoolToObject(root, "use_sliding_window", false);
        cJSON_AddNullToObject(root, "sliding_window");
        cJSON_AddNumberToObject(root, "max_window_layers", c->n_layer);
    }
    cJSON_AddNumberToObject(root, "attention_dropout", ct_f32_decimal(c->attn_pdrop));
    cJSON_AddNumberToObject(root, "initializer_range", 0.02);
    cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tied_head);
    hf_add_token_ids(root, c);
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
