/*
 * The CUDA backend's tiled attention kernels (src/backend/cuda/
 * cuda_attention_tiled.cuh), its tensor-core flash attention
 * (cuda_attention_wmma.cuh, WMMA calls done here with plain loops in a
 * scrambled fragment layout), its embedding backward (cuda_encoder_bwd.cuh),
 * its column sums (cuda_colsum.cuh) and its cross-entropy (cuda_xent.cuh) run
 * on the CPU: each CUDA thread of a
 * block is a POSIX thread, __shared__ arrays are the kernel's statics (one block runs at
 * a time), __syncthreads is a barrier. That checks what can go wrong without
 * a GPU in sight — the index arithmetic, the causal and packed-row masks, the
 * tile loops and their ragged ends, the barriers' placement (a thread that
 * skips one deadlocks here) — against a double-precision reference of the
 * forward (out, lse) and backward (dq, dk, dv, accumulated onto what dqkv
 * held), for GQA and MHA, head sizes 32 and 64, packed rows. It does not check
 * what only a GPU shows (timing, memory coalescing, launch limits): the gpu_*
 * tests do that on one. The column sums (a bias's, LayerNorm's and RMSNorm's
 * parameter gradients) are checked against one double sum over the rows, as
 * ref sums them, for row counts around the chunk count. The flash kernels are
 * held to the double reference on bf16-rounded inputs within bf16's own error
 * (head sizes 64 and 128, GQA, packed rows); the embedding backward must equal
 * ref's loop bit for bit (long runs of one token, several merge passes,
 * packed positions). The norm forwards (cuda_norm.cuh), fused with the
 * residual add or not, are held to a double reference within fp32's rounding,
 * and fused to unfused bit for bit. The q/k norms (cuda_qknorm.cuh), forward
 * and backward, are held to ref's own kernels (linked from libctrain) within
 * fp32's rounding of each head's largest value, the v heads copied exactly,
 * the weight gradients within 1e-6 and in place equal to out of place.
 * The fp32 activations (cuda_act.cuh: GELU, GeGLU, SwiGLU, forward and
 * backward) are held within 8 ulp of exact values and of ref's kernels over
 * [-20, 20], zeros, subnormals, huge values and infinities; the norms' input
 * gradients (cuda_norm.cuh) to ref's within fp32's rounding of the row's
 * largest value; RoPE (cuda_rope.cuh, with the CPU's sincosf standing in for
 * CUDA's) to ref's, forward and backward, at positions up to 4 million;
 * the row attention kernels (cuda_attention_rows.cuh: head sizes 96 and 300,
 * dropout, decode) to ref's as the tiled ones are held, with D from its
 * k_attn_D (held to a double sum first). The bf16 head's
 * cross-entropy (k_crossentropy_bf16: bf16 logits in padded rows) is held to
 * ref's entry: losses within 1e-6, gradients within 1 bf16 ulp, the pad
 * columns untouched. The small kernels (cuda_small.cuh): fused AdamW equals
 * ref's bit for bit (its scalars from adamw_scalars_of, as the launcher forms
 * them), the sums' partials over ragged chunks equal one double sum, and their
 * device finish adds them in the host's order; the non-finite count, the
 * dropout masks and scale and the strided scale-add equal backend.h's
 * definitions; the bf16 conversions equal core/dtype.c's bits (NaN, ties,
 * subnormals). The embedding forward (cuda_elementwise.cuh) equals ref's.
 *
 * usage: cuda_emu [flash]   (exit 0: every check passed; "flash": the flash
 * attention checks alone)
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <type_traits>
#include <vector>

/* ------------------------------------------------------------ the CUDA shim */
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float4 {
    float x, y, z, w;
};
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct uint4 {
    unsigned x, y, z, w;
};
struct uint2 {
    unsigned x, y;
};
struct float2 {
    float x, y;
};
static inline float2 make_float2(float a, float b) { return {a, b}; }
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static pthread_barrier_t g_bar;
static bool g_serial = false; /* launch_serial: the block's threads one after another */
static void emu_die(const char *what);
static inline void __syncthreads() {
    if (g_serial) emu_die("__syncthreads in a kernel launched serially");
    pthread_barrier_wait(&g_bar);
}
using std::max;
using std::min;
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

static void emu_die(const char *what) {
    fprintf(stderr, "cuda_emu: %s\n", what);
    abort();
}

/* Rounded fp32 products and sums, never fused (as CUDA's intrinsics); fmaf,
 * expf and sincosf are the C library's (glibc's, within 1 ulp; CUDA's expf
 * and sincosf are within 2). */
static inline float __fmul_rn(float a, float b) {
    volatile float r = a * b;
    return r;
}
static inline float __fadd_rn(float a, float b) {
    volatile float r = a + b;
    return r;
}

/* Warps: a barrier per warp for __syncwarp (a warp of a block whose size is
 * not a multiple of 32 has fewer threads), and __shfl_xor_sync through a
 * slot per lane between two of them. */
#define EMU_WARPS 32
static pthread_barrier_t g_warp_bar[EMU_WARPS];
static float g_shfl[EMU_WARPS][32];
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    pthread_barrier_wait(&g_warp_bar[threadIdx.x / 32]);
}
static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
    g_shfl[w][l] = v;
    __syncwarp(mask);
    float r = g_shfl[w][l ^ (unsigned)lane_mask];
    __syncwarp(mask);
    return r;
}

/* 8-byte shuffles (doubles, 64-bit counts) through their own slots. */
static uint64_t g_shfl64[EMU_WARPS][32];
template <typename T> static inline T shfl_xor8(unsigned mask, T v, int lane_mask) {
    static_assert(sizeof(T) == 8, "8-byte values only");
    unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
    memcpy(&g_shfl64[w][l], &v, 8);
    __syncwarp(mask);
    T r;
    memcpy(&r, &g_shfl64[w][l ^ (unsigned)lane_mask], 8);
    __syncwarp(mask);
    return r;
}
static inline double __shfl_xor_sync(unsigned mask, double v, int lane_mask) {
    return shfl_xor8(mask, v, lane_mask);
}
static inline unsigned long long __shfl_xor_sync(unsigned mask, unsigned long long v,
                                                 int lane_mask) {
    return shfl_xor8(mask, v, lane_mask);
}
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
/* A float's bits and back. */
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Correctly rounded division and square root, as CUDA's _rn intrinsics. */
static inline float __fdiv_rn(float a, float b) {
    volatile float r = a / b;
    return r;
}
static inline float __fsqrt_rn(float a) {
    volatile float r = sqrtf(a);
    return r;
}

/* bf16: core/dtype.c's rounding (nearest even, NaN kept quiet), as
 * __float2bfloat16_rn rounds. */
struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) r = (u >> 16) | 0x0040u;
    return {(uint16_t)r};
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return {__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
static inline float bf16_float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float bf16_round(float f) { return bf16_float(__float2bfloat16_rn(f)); }
static inline float __bfloat162float(__nv_bfloat16 b) { return bf16_float(b); }

/* WMMA, 16 x 16 x 16, with plain loops. Its fragment layout is unspecified;
 * here every lane holds the whole tile (num_elements 256), element e being
 * entry emu_slot(e) of the row-major tile, a scrambled order, so a kernel
 * that assumed some layout reads the wrong entries. Loads and mma_sync run
 * in every lane; store_matrix_sync writes from lane 0 only, so a lane that
 * reads what it stored without a __syncwarp between races, as on a GPU.
 * Pointers must be 32-byte aligned and ldm a multiple of 16 bytes (what
 * the hardware requires): anything else aborts. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
static inline int emu_slot(int e) { return (e * 97 + 13) & 255; }
template <typename Use, int M, int N, int K, typename T, typename L = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16 x 16 x 16 only");
    enum { num_elements = 256 };
    T x[256];
};
static inline float emu_f(float v) { return v; }
static inline float emu_f(__nv_bfloat16 v) { return bf16_float(v); }
static inline void emu_check(const void *p, unsigned ldm, size_t elem) {
    if ((uintptr_t)p % 32) emu_die("wmma: pointer not 256-bit aligned");
    if (ldm * elem % 16) emu_die("wmma: ldm not a multiple of 16 bytes");
}
/* matrix_a (m, k) / matrix_b (k, n): entry (r, c) at p[r*ldm + c] row-major */
template <typename U, typename L, typename T>
static void load_matrix_sync(fragment<U, 16, 16, 16, T, L> &f, const T *p, unsigned ldm) {
    emu_check(p, ldm, sizeof(T));
    bool row = std::is_same<L, row_major>::value;
    for (int e = 0; e < 256; e++) {
        int s = emu_slot(e), r = s / 16, c = s % 16;
        f.x[e] = row ? p[r * ldm + c] : p[c * ldm + r];
    }
}
static void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t l) {
    emu_check(p, ldm, 4);
    for (int e = 0; e < 256; e++) {
        int s = emu_slot(e), r = s / 16, c = s % 16;
        f.x[e] = l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
    }
}
static void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t l) {
    emu_check(p, ldm, 4);
    if (threadIdx.x % 32) return;
    for (int e = 0; e < 256; e++) {
        int s = emu_slot(e), r = s / 16, c = s % 16;
        (l == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
    }
}
template <typename U, typename T, typename L>
static void fill_fragment(fragment<U, 16, 16, 16, T, L> &f, float v) {
    for (int e = 0; e < 256; e++) f.x[e] = v;
}
/* d = a b + c, products exact (bf16 x bf16 fits a float), sums in fp32 */
template <typename LA, typename LB>
static void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
    float A[256], Bm[256], Cm[256];
    for (int e = 0; e < 256; e++) {
        A[emu_slot(e)] = emu_f(a.x[e]);
        Bm[emu_slot(e)] = emu_f(b.x[e]);
        Cm[emu_slot(e)] = c.x[e];
    }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float acc = Cm[r * 16 + n];
            for (int k = 0; k < 16; k++) acc += A[r * 16 + k] * Bm[k * 16 + n];
            Cm[r * 16 + n] = acc;
        }
    for (int e = 0; e < 256; e++) d.x[e] = Cm[emu_slot(e)];
}
} // namespace wmma
} // namespace nvcuda

/* The dynamic shared memory of the kernels that take it (one block runs at a
 * time): its first g_smem_fill bytes (the kernel's size) are refilled with
 * 0xff (NaN as a float or a bf16) before every block, so a read of what the
 * block never wrote shows; the rest holds a canary that a write past the
 * kernel's size breaks (checked after every block). */
alignas(128) static unsigned char g_smem[160 * 1024];
static size_t g_smem_fill = 0; /* the kernel's bytes; 0: no dynamic shared memory */
static void smem_prepare() {
    memset(g_smem, 0xff, g_smem_fill);
    memset(g_smem + g_smem_fill, 0xa5, sizeof g_smem - g_smem_fill);
}
static void smem_check() {
    for (size_t k = g_smem_fill; k < sizeof g_smem; k++)
        if (g_smem[k] != 0xa5) emu_die("a write past the kernel's dynamic shared memory");
}

/* cuda_mma.cuh's primitives (mma.sync m16n8k16, ldmatrix, quad reductions)
 * in PTX's documented register layouts, which the kernels rely on. The tile
 * loads read what the lane's registers hold straight from shared memory (the
 * tile is passed warp-uniform); the product and the reductions are warp
 * collectives: each lane leaves its registers in a slot, one __syncwarp, then
 * reads the others'. Slots alternate between two sets, so a lane that runs
 * ahead to the next collective never overwrites what a slower one still
 * reads (the collective after that waits for it at the barrier between).
 * Products are exact (bf16 x bf16 fits a float), sums in fp32 in k's order. */
typedef __nv_bfloat16 fa_bf16;
static thread_local unsigned g_coll; /* this lane's collectives so far (threads live a block) */
struct emu_mma_slot {
    uint32_t a[4], b[16][2];
};
static emu_mma_slot g_mma[2][EMU_WARPS][32];
static float g_quad[2][EMU_WARPS][32][2];
static inline uint32_t emu_bits(fa_bf16 v) { return v.bits; }
static inline float emu_half(uint32_t r, int hi) { return bf16_float({(uint16_t)(r >> (16 * hi))}); }
static inline uint32_t fa_pack(float lo, float hi) {
    return __float2bfloat16_rn(lo).bits | (uint32_t)__float2bfloat16_rn(hi).bits << 16;
}
static void emu_ldsm_check(const fa_bf16 *p, int ld) {
    if ((uintptr_t)p % 16 || ld % 8) emu_die("ldmatrix: a row not 16-byte aligned");
    if ((const unsigned char *)p < g_smem || (const unsigned char *)p >= (g_smem + sizeof g_smem))
        emu_die("ldmatrix: not the dynamic shared memory");
}
/* A: a[i] = (row g + 8 (i&1), columns 2t + 8 (i>>1), +1) */
static void fa_ldsm_a(uint32_t a[4], const fa_bf16 *p, int ld) {
    emu_ldsm_check(p, ld);
    int l = threadIdx.x % 32, g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        const fa_bf16 *e = p + (g + 8 * (i & 1)) * ld + 2 * t + 8 * (i >> 1);
        a[i] = emu_bits(e[0]) | emu_bits(e[1]) << 16;
    }
}
/* B from its transpose (row n, column k): b[i] = (row g + 8 (i>>1), columns
 * 2t + 8 (i&1), +1) */
static void fa_ldsm_bt(uint32_t b[4], const fa_bf16 *p, int ld) {
    emu_ldsm_check(p, ld);
    int l = threadIdx.x % 32, g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        const fa_bf16 *e = p + (g + 8 * (i >> 1)) * ld + 2 * t + 8 * (i & 1);
        b[i] = emu_bits(e[0]) | emu_bits(e[1]) << 16;
    }
}
/* B itself (row k, column n), ldmatrix .trans: b[i] = (rows 2t + 8 (i&1) and
 * the next, column g + 8 (i>>1)) */
static void fa_ldsm_bn(uint32_t b[4], const fa_bf16 *p, int ld) {
    emu_ldsm_check(p, ld);
    int l = threadIdx.x % 32, g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        const fa_bf16 *e = p + (2 * t + 8 * (i & 1)) * ld + g + 8 * (i >> 1);
        b[i] = emu_bits(e[0]) | emu_bits(e[ld]) << 16;
    }
}
template <int NT>
static void fa_mma(float (*c)[4], const uint32_t a[4], const uint32_t (*b)[2]) {
    static_assert(NT <= 16, "the emulation's slots hold 16 n8 tiles");
    unsigned w = threadIdx.x / 32, l = threadIdx.x % 32, k = g_coll++ & 1;
    emu_mma_slot &mine = g_mma[k][w][l];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, NT * sizeof b[0]);
    __syncwarp();
    const emu_mma_slot *S = g_mma[k][w];
    int g = l >> 2, t = l & 3;
    for (int n = 0; n < NT; n++)
        for (int e = 0; e < 4; e++) {
            int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
            float acc = c[n][e];
            for (int kk = 0; kk < 16; kk++) {
                float A = emu_half(S[(row % 8) * 4 + (kk % 8) / 2].a[(row >= 8) + 2 * (kk >= 8)],
                                   kk & 1);
                float B = emu_half(S[col * 4 + (kk % 8) / 2].b[n][kk >= 8], kk & 1);
                acc += A * B;
            }
            c[n][e] = acc;
        }
}
static void emu_quad(float v[2], bool sum) {
    unsigned w = threadIdx.x / 32, l = threadIdx.x % 32, k = g_coll++ & 1;
    g_quad[k][w][l][0] = v[0];
    g_quad[k][w][l][1] = v[1];
    __syncwarp();
    const float(*Q)[2] = g_quad[k][w];
    for (int r = 0; r < 2; r++) {
        if (sum) { /* the shuffles' order: (v_l + v_l^1) + (v_l^2 + v_l^3) */
            float s1 = Q[l][r] + Q[l ^ 1][r], s2 = Q[l ^ 2][r] + Q[l ^ 3][r];
            v[r] = s1 + s2;
        } else {
            v[r] = fmaxf(fmaxf(Q[l][r], Q[l ^ 1][r]), fmaxf(Q[l ^ 2][r], Q[l ^ 3][r]));
        }
    }
}
static void fa_quad_max(float v[2]) { emu_quad(v, false); }
static void fa_quad_sum(float v[2]) { emu_quad(v, true); }
/* cp.async: a lane's copies wait in its list until a wait lets them land,
 * so a tile read before its wait (or by a lane before the barrier after the
 * others' waits) reads the NaN fill, or the previous tile. */
struct emu_copy {
    void *dst;
    const void *src;
    bool valid;
};
static thread_local std::vector<emu_copy> g_copies; /* this lane's, oldest first */
static thread_local std::vector<size_t> g_groups;   /* where each committed group ends */
static void fa_cp16(void *dst, const void *src, bool valid) {
    unsigned char *d = (unsigned char *)dst;
    if ((uintptr_t)d % 16 || (valid && (uintptr_t)src % 16))
        emu_die("cp.async: an address not 16-byte aligned");
    if (d < g_smem || d + 16 > g_smem + g_smem_fill)
        emu_die("cp.async: not the kernel's dynamic shared memory");
    g_copies.push_back({dst, src, valid});
}
static void fa_cp_commit() { g_groups.push_back(g_copies.size()); }
template <int N> static void fa_cp_wait() {
    if (g_groups.size() <= (size_t)N) return;
    size_t upto = g_groups[g_groups.size() - 1 - N]; /* the copies of all older groups */
    for (size_t k = 0; k < upto; k++) {
        if (g_copies[k].valid) memcpy(g_copies[k].dst, g_copies[k].src, 16);
        else memset(g_copies[k].dst, 0, 16);
    }
    g_copies.erase(g_copies.begin(), g_copies.begin() + (long)upto);
    g_groups.erase(g_groups.begin(), g_groups.end() - N);
    for (size_t &e : g_groups) e -= upto;
}

extern "C" {
#include "backend/ref/ref.h" /* the references: ref's own kernels; backend.h's dropout */
#include "core/dtype.h"      /* the bf16 rounding the conversions must match */
}

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_attention_rows.cuh"
#include "backend/cuda/cuda_attention_tiled.cuh"
#include "backend/cuda/cuda_attention_wmma.cuh"
#include "backend/cuda/cuda_attention_mma.cuh"
#include "backend/cuda/cuda_colsum.cuh"
#include "backend/cuda/cuda_elementwise.cuh"
#include "backend/cuda/cuda_encoder_bwd.cuh"
#include "backend/cuda/cuda_xent.cuh"
#include "backend/cuda/cuda_norm.cuh"
#include "backend/cuda/cuda_qknorm.cuh"
#include "backend/cuda/cuda_rope.cuh"
#include "backend/cuda/cuda_small.cuh"

/* Runs a kernel without barriers over grid x block on this thread, the
 * block's threads one after another (much faster than a thread each). */
template <typename F> static void launch_serial(dim3 grid, unsigned block, F kernel) {
    gridDim = grid;
    blockDim = dim3(block);
    g_serial = true;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++)
                for (unsigned t = 0; t < block; t++) {
                    blockIdx = dim3(x, y, z);
                    threadIdx = dim3(t);
                    kernel();
                }
    g_serial = false;
}

/* Runs kernel over grid x block, one block at a time, a thread per CUDA thread. */
template <typename F> static void launch(dim3 grid, unsigned block, F kernel) {
    gridDim = grid;
    blockDim = dim3(block);
    pthread_barrier_init(&g_bar, NULL, block);
    unsigned warps = (block + 31) / 32;
    if (warps > EMU_WARPS) emu_die("block over 1024 threads");
    for (unsigned w = 0; w < warps; w++)
        pthread_barrier_init(&g_warp_bar[w], NULL, std::min(32u, block - 32 * w));
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                if (g_smem_fill) smem_prepare();
                std::vector<pthread_t> th(block);
                struct arg {
                    F *k;
                    dim3 b;
                    unsigned t;
                };
                std::vector<arg> args(block);
                for (unsigned t = 0; t < block; t++) {
                    args[t] = {&kernel, dim3(x, y, z), t};
                    pthread_create(&th[t], NULL,
                                   [](void *p) -> void * {
                                       arg *a = (arg *)p;
                                       blockIdx = a->b;
                                       threadIdx = dim3(a->t);
                                       (*a->k)();
                                       return NULL;
                                   },
                                   &args[t]);
                }
                for (unsigned t = 0; t < block; t++) pthread_join(th[t], NULL);
                if (g_smem_fill) smem_check();
            }
    pthread_barrier_destroy(&g_bar);
    for (unsigned w = 0; w < warps; w++) pthread_barrier_destroy(&g_warp_bar[w]);
}

/* ------------------------------------------------------------ the reference */
static int fails = 0;
static double rng_state = 0.5;
static float frand() { /* deterministic, in [-1, 1) */
    rng_state = fmod(rng_state * 9301.0 + 49297.0, 233280.0);
    return (float)(rng_state / 116640.0 - 1.0);
}

/* The attention backward's D (B,NH,T) = rowsum(dout o out), one double sum
 * a row (what cuda_attention_D forms), from dout and out (B,T,NH*HS). */
static std::vector<double> rowsum_D(const std::vector<float> &dout, const std::vector<float> &out,
                                    int B, int T, int NH, int HS) {
    size_t C = (size_t)NH * HS;
    std::vector<double> D((size_t)B * NH * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double d = 0;
                for (int e = 0; e < HS; e++) {
                    size_t k = ((size_t)b * T + i) * C + (size_t)h * HS + e;
                    d += (double)dout[k] * out[k];
                }
                D[((size_t)b * NH + h) * T + i] = d;
            }
    return D;
}

struct shape {
    int B, T, NH, NKV, HS;
    std::vector<int> lens; /* packed example lengths (cycled), empty: none */
};

/* pos[b*T + t]: t's position in its example. */
static std::vector<int32_t> positions(const shape &s) {
    std::vector<int32_t> pos((size_t)s.B * s.T);
    size_t k = 0;
    for (int b = 0; b < s.B; b++) {
        int p = 0, len = s.lens[k++ % s.lens.size()];
        for (int t = 0; t < s.T; t++) {
            if (p == len) p = 0, len = s.lens[k++ % s.lens.size()];
            pos[(size_t)b * s.T + t] = p++;
        }
    }
    return pos;
}

/* Forward and backward in double: out, lse, and dqkv = dL/dqkv for L = sum(out * R). */
static void reference(const shape &s, const float *qkv, const int32_t *pos, const float *R,
                      std::vector<double> &out, std::vector<double> &lse,
                      std::vector<double> &dqkv) {
    int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KC = (size_t)NKV * HS;
    double scale = 1.0 / sqrt((double)HS);
    out.assign((size_t)B * T * C, 0.0);
    lse.assign((size_t)B * NH * T, 0.0);
    dqkv.assign((size_t)B * T * W, 0.0);
    std::vector<double> p(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            for (int i = 0; i < T; i++) {
                int j0 = pos ? i - pos[(size_t)b * T + i] : 0;
                const float *q = qkv + ((size_t)b * T + i) * W + (size_t)h * HS;
                double m = -INFINITY;
                for (int j = j0; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * W + C + (size_t)g * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++) d += (double)q[e] * k[e];
                    p[j] = d * scale;
                    m = std::max(m, p[j]);
                }
                double l = 0;
                for (int j = j0; j <= i; j++) l += (p[j] = exp(p[j] - m));
                for (int j = j0; j <= i; j++) p[j] /= l;
                lse[((size_t)b * NH + h) * T + i] = m + log(l);
                double *o = &out[((size_t)b * T + i) * C + (size_t)h * HS];
                const float *r = R + ((size_t)b * T + i) * C + (size_t)h * HS;
                double D = 0;
                for (int j = j0; j <= i; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * W + C + KC + (size_t)g * HS;
                    for (int e = 0; e < HS; e++) o[e] += p[j] * v[e];
                }
                for (int e = 0; e < HS; e++) D += o[e] * r[e];
                for (int j = j0; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * W + C + (size_t)g * HS;
                    const float *v = k + KC;
                    double *dk = &dqkv[((size_t)b * T + j) * W + C + (size_t)g * HS];
                    double *dv = dk + KC;
                    double *dq = &dqkv[((size_t)b * T + i) * W + (size_t)h * HS];
                    double dp = 0;
                    for (int e = 0; e < HS; e++) dp += (double)r[e] * v[e];
                    double ds = p[j] * (dp - D) * scale;
                    for (int e = 0; e < HS; e++) {
                        dv[e] += p[j] * r[e];
                        dk[e] += ds * q[e];
                        dq[e] += ds * k[e];
                    }
                }
            }
        }
}

/* max |got - want| / max |want| */
static double err(const float *got, const std::vector<double> &want, double pre = 0.0) {
    double e = 0, m = 0;
    for (size_t k = 0; k < want.size(); k++) {
        double g = (double)got[k] - pre;
        if (!(fabs(g - want[k]) <= e)) e = isnan(g) ? INFINITY : fabs(g - want[k]);
        m = std::max(m, fabs(want[k]));
    }
    return e / (m > 0 ? m : 1);
}

template <int HS> static void check(const shape &s) {
    int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
    std::vector<float> qkv((size_t)B * T * W), R((size_t)B * T * C);
    for (auto &x : qkv) x = 2.0f * frand();
    for (auto &x : R) x = frand();
    std::vector<int32_t> pos;
    if (!s.lens.empty()) pos = positions(s);
    const int32_t *pp = pos.empty() ? NULL : pos.data();
    std::vector<double> out_d, lse_d, dqkv_d;
    reference(s, qkv.data(), pp, R.data(), out_d, lse_d, dqkv_d);

    std::vector<float> out((size_t)B * T * C, NAN), lse((size_t)B * NH * T, NAN);
    float *o = out.data(), *ls = lse.data();
    const float *x = qkv.data();
    launch(dim3((T + TILE_ROWS - 1) / TILE_ROWS, NH, B), TILE_ROWS,
           [=]() { k_attn_fwd_tiled<HS>(o, ls, x, pp, T, NH, NKV); });
    /* the backward reads the forward's outputs, as the backend does; D from them */
    std::vector<double> D = rowsum_D(R, out, B, T, NH, HS);
    const float pre = 0.25f; /* dqkv accumulates onto what it held */
    std::vector<float> dqkv((size_t)B * T * W, pre);
    float *dx = dqkv.data();
    const float *r = R.data();
    const double *dd = D.data();
    launch(dim3((T + TILE_ROWS - 1) / TILE_ROWS, NH, B), TILE_ROWS,
           [=]() { k_attn_dq_tiled<HS>(dx, r, x, ls, dd, pp, T, NH, NKV); });
    launch(dim3((T + DKV_ROWS - 1) / DKV_ROWS, NKV, B), DKV_ROWS,
           [=]() { k_attn_dkv_tiled<HS>(dx, r, x, ls, dd, pp, T, NH, NKV); });

    double e_out = err(out.data(), out_d), e_lse = err(lse.data(), lse_d);
    double e_dq = err(dqkv.data(), dqkv_d, pre);
    bool ok = e_out < 2e-6 && e_lse < 2e-6 && e_dq < 2e-5;
    printf("%s B=%d T=%d NH=%d NKV=%d HS=%d%s: out %.2g, lse %.2g, dqkv %.2g\n",
           ok ? "ok  " : "FAIL", B, T, NH, NKV, HS, pp ? " packed" : "", e_out, e_lse, e_dq);
    fails += !ok;
}

/* The tensor-core flash attention (cuda_attention_wmma.cuh) against the
 * double reference on the same bf16-rounded q, k, v and dout: what remains
 * is the kernels' own rounding (P and dS to bf16, fp32 sums), held to
 * tolerances in units of bf16's unit roundoff u = 2^-9 (see main). The
 * error against the unrounded inputs is printed too (all of bf16's cost). */
static const double BF16_U = 1.0 / 512.0;
template <int HS> static void check_fa(const shape &s) {
    int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
    std::vector<float> qkv((size_t)B * T * W), R((size_t)B * T * C);
    for (auto &x : qkv) x = 2.0f * frand();
    for (auto &x : R) x = frand();
    std::vector<float> qkv16(qkv), R16(R);
    for (auto &x : qkv16) x = bf16_round(x);
    for (auto &x : R16) x = bf16_round(x);
    std::vector<int32_t> pos;
    if (!s.lens.empty()) pos = positions(s);
    const int32_t *pp = pos.empty() ? NULL : pos.data();
    std::vector<double> out_d, lse_d, dqkv_d, out_x, lse_x, dqkv_x;
    reference(s, qkv16.data(), pp, R16.data(), out_d, lse_d, dqkv_d);
    reference(s, qkv.data(), pp, R.data(), out_x, lse_x, dqkv_x);

    /* the mma kernels read q, k, v and dout in bf16 (the entries round them
     * into the workspace: core/dtype.c's rounding, as here) */
    std::vector<fa_bf16> qkv_h(qkv.size()), R_h(R.size());
    for (size_t k = 0; k < qkv.size(); k++) qkv_h[k] = __float2bfloat16_rn(qkv[k]);
    for (size_t k = 0; k < R.size(); k++) R_h[k] = __float2bfloat16_rn(R[k]);
    const fa_bf16 *x16 = qkv_h.data(), *r16 = R_h.data();
    /* 0: WMMA; 1: mma.sync with one m16 tile a warp; 2: two (head size 64) */
    for (int mma = 0; mma < (HS == 64 ? 3 : 2); mma++) {
        std::vector<float> out((size_t)B * T * C, NAN), lse((size_t)B * NH * T, NAN);
        float *o = out.data(), *ls = lse.data();
        const float *x = qkv.data();
        unsigned char *sm = g_smem;
        size_t most = std::max(std::max(fa_fwd_smem(HS), std::max(fa_dq_smem(HS), fa_dkv_smem(HS))),
                               std::max(fm_fwd_smem(HS, 2), std::max(fm_dq_smem(HS, 2), fm_dkv_smem(HS))));
        if (most > sizeof g_smem) emu_die("shared memory over the emulation's");
        dim3 gq((T + FA_BQ - 1) / FA_BQ, NH, B), gk((T + FA_BK - 1) / FA_BK, NKV, B);
        dim3 gq2((T + fm_bq(2) - 1) / fm_bq(2), NH, B);
        if (mma == 2) {
            g_smem_fill = fm_fwd_smem(HS, 2);
            launch(gq2, FA_THREADS, [=]() { fm_fwd_body<HS, 2>(sm, o, ls, x16, pp, T, NH, NKV); });
        } else if (mma) {
            g_smem_fill = fm_fwd_smem(HS, 1);
            launch(gq, FA_THREADS, [=]() { fm_fwd_body<HS, 1>(sm, o, ls, x16, pp, T, NH, NKV); });
        } else {
            g_smem_fill = fa_fwd_smem(HS);
            launch(gq, FA_THREADS, [=]() { fa_fwd_body<HS>(sm, o, ls, x, pp, T, NH, NKV); });
        }
        /* D from the fp32 dout and the kernel's out, as cuda_attention_D forms it */
        std::vector<double> D = rowsum_D(R, out, B, T, NH, HS);
        const float pre = 0.25f;
        std::vector<float> dqkv((size_t)B * T * W, pre);
        float *dx = dqkv.data();
        const float *r = R.data();
        const double *dd = D.data();
        if (mma == 2) {
            g_smem_fill = fm_dq_smem(HS, 2);
            launch(gq2, FA_THREADS,
                   [=]() { fm_dq_body<HS, 2>(sm, dx, r16, x16, ls, dd, pp, T, NH, NKV); });
        } else if (mma) {
            g_smem_fill = fm_dq_smem(HS, 1);
            launch(gq, FA_THREADS,
                   [=]() { fm_dq_body<HS, 1>(sm, dx, r16, x16, ls, dd, pp, T, NH, NKV); });
        }
        if (mma) {
            g_smem_fill = fm_dkv_smem(HS);
            launch(gk, FA_THREADS,
                   [=]() { fm_dkv_body<HS>(sm, dx, r16, x16, ls, dd, pp, T, NH, NKV); });
        } else {
            g_smem_fill = fa_dq_smem(HS);
            launch(gq, FA_THREADS, [=]() { fa_dq_body<HS>(sm, dx, r, x, ls, dd, pp, T, NH, NKV); });
            g_smem_fill = fa_dkv_smem(HS);
            launch(gk, FA_THREADS, [=]() { fa_dkv_body<HS>(sm, dx, r, x, ls, dd, pp, T, NH, NKV); });
        }
        g_smem_fill = 0;

        double e_out = err(out.data(), out_d), e_lse = err(lse.data(), lse_d);
        double e_dq = err(dqkv.data(), dqkv_d, pre);
        double x_out = err(out.data(), out_x), x_dq = err(dqkv.data(), dqkv_x, pre);
        bool ok = e_out < 2 * BF16_U && e_lse < 1e-5 && e_dq < 4 * BF16_U;
        printf("%s %s B=%d T=%d NH=%d NKV=%d HS=%d%s: out %.2g, lse %.2g, dqkv %.2g "
               "(vs fp32 inputs: out %.2g, dqkv %.2g)\n",
               ok ? "ok  " : "FAIL", mma == 2 ? "mma2" : mma ? "mma1" : "wmma", B, T, NH, NKV, HS,
               pp ? " packed" : "",
               e_out, e_lse, e_dq, x_out, x_dq);
        fails += !ok;
    }
}

/* The two-pass column sums of one kind against ref's terms summed in double. */
static void check_colsum(int kind, int N, int C, int chunks_given = 0) {
    std::vector<float> dout((size_t)N * C), inp((size_t)N * C), mean(N), rstd(N);
    for (auto &x : dout) x = frand();
    for (auto &x : inp) x = 3.0f * frand();
    for (auto &x : mean) x = frand();
    for (auto &x : rstd) x = 1.5f + frand();
    std::vector<double> w0(C, 0.0), w1(C, 0.0);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            if (kind == COLSUM_BIAS) {
                w0[c] += dout[i];
            } else if (kind == COLSUM_LAYERNORM) {
                w0[c] += (inp[i] - (double)mean[n]) * rstd[n] * dout[i];
                w1[c] += dout[i];
            } else {
                w0[c] += (double)inp[i] * rstd[n] * dout[i];
            }
        }
    /* the backend's rule, or a count given (the emulation's time goes by blocks:
     * chunks x column blocks) */
    int chunks = chunks_given > 0 ? chunks_given : colsum_chunks(N, C);
    std::vector<double> p0((size_t)chunks * C, NAN), p1((size_t)chunks * C, NAN);
    const float pre = 0.5f;
    std::vector<float> o0(C, pre), o1(C, pre);
    double *a = p0.data(), *b = p1.data();
    const float *d = dout.data(), *x = inp.data(), *m = mean.data(), *r = rstd.data();
    float *q0 = o0.data(), *q1 = o1.data();
    dim3 grid((C + COLSUM_THREADS - 1) / COLSUM_THREADS, chunks);
    if (kind == COLSUM_BIAS)
        launch(grid, COLSUM_THREADS, [=]() {
            k_colsum_part<COLSUM_BIAS>(a, NULL, d, NULL, NULL, NULL, N, C, chunks); });
    else if (kind == COLSUM_LAYERNORM)
        launch(grid, COLSUM_THREADS, [=]() {
            k_colsum_part<COLSUM_LAYERNORM>(a, b, d, x, m, r, N, C, chunks); });
    else
        launch(grid, COLSUM_THREADS, [=]() {
            k_colsum_part<COLSUM_RMSNORM>(a, NULL, d, x, NULL, r, N, C, chunks); });
    bool two = kind == COLSUM_LAYERNORM;
    launch(dim3(grid.x), COLSUM_THREADS,
           [=]() { k_colsum_add(q0, two ? q1 : NULL, a, b, C, chunks); });
    double e = err(o0.data(), w0, pre), e1 = two ? err(o1.data(), w1, pre) : 0.0;
    bool untouched = two || std::all_of(o1.begin(), o1.end(), [=](float v) { return v == pre; });
    bool ok = e < 1e-6 && e1 < 1e-6 && untouched;
    printf("%s column sums kind %d N=%d C=%d (%d chunks): %.2g %.2g\n", ok ? "ok  " : "FAIL", kind,
           N, C, chunks, e, e1);
    fails += !ok;
}

/* The bias's column sum fused with dout's bf16 copy (k_colsum_bias_copy16,
 * the mixed-precision backward's pass) against the plain COLSUM_BIAS pass
 * and core/dtype.c's rounding: the same sums bit for bit, every copy the
 * nearest-even bf16 of its fp32 value. */
static void check_colsum_copy16(int N, int C) {
    std::vector<float> dout((size_t)N * C);
    for (auto &x : dout) x = 4.0f * frand();
    int chunks = colsum_chunks(N, C);
    std::vector<double> pa((size_t)chunks * C, NAN), pb((size_t)chunks * C, NAN);
    std::vector<__nv_bfloat16> copy((size_t)N * C, __nv_bfloat16{0x7fa5});
    const float pre = 0.5f;
    std::vector<float> oa(C, pre), ob(C, pre);
    double *a = pa.data(), *b = pb.data();
    float *qa = oa.data(), *qb = ob.data();
    const float *d = dout.data();
    __nv_bfloat16 *cp = copy.data();
    dim3 grid((C + COLSUM_THREADS - 1) / COLSUM_THREADS, chunks);
    launch(grid, COLSUM_THREADS, [=]() {
        k_colsum_part<COLSUM_BIAS>(a, NULL, d, NULL, NULL, NULL, N, C, chunks); });
    launch(dim3(grid.x), COLSUM_THREADS, [=]() { k_colsum_add(qa, NULL, a, NULL, C, chunks); });
    launch(grid, COLSUM_THREADS, [=]() { k_colsum_bias_copy16(b, cp, d, N, C, chunks); });
    launch(dim3(grid.x), COLSUM_THREADS, [=]() { k_colsum_add(qb, NULL, b, NULL, C, chunks); });
    bool sums = memcmp(oa.data(), ob.data(), C * sizeof(float)) == 0;
    size_t bad = 0;
    for (size_t i = 0; i < dout.size(); i++) bad += copy[i].bits != ct_f32_to_bf16(dout[i]);
    bool ok = sums && bad == 0;
    printf("%s column sum of a bias with the bf16 copy N=%d C=%d (%d chunks): sums %s, %zu copies "
           "off\n", ok ? "ok  " : "FAIL", N, C, chunks, sums ? "the same bits" : "DIFFER", bad);
    fails += !ok;
}

/* The cross-entropy (cuda_xent.cuh) as the backend launches it (a block of
 * XENT_THREADS per row), against a double reference: the loss and the
 * gradient within fp32's rounding, in place over the logits (dlogits ==
 * logits) and into a separate buffer, ignored targets giving 0 and a zero
 * row. scale spreads the logits (large ones make the running max move). */
static void check_xent(int N, int V, float scale, bool in_place) {
    std::vector<float> logits((size_t)N * V), dl((size_t)N * V, NAN), losses(N, NAN);
    std::vector<int32_t> tg(N);
    for (auto &x : logits) x = scale * frand();
    for (int n = 0; n < N; n++) tg[n] = n == 1 ? -1 : (int32_t)((n * 7919 + 3) % V);
    if (V > 3) logits[(size_t)(N - 1) * V + V - 1] = 4.0f * scale; /* a late, largest logit */
    std::vector<double> want_loss(N), want_d((size_t)N * V);
    const float dloss = 0.25f;
    for (int n = 0; n < N; n++) {
        const float *x = &logits[(size_t)n * V];
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < V; i++) mx = std::max(mx, (double)x[i]);
        for (int i = 0; i < V; i++) s += exp(x[i] - mx);
        double lse = mx + log(s);
        want_loss[n] = tg[n] < 0 ? 0.0 : lse - x[tg[n]];
        for (int i = 0; i < V; i++)
            want_d[(size_t)n * V + i] =
                tg[n] < 0 ? 0.0 : (exp(x[i] - lse) - (i == tg[n] ? 1.0 : 0.0)) * dloss;
    }
    float *L = losses.data(), *X = logits.data(), *D = in_place ? logits.data() : dl.data();
    const int32_t *T = tg.data();
    launch(dim3(N), XENT_THREADS, [=]() { k_crossentropy(L, D, X, T, V, dloss); });
    double el = 0, ed = 0;
    for (int n = 0; n < N; n++) {
        double e = fabs(L[n] - want_loss[n]) / std::max(1.0, fabs(want_loss[n]));
        el = isnan(L[n]) ? INFINITY : std::max(el, e);
    }
    for (size_t k = 0; k < want_d.size(); k++) {
        double e = fabs(D[k] - want_d[k]);
        ed = isnan(D[k]) ? INFINITY : std::max(ed, e);
    }
    bool ok = el < 2e-6 && ed < 3e-7 && L[1] == 0.0f; /* a few ulp of lse, times dloss */
    printf("%s cross-entropy N=%d V=%d scale %g%s: loss %.2g, dlogits %.2g\n", ok ? "ok  " : "FAIL",
           N, V, scale, in_place ? " in place" : "", el, ed);
    fails += !ok;
}

/* The distance of two bf16 values in units in the last place (their bit
 * patterns on one ordered line: -0 and +0 are 0 apart). */
static int bf16_ulps(uint16_t a, uint16_t b) {
    auto line = [](uint16_t x) { return x & 0x8000u ? -(int)(x & 0x7fffu) : (int)x; };
    return abs(line(a) - line(b));
}

/* The bf16 head's cross-entropy (k_crossentropy_bf16) as the backend launches
 * it, against ref's entry (ct_crossentropy_forward_bf16_ref, double sums):
 * bf16 logits in rows ld apart whose pad columns V..ld-1 hold a NaN pattern
 * that must neither be read (a NaN loss) nor written (checked bit for bit),
 * in place (dlogits16 == logits16) or into a separate buffer, row 1's target
 * < 0. The kernel's math is fp32 and ref's double: losses within 1e-6 of
 * max(1, |loss|) (a few fp32 ulp of the log-sum-exp), each gradient within 1
 * bf16 ulp of ref's, since a p that differs in its last fp32 bits may round
 * to the neighbouring bf16 when it sits near a rounding boundary; such flips
 * are rare (about 1e-6 / 2^-8 of the values), so more than 1% of gradients
 * differing at all means a wrong rounding (truncation flips half of them). */
static void check_xent_bf16(int N, int V, int ld, float scale, bool in_place) {
    const uint16_t PAD = 0x7fa5; /* a NaN */
    std::vector<uint16_t> logits((size_t)N * ld, PAD), dl((size_t)N * ld, PAD);
    std::vector<int32_t> tg(N);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < V; i++)
            logits[(size_t)n * ld + i] = __float2bfloat16_rn(scale * frand()).bits;
    for (int n = 0; n < N; n++) tg[n] = n == 1 ? -1 : (int32_t)((n * 7919 + 3) % V);
    if (V > 3) logits[(size_t)(N - 1) * ld + V - 1] = __float2bfloat16_rn(4.0f * scale).bits;
    const float dloss = 0.25f;
    std::vector<uint16_t> want_d(dl);
    std::vector<float> want_loss(N), losses(N, NAN);
    ct_crossentropy_forward_bf16_ref(NULL, want_loss.data(), want_d.data(), logits.data(), ld,
                                     tg.data(), N, V, dloss);
    std::vector<uint16_t> before(logits);
    float *L = losses.data();
    __nv_bfloat16 *X = (__nv_bfloat16 *)logits.data();
    __nv_bfloat16 *D = in_place ? X : (__nv_bfloat16 *)dl.data();
    const int32_t *T = tg.data();
    launch(dim3(N), XENT_THREADS, [=]() { k_crossentropy_bf16(L, D, X, ld, T, V, dloss); });
    const uint16_t *got = in_place ? logits.data() : dl.data();
    double el = 0;
    for (int n = 0; n < N; n++) {
        double e = fabs(L[n] - want_loss[n]) / std::max(1.0, fabs((double)want_loss[n]));
        el = isnan(L[n]) ? INFINITY : std::max(el, e);
    }
    int worst = 0;
    size_t flips = 0, pads_bad = 0;
    for (int n = 0; n < N; n++) {
        for (int i = 0; i < V; i++) {
            size_t k = (size_t)n * ld + i;
            int u = bf16_ulps(got[k], want_d[k]);
            if ((got[k] & 0x7fffu) > 0x7f80u) u = 1 << 20; /* NaN */
            worst = std::max(worst, u);
            flips += u != 0;
        }
        for (int i = V; i < ld; i++)
            pads_bad += logits[(size_t)n * ld + i] != PAD || dl[(size_t)n * ld + i] != PAD;
    }
    if (!in_place) /* the logits stay as they were */
        pads_bad += logits != before;
    bool ok = el < 1e-6 && worst <= 1 && flips <= (size_t)N * V / 100 && pads_bad == 0 &&
              L[1] == 0.0f;
    printf("%s cross-entropy bf16 N=%d V=%d ld=%d scale %g%s: loss %.2g, dlogits %d ulp "
           "(%zu differ), pads %s\n",
           ok ? "ok  " : "FAIL", N, V, ld, scale, in_place ? " in place" : "", el, worst, flips,
           pads_bad ? "WRITTEN" : "untouched");
    fails += !ok;
}

/* The embedding backward (cuda_encoder_bwd.cuh) as the backend launches it,
 * against ref's loop: equal bit for bit (the same additions in the same
 * order). V small gives long runs of one token; lens packs rows. */
static void check_encoder(int B, int T, int C, int V, const std::vector<int> &lens,
                          bool with_wpe) {
    int N = B * T, maxT = T + 3;
    std::vector<int32_t> inp(N), pos;
    for (auto &x : inp) x = (int32_t)((frand() + 1.0f) * 0.5f * V) % V;
    if (N > 100) inp[N / 2] = V - 1, inp[N / 3] = 0; /* both ends of the id range */
    if (!lens.empty()) pos = positions({B, T, 1, 1, 1, lens});
    std::vector<float> dout((size_t)N * C), wte((size_t)V * C), wpe((size_t)maxT * C);
    for (auto &x : dout) x = frand();
    for (auto &x : wte) x = frand();
    for (auto &x : wpe) x = frand();
    std::vector<float> want_te(wte), want_pe(wpe); /* ref's loop */
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            want_te[(size_t)inp[n] * C + c] += dout[(size_t)n * C + c];
            if (with_wpe)
                want_pe[(size_t)(pos.empty() ? n % T : pos[n]) * C + c] += dout[(size_t)n * C + c];
        }
    std::vector<uint64_t> ws(2 * (size_t)N, ~(uint64_t)0);
    float *dte = wte.data(), *dpe = wpe.data();
    const float *d = dout.data();
    /* enc_sort and enc_runs of cuda_kernels.cu */
    auto sort = [&](const int32_t *values) -> const uint64_t * {
        uint64_t *a = ws.data(), *b = ws.data() + N;
        launch(dim3((N + ENC_CHUNK - 1) / ENC_CHUNK), ENC_SORT_THREADS,
               [=]() { k_enc_sort_chunk(a, values, N); });
        for (int w = ENC_CHUNK; w < N; w = w > N / 2 ? N : 2 * w) {
            launch_serial(dim3((N + ENC_MERGE_THREADS - 1) / ENC_MERGE_THREADS),
                          ENC_MERGE_THREADS, [=]() { k_enc_merge(b, a, N, w); });
            std::swap(a, b);
        }
        return a;
    };
    auto runs = [&](float *dw, const uint64_t *keys) {
        int per = enc_run_per(N);
        launch_serial(dim3((C + ENC_SUM_THREADS - 1) / ENC_SUM_THREADS, (N + per - 1) / per),
                      ENC_SUM_THREADS, [=]() { k_enc_run_sum(dw, d, keys, N, C, per); });
    };
    const uint64_t *keys = sort(inp.data());
    bool sorted = true;
    for (int k = 0; k < N; k++) /* every (id, row) once, in order */
        sorted &= k == 0 || keys[k - 1] < keys[k];
    runs(dte, keys);
    if (with_wpe && !pos.empty()) {
        runs(dpe, sort(pos.data()));
    } else if (with_wpe) {
        launch_serial(dim3(4), 64, [=]() { k_enc_pos_sum(dpe, d, B, T, C); });
    }
    bool ok = sorted && !memcmp(wte.data(), want_te.data(), wte.size() * 4) &&
              !memcmp(wpe.data(), want_pe.data(), wpe.size() * 4);
    printf("%s embedding backward B=%d T=%d C=%d V=%d%s%s: %s\n", ok ? "ok  " : "FAIL", B, T, C,
           V, lens.empty() ? "" : " packed", with_wpe ? " +wpe" : "",
           ok ? "equal to ref's bits" : sorted ? "differs from ref" : "keys not sorted");
    fails += !ok;
}

/* The norm forwards' row body (cuda_norm.cuh) as cuda_kernels.cu launches it
 * (a block per row, the row in dynamic shared memory when held, else read
 * back from global memory): LayerNorm (LN) or RMSNorm of res = a + b, against
 * a double reference of the definition (ref's) on the float sums. res must
 * be the float adds themselves (res aliasing a when alias); out, mean and
 * rstd within fp32 rounding of the double values; and the fused launch must
 * equal the unfused body over the stored sums bit for bit (what the model's
 * recomputed norms rely on). Rows get offset means, so a one-pass variance
 * E[x^2] - E[x]^2 in fp32 would fail the tolerance. */
template <bool LN>
static void check_norm(int N, int C, unsigned threads, bool held, bool alias, float eps,
                       float wofs) {
    size_t NC = (size_t)N * C;
    std::vector<float> a(NC), b(NC), w(C), bias(C), sum(NC);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            a[(size_t)n * C + c] = (LN ? 4.0f + n : 0.0f) + frand();
            b[(size_t)n * C + c] = 0.5f * frand();
        }
    for (auto &x : w) x = frand();
    for (auto &x : bias) x = frand();
    for (size_t i = 0; i < NC; i++) sum[i] = a[i] + b[i];
    std::vector<double> want(NC), want_mean(N), want_rstd(N);
    for (int n = 0; n < N; n++) {
        const float *x = sum.data() + (size_t)n * C;
        double mu = 0.0, ss = 0.0;
        if (LN) {
            for (int c = 0; c < C; c++) mu += x[c];
            mu /= C;
        }
        for (int c = 0; c < C; c++) ss += (x[c] - mu) * (x[c] - mu);
        double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++)
            want[(size_t)n * C + c] = LN ? (x[c] - mu) * r * w[c] + bias[c]
                                         : x[c] * r * (double)(wofs + w[c]);
        want_mean[n] = mu;
        want_rstd[n] = r;
    }
    std::vector<float> res(NC, NAN), out(NC, NAN), mean(N, NAN), rstd(N, NAN);
    std::vector<float> out2(NC, NAN), mean2(N, NAN), rstd2(N, NAN), acopy(a);
    float *rp = alias ? acopy.data() : res.data(), *op = out.data(), *mp = mean.data();
    float *sp = rstd.data(), *o2 = out2.data(), *m2 = mean2.data(), *s2 = rstd2.data();
    const float *ap = alias ? acopy.data() : a.data(), *bp = b.data(), *wp = w.data();
    const float *bip = LN ? bias.data() : NULL, *xp = sum.data();
    float *hp = held ? (float *)g_smem : NULL;
    g_smem_fill = held ? (size_t)C * sizeof(float) : 0;
    launch(dim3(N), threads, [=]() {
        norm_row<LN, true>(hp, rp, op, LN ? mp : NULL, sp, ap, bp, wp, bip, C, eps, wofs);
    });
    launch(dim3(N), threads, [=]() {
        norm_row<LN, false>(hp, NULL, o2, LN ? m2 : NULL, s2, xp, NULL, wp, bip, C, eps, wofs);
    });
    /* the bf16 output (the *_out16 entries), fused and not: the fp32 bits rounded */
    std::vector<__nv_bfloat16> o16(NC), o16b(NC);
    std::vector<float> res16(NC, NAN), stat16(2 * (size_t)N, NAN);
    __nv_bfloat16 *y16 = o16.data(), *y16b = o16b.data();
    float *r16 = res16.data(), *st16 = stat16.data();
    const float *a16 = a.data();
    launch(dim3(N), threads, [=]() {
        norm_row<LN, true, __nv_bfloat16>(hp, r16, y16, LN ? st16 : NULL, st16 + N, a16, bp, wp,
                                          bip, C, eps, wofs);
    });
    launch(dim3(N), threads, [=]() {
        norm_row<LN, false, __nv_bfloat16>(hp, NULL, y16b, NULL, NULL, xp, NULL, wp, bip, C, eps,
                                           wofs);
    });
    g_smem_fill = 0;
    bool rounded = !memcmp(r16, sum.data(), NC * sizeof(float)) &&
                   !memcmp(st16 + N, sp, N * sizeof(float));
    for (size_t i = 0; i < NC; i++)
        rounded &= o16[i].bits == ct_f32_to_bf16(op[i]) &&
                   o16b[i].bits == o16[i].bits;
    bool adds = !memcmp(rp, sum.data(), NC * sizeof(float));
    bool same = !memcmp(op, o2, NC * sizeof(float)) && !memcmp(sp, s2, N * sizeof(float)) &&
                (!LN || !memcmp(mp, m2, N * sizeof(float)));
    double eo = err(op, want), er = err(sp, want_rstd), em = LN ? err(mp, want_mean) : 0.0;
    const double tol = 2e-6; /* fp32 statistics: a few ulps */
    bool ok = adds && same && rounded && eo < tol && er < tol && em < tol;
    printf("%s %s N=%d C=%d threads=%u%s%s eps=%g: out %.2g rstd %.2g mean %.2g%s%s%s\n",
           ok ? "ok  " : "FAIL", LN ? "residual+layernorm" : "residual+rmsnorm", N, C, threads,
           held ? " held" : " global", alias ? " res=a" : "", (double)eps, eo, er, em,
           adds ? "" : ", res != a + b", same ? "" : ", fused != unfused bits",
           rounded ? "" : ", bf16 output != the fp32 output rounded");
    fails += !ok;
}

/* max over the q and k heads (HS values at n * W + h * HS) of
 * max |got - want| / max |want| within the head: the error relative to the
 * head's largest value (infinite on NaN). */
static double err_heads(const float *got, const float *want, int N, int NH, int NKV, int HS) {
    size_t W = (size_t)(NH + 2 * NKV) * HS;
    double worst = 0.0;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < NH + NKV; h++) {
            size_t o = (size_t)n * W + (size_t)h * HS;
            double e = 0.0, m = 0.0;
            for (int c = 0; c < HS; c++) {
                double d = fabs((double)got[o + c] - want[o + c]);
                if (!(d <= e)) e = isnan(d) ? INFINITY : d;
                m = std::max(m, fabs((double)want[o + c]));
            }
            worst = std::max(worst, e / (m > 0 ? m : 1));
        }
    return worst;
}

/* Whether the v heads of got and want hold the same bits. */
static bool same_v(const float *got, const float *want, int N, int NH, int NKV, int HS) {
    size_t W = (size_t)(NH + 2 * NKV) * HS, v = (size_t)(NH + NKV) * HS;
    for (int n = 0; n < N; n++)
        if (memcmp(got + n * W + v, want + n * W + v, (size_t)NKV * HS * sizeof(float)))
            return false;
    return true;
}

/* The q/k norms (cuda_qknorm.cuh) as ct_qknorm_forward_cuda and
 * ct_qknorm_backward_cuda launch them, against ref's qknorm_forward and
 * qknorm_backward on the same inputs (the backward from ref's rstd, both):
 * out and dinp within fp32's rounding of each head's largest value, rstd
 * relative to itself, the v heads exact, dwq and dwk (added onto a
 * pre-fill) within 1e-6 of their largest, and the backward in place
 * (dinp == dout) equal to out of place bit for bit. scale sets the inputs'
 * size (small ones with a large eps make eps matter). */
static void check_qknorm(int N, int NH, int NKV, int HS, float eps, float wofs, float scale) {
    int heads = NH + NKV;
    size_t W = (size_t)(NH + 2 * NKV) * HS, n = (size_t)N * W, nr = (size_t)N * heads;
    std::vector<float> inp(n), dout(n), wq(HS), wk(HS);
    for (auto &x : inp) x = scale * frand();
    for (auto &x : dout) x = frand();
    for (auto &x : wq) x = 1.5f * frand();
    for (auto &x : wk) x = 1.5f * frand();
    /* ref */
    std::vector<float> out_r(n, NAN), rstd_r(nr, NAN), dinp_r(n, 7.0f), dwq_r(HS, 0.5f),
        dwk_r(HS, -1.0f);
    ct_qknorm_forward_ref(NULL, out_r.data(), rstd_r.data(), inp.data(), wq.data(), wk.data(), N,
                          NH, NKV, HS, eps, wofs);
    ct_qknorm_backward_ref(NULL, dinp_r.data(), dwq_r.data(), dwk_r.data(), dout.data(),
                           inp.data(), wq.data(), wk.data(), rstd_r.data(), N, NH, NKV, HS, wofs);
    /* the kernels, launched as cuda_kernels.cu launches them */
    std::vector<float> out(n, NAN), rstd(nr, NAN), dinp(n, 7.0f), dwq(HS, 0.5f), dwk(HS, -1.0f);
    std::vector<float> dio(dout); /* in place: dinp == dout */
    std::vector<float> dwq2(HS, 0.5f), dwk2(HS, -1.0f);
    int chunks = colsum_chunks(N, HS);
    std::vector<double> pq((size_t)chunks * HS, NAN), pk((size_t)chunks * HS, NAN);
    float *o = out.data(), *r = rstd.data(), *di = dinp.data(), *dq = dwq.data(), *dk = dwk.data();
    float *ip = dio.data(), *dq2 = dwq2.data(), *dk2 = dwk2.data();
    const float *x = inp.data(), *dy = dout.data(), *q = wq.data(), *k = wk.data();
    const float *rr = rstd_r.data();
    double *a = pq.data(), *b = pk.data();
    dim3 rows((unsigned)((nr + QK_WARPS - 1) / QK_WARPS));
    launch(rows, 32 * QK_WARPS,
           [=]() { k_qknorm_fwd(o, r, x, q, k, N, NH, NKV, HS, eps, wofs); });
    launch_serial(dim3(3), 64, [=]() { k_qknorm_copy_v(o, x, N, NH, NKV, HS); });
    dim3 grid((unsigned)((HS + COLSUM_THREADS - 1) / COLSUM_THREADS), (unsigned)chunks);
    auto backward = [&](float *dst, const float *src, float *gq, float *gk) {
        launch_serial(grid, COLSUM_THREADS,
                      [=]() { k_qknorm_wgrad_part(a, b, src, x, rr, N, NH, NKV, HS, chunks); });
        launch_serial(dim3(grid.x), COLSUM_THREADS,
                      [=]() { k_colsum_add(gq, NULL, a, NULL, HS, chunks); });
        launch_serial(dim3(grid.x), COLSUM_THREADS,
                      [=]() { k_colsum_add(gk, NULL, b, NULL, HS, chunks); });
        launch(rows, 32 * QK_WARPS,
               [=]() { k_qknorm_bwd(dst, src, x, q, k, rr, N, NH, NKV, HS, wofs); });
        if (dst != src)
            launch_serial(dim3(2), 128, [=]() { k_qknorm_copy_v(dst, src, N, NH, NKV, HS); });
    };
    backward(di, dy, dq, dk);
    backward(ip, ip, dq2, dk2);
    double eo = err_heads(o, out_r.data(), N, NH, NKV, HS);
    double er = 0.0;
    for (size_t i = 0; i < nr; i++) {
        double e = fabs((double)r[i] - rstd_r[i]) / rstd_r[i];
        er = isnan(e) ? INFINITY : std::max(er, e);
    }
    double ed = err_heads(di, dinp_r.data(), N, NH, NKV, HS);
    std::vector<double> wq_want(HS), wk_want(HS);
    for (int c = 0; c < HS; c++) wq_want[c] = dwq_r[c] - 0.5, wk_want[c] = dwk_r[c] + 1.0;
    double ewq = err(dq, wq_want, 0.5), ewk = err(dk, wk_want, -1.0);
    bool v_ok = same_v(o, out_r.data(), N, NH, NKV, HS) && same_v(di, dinp_r.data(), N, NH, NKV, HS);
    bool same = !memcmp(ip, di, n * sizeof(float)) && !memcmp(dq2, dq, HS * sizeof(float)) &&
                !memcmp(dk2, dk, HS * sizeof(float));
    const double tol_out = 2e-6, tol_din = 2e-6, tol_w = 1e-6; /* seen: 2.1e-7, 1.4e-7, 0 */
    bool ok = eo < tol_out && er < tol_out && ed < tol_din && ewq < tol_w && ewk < tol_w &&
              v_ok && same;
    printf("%s qknorm N=%d NH=%d NKV=%d HS=%d eps=%g wofs=%g: out %.2g rstd %.2g dinp %.2g "
           "dwq %.2g dwk %.2g%s%s\n",
           ok ? "ok  " : "FAIL", N, NH, NKV, HS, (double)eps, (double)wofs, eo, er, ed, ewq, ewk,
           v_ok ? "" : ", v heads differ", same ? "" : ", in place != out of place");
    fails += !ok;
}

/* ------------------------------------------------------------ activations */

/* |got - want| in units of max(ulp(want), 2^-23 S, 2^-136): ulps of the
 * wanted value, or of the size S of the terms whose cancellation it is (a
 * gradient crossing zero), or an absolute 2^-136 for values below about
 * 1e-34 (subnormal ones included). 0 when both are the same (infinities),
 * infinite when one only is NaN or infinite. */
static double ulps(float got, double want, double S) {
    if (isinf((float)want)) want = (float)want; /* past fp32's range: rounds to inf */
    if ((double)got == want || (isnan(got) && isnan(want))) return 0.0;
    if (isnan(got) || isnan(want) || isinf(got) || isinf(want)) return INFINITY;
    float w = fabsf((float)want);
    double u = (double)nextafterf(w, INFINITY) - w;
    double d = std::max(u, std::max(ldexp(S, -23), ldexp(1.0, -136)));
    return fabs((double)got - want) / d;
}

/* The worst error of one output and the input that gave it. */
struct act_err {
    double e = 0.0;
    float x = 0.0f;
    void add(double v, float at) {
        if (!(v <= e)) e = v, x = at;
    }
};

/* An activation at x in double, to full relative precision where ref's own
 * double loses it (0.5 x (1 + tanh u) cancels for x below -5: at x = -7.2
 * 1 + tanh u is 2.7e-17, under double's ulp of 1): act(x), act'(x), the size
 * S of act'(x)'s terms, and R, ref's own rounding errors in the units of
 * S (2^23 times a few of double's 2^-53 times the terms that cancel in
 * ref's form: 2^-27 of them).
 * GELU: a = 2 beta (x + kappa x^3), s = sigmoid(a), act = x s,
 * act' = s + x s (1 - s) a'; SwiGLU: a = x, a' = 1. */
struct act_exact {
    double y, g, S, R;
};
static act_exact exact_act(double x, bool gelu) {
    double a = gelu ? 2 * CT_GELU_BETA * (x + CT_GELU_KAPPA * x * x * x) : x;
    double da = gelu ? 2 * CT_GELU_BETA * (1.0 + 3.0 * CT_GELU_KAPPA * x * x) : 1.0;
    double s = 1.0 / (1.0 + exp(-a)), sc = 1.0 / (1.0 + exp(a));
    double t = sc == 0.0 || s == 0.0 ? 0.0 : x * s * sc * da; /* 0, not inf * 0, at huge x */
    return {x * s, s + t, s + fabs(t), ldexp(1.0 + fabs(x * da), -27)};
}

/* The inputs: every x in [-20, 20] at a step of 2^-9, then zeros, tiny,
 * subnormal, huge and infinite values of both signs, the gradients' zero
 * crossings, then random values of random sizes (2^-40 to 2^40). */
static std::vector<float> act_inputs() {
    std::vector<float> x;
    for (int k = -20 * 512; k <= 20 * 512; k++) x.push_back((float)k / 512.0f);
    const float special[] = {0.0f, 1e-30f, 1e-40f, 1e-45f, 1.17549435e-38f, 1e-7f, 0.7517916f,
                             1.2784645f, 3.0f, 9.5f, 10.3f, 25.0f, 50.0f, 88.0f, 100.0f, 1e3f,
                             1e10f, 1e13f, 1e20f, 3e38f, INFINITY};
    for (float v : special) x.push_back(v), x.push_back(-v);
    for (int k = 0; k < 20000; k++) x.push_back(ldexpf(frand(), (int)(40.0f * frand())));
    return x;
}

/* One output's errors: against the exact value (e) and against ref's (r,
 * allowing for ref's own rounding R). */
struct act_errs {
    act_err e, r;
    void add(float got, double exact, float ref, double S, double R, float x) {
        if (isfinite(x)) e.add(ulps(got, exact, S), x); /* infinities: ref's NaNs stand */
        r.add(ulps(got, ref, S + R), x);
    }
    bool ok(double tol) const { return e.e <= tol && r.e <= tol; }
};

/* GELU, GeGLU and SwiGLU (cuda_act.cuh) as cuda_kernels.cu launches them (a
 * grid-stride loop) against exact values and against ref's kernels on the
 * same inputs, in ulps (see ulps); the backwards add into zeros, and into a
 * pre-fill must give pre + the same value (added, not written). */
static void check_act() {
    const double tol = 8.0; /* ulps; seen 2.4 to 3.0 (glibc's expf within 1 ulp, CUDA's 2) */
    std::vector<float> xs = act_inputs();
    size_t n = xs.size();
    std::vector<float> dy(n), out(n, NAN), want(n), din(n, 0.0f), din_r(n, 0.0f), pre(n, 0.375f);
    for (auto &v : dy) v = frand();
    const float *x = xs.data(), *d = dy.data();
    float *o = out.data(), *di = din.data(), *dp = pre.data();
    /* GELU */
    ct_gelu_forward_ref(NULL, want.data(), x, n);
    ct_gelu_backward_ref(NULL, din_r.data(), x, d, n);
    launch_serial(dim3(7), 64, [=]() { k_gelu_fwd(o, x, n); });
    /* the bf16 output (mlp_act_forward_out16): the fp32 bits rounded */
    std::vector<__nv_bfloat16> o16(n);
    __nv_bfloat16 *o16p = o16.data();
    launch_serial(dim3(7), 64, [=]() { k_gelu_fwd(o16p, x, n); });
    bool rounded = true;
    for (size_t i = 0; i < n; i++) rounded &= o16[i].bits == ct_f32_to_bf16(out[i]);
    launch_serial(dim3(7), 64, [=]() { k_gelu_bwd(di, x, d, n); });
    launch_serial(dim3(7), 64, [=]() { k_gelu_bwd(dp, x, d, n); });
    /* 16 bytes at a time (n a multiple of 4, aligned): the same bits */
    size_t n4 = n / 4 * 4;
    std::vector<float> din4(n4, 0.0f);
    float *d4 = din4.data();
    launch_serial(dim3(7), 64, [=]() { k_gelu_bwd(d4, x, d, n4); });
    bool same4 = n4 > 0 && memcmp(din4.data(), din.data(), n4 * sizeof(float)) == 0;
    act_errs ef, eb;
    bool added = true;
    for (size_t i = 0; i < n; i++) {
        act_exact v = exact_act(xs[i], true);
        double ady = fabs((double)dy[i]);
        ef.add(out[i], v.y, want[i], 0.0, ldexp(fabs((double)xs[i]), -27), xs[i]);
        eb.add(din[i], v.g * dy[i], din_r[i], ady * v.S, ady * v.R, xs[i]);
        added &= isnan(din[i]) || pre[i] == 0.375f + din[i];
    }
    bool ok = ef.ok(tol) && eb.ok(tol) && added && rounded && same4;
    printf("%s gelu %zu inputs, ulps vs exact (vs ref): out %.2f (%.2f) at x=%g, dinp %.2f (%.2f) "
           "at x=%g%s%s%s\n",
           ok ? "ok  " : "FAIL", n, ef.e.e, ef.r.e, (double)ef.e.x, eb.e.e, eb.r.e,
           (double)eb.e.x, added ? "" : ", not added",
           rounded ? "" : ", bf16 output != the fp32 output rounded",
           same4 ? "" : ", the 16-byte path differs");
    fails += !ok;
    /* GeGLU and SwiGLU: rows of F gates then F ups */
    const int F = 1000, N = (int)((n + F - 1) / F);
    size_t NF = (size_t)N * F;
    std::vector<float> inp(2 * NF), dout(NF), y(NF), y_r(NF), dg(2 * NF), dg_r(2 * NF),
        dg_p(2 * NF);
    for (int r = 0; r < N; r++)
        for (int i = 0; i < F; i++) {
            size_t k = (size_t)r * F + i;
            inp[2 * (size_t)r * F + i] = k < n ? xs[k] : frand();
            inp[(2 * (size_t)r + 1) * F + i] = 2.0f * frand();
            dout[k] = frand();
        }
    for (int geglu = 0; geglu < 2; geglu++) {
        std::fill(dg.begin(), dg.end(), 0.0f);
        std::fill(dg_r.begin(), dg_r.end(), 0.0f);
        std::fill(dg_p.begin(), dg_p.end(), 0.375f);
        const float *ip = inp.data(), *dyp = dout.data();
        float *yp = y.data(), *gp = dg.data(), *pp = dg_p.data();
        std::vector<__nv_bfloat16> y16(NF);
        __nv_bfloat16 *y16p = y16.data();
        if (geglu) {
            ct_geglu_forward_ref(NULL, y_r.data(), ip, N, F);
            ct_geglu_backward_ref(NULL, dg_r.data(), ip, dyp, N, F);
            launch_serial(dim3(5), 128, [=]() { k_glu_fwd<true>(yp, ip, N, F); });
            launch_serial(dim3(5), 128, [=]() { k_glu_fwd<true>(y16p, ip, N, F); });
            launch_serial(dim3(5), 128, [=]() { k_glu_bwd<true>(gp, ip, dyp, N, F); });
            launch_serial(dim3(5), 128, [=]() { k_glu_bwd<true>(pp, ip, dyp, N, F); });
        } else {
            ct_swiglu_forward_ref(NULL, y_r.data(), ip, N, F);
            ct_swiglu_backward_ref(NULL, dg_r.data(), ip, dyp, N, F);
            launch_serial(dim3(5), 128, [=]() { k_glu_fwd<false>(yp, ip, N, F); });
            launch_serial(dim3(5), 128, [=]() { k_glu_fwd<false>(y16p, ip, N, F); });
            launch_serial(dim3(5), 128, [=]() { k_glu_bwd<false>(gp, ip, dyp, N, F); });
            launch_serial(dim3(5), 128, [=]() { k_glu_bwd<false>(pp, ip, dyp, N, F); });
        }
        act_errs ey, eg, eu;
        added = true;
        for (int r = 0; r < N; r++)
            for (int i = 0; i < F; i++) {
                size_t k = (size_t)r * F + i, g = 2 * (size_t)r * F + i, u = g + F;
                float xv = inp[g];
                act_exact v = exact_act(xv, geglu);
                double up = inp[u], dyv = dout[k], sc = fabs(dyv * up);
                double R = ldexp(fabs((double)xv), -27);
                ey.add(y[k], v.y * up, y_r[k], 0.0, fabs(up) * R, xv);
                eg.add(dg[g], dyv * up * v.g, dg_r[g], sc * v.S, sc * v.R, xv);
                eu.add(dg[u], dyv * v.y, dg_r[u], 0.0, fabs(dyv) * R, xv);
                added &= (isnan(dg[g]) || dg_p[g] == 0.375f + dg[g]) &&
                         (isnan(dg[u]) || dg_p[u] == 0.375f + dg[u]);
            }
        rounded = true;
        for (size_t k = 0; k < NF; k++) rounded &= y16[k].bits == ct_f32_to_bf16(y[k]);
        ok = ey.ok(tol) && eg.ok(tol) && eu.ok(tol) && added && rounded;
        printf("%s %s N=%d F=%d, ulps vs exact (vs ref): out %.2f (%.2f) at x=%g, dgate %.2f "
               "(%.2f) at x=%g, dup %.2f (%.2f) at x=%g%s%s\n",
               ok ? "ok  " : "FAIL", geglu ? "geglu" : "swiglu", N, F, ey.e.e, ey.r.e,
               (double)ey.e.x, eg.e.e, eg.r.e, (double)eg.e.x, eu.e.e, eu.r.e, (double)eu.e.x,
               added ? "" : ", not added",
               rounded ? "" : ", bf16 output != the fp32 output rounded");
        fails += !ok;
    }
}

/* ------------------------------------------------------------ norm backward */

/* The norms' input gradients (cuda_norm.cuh's norm_bwd_row, a block per
 * row) against ref's backward from ref's forward statistics: dinp within
 * fp32's rounding of each row's largest value (zeros pre-filled), and added
 * onto a pre-fill (pre + the same value, bit for bit). LayerNorm rows get
 * offset means. */
template <bool LN>
static void check_norm_bwd(int N, int C, unsigned threads, float wofs) {
    size_t NC = (size_t)N * C;
    std::vector<float> x(NC), dy(NC), w(C), bias(C), y(NC), mean(N), rstd(N);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) x[(size_t)n * C + c] = (LN ? 4.0f + n : 0.0f) + 2.0f * frand();
    for (auto &v : dy) v = frand();
    for (auto &v : w) v = 1.5f * frand();
    for (auto &v : bias) v = frand();
    if (LN)
        ct_layernorm_forward_ref(NULL, y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                 bias.data(), N, C, 1e-5f);
    else
        ct_rmsnorm_forward_ref(NULL, y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f, wofs);
    std::vector<float> want(NC, 0.0f), dw(C, 0.0f), db(C, 0.0f), got(NC, 0.0f), pre(NC, -0.625f);
    if (LN)
        ct_layernorm_backward_ref(NULL, want.data(), dw.data(), db.data(), dy.data(), x.data(),
                                  w.data(), mean.data(), rstd.data(), N, C);
    else
        ct_rmsnorm_backward_ref(NULL, want.data(), dw.data(), dy.data(), x.data(), w.data(),
                                rstd.data(), N, C, wofs);
    float *g = got.data(), *p = pre.data();
    const float *dp = dy.data(), *xp = x.data(), *wp = w.data(), *mp = mean.data(),
                *rp = rstd.data();
    launch(dim3(N), threads, [=]() { norm_bwd_row<LN>(g, dp, xp, wp, LN ? mp : NULL, rp, C, wofs); });
    launch(dim3(N), threads, [=]() { norm_bwd_row<LN>(p, dp, xp, wp, LN ? mp : NULL, rp, C, wofs); });
    double e = 0.0;
    bool added = true;
    for (int n = 0; n < N; n++) {
        double d = 0.0, m = 0.0;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            double v = fabs((double)got[i] - want[i]);
            if (!(v <= d)) d = isnan(v) ? INFINITY : v;
            m = std::max(m, fabs((double)want[i]));
            added &= pre[i] == -0.625f + got[i];
        }
        e = std::max(e, d / (m > 0 ? m : 1));
    }
    const double tol = 2e-6; /* seen up to 1.2e-7 */
    bool ok = e < tol && added;
    printf("%s %s backward N=%d C=%d threads=%u wofs=%g: dinp %.2g of the row's largest%s\n",
           ok ? "ok  " : "FAIL", LN ? "layernorm" : "rmsnorm", N, C, threads, (double)wofs, e,
           added ? "" : ", not added");
    fails += !ok;
}

/* ------------------------------------------------------------ RoPE */

/* RoPE (cuda_rope.cuh) forward and backward against ref's, on q, k and v
 * heads (v must be left as it was), at positions from pos0 (with packed rows
 * when lens is given): each rotated pair within fp32 rounding of the pair's
 * size, and the backward undoing the forward to the same. theta sets the
 * inverse frequencies 1 / theta^(2i / HS) (rounded to fp32, as the model's);
 * large pos0 makes the angles large (position p turns pair 0 by p radians). */
static void check_rope(int B, int T, int NH, int NKV, int HS, int pos0, const std::vector<int> &lens,
                       double theta) {
    size_t W = (size_t)(NH + 2 * NKV) * HS, n = (size_t)B * T * W;
    std::vector<float> inv(HS / 2), x(n);
    for (int i = 0; i < HS / 2; i++) inv[i] = (float)(1.0 / pow(theta, 2.0 * i / HS));
    for (auto &v : x) v = 3.0f * frand();
    std::vector<int32_t> pos;
    if (!lens.empty()) pos = positions({B, T, 1, 1, 1, lens});
    const int32_t *pp = pos.empty() ? NULL : pos.data();
    const float *fp = inv.data();
    std::vector<float> fwd_r(x), bwd_r(x), fwd(x), bwd(x);
    ct_rope_forward_ref(NULL, fwd_r.data(), pp, B, T, NH, NKV, HS, pos0, fp);
    ct_rope_backward_ref(NULL, bwd_r.data(), pp, B, T, NH, NKV, HS, pos0, fp);
    float *f = fwd.data(), *bk = bwd.data();
    launch_serial(dim3(5), 64, [=]() { k_rope(f, pp, B, T, NH, NKV, HS, pos0, fp, 1.0f); });
    launch_serial(dim3(5), 64, [=]() { k_rope(bk, pp, B, T, NH, NKV, HS, pos0, fp, -1.0f); });
    std::vector<float> back(fwd);
    float *bp = back.data();
    launch_serial(dim3(3), 32, [=]() { k_rope(bp, pp, B, T, NH, NKV, HS, pos0, fp, -1.0f); });
    /* per pair: max |got - want| / max(|want_1|, |want_2|, |x_1|, |x_2|) */
    auto pair_err = [&](const std::vector<float> &got, const std::vector<float> &want) {
        double e = 0.0;
        int half = HS / 2;
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int h = 0; h < NH + NKV; h++)
                for (int i = 0; i < half; i++) {
                    size_t a = r * W + (size_t)h * HS + i, b = a + half;
                    double m = std::max(std::max(fabs((double)want[a]), fabs((double)want[b])),
                                        std::max(fabs((double)x[a]), fabs((double)x[b])));
                    double d = std::max(fabs((double)got[a] - want[a]), fabs((double)got[b] - want[b]));
                    if (isnan(d)) d = INFINITY;
                    e = std::max(e, d / (m > 0 ? m : 1));
                }
        return e;
    };
    bool v_same = true;
    for (size_t r = 0; r < (size_t)B * T; r++) {
        size_t v = r * W + (size_t)(NH + NKV) * HS, k = (size_t)NKV * HS * sizeof(float);
        v_same &= !memcmp(&fwd[v], &x[v], k) && !memcmp(&bwd[v], &x[v], k);
    }
    double ef = pair_err(fwd, fwd_r), eb = pair_err(bwd, bwd_r), er = pair_err(back, x);
    const double tol = 4e-7; /* 3.4 units of 2^-23; seen up to 2.3e-7 */
    bool ok = ef < tol && eb < tol && er < tol && v_same;
    printf("%s rope B=%d T=%d NH=%d NKV=%d HS=%d pos0=%d%s theta=%g: forward %.2g, backward "
           "%.2g, backward(forward) %.2g%s\n",
           ok ? "ok  " : "FAIL", B, T, NH, NKV, HS, pos0, pp ? " packed" : "", theta, ef, eb, er,
           v_same ? "" : ", v heads changed");
    fails += !ok;
}

/* ------------------------------------------------------------ row attention */

/* The row attention kernels (cuda_attention_rows.cuh: a warp per row, the
 * fallback for other head sizes and dropout) as cuda_attention.cu launches
 * them, against ref's kernels on the same inputs: the forward's out and lse
 * within fp32's rounding, the backward (dq; dk, dv: added onto a pre-fill)
 * from ref's forward outputs and a double D, as k_attn_D gives it, as the
 * tiled kernels are held (check). p: the probabilities' dropout. Then the
 * decode kernel against ref's over a KV cache of the first row's keys. */
template <int MAXK> static void check_rows(const shape &s, float p) {
    int B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS;
    size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, rows = (size_t)B * NH * T;
    std::vector<float> qkv((size_t)B * T * W), R((size_t)B * T * C);
    for (auto &x : qkv) x = 2.0f * frand();
    for (auto &x : R) x = frand();
    std::vector<int32_t> pos;
    if (!s.lens.empty()) pos = positions(s);
    const int32_t *pp = pos.empty() ? NULL : pos.data();
    ct_attn_dropout drop = {p, 0x5eedf00dULL, 3};
    std::vector<float> out_r(B * T * C), lse_r(rows), out(B * T * C, NAN), lse(rows, NAN);
    ct_attention_forward_ref(NULL, out_r.data(), lse_r.data(), qkv.data(), pp, &drop, B, T, NH,
                             NKV, HS);
    float *o = out.data(), *ls = lse.data();
    const float *x = qkv.data(), *r = R.data(), *lr = lse_r.data();
    unsigned blocks = (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS);
    launch(dim3(blocks), 32 * ATT_WARPS,
           [=]() { k_attn_fwd<MAXK>(o, ls, x, pp, drop, B, T, NH, NKV, HS); });
    std::vector<double> D = rowsum_D(R, out_r, B, T, NH, HS);
    /* k_attn_D (the rowsums every backward reads) against that, then fed to
     * the backward as on a GPU */
    std::vector<double> Dk(rows, NAN);
    double *dk_ = Dk.data();
    const float *orp = out_r.data();
    launch(dim3(blocks), 32 * ATT_WARPS, [=]() { k_attn_D(dk_, r, orp, B, T, NH, HS); });
    double e_D = 0.0;
    for (size_t k = 0; k < rows; k++)
        e_D = isnan(Dk[k]) ? INFINITY : std::max(e_D, fabs(Dk[k] - D[k]) / (1.0 + fabs(D[k])));
    if (!(e_D <= 1e-12)) {
        fails++;
        fprintf(stderr, "FAIL k_attn_D B=%d T=%d NH=%d HS=%d: off by %.2e\n", B, T, NH, HS, e_D);
    }
    const float pre = 0.25f;
    std::vector<float> dq_r((size_t)B * T * W, pre), dq((size_t)B * T * W, pre);
    ct_attention_backward_ref(NULL, dq_r.data(), r, x, out_r.data(), lr, pp, &drop, B, T, NH, NKV,
                              HS);
    float *dx = dq.data();
    const double *dd = Dk.data();
    launch(dim3(blocks), 32 * ATT_WARPS,
           [=]() { k_attn_dq<MAXK>(dx, r, x, lr, dd, pp, drop, B, T, NH, NKV, HS); });
    launch(dim3((unsigned)(((size_t)B * NKV * T + ATT_WARPS - 1) / ATT_WARPS)), 32 * ATT_WARPS,
           [=]() { k_attn_dkv<MAXK>(dx, r, x, lr, dd, pp, drop, B, T, NH, NKV, HS); });
    /* decode: the last query row of example 0 against its T keys, the cache
     * being the rows' k and v heads */
    std::vector<float> kc((size_t)T * NKV * HS), vc((size_t)T * NKV * HS), q(C);
    for (int t = 0; t < T; t++)
        for (size_t e = 0; e < (size_t)NKV * HS; e++) {
            kc[(size_t)t * NKV * HS + e] = qkv[(size_t)t * W + C + e];
            vc[(size_t)t * NKV * HS + e] = qkv[(size_t)t * W + C + (size_t)NKV * HS + e];
        }
    for (size_t e = 0; e < C; e++) q[e] = qkv[(size_t)(T - 1) * W + e];
    std::vector<float> dec_r(C), dec(C, NAN);
    ct_attention_decode_ref(NULL, dec_r.data(), q.data(), kc.data(), vc.data(), T, NH, NKV, HS);
    float *dc = dec.data();
    const float *qp = q.data(), *kp = kc.data(), *vp = vc.data();
    launch(dim3((unsigned)((NH + ATT_WARPS - 1) / ATT_WARPS)), 32 * ATT_WARPS,
           [=]() { k_attn_decode<MAXK>(dc, qp, kp, vp, T, NH, NKV, HS); });
    auto dbl = [](const std::vector<float> &v, double sub) {
        std::vector<double> d(v.size());
        for (size_t k = 0; k < v.size(); k++) d[k] = v[k] - sub;
        return d;
    };
    double e_out = err(out.data(), dbl(out_r, 0.0)), e_lse = err(lse.data(), dbl(lse_r, 0.0));
    double e_dq = err(dq.data(), dbl(dq_r, pre), pre), e_dec = err(dec.data(), dbl(dec_r, 0.0));
    bool ok = e_out < 2e-6 && e_lse < 2e-6 && e_dq < 2e-5 && e_dec < 2e-6;
    printf("%s rows B=%d T=%d NH=%d NKV=%d HS=%d%s dropout %g: out %.2g, lse %.2g, dqkv %.2g, "
           "decode %.2g\n",
           ok ? "ok  " : "FAIL", B, T, NH, NKV, HS, pp ? " packed" : "", (double)p, e_out, e_lse,
           e_dq, e_dec);
    fails += !ok;
}

/* cuda_small.cuh: AdamW bit for bit with ref's (its scalars formed by
 * adamw_scalars_of), the sums' partials over ragged chunks and their device
 * finish, the non-finite count, dropout and the strided scale-add. */
static void check_small() {
    struct cfg {
        size_t n;
        float lr, b1, b2, eps, wd, gs;
        int64_t t;
    } cfgs[] = {{1000, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.0f, 1},
                {777, 3e-4f, 0.9f, 0.95f, 1e-6f, 0.0f, 0.37f, 2},
                {64, 6e-4f, 0.8f, 0.99f, 1e-8f, 0.01f, 2.0f, 1000}};
    for (const cfg &c : cfgs) {
        size_t n = c.n;
        std::vector<float> p(n), g(n), m(n), v(n);
        for (size_t i = 0; i < n; i++) {
            p[i] = frand();
            g[i] = i % 17 == 0 ? 0.0f : frand() * 1e-2f;
            m[i] = frand() * 1e-3f;
            v[i] = fabsf(frand()) * 1e-5f;
        }
        std::vector<float> p2 = p, m2 = m, v2 = v;
        float *P = p.data(), *M = m.data(), *Vv = v.data();
        const float *G = g.data();
        adamw_scalars a = adamw_scalars_of(c.lr, c.b1, c.b2, c.wd, c.t);
        launch_serial(dim3(3), 64, [=]() { k_adamw(P, G, M, Vv, n, c.b1, c.b2, c.eps, c.gs, a); });
        ct_adamw_update_ref(NULL, p2.data(), G, m2.data(), v2.data(), n, c.lr, c.b1, c.b2, c.eps,
                            c.wd, c.gs, c.t);
        bool same = !memcmp(p.data(), p2.data(), n * 4) && !memcmp(m.data(), m2.data(), n * 4) &&
                    !memcmp(v.data(), v2.data(), n * 4);
        if (!same) {
            fails++;
            fprintf(stderr, "FAIL adamw n=%zu t=%lld: not ref's bits\n", n, (long long)c.t);
        }
    }

    const size_t ns[] = {1, 100, 4097};
    const unsigned grids[][2] = {{5, 64}, {37, 32}};
    for (size_t n : ns)
        for (const auto &gb : grids)
            for (int sq = 0; sq < 2; sq++) {
                std::vector<float> x(n);
                for (size_t i = 0; i < n; i++) x[i] = frand() * 3.0f;
                std::vector<double> part(gb[0], -1.0);
                double *PT = part.data();
                const float *X = x.data();
                bool squares = sq;
                launch(dim3(gb[0]), gb[1], [=]() { k_sum_partials(PT, X, n, squares); });
                double host = 0.0; /* reduce()'s order: the partials in block order */
                for (unsigned b = 0; b < gb[0]; b++) host += part[b];
                double want = 0.0; /* ref's: one double sum in order */
                for (size_t i = 0; i < n; i++) want += squares ? (double)X[i] * X[i] : X[i];
                double dst = 0.25;
                double *D = &dst;
                int nb = (int)gb[0];
                launch_serial(dim3(1), 1, [=]() { k_sum_finish(D, PT, nb); });
                if (!(fabs(host - want) <= 1e-12 * fmax(1.0, fabs(want))) || dst != 0.25 + host) {
                    fails++;
                    fprintf(stderr, "FAIL sum%s n=%zu grid %u x %u: %.17g, ref %.17g, finish "
                            "%.17g\n", squares ? "sq" : "", n, gb[0], gb[1], host, want, dst);
                }
            }

    {
        size_t n = 3001;
        std::vector<float> x(n);
        for (size_t i = 0; i < n; i++) x[i] = frand();
        x[0] = NAN, x[77] = INFINITY, x[1500] = -INFINITY, x[3000] = NAN;
        unsigned long long count = 5;
        unsigned long long *CN = &count;
        const float *X = x.data();
        launch(dim3(4), 128, [=]() { k_nonfinite(CN, X, n); });
        if (count != 9) {
            fails++;
            fprintf(stderr, "FAIL nonfinite: %llu, want 5 + 4\n", count);
        }
    }

    {
        size_t n = 5000;
        float pdrop = 0.3f;
        uint64_t key = 0x1234abcdull, off = 999;
        std::vector<float> x(n), out(n), want(n), d(n), gd(n, 0.5f), gd_w(n, 0.5f);
        for (size_t i = 0; i < n; i++) x[i] = frand(), d[i] = frand();
        float inv = 1.0f / (1.0f - pdrop);
        uint32_t thr = ct_dropout_threshold(pdrop);
        float *O = out.data(), *GD = gd.data();
        const float *X = x.data(), *DD = d.data();
        launch_serial(dim3(7), 64, [=]() { k_dropout_fwd(O, X, n, inv, thr, key, off); });
        launch_serial(dim3(7), 64, [=]() { k_dropout_bwd(GD, DD, n, inv, thr, key, off); });
        size_t kept = 0; /* backend.h's definition, element by element */
        for (size_t i = 0; i < n; i++) {
            bool k = ct_dropout_keep(key, off + i, pdrop);
            kept += k;
            want[i] = k ? x[i] * inv : 0.0f;
            if (k) gd_w[i] += d[i] * inv;
        }
        if (memcmp(out.data(), want.data(), n * 4) || memcmp(gd.data(), gd_w.data(), n * 4) ||
            kept < n / 2 || kept > n * 9 / 10) {
            fails++;
            fprintf(stderr, "FAIL dropout: not backend.h's mask and scale (%zu of %zu kept)\n",
                    kept, n);
        }
    }

    for (int acc = 0; acc < 2; acc++) {
        int rows = 5, cols = 7, ldy = 9, ldx = 11;
        std::vector<float> y(rows * ldy), yw, x(rows * ldx);
        for (float &e : y) e = frand();
        for (float &e : x) e = frand();
        yw = y;
        float *Y = y.data();
        const float *X = x.data();
        bool accumulate = acc;
        launch_serial(dim3(2), 32, [=]() {
            k_scale_add(Y, ldy, X, ldx, rows, cols, 0.75f, accumulate);
        });
        for (int r = 0; r < rows; r++) /* backend.h's definition; the gaps untouched */
            for (int c = 0; c < cols; c++) {
                float v = 0.75f * X[r * ldx + c];
                yw[r * ldy + c] = accumulate ? yw[r * ldy + c] + v : v;
            }
        double worst = 0.0;
        for (size_t i = 0; i < y.size(); i++) worst = fmax(worst, fabs((double)y[i] - yw[i]));
        if (worst > 1e-6) {
            fails++;
            fprintf(stderr, "FAIL scale_add accumulate=%d: off by %.2e (or a gap written)\n",
                    acc, worst);
        }
    }
}

/* cuda_small.cuh's bf16 conversions equal core/dtype.c's bits (ties, NaN,
 * infinities, subnormals, the largest finite values); fill and scale. */
static void check_convert() {
    std::vector<float> x;
    const uint32_t bits[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x3f808000u,
                             0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                             0xff800000u, 0x7fc00001u, 0xff812345u, 0x7f7f8000u, 0x33800000u};
    for (uint32_t b : bits) x.push_back(__uint_as_float(b));
    for (int i = 0; i < 5000; i++) x.push_back(frand() * powf(2.0f, (float)(i % 60 - 30)));
    size_t n = x.size();
    std::vector<uint16_t> h(n), want(n);
    std::vector<float> back(n);
    uint16_t *H = h.data();
    float *BK = back.data();
    const float *X = x.data();
    launch_serial(dim3(5), 64, [=]() { k_f32_to_bf16(H, X, n); });
    launch_serial(dim3(5), 64, [=]() { k_bf16_to_f32(BK, H, n); });
    /* four at a time (n a multiple of 4, aligned): the same bits */
    size_t n4 = n / 4 * 4;
    std::vector<uint16_t> h4(n4);
    uint16_t *H4 = h4.data();
    launch_serial(dim3(5), 64, [=]() { k_f32_to_bf16(H4, X, n4); });
    bool same = n4 > 0 && !memcmp(h4.data(), h.data(), n4 * 2), widened = true;
    for (size_t i = 0; i < n; i++) {
        same &= h[i] == ct_f32_to_bf16(x[i]);
        float w = ct_bf16_to_f32(h[i]);
        widened &= !memcmp(&back[i], &w, 4);
    }
    if (!same || !widened) {
        fails++;
        fprintf(stderr, "FAIL bf16 conversions: not core/dtype.c's bits (%s)\n",
                !same ? "f32 -> bf16" : "bf16 -> f32");
    }
    std::vector<float> y(1000, 3.0f);
    float *Y = y.data();
    launch_serial(dim3(3), 32, [=]() { k_scale(Y, -0.5f, 999); });
    launch_serial(dim3(2), 32, [=]() { k_fill(Y, 7.0f, 10); });
    bool ok = y[999] == 3.0f;
    for (size_t i = 0; i < 999; i++) ok &= y[i] == (i < 10 ? 7.0f : -1.5f);
    if (!ok) {
        fails++;
        fprintf(stderr, "FAIL fill/scale: wrong values or past n\n");
    }
}

/* cuda_elementwise.cuh: the embedding forward equals ref's (positions given or
 * t, an offset, no learned positions; an fp32 and a bf16 table), the residual
 * adds their definition. */
static void check_encoder_fwd_residual() {
    int B = 3, T = 17, C = 24, V = 50, maxT = 64;
    size_t N = (size_t)B * T, NC = N * C;
    std::vector<float> wte((size_t)V * C), wpe((size_t)maxT * C), out(NC), want(NC);
    for (float &e : wte) e = frand();
    for (float &e : wpe) e = frand();
    std::vector<int32_t> tok(N), pos(N);
    for (size_t i = 0; i < N; i++) tok[i] = (int32_t)((i * 37) % V), pos[i] = (int32_t)(i % 5);
    for (int variant = 0; variant < 4; variant++) {
        const int32_t *P = variant & 1 ? pos.data() : NULL;
        const float *WP = variant == 3 ? NULL : wpe.data();
        int pos0 = variant == 2 ? 40 : 0;
        float *O = out.data();
        const float *WT = wte.data();
        const int32_t *TK = tok.data();
        launch_serial(dim3(7), 64, [=]() { k_encoder_fwd(O, TK, WT, WP, P, B, T, C, pos0); });
        ct_encoder_forward_ref(NULL, want.data(), TK, WT, WP, P, B, T, C, pos0);
        if (memcmp(out.data(), want.data(), NC * 4)) {
            fails++;
            fprintf(stderr, "FAIL encoder forward (variant %d): not ref's\n", variant);
        }
        /* from a bf16 table: ref's bf16 entry, bit for bit */
        std::vector<uint16_t> w16(wte.size());
        ct_f32_to_bf16_array(w16.data(), wte.data(), wte.size());
        const uint16_t *W16 = w16.data();
        launch_serial(dim3(5), 64, [=]() { k_encoder_fwd(O, TK, W16, WP, P, B, T, C, pos0); });
        ct_encoder_forward_wte16_ref(NULL, want.data(), TK, W16, WP, P, B, T, C, pos0);
        if (memcmp(out.data(), want.data(), NC * 4)) {
            fails++;
            fprintf(stderr, "FAIL encoder forward from bf16 (variant %d): not ref's\n", variant);
        }
    }
    std::vector<float> a(NC), b(NC), r(NC), da(NC, 1.0f), db(NC, -1.0f);
    for (size_t i = 0; i < NC; i++) a[i] = frand(), b[i] = frand();
    float *R = r.data(), *DA = da.data(), *DB = db.data();
    const float *A = a.data(), *Bp = b.data();
    launch_serial(dim3(4), 64, [=]() { k_residual_fwd(R, A, Bp, NC); });
    launch_serial(dim3(4), 64, [=]() { k_residual_bwd(DA, DB, A, NC); });
    bool ok = true;
    for (size_t i = 0; i < NC; i++)
        ok &= r[i] == a[i] + b[i] && da[i] == 1.0f + a[i] && db[i] == -1.0f + a[i];
    if (!ok) {
        fails++;
        fprintf(stderr, "FAIL residual forward/backward\n");
    }
}

/* The flash kernels, WMMA and mma.sync, over the shapes that matter. */
static void check_flash(void) {
    check_fa<64>({2, 150, 4, 2, 64, {}});                  // GQA, ragged last tiles
    check_fa<128>({1, 130, 2, 1, 128, {}});                // multi-query, head size 128
    check_fa<64>({2, 130, 2, 2, 64, {1, 40, 3, 70, 17}});  // packed, length-1 examples
    check_fa<128>({1, 200, 4, 2, 128, {3, 1, 17, 1, 1, 9, 150}}); // packed across tiles
    check_fa<64>({1, 5, 1, 1, 64, {}});                    // fewer rows than a tile
    check_fa<128>({1, 64, 2, 2, 128, {}});                 // exactly one tile
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "flash")) { /* cuda_emu flash: those checks alone */
        check_flash();
        printf("%s\n", fails ? "FAILED" : "all flash checks passed");
        return fails ? 1 : 0;
    }
    check<64>({2, 150, 4, 2, 64, {}});                // GQA, ragged last tiles
    check<64>({1, 64, 2, 2, 64, {}});                 // exactly one query tile
    check<32>({1, 97, 4, 1, 32, {}});                 // multi-query
    check<64>({2, 130, 2, 2, 64, {1, 40, 3, 70, 17}}); // packed: key tiles skipped, length 1
    check<32>({3, 70, 4, 2, 32, {3, 1, 17, 1, 1, 9, 30}});
    check<32>({1, 5, 1, 1, 32, {}});                  // fewer rows than a tile
    check_flash();
    check_encoder(1, 1, 3, 5, {}, true);              // one row
    check_encoder(2, 700, 20, 7, {}, true);           // long runs, one merge pass
    check_encoder(5, 1000, 6, 50257, {}, false);      // 5 chunks: three merge passes
    check_encoder(3, 900, 9, 300, {1, 40, 3, 700}, true); // packed positions sorted too
    check_encoder(1, 130, 130, 11, {}, true);         // two column tiles
    /* the emulation's time goes by blocks: chunks x column blocks */
    const int rows[] = {1, 5, 63, 64, 65, 200};
    for (int kind = 0; kind < 3; kind++)
        for (int n : rows) check_colsum(kind, n, n == 200 ? 130 : 7); /* 200: two column blocks */
    check_colsum(COLSUM_LAYERNORM, 300, 1);
    check_colsum(COLSUM_LAYERNORM, 130, 128, 64); // 64 chunks of 3 rows: the last 20 empty
    check_colsum_copy16(150, 130);
    check_xent(3, 1, 1.0f, false);      // one class: loss 0, gradient 0
    check_xent(4, 37, 3.0f, true);      // fewer logits than threads, in place
    check_xent(3, 5000, 30.0f, false);  // the running max moves a lot
    check_xent(2, 50257, 8.0f, true);   // GPT-2's vocabulary
    check_xent_bf16(3, 1, 128, 1.0f, false);      // one class, a row of pads
    check_xent_bf16(4, 37, 128, 3.0f, true);      // fewer logits than threads, in place
    check_xent_bf16(3, 1000, 1024, 30.0f, false); // V not a multiple of the block
    check_xent_bf16(3, 512, 512, 2.0f, true);     // no pads: ld == V
    check_xent_bf16(2, 50257, 50304, 8.0f, true); // GPT-2's head, in place
    check_xent_bf16(3, 50257, 50304, 8.0f, false);
    check_xent_bf16(2, 50257, 50257, 8.0f, true); // rows off 16-byte boundaries: one by one
    check_norm<true>(3, 768, NORM_THREADS, true, true, 1e-5f, 0.0f);  // GPT-2's C, in place
    check_norm<true>(2, 1000, NORM_THREADS, false, false, 1e-5f, 0.0f); // ragged, from global
    check_norm<true>(4, 5, 32, true, false, 0.1f, 0.0f);  // fewer columns than threads
    check_norm<true>(2, 1, 64, true, true, 1e-5f, 0.0f);  // C = 1: zero variance, out = bias
    check_norm<true>(2, 777, 128, true, false, 0.5f, 0.0f); // eps large enough to matter
    check_norm<false>(3, 768, NORM_THREADS, true, true, 1e-6f, 0.0f);
    check_norm<false>(2, 1000, NORM_THREADS, false, false, 0.5f, 1.0f); // Gemma's 1 + weight
    check_norm<false>(4, 5, 32, true, false, 1e-5f, 1.0f);
    check_qknorm(5, 4, 2, 64, 1e-6f, 0.0f, 2.0f);    // Qwen3-like: GQA, two values a lane
    check_qknorm(3, 2, 1, 128, 1e-6f, 1.0f, 2.0f);   // Gemma 3's 1 + weight
    check_qknorm(2, 2, 2, 256, 1e-6f, 1.0f, 3.0f);   // Gemma 3's head_dim 256
    check_qknorm(4, 3, 1, 40, 0.1f, 0.0f, 0.3f);     // ragged lanes, eps large enough to matter
    check_qknorm(3, 1, 1, 16, 0.5f, 1.0f, 0.5f);     // fewer columns than lanes
    check_qknorm(130, 2, 1, 32, 1e-6f, 0.0f, 2.0f);  // 64 row chunks of 3, a short last one
    check_rows<8>({1, 40, 4, 2, 96, {}}, 0.0f);            // head size 96: ragged lanes, GQA
    check_rows<8>({1, 40, 2, 1, 64, {5, 17, 30}}, 0.25f);  // dropout, packed, multi-query
    check_rows<16>({1, 20, 2, 2, 300, {}}, 0.1f);          // head size 300: 16 values a lane
    check_act();
    check_norm_bwd<true>(3, 768, NORM_THREADS, 0.0f);   // GPT-2's C
    check_norm_bwd<true>(2, 4099, NORM_THREADS, 0.0f);  // ragged, several columns a thread
    check_norm_bwd<true>(4, 5, 32, 0.0f);               // fewer columns than threads
    check_norm_bwd<false>(3, 2048, NORM_THREADS, 0.0f); // TinyLlama's C
    check_norm_bwd<false>(2, 1001, 128, 1.0f);          // Gemma's 1 + weight, ragged
    check_rope(2, 40, 4, 2, 64, 0, {}, 10000.0);              // GQA, from position 0
    check_rope(1, 33, 2, 1, 128, 8000, {}, 10000.0);          // LLaMA's head size, 8000 on
    check_rope(2, 50, 2, 2, 64, 0, {1, 13, 30}, 500000.0);    // packed rows, LLaMA 3's theta
    check_rope(1, 20, 1, 1, 128, 131000, {}, 1000000.0);      // past the fast reduction's range
    check_rope(1, 9, 1, 1, 32, 4000000, {}, 10000.0);         // angles in the millions
    check_small();
    check_convert();
    check_encoder_fwd_residual();
    printf("%d failure(s)\n", fails);
    return fails ? 1 : 0;
}
