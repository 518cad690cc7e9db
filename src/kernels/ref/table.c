/*
 * The ref kernel table: plain scalar C, single-threaded, the readable truth
 * that tests/kernels/test_kernels.c holds every other table to.
 */
#include "kernels/ref/ref.h"

const ct_kernels ct_kernels_ref = {
    .name = "ref",
    .encoder_forward = ct_encoder_forward_ref,
    .encoder_backward = ct_encoder_backward_ref,
    .layernorm_forward = ct_layernorm_forward_ref,
    .layernorm_backward = ct_layernorm_backward_ref,
    .matmul_forward = ct_matmul_forward_ref,
    .matmul_backward = ct_matmul_backward_ref,
    .attention_forward = ct_attention_forward_ref,
    .attention_backward = ct_attention_backward_ref,
    .attention_decode = ct_attention_decode_ref,
    .gelu_forward = ct_gelu_forward_ref,
    .gelu_backward = ct_gelu_backward_ref,
    .residual_forward = ct_residual_forward_ref,
    .residual_backward = ct_residual_backward_ref,
    .crossentropy_forward = ct_crossentropy_forward_ref,
    .adamw_update = ct_adamw_update_ref,
    .sumsq = ct_sumsq_ref,
};
