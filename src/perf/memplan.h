/*
 * The run's memory plan and the hard memory limit. Every byte a training run
 * allocates in bulk is counted from the model config and the settings before
 * anything is allocated: the model's plan (params, grads, activations, work,
 * scratch), AdamW's moments and the token buffers of the loader's prefetch
 * ring and the trainer. run.memory_limit ("85%", "12GB", bytes) caps it;
 * batch_size=auto and recompute=auto pick settings under the cap by planning,
 * never by trying an allocation. Leaves out: checkpoint I/O buffers, the
 * program's code and the BLAS library's own buffers (tens of MiB).
 */
#ifndef CT_PERF_MEMPLAN_H
#define CT_PERF_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "ctrain/config.h"
#include "ctrain/core.h"
#include "ctrain/model.h"

typedef struct ct_run_plan {
    int B, T, grad_accum;
    ct_model_opts opts;
    ct_lora_opts lora;   /* r == 0: no adapters */
    ct_model_plan model; /* params, grads, acts, work, scratch */
    size_t optim;        /* AdamW m and v of the trainable parameters */
    size_t data;         /* token buffers: prefetch ring + the trainer's batch */
    size_t total;
} ct_run_plan;

/* Plans a training run of mc at micro-batch (B,T) with the options o and a
 * prefetch ring of `prefetch` batches. CT_ERR_ARG on a bad shape. */
ct_status ct_run_plan_make(const ct_model_config *mc, int B, int T, int grad_accum, int prefetch,
                           const ct_model_opts *o, ct_run_plan *out);
/* The same with LoRA adapters lo (NULL or r == 0: none): the frozen base has
 * no gradients and no moments. Borrows lo. */
ct_status ct_run_plan_make_lora(const ct_model_config *mc, int B, int T, int grad_accum,
                                int prefetch, const ct_model_opts *o, const ct_lora_opts *lo,
                                ct_run_plan *out);

/* Bytes this process may use: min(RAM, cgroup memory limit). 0 when unknown. */
size_t ct_memory_available(void);

/* What the run asks for. B = 0 is batch_size=auto; recompute_auto lets the
 * planner choose the policy (opts.recompute is the choice otherwise). */
typedef struct ct_fit_request {
    int B, T, grad_accum;
    int effective_batch; /* with B = 0: sequences per optimizer step (0: unset) */
    bool recompute_auto;
    ct_model_opts opts;
    ct_lora_opts lora;   /* r == 0: no adapters */
    int prefetch;
    size_t limit;        /* bytes */
    const char *limit_spec; /* for messages: the run.memory_limit text */
} ct_fit_request;

/* Resolves the automatic settings and checks the plan against the limit.
 * batch_size=auto takes the largest micro-batch that fits (a divisor of
 * effective_batch when that is set, which then sets grad_accum; at most 1024
 * otherwise). recompute=auto takes the lightest policy whose largest fitting
 * micro-batch is at least half of the largest any policy allows. On success
 * *out is the plan to run. When nothing fits: CT_ERR_ARG with the plan and the
 * limit in the message and the settings that would fit in the hint. */
ct_status ct_run_plan_fit(const ct_model_config *mc, const ct_fit_request *req, ct_run_plan *out);

/* The LoRA adapters the lora.* keys ask for on a model of shape mc: r = 0
 * when neither lora.r nor lora.init_from is set. With lora.init_from, its
 * adapter_config.json decides r, alpha and the targets (lora.r and
 * lora.targets, when set, must agree with it); otherwise lora.r, lora.alpha
 * and lora.targets (default: q_proj,v_proj for llama, c_attn for gpt2, as
 * PEFT's defaults). lora.dropout and train.seed (the dropout stream) come
 * from cfg. CT_ERR_ARG naming the key, or the adapter file's errors. */
ct_status ct_lora_opts_from_config(const ct_config *cfg, const ct_model_config *mc,
                                   ct_lora_opts *out);

/* The run's settings from cfg (batch size, recompute, activation dtype,
 * accumulation, effective batch, prefetch, run.memory_limit against
 * ct_memory_available, the lora.* adapters) planned and fitted for the model
 * shape mc, as `train` and `plan` both do. Writes the plan and the limit in bytes. CT_ERR_ARG. */
ct_status ct_run_plan_for_config(const ct_config *cfg, const ct_model_config *mc,
                                 ct_run_plan *out, size_t *limit);

#endif
