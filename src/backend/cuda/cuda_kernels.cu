/*
 * The CUDA backend's row and elementwise kernels, written as ports of the ref
 * backend (backend/ref) with its formulas: the embedding and its scatter,
 * LayerNorm, RMSNorm, Qwen3's per-head q/k RMSNorm, RoPE, SwiGLU, GeGLU,
 * GELU, residual adds and the fused softmax cross-entropy. Where ref computes
 * in double, these compute in fp32 (double runs at 1/32 to 1/64 of fp32 on
 * most GPUs) and stay within a few ulp or fp32's rounding of the row: the
 * norm forwards (cuda_norm.cuh), alone or with the residual add fused in
 * front, fp32 statistics over the row held on chip (PyTorch's CUDA norms
 * accumulate in fp32 too), and their input gradients, fp32 partials in a
 * fixed order; the q/k norms (cuda_qknorm.cuh), forward and backward; the
 * activations (cuda_act.cuh), through a sigmoid, GELU's argument in two
 * floats; RoPE (cuda_rope.cuh), ref's fp32 angle through sincosf; the
 * cross-entropy (cuda_xent.cuh), an online softmax. One block per row for
 * the row kernels. Gradients of shared weights (norm weights) are column
 * sums in a fixed order, one thread per column, in double partials
 * (memory-bound: double costs nothing there), and embedding rows sums over
 * the sorted token ids (cuda_encoder_bwd.cuh), never atomics: runs are
 * deterministic and resume is bit-exact. Leaves out: vectorised 128-bit
 * loads and the other speed work of the GPU performance issue. */
#include <cuda_runtime.h>
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_colsum.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_elementwise.cuh"
#include "backend/cuda/cuda_encoder_bwd.cuh"
#include "backend/cuda/cuda_norm.cuh"
#include "backend/cuda/cuda_qknorm.cuh"
#include "backend/cuda/cuda_rope.cuh"
#include "backend/cuda/cuda_xent.cuh"

/* ------------------------------------------------------------ embedding */

extern "C" void ct_encoder_forward_cuda(ct_backend *be, float *out, const int32_t *inp,
                                        const float *wte, const float *wpe, const int32_t *pos,
                                        int B, int T, int C, int pos0) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    k_encoder_fwd<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(out, inp, wte, wpe, pos, B, T,
                                                                  C, pos0);
    cuda_launched(be, "encoder_forward");
}

extern "C" void ct_encoder_forward_wte16_cuda(ct_backend *be, float *out, const int32_t *inp,
                                              const uint16_t *wte16, const float *wpe,
                                              const int32_t *pos, int B, int T, int C,
                                              int pos0) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    k_encoder_fwd<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(out, inp, wte16, wpe, pos, B,
                                                                  T, C, pos0);
    cuda_launched(be, "encoder_forward_wte16");
}

/* Sorts the N keys (values[n] << 32 | n) into ws (2N keys: two halves the
 * merge passes alternate between); returns the half that holds them. */
static const uint64_t *enc_sort(ct_backend *be, uint64_t *ws, const int32_t *values, int N) {
    cudaStream_t st = cuda_stream(be);
    uint64_t *a = ws, *b = ws + N;
    k_enc_sort_chunk<<<(unsigned)((N + ENC_CHUNK - 1) / ENC_CHUNK), ENC_SORT_THREADS, 0, st>>>(
        a, values, N);
    for (int w = ENC_CHUNK; w < N; w = w > N / 2 ? N : 2 * w) {
        k_enc_merge<<<(unsigned)((N + ENC_MERGE_THREADS - 1) / ENC_MERGE_THREADS),
                      ENC_MERGE_THREADS, 0, st>>>(b, a, N, w);
        uint64_t *t = a;
        a = b, b = t;
    }
    return a;
}

/* dw rows += the runs of the sorted keys (cuda_encoder_bwd.cuh). */
static void enc_runs(ct_backend *be, float *dw, const float *dout, const uint64_t *keys, int N,
                     int C) {
    int per = enc_run_per(N);
    dim3 grid((unsigned)((C + ENC_SUM_THREADS - 1) / ENC_SUM_THREADS),
              (unsigned)((N + per - 1) / per));
    k_enc_run_sum<<<grid, ENC_SUM_THREADS, 0, cuda_stream(be)>>>(dw, dout, keys, N, C, per);
}

/* dwte (and dwpe) rows gather their rows' gradients in row order, as ref adds
 * them (cuda_encoder_bwd.cuh): a sort of the batch's token ids (and packed
 * positions), then a thread per column and run. Equal to ref bit for bit. */
extern "C" void ct_encoder_backward_cuda(ct_backend *be, float *dwte, float *dwpe,
                                         const float *dout, const int32_t *inp,
                                         const int32_t *pos, int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    int N = B * T;
    cuda_state *s = cuda_st(be);
    if (!cuda_workspace(be, (void **)&s->enc_ws, &s->enc_ws_bytes, ct_cuda_ws_encoder_bytes(N),
                        "embedding backward workspace"))
        return;
    uint64_t *ws = (uint64_t *)s->enc_ws;
    enc_runs(be, dwte, dout, enc_sort(be, ws, inp, N), N, C);
    if (dwpe && pos) {
        enc_runs(be, dwpe, dout, enc_sort(be, ws, pos, N), N, C);
    } else if (dwpe) {
        size_t n = (size_t)T * C;
        k_enc_pos_sum<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(dwpe, dout, B, T, C);
    }
    cuda_launched(be, "encoder_backward");
}

/* ------------------------------------------------------------ column sums */

/* The partials of a column sum over N rows of C columns: the workspace (two
 * (chunks, C) arrays, grown when too small), *chunks and pass 1's grid; NULL
 * (latched) when it cannot grow. */
static double *colsum_setup(ct_backend *be, int N, int C, int *chunks, dim3 *grid) {
    cuda_state *s = cuda_st(be);
    *chunks = colsum_chunks(N, C);
    if (!cuda_workspace(be, (void **)&s->col_ws, &s->col_ws_bytes,
                        (size_t)2 * *chunks * C * sizeof(double), "column-sum workspace"))
        return NULL;
    *grid = dim3((unsigned)((C + COLSUM_THREADS - 1) / COLSUM_THREADS), (unsigned)*chunks);
    return s->col_ws;
}

void cuda_colsum(ct_backend *be, int kind, float *out0, float *out1, const float *dout,
                 const float *inp, const float *mean, const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int chunks;
    dim3 grid;
    double *p0 = colsum_setup(be, N, C, &chunks, &grid);
    if (!p0) return;
    double *p1 = p0 + (size_t)chunks * C;
    cudaStream_t st = cuda_stream(be);
    if (kind == COLSUM_LAYERNORM)
        k_colsum_part<COLSUM_LAYERNORM><<<grid, COLSUM_THREADS, 0, st>>>(p0, p1, dout, inp, mean,
                                                                        rstd, N, C, chunks);
    else if (kind == COLSUM_RMSNORM)
        k_colsum_part<COLSUM_RMSNORM><<<grid, COLSUM_THREADS, 0, st>>>(p0, NULL, dout, inp, NULL,
                                                                      rstd, N, C, chunks);
    else
        k_colsum_part<COLSUM_BIAS><<<grid, COLSUM_THREADS, 0, st>>>(p0, NULL, dout, NULL, NULL,
                                                                   NULL, N, C, chunks);
    k_colsum_add<<<grid.x, COLSUM_THREADS, 0, st>>>(out0, kind == COLSUM_LAYERNORM ? out1 : NULL,
                                                    p0, p1, C, chunks);
    cuda_launched(be, "column sums");
}

void cuda_colsum_bias_copy16(ct_backend *be, float *out0, uint16_t *copy16, const float *dout,
                             int N, int C) {
    if (N <= 0 || C <= 0) return;
    int chunks;
    dim3 grid;
    double *p0 = colsum_setup(be, N, C, &chunks, &grid);
    if (!p0) return;
    cudaStream_t st = cuda_stream(be);
    k_colsum_bias_copy16<<<grid, COLSUM_THREADS, 0, st>>>(p0, (__nv_bfloat16 *)copy16, dout, N, C,
                                                          chunks);
    k_colsum_add<<<grid.x, COLSUM_THREADS, 0, st>>>(out0, NULL, p0, NULL, C, chunks);
    cuda_launched(be, "column sums (bias, bf16 copy)");
}

/* ------------------------------------------------------------ LayerNorm */

/* The norm forwards, fused with a residual add or not (ADD), over rows held
 * in dynamic shared memory (HELD) when they fit (cuda_norm.cuh), writing an
 * fp32 or a bf16 (Y) output. */
template <bool LN, bool ADD, bool HELD, typename Y>
__global__ void __launch_bounds__(NORM_THREADS)
    k_norm_fwd(float *res, Y *out, float *mean, float *rstd, const float *a, const float *b,
               const float *weight, const float *bias, int C, float eps, float wofs) {
    extern __shared__ float norm_held[];
    norm_row<LN, ADD, Y>(HELD ? norm_held : NULL, res, out, mean, rstd, a, b, weight, bias, C,
                         eps, wofs);
}
template <bool LN, bool ADD, typename Y = float>
static void norm_fwd(ct_backend *be, const char *name, float *res, Y *out, float *mean,
                     float *rstd, const float *a, const float *b, const float *weight,
                     const float *bias, int N, int C, float eps, float wofs) {
    if (N <= 0) return;
    size_t bytes = (size_t)(C > 0 ? C : 0) * sizeof(float);
    cudaStream_t st = cuda_stream(be);
    if (bytes <= NORM_HELD_MAX_BYTES)
        k_norm_fwd<LN, ADD, true, Y><<<N, NORM_THREADS, bytes, st>>>(res, out, mean, rstd, a, b,
                                                                     weight, bias, C, eps, wofs);
    else
        k_norm_fwd<LN, ADD, false, Y><<<N, NORM_THREADS, 0, st>>>(res, out, mean, rstd, a, b,
                                                                  weight, bias, C, eps, wofs);
    cuda_launched(be, name);
}

/* The bf16-output forwards (layernorm_forward_out16, rmsnorm_forward_out16):
 * the residual add in front when b is given, else the norm of a. */
template <bool LN>
static void norm_fwd16(ct_backend *be, const char *name, float *res, uint16_t *out16,
                       float *mean, float *rstd, const float *a, const float *b,
                       const float *weight, const float *bias, int N, int C, float eps,
                       float wofs) {
    __nv_bfloat16 *y = (__nv_bfloat16 *)out16;
    if (b)
        norm_fwd<LN, true>(be, name, res, y, mean, rstd, a, b, weight, bias, N, C, eps, wofs);
    else
        norm_fwd<LN, false>(be, name, NULL, y, mean, rstd, a, NULL, weight, bias, N, C, eps,
                            wofs);
}
extern "C" void ct_layernorm_forward_out16_cuda(ct_backend *be, float *res, uint16_t *out16,
                                                float *mean, float *rstd, const float *a,
                                                const float *b, const float *weight,
                                                const float *bias, int N, int C, float eps) {
    norm_fwd16<true>(be, "layernorm_forward_out16", res, out16, mean, rstd, a, b, weight, bias,
                     N, C, eps, 0.0f);
}
extern "C" void ct_rmsnorm_forward_out16_cuda(ct_backend *be, float *res, uint16_t *out16,
                                              float *rstd, const float *a, const float *b,
                                              const float *weight, int N, int C, float eps,
                                              float wofs) {
    norm_fwd16<false>(be, "rmsnorm_forward_out16", res, out16, NULL, rstd, a, b, weight, NULL,
                      N, C, eps, wofs);
}

extern "C" void ct_layernorm_forward_cuda(ct_backend *be, float *out, float *mean, float *rstd,
                                          const float *inp, const float *weight,
                                          const float *bias, int N, int C, float eps) {
    norm_fwd<true, false>(be, "layernorm_forward", NULL, out, mean, rstd, inp, NULL, weight,
                          bias, N, C, eps, 0.0f);
}
extern "C" void ct_residual_layernorm_forward_cuda(ct_backend *be, float *res, float *out,
                                                   float *mean, float *rstd, const float *a,
                                                   const float *b, const float *weight,
                                                   const float *bias, int N, int C, float eps) {
    norm_fwd<true, true>(be, "residual_layernorm_forward", res, out, mean, rstd, a, b, weight,
                         bias, N, C, eps, 0.0f);
}

/* The norms' input gradients (cuda_norm.cuh): a block per row, fp32 partials
 * in a fixed order. LN: LayerNorm, else RMSNorm. */
template <bool LN>
__global__ void __launch_bounds__(NORM_THREADS)
    k_norm_bwd(float *dinp, const float *dout, const float *inp, const float *weight,
               const float *mean, const float *rstd, int C, float wofs) {
    norm_bwd_row<LN>(dinp, dout, inp, weight, mean, rstd, C, wofs);
}
extern "C" void ct_layernorm_backward_cuda(ct_backend *be, float *dinp, float *dweight,
                                           float *dbias, const float *dout, const float *inp,
                                           const float *weight, const float *mean,
                                           const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    k_norm_bwd<true><<<N, NORM_THREADS, 0, cuda_stream(be)>>>(dinp, dout, inp, weight, mean,
                                                              rstd, C, 0.0f);
    cuda_launched(be, "layernorm_backward");
    cuda_colsum(be, COLSUM_LAYERNORM, dweight, dbias, dout, inp, mean, rstd, N, C);
}

/* ------------------------------------------------------------ RMSNorm */

extern "C" void ct_rmsnorm_forward_cuda(ct_backend *be, float *out, float *rstd, const float *inp,
                                        const float *weight, int N, int C, float eps,
                                        float wofs) {
    norm_fwd<false, false>(be, "rmsnorm_forward", NULL, out, NULL, rstd, inp, NULL, weight, NULL,
                           N, C, eps, wofs);
}
extern "C" void ct_residual_rmsnorm_forward_cuda(ct_backend *be, float *res, float *out,
                                                 float *rstd, const float *a, const float *b,
                                                 const float *weight, int N, int C, float eps,
                                                 float wofs) {
    norm_fwd<false, true>(be, "residual_rmsnorm_forward", res, out, NULL, rstd, a, b, weight,
                          NULL, N, C, eps, wofs);
}

extern "C" void ct_rmsnorm_backward_cuda(ct_backend *be, float *dinp, float *dweight,
                                         const float *dout, const float *inp, const float *weight,
                                         const float *rstd, int N, int C, float wofs) {
    if (N <= 0 || C <= 0) return;
    k_norm_bwd<false><<<N, NORM_THREADS, 0, cuda_stream(be)>>>(dinp, dout, inp, weight, NULL,
                                                               rstd, C, wofs);
    cuda_launched(be, "rmsnorm_backward");
    cuda_colsum(be, COLSUM_RMSNORM, dweight, NULL, dout, inp, NULL, rstd, N, C);
}

/* ------------------------------------------------------------ RoPE */

/* k_rope (cuda_rope.cuh): a thread per (row, head, pair), ref's fp32 angle,
 * its cosine and sine in fp32. */
static void rope(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH, int NKV,
                 int HS, int pos0, const float *inv_freq, float dir, const char *name) {
    size_t n = (size_t)B * T * (NH + NKV) * (HS / 2);
    if (!n) return;
    k_rope<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(qkv, pos, B, T, NH, NKV, HS, pos0,
                                                           inv_freq, dir);
    cuda_launched(be, name);
}
extern "C" void ct_rope_forward_cuda(ct_backend *be, float *qkv, const int32_t *pos, int B, int T,
                                     int NH, int NKV, int HS, int pos0, const float *inv_freq) {
    rope(be, qkv, pos, B, T, NH, NKV, HS, pos0, inv_freq, 1.0f, "rope_forward");
}
extern "C" void ct_rope_backward_cuda(ct_backend *be, float *dqkv, const int32_t *pos, int B,
                                      int T, int NH, int NKV, int HS, int pos0,
                                      const float *inv_freq) {
    rope(be, dqkv, pos, B, T, NH, NKV, HS, pos0, inv_freq, -1.0f, "rope_backward");
}

/* ------------------------------------------------------------ q/k norms */

/* k_qknorm_fwd, k_qknorm_bwd, k_qknorm_copy_v, k_qknorm_wgrad_part
 * (cuda_qknorm.cuh): a warp per q or k head, fp32 statistics; the weight
 * gradients' column sums in double partials. */

extern "C" void ct_qknorm_forward_cuda(ct_backend *be, float *out, float *rstd, const float *inp,
                                       const float *wq, const float *wk, int N, int NH, int NKV,
                                       int HS, float eps, float wofs) {
    size_t heads = (size_t)N * (NH + NKV);
    if (!heads) return;
    cudaStream_t st = cuda_stream(be);
    k_qknorm_fwd<<<(unsigned)((heads + QK_WARPS - 1) / QK_WARPS), 32 * QK_WARPS, 0, st>>>(
        out, rstd, inp, wq, wk, N, NH, NKV, HS, eps, wofs);
    size_t nv = (size_t)N * NKV * HS;
    k_qknorm_copy_v<<<cuda_grid(nv, 256), 256, 0, st>>>(out, inp, N, NH, NKV, HS);
    cuda_launched(be, "qknorm_forward");
}

extern "C" void ct_qknorm_backward_cuda(ct_backend *be, float *dinp, float *dwq, float *dwk,
                                        const float *dout, const float *inp, const float *wq,
                                        const float *wk, const float *rstd, int N, int NH,
                                        int NKV, int HS, float wofs) {
    size_t heads = (size_t)N * (NH + NKV);
    if (!heads || HS <= 0) return;
    int chunks;
    dim3 grid;
    double *pq = colsum_setup(be, N, HS, &chunks, &grid);
    if (!pq) return;
    double *pk = pq + (size_t)chunks * HS;
    cudaStream_t st = cuda_stream(be);
    /* the weight gradients first: dinp may overwrite dout */
    k_qknorm_wgrad_part<<<grid, COLSUM_THREADS, 0, st>>>(pq, pk, dout, inp, rstd, N, NH, NKV, HS,
                                                         chunks);
    k_colsum_add<<<grid.x, COLSUM_THREADS, 0, st>>>(dwq, NULL, pq, NULL, HS, chunks);
    k_colsum_add<<<grid.x, COLSUM_THREADS, 0, st>>>(dwk, NULL, pk, NULL, HS, chunks);
    k_qknorm_bwd<<<(unsigned)((heads + QK_WARPS - 1) / QK_WARPS), 32 * QK_WARPS, 0, st>>>(
        dinp, dout, inp, wq, wk, rstd, N, NH, NKV, HS, wofs);
    if (dinp != dout) {
        size_t nv = (size_t)N * NKV * HS;
        k_qknorm_copy_v<<<cuda_grid(nv, 256), 256, 0, st>>>(dinp, dout, N, NH, NKV, HS);
    }
    cuda_launched(be, "qknorm_backward");
}

/* ------------------------------------------------------------ SwiGLU, GELU */

/* k_glu_fwd, k_glu_bwd, k_gelu_fwd, k_gelu_bwd (cuda_act.cuh): a thread per
 * element, fp32 through a sigmoid. */
extern "C" void ct_swiglu_forward_cuda(ct_backend *be, float *out, const float *inp, int N,
                                       int F) {
    size_t n = (size_t)N * F;
    if (!n) return;
    k_glu_fwd<false><<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(out, inp, N, F);
    cuda_launched(be, "swiglu_forward");
}
extern "C" void ct_swiglu_backward_cuda(ct_backend *be, float *dinp, const float *inp,
                                        const float *dout, int N, int F) {
    size_t n = (size_t)N * F;
    if (!n) return;
    k_glu_bwd<false><<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(dinp, inp, dout, N, F);
    cuda_launched(be, "swiglu_backward");
}

extern "C" void ct_geglu_forward_cuda(ct_backend *be, float *out, const float *inp, int N,
                                      int F) {
    size_t n = (size_t)N * F;
    if (!n) return;
    k_glu_fwd<true><<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(out, inp, N, F);
    cuda_launched(be, "geglu_forward");
}
extern "C" void ct_geglu_backward_cuda(ct_backend *be, float *dinp, const float *inp,
                                       const float *dout, int N, int F) {
    size_t n = (size_t)N * F;
    if (!n) return;
    k_glu_bwd<true><<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(dinp, inp, dout, N, F);
    cuda_launched(be, "geglu_backward");
}

/* The MLP activations into bf16 (mlp_act_forward_out16): the kernels above
 * with a bf16 output type. */
extern "C" void ct_mlp_act_forward_out16_cuda(ct_backend *be, uint16_t *out16, const float *inp,
                                              int N, int F, int act) {
    size_t n = (size_t)N * F;
    if (!n) return;
    __nv_bfloat16 *y = (__nv_bfloat16 *)out16;
    dim3 g = cuda_grid(n, 256);
    cudaStream_t st = cuda_stream(be);
    if (act == CT_ACT16_GELU)
        k_gelu_fwd<<<g, 256, 0, st>>>(y, inp, n);
    else if (act == CT_ACT16_GEGLU)
        k_glu_fwd<true><<<g, 256, 0, st>>>(y, inp, N, F);
    else
        k_glu_fwd<false><<<g, 256, 0, st>>>(y, inp, N, F);
    cuda_launched(be, "mlp_act_forward_out16");
}

extern "C" void ct_gelu_forward_cuda(ct_backend *be, float *out, const float *inp, size_t n) {
    if (!n) return;
    k_gelu_fwd<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(out, inp, n);
    cuda_launched(be, "gelu_forward");
}
extern "C" void ct_gelu_backward_cuda(ct_backend *be, float *dinp, const float *inp,
                                      const float *dout, size_t n) {
    if (!n) return;
    k_gelu_bwd<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(dinp, inp, dout, n);
    cuda_launched(be, "gelu_backward");
}

/* ------------------------------------------------------------ residual */

extern "C" void ct_residual_forward_cuda(ct_backend *be, float *out, const float *a,
                                         const float *b, size_t n) {
    if (!n) return;
    k_residual_fwd<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(out, a, b, n);
    cuda_launched(be, "residual_forward");
}
extern "C" void ct_residual_backward_cuda(ct_backend *be, float *da, float *db, const float *dout,
                                          size_t n) {
    if (!n) return;
    k_residual_bwd<<<cuda_grid(n, 256), 256, 0, cuda_stream(be)>>>(da, db, dout, n);
    cuda_launched(be, "residual_backward");
}

/* ------------------------------------------------------------ cross-entropy */

/* k_crossentropy (cuda_xent.cuh): one block per row, an online softmax in
 * fp32, then the gradient. */
extern "C" void ct_crossentropy_forward_cuda(ct_backend *be, float *losses, float *dlogits,
                                             const float *logits, const int32_t *targets, int N,
                                             int V, float dloss) {
    if (N <= 0) return;
    k_crossentropy<<<N, XENT_THREADS, 0, cuda_stream(be)>>>(losses, dlogits, logits, targets, V, dloss);
    cuda_launched(be, "crossentropy_forward");
}

/* The bf16 head's loss: k_crossentropy_bf16 over logits16 (N, rows ld
 * apart), its bf16 gradient written in place or into dlogits16. */
extern "C" void ct_crossentropy_forward_bf16_cuda(ct_backend *be, float *losses,
                                                  uint16_t *dlogits16, const uint16_t *logits16,
                                                  int ld, const int32_t *targets, int N, int V,
                                                  float dloss) {
    if (N <= 0) return;
    k_crossentropy_bf16<<<N, XENT_THREADS, 0, cuda_stream(be)>>>(
        losses, (__nv_bfloat16 *)dlogits16, (const __nv_bfloat16 *)logits16, ld, targets, V,
        dloss);
    cuda_launched(be, "crossentropy_forward_bf16");
}
