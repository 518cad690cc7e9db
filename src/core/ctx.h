/*
 * Internal view of the context: which kernel table the models call.
 * Not installed; models/ and train/ include it.
 */
#ifndef CT_CTX_H
#define CT_CTX_H
#include "ctrain/core.h"
#include "kernels/kernels.h"

const ct_kernels *ct_ctx_kernels(const ct_ctx *ctx);
/* Swap the kernel table (a profiling wrapper, say). Models and optimizers
 * read the table when they are created, so call this before creating them. */
void ct_ctx_set_kernels(ct_ctx *ctx, const ct_kernels *k);
#endif
