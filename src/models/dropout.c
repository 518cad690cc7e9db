/*
 * Dropout of the transformer family as Hugging Face's modules apply it
 * (GPT2Model: embd_pdrop on wte + wpe, attn_pdrop on the attention
 * probabilities, resid_pdrop on each block's attention and MLP c_proj outputs;
 * LlamaModel: attention_dropout on the probabilities only), in training only.
 * No mask is stored: an element's keep/drop decision is ct_dropout_keep of a
 * key (the pass's key mixed with the site and the layer) and the element's
 * global index (rows counted from row0), so the backward, recompute and a
 * debug dump draw it again, and a global batch split over micro-batches or
 * ranks draws the masks of the whole batch. The probabilities live in the
 * model's config.
 * LoRA's adapter dropout (lora.c) draws its masks from the same pass key and
 * global rows.
 */
#include "models/model_impl.h"

#include <math.h>
#include <string.h>

/* splitmix64's finalizer: a bijective mix of 64 bits. */
static uint64_t drop_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

static bool drop_p_ok(float p) { return p >= 0.0f && p < 1.0f; }

ct_status ct_model_set_dropout(ct_model *m, float embd_pdrop, float resid_pdrop,
                               float attn_pdrop) {
    if (!drop_p_ok(embd_pdrop) || !drop_p_ok(resid_pdrop) || !drop_p_ok(attn_pdrop))
        return CT_ERR(CT_ERR_ARG, "dropout probabilities embd %g, resid %g, attn %g: expected "
                      "0 <= p < 1", (double)embd_pdrop, (double)resid_pdrop, (double)attn_pdrop);
    if (m->cfg.arch == CT_ARCH_LLAMA && (embd_pdrop != 0.0f || resid_pdrop != 0.0f))
        return CT_ERR(CT_ERR_ARG, "a llama model has attention dropout only (HF's "
                      "attention_dropout): embedding %g and residual %g must be 0",
                      (double)embd_pdrop, (double)resid_pdrop);
    m->cfg.embd_pdrop = embd_pdrop;
    m->cfg.resid_pdrop = resid_pdrop;
    m->cfg.attn_pdrop = attn_pdrop;
    return CT_OK;
}

void ct_model_set_dropout_key(ct_model *m, uint64_t key, int64_t row0) {
    m->drop_key = key;
    m->drop_row0 = row0;
    m->drop_key_set = true;
}

const char *ct_model_dropout_site_name(ct_dropout_site site) {
    static const char *names[CT_DROPOUT_SITE_COUNT] = {"embd", "attn_probs", "attn_resid",
                                                        "mlp_resid"};
    return (unsigned)site < CT_DROPOUT_SITE_COUNT ? names[site] : "?";
}

float ct_model_dropout_p(const ct_model *m, ct_dropout_site site) {
    switch (site) {
    case CT_DROPOUT_EMBD: return m->cfg.embd_pdrop;
    case CT_DROPOUT_ATTN_PROBS: return m->cfg.attn_pdrop;
    case CT_DROPOUT_ATTN_RESID:
    case CT_DROPOUT_MLP_RESID: return m->cfg.resid_pdrop;
    default: return 0.0f;
    }
}

float model_drop_p(const ct_model *m, ct_dropout_site s) {
    return m->dropping ? ct_model_dropout_p(m, s) : 0.0f;
}

/* The key of a pass that has none set: its call count, mixed. */
static uint64_t pass_key(uint64_t pass) { return drop_mix(pass * 0x9E3779B97F4A7C15ull); }

/* The site key of (key, s, l): each site and layer gets an unrelated key, so
 * equal global indices at two sites draw independent decisions. */
static uint64_t site_key(uint64_t key, ct_dropout_site s, int l) {
    uint64_t tag = (uint64_t)l * CT_DROPOUT_SITE_COUNT + (uint64_t)s + 1;
    return drop_mix(key ^ drop_mix(tag * 0x9E3779B97F4A7C15ull));
}

uint64_t model_drop_key(const ct_model *m, ct_dropout_site s, int l) {
    return site_key(m->drop_key, s, l);
}

void model_drop_begin(ct_model *m, int T) {
    m->dropping = true;
    m->drop_T = T;
    if (!m->drop_key_set) m->drop_key = pass_key(++m->drop_pass);
}

void model_drop_rows(ct_model *m, float *out, const float *x, ct_dropout_site s, int l, int B,
                     int T) {
    float p = model_drop_p(m, s);
    if (!(p > 0.0f)) {
        if (out != x) m->be->i->copy(m->be, out, x, (size_t)B * T * m->cfg.n_embd * sizeof *x);
        return;
    }
    size_t C = (size_t)m->cfg.n_embd;
    uint64_t off = (uint64_t)m->drop_row0 * (uint64_t)T * C;
    m->be->i->dropout_forward(m->be, out, x, (size_t)B * T * C, p, model_drop_key(m, s, l), off);
}

ct_status ct_model_dropout_mask(const ct_model *m, ct_dropout_site site, int layer, int B, int T,
                                float *out) {
    const ct_model_config *c = &m->cfg;
    if ((unsigned)site >= CT_DROPOUT_SITE_COUNT)
        return CT_ERR(CT_ERR_ARG, "dropout site %d is unknown", (int)site);
    if (layer < 0 || layer >= c->n_layer || B < 1 || T < 1 || T > c->n_ctx)
        return CT_ERR(CT_ERR_ARG, "dropout mask of layer %d for B=%d T=%d: expected a layer in "
                      "0..%d and 1 <= T <= %d", layer, B, T, c->n_layer - 1, c->n_ctx);
    /* the key the next forward_backward will use */
    uint64_t key = m->drop_key_set ? m->drop_key : pass_key(m->drop_pass + 1);
    uint64_t k = site_key(key, site, site == CT_DROPOUT_EMBD ? 0 : layer);
    float p = ct_model_dropout_p(m, site);
    if (site == CT_DROPOUT_ATTN_PROBS) {
        ct_attn_dropout d = {p, k, m->drop_row0};
        int NH = c->n_head;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < T; i++)
                    for (int j = 0; j < T; j++)
                        out[(((size_t)b * NH + h) * T + i) * T + j] =
                            ct_attn_drop_mult(&d, b, h, i, j, NH, T);
        return CT_OK;
    }
    size_t n = (size_t)B * T * c->n_embd;
    uint64_t off = (uint64_t)m->drop_row0 * (uint64_t)T * (uint64_t)c->n_embd;
    for (size_t i = 0; i < n; i++) out[i] = p > 0.0f ? ct_dropout_mult(k, off + i, p) : 1.0f;
    return CT_OK;
}
