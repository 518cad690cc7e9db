/*
 * Internal view of the context: which kernel table the models call.
 * Not installed; models/ and train/ include it.
 */
#ifndef CT_CTX_H
#define CT_CTX_H
#include "ctrain/core.h"
#include "kernels/kernels.h"

const ct_kernels *ct_ctx_kernels(const ct_ctx *ctx);
#endif
