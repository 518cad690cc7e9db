/*
 * Optimisation over the model's trainable flat buffer: AdamW (torch.optim.AdamW
 * semantics, fused, optionally over one rank's ZeRO-1 range), the global
 * gradient norm and clip factor, and the learning-rate schedules. The moments
 * live on the context's backend like the model's tensors.
 */
#ifndef CT_OPTIM_H
#define CT_OPTIM_H

#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/model.h"

#ifdef __cplusplus
extern "C" {
#endif
/* ---------------------------------------------------------------- AdamW */

typedef struct ct_adamw_params {
    float beta1, beta2, eps, weight_decay;
} ct_adamw_params;

/* Moments m and v mirror the parameter range [lo, lo + n) of the flat buffer
 * (tag optim): all of it, or one rank's ZeRO-1 shard. They are one block:
 * v == m + n, so m[0 .. 2*n) covers both; m[i] belongs to parameter lo + i. */
typedef struct ct_adamw {
    ct_ctx *ctx;
    float *m, *v; /* (n) each, contiguous */
    size_t numel; /* parameters of the model */
    size_t lo, n; /* the range this optimizer updates: [lo, lo + n) of numel */
    int64_t t;    /* steps taken */
    bool host;    /* m, v are host memory (a gathered copy), not the backend's */
} ct_adamw;

/* Zeroed moments for numel parameters, t = 0. Fills *opt (owned; release with
 * ct_adamw_free; borrows ctx). CT_ERR_OOM. */
CT_API ct_status ct_adamw_init(ct_adamw *opt, ct_ctx *ctx, size_t numel);
/* The same for the range [lo, lo + n) of numel parameters only (ZeRO-1: one
 * rank's shard; n may be 0): moments of n elements, and ct_adamw_step
 * updates that range alone. CT_ASSERT lo + n <= numel. CT_ERR_OOM. */
CT_API ct_status ct_adamw_init_range(ct_adamw *opt, ct_ctx *ctx, size_t numel, size_t lo,
                                     size_t n);
CT_API void ct_adamw_free(ct_adamw *opt); /* NULL and a zeroed struct are fine */
/* One update with torch.optim.AdamW semantics of the optimizer's range;
 * weight decay only on parameters whose table entry has decay set (rank >=
 * 2). grad_scale multiplies the gradients first (clipping). Each element's
 * update is the same arithmetic whatever the range, so shards updated
 * separately equal one full update bit for bit. Returns true when the
 * model's bf16 weight copies (ct_model_trainable_w16) were written in the
 * same pass, so no ct_model_refresh_weights16 is needed after it: precision
 * bf16 without adapters, an update of every parameter, a backend with the
 * fused kernel. False otherwise (no copies, fp16 ones, a shard): then any
 * copies are stale, as before, and want the refresh. */
CT_API bool ct_adamw_step(ct_adamw *opt, ct_model *model, const ct_adamw_params *p, float lr,
                          float grad_scale);
/* Global L2 norm of the gradient buffer (double accumulation). */
CT_API double ct_grad_norm(ct_model *model);
/* Sum of squares of the gradients [lo, lo + n) (double accumulation): one
 * rank's part of the global norm. */
CT_API double ct_grad_sumsq_range(ct_model *model, size_t lo, size_t n);
/* torch.nn.utils.clip_grad_norm_'s factor: min(1, max_norm / (norm + 1e-6)); 1 when
 * max_norm <= 0. */
CT_API float ct_clip_scale(double norm, double max_norm);

/* ------------------------------------------------------------- schedule */

typedef enum ct_sched_kind {
    CT_SCHED_CONSTANT = 0,
    CT_SCHED_COSINE = 1,
    CT_SCHED_LINEAR = 2,
    CT_SCHED_ONECYCLE = 3,
    CT_SCHED_COUNT
} ct_sched_kind;

typedef struct ct_schedule {
    ct_sched_kind kind;
    double lr;            /* peak */
    double min_lr;        /* floor of cosine/linear */
    int64_t warmup_steps; /* linear warmup (constant/cosine/linear) */
    int64_t total_steps;
    double pct_start, div_factor, final_div_factor; /* onecycle */
    bool anneal_linear;                             /* onecycle: linear instead of cos */
} ct_schedule;

/* Parse the schedule.* keys (names to enums once). */
CT_API ct_status ct_schedule_from_config(ct_schedule *s, const ct_config *cfg);
/* Learning rate of optimizer step `step` (0-based). */
CT_API double ct_schedule_lr(const ct_schedule *s, int64_t step);


#ifdef __cplusplus
}
#endif
#endif
