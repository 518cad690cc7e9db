/*
 * The backend seam, through the public API:
 * - the sim backend's device memory cannot be touched from the host: a child
 *   process that reads a device buffer, or a model's weights, dies;
 * - training on sim (ref's kernels behind device memory, every tensor staged
 *   through uploads and downloads) gives the same bits as training on ref,
 *   for GPT-2 and LLaMA, with LoRA (dropout, bf16 base), bf16 activations and
 *   full recompute: nothing above the seam computes on tensors itself;
 * - HF save and load, the base hash and KV-cache decoding agree across the
 *   two, and the context's counters return to zero after everything is freed;
 * - GPT-2's c_fc and GELU through the optional fused entry
 *   (matmul_gelu_forward) train to the same bits on ref as the two calls do
 *   with the entry removed from the table, fp32 and bf16 precision, bf16
 *   activations and full recompute; with a LoRA adapter on c_fc the fused
 *   entry is never called (the adapter adds before the GELU);
 * - the device-side reduction (reduce_add) adds exactly what sum and sumsq
 *   return, without a wait; a queued step (ct_model_forward_backward_queued,
 *   ct_model_step_read) gives the synchronous step's loss, norm and weights
 *   bit for bit on ref, cpu and sim, and on sim waits once.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/ctx.h"
#include "core/dtype.h"
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/model.h"
#include "ctrain/train.h"

/* Run fn(arg) in a child; true when the child did not exit normally with 0
 * (a signal, or ASan's report and non-zero exit). */
static bool child_dies(void (*fn)(void *), void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn(arg);
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return false;
    return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

static void read_float(void *p) {
    volatile float x = *(volatile float *)p;
    (void)x;
}

static void read_weights(void *m) { read_float(ct_model_params(m)); }

static void test_sim_memory_is_not_host_memory(void) {
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = CT_BACKEND_SIM;
    cp.n_threads = 1;
    ct_ctx *ctx;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    ct_backend *be = ct_ctx_backend(ctx);
    CHECK(!be->host_visible);
    float *d = be->i->buf_alloc(be, 64 * sizeof(float), CT_TAG_SCRATCH);
    CHECK(d != NULL);
    float in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f;
    be->i->upload(be, d, in, sizeof in);
    be->i->download(be, out, d, sizeof out);
    CHECK(!memcmp(in, out, sizeof in));
    CHECK_MSG(child_dies(read_float, d), "reading a sim device buffer on the host did not fault");
    CHECK_MSG(!child_dies(read_float, out), "the harness itself faults on host memory");
    be->i->buf_free(be, d);

    ct_model_config cfg;
    CHECK(ct_model_config_preset(&cfg, "gpt2-tiny") == CT_OK);
    ct_model *m;
    CHECK(ct_model_init(&m, ctx, &cfg) == CT_OK);
    CHECK(!ct_model_host_visible(m));
    CHECK_MSG(child_dies(read_weights, m), "reading sim weights on the host did not fault");
    ct_model_free(m);
    ct_memstats ms;
    ct_ctx_memstats(ctx, &ms);
    CHECK_MSG(ms.total_current == 0, "%lld bytes still counted", (long long)ms.total_current);
    ct_ctx_free(ctx);
}

typedef struct run_cfg {
    const char *preset;
    bool lora, bf16_acts, full;
    bool bf16_prec; /* train.precision = bf16 */
    int fused;      /* 0: the backend's table as it is; 1: counting its fused
                     * linear+GELU entries; -1: without them */
    bool light;     /* train.recompute = light (ln1, ln2, fch_gelu re-derived) */
    int in16;       /* as fused, for the forwards on a kept bf16 input and the
                     * norms and MLP activations that write it; 2: those
                     * forwards counted, the writers removed */
    bool no_adamw16; /* without the fused AdamW that writes the bf16 weight copies */
} run_cfg;

/* Calls of the fused entries of the counting table (train_on, fused = 1). */
static int fused_calls;
static const ct_backend_i *fused_inner;
static void count_matmul_gelu(ct_backend *be, float *pre, float *out, const float *inp,
                              const float *weight, const float *bias, int N, int C, int OC) {
    fused_calls++;
    fused_inner->matmul_gelu_forward(be, pre, out, inp, weight, bias, N, C, OC);
}
static void count_matmul_gelu_bf16(ct_backend *be, float *pre, float *out, const float *inp,
                                   const uint16_t *weight16, const float *bias, int N, int C,
                                   int OC) {
    fused_calls++;
    fused_inner->matmul_gelu_forward_bf16(be, pre, out, inp, weight16, bias, N, C, OC);
}

/* Calls of the forwards on a kept bf16 input and of the bf16-output norms
 * and MLP activations (train_on, in16 = 1). */
static int in16_calls, out16_calls;
static const ct_backend_i *in16_inner;
static void count_matmul_in16(ct_backend *be, float *out, const uint16_t *inp16,
                              const uint16_t *weight16, const float *bias, int N, int C, int OC) {
    in16_calls++;
    in16_inner->matmul_forward_bf16_in16(be, out, inp16, weight16, bias, N, C, OC);
}
static void count_matmul_gelu_in16(ct_backend *be, float *pre, float *out, const uint16_t *inp16,
                                   const uint16_t *weight16, const float *bias, int N, int C,
                                   int OC) {
    in16_calls++;
    in16_inner->matmul_gelu_forward_bf16_in16(be, pre, out, inp16, weight16, bias, N, C, OC);
}
static void count_layernorm_out16(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                  float *rstd, const float *a, const float *b,
                                  const float *weight, const float *bias, int N, int C,
                                  float eps) {
    out16_calls++;
    in16_inner->layernorm_forward_out16(be, res, out16, mean, rstd, a, b, weight, bias, N, C,
                                        eps);
}
static void count_rmsnorm_out16(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                const float *a, const float *b, const float *weight, int N, int C,
                                float eps, float wofs) {
    out16_calls++;
    in16_inner->rmsnorm_forward_out16(be, res, out16, rstd, a, b, weight, N, C, eps, wofs);
}
static void count_mlp_act_out16(ct_backend *be, uint16_t *out16, const float *inp, int N, int F,
                                int act) {
    out16_calls++;
    in16_inner->mlp_act_forward_out16(be, out16, inp, N, F, act);
}

typedef struct run_out {
    float loss[4];
    float *weights; /* trainable, after the steps */
    size_t n;
    float logits[64];
    float decoded[64];
    uint64_t base_hash;
} run_out;

static void train_on(ct_backend_kind kind, const run_cfg *rc, run_out *out) {
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = kind;
    cp.n_threads = 1;
    ct_ctx *ctx;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    /* the table with its fused entries counted or removed (in place until
     * the context is freed, below: the backend's own table goes back first,
     * since freeing a backend picks its teardown by the table) */
    ct_backend *be = ct_ctx_backend(ctx);
    const ct_backend_i *own = be->i;
    ct_backend_i table = *be->i;
    if (rc->fused) {
        fused_inner = be->i;
        table.matmul_gelu_forward = rc->fused > 0 ? count_matmul_gelu : NULL;
        table.matmul_gelu_forward_bf16 = rc->fused > 0 ? count_matmul_gelu_bf16 : NULL;
        be->i = &table;
    }
    if (rc->in16) {
        in16_inner = be->i == &table ? fused_inner : be->i;
        bool on = rc->in16 > 0;
        table.matmul_forward_bf16_in16 =
            on && in16_inner->matmul_forward_bf16_in16 ? count_matmul_in16 : NULL;
        table.matmul_gelu_forward_bf16_in16 =
            on && in16_inner->matmul_gelu_forward_bf16_in16 ? count_matmul_gelu_in16 : NULL;
        bool norms = rc->in16 == 1;
        table.layernorm_forward_out16 =
            norms && in16_inner->layernorm_forward_out16 ? count_layernorm_out16 : NULL;
        table.rmsnorm_forward_out16 =
            norms && in16_inner->rmsnorm_forward_out16 ? count_rmsnorm_out16 : NULL;
        table.mlp_act_forward_out16 =
            norms && in16_inner->mlp_act_forward_out16 ? count_mlp_act_out16 : NULL;
        be->i = &table;
    }
    if (rc->no_adamw16) {
        table.adamw_update16 = NULL;
        be->i = &table;
    }
    ct_model_config cfg;
    CHECK(ct_model_config_preset(&cfg, rc->preset) == CT_OK);
    ct_model *m;
    CHECK(ct_model_init(&m, ctx, &cfg) == CT_OK);
    CHECK(ct_model_init_weights(m, 7) == CT_OK);
    if (rc->lora) {
        ct_lora_opts lo = {.r = 4, .alpha = 8.0f, .dropout = 0.25f, .seed = 5,
                           .targets = (1u << ct_lora_num_kinds(&cfg)) - 1, .base_bf16 = true};
        CHECK(ct_model_lora_attach(m, &lo) == CT_OK);
        CHECK(ct_model_lora_init_weights(m, 9) == CT_OK);
        /* a non-zero B so the adapters change the loss from the first step */
        size_t n = ct_model_trainable_numel(m);
        float *w = malloc(n * sizeof *w);
        ct_model_download(m, w, ct_model_trainable_params(m), n * sizeof *w);
        for (size_t i = 0; i < n; i++) w[i] += 0.01f * (float)((i * 7919) % 13) - 0.06f;
        ct_model_upload(m, ct_model_trainable_params(m), w, n * sizeof *w);
        free(w);
        CHECK(ct_model_base_xxh64(m, &out->base_hash) == CT_OK);
    }
    ct_model_opts o = ct_model_opts_default();
    if (rc->bf16_acts) o.act_dtype = CT_ACT_BF16;
    if (rc->full) o.recompute = CT_RECOMPUTE_FULL;
    if (rc->light) o.recompute = CT_RECOMPUTE_LIGHT;
    if (rc->bf16_prec) o.precision = CT_PREC_BF16;
    CHECK(ct_model_set_opts(m, &o) == CT_OK);
    int B = 2, T = 8, V = cfg.vocab_size;
    CHECK(ct_model_reserve(m, B, T, true) == CT_OK);
    ct_adamw opt;
    size_t n = ct_model_trainable_numel(m);
    CHECK(ct_adamw_init(&opt, ctx, n) == CT_OK);
    ct_adamw_params ap = {0.9f, 0.95f, 1e-8f, 0.1f};
    int32_t in[16], tg[16];
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < B * T; i++) {
            in[i] = (i * 31 + s * 17) % V;
            tg[i] = (i * 13 + s * 5 + 1) % V;
        }
        ct_model_zero_grads(m);
        CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &out->loss[s]) == CT_OK);
        float clip = ct_clip_scale(ct_grad_norm(m), 1.0);
        /* as the trainer: the next step's GEMMs read copies of these weights */
        bool fresh = ct_adamw_step(&opt, m, &ap, 1e-2f, clip);
        bool want = be->i->adamw_update16 && rc->bf16_prec && !rc->lora;
        CHECK_MSG(fresh == want, "%s on %s: the update %s the bf16 copies", rc->preset,
                  ct_backend_kind_name(kind), fresh ? "wrote" : "skipped");
        if (!fresh) ct_model_refresh_weights16(m);
        if (fresh && rc->bf16_prec && !rc->lora) {
            size_t bad = 0;
            float *w = malloc(n * sizeof *w);
            ct_model_download(m, w, ct_model_trainable_params(m), n * sizeof *w);
            for (int i = 0; i < ct_model_num_trainable(m); i++) {
                const uint16_t *c = ct_model_trainable_w16(m, i);
                const ct_param *q = ct_model_trainable_param(m, i);
                for (size_t j = 0; c && j < q->numel; j++)
                    bad += c[j] != ct_f32_to_bf16(w[q->offset + j]);
            }
            CHECK_MSG(bad == 0, "%s on %s: %zu bf16 weight copies differ from the new weights",
                      rc->preset, ct_backend_kind_name(kind), bad);
            free(w);
        }
    }
    out->n = n;
    out->weights = malloc(n * sizeof(float));
    ct_model_download(m, out->weights, ct_model_trainable_params(m), n * sizeof(float));
    float *logits = malloc((size_t)B * T * V * sizeof(float));
    CHECK(ct_model_logits(m, in, B, T, logits) == CT_OK);
    memcpy(out->logits, logits, sizeof out->logits);
    free(logits);
    if (!rc->lora) {
        CHECK(ct_model_decode_reserve(m, 8) == CT_OK);
        float *row = malloc((size_t)V * sizeof(float));
        for (int i = 0; i < 3; i++) CHECK(ct_model_decode_step(m, in[i], row) == CT_OK);
        memcpy(out->decoded, row, sizeof out->decoded);
        free(row);
    }
    ct_adamw_free(&opt);
    ct_model_free(m);
    ct_memstats ms;
    ct_ctx_memstats(ctx, &ms);
    CHECK_MSG(ms.total_current == 0, "%s on %s: %lld bytes still counted", rc->preset,
              ct_backend_kind_name(kind), (long long)ms.total_current);
    be->i = own;
    ct_ctx_free(ctx);
}

static void test_sim_equals_ref(const run_cfg *rc) {
    run_out a = {0}, b = {0};
    train_on(CT_BACKEND_REF, rc, &a);
    train_on(CT_BACKEND_SIM, rc, &b);
    const char *what = rc->preset;
    CHECK_MSG(!memcmp(a.loss, b.loss, sizeof a.loss), "%s%s: losses differ (%.9g vs %.9g)", what,
              rc->lora ? " lora" : "", a.loss[3], b.loss[3]);
    CHECK_MSG(a.loss[3] != a.loss[0], "%s: training did not move the loss", what);
    CHECK_MSG(a.n == b.n && !memcmp(a.weights, b.weights, a.n * sizeof(float)),
              "%s%s: trained weights differ", what, rc->lora ? " lora" : "");
    CHECK_MSG(!memcmp(a.logits, b.logits, sizeof a.logits), "%s: logits differ", what);
    CHECK_MSG(!memcmp(a.decoded, b.decoded, sizeof a.decoded), "%s: decoded logits differ", what);
    CHECK_MSG(a.base_hash == b.base_hash, "%s: base hashes differ", what);
    printf("  %-10s lora=%d bf16=%d full=%d: sim == ref over 4 steps (loss %.6f -> %.6f)\n",
           what, rc->lora, rc->bf16_acts, rc->full, a.loss[0], a.loss[3]);
    free(a.weights);
    free(b.weights);
}

/* The reduction that stays on the device adds exactly what sum / sumsq return. */
static void test_reduce_add(ct_backend_kind kind) {
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = kind;
    cp.n_threads = 2;
    ct_ctx *ctx;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    ct_backend *be = ct_ctx_backend(ctx);
    size_t n = 100003;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 1001) * 1e-3f - 0.5f;
    float *d = be->i->buf_alloc(be, n * sizeof *d, CT_TAG_SCRATCH);
    double *acc = be->i->buf_alloc(be, 2 * sizeof *acc, CT_TAG_SCRATCH);
    CHECK(d && acc);
    be->i->upload(be, d, x, n * sizeof *x);
    double want_sum = be->i->sum(be, d, n), want_sq = be->i->sumsq(be, d, n);
    int64_t stalls = be->stalls;
    ct_be_reduce_add(be, acc, d, n, false);
    ct_be_reduce_add(be, acc + 1, d, n, true);
    ct_be_reduce_add(be, acc + 1, d, n / 2, true); /* adds */
    CHECK_MSG(be->stalls == stalls, "%s: reduce_add waited", ct_backend_kind_name(kind));
    double got[2];
    be->i->download(be, got, acc, sizeof got);
    CHECK_MSG(got[0] == want_sum, "%s: sum %.17g, reduce_add %.17g", ct_backend_kind_name(kind),
              want_sum, got[0]);
    CHECK_MSG(got[1] == want_sq + be->i->sumsq(be, d, n / 2), "%s: sumsq differs",
              ct_backend_kind_name(kind));
    /* sim counts a wait as a stall only when work was queued since the last */
    if (kind == CT_BACKEND_SIM) {
        CHECK(be->stalls == stalls + 1);
        CHECK(be->i->synchronize(be) == CT_OK && be->stalls == stalls + 1);
        be->i->scale(be, d, 1.0f, 1);
        CHECK(be->i->synchronize(be) == CT_OK && be->stalls == stalls + 2);
    } else {
        CHECK(be->stalls == 0);
    }
    be->i->buf_free(be, acc);
    be->i->buf_free(be, d);
    free(x);
    ct_ctx_free(ctx);
}

/* A queued step (micro-batches without a wait, one read) gives the bits of
 * the synchronous one: the same loss, gradient norm and trained weights, with
 * one stall per step on sim. */
static void test_queued_equals_sync(ct_backend_kind kind, const char *preset) {
    float w_sync_first = 0, w_q_first = 0;
    double loss_sync[3], norm_sync[3], loss_q[3], norm_q[3];
    float *w[2] = {NULL, NULL};
    size_t nw = 0;
    for (int queued = 0; queued < 2; queued++) {
        ct_ctx_params cp = ct_ctx_params_default();
        cp.backend = kind;
        cp.n_threads = 1;
        ct_ctx *ctx;
        CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
        ct_model_config cfg;
        CHECK(ct_model_config_preset(&cfg, preset) == CT_OK);
        ct_model *m;
        CHECK(ct_model_init(&m, ctx, &cfg) == CT_OK);
        CHECK(ct_model_init_weights(m, 7) == CT_OK);
        int B = 2, T = 8, V = cfg.vocab_size;
        CHECK(ct_model_reserve(m, B, T, true) == CT_OK);
        ct_adamw opt;
        size_t n = ct_model_trainable_numel(m);
        CHECK(ct_adamw_init(&opt, ctx, n) == CT_OK);
        ct_adamw_params ap = {0.9f, 0.95f, 1e-8f, 0.1f};
        int32_t in[16], tg[16];
        ct_backend *be = ct_ctx_backend(ctx);
        for (int s = 0; s < 3; s++) {
            for (int i = 0; i < B * T; i++) {
                in[i] = (i * 31 + s * 17) % V;
                tg[i] = i % 5 == 3 ? -1 : (i * 13 + s * 5 + 1) % V; /* 13 counted */
            }
            ct_model_zero_grads(m);
            double loss, norm;
            int64_t stalls = be->stalls;
            if (queued) {
                double sum, sq;
                CHECK(ct_model_forward_backward_queued(m, in, tg, B, T, 1.0f) == CT_OK);
                CHECK(ct_model_step_read(m, &sum, &sq, NULL) == CT_OK);
                loss = (float)(sum / 13.0);
                norm = sqrt(sq);
                if (kind == CT_BACKEND_SIM)
                    CHECK_MSG(be->stalls == stalls + 1, "%s: %lld stalls in a queued step",
                              preset, (long long)(be->stalls - stalls));
                loss_q[s] = loss;
                norm_q[s] = norm;
            } else {
                float l;
                CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &l) == CT_OK);
                loss = l;
                norm = ct_grad_norm(m);
                loss_sync[s] = loss;
                norm_sync[s] = norm;
            }
            ct_adamw_step(&opt, m, &ap, 1e-2f, ct_clip_scale(norm, 1.0));
        }
        nw = n;
        w[queued] = malloc(n * sizeof(float));
        ct_model_download(m, w[queued], ct_model_trainable_params(m), n * sizeof(float));
        if (queued) w_q_first = w[queued][0];
        else w_sync_first = w[queued][0];
        ct_adamw_free(&opt);
        ct_model_free(m);
        ct_ctx_free(ctx);
    }
    for (int s = 0; s < 3; s++) {
        CHECK_MSG(loss_q[s] == loss_sync[s], "%s on %s step %d: queued loss %.9g, sync %.9g",
                  preset, ct_backend_kind_name(kind), s, loss_q[s], loss_sync[s]);
        CHECK_MSG(norm_q[s] == norm_sync[s], "%s on %s step %d: queued norm %.17g, sync %.17g",
                  preset, ct_backend_kind_name(kind), s, norm_q[s], norm_sync[s]);
    }
    CHECK_MSG(!memcmp(w[0], w[1], nw * sizeof(float)), "%s on %s: weights differ (%g vs %g)",
              preset, ct_backend_kind_name(kind), w_sync_first, w_q_first);
    free(w[0]);
    free(w[1]);
}

/* The fused c_fc+GELU entry against the two calls, on ref: the same bits,
 * and the fused entry taken exactly when no adapter sits on c_fc. */
static void test_fused_equals_unfused(run_cfg rc) {
    run_out a = {0}, b = {0};
    rc.fused = 1;
    fused_calls = 0;
    train_on(CT_BACKEND_REF, &rc, &a);
    int calls = fused_calls;
    rc.fused = -1;
    train_on(CT_BACKEND_REF, &rc, &b);
    const char *what = rc.preset;
    if (rc.lora)
        CHECK_MSG(calls == 0, "%s lora: the fused entry ran %d times with an adapter on c_fc",
                  what, calls);
    else
        CHECK_MSG(calls > 0, "%s: the fused entry was never called", what);
    CHECK_MSG(!memcmp(a.loss, b.loss, sizeof a.loss),
              "%s lora=%d bf16=%d full=%d prec=%d: losses differ fused/unfused (%.9g vs %.9g)",
              what, rc.lora, rc.bf16_acts, rc.full, rc.bf16_prec, a.loss[3], b.loss[3]);
    CHECK_MSG(a.loss[3] != a.loss[0], "%s: training did not move the loss", what);
    CHECK_MSG(a.n == b.n && !memcmp(a.weights, b.weights, a.n * sizeof(float)),
              "%s: trained weights differ fused/unfused", what);
    CHECK_MSG(!memcmp(a.logits, b.logits, sizeof a.logits), "%s: logits differ fused/unfused",
              what);
    printf("  %-10s lora=%d bf16=%d full=%d prec_bf16=%d: fused c_fc+GELU == two calls "
           "(%d fused calls)\n", what, rc.lora, rc.bf16_acts, rc.full, rc.bf16_prec, calls);
    free(a.weights);
    free(b.weights);
}

/* Precision bf16 keeps ln1, ln2 and the MLP activation as their GEMMs' bf16
 * operands (model_acts.in16) and feeds them to both passes as they are: the
 * same bits as rounding the fp32 values at each GEMM, which is what a run
 * without the _in16 entries does (forward) and what recompute light does
 * (backward: the values are re-derived and rounded; with fp32 activations
 * only, as bf16 ones re-derive them from the rounded residual stream); the
 * norms that write the kept operand in bf16 give the bits of rounding their
 * fp32 output, which a run without them does, and so do the MLP
 * activations (SwiGLU, GeGLU; GPT-2's GELU where c_fc is not fused with it:
 * never on ref or sim). The entries must run wherever
 * the backend has them. */
static void test_in16_equals_rounding(ct_backend_kind kind, run_cfg rc) {
    run_out a = {0}, b = {0}, c = {0}, d = {0};
    rc.bf16_prec = true;
    rc.in16 = 1;
    in16_calls = out16_calls = 0;
    train_on(kind, &rc, &a);
    int calls = in16_calls, ncalls = out16_calls;
    rc.in16 = -1;
    train_on(kind, &rc, &b);
    rc.in16 = 2;
    train_on(kind, &rc, &d);
    rc.in16 = 0;
    rc.light = true;
    train_on(kind, &rc, &c);
    const char *what = rc.preset, *bk = ct_backend_kind_name(kind);
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = kind;
    ct_ctx *ctx;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    bool has = ct_ctx_backend(ctx)->i->matmul_forward_bf16_in16 != NULL;
    ct_ctx_free(ctx);
    if (has)
        CHECK_MSG(calls > 0 && ncalls > 0,
                  "%s on %s: the forwards on kept bf16 inputs ran %d times, the bf16-output "
                  "norms and activations %d", what, bk, calls, ncalls);
    else
        CHECK_MSG(calls == 0 && ncalls == 0, "%s on %s: %d calls of entries the backend lacks",
                  what, bk, calls + ncalls);
    const run_out *o[3] = {&b, &d, &c};
    const char *name[3] = {"without the _in16 entries", "without the bf16-output writers",
                           "under recompute light"};
    for (int i = 0; i < (rc.bf16_acts ? 2 : 3); i++) {
        CHECK_MSG(!memcmp(a.loss, o[i]->loss, sizeof a.loss),
                  "%s on %s bf16_acts=%d: losses differ %s (%.9g vs %.9g)", what, bk,
                  rc.bf16_acts, name[i], a.loss[3], o[i]->loss[3]);
        CHECK_MSG(a.n == o[i]->n && !memcmp(a.weights, o[i]->weights, a.n * sizeof(float)),
                  "%s on %s bf16_acts=%d: trained weights differ %s", what, bk, rc.bf16_acts,
                  name[i]);
        CHECK_MSG(!memcmp(a.logits, o[i]->logits, sizeof a.logits), "%s on %s: logits differ %s",
                  what, bk, name[i]);
    }
    CHECK_MSG(a.loss[3] != a.loss[0], "%s: training did not move the loss", what);
    printf("  %-11s on %-3s bf16_acts=%d: kept bf16 GEMM inputs == rounding at each GEMM "
           "(%d _in16 calls, %d bf16-output norms/activations)\n",
           what, bk, rc.bf16_acts, calls, ncalls);
    free(a.weights);
    free(b.weights);
    free(c.weights);
    free(d.weights);
}

/* Precision bf16: the AdamW that writes the bf16 weight copies as it updates
 * (adamw_update16) trains exactly as adamw_update followed by the model's
 * own refresh of the copies. */
static void test_adamw16_equals_refresh(ct_backend_kind kind, const char *preset) {
    run_out a = {0}, b = {0};
    run_cfg rc = {preset, false, false, false, true, 0, false, 0, false};
    train_on(kind, &rc, &a);
    rc.no_adamw16 = true;
    train_on(kind, &rc, &b);
    const char *bk = ct_backend_kind_name(kind);
    CHECK_MSG(!memcmp(a.loss, b.loss, sizeof a.loss), "%s on %s: losses differ (%.9g vs %.9g)",
              preset, bk, a.loss[3], b.loss[3]);
    CHECK_MSG(a.n == b.n && !memcmp(a.weights, b.weights, a.n * sizeof(float)),
              "%s on %s: trained weights differ with the fused AdamW", preset, bk);
    CHECK_MSG(!memcmp(a.logits, b.logits, sizeof a.logits), "%s on %s: logits differ", preset,
              bk);
    CHECK_MSG(a.loss[3] != a.loss[0], "%s: training did not move the loss", preset);
    printf("  %-11s on %-3s: AdamW writing the bf16 copies == AdamW then refresh\n", preset, bk);
    free(a.weights);
    free(b.weights);
}

/* Precision fp16's copies are not the fused AdamW's to write: on ref, which
 * has both the fused entry and fp16 GEMMs, the update says so (the trainer
 * then refreshes them), and they stay the fp16 of the weights after it. */
static void test_adamw16_not_fp16(void) {
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = CT_BACKEND_REF;
    cp.n_threads = 1;
    ct_ctx *ctx;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    ct_model_config cfg;
    CHECK(ct_model_config_preset(&cfg, "gpt2-tiny") == CT_OK);
    ct_model *m;
    CHECK(ct_model_init(&m, ctx, &cfg) == CT_OK);
    CHECK(ct_model_init_weights(m, 7) == CT_OK);
    ct_model_opts o = ct_model_opts_default();
    o.precision = CT_PREC_FP16;
    CHECK(ct_model_set_opts(m, &o) == CT_OK);
    CHECK(ct_model_reserve(m, 1, 8, true) == CT_OK);
    ct_adamw opt;
    CHECK(ct_adamw_init(&opt, ctx, ct_model_trainable_numel(m)) == CT_OK);
    ct_adamw_params ap = {0.9f, 0.95f, 1e-8f, 0.1f};
    int32_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tg[8] = {2, 3, 4, 5, 6, 7, 8, 9};
    float loss = 0;
    CHECK(ct_model_forward_backward(m, in, tg, 1, 8, 1.0f, &loss) == CT_OK);
    CHECK(ct_model_trainable_w16(m, 0) == NULL);
    CHECK_MSG(!ct_adamw_step(&opt, m, &ap, 1e-2f, 1.0f),
              "fp16 on ref: the update claims to have written the 16-bit copies");
    ct_adamw_free(&opt);
    ct_model_free(m);
    ct_ctx_free(ctx);
}

/* Save on sim, load on ref and on sim: the same weights. */
static void test_hf_round_trip(void) {
    char dir[256];
    CHECK(ct_tmpdir_make(dir, sizeof dir, "seam") != NULL);
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = 1;
    ct_ctx *sim, *ref;
    cp.backend = CT_BACKEND_SIM;
    CHECK(ct_ctx_init(&sim, &cp) == CT_OK);
    cp.backend = CT_BACKEND_REF;
    CHECK(ct_ctx_init(&ref, &cp) == CT_OK);
    ct_model_config cfg;
    CHECK(ct_model_config_preset(&cfg, "llama-tiny") == CT_OK);
    ct_model *m, *a, *b;
    CHECK(ct_model_init(&m, sim, &cfg) == CT_OK);
    CHECK(ct_model_init_weights(m, 3) == CT_OK);
    CHECK(ct_model_export_hf(m, dir, false) == CT_OK);
    CHECK(ct_model_load_hf(&a, ref, dir) == CT_OK);
    CHECK(ct_model_load_hf(&b, sim, dir) == CT_OK);
    size_t n = ct_model_numel(m);
    float *wm = malloc(n * sizeof *wm), *wb = malloc(n * sizeof *wb);
    ct_model_download(m, wm, ct_model_params(m), n * sizeof *wm);
    ct_model_download(b, wb, ct_model_params(b), n * sizeof *wb);
    CHECK(!memcmp(wm, ct_model_params(a), n * sizeof *wm));
    CHECK(!memcmp(wm, wb, n * sizeof *wm));
    free(wm);
    free(wb);
    ct_model_free(m);
    ct_model_free(a);
    ct_model_free(b);
    ct_ctx_free(sim);
    ct_ctx_free(ref);
    ct_tmpdir_remove(dir);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    test_sim_memory_is_not_host_memory();
    const run_cfg runs[] = {
        {"gpt2-tiny", false, false, false, false, 0, false, 0, false},
        {"gpt2-tiny", false, true, true, false, 0, false, 0, false},
        {"llama-tiny", false, false, false, false, 0, false, 0, false},
        {"llama-tiny", false, true, false, false, 0, false, 0, false},
        {"llama-tiny", true, false, false, false, 0, false, 0, false},
        {"gpt2-tiny", true, false, true, false, 0, false, 0, false},
        /* the families' switches: q/k norms (their op, re-derived in the
         * backward), q,k,v biases, Llama 3's RoPE table through device memory */
        {"qwen3-tiny", false, false, true, false, 0, false, 0, false},
        {"qwen3-tiny", true, false, false, false, 0, false, 0, false},
        {"qwen2-tiny", false, true, false, false, 0, false, 0, false},
        {"llama3-tiny", true, false, false, false, 0, false, 0, false},
        /* Gemma: sandwich norms re-derived under full recompute, sliding layers */
        {"gemma3-tiny", false, false, true, false, 0, false, 0, false},
        {"gemma3-tiny", true, true, false, false, 0, false, 0, false},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) test_sim_equals_ref(&runs[i]);
    const run_cfg fused[] = {
        {"gpt2-tiny", false, false, false, false, 0, false, 0, false},
        {"gpt2-tiny", false, true, true, false, 0, false, 0, false},
        {"gpt2-tiny", false, true, false, true, 0, false, 0, false},
        {"gpt2-tiny", true, false, true, false, 0, false, 0, false},
    };
    for (size_t i = 0; i < sizeof fused / sizeof *fused; i++)
        test_fused_equals_unfused(fused[i]);
    test_hf_round_trip();
    const ct_backend_kind kinds[] = {CT_BACKEND_REF, CT_BACKEND_CPU, CT_BACKEND_SIM};
    const run_cfg in16[] = {
        {"gpt2-tiny", false, false, false, false, 0, false, 0, false},
        {"gpt2-tiny", false, true, false, false, 0, false, 0, false},
        {"llama-tiny", false, false, false, false, 0, false, 0, false},
        {"gemma3-tiny", false, false, false, false, 0, false, 0, false},
        {"gemma3-tiny", false, true, false, false, 0, false, 0, false},
    };
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < sizeof in16 / sizeof *in16; i++)
            test_in16_equals_rounding(kinds[k], in16[i]);
    test_adamw16_not_fp16();
    for (int k = 0; k < 2; k++) { /* ref and cpu have the fused AdamW */
        test_adamw16_equals_refresh(kinds[k], "gpt2-tiny");
        test_adamw16_equals_refresh(kinds[k], "llama-tiny");
    }
    for (int k = 0; k < 3; k++) {
        test_reduce_add(kinds[k]);
        test_queued_equals_sync(kinds[k], "gpt2-tiny");
        test_queued_equals_sync(kinds[k], "gemma3-tiny");
    }
    return ct_test_result("test_seam");
}
