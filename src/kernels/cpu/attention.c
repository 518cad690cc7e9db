/*
 * Threaded causal attention, the same flash-style algorithm as ref (online
 * softmax forward saving lse, recomputing backward) in float with SIMD dot
 * products. Work is split by (batch, head): the forward writes only that
 * head's columns of out and its lse rows, and the backward adds only into that
 * head's columns of dqkv, so threads never share an output element.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"

static float attention_dot(const float *a, const float *b, int n) {
    float acc = 0.0f;
#ifdef CT_USE_OPENMP
#pragma omp simd reduction(+ : acc)
#endif
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* One query row q (HS) against n >= 1 keys and values whose rows lie kv_stride
 * floats apart: writes out (HS) and returns the row's log-sum-exp. */
static float attention_row(float *out, const float *q, const float *k, const float *v,
                           size_t kv_stride, int n, int HS, float scale) {
    // key 0 seeds the running max, so no -inf arithmetic is needed
    float m = scale * attention_dot(q, k, HS);
    float l = 1.0f;
    for (int d = 0; d < HS; d++) out[d] = v[d];
    for (int j = 1; j < n; j++) {
        const float *kj = k + j * kv_stride;
        const float *vj = v + j * kv_stride;
        float s = scale * attention_dot(q, kj, HS);
        if (s > m) {
            // new max: rescale what was summed against the old one
            float corr = expf(m - s);
            l *= corr;
            for (int d = 0; d < HS; d++) out[d] *= corr;
            m = s;
        }
        float p = expf(s - m);
        l += p;
        for (int d = 0; d < HS; d++) out[d] += p * vj[d];
    }
    float inv_l = 1.0f / l;
    for (int d = 0; d < HS; d++) out[d] *= inv_l;
    return m + logf(l);
}

/* out (B,T,C), lse (B,NH,T) = causal attention of qkv (B,T,3C), scale 1/sqrt(HS). */
void ct_attention_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C,
                              int NH) {
    int HS = C / NH;
    float scale = (float)(1.0 / sqrt((double)HS));
    size_t C3 = (size_t)3 * C;
#ifdef CT_USE_OPENMP
#pragma omp parallel for collapse(2)
#endif
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *qkv_b = qkv + (size_t)b * T * C3;
            const float *k = qkv_b + C + h * HS;
            const float *v = qkv_b + 2 * C + h * HS;
            float *lse_bh = lse + ((size_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                const float *q = qkv_b + t * C3 + h * HS;
                float *o = out + ((size_t)b * T + t) * C + h * HS;
                lse_bh[t] = attention_row(o, q, k, v, C3, t + 1, HS, scale);
            }
        }
    }
}

/* dqkv (B,T,3C) += attention gradient from dout (B,T,C), qkv (B,T,3C), the
 * forward's out (B,T,C) and lse (B,NH,T). Same per-row formulas as ref. */
void ct_attention_backward_cpu(float *dqkv, const float *dout, const float *qkv,
                               const float *out, const float *lse, int B, int T, int C, int NH) {
    int HS = C / NH;
    float scale = (float)(1.0 / sqrt((double)HS));
    size_t C3 = (size_t)3 * C;
#ifdef CT_USE_OPENMP
#pragma omp parallel for collapse(2)
#endif
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *qkv_b = qkv + (size_t)b * T * C3;
            float *dqkv_b = dqkv + (size_t)b * T * C3;
            const float *lse_bh = lse + ((size_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                const float *q = qkv_b + t * C3 + h * HS;
                float *dq = dqkv_b + t * C3 + h * HS;
                const float *o = out + ((size_t)b * T + t) * C + h * HS;
                const float *dout_t = dout + ((size_t)b * T + t) * C + h * HS;
                // D = dout . out = sum_j p_j dout . v_j, the softmax Jacobian's row term
                float D = attention_dot(dout_t, o, HS);
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv_b + j * C3 + C + h * HS;
                    const float *v = qkv_b + j * C3 + 2 * C + h * HS;
                    float *dk = dqkv_b + j * C3 + C + h * HS;
                    float *dv = dqkv_b + j * C3 + 2 * C + h * HS;
                    float p = expf(scale * attention_dot(q, k, HS) - lse_bh[t]);
                    float ds = p * (attention_dot(dout_t, v, HS) - D);
                    float dsc = scale * ds;
                    for (int d = 0; d < HS; d++) {
                        dq[d] += dsc * k[d];
                        dk[d] += dsc * q[d];
                        dv[d] += p * dout_t[d];
                    }
                }
            }
        }
    }
}

/* out (C) = attention of q (C) over kcache, vcache (n,C), all visible; heads in
 * parallel. */
void ct_attention_decode_cpu(float *out, const float *q, const float *kcache,
                             const float *vcache, int n, int C, int NH) {
    int HS = C / NH;
    float scale = (float)(1.0 / sqrt((double)HS));
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int h = 0; h < NH; h++)
        attention_row(out + h * HS, q + h * HS, kcache + h * HS, vcache + h * HS, (size_t)C, n,
                      HS, scale);
}
