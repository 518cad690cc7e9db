/*
 * How a kernel writes an output element whose type is a template parameter:
 * fp32 as it is, or bf16 rounded to nearest even (the *_out16 entries,
 * which write the GEMM operand the model keeps in bf16: the same bits as
 * rounding the fp32 output afterwards). Device code only; the emulation
 * (tests/gpu/cuda_emu.cpp) supplies __nv_bfloat16 and its rounding.
 */
#ifndef CT_BACKEND_CUDA_STORE_CUH
#define CT_BACKEND_CUDA_STORE_CUH

#ifdef __CUDACC__
#include <cuda_bf16.h>
#endif

__device__ inline void store_out(float *y, float v) { *y = v; }
__device__ inline void store_out(__nv_bfloat16 *y, float v) { *y = __float2bfloat16_rn(v); }

#endif
