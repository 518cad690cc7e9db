/*
 * Threaded LayerNorm on 16-lane vectors (vmath.h). Forward and the input
 * gradient are parallel over rows; the weight and bias gradients, which sum
 * over rows, are a second pass parallel over 16-channel column blocks, so no
 * two threads add into the same element, no scratch buffer is needed and the
 * result does not depend on the thread count. Row statistics sum in float
 * lanes and reduce across lanes in double; column sums flush their float
 * lanes into double every 64 rows. Same formulas as ref. The residual add
 * fused in front of the forward rides on its first pass over the row.
 */
#include <math.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/vmath.h"

/* Sum of the lanes of v, in double. */
static inline double lane_sum(v16f v) {
    double s = 0.0;
    for (int l = 0; l < V16; l++) s += v[l];
    return s;
}

/* One row: y (C) = LayerNorm(x); *mean, *rstd written unless NULL. With a
 * and b, x (then writable) first receives a + b, summed as it is made: the
 * sums see the very values a separate residual add would have stored, in the
 * same order, so the fused entry equals the two calls bit for bit while the
 * row is read from memory once. */
static inline void ln_row(float *y, float *mean, float *rstd, const float *x, float *res,
                          const float *a, const float *b, const float *weight,
                          const float *bias, int C, float eps) {
    int cv = C / V16 * V16;
    v16f acc = {0};
    double sum;
    if (a) {
        for (int c = 0; c < cv; c += V16) {
            v16f v = v16_load(a + c) + v16_load(b + c);
            v16_store(res + c, v);
            acc += v;
        }
        sum = lane_sum(acc);
        for (int c = cv; c < C; c++) {
            res[c] = a[c] + b[c];
            sum += res[c];
        }
    } else {
        for (int c = 0; c < cv; c += V16) acc += v16_load(x + c);
        sum = lane_sum(acc);
        for (int c = cv; c < C; c++) sum += x[c];
    }
    double mu = sum / C;
    float mf = (float)mu;
    acc = (v16f){0};
    for (int c = 0; c < cv; c += V16) {
        v16f d = v16_load(x + c) - mf;
        acc += d * d;
    }
    double sumsq = lane_sum(acc);
    for (int c = cv; c < C; c++) {
        double d = x[c] - mu;
        sumsq += d * d;
    }
    float s = (float)(1.0 / sqrt(sumsq / C + eps));
    for (int c = 0; c < cv; c += V16)
        v16_store(y + c, (v16_load(x + c) - mf) * s * v16_load(weight + c) + v16_load(bias + c));
    for (int c = cv; c < C; c++) y[c] = (x[c] - mf) * s * weight[c] + bias[c];
    if (mean) *mean = mf;
    if (rstd) *rstd = s;
}

/* out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) written unless
 * NULL; inp (N,C); weight, bias (C). Biased variance, as torch. */
void ct_layernorm_forward_cpu(ct_backend *be, float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        ln_row(out + o, mean ? mean + n : NULL, rstd ? rstd + n : NULL, inp + o, NULL, NULL,
               NULL, weight, bias, C, eps);
    }
}

/* res (N,C) = a + b (res may alias a or b), then out (N,C) = LayerNorm(res),
 * parallel over rows, each row's add fused into its sum pass: the bits of
 * ct_residual_forward_cpu followed by ct_layernorm_forward_cpu. */
void ct_residual_layernorm_forward_cpu(ct_backend *be, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C,
                                       float eps) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        ln_row(out + o, mean ? mean + n : NULL, rstd ? rstd + n : NULL, res + o, res + o, a + o,
               b + o, weight, bias, C, eps);
    }
}

/* dinp (N,C), dweight (C), dbias (C) += LayerNorm gradients from dout (N,C),
 * inp (N,C), weight (C) and the saved mean, rstd (N). Same formula as ref. */
void ct_layernorm_backward_cpu(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C) {
    (void)be;
    int cv = C / V16 * V16;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        v16f ag = {0}, agx = {0};
        for (int c = 0; c < cv; c += V16) {
            v16f xhat = (v16_load(x + c) - m) * s;
            v16f g = v16_load(weight + c) * v16_load(dy + c);
            ag += g;
            agx += g * xhat;
        }
        double g_sum = lane_sum(ag), gx_sum = lane_sum(agx);
        for (int c = cv; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = weight[c] * dy[c];
            g_sum += g;
            gx_sum += (double)g * xhat;
        }
        float g_mean = (float)(g_sum / C);
        float gx_mean = (float)(gx_sum / C);
        for (int c = 0; c < cv; c += V16) {
            v16f xhat = (v16_load(x + c) - m) * s;
            v16f g = v16_load(weight + c) * v16_load(dy + c);
            v16_store(dx + c, v16_load(dx + c) + s * (g - g_mean - xhat * gx_mean));
        }
        for (int c = cv; c < C; c++) {
            float xhat = (x[c] - m) * s;
            float g = weight[c] * dy[c];
            dx[c] += s * (g - g_mean - xhat * gx_mean);
        }
    }
    // column sums over rows, 16 channels per block (the tail's channels one by one)
    int nblk = cv / V16, ntail = C - cv;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int blk = 0; blk < nblk + ntail; blk++) {
        if (blk < nblk) {
            int c = blk * V16;
            double dw[V16] = {0}, db[V16] = {0};
            for (int n0 = 0; n0 < N; n0 += 64) {
                int n1 = N - n0 < 64 ? N : n0 + 64;
                v16f aw = {0}, ab = {0};
                for (int n = n0; n < n1; n++) {
                    size_t i = (size_t)n * C + c;
                    v16f d = v16_load(dout + i);
                    aw += (v16_load(inp + i) - mean[n]) * rstd[n] * d;
                    ab += d;
                }
                for (int l = 0; l < V16; l++) dw[l] += aw[l], db[l] += ab[l];
            }
            for (int l = 0; l < V16; l++) {
                dweight[c + l] += (float)dw[l];
                dbias[c + l] += (float)db[l];
            }
        } else {
            int c = cv + (blk - nblk);
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
}
