/*
 * Threaded AdamW and sum of squares, parallel over elements with SIMD. The
 * AdamW element math is ref's float math unchanged (sqrt and division are
 * correctly rounded, so with gcc's default -ffp-contract=off results match ref
 * bit for bit); only the scheduling differs. sumsq reduces in double.
 */
#include <math.h>

#include "backend/cpu/cpu.h"

/* params, m, v (n) updated from grads (n) at step t; torch 1.13 AdamW, see
 * ref/adamw.c for the formula. */
void ct_adamw_update_cpu(ct_backend *be, float *params, const float *grads, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         float grad_scale, int64_t t) {
    (void)be;
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
        params[i] = p + -step_size * (mi / denom);
        m[i] = mi;
        v[i] = vi;
    }
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
