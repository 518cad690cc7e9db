/*
 * The attention entries of precision bf16 (attention_forward_bf16,
 * attention_backward_bf16): tensor-core flash attention on bf16 tiles of the
 * fp32 q, k, v, FlashAttention-2's loop order, fp32 softmax, lse saved, a
 * deterministic two-kernel backward. Two implementations of one algorithm:
 *   - mma.sync (cuda_attention_mma.cuh, the default): the tile products'
 *     results stay in registers, whose layout PTX documents; two m16 tiles of
 *     query rows a warp at head size 64 (CT_CUDA_ATTENTION=mma1: one);
 *   - WMMA (cuda_attention_wmma.cuh, CT_CUDA_ATTENTION=wmma): the first one,
 *     measured on an H200 (stop 39), which goes through shared memory for
 *     every element-wise step since WMMA's layout is unspecified.
 * An approximation of the fp32 attention at bf16's precision, as autocast's,
 * so only bf16 runs call these entries; fp32 runs keep the exact kernels of
 * cuda_attention.cu, untouched.
 * The fast path takes head sizes 64 and 128 on compute capability 8.0 and
 * later, without dropout, on 16-byte aligned operands; every other call
 * (dropout included, CT_CUDA_ATTENTION=rows or fp32 too) runs the exact
 * kernels. Resources of the WMMA kernels (nvcc 13.0 -O3 -Xptxas -v; 128
 * threads a block; dynamic shared memory from fa_*_smem, in KiB at head size
 * 64 / 128):
 *   fwd  sm_90a 147 / 255 registers, sm_80 128 / 192 (4 bytes spilled at 64);
 *        shared 44.5 / 60.5
 *   dq   sm_90a 168 / 254, sm_80 252 / 255 (68 bytes spilled at 128);
 *        shared 49.8 / 81.8
 *   dkv  sm_90a 255 / 255 (16 bytes spilled at 128), sm_80 255 / 255 (4 / 160
 *        bytes spilled); shared 58.8 / 65.4
 * and of the mma.sync ones (fm_*_smem, two stages of the tiles they walk),
 * no spills at either target; at head size 64 with two m16 tiles a warp (the
 * default) / one (CT_CUDA_ATTENTION=mma1) / at head size 128 (one):
 *   fwd  sm_90a 239 / 130 / 172 registers, sm_80 245 / 127 / 168;
 *        shared 54.5 / 45.3 / 85.3
 *   dq   sm_90a 247 / 158 / 206, sm_80 244 / 154 / 184; shared 73.5 / 54.8 / 102.8
 *   dkv  (one tile a warp; at 64 the K and V fragments held for the walk)
 *        sm_90a 230 / 240 at 64 / 128, sm_80 236 / 239; shared 55.5 / 68.8
 * so an SM holds two forward blocks of head size 64 (8 warps of 32 rows), or
 * three of 16-row warps at one tile a warp: which is faster is the GPU
 * check's A/B to measure (scripts/gpu_check.sh, bench stage).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdint.h>

#include "backend/cuda/cuda_attention_tiled.cuh"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_attention_mma.cuh" /* includes the WMMA kernels' header */
#include "backend/cuda/cuda_common.cuh"

/* The kernels: the bodies of cuda_attention_wmma.cuh over the dynamic shared
 * memory. bf16 WMMA needs sm_80; for older targets (the compute_75 PTX) the
 * kernels are empty and never launched (fa_impl asks the device). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define FA_BODY(call) call
#else
#define FA_BODY(call)
#endif

template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
k_fa_fwd(float *out, float *lse, const float *qkv, const int32_t *pos, int T, int NH, int NKV) {
    extern __shared__ __align__(128) unsigned char fa_smem[];
    FA_BODY((fa_fwd_body<HS>(fa_smem, out, lse, qkv, pos, T, NH, NKV)));
}
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
k_fa_dq(float *dqkv, const float *dout, const float *qkv, const float *lse, const double *D,
        const int32_t *pos, int T, int NH, int NKV) {
    extern __shared__ __align__(128) unsigned char fa_smem[];
    FA_BODY((fa_dq_body<HS>(fa_smem, dqkv, dout, qkv, lse, D, pos, T, NH, NKV)));
}
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
k_fa_dkv(float *dqkv, const float *dout, const float *qkv, const float *lse, const double *D,
         const int32_t *pos, int T, int NH, int NKV) {
    extern __shared__ __align__(128) unsigned char fa_smem[];
    FA_BODY((fa_dkv_body<HS>(fa_smem, dqkv, dout, qkv, lse, D, pos, T, NH, NKV)));
}

template <int HS, int MT>
__global__ void __launch_bounds__(FA_THREADS)
k_fm_fwd(float *out, float *lse, const fa_bf16 *qkv, const int32_t *pos, int T, int NH, int NKV) {
    extern __shared__ __align__(128) unsigned char fa_smem[];
    FA_BODY((fm_fwd_body<HS, MT>(fa_smem, out, lse, qkv, pos, T, NH, NKV)));
}
template <int HS, int MT>
__global__ void __launch_bounds__(FA_THREADS)
k_fm_dq(float *dqkv, const fa_bf16 *dout, const fa_bf16 *qkv, const float *lse, const double *D,
        const int32_t *pos, int T, int NH, int NKV) {
    extern __shared__ __align__(128) unsigned char fa_smem[];
    FA_BODY((fm_dq_body<HS, MT>(fa_smem, dqkv, dout, qkv, lse, D, pos, T, NH, NKV)));
}
template <int HS>
__global__ void __launch_bounds__(FA_THREADS)
k_fm_dkv(float *dqkv, const fa_bf16 *dout, const fa_bf16 *qkv, const float *lse, const double *D,
         const int32_t *pos, int T, int NH, int NKV) {
    extern __shared__ __align__(128) unsigned char fa_smem[];
    FA_BODY((fm_dkv_body<HS>(fa_smem, dqkv, dout, qkv, lse, D, pos, T, NH, NKV)));
}

/* The mma.sync kernels' dynamic shared memory granted, at head size HS with
 * MT m16 tiles a warp in the forward and dq. */
template <int HS, int MT> static bool fm_grant(size_t optin) {
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    return optin >= fm_fwd_smem(HS, MT) && optin >= fm_dq_smem(HS, MT) &&
           optin >= fm_dkv_smem(HS) &&
           cudaFuncSetAttribute(k_fm_fwd<HS, MT>, a, (int)fm_fwd_smem(HS, MT)) == cudaSuccess &&
           cudaFuncSetAttribute(k_fm_dq<HS, MT>, a, (int)fm_dq_smem(HS, MT)) == cudaSuccess &&
           cudaFuncSetAttribute(k_fm_dkv<HS>, a, (int)fm_dkv_smem(HS)) == cudaSuccess;
}
template <int HS, int MT>
static void fm_forward_at(cudaStream_t st, float *out, float *lse, const fa_bf16 *q16,
                          const int32_t *pos, int B, int T, int NH, int NKV) {
    dim3 grid((unsigned)((T + fm_bq(MT) - 1) / fm_bq(MT)), (unsigned)NH, (unsigned)B);
    k_fm_fwd<HS, MT><<<grid, FA_THREADS, fm_fwd_smem(HS, MT), st>>>(out, lse, q16, pos, T, NH,
                                                                    NKV);
}
template <int HS, int MT>
static void fm_backward_at(cudaStream_t st, float *dqkv, const fa_bf16 *d16, const fa_bf16 *q16,
                           const float *lse, const double *D, const int32_t *pos, int B, int T,
                           int NH, int NKV) {
    dim3 gq((unsigned)((T + fm_bq(MT) - 1) / fm_bq(MT)), (unsigned)NH, (unsigned)B);
    dim3 gk((unsigned)((T + FA_BK - 1) / FA_BK), (unsigned)NKV, (unsigned)B);
    k_fm_dq<HS, MT><<<gq, FA_THREADS, fm_dq_smem(HS, MT), st>>>(dqkv, d16, q16, lse, D, pos, T,
                                                                NH, NKV);
    k_fm_dkv<HS><<<gk, FA_THREADS, fm_dkv_smem(HS), st>>>(dqkv, d16, q16, lse, D, pos, T, NH,
                                                          NKV);
}
/* Two m16 tiles a warp at head size 64 (each K and V fragment read from
 * shared memory serves 32 query rows); one at 128 (registers), and one
 * everywhere under CT_CUDA_ATTENTION=mma1. */
static int fm_tiles(int HS) { return HS == 64 && cuda_attention_mode() != CUDA_ATT_MMA1 ? 2 : 1; }

/* The mma.sync forward: q, k, v rounded into the bf16 workspace, then the
 * kernel (head size 64 or 128). */
static void fm_forward(ct_backend *be, float *out, float *lse, const float *qkv,
                       const int32_t *pos, int B, int T, int NH, int NKV, int HS) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    fa_bf16 *q16 = (fa_bf16 *)cuda_bf16_workspace(be, n);
    if (!q16) return;
    ct_f32_to_bf16_cuda(be, (uint16_t *)q16, qkv, n);
    cudaStream_t st = cuda_stream(be);
    if (HS == 128) fm_forward_at<128, 1>(st, out, lse, q16, pos, B, T, NH, NKV);
    else if (fm_tiles(HS) == 2) fm_forward_at<64, 2>(st, out, lse, q16, pos, B, T, NH, NKV);
    else fm_forward_at<64, 1>(st, out, lse, q16, pos, B, T, NH, NKV);
}
/* The mma.sync backward: q, k, v then dout rounded into the bf16 workspace
 * (after D, which reads the fp32 dout), then dq and dk/dv. */
static void fm_backward(ct_backend *be, float *dqkv, const float *dout, const float *qkv,
                        const float *lse, const double *D, const int32_t *pos, int B, int T,
                        int NH, int NKV, int HS) {
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, nd = (size_t)B * T * NH * HS;
    fa_bf16 *q16 = (fa_bf16 *)cuda_bf16_workspace(be, nq + nd), *d16 = q16 + nq;
    if (!q16) return;
    ct_f32_to_bf16_cuda(be, (uint16_t *)q16, qkv, nq);
    ct_f32_to_bf16_cuda(be, (uint16_t *)d16, dout, nd);
    cudaStream_t st = cuda_stream(be);
    if (HS == 128) fm_backward_at<128, 1>(st, dqkv, d16, q16, lse, D, pos, B, T, NH, NKV);
    else if (fm_tiles(HS) == 2) fm_backward_at<64, 2>(st, dqkv, d16, q16, lse, D, pos, B, T, NH, NKV);
    else fm_backward_at<64, 1>(st, dqkv, d16, q16, lse, D, pos, B, T, NH, NKV);
}

/* The WMMA kernels' dynamic shared memory granted, at head size HS. */
template <int HS> static bool fa_grant(size_t optin) {
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    return optin >= fa_fwd_smem(HS) && optin >= fa_dq_smem(HS) && optin >= fa_dkv_smem(HS) &&
           cudaFuncSetAttribute(k_fa_fwd<HS>, a, (int)fa_fwd_smem(HS)) == cudaSuccess &&
           cudaFuncSetAttribute(k_fa_dq<HS>, a, (int)fa_dq_smem(HS)) == cudaSuccess &&
           cudaFuncSetAttribute(k_fa_dkv<HS>, a, (int)fa_dkv_smem(HS)) == cudaSuccess;
}

/* Which kernels the device granted their shared memory (over the 48 KiB
 * default), asked once per backend: a device with less to give runs what
 * fits. An sm_86 or sm_89 part (99 KiB a block) takes every kernel but the
 * mma.sync dq at head size 128 (103 KiB), so there head size 128 runs the
 * WMMA kernels. */
enum { FA_WMMA64 = 1, FA_WMMA128 = 2, FA_MMA64 = 4, FA_MMA128 = 8 };
static int fa_ready(ct_backend *be) {
    cuda_state *s = cuda_st(be);
    if (!s->fa_ready) {
        int optin = 0;
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, s->device);
        size_t o = optin > 0 ? (size_t)optin : 0;
        int m = (fa_grant<64>(o) ? FA_WMMA64 : 0) | (fa_grant<128>(o) ? FA_WMMA128 : 0) |
                (fm_grant<64, 1>(o) && fm_grant<64, 2>(o) ? FA_MMA64 : 0) |
                (fm_grant<128, 1>(o) ? FA_MMA128 : 0);
        if (m != (FA_WMMA64 | FA_WMMA128 | FA_MMA64 | FA_MMA128))
            (void)cudaGetLastError(); /* a refusal is not a latched error: others run */
        s->fa_ready = m ? m : -1;
    }
    return s->fa_ready > 0 ? s->fa_ready : 0;
}

/* Which tensor-core kernels run this call (see the file comment): FA_MMA,
 * FA_WMMA, or 0 for the exact kernels. */
enum { FA_NONE = 0, FA_WMMA = 1, FA_MMA = 2 };
static int fa_impl(ct_backend *be, const ct_attn_dropout *drop, int B, int NH, int HS,
                   const void *a, const void *b) {
    int mode = cuda_attention_mode();
    if ((mode != CUDA_ATT_AUTO && mode != CUDA_ATT_WMMA && mode != CUDA_ATT_MMA1) ||
        (drop && drop->p > 0.0f) || (HS != 64 && HS != 128) || cuda_st(be)->cc_major < 8 ||
        B > 65535 || NH > 65535 || (((uintptr_t)a | (uintptr_t)b) & 15))
        return FA_NONE;
    int r = fa_ready(be);
    if (mode != CUDA_ATT_WMMA && (r & (HS == 64 ? FA_MMA64 : FA_MMA128))) return FA_MMA;
    return r & (HS == 64 ? FA_WMMA64 : FA_WMMA128) ? FA_WMMA : FA_NONE;
}

extern "C" void ct_attention_forward_bf16_cuda(ct_backend *be, float *out, float *lse,
                                               const float *qkv, const int32_t *pos,
                                               const ct_attn_dropout *drop, int B, int T,
                                               int NH, int NKV, int HS) {
    if ((size_t)B * NH * T == 0) return;
    int impl = fa_impl(be, drop, B, NH, HS, qkv, out);
    if (impl == FA_NONE) {
        ct_attention_forward_cuda(be, out, lse, qkv, pos, drop, B, T, NH, NKV, HS);
        return;
    }
    if (impl == FA_MMA) {
        fm_forward(be, out, lse, qkv, pos, B, T, NH, NKV, HS);
    } else {
        dim3 grid((unsigned)((T + FA_BQ - 1) / FA_BQ), (unsigned)NH, (unsigned)B);
        cudaStream_t st = cuda_stream(be);
        if (HS == 64)
            k_fa_fwd<64><<<grid, FA_THREADS, fa_fwd_smem(64), st>>>(out, lse, qkv, pos, T, NH,
                                                                    NKV);
        else
            k_fa_fwd<128><<<grid, FA_THREADS, fa_fwd_smem(128), st>>>(out, lse, qkv, pos, T, NH,
                                                                      NKV);
    }
    cuda_launched(be, "attention_forward_bf16");
}

extern "C" void ct_attention_backward_bf16_cuda(ct_backend *be, float *dqkv, const float *dout,
                                                const float *qkv, const float *out,
                                                const float *lse, const int32_t *pos,
                                                const ct_attn_dropout *drop, int B, int T, int NH,
                                                int NKV, int HS) {
    if ((size_t)B * NH * T == 0) return;
    int impl = fa_impl(be, drop, B, NH, HS, qkv, dout);
    if (impl == FA_NONE || ((uintptr_t)dqkv & 7)) { /* float2 adds */
        ct_attention_backward_cuda(be, dqkv, dout, qkv, out, lse, pos, drop, B, T, NH, NKV, HS);
        return;
    }
    const double *D = cuda_attention_D(be, dout, out, B, T, NH, HS);
    if (!D) return;
    if (impl == FA_MMA) {
        fm_backward(be, dqkv, dout, qkv, lse, D, pos, B, T, NH, NKV, HS);
    } else {
        cudaStream_t st = cuda_stream(be);
        dim3 gq((unsigned)((T + FA_BQ - 1) / FA_BQ), (unsigned)NH, (unsigned)B);
        dim3 gk((unsigned)((T + FA_BK - 1) / FA_BK), (unsigned)NKV, (unsigned)B);
        if (HS == 64) {
            k_fa_dq<64><<<gq, FA_THREADS, fa_dq_smem(64), st>>>(dqkv, dout, qkv, lse, D, pos, T,
                                                                NH, NKV);
            k_fa_dkv<64><<<gk, FA_THREADS, fa_dkv_smem(64), st>>>(dqkv, dout, qkv, lse, D, pos,
                                                                  T, NH, NKV);
        } else {
            k_fa_dq<128><<<gq, FA_THREADS, fa_dq_smem(128), st>>>(dqkv, dout, qkv, lse, D, pos,
                                                                  T, NH, NKV);
            k_fa_dkv<128><<<gk, FA_THREADS, fa_dkv_smem(128), st>>>(dqkv, dout, qkv, lse, D,
                                                                    pos, T, NH, NKV);
        }
    }
    cuda_launched(be, "attention_backward_bf16");
}
