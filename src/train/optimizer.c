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

ct_status ct_adamw_init(ct_adamw *opt, ct_ctx *ctx, size_t numel) {
    memset(opt, 0, sizeof *opt);
    opt->ctx = ctx;
    opt->numel = numel;
    if (numel > SIZE_MAX / (2 * sizeof(float)))
        return CT_ERR(CT_ERR_OOM, "AdamW moments for %zu parameters overflow size_t", numel);
    /* one block, m then v, so a checkpoint writes both without a copy */
    opt->m = ct_alloc(ctx, 2 * numel * sizeof(float), CT_TAG_OPTIM);
    if (!opt->m) return ct_last_status();
    opt->v = opt->m + numel;
    /* resident before step 1, so no step faults pages in */
    model_touch_pages(opt->m, 2 * numel * sizeof(float));
    return CT_OK;
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
        k->adamw_update(w + begin, g + begin, opt->m + begin, opt->v + begin, end - begin, lr,
                        p->beta1, p->beta2, p->eps, first->decay ? p->weight_decay : 0.0f,
                        grad_scale, opt->t);
        i = j;
    }
}

double ct_grad_norm(ct_model *model) {
    const ct_kernels *k = model->k;
    return sqrt(k->sumsq(ct_model_trainable_grads(model), ct_model_trainable_numel(model)));
}

float ct_clip_scale(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    /* torch computes the coefficient in fp32 */
    float coef = (float)max_norm / ((float)norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}
