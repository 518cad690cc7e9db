/*
 * The CUDA RoPE, forward and backward: each q and k head of the fused qkv
 * rows turned pair by pair (x_i, x_{i+HS/2}) by the position's angles. The
 * angle is ref's and HF LlamaRotaryEmbedding's: the fp32 product of the
 * position and the model's fp32 inverse frequency; its cosine and sine come
 * from sincosf (CUDA's accurate one, not __sincosf: within 2 ulp over the
 * whole range, large arguments reduced exactly, so positions in the
 * hundreds of thousands keep their accuracy), where ref takes them in double
 * and rounds. The rotation is two fmaf, in fp32. fp64 runs at 1/32 to 1/64
 * of fp32 on most GPUs. Forward and backward run this one body with dir +1
 * and -1, so the backward applies exactly the transpose the forward used.
 *
 * Device code only, included by cuda_kernels.cu; it runs under
 * tests/gpu/cuda_emu.cpp on the CPU (with the CPU's sincosf). Leaves out:
 * a cos/sin table per position (rope scaling variants live in inv_freq).
 */
#ifndef CT_BACKEND_CUDA_ROPE_CUH
#define CT_BACKEND_CUDA_ROPE_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* In place on qkv (B, T, (NH + 2 NKV) HS), q heads then k heads (v left
 * alone); HS even. Row (b, t) sits at pos0 + pos[b, t] (pos0 + t when pos is
 * NULL); inv_freq (HS / 2). dir = +1 rotates (forward), -1 applies the
 * transpose (backward). A grid-stride loop, a thread per (row, head, i). */
static __global__ void k_rope(float *qkv, const int32_t *pos, int B, int T, int NH, int NKV,
                              int HS, int pos0, const float *inv_freq, float dir) {
    int half = HS / 2, heads = NH + NKV;
    size_t W = (size_t)(NH + 2 * NKV) * HS;
    size_t n = (size_t)B * T * heads * half;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(k % half);
        size_t rest = k / half;
        int h = (int)(rest % heads);
        size_t bt = rest / heads;
        int t = (int)(bt % T);
        int p = pos0 + (pos ? pos[bt] : t);
        float angle = __fmul_rn((float)p, inv_freq[i]);
        float c, s;
        sincosf(angle, &s, &c);
        s *= dir;
        float *x = qkv + bt * W + (size_t)h * HS;
        float x1 = x[i], x2 = x[i + half];
        x[i] = fmaf(x1, c, -(x2 * s));
        x[i + half] = fmaf(x2, c, x1 * s);
    }
}

#endif
