/*
 * Internal view of the context: the backend models and optimizers run on, the
 * trace recorder when one is active, and the allocation counters a backend
 * reports its device memory to. Not installed; models/ and train/ include it.
 */
#ifndef CT_CTX_H
#define CT_CTX_H
#include "backend/backend.h"
#include "core/trace.h"
#include "ctrain/core.h"

/* The backend in use: the context's own, or a wrapper set below. Borrowed. */
ct_backend *ct_ctx_backend(ct_ctx *ctx);
/* The context's own backend, whatever wraps it. */
ct_backend *ct_ctx_base_backend(ct_ctx *ctx);
/* Put a wrapper (the kernel profiler) in front of the backend; NULL restores
 * the context's own. Models and optimizers read the backend when they are
 * created, so call this before creating them. Borrows be. */
void ct_ctx_set_backend(ct_ctx *ctx, ct_backend *be);
/* The trace recorder spans go to, or NULL (not tracing). Borrows tr. */
ct_trace *ct_ctx_trace(const ct_ctx *ctx);
void ct_ctx_set_trace(ct_ctx *ctx, ct_trace *tr);
/* Count bytes (negative: released) of tag in the context's statistics: what
 * ct_alloc does for host memory, for memory a backend allocates itself. */
void ct_ctx_count(ct_ctx *ctx, ct_tag tag, int64_t bytes);
/* The bytes ct_alloc was asked for when it returned p (0 for NULL). */
size_t ct_alloc_size(const void *p);
#endif
