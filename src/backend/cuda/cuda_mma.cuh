/*
 * The warp-level tensor-core primitives of the flash attention
 * (cuda_attention_mma.cuh): PTX's mma.sync m16n8k16 on bf16 with fp32
 * accumulators, ldmatrix from shared memory, and the quad reductions of a row
 * held by four lanes. Device code only; tests/gpu/cuda_emu.cpp defines the
 * same functions with plain loops (the layouts are PTX's documented ones, so
 * the emulation can follow them exactly). Needs sm_80 (bf16 mma).
 *
 * The register layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane
 * l, g = l / 4, t = l % 4; a 32-bit register holds two bf16, the lower
 * column (A) or lower k (B) in its low half:
 *   A (16 x 16, row-major): a[0] (g, 2t..2t+1), a[1] (g+8, 2t..), a[2] (g,
 *     2t+8..), a[3] (g+8, 2t+8..)
 *   B (16 x 8, k by n): b[0] (k 2t..2t+1, n g), b[1] (k 2t+8.., n g)
 *   C, D (16 x 8, fp32): c[0], c[1] (g, 2t and 2t+1), c[2], c[3] (g+8, ...)
 * so the C fragments of two adjacent n8 tiles are, packed to bf16, the A
 * fragment of a product over those 16 columns (fm_pack_a in
 * cuda_attention_mma.cuh).
 *
 * Tiles are passed warp-uniform: the top-left of a 16 x 16 bf16 block in
 * shared memory, ld elements a row (a multiple of 8: ldmatrix reads 16-byte
 * rows); each lane works out the row it addresses.
 */
#ifndef CT_BACKEND_CUDA_MMA_CUH
#define CT_BACKEND_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

typedef __nv_bfloat16 fa_bf16;

__device__ inline uint32_t fa_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* The A fragment of the 16 x 16 tile at p (row-major). */
__device__ inline void fa_ldsm_a(uint32_t a[4], const fa_bf16 *p, int ld) {
    int l = threadIdx.x & 31, m = l >> 3, r = l & 7;
    const fa_bf16 *row = p + ((m & 1) * 8 + r) * ld + (m >> 1) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(fa_smem_addr(row))
                 : "memory");
}

/* B fragments of two n8 tiles from the 16 x 16 tile at p holding B
 * transposed (row n, column k: K's rows for S = Q K^T): b[0], b[1] the
 * first tile's (rows 0-7), b[2], b[3] the second's (rows 8-15). */
__device__ inline void fa_ldsm_bt(uint32_t b[4], const fa_bf16 *p, int ld) {
    int l = threadIdx.x & 31, m = l >> 3, r = l & 7;
    const fa_bf16 *row = p + ((m >> 1) * 8 + r) * ld + (m & 1) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(fa_smem_addr(row))
                 : "memory");
}

/* B fragments of two n8 tiles from the 16 x 16 tile at p holding B itself
 * (row k, column n: V's rows for O = P V): b[0], b[1] the first tile's
 * (columns 0-7), b[2], b[3] the second's (columns 8-15). */
__device__ inline void fa_ldsm_bn(uint32_t b[4], const fa_bf16 *p, int ld) {
    int l = threadIdx.x & 31, m = l >> 3, r = l & 7;
    const fa_bf16 *row = p + ((m & 1) * 8 + r) * ld + (m >> 1) * 8;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(fa_smem_addr(row))
                 : "memory");
}

/* c[n] += A B[n] for NT n8 tiles sharing one A fragment. */
template <int NT>
__device__ inline void fa_mma(float (*c)[4], const uint32_t a[4], const uint32_t (*b)[2]) {
#pragma unroll
    for (int n = 0; n < NT; n++)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[n][0]), "+f"(c[n][1]), "+f"(c[n][2]), "+f"(c[n][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[n][0]), "r"(b[n][1]));
}

/* Two floats as bf16 (nearest even), lo in the low half. */
__device__ inline uint32_t fa_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* v[0], v[1] (a lane's values of rows g and g+8) reduced over the quad of
 * lanes holding the row: max, or sum as (v_l + v_l^1) + (v_l^2 + v_l^3). */
__device__ inline void fa_quad_max(float v[2]) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        v[k] = fmaxf(v[k], __shfl_xor_sync(0xffffffffu, v[k], 1));
        v[k] = fmaxf(v[k], __shfl_xor_sync(0xffffffffu, v[k], 2));
    }
}
__device__ inline void fa_quad_sum(float v[2]) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        v[k] += __shfl_xor_sync(0xffffffffu, v[k], 1);
        v[k] += __shfl_xor_sync(0xffffffffu, v[k], 2);
    }
}

/* Asynchronous copies (cp.async, sm_80): 16 bytes from global to shared
 * memory, zeros instead where !valid (the source is not read then); a
 * commit closes this thread's group of copies, and fa_cp_wait<N> waits
 * until at most the newest N groups are still in flight. Other threads'
 * copies are theirs: a __syncthreads after the wait makes a tile whole. */
__device__ inline void fa_cp16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fa_smem_addr(dst)),
                 "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ inline void fa_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ inline void fa_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif
