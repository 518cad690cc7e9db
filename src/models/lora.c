/*
 * LoRA adapters on the transformer family (PEFT's semantics, see model.h):
 * the module kinds of each arch and where they sit in the fused GEMMs of a
 * block, target matching, the adapter's parameter table and flat buffers, its
 * initialisation, the trainable view, the adapter forward and backward that
 * model_train.c calls right after each base GEMM, and merging into the base.
 * modules_to_save: trainable copies of embed_tokens and lm_head at the end of
 * the adapter's table, filled from the base when attached; merging writes
 * them into the base, untying a tied head.
 * Leaves out: PEFT files (lora_peft.c) and the base GEMMs themselves (the
 * frozen base runs through the ordinary block code with no weight gradients).
 * The strided scale-adds (an adapter owns a column range of a fused GEMM's
 * output), the dropout and the GEMMs all go through the backend like every
 * other model op; merging stages the adapter and the base rows through host
 * memory (a one-off, in double, as before).
 * Adapters on one fused GEMM (LLaMA's q, k, v; gate, up) read the same input
 * unless dropout draws each its own mask: then their A side runs as one GEMM
 * on their A's stacked by small copies (the flat layout stays), forward and
 * backward; their B sides stay one GEMM each (different output columns).
 */
#include "models/model_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ module kinds */

static const char *const llama_paths[] = {"self_attn.q_proj", "self_attn.k_proj",
                                          "self_attn.v_proj", "self_attn.o_proj",
                                          "mlp.gate_proj",    "mlp.up_proj",
                                          "mlp.down_proj"};
static const char *const gpt2_paths[] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                         "mlp.c_proj"};

int ct_lora_num_kinds(const ct_model_config *c) {
    return c->arch == CT_ARCH_LLAMA ? 7 : 4;
}

const char *ct_lora_kind_path(const ct_model_config *c, int k) {
    if (k < 0 || k >= ct_lora_num_kinds(c)) return NULL;
    return c->arch == CT_ARCH_LLAMA ? llama_paths[k] : gpt2_paths[k];
}

bool lora_mod_of(const ct_model_config *c, int k, lora_mod *out) {
    const char *path = ct_lora_kind_path(c, k);
    if (!path) return false;
    int C = c->n_embd, F = c->n_ffn, HS = ct_model_head_dim(c), KC = c->n_kv_head * HS;
    int NQ = c->n_head * HS;
    lora_mod md = {path, 0, 0, 0, 0};
    if (c->arch == CT_ARCH_LLAMA) {
        static const int gemm[7] = {LIN_QKV, LIN_QKV, LIN_QKV, LIN_PROJ,
                                    LIN_FC, LIN_FC, LIN_FCPROJ};
        int col0[7] = {0, NQ, NQ + KC, 0, 0, F, 0};
        int outw[7] = {NQ, KC, KC, C, F, F, C};
        int inw[7] = {C, C, C, NQ, C, C, F};
        md.gemm = gemm[k];
        md.col0 = col0[k];
        md.out = outw[k];
        md.in = inw[k];
    } else {
        static const int gemm[4] = {LIN_QKV, LIN_PROJ, LIN_FC,
                                    LIN_FCPROJ};
        int outw[4] = {3 * C, C, F, C};
        int inw[4] = {C, C, C, F};
        md.gemm = gemm[k];
        md.out = outw[k];
        md.in = inw[k];
    }
    *out = md;
    return true;
}

/* PEFT's rule for a string target: the module's path equals it or ends with
 * "." + target. Paths are compared below the layer, the part every layer
 * shares. */
static bool target_matches(const char *path, const char *t, size_t tn) {
    size_t pn = strlen(path);
    if (tn == 0 || tn > pn) return false;
    if (memcmp(path + pn - tn, t, tn) != 0) return false;
    return tn == pn || path[pn - tn - 1] == '.';
}

ct_status ct_lora_targets_parse(const ct_model_config *c, const char *list, const char *key,
                                uint32_t *mask) {
    uint32_t m = 0;
    int nk = ct_lora_num_kinds(c);
    const char *p = list;
    bool any = false;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t n = (size_t)(e - p);
        while (n && p[n - 1] == ' ') n--;
        if (n) {
            any = true;
            uint32_t hit = 0;
            for (int k = 0; k < nk; k++)
                if (target_matches(ct_lora_kind_path(c, k), p, n)) hit |= 1u << k;
            if (!hit) {
                char mods[256] = "";
                for (int k = 0; k < nk; k++) {
                    if (k) strcat(mods, ", ");
                    strcat(mods, ct_lora_kind_path(c, k));
                }
                return CT_ERR(CT_ERR_ARG, "%s: '%.*s' matches no module of this %s model: "
                              "expected one of %s (or a suffix after a dot)", key, (int)n, p,
                              c->arch == CT_ARCH_LLAMA ? "llama" : "gpt2", mods);
            }
            m |= hit;
        }
        p = e;
    }
    if (!any)
        return CT_ERR(CT_ERR_ARG, "%s is empty: expected module names such as %s", key,
                      c->arch == CT_ARCH_LLAMA ? "q_proj,v_proj" : "c_attn");
    *mask = m;
    return CT_OK;
}

void ct_lora_targets_format(const ct_model_config *c, uint32_t mask, char *buf, size_t cap) {
    int nk = ct_lora_num_kinds(c);
    size_t n = 0;
    uint32_t done = 0;
    buf[0] = '\0';
    for (int k = 0; k < nk; k++) {
        if (!(mask & (1u << k)) || (done & (1u << k))) continue;
        const char *path = ct_lora_kind_path(c, k);
        const char *leaf = strrchr(path, '.');
        leaf = leaf ? leaf + 1 : path;
        /* the leaf alone when every kind it selects is targeted */
        uint32_t sel = 0;
        for (int j = 0; j < nk; j++)
            if (target_matches(ct_lora_kind_path(c, j), leaf, strlen(leaf))) sel |= 1u << j;
        const char *name = (sel & mask) == sel ? leaf : path;
        if ((sel & mask) == sel) done |= sel;
        int w = snprintf(buf + n, cap - n, "%s%s", n ? "," : "", name);
        if (w < 0 || (size_t)w >= cap - n) return;
        n += (size_t)w;
    }
}

ct_status ct_lora_save_modules_parse(const ct_model_config *c, const char *list,
                                     const char *key, uint32_t *mask) {
    uint32_t m = 0;
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t n = (size_t)(e - p);
        while (n && p[n - 1] == ' ') n--;
        if (n) {
            if (c->arch != CT_ARCH_LLAMA)
                return CT_ERR(CT_ERR_ARG, "%s = %s: modules_to_save are built for the llama "
                              "layout's families; GPT-2's head is tied to wte in every Hugging "
                              "Face config (train the whole model instead)", key, list);
            if ((n == 12 && !memcmp(p, "embed_tokens", 12)) ||
                (n == 18 && !memcmp(p, "model.embed_tokens", 18)))
                m |= CT_LORA_SAVE_EMBED;
            else if (n == 7 && !memcmp(p, "lm_head", 7))
                m |= CT_LORA_SAVE_HEAD;
            else
                return CT_ERR(CT_ERR_ARG, "%s: '%.*s' is not a module ctrain trains in full: "
                              "expected embed_tokens and/or lm_head", key, (int)n, p);
        }
        p = e;
    }
    *mask = m;
    return CT_OK;
}

ct_status ct_lora_opts_validate(const ct_model_config *c, const ct_lora_opts *o) {
    if (o->r < 1 || o->r > 65536)
        return CT_ERR(CT_ERR_ARG, "lora.r = %d: expected a rank from 1 to 65536", o->r);
    if (!(o->alpha > 0) || !isfinite(o->alpha))
        return CT_ERR(CT_ERR_ARG, "lora.alpha = %g: expected a positive number",
                      (double)o->alpha);
    if (!(o->dropout >= 0 && o->dropout < 1))
        return CT_ERR(CT_ERR_ARG, "lora.dropout = %g: expected 0 <= p < 1", (double)o->dropout);
    uint32_t all = (1u << ct_lora_num_kinds(c)) - 1;
    if (!o->targets || (o->targets & ~all))
        return CT_ERR(CT_ERR_ARG, "lora.targets: mask 0x%x names no module of this model "
                      "(valid bits 0x%x)", (unsigned)o->targets, (unsigned)all);
    if (o->save_modules & ~(uint32_t)(CT_LORA_SAVE_EMBED | CT_LORA_SAVE_HEAD))
        return CT_ERR(CT_ERR_ARG, "lora.modules_to_save: mask 0x%x has unknown bits",
                      (unsigned)o->save_modules);
    if (o->save_modules && c->arch != CT_ARCH_LLAMA)
        return CT_ERR(CT_ERR_ARG, "lora.modules_to_save: built for the llama layout's families "
                      "only (GPT-2's head is always tied to wte)");
    return CT_OK;
}

/* Number of trainable copies modules_to_save asks for (each V x C). */
static int save_count(const ct_lora_opts *lo) {
    return !!(lo->save_modules & CT_LORA_SAVE_EMBED) + !!(lo->save_modules & CT_LORA_SAVE_HEAD);
}

size_t lora_numel(const ct_model_config *c, const ct_lora_opts *lo) {
    if (!lo || lo->r <= 0) return 0;
    size_t per_layer = 0;
    for (int k = 0; k < ct_lora_num_kinds(c); k++) {
        lora_mod md;
        if (!(lo->targets & (1u << k)) || !lora_mod_of(c, k, &md)) continue;
        per_layer += (size_t)lo->r * ((size_t)md.in + (size_t)md.out);
    }
    return per_layer * (size_t)c->n_layer +
           (size_t)save_count(lo) * (size_t)c->vocab_size * (size_t)c->n_embd;
}

int lora_group_max(const ct_model_config *c, const ct_lora_opts *lo, int *in) {
    int most = 0, cnt[LIN_FCPROJ + 1] = {0}, gin[LIN_FCPROJ + 1] = {0};
    *in = 0;
    if (!lo || lo->r <= 0) return 0;
    for (int k = 0; k < ct_lora_num_kinds(c); k++) {
        lora_mod md;
        if (!(lo->targets & (1u << k)) || !lora_mod_of(c, k, &md)) continue;
        cnt[md.gemm]++;
        gin[md.gemm] = md.in; /* the adapters of one GEMM read its input */
    }
    for (int g = 0; g <= LIN_FCPROJ; g++) {
        if (cnt[g] > most) most = cnt[g];
        if (cnt[g] >= 2 && gin[g] > *in) *in = gin[g];
    }
    return most;
}

/* ------------------------------------------------------------ attach */

static void lora_free(ct_model *m) {
    if (!m->lora) return;
    model_buf_free(m, m->lora->grads);
    model_buf_free(m, m->lora->params);
    free(m->lora->table);
    free(m->lora);
    m->lora = NULL;
}

void model_lora_free(ct_model *m) { lora_free(m); }

/* Fill the modules_to_save copies from the base's embedding and head (fp32,
 * or a bf16 base widened). */
static void lora_copies_from_base(ct_model *m) {
    model_lora *a = m->lora;
    int idx[2] = {a->save_embed, a->save_head}, base[2] = {m->wte, m->head_w};
    for (int k = 0; k < 2; k++) {
        if (idx[k] < 0) continue;
        const ct_param *p = &a->table[idx[k]];
        float *dst = a->params + p->offset;
        if (m->params16)
            m->be->i->bf16_to_f32(m->be, dst, m->params16 + m->table[base[k]].offset, p->numel);
        else
            m->be->i->copy(m->be, dst, m->params + m->table[base[k]].offset,
                           p->numel * sizeof(float));
    }
}

const float *model_embed_w(ct_model *m) {
    if (m->lora && m->lora->save_embed >= 0)
        return m->lora->params + m->lora->table[m->lora->save_embed].offset;
    return model_p(m, m->wte);
}

float *model_embed_g(ct_model *m) {
    if (m->lora && m->lora->save_embed >= 0 && m->lora->grads)
        return m->lora->grads + m->lora->table[m->lora->save_embed].offset;
    return NULL;
}

const float *model_head_copy(ct_model *m) {
    if (m->lora && m->lora->save_head >= 0)
        return m->lora->params + m->lora->table[m->lora->save_head].offset;
    return NULL;
}

float *model_head_copy_g(ct_model *m) {
    if (m->lora && m->lora->save_head >= 0 && m->lora->grads)
        return m->lora->grads + m->lora->table[m->lora->save_head].offset;
    return NULL;
}

static void lora_add(model_lora *a, const char *name, int64_t d0, int64_t d1) {
    ct_param *p = &a->table[a->n_table++];
    size_t n = strlen(name); /* at most 49 bytes for n_layer <= 4096 */
    if (n >= sizeof p->name) n = sizeof p->name - 1;
    memcpy(p->name, name, n);
    p->name[n] = '\0';
    p->ndim = 2;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->numel = (size_t)d0 * (size_t)d1;
    p->offset = a->numel;
    p->decay = true; /* torch's AdamW decays both factors; they are matrices */
    p->hf_conv1d = false;
    a->numel += p->numel;
}

ct_status ct_model_lora_attach(ct_model *m, const ct_lora_opts *o) {
    const ct_model_config *c = &m->cfg;
    if (m->lora) return CT_ERR(CT_ERR_ARG, "LoRA adapters are already attached to this model");
    if (m->B) return CT_ERR(CT_ERR_ARG, "LoRA adapters are attached before ct_model_reserve");
    ct_status st = ct_lora_opts_validate(c, o);
    if (st) return st;
    if (o->base_bf16 && m->opts.precision == CT_PREC_FP16)
        return CT_ERR(CT_ERR_ARG, "lora.base_dtype = bf16 with train.precision = fp16: the fp16 "
                      "GEMMs read fp16 weights; keep the base fp32 (lora.base_dtype=fp32)");
    model_lora *a = calloc(1, sizeof *a);
    if (!a) return CT_ERR(CT_ERR_OOM, "out of memory for the LoRA adapters");
    a->o = *o;
    a->scale = o->alpha / (float)o->r;
    a->batch = true;
    for (int k = 0; k < ct_lora_num_kinds(c); k++) {
        if (!(o->targets & (1u << k))) continue;
        a->kinds[a->nmod] = k;
        lora_mod_of(c, k, &a->mods[a->nmod]);
        const lora_mod *md = &a->mods[a->nmod];
        if (md->out > a->max_out) a->max_out = md->out;
        if (md->in > a->max_in) a->max_in = md->in;
        a->nmod++;
    }
    int L = c->n_layer;
    a->table = calloc((size_t)(2 * L * a->nmod + 2), sizeof *a->table);
    if (!a->table) {
        free(a);
        return CT_ERR(CT_ERR_OOM, "out of memory for the LoRA parameter table");
    }
    const char *prefix = c->arch == CT_ARCH_LLAMA ? "model.layers" : "transformer.h";
    char name[96];
    for (int l = 0; l < L; l++) {
        for (int s = 0; s < a->nmod; s++) {
            const lora_mod *md = &a->mods[s];
            snprintf(name, sizeof name, "%s.%d.%s.lora_A.weight", prefix, l, md->path);
            lora_add(a, name, o->r, md->in);
            snprintf(name, sizeof name, "%s.%d.%s.lora_B.weight", prefix, l, md->path);
            lora_add(a, name, md->out, o->r);
        }
    }
    /* modules_to_save: the copies under the base's own names (PEFT saves them
     * as base_model.model.<module>.weight) */
    a->save_embed = a->save_head = -1;
    if (o->save_modules & CT_LORA_SAVE_EMBED) {
        a->save_embed = a->n_table;
        lora_add(a, "model.embed_tokens.weight", c->vocab_size, c->n_embd);
    }
    if (o->save_modules & CT_LORA_SAVE_HEAD) {
        a->save_head = a->n_table;
        lora_add(a, "lm_head.weight", c->vocab_size, c->n_embd);
    }
    a->params = model_buf_alloc(m, a->numel * sizeof(float), CT_TAG_PARAMS);
    if (!a->params) {
        st = ct_last_status();
        free(a->table);
        free(a);
        return st;
    }
    m->lora = a;
    /* the copies start as the base's matrices (before a bf16 base is rounded) */
    lora_copies_from_base(m);
    if (o->base_bf16 && !m->params16 && (st = weights_to_bf16(m))) {
        lora_free(m);
        return st;
    }
    return CT_OK;
}

/* kaiming_uniform_(a=sqrt(5)) on A (r, in): bound = 1/sqrt(in), drawn in order */
typedef struct lora_init {
    ct_rng rng;
    float bound;
} lora_init;

static void lora_fill_a(float *w, size_t n, void *user) {
    lora_init *li = user;
    for (size_t j = 0; j < n; j++) w[j] = (2.0f * ct_rng_float(&li->rng) - 1.0f) * li->bound;
}

ct_status ct_model_lora_init_weights(ct_model *m, uint64_t seed) {
    model_lora *a = m->lora;
    if (!a) return CT_OK;
    lora_init li;
    ct_rng_init(&li.rng, seed);
    int pairs = 2 * m->cfg.n_layer * a->nmod; /* the modules_to_save copies follow */
    for (int i = 0; i < pairs; i++) {
        const ct_param *p = &a->table[i];
        float *w = a->params + p->offset;
        if (i % 2 == 0) {
            li.bound = 1.0f / sqrtf((float)p->shape[1]);
            ct_status st = model_stage_fill(m, w, p->numel, lora_fill_a, &li);
            if (st) return st;
        } else {
            m->be->i->memset(m->be, w, 0, p->numel * sizeof *w);
        }
    }
    return CT_OK;
}

const ct_lora_opts *ct_model_lora(const ct_model *m) { return m->lora ? &m->lora->o : NULL; }

/* ------------------------------------------------------- trainable view */

int ct_model_num_trainable(const ct_model *m) {
    return m->lora ? m->lora->n_table : m->n_table;
}

const ct_param *ct_model_trainable_param(const ct_model *m, int i) {
    if (!m->lora) return ct_model_param(m, i);
    return (i >= 0 && i < m->lora->n_table) ? &m->lora->table[i] : NULL;
}

size_t ct_model_trainable_numel(const ct_model *m) {
    return m->lora ? m->lora->numel : m->numel;
}

float *ct_model_trainable_params(ct_model *m) {
    return m->lora ? m->lora->params : m->params;
}

float *ct_model_trainable_grads(ct_model *m) { return m->lora ? m->lora->grads : m->grads; }

/* ------------------------------------------------------ forward, backward */

/* The dropout key of adapter unit u in the current training pass (see
 * ct_dropout_keep): the model's pass key (ct_model_set_dropout_key's, or its
 * call counter's) mixed with the adapters' seed and the unit, so the backward
 * (and a recomputing re-run) draws the same mask again without storing it,
 * and a resumed run the unbroken one's. */
static uint64_t lora_key(const ct_model *m, uint64_t unit) {
    return m->lora->o.seed * 0x9E3779B97F4A7C15ull ^ m->drop_key * 0xBF58476D1CE4E5B9ull ^
           unit * 0x94D049BB133111EBull;
}

/* The global index of element 0 of an adapter input (N, in): rows count from
 * the batch's first global row (ct_model_set_dropout_key's row0), so the
 * micro-batches and ranks of a global batch draw its masks. */
static uint64_t lora_offset(const ct_model *m, int in) {
    return (uint64_t)m->drop_row0 * (uint64_t)m->drop_T * (uint64_t)in;
}

/* The adapter input of unit u: x itself, or dropout(x) written to lora_xd. */
static const float *lora_input(ct_model *m, uint64_t unit, const float *x, int in, int N) {
    model_lora *a = m->lora;
    if (!(a->dropping && a->o.dropout > 0)) return x;
    m->be->i->dropout_forward(m->be, m->acts.lora_xd, x, (size_t)N * in, a->o.dropout,
                              lora_key(m, unit), lora_offset(m, in));
    return m->acts.lora_xd;
}

bool model_lora_on(const ct_model *m, int gemm) {
    const model_lora *a = m->lora;
    if (!a) return false;
    for (int s = 0; s < a->nmod; s++)
        if (a->mods[s].gemm == gemm) return true;
    return false;
}

void model_lora_set_batch(ct_model *m, bool on) {
    if (m->lora) m->lora->batch = on;
}

/* The slots of the adapters on `gemm` (ascending) and their count, when two
 * or more of them read the same input in this pass, so that their A side
 * runs as one GEMM on the stacked A's; 0 otherwise: one adapter, or dropout
 * drawing each its own mask (the per-module path, as before batching). */
static int lora_group(const ct_model *m, int gemm, int slots[8]) {
    const model_lora *a = m->lora;
    if (!a->batch || !m->acts.lora_h_all || (a->dropping && a->o.dropout > 0)) return 0;
    int n = 0;
    for (int s = 0; s < a->nmod; s++)
        if (a->mods[s].gemm == gemm) slots[n++] = s;
    return n >= 2 ? n : 0;
}

/* A_all (n r, in) = [A_1; ...; A_n] of the group's adapters in layer l: n
 * small device copies (each A is r x in), so the flat parameter layout, and
 * with it checkpoints, PEFT files and the optimizer, stays as it is. */
static const float *lora_stack_a(ct_model *m, int l, const int *slots, int n) {
    model_lora *a = m->lora;
    size_t na = (size_t)a->o.r * (size_t)a->mods[slots[0]].in;
    float *all = m->acts.lora_a_all;
    for (int i = 0; i < n; i++) {
        size_t unit = (size_t)l * a->nmod + slots[i];
        m->be->i->copy(m->be, all + i * na, a->params + a->table[2 * unit].offset,
                       na * sizeof(float));
    }
    return all;
}

/* B's side of adapter slot s of layer l given h = xin A^T (N, r), kept in
 * acts.lora_h: out[:, col0:col0+out] += scale * h B^T. */
static void lora_b_forward(ct_model *m, int l, int s, float *out, int OUTW, int N) {
    model_lora *a = m->lora;
    ct_backend *be = m->be;
    const lora_mod *md = &a->mods[s];
    size_t unit = (size_t)l * a->nmod + s;
    const float *Bw = a->params + a->table[2 * unit + 1].offset;
    const float *h = m->acts.lora_h + unit * (size_t)N * a->o.r;
    float *u = m->acts.lora_tmp;
    be->i->matmul_forward(be, u, h, Bw, NULL, N, a->o.r, md->out);
    be->i->scale_add(be, out + md->col0, OUTW, u, md->out, N, md->out, a->scale, true);
}

void model_lora_forward(ct_model *m, int l, int gemm, float *out, int OUTW, const float *x,
                        int N) {
    model_lora *a = m->lora;
    if (!a) return;
    ct_backend *be = m->be;
    const ct_backend_i *k = be->i;
    int r = a->o.r, slots[8];
    int n = lora_group(m, gemm, slots);
    if (n) {
        /* one GEMM for the group's A side: h_all (N, n r) = x [A_1; ...; A_n]^T,
         * then its columns split into each adapter's h (exact copies) */
        int in = a->mods[slots[0]].in, nr = n * r;
        const float *A_all = lora_stack_a(m, l, slots, n);
        float *h_all = m->acts.lora_h_all;
        k->matmul_forward(be, h_all, x, A_all, NULL, N, in, nr);
        for (int i = 0; i < n; i++) {
            size_t unit = (size_t)l * a->nmod + slots[i];
            k->scale_add(be, m->acts.lora_h + unit * (size_t)N * r, r, h_all + i * r, nr, N, r,
                         1.0f, false);
            lora_b_forward(m, l, slots[i], out, OUTW, N);
        }
        return;
    }
    for (int s = 0; s < a->nmod; s++) {
        const lora_mod *md = &a->mods[s];
        if (md->gemm != gemm) continue;
        size_t unit = (size_t)l * a->nmod + s;
        const float *A = a->params + a->table[2 * unit].offset;
        float *h = m->acts.lora_h + unit * (size_t)N * r;
        const float *xin = lora_input(m, unit, x, md->in, N);
        k->matmul_forward(be, h, xin, A, NULL, N, md->in, r);
        lora_b_forward(m, l, s, out, OUTW, N);
    }
}

/* B's side of adapter slot s of layer l, backward: dB += g^T h and
 * acts.lora_dh (N, r) = g B, where g = scale * dout[:, col0:col0+out]. */
static void lora_b_backward(ct_model *m, int l, int s, const float *dout, int OUTW, int N) {
    model_lora *a = m->lora;
    ct_backend *be = m->be;
    const ct_backend_i *k = be->i;
    const lora_mod *md = &a->mods[s];
    int r = a->o.r;
    size_t unit = (size_t)l * a->nmod + s;
    const ct_param *pb = &a->table[2 * unit + 1];
    const float *Bw = a->params + pb->offset;
    float *dB = a->grads + pb->offset;
    const float *h = m->acts.lora_h + unit * (size_t)N * r;
    float *g = m->acts.lora_tmp, *dh = m->acts.lora_dh;
    k->scale_add(be, g, md->out, dout + md->col0, OUTW, N, md->out, a->scale, false);
    /* u = h B^T: dB += g^T h, dh = g B */
    k->memset(be, dh, 0, (size_t)N * r * sizeof *dh);
    k->matmul_backward(be, dh, dB, NULL, g, h, Bw, N, r, md->out);
}

void model_lora_backward(ct_model *m, int l, int gemm, float *dx, const float *dout, int OUTW,
                         const float *x, int N) {
    model_lora *a = m->lora;
    if (!a) return;
    ct_backend *be = m->be;
    const ct_backend_i *k = be->i;
    int r = a->o.r, slots[8];
    int n = lora_group(m, gemm, slots);
    if (n) {
        /* each adapter's dh into its columns of dh_all (N, n r), then one GEMM
         * for the group's A side: dx += dh_all A_all, dA_all = dh_all^T x
         * (K = n r), added into each adapter's dA */
        int in = a->mods[slots[0]].in, nr = n * r;
        float *dh_all = m->acts.lora_h_all, *dA_all = m->acts.lora_da_all;
        for (int i = 0; i < n; i++) {
            lora_b_backward(m, l, slots[i], dout, OUTW, N);
            k->scale_add(be, dh_all + i * r, nr, m->acts.lora_dh, r, N, r, 1.0f, false);
        }
        const float *A_all = lora_stack_a(m, l, slots, n);
        size_t na = (size_t)r * (size_t)in;
        k->memset(be, dA_all, 0, (size_t)n * na * sizeof *dA_all);
        k->matmul_backward(be, dx, dA_all, NULL, dh_all, x, A_all, N, in, nr);
        for (int i = 0; i < n; i++) {
            size_t unit = (size_t)l * a->nmod + slots[i];
            k->scale_add(be, a->grads + a->table[2 * unit].offset, in, dA_all + i * na, in, r,
                         in, 1.0f, true);
        }
        return;
    }
    bool drop = a->dropping && a->o.dropout > 0;
    for (int s = 0; s < a->nmod; s++) {
        const lora_mod *md = &a->mods[s];
        if (md->gemm != gemm) continue;
        size_t unit = (size_t)l * a->nmod + s;
        const ct_param *pa = &a->table[2 * unit];
        const float *A = a->params + pa->offset;
        float *dA = a->grads + pa->offset, *dh = m->acts.lora_dh;
        lora_b_backward(m, l, s, dout, OUTW, N);
        /* h = xin A^T: dA += dh^T xin, dxin = dh A */
        const float *xin = lora_input(m, unit, x, md->in, N);
        if (!drop) {
            k->matmul_backward(be, dx, dA, NULL, dh, xin, A, N, md->in, r);
            continue;
        }
        k->matmul_backward(be, NULL, dA, NULL, dh, xin, A, N, md->in, r);
        float *dxd = m->acts.lora_xd;
        size_t n_in = (size_t)N * md->in;
        k->memset(be, dxd, 0, n_in * sizeof *dxd);
        k->matmul_backward(be, dxd, NULL, NULL, dh, NULL, A, N, md->in, r);
        k->dropout_backward(be, dx, dxd, n_in, a->o.dropout, lora_key(m, unit),
                            lora_offset(m, md->in));
    }
}

/* ------------------------------------------------------------- merge */

/* Give a tied base its own lm_head.weight (a new table entry after the
 * others, the flat buffer grown by V x C), filled from the embedding: the
 * model stays the same function. Before ct_model_reserve only. */
static ct_status untie_head(ct_model *m) {
    if (m->B)
        return CT_ERR(CT_ERR_ARG, "merging modules_to_save unties the head, which is done "
                      "before ct_model_reserve");
    ct_model_config *c = &m->cfg;
    size_t add = (size_t)c->vocab_size * (size_t)c->n_embd, old = m->numel;
    float *p = model_buf_alloc(m, (old + add) * sizeof(float), CT_TAG_PARAMS);
    if (!p) return ct_last_status();
    m->be->i->copy(m->be, p, m->params, old * sizeof(float));
    m->be->i->copy(m->be, p + old, m->params + m->table[m->wte].offset, add * sizeof(float));
    model_buf_free(m, m->params);
    m->params = p;
    ct_param *e = &m->table[m->n_table];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "lm_head.weight");
    e->ndim = 2;
    e->shape[0] = c->vocab_size;
    e->shape[1] = c->n_embd;
    e->numel = add;
    e->offset = old;
    e->decay = true;
    m->head_w = m->n_table++;
    m->numel = old + add;
    c->tied_head = false;
    weights16_free(m); /* re-made for the new table by model_weights_changed's caller */
    return CT_OK;
}

/* modules_to_save: write the trained copies into the base (a tied head is
 * untied first when either copy exists: they were trained apart). */
static ct_status merge_saved(ct_model *m) {
    model_lora *a = m->lora;
    if (a->save_embed < 0 && a->save_head < 0) return CT_OK;
    if (m->head_w == m->wte) {
        ct_status st = untie_head(m);
        if (st) return st;
    }
    int idx[2] = {a->save_embed, a->save_head}, base[2] = {m->wte, m->head_w};
    for (int k = 0; k < 2; k++) {
        if (idx[k] < 0) continue;
        const ct_param *p = &a->table[idx[k]];
        m->be->i->copy(m->be, m->params + m->table[base[k]].offset, a->params + p->offset,
                       p->numel * sizeof(float));
    }
    if (model_half(m)) return weights16_alloc(m);
    return CT_OK;
}

ct_status ct_model_lora_merge(ct_model *m) {
    model_lora *a = m->lora;
    if (!a) return CT_ERR(CT_ERR_ARG, "ct_model_lora_merge: the model has no LoRA adapters");
    if (m->params16)
        return CT_ERR(CT_ERR_ARG, "ct_model_lora_merge: the base is stored as bf16; merge into "
                      "an fp32 base (load it again without lora.base_dtype=bf16)");
    ct_backend *be = m->be;
    int r = a->o.r;
    /* host staging for one module: its A, B and base rows */
    size_t most = 0;
    for (int s = 0; s < a->nmod; s++) {
        size_t n = (size_t)r * (a->mods[s].in + a->mods[s].out) +
                   (size_t)a->mods[s].out * a->mods[s].in;
        if (n > most) most = n;
    }
    float *stage = be->i->host_alloc(be, most * sizeof(float), CT_TAG_IO);
    if (!stage) return ct_last_status();
    for (int l = 0; l < m->cfg.n_layer; l++) {
        for (int s = 0; s < a->nmod; s++) {
            const lora_mod *md = &a->mods[s];
            size_t unit = (size_t)l * a->nmod + s;
            size_t na = (size_t)r * md->in, nb = (size_t)md->out * r;
            size_t nw = (size_t)md->out * md->in;
            float *A = stage, *Bw = stage + na, *W = stage + na + nb;
            /* rows col0.. of the fused (OUTW, in) weight are this module's (out, in) */
            float *Wdev = m->params + m->table[model_linear_shape(m, l, md->gemm).w].offset +
                          (size_t)md->col0 * md->in;
            ct_be_download(be, A, a->params + a->table[2 * unit].offset, na * sizeof(float));
            ct_be_download(be, Bw, a->params + a->table[2 * unit + 1].offset,
                           nb * sizeof(float));
            ct_be_download(be, W, Wdev, nw * sizeof(float));
            for (int o = 0; o < md->out; o++) {
                for (int i = 0; i < md->in; i++) {
                    double acc = 0.0;
                    for (int j = 0; j < r; j++)
                        acc += (double)Bw[(size_t)o * r + j] * (double)A[(size_t)j * md->in + i];
                    W[(size_t)o * md->in + i] = (float)((double)W[(size_t)o * md->in + i] +
                                                        (double)a->scale * acc);
                }
            }
            ct_be_upload(be, Wdev, W, nw * sizeof(float));
        }
    }
    be->i->host_free(be, stage);
    ct_status st = merge_saved(m);
    if (st) return st;
    lora_free(m);
    model_weights_changed(m); /* precision bf16: the merged weights' copies */
    return be->i->synchronize(be);
}
