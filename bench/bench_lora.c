/*
 * The LoRA adapters' own work on one layer, batched against per module: the
 * forward and backward of every adapter of a LLaMA layer (q, k, v, o, gate,
 * up, down unless --targets says otherwise) at a model's shapes, the base
 * GEMMs left out, timed with the batched A side (adapters sharing a GEMM's
 * input run as one GEMM) and with one GEMM per adapter, alternating so that
 * both see the same machine. With --step the same for whole training passes
 * (ct_model_forward_backward of an --layers deep model, base GEMMs, head and
 * all). Not a test: it prints the medians and their ratio and exits 0 (2 on
 * bad arguments).
 *
 * Built with the rest (bench/CMakeLists.txt):
 *   build/bench/bench_lora [--preset P] [--batch B] [--seq T] [--r R] [--layers L]
 *                          [--targets LIST] [--reps N] [--threads N] [--backend ref|cpu]
 *                          [--step]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds of one layer's adapter forward and backward, every GEMM carrying one. */
static double one_pass(ct_model *m, float **out, float *dx, const float *x, const float *dy,
                       int N) {
    ct_backend *be = m->be;
    be->i->synchronize(be);
    double t0 = ct_time_s();
    for (int lin = LIN_QKV; lin <= LIN_FCPROJ; lin++) {
        if (!model_lora_on(m, lin)) continue;
        linear_shape s = model_linear_shape(m, 0, lin);
        model_lora_forward(m, 0, lin, out[lin], s.out, x, N);
    }
    for (int lin = LIN_FCPROJ; lin >= LIN_QKV; lin--) {
        if (!model_lora_on(m, lin)) continue;
        linear_shape s = model_linear_shape(m, 0, lin);
        model_lora_backward(m, 0, lin, dx, dy, s.out, x, N);
    }
    be->i->synchronize(be);
    return ct_time_s() - t0;
}

/* Seconds of one training pass (forward and backward) of the whole model. */
static double one_step(ct_model *m, const int32_t *in, const int32_t *tg, int B, int T) {
    ct_model_zero_grads(m);
    double t0 = ct_time_s();
    float loss;
    ct_status st = ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss);
    if (st) fprintf(stderr, "bench_lora: %s\n", ct_last_error());
    return ct_time_s() - t0;
}

int main(int argc, char **argv) {
    const char *preset = "tinyllama-1.1b", *targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,"
                                                      "up_proj,down_proj";
    int B = 1, T = 512, r = 16, reps = 30, threads = 0, layers = 1;
    bool step = false;
    ct_backend_kind kind = CT_BACKEND_CPU;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--step")) {
            step = true;
            continue;
        }
        if (!v) goto usage;
        if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--seq")) T = atoi(v);
        else if (!strcmp(a, "--r")) r = atoi(v);
        else if (!strcmp(a, "--targets")) targets = v;
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--layers")) layers = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--backend") && !strcmp(v, "ref")) kind = CT_BACKEND_REF;
        else if (!strcmp(a, "--backend") && !strcmp(v, "cpu")) kind = CT_BACKEND_CPU;
        else goto usage;
        i++;
    }
    if (B < 1 || T < 1 || r < 1 || reps < 1 || layers < 1) goto usage;

    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = kind;
    cp.n_threads = threads;
    ct_ctx *ctx = NULL;
    ct_model *m = NULL;
    ct_model_config c;
    ct_status st;
    if ((st = ct_ctx_init(&ctx, &cp)) || (st = ct_model_config_preset(&c, preset))) goto fail;
    c.n_layer = layers; /* the adapters of layer 0 alone, or passes of the whole model */
    if (c.arch != CT_ARCH_LLAMA) {
        fprintf(stderr, "bench_lora: %s is not a llama-layout preset\n", preset);
        return 2;
    }
    ct_lora_opts lo = {.r = r, .alpha = 2.0f * (float)r, .seed = 1};
    if ((st = ct_lora_targets_parse(&c, targets, "--targets", &lo.targets)) ||
        (st = ct_model_init(&m, ctx, &c)) || (st = ct_model_lora_attach(m, &lo)) ||
        (st = ct_model_lora_init_weights(m, 3)) || (st = ct_model_reserve(m, B, T, true)))
        goto fail;
    int N = B * T, C = c.n_embd, widest = model_qkv_width(&c);
    if (model_fc_width(&c) > widest) widest = model_fc_width(&c);
    ct_backend *be = ct_ctx_backend(ctx);
    size_t nx = (size_t)N * (c.n_ffn > C ? c.n_ffn : C), ny = (size_t)N * widest;
    float *x = be->i->buf_alloc(be, nx * sizeof(float), CT_TAG_SCRATCH);
    float *dx = be->i->buf_alloc(be, nx * sizeof(float), CT_TAG_SCRATCH);
    float *dy = be->i->buf_alloc(be, ny * sizeof(float), CT_TAG_SCRATCH);
    float *out[LIN_FCPROJ + 1];
    for (int l = 0; l <= LIN_FCPROJ; l++)
        out[l] = be->i->buf_alloc(be, ny * sizeof(float), CT_TAG_SCRATCH);
    double *t[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
    if (!x || !dx || !dy || !out[0] || !out[1] || !out[2] || !out[3] || !t[0] || !t[1]) {
        fprintf(stderr, "bench_lora: out of memory\n");
        return 1;
    }
    int32_t *in = malloc((size_t)N * sizeof *in), *tg = malloc((size_t)N * sizeof *tg);
    if (!in || !tg) return 1;
    for (int i = 0; i < N; i++) {
        in[i] = (int32_t)((i * 7919u) % (unsigned)c.vocab_size);
        tg[i] = (int32_t)((i * 104729u + 1) % (unsigned)c.vocab_size);
    }
    be->i->fill(be, x, 0.5f, nx);
    be->i->fill(be, dy, 0.25f, ny);
    ct_model_zero_grads(m);
    for (int w = 0; w < 2; w++) { /* warm-up: both paths once */
        model_lora_set_batch(m, w == 0);
        if (step) one_step(m, in, tg, B, T);
        else one_pass(m, out, dx, x, dy, N);
    }
    for (int i = 0; i < reps; i++) {
        for (int b = 0; b < 2; b++) { /* alternate, starting with each in turn */
            int path = (i + b) % 2;   /* 0: batched, 1: per module */
            model_lora_set_batch(m, path == 0);
            t[path][i] = step ? one_step(m, in, tg, B, T) : one_pass(m, out, dx, x, dy, N);
        }
    }
    qsort(t[0], (size_t)reps, sizeof(double), cmp_double);
    qsort(t[1], (size_t)reps, sizeof(double), cmp_double);
    double mb = t[0][reps / 2], mp = t[1][reps / 2];
    printf("bench_lora: %s, %d layer(s), %s backend, N=%d (B=%d T=%d), r=%d, targets %s, "
           "%d reps\n", preset, layers, be->i->name, N, B, T, r, targets, reps);
    printf("  %s: batched %.3f ms, per module %.3f ms (median), per module / batched = %.3f\n",
           step ? "training pass (forward+backward)" : "layer 0's adapters, forward+backward",
           mb * 1e3, mp * 1e3, mp / mb);
    if (step)
        printf("  tokens/s: batched %.1f, per module %.1f\n", N / mb, N / mp);
    free(in);
    free(tg);
    for (int l = 0; l <= LIN_FCPROJ; l++) be->i->buf_free(be, out[l]);
    be->i->buf_free(be, dy);
    be->i->buf_free(be, dx);
    be->i->buf_free(be, x);
    free(t[0]);
    free(t[1]);
    ct_model_free(m);
    ct_ctx_free(ctx);
    return 0;
fail:
    fprintf(stderr, "bench_lora: %s\n", ct_last_error());
    ct_model_free(m);
    ct_ctx_free(ctx);
    return st == CT_ERR_ARG ? 2 : 1;
usage:
    fprintf(stderr, "usage: bench_lora [--preset P] [--batch B] [--seq T] [--r R] [--layers L] "
            "[--targets LIST] [--reps N] [--threads N] [--backend ref|cpu] [--step]\n");
    return 2;
}
