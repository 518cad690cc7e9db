/*
 * Threaded elementwise ops: GELU (tanh form) and Gemma's GeGLU gate on it
 * (parallel over rows), the residual add and dropout,
 * forward and backward, parallel over elements. GELU runs 16 lanes at a time through
 * vmath.h's exp (tanh u = 1 - 2 / (e^2u + 1)); a tail shorter than a vector
 * goes through a zero-padded vector, so every element sees the same math.
 * Before the vector exp, GELU's tanhf was scalar and cost 6% of a GPT-2 step.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/vmath.h"
#include "backend/ref/ref.h"

static inline v16f v16_tanh(v16f u) { return 1.0f - 2.0f / (v16_exp(u * 2.0f) + 1.0f); }

static inline v16f gelu_fwd16(v16f x) {
    const float beta = (float)CT_GELU_BETA, kappa = (float)CT_GELU_KAPPA;
    v16f th = v16_tanh(beta * (x + kappa * (x * x * x)));
    return 0.5f * x * (1.0f + th);
}

static inline v16f gelu_grad16(v16f x) {
    const float beta = (float)CT_GELU_BETA, kappa = (float)CT_GELU_KAPPA;
    v16f x2 = x * x;
    v16f th = v16_tanh(beta * (x + kappa * (x2 * x)));
    v16f inner_grad = beta * (1.0f + 3.0f * kappa * x2);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * inner_grad;
}

/* out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp (n). */
void ct_gelu_forward_cpu(ct_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
    size_t nv = n / V16;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (size_t b = 0; b < nv; b++) v16_store(out + b * V16, gelu_fwd16(v16_load(inp + b * V16)));
    size_t tail = n - nv * V16;
    if (tail) {
        float buf[V16] = {0};
        memcpy(buf, inp + nv * V16, tail * sizeof(float));
        v16_store(buf, gelu_fwd16(v16_load(buf)));
        memcpy(out + nv * V16, buf, tail * sizeof(float));
    }
}

/* dinp (n) += gelu'(inp) * dout; inp, dout (n). */
void ct_gelu_backward_cpu(ct_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    (void)be;
    size_t nv = n / V16;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (size_t b = 0; b < nv; b++) {
        size_t i = b * V16;
        v16f d = v16_load(dinp + i) + gelu_grad16(v16_load(inp + i)) * v16_load(dout + i);
        v16_store(dinp + i, d);
    }
    size_t tail = n - nv * V16;
    if (tail) {
        float x[V16] = {0}, g[V16] = {0};
        memcpy(x, inp + nv * V16, tail * sizeof(float));
        v16_store(g, gelu_grad16(v16_load(x)));
        for (size_t i = 0; i < tail; i++) dinp[nv * V16 + i] += g[i] * dout[nv * V16 + i];
    }
}

/* out (N,F) = gelu_tanh(gate) * up; inp (N,2F) = [gate | up]. A row's tail
 * shorter than a vector goes through zero-padded vectors. */
void ct_geglu_forward_cpu(ct_backend *be, float *out, const float *inp, int N, int F) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *y = out + (size_t)n * F;
        for (int i = 0; i < F; i += V16) {
            int k = F - i < V16 ? F - i : V16;
            float gb[V16] = {0}, ub[V16] = {0}, yb[V16];
            memcpy(gb, g + i, (size_t)k * sizeof(float));
            memcpy(ub, u + i, (size_t)k * sizeof(float));
            v16_store(yb, gelu_fwd16(v16_load(gb)) * v16_load(ub));
            memcpy(y + i, yb, (size_t)k * sizeof(float));
        }
    }
}

/* dinp (N,2F) += [dout * up * gelu'(gate) | dout * gelu(gate)]. */
void ct_geglu_backward_cpu(ct_backend *be, float *dinp, const float *inp, const float *dout, int N,
                           int F) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F, *dy = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
        for (int i = 0; i < F; i += V16) {
            int k = F - i < V16 ? F - i : V16;
            float gb[V16] = {0}, ub[V16] = {0}, db[V16] = {0}, a[V16], b[V16];
            memcpy(gb, g + i, (size_t)k * sizeof(float));
            memcpy(ub, u + i, (size_t)k * sizeof(float));
            memcpy(db, dy + i, (size_t)k * sizeof(float));
            v16f x = v16_load(gb), d = v16_load(db);
            v16_store(a, d * v16_load(ub) * gelu_grad16(x));
            v16_store(b, d * gelu_fwd16(x));
            for (int j = 0; j < k; j++) {
                dg[i + j] += a[j];
                du[i + j] += b[j];
            }
        }
    }
}

/* out (n) = a (n) + b (n); out may alias a or b (same index in, same index out). */
void ct_residual_forward_cpu(ct_backend *be, float *out, const float *a, const float *b, size_t n) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd
#endif
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* da (n) += dout (n); db (n) += dout (n). */
void ct_residual_backward_cpu(ct_backend *be, float *da, float *db, const float *dout, size_t n) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd
#endif
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* The mask multiplier of element i (ct_dropout_keep_t's decision): inv or 0.
 * Inline arithmetic the compiler vectorises (64-bit lanes). */
static inline float drop_mult(uint64_t key, uint64_t i, uint32_t thr, float inv) {
    uint64_t z = key ^ i;
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 40) >= thr ? inv : 0.0f;
}

/* out (n) = keep(offset + i) ? inp * 1/(1-p) : 0, in place allowed; ref's bits
 * (the same product per element). */
void ct_dropout_forward_cpu(ct_backend *be, float *out, const float *inp, size_t n, float p,
                            uint64_t key, uint64_t offset) {
    (void)be;
    float inv = 1.0f / (1.0f - p);
    uint32_t thr = ct_dropout_threshold(p);
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd schedule(static)
#endif
    for (size_t i = 0; i < n; i++) {
        float m = drop_mult(key, offset + i, thr, inv);
        out[i] = m != 0.0f ? inp[i] * inv : 0.0f;
    }
}

/* dinp (n) += keep(offset + i) ? dout * 1/(1-p) : 0. */
void ct_dropout_backward_cpu(ct_backend *be, float *dinp, const float *dout, size_t n, float p,
                             uint64_t key, uint64_t offset) {
    (void)be;
    float inv = 1.0f / (1.0f - p);
    uint32_t thr = ct_dropout_threshold(p);
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd schedule(static)
#endif
    for (size_t i = 0; i < n; i++) {
        float m = drop_mult(key, offset + i, thr, inv);
        dinp[i] += m != 0.0f ? dout[i] * inv : 0.0f;
    }
}
