/*
 * `ctrain bench [peak|kernels|step|gemm]`: the engine's benchmarks on this
 * machine (roofs: src/perf/bench.h; kernel suite and steps:
 * src/tools/bench_tools.h). With no subcommand it runs the roofs, the kernel
 * suite and the end-to-end step. Human-readable tables by default, one JSON
 * object per subcommand with --json. Benchmarks, not tests: the machine's load
 * moves absolute times; compare ratios within one run. `bench kernels` also
 * saves a baseline (--save-baseline) and gates on one (--baseline, exit 1 on a
 * regression; src/tools/baseline.h). `--config RUN.yaml [key=value ...]` takes
 * the model and the batch shape from a run's config, read and planned as
 * `ctrain train` reads and plans it; a LoRA config's step is its LoRA step.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cli.h"
#include "backend/cpu/gemm.h"
#include "backend/ctx.h"
#include "ctrain/model.h"
#include "ctrain/train.h"
#include "perf/bench.h"
#include "perf/hwinfo.h"
#include "perf/memplan.h"
#include "tools/baseline.h"
#include "tools/bench_tools.h"

#define BENCH_MAX_KV 64

/* the shape options and the config keys that replace them under --config */
enum { GIVEN_PRESET = 1, GIVEN_BATCH = 2, GIVEN_SEQ = 4, GIVEN_THREADS = 8, GIVEN_RECOMPUTE = 16,
       GIVEN_ACT = 32, GIVEN_TILES = 64, GIVEN_GEMM = 128,
       GIVEN_PREC = 256 };
static const struct {
    unsigned bit;
    const char *opt, *key;
} shape_opts[] = {
    {GIVEN_PRESET, "--preset", "model.preset"},
    {GIVEN_BATCH, "--batch", "train.batch_size"},
    {GIVEN_SEQ, "--seq", "train.seq_len"},
    {GIVEN_THREADS, "--threads", "run.threads"},
    {GIVEN_RECOMPUTE, "--recompute", "train.recompute"},
    {GIVEN_ACT, "--activation-dtype", "train.activation_dtype"},
    {GIVEN_TILES, "--attention-tiles", "run.attention_tiles"},
    {GIVEN_GEMM, "--gemm", "run.gemm"},
    {GIVEN_PREC, "--precision", "train.precision"},
};

typedef struct bench_args {
    const char *sub, *preset, *filter, *table, *recompute, *act_dtype, *precision;
    long long B, T, threads, warmup, steps, reps, peak_n, repeat;
    bool json;
    const char *save_baseline, *baseline; /* the regression gate (kernels) */
    char slow_name[48];                   /* --debug-slow NAME=FACTOR */
    long long slow_factor;
    int tile_q, tile_k; /* --attention-tiles; 0: the backend's default */
    const char *gemm;   /* --gemm / run.gemm; NULL: run.gemm's default */
    const char *config;           /* --config FILE */
    char *kv[BENCH_MAX_KV];       /* key=value overrides (borrowed from argv) */
    int n_kv;
    unsigned given;               /* GIVEN_* options set on the command line */
    long long grad_accum;         /* the config's micro-batches per step (shown) */
    ct_model_opts opts;           /* --config: the planned model options */
    bool have_opts;
    char label[2 * CT_PATH_MAX + 16]; /* the model's name in the output: preset or config */
    const char *device; /* --device: kernels and step on that backend; NULL: --table's */
    int dev_kind, dev_index;
    bool no_roofline;   /* --no-roofline: kernels timed alone, no peak measured first */
    ct_lora_opts lora;  /* --config: the run's LoRA adapters (r == 0: none) */
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
           "  peak     sustained sgemm GFLOP/s (and oneDNN's bf16 matmul), register-only FMA\n"
           "           and bf16 dot-product (AVX512_BF16) ceilings, memory bandwidth\n"
           "  kernels  every kernel at the model's training shapes against its roofline: the\n"
           "           least time the register FMA ceiling and the read and write streams\n"
           "           measured at the kernel's footprint (L1/L2/L3/memory) allow, so <= 100%%\n"
           "  step     end-to-end training steps (forward, backward, AdamW), split by kernel\n"
           "  gemm     the GEMM-only time of one training step (the step's own sgemm shapes)\n"
           "  (none)   peak, kernels and step\n"
           "the run's own settings:\n"
           "  --config RUN.yaml [key=value ...]  the model (model.*), micro-batch\n"
           "                  (train.batch_size, auto as train plans it), train.seq_len,\n"
           "                  run.threads, train.recompute, train.activation_dtype,\n"
           "                  train.precision, run.attention_tiles, run.gemm and the LoRA\n"
           "                  adapters (lora.*: step runs the LoRA step) of a run config,\n"
           "                  read as `ctrain train` reads it (a tuned profile's settings\n"
           "                  apply); key=value overrides win. Replaces --preset, --batch,\n"
           "                  --seq, --threads,\n"
           "                  --recompute, --activation-dtype, --precision, --attention-tiles\n"
           "                  and --gemm.\n"
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
           "  --device cpu|cuda|cuda:N|sim  kernels, step: run on that device (a GPU: the\n"
           "                  roofline is its cuBLAS fp32 GEMM peak, bf16's for the 16-bit\n"
           "                  kernels, and its device-to-device copy rate)\n"
           "  --no-roofline   kernels: time the kernels alone, measuring no peak first (under\n"
           "                  a profiler: only the kernels' own launches)\n"
           "  --recompute none|light|full  step: what backward recomputes (default none)\n"
           "  --activation-dtype fp32|bf16 step: storage of saved activations (default fp32)\n"
           "  --precision fp32|bf16  step, gemm: the GEMMs' precision (train.precision; default\n"
           "                  fp32; bf16 runs oneDNN's bf16 matmul where the CPU has bf16\n"
           "                  instructions, and is emulated or widened to fp32, slowly,\n"
           "                  elsewhere: the step line says which)\n"
           "  --attention-tiles QxK  attention tile: query rows x keys (default 64x128)\n"
           "  --gemm openblas|onednn|auto  the GEMM library (default: run.gemm's default,\n"
           "                  auto: oneDNN where OpenBLAS's kernels are narrower than\n"
           "                  the cores, else OpenBLAS)\n"
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
    *a = (bench_args){NULL, "gpt2", NULL, "cpu", "none", "fp32", "fp32", 4, 64, 0, 1, 3, 3, 2048, 5,
                      false, NULL, NULL, "", 1, 0, 0, NULL, NULL, {NULL}, 0, 0, 1, {0}, false, "",
                      NULL, CT_BACKEND_CPU, 0, false, {0}};
    int i = 0;
    if (argc > 0 && argv[0][0] != '-' && !strchr(argv[0], '=')) a->sub = argv[i++];
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
        if (!strcmp(o, "--no-roofline")) {
            a->no_roofline = true;
            continue;
        }
        if (o[0] != '-' && strchr(o, '=')) { /* key=value: a config override */
            if (a->n_kv == BENCH_MAX_KV)
                return cli_usage_error("bench", "more than %d key=value settings", BENCH_MAX_KV);
            a->kv[a->n_kv++] = argv[i];
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return cli_usage_error("bench", "option '%s' needs a value", o);
        i++;
        int rc = 0;
        for (size_t k = 0; k < sizeof shape_opts / sizeof *shape_opts; k++)
            if (!strcmp(o, shape_opts[k].opt)) a->given |= shape_opts[k].bit;
        if (!strcmp(o, "--config")) a->config = v;
        else if (!strcmp(o, "--preset")) a->preset = v;
        else if (!strcmp(o, "--filter")) a->filter = v;
        else if (!strcmp(o, "--recompute")) a->recompute = v;
        else if (!strcmp(o, "--activation-dtype")) a->act_dtype = v;
        else if (!strcmp(o, "--precision")) {
            ct_precision prec;
            if (ct_model_precision_from_name(&prec, v)) {
                ct_error_clear();
                return cli_usage_error("bench", "--precision = '%s': expected fp32, bf16 or fp16",
                                       v);
            }
            a->precision = v;
        }
        else if (!strcmp(o, "--gemm")) {
            if (ct_gemm_lib_of(v) < 0)
                return cli_usage_error("bench", "--gemm = '%s': expected auto, onednn or "
                                       "openblas%s", v, ct_gemm_have_onednn() ? ""
                                       : " (this build has no oneDNN)");
            a->gemm = v;
        }
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
        } else if (!strcmp(o, "--device")) {
            if (ct_config_device(v, &a->dev_kind, &a->dev_index)) {
                ct_error_clear();
                return cli_usage_error("bench", "--device = '%s': expected cpu, cuda or cuda:N "
                                       "(in a build with CUDA), or sim", v);
            }
            a->device = v;
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
    if (a->config || a->n_kv) {
        for (size_t k = 0; k < sizeof shape_opts / sizeof *shape_opts; k++)
            if (a->given & shape_opts[k].bit)
                return cli_usage_error("bench", "%s does not combine with --config or key=value "
                                       "settings: set %s (in the file or as %s=...)",
                                       shape_opts[k].opt, shape_opts[k].key, shape_opts[k].key);
    }
    snprintf(a->label, sizeof a->label, "%s", a->preset);
    if (a->device && (!a->sub || (strcmp(a->sub, "kernels") && strcmp(a->sub, "step"))))
        return cli_usage_error("bench", "--device works with `bench kernels` and `bench step` "
                               "only (peak and gemm measure the host; `ctrain hw` the GPU too)");
    if (a->device && strcmp(a->table, "cpu"))
        return cli_usage_error("bench", "--device and --table do not combine");
    if (a->device) a->table = a->dev_kind == CT_BACKEND_CUDA ? "cuda" : a->device;
    if ((a->save_baseline || a->baseline) &&
        (!a->sub || (strcmp(a->sub, "kernels") && strcmp(a->sub, "step"))))
        return cli_usage_error("bench", "--save-baseline and --baseline work with `bench "
                               "kernels` and `bench step` only");
    if ((a->save_baseline || a->baseline) && a->json)
        return cli_usage_error("bench", "--json does not combine with --save-baseline or "
                               "--baseline");
    return 0;
}

/* The model options of a step: the config's plan, or --recompute and
 * --activation-dtype. */
static ct_status bench_model_opts(const bench_args *a, ct_model_opts *o) {
    if (a->have_opts) {
        *o = a->opts;
        return CT_OK;
    }
    ct_status st = ct_model_opts_from_names(o, a->recompute, a->act_dtype);
    if (!st) st = ct_model_precision_from_name(&o->precision, a->precision);
    return st;
}

/* --config FILE [key=value ...]: the run's model and batch shape, read and
 * planned as `ctrain train` reads and plans them (batch_size and recompute
 * auto resolved by the planner under run.memory_limit), into mc and a. */
static int bench_config(bench_args *a, ct_model_config *mc) {
    char *args[BENCH_MAX_KV + 2];
    int n = 0;
    if (a->config) {
        args[n++] = "--config";
        args[n++] = (char *)a->config;
    }
    for (int i = 0; i < a->n_kv; i++) args[n++] = a->kv[i];
    ct_config cfg;
    bool print_only;
    int rc = cli_load_config("bench", n, args, &cfg, &print_only);
    if (rc) return rc;
    if (cfg.model.init_from[0]) {
        if (ct_model_config_load_hf(mc, cfg.model.init_from)) return cli_fail("bench");
    } else if (ct_model_config_from(mc, &cfg)) {
        return cli_fail("bench");
    }
    ct_run_plan rp;
    size_t limit;
    if (ct_run_plan_for_config(&cfg, mc, &rp, &limit)) return cli_fail("bench");
    int q = 0, k = 0;
    if (ct_config_attention_tiles(cfg.run.attention_tiles, &q, &k)) return cli_fail("bench");
    static char gemm[CT_NAME_MAX];
    snprintf(gemm, sizeof gemm, "%s", cfg.run.gemm);
    a->gemm = gemm;
    a->B = rp.B;
    a->T = rp.T;
    a->grad_accum = rp.grad_accum;
    a->threads = cfg.run.threads;
    a->opts = rp.opts;
    a->have_opts = true;
    a->recompute = ct_model_recompute_name(rp.opts.recompute);
    a->act_dtype = ct_model_act_dtype_name(rp.opts.act_dtype);
    a->precision = ct_model_precision_name(rp.opts.precision);
    a->tile_q = q, a->tile_k = k;
    const char *name = cfg.model.preset[0] ? cfg.model.preset
                       : cfg.model.init_from[0] ? cfg.model.init_from : "custom model";
    if (a->config)
        snprintf(a->label, sizeof a->label, "%s from %s", name, a->config);
    else
        snprintf(a->label, sizeof a->label, "%s", name);
    a->lora = rp.lora;
    if (rp.lora.r > 0 && (!a->sub || strcmp(a->sub, "step")))
        fprintf(stderr, "ctrain bench: note: `bench step` runs the config's LoRA step; `bench "
                "kernels` and `bench gemm` time the full model's shapes\n");
    return 0;
}

typedef struct roofs {
    double gemm, fma, theo, mhz, bw;
    double bf16;      /* register bf16 dot-product ceiling; 0: no AVX512_BF16 */
    double gemm_bf16; /* oneDNN's bf16 matmul; -1: not measured (no oneDNN); a GPU's cuBLAS
                       * bf16 GEMM under --device cuda */
    ct_bench_gemm_info gi;
    char device[128]; /* --device cuda: the GPU's name; "" otherwise */
} roofs;

/* s as a JSON string: quotes, backslashes and control bytes escaped. */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static int run_peak(ct_ctx *ctx, const bench_args *a, roofs *r, bool print) {
    if (ct_bench_gemm_peak_info(ctx, (int)a->peak_n, (int)a->reps, &r->gi))
        return cli_fail("bench");
    r->gemm = r->gi.gflops;
    if (r->gi.others_cpus >= CT_HW_BUSY_CPUS)
        fprintf(stderr, "ctrain bench: warning: other processes used %.2f of this process's CPUs "
                "during the sgemm runs: the machine is busy and every figure may read low\n",
                r->gi.others_cpus);
    r->fma = ct_bench_fma_peak(ctx);
    r->bf16 = ct_bench_bf16_peak(ctx);
    r->gemm_bf16 = -1;
    r->theo = ct_bench_theoretical_gflops(ct_ctx_threads(ctx), &r->mhz);
    if (ct_bench_membw(ctx, 128, (int)a->reps, &r->bw)) return cli_fail("bench");
    if (!print) return 0;
    /* both GEMM libraries' peaks, when the build has both: the one in use
     * was measured above, the other is measured the same way */
    int used = ct_ctx_base_backend(ctx)->gemm;
    double lib_peak[2] = {-1, -1};
    lib_peak[used] = r->gemm;
    if (ct_gemm_have_onednn()) {
        ct_bench_gemm_info other;
        int lib = used == CT_GEMM_ONEDNN ? CT_GEMM_OPENBLAS : CT_GEMM_ONEDNN;
        if (ct_bench_gemm_peak_lib(ctx, lib, false, (int)a->peak_n, (int)a->reps, &other))
            return cli_fail("bench");
        lib_peak[lib] = other.gflops;
    }
    /* oneDNN's bf16 matmul (bf16 inputs, fp32 accumulation) beside its sgemm */
    if (ct_gemm_have_onednn()) {
        ct_bench_gemm_info bi;
        if (ct_bench_gemm_peak_lib(ctx, CT_GEMM_ONEDNN, true, (int)a->peak_n, (int)a->reps, &bi))
            return cli_fail("bench");
        r->gemm_bf16 = bi.gflops;
    }
    char libs[200], bf16[96];
    int ln = snprintf(libs, sizeof libs, "OpenBLAS (%s kernels) %.1f", openblas_get_corename(),
                      lib_peak[CT_GEMM_OPENBLAS]);
    if (lib_peak[CT_GEMM_ONEDNN] >= 0)
        ln += snprintf(libs + ln, sizeof libs - (size_t)ln, ", oneDNN %.1f",
                       lib_peak[CT_GEMM_ONEDNN]);
    /* the instructions oneDNN's bf16 matmul runs here (what a bf16 run gets),
     * and the AMX state the hardware profile read */
    char impl[64];
    ct_gemm_bf16_path path = ct_gemm_bf16_path_of(CT_GEMM_ONEDNN, impl, sizeof impl);
    ct_hwinfo h;
    ct_hwinfo_read(&h);
    if (r->gemm_bf16 >= 0)
        snprintf(libs + ln, sizeof libs - (size_t)ln, ", oneDNN bf16 matmul %.1f (%s%s%s)",
                 r->gemm_bf16, ct_gemm_bf16_path_name(path), impl[0] ? ", " : "", impl);
    if (r->bf16 > 0)
        snprintf(bf16, sizeof bf16, "%.1f GFLOP/s", r->bf16);
    else
        snprintf(bf16, sizeof bf16, "n/a (no avx512_bf16)");
    if (a->json)
        printf("{\"bench\": \"peak\", \"threads\": %d, \"gemm_peak_gflops\": %.2f, "
               "\"fma_peak_gflops\": %.2f, \"theoretical_gflops\": %.2f, \"nominal_mhz\": %.0f, "
               "\"membw_gbps\": %.2f, \"gemm_shape\": [%lld, %lld, %lld], \"blas\": \"%s\", "
               "\"gemm_long_gflops\": %.2f, \"gemm_short_gflops\": %.2f, \"gemm_runs\": %d, "
               "\"others_cpus\": %.3f, \"gemm\": \"%s\", \"gemm_peak_openblas_gflops\": %.2f, "
               "\"gemm_peak_onednn_gflops\": %.2f, \"avx512_bf16\": %s, \"amx_tile\": %s, "
               "\"amx_bf16\": %s, \"amx_permitted\": %s, \"gemm_bf16_path\": \"%s\", "
               "\"gemm_bf16_impl\": \"%s\", \"bf16_peak_gflops\": ",
               ct_ctx_threads(ctx), r->gemm, r->fma, r->theo, r->mhz, r->bw, a->peak_n, a->peak_n,
               a->peak_n, openblas_get_corename(), r->gi.long_gflops, r->gi.short_gflops,
               r->gi.runs, r->gi.others_cpus, ct_gemm_lib_name((ct_gemm_lib)used),
               lib_peak[CT_GEMM_OPENBLAS], lib_peak[CT_GEMM_ONEDNN],
               ct_bench_have_bf16_dot() ? "true" : "false", h.amx_tile ? "true" : "false",
               h.amx_bf16 ? "true" : "false",
               h.amx_perm < 0 ? "null" : h.amx_perm ? "true" : "false",
               ct_gemm_bf16_path_name(path), impl);
    else
        printf("roofs (%d threads): sgemm %lldx%lldx%lld %.1f GFLOP/s (%s, run.gemm) | register "
               "FMA ceiling %.1f GFLOP/s | register bf16 dot-product ceiling %s | theoretical "
               "%.1f GFLOP/s at %.0f MHz | triad bandwidth %.1f GB/s | GEMM by library: %s "
               "GFLOP/s\n",
               ct_ctx_threads(ctx), a->peak_n, a->peak_n, a->peak_n, r->gemm,
               ct_gemm_lib_name((ct_gemm_lib)used), r->fma, bf16, r->theo, r->mhz, r->bw, libs);
    if (!a->json) {
        char why[256];
        printf("bf16 (%s): instructions %s; AMX tiles %s; bf16 GEMMs %s\n",
               h.cpu_model[0] ? h.cpu_model : "CPU model unknown",
               ct_hwinfo_bf16_describe(&h, why, sizeof why),
               !h.amx_tile ? "absent" : h.amx_perm == 1 ? "granted by the kernel"
                                      : h.amx_perm == 0 ? "refused by the kernel" : "not asked",
               ct_gemm_bf16_path_native(path)
                   ? "native: a bf16 run's MFU is against the bf16 matmul's rate"
                   : "not native: train.precision=bf16 is refused here");
    }
    if (a->json) { /* null: not measured here (no avx512_bf16; no oneDNN) */
        if (r->bf16 > 0) printf("%.2f", r->bf16);
        else printf("null");
        printf(", \"gemm_bf16_onednn_gflops\": ");
        if (r->gemm_bf16 >= 0) printf("%.2f", r->gemm_bf16);
        else printf("null");
        printf(", \"gemm_bf16_native\": %s", ct_gemm_have_bf16() ? "true" : "false");
    }
    /* a GPU's peaks too: its theoretical ones and cuBLAS's fp32 and bf16 GEMMs */
    ct_gpu_peaks g;
    bool gpu = ct_cuda_probe(NULL, 0, NULL, 0) > 0;
    if (gpu && ct_bench_gpu_peaks(0, true, 8192, (int)a->reps, &g)) {
        fprintf(stderr, "ctrain bench: warning: the GPU did not start: %s\n", ct_last_error());
        ct_error_clear();
        gpu = false;
    }
    if (gpu) cli_gpu_print(&g, a->json);
    if (a->json) printf("}\n");
    return 0;
}

/* The roofline of a device's kernels: cuBLAS's fp32 and bf16 GEMM peaks on
 * the GPU (ct_bench_gpu_peaks); none on sim (r->fma 0: no roofline). */
static int device_roofs(const bench_args *a, roofs *r) {
    if (a->dev_kind != CT_BACKEND_CUDA) return 0;
    ct_gpu_peaks g;
    if (ct_bench_gpu_peaks(a->dev_index, true, 8192, (int)a->reps, &g)) return cli_fail("bench");
    r->fma = r->gemm = g.fp32_gemm_gflops;
    r->gemm_bf16 = g.bf16_gemm_gflops;
    r->theo = g.info.fp32_theory_gflops;
    snprintf(r->device, sizeof r->device, "%s", g.info.name);
    if (!a->json)
        printf("%s: cuBLAS GEMM peaks %.0f GFLOP/s fp32, %.0f bf16 (%d x %d x %d)\n",
               g.info.name, g.fp32_gemm_gflops, g.bf16_gemm_gflops, g.gemm_n, g.gemm_n, g.gemm_n);
    return 0;
}

typedef struct item_out {
    bool json;
    int n;
    bool c16; /* a CPU whose 16-bit kernels meet the bf16 dot-product ceiling */
} item_out;

/* "1.5 GiB", "96 KiB" */
static const char *fmt_size(char *buf, size_t cap, double b) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) b /= 1024.0, u++;
    snprintf(buf, cap, b < 10 && u ? "%.1f %s" : "%.0f %s", b, units[u]);
    return buf;
}

static void print_item(const ct_bench_item *it, void *user) {
    item_out *o = user;
    double rate = it->flops > 0 ? it->flops / it->seconds / 1e9 : it->bytes / it->seconds / 1e9;
    const char *unit = it->flops > 0 ? "GFLOP/s" : "GB/s";
    double eff = it->roof_s / it->seconds;
    char fp[32];
    if (o->json)
        printf("%s{\"name\": \"%s\", \"shape\": \"%s\", \"seconds\": %.6e, \"flops\": %.6e, "
               "\"bytes\": %.6e, \"read_bytes\": %.6e, \"write_bytes\": %.6e, "
               "\"footprint_bytes\": %.6e, \"level\": \"%s\", \"rate\": %.3f, \"unit\": \"%s\", "
               "\"roofline_s\": %.6e, \"bound\": \"%s\", \"bound_rate\": %.6e, "
               "\"of_roofline\": %.6e}",
               o->n ? ", " : "", it->name, it->shape, it->seconds, it->flops, it->bytes,
               it->read_bytes, it->write_bytes, it->footprint, it->level, rate, unit, it->roof_s,
               it->bound, it->bound_rate, eff);
    else if (it->roof_s <= 0) /* no roofline (sim) */
        printf("  %-24s %-22s %10.3f ms %9.1f %-7s\n", it->name, it->shape, it->seconds * 1e3,
               rate, unit);
    else if (!strcmp(it->bound, "compute"))
        printf("  %-24s %-22s %10.3f ms %9.1f %-7s %5.1f%% of the %s ceiling (%.0f GFLOP/s)\n",
               it->name, it->shape, it->seconds * 1e3, rate, unit, 100.0 * eff,
               o->c16 && strstr(it->name, "16") ? "bf16 dot-product" : "FMA", it->bound_rate);
    else
        printf("  %-24s %-22s %10.3f ms %9.1f %-7s %5.1f%% of the %s stream at %s in %s "
               "(%.1f GB/s)\n",
               it->name, it->shape, it->seconds * 1e3, rate, unit, 100.0 * eff, it->bound,
               fmt_size(fp, sizeof fp, it->footprint), it->level, it->bound_rate);
    fflush(stdout);
    o->n++;
}

static int run_kernels(ct_ctx *ctx, const bench_args *a, const ct_model_config *mc,
                       const roofs *r) {
    bool dev = ct_ctx_base_backend(ctx)->queued;
    item_out o = {a->json, 0, !dev && r->bf16 > 0};
    if (a->json && dev) {
        printf("{\"bench\": \"kernels\", \"table\": \"%s\", \"device\": ", a->table);
        json_str(r->device[0] ? r->device : a->table);
        printf(", \"preset\": ");
        json_str(a->label);
        printf(", \"B\": %lld, \"T\": %lld, \"gemm_peak_gflops\": %.2f, "
               "\"gemm_bf16_peak_gflops\": %.2f, \"roofline\": \"max(flops / the GEMM peak "
               "(bf16's for the 16-bit kernels), (read_bytes + write_bytes) / the device's copy "
               "rate at the footprint)\", \"roofline_valid\": %s, \"items\": [",
               a->B, a->T, r->fma, r->gemm_bf16 > 0 ? r->gemm_bf16 : 0.0,
               r->fma > 0 ? "true" : "false");
    } else if (dev) {
        printf("kernels (%s, %s, B=%lld T=%lld)\n", r->device[0] ? r->device : a->table,
               a->label, a->B, a->T);
        if (r->fma > 0)
            printf("  %% of roofline: the least time the device allows over the kernel's time:\n"
                   "  max(FLOPs / cuBLAS's GEMM peak (bf16's for the 16-bit kernels), bytes read\n"
                   "  and written / the device's copy rate at the kernel's footprint)\n");
        else
            printf("  (no roofline: %s)\n", a->no_roofline ? "--no-roofline" : "no GPU peaks here");
    } else if (a->json) {
        printf("{\"bench\": \"kernels\", \"table\": \"%s\", \"preset\": ", a->table);
        json_str(a->label);
        printf(", \"B\": %lld, \"T\": %lld, \"threads\": %d, \"gemm_peak_gflops\": %.2f, "
               "\"fma_peak_gflops\": %.2f, \"bf16_peak_gflops\": %.2f, \"membw_gbps\": %.2f, "
               "\"roofline\": \"max(flops / fma_peak (bf16_peak for the 16-bit kernels where "
               "it is > 0), read_bytes / read stream, write_bytes / write stream), streams "
               "measured at the footprint\", \"roofline_valid\": %s, \"items\": [",
               a->B, a->T, ct_ctx_threads(ctx), r->gemm, r->fma, r->bf16 > 0 ? r->bf16 : 0.0,
               r->bw, ct_bench_build_optimized() && r->fma > 0 ? "true" : "false");
    } else if (a->no_roofline) {
        printf("kernels (%s table, %s, B=%lld T=%lld; no roofline: --no-roofline)\n", a->table,
               a->label, a->B, a->T);
    } else {
        printf("kernels (%s table, %s, B=%lld T=%lld)\n"
               "  %% of roofline: the least time the hardware allows over the kernel's time:\n"
               "  max(FLOPs / the register FMA ceiling, bytes read / the read stream, bytes\n"
               "  written / the write stream), the streams measured over the kernel's footprint\n"
               "  (so cache-resident data meets its cache's bandwidth); each line names the\n"
               "  binding bound%s\n",
               a->table, a->label, a->B, a->T,
               r->bf16 > 0 ? "; kernels on bf16 operands (names with 16) meet the\n"
                             "  register bf16 dot-product ceiling instead of the FMA ceiling"
                           : "");
    }
    if (!ct_bench_build_optimized() && !dev && !a->no_roofline)
        fprintf(stderr, "ctrain bench: warning: this ctrain is built without optimization or "
                "with sanitizers: the FMA ceiling and the stream probes run far below the "
                "hardware, so the roofline percentages are not bounds (use a Release build)\n");
    ct_bench_kernel_opts ko = {a->filter, (int)a->repeat, a->slow_name, (int)a->slow_factor,
                               dev ? (r->gemm_bf16 > 0 ? r->gemm_bf16 : 0)
                                   : (r->bf16 > 0 ? r->bf16 : 0)};
    if (ct_bench_kernels(ctx, mc, (int)a->B, (int)a->T, r->fma, &ko, print_item, &o)) {
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
                            ct_model_opts_default(), a->slow_name, (int)a->slow_factor,
                            a->lora};
    ct_status st = bench_model_opts(a, &o.model);
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
        snprintf(options, sizeof options, "recompute %s, activations %s, %lld steps%s",
                 a->recompute, a->act_dtype, a->steps,
                 strcmp(a->precision, "bf16") ? "" : ", bf16");
    ct_baseline_init(now, step ? "step" : "kernels", options, a->label, a->table, (int)a->B,
                     (int)a->T, ct_ctx_threads(ctx));
    int rc = 0;
    if (a->baseline) {
        base = malloc(sizeof *base);
        if (!base) rc = cli_usage_error("bench", "out of memory");
        else if (ct_baseline_load(base, a->baseline) || ct_baseline_check(base, now, a->baseline))
            rc = cli_fail("bench");
    }
    gate_out g = {now, CT_OK};
    ct_bench_kernel_opts ko = {a->filter, (int)a->repeat, a->slow_name, (int)a->slow_factor, 0};
    /* the roofs are not part of the gate: no roofline, no bandwidth probes */
    if (!rc && step && gate_measure_step(ctx, a, mc, now)) rc = cli_fail("bench");
    if (!rc && !step &&
        (ct_bench_kernels(ctx, mc, (int)a->B, (int)a->T, 0, &ko, collect_item, &g) ||
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
    ct_precision prec;
    if (ct_model_precision_from_name(&prec, a->precision)) return cli_fail("bench");
    if (ct_bench_gemm_step(ctx, mc, (int)a->B, (int)a->T, prec, (int)a->reps, t, &flops))
        return cli_fail("bench");
    double med = ct_bench_median(t, (int)a->reps), lo = t[0], hi = t[0];
    for (int i = 1; i < a->reps; i++) lo = t[i] < lo ? t[i] : lo, hi = t[i] > hi ? t[i] : hi;
    if (a->json) {
        printf("{\"bench\": \"gemm\", \"preset\": ");
        json_str(a->label);
        printf(", \"B\": %lld, \"T\": %lld, \"threads\": %d, \"precision\": \"%s\", "
               "\"gemm\": \"%s\", \"gemm_s\": %.9g, \"gemm_s_min\": %.9g, "
               "\"gemm_s_max\": %.9g, \"runs_s\": [",
               a->B, a->T, ct_ctx_threads(ctx), a->precision,
               ct_gemm_lib_name((ct_gemm_lib)ct_ctx_base_backend(ctx)->gemm), med, lo, hi);
        for (int i = 0; i < a->reps; i++) printf("%s%.9g", i ? ", " : "", t[i]);
        printf("], \"flops\": %.6e, \"gflops\": %.3f}\n", flops, flops / med / 1e9);
    } else {
        printf("GEMM-only step (%s, B=%lld T=%lld, %s GEMMs, %s): median %.3f s (min %.3f, "
               "max %.3f), %.1f GFLOP/s, %.0f tok/s\n",
               a->label, a->B, a->T, a->precision,
               ct_gemm_lib_name((ct_gemm_lib)ct_ctx_base_backend(ctx)->gemm), med, lo, hi,
               flops / med / 1e9, a->B * a->T / med);
    }
    return 0;
}

static int run_step(ct_ctx *ctx, const bench_args *a, const ct_model_config *mc) {
    ct_bench_step_opts o = {(int)a->B, (int)a->T, (int)a->warmup, (int)a->steps,
                            ct_model_opts_default(), NULL, 0, a->lora};
    if (bench_model_opts(a, &o.model)) return cli_fail("bench");
    char lora[96] = ""; /* the adapters, in the step's line */
    if (a->lora.r > 0) {
        int kinds = 0;
        for (uint32_t b = a->lora.targets; b; b &= b - 1) kinds++;
        snprintf(lora, sizeof lora, ", LoRA r=%d on %d modules a layer, base %s", a->lora.r,
                 kinds, a->lora.base_bf16 ? "bf16" : "fp32");
    }
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
    const ct_backend *be = ct_ctx_base_backend(ctx);
    int tq = be->att_bq, tk = be->att_bk; /* the tile the step ran with */
    if (a->json) {
        printf("{\"bench\": \"step\", \"impl\": \"ctrain\", \"preset\": ");
        json_str(a->label);
        printf(", \"config\": ");
        if (a->config) json_str(a->config);
        else printf("null");
        printf(", \"model\": {\"arch\": \"%s\", \"n_layer\": %d, \"n_embd\": %d, "
               "\"n_head\": %d, \"n_kv_head\": %d, \"n_ffn\": %d, \"vocab_size\": %d, "
               "\"n_ctx\": %d}, \"B\": %lld, \"T\": %lld, \"grad_accum\": %lld, "
               "\"threads\": %d, \"recompute\": \"%s\", \"activation_dtype\": \"%s\", "
               "\"precision\": \"%s\", \"attention_tiles\": \"%dx%d\", \"gemm\": \"%s\", ",
               mc->arch == CT_ARCH_LLAMA ? "llama" : "gpt2", mc->n_layer, mc->n_embd, mc->n_head,
               mc->n_kv_head, mc->n_ffn, mc->vocab_size, mc->n_ctx, a->B, a->T, a->grad_accum,
               ct_ctx_threads(ctx), a->recompute, a->act_dtype, a->precision, tq, tk,
               ct_gemm_lib_name((ct_gemm_lib)be->gemm));
        if (a->lora.r > 0)
            printf("\"lora\": {\"r\": %d, \"alpha\": %g, \"targets\": %u, \"base_dtype\": "
                   "\"%s\"}, ", a->lora.r, (double)a->lora.alpha, a->lora.targets,
                   a->lora.base_bf16 ? "bf16" : "fp32");
        else
            printf("\"lora\": null, ");
        printf("\"trainable\": %zu, \"step_s\": [", r->trainable);
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
        if (a->config || a->n_kv)
            printf("model %s: %s, %d layers, %d channels, %d heads (%d KV), MLP %d, vocabulary "
                   "%d, context %d; grad_accum %lld (the run's optimizer step is %lld of these "
                   "micro-batch steps), attention tile %dx%d\n",
                   a->label, mc->arch == CT_ARCH_LLAMA ? "llama" : "gpt2", mc->n_layer,
                   mc->n_embd, mc->n_head, mc->n_kv_head, mc->n_ffn, mc->vocab_size, mc->n_ctx,
                   a->grad_accum, a->grad_accum, tq, tk);
        printf("training step (%s, B=%lld T=%lld, recompute %s, %s activations, %s%s GEMMs%s, "
               "%d threads): "
               "median %.3f s (min %.3f, max %.3f), %.0f tok/s, %.1f GFLOP/s, peak RSS %.2f GB "
               "(plan %.2f GB)\n",
               a->label, a->B, a->T, a->recompute, a->act_dtype, a->precision,
               strcmp(a->precision, "bf16") ? ""
               : ct_gemm_bf16_path_of((ct_gemm_lib)be->gemm, NULL, 0) == CT_GEMM_BF16_EMULATED
                   ? " (emulated)"
               : ct_gemm_bf16_path_of((ct_gemm_lib)be->gemm, NULL, 0) == CT_GEMM_BF16_WIDENED
                   ? " (widened to fp32)"
                   : "",
               lora, ct_ctx_threads(ctx), r->median_s,
               lo, hi, tps, r->flops / r->median_s / 1e9, r->peak_rss / 1e9,
               r->planned_bytes / 1e9);
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
    if (a.config || a.n_kv) {
        if ((rc = bench_config(&a, &mc))) return rc;
    } else if (ct_model_config_preset(&mc, a.preset)) {
        return cli_fail("bench");
    }
    if (a.T > mc.n_ctx)
        return cli_usage_error("bench", "--seq %lld exceeds the context of %s (%d)", a.T, a.label,
                               mc.n_ctx);
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = (int)a.threads;
    cp.backend = !strcmp(a.table, "ref") ? CT_BACKEND_REF : CT_BACKEND_CPU;
    if (a.device) {
        cp.backend = (ct_backend_kind)a.dev_kind;
        cp.device = a.dev_index;
    }
    ct_ctx *ctx;
    if (ct_ctx_init(&ctx, &cp)) return cli_fail("bench");
    /* no --gemm: run.gemm's default, as `ctrain train` runs */
    static ct_config defaults;
    ct_config_default(&defaults);
    if (!a.gemm) a.gemm = defaults.run.gemm;
    if (ct_backend_set_gemm(ct_ctx_base_backend(ctx), a.gemm)) {
        ct_ctx_free(ctx);
        return cli_usage_error("bench", "--gemm / run.gemm = %s: this build has no oneDNN", a.gemm);
    }
    /* a bf16 step runs oneDNN's bf16 matmul where it is native, as train does */
    ct_backend *be0 = ct_ctx_base_backend(ctx);
    bool bf16 = a.precision && !strcmp(a.precision, "bf16");
    be0->gemm = ct_gemm_lib_for_run((ct_gemm_lib)be0->gemm, bf16, bf16 && ct_gemm_have_bf16());
    if (a.tile_q && ct_backend_set_tiles(ct_ctx_base_backend(ctx), a.tile_q, a.tile_k)) {
        ct_ctx_free(ctx);
        return cli_usage_error("bench", "--attention-tiles %dx%d is out of range", a.tile_q,
                               a.tile_k);
    }
    roofs r = {0};
    const char *s = a.sub;
    if (!s || !strcmp(s, "peak")) rc = run_peak(ctx, &a, &r, true);
    else if (a.save_baseline || a.baseline) rc = run_gate(ctx, &a, &mc);
    else if (!strcmp(s, "kernels") && a.no_roofline)
        rc = 0; /* the kernels alone: r stays zero, no roofline */
    else if (!strcmp(s, "kernels") && ct_ctx_base_backend(ctx)->queued)
        rc = device_roofs(&a, &r);
    else if (!strcmp(s, "kernels")) rc = run_peak(ctx, &a, &r, !a.json);
    if (!rc && (!s || !strcmp(s, "kernels")) && !a.save_baseline && !a.baseline)
        rc = run_kernels(ctx, &a, &mc, &r);
    if (!rc && s && !strcmp(s, "gemm")) rc = run_gemm(ctx, &a, &mc);
    if (!rc && (!s || !strcmp(s, "step")) && !a.save_baseline && !a.baseline)
        rc = run_step(ctx, &a, &mc);
    ct_ctx_free(ctx);
    return rc;
}
