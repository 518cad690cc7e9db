/*
 * Reference dense layer under train.precision = fp16 (GPUs without bf16):
 * matmul_forward_f16 and matmul_backward_f16, the bf16 twins of matmul.c with
 * IEEE half inputs (ct_f32_to_f16: nearest even, beyond 65504 inf,
 * subnormals kept), products exact in fp32, sums in fp32 in the inner
 * index's order, fp32 outputs and bias. Written as plain loops: the truth the
 * kernel harness holds sim and cuda to, and the sim backend's kernels.
 * Leaves out: a fused GEMM + GELU twin (the model runs the two under fp16).
 */
#include "backend/ref/ref.h"
#include "core/dtype.h"

/* fp16(x) widened back: the value an fp16 GEMM input has (inf beyond 65504). */
static float f16_round(float x) { return ct_f16_to_f32(ct_f32_to_f16(x)); }

/* train.precision = fp16: matmul_forward_bf16 with fp16 in place of bf16.
 * The product of two fp16 values (11-bit significands, exponents 2^-24 to
 * 2^15) is exact in fp32; the sum runs in fp32 in c order, then the bias. */
void ct_matmul_forward_f16_ref(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C, int OC) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            const uint16_t *w = weight16 + (size_t)o * C;
            float acc = 0.0f;
            for (int c = 0; c < C; c++) acc += f16_round(x[c]) * ct_f16_to_f32(w[c]);
            out[(size_t)n * OC + o] = bias ? acc + bias[o] : acc;
        }
    }
}

/* dinp (N,C) += fp16(dout) @ weight16; dweight (OC,C) += fp16(dout)^T @ inp16;
 * dbias (OC) += column sums of the fp32 dout. Sums in fp32 in the inner
 * index's order, as the bf16 twin. */
void ct_matmul_backward_f16_ref(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC) {
    (void)be;
    if (dinp) {
        for (int n = 0; n < N; n++) {
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int o = 0; o < OC; o++)
                    acc += f16_round(dout[(size_t)n * OC + o]) *
                           ct_f16_to_f32(weight16[(size_t)o * C + c]);
                dinp[(size_t)n * C + c] += acc;
            }
        }
    }
    if (dweight) {
        for (int o = 0; o < OC; o++) {
            for (int c = 0; c < C; c++) {
                float acc = 0.0f;
                for (int n = 0; n < N; n++)
                    acc += f16_round(dout[(size_t)n * OC + o]) *
                           ct_f16_to_f32(inp16[(size_t)n * C + c]);
                dweight[(size_t)o * C + c] += acc;
            }
        }
    }
    if (dbias) ct_matmul_backward_ref(be, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC);
}
