/*
 * The kernel suite: every kernel entry of the context's backend at the shapes
 * a GPT-2 training step gives it, each against its roofline (the FMA ceiling
 * and the read and write stream rates at the kernel's footprint, measured as
 * the suite reaches each footprint; see bench_tools.h). Buffers are the
 * backend's own (buf_alloc), filled through uploads; calls are timed between
 * the backend's events, so an asynchronous backend is timed to completion.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ctx.h"
#include "perf/hwinfo.h"
#include "tools/bench_tools.h"

/* stream rates measured so far, by probe size */
#define BW_CACHE 48

typedef struct suite {
    ct_backend *be; /* borrowed: the context's backend in use */
    ct_ctx *ctx;    /* borrowed: its threads run the stream probes */
    double fma_gflops; /* the compute bound; <= 0: no roofline */
    double gemm16_gflops; /* the bound of 16-bit kernels (a device's bf16 GEMM peak, a
                           * CPU's bf16 dot-product ceiling); <= 0: fma_gflops */
    bool device;    /* a queued backend: its own copy rate is the memory bound */
    size_t l1d, l2, l3; /* cache sizes (per instance; 0 unknown) */
    int threads;
    size_t bw_size[BW_CACHE];
    double bw_read[BW_CACHE], bw_write[BW_CACHE];
    int n_bw;
    ct_status st; /* a failed stream probe */
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

/* The probe size for a footprint: the largest step of a ladder of quarter
 * powers of two (4 KiB, 4.75 KiB, 5.5 KiB, 6.75 KiB, 8 KiB, ...) at or below
 * it, so the probe's rate is at least the footprint's (a smaller buffer never
 * sits in a slower level) and within a step of it; capped past the last cache,
 * where memory's rate is flat. */
static size_t probe_size(const suite *s, double footprint) {
    size_t cap = s->l3 ? 4 * s->l3 : 0;
    if (cap < ((size_t)256 << 20)) cap = (size_t)256 << 20;
    if (cap > ((size_t)1 << 30)) cap = (size_t)1 << 30;
    static const double quarter[4] = {1.0, 1.189207115, 1.414213562, 1.681792831};
    size_t best = 4096;
    for (size_t p = 4096; p <= cap; p *= 2) {
        for (int q = 0; q < 4; q++) {
            size_t size = (size_t)((double)p * quarter[q]) / 1024 * 1024;
            if ((double)size <= footprint && size <= cap) best = size;
        }
    }
    return best;
}

/* A device's copy rate at size bytes: a device-to-device copy of size / 2
 * bytes (so size is read and written in all) timed between the backend's
 * events, the best of 5 after a warm one; bytes moved (read + write) per
 * second, in GB/s, into both *rd and *wr. */
static ct_status device_copy_rate(ct_backend *be, size_t size, double *rd, double *wr) {
    size_t half = size / 2 / 256 * 256;
    if (half < 256) half = 256;
    void *a = be->i->buf_alloc(be, half, CT_TAG_SCRATCH);
    void *b = a ? be->i->buf_alloc(be, half, CT_TAG_SCRATCH) : NULL;
    if (!b) {
        if (a) be->i->buf_free(be, a);
        return CT_ERR(CT_ERR_OOM, "no device memory for a %zu-byte copy-rate probe", size);
    }
    double best = 0;
    be->i->copy(be, b, a, half);
    for (int r = 0; r < 5; r++) {
        ct_event e0, e1;
        be->i->event_record(be, &e0);
        be->i->copy(be, b, a, half);
        be->i->event_record(be, &e1);
        double t = be->i->event_elapsed(be, &e0, &e1);
        if (t > 0 && 2.0 * half / t > best) best = 2.0 * half / t;
    }
    be->i->buf_free(be, a);
    be->i->buf_free(be, b);
    *rd = *wr = best / 1e9;
    return CT_OK;
}

/* The read and write stream rates at footprint, measured once per probe size
 * (again when remeasure: the rates so far were beaten, so a busy moment held
 * them down; the better of old and new stays). */
static void stream_rates(suite *s, double footprint, bool remeasure, double *rd, double *wr) {
    size_t size = probe_size(s, footprint);
    int at = -1;
    for (int i = 0; i < s->n_bw; i++)
        if (s->bw_size[i] == size) at = i;
    if (at >= 0 && !remeasure) {
        *rd = s->bw_read[at], *wr = s->bw_write[at];
        return;
    }
    *rd = *wr = 0;
    ct_status st = s->device ? device_copy_rate(s->be, size, rd, wr)
                             : ct_bench_stream_bw(s->ctx, size, 0.02, rd, wr);
    if (st) {
        if (!s->st) s->st = st;
        return;
    }
    if (at < 0 && s->n_bw < BW_CACHE) {
        at = s->n_bw++;
        s->bw_size[at] = size;
        s->bw_read[at] = s->bw_write[at] = 0;
    }
    if (at < 0) return;
    if (*rd > s->bw_read[at]) s->bw_read[at] = *rd;
    if (*wr > s->bw_write[at]) s->bw_write[at] = *wr;
    *rd = s->bw_read[at], *wr = s->bw_write[at];
}

/* The roofline of it: the largest of its compute, read and write times at
 * the bounds; names the binding one. */
static void roofline(suite *s, ct_bench_item *it, bool remeasure) {
    double rbw = 0, wbw = 0;
    stream_rates(s, it->footprint, remeasure, &rbw, &wbw);
    double peak = s->fma_gflops;
    if (s->gemm16_gflops > 0 && strstr(it->name, "16")) peak = s->gemm16_gflops;
    double tc = it->flops / (peak * 1e9);
    if (s->device) { /* one memory, read and written together */
        double tm = rbw > 0 ? (it->read_bytes + it->write_bytes) / (rbw * 1e9) : 0;
        it->roof_s = tc, it->bound = "compute", it->bound_rate = peak;
        if (tm > it->roof_s) it->roof_s = tm, it->bound = "memory", it->bound_rate = rbw;
        return;
    }
    double tr = rbw > 0 ? it->read_bytes / (rbw * 1e9) : 0;
    double tw = wbw > 0 ? it->write_bytes / (wbw * 1e9) : 0;
    it->roof_s = tc, it->bound = "compute", it->bound_rate = peak;
    if (tr > it->roof_s) it->roof_s = tr, it->bound = "read", it->bound_rate = rbw;
    if (tw > it->roof_s) it->roof_s = tw, it->bound = "write", it->bound_rate = wbw;
}

/* The cache level a footprint fits: per-core levels hold a thread's share. */
static const char *footprint_level(const suite *s, double footprint) {
    if (s->device) return "device";
    double share = footprint / (s->threads > 0 ? s->threads : 1);
    if (s->l1d && share <= (double)s->l1d) return "L1";
    if (s->l2 && share <= (double)s->l2) return "L2";
    if (s->l3 && footprint <= (double)s->l3) return "L3";
    return s->l1d || s->l2 || s->l3 ? "memory" : "?";
}

/* One kernel's figures to fn: flops, bytes read and written per call, and the
 * distinct bytes it touches (footprint). */
static void report(suite *s, const char *name, const char *shape, double sec, double flops,
                   double rd, double wr, double footprint) {
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
    it.read_bytes = rd;
    it.write_bytes = wr;
    it.bytes = rd + wr;
    it.footprint = footprint;
    it.level = footprint_level(s, footprint);
    it.bound = "compute";
    if (s->fma_gflops > 0) {
        roofline(s, &it, false);
        /* a kernel faster than its bound: the bound was measured in a busy
         * moment (a neighbour, a frequency dip); measure it again, twice at
         * most, keeping the best. Still beaten: the model is wrong for it,
         * and the figure over 100% says so */
        for (int again = 0; again < 2 && it.roof_s > sec; again++) {
            if (!strcmp(it.bound, "compute") && !s->device) {
                double f = ct_bench_fma_peak(s->ctx);
                if (f > s->fma_gflops) s->fma_gflops = f;
            }
            roofline(s, &it, strcmp(it.bound, "compute") != 0);
        }
    }
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
        double rd = 4.0 * ((double)N * C + (double)OC * C + (b ? OC : 0)), wr = 4.0 * N * OC;
        report(s, name, shape, sec, fl, rd, wr, rd + wr);
    }
    snprintf(name, sizeof name, "gemm.%s.bwd_input", lname);
    if (wanted(s, name)) {
        TIME_KERNEL(s, name, sec,
                    s->be->i->matmul_backward(s->be, dx, NULL, NULL, dy, x, w, N, C, OC));
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", N, C, OC);
        /* dx += dy w: dx is read and written */
        double fp = 4.0 * ((double)N * OC + (double)OC * C + (double)N * C);
        report(s, name, shape, sec, fl, fp, 4.0 * N * C, fp);
    }
    snprintf(name, sizeof name, "gemm.%s.bwd_weight", lname);
    if (wanted(s, name)) {
        TIME_KERNEL(s, name, sec,
                    s->be->i->matmul_backward(s->be, NULL, dw, db, dy, x, w, N, C, OC));
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", OC, C, N);
        /* dw += dy^T x (db += the column sums of dy) */
        double g = (double)OC * C + (db ? OC : 0);
        double fp = 4.0 * ((double)N * OC + (double)N * C + g);
        report(s, name, shape, sec, fl, fp, 4.0 * g, fp);
    }
}

/* A linear's mixed-precision backward as the model calls it under
 * train.precision=bf16 (matmul_backward_bf16: dinp, dweight and dbias in one
 * call, both GEMMs on bf16 operands, dout rounded as it is read), with the
 * bf16 copies of x and w made first. false: out of memory. */
static bool bench_linear_bf16(suite *s, const char *lname, float *x, float *w, float *b,
                              float *dy, float *dx, float *dw, float *db, int N, int C, int OC) {
    char name[48], shape[48];
    snprintf(name, sizeof name, "gemm_bf16.%s.bwd", lname);
    const ct_backend_i *bk = s->be->i;
    if (!bk->matmul_backward_bf16 || !bk->f32_to_bf16 || !wanted(s, name)) return true;
    uint16_t *x16 = bk->buf_alloc(s->be, (size_t)N * C * sizeof(uint16_t), CT_TAG_SCRATCH);
    uint16_t *w16 = bk->buf_alloc(s->be, (size_t)OC * C * sizeof(uint16_t), CT_TAG_SCRATCH);
    bool ok = x16 && w16;
    if (ok) {
        bk->f32_to_bf16(s->be, x16, x, (size_t)N * C);
        bk->f32_to_bf16(s->be, w16, w, (size_t)OC * C);
        double sec;
        TIME_KERNEL(s, name, sec,
                    bk->matmul_backward_bf16(s->be, dx, dw, b ? db : NULL, dy, x16, w16, N, C,
                                             OC));
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d x2", N, C, OC);
        /* dy read (fp32), x16 and w16 read, dx and dw read and written (db too) */
        double g = (double)OC * C + (b ? OC : 0);
        double rd = 4.0 * N * OC + 2.0 * N * C + 2.0 * OC * C + 4.0 * N * C + 4.0 * g;
        double wr = 4.0 * N * C + 4.0 * g;
        report(s, name, shape, sec, 4.0 * N * (double)C * OC, rd, wr, rd + wr);
    }
    if (x16) bk->buf_free(s->be, x16);
    if (w16) bk->buf_free(s->be, w16);
    return ok;
}

ct_status ct_bench_kernels(ct_ctx *ctx, const ct_model_config *cfg, int B, int T,
                           double fma_gflops, const ct_bench_kernel_opts *opts,
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
    ct_hwinfo hw;
    ct_hwinfo_read(&hw);
    suite s = {.be = be, .ctx = ctx, .fma_gflops = fma_gflops,
               .gemm16_gflops = o.gemm16_gflops, .device = be->queued, .l1d = hw.l1d, .l2 = hw.l2,
               .l3 = hw.l3, .threads = ct_ctx_threads(ctx), .filter = o.filter,
               .repeat = o.repeat, .slow_name = o.slow_name, .slow_factor = o.slow_factor,
               .fn = fn, .user = user};
    int C = cfg->n_embd, F = cfg->n_ffn, V = cfg->vocab_size, NH = cfg->n_head, N = B * T;
    int NKV = cfg->n_kv_head, HS = ct_model_head_dim(cfg), NQ = NH * HS;
    bool llama = cfg->arch == CT_ARCH_LLAMA;
    /* widths of the fused qkv rows and of the MLP's first linear (SwiGLU: gate and up) */
    int QKV = (NH + 2 * NKV) * HS, UP = cfg->mlp != CT_MLP_GELU ? 2 * F : F;
    int wide = UP > QKV ? UP : QKV;
    if (wide < C) wide = C;
    if (wide < NQ) wide = NQ;
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
    /* RoPE's inverse frequencies and the q/k norms' statistics */
    float *inv = dev_alloc(be, (size_t)(HS / 2 > 0 ? HS / 2 : 1));
    float *qkr = dev_alloc(be, (size_t)N * (NH + NKV));
    int32_t *tok = be->i->buf_alloc(be, (size_t)N * sizeof(int32_t), CT_TAG_SCRATCH);
    int32_t *htok = malloc((size_t)N * sizeof(int32_t));
    float *stage = malloc(STAGE * sizeof(float));
    if (!x || !y || !dy || !dx || !w || !dw || !b || !db || !mean || !rstd || !lse || !losses ||
        !tok || !htok || !stage || !inv || !qkr) {
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
    if (llama) {
        ct_model_rope_inv_freq(cfg, stage); /* HS/2 <= STAGE */
        ct_be_upload(be, inv, stage, (size_t)(HS / 2) * sizeof(float));
    }

    char shape[48];
    double sec;
    /* every linear of a block and the head (one chunk of rows) */
    float *lb = cfg->bias ? b : NULL, *ldb = cfg->bias ? db : NULL;
    bench_linear(&s, "qkv", x, w, lb, y, dy, dx, dw, ldb, N, C, QKV);
    bench_linear(&s, "attn_proj", x, w, lb, y, dy, dx, dw, ldb, N, NQ, C);
    bench_linear(&s, llama ? "gate_up" : "fc", x, w, lb, y, dy, dx, dw, ldb, N, C, UP);
    bench_linear(&s, llama ? "down" : "fc_proj", x, w, lb, y, dy, dx, dw, ldb, N, F, C);
    bench_linear(&s, "head", x, w, NULL, y, dy, dx, dw, NULL, rows, C, V);
    /* the same linears' backward under bf16 (the head's is gemm_bf16.head16.*) */
    if (!bench_linear_bf16(&s, "qkv", x, w, lb, dy, dx, dw, ldb, N, C, QKV) ||
        !bench_linear_bf16(&s, "attn_proj", x, w, lb, dy, dx, dw, ldb, N, NQ, C) ||
        !bench_linear_bf16(&s, llama ? "gate_up" : "fc", x, w, lb, dy, dx, dw, ldb, N, C, UP) ||
        !bench_linear_bf16(&s, llama ? "down" : "fc_proj", x, w, lb, dy, dx, dw, ldb, N, F, C)) {
        st = CT_ERR(CT_ERR_OOM, "out of memory for the kernel benchmark");
        goto done;
    }
    /* GPT-2's c_fc with its GELU in one call, where the backend fuses them
     * (cuda: cuBLASLt's epilogue), fp32 and on bf16 inputs: pre in y, out in
     * dx; compare with gemm.fc.fwd + gelu.fwd */
    const ct_backend_i *bk = s.be->i;
    if (!llama) {
        double fl = 2.0 * N * (double)C * F, rx = 4.0 * N * (double)C, wr = 8.0 * N * (double)F;
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", N, F, C);
        if (bk->matmul_gelu_forward && wanted(&s, "gemm.fc_gelu.fwd")) {
            TIME_KERNEL(&s, "gemm.fc_gelu.fwd", sec,
                        bk->matmul_gelu_forward(s.be, y, dx, x, w, lb, N, C, F));
            double rd = rx + 4.0 * (double)F * C + (lb ? 4.0 * F : 0);
            report(&s, "gemm.fc_gelu.fwd", shape, sec, fl, rd, wr, rd + wr);
        }
        if (bk->matmul_gelu_forward_bf16 && wanted(&s, "gemm_bf16.fc_gelu.fwd")) {
            uint16_t *w16 = be->i->buf_alloc(be, (size_t)F * C * sizeof(uint16_t),
                                             CT_TAG_SCRATCH);
            if (!w16) {
                st = CT_ERR(CT_ERR_OOM, "out of memory for the kernel benchmark");
                goto done;
            }
            be->i->f32_to_bf16(be, w16, w, (size_t)F * C);
            TIME_KERNEL(&s, "gemm_bf16.fc_gelu.fwd", sec,
                        bk->matmul_gelu_forward_bf16(s.be, y, dx, x, w16, lb, N, C, F));
            double rd = rx + 2.0 * (double)F * C + (lb ? 4.0 * F : 0);
            report(&s, "gemm_bf16.fc_gelu.fwd", shape, sec, fl, rd, wr, rd + wr);
            be->i->buf_free(be, w16);
        }
    }

    /* attention over qkv (B,T,QKV) held in x; out in y, dout in dy, dqkv in dx */
    double causal = (double)T * (T + 1) / 2.0;
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d NH=%d NKV=%d", B, T, C, NH, NKV);
    double qkv_bytes = 4.0 * N * QKV, out_bytes = 4.0 * N * C, lse_bytes = 4.0 * B * NH * T;
    if (wanted(&s, "attention.fwd")) {
        TIME_KERNEL(&s, "attention.fwd", sec,
                    s.be->i->attention_forward(s.be, y, lse, x, NULL, NULL, B, T, NH, NKV, HS));
        report(&s, "attention.fwd", shape, sec, 4.0 * B * C * causal, qkv_bytes,
               out_bytes + lse_bytes, qkv_bytes + out_bytes + lse_bytes);
    }
    if (wanted(&s, "attention.bwd")) {
        s.be->i->attention_forward(s.be, y, lse, x, NULL, NULL, B, T, NH, NKV, HS);
        TIME_KERNEL(&s, "attention.bwd", sec,
                    s.be->i->attention_backward(s.be, dx, dy, x, y, lse, NULL, NULL, B, T, NH,
                                                NKV, HS));
        /* reads qkv, out, dout and lse; writes dqkv */
        double rd = qkv_bytes + 2.0 * out_bytes + lse_bytes;
        report(&s, "attention.bwd", shape, sec, 8.0 * B * C * causal, rd, qkv_bytes,
               rd + qkv_bytes);
    }
    /* precision bf16's attention, on backends that have one (cuda's tensor
     * cores at head sizes 64 and 128): the same work and bytes */
    const ct_backend_i *bi = s.be->i;
    if (bi->attention_forward_bf16 && wanted(&s, "attention_bf16.fwd")) {
        TIME_KERNEL(&s, "attention_bf16.fwd", sec,
                    bi->attention_forward_bf16(s.be, y, lse, x, NULL, NULL, B, T, NH, NKV, HS));
        report(&s, "attention_bf16.fwd", shape, sec, 4.0 * B * C * causal, qkv_bytes,
               out_bytes + lse_bytes, qkv_bytes + out_bytes + lse_bytes);
    }
    if (bi->attention_backward_bf16 && wanted(&s, "attention_bf16.bwd")) {
        bi->attention_forward_bf16(s.be, y, lse, x, NULL, NULL, B, T, NH, NKV, HS);
        TIME_KERNEL(&s, "attention_bf16.bwd", sec,
                    bi->attention_backward_bf16(s.be, dx, dy, x, y, lse, NULL, NULL, B, T, NH,
                                                NKV, HS));
        double rd = qkv_bytes + 2.0 * out_bytes + lse_bytes;
        report(&s, "attention_bf16.bwd", shape, sec, 8.0 * B * C * causal, rd, qkv_bytes,
               rd + qkv_bytes);
    }

    /* memory-bound kernels at the block's sizes */
    double nc = (double)N * C, nf = (double)N * F;
    snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
    if (llama && wanted(&s, "rmsnorm.fwd")) {
        TIME_KERNEL(&s, "rmsnorm.fwd", sec,
                    s.be->i->rmsnorm_forward(s.be, y, rstd, x, w, N, C, 1e-5f, 0.0f));
        report(&s, "rmsnorm.fwd", shape, sec, 0, 4.0 * nc, 4.0 * nc, 8.0 * nc);
    }
    if (llama && wanted(&s, "rmsnorm.bwd")) {
        TIME_KERNEL(&s, "rmsnorm.bwd", sec,
                    s.be->i->rmsnorm_backward(s.be, dx, dw, dy, x, w, rstd, N, C, 0.0f));
        report(&s, "rmsnorm.bwd", shape, sec, 0, 12.0 * nc, 4.0 * nc, 12.0 * nc);
    }
    if (!llama && wanted(&s, "layernorm.fwd")) {
        TIME_KERNEL(&s, "layernorm.fwd", sec,
                    s.be->i->layernorm_forward(s.be, y, mean, rstd, x, w, b, N, C, 1e-5f));
        report(&s, "layernorm.fwd", shape, sec, 0, 4.0 * nc, 4.0 * nc, 8.0 * nc);
    }
    if (!llama && wanted(&s, "layernorm.bwd")) {
        TIME_KERNEL(&s, "layernorm.bwd", sec,
                    s.be->i->layernorm_backward(s.be, dx, dw, db, dy, x, w, mean, rstd, N, C));
        /* reads dy and x, dx += */
        report(&s, "layernorm.bwd", shape, sec, 0, 12.0 * nc, 4.0 * nc, 12.0 * nc);
    }
    if (wanted(&s, "residual.fwd")) {
        TIME_KERNEL(&s, "residual.fwd", sec,
                    s.be->i->residual_forward(s.be, y, x, dy, (size_t)nc));
        report(&s, "residual.fwd", shape, sec, 0, 8.0 * nc, 4.0 * nc, 12.0 * nc);
    }
    /* the residual add fused with the norm after it (the forward's
     * residual_*norm_forward): reads a and b, writes res and out, 16 bytes a
     * value against residual.fwd's 12 + the norm's 8 */
    if (llama && wanted(&s, "rmsnorm.fused_fwd")) {
        TIME_KERNEL(&s, "rmsnorm.fused_fwd", sec,
                    s.be->i->residual_rmsnorm_forward(s.be, y, dx, rstd, x, dy, w, N, C, 1e-5f,
                                                      0.0f));
        report(&s, "rmsnorm.fused_fwd", shape, sec, 0, 8.0 * nc, 8.0 * nc, 16.0 * nc);
    }
    if (!llama && wanted(&s, "layernorm.fused_fwd")) {
        TIME_KERNEL(&s, "layernorm.fused_fwd", sec,
                    s.be->i->residual_layernorm_forward(s.be, y, dx, mean, rstd, x, dy, w, b, N,
                                                        C, 1e-5f));
        report(&s, "layernorm.fused_fwd", shape, sec, 0, 8.0 * nc, 8.0 * nc, 16.0 * nc);
    }
    if (wanted(&s, "residual.bwd")) {
        TIME_KERNEL(&s, "residual.bwd", sec,
                    s.be->i->residual_backward(s.be, dx, y, dy, (size_t)nc));
        /* both inputs' gradients += dout */
        report(&s, "residual.bwd", shape, sec, 0, 12.0 * nc, 8.0 * nc, 12.0 * nc);
    }
    snprintf(shape, sizeof shape, "n=%d x %d", N, F);
    if (llama && wanted(&s, "swiglu.fwd")) {
        TIME_KERNEL(&s, "swiglu.fwd", sec, s.be->i->swiglu_forward(s.be, y, x, N, F));
        report(&s, "swiglu.fwd", shape, sec, 0, 8.0 * nf, 4.0 * nf, 12.0 * nf);
    }
    if (llama && wanted(&s, "swiglu.bwd")) {
        TIME_KERNEL(&s, "swiglu.bwd", sec, s.be->i->swiglu_backward(s.be, dx, x, dy, N, F));
        /* reads gate and up (2F wide) and dout, d(gate, up) += */
        report(&s, "swiglu.bwd", shape, sec, 0, 20.0 * nf, 8.0 * nf, 20.0 * nf);
    }
    if (llama) {
        /* RoPE turns the q and k heads of the fused rows in place */
        double qk = 4.0 * N * (NH + NKV) * HS;
        snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
        if (wanted(&s, "rope.fwd")) {
            TIME_KERNEL(&s, "rope.fwd", sec,
                        s.be->i->rope_forward(s.be, x, NULL, B, T, NH, NKV, HS, 0, inv));
            report(&s, "rope.fwd", shape, sec, 0, qk, qk, qk);
        }
        if (wanted(&s, "rope.bwd")) {
            TIME_KERNEL(&s, "rope.bwd", sec,
                        s.be->i->rope_backward(s.be, dx, NULL, B, T, NH, NKV, HS, 0, inv));
            report(&s, "rope.bwd", shape, sec, 0, qk, qk, qk);
        }
    }
    if (cfg->qk_norm) {
        /* Qwen3's per-head RMSNorm of q and k (v copied): rows of QKV floats */
        double qk = (double)N * (NH + NKV) * HS, nq = (double)N * QKV;
        snprintf(shape, sizeof shape, "N=%d NH=%d NKV=%d HS=%d", N, NH, NKV, HS);
        if (wanted(&s, "qknorm.fwd")) {
            TIME_KERNEL(&s, "qknorm.fwd", sec,
                        s.be->i->qknorm_forward(s.be, y, qkr, x, w, w + HS, N, NH, NKV, HS,
                                                cfg->norm_eps, cfg->norm_offset ? 1.0f : 0.0f));
            report(&s, "qknorm.fwd", shape, sec, 0, 4.0 * qk, 4.0 * nq, 4.0 * nq);
        }
        if (wanted(&s, "qknorm.bwd")) {
            TIME_KERNEL(&s, "qknorm.bwd", sec,
                        s.be->i->qknorm_backward(s.be, dx, dw, dw + HS, dy, x, w, w + HS, qkr,
                                                 N, NH, NKV, HS, cfg->norm_offset ? 1.0f : 0.0f));
            /* reads inp and dout twice (weight, then input gradients), writes dinp */
            report(&s, "qknorm.bwd", shape, sec, 0, 10.0 * qk, 16.0 * nq, 20.0 * nq);
        }
    }
    if (!llama && wanted(&s, "gelu.fwd")) {
        TIME_KERNEL(&s, "gelu.fwd", sec, s.be->i->gelu_forward(s.be, y, x, (size_t)nf));
        report(&s, "gelu.fwd", shape, sec, 0, 4.0 * nf, 4.0 * nf, 8.0 * nf);
    }
    if (!llama && wanted(&s, "gelu.bwd")) {
        TIME_KERNEL(&s, "gelu.bwd", sec, s.be->i->gelu_backward(s.be, dx, x, dy, (size_t)nf));
        report(&s, "gelu.bwd", shape, sec, 0, 12.0 * nf, 4.0 * nf, 12.0 * nf);
    }
    snprintf(shape, sizeof shape, "B=%d T=%d C=%d", B, T, C);
    if (wanted(&s, "encoder.fwd")) {
        TIME_KERNEL(&s, "encoder.fwd", sec,
                    s.be->i->encoder_forward(s.be, y, tok, w, llama ? NULL : x, NULL, B, T, C, 0));
        /* the tokens' embedding rows (and GPT-2's position rows) in, N x C out */
        double rd = 4.0 * nc + (llama ? 0 : 4.0 * T * C);
        report(&s, "encoder.fwd", shape, sec, 0, rd, 4.0 * nc, rd + 4.0 * nc);
    }
    if (wanted(&s, "encoder.bwd")) {
        TIME_KERNEL(&s, "encoder.bwd", sec,
                    s.be->i->encoder_backward(s.be, dw, llama ? NULL : dx, dy, tok, NULL, B, T, C));
        /* dout in; the tokens' rows of dwte (and dwpe) += */
        double g = 4.0 * nc + (llama ? 0 : 4.0 * T * C);
        report(&s, "encoder.bwd", shape, sec, 0, 4.0 * nc + g, g, 4.0 * nc + g);
    }
    snprintf(shape, sizeof shape, "N=%d V=%d", rows, V);
    if (wanted(&s, "crossentropy")) {
        /* forward and the fused gradient over one chunk of logits, in place */
        double lv = (double)rows * V;
        TIME_KERNEL(&s, "crossentropy", sec,
                    s.be->i->crossentropy_forward(s.be, losses, dy, dy, tok, rows, V, 1e-3f));
        report(&s, "crossentropy", shape, sec, 0, 4.0 * lv, 4.0 * lv, 4.0 * lv);
    }
    /* the bf16 head (train.precision=bf16 where the backend uses it: cuda,
     * and cpu with oneDNN's native bf16): bf16 logits in rows ld apart, the
     * loss in place on them, the backward GEMMs from that bf16 gradient;
     * compare with gemm.head.* and crossentropy */
    int ld = ct_backend_head16_ld(s.be, V);
    if (ld > 0 &&
        (wanted(&s, "gemm_bf16.head16.fwd") || wanted(&s, "crossentropy_bf16") ||
         wanted(&s, "gemm_bf16.head16.bwd_input") ||
         wanted(&s, "gemm_bf16.head16.bwd_weight"))) {
        uint16_t *l16 = be->i->buf_alloc(be, (size_t)rows * ld * sizeof(uint16_t),
                                         CT_TAG_SCRATCH);
        uint16_t *w16 = be->i->buf_alloc(be, head * sizeof(uint16_t), CT_TAG_SCRATCH);
        uint16_t *x16 = be->i->buf_alloc(be, (size_t)rows * C * sizeof(uint16_t),
                                         CT_TAG_SCRATCH);
        if (!l16 || !w16 || !x16) {
            be->i->buf_free(be, l16), be->i->buf_free(be, w16), be->i->buf_free(be, x16);
            st = CT_ERR(CT_ERR_OOM, "out of memory for the kernel benchmark");
            goto done;
        }
        be->i->f32_to_bf16(be, w16, w, head);
        be->i->f32_to_bf16(be, x16, x, (size_t)rows * C);
        double fl = 2.0 * rows * (double)C * V, lv = (double)rows * V, hc = (double)rows * C;
        /* logits the loss can read, whether or not the forward is timed */
        bk->matmul_forward_bf16_out16(s.be, l16, ld, x, w16, rows, C, V);
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", rows, V, C);
        if (wanted(&s, "gemm_bf16.head16.fwd")) {
            TIME_KERNEL(&s, "gemm_bf16.head16.fwd", sec,
                        bk->matmul_forward_bf16_out16(s.be, l16, ld, x, w16, rows, C, V));
            double rd = 4.0 * hc + 2.0 * (double)head, wr = 2.0 * lv;
            report(&s, "gemm_bf16.head16.fwd", shape, sec, fl, rd, wr, rd + wr);
        }
        snprintf(shape, sizeof shape, "N=%d V=%d ld=%d", rows, V, ld);
        if (wanted(&s, "crossentropy_bf16")) {
            TIME_KERNEL(&s, "crossentropy_bf16", sec,
                        bk->crossentropy_forward_bf16(s.be, losses, l16, l16, ld, tok, rows, V,
                                                      1e-3f));
            report(&s, "crossentropy_bf16", shape, sec, 0, 2.0 * lv, 2.0 * lv, 2.0 * lv);
        }
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", rows, C, V);
        if (wanted(&s, "gemm_bf16.head16.bwd_input")) {
            TIME_KERNEL(&s, "gemm_bf16.head16.bwd_input", sec,
                        bk->matmul_backward_bf16_dout16(s.be, dx, NULL, l16, ld, NULL, w16, rows,
                                                        C, V));
            /* dx += dlogits16 w16: dx is read and written */
            double fp = 2.0 * lv + 2.0 * (double)head + 4.0 * hc;
            report(&s, "gemm_bf16.head16.bwd_input", shape, sec, fl, fp, 4.0 * hc, fp);
        }
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", V, C, rows);
        if (wanted(&s, "gemm_bf16.head16.bwd_weight")) {
            TIME_KERNEL(&s, "gemm_bf16.head16.bwd_weight", sec,
                        bk->matmul_backward_bf16_dout16(s.be, NULL, dw, l16, ld, x16, w16, rows,
                                                        C, V));
            /* dw += dlogits16^T x16: dw is read and written */
            double fp = 2.0 * lv + 2.0 * hc + 4.0 * (double)head;
            report(&s, "gemm_bf16.head16.bwd_weight", shape, sec, fl, fp,
                   4.0 * (double)head, fp);
        }
        be->i->buf_free(be, l16), be->i->buf_free(be, w16), be->i->buf_free(be, x16);
    }
    /* precision bf16's kept GEMM operands (backends with the entries: cuda):
     * the norm and the MLP activation writing bf16 (compare *.fused_fwd,
     * gelu.fwd / swiglu.fwd), and the GEMMs reading it as it is (compare
     * the same GEMM on an fp32 input it rounds first) */
    const char *nn = llama ? "rmsnorm.fused_fwd16" : "layernorm.fused_fwd16";
    const char *an = llama ? "swiglu.fwd16" : "gelu.fwd16";
    /* the MLP's second linear (its input, N x F, is the widest kept one) */
    char g32[48], g16[48];
    snprintf(g32, sizeof g32, "gemm_bf16.%s.fwd", llama ? "down" : "fc_proj");
    snprintf(g16, sizeof g16, "gemm_bf16.%s.fwd_in16", llama ? "down" : "fc_proj");
    const char *fg16 = "gemm_bf16.fc_gelu.fwd_in16";
    bool fg = !llama && bk->matmul_gelu_forward_bf16_in16;
    if (bk->matmul_forward_bf16_in16 && bk->mlp_act_forward_out16 &&
        (llama ? bk->rmsnorm_forward_out16 != NULL : bk->layernorm_forward_out16 != NULL) &&
        (wanted(&s, nn) || wanted(&s, an) || wanted(&s, g32) || wanted(&s, g16) ||
         (fg && wanted(&s, fg16)))) {
        size_t nw = (size_t)F * C > (size_t)C * UP ? (size_t)F * C : (size_t)C * UP;
        uint16_t *x16 = be->i->buf_alloc(be, big * sizeof(uint16_t), CT_TAG_SCRATCH);
        uint16_t *w16 = be->i->buf_alloc(be, nw * sizeof(uint16_t), CT_TAG_SCRATCH);
        if (!x16 || !w16) {
            be->i->buf_free(be, x16), be->i->buf_free(be, w16);
            st = CT_ERR(CT_ERR_OOM, "out of memory for the kernel benchmark");
            goto done;
        }
        be->i->f32_to_bf16(be, w16, w, nw);
        be->i->f32_to_bf16(be, x16, x, (size_t)N * F);
        snprintf(shape, sizeof shape, "N=%d C=%d", N, C);
        if (wanted(&s, nn)) {
            if (llama)
                TIME_KERNEL(&s, nn, sec,
                            bk->rmsnorm_forward_out16(s.be, y, x16, rstd, x, dy, w, N, C, 1e-5f,
                                                      0.0f));
            else
                TIME_KERNEL(&s, nn, sec,
                            bk->layernorm_forward_out16(s.be, y, x16, mean, rstd, x, dy, w, b, N,
                                                        C, 1e-5f));
            report(&s, nn, shape, sec, 0, 8.0 * nc, 6.0 * nc, 14.0 * nc);
        }
        snprintf(shape, sizeof shape, "n=%d x %d", N, F);
        if (wanted(&s, an)) {
            int act = cfg->mlp == CT_MLP_SWIGLU  ? CT_ACT16_SWIGLU
                      : cfg->mlp == CT_MLP_GEGLU ? CT_ACT16_GEGLU
                                                 : CT_ACT16_GELU;
            TIME_KERNEL(&s, an, sec, bk->mlp_act_forward_out16(s.be, x16, x, N, F, act));
            double rd = (act == CT_ACT16_GELU ? 4.0 : 8.0) * nf;
            report(&s, an, shape, sec, 0, rd, 2.0 * nf, rd + 2.0 * nf);
        }
        double fl = 2.0 * N * (double)F * C, wrd = 2.0 * (double)F * C, wr = 4.0 * nc;
        snprintf(shape, sizeof shape, "M=%d N=%d K=%d", N, C, F);
        if (wanted(&s, g32)) {
            TIME_KERNEL(&s, g32, sec, bk->matmul_forward_bf16(s.be, y, x, w16, lb, N, F, C));
            report(&s, g32, shape, sec, fl, 4.0 * nf + wrd, wr, 4.0 * nf + wrd + wr);
        }
        if (wanted(&s, g16)) {
            TIME_KERNEL(&s, g16, sec, bk->matmul_forward_bf16_in16(s.be, y, x16, w16, lb, N, F, C));
            report(&s, g16, shape, sec, fl, 2.0 * nf + wrd, wr, 2.0 * nf + wrd + wr);
        }
        if (fg && wanted(&s, fg16)) {
            snprintf(shape, sizeof shape, "M=%d N=%d K=%d", N, F, C);
            TIME_KERNEL(&s, fg16, sec,
                        bk->matmul_gelu_forward_bf16_in16(s.be, y, dx, x16, w16, lb, N, C, F));
            double rd = 2.0 * nc + 2.0 * (double)F * C + (lb ? 4.0 * F : 0);
            report(&s, fg16, shape, sec, 2.0 * N * (double)C * F, rd, 8.0 * nf, rd + 8.0 * nf);
        }
        be->i->buf_free(be, x16), be->i->buf_free(be, w16);
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
        /* real gradients: a never-written buffer may read the shared zero page,
         * which no memory traffic backs */
        upload_pattern(be, g, n, stage, pattern_y);
        snprintf(shape, sizeof shape, "n=%zu", n);
        int64_t t = 1;
        if (wanted(&s, "adamw")) {
            TIME_KERNEL(&s, "adamw", sec,
                        s.be->i->adamw_update(s.be, p, g, mv, mv + n, n, 1e-4f, 0.9f, 0.95f,
                                              1e-8f, 0.1f, 1.0f, t++));
            /* reads p, g, m, v; writes p, m, v */
            report(&s, "adamw", shape, sec, 0, 16.0 * (double)n, 12.0 * (double)n,
                   16.0 * (double)n);
        }
        if (wanted(&s, "sumsq")) {
            volatile double sink;
            TIME_KERNEL(&s, "sumsq", sec, sink = s.be->i->sumsq(s.be, g, n));
            (void)sink;
            report(&s, "sumsq", shape, sec, 0, 4.0 * (double)n, 0, 4.0 * (double)n);
        }
        dev_free(be, p), dev_free(be, g), dev_free(be, mv);
    }
done:
    if (!st && s.st) st = s.st;
    dev_free(be, x), dev_free(be, y), dev_free(be, dy), dev_free(be, dx), dev_free(be, w);
    dev_free(be, dw), dev_free(be, b), dev_free(be, db), dev_free(be, mean), dev_free(be, rstd);
    dev_free(be, lse), dev_free(be, losses), be->i->buf_free(be, tok);
    dev_free(be, inv), dev_free(be, qkr);
    free(htok), free(stage);
    return st;
}
