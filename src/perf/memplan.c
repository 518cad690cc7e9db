/*
 * Run memory plan, the memory limit and the automatic batch and recompute
 * choice. See memplan.h.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "perf/memplan.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/hwinfo.h"

ct_status ct_run_plan_make(const ct_model_config *mc, int B, int T, int grad_accum, int prefetch,
                           const ct_model_opts *o, ct_run_plan *out) {
    return ct_run_plan_make_lora(mc, B, T, grad_accum, prefetch, o, NULL, out);
}

ct_status ct_run_plan_make_lora(const ct_model_config *mc, int B, int T, int grad_accum,
                                int prefetch, const ct_model_opts *o, const ct_lora_opts *lo,
                                ct_run_plan *out) {
    memset(out, 0, sizeof *out);
    if (lo && lo->r <= 0) lo = NULL;
    ct_status st = ct_model_plan_memory_lora(mc, B, T, true, o, lo, &out->model);
    if (st) return st;
    out->B = B;
    out->T = T;
    out->grad_accum = grad_accum;
    out->opts = *o;
    if (lo) out->lora = *lo;
    /* moments of what trains: the whole model, or only the adapters */
    out->optim = 2 * out->model.trainable;
    out->optim_shards = 1;
    /* inputs and targets: the prefetch ring's slots and the trainer's own pair */
    out->data = (size_t)(prefetch + 1) * 2 * (size_t)B * T * sizeof(int32_t);
    ct_run_plan_set_threads(out, 0);
    return CT_OK;
}

/* threads, or when <= 0 the CPUs this process may run on (what a context
 * with n_threads = 0 uses) */
static int plan_threads(int threads) {
    if (threads > 0) return threads;
    cpu_set_t set;
    CPU_ZERO(&set);
    threads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return threads < 1 ? 1 : threads;
}

size_t ct_run_plan_runtime(int threads) {
    threads = plan_threads(threads);
    double mib = CT_RUNTIME_BASE_MIB +
                 (threads == 1 ? CT_RUNTIME_BLAS1_MIB : CT_RUNTIME_BLAS_MIB * threads);
    return (size_t)(mib * 1048576.0);
}

void ct_run_plan_set_threads(ct_run_plan *p, int threads) {
    p->threads = plan_threads(threads);
    p->runtime = ct_run_plan_runtime(p->threads);
    p->total = p->model.total + p->optim + p->data + p->runtime;
}

void ct_run_plan_shard_optim(ct_run_plan *p, int shards) {
    if (shards <= 1) return;
    size_t numel = p->model.trainable / sizeof(float); /* the adapters alone under LoRA */
    size_t shard = (numel + (size_t)shards - 1) / (size_t)shards; /* padded, as the trainer */
    p->total -= p->optim;
    p->optim = 2 * shard * sizeof(float);
    p->total += p->optim;
    p->optim_shards = shards;
}

/* ct_run_plan_make for the request's thread count and its ZeRO sharding. */
static ct_status plan_for(const ct_model_config *mc, const ct_fit_request *r, int B, int accum,
                          const ct_model_opts *o, ct_run_plan *out) {
    ct_status st = ct_run_plan_make_lora(mc, B, r->T, accum, r->prefetch, o, &r->lora, out);
    if (!st) {
        ct_run_plan_set_threads(out, r->threads);
        ct_run_plan_shard_optim(out, r->optim_shards);
    }
    return st;
}

size_t ct_memory_available(void) {
    ct_hwinfo h;
    if (ct_hwinfo_read(&h)) return 0;
    return ct_hwinfo_memory_available(&h);
}

/* The largest micro-batch (a divisor of eff when eff > 0, else <= cap) whose
 * plan fits the limit under opts; 0 when not even 1 does. */
static int largest_fit(const ct_model_config *mc, const ct_fit_request *r, const ct_model_opts *o,
                       ct_run_plan *best) {
    int cap = r->effective_batch > 0 ? r->effective_batch : 1024;
    int found = 0;
    /* plans grow with B, so search upward and stop at the first miss */
    for (int B = 1; B <= cap; B++) {
        if (r->effective_batch > 0 && r->effective_batch % B) continue;
        ct_run_plan p;
        int accum = r->effective_batch > 0 ? r->effective_batch / B : r->grad_accum;
        if (plan_for(mc, r, B, accum, o, &p)) break;
        if (p.total > r->limit) break;
        *best = p;
        found = B;
    }
    return found;
}

static const double MiB = 1024.0 * 1024.0;

/* Names, for the messages, of the smallest settings that fit, or says none do. */
static void hint_fits(const ct_model_config *mc, const ct_fit_request *r) {
    char hint[512] = "";
    size_t n = 0;
    static const ct_recompute pols[] = {CT_RECOMPUTE_NONE, CT_RECOMPUTE_LIGHT, CT_RECOMPUTE_FULL};
    ct_fit_request q = *r;
    q.effective_batch = 0;
    for (int d = 0; d < CT_ACT_COUNT; d++) {
        for (int i = 0; i < 3; i++) {
            ct_model_opts o = r->opts;
            o.recompute = pols[i];
            o.act_dtype = (ct_act_dtype)d;
            ct_run_plan p = {0};
            int B = largest_fit(mc, &q, &o, &p);
            if (!B || n >= sizeof hint - 120) continue;
            n += (size_t)snprintf(hint + n, sizeof hint - n, "%strain.batch_size=%d "
                                  "train.recompute=%s train.activation_dtype=%s (%.0f MiB)",
                                  n ? "; " : "", B, ct_model_recompute_name(o.recompute),
                                  ct_model_act_dtype_name(o.act_dtype), p.total / MiB);
        }
    }
    if (n)
        ct_error_hint("settings that fit: %s; or train.batch_size=auto, or raise "
                      "run.memory_limit", hint);
    else
        ct_error_hint("not even train.batch_size=1 with train.recompute=full and bf16 "
                      "activations fits: raise run.memory_limit, shorten train.seq_len or "
                      "choose a smaller model");
}

ct_status ct_run_plan_fit(const ct_model_config *mc, const ct_fit_request *r, ct_run_plan *out) {
    static const ct_recompute pols[] = {CT_RECOMPUTE_NONE, CT_RECOMPUTE_LIGHT, CT_RECOMPUTE_FULL};
    ct_run_plan plans[3];
    int fits[3] = {0, 0, 0}, npol = r->recompute_auto ? 3 : 1;
    for (int i = 0; i < npol; i++) {
        ct_model_opts o = r->opts;
        if (r->recompute_auto) o.recompute = pols[i];
        if (r->B > 0) {
            ct_status st = plan_for(mc, r, r->B, r->grad_accum, &o, &plans[i]);
            if (st) return st;
            fits[i] = plans[i].total <= r->limit ? r->B : 0;
        } else {
            fits[i] = largest_fit(mc, r, &o, &plans[i]);
        }
    }
    int best = 0;
    for (int i = 0; i < npol; i++) best = fits[i] > best ? fits[i] : best;
    for (int i = 0; i < npol && best; i++) {
        if (fits[i] && 2 * fits[i] >= best) {
            *out = plans[i];
            return CT_OK;
        }
    }
    /* nothing fits: say what the asked-for settings need */
    ct_run_plan need;
    ct_model_opts o = r->opts;
    if (r->recompute_auto) o.recompute = CT_RECOMPUTE_FULL;
    ct_status st = plan_for(mc, r, r->B > 0 ? r->B : 1, r->grad_accum, &o, &need);
    if (st) return st;
    st = CT_ERR(CT_ERR_ARG,
                "the run needs %.0f MiB (params %.0f, grads %.0f, AdamW %.0f, activations %.0f, "
                "work %.0f, scratch %.0f, data %.0f, runtime %.0f; B=%d T=%d recompute %s, %s "
                "activations) "
                "but run.memory_limit = '%s' allows %.0f MiB",
                need.total / MiB, need.model.params / MiB, need.model.grads / MiB,
                need.optim / MiB, need.model.acts / MiB, need.model.work / MiB,
                need.model.scratch / MiB, need.data / MiB, need.runtime / MiB, need.B, need.T,
                ct_model_recompute_name(o.recompute), ct_model_act_dtype_name(o.act_dtype),
                r->limit_spec ? r->limit_spec : "?", r->limit / MiB);
    hint_fits(mc, r);
    return st;
}

ct_status ct_lora_opts_from_config(const ct_config *cfg, const ct_model_config *mc,
                                   ct_lora_opts *out) {
    memset(out, 0, sizeof *out);
    const char *dir = cfg->lora.init_from;
    bool bf16 = strcmp(cfg->lora.base_dtype, "bf16") == 0;
    if (cfg->lora.r <= 0 && !dir[0]) {
        if (bf16)
            return CT_ERR(CT_ERR_ARG, "lora.base_dtype = bf16 stores a frozen LoRA base: set "
                          "lora.r (or lora.init_from) too; a full run trains fp32 weights");
        if (cfg->lora.targets[0] || cfg->lora.dropout > 0)
            return CT_ERR(CT_ERR_ARG, "lora.%s is set but LoRA is off: set lora.r (or "
                          "lora.init_from) to train adapters", cfg->lora.targets[0] ? "targets"
                          : "dropout");
        return CT_OK;
    }
    ct_lora_opts o = {0};
    ct_status st;
    if (dir[0]) {
        if ((st = ct_lora_config_load_peft(mc, dir, &o))) {
            ct_error_prefix("lora.init_from = %s", dir);
            return st;
        }
        if (cfg->lora.r > 0 && cfg->lora.r != o.r)
            return CT_ERR(CT_ERR_ARG, "lora.r = %lld, but lora.init_from = %s has r = %d "
                          "(adapter_config.json)", (long long)cfg->lora.r, dir, o.r);
        if (cfg->lora.targets[0]) {
            uint32_t mask = 0;
            if ((st = ct_lora_targets_parse(mc, cfg->lora.targets, "lora.targets", &mask)))
                return st;
            if (mask != o.targets) {
                char got[256];
                ct_lora_targets_format(mc, o.targets, got, sizeof got);
                return CT_ERR(CT_ERR_ARG, "lora.targets = %s, but lora.init_from = %s adapts "
                              "%s (adapter_config.json target_modules)", cfg->lora.targets, dir,
                              got);
            }
        }
    } else {
        o.r = (int)cfg->lora.r;
        o.alpha = (float)cfg->lora.alpha;
        const char *t = cfg->lora.targets[0] ? cfg->lora.targets
                        : mc->arch == CT_ARCH_LLAMA ? "q_proj,v_proj" : "c_attn";
        if ((st = ct_lora_targets_parse(mc, t, "lora.targets", &o.targets))) return st;
    }
    o.dropout = (float)cfg->lora.dropout;
    o.seed = (uint64_t)cfg->train.seed;
    o.base_bf16 = bf16;
    if ((st = ct_lora_opts_validate(mc, &o))) return st;
    *out = o;
    return CT_OK;
}

ct_status ct_run_plan_for_config(const ct_config *cfg, const ct_model_config *mc,
                                 ct_run_plan *out, size_t *limit) {
    return ct_run_plan_for_world(cfg, mc, cfg->dist.world > 0 ? (int)cfg->dist.world : 1, 1,
                                 out, limit);
}

ct_status ct_run_plan_for_world(const ct_config *cfg, const ct_model_config *mc, int world,
                                int local, ct_run_plan *out, size_t *limit) {
    ct_fit_request r;
    memset(&r, 0, sizeof r);
    r.optim_shards = cfg->dist.zero ? world : 1;
    r.recompute_auto = strcmp(cfg->train.recompute, "auto") == 0;
    ct_status st = ct_model_opts_from_names(&r.opts, r.recompute_auto ? "none" :
                                            cfg->train.recompute, cfg->train.activation_dtype);
    if (st) return st;
    r.B = (int)cfg->train.batch_size;
    r.T = (int)cfg->train.seq_len;
    r.grad_accum = (int)cfg->train.grad_accum;
    r.effective_batch = (int)cfg->train.effective_batch;
    r.prefetch = (int)cfg->data.prefetch;
    r.threads = (int)cfg->run.threads;
    r.limit_spec = cfg->run.memory_limit;
    if ((st = ct_lora_opts_from_config(cfg, mc, &r.lora))) return st;
    if (r.B > 0 && r.effective_batch > 0)
        return CT_ERR(CT_ERR_ARG, "train.effective_batch = %d applies to train.batch_size=auto "
                      "only; with train.batch_size = %d set train.grad_accum instead",
                      r.effective_batch, r.B);
    if (r.T > mc->n_ctx)
        return CT_ERR(CT_ERR_ARG, "train.seq_len = %d exceeds the model's context n_ctx = %d",
                      r.T, mc->n_ctx);
    size_t avail = ct_memory_available() / (size_t)(local > 1 ? local : 1);
    if ((st = ct_config_memory_limit(cfg->run.memory_limit, avail, &r.limit)))
        return st;
    if ((st = ct_run_plan_fit(mc, &r, out))) return st;
    *limit = r.limit;
    return CT_OK;
}
