/*
 * The cpu backend: OpenMP threads and CBLAS, same semantics as ref, over host
 * memory. Every kernel entry is a cpu kernel; those that meet shapes they do
 * not handle call their ref twin themselves (see matmul.c). The sum of squares
 * is a threaded reduction (deterministic for a given thread count); dropout
 * is threaded and gives ref's bits.
 */
#include "backend/cpu/cpu.h"
#include "backend/host/host.h"

const ct_backend_i ct_backend_cpu_i = {
    .name = "cpu",
    CT_HOST_MEMORY_OPS,
    .encoder_forward = ct_encoder_forward_cpu,
    .encoder_forward_wte16 = ct_encoder_forward_wte16_cpu,
    .encoder_backward = ct_encoder_backward_cpu,
    .layernorm_forward = ct_layernorm_forward_cpu,
    .layernorm_backward = ct_layernorm_backward_cpu,
    .matmul_forward = ct_matmul_forward_cpu,
    .matmul_backward = ct_matmul_backward_cpu,
    .matmul_forward_bf16 = ct_matmul_forward_bf16_cpu,
    .matmul_backward_bf16 = ct_matmul_backward_bf16_cpu,
    .matmul_forward_bf16_in16 = ct_matmul_forward_bf16_in16_cpu,
    .layernorm_forward_out16 = ct_layernorm_forward_out16_cpu,
    .rmsnorm_forward_out16 = ct_rmsnorm_forward_out16_cpu,
    .mlp_act_forward_out16 = ct_mlp_act_forward_out16_cpu,
    .attention_forward = ct_attention_forward_cpu,
    .attention_backward = ct_attention_backward_cpu,
    .attention_forward_bf16 = ct_attention_forward_bf16_cpu,
    .attention_backward_bf16 = ct_attention_backward_bf16_cpu,
    .attention_decode = ct_attention_decode_cpu,
    .rmsnorm_forward = ct_rmsnorm_forward_cpu,
    .rmsnorm_backward = ct_rmsnorm_backward_cpu,
    .rope_forward = ct_rope_forward_cpu,
    .rope_backward = ct_rope_backward_cpu,
    .qknorm_forward = ct_qknorm_forward_cpu,
    .qknorm_backward = ct_qknorm_backward_cpu,
    .swiglu_forward = ct_swiglu_forward_cpu,
    .swiglu_backward = ct_swiglu_backward_cpu,
    .geglu_forward = ct_geglu_forward_cpu,
    .geglu_backward = ct_geglu_backward_cpu,
    .gelu_forward = ct_gelu_forward_cpu,
    .gelu_backward = ct_gelu_backward_cpu,
    .residual_forward = ct_residual_forward_cpu,
    .residual_backward = ct_residual_backward_cpu,
    .residual_layernorm_forward = ct_residual_layernorm_forward_cpu,
    .residual_rmsnorm_forward = ct_residual_rmsnorm_forward_cpu,
    .crossentropy_forward = ct_crossentropy_forward_cpu,
    .matmul_forward_bf16_out16 = ct_matmul_forward_bf16_out16_cpu,
    .crossentropy_forward_bf16 = ct_crossentropy_forward_bf16_cpu,
    .matmul_backward_bf16_dout16 = ct_matmul_backward_bf16_dout16_cpu,
    .head16_ld = ct_head16_ld_cpu,
    .adamw_update = ct_adamw_update_cpu,
    .adamw_update16 = ct_adamw_update16_cpu,
    .sumsq = ct_sumsq_cpu,
    .dropout_forward = ct_dropout_forward_cpu,
    .dropout_backward = ct_dropout_backward_cpu,
};
