/*
 * Reference causal multi-head attention, flash style: no T x T matrix. The
 * forward keeps a running max and sum per query row (online softmax) and saves
 * each row's log-sum-exp; the backward recomputes the probabilities from it.
 * Dot products and the softmax statistics are in double; the output row itself
 * is the float accumulator. Grouped-query attention (NKV < NH) reads each KV head from every query head of
 * its group. With positions (rows that pack several examples) query t sees
 * only the keys of its own example, [t - pos[t], t]: the same row routine over
 * a shorter window. Dropout of the probabilities (HF's attn_dropout, training)
 * multiplies each p_j by its mask value M_j (0 or 1/(1-p), ct_attn_drop_mult)
 * in the output's sum, while the softmax's normaliser and lse stay undropped.
 * Leaves out: masks other than causal and packed.
 */
#include <math.h>

#include "backend/ref/ref.h"

static double attention_dot(const float *a, const float *b, int n) {
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

/* One query row against n keys and values whose rows lie kv_stride floats
 * apart: writes out (HS) = (softmax(scale * q k^T) o M) v and returns the
 * log-sum-exp of the scaled scores (undropped). q (HS); k, v (n rows of HS);
 * n >= 1. M_j = ct_attn_drop_mult(drop, b, h, i, j0 + j, NH, T): the dropout
 * multiplier of key j (1 when drop is NULL or its p is 0, and a product
 * with 1 changes no bit). */
static float attention_row(float *out, const float *q, const float *k, const float *v,
                           size_t kv_stride, int n, int HS, double scale,
                           const ct_attn_dropout *drop, int b, int h, int i, int j0, int NH,
                           int T) {
    // key 0 seeds the running max, so no -inf arithmetic is needed
    double m = scale * attention_dot(q, k, HS);
    double l = 1.0;
    double mk = ct_attn_drop_mult(drop, b, h, i, j0, NH, T);
    for (int d = 0; d < HS; d++) out[d] = (float)(mk * v[d]);
    for (int j = 1; j < n; j++) {
        const float *kj = k + j * kv_stride;
        const float *vj = v + j * kv_stride;
        double s = scale * attention_dot(q, kj, HS);
        if (s > m) {
            // new max: rescale what was summed against the old one
            double corr = exp(m - s);
            l *= corr;
            for (int d = 0; d < HS; d++) out[d] = (float)(out[d] * corr);
            m = s;
        }
        double p = exp(s - m);
        l += p; // the normaliser sums the undropped probabilities
        double pm = p * ct_attn_drop_mult(drop, b, h, i, j0 + j, NH, T);
        for (int d = 0; d < HS; d++) out[d] = (float)(out[d] + pm * vj[d]);
    }
    for (int d = 0; d < HS; d++) out[d] = (float)(out[d] / l);
    return (float)(m + log(l));
}

/* The first key query t of row b sees: its example's start t - pos[b,t]
 * when positions are given, else 0 (plain causal). */
static int attention_first_key(const int32_t *pos, int b, int T, int t) {
    return pos ? t - pos[(size_t)b * T + t] : 0;
}

/* out (B,T,NH*HS) = causal softmax(q k^T / sqrt(HS)) v per query head; lse
 * (B,NH,T). qkv (B,T,(NH+2*NKV)*HS) holds q, k, v side by side; query head h
 * reads KV head h / (NH/NKV) (grouped-query attention; NKV == NH is plain
 * multi-head attention). pos (B,T) or NULL: query t sees keys
 * [t - pos[b,t], t] (its packed example), or [0, t]. drop: dropout of the
 * probabilities (NULL: none).
 * Ref: torch.nn.functional.scaled_dot_product_attention(is_causal=True,
 * dropout_p); FlashAttention-2 (Dao, 2023), Algorithm 1; HF LLaMA repeat_kv. */
void ct_attention_forward_ref(ct_backend *be, float *out, float *lse, const float *qkv,
                              const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                              int NH, int NKV, int HS) {
    (void)be;
    double scale = 1.0 / sqrt((double)HS);
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    int group = NH / NKV;
    for (int b = 0; b < B; b++) {
        const float *qkv_b = qkv + (size_t)b * T * W;
        for (int h = 0; h < NH; h++) {
            int g = h / group;
            const float *k = qkv_b + C + (size_t)g * HS;
            const float *v = qkv_b + C + KC + (size_t)g * HS;
            for (int t = 0; t < T; t++) {
                const float *q = qkv_b + t * W + (size_t)h * HS;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
                // causal: query t sees keys j0..t (j0 = 0 unless packed)
                int j0 = attention_first_key(pos, b, T, t);
                lse[((size_t)b * NH + h) * T + t] =
                    attention_row(o, q, k + (size_t)j0 * W, v + (size_t)j0 * W, W, t + 1 - j0, HS,
                                  scale, drop, b, h, t, j0, NH, T);
            }
        }
    }
}


/* dqkv (B,T,(NH+2*NKV)*HS) += gradient of attention given dout (B,T,NH*HS),
 * the forward's qkv, out (B,T,NH*HS) and lse (B,NH,T). Per query row t, with
 * p_j = exp(s_j - lse), M_j the dropout multiplier (1 without drop) and
 * D = dout . out (= sum_j p_j M_j dout . v_j):
 *   ds_j = p_j (M_j dout . v_j - D); dq += scale ds_j k_j; dk_j += scale ds_j q;
 *   dv_j += p_j M_j dout.
 * A KV head's dk, dv sum over the query heads of its group, in head order.
 * j runs over the keys the forward's query saw (pos as there).
 * Ref: FlashAttention-2 (Dao, 2023), Algorithm 2. */
void ct_attention_backward_ref(ct_backend *be, float *dqkv, const float *dout, const float *qkv,
                               const float *out, const float *lse, const int32_t *pos,
                               const ct_attn_dropout *drop, int B, int T, int NH, int NKV,
                               int HS) {
    (void)be;
    double scale = 1.0 / sqrt((double)HS);
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    int group = NH / NKV;
    for (int b = 0; b < B; b++) {
        const float *qkv_b = qkv + (size_t)b * T * W;
        float *dqkv_b = dqkv + (size_t)b * T * W;
        for (int h = 0; h < NH; h++) {
            size_t ko = C + (size_t)(h / group) * HS, vo = ko + KC;
            for (int t = 0; t < T; t++) {
                const float *q = qkv_b + t * W + (size_t)h * HS;
                float *dq = dqkv_b + t * W + (size_t)h * HS;
                const float *o = out + ((size_t)b * T + t) * C + (size_t)h * HS;
                const float *dout_t = dout + ((size_t)b * T + t) * C + (size_t)h * HS;
                double lse_t = lse[((size_t)b * NH + h) * T + t];
                double D = attention_dot(dout_t, o, HS);
                for (int j = attention_first_key(pos, b, T, t); j <= t; j++) {
                    const float *k = qkv_b + j * W + ko;
                    const float *v = qkv_b + j * W + vo;
                    float *dk = dqkv_b + j * W + ko;
                    float *dv = dqkv_b + j * W + vo;
                    double mk = ct_attn_drop_mult(drop, b, h, t, j, NH, T);
                    double p = exp(scale * attention_dot(q, k, HS) - lse_t);
                    double ds = p * (mk * attention_dot(dout_t, v, HS) - D);
                    double pm = p * mk;
                    for (int d = 0; d < HS; d++) {
                        dq[d] += (float)(scale * ds * k[d]);
                        dk[d] += (float)(scale * ds * q[d]);
                        dv[d] += (float)(pm * dout_t[d]);
                    }
                }
            }
        }
    }
}


/* out (NH*HS) = attention of one query q (NH*HS) over kcache, vcache
 * (n, NKV*HS), all n positions visible (the query's own included). The same
 * row routine as the forward, so decoding reproduces training's last row. */
void ct_attention_decode_ref(ct_backend *be, float *out, const float *q, const float *kcache,
                                 const float *vcache, int n, int NH, int NKV, int HS) {
    (void)be;
    double scale = 1.0 / sqrt((double)HS);
    size_t KC = (size_t)NKV * HS;
    int group = NH / NKV;
    for (int h = 0; h < NH; h++) {
        size_t g = (size_t)(h / group) * HS;
        attention_row(out + (size_t)h * HS, q + (size_t)h * HS, kcache + g, vcache + g, KC, n, HS,
                      scale, NULL, 0, h, 0, 0, NH, 1);
    }
}

