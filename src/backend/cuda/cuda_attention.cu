/*
 * The CUDA backend's causal attention, the ref backend's algorithm on a warp
 * per row: no T x T matrix, an online softmax per query row with the
 * log-sum-exp saved, the backward recomputing the probabilities from it.
 * Forward: a warp per (b, h, t) walks keys [t - pos, t] (pos: packed
 * examples; none: [0, t]). Backward, without atomics: a warp per query row
 * sums dq over its keys; a warp per key row of a KV head sums dk, dv over the
 * queries that saw it, query heads of its group in order, then queries in
 * order, as ref does (cuda_attention_rows.cuh). All in fp32 (a fixed
 * warp-reduction order), D = rowsum(dout o out) summed in double and read
 * as a float. Dropout of the probabilities redraws ref's mask from its key. These row kernels take any head size up to 1024 and
 * dropout; the tiled kernels below (key or query tiles in shared memory, a
 * row per thread) run the common case, head size 32 or 64 without dropout.
 * These are the exact kernels of every fp32 run; precision bf16's entries
 * (cuda_flash.cu) run tensor-core tiles where they can and fall back here.
 * CT_CUDA_ATTENTION=rows forces the row kernels in both, =fp32 keeps bf16
 * runs on these kernels too.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_attention_tiled.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_attention_rows.cuh"

/* Head sizes the row kernels take: MAXK elements per lane, a template
 * parameter (8 up to 256, 16 up to 512, 32 up to 1024). */
#define ATT_HS_MAX 1024
/* Launches kernel<MAXK> for head size HS (at most ATT_HS_MAX). */
#define ATT_LAUNCH(kernel, HS, grid, block, stream, ...)                      \
    do {                                                                      \
        if ((HS) <= 256) kernel<8><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);  \
        else if ((HS) <= 512) kernel<16><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__); \
        else kernel<32><<<(grid), (block), 0, (stream)>>>(__VA_ARGS__);       \
    } while (0)
int cuda_attention_mode(void) {
    static int mode = -1; /* the environment's word, read once */
    if (mode < 0) {
        const char *e = getenv("CT_CUDA_ATTENTION");
        mode = !e ? CUDA_ATT_AUTO
               : !strcmp(e, "rows") ? CUDA_ATT_ROWS
               : !strcmp(e, "fp32") ? CUDA_ATT_FP32
               : !strcmp(e, "wmma") ? CUDA_ATT_WMMA
               : !strcmp(e, "mma1") ? CUDA_ATT_MMA1
                                    : CUDA_ATT_AUTO;
    }
    return mode;
}

/* Whether the tiled kernels run this call: head size 32 or 64, no dropout,
 * 16-byte aligned operands (their rows are read as float4), a grid within
 * limits, and not forced off (CT_CUDA_ATTENTION=rows). */
static bool tiled_ok(const ct_attn_dropout *drop, int B, int NH, int HS, const void *a,
                     const void *b) {
    return cuda_attention_mode() != CUDA_ATT_ROWS && (!drop || drop->p == 0.0f) &&
           (HS == 32 || HS == 64) && B <= 65535 && NH <= 65535 &&
           !(((uintptr_t)a | (uintptr_t)b) & 15);
}

template <int HS>
static void fwd_tiled(ct_backend *be, float *out, float *lse, const float *qkv,
                      const int32_t *pos, int B, int T, int NH, int NKV) {
    dim3 grid((unsigned)((T + TILE_ROWS - 1) / TILE_ROWS), (unsigned)NH, (unsigned)B);
    k_attn_fwd_tiled<HS><<<grid, TILE_ROWS, 0, cuda_stream(be)>>>(out, lse, qkv, pos, T, NH, NKV);
}

template <int HS>
static void bwd_tiled(ct_backend *be, float *dqkv, const float *dout, const float *qkv,
                      const float *lse, const double *D, const int32_t *pos, int B, int T,
                      int NH, int NKV) {
    cudaStream_t st = cuda_stream(be);
    dim3 gq((unsigned)((T + TILE_ROWS - 1) / TILE_ROWS), (unsigned)NH, (unsigned)B);
    k_attn_dq_tiled<HS><<<gq, TILE_ROWS, 0, st>>>(dqkv, dout, qkv, lse, D, pos, T, NH, NKV);
    dim3 gk((unsigned)((T + DKV_ROWS - 1) / DKV_ROWS), (unsigned)NKV, (unsigned)B);
    k_attn_dkv_tiled<HS><<<gk, DKV_ROWS, 0, st>>>(dqkv, dout, qkv, lse, D, pos, T, NH, NKV);
}

extern "C" void ct_attention_forward_cuda(ct_backend *be, float *out, float *lse,
                                          const float *qkv, const int32_t *pos,
                                          const ct_attn_dropout *drop, int B, int T, int NH,
                                          int NKV, int HS) {
    size_t rows = (size_t)B * NH * T;
    if (!rows) return;
    if (HS > ATT_HS_MAX) {
        cuda_latch(be, 2000, "attention_forward", "head size over 1024 is not supported");
        return;
    }
    if (tiled_ok(drop, B, NH, HS, qkv, out)) {
        if (HS == 32) fwd_tiled<32>(be, out, lse, qkv, pos, B, T, NH, NKV);
        else fwd_tiled<64>(be, out, lse, qkv, pos, B, T, NH, NKV);
        cuda_launched(be, "attention_forward");
        return;
    }
    ct_attn_dropout d = drop ? *drop : ct_attn_dropout{0.0f, 0, 0};
    ATT_LAUNCH(k_attn_fwd, HS, (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS), 32 * ATT_WARPS,
               cuda_stream(be), out, lse, qkv, pos, d, B, T, NH, NKV, HS);
    cuda_launched(be, "attention_forward");
}

const double *cuda_attention_D(ct_backend *be, const float *dout, const float *out, int B,
                               int T, int NH, int HS) {
    cuda_state *s = cuda_st(be);
    size_t rows = (size_t)B * NH * T;
    if (!cuda_workspace(be, (void **)&s->att_ws, &s->att_ws_bytes, rows * sizeof(double),
                        "attention workspace"))
        return NULL;
    k_attn_D<<<(unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS), 32 * ATT_WARPS, 0,
               cuda_stream(be)>>>(s->att_ws, dout, out, B, T, NH, HS);
    return s->att_ws;
}

extern "C" void ct_attention_backward_cuda(ct_backend *be, float *dqkv, const float *dout,
                                           const float *qkv, const float *out, const float *lse,
                                           const int32_t *pos, const ct_attn_dropout *drop,
                                           int B, int T, int NH, int NKV, int HS) {
    cuda_state *s = cuda_st(be);
    size_t rows = (size_t)B * NH * T, kv_rows = (size_t)B * NKV * T;
    if (!rows) return;
    if (HS > ATT_HS_MAX) {
        cuda_latch(be, 2000, "attention_backward", "head size over 1024 is not supported");
        return;
    }
    if (!cuda_attention_D(be, dout, out, B, T, NH, HS)) return;
    ct_attn_dropout d = drop ? *drop : ct_attn_dropout{0.0f, 0, 0};
    unsigned blocks = (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS);
    cudaStream_t st = cuda_stream(be);
    if (tiled_ok(drop, B, NH, HS, qkv, dout)) {
        if (HS == 32) bwd_tiled<32>(be, dqkv, dout, qkv, lse, s->att_ws, pos, B, T, NH, NKV);
        else bwd_tiled<64>(be, dqkv, dout, qkv, lse, s->att_ws, pos, B, T, NH, NKV);
        cuda_launched(be, "attention_backward");
        return;
    }
    ATT_LAUNCH(k_attn_dq, HS, blocks, 32 * ATT_WARPS, st, dqkv, dout, qkv, lse, s->att_ws, pos,
               d, B, T, NH, NKV, HS);
    ATT_LAUNCH(k_attn_dkv, HS, (unsigned)((kv_rows + ATT_WARPS - 1) / ATT_WARPS), 32 * ATT_WARPS,
               st, dqkv, dout, qkv, lse, s->att_ws, pos, d, B, T, NH, NKV, HS);
    cuda_launched(be, "attention_backward");
}

extern "C" void ct_attention_decode_cuda(ct_backend *be, float *out, const float *q,
                                         const float *kcache, const float *vcache, int n, int NH,
                                         int NKV, int HS) {
    if (n <= 0 || NH <= 0) return;
    if (HS > ATT_HS_MAX) {
        cuda_latch(be, 2000, "attention_decode", "head size over 1024 is not supported");
        return;
    }
    ATT_LAUNCH(k_attn_decode, HS, (NH + ATT_WARPS - 1) / ATT_WARPS, 32 * ATT_WARPS,
               cuda_stream(be), out, q, kcache, vcache, n, NH, NKV, HS);
    cuda_launched(be, "attention_decode");
}
