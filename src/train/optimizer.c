/*
 * AdamW over the model's trainable flat buffer (torch.optim.AdamW semantics;
 * the whole model, or only its LoRA adapters when the base is frozen), global
 * gradient norm and the clip factor of torch.nn.utils.clip_grad_norm_.
 * Runs of adjacent tensors with the same decay rule go to the kernel as one
 * call, so the update is a handful of passes over contiguous memory. The
 * moments are made resident at init, so a step takes no page faults.
 */
#include "ctrain/train.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/ctx.h"
#include "models/model_impl.h"

ct_status ct_adamw_init_range(ct_adamw *opt, ct_ctx *ctx, size_t numel, size_t lo, size_t n) {
    CT_ASSERT(lo <= numel && n <= numel - lo);
    memset(opt, 0, sizeof *opt);
    opt->ctx = ctx;
    opt->numel = numel;
    opt->lo = lo;
    opt->n = n;
    if (n > SIZE_MAX / (2 * sizeof(float)))
        return CT_ERR(CT_ERR_OOM, "AdamW moments for %zu parameters overflow size_t", n);
    /* one block, m then v, so a checkpoint writes both without a copy; an
     * empty shard still gets a block, so m is never NULL */
    size_t bytes = 2 * n * sizeof(float);
    opt->m = ct_alloc(ctx, bytes ? bytes : sizeof(float), CT_TAG_OPTIM);
    if (!opt->m) return ct_last_status();
    opt->v = opt->m + n;
    /* resident before step 1, so no step faults pages in */
    model_touch_pages(opt->m, bytes);
    return CT_OK;
}

ct_status ct_adamw_init(ct_adamw *opt, ct_ctx *ctx, size_t numel) {
    return ct_adamw_init_range(opt, ctx, numel, 0, numel);
}

void ct_adamw_free(ct_adamw *opt) {
    if (!opt) return;
    ct_free(opt->ctx, opt->m);
    opt->m = opt->v = NULL;
}

void ct_adamw_step(ct_adamw *opt, ct_model *model, const ct_adamw_params *p, float lr,
                   float grad_scale) {
    const ct_kernels *k = ct_ctx_kernels(opt->ctx);
    opt->t++;
    int n = ct_model_num_trainable(model);
    float *w = ct_model_trainable_params(model), *g = ct_model_trainable_grads(model);
    size_t lo = opt->lo, hi = opt->lo + opt->n;
    int i = 0;
    while (i < n) {
        const ct_param *first = ct_model_trainable_param(model, i);
        size_t begin = first->offset, end = first->offset + first->numel;
        int j = i + 1;
        while (j < n) {
            const ct_param *q = ct_model_trainable_param(model, j);
            if (q->decay != first->decay || q->offset != end) break;
            end += q->numel;
            j++;
        }
        i = j;
        /* the part of this run inside the optimizer's range */
        if (begin < lo) begin = lo;
        if (end > hi) end = hi;
        if (end <= begin) continue;
        k->adamw_update(w + begin, g + begin, opt->m + (begin - lo), opt->v + (begin - lo),
                        end - begin, lr, p->beta1, p->beta2, p->eps,
                        first->decay ? p->weight_decay : 0.0f, grad_scale, opt->t);
    }
}

double ct_grad_norm(ct_model *model) {
    const ct_kernels *k = model->k;
    return sqrt(k->sumsq(ct_model_trainable_grads(model), ct_model_trainable_numel(model)));
}

double ct_grad_sumsq_range(ct_model *model, size_t lo, size_t n) {
    size_t numel = ct_model_trainable_numel(model);
    CT_ASSERT(lo <= numel && n <= numel - lo);
    if (!n) return 0.0;
    return model->k->sumsq(ct_model_trainable_grads(model) + lo, n);
}

float ct_clip_scale(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    /* torch computes the coefficient in fp32 */
    float coef = (float)max_norm / ((float)norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}
