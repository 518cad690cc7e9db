/*
 * The CUDA backend's row attention kernels (device code only, included by
 * cuda_attention.cu): ref's algorithm on a warp per row, any head size up to
 * 1024 and dropout, the fallback of the tiled kernels (head sizes other than
 * 32 and 64, dropout; CT_CUDA_ATTENTION=rows). Forward: an online softmax per
 * query row over keys [j0, t], the log-sum-exp saved; decode the same over a
 * KV cache. Backward without atomics: a warp per query row sums dq over its
 * keys; a warp per key row of a KV head sums dk, dv over the queries that
 * saw it, query heads of the group in order, then queries in order, as ref
 * does. Everything in fp32, as the tiled kernels (ref's softmax statistics
 * are double; double runs at 1/32 to 1/64 of fp32 on most GPUs): the
 * scores, the running max and sum with the online rescale, the
 * probabilities, the log-sum-exp; D (rowsum(dout o out), k_attn_D below,
 * which every backward reads, the tiled and flash ones too: one double sum
 * of HS products a row) is read as a float. Dot
 * products reduce across the warp by a butterfly of shuffles, whose sum is
 * the same in every lane (a + b = b + a), so every lane takes the same
 * branches and the order of every sum is fixed: deterministic.
 *
 * The includer provides ct_attn_dropout and ct_attn_drop_mult (backend.h);
 * tests/gpu/cuda_emu.cpp runs these kernels on the CPU against ref's.
 * Leaves out: tiling (the tiled kernels), tensor cores (cuda_flash.cu).
 */
#ifndef CT_BACKEND_CUDA_ATTENTION_ROWS_CUH
#define CT_BACKEND_CUDA_ATTENTION_ROWS_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_attention_tiled.cuh" /* attn_first_key */
#include "backend/cuda/cuda_reduce.cuh"

#define ATT_WARPS 4 /* rows a block: a warp each */

/* ct_attn_drop_mult (backend.h, compiled for the device); 1 without dropout. */
__device__ inline float drop_mult(const ct_attn_dropout &d, int b, int h, int i, int j, int NH,
                                  int T) {
    return ct_attn_drop_mult(&d, b, h, i, j, NH, T);
}

/* The dot product of two HS-vectors, lanes striding over it; every lane
 * gets the same sum. */
__device__ inline float warp_dot(const float *a, const float *b, int HS) {
    float acc = 0.0f;
    for (int d = threadIdx.x & 31; d < HS; d += 32) acc += a[d] * b[d];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

/* 1 / sqrt(HS) in fp32, as the tiled kernels take it. */
__device__ inline float attn_scale(int HS) { return 1.0f / sqrtf((float)HS); }

/* One query row against n keys and values kv_stride floats apart: writes
 * out (HS) and returns the log-sum-exp (ref's attention_row): the running
 * max m and sum l, the output rescaled by exp(m_old - m_new) when the max
 * grows. */
template <int ATT_MAXK>
__device__ float attn_row(float *out, const float *q, const float *k, const float *v,
                          size_t kv_stride, int n, int HS, float scale, ct_attn_dropout drop,
                          int b, int h, int i, int j0, int NH, int T) {
    int lane = threadIdx.x & 31;
    float acc[ATT_MAXK];
    float m = scale * warp_dot(q, k, HS), l = 1.0f;
    float mk = drop_mult(drop, b, h, i, j0, NH, T);
    for (int kk = 0, d = lane; kk < ATT_MAXK; kk++, d += 32) acc[kk] = d < HS ? mk * v[d] : 0.0f;
    for (int j = 1; j < n; j++) {
        const float *kj = k + j * kv_stride, *vj = v + j * kv_stride;
        float s = scale * warp_dot(q, kj, HS);
        if (s > m) {
            float corr = expf(m - s);
            l *= corr;
            for (int kk = 0; kk < ATT_MAXK; kk++) acc[kk] *= corr;
            m = s;
        }
        float p = expf(s - m);
        l += p;
        float pm = p * drop_mult(drop, b, h, i, j0 + j, NH, T);
        for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) acc[kk] += pm * vj[d];
    }
    for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) out[d] = acc[kk] / l;
    return m + logf(l);
}

/* Forward: a warp per (b, h, t) row of the B NH T, ATT_WARPS a block. */
template <int ATT_MAXK>
__global__ void k_attn_fwd(float *out, float *lse, const float *qkv, const int32_t *pos,
                           ct_attn_dropout drop, int B, int T, int NH, int NKV, int HS) {
    size_t row = (size_t)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (row >= (size_t)B * NH * T) return;
    int t = (int)(row % T), h = (int)((row / T) % NH), b = (int)(row / ((size_t)T * NH));
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    int g = h / (NH / NKV);
    const float *qkv_b = qkv + (size_t)b * T * W;
    const float *k = qkv_b + C + (size_t)g * HS, *v = qkv_b + C + KC + (size_t)g * HS;
    int j0 = attn_first_key(pos, b, T, t);
    float r = attn_row<ATT_MAXK>(out + ((size_t)b * T + t) * C + (size_t)h * HS,
                                 qkv_b + (size_t)t * W + (size_t)h * HS, k + (size_t)j0 * W,
                                 v + (size_t)j0 * W, W, t + 1 - j0, HS, attn_scale(HS), drop, b,
                                 h, t, j0, NH, T);
    if ((threadIdx.x & 31) == 0) lse[((size_t)b * NH + h) * T + t] = r;
}

/* dq of one query row: sum over its keys of scale * ds_j * k_j, with
 * p_j = exp(s_j - lse) and ds_j = p_j (M_j dout . v_j - D). Added into dqkv. */
template <int ATT_MAXK>
__global__ void k_attn_dq(float *dqkv, const float *dout, const float *qkv, const float *lse,
                          const double *D, const int32_t *pos, ct_attn_dropout drop, int B,
                          int T, int NH, int NKV, int HS) {
    size_t row = (size_t)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (row >= (size_t)B * NH * T) return;
    int lane = threadIdx.x & 31;
    int t = (int)(row % T), h = (int)((row / T) % NH), b = (int)(row / ((size_t)T * NH));
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    size_t ko = C + (size_t)(h / (NH / NKV)) * HS, vo = ko + KC;
    const float *qkv_b = qkv + (size_t)b * T * W;
    const float *q = qkv_b + (size_t)t * W + (size_t)h * HS;
    const float *dout_t = dout + ((size_t)b * T + t) * C + (size_t)h * HS;
    float scale = attn_scale(HS), lse_t = lse[row], Dt = (float)D[row];
    float acc[ATT_MAXK];
    for (int kk = 0; kk < ATT_MAXK; kk++) acc[kk] = 0.0f;
    for (int j = attn_first_key(pos, b, T, t); j <= t; j++) {
        const float *k = qkv_b + (size_t)j * W + ko, *v = qkv_b + (size_t)j * W + vo;
        float mk = drop_mult(drop, b, h, t, j, NH, T);
        float p = expf(scale * warp_dot(q, k, HS) - lse_t);
        float ds = scale * (p * (mk * warp_dot(dout_t, v, HS) - Dt));
        for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) acc[kk] += ds * k[d];
    }
    float *dq = dqkv + (size_t)b * T * W + (size_t)t * W + (size_t)h * HS;
    for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) dq[d] += acc[kk];
}

/* dk, dv of one key row j of KV head g: over the query heads of the group in
 * order, then the queries that saw j (i >= j inside j's example) in order:
 * dk_j += scale ds q_i, dv_j += p M dout_i. Added into dqkv. */
template <int ATT_MAXK>
__global__ void k_attn_dkv(float *dqkv, const float *dout, const float *qkv, const float *lse,
                           const double *D, const int32_t *pos, ct_attn_dropout drop, int B,
                           int T, int NH, int NKV, int HS) {
    size_t row = (size_t)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (row >= (size_t)B * NKV * T) return;
    int lane = threadIdx.x & 31;
    int j = (int)(row % T), g = (int)((row / T) % NKV), b = (int)(row / ((size_t)T * NKV));
    int group = NH / NKV;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    size_t ko = C + (size_t)g * HS, vo = ko + KC;
    const float *qkv_b = qkv + (size_t)b * T * W;
    const float *k = qkv_b + (size_t)j * W + ko, *v = qkv_b + (size_t)j * W + vo;
    float scale = attn_scale(HS);
    float dk[ATT_MAXK], dv[ATT_MAXK];
    for (int kk = 0; kk < ATT_MAXK; kk++) dk[kk] = dv[kk] = 0.0f;
    for (int h = g * group; h < (g + 1) * group; h++) {
        for (int i = j; i < T && attn_first_key(pos, b, T, i) <= j; i++) {
            const float *q = qkv_b + (size_t)i * W + (size_t)h * HS;
            const float *dout_i = dout + ((size_t)b * T + i) * C + (size_t)h * HS;
            size_t r = ((size_t)b * NH + h) * T + i;
            float mk = drop_mult(drop, b, h, i, j, NH, T);
            float p = expf(scale * warp_dot(q, k, HS) - lse[r]);
            float ds = scale * (p * (mk * warp_dot(dout_i, v, HS) - (float)D[r]));
            float pm = p * mk;
            for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) {
                dk[kk] += ds * q[d];
                dv[kk] += pm * dout_i[d];
            }
        }
    }
    float *dqkv_j = dqkv + (size_t)b * T * W + (size_t)j * W;
    for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) {
        dqkv_j[ko + d] += dk[kk];
        dqkv_j[vo + d] += dv[kk];
    }
}

/* Decode: a warp per query head of one new row against the n cached keys
 * and values (KV head rows NKV HS floats apart). */
template <int ATT_MAXK>
__global__ void k_attn_decode(float *out, const float *q, const float *kcache,
                              const float *vcache, int n, int NH, int NKV, int HS) {
    int h = blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (h >= NH) return;
    size_t KC = (size_t)NKV * HS, g = (size_t)(h / (NH / NKV)) * HS;
    ct_attn_dropout none = {0.0f, 0, 0};
    attn_row<ATT_MAXK>(out + (size_t)h * HS, q + (size_t)h * HS, kcache + g, vcache + g, KC, n, HS,
                       attn_scale(HS), none, 0, h, 0, 0, NH, 1);
}

/* D (B,NH,T) = rowsum(dout o out), a warp per row, summed in double (HS
 * products a row: memory-bound) and kept so, as ref keeps it; the fp32
 * kernels read it as a float, the flash kernels (cuda_flash.cu) too. */
__global__ void k_attn_D(double *D, const float *dout, const float *out, int B, int T, int NH,
                         int HS) {
    size_t row = (size_t)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (row >= (size_t)B * NH * T) return;
    int t = (int)(row % T), h = (int)((row / T) % NH), b = (int)(row / ((size_t)T * NH));
    size_t o = ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
    double acc = 0.0;
    for (int d = threadIdx.x & 31; d < HS; d += 32) acc += (double)dout[o + d] * out[o + d];
    acc = warp_sum(acc);
    if ((threadIdx.x & 31) == 0) D[row] = acc;
}

#endif
