/*
 * The kernel suite: every kernel entry of the context's backend at the shapes
 * a GPT-2 training step gives it, each against its roofline. Buffers are the
 * backend's own (buf_alloc), filled through uploads; calls are timed between
 * the backend's events, so an asynchronous backend is timed to completion.
 * See bench_tools.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ctx.h"
#include "tools/bench_tools.h"

typedef struct suite {
    ct_backend *be; /* borrowed: the context's backend in use */
    double peak_gflops, gbps;
    const char *filter;
    int repeat;
    const char *slow_name;
    int slow_factor;
    double rep[CT_BENCH_MAX_REPEAT]; /* the last kernel's repetition medians */
    ct_bench_item_fn fn;
    void *user;
} suite;

/* Times body on backend be until at least 0.3 s or 20 runs (3 at least)
 * after one warm call, and returns the median. Each run lies between two of
 * the backend's events (event_elapsed waits for the second). */
#define TIME_MEDIAN(be, result, body)                                         \
    do {                                                                      \
        ct_backend *be_ = (be);                                               \
        double ts_[20];                                                       \
        int n_ = 0;                                                           \
        body;                                                                 \
        (void)be_->i->synchronize(be_);                                       \
        double start_ = ct_time_s();                                          \
        while (n_ < 20 && (n_ < 3 || ct_time_s() - start_ < 0.3)) {          \
            ct_event a_, b_;                                                  \
            be_->i->event_record(be_, &a_);                                   \
            body;                                                             \
            be_->i->event_record(be_, &b_);                                   \
            ts_[n_++] = be_->i->event_elapsed(be_, &a_, &b_);                 \
        }                                                                     \
        result = ct_bench_median(ts_, n_);                                    \
    } while (0)

/* Times the kernel `name` s->repeat times with TIME_MEDIAN (each timed call
 * making the kernel's slow factor calls), keeps each median in s->rep and
 * sets result to their median. */
#define TIME_KERNEL(s, name, result, body)                                        \
    do {                                                                          \
        int f_ = slow_factor(s, name);                                            \
        for (int r_ = 0; r_ < (s)->repeat; r_++) {                                \
            double m_;                                                            \
            TIME_MEDIAN((s)->be, m_, for (int k_ = 0; k_ < f_; k_++) { body; });  \
            (s)->rep[r_] = m_;                                                    \
        }                                                                         \
        result = ct_bench_median((s)->rep, (s)->repeat);                          \
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

/* A zero-filled device buffer of n floats (scratch); NULL on failure. */
static float *dev_alloc(ct_backend *be, size_t n) {
    return be->i->buf_alloc(be, n * sizeof(float), CT_TAG_SCRATCH);
}
static void dev_free(ct_backend *be, float *p) { be->i->buf_free(be, p); }

/* The suite's deterministic inputs, by global element index. */
static float pattern_x(size_t i) { return (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f; }
static float pattern_y(size_t i) { return (float)((i * 40503u) % 997) * 1e-3f - 0.5f; }
static float pattern_w(size_t i) { return (float)((i * 69069u) % 1009) * 1e-4f - 0.05f; }
static float pattern_bias(size_t i) {
    (void)i;
    return 0.01f;
}

#define STAGE ((size_t)1 << 16) /* floats of the host staging buffer */

/* Device dst(n) = f(i), uploaded STAGE floats at a time through stage. */
static void upload_pattern(ct_backend *be, float *dst, size_t n, float *stage,
                           float (*f)(size_t i)) {
    for (size_t i0 = 0; i0 < n; i0 += STAGE) {
        size_t m = n - i0 < STAGE ? n - i0 : STAGE;
        for (size_t i = 0; i < m; i++) stage[i] = f(i0 + i);
        ct_be_upload(be, dst + i0, stage, m * sizeof(float));
    }
}

static void bench_linear(suite *s, const char *lname, float *x, float *w, float *b, float *y,
                         float *dy, float *dx, float *dw, float *db, int N, int C, int OC) {
    char name[48], shape[48];
    double sec, fl = 2.0 * N * (double)C * OC;
    snprintf(name, sizeof name, "gemm.%s.fwd", lname);
    if (wanted(s, name)) {
        TIME_KERNEL(s, name, sec, s->be->i->matmul_forward(s->be, y, x, w, b, N, C, OC));
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", N, OC, C);
        report(s, name, shape, sec, fl, 4.0 * ((double)N * C + (double)OC * C + (double)N * OC));
    }
    snprintf(name, sizeof name, "gemm.%s.bwd_input", lname);
    if (wanted(s, name)) {
        TIME_KERNEL(s, name, sec,
                    s->be->i->matmul_backward(s->be, dx, NULL, NULL, dy, x, w, N, C, OC));
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", N, C, OC);
        report(s, name, shape, sec, fl, 4.0 * ((double)N * OC + (double)OC * C + 2.0 * N * C));
    }
    snprintf(name, sizeof name, "gemm.%s.bwd_weight", lname);
    if (wanted(s, name)) {
        TIME_KERNEL(s, name, sec,
                    s->be->i->matmul_backward(s->be, NULL, dw, db, dy, x, w, N, C, OC));
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
    ct_backend *be = ct_ctx_backend(ctx);
    suite s = {be, peak_gflops, gbps, o.filter, o.repeat, o.slow_name, o.slow_factor, {0}, fn,
               user};
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
    /* device buffers (zero-filled), then the patterns uploaded through a bounded stage */
    float *x = dev_alloc(be, big), *y = dev_alloc(be, lbig), *dy = dev_alloc(be, lbig);
    float *dx = dev_alloc(be, big), *w = dev_alloc(be, wbig), *dw = dev_alloc(be, wbig);
    float *b = dev_alloc(be, (size_t)wide), *db = dev_alloc(be, (size_t)wide);
    float *mean = dev_alloc(be, (size_t)N), *rstd = dev_alloc(be, (size_t)N);
    float *lse = dev_alloc(be, (size_t)B * NH * T), *losses = dev_alloc(be, (size_t)N);
    int32_t *tok = be->i->buf_alloc(be, (size_t)N * sizeof(int32_t), CT_TAG_SCRATCH);
    int32_t *htok = malloc((size_t)N * sizeof(int32_t));
    float *stage = malloc(STAGE * sizeof(float));
    if (!x || !y || !dy || !dx || !w || !dw || !b || !db || !mean || !rstd || !lse || !losses ||
        !tok || !htok || !stage) {
        st = CT_ERR(CT_ERR_OOM, "out of memory for the kernel benchmark");
        goto done;
    }
    upload_pattern(be, x, big, stage, pattern_x);
    upload_pattern(be, y, lbig, stage, pattern_y);
    upload_pattern(be, dy, lbig, stage, pattern_y);
    upload_pattern(be, w, wbig, stage, pattern_w);
    upload_pattern(be, b, (size_t)wide, stage, pattern_bias);
    for (int i = 0; i < N; i++) htok[i] = (int32_t)((i * 7919u) % (unsigned)V);
    ct_be_upload(be, tok, htok, (size_t)N * sizeof(int32_t));

    char shape[48];
    double sec;
    /* every linear of a block and the head (one chunk of rows) */
    float *lb = cfg->bias ? b : NULL, *ldb = cfg->bias ? db : NULL;
    bench_linear(&s, "qkv", x, w, lb, y, dy, dx, dw, ldb, N, C, QKV);
    bench_linear(&s, "attn_proj", x, w, lb, y, dy, dx, dw, ldb, N, C, C);
    bench_linear(&s, llama ? "gate_up" : "fc", x, w, lb, y, dy, dx, dw, ldb, N, C, UP);
    bench_linear(&s, llama ? "down" : "fc_proj", x, w, lb, y, dy, dx, dw, ldb, N, F, C);
    bench_linear(&s, "head", x, w, NULL, y, dy, dx, dw, NULL, rows, C, V);

    /* attention over qkv (B,T,QKV) held in x; out in y, dout in dy, dqkv in dx */
    double causal = (double)T * (T + 1) / 2.0;
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d NH=%d NKV=%d", B, T, C, NH, NKV);
    double qkv_bytes = 4.0 * N * QKV, out_bytes = 4.0 * N * C;
    if (wanted(&s, "attention.fwd")) {
        TIME_KERNEL(&s, "attention.fwd", sec,
                    s.be->i->attention_forward(s.be, y, lse, x, B, T, NH, NKV, HS));
        report(&s, "attention.fwd", shape, sec, 4.0 * B * C * causal, qkv_bytes + out_bytes);
    }
    if (wanted(&s, "attention.bwd")) {
        s.be->i->attention_forward(s.be, y, lse, x, B, T, NH, NKV, HS);
        TIME_KERNEL(&s, "attention.bwd", sec,
                    s.be->i->attention_backward(s.be, dx, dy, x, y, lse, B, T, NH, NKV, HS));
        report(&s, "attention.bwd", shape, sec, 8.0 * B * C * causal,
               2.0 * qkv_bytes + 2.0 * out_bytes + qkv_bytes);
    }

    /* memory-bound kernels at the block's sizes */
    double nc = (double)N * C, nf = (double)N * F;
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    if (llama && wanted(&s, "rmsnorm.fwd")) {
        TIME_KERNEL(&s, "rmsnorm.fwd", sec,
                    s.be->i->rmsnorm_forward(s.be, y, rstd, x, w, N, C, 1e-5f));
        report(&s, "rmsnorm.fwd", shape, sec, 0, 8.0 * nc);
    }
    if (llama && wanted(&s, "rmsnorm.bwd")) {
        TIME_KERNEL(&s, "rmsnorm.bwd", sec,
                    s.be->i->rmsnorm_backward(s.be, dx, dw, dy, x, w, rstd, N, C));
        report(&s, "rmsnorm.bwd", shape, sec, 0, 16.0 * nc);
    }
    if (!llama && wanted(&s, "layernorm.fwd")) {
        TIME_KERNEL(&s, "layernorm.fwd", sec,
                    s.be->i->layernorm_forward(s.be, y, mean, rstd, x, w, b, N, C, 1e-5f));
        report(&s, "layernorm.fwd", shape, sec, 0, 8.0 * nc);
    }
    if (!llama && wanted(&s, "layernorm.bwd")) {
        TIME_KERNEL(&s, "layernorm.bwd", sec,
                    s.be->i->layernorm_backward(s.be, dx, dw, db, dy, x, w, mean, rstd, N, C));
        report(&s, "layernorm.bwd", shape, sec, 0, 16.0 * nc);
    }
    if (wanted(&s, "residual.fwd")) {
        TIME_KERNEL(&s, "residual.fwd", sec,
                    s.be->i->residual_forward(s.be, y, x, dy, (size_t)nc));
        report(&s, "residual.fwd", shape, sec, 0, 12.0 * nc);
    }
    if (wanted(&s, "residual.bwd")) {
        TIME_KERNEL(&s, "residual.bwd", sec,
                    s.be->i->residual_backward(s.be, dx, y, dy, (size_t)nc));
        report(&s, "residual.bwd", shape, sec, 0, 20.0 * nc);
    }
    snprintf(shape, sizeof shape, "n=%d x %d", N, F);
    if (llama && wanted(&s, "swiglu.fwd")) {
        TIME_KERNEL(&s, "swiglu.fwd", sec, s.be->i->swiglu_forward(s.be, y, x, N, F));
        report(&s, "swiglu.fwd", shape, sec, 0, 12.0 * nf);
    }
    if (llama && wanted(&s, "swiglu.bwd")) {
        TIME_KERNEL(&s, "swiglu.bwd", sec, s.be->i->swiglu_backward(s.be, dx, x, dy, N, F));
        report(&s, "swiglu.bwd", shape, sec, 0, 28.0 * nf);
    }
    if (llama) {
        /* RoPE turns the q and k heads of the fused rows in place */
        double qk = 4.0 * N * (NH + NKV) * HS;
        snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
        if (wanted(&s, "rope.fwd")) {
            TIME_KERNEL(&s, "rope.fwd", sec,
                        s.be->i->rope_forward(s.be, x, B, T, NH, NKV, HS, 0, cfg->rope_theta));
            report(&s, "rope.fwd", shape, sec, 0, 2.0 * qk);
        }
        if (wanted(&s, "rope.bwd")) {
            TIME_KERNEL(&s, "rope.bwd", sec,
                        s.be->i->rope_backward(s.be, dx, B, T, NH, NKV, HS, 0, cfg->rope_theta));
            report(&s, "rope.bwd", shape, sec, 0, 2.0 * qk);
        }
    }
    if (!llama && wanted(&s, "gelu.fwd")) {
        TIME_KERNEL(&s, "gelu.fwd", sec, s.be->i->gelu_forward(s.be, y, x, (size_t)nf));
        report(&s, "gelu.fwd", shape, sec, 0, 8.0 * nf);
    }
    if (!llama && wanted(&s, "gelu.bwd")) {
        TIME_KERNEL(&s, "gelu.bwd", sec, s.be->i->gelu_backward(s.be, dx, x, dy, (size_t)nf));
        report(&s, "gelu.bwd", shape, sec, 0, 16.0 * nf);
    }
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d", B, T, C);
    if (wanted(&s, "encoder.fwd")) {
        TIME_KERNEL(&s, "encoder.fwd", sec,
                    s.be->i->encoder_forward(s.be, y, tok, w, llama ? NULL : x, B, T, C, 0));
        report(&s, "encoder.fwd", shape, sec, 0, 12.0 * nc);
    }
    if (wanted(&s, "encoder.bwd")) {
        TIME_KERNEL(&s, "encoder.bwd", sec,
                    s.be->i->encoder_backward(s.be, dw, llama ? NULL : dx, dy, tok, B, T, C));
        report(&s, "encoder.bwd", shape, sec, 0, 20.0 * nc);
    }
    snprintf(shape, sizeof shape, "N=%d V=%d", rows, V);
    if (wanted(&s, "crossentropy")) {
        /* forward and the fused gradient over one chunk of logits, in place */
        double lv = (double)rows * V;
        TIME_KERNEL(&s, "crossentropy", sec,
                    s.be->i->crossentropy_forward(s.be, losses, dy, dy, tok, rows, V, 1e-3f));
        report(&s, "crossentropy", shape, sec, 0, 8.0 * lv);
    }
    {
        /* AdamW and the norm over every parameter of the model */
        ct_model_plan plan;
        if ((st = ct_model_plan_memory(cfg, 1, 1, false, &plan))) goto done;
        size_t n = plan.params / sizeof(float);
        float *p = dev_alloc(be, n), *g = dev_alloc(be, n), *mv = dev_alloc(be, 2 * n);
        if (!p || !g || !mv) {
            dev_free(be, p), dev_free(be, g), dev_free(be, mv);
            st = CT_ERR(CT_ERR_OOM, "out of memory for the AdamW benchmark");
            goto done;
        }
        snprintf(shape, sizeof shape, "n=%zu", n);
        int64_t t = 1;
        if (wanted(&s, "adamw")) {
            TIME_KERNEL(&s, "adamw", sec,
                        s.be->i->adamw_update(s.be, p, g, mv, mv + n, n, 1e-4f, 0.9f, 0.95f,
                                              1e-8f, 0.1f, 1.0f, t++));
            report(&s, "adamw", shape, sec, 0, 28.0 * (double)n);
        }
        if (wanted(&s, "sumsq")) {
            volatile double sink;
            TIME_KERNEL(&s, "sumsq", sec, sink = s.be->i->sumsq(s.be, g, n));
            (void)sink;
            report(&s, "sumsq", shape, sec, 0, 4.0 * (double)n);
        }
        dev_free(be, p), dev_free(be, g), dev_free(be, mv);
    }
done:
    dev_free(be, x), dev_free(be, y), dev_free(be, dy), dev_free(be, dx), dev_free(be, w);
    dev_free(be, dw), dev_free(be, b), dev_free(be, db), dev_free(be, mean), dev_free(be, rstd);
    dev_free(be, lse), dev_free(be, losses), be->i->buf_free(be, tok);
    free(htok), free(stage);
    return st;
}
