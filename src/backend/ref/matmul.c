/*
 * Reference dense layer (torch.nn.Linear): out = inp @ weight^T + bias and its
 * backward, as triple loops with double accumulators.
 * Leaves out: blocking, BLAS and threading (see cpu/matmul.c); this one is
 * only for testing and tiny models.
 */
#include "backend/ref/ref.h"

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL.
 * Ref: https://pytorch.org/docs/stable/generated/torch.nn.Linear.html */
void ct_matmul_forward_ref(ct_backend *be, float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            const float *w = weight + (size_t)o * C;
            double acc = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) acc += (double)x[c] * w[c];
            out[(size_t)n * OC + o] = (float)acc;
        }
    }
}

/* dinp (N,C) += dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T @ inp (N,C);
 * dbias (OC) += column sums of dout. A NULL gradient buffer is skipped.
 * Ref: llm.c train_gpt2.c matmul_backward. */
void ct_matmul_backward_ref(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC) {
    (void)be;
    if (dinp) {
        for (int n = 0; n < N; n++) {
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int o = 0; o < OC; o++)
                    acc += (double)dout[(size_t)n * OC + o] * weight[(size_t)o * C + c];
                dinp[(size_t)n * C + c] += (float)acc;
            }
        }
    }
    if (dweight) {
        for (int o = 0; o < OC; o++) {
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int n = 0; n < N; n++)
                    acc += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
                dweight[(size_t)o * C + c] += (float)acc;
            }
        }
    }
    if (dbias) {
        for (int o = 0; o < OC; o++) {
            double acc = 0.0;
            for (int n = 0; n < N; n++) acc += dout[(size_t)n * OC + o];
            dbias[o] += (float)acc;
        }
    }
}
