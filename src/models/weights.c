/*
 * The weight store of a model: its parameters as fp32 in one flat buffer, or,
 * for a frozen LoRA base, the matrices as bf16 (params16) with the 1-D weights
 * kept fp32 (small); under precision fp32 a GEMM reads a bf16 matrix widened
 * into an fp32 work buffer of the arena (model_p), under bf16 the matrix as it
 * is, and the embedding reads its rows as they are either way
 * (model_encoder_fwd). Everything through the backend.
 * Under precision bf16 (fp16) it also keeps bf16 (fp16) copies of the
 * matrices the GEMMs read (w16), refreshed from the fp32 master weights after
 * every change.
 * Leaves out: the adapters (lora.c) and the files (hf.c).
 */
#include "models/model_impl.h"

#include <stdlib.h>

size_t weights_max_span(const ct_model_config *c) {
    size_t C = (size_t)c->n_embd, QKV = (size_t)model_qkv_width(c);
    size_t FW = (size_t)model_fc_width(c), F = (size_t)c->n_ffn, V = (size_t)c->vocab_size;
    size_t s = V * C;
    if (QKV * C > s) s = QKV * C;
    if (FW * C > s) s = FW * C;
    if (C * F > s) s = C * F;
    return s;
}

size_t weights_bf16_bytes(const ct_model *t) {
    size_t small = 0;
    for (int i = 0; i < t->n_table; i++)
        if (t->table[i].ndim == 1) small += t->table[i].numel;
    return t->numel * sizeof(uint16_t) + small * sizeof(float);
}

void model_encoder_fwd(ct_model *m, float *out, const int32_t *inp, const int32_t *pos, int B,
                       int T, int pos0) {
    ct_backend *be = m->be;
    int C = m->cfg.n_embd;
    const float *wpe = model_p(m, m->wpe);
    if (m->params16 && !(m->lora && m->lora->save_embed >= 0))
        be->i->encoder_forward_wte16(be, out, inp, m->params16 + m->table[m->wte].offset, wpe,
                                     pos, B, T, C, pos0);
    else
        be->i->encoder_forward(be, out, inp, model_embed_w(m), wpe, pos, B, T, C, pos0);
}

float *weights_bf16_view(ct_model *m, int idx) {
    const ct_param *p = &m->table[idx];
    if (p->ndim == 1) return m->small + m->small_off[idx];
    float *dst = idx == m->wpe ? m->acts.base_wpe : m->acts.base_w;
    CT_ASSERT(dst != NULL); /* the arena of ct_model_reserve holds the widened matrix */
    m->be->i->bf16_to_f32(m->be, dst, m->params16 + p->offset, m->span[idx]);
    return dst;
}

ct_status weights_bf16_alloc(ct_model *m) {
    const ct_model_config *c = &m->cfg;
    size_t small = 0;
    weights16_free(m); /* the GEMMs read the bf16 base itself */
    m->small_off = calloc((size_t)m->n_table, sizeof *m->small_off);
    m->span = calloc((size_t)m->n_table, sizeof *m->span);
    if (!m->small_off || !m->span) return CT_ERR(CT_ERR_OOM, "out of memory for the bf16 base");
    for (int i = 0; i < m->n_table; i++) {
        m->span[i] = m->table[i].numel;
        if (m->table[i].ndim == 1) {
            m->small_off[i] = small;
            small += m->table[i].numel;
        }
    }
    /* a fused GEMM reads q,k,v (gate,up) from the first entry's offset on */
    size_t C = (size_t)c->n_embd;
    for (int l = 0; l < c->n_layer; l++) {
        m->span[m->layers[l].qkv_w] = (size_t)model_qkv_width(c) * C;
        m->span[m->layers[l].fc_w] = (size_t)model_fc_width(c) * C;
    }
    m->params16 = model_buf_alloc(m, m->numel * sizeof(uint16_t), CT_TAG_PARAMS);
    m->small = model_buf_alloc(m, (small ? small : 1) * sizeof(float), CT_TAG_PARAMS);
    if (!m->params16 || !m->small) {
        ct_status st = ct_last_status();
        model_buf_free(m, m->params16);
        model_buf_free(m, m->small);
        m->params16 = NULL;
        m->small = NULL;
        return st;
    }
    return CT_OK;
}

ct_status weights_to_bf16(ct_model *m) {
    ct_status st = weights_bf16_alloc(m);
    if (st) return st;
    ct_backend *be = m->be;
    be->i->f32_to_bf16(be, m->params16, m->params, m->numel);
    for (int i = 0; i < m->n_table; i++)
        if (m->table[i].ndim == 1)
            be->i->copy(be, m->small + m->small_off[i], m->params + m->table[i].offset,
                        m->table[i].numel * sizeof(float));
    model_buf_free(m, m->params);
    m->params = NULL;
    return CT_OK;
}

const uint16_t *ct_model_params_bf16(const ct_model *m) { return m->params16; }

/* -------------------------------------- precision bf16/fp16: the copies */

bool weights16_entry(const ct_model *t, int i) {
    if (t->table[i].ndim != 2 || i == t->wpe) return false;
    /* the embedding is a GEMM's weight only when it is the (tied) head */
    return i != t->wte || t->head_w == t->wte;
}

size_t weights16_numel(const ct_model *t) {
    size_t n = 0;
    for (int i = 0; i < t->n_table; i++)
        if (weights16_entry(t, i)) n += t->table[i].numel;
    return n;
}

void weights16_free(ct_model *m) {
    model_buf_free(m, m->w16);
    free(m->w16_off);
    m->w16 = NULL;
    m->w16_off = NULL;
    m->w16_numel = 0;
    m->w16_fresh = false;
}

ct_status weights16_alloc(ct_model *m) {
    if (!model_half(m) || m->w16 || m->params16) return CT_OK;
    /* in table order, so LLaMA's q,k,v (gate,up) stay back to back: a fused
     * GEMM reads them from the first entry's copy on */
    m->w16_off = malloc((size_t)m->n_table * sizeof *m->w16_off);
    if (!m->w16_off) return CT_ERR(CT_ERR_OOM, "out of memory for the bf16 weight table");
    size_t n = 0;
    for (int i = 0; i < m->n_table; i++) {
        m->w16_off[i] = weights16_entry(m, i) ? n : SIZE_MAX;
        if (m->w16_off[i] != SIZE_MAX) n += m->table[i].numel;
    }
    m->w16 = model_buf_alloc(m, n * sizeof(uint16_t), CT_TAG_PARAMS);
    if (!m->w16) {
        ct_status st = ct_last_status();
        weights16_free(m);
        return st;
    }
    m->w16_numel = n;
    ct_model_refresh_weights16(m);
    return CT_OK;
}

void ct_model_refresh_weights16(ct_model *m) {
    if (!m->w16 || !m->params) return;
    /* a frozen base (LoRA) changes only when loaded, which marks it stale */
    if (m->lora && m->w16_fresh) return;
    for (int i = 0; i < m->n_table; i++)
        if (m->w16_off[i] != SIZE_MAX)
            model_to16(m, m->w16 + m->w16_off[i], m->params + m->table[i].offset,
                       m->table[i].numel);
    m->w16_fresh = true;
}

uint16_t *ct_model_trainable_w16(ct_model *m, int i) {
    if (m->lora || !m->w16 || !model_bf16(m) || i < 0 || i >= m->n_table ||
        m->w16_off[i] == SIZE_MAX)
        return NULL;
    return m->w16 + m->w16_off[i];
}

void model_weights_changed(ct_model *m) {
    m->w16_fresh = false;
    ct_model_refresh_weights16(m);
}
