/*
 * The members of the transformer family: the config constructors of the two
 * tensor layouts (GPT-2, LLaMA), the presets (the published models' shapes
 * and a small test size of each family), the families' model_type names,
 * the head size, which layers slide (Gemma 3), and RoPE's inverse
 * frequencies with their scaling (default, linear, Llama 3's), computed in
 * fp32 as Hugging Face computes them.
 * Leaves out: the checks of a config (model.c) and reading config.json
 * (hf.c, hf_llama.c).
 */
#include "models/model_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void ct_model_config_gpt2(ct_model_config *c, int n_layer, int n_head, int n_embd,
                          int vocab_size, int n_ctx) {
    memset(c, 0, sizeof *c);
    c->arch = CT_ARCH_GPT2;
    c->family = CT_FAMILY_GPT2;
    c->norm = CT_NORM_LAYERNORM;
    c->pos = CT_POS_LEARNED;
    c->mlp = CT_MLP_GELU;
    c->n_layer = n_layer;
    c->n_head = n_head;
    c->n_kv_head = n_head;
    c->n_embd = n_embd;
    /* 0 for a width whose 4x overflows: ct_model_config_validate refuses it */
    c->n_ffn = n_embd > 0 && n_embd <= INT32_MAX / 4 ? 4 * n_embd : 0;
    c->vocab_size = vocab_size;
    c->n_ctx = n_ctx;
    c->bias = true;
    c->tied_head = true;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
}

void ct_model_config_llama(ct_model_config *c, int n_layer, int n_head, int n_kv_head,
                           int n_embd, int n_ffn, int vocab_size, int n_ctx) {
    memset(c, 0, sizeof *c);
    c->arch = CT_ARCH_LLAMA;
    c->family = CT_FAMILY_LLAMA;
    c->norm = CT_NORM_RMSNORM;
    c->pos = CT_POS_ROPE;
    c->mlp = CT_MLP_SWIGLU;
    c->n_layer = n_layer;
    c->n_head = n_head;
    c->n_kv_head = n_kv_head;
    c->n_embd = n_embd;
    c->n_ffn = n_ffn;
    c->vocab_size = vocab_size;
    c->n_ctx = n_ctx;
    c->bias = false;
    c->tied_head = false;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
}

int ct_model_head_dim(const ct_model_config *c) {
    if (c->head_dim > 0) return c->head_dim;
    return c->n_head > 0 ? c->n_embd / c->n_head : 0;
}

bool ct_model_layer_slides(const ct_model_config *c, int l) {
    if (c->sliding_window <= 0) return false;
    return c->sliding_pattern <= 0 || (l + 1) % c->sliding_pattern != 0;
}

static const char *const family_names[CT_FAMILY_COUNT] = {"gpt2",  "llama", "mistral",
                                                          "qwen2", "qwen3", "gemma3_text"};

const char *ct_model_family_name(ct_family f) {
    return (int)f >= 0 && f < CT_FAMILY_COUNT ? family_names[f] : "?";
}

bool ct_model_family_from_name(const char *name, ct_family *out) {
    for (int f = 0; f < CT_FAMILY_COUNT; f++) {
        if (strcmp(name, family_names[f]) == 0) {
            *out = (ct_family)f;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------- presets */

typedef struct preset {
    const char *name;
    ct_family family;
    int n_layer, n_head, n_kv_head, n_embd, n_ffn, vocab, n_ctx;
    int head_dim;      /* 0: n_embd / n_head */
    float rope_theta;  /* 0: 10000 */
    float norm_eps;    /* 0: 1e-5 (LLaMA, GPT-2) */
    bool tied;
    bool llama3_rope;  /* Llama 3.2's rope_scaling: llama3, factor 32, 1, 4, 8192 */
    int window;        /* Gemma 3: sliding window (every 6th layer global) */
} preset;

/* n_ffn 0: GPT-2's 4 * n_embd. The published ones are their config.json's
 * shapes (TinyLlama/TinyLlama-1.1B, meta-llama/Llama-3.2-1B,
 * HuggingFaceTB/SmolLM2-*, Qwen/Qwen2.5-*, Qwen/Qwen3-*, mistralai/
 * Mistral-7B-v0.3); the -tiny ones are test sizes with every switch of their
 * family (Qwen3's head size differs from n_embd / n_head, Llama 3's RoPE is
 * scaled with an original context shorter than n_ctx). */
static const preset presets[] = {
    /* name, family, L, NH, NKV, C, F, V, n_ctx, head_dim, theta, eps, tied, llama3, window */
    {"gpt2", CT_FAMILY_GPT2, 12, 12, 12, 768, 0, 50257, 1024, 0, 0, 0, true, false, 0},
    {"gpt2-medium", CT_FAMILY_GPT2, 24, 16, 16, 1024, 0, 50257, 1024, 0, 0, 0, true, false, 0},
    {"gpt2-large", CT_FAMILY_GPT2, 36, 20, 20, 1280, 0, 50257, 1024, 0, 0, 0, true, false, 0},
    {"gpt2-xl", CT_FAMILY_GPT2, 48, 25, 25, 1600, 0, 50257, 1024, 0, 0, 0, true, false, 0},
    {"gpt2-demo", CT_FAMILY_GPT2, 4, 4, 4, 128, 0, 512, 128, 0, 0, 0, true, false, 0},
    {"gpt2-tiny", CT_FAMILY_GPT2, 2, 2, 2, 16, 0, 64, 32, 0, 0, 0, true, false, 0},
    {"tinyllama-1.1b", CT_FAMILY_LLAMA, 22, 32, 4, 2048, 5632, 32000, 2048, 0, 0, 0, false, false,
     0},
    {"llama-demo", CT_FAMILY_LLAMA, 4, 8, 4, 256, 688, 512, 256, 0, 0, 0, false, false, 0},
    {"llama-tiny", CT_FAMILY_LLAMA, 2, 4, 2, 32, 88, 64, 32, 0, 0, 0, false, false, 0},
    {"llama3.2-1b", CT_FAMILY_LLAMA, 16, 32, 8, 2048, 8192, 128256, 131072, 64, 500000.0f,
     1e-5f, true, true, 0},
    {"smollm2-135m", CT_FAMILY_LLAMA, 30, 9, 3, 576, 1536, 49152, 8192, 0, 100000.0f, 1e-5f,
     true, false, 0},
    {"smollm2-360m", CT_FAMILY_LLAMA, 32, 15, 5, 960, 2560, 49152, 8192, 0, 100000.0f, 1e-5f,
     true, false, 0},
    {"qwen2.5-0.5b", CT_FAMILY_QWEN2, 24, 14, 2, 896, 4864, 151936, 32768, 0, 1e6f, 1e-6f, true,
     false, 0},
    {"qwen2.5-1.5b", CT_FAMILY_QWEN2, 28, 12, 2, 1536, 8960, 151936, 131072, 0, 1e6f, 1e-6f, true,
     false, 0},
    {"qwen3-0.6b", CT_FAMILY_QWEN3, 28, 16, 8, 1024, 3072, 151936, 40960, 128, 1e6f, 1e-6f, true,
     false, 0},
    {"qwen3-1.7b", CT_FAMILY_QWEN3, 28, 16, 8, 2048, 6144, 151936, 40960, 128, 1e6f, 1e-6f, true,
     false, 0},
    {"mistral-7b", CT_FAMILY_MISTRAL, 32, 32, 8, 4096, 14336, 32768, 32768, 0, 1e6f, 1e-5f, false,
     false, 0},
    /* google/gemma-3-270m, google/gemma-3-1b-pt: 256-wide heads, one KV head,
     * windows of 512 on five layers of six */
    {"gemma3-270m", CT_FAMILY_GEMMA3, 18, 4, 1, 640, 2048, 262144, 32768, 256, 1e6f, 1e-6f, true,
     false, 512},
    {"gemma3-1b", CT_FAMILY_GEMMA3, 26, 4, 1, 1152, 6912, 262144, 32768, 256, 1e6f, 1e-6f, true,
     false, 512},
    {"llama3-tiny", CT_FAMILY_LLAMA, 2, 4, 2, 32, 88, 64, 64, 0, 500000.0f, 1e-5f, true, true, 0},
    {"mistral-tiny", CT_FAMILY_MISTRAL, 2, 4, 2, 32, 88, 64, 32, 0, 1e6f, 1e-5f, false, false, 0},
    {"qwen2-tiny", CT_FAMILY_QWEN2, 2, 4, 2, 32, 88, 64, 32, 0, 1e6f, 1e-6f, true, false, 0},
    {"qwen3-tiny", CT_FAMILY_QWEN3, 2, 4, 2, 32, 88, 64, 32, 16, 1e6f, 1e-6f, false, false, 0},
    /* 7 layers: 6 slide (window 8, shorter than its sequences), the 6th is global */
    {"gemma3-tiny", CT_FAMILY_GEMMA3, 7, 4, 2, 32, 88, 64, 64, 16, 1e6f, 1e-6f, true, false, 8},
};

/* A family's switches on a LLaMA-layout config (q,k,v biases for Qwen2, q/k
 * norms for Qwen3). */
static void family_switches(ct_model_config *c, ct_family f) {
    c->family = f;
    c->qkv_bias = f == CT_FAMILY_QWEN2;
    c->o_bias = false;
    c->qk_norm = f == CT_FAMILY_QWEN3 || f == CT_FAMILY_GEMMA3;
    if (f == CT_FAMILY_GEMMA3) { /* Gemma3TextConfig's, sliding window aside */
        c->mlp = CT_MLP_GEGLU;
        c->norm_offset = c->sandwich_norm = c->embed_scale = true;
        c->sliding_pattern = 6;
        c->rope_local_theta = 10000.0f;
    }
}

void model_family_defaults(ct_model_config *c, ct_family f) { family_switches(c, f); }

void ct_model_config_family(ct_model_config *c, ct_family f) {
    family_switches(c, f);
    if (f == CT_FAMILY_QWEN2 || f == CT_FAMILY_QWEN3 || f == CT_FAMILY_GEMMA3)
        c->norm_eps = 1e-6f; /* their configs' rms_norm_eps */
}

ct_status ct_model_config_preset(ct_model_config *cfg, const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        const preset *p = &presets[i];
        if (strcmp(p->name, name) != 0) continue;
        if (p->family == CT_FAMILY_GPT2) {
            ct_model_config_gpt2(cfg, p->n_layer, p->n_head, p->n_embd, p->vocab, p->n_ctx);
            return CT_OK;
        }
        ct_model_config_llama(cfg, p->n_layer, p->n_head, p->n_kv_head, p->n_embd, p->n_ffn,
                              p->vocab, p->n_ctx);
        family_switches(cfg, p->family);
        cfg->head_dim = p->head_dim;
        if (p->rope_theta > 0) cfg->rope_theta = p->rope_theta;
        if (p->norm_eps > 0) cfg->norm_eps = p->norm_eps;
        cfg->tied_head = p->tied;
        cfg->sliding_window = p->window;
        if (p->llama3_rope) {
            /* Llama 3.2's; the tiny test size's original context (16) is
             * shorter than its n_ctx (64), so sequences cross it */
            bool tiny = p->n_ctx < 8192;
            cfg->rope_scaling = (ct_rope_scaling){CT_ROPE_LLAMA3, tiny ? 4.0f : 32.0f, 1.0f, 4.0f,
                                                  tiny ? 16 : 8192};
        }
        return CT_OK;
    }
    char list[512] = "";
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        if (i) strcat(list, ", ");
        strcat(list, presets[i].name);
    }
    return CT_ERR(CT_ERR_ARG, "model.preset = '%s' is unknown: expected one of %s", name, list);
}

/* ------------------------------------------------------------------ RoPE */

void ct_model_rope_inv_freq(const ct_model_config *c, float *out) {
    int HS = ct_model_head_dim(c), half = HS / 2;
    const ct_rope_scaling *s = &c->rope_scaling;
    for (int i = 0; i < half; i++) {
        /* theta ** (2i / HS) in fp32 (torch's pow of a float tensor;
         * glibc's powf is correctly rounded), its reciprocal rounded once */
        float inv = (float)(1.0 / (double)powf(c->rope_theta, (float)(2 * i) / (float)HS));
        if (s->type == CT_ROPE_LINEAR) {
            inv = inv / s->factor;
        } else if (s->type == CT_ROPE_LLAMA3) {
            /* HF _compute_llama3_parameters, as torch evaluates it: the
             * wavelength decides (longer than old/low: divide by factor;
             * shorter than old/high: keep; between: interpolate). Python
             * scalars are doubles, rounded to fp32 where they meet the fp32
             * tensor; `scalar / tensor` is tensor.reciprocal() * scalar. */
            double old = s->original_max_pos, lo = s->low_freq_factor, hi = s->high_freq_factor;
            float low_wl = (float)(old / lo), high_wl = (float)(old / hi);
            float wavelen = (1.0f / inv) * (float)(2.0 * CT_PI);
            float scaled = wavelen > low_wl ? inv / s->factor : inv;
            if (!(wavelen < high_wl) && !(wavelen > low_wl)) {
                float smooth = ((1.0f / wavelen) * (float)old - (float)lo) / (float)(hi - lo);
                float a = (1.0f - smooth) * scaled;
                float b = smooth * scaled;
                scaled = a / s->factor + b;
            }
            inv = scaled;
        }
        out[i] = inv;
    }
}

void ct_model_rope_inv_freq_local(const ct_model_config *c, float *out) {
    ct_model_config l = *c;
    l.rope_theta = c->rope_local_theta > 0 ? c->rope_local_theta : c->rope_theta;
    l.rope_scaling = (ct_rope_scaling){CT_ROPE_DEFAULT, 1.0f, 0, 0, 0};
    ct_model_rope_inv_freq(&l, out);
}

void model_upload_rope_table(ct_model *m, float *dst, bool local) {
    int half = ct_model_head_dim(&m->cfg) / 2;
    float host[half > 0 ? half : 1];
    if (local)
        ct_model_rope_inv_freq_local(&m->cfg, host);
    else
        ct_model_rope_inv_freq(&m->cfg, host);
    ct_be_upload(m->be, dst, host, (size_t)half * sizeof(float));
}
