/*
 * The cpu backend's bf16-output producers for precision bf16 (backend.h:
 * layernorm_forward_out16, rmsnorm_forward_out16, mlp_act_forward_out16):
 * the values that feed only a GEMM go straight to the bf16 operand the model
 * keeps (which matmul_forward_bf16_in16, matmul.c, reads as it is), so the
 * fp32 output is never written to memory, read back to be kept, and read
 * again to be rounded inside the GEMM.
 * Each producer runs its fp32 kernel on blocks of rows small enough to stay
 * in the caches (OUT16_BLOCK floats, in a thread's buffer) and rounds each
 * block as it is made: the fp32 kernel's bits, rounded, which is the
 * entries' contract, with no second copy of the arithmetic. The threads take
 * whole blocks (blocks_ready).
 */
#include "backend/cpu/cpu.h"
#include "backend/ref/ref.h"
#include "core/dtype.h"

#define OUT16_BLOCK (128 * 1024) /* floats: 512 KiB, in L2 on the cores seen */

/* Rows per block for rows of w floats, and whether every pool thread has a
 * block buffer (false: none to be had, the caller runs ref's entry). The
 * blocks go to the threads whole, each into its own buffer, so the fp32
 * kernel and the rounding of a block run on one thread (their own parallel
 * regions, nested, stay on it): a call forks for the buffers and for the
 * blocks, not twice per block. */
static bool blocks_ready(ct_backend *be, int w, int N, int *rows) {
    int r = OUT16_BLOCK / (w > 0 ? w : 1);
    if (r < 1) r = 1;
    if (r > N) r = N;
    *rows = r;
    return ct_backend_thread_bufs_ready(be, (size_t)r * w);
}

void ct_layernorm_forward_out16_cpu(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                    float *rstd, const float *a, const float *b,
                                    const float *weight, const float *bias, int N, int C,
                                    float eps) {
    int R;
    if (N <= 0 || !blocks_ready(be, C, N, &R)) {
        ct_layernorm_forward_out16_ref(be, res, out16, mean, rstd, a, b, weight, bias, N, C, eps);
        return;
    }
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (int n0 = 0; n0 < N; n0 += R) {
        float *y = ct_backend_thread_buf(be, (size_t)R * C);
        int r = N - n0 < R ? N - n0 : R;
        size_t o = (size_t)n0 * C;
        float *mu = mean ? mean + n0 : NULL, *rs = rstd ? rstd + n0 : NULL;
        if (b)
            ct_residual_layernorm_forward_cpu(be, res + o, y, mu, rs, a + o, b + o, weight, bias,
                                              r, C, eps);
        else
            ct_layernorm_forward_cpu(be, y, mu, rs, a + o, weight, bias, r, C, eps);
        ct_f32_to_bf16_array(out16 + o, y, (size_t)r * C);
    }
}

void ct_rmsnorm_forward_out16_cpu(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                  const float *a, const float *b, const float *weight, int N,
                                  int C, float eps, float wofs) {
    int R;
    if (N <= 0 || !blocks_ready(be, C, N, &R)) {
        ct_rmsnorm_forward_out16_ref(be, res, out16, rstd, a, b, weight, N, C, eps, wofs);
        return;
    }
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (int n0 = 0; n0 < N; n0 += R) {
        float *y = ct_backend_thread_buf(be, (size_t)R * C);
        int r = N - n0 < R ? N - n0 : R;
        size_t o = (size_t)n0 * C;
        float *rs = rstd ? rstd + n0 : NULL;
        if (b)
            ct_residual_rmsnorm_forward_cpu(be, res + o, y, rs, a + o, b + o, weight, r, C, eps,
                                            wofs);
        else
            ct_rmsnorm_forward_cpu(be, y, rs, a + o, weight, r, C, eps, wofs);
        ct_f32_to_bf16_array(out16 + o, y, (size_t)r * C);
    }
}

void ct_mlp_act_forward_out16_cpu(ct_backend *be, uint16_t *out16, const float *inp, int N,
                                  int F, int act) {
    int R;
    if (N <= 0 || !blocks_ready(be, F, N, &R)) {
        ct_mlp_act_forward_out16_ref(be, out16, inp, N, F, act);
        return;
    }
    int in_w = act == CT_ACT16_GELU ? F : 2 * F;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (int n0 = 0; n0 < N; n0 += R) {
        float *y = ct_backend_thread_buf(be, (size_t)R * F);
        int r = N - n0 < R ? N - n0 : R;
        const float *x = inp + (size_t)n0 * in_w;
        if (act == CT_ACT16_GELU)
            ct_gelu_forward_cpu(be, y, x, (size_t)r * F);
        else if (act == CT_ACT16_GEGLU)
            ct_geglu_forward_cpu(be, y, x, r, F);
        else
            ct_swiglu_forward_cpu(be, y, x, r, F);
        ct_f32_to_bf16_array(out16 + (size_t)n0 * F, y, (size_t)r * F);
    }
}
