/*
 * Reference optimizer-side reductions and updates: AdamW exactly as torch 1.13's
 * single-tensor torch.optim.AdamW (float element math, bias corrections in
 * double), and the double-accumulated sum of squares behind grad-norm clipping.
 * Leaves out: amsgrad, maximize and the foreach/fused paths' reordering.
 */
#include <math.h>

#include "backend/ref/ref.h"
#include "core/dtype.h"

/* params, m, v (n) updated in place from grads (n), step t (1-based):
 *   g = grads * grad_scale; p *= 1 - lr*wd; m = b1 m + (1-b1) g;
 *   v = b2 v + (1-b2) g^2; p += -(lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps),
 * bc1 = 1 - b1^t, bc2 = 1 - b2^t. Scalars are formed in double and rounded to
 * float once, as torch passes Python floats into float tensor ops.
 * Ref: torch/optim/adamw.py _single_tensor_adamw (v1.13). */
void ct_adamw_update_ref(ct_backend *be, float *params, const float *grads, float *m, float *v, size_t n,
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

/* ct_adamw_update_ref, then params16 (n) = bf16 of the new params. */
void ct_adamw_update16_ref(ct_backend *be, float *params, uint16_t *params16, const float *grads,
                           float *m, float *v, size_t n, float lr, float beta1, float beta2,
                           float eps, float weight_decay, float grad_scale, int64_t t) {
    ct_adamw_update_ref(be, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
                        grad_scale, t);
    for (size_t i = 0; i < n; i++) params16[i] = ct_f32_to_bf16(params[i]);
}

/* Sum of x (n) squared, accumulated in double (the grad-norm). */
double ct_sumsq_ref(ct_backend *be, const float *x, size_t n) {
    (void)be;
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc += (double)x[i] * x[i];
    return acc;
}
