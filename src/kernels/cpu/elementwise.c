/*
 * Threaded elementwise ops: GELU (tanh form) and the residual add, forward and
 * backward, parallel over elements. The residual loops are SIMD; the GELU loops
 * are not marked simd, as tanhf has no vector version without a vector math
 * library. GELU is evaluated in float in torch's order of operations; ref uses double.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"

/* out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp (n). */
void ct_gelu_forward_cpu(float *out, const float *inp, size_t n) {
    const float beta = (float)CT_GELU_BETA, kappa = (float)CT_GELU_KAPPA;
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float x3 = x * x * x;
        float inner = beta * (x + kappa * x3);
        out[i] = 0.5f * x * (1.0f + tanhf(inner));
    }
}

/* dinp (n) += gelu'(inp) * dout; inp, dout (n). */
void ct_gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n) {
    const float beta = (float)CT_GELU_BETA, kappa = (float)CT_GELU_KAPPA;
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float x2 = x * x;
        float th = tanhf(beta * (x + kappa * (x2 * x)));
        float inner_grad = beta * (1.0f + 3.0f * kappa * x2);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * inner_grad;
        dinp[i] += grad * dout[i];
    }
}

/* out (n) = a (n) + b (n); out may alias a or b (same index in, same index out). */
void ct_residual_forward_cpu(float *out, const float *a, const float *b, size_t n) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd
#endif
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* da (n) += dout (n); db (n) += dout (n). */
void ct_residual_backward_cpu(float *da, float *db, const float *dout, size_t n) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd
#endif
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}
