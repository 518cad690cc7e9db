/*
 * `ctrain bench [peak|kernels|step|gemm]`: the engine's benchmarks on this
 * machine (roofs: src/perf/bench.h; kernel suite and steps:
 * src/tools/bench_tools.h). With no subcommand it runs the roofs, the kernel
 * suite and the end-to-end step. Human-readable tables by default, one JSON
 * object per subcommand with --json. Benchmarks, not tests: the machine's load
 * moves absolute times; compare ratios within one run. `bench kernels` also
 * saves a baseline (--save-baseline) and gates on one (--baseline, exit 1 on a
 * regression; src/tools/baseline.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cli.h"
#include "backend/ctx.h"
#include "ctrain/model.h"
#include "perf/bench.h"
#include "tools/baseline.h"
#include "tools/bench_tools.h"

typedef struct bench_args {
    const char *sub, *preset, *filter, *table, *recompute, *act_dtype;
    long long B, T, threads, warmup, steps, reps, peak_n, repeat;
    bool json;
    const char *save_baseline, *baseline; /* the regression gate (kernels) */
    char slow_name[48];                   /* --debug-slow NAME=FACTOR */
    long long slow_factor;
    int tile_q, tile_k; /* --attention-tiles; 0: the backend's default */
} bench_args;

static int bench_long(const char *opt, const char *s, long long lo, long long hi,
                      long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return cli_usage_error("bench", "%s = '%s': expected an integer in %lld..%lld", opt, s,
                               lo, hi);
    *out = v;
    return 0;
}

static void bench_usage(void) {
    printf("usage: ctrain bench [peak|kernels|step|gemm] [options]\n"
           "  peak     sustained sgemm GFLOP/s, register-only FMA ceiling, memory bandwidth\n"
           "  kernels  every kernel at the model's training shapes against its roofline\n"
           "  step     end-to-end training steps (forward, backward, AdamW), split by kernel\n"
           "  gemm     the GEMM-only time of one training step (the step's own sgemm shapes)\n"
           "  (none)   peak, kernels and step\n"
           "options:\n"
           "  --preset NAME   model preset (default gpt2; see `ctrain train --print-config`)\n"
           "  --batch B       micro-batch (default 4)\n"
           "  --seq T         sequence length (default 64)\n"
           "  --threads N     threads (default: all cores)\n"
           "  --warmup W      untimed steps first (step; default 1)\n"
           "  --steps S       timed steps (step; default 3)\n"
           "  --reps R        repetitions (gemm, peak; default 3)\n"
           "  --filter TEXT   kernels whose name contains TEXT (comma-separated: any of them)\n"
           "  --table cpu|ref kernel table to measure (default cpu)\n"
           "  --recompute none|light|full  step: what backward recomputes (default none)\n"
           "  --activation-dtype fp32|bf16 step: storage of saved activations (default fp32)\n"
           "  --attention-tiles QxK  attention tile: query rows x keys (default 64x128)\n"
           "  --json          one JSON object per benchmark on stdout\n"
           "regression gate (kernels and step):\n"
           "  --repeat R      time each kernel (step: run the steps) R times (default 5); the\n"
           "                  median of the R medians is the figure, (max - min) / median of\n"
           "                  them the noise band; step rows: the whole step and its split\n"
           "  --save-baseline FILE  write the result as a baseline JSON for this host\n"
           "  --baseline FILE compare with FILE: exit 1 when a kernel is slower than\n"
           "                  base x (1 + 5%% + noise), 2 on a bad or mismatched baseline\n"
           "  --debug-slow NAME=FACTOR  test knob: call kernel NAME (step: every kernel of\n"
           "                  the kind NAME, like attention_fwd) FACTOR times per timed call\n");
}

static int bench_parse(int argc, char **argv, bench_args *a) {
    *a = (bench_args){NULL, "gpt2", NULL, "cpu", "none", "fp32", 4, 64, 0, 1, 3, 3, 2048, 5,
                      false, NULL, NULL, "", 1, 0, 0};
    int i = 0;
    if (argc > 0 && argv[0][0] != '-') a->sub = argv[i++];
    if (a->sub && strcmp(a->sub, "peak") && strcmp(a->sub, "kernels") && strcmp(a->sub, "step") &&
        strcmp(a->sub, "gemm"))
        return cli_usage_error("bench", "unknown benchmark '%s': expected peak, kernels, step or "
                               "gemm", a->sub);
    for (; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            bench_usage();
            return 1;
        }
        if (!strcmp(o, "--json")) {
            a->json = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return cli_usage_error("bench", "option '%s' needs a value", o);
        i++;
        int rc = 0;
        if (!strcmp(o, "--preset")) a->preset = v;
        else if (!strcmp(o, "--filter")) a->filter = v;
        else if (!strcmp(o, "--recompute")) a->recompute = v;
        else if (!strcmp(o, "--activation-dtype")) a->act_dtype = v;
        else if (!strcmp(o, "--attention-tiles")) {
            int bq = 0, bk = 0;
            char tail = 0;
            if (sscanf(v, "%dx%d%c", &bq, &bk, &tail) != 2 || bq < 1 || bq > CT_ATT_BQ_MAX ||
                bk < 1 || bk > CT_ATT_BK_MAX)
                return cli_usage_error("bench", "--attention-tiles = '%s': expected QxK with "
                                       "Q in 1..%d and K in 1..%d, like 64x128", v,
                                       CT_ATT_BQ_MAX, CT_ATT_BK_MAX);
            a->tile_q = bq, a->tile_k = bk; /* set on the context's backend once made */
        }
        else if (!strcmp(o, "--table")) {
            if (strcmp(v, "cpu") && strcmp(v, "ref"))
                return cli_usage_error("bench", "--table = '%s': expected cpu or ref", v);
            a->table = v;
        } else if (!strcmp(o, "--batch")) rc = bench_long(o, v, 1, 1 << 16, &a->B);
        else if (!strcmp(o, "--seq")) rc = bench_long(o, v, 1, 1 << 20, &a->T);
        else if (!strcmp(o, "--threads")) rc = bench_long(o, v, 0, 4096, &a->threads);
        else if (!strcmp(o, "--warmup")) rc = bench_long(o, v, 0, 1000, &a->warmup);
        else if (!strcmp(o, "--steps")) rc = bench_long(o, v, 1, CT_BENCH_MAX_STEPS, &a->steps);
        else if (!strcmp(o, "--reps")) rc = bench_long(o, v, 1, 64, &a->reps);
        else if (!strcmp(o, "--peak-n")) rc = bench_long(o, v, 64, 8192, &a->peak_n);
        else if (!strcmp(o, "--repeat"))
            rc = bench_long(o, v, 1, CT_BENCH_MAX_REPEAT, &a->repeat);
        else if (!strcmp(o, "--save-baseline")) a->save_baseline = v;
        else if (!strcmp(o, "--baseline")) a->baseline = v;
        else if (!strcmp(o, "--debug-slow")) {
            const char *eq = strrchr(v, '=');
            size_t n = eq ? (size_t)(eq - v) : 0;
            if (!n || n >= sizeof a->slow_name)
                return cli_usage_error("bench", "--debug-slow = '%s': expected NAME=FACTOR, "
                                       "like gelu.fwd=3", v);
            memcpy(a->slow_name, v, n);
            a->slow_name[n] = 0;
            rc = bench_long("--debug-slow FACTOR", eq + 1, 1, 1000, &a->slow_factor);
        }
        else return cli_usage_error("bench", "unknown option '%s'", o);
        if (rc) return rc;
    }
    if ((a->save_baseline || a->baseline) &&
        (!a->sub || (strcmp(a->sub, "kernels") && strcmp(a->sub, "step"))))
        return cli_usage_error("bench", "--save-baseline and --baseline work with `bench "
                               "kernels` and `bench step` only");
    if ((a->save_baseline || a->baseline) && a->json)
        return cli_usage_error("bench", "--json does not combine with --save-baseline or "
                               "--baseline");
    return 0;
}

typedef struct roofs {
    double gemm, fma, theo, mhz, bw;
} roofs;

static int run_peak(ct_ctx *ctx, const bench_args *a, roofs *r, bool print) {
    if (ct_bench_gemm_peak(ctx, (int)a->peak_n, (int)a->reps, &r->gemm)) return cli_fail("bench");
    r->fma = ct_bench_fma_peak(ctx);
    r->theo = ct_bench_theoretical_gflops(ct_ctx_threads(ctx), &r->mhz);
    if (ct_bench_membw(ctx, 128, (int)a->reps, &r->bw)) return cli_fail("bench");
    if (!print) return 0;
    if (a->json)
        printf("{\"bench\": \"peak\", \"threads\": %d, \"gemm_peak_gflops\": %.2f, "
               "\"fma_peak_gflops\": %.2f, \"theoretical_gflops\": %.2f, \"nominal_mhz\": %.0f, "
               "\"membw_gbps\": %.2f, \"gemm_shape\": [%lld, %lld, %lld], \"blas\": \"%s\"}\n",
               ct_ctx_threads(ctx), r->gemm, r->fma, r->theo, r->mhz, r->bw, a->peak_n, a->peak_n,
               a->peak_n, openblas_get_corename());
    else
        printf("roofs (%d threads): sgemm %lldx%lldx%lld %.1f GFLOP/s | register FMA ceiling "
               "%.1f GFLOP/s | theoretical %.1f GFLOP/s at %.0f MHz | triad bandwidth %.1f GB/s | "
               "OpenBLAS %s kernels\n",
               ct_ctx_threads(ctx), a->peak_n, a->peak_n, a->peak_n, r->gemm, r->fma, r->theo,
               r->mhz, r->bw, openblas_get_corename());
    return 0;
}

typedef struct item_out {
    bool json;
    int n;
} item_out;

static void print_item(const ct_bench_item *it, void *user) {
    item_out *o = user;
    double rate = it->flops > 0 ? it->flops / it->seconds / 1e9 : it->bytes / it->seconds / 1e9;
    const char *unit = it->flops > 0 ? "GFLOP/s" : "GB/s";
    double eff = it->roof_s / it->seconds;
    if (o->json)
        printf("%s{\"name\": \"%s\", \"shape\": \"%s\", \"seconds\": %.6e, \"flops\": %.6e, "
               "\"bytes\": %.6e, \"rate\": %.3f, \"unit\": \"%s\", \"roofline_s\": %.6e, "
               "\"of_roofline\": %.4f}",
               o->n ? ", " : "", it->name, it->shape, it->seconds, it->flops, it->bytes, rate, unit,
               it->roof_s, eff);
    else
        printf("  %-24s %-22s %10.3f ms %9.1f %-7s %5.1f%% of roofline\n", it->name, it->shape,
               it->seconds * 1e3, rate, unit, 100.0 * eff);
    fflush(stdout);
    o->n++;
}

static int run_kernels(ct_ctx *ctx, const bench_args *a, const ct_model_config *mc,
                       const roofs *r) {
    item_out o = {a->json, 0};
    if (a->json)
        printf("{\"bench\": \"kernels\", \"table\": \"%s\", \"preset\": \"%s\", \"B\": %lld, "
               "\"T\": %lld, \"threads\": %d, \"gemm_peak_gflops\": %.2f, \"membw_gbps\": %.2f, "
               "\"items\": [",
               a->table, a->preset, a->B, a->T, ct_ctx_threads(ctx), r->gemm, r->bw);
    else
        printf("kernels (%s table, %s, B=%lld T=%lld); roofline = max(FLOPs / sgemm peak, "
               "bytes / triad bandwidth)\n",
               a->table, a->preset, a->B, a->T);
    ct_bench_kernel_opts ko = {a->filter, (int)a->repeat, a->slow_name, (int)a->slow_factor};
    if (ct_bench_kernels(ctx, mc, (int)a->B, (int)a->T, r->gemm, r->bw, &ko, print_item, &o)) {
        if (a->json) printf("]}\n");
        return cli_fail("bench");
    }
    if (a->json) printf("]}\n");
    return 0;
}

typedef struct gate_out {
    ct_baseline *b;
    ct_status st;
} gate_out;

static void collect_item(const ct_bench_item *it, void *user) {
    gate_out *g = user;
    if (!g->st) g->st = ct_baseline_add(g->b, it);
}

static const char *verdict_name(ct_baseline_verdict v) {
    return v == CT_BASELINE_REGRESSED ? "REGRESSION" : v == CT_BASELINE_NEW ? "new" : "ok";
}

/* The regression gate: checks the baseline first (before spending time),
 * measures, saves and/or compares. 0 clean, 1 on a regression, 2 on errors. */
static int gate_compare(const bench_args *a, const ct_baseline *base, const ct_baseline *now) {
    ct_baseline_row *rows = calloc((size_t)(now->n ? now->n : 1), sizeof *rows);
    if (!rows) return cli_usage_error("bench", "out of memory");
    int bad = ct_baseline_compare(base, now, rows);
    printf("regression gate against %s (%s, B=%d T=%d, %d threads, %s table); regression: "
           "now > base x (1 + %.0f%% + noise)\n",
           a->baseline, now->preset, now->B, now->T, now->threads, now->table,
           100.0 * CT_BASELINE_TOLERANCE);
    const char *what = strcmp(now->bench, "step") ? "kernel" : "figure";
    printf("  %-24s %12s %12s %9s %9s  %s\n", what, "base ms", "now ms", "change", "noise",
           "verdict");
    for (int i = 0; i < now->n; i++) {
        const ct_baseline_row *r = &rows[i];
        if (r->verdict == CT_BASELINE_NEW)
            printf("  %-24s %12s %12.4f %9s %9s  %s\n", r->name, "-", r->now_s * 1e3, "-", "-",
                   verdict_name(r->verdict));
        else
            printf("  %-24s %12.4f %12.4f %+8.1f%% %8.1f%%  %s\n", r->name, r->base_s * 1e3,
                   r->now_s * 1e3, 100.0 * r->change, 100.0 * r->noise,
                   verdict_name(r->verdict));
    }
    if (bad) {
        printf("%d %s(s) regressed:", bad, what);
        for (int i = 0; i < now->n; i++)
            if (rows[i].verdict == CT_BASELINE_REGRESSED) printf(" %s", rows[i].name);
        printf("\n");
    } else {
        printf("no regression\n");
    }
    free(rows);
    return bad ? 1 : 0;
}

/* One gate row from the repetitions' values (each already a median). */
static ct_status gate_row(ct_baseline *b, const char *name, const char *shape, const double *v,
                          int n) {
    ct_bench_item it;
    memset(&it, 0, sizeof it);
    snprintf(it.name, sizeof it.name, "%s", name);
    snprintf(it.shape, sizeof it.shape, "%s", shape);
    it.repeats = n;
    double lo = v[0], hi = v[0];
    for (int r = 0; r < n; r++) {
        it.rep_s[r] = v[r];
        lo = v[r] < lo ? v[r] : lo, hi = v[r] > hi ? v[r] : hi;
    }
    it.seconds = ct_bench_median(v, n);
    it.spread = it.seconds > 0 ? (hi - lo) / it.seconds : 0;
    return ct_baseline_add(b, &it);
}

/* The end-to-end rows: R runs of the step benchmark; each gives its median
 * step time and its per-step seconds of every kernel kind (and the glue). */
static ct_status gate_measure_step(ct_ctx *ctx, const bench_args *a, const ct_model_config *mc,
                                   ct_baseline *now) {
    ct_bench_step_opts o = {(int)a->B, (int)a->T, (int)a->warmup, (int)a->steps,
                            ct_model_opts_default(), a->slow_name, (int)a->slow_factor};
    ct_status st = ct_model_opts_from_names(&o.model, a->recompute, a->act_dtype);
    ct_bench_step_result *r = malloc(sizeof *r);
    int R = (int)a->repeat;
    double step[CT_BENCH_MAX_REPEAT], kind[CT_KP_COUNT + 1][CT_BENCH_MAX_REPEAT];
    if (!st && !r) st = CT_ERR(CT_ERR_OOM, "out of memory for the step benchmark");
    for (int i = 0; !st && i < R; i++) {
        if ((st = ct_bench_step(ctx, mc, &o, r))) break;
        step[i] = r->median_s;
        for (int k = 0; k < CT_KP_COUNT; k++) kind[k][i] = r->split.seconds[k] / r->steps;
        kind[CT_KP_COUNT][i] = r->other_s / r->steps;
    }
    free(r);
    char shape[48], name[48];
    snprintf(shape, sizeof shape, "B=%lld T=%lld", a->B, a->T);
    if (!st) st = gate_row(now, "step", shape, step, R);
    for (int k = 0; !st && k <= CT_KP_COUNT; k++) {
        double most = 0;
        for (int i = 0; i < R; i++) most = kind[k][i] > most ? kind[k][i] : most;
        if (most <= 0) continue; /* a kind this model never calls */
        snprintf(name, sizeof name, "step.%s",
                 k < CT_KP_COUNT ? ct_kprof_name((ct_kprof_kind)k) : "glue");
        st = gate_row(now, name, "per step", kind[k], R);
    }
    return st;
}

static int run_gate(ct_ctx *ctx, const bench_args *a, const ct_model_config *mc) {
    ct_baseline *base = NULL, *now = malloc(sizeof *now);
    if (!now) return cli_usage_error("bench", "out of memory");
    bool step = !strcmp(a->sub, "step");
    char options[48] = "";
    if (step)
        snprintf(options, sizeof options, "recompute %s, activations %s, %lld steps",
                 a->recompute, a->act_dtype, a->steps);
    ct_baseline_init(now, step ? "step" : "kernels", options, a->preset, a->table, (int)a->B,
                     (int)a->T, ct_ctx_threads(ctx));
    int rc = 0;
    if (a->baseline) {
        base = malloc(sizeof *base);
        if (!base) rc = cli_usage_error("bench", "out of memory");
        else if (ct_baseline_load(base, a->baseline) || ct_baseline_check(base, now, a->baseline))
            rc = cli_fail("bench");
    }
    gate_out g = {now, CT_OK};
    ct_bench_kernel_opts ko = {a->filter, (int)a->repeat, a->slow_name, (int)a->slow_factor};
    /* the roofs are not part of the gate: unit roofs keep the suite's arithmetic finite */
    if (!rc && step && gate_measure_step(ctx, a, mc, now)) rc = cli_fail("bench");
    if (!rc && !step &&
        (ct_bench_kernels(ctx, mc, (int)a->B, (int)a->T, 1.0, 1.0, &ko, collect_item, &g) ||
         g.st != CT_OK))
        rc = cli_fail("bench");
    if (!rc && !now->n)
        rc = cli_usage_error("bench", "--filter '%s' matches no kernel", a->filter ? a->filter
                                                                                    : "");
    if (!rc && a->save_baseline) {
        if (ct_baseline_save(now, a->save_baseline)) {
            rc = cli_fail("bench");
        } else {
            printf("baseline (%s, B=%d T=%d, %d threads, %s table, %lld repeats) written to %s\n",
                   now->preset, now->B, now->T, now->threads, now->table, a->repeat,
                   a->save_baseline);
            for (int i = 0; i < now->n; i++)
                printf("  %-24s %-22s %12.4f ms  noise %5.1f%%\n", now->k[i].name,
                       now->k[i].shape, now->k[i].median_s * 1e3, 100.0 * now->k[i].noise);
        }
    }
    if (!rc && a->baseline) rc = gate_compare(a, base, now);
    free(base);
    free(now);
    return rc;
}

static int run_gemm(ct_ctx *ctx, const bench_args *a, const ct_model_config *mc) {
    double t[64], flops = 0;
    if (ct_bench_gemm_step(ctx, mc, (int)a->B, (int)a->T, (int)a->reps, t, &flops))
        return cli_fail("bench");
    double med = ct_bench_median(t, (int)a->reps), lo = t[0], hi = t[0];
    for (int i = 1; i < a->reps; i++) lo = t[i] < lo ? t[i] : lo, hi = t[i] > hi ? t[i] : hi;
    if (a->json) {
        printf("{\"bench\": \"gemm\", \"preset\": \"%s\", \"B\": %lld, \"T\": %lld, "
               "\"threads\": %d, \"gemm_s\": %.9g, \"gemm_s_min\": %.9g, \"gemm_s_max\": %.9g, "
               "\"runs_s\": [",
               a->preset, a->B, a->T, ct_ctx_threads(ctx), med, lo, hi);
        for (int i = 0; i < a->reps; i++) printf("%s%.9g", i ? ", " : "", t[i]);
        printf("], \"flops\": %.6e, \"gflops\": %.3f}\n", flops, flops / med / 1e9);
    } else {
        printf("GEMM-only step (%s, B=%lld T=%lld): median %.3f s (min %.3f, max %.3f), "
               "%.1f GFLOP/s, %.0f tok/s\n",
               a->preset, a->B, a->T, med, lo, hi, flops / med / 1e9, a->B * a->T / med);
    }
    return 0;
}

static int run_step(ct_ctx *ctx, const bench_args *a, const ct_model_config *mc) {
    ct_bench_step_opts o = {(int)a->B, (int)a->T, (int)a->warmup, (int)a->steps,
                            ct_model_opts_default(), NULL, 0};
    if (ct_model_opts_from_names(&o.model, a->recompute, a->act_dtype)) return cli_fail("bench");
    ct_bench_step_result *r = malloc(sizeof *r);
    if (!r) return cli_usage_error("bench", "out of memory");
    if (ct_bench_step(ctx, mc, &o, r)) {
        free(r);
        return cli_fail("bench");
    }
    double lo = r->step_s[0], hi = r->step_s[0];
    for (int i = 1; i < r->steps; i++)
        lo = r->step_s[i] < lo ? r->step_s[i] : lo, hi = r->step_s[i] > hi ? r->step_s[i] : hi;
    double tps = (double)a->B * a->T / r->median_s;
    if (a->json) {
        printf("{\"bench\": \"step\", \"impl\": \"ctrain\", \"preset\": \"%s\", \"B\": %lld, "
               "\"T\": %lld, \"threads\": %d, \"recompute\": \"%s\", \"activation_dtype\": \"%s\", "
               "\"step_s\": [",
               a->preset, a->B, a->T, ct_ctx_threads(ctx), a->recompute, a->act_dtype);
        for (int i = 0; i < r->steps; i++) printf("%s%.9g", i ? ", " : "", r->step_s[i]);
        printf("], \"loss\": [");
        for (int i = 0; i < r->steps; i++) printf("%s%.9g", i ? ", " : "", (double)r->loss[i]);
        printf("], \"median_s\": %.9g, \"tokens_per_s\": %.3f, \"flops_per_step\": %.6e, "
               "\"gflops\": %.3f, \"peak_rss_bytes\": %zu, \"planned_bytes\": %zu, \"split_s\": {",
               r->median_s, tps, r->flops, r->flops / r->median_s / 1e9, r->peak_rss,
               r->planned_bytes);
        for (int k = 0; k < CT_KP_COUNT; k++)
            printf("\"%s\": %.9g, ", ct_kprof_name((ct_kprof_kind)k),
                   r->split.seconds[k] / r->steps);
        printf("\"untimed_glue\": %.9g}}\n", r->other_s / r->steps);
    } else {
        printf("training step (%s, B=%lld T=%lld, recompute %s, %s activations, %d threads): median %.3f s (min %.3f, max %.3f)"
               ", %.0f tok/s, %.1f GFLOP/s, peak RSS %.2f GB (plan %.2f GB)\n",
               a->preset, a->B, a->T, a->recompute, a->act_dtype, ct_ctx_threads(ctx), r->median_s,
               lo, hi, tps,
               r->flops / r->median_s / 1e9, r->peak_rss / 1e9, r->planned_bytes / 1e9);
        double total = 0;
        for (int i = 0; i < r->steps; i++) total += r->step_s[i];
        for (int k = 0; k < CT_KP_COUNT; k++) {
            if (!r->split.calls[k]) continue;
            printf("  %-14s %9.1f ms/step %5.1f%%\n", ct_kprof_name((ct_kprof_kind)k),
                   r->split.seconds[k] / r->steps * 1e3, 100.0 * r->split.seconds[k] / total);
        }
        printf("  %-14s %9.1f ms/step %5.1f%%\n", "untimed glue", r->other_s / r->steps * 1e3,
               100.0 * r->other_s / total);
    }
    free(r);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    bench_args a;
    int rc = bench_parse(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    ct_model_config mc;
    if (ct_model_config_preset(&mc, a.preset)) return cli_fail("bench");
    if (a.T > mc.n_ctx)
        return cli_usage_error("bench", "--seq %lld exceeds the context of %s (%d)", a.T, a.preset,
                               mc.n_ctx);
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = (int)a.threads;
    cp.backend = !strcmp(a.table, "ref") ? CT_BACKEND_REF : CT_BACKEND_CPU;
    ct_ctx *ctx;
    if (ct_ctx_init(&ctx, &cp)) return cli_fail("bench");
    if (a.tile_q && ct_backend_set_tiles(ct_ctx_base_backend(ctx), a.tile_q, a.tile_k)) {
        ct_ctx_free(ctx);
        return cli_usage_error("bench", "--attention-tiles %dx%d is out of range", a.tile_q,
                               a.tile_k);
    }
    roofs r = {0};
    const char *s = a.sub;
    if (!s || !strcmp(s, "peak")) rc = run_peak(ctx, &a, &r, true);
    else if (a.save_baseline || a.baseline) rc = run_gate(ctx, &a, &mc);
    else if (!strcmp(s, "kernels")) rc = run_peak(ctx, &a, &r, !a.json);
    if (!rc && (!s || !strcmp(s, "kernels")) && !a.save_baseline && !a.baseline)
        rc = run_kernels(ctx, &a, &mc, &r);
    if (!rc && s && !strcmp(s, "gemm")) rc = run_gemm(ctx, &a, &mc);
    if (!rc && (!s || !strcmp(s, "step")) && !a.save_baseline && !a.baseline)
        rc = run_step(ctx, &a, &mc);
    ct_ctx_free(ctx);
    return rc;
}
