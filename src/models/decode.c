/*
 * Incremental decoding with a KV cache: each step embeds one token at the next
 * position, appends its keys and values to the per-layer cache and attends
 * over the cache, so generating n tokens costs O(n) block passes instead of
 * O(n^2). Rotary models cache keys after RoPE, at their own positions; grouped
 * KV heads cache NKV heads per position. Leaves out: batched decoding (one
 * sequence at a time).
 */
#include "models/model_impl.h"

ct_status ct_model_decode_reserve(ct_model *m, int max_len) {
    const ct_model_config *c = &m->cfg;
    if (m->lora)
        return CT_ERR(CT_ERR_ARG, "the KV-cache decoder runs plain models: merge the LoRA "
                      "adapters first (ct_model_lora_merge, ctrain merge)");
    if (max_len < 1 || max_len > c->n_ctx)
        return CT_ERR(CT_ERR_ARG, "decode length %d is invalid: expected 1..%d (n_ctx)", max_len,
                      c->n_ctx);
    decode_state *d = &m->dec;
    model_buf_free(m, d->block);
    *d = (decode_state){0};
    size_t L = (size_t)c->n_layer, C = (size_t)c->n_embd, F = (size_t)c->n_ffn;
    size_t KC = (size_t)c->n_kv_head * (size_t)ct_model_head_dim(c);
    size_t NQ = (size_t)model_q_width(c), QKV = (size_t)model_qkv_width(c);
    size_t FW = (size_t)model_fc_width(c);
    size_t cache = L * (size_t)max_len * KC;
    size_t V = (size_t)c->vocab_size;
    /* q/k norms: the normalised row and its heads' statistics */
    size_t qkn = c->qk_norm ? QKV + (size_t)(c->n_head + c->n_kv_head) : 0;
    /* + the logits row and one slot for the token id (int32 beside floats) */
    size_t rope = c->pos == CT_POS_ROPE ? model_rope_table_bytes(c) / sizeof(float) : 0;
    size_t rope_local = c->sliding_window ? rope : 0;
    size_t total = 2 * cache + 3 * C + NQ + QKV + qkn + rope + rope_local + FW + F + V + 1;
    float *p = model_buf_alloc(m, total * sizeof(float), CT_TAG_ACTS);
    if (!p) return ct_last_status();
    d->block = p;
    d->kcache = p, p += cache;
    d->vcache = p, p += cache;
    d->x = p, p += C;
    d->ln = p, p += C;
    d->atty = p, p += NQ;
    d->tmp = p, p += C;
    d->qkv = p, p += QKV;
    if (c->qk_norm) {
        d->qkn = p, p += QKV;
        d->qk_rstd = p, p += (size_t)(c->n_head + c->n_kv_head);
    }
    if (rope) {
        d->rope_inv = p, p += rope;
        model_upload_rope_table(m, d->rope_inv, false);
    }
    if (rope_local) {
        d->rope_inv_local = p, p += rope_local;
        model_upload_rope_table(m, d->rope_inv_local, true);
    }
    d->fch = p, p += FW;
    d->fch_gelu = p, p += F;
    d->logits = p, p += V;
    d->token = (int32_t *)p;
    d->max_len = max_len;
    d->len = 0;
    return CT_OK;
}

void ct_model_decode_reset(ct_model *m) { m->dec.len = 0; }

ct_status ct_model_decode_step(ct_model *m, int32_t token, float *logits) {
    ct_backend *be = m->be;
    const ct_backend_i *k = be->i;
    const ct_model_config *c = &m->cfg;
    decode_state *d = &m->dec;
    int C = c->n_embd, NH = c->n_head, NKV = c->n_kv_head, HS = ct_model_head_dim(c);
    int KC = NKV * HS, NQ = NH * HS;
    if (!d->block) return CT_ERR(CT_ERR_ARG, "ct_model_decode_reserve was not called");
    if (d->len >= d->max_len)
        return CT_ERR(CT_ERR_ARG, "KV cache full: %d positions (reserve more, up to n_ctx %d)",
                      d->max_len, c->n_ctx);
    if (token < 0 || token >= c->vocab_size)
        return CT_ERR(CT_ERR_ARG, "token %d is out of range: expected 0..%d", token,
                      c->vocab_size - 1);
    int pos = d->len;
    ct_be_upload(be, d->token, &token, sizeof token);
    k->encoder_forward(be, d->x, d->token, model_p(m, m->wte), model_p(m, m->wpe), NULL, 1, 1, C,
                       pos);
    if (c->embed_scale) k->scale(be, d->x, model_embed_scale(c), (size_t)C);
    for (int l = 0; l < c->n_layer; l++) {
        const layer_idx *w = &m->layers[l];
        float *kc = d->kcache + ((size_t)l * d->max_len) * KC;
        float *vc = d->vcache + ((size_t)l * d->max_len) * KC;
        /* norm1 of the first block; the others' came fused with the last add */
        if (l == 0) model_norm_fwd(m, d->ln, NULL, NULL, d->x, w->ln1_w, w->ln1_b, 1);
        model_linear_fwd(m, l, LIN_QKV, d->qkv, d->ln, NULL, 1);
        float *q = d->qkv;
        if (c->qk_norm) {
            q = d->qkn;
            k->qknorm_forward(be, q, d->qk_rstd, d->qkv, model_p(m, w->q_norm),
                              model_p(m, w->k_norm), 1, NH, NKV, HS, c->norm_eps,
                              model_wofs(c));
        }
        bool slides = ct_model_layer_slides(c, l);
        /* the cache holds keys already turned to their position */
        if (c->pos == CT_POS_ROPE)
            k->rope_forward(be, q, NULL, 1, 1, NH, NKV, HS, pos,
                            slides ? d->rope_inv_local : d->rope_inv);
        k->copy(be, kc + (size_t)pos * KC, q + NQ, (size_t)KC * sizeof(float));
        k->copy(be, vc + (size_t)pos * KC, q + NQ + KC, (size_t)KC * sizeof(float));
        /* a sliding layer attends over its last W positions only */
        int first = slides && pos + 1 > c->sliding_window ? pos + 1 - c->sliding_window : 0;
        k->attention_decode(be, d->atty, q, kc + (size_t)first * KC, vc + (size_t)first * KC,
                            pos + 1 - first, NH, NKV, HS);
        model_linear_fwd(m, l, LIN_PROJ, d->tmp, d->atty, NULL, 1);
        if (c->sandwich_norm) /* Gemma: the attention's output normalised before the add */
            model_norm_fwd(m, d->tmp, NULL, NULL, d->tmp, w->pan_w, -1, 1);
        model_residual_norm_fwd(m, d->x, d->ln, NULL, NULL, d->x, d->tmp, w->ln2_w, w->ln2_b, 1);
        model_linear_fwd(m, l, LIN_FC, d->fch, d->ln, NULL, 1);
        model_mlp_act_fwd(m, d->fch_gelu, d->fch, 1);
        model_linear_fwd(m, l, LIN_FCPROJ, d->tmp, d->fch_gelu, NULL, 1);
        if (c->sandwich_norm)
            model_norm_fwd(m, d->tmp, NULL, NULL, d->tmp, w->pfn_w, -1, 1);
        /* the add, and the next block's norm1 (or the final norm) of the sum */
        bool last = l + 1 == c->n_layer;
        const layer_idx *wn = last ? NULL : &m->layers[l + 1];
        model_residual_norm_fwd(m, d->x, d->ln, NULL, NULL, d->x, d->tmp,
                                last ? m->lnf_w : wn->ln1_w, last ? m->lnf_b : wn->ln1_b, 1);
    }
    if (model_half(m))
        model_mm16_fwd(m, d->logits, d->ln, model_w16(m, m->head_w), NULL, 1, C, c->vocab_size);
    else
        k->matmul_forward(be, d->logits, d->ln, model_p(m, m->head_w), NULL, 1, C,
                          c->vocab_size);
    ct_be_download(be, logits, d->logits, (size_t)c->vocab_size * sizeof(float));
    d->len++;
    return k->synchronize(be);
}
