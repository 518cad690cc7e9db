/*
 * Reference dense layer (torch.nn.Linear): out = inp @ weight^T + bias and its
 * backward, as loops with double accumulators; and the mixed-precision
 * twins of both (bf16 or fp16 inputs, fp32 sums: one body, the 16-bit format
 * a flag); the dense layer followed by GELU
 * (matmul_gelu_forward) as the two kernels in turn. Every output is one sum
 * in the plain triple loop's order (the forward in c order from the bias, the
 * backward's in o or n order); the loops are only tiled or turned so several
 * independent sums run together over contiguous rows (the sim backend and the
 * ASan suite train through these), which leaves every result's bits as the
 * plain loops give them.
 * Leaves out: cache blocking, BLAS and threading (see cpu/matmul.c); this one
 * is only for testing and tiny models.
 */
#include "backend/ref/ref.h"
#include "core/dtype.h"

/* Sums kept at once (stack arrays): the backward's along a row, the
 * forward's tile of rows x outputs. */
enum { REF_CB = 256, REF_TILE = 4 };

/* out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be NULL.
 * Ref: https://pytorch.org/docs/stable/generated/torch.nn.Linear.html */
void ct_matmul_forward_ref(ct_backend *be, float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC) {
    (void)be;
    /* REF_TILE x REF_TILE outputs at a time: independent sums, each in c order
     * from its bias, as a plain loop per output forms it (bit for bit) */
    for (int n0 = 0; n0 < N; n0 += REF_TILE) {
        int nb = N - n0 < REF_TILE ? N - n0 : REF_TILE;
        for (int o0 = 0; o0 < OC; o0 += REF_TILE) {
            int ob = OC - o0 < REF_TILE ? OC - o0 : REF_TILE;
            double acc[REF_TILE][REF_TILE];
            const float *x = inp + (size_t)n0 * C, *w = weight + (size_t)o0 * C;
            for (int i = 0; i < nb; i++)
                for (int k = 0; k < ob; k++) acc[i][k] = bias ? bias[o0 + k] : 0.0;
            if (nb == REF_TILE && ob == REF_TILE) /* fixed counts the compiler unrolls */
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < REF_TILE; i++)
                        for (int k = 0; k < REF_TILE; k++)
                            acc[i][k] += (double)x[(size_t)i * C + c] * w[(size_t)k * C + c];
            else
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < nb; i++)
                        for (int k = 0; k < ob; k++)
                            acc[i][k] += (double)x[(size_t)i * C + c] * w[(size_t)k * C + c];
            for (int i = 0; i < nb; i++)
                for (int k = 0; k < ob; k++) out[(size_t)(n0 + i) * OC + o0 + k] = (float)acc[i][k];
        }
    }
}

/* dinp (N,C) += dout (N,OC) @ weight (OC,C); dweight (OC,C) += dout^T @ inp (N,C);
 * dbias (OC) += column sums of dout. A NULL gradient buffer is skipped.
 * Ref: llm.c train_gpt2.c matmul_backward. */
void ct_matmul_backward_ref(ct_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC) {
    (void)be;
    /* Each output's sum runs in the order the plain triple loop takes (o, then
     * n, ascending); the loops are turned so the innermost one walks a row
     * (REF_CB accumulators at a time): the same additions, bit for bit, without
     * striding through the whole weight for every output. */
    double sums[REF_CB];
    if (dinp) {
        for (int n = 0; n < N; n++) {
            for (int c0 = 0; c0 < C; c0 += REF_CB) {
                int cb = C - c0 < REF_CB ? C - c0 : REF_CB;
                for (int j = 0; j < cb; j++) sums[j] = 0.0;
                for (int o = 0; o < OC; o++) {
                    double d = dout[(size_t)n * OC + o];
                    const float *w = weight + (size_t)o * C + c0;
                    for (int j = 0; j < cb; j++) sums[j] += d * w[j];
                }
                for (int j = 0; j < cb; j++) dinp[(size_t)n * C + c0 + j] += (float)sums[j];
            }
        }
    }
    if (dweight) {
        for (int o = 0; o < OC; o++) {
            for (int c0 = 0; c0 < C; c0 += REF_CB) {
                int cb = C - c0 < REF_CB ? C - c0 : REF_CB;
                for (int j = 0; j < cb; j++) sums[j] = 0.0;
                for (int n = 0; n < N; n++) {
                    double d = dout[(size_t)n * OC + o];
                    const float *x = inp + (size_t)n * C + c0;
                    for (int j = 0; j < cb; j++) sums[j] += d * x[j];
                }
                for (int j = 0; j < cb; j++) dweight[(size_t)o * C + c0 + j] += (float)sums[j];
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

/* The 16-bit GEMM inputs of precision bf16 (autocast) and fp16 (GPUs without
 * bf16): a stored value widened, and an fp32 input rounded as the GEMM reads
 * it (fp16: nearest even, beyond 65504 inf, subnormals kept). */
static inline float half_widen(uint16_t v, bool f16) {
    return f16 ? ct_f16_to_f32(v) : ct_bf16_to_f32(v);
}
static inline float half_round(float x, bool f16) {
    return f16 ? ct_f16_to_f32(ct_f32_to_f16(x)) : ct_bf16_to_f32(ct_f32_to_bf16(x));
}

/* Mixed precision: out (N,OC) = half(inp) (N,C) @ weight16 (OC,C)^T + bias
 * (OC). Each product of two bf16 or two fp16 values is exact in fp32; the sum
 * runs in fp32 in c order, then the bias is added (as the cpu GEMM adds it).
 * With out16 the sums are rounded to bf16 into out16 (rows ld apart) instead.
 * With inp16 (inp NULL) the input is 16-bit already and read as it is. */
static inline float inp_at(const float *inp, const uint16_t *inp16, size_t i, bool f16) {
    return inp16 ? half_widen(inp16[i], f16) : half_round(inp[i], f16);
}
static void matmul_forward_half(float *out, uint16_t *out16, int ld, const float *inp,
                                const uint16_t *inp16, const uint16_t *weight16,
                                const float *bias, int N, int C, int OC, bool f16) {
    for (int n = 0; n < N; n++) {
        size_t x = (size_t)n * C;
        for (int o = 0; o < OC; o++) {
            const uint16_t *w = weight16 + (size_t)o * C;
            float acc = 0.0f;
            for (int c = 0; c < C; c++)
                acc += inp_at(inp, inp16, x + c, f16) * half_widen(w[c], f16);
            if (out16)
                out16[(size_t)n * ld + o] = ct_f32_to_bf16(acc);
            else
                out[(size_t)n * OC + o] = bias ? acc + bias[o] : acc;
        }
    }
}

/* dinp (N,C) += half(dout) @ weight16; dweight (OC,C) += half(dout)^T @ inp16;
 * dbias (OC) += column sums of dout (fp32, in double as the fp32 path). Sums
 * in fp32 in the inner index's order (turned loops, as the fp32 backward).
 * With dout16 the gradient is bf16 already (rows ld apart; dout NULL, no dbias). */
static inline float dout_at(const float *dout, const uint16_t *dout16, int ld, int n, int o,
                            int OC, bool f16) {
    return dout16 ? ct_bf16_to_f32(dout16[(size_t)n * ld + o])
                  : half_round(dout[(size_t)n * OC + o], f16);
}
static void matmul_backward_half(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const uint16_t *dout16, int ld,
                                 const uint16_t *inp16, const uint16_t *weight16, int N, int C,
                                 int OC, bool f16) {
    float acc[REF_CB];
    if (dinp) {
        for (int n = 0; n < N; n++) {
            for (int c0 = 0; c0 < C; c0 += REF_CB) {
                int cb = C - c0 < REF_CB ? C - c0 : REF_CB;
                for (int j = 0; j < cb; j++) acc[j] = 0.0f;
                for (int o = 0; o < OC; o++) {
                    float d = dout_at(dout, dout16, ld, n, o, OC, f16);
                    const uint16_t *w = weight16 + (size_t)o * C + c0;
                    for (int j = 0; j < cb; j++) acc[j] += d * half_widen(w[j], f16);
                }
                for (int j = 0; j < cb; j++) dinp[(size_t)n * C + c0 + j] += acc[j];
            }
        }
    }
    if (dweight) {
        for (int o = 0; o < OC; o++) {
            for (int c0 = 0; c0 < C; c0 += REF_CB) {
                int cb = C - c0 < REF_CB ? C - c0 : REF_CB;
                for (int j = 0; j < cb; j++) acc[j] = 0.0f;
                for (int n = 0; n < N; n++) {
                    float d = dout_at(dout, dout16, ld, n, o, OC, f16);
                    const uint16_t *x = inp16 + (size_t)n * C + c0;
                    for (int j = 0; j < cb; j++) acc[j] += d * half_widen(x[j], f16);
                }
                for (int j = 0; j < cb; j++) dweight[(size_t)o * C + c0 + j] += acc[j];
            }
        }
    }
    if (dbias) ct_matmul_backward_ref(be, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC);
}

void ct_matmul_forward_bf16_ref(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C, int OC) {
    (void)be;
    matmul_forward_half(out, NULL, 0, inp, NULL, weight16, bias, N, C, OC, false);
}

void ct_matmul_backward_bf16_ref(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC) {
    matmul_backward_half(be, dinp, dweight, dbias, dout, NULL, 0, inp16, weight16, N, C, OC,
                         false);
}

/* The bf16 forward on an input kept in bf16 (matmul_forward_bf16_in16). */
void ct_matmul_forward_bf16_in16_ref(ct_backend *be, float *out, const uint16_t *inp16,
                                     const uint16_t *weight16, const float *bias, int N, int C,
                                     int OC) {
    (void)be;
    matmul_forward_half(out, NULL, 0, NULL, inp16, weight16, bias, N, C, OC, false);
}

/* The bf16 head: logits rounded to bf16 into rows ld apart, and the
 * backward from a bf16 gradient (matmul_forward_bf16_out16 and
 * matmul_backward_bf16_dout16 in backend.h). */
void ct_matmul_forward_bf16_out16_ref(ct_backend *be, uint16_t *out16, int ld, const float *inp,
                                      const uint16_t *weight16, int N, int C, int OC) {
    (void)be;
    matmul_forward_half(NULL, out16, ld, inp, NULL, weight16, NULL, N, C, OC, false);
}

void ct_matmul_backward_bf16_dout16_ref(ct_backend *be, float *dinp, float *dweight,
                                        const uint16_t *dout16, int ld, const uint16_t *inp16,
                                        const uint16_t *weight16, int N, int C, int OC) {
    matmul_backward_half(be, dinp, dweight, NULL, NULL, dout16, ld, inp16, weight16, N, C, OC,
                         false);
}

/* train.precision = fp16: the bf16 entries with IEEE half inputs (11-bit
 * significands, exponents 2^-24 to 2^15: products still exact in fp32). */
void ct_matmul_forward_f16_ref(ct_backend *be, float *out, const float *inp,
                               const uint16_t *weight16, const float *bias, int N, int C, int OC) {
    (void)be;
    matmul_forward_half(out, NULL, 0, inp, NULL, weight16, bias, N, C, OC, true);
}

void ct_matmul_backward_f16_ref(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const uint16_t *inp16,
                                const uint16_t *weight16, int N, int C, int OC) {
    matmul_backward_half(be, dinp, dweight, dbias, dout, NULL, 0, inp16, weight16, N, C, OC,
                         true);
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

void ct_matmul_gelu_forward_bf16_in16_ref(ct_backend *be, float *pre, float *out,
                                          const uint16_t *inp16, const uint16_t *weight16,
                                          const float *bias, int N, int C, int OC) {
    ct_matmul_forward_bf16_in16_ref(be, pre, inp16, weight16, bias, N, C, OC);
    ct_gelu_forward_ref(be, out, pre, (size_t)N * OC);
}
