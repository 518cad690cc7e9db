/*
 * Reference elementwise ops: GELU (tanh form, HF "gelu_new", torch
 * approximate="tanh") and the residual add, forward and backward. GELU is
 * evaluated in double and rounded once.
 * Leaves out: the exact erf GELU and SwiGLU (LLaMA).
 */
#include <math.h>

#include "backend/ref/ref.h"
#include "core/dtype.h"

/* out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = inp (n).
 * Ref: https://pytorch.org/docs/stable/generated/torch.nn.GELU.html */
static double gelu_d(double x) {
    return 0.5 * x * (1.0 + tanh(CT_GELU_BETA * (x + CT_GELU_KAPPA * x * x * x)));
}

void ct_gelu_forward_ref(ct_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) out[i] = (float)gelu_d(inp[i]);
}

/* dinp (n) += gelu'(inp) * dout; inp, dout (n). Product rule on 0.5 x (1 + th):
 *   0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
 * Ref: torch GeluBackwardKernelImpl, approximate == tanh. */
void ct_gelu_backward_ref(ct_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double x2 = x * x;
        double th = tanh(CT_GELU_BETA * (x + CT_GELU_KAPPA * x2 * x));
        double inner_grad = CT_GELU_BETA * (1.0 + 3.0 * CT_GELU_KAPPA * x2);
        double grad = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * inner_grad;
        dinp[i] += (float)(grad * dout[i]);
    }
}

/* out (N,F) = gelu_tanh(gate) * up, inp (N,2F) = [gate | up] per row, in
 * double, rounded once. Ref: Shazeer, GLU Variants (2020); HF GemmaMLP. */
void ct_geglu_forward_ref(ct_backend *be, float *out, const float *inp, int N, int F) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        for (int i = 0; i < F; i++) out[(size_t)n * F + i] = (float)(gelu_d(g[i]) * u[i]);
    }
}

/* dinp (N,2F) += d gate = dout * up * gelu'(gate), d up = dout * gelu(gate). */
void ct_geglu_backward_ref(ct_backend *be, float *dinp, const float *inp, const float *dout, int N,
                           int F) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
        for (int i = 0; i < F; i++) {
            double x = g[i], x2 = x * x, dy = dout[(size_t)n * F + i];
            double th = tanh(CT_GELU_BETA * (x + CT_GELU_KAPPA * x2 * x));
            double gelu = 0.5 * x * (1.0 + th);
            double grad = 0.5 * (1.0 + th) +
                          0.5 * x * (1.0 - th * th) * CT_GELU_BETA * (1.0 + 3.0 * CT_GELU_KAPPA * x2);
            dg[i] += (float)(dy * u[i] * grad);
            du[i] += (float)(dy * gelu);
        }
    }
}

/* out (n) = a (n) + b (n); out may alias a or b. */
void ct_residual_forward_ref(ct_backend *be, float *out, const float *a, const float *b, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* da (n) += dout (n); db (n) += dout (n). */
void ct_residual_backward_ref(ct_backend *be, float *da, float *db, const float *dout, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* The fp32 outputs of gelu_forward, swiglu_forward or geglu_forward rounded
 * to bf16 (mlp_act_forward_out16): the same float expressions. */
void ct_mlp_act_forward_out16_ref(ct_backend *be, uint16_t *out16, const float *inp, int N,
                                  int F, int act) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * (act == CT_ACT16_GELU ? F : 2 * F);
        for (int i = 0; i < F; i++) {
            float y = act == CT_ACT16_GELU     ? (float)gelu_d(x[i])
                      : act == CT_ACT16_GEGLU ? (float)(gelu_d(x[i]) * x[F + i])
                                               : ct_silu_mul_ref(x[i], x[F + i]);
            out16[(size_t)n * F + i] = ct_f32_to_bf16(y);
        }
    }
}
