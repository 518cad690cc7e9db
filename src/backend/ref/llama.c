/*
 * Reference kernels of the LLaMA switches of the transformer family: RMSNorm
 * (with the residual add fused in front of it defined as the two steps),
 * Qwen3's per-head RMSNorm of q and k, rotary position embedding (Hugging
 * Face's rotate_half convention, at the model's inverse frequencies, so any
 * RoPE scaling comes in with them) and the SwiGLU gate, forward and
 * backward, evaluated in double and rounded once.
 * Leaves out: the interleaved-pairs RoPE layout of the original Meta
 * checkpoints.
 */
#include <math.h>

#include "backend/ref/ref.h"
#include "core/dtype.h"

/* out (N,C) = inp * rstd * (wofs + weight), rstd = 1/sqrt(mean(inp^2) + eps)
 * per row; writes rstd (N) unless NULL. Ref: Zhang & Sennrich (2019); HF
 * LlamaRMSNorm (variance in fp32, eps inside the square root, weight applied
 * last); Gemma3RMSNorm's scale is 1 + weight, summed in fp32 (wofs 1). */
/* With out16 (out NULL) the fp32 results are written rounded to bf16. */
static void rmsnorm_rows(float *out, uint16_t *out16, float *rstd, const float *inp,
                         const float *weight, int N, int C, float eps, float wofs) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        size_t y = (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        double s = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) {
            float v = (float)(x[c] * s * (wofs + weight[c]));
            if (out16) out16[y + c] = ct_f32_to_bf16(v);
            else out[y + c] = v;
        }
        if (rstd) rstd[n] = (float)s;
    }
}

void ct_rmsnorm_forward_ref(ct_backend *be, float *out, float *rstd, const float *inp, const float *weight,
                            int N, int C, float eps, float wofs) {
    (void)be;
    rmsnorm_rows(out, NULL, rstd, inp, weight, N, C, eps, wofs);
}

/* rmsnorm_forward_out16: the residual add (with b) and the rows rounded. */
void ct_rmsnorm_forward_out16_ref(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                  const float *a, const float *b, const float *weight, int N,
                                  int C, float eps, float wofs) {
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        const float *x = a + o;
        if (b) {
            ct_residual_forward_ref(be, res + o, a + o, b + o, (size_t)C);
            x = res + o;
        }
        rmsnorm_rows(NULL, out16 + o, rstd ? rstd + n : NULL, x, weight, 1, C, eps, wofs);
    }
}

/* res (N,C) = a + b, then out (N,C) = RMSNorm(res), row by row: the same
 * bits as residual_forward then rmsnorm_forward. res may alias a or b. */
void ct_residual_rmsnorm_forward_ref(ct_backend *be, float *res, float *out, float *rstd,
                                     const float *a, const float *b, const float *weight, int N,
                                     int C, float eps, float wofs) {
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        ct_residual_forward_ref(be, res + o, a + o, b + o, (size_t)C);
        ct_rmsnorm_forward_ref(be, out + o, rstd ? rstd + n : NULL, res + o, weight, 1, C, eps,
                               wofs);
    }
}

/* dinp (N,C), dweight (C) += RMSNorm gradients from dout (N,C), the forward's
 * inp (N,C), weight (C) and rstd (N). With xhat = x * rstd and g = (wofs +
 * weight) * dout:
 *   dinp = rstd * (g - xhat * mean(g * xhat)), dweight = sum over rows of dout * xhat
 * (LayerNorm's formula without the mean terms). */
void ct_rmsnorm_backward_ref(ct_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C, float wofs) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        double s = rstd[n], gx_mean = 0.0;
        for (int c = 0; c < C; c++) gx_mean += (double)(wofs + weight[c]) * dy[c] * x[c] * s;
        gx_mean /= C;
        for (int c = 0; c < C; c++) {
            double xhat = x[c] * s;
            dx[c] += (float)(s * ((double)(wofs + weight[c]) * dy[c] - xhat * gx_mean));
        }
    }
    for (int c = 0; c < C; c++) {
        double dw = 0.0;
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * C + c;
            dw += (double)inp[i] * rstd[n] * dout[i];
        }
        dweight[c] += (float)dw;
    }
}

/* cos, sin (HS/2) of the angles at position pos, as HF LlamaRotaryEmbedding
 * computes them: angle = pos * inv_freq_i rounded to fp32 (the model's
 * inverse frequencies, ct_model_rope_inv_freq), then cosine and sine (here in
 * double, rounded once). */
void ct_rope_cos_sin(float *cosv, float *sinv, int pos, int HS, const float *inv_freq) {
    for (int i = 0; i < HS / 2; i++) {
        float angle = (float)pos * inv_freq[i];
        cosv[i] = (float)cos((double)angle);
        sinv[i] = (float)sin((double)angle);
    }
}

/* Turn each q and k head of qkv (B,T,(NH+2*NKV)*HS) by the position's angles:
 * row (b,t) sits at pos0 + pos[b,t] (pos0 + t when pos is NULL); dir = +1
 * rotates (forward), -1 applies the transpose (backward). */
static void rope_apply(float *qkv, const int32_t *pos, int B, int T, int NH, int NKV, int HS,
                       int pos0, const float *inv_freq, double dir) {
    int half = HS / 2, heads = NH + NKV; // q heads then k heads, contiguous
    size_t W = (size_t)(NH + 2 * NKV) * HS;
    float cosv[half > 0 ? half : 1], sinv[half > 0 ? half : 1];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int p = pos ? pos[(size_t)b * T + t] : t;
            ct_rope_cos_sin(cosv, sinv, pos0 + p, HS, inv_freq);
            float *row = qkv + ((size_t)b * T + t) * W;
            for (int h = 0; h < heads; h++) {
                float *x = row + (size_t)h * HS;
                for (int i = 0; i < half; i++) {
                    // x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1)
                    double x1 = x[i], x2 = x[i + half], c = cosv[i], s = dir * sinv[i];
                    x[i] = (float)(x1 * c - x2 * s);
                    x[i + half] = (float)(x2 * c + x1 * s);
                }
            }
        }
    }
}

/* In place on the q and k heads of qkv (B,T,(NH+2*NKV)*HS); HS even; pos
 * (B,T) or NULL (see rope_apply).
 * Ref: Su et al., RoFormer (2021); HF modeling_llama apply_rotary_pos_emb. */
void ct_rope_forward_ref(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH, int NKV,
                         int HS, int pos0, const float *inv_freq) {
    (void)be;
    rope_apply(qkv, pos, B, T, NH, NKV, HS, pos0, inv_freq, 1.0);
}

/* The rotation is orthogonal: its gradient is the rotation by -angle. Writes
 * dqkv's q and k parts in place. */
void ct_rope_backward_ref(ct_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH,
                          int NKV, int HS, int pos0, const float *inv_freq) {
    (void)be;
    rope_apply(dqkv, pos, B, T, NH, NKV, HS, pos0, inv_freq, -1.0);
}

/* Per-head RMSNorm of the q and k heads of rows inp (N,(NH+2*NKV)*HS) into
 * out, v copied; rstd (N,NH+NKV) unless NULL. Each head is RMSNorm's row
 * (ct_rmsnorm_forward_ref over HS values) with weight wq or wk.
 * Ref: HF modeling_qwen3 Qwen3Attention (q_norm, k_norm on head_dim). */
void ct_qknorm_forward_ref(ct_backend *be, float *out, float *rstd, const float *inp,
                           const float *wq, const float *wk, int N, int NH, int NKV, int HS,
                           float eps, float wofs) {
    int heads = NH + NKV;
    size_t W = (size_t)(NH + 2 * NKV) * HS;
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            size_t off = (size_t)n * W + (size_t)h * HS;
            ct_rmsnorm_forward_ref(be, out + off, rstd ? rstd + (size_t)n * heads + h : NULL,
                                   inp + off, h < NH ? wq : wk, 1, HS, eps, wofs);
        }
        size_t v = (size_t)n * W + (size_t)heads * HS;
        for (size_t i = 0; i < (size_t)NKV * HS; i++) out[v + i] = inp[v + i];
    }
}

/* dinp (written; may be dout) and dwq, dwk += : RMSNorm's backward per head
 * (see ct_rmsnorm_backward_ref), the weight gradients summed over rows and
 * heads in double, in order. */
void ct_qknorm_backward_ref(ct_backend *be, float *dinp, float *dwq, float *dwk,
                            const float *dout, const float *inp, const float *wq,
                            const float *wk, const float *rstd, int N, int NH, int NKV, int HS,
                            float wofs) {
    (void)be;
    int heads = NH + NKV;
    size_t W = (size_t)(NH + 2 * NKV) * HS;
    /* the weight gradients first: dinp may overwrite dout */
    for (int c = 0; c < HS; c++) {
        double gq = 0.0, gk = 0.0;
        for (int n = 0; n < N; n++) {
            for (int h = 0; h < heads; h++) {
                size_t i = (size_t)n * W + (size_t)h * HS + c;
                double g = (double)inp[i] * rstd[(size_t)n * heads + h] * dout[i];
                if (h < NH)
                    gq += g;
                else
                    gk += g;
            }
        }
        dwq[c] += (float)gq;
        dwk[c] += (float)gk;
    }
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            size_t off = (size_t)n * W + (size_t)h * HS;
            const float *x = inp + off, *dy = dout + off, *w = h < NH ? wq : wk;
            float *dx = dinp + off;
            double s = rstd[(size_t)n * heads + h], gx_mean = 0.0;
            for (int c = 0; c < HS; c++) gx_mean += (double)(wofs + w[c]) * dy[c] * x[c] * s;
            gx_mean /= HS;
            for (int c = 0; c < HS; c++) { /* dy[c] is read before dx[c] is written */
                double xhat = x[c] * s;
                dx[c] = (float)(s * ((double)(wofs + w[c]) * dy[c] - xhat * gx_mean));
            }
        }
        size_t v = (size_t)n * W + (size_t)heads * HS;
        if (dinp != dout)
            for (size_t i = 0; i < (size_t)NKV * HS; i++) dinp[v + i] = dout[v + i];
    }
}

/* out (N,F) = silu(gate) * up, inp (N,2F) = [gate | up] per row.
 * Ref: Shazeer, GLU Variants Improve Transformer (2020); HF LlamaMLP. */
/* One SwiGLU output, silu(gate) * up in double, rounded once. */
float ct_silu_mul_ref(float gate, float up) {
    double x = gate;
    return (float)(x / (1.0 + exp(-x)) * up);
}

void ct_swiglu_forward_ref(ct_backend *be, float *out, const float *inp, int N, int F) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *y = out + (size_t)n * F;
        for (int i = 0; i < F; i++) y[i] = ct_silu_mul_ref(g[i], u[i]);
    }
}

/* dinp (N,2F) += gradient given dout (N,F). With s = sigmoid(gate):
 *   dgate = dout * up * s (1 + gate (1 - s)), dup = dout * gate * s. */
void ct_swiglu_backward_ref(ct_backend *be, float *dinp, const float *inp, const float *dout, int N, int F) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        const float *dy = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
        for (int i = 0; i < F; i++) {
            double x = g[i], s = 1.0 / (1.0 + exp(-x));
            dg[i] += (float)(dy[i] * u[i] * s * (1.0 + x * (1.0 - s)));
            du[i] += (float)(dy[i] * x * s);
        }
    }
}
