/*
 * Threaded LayerNorm. Forward and the input gradient are parallel over rows;
 * the weight and bias gradients, which sum over rows, are a second pass
 * parallel over channels, so no two threads add into the same element and no
 * scratch buffer is needed. Row statistics accumulate in double (cheap at
 * O(C) per row); the per-element math is float.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"

/* out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) written unless
 * NULL; inp (N,C); weight, bias (C). Biased variance, as torch. */
void ct_layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += x[c];
        double mu = sum / C;
        double sumsq = 0.0;
        for (int c = 0; c < C; c++) {
            double d = x[c] - mu;
            sumsq += d * d;
        }
        float m = (float)mu;
        float s = (float)(1.0 / sqrt(sumsq / C + eps));
        for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * weight[c] + bias[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

/* dinp (N,C), dweight (C), dbias (C) += LayerNorm gradients from dout (N,C),
 * inp (N,C), weight (C) and the saved mean, rstd (N). Same formula as ref. */
void ct_layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        double g_sum = 0.0, gx_sum = 0.0;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = weight[c] * dy[c];
            g_sum += g;
            gx_sum += (double)g * xhat;
        }
        float g_mean = (float)(g_sum / C);
        float gx_mean = (float)(gx_sum / C);
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = weight[c] * dy[c];
            dx[c] += s * (g - g_mean - xhat * gx_mean);
        }
    }
    // column sums over rows: one channel per iteration, so no races
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int c = 0; c < C; c++) {
        double dw = 0.0, db = 0.0;
        for (int n = 0; n < N; n++) {
            size_t i = (size_t)n * C + c;
            float xhat = (inp[i] - mean[n]) * rstd[n];
            dw += (double)xhat * dout[i];
            db += dout[i];
        }
        dweight[c] += (float)dw;
        dbias[c] += (float)db;
    }
}
