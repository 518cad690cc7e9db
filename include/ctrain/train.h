/*
 * Training: AdamW over the flat buffers, learning-rate schedules, the data
 * loader over llm.c token shards, the metrics sink and the training loop that
 * `ctrain train` runs.
 */
#ifndef CT_TRAIN_H
#define CT_TRAIN_H

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

/* Moments m and v mirror the parameter buffer (tag optim). */
typedef struct ct_adamw {
    ct_ctx *ctx;
    float *m, *v; /* (numel) each */
    size_t numel;
    int64_t t;    /* steps taken */
} ct_adamw;

CT_API ct_status ct_adamw_init(ct_adamw *opt, ct_ctx *ctx, size_t numel);
CT_API void ct_adamw_free(ct_adamw *opt);
/* One update with torch.optim.AdamW semantics; weight decay only on parameters
 * whose table entry has decay set (rank >= 2). grad_scale multiplies the
 * gradients first (clipping). */
CT_API void ct_adamw_step(ct_adamw *opt, ct_model *model, const ct_adamw_params *p, float lr,
                          float grad_scale);
/* Global L2 norm of the gradient buffer (double accumulation). */
CT_API double ct_grad_norm(ct_model *model);
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

/* --------------------------------------------------------------- loader */

typedef struct ct_loader ct_loader; /* opaque */

/* Open the shards named by `spec` (a file, a glob, or a directory, where
 * `<split>_*.bin` files are taken, else every *.bin). Every shard's header is
 * validated, and every token must be < vocab_size (0: unchecked).
 * data.shuffle=false order: micro-batch m reads the window at token
 * (m*world + rank)*B*T of the current shard; when B*T+1 tokens no longer fit,
 * the loader moves to the next shard (wrapping to the first) at position 0.
 * shuffle=true visits every shard window once per epoch in a seeded order. */
CT_API ct_status ct_loader_init(ct_loader **out, const char *spec, const char *split, int B,
                                int T, int vocab_size, bool shuffle, uint64_t seed, int rank,
                                int world);
CT_API void ct_loader_free(ct_loader *l);
/* Fill inputs(B,T) and targets(B,T). */
CT_API ct_status ct_loader_next(ct_loader *l, int32_t *inputs, int32_t *targets);
CT_API void ct_loader_reset(ct_loader *l);
CT_API int64_t ct_loader_total_tokens(const ct_loader *l);
CT_API int ct_loader_num_shards(const ct_loader *l);

/* -------------------------------------------------------------- trainer */

typedef struct ct_step_info {
    int64_t step, steps;
    double loss, lr, grad_norm, tokens_per_s, step_ms;
    double val_loss; /* NaN when no validation ran this step */
    bool skipped;    /* update skipped (non-finite loss or gradient) */
} ct_step_info;

typedef void (*ct_progress_fn)(const ct_step_info *info, void *user);

/* Run `ctrain train`: build or load the model, open data, train, evaluate,
 * write run.dir/metrics.jsonl, run.dir/config.yaml and the final weights
 * (run.dir/config.json + model.safetensors). Everything the config names is
 * checked before anything is written. progress may be NULL. */
CT_API ct_status ct_train_run(ct_ctx *ctx, const ct_config *cfg, ct_progress_fn progress,
                              void *user);

/* Resolve the model of a config (init_from, preset or explicit sizes). */
CT_API ct_status ct_model_config_from(ct_model_config *out, const ct_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
