/*
 * Dense layer through ct_sgemm (oneDNN or OpenBLAS, on our OpenMP pool). Weights
 * are (OC,C) as in torch.nn.Linear, so the transposes are sgemm flags, never
 * copies. The bias is fused by pre-filling out and using beta = 1, which is
 * also how torch's addmm adds it. Degenerate shapes (a zero dimension, which
 * BLAS rejects through its leading dimensions) go to ref.
 * Mixed precision (bf16 weights): the same layer through ct_gemm_f32_bf16,
 * fp32 activations rounded to bf16 by the GEMM layer, bf16 weight copies read
 * as they are; the backward's two products share one rounding of the
 * gradient (ct_gemm_bwd_f32_bf16).
 * The bf16 head: logits written bf16 by the GEMM (ct_gemm_f32_bf16_out16), its
 * backward GEMMs reading the bf16 gradient the loss wrote in place.
 */
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/gemm.h"
#include "backend/ref/ref.h"

/* out (N,OC) = bias in every row, and the GEMM's beta: 1 over those rows, 0
 * without a bias (out then untouched, the GEMM overwrites it). */
static float bias_fill(float *out, const float *bias, int N, int OC) {
    if (!bias) return 0.0f;
#ifdef CT_USE_OPENMP
#pragma omp parallel for
#endif
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    return 1.0f;
}

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL. */
void ct_matmul_forward_cpu(ct_backend *be, float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC) {
    (void)be;
    if (N <= 0 || C <= 0 || OC <= 0) {
        ct_matmul_forward_ref(be, out, inp, weight, bias, N, C, OC);
        return;
    }
    float beta = bias_fill(out, bias, N, OC);
    ct_sgemm(be->gemm, false, true, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

/* dinp (N,C) += dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T @ inp (N,C);
 * dbias (OC) += column sums of dout. A NULL gradient buffer is skipped. */
void ct_matmul_backward_cpu(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC) {
    (void)be;
    if (N <= 0 || C <= 0 || OC <= 0) {
        ct_matmul_backward_ref(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        return;
    }
    // beta = 1: the GEMMs add into the gradient buffers
    if (dinp)
        ct_sgemm(be->gemm, false, false, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    if (dweight)
        ct_sgemm(be->gemm, true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) ct_gemm_colsums(dbias, NULL, dout, N, OC);
}

/* out (N,OC) = bf16(inp) (N,C) @ weight16 (OC,C)^T + bias (OC): ct_gemm_f32_bf16
 * with tb (the weight rows are the output columns). */
void ct_matmul_forward_bf16_cpu(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) {
        ct_matmul_forward_bf16_ref(be, out, inp, weight16, bias, N, C, OC);
        return;
    }
    float beta = bias_fill(out, bias, N, OC);
    ct_gemm_f32_bf16(be->gemm, false, true, N, OC, C, 1.0f, inp, C, weight16, C, beta, out, OC);
}

/* out (N,OC) = inp16 (N,C) @ weight16 (OC,C)^T + bias (OC): the input kept in
 * bf16 read as it is (ct_gemm_bf16). */
void ct_matmul_forward_bf16_in16_cpu(ct_backend *be, float *out, const uint16_t *inp16,
                                     const uint16_t *weight16, const float *bias, int N, int C,
                                     int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) {
        ct_matmul_forward_bf16_in16_ref(be, out, inp16, weight16, bias, N, C, OC);
        return;
    }
    float beta = bias_fill(out, bias, N, OC);
    ct_gemm_bf16(be->gemm, false, true, N, OC, C, 1.0f, inp16, C, weight16, C, beta, out, OC);
}

/* dinp (N,C) += bf16(dout) @ weight16 (OC,C); dweight (OC,C) += bf16(dout)^T @
 * inp16 (N,C); dbias (OC) += column sums of dout. A NULL gradient buffer is
 * skipped. */
void ct_matmul_backward_bf16_cpu(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) {
        ct_matmul_backward_bf16_ref(be, dinp, dweight, dbias, dout, inp16, weight16, N, C, OC);
        return;
    }
    ct_gemm_bwd_f32_bf16(be->gemm, N, C, OC, dout, weight16, inp16, dinp, dweight, dbias);
}

/* The bf16 head runs where oneDNN's bf16 matmul is native: its logits are then
 * dense rows (ld = V), the layout its brgemm kernels write bf16 into from their
 * fp32 accumulators (a padded row would get its gemm kernels, which keep all
 * of C in fp32 first: 424 MB peak for one GPT-2 chunk of 1024 rows, against
 * 185 MB). Elsewhere the model keeps fp32 logits: emulated bf16 is for
 * numerics checks, and there the fp32 logits are what those checks expect. */
int ct_head16_ld_cpu(ct_backend *be, int V) {
    return be->gemm == CT_GEMM_ONEDNN && ct_gemm_have_bf16() ? V : 0;
}

/* out16 (N, rows ld apart) = bf16(bf16(inp) (N,C) @ weight16 (OC,C)^T): the
 * bf16 head's logits (backend.h). */
void ct_matmul_forward_bf16_out16_cpu(ct_backend *be, uint16_t *out16, int ld, const float *inp,
                                      const uint16_t *weight16, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) {
        ct_matmul_forward_bf16_out16_ref(be, out16, ld, inp, weight16, N, C, OC);
        return;
    }
    ct_gemm_f32_bf16_out16(be->gemm, false, true, N, OC, C, inp, C, weight16, C, out16, ld);
}

/* dinp (N,C) += dout16 (N,OC; rows ld apart) @ weight16 (OC,C); dweight (OC,C)
 * += dout16^T @ inp16 (N,C). A NULL gradient buffer is skipped. */
void ct_matmul_backward_bf16_dout16_cpu(ct_backend *be, float *dinp, float *dweight,
                                        const uint16_t *dout16, int ld, const uint16_t *inp16,
                                        const uint16_t *weight16, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) {
        ct_matmul_backward_bf16_dout16_ref(be, dinp, dweight, dout16, ld, inp16, weight16, N, C,
                                           OC);
        return;
    }
    if (dinp)
        ct_gemm_bf16(be->gemm, false, false, N, C, OC, 1.0f, dout16, ld, weight16, C, 1.0f, dinp,
                     C);
    if (dweight)
        ct_gemm_bf16(be->gemm, true, false, OC, C, N, 1.0f, dout16, ld, inp16, C, 1.0f, dweight,
                     C);
}
