/*
 * The transformer family: config presets, the parameter table over one flat
 * buffer, the activation plan (the same function counts bytes for the planner
 * and carves the arena), and the training forward/backward of a GPT-2 style
 * model with the vocabulary projection and cross-entropy fused and chunked
 * over rows (B*T x V logits are never all in memory).
 * Leaves out: the LLaMA switches' kernels (RMSNorm, RoPE, SwiGLU, GQA), which a
 * later change fills in; ct_model_config_validate rejects them until then.
 */
#include "models/model_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- config */

void ct_model_config_gpt2(ct_model_config *c, int n_layer, int n_head, int n_embd,
                          int vocab_size, int n_ctx) {
    memset(c, 0, sizeof *c);
    c->arch = CT_ARCH_GPT2;
    c->norm = CT_NORM_LAYERNORM;
    c->pos = CT_POS_LEARNED;
    c->mlp = CT_MLP_GELU;
    c->n_layer = n_layer;
    c->n_head = n_head;
    c->n_kv_head = n_head;
    c->n_embd = n_embd;
    c->n_ffn = 4 * n_embd;
    c->vocab_size = vocab_size;
    c->n_ctx = n_ctx;
    c->bias = true;
    c->tied_head = true;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
}

typedef struct preset {
    const char *name;
    int n_layer, n_head, n_embd, vocab, n_ctx;
} preset;

static const preset presets[] = {
    {"gpt2", 12, 12, 768, 50257, 1024},
    {"gpt2-medium", 24, 16, 1024, 50257, 1024},
    {"gpt2-large", 36, 20, 1280, 50257, 1024},
    {"gpt2-xl", 48, 25, 1600, 50257, 1024},
    {"gpt2-demo", 4, 4, 128, 512, 128},
    {"gpt2-tiny", 2, 2, 16, 64, 32},
};

ct_status ct_model_config_preset(ct_model_config *cfg, const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        const preset *p = &presets[i];
        if (strcmp(p->name, name) == 0) {
            ct_model_config_gpt2(cfg, p->n_layer, p->n_head, p->n_embd, p->vocab, p->n_ctx);
            return CT_OK;
        }
    }
    char list[256] = "";
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        if (i) strcat(list, ", ");
        strcat(list, presets[i].name);
    }
    return CT_ERR(CT_ERR_ARG, "model.preset = '%s' is unknown: expected one of %s", name, list);
}

ct_status ct_model_config_validate(const ct_model_config *c) {
    if (c->arch != CT_ARCH_GPT2 || c->norm != CT_NORM_LAYERNORM || c->pos != CT_POS_LEARNED ||
        c->mlp != CT_MLP_GELU || c->n_kv_head != c->n_head || !c->tied_head || !c->bias)
        return CT_ERR(CT_ERR_ARG, "only the GPT-2 variant of the transformer family is "
                                  "implemented so far (LLaMA switches are not available yet)");
    if (c->n_layer < 1 || c->n_head < 1 || c->n_embd < 1 || c->vocab_size < 2 || c->n_ctx < 1 ||
        c->n_ffn < 1)
        return CT_ERR(CT_ERR_ARG,
                      "model sizes must be positive (n_layer=%d n_head=%d n_embd=%d n_ffn=%d "
                      "vocab_size=%d n_ctx=%d)",
                      c->n_layer, c->n_head, c->n_embd, c->n_ffn, c->vocab_size, c->n_ctx);
    if (c->n_embd % c->n_head)
        return CT_ERR(CT_ERR_ARG, "n_embd = %d is not divisible by n_head = %d", c->n_embd,
                      c->n_head);
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
        return CT_ERR(CT_ERR_ARG, "norm epsilon %g must be positive", (double)c->norm_eps);
    return CT_OK;
}

/* ------------------------------------------------------ parameter table */

static int table_add(ct_model *m, const char *name, int ndim, int64_t d0, int64_t d1,
                     bool hf_conv1d) {
    ct_param *p = &m->table[m->n_table];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 1;
    p->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    p->offset = m->numel;
    p->decay = ndim >= 2;
    p->hf_conv1d = hf_conv1d;
    m->numel += p->numel;
    return m->n_table++;
}

ct_status model_build_table(ct_model *m) {
    const ct_model_config *c = &m->cfg;
    int L = c->n_layer, C = c->n_embd, F = c->n_ffn, V = c->vocab_size;
    int max_entries = 4 + 16 * L + 4;
    m->table = calloc((size_t)max_entries, sizeof *m->table);
    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->table || !m->layers) return CT_ERR(CT_ERR_OOM, "out of memory for the parameter table");
    m->n_table = 0;
    m->numel = 0;
    char name[64];
    m->wte = table_add(m, "wte.weight", 2, V, C, false);
    m->wpe = table_add(m, "wpe.weight", 2, c->n_ctx, C, false);
    for (int l = 0; l < L; l++) {
        layer_idx *li = &m->layers[l];
#define ADD1(field, suffix, n)                                   \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);           \
    li->field = table_add(m, name, 1, n, 1, false)
#define ADD2(field, suffix, o, i)                                \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix);           \
    li->field = table_add(m, name, 2, o, i, true)
        ADD1(ln1_w, "ln_1.weight", C);
        ADD1(ln1_b, "ln_1.bias", C);
        ADD2(qkv_w, "attn.c_attn.weight", 3 * C, C);
        ADD1(qkv_b, "attn.c_attn.bias", 3 * C);
        ADD2(proj_w, "attn.c_proj.weight", C, C);
        ADD1(proj_b, "attn.c_proj.bias", C);
        ADD1(ln2_w, "ln_2.weight", C);
        ADD1(ln2_b, "ln_2.bias", C);
        ADD2(fc_w, "mlp.c_fc.weight", F, C);
        ADD1(fc_b, "mlp.c_fc.bias", F);
        ADD2(fcproj_w, "mlp.c_proj.weight", C, F);
        ADD1(fcproj_b, "mlp.c_proj.bias", C);
#undef ADD1
#undef ADD2
    }
    m->lnf_w = table_add(m, "ln_f.weight", 1, C, 1, false);
    m->lnf_b = table_add(m, "ln_f.bias", 1, C, 1, false);
    m->head_w = m->wte; /* tied */
    return CT_OK;
}

ct_status ct_model_init(ct_model **out, ct_ctx *ctx, const ct_model_config *cfg) {
    *out = NULL;
    ct_status st = ct_model_config_validate(cfg);
    if (st) return st;
    ct_model *m = calloc(1, sizeof *m);
    if (!m) return CT_ERR(CT_ERR_OOM, "out of memory allocating the model");
    m->ctx = ctx;
    m->k = ct_ctx_kernels(ctx);
    m->cfg = *cfg;
    if ((st = model_build_table(m))) goto fail;
    m->params = ct_alloc(ctx, m->numel * sizeof(float), CT_TAG_PARAMS);
    if (!m->params) {
        st = ct_last_status();
        goto fail;
    }
    *out = m;
    return CT_OK;
fail:
    ct_model_free(m);
    return st;
}

void ct_model_free(ct_model *m) {
    if (!m) return;
    ct_free(m->ctx, m->dec.block);
    ct_arena_free(&m->arena, m->ctx);
    free(m->acts.layers);
    ct_free(m->ctx, m->grads);
    ct_free(m->ctx, m->params);
    free(m->layers);
    free(m->table);
    free(m);
}

void ct_model_init_weights(ct_model *m, uint64_t seed) {
    ct_rng rng;
    ct_rng_init(&rng, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layer);
    for (int i = 0; i < m->n_table; i++) {
        const ct_param *p = &m->table[i];
        float *w = m->params + p->offset;
        size_t n = p->numel;
        if (p->ndim == 2) {
            bool resid = strstr(p->name, "c_proj.weight") != NULL;
            ct_rng_normal(&rng, w, n, 0.0f, resid ? resid_std : 0.02f);
        } else if (strstr(p->name, "ln_") && strstr(p->name, ".weight")) {
            for (size_t j = 0; j < n; j++) w[j] = 1.0f;
        } else {
            memset(w, 0, n * sizeof *w);
        }
    }
}

const ct_model_config *ct_model_get_config(const ct_model *m) { return &m->cfg; }
int ct_model_num_params(const ct_model *m) { return m->n_table; }
const ct_param *ct_model_param(const ct_model *m, int i) {
    return (i >= 0 && i < m->n_table) ? &m->table[i] : NULL;
}
const ct_param *ct_model_find_param(const ct_model *m, const char *name) {
    for (int i = 0; i < m->n_table; i++)
        if (strcmp(m->table[i].name, name) == 0) return &m->table[i];
    return NULL;
}
size_t ct_model_numel(const ct_model *m) { return m->numel; }
float *ct_model_params(ct_model *m) { return m->params; }
float *ct_model_grads(ct_model *m) { return m->grads; }
void ct_model_zero_grads(ct_model *m) {
    if (m->grads) memset(m->grads, 0, m->numel * sizeof(float));
}

/* ---------------------------------------------------- activation plan */

/* Carves buffers from a base pointer, or only counts bytes when base is NULL.
 * Planning and allocation run the same code, so the plan cannot drift. */
typedef struct carver {
    uint8_t *base;
    size_t used;
} carver;

static float *carve(carver *cv, size_t nfloats) {
    size_t bytes = ct_arena_round(nfloats * sizeof(float));
    float *p = cv->base ? (float *)(cv->base + cv->used) : NULL;
    cv->used += bytes;
    return p;
}

static int logits_chunk_rows(const ct_model_config *c, int N) {
    /* rows per chunk so one chunk of logits stays near 32 MiB (at least 1) */
    size_t per_row = (size_t)c->vocab_size * sizeof(float);
    size_t rows = ((size_t)32 << 20) / per_row;
    if (rows < 1) rows = 1;
    if (rows > (size_t)N) rows = (size_t)N;
    return (int)rows;
}

/* Lays out the activations; acts may be NULL when only counting. Returns the
 * (acts, scratch) byte split through the out-params. */
static void acts_layout(const ct_model_config *c, int B, int T, bool training, carver *cv,
                        model_acts *a, size_t *acts_bytes, size_t *scratch_bytes) {
    size_t N = (size_t)B * T, C = (size_t)c->n_embd, F = (size_t)c->n_ffn;
    size_t NH = (size_t)c->n_head;
    model_acts dummy = {0};
    if (!a) a = &dummy;
    a->encoded = carve(cv, N * C);
    for (int l = 0; l < c->n_layer; l++) {
        layer_acts la;
        la.ln1 = carve(cv, N * C);
        la.ln1_mean = carve(cv, N);
        la.ln1_rstd = carve(cv, N);
        la.qkv = carve(cv, N * 3 * C);
        la.atty = carve(cv, N * C);
        la.lse = carve(cv, (size_t)B * NH * T);
        la.res2 = carve(cv, N * C);
        la.ln2 = carve(cv, N * C);
        la.ln2_mean = carve(cv, N);
        la.ln2_rstd = carve(cv, N);
        la.fch = carve(cv, N * F);
        la.fch_gelu = carve(cv, N * F);
        la.res3 = carve(cv, N * C);
        if (a->layers) a->layers[l] = la;
    }
    a->lnf = carve(cv, N * C);
    a->lnf_mean = carve(cv, N);
    a->lnf_rstd = carve(cv, N);
    a->losses = carve(cv, N);
    *acts_bytes = cv->used;
    a->logits = carve(cv, (size_t)logits_chunk_rows(c, (int)N) * (size_t)c->vocab_size);
    if (training) {
        size_t big = F > 3 * C ? F : 3 * C;
        a->dres = carve(cv, N * C);
        a->dln = carve(cv, N * C);
        a->datty = carve(cv, N * C);
        a->dbig1 = carve(cv, N * big);
        a->dbig2 = carve(cv, N * F);
    }
    *scratch_bytes = cv->used - *acts_bytes;
}

static ct_status check_batch_shape(const ct_model_config *cfg, int B, int T) {
    if (B < 1 || T < 1 || T > cfg->n_ctx)
        return CT_ERR(CT_ERR_ARG, "batch shape B=%d T=%d is invalid: expected B >= 1 and "
                                  "1 <= T <= n_ctx = %d", B, T, cfg->n_ctx);
    return CT_OK;
}

ct_status ct_model_plan_memory(const ct_model_config *cfg, int B, int T, bool training,
                               ct_model_plan *out) {
    ct_status st = ct_model_config_validate(cfg);
    if (st) return st;
    if ((st = check_batch_shape(cfg, B, T))) return st;
    ct_model m = {0};
    m.cfg = *cfg;
    if ((st = model_build_table(&m))) return st;
    free(m.table);
    free(m.layers);
    carver cv = {0};
    memset(out, 0, sizeof *out);
    acts_layout(cfg, B, T, training, &cv, NULL, &out->acts, &out->scratch);
    out->params = m.numel * sizeof(float);
    out->grads = training ? out->params : 0;
    out->total = out->params + out->grads + out->acts + out->scratch;
    return CT_OK;
}

ct_status ct_model_reserve(ct_model *m, int B, int T, bool training) {
    if (m->B) {
        if (B == m->B && T == m->T && (!training || m->training)) return CT_OK;
        return CT_ERR(CT_ERR_ARG, "model already reserved for B=%d T=%d%s; asked for B=%d T=%d%s",
                      m->B, m->T, m->training ? " (training)" : "", B, T,
                      training ? " (training)" : "");
    }
    ct_status st = check_batch_shape(&m->cfg, B, T);
    if (st) return st;
    carver cv = {0};
    size_t acts_b, scratch_b;
    acts_layout(&m->cfg, B, T, training, &cv, NULL, &acts_b, &scratch_b);
    st = ct_arena_init(&m->arena, m->ctx, cv.used, CT_TAG_ACTS);
    if (st) return st;
    m->acts.layers = calloc((size_t)m->cfg.n_layer, sizeof *m->acts.layers);
    if (!m->acts.layers) {
        ct_arena_free(&m->arena, m->ctx);
        return CT_ERR(CT_ERR_OOM, "out of memory for activation pointers");
    }
    cv.base = ct_arena_alloc(&m->arena, cv.used);
    cv.used = 0;
    acts_layout(&m->cfg, B, T, training, &cv, &m->acts, &acts_b, &scratch_b);
    if (training) {
        m->grads = ct_alloc(m->ctx, m->numel * sizeof(float), CT_TAG_GRADS);
        if (!m->grads) return ct_last_status();
    }
    m->B = B;
    m->T = T;
    m->chunk = logits_chunk_rows(&m->cfg, B * T);
    m->training = training;
    return CT_OK;
}

/* ----------------------------------------------------- forward/backward */

static ct_status check_tokens(const ct_model *m, const int32_t *tok, size_t n, const char *what) {
    int V = m->cfg.vocab_size;
    for (size_t i = 0; i < n; i++) {
        if (tok[i] < 0 || tok[i] >= V)
            return CT_ERR(CT_ERR_ARG, "%s token %d at position %zu is out of range: expected 0..%d "
                          "(model vocab_size %d)", what, tok[i], i, V - 1, V);
    }
    return CT_OK;
}

static ct_status check_shape(const ct_model *m, int B, int T, bool training) {
    if (!m->B) return CT_ERR(CT_ERR_ARG, "ct_model_reserve was not called");
    if (training && !m->training)
        return CT_ERR(CT_ERR_ARG, "model was reserved for inference, not training");
    if (B < 1 || T < 1 || T > m->cfg.n_ctx || (size_t)B * T > (size_t)m->B * m->T)
        return CT_ERR(CT_ERR_ARG, "batch B=%d T=%d does not fit the reserved B=%d T=%d", B, T,
                      m->B, m->T);
    return CT_OK;
}

/* Embedding, blocks and final norm; leaves the normalised rows in acts.lnf. */
static void forward_body(ct_model *m, const int32_t *inputs, int B, int T) {
    const ct_kernels *k = m->k;
    const ct_model_config *c = &m->cfg;
    int N = B * T, C = c->n_embd, F = c->n_ffn, NH = c->n_head;
    model_acts *a = &m->acts;
    k->encoder_forward(a->encoded, inputs, model_p(m, m->wte), model_p(m, m->wpe), B, T, C, 0);
    const float *res = a->encoded;
    for (int l = 0; l < c->n_layer; l++) {
        const layer_idx *w = &m->layers[l];
        layer_acts *la = &a->layers[l];
        k->layernorm_forward(la->ln1, la->ln1_mean, la->ln1_rstd, res, model_p(m, w->ln1_w),
                             model_p(m, w->ln1_b), N, C, c->norm_eps);
        k->matmul_forward(la->qkv, la->ln1, model_p(m, w->qkv_w), model_p(m, w->qkv_b), N, C,
                          3 * C);
        k->attention_forward(la->atty, la->lse, la->qkv, B, T, C, NH);
        k->matmul_forward(la->res2, la->atty, model_p(m, w->proj_w), model_p(m, w->proj_b), N, C,
                          C);
        k->residual_forward(la->res2, la->res2, res, (size_t)N * C);
        k->layernorm_forward(la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, model_p(m, w->ln2_w),
                             model_p(m, w->ln2_b), N, C, c->norm_eps);
        k->matmul_forward(la->fch, la->ln2, model_p(m, w->fc_w), model_p(m, w->fc_b), N, C, F);
        k->gelu_forward(la->fch_gelu, la->fch, (size_t)N * F);
        k->matmul_forward(la->res3, la->fch_gelu, model_p(m, w->fcproj_w),
                          model_p(m, w->fcproj_b), N, F, C);
        k->residual_forward(la->res3, la->res3, la->res2, (size_t)N * C);
        res = la->res3;
    }
    k->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, res, model_p(m, m->lnf_w),
                         model_p(m, m->lnf_b), N, C, c->norm_eps);
}

/* The vocabulary projection and cross-entropy, chunked over rows. When
 * training, the head's backward runs in the same pass: dlogits overwrite the
 * chunk's logits, dlnf lands in acts.dln and the head weight's gradient is
 * accumulated. logits_out(N,V), when given, receives the logits. */
static double head_forward(ct_model *m, const int32_t *targets, int N, bool training,
                           float dloss, float *logits_out) {
    const ct_kernels *k = m->k;
    int C = m->cfg.n_embd, V = m->cfg.vocab_size;
    model_acts *a = &m->acts;
    const float *head = model_p(m, m->head_w);
    if (training) memset(a->dln, 0, (size_t)N * C * sizeof(float));
    double sum = 0.0;
    for (int r0 = 0; r0 < N; r0 += m->chunk) {
        int rows = N - r0 < m->chunk ? N - r0 : m->chunk;
        const float *x = a->lnf + (size_t)r0 * C;
        k->matmul_forward(a->logits, x, head, NULL, rows, C, V);
        if (logits_out) memcpy(logits_out + (size_t)r0 * V, a->logits, (size_t)rows * V * 4);
        if (!targets) continue;
        k->crossentropy_forward(a->losses + r0, training ? a->logits : NULL, a->logits,
                                targets + r0, rows, V, dloss);
        for (int i = 0; i < rows; i++) sum += a->losses[r0 + i];
        if (training)
            k->matmul_backward(a->dln + (size_t)r0 * C, model_g(m, m->head_w), NULL, a->logits, x,
                               head, rows, C, V);
    }
    return sum / N;
}

static void backward_body(ct_model *m, const int32_t *inputs, int B, int T) {
    const ct_kernels *k = m->k;
    const ct_model_config *c = &m->cfg;
    int N = B * T, C = c->n_embd, F = c->n_ffn, NH = c->n_head, L = c->n_layer;
    size_t NC = (size_t)N * C, NF = (size_t)N * F;
    model_acts *a = &m->acts;
    /* final norm: dlnf sits in dln (written by the fused head) */
    memset(a->dres, 0, NC * sizeof(float));
    k->layernorm_backward(a->dres, model_g(m, m->lnf_w), model_g(m, m->lnf_b), a->dln,
                          a->layers[L - 1].res3, model_p(m, m->lnf_w), a->lnf_mean, a->lnf_rstd,
                          N, C);
    for (int l = L - 1; l >= 0; l--) {
        const layer_idx *w = &m->layers[l];
        const layer_acts *la = &a->layers[l];
        const float *res_in = l == 0 ? a->encoded : a->layers[l - 1].res3;
        /* res3 = res2 + c_proj(gelu(c_fc(ln2(res2)))): dres passes through */
        memset(a->dbig1, 0, NF * sizeof(float));
        k->matmul_backward(a->dbig1, model_g(m, w->fcproj_w), model_g(m, w->fcproj_b), a->dres,
                           la->fch_gelu, model_p(m, w->fcproj_w), N, F, C);
        memset(a->dbig2, 0, NF * sizeof(float));
        k->gelu_backward(a->dbig2, la->fch, a->dbig1, NF);
        memset(a->dln, 0, NC * sizeof(float));
        k->matmul_backward(a->dln, model_g(m, w->fc_w), model_g(m, w->fc_b), a->dbig2, la->ln2,
                           model_p(m, w->fc_w), N, C, F);
        k->layernorm_backward(a->dres, model_g(m, w->ln2_w), model_g(m, w->ln2_b), a->dln,
                              la->res2, model_p(m, w->ln2_w), la->ln2_mean, la->ln2_rstd, N, C);
        /* res2 = res_in + c_proj(attn(c_attn(ln1(res_in)))) */
        memset(a->datty, 0, NC * sizeof(float));
        k->matmul_backward(a->datty, model_g(m, w->proj_w), model_g(m, w->proj_b), a->dres,
                           la->atty, model_p(m, w->proj_w), N, C, C);
        memset(a->dbig1, 0, NC * 3 * sizeof(float));
        k->attention_backward(a->dbig1, a->datty, la->qkv, la->atty, la->lse, B, T, C, NH);
        memset(a->dln, 0, NC * sizeof(float));
        k->matmul_backward(a->dln, model_g(m, w->qkv_w), model_g(m, w->qkv_b), a->dbig1, la->ln1,
                           model_p(m, w->qkv_w), N, C, 3 * C);
        k->layernorm_backward(a->dres, model_g(m, w->ln1_w), model_g(m, w->ln1_b), a->dln, res_in,
                              model_p(m, w->ln1_w), la->ln1_mean, la->ln1_rstd, N, C);
    }
    k->encoder_backward(model_g(m, m->wte), model_g(m, m->wpe), a->dres, inputs, B, T, C);
}

ct_status ct_model_forward(ct_model *m, const int32_t *inputs, const int32_t *targets, int B,
                           int T, float *mean_loss) {
    ct_status st;
    size_t N = (size_t)B * T;
    if ((st = check_shape(m, B, T, false))) return st;
    if ((st = check_tokens(m, inputs, N, "input"))) return st;
    if ((st = check_tokens(m, targets, N, "target"))) return st;
    forward_body(m, inputs, B, T);
    *mean_loss = (float)head_forward(m, targets, (int)N, false, 0.0f, NULL);
    return CT_OK;
}

ct_status ct_model_forward_backward(ct_model *m, const int32_t *inputs, const int32_t *targets,
                                    int B, int T, float grad_weight, float *mean_loss) {
    ct_status st;
    size_t N = (size_t)B * T;
    if ((st = check_shape(m, B, T, true))) return st;
    if ((st = check_tokens(m, inputs, N, "input"))) return st;
    if ((st = check_tokens(m, targets, N, "target"))) return st;
    forward_body(m, inputs, B, T);
    *mean_loss = (float)head_forward(m, targets, (int)N, true, grad_weight / (float)N, NULL);
    backward_body(m, inputs, B, T);
    return CT_OK;
}

ct_status ct_model_logits(ct_model *m, const int32_t *inputs, int B, int T, float *logits) {
    ct_status st;
    if ((st = check_shape(m, B, T, false))) return st;
    if ((st = check_tokens(m, inputs, (size_t)B * T, "input"))) return st;
    forward_body(m, inputs, B, T);
    head_forward(m, NULL, B * T, false, 0.0f, logits);
    return CT_OK;
}
