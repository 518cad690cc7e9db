/*
 * The run's memory plan and the hard memory limit. Every byte a training run
 * allocates in bulk is counted from the model config and the settings before
 * anything is allocated: the model's plan (params, grads, activations, work,
 * scratch), AdamW's moments (one rank's shard under ZeRO-1) and the token buffers of the loader's prefetch
 * ring and the trainer. run.memory_limit ("85%", "12GB", bytes) caps it;
 * batch_size=auto and recompute=auto pick settings under the cap by planning,
 * never by trying an allocation. The process itself (code, libraries, heap,
 * thread stacks and OpenBLAS's per-thread packing buffers) is one measured
 * constant, the runtime baseline (ct_run_plan_runtime). Leaves out:
 * checkpoint I/O buffers and the pages of the memory-mapped token shards
 * (file-backed and reclaimable, though they show in RSS once read).
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
    size_t optim;        /* AdamW m and v of this rank's trainable parameters (all of
                          * them, or its shard under ZeRO-1) */
    int optim_shards;    /* ranks the moments are split over (ZeRO-1); 1: none */
    size_t data;         /* token buffers: prefetch ring + the trainer's batch */
    size_t runtime;      /* process baseline for `threads` threads (ct_run_plan_runtime) */
    int threads;         /* the thread count runtime was planned for */
    size_t total;
} ct_run_plan;

/* Plans a training run of mc at micro-batch (B,T) with the options o and a
 * prefetch ring of `prefetch` batches, on all the CPUs this process may run
 * on (ct_run_plan_set_threads changes that). CT_ERR_ARG on a bad shape. */
ct_status ct_run_plan_make(const ct_model_config *mc, int B, int T, int grad_accum, int prefetch,
                           const ct_model_opts *o, ct_run_plan *out);
/* The same with LoRA adapters lo (NULL or r == 0: none): the frozen base has
 * no gradients and no moments. Borrows lo. */
ct_status ct_run_plan_make_lora(const ct_model_config *mc, int B, int T, int grad_accum,
                                int prefetch, const ct_model_opts *o, const ct_lora_opts *lo,
                                ct_run_plan *out);

/* Re-plans p's runtime baseline (and so its total) for `threads` threads
 * (<= 0: the CPUs this process may run on). */
void ct_run_plan_set_threads(ct_run_plan *p, int threads);

/* The process baseline of a training run on `threads` threads (<= 0: the
 * CPUs this process may run on), in bytes: CT_RUNTIME_BASE_MIB for the
 * program, its libraries, the heap and the loader thread, plus OpenBLAS's
 * packing buffers, as much of them as sgemm touches: CT_RUNTIME_BLAS1_MIB on
 * one thread, CT_RUNTIME_BLAS_MIB per thread when it runs threaded (the
 * OpenMP worker stacks included). Measured as peak RSS minus the rest of the
 * plan over GPT-2 shapes from C=128 to C=384 with OpenBLAS 0.3.21 (OpenMP
 * build) on x86_64; tests/cli/test_plan_rss.py checks it. */
#define CT_RUNTIME_BASE_MIB 8.5
#define CT_RUNTIME_BLAS1_MIB 1.5
#define CT_RUNTIME_BLAS_MIB 5.5
size_t ct_run_plan_runtime(int threads);

/* Split the plan's AdamW moments over `shards` ranks (ZeRO-1): each keeps
 * ceil(numel / shards) elements of m and v; total follows. shards <= 1 is a
 * no-op. */
void ct_run_plan_shard_optim(ct_run_plan *p, int shards);

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
    int threads;         /* threads the run uses; 0: the CPUs this process may run on */
    size_t limit;        /* bytes */
    const char *limit_spec; /* for messages: the run.memory_limit text */
    int optim_shards;    /* ZeRO-1: ranks the AdamW moments are split over; 0 or 1: none */
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
 * accumulation, effective batch, prefetch, run.threads, run.memory_limit against
 * ct_memory_available, dist.zero over dist.world ranks, 0 counting as 1, the
 * lora.* adapters) planned and fitted for the model shape mc, as `train` and
 * `plan` both do. Writes the plan and the limit in bytes. CT_ERR_ARG. */
ct_status ct_run_plan_for_config(const ct_config *cfg, const ct_model_config *mc,
                                 ct_run_plan *out, size_t *limit);
/* The same for one rank of a run of `world` ranks, `local` of them on this
 * machine (the trainer passes the launcher's counts): ranks that share a
 * machine share its memory, so a percentage run.memory_limit is of the
 * available memory divided by local (a byte count stays per rank). */
ct_status ct_run_plan_for_world(const ct_config *cfg, const ct_model_config *mc, int world,
                                int local, ct_run_plan *out, size_t *limit);

#endif
