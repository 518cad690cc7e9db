/*
 * The CUDA activations, forward and backward, in fp32 (most GPUs run double
 * at 1/32 to 1/64 of fp32): GELU's tanh form (HF "gelu_new", torch
 * approximate="tanh"), GeGLU (gelu_tanh(gate) * up) and SwiGLU
 * (silu(gate) * up), a thread per element. Each is written through a
 * sigmoid, never as 1 + tanh: 0.5 (1 + tanh u) = sigmoid(2u), so
 * gelu(x) = x sigmoid(a), a = 2 beta (x + kappa x^3), and
 * gelu'(x) = s + x s (1 - s) a'(x), s = sigmoid(a). 1 + tanh u in fp32
 * cancels for negative x (PyTorch's fp32 kernel loses most of its digits
 * there: 400 ulp at x = -3); the sigmoid keeps full relative precision.
 * GELU's argument a is formed in two floats (hi + lo, error-free products
 * and sums with fmaf), as exp turns an absolute error of a into a relative
 * one of the result (a reaches -88 before the result leaves fp32's normal
 * range); then exp(-|a|) = expf(-|hi|) (1 -+ lo). The results stay within a
 * few ulp of ref's double-then-rounded values (tests/gpu/cuda_emu.cpp
 * measures them); where a gradient crosses zero (gelu' near x = -0.75, silu'
 * near x = -1.28) the error is a few ulp of the terms that cancel, as for
 * any fp32 evaluation.
 *
 * Device code only, included by cuda_kernels.cu; it runs under
 * tests/gpu/cuda_emu.cpp on the CPU. Leaves out: vectorised loads but in
 * GELU's backward, the exact erf GELU (ref has none either).
 */
#ifndef CT_BACKEND_CUDA_ACT_CUH
#define CT_BACKEND_CUDA_ACT_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_store.cuh"

/* 2 beta = 2 sqrt(2 / pi) and 2 beta kappa (kappa = 0.044715), each as a
 * float hi + lo (hi the nearest float, lo the nearest float to the rest). */
#define ACT_C1_HI 0x1.988454p+0f
#define ACT_C1_LO -0x1.857936p-25f
#define ACT_C3_HI 0x1.2444f2p-4f
#define ACT_C3_LO 0x1.49b16ap-29f

/* The logistic sigmoid of a = hi + lo (lo at most an ulp of hi): s and
 * 1 - s, each to full relative precision: exp(-|a|) never overflows, and the
 * smaller of the two is t / (1 + t), never 1 - the larger. */
__device__ inline void act_sigmoid2(float hi, float lo, float *s, float *sc) {
    bool neg = hi < 0.0f;
    float z = neg ? hi : -hi, zl = neg ? lo : -lo; /* z + zl = -|a| */
    float t0 = expf(z);
    float t = fmaf(t0, zl, t0); /* exp(z + zl) ~= exp(z) (1 + zl) */
    float big = 1.0f / (1.0f + t), small = t * big;
    *s = neg ? small : big;
    *sc = neg ? big : small;
}

/* GELU's sigmoid argument a = 2 beta (x + kappa x^3) as hi + lo. The
 * products the error terms refer to are rounded on their own (__fmul_rn,
 * never fused into the sums that follow). lo is dropped outside |hi| < 128
 * (there exp(-|a|) is 0 or lo would be inf or NaN: x infinite or huge). */
__device__ inline void act_gelu_arg(float x, float *hi, float *lo) {
    float x2 = __fmul_rn(x, x), x2l = fmaf(x, x, -x2);
    float x3 = __fmul_rn(x2, x), x3l = fmaf(x2, x, -x3) + x2l * x;
    float p1 = __fmul_rn(ACT_C1_HI, x), p1l = fmaf(ACT_C1_HI, x, -p1) + ACT_C1_LO * x;
    float p3 = __fmul_rn(ACT_C3_HI, x3);
    float p3l = fmaf(ACT_C3_HI, x3, -p3) + (ACT_C3_HI * x3l + ACT_C3_LO * x3);
    /* two-sum: h + e = p1 + p3 exactly */
    float h = __fadd_rn(p1, p3), bb = __fadd_rn(h, -p1);
    float e = __fadd_rn(p1, -__fadd_rn(h, -bb)) + __fadd_rn(p3, -bb);
    float l = e + (p1l + p3l);
    *hi = h;
    *lo = fabsf(h) < 128.0f ? l : 0.0f;
}

/* gelu_tanh(x) = x s, and (grad not NULL) gelu_tanh'(x). */
__device__ inline float act_gelu(float x, float *grad) {
    float hi, lo, s, sc;
    act_gelu_arg(x, &hi, &lo);
    act_sigmoid2(hi, lo, &s, &sc);
    if (grad) {
        /* a'(x); x^2 held finite, so that sc = 0 (x huge) gives 0, not NaN */
        float da = ACT_C1_HI + 3.0f * ACT_C3_HI * fminf(x * x, 1e30f);
        *grad = fmaf(x * s, sc * da, s);
    }
    return x * s;
}

/* silu(x) = x s, s = sigmoid(x); (grad not NULL) silu'(x) = s (1 + x (1 - s)). */
__device__ inline float act_silu(float x, float *grad) {
    float s, sc;
    act_sigmoid2(x, 0.0f, &s, &sc);
    if (grad) *grad = s * fmaf(x, sc, 1.0f);
    return x * s;
}

/* out (n) = gelu_tanh(inp (n)); Y: fp32, or bf16 (the fp32 value rounded). */
template <typename Y = float>
static __global__ void k_gelu_fwd(Y *out, const float *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_out(out + i, act_gelu(inp[i], NULL));
}

/* dinp (n) += gelu_tanh'(inp) * dout: 16 bytes of each at a time where n is
 * a multiple of 4 and all three start on 16-byte boundaries (the same values:
 * the math is per element), else one by one. */
static __global__ void k_gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t t0 = blockIdx.x * (size_t)blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    if (n % 4 == 0 && !(((uintptr_t)dinp | (uintptr_t)inp | (uintptr_t)dout) & 15)) {
        for (size_t i = t0; i < n / 4; i += step) {
            float4 x = ((const float4 *)inp)[i], d = ((const float4 *)dout)[i];
            float4 y = ((float4 *)dinp)[i];
            float g;
            act_gelu(x.x, &g), y.x += g * d.x;
            act_gelu(x.y, &g), y.y += g * d.y;
            act_gelu(x.z, &g), y.z += g * d.z;
            act_gelu(x.w, &g), y.w += g * d.w;
            ((float4 *)dinp)[i] = y;
        }
        return;
    }
    for (size_t i = t0; i < n; i += step) {
        float grad;
        act_gelu(inp[i], &grad);
        dinp[i] += grad * dout[i];
    }
}

/* GLU rows: inp (N, 2F) = [gate | up] per row, out and dout (N, F); a thread
 * per (row, i) of the N F outputs. GELU: GeGLU, else SwiGLU. Y as k_gelu_fwd. */
template <bool GELU, typename Y = float>
static __global__ void k_glu_fwd(Y *out, const float *inp, int N, int F) {
    size_t n = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t r = k / F, i = k % F;
        const float *g = inp + r * 2 * F;
        float x = g[i];
        store_out(out + k, (GELU ? act_gelu(x, NULL) : act_silu(x, NULL)) * g[F + i]);
    }
}

/* dinp (N, 2F) += d gate = dout * up * act'(gate), d up = dout * act(gate). */
template <bool GELU>
static __global__ void k_glu_bwd(float *dinp, const float *inp, const float *dout, int N, int F) {
    size_t n = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        size_t r = k / F, i = k % F;
        const float *g = inp + r * 2 * F;
        float *dg = dinp + r * 2 * F;
        float x = g[i], dy = dout[k], grad;
        float y = GELU ? act_gelu(x, &grad) : act_silu(x, &grad);
        dg[i] += dy * g[F + i] * grad;
        dg[F + i] += dy * y;
    }
}

#endif
