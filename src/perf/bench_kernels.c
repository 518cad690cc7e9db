/*
 * The kernel suite: every entry of the context's kernel table at the shapes a
 * GPT-2 training step gives it, each against its roofline. See bench.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "perf/bench.h"

typedef struct suite {
    const ct_kernels *k;
    double peak_gflops, gbps;
    const char *filter;
    int repeat;
    const char *slow_name;
    int slow_factor;
    double rep[CT_BENCH_MAX_REPEAT]; /* the last kernel's repetition medians */
    ct_bench_item_fn fn;
    void *user;
} suite;

/* Times fn(arg) until at least 0.3 s or 20 runs (3 at least) after one warm
 * call, and returns the median. */
#define TIME_MEDIAN(result, body)                                  \
    do {                                                           \
        double ts_[20];                                            \
        int n_ = 0;                                                \
        body;                                                      \
        double start_ = ct_time_s();                               \
        while (n_ < 20 && (n_ < 3 || ct_time_s() - start_ < 0.3)) { \
            double t0_ = ct_time_s();                              \
            body;                                                  \
            ts_[n_++] = ct_time_s() - t0_;                         \
        }                                                          \
        result = ct_bench_median(ts_, n_);                         \
    } while (0)

/* Times the kernel `name` s->repeat times with TIME_MEDIAN (each timed call
 * making the kernel's slow factor calls), keeps each median in s->rep and
 * sets result to their median. */
#define TIME_KERNEL(s, name, result, body)                              \
    do {                                                                \
        int f_ = slow_factor(s, name);                                  \
        for (int r_ = 0; r_ < (s)->repeat; r_++) {                      \
            double m_;                                                  \
            TIME_MEDIAN(m_, for (int k_ = 0; k_ < f_; k_++) { body; }); \
            (s)->rep[r_] = m_;                                          \
        }                                                               \
        result = ct_bench_median((s)->rep, (s)->repeat);                \
    } while (0)

static int slow_factor(const suite *s, const char *name) {
    return s->slow_name && s->slow_factor > 1 && !strcmp(s->slow_name, name) ? s->slow_factor : 1;
}

/* Whether name contains any comma-separated fragment of the filter. */
static int wanted(const suite *s, const char *name) {
    if (!s->filter || !s->filter[0]) return 1;
    const char *p = s->filter;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        for (const char *q = name; n && *q; q++)
            if (!strncmp(q, p, n)) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

static void report(const suite *s, const char *name, const char *shape, double sec, double flops,
                   double bytes) {
    ct_bench_item it;
    memset(&it, 0, sizeof it);
    snprintf(it.name, sizeof it.name, "%s", name);
    snprintf(it.shape, sizeof it.shape, "%s", shape);
    it.seconds = sec;
    it.repeats = s->repeat;
    double lo = s->rep[0], hi = s->rep[0];
    for (int r = 0; r < s->repeat; r++) {
        it.rep_s[r] = s->rep[r];
        lo = s->rep[r] < lo ? s->rep[r] : lo, hi = s->rep[r] > hi ? s->rep[r] : hi;
    }
    it.spread = sec > 0 ? (hi - lo) / sec : 0;
    it.flops = flops;
    it.bytes = bytes;
    double tf = flops / (s->peak_gflops * 1e9), tb = bytes / (s->gbps * 1e9);
    it.roof_s = tf > tb ? tf : tb;
    s->fn(&it, s->user);
}

static void bench_linear(suite *s, const char *lname, float *x, float *w, float *b, float *y,
                         float *dy, float *dx, float *dw, float *db, int N, int C, int OC) {
    char name[48], shape[48];
    double sec, fl = 2.0 * N * (double)C * OC;
    snprintf(name, sizeof name, "gemm.%s.fwd", lname);
    if (wanted(s, name)) {
        TIME_KERNEL(s, name, sec, s->k->matmul_forward(y, x, w, b, N, C, OC));
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", N, OC, C);
        report(s, name, shape, sec, fl, 4.0 * ((double)N * C + (double)OC * C + (double)N * OC));
    }
    snprintf(name, sizeof name, "gemm.%s.bwd_input", lname);
    if (wanted(s, name)) {
        TIME_KERNEL(s, name, sec,
                    s->k->matmul_backward(dx, NULL, NULL, dy, x, w, N, C, OC));
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", N, C, OC);
        report(s, name, shape, sec, fl, 4.0 * ((double)N * OC + (double)OC * C + 2.0 * N * C));
    }
    snprintf(name, sizeof name, "gemm.%s.bwd_weight", lname);
    if (wanted(s, name)) {
        TIME_KERNEL(s, name, sec, s->k->matmul_backward(NULL, dw, db, dy, x, w, N, C, OC));
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", OC, C, N);
        report(s, name, shape, sec, fl, 4.0 * ((double)N * OC + (double)N * C + 2.0 * OC * C));
    }
}

ct_status ct_bench_kernels(ct_ctx *ctx, const ct_model_config *cfg, int B, int T,
                           double peak_gflops, double gbps, const ct_bench_kernel_opts *opts,
                           ct_bench_item_fn fn, void *user) {
    ct_status st = ct_model_config_validate(cfg);
    if (st) return st;
    if (B < 1 || T < 1 || T > cfg->n_ctx)
        return CT_ERR(CT_ERR_ARG, "batch B=%d T=%d is invalid for n_ctx %d", B, T, cfg->n_ctx);
    ct_bench_kernel_opts o = opts ? *opts : (ct_bench_kernel_opts){0};
    if (o.repeat == 0) o.repeat = 1;
    if (o.repeat < 1 || o.repeat > CT_BENCH_MAX_REPEAT)
        return CT_ERR(CT_ERR_ARG, "kernel benchmark repeat %d: expected 1..%d", o.repeat,
                      CT_BENCH_MAX_REPEAT);
    suite s = {ct_ctx_kernels(ctx), peak_gflops, gbps, o.filter, o.repeat, o.slow_name,
               o.slow_factor, {0}, fn, user};
    int C = cfg->n_embd, F = cfg->n_ffn, V = cfg->vocab_size, NH = cfg->n_head, N = B * T;
    int NKV = cfg->n_kv_head, HS = C / NH;
    bool llama = cfg->arch == CT_ARCH_LLAMA;
    /* widths of the fused qkv rows and of the MLP's first linear (SwiGLU: gate and up) */
    int QKV = (NH + 2 * NKV) * HS, UP = cfg->mlp == CT_MLP_SWIGLU ? 2 * F : F;
    int wide = UP > QKV ? UP : QKV;
    if (wide < C) wide = C;
    int rows = ct_model_head_chunk_rows(cfg, N);
    size_t big = (size_t)N * wide;
    size_t wbig = (size_t)C * wide;
    size_t head = (size_t)V * C;
    if (head > wbig) wbig = head;
    size_t lbig = (size_t)rows * V;
    if (lbig < big) lbig = big;
    float *x = malloc(big * 4), *y = malloc(lbig * 4), *dy = malloc(lbig * 4);
    float *dx = malloc(big * 4), *w = malloc(wbig * 4), *dw = malloc(wbig * 4);
    float *m1 = malloc(wbig * 4), *v1 = malloc(wbig * 4);
    float *b = malloc((size_t)wide * 4), *db = malloc((size_t)wide * 4);
    float *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    float *lse = malloc((size_t)B * NH * T * 4), *losses = malloc((size_t)N * 4);
    int32_t *tok = malloc((size_t)N * sizeof(int32_t));
    if (!x || !y || !dy || !dx || !w || !dw || !m1 || !v1 || !b || !db || !mean || !rstd || !lse ||
        !losses || !tok) {
        st = CT_ERR(CT_ERR_OOM, "out of memory for the kernel benchmark");
        goto done;
    }
    for (size_t i = 0; i < big; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < lbig; i++) y[i] = dy[i] = (float)((i * 40503u) % 997) * 1e-3f - 0.5f;
    for (size_t i = 0; i < wbig; i++) {
        w[i] = (float)((i * 69069u) % 1009) * 1e-4f - 0.05f;
        dw[i] = 0, m1[i] = 0, v1[i] = 0;
    }
    memset(dx, 0, big * 4);
    for (int i = 0; i < wide; i++) b[i] = 0.01f, db[i] = 0;
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919u) % (unsigned)V);

    char shape[48];
    double sec;
    /* every linear of a block and the head (one chunk of rows) */
    float *lb = cfg->bias ? b : NULL, *ldb = cfg->bias ? db : NULL;
    bench_linear(&s, "qkv", x, w, lb, y, dy, dx, dw, ldb, N, C, QKV);
    bench_linear(&s, "attn_proj", x, w, lb, y, dy, dx, dw, ldb, N, C, C);
    bench_linear(&s, llama ? "gate_up" : "fc", x, w, lb, y, dy, dx, dw, ldb, N, C, UP);
    bench_linear(&s, llama ? "down" : "fc_proj", x, w, lb, y, dy, dx, dw, ldb, N, F, C);
    bench_linear(&s, "head", x, w, NULL, y, dy, dx, dw, NULL, rows, C, V);

    /* attention over qkv (B,T,3C) held in x; out in y, dout in dy, dqkv in dx */
    double causal = (double)T * (T + 1) / 2.0;
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d NH=%d NKV=%d", B, T, C, NH, NKV);
    double qkv_bytes = 4.0 * N * QKV, out_bytes = 4.0 * N * C;
    if (wanted(&s, "attention.fwd")) {
        TIME_KERNEL(&s, "attention.fwd", sec,
                    s.k->attention_gqa_forward(y, lse, x, B, T, NH, NKV, HS));
        report(&s, "attention.fwd", shape, sec, 4.0 * B * C * causal, qkv_bytes + out_bytes);
    }
    if (wanted(&s, "attention.bwd")) {
        s.k->attention_gqa_forward(y, lse, x, B, T, NH, NKV, HS);
        TIME_KERNEL(&s, "attention.bwd", sec,
                    s.k->attention_gqa_backward(dx, dy, x, y, lse, B, T, NH, NKV, HS));
        report(&s, "attention.bwd", shape, sec, 8.0 * B * C * causal,
               2.0 * qkv_bytes + 2.0 * out_bytes + qkv_bytes);
    }

    /* memory-bound kernels at the block's sizes */
    double nc = (double)N * C, nf = (double)N * F;
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    if (llama && wanted(&s, "rmsnorm.fwd")) {
        TIME_KERNEL(&s, "rmsnorm.fwd", sec, s.k->rmsnorm_forward(y, rstd, x, w, N, C, 1e-5f));
        report(&s, "rmsnorm.fwd", shape, sec, 0, 8.0 * nc);
    }
    if (llama && wanted(&s, "rmsnorm.bwd")) {
        TIME_KERNEL(&s, "rmsnorm.bwd", sec,
                    s.k->rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C));
        report(&s, "rmsnorm.bwd", shape, sec, 0, 16.0 * nc);
    }
    if (!llama && wanted(&s, "layernorm.fwd")) {
        TIME_KERNEL(&s, "layernorm.fwd", sec,
                    s.k->layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f));
        report(&s, "layernorm.fwd", shape, sec, 0, 8.0 * nc);
    }
    if (!llama && wanted(&s, "layernorm.bwd")) {
        TIME_KERNEL(&s, "layernorm.bwd", sec,
                    s.k->layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C));
        report(&s, "layernorm.bwd", shape, sec, 0, 16.0 * nc);
    }
    if (wanted(&s, "residual.fwd")) {
        TIME_KERNEL(&s, "residual.fwd", sec, s.k->residual_forward(y, x, dy, (size_t)nc));
        report(&s, "residual.fwd", shape, sec, 0, 12.0 * nc);
    }
    if (wanted(&s, "residual.bwd")) {
        TIME_KERNEL(&s, "residual.bwd", sec, s.k->residual_backward(dx, y, dy, (size_t)nc));
        report(&s, "residual.bwd", shape, sec, 0, 20.0 * nc);
    }
    snprintf(shape, sizeof shape, "n=%d x %d", N, F);
    if (llama && wanted(&s, "swiglu.fwd")) {
        TIME_KERNEL(&s, "swiglu.fwd", sec, s.k->swiglu_forward(y, x, N, F));
        report(&s, "swiglu.fwd", shape, sec, 0, 12.0 * nf);
    }
    if (llama && wanted(&s, "swiglu.bwd")) {
        TIME_KERNEL(&s, "swiglu.bwd", sec, s.k->swiglu_backward(dx, x, dy, N, F));
        report(&s, "swiglu.bwd", shape, sec, 0, 28.0 * nf);
    }
    if (llama) {
        /* RoPE turns the q and k heads of the fused rows in place */
        double qk = 4.0 * N * (NH + NKV) * HS;
        snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
        if (wanted(&s, "rope.fwd")) {
            TIME_KERNEL(&s, "rope.fwd", sec,
                        s.k->rope_forward(x, B, T, NH, NKV, HS, 0, cfg->rope_theta));
            report(&s, "rope.fwd", shape, sec, 0, 2.0 * qk);
        }
        if (wanted(&s, "rope.bwd")) {
            TIME_KERNEL(&s, "rope.bwd", sec,
                        s.k->rope_backward(dx, B, T, NH, NKV, HS, 0, cfg->rope_theta));
            report(&s, "rope.bwd", shape, sec, 0, 2.0 * qk);
        }
    }
    if (!llama && wanted(&s, "gelu.fwd")) {
        TIME_KERNEL(&s, "gelu.fwd", sec, s.k->gelu_forward(y, x, (size_t)nf));
        report(&s, "gelu.fwd", shape, sec, 0, 8.0 * nf);
    }
    if (!llama && wanted(&s, "gelu.bwd")) {
        TIME_KERNEL(&s, "gelu.bwd", sec, s.k->gelu_backward(dx, x, dy, (size_t)nf));
        report(&s, "gelu.bwd", shape, sec, 0, 16.0 * nf);
    }
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d", B, T, C);
    if (wanted(&s, "encoder.fwd")) {
        TIME_KERNEL(&s, "encoder.fwd", sec,
                    s.k->encoder_forward(y, tok, w, llama ? NULL : x, B, T, C, 0));
        report(&s, "encoder.fwd", shape, sec, 0, 12.0 * nc);
    }
    if (wanted(&s, "encoder.bwd")) {
        TIME_KERNEL(&s, "encoder.bwd", sec,
                    s.k->encoder_backward(dw, llama ? NULL : dx, dy, tok, B, T, C));
        report(&s, "encoder.bwd", shape, sec, 0, 20.0 * nc);
    }
    snprintf(shape, sizeof shape, "N=%d V=%d", rows, V);
    if (wanted(&s, "crossentropy")) {
        /* forward and the fused gradient over one chunk of logits, in place */
        double lv = (double)rows * V;
        TIME_KERNEL(&s, "crossentropy", sec,
                    s.k->crossentropy_forward(losses, dy, dy, tok, rows, V, 1e-3f));
        report(&s, "crossentropy", shape, sec, 0, 8.0 * lv);
    }
    {
        /* AdamW and the norm over every parameter of the model */
        ct_model_plan plan;
        if ((st = ct_model_plan_memory(cfg, 1, 1, false, &plan))) goto done;
        size_t n = plan.params / sizeof(float);
        float *p = NULL, *g = NULL, *mv = NULL;
        p = malloc(n * 4), g = malloc(n * 4), mv = malloc(2 * n * 4);
        if (!p || !g || !mv) {
            free(p), free(g), free(mv);
            st = CT_ERR(CT_ERR_OOM, "out of memory for the AdamW benchmark");
            goto done;
        }
        memset(p, 0, n * 4), memset(g, 0, n * 4), memset(mv, 0, 2 * n * 4);
        snprintf(shape, sizeof shape, "n=%zu", n);
        int64_t t = 1;
        if (wanted(&s, "adamw")) {
            TIME_KERNEL(&s, "adamw", sec,
                        s.k->adamw_update(p, g, mv, mv + n, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                                          1.0f, t++));
            report(&s, "adamw", shape, sec, 0, 28.0 * (double)n);
        }
        if (wanted(&s, "sumsq")) {
            volatile double sink;
            TIME_KERNEL(&s, "sumsq", sec, sink = s.k->sumsq(g, n));
            (void)sink;
            report(&s, "sumsq", shape, sec, 0, 4.0 * (double)n);
        }
        free(p), free(g), free(mv);
    }
done:
    free(x), free(y), free(dy), free(dx), free(w), free(dw), free(m1), free(v1), free(b), free(db);
    free(mean), free(rstd), free(lse), free(losses), free(tok);
    return st;
}
