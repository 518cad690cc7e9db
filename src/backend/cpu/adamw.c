/*
 * Threaded AdamW and sum of squares, parallel over elements with SIMD. The
 * AdamW element math is ref's float math unchanged (sqrt and division are
 * correctly rounded, so with gcc's default -ffp-contract=off results match ref
 * bit for bit); only the scheduling differs. The bf16 variant also writes
 * the new parameters' bf16 copies (precision bf16's GEMM weights), sparing
 * the model a separate pass over every weight. sumsq reduces in double.
 */
#include <math.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/tile.h"

/* params, m, v (n) updated from grads (n) at step t; torch 1.13 AdamW, see
 * ref/adamw.c for the formula; with p16, each new parameter's bf16 (tile.h's
 * rounding, core/dtype.c's) written there in the same pass. Inlined with a
 * constant p16-or-not, so each caller's loop stays one simd loop. */
static inline __attribute__((always_inline)) void adamw_body(
    float *params, const float *grads, float *m, float *v, uint16_t *p16, bool w16, size_t n,
    float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
    int64_t t) {
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    float decay = (float)(1.0 - (double)lr * weight_decay);
    float one_minus_b1 = (float)(1.0 - beta1);
    float one_minus_b2 = (float)(1.0 - beta2);
    float step_size = (float)(lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd
#endif
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float p = params[i] * decay;
        float mi = m[i] * beta1 + one_minus_b1 * g;
        float vi = v[i] * beta2 + one_minus_b2 * g * g;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        float np = p + -step_size * (mi / denom);
        params[i] = np;
        m[i] = mi;
        v[i] = vi;
        if (w16) p16[i] = (uint16_t)ct_t16_round(np);
    }
}

void ct_adamw_update_cpu(ct_backend *be, float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         float grad_scale, int64_t t) {
    (void)be;
    adamw_body(params, grads, m, v, NULL, false, n, lr, beta1, beta2, eps, weight_decay,
               grad_scale, t);
}

void ct_adamw_update16_cpu(ct_backend *be, float *params, uint16_t *params16, const float *grads,
                           float *m, float *v, size_t n, float lr, float beta1, float beta2,
                           float eps, float weight_decay, float grad_scale, int64_t t) {
    (void)be;
    adamw_body(params, grads, m, v, params16, true, n, lr, beta1, beta2, eps, weight_decay,
               grad_scale, t);
}

/* Sum of x (n) squared, a double reduction across threads. */
double ct_sumsq_cpu(ct_backend *be, const float *x, size_t n) {
    (void)be;
    double acc = 0.0;
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd reduction(+ : acc)
#endif
    for (size_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
    return acc;
}
