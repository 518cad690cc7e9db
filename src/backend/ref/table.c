/*
 * The ref backend: plain scalar C kernels, single-threaded, the readable truth
 * that tests/kernels holds every other backend to, over host memory (the
 * host-visible memory operations of backend/host).
 */
#include "backend/ref/ref.h"
#include "backend/host/host.h"

const ct_backend_i ct_backend_ref_i = {
    .name = "ref",
    CT_HOST_MEMORY_OPS,
    .encoder_forward = ct_encoder_forward_ref,
    .encoder_backward = ct_encoder_backward_ref,
    .layernorm_forward = ct_layernorm_forward_ref,
    .layernorm_backward = ct_layernorm_backward_ref,
    .matmul_forward = ct_matmul_forward_ref,
    .matmul_backward = ct_matmul_backward_ref,
    .matmul_forward_bf16 = ct_matmul_forward_bf16_ref,
    .matmul_backward_bf16 = ct_matmul_backward_bf16_ref,
    .matmul_forward_bf16_out16 = ct_matmul_forward_bf16_out16_ref,
    .crossentropy_forward_bf16 = ct_crossentropy_forward_bf16_ref,
    .matmul_backward_bf16_dout16 = ct_matmul_backward_bf16_dout16_ref,
    .f32_to_f16 = ct_host_f32_to_f16,
    .matmul_forward_f16 = ct_matmul_forward_f16_ref,
    .matmul_backward_f16 = ct_matmul_backward_f16_ref,
    .matmul_gelu_forward = ct_matmul_gelu_forward_ref,
    .matmul_gelu_forward_bf16 = ct_matmul_gelu_forward_bf16_ref,
    .matmul_forward_bf16_in16 = ct_matmul_forward_bf16_in16_ref,
    .matmul_gelu_forward_bf16_in16 = ct_matmul_gelu_forward_bf16_in16_ref,
    .attention_forward = ct_attention_forward_ref,
    .attention_backward = ct_attention_backward_ref,
    .attention_decode = ct_attention_decode_ref,
    .rmsnorm_forward = ct_rmsnorm_forward_ref,
    .rmsnorm_backward = ct_rmsnorm_backward_ref,
    .rope_forward = ct_rope_forward_ref,
    .rope_backward = ct_rope_backward_ref,
    .qknorm_forward = ct_qknorm_forward_ref,
    .qknorm_backward = ct_qknorm_backward_ref,
    .swiglu_forward = ct_swiglu_forward_ref,
    .swiglu_backward = ct_swiglu_backward_ref,
    .geglu_forward = ct_geglu_forward_ref,
    .geglu_backward = ct_geglu_backward_ref,
    .gelu_forward = ct_gelu_forward_ref,
    .gelu_backward = ct_gelu_backward_ref,
    .residual_forward = ct_residual_forward_ref,
    .residual_backward = ct_residual_backward_ref,
    .residual_layernorm_forward = ct_residual_layernorm_forward_ref,
    .residual_rmsnorm_forward = ct_residual_rmsnorm_forward_ref,
    .crossentropy_forward = ct_crossentropy_forward_ref,
    .adamw_update = ct_adamw_update_ref,
    .sumsq = ct_sumsq_ref,
    .dropout_forward = ct_host_dropout_forward,
    .dropout_backward = ct_host_dropout_backward,
};
