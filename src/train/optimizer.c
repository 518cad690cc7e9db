/*
 * AdamW over the model's trainable flat buffer (torch.optim.AdamW semantics;
 * the whole model, or only its LoRA adapters when the base is frozen), global
 * gradient norm and the clip factor of torch.nn.utils.clip_grad_norm_.
 * Runs of adjacent tensors with the same decay rule go to the kernel as one
 * call, so the update is a handful of passes over contiguous memory. The
 * moments are device buffers of the context's backend (resident from the
 * start, so a step takes no page faults); the update and the norm run there.
 */
#include "ctrain/optim.h"

#include <math.h>
#include <stdint.h>

#include "backend/ctx.h"

ct_status ct_adamw_init_range(ct_adamw *opt, ct_ctx *ctx, size_t numel, size_t lo, size_t n) {
    CT_ASSERT(lo <= numel && n <= numel - lo);
    *opt = (ct_adamw){0};
    opt->ctx = ctx;
    opt->numel = numel;
    opt->lo = lo;
    opt->n = n;
    if (n > SIZE_MAX / (2 * sizeof(float)))
        return CT_ERR(CT_ERR_OOM, "AdamW moments for %zu parameters overflow size_t", n);
    /* one block, m then v, so a checkpoint writes both without a copy; an
     * empty shard still gets a block, so m is never NULL */
    size_t bytes = 2 * n * sizeof(float);
    ct_backend *be = ct_ctx_backend(ctx);
    opt->m = be->i->buf_alloc(be, bytes ? bytes : sizeof(float), CT_TAG_OPTIM);
    if (!opt->m) return ct_last_status();
    opt->v = opt->m + n;
    return CT_OK;
}

ct_status ct_adamw_init(ct_adamw *opt, ct_ctx *ctx, size_t numel) {
    return ct_adamw_init_range(opt, ctx, numel, 0, numel);
}

void ct_adamw_free(ct_adamw *opt) {
    if (!opt) return;
    if (opt->m) {
        ct_backend *be = ct_ctx_backend(opt->ctx);
        be->i->buf_free(be, opt->m);
    }
    opt->m = opt->v = NULL;
}

bool ct_adamw_step(ct_adamw *opt, ct_model *model, const ct_adamw_params *p, float lr,
                   float grad_scale) {
    ct_backend *be = ct_ctx_backend(opt->ctx);
    const ct_backend_i *k = be->i;
    opt->t++;
    int n = ct_model_num_trainable(model);
    float *w = ct_model_trainable_params(model), *g = ct_model_trainable_grads(model);
    size_t lo = opt->lo, hi = opt->lo + opt->n;
    /* the bf16 copies are written here only when this update covers every
     * parameter (a shard's update leaves them to the gather's refresh) */
    bool w16 = k->adamw_update16 && lo == 0 && hi == ct_model_trainable_numel(model);
    bool wrote = false;
    int i = 0;
    while (i < n) {
        const ct_param *first = ct_model_trainable_param(model, i);
        uint16_t *f16 = w16 ? ct_model_trainable_w16(model, i) : NULL;
        size_t begin = first->offset, end = first->offset + first->numel;
        int j = i + 1;
        while (j < n) {
            const ct_param *q = ct_model_trainable_param(model, j);
            if (q->decay != first->decay || q->offset != end) break;
            /* a run has a copy throughout, back to back, or none */
            uint16_t *q16 = w16 ? ct_model_trainable_w16(model, j) : NULL;
            if (f16 ? q16 != f16 + (end - begin) : q16 != NULL) break;
            end += q->numel;
            j++;
        }
        i = j;
        /* the part of this run inside the optimizer's range */
        if (begin < lo) begin = lo;
        if (end > hi) end = hi;
        if (end <= begin) continue;
        float decay = first->decay ? p->weight_decay : 0.0f;
        wrote |= f16 != NULL;
        if (f16)
            k->adamw_update16(be, w + begin, f16, g + begin, opt->m + (begin - lo),
                              opt->v + (begin - lo), end - begin, lr, p->beta1, p->beta2, p->eps,
                              decay, grad_scale, opt->t);
        else
            k->adamw_update(be, w + begin, g + begin, opt->m + (begin - lo), opt->v + (begin - lo),
                            end - begin, lr, p->beta1, p->beta2, p->eps, decay, grad_scale,
                            opt->t);
    }
    return wrote;
}

double ct_grad_norm(ct_model *model) {
    return sqrt(ct_model_grad_sumsq(model, 0, ct_model_trainable_numel(model)));
}

double ct_grad_sumsq_range(ct_model *model, size_t lo, size_t n) {
    return ct_model_grad_sumsq(model, lo, n);
}

float ct_clip_scale(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    /* torch computes the coefficient in fp32 */
    float coef = (float)max_norm / ((float)norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}
