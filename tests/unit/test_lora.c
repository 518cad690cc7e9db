/*
 * models/lora.c: LoRA adapters on both archs. The adapter gradients against
 * central finite differences of the loss (every module kind of LLaMA with
 * GQA and of GPT-2, B non-zero so both factors matter), the frozen base (no
 * base gradient buffer, weights bit-unchanged by a step, the trainable view is
 * the adapter), recompute full equal to none with and without dropout, the
 * inputs no adapter reads neither kept nor re-derived (one kind at a time:
 * finite differences, the three policies bit-equal, the plan), B = 0 leaving the logits bit-equal to the base model's, merging equal to the
 * adapted forward, target matching as PEFT does, the memory plan equal to
 * what reserve and AdamW allocate, and refusals of bad options.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/model.h"
#include "ctrain/train.h"
#include "perf/memplan.h"

enum { B = 2, T = 7, V = 37 };

static void config_of(ct_model_config *c, bool llama) {
    if (llama) {
        ct_model_config_llama(c, 2, 4, 2, 16, 24, V, 12);
        c->rope_theta = 100.0f;
    } else {
        ct_model_config_gpt2(c, 2, 2, 16, V, 12);
    }
}

static uint32_t all_kinds(const ct_model_config *c) {
    return (1u << ct_lora_num_kinds(c)) - 1;
}

/* A model with perturbed base weights and adapters of rank 3 on `targets`,
 * B drawn non-zero; reserved for training at (B,T) when reserve. round16:
 * the base's matrices rounded to bf16 values (kept fp32); bf16: stored as bf16. */
static ct_model *make_model_ex(ct_ctx *ctx, bool llama, uint32_t targets, float dropout,
                               const ct_model_opts *o, bool reserve, bool round16, bool bf16) {
    ct_model_config c;
    config_of(&c, llama);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    if (!m) return NULL;
    ct_model_init_weights(m, 7);
    ct_rng r;
    ct_rng_init(&r, 99);
    float *p = ct_model_params(m);
    for (size_t j = 0; j < ct_model_numel(m); j++) p[j] += 0.3f * (ct_rng_float(&r) - 0.5f);
    if (round16) {
        for (int i = 0; i < ct_model_num_params(m); i++) {
            const ct_param *q = ct_model_param(m, i);
            if (q->ndim != 2) continue;
            uint16_t *tmp = malloc(q->numel * sizeof *tmp);
            ct_f32_to_bf16_array(tmp, p + q->offset, q->numel);
            ct_bf16_to_f32_array(p + q->offset, tmp, q->numel);
            free(tmp);
        }
    }
    ct_lora_opts lo = {.r = 3, .alpha = 6.0f, .dropout = dropout, .targets = targets, .seed = 5,
                       .base_bf16 = bf16};
    CHECK(ct_model_lora_attach(m, &lo) == CT_OK);
    ct_model_lora_init_weights(m, 11);
    float *a = ct_model_trainable_params(m);
    for (int i = 0; i < ct_model_num_trainable(m); i++) {
        const ct_param *q = ct_model_trainable_param(m, i);
        if (i % 2 == 1) /* B: non-zero, so that A's gradient is too */
            for (size_t j = 0; j < q->numel; j++) a[q->offset + j] = ct_rng_float(&r) - 0.5f;
    }
    if (o) CHECK(ct_model_set_opts(m, o) == CT_OK);
    if (reserve) CHECK(ct_model_reserve(m, B, T, true) == CT_OK);
    return m;
}

static ct_model *make_model(ct_ctx *ctx, bool llama, uint32_t targets, float dropout,
                            const ct_model_opts *o, bool reserve) {
    return make_model_ex(ctx, llama, targets, dropout, o, reserve, false, false);
}

static void make_tokens(int32_t *in, int32_t *tg, int n, uint64_t seed) {
    ct_rng r;
    ct_rng_init(&r, seed);
    for (int i = 0; i < n; i++) {
        in[i] = (int32_t)(ct_rng_u32(&r) % V);
        tg[i] = (int32_t)(ct_rng_u32(&r) % V);
    }
}

static void test_finite_differences(ct_ctx *ctx, bool llama, uint32_t targets,
                                    const ct_model_opts *o) {
    ct_model_config c;
    config_of(&c, llama);
    ct_model *m = make_model(ctx, llama, targets, 0.0f, o, true);
    CHECK(ct_model_grads(m) == NULL); /* frozen base: no gradient buffer */
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 5);
    float loss;
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss) == CT_OK);
    float *p = ct_model_trainable_params(m), *g = ct_model_trainable_grads(m);
    CHECK(g != NULL);
    ct_rng r;
    ct_rng_init(&r, 3);
    int checked = 0, n = ct_model_num_trainable(m);
    CHECK(n == 2 * c.n_layer * __builtin_popcount(targets));
    for (int i = 0; i < n; i++) {
        const ct_param *q = ct_model_trainable_param(m, i);
        size_t pick[3] = {0, ct_rng_u32(&r) % q->numel, ct_rng_u32(&r) % q->numel};
        for (size_t j = 1; j < q->numel; j++)
            if (fabsf(g[q->offset + j]) > fabsf(g[q->offset + pick[0]])) pick[0] = j;
        CHECK_MSG(fabsf(g[q->offset + pick[0]]) > 0, "%s has no gradient at all", q->name);
        for (int s = 0; s < 3; s++) {
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
            CHECK_MSG(fabs(fd - an) <= 0.03 * fabs(an) + 2e-4,
                      "%s targets 0x%x recompute %d %s[%zu]: analytic %.6g vs finite "
                      "difference %.6g", llama ? "llama" : "gpt2", (unsigned)targets,
                      o ? (int)o->recompute : 0, q->name, pick[s], an, fd);
            checked++;
        }
    }
    CHECK(checked == 3 * n);
    ct_model_free(m);
}

/* One AdamW step changes the adapter and leaves every base weight as it was. */
static void test_base_frozen(ct_ctx *ctx, bool llama) {
    ct_model_config c;
    config_of(&c, llama);
    ct_model *m = make_model(ctx, llama, 1u, 0.0f, NULL, true);
    size_t nb = ct_model_numel(m), na = ct_model_trainable_numel(m);
    CHECK(na < nb && ct_model_trainable_params(m) != ct_model_params(m));
    float *base = malloc(nb * sizeof *base), *ad = malloc(na * sizeof *ad);
    memcpy(base, ct_model_params(m), nb * sizeof *base);
    memcpy(ad, ct_model_trainable_params(m), na * sizeof *ad);
    ct_adamw opt;
    CHECK(ct_adamw_init(&opt, ctx, na) == CT_OK);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 8);
    float loss;
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss) == CT_OK);
    CHECK(ct_grad_norm(m) > 0);
    ct_adamw_params ap = {0.9f, 0.999f, 1e-8f, 0.1f};
    ct_adamw_step(&opt, m, &ap, 1e-2f, 1.0f);
    CHECK(memcmp(base, ct_model_params(m), nb * sizeof *base) == 0);
    CHECK(memcmp(ad, ct_model_trainable_params(m), na * sizeof *ad) != 0);
    ct_adamw_free(&opt);
    free(base);
    free(ad);
    ct_model_free(m);
}

/* Gradients of one step under options o (dropout p), adapters on targets
 * (0: every kind). */
static float run_opts_on(ct_ctx *ctx, bool llama, uint32_t targets, float dropout,
                         const ct_model_opts *o, float **grads, size_t *n) {
    ct_model_config c;
    config_of(&c, llama);
    ct_model *m = make_model(ctx, llama, targets ? targets : all_kinds(&c), dropout, o, true);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 21);
    float loss = 0;
    ct_model_zero_grads(m);
    CHECK(ct_model_forward_backward(m, in, tg, B, T, 1.0f, &loss) == CT_OK);
    *n = ct_model_trainable_numel(m);
    *grads = malloc(*n * sizeof **grads);
    memcpy(*grads, ct_model_trainable_grads(m), *n * sizeof **grads);
    ct_model_free(m);
    return loss;
}

static float run_opts(ct_ctx *ctx, bool llama, float dropout, const ct_model_opts *o,
                      float **grads, size_t *n) {
    return run_opts_on(ctx, llama, 0, dropout, o, grads, n);
}

/* A frozen base's linear without an adapter does not read its input in the
 * backward, so ln1, ln2 and the MLP activation that no adapter reads are not
 * kept (nor re-derived under light and full). With adapters on one module
 * kind at a time, or on the attention's only: the gradients match finite
 * differences and are bit for bit the same under none, light and full, and
 * the plan keeps exactly the inputs the adapters read. */
static void test_unread_inputs(ct_ctx *ctx) {
    for (int llama = 0; llama < 2; llama++) {
        ct_model_config c;
        config_of(&c, llama);
        int nk = ct_lora_num_kinds(&c);
        /* each kind alone, then the attention's kinds (LLaMA's q, k, v, o; GPT-2's
         * c_attn and c_proj) */
        for (int k = 0; k <= nk; k++) {
            uint32_t t = k < nk ? 1u << k : llama ? 0x0Fu : 0x3u;
            ct_model_opts o[3];
            float *g[3], loss[3];
            size_t n[3];
            for (int rc = 0; rc < 3; rc++) {
                o[rc] = ct_model_opts_default();
                o[rc].recompute = (ct_recompute)rc;
                loss[rc] = run_opts_on(ctx, llama, t, 0.0f, &o[rc], &g[rc], &n[rc]);
            }
            test_finite_differences(ctx, llama, t, &o[0]);
            test_finite_differences(ctx, llama, t, &o[1]);
            for (int rc = 1; rc < 3; rc++)
                CHECK_MSG(n[rc] == n[0] && loss[rc] == loss[0] &&
                              memcmp(g[rc], g[0], n[0] * sizeof *g[0]) == 0,
                          "%s targets 0x%x: recompute %d's gradients differ from none's",
                          llama ? "llama" : "gpt2", (unsigned)t, rc);
            for (int rc = 0; rc < 3; rc++) free(g[rc]);
            /* the plan: what an adapter on every kind keeps, less the inputs of
             * the GEMMs no adapter of t sits on */
            ct_lora_opts lo = {.r = 3, .alpha = 6, .targets = t}, la = lo;
            la.targets = all_kinds(&c);
            ct_model_plan p, pa;
            CHECK(ct_model_plan_memory_lora(&c, B, T, true, &o[0], &lo, &p) == CT_OK);
            CHECK(ct_model_plan_memory_lora(&c, B, T, true, &o[0], &la, &pa) == CT_OK);
            size_t N = (size_t)B * T, C = (size_t)c.n_embd, F = (size_t)c.n_ffn;
            size_t in[4] = {N * C, 0, N * C, N * F}; /* ln1, (atty: kept), ln2, act */
            size_t dropped = 0;
            for (int gm = 0; gm < 4; gm++) {
                bool on = false;
                for (int j = 0; j < nk; j++)
                    if (t & (1u << j)) on |= (llama ? (int[]){0, 0, 0, 1, 2, 2, 3}[j]
                                                    : (int[]){0, 1, 2, 3}[j]) == gm;
                if (!on) dropped += ct_arena_round(in[gm] * sizeof(float)) * (size_t)c.n_layer;
            }
            /* lora_h: every adapter's A x rows, one buffer */
            size_t h1 = (size_t)c.n_layer * N * 3 * sizeof(float);
            size_t want = pa.acts - dropped - ct_arena_round(h1 * (size_t)nk) +
                          ct_arena_round(h1 * (size_t)__builtin_popcount(t));
            CHECK_MSG(p.acts == want, "%s targets 0x%x: acts %zu bytes planned, want %zu",
                      llama ? "llama" : "gpt2", (unsigned)t, p.acts, want);
        }
    }
}

static void test_recompute_and_dropout(ct_ctx *ctx) {
    for (int llama = 0; llama < 2; llama++) {
        for (int d = 0; d < 2; d++) {
            float p = d ? 0.3f : 0.0f;
            ct_model_opts none = ct_model_opts_default(), full = none;
            full.recompute = CT_RECOMPUTE_FULL;
            float *g1, *g2;
            size_t n1, n2;
            float l1 = run_opts(ctx, llama, p, &none, &g1, &n1);
            float l2 = run_opts(ctx, llama, p, &full, &g2, &n2);
            CHECK(n1 == n2 && l1 == l2);
            CHECK_MSG(memcmp(g1, g2, n1 * sizeof *g1) == 0,
                      "%s dropout %g: recompute full gradients differ from none",
                      llama ? "llama" : "gpt2", (double)p);
            free(g1);
            free(g2);
        }
        /* dropout changes the training loss, deterministically */
        ct_model_opts o = ct_model_opts_default();
        float *g;
        size_t n;
        float l0 = run_opts(ctx, llama, 0.0f, &o, &g, &n);
        free(g);
        float la = run_opts(ctx, llama, 0.3f, &o, &g, &n);
        free(g);
        float lb = run_opts(ctx, llama, 0.3f, &o, &g, &n);
        free(g);
        CHECK(la == lb && la != l0);
    }
}

/* B = 0 adds exactly nothing; a merged model computes what the adapters did. */
static void test_zero_b_and_merge(ct_ctx *ctx, bool llama) {
    ct_model_config c;
    config_of(&c, llama);
    int32_t in[B * T], tg[B * T];
    make_tokens(in, tg, B * T, 31);
    size_t NV = (size_t)B * T * V;
    float *base = malloc(NV * sizeof(float)), *ad = malloc(NV * sizeof(float)),
          *mg = malloc(NV * sizeof(float));
    /* the base alone: same weights, no adapters */
    ct_model *m = make_model(ctx, llama, all_kinds(&c), 0.0f, NULL, false);
    ct_model *plain = NULL;
    CHECK(ct_model_init(&plain, ctx, &c) == CT_OK);
    memcpy(ct_model_params(plain), ct_model_params(m), ct_model_numel(m) * sizeof(float));
    CHECK(ct_model_reserve(plain, B, T, false) == CT_OK);
    CHECK(ct_model_logits(plain, in, B, T, base) == CT_OK);
    /* B = 0 (PEFT's initialisation): bit-equal to the base */
    ct_model_lora_init_weights(m, 4);
    CHECK(ct_model_reserve(m, B, T, false) == CT_OK);
    CHECK(ct_model_logits(m, in, B, T, ad) == CT_OK);
    CHECK(memcmp(base, ad, NV * sizeof(float)) == 0);
    ct_model_free(m);
    /* non-zero B, then merged */
    m = make_model(ctx, llama, all_kinds(&c), 0.0f, NULL, false);
    CHECK(ct_model_reserve(m, B, T, false) == CT_OK);
    CHECK(ct_model_logits(m, in, B, T, ad) == CT_OK);
    CHECK(ct_model_lora_merge(m) == CT_OK);
    CHECK(ct_model_lora(m) == NULL && ct_model_lora_merge(m) == CT_ERR_ARG);
    CHECK(ct_model_logits(m, in, B, T, mg) == CT_OK);
    double worst = 0, scale = 0, moved = 0;
    for (size_t i = 0; i < NV; i++) {
        worst = fmax(worst, fabs(ad[i] - mg[i]));
        scale = fmax(scale, fabs(ad[i]));
        moved = fmax(moved, fabs(ad[i] - base[i]));
    }
    CHECK_MSG(worst <= 1e-5 * fmax(scale, 1.0), "merged logits differ by %g", worst);
    CHECK(moved > 1e-3); /* the adapters did change the logits */
    free(base);
    free(ad);
    free(mg);
    ct_model_free(plain);
    ct_model_free(m);
}

/* A bf16-stored base computes exactly what an fp32 base holding the same
 * bf16-rounded matrices does: losses and adapter gradients bit-identical,
 * under recompute none and full; the fp32 base buffer is gone. */
static void test_bf16_base(ct_ctx *ctx) {
    for (int llama = 0; llama < 2; llama++) {
        for (int v = 0; v < 4; v++) {
            /* recompute none and full; precision fp32 (the GEMMs read widened
             * matrices) and bf16 (they read the bf16 ones; nothing is widened) */
            int rc = v & 1 ? 2 : 0;
            ct_model_config c;
            config_of(&c, llama);
            ct_model_opts o = ct_model_opts_default();
            o.recompute = (ct_recompute)rc;
            if (v >= 2) o.precision = CT_PREC_BF16;
            ct_model *a = make_model_ex(ctx, llama, all_kinds(&c), 0.0f, &o, true, true, false);
            ct_model *b = make_model_ex(ctx, llama, all_kinds(&c), 0.0f, &o, true, false, true);
            CHECK(ct_model_params(b) == NULL && ct_model_params_bf16(b) != NULL);
            CHECK(ct_model_params_bf16(a) == NULL);
            int32_t in[B * T], tg[B * T];
            make_tokens(in, tg, B * T, 41);
            float la, lb;
            ct_model_zero_grads(a);
            ct_model_zero_grads(b);
            CHECK(ct_model_forward_backward(a, in, tg, B, T, 1.0f, &la) == CT_OK);
            CHECK(ct_model_forward_backward(b, in, tg, B, T, 1.0f, &lb) == CT_OK);
            CHECK_MSG(la == lb, "%s recompute %d precision %d: bf16 base loss %.9g vs rounded "
                      "fp32 %.9g", llama ? "llama" : "gpt2", rc, (int)o.precision, lb, la);
            size_t n = ct_model_trainable_numel(a);
            CHECK(n == ct_model_trainable_numel(b));
            CHECK_MSG(memcmp(ct_model_trainable_grads(a), ct_model_trainable_grads(b),
                             n * sizeof(float)) == 0,
                      "%s recompute %d precision %d: bf16 base adapter gradients differ",
                      llama ? "llama" : "gpt2", rc, (int)o.precision);
            /* and the rounding matters: the unrounded base gives another loss */
            ct_model *f = make_model(ctx, llama, all_kinds(&c), 0.0f, &o, true);
            float lf;
            CHECK(ct_model_forward_backward(f, in, tg, B, T, 1.0f, &lf) == CT_OK);
            CHECK(lf != lb);
            CHECK(ct_model_lora_merge(b) == CT_ERR_ARG && strstr(ct_last_error(), "bf16"));
            ct_model_free(f);
            ct_model_free(a);
            ct_model_free(b);
        }
    }
}

/* Loading a base straight into bf16 storage gives the bits that rounding the
 * fp32 model gives, from F32 files (GPT-2's transposed Conv1D included) and
 * from BF16 files (copied as they are); the PEFT files round-trip. */
static void test_load_bf16_direct(ct_ctx *ctx) {
    for (int llama = 0; llama < 2; llama++) {
        char dir[256], sub[300];
        ct_tmpdir_make(dir, sizeof dir, "lora_load");
        ct_model_config c;
        config_of(&c, llama);
        ct_model *src = make_model(ctx, llama, 0x3, 0.0f, NULL, false);
        for (int bf16_file = 0; bf16_file < 2; bf16_file++) {
            ct_tmpdir_join(sub, sizeof sub, dir, bf16_file ? "b16" : "f32");
            /* the base as a file: the source's weights (its adapters are not part of it) */
            CHECK(ct_model_export_hf(src, sub, bf16_file) == CT_OK);
            ct_lora_opts lo = {.r = 2, .alpha = 4, .targets = 0x1, .base_bf16 = true};
            ct_model *a = NULL, *b = NULL;
            CHECK(ct_model_load_hf(&a, ctx, sub) == CT_OK);
            CHECK(ct_model_lora_attach(a, &lo) == CT_OK);
            CHECK(ct_model_load_hf_lora(&b, ctx, sub, &lo) == CT_OK);
            CHECK(a && b && ct_model_params(b) == NULL);
            if (!a || !b) continue;
            CHECK_MSG(memcmp(ct_model_params_bf16(a), ct_model_params_bf16(b),
                             ct_model_numel(a) * sizeof(uint16_t)) == 0,
                      "%s from %s: direct bf16 load differs from rounding the fp32 load",
                      llama ? "llama" : "gpt2", bf16_file ? "BF16" : "F32");
            /* same logits (the 1-D weights too) */
            ct_model_lora_init_weights(a, 3);
            ct_model_lora_init_weights(b, 3);
            CHECK(ct_model_reserve(a, B, T, false) == CT_OK);
            CHECK(ct_model_reserve(b, B, T, false) == CT_OK);
            int32_t in[B * T], tg[B * T];
            make_tokens(in, tg, B * T, 9);
            float la = 0, lb = 1;
            CHECK(ct_model_forward(a, in, tg, B, T, &la) == CT_OK);
            CHECK(ct_model_forward(b, in, tg, B, T, &lb) == CT_OK);
            CHECK(la == lb);
            /* PEFT files: saved and loaded back bit for bit */
            ct_tmpdir_join(sub, sizeof sub, dir, "peft");
            CHECK(ct_model_lora_save_peft(a, sub, "base") == CT_OK);
            ct_lora_opts back;
            CHECK(ct_lora_config_load_peft(&c, sub, &back) == CT_OK);
            CHECK(back.r == 2 && back.alpha == 4.0f && back.targets == 0x1);
            memset(ct_model_trainable_params(b), 0, ct_model_trainable_numel(b) * sizeof(float));
            CHECK(ct_model_lora_load_peft(b, sub) == CT_OK);
            CHECK(memcmp(ct_model_trainable_params(a), ct_model_trainable_params(b),
                         ct_model_trainable_numel(a) * sizeof(float)) == 0);
            ct_model_free(a);
            ct_model_free(b);
        }
        ct_model_free(src);
        ct_tmpdir_remove(dir);
    }
}

static void test_targets(void) {
    ct_model_config g, l;
    config_of(&g, false);
    config_of(&l, true);
    uint32_t mask = 0;
    char buf[256];
    CHECK(ct_lora_targets_parse(&g, "c_proj", "lora.targets", &mask) == CT_OK);
    CHECK(mask == ((1u << 1) | (1u << 3))); /* attn.c_proj and mlp.c_proj */
    CHECK(ct_lora_targets_parse(&g, "attn.c_proj", "lora.targets", &mask) == CT_OK &&
          mask == (1u << 1));
    ct_lora_targets_format(&g, mask, buf, sizeof buf);
    CHECK(strcmp(buf, "attn.c_proj") == 0);
    CHECK(ct_lora_targets_parse(&g, "c_attn, c_proj", "lora.targets", &mask) == CT_OK &&
          mask == 0xB);
    ct_lora_targets_format(&g, mask, buf, sizeof buf);
    CHECK(strcmp(buf, "c_attn,c_proj") == 0);
    CHECK(ct_lora_targets_parse(&l, "q_proj,v_proj", "lora.targets", &mask) == CT_OK &&
          mask == 0x5);
    ct_lora_targets_format(&l, mask, buf, sizeof buf);
    CHECK(strcmp(buf, "q_proj,v_proj") == 0);
    CHECK(ct_lora_targets_parse(&l, "self_attn.o_proj,down_proj", "lora.targets", &mask) ==
              CT_OK && mask == ((1u << 3) | (1u << 6)));
    /* a name that adapts nothing: the key and the modules are named */
    CHECK(ct_lora_targets_parse(&l, "q_proj,c_attn", "lora.targets", &mask) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "lora.targets") && strstr(ct_last_error(), "c_attn") &&
          strstr(ct_last_error(), "self_attn.q_proj"));
    CHECK(ct_lora_targets_parse(&g, "proj", "lora.targets", &mask) == CT_ERR_ARG);
    CHECK(ct_lora_targets_parse(&g, " , ", "lora.targets", &mask) == CT_ERR_ARG);
    /* bad options */
    ct_lora_opts o = {.r = 0, .alpha = 8, .targets = 1};
    CHECK(ct_lora_opts_validate(&l, &o) == CT_ERR_ARG && strstr(ct_last_error(), "lora.r"));
    o.r = 4;
    o.dropout = 1.0f;
    CHECK(ct_lora_opts_validate(&l, &o) == CT_ERR_ARG &&
          strstr(ct_last_error(), "lora.dropout"));
    o.dropout = 0;
    o.targets = 1u << 7;
    CHECK(ct_lora_opts_validate(&l, &o) == CT_ERR_ARG);
    o.targets = 1;
    CHECK(ct_lora_opts_validate(&l, &o) == CT_OK);
}

/* The plan with adapters equals what reserve and AdamW allocate, and says the
 * base has no gradients and no moments. */
static void test_plan_is_allocation(void) {
    for (int llama = 0; llama < 2; llama++) {
        for (int rc = 0; rc < 5; rc++) {
            ct_ctx *ctx = NULL;
            CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
            ct_model_config c;
            config_of(&c, llama);
            ct_model_opts o = ct_model_opts_default();
            o.recompute = (ct_recompute)(rc % 3);
            /* full recompute with a bf16 base, and none with one; then at
             * precision bf16, where nothing is widened */
            bool bf16 = rc >= 2;
            if (rc == 4) o.precision = CT_PREC_BF16;
            ct_lora_opts lo = {.r = 4, .alpha = 8, .dropout = rc ? 0.1f : 0.0f,
                               .targets = llama ? 0x0F : 0x3, .base_bf16 = bf16};
            if (rc >= 3) o.recompute = CT_RECOMPUTE_NONE;
            ct_run_plan p;
            CHECK(ct_run_plan_make_lora(&c, B, T, 1, 2, &o, &lo, &p) == CT_OK);
            ct_model *m = NULL;
            CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
            CHECK(ct_model_lora_attach(m, &lo) == CT_OK);
            CHECK(ct_model_set_opts(m, &o) == CT_OK);
            CHECK(ct_model_reserve(m, B, T, true) == CT_OK);
            ct_adamw opt;
            CHECK(ct_adamw_init(&opt, ctx, ct_model_trainable_numel(m)) == CT_OK);
            ct_memstats ms;
            ct_ctx_memstats(ctx, &ms);
            int64_t got = ms.current[CT_TAG_PARAMS] + ms.current[CT_TAG_GRADS] +
                          ms.current[CT_TAG_ACTS] + ms.current[CT_TAG_OPTIM];
            int64_t want = (int64_t)(p.model.total + p.optim);
            CHECK_MSG(got == want, "%s recompute %d: allocated %lld bytes, planned %lld",
                      llama ? "llama" : "gpt2", rc, (long long)got, (long long)want);
            size_t adapter = ct_model_trainable_numel(m) * sizeof(float);
            CHECK(p.model.grads == adapter && p.optim == 2 * adapter);
            CHECK(ms.current[CT_TAG_GRADS] == (int64_t)adapter);
            if (bf16) /* matrices bf16: a bit over half of the fp32 base */
                CHECK(p.model.params < ct_model_numel(m) * sizeof(float) * 6 / 10 + adapter);
            else
                CHECK(p.model.params == (ct_model_numel(m)) * sizeof(float) + adapter);
            ct_adamw_free(&opt);
            ct_model_free(m);
            ct_ctx_free(ctx);
        }
    }
}

int main(void) {
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
    test_targets();
    ct_model_config cl, cg;
    config_of(&cl, true);
    config_of(&cg, false);
    test_finite_differences(ctx, true, all_kinds(&cl), NULL);
    test_finite_differences(ctx, false, all_kinds(&cg), NULL);
    test_unread_inputs(ctx);
    test_base_frozen(ctx, true);
    test_base_frozen(ctx, false);
    test_recompute_and_dropout(ctx);
    test_zero_b_and_merge(ctx, true);
    test_zero_b_and_merge(ctx, false);
    test_plan_is_allocation();
    test_bf16_base(ctx);
    test_load_bf16_direct(ctx);
    ct_ctx_free(ctx);
    return ct_test_result("test_lora");
}
