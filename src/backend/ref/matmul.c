/*
 * Reference dense layer (torch.nn.Linear): out = inp @ weight^T + bias and its
 * backward, as triple loops with double accumulators; and the mixed-precision
 * (bf16 inputs, fp32 sums) twins of both; the dense layer followed by GELU
 * (matmul_gelu_forward) as the two kernels in turn.
 * Leaves out: blocking, BLAS and threading (see cpu/matmul.c); this one is
 * only for testing and tiny models.
 */
#include "backend/ref/ref.h"
#include "core/dtype.h"

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

/* bf16(x) widened back: the value a bf16 GEMM input has. */
static float bf16_round(float x) { return ct_bf16_to_f32(ct_f32_to_bf16(x)); }

/* Mixed precision (autocast): out (N,OC) = bf16(inp) (N,C) @ weight16 (OC,C)^T
 * + bias (OC). Each product of two bf16 values is exact in fp32; the sum runs
 * in fp32 in c order, then the bias is added (as the cpu GEMM adds it). */
void ct_matmul_forward_bf16_ref(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C, int OC) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            const uint16_t *w = weight16 + (size_t)o * C;
            float acc = 0.0f;
            for (int c = 0; c < C; c++) acc += bf16_round(x[c]) * ct_bf16_to_f32(w[c]);
            out[(size_t)n * OC + o] = bias ? acc + bias[o] : acc;
        }
    }
}

/* dinp (N,C) += bf16(dout) @ weight16; dweight (OC,C) += bf16(dout)^T @ inp16;
 * dbias (OC) += column sums of dout (fp32, in double as the fp32 path). Sums
 * in fp32 in the inner index's order. */
void ct_matmul_backward_bf16_ref(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC) {
    (void)be;
    if (dinp) {
        for (int n = 0; n < N; n++) {
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int o = 0; o < OC; o++)
                    acc += bf16_round(dout[(size_t)n * OC + o]) *
                           ct_bf16_to_f32(weight16[(size_t)o * C + c]);
                dinp[(size_t)n * C + c] += acc;
            }
        }
    }
    if (dweight) {
        for (int o = 0; o < OC; o++) {
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int n = 0; n < N; n++)
                    acc += bf16_round(dout[(size_t)n * OC + o]) *
                           ct_bf16_to_f32(inp16[(size_t)n * C + c]);
                dweight[(size_t)o * C + c] += acc;
            }
        }
    }
    if (dbias) ct_matmul_backward_ref(be, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC);
}

/* pre (N,OC) = inp @ weight^T + bias, out (N,OC) = gelu_tanh(pre): the two
 * ref kernels in turn, so the result is theirs bit for bit. */
void ct_matmul_gelu_forward_ref(ct_backend *be, float *pre, float *out, const float *inp,
                                const float *weight, const float *bias, int N, int C, int OC) {
    ct_matmul_forward_ref(be, pre, inp, weight, bias, N, C, OC);
    ct_gelu_forward_ref(be, out, pre, (size_t)N * OC);
}

/* The same with bf16-rounded inputs (matmul_forward_bf16's semantics). */
void ct_matmul_gelu_forward_bf16_ref(ct_backend *be, float *pre, float *out, const float *inp,
                                     const uint16_t *weight16, const float *bias, int N, int C,
                                     int OC) {
    ct_matmul_forward_bf16_ref(be, pre, inp, weight16, bias, N, C, OC);
    ct_gelu_forward_ref(be, out, pre, (size_t)N * OC);
}
