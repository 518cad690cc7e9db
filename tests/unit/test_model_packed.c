/*
 * models/: rows that pack several instruction examples (ct_model_set_positions)
 * and targets that are not counted (< 0). The packing invariance: a batch whose
 * rows pack examples (positions restarting at each, padding, targets -1 at each
 * example's last token and in the padding) gives the loss and the gradients of
 * the examples run alone, each in its own row, weighted by their counted
 * targets: GPT-2 and LLaMA ("gpt2-tiny", "llama-tiny"), recompute none, light
 * and full, a LoRA model, on the cpu and sim backends (sim runs ref's kernels
 * behind device memory). Also: a batch with no counted target has loss 0 and
 * no gradient; positions 0..T-1 and clearing them with NULL give the bits of a
 * model that never had positions; set_positions' errors name the row and column
 * and leave the earlier setting; a set (B,T) is the only shape accepted.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrain/core.h"
#include "ctrain/model.h"

enum { B = 2, T = 16, MAXN = B * T, MAXE = 8 };

/* One example: len tokens drawn from seed. */
typedef struct {
    int len;
    uint64_t seed;
} example;

/* Row r of the packed batch holds the examples rows[r][0..] (-1 ends a list),
 * then padding to T. */
static const example ex[] = {{6, 11}, {7, 12}, {1, 13}, {9, 14}, {4, 15}};
static const int rows[B][MAXE] = {{0, 1, 2, -1}, {3, 4, -1}};

static void example_tokens(int32_t *tok, const example *e, int V) {
    ct_rng r;
    ct_rng_init(&r, e->seed);
    for (int i = 0; i < e->len; i++) tok[i] = (int32_t)(ct_rng_u32(&r) % (uint32_t)V);
}

/* Writes example e at row offset `at` of in, tg, pos: inputs are its tokens,
 * targets the next token of the example (-1 at its last), positions 0..len-1.
 * Returns the number of counted targets. */
static int put_example(int32_t *in, int32_t *tg, int32_t *pos, int at, const example *e, int V) {
    int32_t tok[T];
    example_tokens(tok, e, V);
    for (int i = 0; i < e->len; i++) {
        in[at + i] = tok[i];
        tg[at + i] = i + 1 < e->len ? tok[i + 1] : -1;
        if (pos) pos[at + i] = i;
    }
    return e->len - 1;
}

/* Padding from `at` to the row's end: token 1, not counted, its own example. */
static void put_padding(int32_t *in, int32_t *tg, int32_t *pos, int at, int end) {
    for (int i = at; i < end; i++) {
        in[i] = 1;
        tg[i] = -1;
        if (pos) pos[i] = i - at;
    }
}

/* The packed batch (B,T) and its positions. */
static void packed_batch(int32_t *in, int32_t *tg, int32_t *pos, int V) {
    for (int b = 0; b < B; b++) {
        int at = b * T;
        for (int k = 0; rows[b][k] >= 0; k++) {
            put_example(in, tg, pos, at, &ex[rows[b][k]], V);
            at += ex[rows[b][k]].len;
        }
        put_padding(in, tg, pos, at, (b + 1) * T);
    }
}

static float *download_grads(ct_model *m) {
    size_t n = ct_model_trainable_numel(m);
    float *g = malloc(n * sizeof *g);
    ct_model_download(m, g, ct_model_trainable_grads(m), n * sizeof *g);
    return g;
}

/* max |a - b| / max |b| over n. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0.0, w = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e; /* NaN sticks */
        if (fabs(b[i]) > w) w = fabs(b[i]);
    }
    return d / (w > 0.0 ? w : 1.0);
}

/* A model of preset `name`, weights perturbed so every parameter matters;
 * with LoRA adapters (rank 3 on every kind, B non-zero) when lora. Reserved
 * for training at (B,T) under recompute rc. */
static ct_model *make_model(ct_ctx *ctx, const char *name, bool lora, ct_recompute rc) {
    ct_model_config c;
    CHECK(ct_model_config_preset(&c, name) == CT_OK);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    if (!m) return NULL;
    CHECK(ct_model_init_weights(m, 7) == CT_OK);
    ct_rng r;
    ct_rng_init(&r, 99);
    size_t n = ct_model_numel(m);
    float *p = malloc(n * sizeof *p);
    ct_model_download(m, p, ct_model_params(m), n * sizeof *p);
    for (size_t j = 0; j < n; j++) p[j] += 0.3f * (ct_rng_float(&r) - 0.5f);
    ct_model_upload(m, ct_model_params(m), p, n * sizeof *p);
    free(p);
    if (lora) {
        ct_lora_opts lo = {.r = 3, .alpha = 6.0f, .targets = (1u << ct_lora_num_kinds(&c)) - 1,
                           .seed = 5};
        CHECK(ct_model_lora_attach(m, &lo) == CT_OK);
        CHECK(ct_model_lora_init_weights(m, 11) == CT_OK);
        size_t na = ct_model_trainable_numel(m);
        float *a = malloc(na * sizeof *a);
        ct_model_download(m, a, ct_model_trainable_params(m), na * sizeof *a);
        for (int i = 1; i < ct_model_num_trainable(m); i += 2) { /* B: non-zero */
            const ct_param *q = ct_model_trainable_param(m, i);
            for (size_t j = 0; j < q->numel; j++) a[q->offset + j] = ct_rng_float(&r) - 0.5f;
        }
        ct_model_upload(m, ct_model_trainable_params(m), a, na * sizeof *a);
        free(a);
    }
    ct_model_opts o = ct_model_opts_default();
    o.recompute = rc;
    CHECK(ct_model_set_opts(m, &o) == CT_OK);
    CHECK(ct_model_reserve(m, B, T, true) == CT_OK);
    return m;
}

/* Packed rows == the examples alone, count-weighted; then the checks that
 * need a model: no counted target, positions 0..T-1, NULL, the errors. */
static void test_packing(ct_ctx *ctx, const char *name, bool lora, ct_recompute rc) {
    ct_model *m = make_model(ctx, name, lora, rc);
    if (!m) return;
    int V = ct_model_get_config(m)->vocab_size;
    size_t ng = ct_model_trainable_numel(m);
    char what[96];
    snprintf(what, sizeof what, "%s%s recompute %s", name, lora ? " + LoRA" : "",
             ct_model_recompute_name(rc));
    int32_t in[MAXN], tg[MAXN], pos[MAXN];
    float loss;

    /* the unpacked batch first, before any positions were ever set */
    int32_t uin[MAXN], utg[MAXN];
    put_example(uin, utg, NULL, 0, &ex[0], V);
    put_padding(uin, utg, NULL, ex[0].len, T);
    put_example(uin, utg, NULL, T, &ex[3], V);
    put_padding(uin, utg, NULL, T + ex[3].len, 2 * T);
    float base_loss;
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, uin, utg, B, T, 1.0f, &base_loss) == CT_OK);
    float *base_g = download_grads(m);

    /* each example alone in its own row (B=1), gradients weighted by its
     * share of the counted targets */
    int total = 0, nex = (int)(sizeof ex / sizeof *ex);
    for (int e = 0; e < nex; e++) total += ex[e].len - 1;
    double want_loss = 0.0;
    ct_model_zero_grads(m);
    for (int e = 0; e < nex; e++) {
        int cnt = put_example(in, tg, NULL, 0, &ex[e], V);
        put_padding(in, tg, NULL, ex[e].len, T);
        CHECK(ct_model_forward_backward(m, in, tg, 1, T, (float)cnt / (float)total, &loss) ==
              CT_OK);
        if (cnt == 0) CHECK_MSG(loss == 0.0f, "%s: a 1-token example has loss %g", what, loss);
        want_loss += (double)cnt * loss / total;
    }
    float *want_g = download_grads(m);

    /* the packed batch */
    packed_batch(in, tg, pos, V);
    CHECK(ct_model_set_positions(m, pos, B, T) == CT_OK);
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss) == CT_OK);
    float *got_g = download_grads(m);
    CHECK_MSG(fabs(loss - want_loss) <= 1e-5, "%s: packed loss %.8g, examples alone %.8g", what,
              loss, want_loss);
    double err = rel_diff(got_g, want_g, ng);
    if (getenv("CT_TEST_VERBOSE"))
        printf("  %-34s loss %.8f vs %.8f, gradients err %.2e\n", what, loss, want_loss, err);
    CHECK_MSG(err <= 1e-5, "%s: packed gradients differ from the examples' by %.3g", what, err);
    float fwd_loss;
    CHECK(ct_model_forward(m, in, tg, B, T, &fwd_loss) == CT_OK);
    CHECK_MSG(fwd_loss == loss, "%s: forward %.8g, forward_backward %.8g", what, fwd_loss, loss);
    /* the packing matters: without positions the rows' examples see each other */
    CHECK(ct_model_set_positions(m, NULL, 0, 0) == CT_OK);
    CHECK(ct_model_forward(m, in, tg, B, T, &fwd_loss) == CT_OK);
    CHECK_MSG(fabs(fwd_loss - want_loss) > 1e-4, "%s: the positions changed nothing", what);

    /* no counted target: loss 0 and no gradient at all */
    for (int i = 0; i < MAXN; i++) tg[i] = -1 - i % 3;
    CHECK(ct_model_set_positions(m, pos, B, T) == CT_OK);
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss) == CT_OK);
    CHECK_MSG(loss == 0.0f, "%s: no counted target, loss %g", what, loss);
    CHECK_MSG(ct_model_grad_sumsq(m, 0, ng) == 0.0, "%s: no counted target, gradient %g", what,
              ct_model_grad_sumsq(m, 0, ng));
    CHECK(ct_model_forward(m, in, tg, B, T, &loss) == CT_OK && loss == 0.0f);

    /* positions 0..T-1, and positions cleared: the bits of no positions */
    for (int i = 0; i < MAXN; i++) pos[i] = i % T;
    for (int k = 0; k < 2; k++) {
        CHECK(ct_model_set_positions(m, k ? NULL : pos, B, T) == CT_OK);
        ct_model_zero_grads(m);
        CHECK(ct_model_forward_backward(m, uin, utg, B, T, 1.0f, &loss) == CT_OK);
        float *g = download_grads(m);
        CHECK_MSG(loss == base_loss && memcmp(g, base_g, ng * sizeof *g) == 0,
                  "%s: %s: loss %.9g vs %.9g, gradients %s", what,
                  k ? "positions cleared" : "positions 0..T-1", loss, base_loss,
                  memcmp(g, base_g, ng * sizeof *g) ? "differ" : "same");
        free(g);
    }

    /* a set (B,T) is the only shape accepted until cleared */
    packed_batch(in, tg, pos, V);
    CHECK(ct_model_set_positions(m, pos, 1, T) == CT_OK);
    CHECK(ct_model_forward(m, in, tg, B, T, &loss) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "positions") != NULL);
    CHECK(ct_model_forward_backward(m, in, tg, 1, T - 1, 1.0f, &loss) == CT_ERR_ARG);
    float logits[T * 64];
    if (V <= 64) CHECK(ct_model_logits(m, in, 1, T - 2, logits) == CT_ERR_ARG);
    CHECK(ct_model_forward(m, in, tg, 1, T, &loss) == CT_OK);
    float one_row = loss;

    /* bad positions: the row and column named, the earlier setting kept */
    int32_t bad[MAXN];
    memcpy(bad, pos, sizeof bad);
    bad[T] = 1; /* row 1 does not start at 0 */
    CHECK(ct_model_set_positions(m, bad, B, T) == CT_ERR_ARG);
    CHECK_MSG(strstr(ct_last_error(), "row 1, column 0 is 1") != NULL, "%s", ct_last_error());
    memcpy(bad, pos, sizeof bad);
    bad[3] = 5; /* row 0: 0 1 2 5 */
    CHECK(ct_model_set_positions(m, bad, B, T) == CT_ERR_ARG);
    CHECK_MSG(strstr(ct_last_error(), "row 0, column 3 is 5") != NULL &&
                  strstr(ct_last_error(), "or 3") != NULL,
              "%s", ct_last_error());
    memcpy(bad, pos, sizeof bad);
    bad[T + 9] = -1;
    CHECK(ct_model_set_positions(m, bad, B, T) == CT_ERR_ARG);
    CHECK_MSG(strstr(ct_last_error(), "row 1, column 9 is -1") != NULL, "%s", ct_last_error());
    CHECK(ct_model_set_positions(m, pos, B, T + 1) == CT_ERR_ARG); /* does not fit */
    CHECK(ct_model_set_positions(m, pos, 3, T) == CT_ERR_ARG);
    CHECK(ct_model_set_positions(m, pos, 0, T) == CT_ERR_ARG);
    CHECK(ct_model_forward(m, in, tg, 1, T, &loss) == CT_OK && loss == one_row);

    /* targets: < 0 is fine, >= V is not; inputs must be tokens */
    CHECK(ct_model_set_positions(m, NULL, 0, 0) == CT_OK);
    tg[5] = V;
    CHECK(ct_model_forward(m, in, tg, B, T, &loss) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "target token") != NULL);
    tg[5] = -100;
    in[2] = -1;
    CHECK(ct_model_forward(m, in, tg, B, T, &loss) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "input token") != NULL);

    free(base_g);
    free(want_g);
    free(got_g);
    ct_model_free(m);
}

/* set_positions needs a reserved model. */
static void test_unreserved(ct_ctx *ctx) {
    ct_model_config c;
    CHECK(ct_model_config_preset(&c, "gpt2-tiny") == CT_OK);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    int32_t pos[4] = {0, 1, 0, 1};
    CHECK(ct_model_set_positions(m, pos, 1, 4) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "ct_model_reserve") != NULL);
    CHECK(ct_model_set_positions(m, NULL, 0, 0) == CT_OK);
    ct_model_free(m);
}

int main(void) {
    const ct_backend_kind kinds[] = {CT_BACKEND_CPU, CT_BACKEND_SIM};
    const ct_recompute rcs[] = {CT_RECOMPUTE_NONE, CT_RECOMPUTE_LIGHT, CT_RECOMPUTE_FULL};
    const char *presets[] = {"gpt2-tiny", "llama-tiny"};
    for (int k = 0; k < 2; k++) {
        ct_ctx_params cp = ct_ctx_params_default();
        cp.backend = kinds[k];
        cp.n_threads = 2;
        cp.pin_threads = false;
        ct_ctx *ctx = NULL;
        CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
        if (!ctx) break;
        test_unreserved(ctx);
        for (int p = 0; p < 2; p++) {
            for (int r = 0; r < 3; r++) test_packing(ctx, presets[p], false, rcs[r]);
            test_packing(ctx, presets[p], true, CT_RECOMPUTE_NONE);
            test_packing(ctx, presets[p], true, CT_RECOMPUTE_FULL);
        }
        ct_memstats ms;
        ct_ctx_memstats(ctx, &ms);
        CHECK_MSG(ms.total_current == 0, "%lld bytes still allocated",
                  (long long)ms.total_current);
        ct_ctx_free(ctx);
    }
    return ct_test_result("test_model_packed");
}
