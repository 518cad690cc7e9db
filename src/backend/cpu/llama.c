/*
 * Threaded kernels of the LLaMA switches: RMSNorm (16-lane vectors, parallel
 * over rows, with or without a residual add fused into its first pass; the
 * weight gradient a second pass over 16-channel column blocks, so no two
 * threads add into one element and the result does not depend on the thread
 * count), Qwen3's per-head q/k RMSNorm (the same, per head), RoPE
 * (parallel over positions, each position's angles computed once for all
 * batch rows and heads) and SwiGLU (parallel over rows, vector exp). Same
 * formulas as backend/ref/llama.c.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/vmath.h"
#include "backend/ref/ref.h"

#define ROPE_HALF_MAX 512 /* larger heads go to ref */

static inline double lane_sum(v16f v) {
    double s = 0.0;
    for (int l = 0; l < V16; l++) s += v[l];
    return s;
}

/* One row: y (C) = RMSNorm(x); *rstd written unless NULL. With a and b, x
 * (then res) first receives a + b, squared and summed as it is made: the
 * bits of a separate residual add and norm (see norm.c's ln_row). */
static inline void rms_row(float *y, float *rstd, const float *x, float *res, const float *a,
                           const float *b, const float *weight, int C, float eps, float wofs) {
    int cv = C / V16 * V16;
    v16f acc = {0};
    double ss;
    if (a) {
        for (int c = 0; c < cv; c += V16) {
            v16f v = v16_load(a + c) + v16_load(b + c);
            v16_store(res + c, v);
            acc += v * v;
        }
        ss = lane_sum(acc);
        for (int c = cv; c < C; c++) {
            res[c] = a[c] + b[c];
            ss += (double)res[c] * res[c];
        }
    } else {
        for (int c = 0; c < cv; c += V16) {
            v16f v = v16_load(x + c);
            acc += v * v;
        }
        ss = lane_sum(acc);
        for (int c = cv; c < C; c++) ss += (double)x[c] * x[c];
    }
    float s = (float)(1.0 / sqrt(ss / C + eps));
    for (int c = 0; c < cv; c += V16)
        v16_store(y + c, v16_load(x + c) * s * (wofs + v16_load(weight + c)));
    for (int c = cv; c < C; c++) y[c] = x[c] * s * (wofs + weight[c]);
    if (rstd) *rstd = s;
}

/* out (N,C) = inp * rstd * (wofs + weight); rstd (N) written unless NULL. */
void ct_rmsnorm_forward_cpu(ct_backend *be, float *out, float *rstd, const float *inp, const float *weight,
                            int N, int C, float eps, float wofs) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        rms_row(out + o, rstd ? rstd + n : NULL, inp + o, NULL, NULL, NULL, weight, C, eps, wofs);
    }
}

/* res (N,C) = a + b (res may alias a or b), then out (N,C) = RMSNorm(res),
 * parallel over rows, the add fused into the sum of squares' pass: the bits
 * of ct_residual_forward_cpu followed by ct_rmsnorm_forward_cpu. */
void ct_residual_rmsnorm_forward_cpu(ct_backend *be, float *res, float *out, float *rstd,
                                     const float *a, const float *b, const float *weight, int N,
                                     int C, float eps, float wofs) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        rms_row(out + o, rstd ? rstd + n : NULL, res + o, res + o, a + o, b + o, weight, C, eps,
                wofs);
    }
}

/* dinp (N,C), dweight (C) += RMSNorm gradients; same formula as ref. */
void ct_rmsnorm_backward_cpu(ct_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C, float wofs) {
    (void)be;
    int cv = C / V16 * V16;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float s = rstd[n];
        v16f agx = {0};
        for (int c = 0; c < cv; c += V16)
            agx += (wofs + v16_load(weight + c)) * v16_load(dy + c) * v16_load(x + c);
        double gx_sum = lane_sum(agx);
        for (int c = cv; c < C; c++) gx_sum += (double)(wofs + weight[c]) * dy[c] * x[c];
        // mean(g * xhat) = s * mean(g * x)
        float gx_mean = (float)(gx_sum * s / C);
        for (int c = 0; c < cv; c += V16) {
            v16f xhat = v16_load(x + c) * s;
            v16f g = (wofs + v16_load(weight + c)) * v16_load(dy + c);
            v16_store(dx + c, v16_load(dx + c) + s * (g - xhat * gx_mean));
        }
        for (int c = cv; c < C; c++)
            dx[c] += s * ((wofs + weight[c]) * dy[c] - x[c] * s * gx_mean);
    }
    int nblk = cv / V16, ntail = C - cv;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int blk = 0; blk < nblk + ntail; blk++) {
        if (blk < nblk) {
            int c = blk * V16;
            double dw[V16] = {0};
            for (int n0 = 0; n0 < N; n0 += 64) {
                int n1 = N - n0 < 64 ? N : n0 + 64;
                v16f aw = {0};
                for (int n = n0; n < n1; n++) {
                    size_t i = (size_t)n * C + c;
                    aw += v16_load(inp + i) * rstd[n] * v16_load(dout + i);
                }
                for (int l = 0; l < V16; l++) dw[l] += aw[l];
            }
            for (int l = 0; l < V16; l++) dweight[c + l] += (float)dw[l];
        } else {
            int c = cv + (blk - nblk);
            double dw = 0.0;
            for (int n = 0; n < N; n++) {
                size_t i = (size_t)n * C + c;
                dw += (double)(inp[i] * rstd[n]) * dout[i];
            }
            dweight[c] += (float)dw;
        }
    }
}

/* Row (b,t) turns by the angles of pos0 + pos[b,t] (pos0 + t without
 * positions). The angles are kept while b runs down column t and recomputed
 * only when the position changes: once per t for plain rows. */
static void rope_apply(float *qkv, const int32_t *pos, int B, int T, int NH, int NKV, int HS,
                       int pos0, const float *inv_freq, float dir) {
    int half = HS / 2, heads = NH + NKV;
    size_t W = (size_t)(NH + 2 * NKV) * HS;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int t = 0; t < T; t++) {
        float cosv[ROPE_HALF_MAX], sinv[ROPE_HALF_MAX];
        int have = -1; /* the position cosv, sinv hold */
        for (int b = 0; b < B; b++) {
            int p = pos0 + (pos ? pos[(size_t)b * T + t] : t);
            if (p != have) {
                ct_rope_cos_sin(cosv, sinv, p, HS, inv_freq);
                for (int i = 0; i < half; i++) sinv[i] *= dir;
                have = p;
            }
            float *row = qkv + ((size_t)b * T + t) * W;
            for (int h = 0; h < heads; h++) {
                float *x1 = row + (size_t)h * HS, *x2 = x1 + half;
                for (int i = 0; i < half; i++) {
                    float a = x1[i], b2 = x2[i];
                    x1[i] = a * cosv[i] - b2 * sinv[i];
                    x2[i] = b2 * cosv[i] + a * sinv[i];
                }
            }
        }
    }
}

/* In place on the q and k heads of qkv (B,T,(NH+2*NKV)*HS); pos (B,T) or NULL. */
void ct_rope_forward_cpu(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH, int NKV,
                         int HS, int pos0, const float *inv_freq) {
    (void)be;
    if (HS / 2 > ROPE_HALF_MAX) {
        ct_rope_forward_ref(be, qkv, pos, B, T, NH, NKV, HS, pos0, inv_freq);
        return;
    }
    rope_apply(qkv, pos, B, T, NH, NKV, HS, pos0, inv_freq, 1.0f);
}

/* The transpose rotation, in place on dqkv's q and k parts. */
void ct_rope_backward_cpu(ct_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH,
                          int NKV, int HS, int pos0, const float *inv_freq) {
    (void)be;
    if (HS / 2 > ROPE_HALF_MAX) {
        ct_rope_backward_ref(be, dqkv, pos, B, T, NH, NKV, HS, pos0, inv_freq);
        return;
    }
    rope_apply(dqkv, pos, B, T, NH, NKV, HS, pos0, inv_freq, -1.0f);
}

/* Per-head q/k RMSNorm: rows in parallel, each head as
 * ct_rmsnorm_forward_cpu's row; v copied. */
void ct_qknorm_forward_cpu(ct_backend *be, float *out, float *rstd, const float *inp,
                           const float *wq, const float *wk, int N, int NH, int NKV, int HS,
                           float eps, float wofs) {
    (void)be;
    int heads = NH + NKV, hv = HS / V16 * V16;
    size_t W = (size_t)(NH + 2 * NKV) * HS;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            size_t off = (size_t)n * W + (size_t)h * HS;
            const float *x = inp + off, *w = h < NH ? wq : wk;
            float *y = out + off;
            v16f acc = {0};
            for (int c = 0; c < hv; c += V16) {
                v16f v = v16_load(x + c);
                acc += v * v;
            }
            double ss = lane_sum(acc);
            for (int c = hv; c < HS; c++) ss += (double)x[c] * x[c];
            float s = (float)(1.0 / sqrt(ss / HS + eps));
            for (int c = 0; c < hv; c += V16)
                v16_store(y + c, v16_load(x + c) * s * (wofs + v16_load(w + c)));
            for (int c = hv; c < HS; c++) y[c] = x[c] * s * (wofs + w[c]);
            if (rstd) rstd[(size_t)n * heads + h] = s;
        }
        size_t v = (size_t)n * W + (size_t)heads * HS;
        memcpy(out + v, inp + v, (size_t)NKV * HS * sizeof(float));
    }
}

/* dinp written (may be dout), dwq, dwk +=. The weight gradients first (dinp
 * may overwrite dout): a pass over 16-channel column blocks, each summing
 * every row and head in order (independent of the thread count); then the
 * input gradients, rows in parallel. */
void ct_qknorm_backward_cpu(ct_backend *be, float *dinp, float *dwq, float *dwk,
                            const float *dout, const float *inp, const float *wq,
                            const float *wk, const float *rstd, int N, int NH, int NKV, int HS,
                            float wofs) {
    (void)be;
    int heads = NH + NKV, hv = HS / V16 * V16, nblk = hv / V16, ntail = HS - hv;
    size_t W = (size_t)(NH + 2 * NKV) * HS;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int blk = 0; blk < nblk + ntail; blk++) {
        int c = blk < nblk ? blk * V16 : hv + (blk - nblk);
        int width = blk < nblk ? V16 : 1;
        double gq[V16] = {0}, gk[V16] = {0};
        for (int n = 0; n < N; n++) {
            for (int h = 0; h < heads; h++) {
                size_t i = (size_t)n * W + (size_t)h * HS + c;
                float r = rstd[(size_t)n * heads + h];
                double *g = h < NH ? gq : gk;
                if (width == V16) {
                    v16f t = v16_load(inp + i) * r * v16_load(dout + i);
                    for (int l = 0; l < V16; l++) g[l] += t[l];
                } else {
                    g[0] += (double)(inp[i] * r) * dout[i];
                }
            }
        }
        for (int l = 0; l < width; l++) {
            dwq[c + l] += (float)gq[l];
            dwk[c + l] += (float)gk[l];
        }
    }
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            size_t off = (size_t)n * W + (size_t)h * HS;
            const float *x = inp + off, *dy = dout + off, *w = h < NH ? wq : wk;
            float *dx = dinp + off;
            float s = rstd[(size_t)n * heads + h];
            v16f agx = {0};
            for (int c = 0; c < hv; c += V16)
                agx += (wofs + v16_load(w + c)) * v16_load(dy + c) * v16_load(x + c);
            double gx_sum = lane_sum(agx);
            for (int c = hv; c < HS; c++) gx_sum += (double)(wofs + w[c]) * dy[c] * x[c];
            float gx_mean = (float)(gx_sum * s / HS);
            /* each dy[c] is read before dx[c] is written: in place is fine */
            for (int c = 0; c < hv; c += V16) {
                v16f xhat = v16_load(x + c) * s;
                v16f g = (wofs + v16_load(w + c)) * v16_load(dy + c);
                v16_store(dx + c, s * (g - xhat * gx_mean));
            }
            for (int c = hv; c < HS; c++)
                dx[c] = s * ((wofs + w[c]) * dy[c] - x[c] * s * gx_mean);
        }
        size_t v = (size_t)n * W + (size_t)heads * HS;
        if (dinp != dout) memcpy(dinp + v, dout + v, (size_t)NKV * HS * sizeof(float));
    }
}

/* out (N,F) = silu(gate) * up; inp (N,2F) = [gate | up]. */
void ct_swiglu_forward_cpu(ct_backend *be, float *out, const float *inp, int N, int F) {
    (void)be;
    int fv = F / V16 * V16;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *y = out + (size_t)n * F;
        for (int i = 0; i < fv; i += V16) {
            v16f x = v16_load(g + i);
            v16_store(y + i, x / (1.0f + v16_exp(-x)) * v16_load(u + i));
        }
        for (int i = fv; i < F; i++) y[i] = g[i] / (1.0f + s_exp(-g[i])) * u[i];
    }
}

/* dinp (N,2F) += SwiGLU gradient given dout (N,F). */
void ct_swiglu_backward_cpu(ct_backend *be, float *dinp, const float *inp, const float *dout, int N, int F) {
    (void)be;
    int fv = F / V16 * V16;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        const float *dy = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
        for (int i = 0; i < fv; i += V16) {
            v16f x = v16_load(g + i), d = v16_load(dy + i);
            v16f s = 1.0f / (1.0f + v16_exp(-x));
            v16_store(dg + i, v16_load(dg + i) + d * v16_load(u + i) * s * (1.0f + x * (1.0f - s)));
            v16_store(du + i, v16_load(du + i) + d * x * s);
        }
        for (int i = fv; i < F; i++) {
            float x = g[i], s = 1.0f / (1.0f + s_exp(-x));
            dg[i] += dy[i] * u[i] * s * (1.0f + x * (1.0f - s));
            du[i] += dy[i] * x * s;
        }
    }
}
