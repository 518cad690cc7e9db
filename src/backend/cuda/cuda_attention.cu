/*
 * The CUDA backend's causal attention, the ref backend's algorithm on a warp
 * per row: no T x T matrix, an online softmax per query row with the
 * log-sum-exp saved, the backward recomputing the probabilities from it.
 * Forward: a warp per (b, h, t) walks keys [t - pos, t] (pos: packed
 * examples; none: [0, t]). Backward, without atomics: a warp per query row
 * sums dq over its keys; a warp per key row of a KV head sums dk, dv over the
 * queries that saw it, query heads of its group in order, then queries in
 * order, as ref does. Dot products in fp32 (a fixed warp-reduction order),
 * softmax statistics in double. Dropout of the probabilities redraws ref's
 * mask from its key. These row kernels take any head size up to 1024 and
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
#define ATT_WARPS 4

/* ct_attn_drop_mult (backend.h, compiled for the device); 1 without dropout. */
__device__ inline float drop_mult(const ct_attn_dropout &d, int b, int h, int i, int j, int NH,
                                  int T) {
    return ct_attn_drop_mult(&d, b, h, i, j, NH, T);
}

/* The dot product of two HS-vectors, lanes striding over it; every lane
 * gets the sum. */
__device__ inline float warp_dot(const float *a, const float *b, int HS) {
    float acc = 0.0f;
    for (int d = threadIdx.x & 31; d < HS; d += 32) acc += a[d] * b[d];
    return warp_sum(acc);
}

/* One query row against n keys and values kv_stride floats apart: writes
 * out (HS) and returns the log-sum-exp (ref's attention_row). */
template <int ATT_MAXK>
__device__ float attn_row(float *out, const float *q, const float *k, const float *v,
                          size_t kv_stride, int n, int HS, double scale, ct_attn_dropout drop,
                          int b, int h, int i, int j0, int NH, int T) {
    int lane = threadIdx.x & 31;
    float acc[ATT_MAXK];
    double m = scale * warp_dot(q, k, HS), l = 1.0;
    float mk = drop_mult(drop, b, h, i, j0, NH, T);
    for (int kk = 0, d = lane; kk < ATT_MAXK; kk++, d += 32) acc[kk] = d < HS ? mk * v[d] : 0.0f;
    for (int j = 1; j < n; j++) {
        const float *kj = k + j * kv_stride, *vj = v + j * kv_stride;
        double s = scale * warp_dot(q, kj, HS);
        if (s > m) {
            double corr = exp(m - s);
            l *= corr;
            for (int kk = 0; kk < ATT_MAXK; kk++) acc[kk] = (float)(acc[kk] * corr);
            m = s;
        }
        double p = exp(s - m);
        l += p;
        double pm = p * drop_mult(drop, b, h, i, j0 + j, NH, T);
        for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32)
            acc[kk] = (float)(acc[kk] + pm * vj[d]);
    }
    for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32)
        out[d] = (float)(acc[kk] / l);
    return (float)(m + log(l));
}

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
    double scale = 1.0 / sqrt((double)HS);
    float r = attn_row<ATT_MAXK>(out + ((size_t)b * T + t) * C + (size_t)h * HS,
                       qkv_b + (size_t)t * W + (size_t)h * HS, k + (size_t)j0 * W,
                       v + (size_t)j0 * W, W, t + 1 - j0, HS, scale, drop, b, h, t, j0, NH, T);
    if ((threadIdx.x & 31) == 0) lse[((size_t)b * NH + h) * T + t] = r;
}

int cuda_attention_mode(void) {
    static int mode = -1; /* the environment's word, read once */
    if (mode < 0) {
        const char *e = getenv("CT_CUDA_ATTENTION");
        mode = !e ? CUDA_ATT_AUTO
               : !strcmp(e, "rows") ? CUDA_ATT_ROWS
               : !strcmp(e, "fp32") ? CUDA_ATT_FP32
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

/* D (B,NH,T) = rowsum(dout o out), a warp per row, kept in double as ref keeps it. */
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

/* dq of one query row: sum over its keys of scale * ds_j * k_j. */
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
    double scale = 1.0 / sqrt((double)HS), lse_t = lse[row], Dt = D[row];
    float acc[ATT_MAXK];
    for (int kk = 0; kk < ATT_MAXK; kk++) acc[kk] = 0.0f;
    for (int j = attn_first_key(pos, b, T, t); j <= t; j++) {
        const float *k = qkv_b + (size_t)j * W + ko, *v = qkv_b + (size_t)j * W + vo;
        double mk = drop_mult(drop, b, h, t, j, NH, T);
        double p = exp(scale * warp_dot(q, k, HS) - lse_t);
        double ds = p * (mk * warp_dot(dout_t, v, HS) - Dt);
        for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32)
            acc[kk] += (float)(scale * ds * k[d]);
    }
    float *dq = dqkv + (size_t)b * T * W + (size_t)t * W + (size_t)h * HS;
    for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) dq[d] += acc[kk];
}

/* dk, dv of one key row j of KV head g: over the query heads of the group in
 * order, then the queries that saw j (i >= j inside j's example) in order. */
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
    double scale = 1.0 / sqrt((double)HS);
    float dk[ATT_MAXK], dv[ATT_MAXK];
    for (int kk = 0; kk < ATT_MAXK; kk++) dk[kk] = dv[kk] = 0.0f;
    for (int h = g * group; h < (g + 1) * group; h++) {
        for (int i = j; i < T && attn_first_key(pos, b, T, i) <= j; i++) {
            const float *q = qkv_b + (size_t)i * W + (size_t)h * HS;
            const float *dout_i = dout + ((size_t)b * T + i) * C + (size_t)h * HS;
            size_t r = ((size_t)b * NH + h) * T + i;
            double mk = drop_mult(drop, b, h, i, j, NH, T);
            double p = exp(scale * warp_dot(q, k, HS) - (double)lse[r]);
            double ds = p * (mk * warp_dot(dout_i, v, HS) - D[r]);
            double pm = p * mk;
            for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) {
                dk[kk] += (float)(scale * ds * q[d]);
                dv[kk] += (float)(pm * dout_i[d]);
            }
        }
    }
    float *dqkv_j = dqkv + (size_t)b * T * W + (size_t)j * W;
    for (int kk = 0, d = lane; kk < ATT_MAXK && d < HS; kk++, d += 32) {
        dqkv_j[ko + d] += dk[kk];
        dqkv_j[vo + d] += dv[kk];
    }
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

template <int ATT_MAXK>
__global__ void k_attn_decode(float *out, const float *q, const float *kcache,
                              const float *vcache, int n, int NH, int NKV, int HS) {
    int h = blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (h >= NH) return;
    size_t KC = (size_t)NKV * HS, g = (size_t)(h / (NH / NKV)) * HS;
    ct_attn_dropout none = {0.0f, 0, 0};
    attn_row<ATT_MAXK>(out + (size_t)h * HS, q + (size_t)h * HS, kcache + g, vcache + g, KC, n, HS,
             1.0 / sqrt((double)HS), none, 0, h, 0, 0, NH, 1);
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
