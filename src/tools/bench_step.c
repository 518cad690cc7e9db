/*
 * The end-to-end step benchmark with its per-kernel split: model + AdamW steps
 * on random tokens behind a profiling backend. See bench_tools.h. (The
 * GEMM-only step is a roof and lives in perf/bench.c.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ctx.h"
#include "ctrain/train.h"
#include "perf/bench.h"
#include "tools/bench_tools.h"

/* A deterministic token stream in [0, V). */
static void fill_tokens(int32_t *t, size_t n, int V, uint32_t seed) {
    uint64_t s = 0x9E3779B97F4A7C15ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
}

ct_status ct_bench_step(ct_ctx *ctx, const ct_model_config *cfg, const ct_bench_step_opts *o,
                        ct_bench_step_result *out) {
    memset(out, 0, sizeof *out);
    if (o->steps < 1 || o->steps > CT_BENCH_MAX_STEPS || o->warmup < 0)
        return CT_ERR(CT_ERR_ARG, "steps = %d must be 1..%d and warmup = %d >= 0", o->steps,
                      CT_BENCH_MAX_STEPS, o->warmup);
    int slow = -1;
    if (o->slow_kind && o->slow_kind[0] && (slow = ct_kprof_kind_of(o->slow_kind)) < 0) {
        char kinds[256] = "";
        for (int k = 0; k < CT_KP_COUNT; k++)
            snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%s", k ? ", " : "",
                     ct_kprof_name((ct_kprof_kind)k));
        return CT_ERR(CT_ERR_ARG, "no kernel kind is called '%s': expected one of %s",
                      o->slow_kind, kinds);
    }
    /* the profiler goes in front of the backend in use; models read it at creation */
    ct_backend *base = ct_ctx_backend(ctx);
    ct_kprof *kp = NULL;
    ct_model *m = NULL;
    ct_adamw opt = {0};
    int32_t *in = NULL, *tg = NULL;
    size_t N = (size_t)o->B * o->T;
    ct_status st = ct_kprof_init(&kp, base);
    if (st) return st;
    ct_kprof_set_slow(kp, slow, o->slow_factor);
    ct_ctx_set_backend(ctx, ct_kprof_backend(kp));
    const ct_lora_opts *lo = o->lora.r > 0 ? &o->lora : NULL;
    if ((st = ct_model_init(&m, ctx, cfg))) goto done;
    ct_model_init_weights(m, 1337);
    /* as the trainer builds a LoRA run: the base, the adapters (PEFT's init) */
    if (lo && ((st = ct_model_lora_attach(m, lo)) || (st = ct_model_lora_init_weights(m, 1337))))
        goto done;
    if ((st = ct_model_set_opts(m, &o->model))) goto done;
    if ((st = ct_model_reserve(m, o->B, o->T, true))) goto done;
    out->trainable = ct_model_trainable_numel(m);
    if ((st = ct_adamw_init(&opt, ctx, out->trainable))) goto done;
    ct_model_plan plan;
    if ((st = ct_model_plan_memory_lora(cfg, o->B, o->T, true, &o->model, lo, &plan))) goto done;
    out->planned_bytes = plan.total + 2 * plan.trainable;
    in = malloc(N * sizeof *in);
    tg = malloc(N * sizeof *tg);
    if (!in || !tg) {
        st = CT_ERR(CT_ERR_OOM, "out of memory for the benchmark's tokens");
        goto done;
    }
    ct_adamw_params ap = {0.9f, 0.95f, 1e-8f, 0.1f};
    ct_bench_peak_rss_reset(); /* what the steps hold, not the setup's transients */
    for (int s = -o->warmup; s < o->steps; s++) {
        fill_tokens(in, N, cfg->vocab_size, (uint32_t)(2 * (s + o->warmup)));
        fill_tokens(tg, N, cfg->vocab_size, (uint32_t)(2 * (s + o->warmup) + 1));
        if (s == 0) {
            ct_kprof_counts discard;
            ct_kprof_read(kp, &discard, 1);
        }
        double t0 = ct_time_s();
        ct_model_zero_grads(m);
        float loss = 0;
        if ((st = ct_model_forward_backward(m, in, tg, o->B, o->T, 1.0f, &loss))) goto done;
        if (!ct_adamw_step(&opt, m, &ap, 1e-4f, 1.0f))
            ct_model_refresh_weights16(m); /* precision bf16: as the trainer does */
        /* the step ends when the backend's queue has drained */
        if ((st = base->i->synchronize(base))) goto done;
        double dt = ct_time_s() - t0;
        if (s >= 0) {
            out->step_s[s] = dt;
            out->loss[s] = loss;
        }
    }
    out->steps = o->steps;
    out->median_s = ct_bench_median(out->step_s, o->steps);
    out->flops = lo ? ct_bench_step_flops_lora(cfg, o->B, o->T, out->trainable)
                    : ct_bench_step_flops(cfg, o->B, o->T);
    ct_kprof_read(kp, &out->split, 1);
    double kern = 0, total = 0;
    for (int k = 0; k < CT_KP_COUNT; k++) kern += out->split.seconds[k];
    for (int s = 0; s < o->steps; s++) total += out->step_s[s];
    out->other_s = total - kern;
    out->peak_rss = ct_bench_peak_rss();
done:
    free(in);
    free(tg);
    ct_adamw_free(&opt);
    ct_model_free(m);
    ct_ctx_set_backend(ctx, base);
    ct_kprof_free(kp);
    return st;
}
