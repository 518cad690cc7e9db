/*
 * The GEMM-only step (every sgemm of a GPT-2 training step, nothing else) and
 * the end-to-end step benchmark with its per-kernel split. See bench.h.
 */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "core/ctx.h"
#include "ctrain/train.h"
#include "perf/bench.h"

/* The sgemms of one linear layer exactly as kernels/cpu/matmul.c issues them:
 * forward out(N,OC) = in(N,C) W(OC,C)^T, backward dinp += dout W and
 * dW += dout^T in. */
static void linear_fwd(float *out, const float *in, const float *w, int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, in, C, w, C, 1.0f, out,
                OC);
}
static void linear_bwd(float *dinp, float *dw, const float *dout, const float *in,
                       const float *w, int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 1.0f,
                dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, in, C, 1.0f, dw,
                C);
}

ct_status ct_bench_gemm_step(ct_ctx *ctx, const ct_model_config *cfg, int B, int T, int reps,
                             double *times, double *flops) {
    (void)ctx;
    ct_status st = ct_model_config_validate(cfg);
    if (st) return st;
    if (B < 1 || T < 1 || T > cfg->n_ctx)
        return CT_ERR(CT_ERR_ARG, "batch B=%d T=%d is invalid for n_ctx %d", B, T, cfg->n_ctx);
    int L = cfg->n_layer, C = cfg->n_embd, F = cfg->n_ffn, V = cfg->vocab_size, N = B * T;
    int rows = ct_model_head_chunk_rows(cfg, N);
    /* the model's own linears: fused qkv (grouped KV heads are narrower), the
     * output projection, the MLP's up (gate and up fused for SwiGLU) and down */
    int QKV = C + 2 * (C / cfg->n_head) * cfg->n_kv_head;
    int UP = cfg->mlp == CT_MLP_SWIGLU ? 2 * F : F;
    size_t o_proj = (size_t)QKV * C, o_fc = o_proj + (size_t)C * C, o_fp = o_fc + (size_t)UP * C;
    size_t per_layer = o_fp + (size_t)F * C;
    size_t nw = per_layer * L + (size_t)V * C;
    int widest = UP > QKV ? UP : QKV;
    size_t big = (size_t)N * (size_t)(widest > C ? widest : C);
    float *w = malloc(nw * sizeof(float)), *dw = malloc(nw * sizeof(float));
    float *x = malloc(big * sizeof(float)), *y = malloc(big * sizeof(float));
    float *dx = malloc(big * sizeof(float));
    float *logits = malloc((size_t)rows * V * sizeof(float));
    if (!w || !dw || !x || !y || !dx || !logits) {
        free(w), free(dw), free(x), free(y), free(dx), free(logits);
        return CT_ERR(CT_ERR_OOM, "out of memory for the GEMM-only step (%.1f GB)",
                      (2.0 * nw + 3.0 * big + (double)rows * V) * 4 / 1e9);
    }
    memset(w, 0, nw * sizeof(float));
    memset(dw, 0, nw * sizeof(float));
    for (size_t i = 0; i < nw; i += 97) w[i] = 0.01f;
    memset(x, 0, big * sizeof(float));
    memset(y, 0, big * sizeof(float));
    memset(dx, 0, big * sizeof(float));
    memset(logits, 0, (size_t)rows * V * sizeof(float));
    const float *head = w + per_layer * L;
    float *dhead = dw + per_layer * L;
    for (int r = -1; r < reps; r++) {
        double t0 = ct_time_s();
        for (int l = 0; l < L; l++) {
            const float *wl = w + per_layer * l;
            linear_fwd(y, x, wl, N, C, QKV);
            linear_fwd(y, x, wl + o_proj, N, C, C);
            linear_fwd(y, x, wl + o_fc, N, C, UP);
            linear_fwd(y, x, wl + o_fp, N, F, C);
        }
        for (int r0 = 0; r0 < N; r0 += rows) {
            int n = N - r0 < rows ? N - r0 : rows;
            linear_fwd(logits, x + (size_t)r0 * C, head, n, C, V);
            linear_bwd(dx + (size_t)r0 * C, dhead, logits, x + (size_t)r0 * C, head, n, C, V);
        }
        for (int l = L - 1; l >= 0; l--) {
            const float *wl = w + per_layer * l;
            float *dwl = dw + per_layer * l;
            linear_bwd(dx, dwl + o_fp, y, x, wl + o_fp, N, F, C);
            linear_bwd(dx, dwl + o_fc, y, x, wl + o_fc, N, C, UP);
            linear_bwd(dx, dwl + o_proj, y, x, wl + o_proj, N, C, C);
            linear_bwd(dx, dwl, y, x, wl, N, C, QKV);
        }
        if (r >= 0) times[r] = ct_time_s() - t0;
    }
    double per_layer_flops = 6.0 * N * (double)per_layer;
    *flops = L * per_layer_flops + 6.0 * N * (double)V * C;
    free(w), free(dw), free(x), free(y), free(dx), free(logits);
    return CT_OK;
}

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
    const ct_kernels *base = ct_ctx_kernels(ctx);
    int slow = -1;
    if (o->slow_kind && o->slow_kind[0] && (slow = ct_kprof_kind_of(o->slow_kind)) < 0) {
        char kinds[256] = "";
        for (int k = 0; k < CT_KP_COUNT; k++)
            snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%s", k ? ", " : "",
                     ct_kprof_name((ct_kprof_kind)k));
        return CT_ERR(CT_ERR_ARG, "no kernel kind is called '%s': expected one of %s",
                      o->slow_kind, kinds);
    }
    ct_ctx_set_kernels(ctx, ct_kprof_wrap(base));
    ct_kprof_set_slow(slow, o->slow_factor);
    ct_model *m = NULL;
    ct_adamw opt = {0};
    int32_t *in = NULL, *tg = NULL;
    size_t N = (size_t)o->B * o->T;
    ct_status st = ct_model_init(&m, ctx, cfg);
    if (st) goto done;
    ct_model_init_weights(m, 1337);
    if ((st = ct_model_set_opts(m, &o->model))) goto done;
    if ((st = ct_model_reserve(m, o->B, o->T, true))) goto done;
    if ((st = ct_adamw_init(&opt, ctx, ct_model_numel(m)))) goto done;
    ct_model_plan plan;
    if ((st = ct_model_plan_memory_opts(cfg, o->B, o->T, true, &o->model, &plan))) goto done;
    out->planned_bytes = plan.total + 2 * ct_model_numel(m) * sizeof(float);
    in = malloc(N * sizeof *in);
    tg = malloc(N * sizeof *tg);
    if (!in || !tg) {
        st = CT_ERR(CT_ERR_OOM, "out of memory for the benchmark's tokens");
        goto done;
    }
    ct_adamw_params ap = {0.9f, 0.95f, 1e-8f, 0.1f};
    for (int s = -o->warmup; s < o->steps; s++) {
        fill_tokens(in, N, cfg->vocab_size, (uint32_t)(2 * (s + o->warmup)));
        fill_tokens(tg, N, cfg->vocab_size, (uint32_t)(2 * (s + o->warmup) + 1));
        if (s == 0) {
            ct_kprof_counts discard;
            ct_kprof_read(&discard, 1);
        }
        double t0 = ct_time_s();
        ct_model_zero_grads(m);
        float loss = 0;
        if ((st = ct_model_forward_backward(m, in, tg, o->B, o->T, 1.0f, &loss))) goto done;
        ct_adamw_step(&opt, m, &ap, 1e-4f, 1.0f);
        double dt = ct_time_s() - t0;
        if (s >= 0) {
            out->step_s[s] = dt;
            out->loss[s] = loss;
        }
    }
    out->steps = o->steps;
    out->median_s = ct_bench_median(out->step_s, o->steps);
    out->flops = ct_bench_step_flops(cfg, o->B, o->T);
    ct_kprof_read(&out->split, 1);
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
    ct_ctx_set_kernels(ctx, base);
    return st;
}
