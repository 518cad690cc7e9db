/*
 * The transformer family: the checks of a config, the parameter table over
 * one flat buffer (Hugging Face names of each layout), the memory
 * options (recompute policy, activation dtype) and the activation plan (the
 * same function counts bytes for the planner and carves the arena). The
 * forward and backward live in model_train.c.
 * Leaves out: the presets and RoPE's frequencies (family.c), and mixing the
 * switches beyond what the families have (GPT-2: LayerNorm, learned
 * positions, GELU, biases, tied head; LLaMA and its kin: RMSNorm, RoPE,
 * SwiGLU, grouped KV heads, each family's biases and q/k norms), since only
 * those have HF names.
 */
#include "models/model_impl.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

/* ------------------------------------------------------------- config */

/* s + k * a * b in size_t; *over is set (and stays set) once anything wraps. */
static size_t add_mul(size_t s, size_t k, size_t a, size_t b, bool *over) {
    if (*over || (b && a > SIZE_MAX / b) || (k && a * b > SIZE_MAX / k) ||
        k * a * b > SIZE_MAX - s) {
        *over = true;
        return 0;
    }
    return s + k * a * b;
}

/* The parameter count of c's table (the sum model_build_table reaches),
 * computed with overflow checks; false when it does not fit in size_t. c's
 * sizes are positive and its head size is n_embd / n_head or head_dim. */
static bool config_numel(const ct_model_config *c, size_t *out) {
    size_t L = (size_t)c->n_layer, C = (size_t)c->n_embd, F = (size_t)c->n_ffn;
    size_t V = (size_t)c->vocab_size, HS = (size_t)ct_model_head_dim(c);
    bool over = false;
    size_t layer = 0, n = 0;
    if (c->arch == CT_ARCH_LLAMA) {
        size_t NQ = (size_t)c->n_head * HS, KC = (size_t)c->n_kv_head * HS;
        layer = add_mul(layer, c->sandwich_norm ? 4 : 2, C, 1, &over); /* the norm weights */
        layer = add_mul(layer, 2, NQ, C, &over);  /* q_proj (NQ, C), o_proj (C, NQ) */
        layer = add_mul(layer, 2, KC, C, &over);  /* k_proj, v_proj */
        layer = add_mul(layer, 3, F, C, &over);   /* gate, up, down */
        if (c->qkv_bias) {
            layer = add_mul(layer, 1, NQ, 1, &over);
            layer = add_mul(layer, 2, KC, 1, &over);
        }
        if (c->o_bias) layer = add_mul(layer, 1, C, 1, &over);
        if (c->qk_norm) layer = add_mul(layer, 2, HS, 1, &over); /* q_norm, k_norm */
        n = add_mul(n, c->tied_head ? 1 : 2, V, C, &over); /* embed_tokens, lm_head */
        n = add_mul(n, 1, C, 1, &over);                    /* model.norm */
    } else {
        layer = add_mul(layer, 9, C, 1, &over); /* ln_1, ln_2 (2C each), c_attn bias (3C),
                                                 * both c_proj biases */
        layer = add_mul(layer, 4, C, C, &over); /* c_attn (3C, C), attn.c_proj */
        layer = add_mul(layer, 2, F, C, &over); /* c_fc, mlp.c_proj */
        layer = add_mul(layer, 1, F, 1, &over); /* c_fc bias */
        n = add_mul(n, 1, V, C, &over);                   /* wte */
        n = add_mul(n, 1, (size_t)c->n_ctx, C, &over);    /* wpe */
        n = add_mul(n, 2, C, 1, &over);                   /* ln_f */
    }
    n = add_mul(n, 1, L, layer, &over);
    *out = n;
    return !over;
}

/* The most parameters a model may have: the byte counts of its weights,
 * gradients and AdamW's two moments (fp32 each) all fit in size_t. */
#define MODEL_MAX_NUMEL (SIZE_MAX / (4 * sizeof(float)))

/* The family switches of a LLaMA-layout config: each family's own. */
static ct_status check_family(const ct_model_config *c) {
    const char *fam = ct_model_family_name(c->family);
    switch (c->family) {
    case CT_FAMILY_LLAMA:
        if (c->qkv_bias != c->o_bias || c->qk_norm)
            return CT_ERR(CT_ERR_ARG, "a llama model has attention biases on all of q, k, v "
                          "and o_proj or on none (attention_bias), and no q/k norms");
        break;
    case CT_FAMILY_MISTRAL:
        if (c->qkv_bias || c->o_bias || c->qk_norm)
            return CT_ERR(CT_ERR_ARG, "a mistral model has no attention biases and no q/k "
                          "norms");
        break;
    case CT_FAMILY_QWEN2:
        if (!c->qkv_bias || c->o_bias || c->qk_norm)
            return CT_ERR(CT_ERR_ARG, "a qwen2 model has biases on q, k and v (not o_proj) and "
                          "no q/k norms");
        if (c->head_dim && c->head_dim * c->n_head != c->n_embd)
            return CT_ERR(CT_ERR_ARG, "a qwen2 model's head size is n_embd / n_head = %d, not "
                          "%d", c->n_embd / c->n_head, c->head_dim);
        break;
    case CT_FAMILY_QWEN3:
        if (!c->qk_norm || c->qkv_bias != c->o_bias)
            return CT_ERR(CT_ERR_ARG, "a qwen3 model has q/k norms, and attention biases on "
                          "all of q, k, v and o_proj or on none (attention_bias)");
        break;
    case CT_FAMILY_GEMMA3:
        if (!c->qk_norm || c->qkv_bias != c->o_bias || c->mlp != CT_MLP_GEGLU ||
            !c->norm_offset || !c->sandwich_norm || !c->embed_scale)
            return CT_ERR(CT_ERR_ARG, "a gemma3_text model has q/k norms, GeGLU, norms scaling "
                          "by 1 + weight before and after the attention and the MLP, embeddings "
                          "scaled by sqrt(n_embd), and attention biases on all of q, k, v and "
                          "o_proj or on none");
        break;
    default:
        return CT_ERR(CT_ERR_ARG, "model family %d is unknown for the llama layout: expected "
                      "llama, mistral, qwen2, qwen3 or gemma3_text", (int)c->family);
    }
    if (c->family != CT_FAMILY_GEMMA3 &&
        (c->mlp != CT_MLP_SWIGLU || c->norm_offset || c->sandwich_norm || c->embed_scale ||
         c->sliding_window))
        return CT_ERR(CT_ERR_ARG, "a %s model has SwiGLU, plain RMSNorm weights, no sandwich "
                      "norms, unscaled embeddings and no sliding window (those are Gemma 3's)",
                      fam);
    if (c->sliding_window < 0 || c->sliding_pattern < 0 ||
        !(c->rope_local_theta >= 0) || !isfinite(c->rope_local_theta))
        return CT_ERR(CT_ERR_ARG, "%s: sliding_window %d, sliding_pattern %d and the local RoPE "
                      "base %g must not be negative", fam, c->sliding_window,
                      c->sliding_pattern, (double)c->rope_local_theta);
    const ct_rope_scaling *r = &c->rope_scaling;
    if ((int)r->type < 0 || r->type >= CT_ROPE_COUNT)
        return CT_ERR(CT_ERR_ARG, "%s: RoPE scaling type %d is unknown", fam, (int)r->type);
    if (r->type != CT_ROPE_DEFAULT && (!(r->factor > 0) || !isfinite(r->factor)))
        return CT_ERR(CT_ERR_ARG, "%s: rope_scaling factor %g must be positive", fam,
                      (double)r->factor);
    if (r->type == CT_ROPE_LLAMA3 &&
        (!(r->low_freq_factor > 0) || !(r->high_freq_factor > r->low_freq_factor) ||
         !isfinite(r->high_freq_factor) || r->original_max_pos < 1))
        return CT_ERR(CT_ERR_ARG, "%s: llama3 rope_scaling needs 0 < low_freq_factor (%g) < "
                      "high_freq_factor (%g) and original_max_position_embeddings >= 1 (%d)",
                      fam, (double)r->low_freq_factor, (double)r->high_freq_factor,
                      r->original_max_pos);
    return CT_OK;
}

ct_status ct_model_config_validate(const ct_model_config *c) {
    if (c->arch == CT_ARCH_GPT2) {
        if (c->norm != CT_NORM_LAYERNORM || c->pos != CT_POS_LEARNED || c->mlp != CT_MLP_GELU ||
            c->n_kv_head != c->n_head || !c->tied_head || !c->bias)
            return CT_ERR(CT_ERR_ARG, "a gpt2 model has LayerNorm, learned positions, GELU, "
                          "biases, a tied head and n_kv_head == n_head (n_kv_head = %d, "
                          "n_head = %d)", c->n_kv_head, c->n_head);
        if (c->family != CT_FAMILY_GPT2 || c->qkv_bias || c->o_bias || c->qk_norm ||
            (c->head_dim && c->head_dim * c->n_head != c->n_embd) ||
            c->rope_scaling.type != CT_ROPE_DEFAULT || c->norm_offset || c->sandwich_norm ||
            c->embed_scale || c->sliding_window)
            return CT_ERR(CT_ERR_ARG, "a gpt2 model is family gpt2, with n_embd / n_head as its "
                          "head size and none of the llama layout's switches (q/k norms, "
                          "separate attention biases, RoPE scaling)");
    } else if (c->arch == CT_ARCH_LLAMA) {
        if (c->norm != CT_NORM_RMSNORM || c->pos != CT_POS_ROPE ||
            (c->mlp != CT_MLP_SWIGLU && c->mlp != CT_MLP_GEGLU) || c->bias)
            return CT_ERR(CT_ERR_ARG, "a llama model has RMSNorm, rotary positions, SwiGLU "
                          "(GeGLU for Gemma) and no MLP or norm biases");
        ct_status st = check_family(c);
        if (st) return st;
    } else {
        return CT_ERR(CT_ERR_ARG, "model arch %d is unknown: expected gpt2 or llama",
                      (int)c->arch);
    }
    if (c->n_eos < 0 || c->n_eos > 4 || (c->has_bos && c->bos_token_id < 0) ||
        (c->has_pad && c->pad_token_id < 0))
        return CT_ERR(CT_ERR_ARG, "special token ids must be >= 0, with at most 4 EOS ids "
                      "(n_eos = %d)", c->n_eos);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_id[i] < 0)
            return CT_ERR(CT_ERR_ARG, "eos_token_id %d must be >= 0", c->eos_token_id[i]);
    if (c->n_layer < 1 || c->n_head < 1 || c->n_embd < 1 || c->vocab_size < 2 || c->n_ctx < 1 ||
        c->n_ffn < 1)
        return CT_ERR(CT_ERR_ARG,
                      "model sizes must be positive (n_layer=%d n_head=%d n_embd=%d n_ffn=%d "
                      "vocab_size=%d n_ctx=%d)",
                      c->n_layer, c->n_head, c->n_embd, c->n_ffn, c->vocab_size, c->n_ctx);
    if (c->head_dim < 0 || (!c->head_dim && c->n_embd % c->n_head))
        return CT_ERR(CT_ERR_ARG, "n_embd = %d is not divisible by n_head = %d (set head_dim "
                      "for another head size; it is %d)", c->n_embd, c->n_head, c->head_dim);
    if (c->n_kv_head < 1 || c->n_kv_head > c->n_head || c->n_head % c->n_kv_head)
        return CT_ERR(CT_ERR_ARG, "n_head = %d is not a multiple of n_kv_head = %d", c->n_head,
                      c->n_kv_head);
    int HS = ct_model_head_dim(c);
    if (c->pos == CT_POS_ROPE && (HS % 2 || !(c->rope_theta > 0) || !isfinite(c->rope_theta)))
        return CT_ERR(CT_ERR_ARG, "rotary positions need an even head size (%d) and rope_theta "
                      "> 0 (%g)", HS, (double)c->rope_theta);
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
        return CT_ERR(CT_ERR_ARG, "norm epsilon %g must be positive", (double)c->norm_eps);
    if (!(c->embd_pdrop >= 0 && c->embd_pdrop < 1) ||
        !(c->resid_pdrop >= 0 && c->resid_pdrop < 1) ||
        !(c->attn_pdrop >= 0 && c->attn_pdrop < 1))
        return CT_ERR(CT_ERR_ARG, "dropout probabilities embd %g, resid %g, attn %g: expected "
                      "0 <= p < 1", (double)c->embd_pdrop, (double)c->resid_pdrop,
                      (double)c->attn_pdrop);
    if (c->arch == CT_ARCH_LLAMA && (c->embd_pdrop != 0 || c->resid_pdrop != 0))
        return CT_ERR(CT_ERR_ARG, "a llama model has attention dropout only: embedding %g and "
                      "residual %g dropout must be 0", (double)c->embd_pdrop,
                      (double)c->resid_pdrop);
    /* the widths the table and the kernels hold in int, the table's entry count
     * (int), and the parameter count (size_t): none may wrap */
    int64_t qkv_w = ((int64_t)c->n_head + 2 * (int64_t)c->n_kv_head) * HS;
    int64_t fc_w = (c->mlp != CT_MLP_GELU ? 2 : 1) * (int64_t)c->n_ffn;
    if (qkv_w > INT_MAX || fc_w > INT_MAX || 3 * (int64_t)c->n_embd > INT_MAX)
        return CT_ERR(CT_ERR_ARG, "model widths overflow an int: the fused q,k,v width is "
                      "%lld, the first MLP width %lld (n_embd=%d n_head=%d n_kv_head=%d "
                      "n_ffn=%d; at most %d)", (long long)qkv_w, (long long)fc_w, c->n_embd,
                      c->n_head, c->n_kv_head, c->n_ffn, INT_MAX);
    if (c->n_layer > (INT_MAX - 8) / 16)
        return CT_ERR(CT_ERR_ARG, "n_layer = %d is too large: at most %d", c->n_layer,
                      (INT_MAX - 8) / 16);
    size_t numel;
    if (!config_numel(c, &numel) || numel > MODEL_MAX_NUMEL)
        return CT_ERR(CT_ERR_ARG, "the parameter count of n_layer=%d n_embd=%d n_ffn=%d "
                      "vocab_size=%d n_ctx=%d is %s: at most %zu parameters (whose weights, "
                      "gradients and optimizer state fit in memory sizes)", c->n_layer,
                      c->n_embd, c->n_ffn, c->vocab_size, c->n_ctx,
                      numel > MODEL_MAX_NUMEL ? "too large" : "beyond size_t",
                      (size_t)MODEL_MAX_NUMEL);
    return CT_OK;
}

/* ------------------------------------------------------ parameter table */

static int table_add(ct_model *m, const char *name, int ndim, int64_t d0, int64_t d1,
                     bool hf_conv1d) {
    ct_param *p = &m->table[m->n_table];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 1;
    p->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    p->offset = m->numel;
    p->decay = ndim >= 2;
    p->hf_conv1d = hf_conv1d;
    m->numel += p->numel;
    return m->n_table++;
}

/* LLaMA's table (and its kin's), HF names. q, k, v sit back to back, so the
 * fused (QKVW, C) weight starts at q_proj's offset; their biases likewise
 * form one (QKVW) bias from q_proj's; gate and up form one (2F, C). */
static void build_llama_table(ct_model *m) {
    const ct_model_config *c = &m->cfg;
    int64_t C = c->n_embd, F = c->n_ffn, HS = ct_model_head_dim(c);
    int64_t NQ = c->n_head * HS, KC = c->n_kv_head * HS;
    char name[64];
    m->wte = table_add(m, "model.embed_tokens.weight", 2, c->vocab_size, C, false);
    m->wpe = -1;
    for (int l = 0; l < c->n_layer; l++) {
        layer_idx *li = &m->layers[l];
        memset(li, -1, sizeof *li); /* every index -1 until added */
#define ADD(field, suffix, ndim, o, i)                                 \
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);      \
    field = table_add(m, name, ndim, o, i, false)
        int k_idx, v_idx, up_idx;
        ADD(li->ln1_w, "input_layernorm.weight", 1, C, 1);
        ADD(li->qkv_w, "self_attn.q_proj.weight", 2, NQ, C);
        ADD(k_idx, "self_attn.k_proj.weight", 2, KC, C);
        ADD(v_idx, "self_attn.v_proj.weight", 2, KC, C);
        if (c->qkv_bias) {
            ADD(li->qkv_b, "self_attn.q_proj.bias", 1, NQ, 1);
            ADD(k_idx, "self_attn.k_proj.bias", 1, KC, 1);
            ADD(v_idx, "self_attn.v_proj.bias", 1, KC, 1);
        }
        if (c->qk_norm) {
            ADD(li->q_norm, "self_attn.q_norm.weight", 1, HS, 1);
            ADD(li->k_norm, "self_attn.k_norm.weight", 1, HS, 1);
        }
        ADD(li->proj_w, "self_attn.o_proj.weight", 2, C, NQ);
        if (c->o_bias) {
            ADD(li->proj_b, "self_attn.o_proj.bias", 1, C, 1);
        }
        if (c->sandwich_norm) { /* Gemma: the attention's output norm, then the MLP's input's */
            ADD(li->pan_w, "post_attention_layernorm.weight", 1, C, 1);
            ADD(li->ln2_w, "pre_feedforward_layernorm.weight", 1, C, 1);
        } else {
            ADD(li->ln2_w, "post_attention_layernorm.weight", 1, C, 1);
        }
        ADD(li->fc_w, "mlp.gate_proj.weight", 2, F, C);
        ADD(up_idx, "mlp.up_proj.weight", 2, F, C);
        ADD(li->fcproj_w, "mlp.down_proj.weight", 2, C, F);
        if (c->sandwich_norm) {
            ADD(li->pfn_w, "post_feedforward_layernorm.weight", 1, C, 1);
        }
#undef ADD
        (void)k_idx, (void)v_idx, (void)up_idx;
    }
    m->lnf_w = table_add(m, "model.norm.weight", 1, C, 1, false);
    m->lnf_b = -1;
    m->head_w = c->tied_head ? m->wte : table_add(m, "lm_head.weight", 2, c->vocab_size, C, false);
}

ct_status model_build_table(ct_model *m) {
    const ct_model_config *c = &m->cfg;
    /* sizes in int64 (table_add's dims): 3 * C and the like cannot wrap; the
     * sum is checked by validate (config_numel), which the table must match */
    ct_status st = ct_model_config_validate(c);
    if (st) return st;
    size_t want = 0;
    CT_ASSERT(config_numel(c, &want));
    int L = c->n_layer;
    int64_t C = c->n_embd, F = c->n_ffn, V = c->vocab_size;
    size_t max_entries = 8 + 16 * (size_t)L;
    m->table = calloc(max_entries, sizeof *m->table);
    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->table || !m->layers)
        return CT_ERR(CT_ERR_OOM, "out of memory for the parameter table (%zu entries of %d "
                      "layers)", max_entries, L);
    m->n_table = 0;
    m->numel = 0;
    if (c->arch == CT_ARCH_LLAMA) {
        build_llama_table(m);
        CT_ASSERT(m->numel == want);
        return CT_OK;
    }
    char name[64];
    m->wte = table_add(m, "wte.weight", 2, V, C, false);
    m->wpe = table_add(m, "wpe.weight", 2, c->n_ctx, C, false);
    for (int l = 0; l < L; l++) {
        layer_idx *li = &m->layers[l];
        li->q_norm = li->k_norm = li->pan_w = li->pfn_w = -1;
#define ADD1(field, suffix, n)                                   \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);           \
    li->field = table_add(m, name, 1, n, 1, false)
#define ADD2(field, suffix, o, i)                                \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);           \
    li->field = table_add(m, name, 2, o, i, true)
        ADD1(ln1_w, "ln_1.weight", C);
        ADD1(ln1_b, "ln_1.bias", C);
        ADD2(qkv_w, "attn.c_attn.weight", 3 * C, C);
        ADD1(qkv_b, "attn.c_attn.bias", 3 * C);
        ADD2(proj_w, "attn.c_proj.weight", C, C);
        ADD1(proj_b, "attn.c_proj.bias", C);
        ADD1(ln2_w, "ln_2.weight", C);
        ADD1(ln2_b, "ln_2.bias", C);
        ADD2(fc_w, "mlp.c_fc.weight", F, C);
        ADD1(fc_b, "mlp.c_fc.bias", F);
        ADD2(fcproj_w, "mlp.c_proj.weight", C, F);
        ADD1(fcproj_b, "mlp.c_proj.bias", C);
#undef ADD1
#undef ADD2
    }
    m->lnf_w = table_add(m, "ln_f.weight", 1, C, 1, false);
    m->lnf_b = table_add(m, "ln_f.bias", 1, C, 1, false);
    m->head_w = m->wte; /* tied */
    CT_ASSERT(m->numel == want);
    return CT_OK;
}

ct_status ct_model_init(ct_model **out, ct_ctx *ctx, const ct_model_config *cfg) {
    return model_init_impl(out, ctx, cfg, true);
}

ct_status model_init_impl(ct_model **out, ct_ctx *ctx, const ct_model_config *cfg,
                          bool alloc_params) {
    *out = NULL;
    ct_status st = ct_model_config_validate(cfg);
    if (st) return st;
    ct_model *m = calloc(1, sizeof *m);
    if (!m) return CT_ERR(CT_ERR_OOM, "out of memory allocating the model");
    m->ctx = ctx;
    m->be = ct_ctx_backend(ctx);
    m->cfg = *cfg;
    if ((st = model_build_table(m))) goto fail;
    if (cfg->arch == CT_ARCH_LLAMA) {
        const ct_backend_i *k = m->be->i;
        if (!k->rmsnorm_forward || !k->rmsnorm_backward || !k->rope_forward ||
            !k->rope_backward || !k->swiglu_forward || !k->swiglu_backward ||
            (cfg->qk_norm && (!k->qknorm_forward || !k->qknorm_backward)) ||
            (cfg->mlp == CT_MLP_GEGLU && (!k->geglu_forward || !k->geglu_backward))) {
            st = CT_ERR(CT_ERR_ARG, "backend '%s' lacks the LLaMA ops (rmsnorm, rope, swiglu%s%s)",
                        k->name, cfg->qk_norm ? ", qknorm" : "",
                        cfg->mlp == CT_MLP_GEGLU ? ", geglu" : "");
            goto fail;
        }
    }

    m->params = alloc_params ? model_buf_alloc(m, m->numel * sizeof(float), CT_TAG_PARAMS) : NULL;
    if (alloc_params && !m->params) {
        st = ct_last_status();
        goto fail;
    }
    *out = m;
    return CT_OK;
fail:
    ct_model_free(m);
    return st;
}

void ct_model_free(ct_model *m) {
    if (!m) return;
    model_buf_free(m, m->dec.block);
    free(m->q);
    free(m->q_ev);
    model_lora_free(m);
    weights16_free(m);
    model_buf_free(m, m->params16);
    model_buf_free(m, m->small);
    free(m->small_off);
    free(m->span);
    model_buf_free(m, m->arena.base);
    free(m->gen_config);
    free(m->acts.look_host);
    free(m->acts.layers);
    model_buf_free(m, m->grads);
    model_buf_free(m, m->params);
    free(m->layers);
    free(m->table);
    free(m);
}

typedef struct init_fill {
    ct_rng *rng;
    float std;
} init_fill;

static void fill_normal(float *w, size_t n, void *user) {
    init_fill *f = user;
    ct_rng_normal(f->rng, w, n, 0.0f, f->std);
}

ct_status ct_model_init_weights(ct_model *m, uint64_t seed) {
    ct_rng rng;
    ct_rng_init(&rng, seed);
    ct_backend *be = m->be;
    /* GPT-2 scales its residual projections; HF LLaMA draws every matrix from
     * N(0, initializer_range = 0.02) */
    bool gpt2 = m->cfg.arch == CT_ARCH_GPT2;
    float resid_std = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layer);
    for (int i = 0; i < m->n_table; i++) {
        const ct_param *p = &m->table[i];
        float *w = m->params + p->offset;
        size_t n = p->numel;
        size_t len = strlen(p->name);
        if (p->ndim == 2) {
            bool resid = gpt2 && strstr(p->name, "c_proj.weight") != NULL;
            init_fill f = {&rng, resid ? resid_std : 0.02f};
            ct_status st = model_stage_fill(m, w, n, fill_normal, &f);
            if (st) return st;
        } else if (len > 7 && strcmp(p->name + len - 7, ".weight") == 0) {
            /* the only 1-D weights are norm weights (ln_*, *layernorm, norm): a
             * scale of 1, which Gemma's (1 + weight) norms store as 0 */
            be->i->fill(be, w, m->cfg.norm_offset ? 0.0f : 1.0f, n);
        } else {
            be->i->memset(be, w, 0, n * sizeof *w);
        }
    }
    model_weights_changed(m);
    return be->i->synchronize(be);
}

const ct_model_config *ct_model_get_config(const ct_model *m) { return &m->cfg; }
int ct_model_num_params(const ct_model *m) { return m->n_table; }
const ct_param *ct_model_param(const ct_model *m, int i) {
    return (i >= 0 && i < m->n_table) ? &m->table[i] : NULL;
}
const ct_param *ct_model_find_param(const ct_model *m, const char *name) {
    for (int i = 0; i < m->n_table; i++)
        if (strcmp(m->table[i].name, name) == 0) return &m->table[i];
    return NULL;
}
size_t ct_model_numel(const ct_model *m) { return m->numel; }
float *ct_model_params(ct_model *m) { return m->params; }
float *ct_model_grads(ct_model *m) { return m->grads; }
void ct_model_zero_grads(ct_model *m) {
    ct_backend *be = m->be;
    if (m->grads) be->i->memset(be, m->grads, 0, m->numel * sizeof(float));
    if (m->lora && m->lora->grads)
        be->i->memset(be, m->lora->grads, 0, m->lora->numel * sizeof(float));
}

double ct_model_grad_sumsq(ct_model *m, size_t lo, size_t n) {
    size_t numel = ct_model_trainable_numel(m);
    CT_ASSERT(lo <= numel && n <= numel - lo);
    if (!n) return 0.0;
    return m->be->i->sumsq(m->be, ct_model_trainable_grads(m) + lo, n);
}

size_t ct_model_grad_nonfinite(ct_model *m) {
    return m->be->i->nonfinite(m->be, ct_model_trainable_grads(m), ct_model_trainable_numel(m));
}

void ct_model_grads_scale(ct_model *m, float a) {
    m->be->i->scale(m->be, ct_model_trainable_grads(m), a, ct_model_trainable_numel(m));
}

void ct_model_grads_poison(ct_model *m) {
    m->be->i->fill(m->be, ct_model_trainable_grads(m), NAN, 1);
}

ct_status ct_model_base_xxh64(ct_model *m, uint64_t *out) {
    const void *base = m->params16 ? (const void *)m->params16 : (const void *)m->params;
    size_t bytes = m->numel * (m->params16 ? sizeof(uint16_t) : sizeof(float));
    if (m->be->host_visible) {
        *out = XXH64(base, bytes, 0);
        return CT_OK;
    }
    /* streamed through a bounded staging buffer: the same hash as one pass */
    size_t piece = (size_t)4 << 20;
    uint8_t *stage = m->be->i->host_alloc(m->be, piece, CT_TAG_IO);
    XXH64_state_t *xs = XXH64_createState();
    if (!stage || !xs) {
        if (stage) m->be->i->host_free(m->be, stage);
        XXH64_freeState(xs);
        return CT_ERR(CT_ERR_OOM, "out of memory hashing the base weights");
    }
    XXH64_reset(xs, 0);
    for (size_t at = 0; at < bytes; at += piece) {
        size_t n = bytes - at < piece ? bytes - at : piece;
        ct_be_download(m->be, stage, (const uint8_t *)base + at, n);
        XXH64_update(xs, stage, n);
    }
    *out = XXH64_digest(xs);
    XXH64_freeState(xs);
    m->be->i->host_free(m->be, stage);
    return CT_OK;
}

bool ct_model_host_visible(const ct_model *m) { return m->be->host_visible; }

void ct_model_download(ct_model *m, void *host_dst, const void *dev_src, size_t bytes) {
    ct_be_download(m->be, host_dst, dev_src, bytes);
}

void ct_model_upload(ct_model *m, void *dev_dst, const void *host_src, size_t bytes) {
    ct_be_upload(m->be, dev_dst, host_src, bytes);
    /* into the master weights: the bf16 copies are stale until refreshed */
    if (m->params && bytes && (const float *)dev_dst < m->params + m->numel &&
        (const float *)dev_dst + bytes / sizeof(float) > m->params)
        m->w16_fresh = false;
}

const void *model_host_read(ct_model *m, const void *dev, size_t bytes, void **stage) {
    *stage = NULL;
    if (m->be->host_visible) return dev;
    *stage = m->be->i->host_alloc(m->be, bytes, CT_TAG_IO);
    if (*stage) ct_be_download(m->be, *stage, dev, bytes);
    return *stage;
}

void *model_host_write(ct_model *m, void *dev, size_t bytes, void **stage) {
    *stage = NULL;
    if (m->be->host_visible) return dev;
    *stage = m->be->i->host_alloc(m->be, bytes, CT_TAG_IO);
    return *stage;
}

void model_host_done(ct_model *m, void *dev, size_t bytes, void *stage, bool upload) {
    if (!stage) return;
    if (upload) ct_be_upload(m->be, dev, stage, bytes);
    m->be->i->host_free(m->be, stage);
}

ct_status model_stage_fill(ct_model *m, float *dst, size_t n, model_fill_fn fill, void *user) {
    ct_backend *be = m->be;
    if (be->host_visible) { /* device memory is host memory: no staging */
        fill(dst, n, user);
        return CT_OK;
    }
    /* one piece: the draws of a tensor (torch's normal_ included) depend on
     * how many are asked for at once */
    float *stage = be->i->host_alloc(be, n * sizeof(float), CT_TAG_IO);
    if (!stage) return ct_last_status();
    fill(stage, n, user);
    ct_be_upload(be, dst, stage, n * sizeof(float));
    be->i->host_free(be, stage);
    return CT_OK;
}

/* ---------------------------------------------------- options */

ct_model_opts ct_model_opts_default(void) {
    ct_model_opts o = {CT_RECOMPUTE_NONE, CT_ACT_FP32, 0, CT_PREC_FP32, false, 0};
    return o;
}

static const char *const recompute_names[CT_RECOMPUTE_COUNT] = {"none", "light", "full"};
static const char *const act_dtype_names[CT_ACT_COUNT] = {"fp32", "bf16"};
static const char *const precision_names[CT_PREC_COUNT] = {"fp32", "bf16", "fp16"};

const char *ct_model_precision_name(ct_precision p) {
    return (int)p >= 0 && p < CT_PREC_COUNT ? precision_names[p] : "?";
}

ct_status ct_model_precision_from_name(ct_precision *out, const char *name) {
    for (int p = 0; p < CT_PREC_COUNT; p++) {
        if (strcmp(name, precision_names[p]) == 0) {
            *out = (ct_precision)p;
            return CT_OK;
        }
    }
    return CT_ERR(CT_ERR_ARG, "train.precision = '%s' is unknown: expected fp32, bf16 or fp16",
                  name);
}

const char *ct_model_recompute_name(ct_recompute r) {
    return (int)r >= 0 && r < CT_RECOMPUTE_COUNT ? recompute_names[r] : "?";
}

const char *ct_model_act_dtype_name(ct_act_dtype d) {
    return (int)d >= 0 && d < CT_ACT_COUNT ? act_dtype_names[d] : "?";
}

ct_status ct_model_opts_from_names(ct_model_opts *out, const char *recompute,
                                   const char *act_dtype) {
    ct_model_opts o = ct_model_opts_default();
    int r = 0, d = 0;
    while (r < CT_RECOMPUTE_COUNT && strcmp(recompute, recompute_names[r]) != 0) r++;
    if (r == CT_RECOMPUTE_COUNT)
        return CT_ERR(CT_ERR_ARG, "train.recompute = '%s' is unknown: expected none, light or "
                      "full", recompute);
    while (d < CT_ACT_COUNT && strcmp(act_dtype, act_dtype_names[d]) != 0) d++;
    if (d == CT_ACT_COUNT)
        return CT_ERR(CT_ERR_ARG, "train.activation_dtype = '%s' is unknown: expected fp32 or "
                      "bf16", act_dtype);
    o.recompute = (ct_recompute)r;
    o.act_dtype = (ct_act_dtype)d;
    *out = o;
    return CT_OK;
}

static ct_status check_opts(const ct_model_opts *o) {
    if ((int)o->recompute < 0 || o->recompute >= CT_RECOMPUTE_COUNT)
        return CT_ERR(CT_ERR_ARG, "recompute policy %d is invalid: expected CT_RECOMPUTE_NONE, "
                      "_LIGHT or _FULL", (int)o->recompute);
    if ((int)o->act_dtype < 0 || o->act_dtype >= CT_ACT_COUNT)
        return CT_ERR(CT_ERR_ARG, "activation dtype %d is invalid: expected CT_ACT_FP32 or "
                      "CT_ACT_BF16", (int)o->act_dtype);
    if ((int)o->precision < 0 || o->precision >= CT_PREC_COUNT)
        return CT_ERR(CT_ERR_ARG, "precision %d is invalid: expected CT_PREC_FP32, "
                      "CT_PREC_BF16 or CT_PREC_FP16", (int)o->precision);
    if (o->head_chunk_rows < 0)
        return CT_ERR(CT_ERR_ARG, "head_chunk_rows = %d is invalid: expected 0 (automatic) or a "
                      "positive row count", o->head_chunk_rows);
    if (o->recompute_layers < 0 ||
        (o->recompute_layers > 0 && o->recompute != CT_RECOMPUTE_FULL))
        return CT_ERR(CT_ERR_ARG, "train.recompute_layers = %d with train.recompute = %s: it "
                      "counts the blocks train.recompute=full re-runs (0: all)",
                      o->recompute_layers, ct_model_recompute_name(o->recompute));
    return CT_OK;
}

/* Whether block l is re-run in the backward (recompute full, and l among the
 * first recompute_layers when that is set). */
static bool layer_full(const ct_model_opts *o, int l) {
    return o->recompute == CT_RECOMPUTE_FULL && (o->recompute_layers == 0 ||
                                                 l < o->recompute_layers);
}
bool model_layer_recomputed(const ct_model *m, int l) { return layer_full(&m->opts, l); }

/* Rows per chunk of the fused head under o: its explicit count or the automatic
 * one, never more than N. */
static int head_chunk(const ct_model_config *c, const ct_model_opts *o, int N) {
    if (o->head_chunk_rows > 0) return o->head_chunk_rows < N ? o->head_chunk_rows : N;
    return ct_model_head_chunk_rows(c, N);
}

ct_status ct_model_set_opts(ct_model *m, const ct_model_opts *o) {
    ct_status st = check_opts(o);
    if (st) return st;
    if (m->B && (o->recompute != m->opts.recompute || o->act_dtype != m->opts.act_dtype ||
                 o->recompute_layers != m->opts.recompute_layers ||
                   o->head_chunk_rows != m->opts.head_chunk_rows ||
                   o->precision != m->opts.precision || o->fp32_logits != m->opts.fp32_logits))
        return CT_ERR(CT_ERR_ARG, "model already reserved with recompute %s, activations %s, "
                      "precision %s: options are set before ct_model_reserve",
                      ct_model_recompute_name(m->opts.recompute),
                      ct_model_act_dtype_name(m->opts.act_dtype),
                      ct_model_precision_name(m->opts.precision));
    const ct_backend_i *k = m->be->i;
    if (o->precision == CT_PREC_BF16 && (!k->matmul_forward_bf16 || !k->matmul_backward_bf16))
        return CT_ERR(CT_ERR_ARG, "train.precision = bf16: backend '%s' has no bf16 matmul",
                      k->name);
    if (o->precision == CT_PREC_FP16 &&
        (!k->matmul_forward_f16 || !k->matmul_backward_f16 || !k->f32_to_f16))
        return CT_ERR(CT_ERR_ARG, "train.precision = fp16: backend '%s' has no fp16 matmul (fp16 "
                      "is for GPUs without bf16: run.device=cuda)", k->name);
    if (o->precision == CT_PREC_FP16 && m->params16)
        return CT_ERR(CT_ERR_ARG, "train.precision = fp16 over a bf16 LoRA base: the fp16 GEMMs "
                      "read fp16 weights; keep the base fp32 (lora.base_dtype=fp32)");
    ct_model_opts was = m->opts;
    m->opts = *o;
    if (o->precision == CT_PREC_FP32) {
        weights16_free(m);
        return CT_OK;
    }
    ct_status st2 = weights16_alloc(m);
    if (st2) m->opts = was;
    return st2;
}

/* ---------------------------------------------------- activation plan */

/* Carves buffers from a base pointer, or only counts bytes when base is NULL.
 * Planning and allocation run the same code, so the plan cannot drift. */
typedef struct carver {
    uint8_t *base;
    size_t used;
} carver;

static void *carve_bytes(carver *cv, size_t bytes) {
    void *p = cv->base ? (void *)(cv->base + cv->used) : NULL;
    cv->used += ct_arena_round(bytes);
    return p;
}

static float *carve(carver *cv, size_t nfloats) {
    return carve_bytes(cv, nfloats * sizeof(float));
}

/* A kept activation of n elements in the activation dtype. */
static void *carve_act(carver *cv, const ct_model_opts *o, size_t n) {
    return carve_bytes(cv, n * (o->act_dtype == CT_ACT_BF16 ? sizeof(uint16_t) : sizeof(float)));
}

/* A kept GEMM input of n elements: its 16-bit operand under in16 (its bytes
 * added to *bytes16), else the activation dtype. */
static void *carve_in(carver *cv, const ct_model_opts *o, bool in16, size_t n,
                      size_t *bytes16) {
    if (!in16) return carve_act(cv, o, n);
    size_t before = cv->used;
    void *p = carve_bytes(cv, n * sizeof(uint16_t));
    *bytes16 += cv->used - before;
    return p;
}

int ct_model_head_chunk_rows(const ct_model_config *c, int N) {
    /* Up to 1024 rows and 256 MiB of logits per chunk (at least 1 row). The head's
     * GEMMs run faster on taller chunks: on GPT-2's 50257 x 768 head, 2 cores,
     * 166 rows (a 32 MiB chunk) reached 150-166 GFLOP/s and 1024 rows 195-197. */
    size_t per_row = (size_t)c->vocab_size * sizeof(float);
    size_t rows = ((size_t)256 << 20) / per_row;
    if (rows > 1024) rows = 1024;
    if (rows < 1) rows = 1;
    if (rows > (size_t)N) rows = (size_t)N;
    return (int)rows;
}

/* Lays out the activations for the options; a may be NULL when only
 * counting. Fills plan->acts, ->work and ->scratch (bytes). */
static void acts_layout(const ct_model_config *c, const ct_model_opts *o,
                        const ct_lora_opts *lo, int B, int T, bool training, carver *cv,
                        model_acts *a, ct_model_plan *plan) {
    size_t N = (size_t)B * T, C = (size_t)c->n_embd, F = (size_t)c->n_ffn;
    size_t NH = (size_t)c->n_head, NQ = (size_t)model_q_width(c);
    size_t QKV = (size_t)model_qkv_width(c), FW = (size_t)model_fc_width(c);
    bool ln = c->norm == CT_NORM_LAYERNORM; /* RMSNorm keeps no mean */
    bool bf16 = o->act_dtype == CT_ACT_BF16;
    /* what a block keeps: ln1, ln2, fch_gelu (none; and full's blocks past
     * recompute_layers), qkv..fch and the statistics (all but full's re-run
     * blocks); any_* whether some block drops them (the work set holds them) */
    int L = c->n_layer;
    bool partial = o->recompute == CT_RECOMPUTE_FULL && o->recompute_layers > 0 &&
                   o->recompute_layers < L;
    bool keep_norm = o->recompute == CT_RECOMPUTE_NONE || partial; /* in some block */
    bool any_full = o->recompute == CT_RECOMPUTE_FULL;
    /* precision bf16/fp16, a full model, training, ln1, ln2 and fch_gelu kept:
     * they feed nothing but their GEMMs, whose backward reads their 16-bit
     * rounding only, so that rounding is what is kept (model_acts.in16) */
    bool in16 = training && keep_norm && o->precision != CT_PREC_FP32 && !(lo && lo->r > 0);
    /* a frozen LoRA base: a linear's backward reads its input only for the
     * dA of an adapter on it, so ln1, ln2 and the MLP activation that no
     * adapter reads are not kept (nor re-derived: block_backward) */
    unsigned reads = ~0u;
    if (lo && lo->r > 0) {
        reads = 0;
        for (int k = 0; k < ct_lora_num_kinds(c); k++) {
            lora_mod md;
            if ((lo->targets & (1u << k)) && lora_mod_of(c, k, &md)) reads |= 1u << md.gemm;
        }
    }
    bool keep_ln1 = keep_norm && (reads & (1u << LIN_QKV));
    bool keep_ln2 = keep_norm && (reads & (1u << LIN_FC));
    bool keep_act = keep_norm && (reads & (1u << LIN_FCPROJ));
    /* some block (a full one, any under light, or one without an adapter's
     * reader) re-derives or never keeps one of ln1, ln2, fch_gelu */
    bool drop_norm = any_full || !keep_ln1 || !keep_ln2 || !keep_act;
    model_acts dummy = {0};
    if (!a) a = &dummy;
    size_t start = cv->used;
    plan->acts16 = 0;
    /* kept for backward, in the activation dtype */
    a->encoded = carve_act(cv, o, N * C);
    a->in16 = in16;
    for (int l = 0; l < L; l++) {
        layer_acts la = {0};
        bool full = layer_full(o, l), keep_inner = !full;
        if (keep_ln1 && !full) la.ln1 = carve_in(cv, o, in16, N * C, &plan->acts16);
        if (keep_inner) {
            if (ln) la.ln1_mean = carve(cv, N);
            la.ln1_rstd = carve(cv, N);
            la.qkv = carve_act(cv, o, N * QKV);
            la.atty = carve_act(cv, o, N * NQ);
            la.lse = carve(cv, (size_t)B * NH * T);
            la.res2 = carve_act(cv, o, N * C);
            if (c->sandwich_norm) { /* the GEMM outputs the sandwich norms read */
                la.pa = carve_act(cv, o, N * C);
                la.pa_rstd = carve(cv, N);
                la.pf = carve_act(cv, o, N * C);
                la.pf_rstd = carve(cv, N);
            }
        }
        if (keep_ln2 && !full) la.ln2 = carve_in(cv, o, in16, N * C, &plan->acts16);
        if (keep_inner) {
            if (ln) la.ln2_mean = carve(cv, N);
            la.ln2_rstd = carve(cv, N);
            la.fch = carve_act(cv, o, N * FW);
        }
        if (keep_act && !full) la.fch_gelu = carve_in(cv, o, in16, N * F, &plan->acts16);
        la.res3 = carve_act(cv, o, N * C);
        if (a->layers) a->layers[l] = la;
    }
    a->lnf = carve(cv, N * C);
    a->lnf_mean = ln ? carve(cv, N) : NULL;
    a->lnf_rstd = carve(cv, N);
    a->losses = carve(cv, N);
    a->step_acc = training ? carve_bytes(cv, 2 * sizeof(double)) : NULL;
    a->tok_in = carve_bytes(cv, N * sizeof(int32_t));
    a->tok_tg = carve_bytes(cv, N * sizeof(int32_t));
    a->pos = carve_bytes(cv, N * sizeof(int32_t)); /* ct_model_set_positions */
    a->rope_inv = c->pos == CT_POS_ROPE ? carve_bytes(cv, model_rope_table_bytes(c)) : NULL;
    /* Gemma's sliding layers: their RoPE table and how far back each query sees */
    a->rope_inv_local = c->sliding_window ? carve_bytes(cv, model_rope_table_bytes(c)) : NULL;
    a->look = c->sliding_window ? carve_bytes(cv, N * sizeof(int32_t)) : NULL;
    /* LoRA: every adapter's A x rows (N, r), kept for its backward */
    int nmod = 0, max_out = 0, max_in = 0;
    if (lo && lo->r > 0) {
        for (int k = 0; k < ct_lora_num_kinds(c); k++) {
            lora_mod md;
            if (!(lo->targets & (1u << k)) || !lora_mod_of(c, k, &md)) continue;
            nmod++;
            if (md.out > max_out) max_out = md.out;
            if (md.in > max_in) max_in = md.in;
        }
        a->lora_h = carve(cv, (size_t)c->n_layer * nmod * N * (size_t)lo->r);
    }
    plan->acts = cv->used - start;
    /* one block's fp32 work set: for values that are not kept, or kept as bf16 */
    size_t mark = cv->used;
    block_f32 *w = &a->work;
    memset(w, 0, sizeof *w);
    a->res = bf16 ? carve(cv, N * C) : NULL;
    bool work_norm = drop_norm || bf16 || in16;
    bool work_inner = any_full || bf16;
    if (work_norm) w->ln1 = w->ln2 = carve(cv, N * C);
    if (work_inner) {
        w->qkv = carve(cv, N * QKV);
        w->atty = carve(cv, N * NQ);
        w->res2 = carve(cv, N * C);
        w->fch = carve(cv, N * FW);
        if (c->sandwich_norm) {
            w->pa = carve(cv, N * C);
            w->pf = carve(cv, N * C);
        }
    }
    if (any_full && c->sandwich_norm) {
        w->pa_rstd = carve(cv, N);
        w->pf_rstd = carve(cv, N);
    }
    if (any_full) {
        if (ln) w->ln1_mean = carve(cv, N);
        w->ln1_rstd = carve(cv, N);
        w->lse = carve(cv, (size_t)B * NH * T);
        if (ln) w->ln2_mean = carve(cv, N);
        w->ln2_rstd = carve(cv, N);
    }
    if (work_norm && !training) w->fch_gelu = carve(cv, N * F);
    if (c->qk_norm) { /* the attention's input, derived per block */
        a->qkn = carve(cv, N * QKV);
        a->qk_rstd = carve(cv, N * (NH + (size_t)c->n_kv_head));
    }
    /* a bf16 base: the fp32 copy of the one matrix a GEMM reads (and of GPT-2's
     * positions, read beside the token embedding); under precision bf16 the
     * GEMMs read the bf16 matrices and the embedding its rows as they are */
    if (lo && lo->r > 0 && lo->base_bf16) {
        a->base_w = o->precision == CT_PREC_FP32 ? carve(cv, weights_max_span(c)) : NULL;
        a->base_wpe = c->pos == CT_POS_LEARNED ? carve(cv, (size_t)c->n_ctx * C) : NULL;
    }
    plan->work = cv->used - mark;
    /* scratch: the logits chunk and the gradients of activations */
    mark = cv->used;
    a->logits = carve(cv, (size_t)head_chunk(c, o, (int)N) * (size_t)c->vocab_size);
    if (training) {
        size_t big = F > QKV ? F : QKV;
        a->dres = carve(cv, N * C);
        a->dln = carve(cv, N * C);
        a->datty = carve(cv, N * NQ);
        a->dbig1 = carve(cv, N * big);
        a->dbig2 = carve(cv, N * FW);
        if (work_norm) w->fch_gelu = a->dbig2;
    }
    /* precision bf16: a GEMM input's bf16 copy for its weight gradient (a
     * frozen LoRA base has none) */
    size_t widest_in = F > C ? F : C; /* a linear's input: C, F, or NQ (o_proj) */
    if (NQ > widest_in) widest_in = NQ;
    a->inp16 = training && o->precision != CT_PREC_FP32 && !nmod
                   ? carve_bytes(cv, N * widest_in * sizeof(uint16_t))
                   : NULL;
    if (nmod) {
        a->lora_tmp = carve(cv, N * (size_t)max_out);
        a->lora_dh = carve(cv, N * (size_t)lo->r);
        a->lora_xd = lo->dropout > 0 ? carve(cv, N * (size_t)max_in) : NULL;
        int gin = 0, g = lora_group_max(c, lo, &gin);
        if (gin) { /* some GEMM carries g >= 2 adapters on one input */
            size_t gr = (size_t)g * (size_t)lo->r;
            a->lora_a_all = carve(cv, gr * (size_t)gin);
            a->lora_h_all = carve(cv, N * gr);
            a->lora_da_all = training ? carve(cv, gr * (size_t)gin) : NULL;
        } else {
            a->lora_a_all = a->lora_h_all = a->lora_da_all = NULL;
        }
        size_t HS = (size_t)ct_model_head_dim(c); /* q/k norm weights are HS wide */
        a->lora_sink = training ? carve(cv, 2 * (C > HS ? C : HS)) : NULL;
    }
    plan->scratch = cv->used - mark;
}

static ct_status check_batch_shape(const ct_model_config *cfg, int B, int T) {
    if (B < 1 || T < 1 || T > cfg->n_ctx)
        return CT_ERR(CT_ERR_ARG, "batch shape B=%d T=%d is invalid: expected B >= 1 and "
                                  "1 <= T <= n_ctx = %d", B, T, cfg->n_ctx);
    return CT_OK;
}

ct_status ct_model_plan_memory_lora(const ct_model_config *cfg, int B, int T, bool training,
                                    const ct_model_opts *o, const ct_lora_opts *lo,
                                    ct_model_plan *out) {
    ct_model_opts dflt = ct_model_opts_default();
    if (!o) o = &dflt;
    if (lo && lo->r <= 0) lo = NULL;
    ct_status st = ct_model_config_validate(cfg);
    if (st) return st;
    if ((st = check_batch_shape(cfg, B, T))) return st;
    if ((st = check_opts(o))) return st;
    if (lo && (st = ct_lora_opts_validate(cfg, lo))) return st;
    ct_model m = {0};
    m.cfg = *cfg;
    if ((st = model_build_table(&m))) return st;
    carver cv = {0};
    memset(out, 0, sizeof *out);
    acts_layout(cfg, o, lo, B, T, training, &cv, NULL, out);
    size_t adapter = lora_numel(cfg, lo) * sizeof(float);
    size_t base = lo && lo->base_bf16 ? weights_bf16_bytes(&m) : m.numel * sizeof(float);
    /* precision bf16/fp16: the copies (ct_model_set_opts), unless the base is bf16 itself */
    out->weights16 = o->precision != CT_PREC_FP32 && !(lo && lo->base_bf16)
                         ? weights16_numel(&m) * sizeof(uint16_t)
                         : 0;
    free(m.table);
    free(m.layers);
    out->params = base + adapter;
    /* a frozen base has no gradients: only the adapter trains */
    out->trainable = lo ? adapter : out->params;
    out->grads = training ? out->trainable : 0;
    out->total = out->params + out->weights16 + out->grads + out->acts + out->work + out->scratch;
    return CT_OK;
}

ct_status ct_model_plan_memory_opts(const ct_model_config *cfg, int B, int T, bool training,
                                    const ct_model_opts *o, ct_model_plan *out) {
    return ct_model_plan_memory_lora(cfg, B, T, training, o, NULL, out);
}

ct_status ct_model_plan_memory(const ct_model_config *cfg, int B, int T, bool training,
                               ct_model_plan *out) {
    return ct_model_plan_memory_opts(cfg, B, T, training, NULL, out);
}

ct_status ct_model_reserve(ct_model *m, int B, int T, bool training) {
    if (m->B) {
        if (B == m->B && T == m->T && (!training || m->training)) return CT_OK;
        return CT_ERR(CT_ERR_ARG, "model already reserved for B=%d T=%d%s; asked for B=%d T=%d%s",
                      m->B, m->T, m->training ? " (training)" : "", B, T,
                      training ? " (training)" : "");
    }
    ct_status st = check_batch_shape(&m->cfg, B, T);
    if (st) return st;
    carver cv = {0};
    ct_model_plan plan;
    const ct_lora_opts *lo = m->lora ? &m->lora->o : NULL;
    acts_layout(&m->cfg, &m->opts, lo, B, T, training, &cv, NULL, &plan);
    /* the arena carves one device buffer, resident from the start (the
     * backend's buffers take no page faults inside a step) */
    void *block = model_buf_alloc(m, cv.used ? cv.used : 64, CT_TAG_ACTS);
    if (!block) return ct_last_status();
    m->acts.layers = calloc((size_t)m->cfg.n_layer, sizeof *m->acts.layers);
    if (!m->acts.layers) {
        model_buf_free(m, block);
        return CT_ERR(CT_ERR_OOM, "out of memory for activation pointers");
    }
    ct_arena_wrap(&m->arena, block, cv.used ? cv.used : 64, CT_TAG_ACTS);
    cv.base = ct_arena_alloc(&m->arena, cv.used);
    cv.used = 0;
    acts_layout(&m->cfg, &m->opts, lo, B, T, training, &cv, &m->acts, &plan);
    if (m->acts.rope_inv) model_upload_rope_table(m, m->acts.rope_inv, false);
    if (m->acts.rope_inv_local) model_upload_rope_table(m, m->acts.rope_inv_local, true);
    if (m->acts.look) {
        m->acts.look_host = malloc((size_t)B * T * sizeof(int32_t));
        if (!m->acts.look_host) return CT_ERR(CT_ERR_OOM, "out of memory for the window's rows");
        m->acts.look_T = 0; /* built by the first pass */
    }
    if (training) {
        /* with adapters the base is frozen: only the adapter gets gradients */
        size_t n = m->lora ? m->lora->numel : m->numel;
        float *g = model_buf_alloc(m, n * sizeof(float), CT_TAG_GRADS);
        if (!g) return ct_last_status();
        if (m->lora)
            m->lora->grads = g;
        else
            m->grads = g;
    }
    m->B = B;
    m->T = T;
    m->chunk = head_chunk(&m->cfg, &m->opts, B * T);
    m->training = training;
    m->q_open = false; /* the accumulator moved with the arena */
    return CT_OK;
}
