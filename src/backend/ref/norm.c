/*
 * Reference LayerNorm forward and backward (torch.nn.LayerNorm over the last
 * dimension, biased variance, eps inside the square root), and the residual
 * add fused in front of it (defined as the two steps, row by row). Row
 * statistics and every reduction accumulate in double, so this is the
 * accuracy yardstick. Leaves out: RMSNorm (LLaMA, llama.c) and a
 * weight/bias-free variant.
 */
#include <math.h>

#include "backend/ref/ref.h"
#include "core/dtype.h"

/* out (N,C) = (inp - mean) * rstd * weight + bias, row by row.
 * inp (N,C); weight, bias (C); writes mean (N) and rstd (N) = 1/sqrt(var + eps)
 * unless NULL. With out16 (out NULL) the fp32 results are written rounded
 * to bf16 instead. Ref: https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html */
static void layernorm_rows(float *out, uint16_t *out16, float *mean, float *rstd,
                           const float *inp, const float *weight, const float *bias, int N, int C,
                           float eps) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        size_t y = (size_t)n * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += x[c];
        double mu = sum / C;
        // two passes: no cancellation from E[x^2] - mean^2
        double sumsq = 0.0;
        for (int c = 0; c < C; c++) {
            double d = x[c] - mu;
            sumsq += d * d;
        }
        double var = sumsq / C; // biased, as torch
        double s = 1.0 / sqrt(var + eps);
        for (int c = 0; c < C; c++) {
            float v = (float)((x[c] - mu) * s * weight[c] + bias[c]);
            if (out16) out16[y + c] = ct_f32_to_bf16(v);
            else out[y + c] = v;
        }
        if (mean) mean[n] = (float)mu;
        if (rstd) rstd[n] = (float)s;
    }
}

void ct_layernorm_forward_ref(ct_backend *be, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps) {
    (void)be;
    layernorm_rows(out, NULL, mean, rstd, inp, weight, bias, N, C, eps);
}

/* res (N,C) = a + b, then out (N,C) = LayerNorm(res), one row at a time:
 * the same additions and the same row normalisation as residual_forward then
 * layernorm_forward, so the same bits. res may alias a or b. */
void ct_residual_layernorm_forward_ref(ct_backend *be, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C,
                                       float eps) {
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        ct_residual_forward_ref(be, res + o, a + o, b + o, (size_t)C);
        ct_layernorm_forward_ref(be, out + o, mean ? mean + n : NULL, rstd ? rstd + n : NULL,
                                 res + o, weight, bias, 1, C, eps);
    }
}

/* layernorm_forward_out16: the residual add (with b) and the rows rounded. */
void ct_layernorm_forward_out16_ref(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                    float *rstd, const float *a, const float *b,
                                    const float *weight, const float *bias, int N, int C,
                                    float eps) {
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        const float *x = a + o;
        if (b) {
            ct_residual_forward_ref(be, res + o, a + o, b + o, (size_t)C);
            x = res + o;
        }
        layernorm_rows(NULL, out16 + o, mean ? mean + n : NULL, rstd ? rstd + n : NULL, x,
                       weight, bias, 1, C, eps);
    }
}

/* dinp (N,C), dweight (C), dbias (C) += gradients of LayerNorm given dout (N,C),
 * the forward's inp (N,C), weight (C) and its saved mean (N), rstd (N).
 * With xhat = (x - mean) * rstd and g = weight * dout:
 *   dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 *   dweight = sum over rows of dout * xhat, dbias = sum over rows of dout.
 * Ref: llm.c train_gpt2.c layernorm_backward; torch layer_norm_backward. */
void ct_layernorm_backward_ref(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        double mu = mean[n], s = rstd[n];
        // the two row means that couple every input of the row
        double g_mean = 0.0, gx_mean = 0.0;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - mu) * s;
            double g = (double)weight[c] * dy[c];
            g_mean += g;
            gx_mean += g * xhat;
        }
        g_mean /= C;
        gx_mean /= C;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - mu) * s;
            double g = (double)weight[c] * dy[c];
            dx[c] += (float)(s * (g - g_mean - xhat * gx_mean));
        }
    }
    // weight and bias gradients are column sums over the rows
    for (int c = 0; c < C; c++) {
        double dw = 0.0, db = 0.0;
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * C + c;
            double xhat = (inp[i] - (double)mean[n]) * rstd[n];
            dw += xhat * dout[i];
            db += dout[i];
        }
        dweight[c] += (float)dw;
        dbias[c] += (float)db;
    }
}
