/*
 * models/: the GPT-2 member of the family on a tiny config. Checks the
 * backward against central finite differences of the loss, the KV-cache
 * decode against a full forward, gradient accumulation, cpu vs ref kernel
 * tables, the memory plan against what is allocated, bad tokens/shapes, and
 * that training steps take no page faults (buffers are resident before step 1).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ct_test.h"
#include "ctrain/model.h"
#include "ctrain/train.h"

enum { B = 2, T = 7 };

static ct_model *make_model(ct_ctx *ctx, int n_layer) {
    ct_model_config c;
    ct_model_config_gpt2(&c, n_layer, 2, 16, 37, 12);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    ct_model_init_weights(m, 7);
    /* make every parameter matter: random norms and biases, larger weights */
    ct_rng r;
    ct_rng_init(&r, 99);
    float *p = ct_model_params(m);
    for (int i = 0; i < ct_model_num_params(m); i++) {
        const ct_param *q = ct_model_param(m, i);
        for (size_t j = 0; j < q->numel; j++) {
            float u = ct_rng_float(&r) - 0.5f;
            if (q->ndim == 1) p[q->offset + j] += 0.2f * u;
            else p[q->offset + j] += 0.3f * u;
        }
    }
    return m;
}

static void make_tokens(int32_t *in, int32_t *tg, int n, uint64_t seed) {
    ct_rng r;
    ct_rng_init(&r, seed);
    for (int i = 0; i < n; i++) {
        in[i] = (int32_t)(ct_rng_u32(&r) % 37);
        tg[i] = (int32_t)(ct_rng_u32(&r) % 37);
    }
}

static void test_finite_differences(ct_ctx *ctx) {
    ct_model *m = make_model(ctx, 2);
    CHECK(ct_model_reserve(m, B, T, true) == CT_OK);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 5);
    float loss;
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss) == CT_OK);
    float *p = ct_model_params(m), *g = ct_model_grads(m);
    /* per tensor: the entry with the largest gradient, and one random entry */
    ct_rng r;
    ct_rng_init(&r, 3);
    int worst_ok = 1;
    for (int i = 0; i < ct_model_num_params(m); i++) {
        const ct_param *q = ct_model_param(m, i);
        size_t pick[2] = {0, ct_rng_u32(&r) % q->numel};
        for (size_t j = 1; j < q->numel; j++)
            if (fabsf(g[q->offset + j]) > fabsf(g[q->offset + pick[0]])) pick[0] = j;
        for (int s = 0; s < 2; s++) {
            size_t at = q->offset + pick[s];
            float keep = p[at];
            const float eps = 1e-2f;
            float lp, lm;
            p[at] = keep + eps;
            CHECK(ct_model_forward(m, in, tg, B, T, &lp) == CT_OK);
            p[at] = keep - eps;
            CHECK(ct_model_forward(m, in, tg, B, T, &lm) == CT_OK);
            p[at] = keep;
            double fd = ((double)lp - (double)lm) / (2.0 * eps);
            double an = g[at];
            bool ok = fabs(fd - an) <= 0.03 * fabs(an) + 2e-4;
            if (!ok) worst_ok = 0;
            CHECK_MSG(ok, "%s[%zu]: analytic %.6g vs finite difference %.6g", q->name, pick[s],
                      an, fd);
        }
    }
    CHECK(worst_ok);
    ct_model_free(m);
}

static void test_decode_matches_forward(ct_ctx *ctx) {
    ct_model *m = make_model(ctx, 2);
    const int n = 9, V = 37;
    CHECK(ct_model_reserve(m, 1, n, false) == CT_OK);
    int32_t ids[9] = {3, 1, 4, 1, 5, 9, 2, 6, 5};
    float *full = malloc(sizeof(float) * n * V), *step = malloc(sizeof(float) * V);
    CHECK(ct_model_logits(m, ids, 1, n, full) == CT_OK);
    CHECK(ct_model_decode_reserve(m, n) == CT_OK);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        CHECK(ct_model_decode_step(m, ids[t], step) == CT_OK);
        for (int v = 0; v < V; v++) {
            double d = fabs(step[v] - full[t * V + v]);
            if (d > worst) worst = d;
        }
    }
    CHECK_MSG(worst < 1e-4, "decode vs full forward logits differ by %g", worst);
    CHECK(ct_model_decode_step(m, 1, step) == CT_ERR_ARG); /* cache full */
    ct_model_decode_reset(m);
    CHECK(ct_model_decode_step(m, ids[0], step) == CT_OK);
    CHECK(fabs(step[0] - full[0]) < 1e-4);
    CHECK(ct_model_decode_step(m, 37, step) == CT_ERR_ARG); /* bad token */
    free(full);
    free(step);
    ct_model_free(m);
}

static void test_accumulation(ct_ctx *ctx) {
    ct_model *a = make_model(ctx, 1), *b = make_model(ctx, 1);
    CHECK(ct_model_reserve(a, 4, T, true) == CT_OK);
    CHECK(ct_model_reserve(b, 2, T, true) == CT_OK);
    int32_t in[4 * T], tg[4 * T];
    make_tokens(in, tg, 4 * T, 11);
    float la, lb1, lb2;
    ct_model_zero_grads(a);
    ct_model_zero_grads(b);
    CHECK(ct_model_forward_backward(a, in, tg, 4, T, 1.0f, &la) == CT_OK);
    CHECK(ct_model_forward_backward(b, in, tg, 2, T, 0.5f, &lb1) == CT_OK);
    CHECK(ct_model_forward_backward(b, in + 2 * T, tg + 2 * T, 2, T, 0.5f, &lb2) == CT_OK);
    CHECK_MSG(fabs(la - 0.5 * (lb1 + lb2)) < 1e-5 * fabs(la), "loss %g vs %g", la,
              0.5 * (lb1 + lb2));
    float *ga = ct_model_grads(a), *gb = ct_model_grads(b);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < ct_model_numel(a); i++) {
        worst = fmax(worst, fabs(ga[i] - gb[i]));
        scale = fmax(scale, fabs(ga[i]));
    }
    CHECK_MSG(worst <= 1e-5 * scale, "accumulated gradients differ by %g (scale %g)", worst, scale);
    ct_model_free(a);
    ct_model_free(b);
}

static void test_cpu_matches_ref(void) {
    ct_ctx *cc = NULL, *rc = NULL;
    ct_ctx_params p = ct_ctx_params_default();
    CHECK(ct_ctx_init(&cc, &p) == CT_OK);
    p.backend = CT_BACKEND_REF;
    CHECK(ct_ctx_init(&rc, &p) == CT_OK);
    ct_model *a = make_model(cc, 2), *b = make_model(rc, 2);
    CHECK(ct_model_reserve(a, B, T, true) == CT_OK);
    CHECK(ct_model_reserve(b, B, T, true) == CT_OK);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 17);
    float la, lb;
    ct_model_zero_grads(a);
    ct_model_zero_grads(b);
    CHECK(ct_model_forward_backward(a, in, tg, B, T, 1.0f, &la) == CT_OK);
    CHECK(ct_model_forward_backward(b, in, tg, B, T, 1.0f, &lb) == CT_OK);
    CHECK_MSG(fabs(la - lb) < 1e-5 * fabs(lb), "cpu loss %g vs ref %g", la, lb);
    float *ga = ct_model_grads(a), *gb = ct_model_grads(b);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < ct_model_numel(a); i++) {
        worst = fmax(worst, fabs(ga[i] - gb[i]));
        scale = fmax(scale, fabs(gb[i]));
    }
    CHECK_MSG(worst <= 1e-5 * scale, "cpu vs ref gradients differ by %g (scale %g)", worst, scale);
    ct_model_free(a);
    ct_model_free(b);
    ct_ctx_free(cc);
    ct_ctx_free(rc);
}

static void test_plan_and_errors(ct_ctx *ctx) {
    ct_model *m = make_model(ctx, 2);
    ct_memstats before, after;
    ct_ctx_memstats(ctx, &before);
    CHECK(ct_model_reserve(m, B, T, true) == CT_OK);
    ct_ctx_memstats(ctx, &after);
    ct_model_plan plan;
    CHECK(ct_model_plan_memory(ct_model_get_config(m), B, T, true, &plan) == CT_OK);
    CHECK(plan.params == ct_model_numel(m) * sizeof(float));
    CHECK(after.current[CT_TAG_ACTS] - before.current[CT_TAG_ACTS] ==
          (int64_t)(plan.acts + plan.scratch));
    CHECK(after.current[CT_TAG_GRADS] - before.current[CT_TAG_GRADS] == (int64_t)plan.grads);
    /* a different shape later is refused */
    CHECK(ct_model_reserve(m, B + 1, T, true) == CT_ERR_ARG);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 1);
    float loss;
    tg[5] = 37;
    CHECK(ct_model_forward(m, in, tg, B, T, &loss) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "token 37 at position 5") != NULL);
    tg[5] = 0;
    in[0] = -1;
    CHECK(ct_model_forward(m, in, tg, B, T, &loss) == CT_ERR_ARG);
    ct_model_free(m);
    /* presets and validation */
    ct_model_config c;
    CHECK(ct_model_config_preset(&c, "gpt2") == CT_OK);
    CHECK(c.n_layer == 12 && c.n_embd == 768 && c.vocab_size == 50257);
    ct_model *big = NULL;
    CHECK(ct_model_config_preset(&c, "gpt2-huge") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "gpt2-medium") != NULL);
    ct_model_config_gpt2(&c, 2, 3, 16, 10, 8); /* 16 % 3 != 0 */
    CHECK(ct_model_init(&big, ctx, &c) == CT_ERR_ARG && big == NULL);
    /* 124M parameter count as Hugging Face reports it */
    CHECK(ct_model_config_preset(&c, "gpt2") == CT_OK);
    CHECK(ct_model_init(&big, ctx, &c) == CT_OK);
    CHECK(ct_model_numel(big) == 124439808);
    ct_model_free(big);
}

/* AddressSanitizer quarantines freed memory, so every malloc inside a step
 * (OpenBLAS takes a 512 KiB buffer per GEMM call, which glibc otherwise
 * recycles) lands on fresh pages: fault counts mean nothing there. */
#if defined(__SANITIZE_ADDRESS__)
#define FAULTS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FAULTS_MEANINGFUL 0
#endif
#endif
#ifndef FAULTS_MEANINGFUL
#define FAULTS_MEANINGFUL 1
#endif

static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

/* One training step: zero, forward+backward, AdamW. */
static void train_step(ct_model *m, ct_adamw *opt, const int32_t *in, const int32_t *tg, int b,
                       int t) {
    ct_adamw_params ap = {0.9f, 0.95f, 1e-8f, 0.1f};
    float loss;
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, b, t, 1.0f, &loss) == CT_OK);
    ct_adamw_step(opt, m, &ap, 1e-3f, 1.0f);
}

/* Reserve and AdamW init make every page of the activations, gradients and
 * moments resident, so steps take (nearly) no minor page faults: not the third
 * step, and not the first one either, once the process-wide first-use costs
 * (OpenMP threads, BLAS buffers, code pages) are paid by a warm-up model of
 * the same shape. Without the first touch the first step would fault in each
 * of the ~1,500 pages of those buffers. */
static void test_no_page_faults_in_step(ct_ctx *ctx) {
    enum { FB = 4, FT = 64, FV = 512, MAX_FAULTS = 64 };
    ct_model_config c;
    ct_model_config_gpt2(&c, 2, 4, 64, FV, FT);
    int32_t in[FB * FT], tg[FB * FT];
    for (int i = 0; i < FB * FT; i++) {
        in[i] = (i * 7919) % FV;
        tg[i] = (i * 104729 + 3) % FV;
    }
    ct_model *warm = NULL, *m = NULL;
    ct_adamw wopt, opt;
    CHECK(ct_model_init(&warm, ctx, &c) == CT_OK);
    ct_model_init_weights(warm, 1);
    CHECK(ct_model_reserve(warm, FB, FT, true) == CT_OK);
    CHECK(ct_adamw_init(&wopt, ctx, ct_model_numel(warm)) == CT_OK);
    train_step(warm, &wopt, in, tg, FB, FT);
    train_step(warm, &wopt, in, tg, FB, FT);

    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    ct_model_init_weights(m, 2);
    long f0 = minor_faults();
    CHECK(ct_model_reserve(m, FB, FT, true) == CT_OK);
    CHECK(ct_adamw_init(&opt, ctx, ct_model_numel(m)) == CT_OK);
    long f1 = minor_faults();
    long steps[3];
    for (int s = 0; s < 3; s++) {
        long a = minor_faults();
        train_step(m, &opt, in, tg, FB, FT);
        steps[s] = minor_faults() - a;
    }
    printf("minor page faults: reserve+init %ld, steps 1-3: %ld %ld %ld\n", f1 - f0, steps[0],
           steps[1], steps[2]);
    if (FAULTS_MEANINGFUL) {
        CHECK_MSG(steps[0] < MAX_FAULTS, "first step took %ld minor page faults", steps[0]);
        CHECK_MSG(steps[2] < MAX_FAULTS, "third step took %ld minor page faults", steps[2]);
    } else {
        printf("  (fault bounds not checked under AddressSanitizer)\n");
    }
    ct_adamw_free(&opt);
    ct_adamw_free(&wopt);
    ct_model_free(m);
    ct_model_free(warm);
}

int main(void) {
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
    test_finite_differences(ctx);
    test_decode_matches_forward(ctx);
    test_accumulation(ctx);
    test_cpu_matches_ref();
    test_plan_and_errors(ctx);
    test_no_page_faults_in_step(ctx);
    ct_ctx_free(ctx);
    return ct_test_result("test_model");
}
