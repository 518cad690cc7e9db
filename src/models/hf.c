/*
 * Hugging Face directories: the load and save entry points for the family,
 * and GPT-2's side (GPT2Config field names). config.json's model_type picks
 * the family ("gpt2" here; "llama", "mistral", "qwen2", "qwen3" in
 * hf_llama.c; anything else is refused with the list); the weights are
 * model.safetensors or the shards of model.safetensors.index.json (hf_llama.c
 * opens either). GPT-2 import accepts a `transformer.` name prefix, ignores
 * the causal-mask buffers (attn.bias, attn.masked_bias) and a tied
 * lm_head.weight and transposes Conv1D weights ([in, out] on disk) to our
 * (out, in); LLaMA's Linear weights are (out, in) already. A tensor no
 * parameter takes is an error naming it and what it means (no model silently
 * loses weights), except buffers that carry no weights (the causal masks,
 * RoPE's inv_freq, a tied head saved anyway). F16/BF16 convert to fp32.
 * Export writes the reverse, F32 (or BF16), with {"format": "pt"} metadata
 * so `transformers` loads it unchanged, and generation_config.json: the one
 * the model was loaded with (kept verbatim), else one made from its token
 * ids, as transformers writes it.
 * Every tensor's presence, shape and dtype is checked against the weight
 * files' headers before the parameter memory config.json declares is
 * allocated, so a config.json that lies about the sizes costs nothing.
 * Dropout: GPT2Config's resid_pdrop, embd_pdrop and attn_pdrop (absent:
 * transformers' default 0.1, with which HF trains GPT-2), LlamaConfig's
 * attention_dropout (absent: 0.0); export writes the model's.
 * A LoRA base stored as bf16 is read straight into its bf16 buffer, tensor by
 * tensor (ct_model_load_hf_lora): the fp32 model is never built, and the file
 * pages already converted are dropped from the mapping.
 * Leaves out: writing shards.
 */
#define _DEFAULT_SOURCE /* madvise(MADV_DONTNEED) */
#include "models/model_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cJSON.h>

#include "core/dtype.h"
#include "io/fileio.h"
#include "io/safetensors.h"
#include "models/hf_impl.h"

#define CT_IO_PATH_MAX HF_PATH_MAX

ct_status hf_json_int(const cJSON *root, const char *key, int lo, int hi, int *out, bool *found,
                      const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (found) *found = false;
    if (!v || cJSON_IsNull(v)) {
        if (found) return CT_OK;
        return CT_ERR(CT_ERR_FORMAT, "%s: field \"%s\" is missing, expected an integer in %d..%d",
                      path, key, lo, hi);
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return CT_ERR(CT_ERR_FORMAT, "%s: field \"%s\" must be an integer in %d..%d", path, key,
                      lo, hi);
    /* compared as doubles: no conversion of an out-of-range value to int */
    if (v->valuedouble < lo || v->valuedouble > hi)
        return CT_ERR(CT_ERR_FORMAT, "%s: field \"%s\" = %.17g is out of range: expected an "
                      "integer in %d..%d", path, key, v->valuedouble, lo, hi);
    *out = (int)v->valuedouble;
    if (found) *found = true;
    return CT_OK;
}

ct_status hf_json_prob(const cJSON *root, const char *key, double dflt, float *out,
                       const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = (float)dflt;
        return CT_OK;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1))
        return CT_ERR(CT_ERR_FORMAT, "%s: field \"%s\" must be a dropout probability in [0, 1)",
                      path, key);
    *out = (float)v->valuedouble;
    return CT_OK;
}

ct_status ct_model_config_load_hf(ct_model_config *cfg, const char *dir) {
    char path[CT_IO_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *root = NULL;
    ct_status st = ct_json_read_object(path, &root);
    if (st) {
        ct_error_hint("expected a Hugging Face model directory holding config.json and model.safetensors");
        return st;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    ct_family fam;
    if (!cJSON_IsString(mt) || !ct_model_family_from_name(mt->valuestring, &fam)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: \"model_type\" is %s%s%s: the supported families are "
                    "gpt2, llama (Llama 1-3.x, TinyLlama, SmolLM2), mistral, qwen2 (Qwen2, "
                    "Qwen2.5), qwen3 and gemma3_text (Gemma 3 270M, 1B)", path,
                    cJSON_IsString(mt) ? "\"" : "",
                    cJSON_IsString(mt) ? mt->valuestring : "missing",
                    cJSON_IsString(mt) ? "\"" : "");
        if (cJSON_IsString(mt) && !strcmp(mt->valuestring, "gemma3"))
            ct_error_hint("model_type gemma3 is Gemma 3's image-and-text model (4B and up); its "
                          "text-only members (gemma3_text) load");
        goto done;
    }
    if (fam != CT_FAMILY_GPT2) {
        st = hf_llama_config(cfg, root, fam, path);
        goto done;
    }
    /* required (n_inner aside: absent, null or 0 is 4 * n_embd) */
    struct {
        const char *key;
        int lo, hi, value;
    } f[] = {{"n_layer", 1, HF_MAX_LAYERS, 0},  {"n_head", 1, HF_MAX_HEADS, 0},
             {"n_embd", 1, HF_MAX_EMBD, 0},     {"vocab_size", 2, HF_MAX_VOCAB, 0},
             {"n_positions", 1, HF_MAX_CTX, 0}, {"n_inner", 0, HF_MAX_FFN, 0}};
    bool inner = false;
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if ((st = hf_json_int(root, f[i].key, f[i].lo, f[i].hi, &f[i].value, i == 5 ? &inner : NULL,
                              path)))
            goto done;
    ct_model_config_gpt2(cfg, f[0].value, f[1].value, f[2].value, f[3].value, f[4].value);
    if (inner && f[5].value > 0) cfg->n_ffn = f[5].value;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(root, "layer_norm_epsilon");
    if (eps) {
        if (!cJSON_IsNumber(eps) || !(eps->valuedouble > 0)) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: layer_norm_epsilon must be a positive number", path);
            goto done;
        }
        cfg->norm_eps = (float)eps->valuedouble;
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "activation_function");
    if (act && (!cJSON_IsString(act) || (strcmp(act->valuestring, "gelu_new") != 0 &&
                                         strcmp(act->valuestring, "gelu_pytorch_tanh") != 0))) {
        st = CT_ERR(CT_ERR_FORMAT,
                    "%s: activation_function %s is not supported: expected \"gelu_new\" "
                    "(GELU, tanh form)", path, cJSON_IsString(act) ? act->valuestring : "?");
        goto done;
    }
    /* dropout: GPT2Config's default 0.1 when absent (HF trains with it) */
    float *pd[3] = {&cfg->resid_pdrop, &cfg->embd_pdrop, &cfg->attn_pdrop};
    const char *pk[3] = {"resid_pdrop", "embd_pdrop", "attn_pdrop"};
    for (int i = 0; i < 3; i++)
        if ((st = hf_json_prob(root, pk[i], 0.1, pd[i], path))) goto done;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && cJSON_IsFalse(tie)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: tie_word_embeddings = false is not supported for GPT-2",
                    path);
        goto done;
    }
    if ((st = hf_token_ids(cfg, root, path))) goto done;
    st = ct_model_config_validate(cfg);
    if (st) ct_error_prefix("%s", path);
done:
    cJSON_Delete(root);
    return st;
}

/* The tensor for our name; GPT-2's also with the "transformer." prefix. */
static const ct_st_tensor *find_tensor(const ct_model *m, const hf_weights *w, const char *name,
                                       const ct_safetensors **file) {
    const ct_st_tensor *t = hf_weights_find(w, name, file);
    if (t || m->cfg.arch != CT_ARCH_GPT2) return t;
    char prefixed[128];
    snprintf(prefixed, sizeof prefixed, "transformer.%s", name);
    return hf_weights_find(w, prefixed, file);
}

/* Whether name is a tensor m takes or a buffer that carries no weights (a
 * tied head saved anyway, RoPE's inv_freq, GPT-2's causal masks). */
static bool known_extra(const ct_model *m, const char *name) {
    if (m->cfg.arch == CT_ARCH_LLAMA) {
        const char *dot = strrchr(name, '.');
        return strcmp(name, "lm_head.weight") == 0 ||
               (dot && strcmp(dot, ".inv_freq") == 0) || ct_model_find_param(m, name) != NULL;
    }
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    if (strcmp(name, "lm_head.weight") == 0) return true;
    const char *dot = strrchr(name, '.');
    if (dot && (strcmp(dot, ".bias") == 0 || strcmp(dot, ".masked_bias") == 0) &&
        strstr(name, ".attn.") && !strstr(name, "c_attn") && !strstr(name, "c_proj"))
        return true; /* causal-mask buffers */
    return ct_model_find_param(m, name) != NULL;
}

/* What an unexpected tensor is, as far as its name tells, for the error. */
static const char *extra_meaning(const ct_model *m, const char *name) {
    const ct_model_config *c = &m->cfg;
    if (strstr(name, "q_proj.bias") || strstr(name, "k_proj.bias") ||
        strstr(name, "v_proj.bias"))
        return c->family == CT_FAMILY_QWEN2 ? "attention biases"
                                            : "attention biases on q, k, v (a qwen2 model, or "
                                              "\"attention_bias\": true), which this config does "
                                              "not have";
    if (strstr(name, "o_proj.bias"))
        return "an o_proj bias (\"attention_bias\": true), which this config does not have";
    if (strstr(name, "q_norm") || strstr(name, "k_norm"))
        return "per-head q/k norms (a qwen3 model), which this config does not have";
    if (strstr(name, "mlp.") && strstr(name, ".bias")) return "MLP biases (not supported)";
    if (strstr(name, "experts") || strstr(name, "gate.weight"))
        return "mixture-of-experts layers (not supported)";
    if (strstr(name, "layers.") || strstr(name, "h.")) {
        const char *num = strstr(name, "layers.") ? strstr(name, "layers.") + 7
                                                   : strstr(name, "h.") + 2;
        if (atoi(num) >= c->n_layer) return "a layer beyond the config's num_hidden_layers";
    }
    return "a tensor no parameter of this model takes";
}

/* Every tensor of the set w is one m takes or a known buffer: else
 * CT_ERR_FORMAT naming the file, the model_type, the first three tensors and
 * what the first one means. */
static ct_status check_extras(const ct_model *m, const hf_weights *w) {
    int bad = 0;
    char list[400] = "", first[128] = "";
    const char *file = NULL;
    for (int f = 0; f < w->n; f++) {
        for (int i = 0; i < ct_st_count(w->files[f]); i++) {
            const ct_st_tensor *t = ct_st_tensor_at(w->files[f], i);
            if (known_extra(m, t->name)) continue;
            if (!bad) {
                snprintf(first, sizeof first, "%s", t->name);
                file = ct_st_path(w->files[f]);
            }
            if (bad < 3) {
                size_t n = strlen(list);
                snprintf(list + n, sizeof list - n, "%s'%s'", bad ? ", " : "", t->name);
            }
            bad++;
        }
    }
    if (!bad) return CT_OK;
    ct_status st = CT_ERR(CT_ERR_FORMAT, "%s: %d tensor%s that a model_type \"%s\" model of this "
                          "config.json does not take: %s%s; '%s' means %s", file, bad,
                          bad > 1 ? "s" : "", ct_model_family_name(m->cfg.family), list,
                          bad > 3 ? ", ..." : "", first, extra_meaning(m, first));
    ct_error_hint("config.json's model_type and switches must describe the weights: loading "
                  "without these tensors would train a different model");
    return st;
}

/* Drop the resident pages of [p, p+n) of a read-only file mapping from this
 * process (the page cache keeps them): a tensor already converted is not read
 * again, so the mapping stops counting towards the peak RSS. */
static void drop_mapped(const void *p, size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~((uintptr_t)pg - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

static bool host_le(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* Tensor p of the table into m's bf16 base: BF16 matrices in our layout are
 * copied bit for bit, others go through fp32 scratch (*scratch grows as
 * needed; the caller frees it); 1-D weights stay fp32. */
static ct_status read_bf16_base(ct_model *m, int i, const ct_safetensors *sf,
                                const ct_st_tensor *t, float **scratch, size_t *cap) {
    const ct_param *p = &m->table[i];
    ct_backend *be = m->be;
    ct_status st = CT_OK;
    if (t->dtype == CT_DTYPE_BF16 && p->ndim == 2 && !p->hf_conv1d && host_le()) {
        ct_be_upload(be, m->params16 + p->offset, t->data, p->numel * sizeof(uint16_t));
        drop_mapped(t->data, t->nbytes);
        return CT_OK;
    }
    /* fp32 on the host (bf16 bits after it), then up to the device */
    size_t need = p->numel + (p->numel + 1) / 2;
    if (*cap < need) {
        free(*scratch);
        *scratch = malloc(need * sizeof(float));
        *cap = *scratch ? need : 0;
        if (!*scratch) return CT_ERR(CT_ERR_OOM, "out of memory reading '%s'", t->name);
    }
    float *w = *scratch;
    uint16_t *w16 = (uint16_t *)(w + p->numel);
    st = ct_st_read_f32(sf, t, w, p->hf_conv1d);
    if (!st) {
        ct_f32_to_bf16_array(w16, w, p->numel);
        ct_be_upload(be, m->params16 + p->offset, w16, p->numel * sizeof(uint16_t));
        /* 1-D weights: fp32 for the math; bf16 bits too, as weights_to_bf16 leaves them */
        if (p->ndim == 1)
            ct_be_upload(be, m->small + m->small_off[i], w, p->numel * sizeof(float));
    }
    drop_mapped(t->data, t->nbytes);
    return st;
}

/* Why config.json asks for a tensor, when a switch does ("" otherwise). */
static const char *missing_reason(const ct_model_config *c, const char *name) {
    bool bias = strstr(name, "_proj.bias") != NULL;
    if (bias && c->family == CT_FAMILY_QWEN2) return " with biases on q, k and v";
    if (bias) return " with attention biases: \"attention_bias\" is true";
    if (strstr(name, "q_norm") || strstr(name, "k_norm")) return " with per-head q/k norms";
    if (!strcmp(name, "lm_head.weight")) return " with an untied head: \"tie_word_embeddings\" is false";
    return "";
}

/* Check the headers of the opened set w against m's table, before anything of
 * the size config.json declares is allocated: every tensor present, with the
 * shape the table expects (Conv1D weights [in, out] on disk) and a float
 * dtype. Reads the table only (m may have no parameter memory yet).
 * CT_ERR_FORMAT naming the file and the tensor. */
static ct_status check_weights(const ct_model *m, const hf_weights *w) {
    const ct_model_config *cfg = &m->cfg;
    const char *where = hf_weights_where(w);
    for (int i = 0; i < m->n_table; i++) {
        const ct_param *p = &m->table[i];
        const ct_safetensors *sf = NULL;
        const ct_st_tensor *t = find_tensor(m, w, p->name, &sf);
        if (!t)
            return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' is missing (config.json describes a "
                          "%d-layer model_type \"%s\" model%s)", sf ? ct_st_path(sf) : where,
                          p->name, cfg->n_layer, ct_model_family_name(cfg->family),
                          missing_reason(cfg, p->name));
        const char *path = ct_st_path(sf);
        /* expected shape on disk: Conv1D weights are [in, out] */
        int64_t e0 = p->hf_conv1d ? p->shape[1] : p->shape[0];
        int64_t e1 = p->hf_conv1d ? p->shape[0] : p->shape[1];
        bool ok = t->ndim == p->ndim && t->shape[0] == e0 && (p->ndim == 1 || t->shape[1] == e1);
        if (!ok) {
            char got[96] = "[";
            for (int d = 0; d < t->ndim && d < 8; d++) {
                char num[24];
                snprintf(num, sizeof num, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
                strncat(got, num, sizeof got - strlen(got) - 2);
            }
            strcat(got, "]");
            if (p->ndim == 2)
                return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld, %lld] "
                              "from config.json", path, t->name, got, (long long)e0,
                              (long long)e1);
            return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld] from "
                          "config.json", path, t->name, got, (long long)e0);
        }
        if (t->dtype != CT_DTYPE_F32 && t->dtype != CT_DTYPE_F16 && t->dtype != CT_DTYPE_BF16)
            return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16",
                          path, t->name, ct_dtype_name(t->dtype));
    }
    return CT_OK;
}

/* Read every tensor of the opened set w into m (fp32, or m's bf16 base); w
 * passed check_weights against m's table. */
static ct_status read_weights(ct_model *m, hf_weights *w) {
    bool b16 = m->params16 != NULL;
    float *scratch = NULL;
    size_t cap = 0;
    ct_status st = CT_OK;
    for (int i = 0; i < m->n_table; i++) {
        const ct_param *p = &m->table[i];
        const ct_safetensors *sf = NULL;
        const ct_st_tensor *t = find_tensor(m, w, p->name, &sf);
        CT_ASSERT(t); /* check_weights found it */
        if (b16) {
            st = read_bf16_base(m, i, sf, t, &scratch, &cap);
        } else {
            void *stage;
            float *dst = model_host_write(m, m->params + p->offset, p->numel * sizeof(float),
                                          &stage);
            st = dst ? ct_st_read_f32(sf, t, dst, p->hf_conv1d) : ct_last_status();
            model_host_done(m, m->params + p->offset, p->numel * sizeof(float), stage, !st);
        }
        if (st) goto done;
    }
done:
    free(scratch);
    return st;
}

/* dir/generation_config.json into m->gen_config when the file exists: a
 * JSON object, kept verbatim (its sampling settings travel with the model).
 * CT_ERR_FORMAT naming the file when it is not one. */
static ct_status read_gen_config(ct_model *m, const char *dir) {
    char path[CT_IO_PATH_MAX];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (access(path, F_OK) != 0) return CT_OK;
    cJSON *root = NULL;
    ct_status st = ct_json_read_object(path, &root);
    cJSON_Delete(root);
    if (st) return st;
    free(m->gen_config);
    m->gen_config = NULL;
    return ct_file_read_all(path, &m->gen_config, NULL);
}

/* dir/generation_config.json: the loaded one as it was, else one made from
 * the token ids as transformers makes it from a model config (nothing when
 * the model has none). */
static ct_status write_gen_config(const ct_model *m, const char *dir) {
    char path[CT_IO_PATH_MAX];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (m->gen_config) return ct_file_write_atomic(path, m->gen_config, strlen(m->gen_config));
    const ct_model_config *c = &m->cfg;
    bool gpt2 = c->arch == CT_ARCH_GPT2;
    if (!gpt2 && !c->has_bos && !c->n_eos && !c->has_pad) return CT_OK;
    cJSON *root = cJSON_CreateObject();
    if (!root) return CT_ERR(CT_ERR_OOM, "out of memory writing %s", path);
    cJSON_AddBoolToObject(root, "_from_model_config", true);
    if (gpt2 && !c->has_bos && !c->n_eos) { /* as config.json: <|endoftext|> */
        cJSON_AddNumberToObject(root, "bos_token_id", c->vocab_size - 1);
        cJSON_AddNumberToObject(root, "eos_token_id", c->vocab_size - 1);
    } else {
        hf_add_token_ids(root, c);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return CT_ERR(CT_ERR_OOM, "out of memory writing %s", path);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print leaves room: replace the NUL, write len+1 */
    ct_status st = ct_file_write_atomic(path, text, len + 1);
    free(text);
    return st;
}

/* Load dir's weights into a new model: fp32 (lo NULL), or straight into the
 * bf16 storage of a LoRA base (lo->base_bf16). Order: config.json, the weight
 * files' headers checked against the table (no parameter memory yet), then
 * the parameter memory, then the data; a directory whose config.json
 * declares more than its weights hold fails before the allocation. */
static ct_status load_hf(ct_model **out, ct_ctx *ctx, const char *dir, const ct_lora_opts *lo) {
    *out = NULL;
    ct_model_config cfg;
    ct_status st = ct_model_config_load_hf(&cfg, dir);
    if (st) return st;
    hf_weights w;
    ct_model *m = NULL;
    bool b16 = lo && lo->base_bf16;
    if ((st = hf_weights_open(&w, dir))) return st;
    if ((st = model_init_impl(&m, ctx, &cfg, false))) {
        ct_error_prefix("%s", dir);
        goto fail;
    }
    if ((st = check_weights(m, &w)) || (st = check_extras(m, &w))) goto fail;
    if (b16) {
        st = weights_bf16_alloc(m);
    } else {
        m->params = model_buf_alloc(m, m->numel * sizeof(float), CT_TAG_PARAMS);
        st = m->params ? CT_OK : ct_last_status();
    }
    if (st) {
        ct_error_prefix("%s (%zu parameters)", dir, m->numel);
        goto fail;
    }
    if ((st = read_weights(m, &w)) || (st = read_gen_config(m, dir))) goto fail;
    hf_weights_close(&w);
    if (lo && (st = ct_model_lora_attach(m, lo))) {
        ct_model_free(m);
        return st;
    }
    *out = m;
    return CT_OK;
fail:
    hf_weights_close(&w);
    ct_model_free(m);
    return st;
}

ct_status ct_model_load_hf_weights(ct_model *m, const char *dir) {
    ct_model_config cfg;
    ct_status st = ct_model_config_load_hf(&cfg, dir);
    if (st) return st;
    const ct_model_config *c = &m->cfg;
    if (cfg.arch != c->arch || cfg.n_layer != c->n_layer || cfg.n_head != c->n_head ||
        cfg.n_kv_head != c->n_kv_head || cfg.n_embd != c->n_embd || cfg.n_ffn != c->n_ffn ||
        cfg.vocab_size != c->vocab_size || cfg.n_ctx != c->n_ctx || cfg.norm != c->norm ||
        cfg.pos != c->pos || cfg.mlp != c->mlp || cfg.bias != c->bias ||
        cfg.tied_head != c->tied_head || cfg.family != c->family ||
        ct_model_head_dim(&cfg) != ct_model_head_dim(c) || cfg.qkv_bias != c->qkv_bias ||
        cfg.o_bias != c->o_bias || cfg.qk_norm != c->qk_norm)
        return CT_ERR(CT_ERR_ARG, "%s holds a model of another shape: it is %s n_layer=%d "
                      "n_head=%d n_embd=%d vocab_size=%d n_ctx=%d, this model is %s n_layer=%d "
                      "n_head=%d n_embd=%d vocab_size=%d n_ctx=%d", dir,
                      cfg.arch == CT_ARCH_LLAMA ? "llama" : "gpt2", cfg.n_layer, cfg.n_head,
                      cfg.n_embd, cfg.vocab_size, cfg.n_ctx,
                      c->arch == CT_ARCH_LLAMA ? "llama" : "gpt2", c->n_layer, c->n_head,
                      c->n_embd, c->vocab_size, c->n_ctx);
    hf_weights w;
    if ((st = hf_weights_open(&w, dir))) return st;
    st = check_weights(m, &w);
    if (!st) st = check_extras(m, &w);
    if (!st) st = read_weights(m, &w);
    hf_weights_close(&w);
    model_weights_changed(m); /* precision bf16: the copies follow (even a part) */
    if (!st) st = m->be->i->synchronize(m->be);
    return st;
}

ct_status ct_model_load_hf(ct_model **out, ct_ctx *ctx, const char *dir) {
    return load_hf(out, ctx, dir, NULL);
}

ct_status ct_model_load_hf_lora(ct_model **out, ct_ctx *ctx, const char *dir,
                                const ct_lora_opts *lo) {
    return load_hf(out, ctx, dir, lo);
}

/* GPT2Config for m. Returns owned JSON, NULL when out of memory. */
static cJSON *gpt2_config_json(const ct_model *m) {
    const ct_model_config *c = &m->cfg;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(root, "model_type", "gpt2");
    cJSON_AddStringToObject(root, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(root, "n_positions", c->n_ctx);
    cJSON_AddNumberToObject(root, "n_ctx", c->n_ctx);
    cJSON_AddNumberToObject(root, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(root, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(root, "n_head", c->n_head);
    if (c->n_ffn == 4 * c->n_embd)
        cJSON_AddNullToObject(root, "n_inner");
    else
        cJSON_AddNumberToObject(root, "n_inner", c->n_ffn);
    cJSON_AddNumberToObject(root, "layer_norm_epsilon", ct_f32_decimal(c->norm_eps));
    cJSON_AddNumberToObject(root, "resid_pdrop", ct_f32_decimal(c->resid_pdrop));
    cJSON_AddNumberToObject(root, "embd_pdrop", ct_f32_decimal(c->embd_pdrop));
    cJSON_AddNumberToObject(root, "attn_pdrop", ct_f32_decimal(c->attn_pdrop));
    cJSON_AddNumberToObject(root, "initializer_range", 0.02);
    if (c->has_bos || c->n_eos) {
        hf_add_token_ids(root, c);
    } else { /* GPT-2's <|endoftext|>, the last id */
        cJSON_AddNumberToObject(root, "bos_token_id", c->vocab_size - 1);
        cJSON_AddNumberToObject(root, "eos_token_id", c->vocab_size - 1);
    }
    cJSON_AddBoolToObject(root, "tie_word_embeddings", true);
    cJSON_AddBoolToObject(root, "scale_attn_weights", true);
    cJSON_AddStringToObject(root, "torch_dtype", "float32");
    return root;
}

static ct_status write_hf_config(const ct_model *m, const char *dir, bool bf16) {
    cJSON *root = m->cfg.arch == CT_ARCH_LLAMA ? hf_llama_config_json(m) : gpt2_config_json(m);
    if (!root) return CT_ERR(CT_ERR_OOM, "out of memory writing config.json");
    if (bf16) cJSON_ReplaceItemInObject(root, "torch_dtype", cJSON_CreateString("bfloat16"));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return CT_ERR(CT_ERR_OOM, "out of memory writing config.json");
    char path[CT_IO_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print leaves room: replace the NUL, write len+1 */
    ct_status st = ct_file_write_atomic(path, text, len + 1);
    free(text);
    return st;
}

static ct_status save_hf(ct_model *m, const char *dir, const char *file, bool grads,
                         bool write_config, bool bf16) {
    const float *base = grads ? m->grads : m->params;
    if (!base && !grads)
        return CT_ERR(CT_ERR_ARG, "the base weights are stored as bf16 (LoRA, lora.base_dtype = "
                      "bf16): save the adapter, or merge into an fp32 base");
    if (!base)
        return CT_ERR(CT_ERR_ARG, "no gradient buffer to save%s",
                      m->lora ? " (LoRA: the base is frozen and has none)" : "");
    ct_status st = ct_mkdir_p(dir);
    if (st) return st;
    void *stage;
    base = model_host_read(m, base, m->numel * sizeof(float), &stage);
    if (!base) return ct_last_status();
    ct_st_entry *e = calloc((size_t)m->n_table, sizeof *e);
    if (!e) {
        model_host_done(m, NULL, 0, stage, false);
        return CT_ERR(CT_ERR_OOM, "out of memory saving the model");
    }
    for (int i = 0; i < m->n_table; i++) {
        const ct_param *p = &m->table[i];
        e[i].name = p->name;
        e[i].dtype = bf16 ? CT_DTYPE_BF16 : CT_DTYPE_F32;
        e[i].ndim = p->ndim;
        e[i].shape[0] = p->hf_conv1d ? p->shape[1] : p->shape[0];
        e[i].shape[1] = p->hf_conv1d ? p->shape[0] : p->shape[1];
        e[i].data = base + p->offset;
        e[i].transpose = p->hf_conv1d;
    }
    char path[CT_IO_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    const char *meta[] = {"format", "pt"};
    st = ct_st_write(path, e, m->n_table, meta, 1);
    free(e);
    model_host_done(m, NULL, 0, stage, false);
    if (st == CT_OK && write_config) st = write_hf_config(m, dir, bf16);
    if (st == CT_OK && write_config) st = write_gen_config(m, dir);
    return st;
}

ct_status ct_model_save_hf(ct_model *m, const char *dir, const char *file, bool grads,
                           bool write_config) {
    return save_hf(m, dir, file, grads, write_config, false);
}

ct_status ct_model_export_hf(ct_model *m, const char *dir, bool bf16) {
    return save_hf(m, dir, "model.safetensors", false, true, bf16);
}
