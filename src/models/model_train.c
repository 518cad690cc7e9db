/*
 * The training forward and backward of the transformer family (GPT-2 and
 * LLaMA: the switches pick the norm, RoPE, the MLP activation and the KV
 * heads through the small dispatchers below, one block code for both), with the
 * vocabulary projection and cross-entropy fused and chunked over rows (B*T x V
 * logits are never all in memory), under the memory options: the recompute
 * policy (none | light | full) decides which block activations the forward
 * keeps, and the activation dtype (fp32 | bf16) how. All math is fp32: bf16
 * values are widened into the shared work set before a kernel reads them, and
 * the residual stream that feeds the next block stays fp32. Precision bf16
 * (autocast) changes only the GEMMs of the linears (linear.c) and the head:
 * bf16 inputs, fp32 sums and outputs; when training a full model, the values
 * that feed nothing but a GEMM (ln1, ln2, fch_gelu) are kept as that GEMM's
 * bf16 operand (model_acts.in16), which both its passes read as it is; the
 * norms write theirs in bf16 directly where the backend can (norm_out16).
 * Every tensor lives in the backend's device memory and is touched only
 * through m->be: kernels, memsets, bf16 conversions, the loss sum, uploads of
 * the token ids and downloads of logits.
 * Rows may pack several examples (ct_model_set_positions): the positions go
 * to the embedding, RoPE and the attention mask, and targets < 0 are not
 * counted in the mean loss.
 * Dropout (training only, dropout.c): in place on the embedding and on each
 * c_proj output before its residual add, inside the attention kernels on the
 * probabilities; the backward applies the same masks to the gradients.
 * Queued passes (ct_model_forward_backward_queued) run the same code without
 * a wait: the loss sum stays on the device and the events are timed by the
 * step's one read (ct_model_step_read).
 * Leaves out: any inner loop (kernels only, through m->be) and allocation (the
 * arena of ct_model_reserve holds every buffer; the queued passes' event
 * lists and two-double accumulator aside).
 */
#include "models/model_impl.h"

#include <stdlib.h>

/* ------------------------------------------------------- kept buffers */

static bool acts_bf16(const ct_model *m) { return m->opts.act_dtype == CT_ACT_BF16; }

/* The fp32 buffer a value lives in: its kept buffer when that is fp32, else
 * the shared work buffer. */
static float *f32_or_work(const ct_model *m, void *kept, float *work) {
    return kept && !acts_bf16(m) ? (float *)kept : work;
}

/* After the forward computed n values into src (fp32): keep them when the
 * policy keeps them as bf16 (fp32 ones were computed in place). */
static void act_store(const ct_model *m, void *kept, const float *src, size_t n) {
    if (kept && acts_bf16(m)) m->be->i->f32_to_bf16(m->be, kept, src, n);
}

/* Before the backward reads a kept value: widen bf16 into its work buffer
 * (fp32 ones are read in place; values not kept are re-derived instead). */
static void act_load(const ct_model *m, const void *kept, float *dst, size_t n) {
    if (kept && acts_bf16(m)) m->be->i->bf16_to_f32(m->be, dst, kept, n);
}

/* A GEMM input (ln1, ln2, fch_gelu): under model_acts.in16 its kept buffer
 * holds the GEMM's 16-bit operand, and the fp32 value lives in the work set
 * for the forward; otherwise it is an activation as above. */
static float *in_f32(const ct_model *m, void *kept, float *work) {
    return m->acts.in16 ? work : f32_or_work(m, kept, work);
}
static void in_store(const ct_model *m, void *kept, const float *src, size_t n) {
    if (kept && m->acts.in16) model_to16(m, kept, src, n);
    else act_store(m, kept, src, n);
}
/* The kept 16-bit operand the GEMMs take as it is (NULL: none kept). */
static const uint16_t *in16_of(const ct_model *m, const void *kept) {
    return m->acts.in16 ? kept : NULL;
}
/* Before the backward's GEMM: nothing to widen when it reads the operand. */
static void in_load(const ct_model *m, const void *kept, float *dst, size_t n) {
    if (!m->acts.in16) act_load(m, kept, dst, n);
}

/* Zero n floats of device memory (gradient scratch the backward adds into). */
static void zero(const ct_model *m, float *p, size_t n) {
    m->be->i->memset(m->be, p, 0, n * sizeof(float));
}

/* The fp32 buffers block l's math runs on. */
static block_f32 block_view(ct_model *m, int l) {
    layer_acts *la = &m->acts.layers[l];
    const block_f32 *w = &m->acts.work;
    block_f32 v;
    v.ln1 = in_f32(m, la->ln1, w->ln1);
    v.qkv = f32_or_work(m, la->qkv, w->qkv);
    v.atty = f32_or_work(m, la->atty, w->atty);
    v.res2 = f32_or_work(m, la->res2, w->res2);
    v.ln2 = in_f32(m, la->ln2, w->ln2);
    v.fch = f32_or_work(m, la->fch, w->fch);
    v.fch_gelu = in_f32(m, la->fch_gelu, w->fch_gelu);
    /* statistics are fp32 whenever they are kept */
    v.ln1_mean = la->ln1_mean ? la->ln1_mean : w->ln1_mean;
    v.ln1_rstd = la->ln1_rstd ? la->ln1_rstd : w->ln1_rstd;
    v.lse = la->lse ? la->lse : w->lse;
    v.ln2_mean = la->ln2_mean ? la->ln2_mean : w->ln2_mean;
    v.ln2_rstd = la->ln2_rstd ? la->ln2_rstd : w->ln2_rstd;
    v.pa = f32_or_work(m, la->pa, w->pa);
    v.pf = f32_or_work(m, la->pf, w->pf);
    v.pa_rstd = la->pa_rstd ? la->pa_rstd : w->pa_rstd;
    v.pf_rstd = la->pf_rstd ? la->pf_rstd : w->pf_rstd;
    return v;
}

/* Block l's input as fp32: the kept residual stream, widened into acts.res
 * when it is bf16. */
static const float *block_input(ct_model *m, int l, size_t NC) {
    void *kept = l == 0 ? m->acts.encoded : m->acts.layers[l - 1].res3;
    if (!acts_bf16(m)) return kept;
    act_load(m, kept, m->acts.res, NC);
    return m->acts.res;
}

/* The positions of ct_model_set_positions on the device (B,T), or NULL when
 * none are set (0..T-1 in every row). */
static const int32_t *model_positions(const ct_model *m) {
    return m->pos_B ? m->acts.pos : NULL;
}

/* What layer l's attention kernels take as positions: a query at position
 * p sees keys [t - p, t], so a sliding layer (Gemma) gets min(p, W - 1) (its
 * last W keys, within its example), the others the positions themselves. */
static const int32_t *attn_positions(const ct_model *m, int l) {
    return ct_model_layer_slides(&m->cfg, l) ? m->acts.look : model_positions(m);
}

/* Layer l's RoPE table: the sliding layers' own base (Gemma), else the model's. */
static const float *rope_table(const ct_model *m, int l) {
    return ct_model_layer_slides(&m->cfg, l) ? m->acts.rope_inv_local : m->acts.rope_inv;
}

/* The window's lookback rows min(p, W - 1) of positions pos (B,T) (NULL: p =
 * t in every row), built on the host and uploaded. */
static void look_upload(ct_model *m, const int32_t *pos, int B, int T) {
    int W = m->cfg.sliding_window;
    int32_t *h = m->acts.look_host;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int p = pos ? pos[(size_t)b * T + t] : t;
            h[(size_t)b * T + t] = p < W - 1 ? p : W - 1;
        }
    ct_be_upload(m->be, m->acts.look, h, (size_t)B * T * sizeof(int32_t));
}

/* Before a pass over rows of T tokens: the window's rows for positions
 * 0..T-1 when no positions are set and they are not there yet (the
 * reserve's rows all get them). */
static void look_prepare(ct_model *m, int T) {
    if (!m->acts.look || m->pos_B || m->acts.look_T == T) return;
    look_upload(m, NULL, (m->B * m->T) / T, T);
    m->acts.look_T = T;
}

/* ------------------------------------------------- switch dispatchers */

/* Declared in model_impl.h (decode.c runs the same switches). */
void model_norm_fwd(const ct_model *m, float *out, float *mean, float *rstd, const float *inp,
                     int w, int b, int N) {
    const ct_model_config *c = &m->cfg;
    ct_model *mm = (ct_model *)m;
    if (c->norm == CT_NORM_RMSNORM)
        m->be->i->rmsnorm_forward(m->be, out, rstd, inp, model_p(mm, w), N, c->n_embd, c->norm_eps,
                                  model_wofs(c));
    else
        m->be->i->layernorm_forward(m->be, out, mean, rstd, inp, model_p(mm, w), model_p(mm, b), N,
                                c->n_embd, c->norm_eps);
}

void model_residual_norm_fwd(const ct_model *m, float *res, float *out, float *mean, float *rstd,
                             const float *a, const float *b, int w, int bias, int N) {
    const ct_model_config *c = &m->cfg;
    ct_model *mm = (ct_model *)m;
    if (c->norm == CT_NORM_RMSNORM)
        m->be->i->residual_rmsnorm_forward(m->be, res, out, rstd, a, b, model_p(mm, w), N,
                                           c->n_embd, c->norm_eps, model_wofs(c));
    else
        m->be->i->residual_layernorm_forward(m->be, res, out, mean, rstd, a, b, model_p(mm, w),
                                             model_p(mm, bias), N, c->n_embd, c->norm_eps);
}

void model_norm_bwd(ct_model *m, float *dinp, const float *dout, const float *inp, int w, int b,
                     const float *mean, const float *rstd, int N) {
    const ct_model_config *c = &m->cfg;
    /* a frozen norm's weight gradient goes to a sink nobody reads (the
     * kernels always write one); dinp is what the adapters below need */
    float *dw = m->grads ? model_g(m, w) : m->acts.lora_sink;
    float *db = m->grads ? model_g(m, b) : m->acts.lora_sink + c->n_embd;
    if (c->norm == CT_NORM_RMSNORM)
        m->be->i->rmsnorm_backward(m->be, dinp, dw, dout, inp, model_p(m, w), rstd, N, c->n_embd,
                                   model_wofs(c));
    else
        m->be->i->layernorm_backward(m->be, dinp, dw, db, dout, inp, model_p(m, w), mean, rstd, N,
                                 c->n_embd);
}

/* The attention-probability dropout of layer l in the current pass, in *d;
 * NULL when it draws none. */
static const ct_attn_dropout *attn_drop(const ct_model *m, int l, ct_attn_dropout *d) {
    float p = model_drop_p(m, CT_DROPOUT_ATTN_PROBS);
    if (!(p > 0.0f)) return NULL;
    *d = (ct_attn_dropout){p, model_drop_key(m, CT_DROPOUT_ATTN_PROBS, l), m->drop_row0};
    return d;
}

void model_attn_fwd(const ct_model *m, int l, float *out, float *lse, const float *qkv, int B,
                    int T) {
    const ct_model_config *c = &m->cfg;
    const ct_backend_i *k = m->be->i;
    ct_attn_dropout d;
    /* precision bf16: the backend's bf16 attention where it has one (cuda's
     * tensor-core kernels), else the fp32 entry, as on the CPU */
    if (model_bf16(m) && k->attention_forward_bf16)
        k->attention_forward_bf16(m->be, out, lse, qkv, attn_positions(m, l),
                                  attn_drop(m, l, &d), B, T, c->n_head, c->n_kv_head,
                                  ct_model_head_dim(c));
    else
        k->attention_forward(m->be, out, lse, qkv, attn_positions(m, l), attn_drop(m, l, &d), B,
                             T, c->n_head, c->n_kv_head, ct_model_head_dim(c));
}

void model_attn_bwd(const ct_model *m, int l, float *dqkv, const float *dout, const float *qkv,
                    const float *out, const float *lse, int B, int T) {
    const ct_model_config *c = &m->cfg;
    const ct_backend_i *k = m->be->i;
    ct_attn_dropout d;
    /* the forward's entry's backward: its lse and out are what it saved */
    if (model_bf16(m) && k->attention_backward_bf16)
        k->attention_backward_bf16(m->be, dqkv, dout, qkv, out, lse, attn_positions(m, l),
                                   attn_drop(m, l, &d), B, T, c->n_head, c->n_kv_head,
                                   ct_model_head_dim(c));
    else
        k->attention_backward(m->be, dqkv, dout, qkv, out, lse, attn_positions(m, l),
                              attn_drop(m, l, &d), B, T, c->n_head, c->n_kv_head,
                              ct_model_head_dim(c));
}

void model_mlp_act_fwd(const ct_model *m, float *out, const float *fch, int N) {
    int F = m->cfg.n_ffn;
    if (m->cfg.mlp == CT_MLP_SWIGLU)
        m->be->i->swiglu_forward(m->be, out, fch, N, F);
    else if (m->cfg.mlp == CT_MLP_GEGLU)
        m->be->i->geglu_forward(m->be, out, fch, N, F);
    else
        m->be->i->gelu_forward(m->be, out, fch, (size_t)N * F);
}

void model_mlp_act_bwd(const ct_model *m, float *dfch, const float *fch, const float *dout,
                        int N) {
    int F = m->cfg.n_ffn;
    if (m->cfg.mlp == CT_MLP_SWIGLU)
        m->be->i->swiglu_backward(m->be, dfch, fch, dout, N, F);
    else if (m->cfg.mlp == CT_MLP_GEGLU)
        m->be->i->geglu_backward(m->be, dfch, fch, dout, N, F);
    else
        m->be->i->gelu_backward(m->be, dfch, fch, dout, (size_t)N * F);
}

/* ------------------------------------------------------------ forward */

/* The attention's input from the q,k,v GEMM's output qkv (N,QKVW) of layer
 * l: RoPE in place on qkv, or, with q/k norms, the normalised heads turned
 * in acts.qkn (qkv stays the GEMM's output, which the backward needs). */
static float *attn_input(ct_model *m, int l, float *qkv, int B, int T) {
    ct_backend *be = m->be;
    const ct_model_config *c = &m->cfg;
    const layer_idx *w = &m->layers[l];
    int HS = ct_model_head_dim(c), N = B * T;
    float *x = qkv;
    if (c->qk_norm) {
        x = m->acts.qkn;
        be->i->qknorm_forward(be, x, m->acts.qk_rstd, qkv, model_p(m, w->q_norm),
                              model_p(m, w->k_norm), N, c->n_head, c->n_kv_head, HS,
                              c->norm_eps, model_wofs(c));
    }
    if (c->pos == CT_POS_ROPE)
        be->i->rope_forward(be, x, model_positions(m), B, T, c->n_head, c->n_kv_head, HS, 0,
                            rope_table(m, l));
    return x;
}

/* Where a block's output goes next: the norm that reads it (the next
 * block's norm1, or the final norm after the last block), into out (or,
 * when not NULL, the kept bf16 operand out16: norm_out16), mean and rstd
 * with weights w, b (table indices). The block's last residual add runs
 * fused with it. */
typedef struct next_norm {
    float *out, *mean, *rstd;
    uint16_t *out16;
    int w, b;
} next_norm;

/* Where a kernel that feeds only a GEMM writes its bf16 output straight
 * into the operand the model keeps (kept: la's ln1, ln2 or fch_gelu under
 * model_acts.in16): the backend has that kernel's bf16-output entry
 * (producer) and the _in16 GEMM forwards, so no fp32 output is written and
 * nothing reads one. NULL: the fp32 output and in_store as usual. */
static uint16_t *kept16_target(const ct_model *m, void *kept, bool producer) {
    if (!kept || !producer || !m->acts.in16 || !model_bf16(m) ||
        !m->be->i->matmul_forward_bf16_in16)
        return NULL;
    return kept;
}
/* ... for a norm's output (ln1, ln2) */
static uint16_t *norm_out16(const ct_model *m, void *kept) {
    const ct_backend_i *k = m->be->i;
    return kept16_target(m, kept,
                         m->cfg.norm == CT_NORM_RMSNORM ? k->rmsnorm_forward_out16 != NULL
                                                        : k->layernorm_forward_out16 != NULL);
}

/* The norm of a, or with b of res = a + b (into res), into out16 (norm_out16). */
static void norm_fwd16(const ct_model *m, float *res, uint16_t *out16, float *mean, float *rstd,
                       const float *a, const float *b, int w, int bias, int N) {
    const ct_model_config *c = &m->cfg;
    ct_model *mm = (ct_model *)m;
    if (c->norm == CT_NORM_RMSNORM)
        m->be->i->rmsnorm_forward_out16(m->be, res, out16, rstd, a, b, model_p(mm, w), N,
                                        c->n_embd, c->norm_eps, model_wofs(c));
    else
        m->be->i->layernorm_forward_out16(m->be, res, out16, mean, rstd, a, b, model_p(mm, w),
                                          model_p(mm, bias), N, c->n_embd, c->norm_eps);
}

/* One block from res_in (fp32) into the buffers of v, keeping what la keeps
 * (la may be NULL: keep nothing). ln1_ready: v->ln1 and its statistics hold
 * norm1(res_in) already (the previous block's fused add wrote them), else it
 * is computed here. With out NULL it stops after c_fc, which is all the
 * backward's re-run of the block needs; otherwise it writes the block's
 * output (res_in plus both branches) to out, which may alias res_in, and
 * next's norm of it. The residual adds run fused with the norm that follows
 * them (residual_*norm_forward): the bits of the add and then the norm. */
static void block_forward(ct_model *m, int l, const block_f32 *v, const layer_acts *la,
                          const float *res_in, bool ln1_ready, float *out, const next_norm *next,
                          int B, int T) {
    const ct_model_config *c = &m->cfg;
    const ct_backend_i *k = m->be->i;
    const layer_idx *w = &m->layers[l];
    int N = B * T, C = c->n_embd, F = c->n_ffn, QKV = model_qkv_width(c);
    int FW = model_fc_width(c);
    size_t NC = (size_t)N * C, NF = (size_t)N * F, NQ = (size_t)N * model_q_width(c);
    layer_acts none = {0};
    if (!la) la = &none;
    /* ln1_ready with ln1_16: the previous block wrote it there */
    uint16_t *ln1_16 = norm_out16(m, la->ln1), *ln2_16 = norm_out16(m, la->ln2);
    if (!ln1_ready && ln1_16)
        norm_fwd16(m, NULL, ln1_16, v->ln1_mean, v->ln1_rstd, res_in, NULL, w->ln1_w, w->ln1_b,
                   N);
    else if (!ln1_ready)
        model_norm_fwd(m, v->ln1, v->ln1_mean, v->ln1_rstd, res_in, w->ln1_w, w->ln1_b, N);
    if (!ln1_16) in_store(m, la->ln1, v->ln1, NC); /* before ln2 reuses a shared work buffer */
    model_linear_fwd(m, l, LIN_QKV, v->qkv, v->ln1, in16_of(m, la->ln1), N);
    const float *att_in = attn_input(m, l, v->qkv, B, T);
    act_store(m, la->qkv, v->qkv, (size_t)N * QKV);
    model_attn_fwd(m, l, v->atty, v->lse, att_in, B, T);
    act_store(m, la->atty, v->atty, NQ);
    if (c->sandwich_norm) { /* Gemma: the attention's output normalised, then added */
        model_linear_fwd(m, l, LIN_PROJ, v->pa, v->atty, NULL, N);
        act_store(m, la->pa, v->pa, NC);
        model_norm_fwd(m, v->res2, NULL, v->pa_rstd, v->pa, w->pan_w, -1, N);
    } else {
        model_linear_fwd(m, l, LIN_PROJ, v->res2, v->atty, NULL, N);
    }
    model_drop_rows(m, v->res2, v->res2, CT_DROPOUT_ATTN_RESID, l, B, T);
    /* res2 = res_in + the branch, and norm2 of it */
    if (ln2_16)
        norm_fwd16(m, v->res2, ln2_16, v->ln2_mean, v->ln2_rstd, v->res2, res_in, w->ln2_w,
                   w->ln2_b, N);
    else
        model_residual_norm_fwd(m, v->res2, v->ln2, v->ln2_mean, v->ln2_rstd, v->res2, res_in,
                                w->ln2_w, w->ln2_b, N);
    act_store(m, la->res2, v->res2, NC);
    if (!ln2_16) in_store(m, la->ln2, v->ln2, NC);
    /* GPT-2's c_fc and GELU in one call where the backend fuses them (a
     * re-run for the backward, out NULL, needs c_fc's output only) */
    const uint16_t *ln2_in = in16_of(m, la->ln2);
    bool fused = out && c->mlp == CT_MLP_GELU &&
                 model_linear_gelu_fwd(m, l, v->fch, v->fch_gelu, v->ln2, ln2_in, N);
    if (!fused) model_linear_fwd(m, l, LIN_FC, v->fch, v->ln2, ln2_in, N);
    act_store(m, la->fch, v->fch, (size_t)N * FW);
    if (!out) return;
    /* the MLP activation, into its kept bf16 operand where the backend can */
    uint16_t *act16 = fused ? NULL
                            : kept16_target(m, la->fch_gelu, k->mlp_act_forward_out16 != NULL);
    if (act16) {
        int act = c->mlp == CT_MLP_SWIGLU  ? CT_ACT16_SWIGLU
                  : c->mlp == CT_MLP_GEGLU ? CT_ACT16_GEGLU
                                           : CT_ACT16_GELU;
        k->mlp_act_forward_out16(m->be, act16, v->fch, N, F, act);
    } else {
        if (!fused) model_mlp_act_fwd(m, v->fch_gelu, v->fch, N);
        in_store(m, la->fch_gelu, v->fch_gelu, NF);
    }
    const uint16_t *gelu16 = in16_of(m, la->fch_gelu);
    /* res_in is dead from here on, so out may overwrite it */
    if (c->sandwich_norm) {
        model_linear_fwd(m, l, LIN_FCPROJ, v->pf, v->fch_gelu, gelu16, N);
        act_store(m, la->pf, v->pf, NC);
        model_norm_fwd(m, out, NULL, v->pf_rstd, v->pf, w->pfn_w, -1, N);
    } else {
        model_linear_fwd(m, l, LIN_FCPROJ, out, v->fch_gelu, gelu16, N);
    }
    model_drop_rows(m, out, out, CT_DROPOUT_MLP_RESID, l, B, T);
    /* out = res2 + the branch, and the next norm of it (the next block's
     * norm1 or the final norm: neither buffer is one this block still reads) */
    if (next->out16)
        norm_fwd16(m, out, next->out16, next->mean, next->rstd, out, v->res2, next->w, next->b,
                   N);
    else
        model_residual_norm_fwd(m, out, next->out, next->mean, next->rstd, out, v->res2, next->w,
                                next->b, N);
    act_store(m, la->res3, out, NC);
}

/* Embedding, blocks and final norm (fused with the last block's add; the
 * config has n_layer >= 1); leaves the normalised rows in acts.lnf.
 * keep=false (no backward follows) skips the bf16 copies. */
static void forward_body(ct_model *m, const int32_t *inputs, int B, int T, bool keep) {
    ct_backend *be = m->be;
    const ct_backend_i *k = be->i;
    const ct_model_config *c = &m->cfg;
    int N = B * T, C = c->n_embd, L = c->n_layer;
    size_t NC = (size_t)N * C;
    model_acts *a = &m->acts;
    bool bf16 = acts_bf16(m);
    /* the fp32 residual stream: the kept buffers themselves, or acts.res
     * updated in place when they are bf16 */
    float *res = bf16 ? a->res : (float *)a->encoded;
    look_prepare(m, T);
    model_encoder_fwd(m, res, inputs, model_positions(m), B, T, 0);
    if (c->embed_scale) k->scale(be, res, model_embed_scale(c), NC);
    model_drop_rows(m, res, res, CT_DROPOUT_EMBD, 0, B, T);
    if (keep) act_store(m, a->encoded, res, NC);
    next_norm fin = {a->lnf, a->lnf_mean, a->lnf_rstd, NULL, m->lnf_w, m->lnf_b};
    for (int l = 0; l < L; l++) {
        layer_acts *la = &a->layers[l];
        block_f32 v = block_view(m, l);
        float *out = bf16 ? a->res : (float *)la->res3;
        /* block l's last add feeds block l+1's norm1 (into the buffers its
         * view gives), or the final norm */
        next_norm nx = fin;
        if (l + 1 < L) {
            block_f32 vn = block_view(m, l + 1);
            const layer_idx *wn = &m->layers[l + 1];
            uint16_t *o16 = keep ? norm_out16(m, a->layers[l + 1].ln1) : NULL;
            nx = (next_norm){vn.ln1, vn.ln1_mean, vn.ln1_rstd, o16, wn->ln1_w, wn->ln1_b};
        }
        block_forward(m, l, &v, keep ? la : NULL, res, l > 0, out, &nx, B, T);
        res = out;
    }
}

/* Keep a head backward's (start, end) events for the step's read; when the
 * backend's events would run out first (thousands of chunks in one step),
 * time what is kept now (a wait, but never in a step of usual shape). */
static void queue_time(ct_model *m);
static void queue_pair(ct_model *m, const ct_event *e0, const ct_event *e1) {
    if (m->n_qev + 2 + 4 * m->n_q > MODEL_QUEUED_EVENTS) queue_time(m);
    if (m->n_qev + 2 > m->cap_qev) {
        int cap = m->cap_qev ? 2 * m->cap_qev : 64;
        ct_event *ev = realloc(m->q_ev, (size_t)cap * sizeof *ev);
        if (!ev) { /* no room to keep it: time it now (backward work, not forward) */
            double dt = m->be->i->event_elapsed(m->be, e0, e1);
            m->q_fwd_s -= dt;
            m->q_bwd_s += dt;
            return;
        }
        m->q_ev = ev;
        m->cap_qev = cap;
    }
    m->q_ev[m->n_qev++] = *e0;
    m->q_ev[m->n_qev++] = *e1;
}

/* Whether the head runs in bf16 with bf16 logits (backend.h's bf16 head):
 * precision bf16, the backend's bf16 head in use (ct_backend_head16_ld), the
 * logits not wanted by the caller (they are fp32 for it) nor by fp32_logits,
 * and the rows within the fp32 chunk's bytes. Returns the row length, or 0
 * for fp32 logits. */
static int head_bf16_ld(const ct_model *m, bool h16, const float *logits_out) {
    if (!h16 || !model_bf16(m) || logits_out || m->opts.fp32_logits) return 0;
    int V = m->cfg.vocab_size;
    int ld = ct_backend_head16_ld(m->be, V);
    return (size_t)ld * 2 <= (size_t)V * 4 ? ld : 0;
}

/* The vocabulary projection and cross-entropy, chunked over rows. When
 * training, the head's backward runs in the same pass: dlogits overwrite the
 * chunk's logits, dlnf lands in acts.dln and the head weight's gradient is
 * accumulated. logits_out(N,V), when given, receives the logits. Returns the
 * mean loss over the count counted targets (those >= 0; 0 when there are
 * none); dloss is each counted row's gradient weight (grad_weight / count).
 * Under precision bf16 on a backend with the bf16 head, the chunk holds bf16
 * logits in rows padded to ld, and their gradient in place (autocast's). */
static double head_forward(ct_model *m, const int32_t *targets, int N, size_t count,
                           bool training, float dloss, float *logits_out) {
    ct_backend *be = m->be;
    const ct_backend_i *k = be->i;
    int C = m->cfg.n_embd, V = m->cfg.vocab_size;
    model_acts *a = &m->acts;
    /* precision bf16/fp16: the head's 16-bit weights (autocast), else fp32; a
     * modules_to_save copy of lm_head is trained, in fp32 */
    const float *copy = model_head_copy(m);
    bool h16 = model_half(m) && !copy; /* bf16 or fp16 */
    const float *head = h16 ? NULL : copy ? copy : model_p(m, m->head_w);
    const uint16_t *head16 = h16 ? model_w16(m, m->head_w) : NULL;
    float *dhead = copy ? model_head_copy_g(m) : model_g(m, m->head_w);
    int ld = head_bf16_ld(m, h16, logits_out);
    uint16_t *logits16 = ld ? (uint16_t *)a->logits : NULL; /* the same bytes */
    if (training) zero(m, a->dln, (size_t)N * C);
    for (int r0 = 0; r0 < N; r0 += m->chunk) {
        int rows = N - r0 < m->chunk ? N - r0 : m->chunk;
        const float *x = a->lnf + (size_t)r0 * C;
        if (ld)
            k->matmul_forward_bf16_out16(be, logits16, ld, x, head16, rows, C, V);
        else if (h16)
            model_mm16_fwd(m, a->logits, x, head16, NULL, rows, C, V);
        else
            k->matmul_forward(be, a->logits, x, head, NULL, rows, C, V);
        if (logits_out)
            ct_be_download(be, logits_out + (size_t)r0 * V, a->logits, (size_t)rows * V * 4);
        if (!targets) continue;
        if (ld)
            k->crossentropy_forward_bf16(be, a->losses + r0, training ? logits16 : NULL, logits16,
                                         ld, targets + r0, rows, V, dloss);
        else
            k->crossentropy_forward(be, a->losses + r0, training ? a->logits : NULL, a->logits,
                                    targets + r0, rows, V, dloss);
        if (training) {
            ct_event e0, e1;
            k->event_record(be, &e0);
            if (h16) {
                const uint16_t *x16 = NULL;
                if (dhead) { /* the chunk's 16-bit rows, for the weight gradient */
                    model_to16(m, a->inp16, x, (size_t)rows * C);
                    x16 = a->inp16;
                }
                if (ld)
                    k->matmul_backward_bf16_dout16(be, a->dln + (size_t)r0 * C, dhead, logits16,
                                                   ld, x16, head16, rows, C, V);
                else
                    model_mm16_bwd(m, a->dln + (size_t)r0 * C, dhead, NULL, a->logits, x16,
                                   head16, rows, C, V);
            } else {
                k->matmul_backward(be, a->dln + (size_t)r0 * C, dhead, NULL, a->logits, x,
                                   head, rows, C, V);
            }
            k->event_record(be, &e1);
            if (m->queued) /* timed by the step's read: no wait here */
                queue_pair(m, &e0, &e1);
            else
                m->head_bwd_s += k->event_elapsed(be, &e0, &e1);
        }
    }
    if (!targets || !count) return 0.0;
    /* one serial sum in row order, as the losses came (uncounted rows are 0);
     * a queued pass adds it on the device, for the step's read */
    if (m->queued) {
        ct_be_reduce_add(be, a->step_acc, a->losses, (size_t)N, false);
        return 0.0;
    }
    return k->sum(be, a->losses, (size_t)N) / (double)count;
}

/* ----------------------------------------------------------- backward */

/* Block l's backward: dres holds the gradient of its output and receives the
 * gradient of its input. Values the policy dropped are re-derived first:
 * under full the block's forward re-runs (up to c_fc) into the work set;
 * under light and full, norm2, the MLP activation and norm1 are recomputed
 * right before use, from the same inputs by the same kernels, so they equal
 * the forward's bit for bit (the norms keep the statistics saved by the
 * forward); a frozen LoRA base's linear without an adapter does not read its
 * input, so that input is neither kept nor recomputed. RoPE is undone on the
 * q and k gradients in place. */
static void block_backward(ct_model *m, int l, int B, int T) {
    ct_backend *be = m->be;
    const ct_backend_i *k = be->i;
    const ct_model_config *c = &m->cfg;
    const layer_idx *w = &m->layers[l];
    const layer_acts *la = &m->acts.layers[l];
    model_acts *a = &m->acts;
    int N = B * T, C = c->n_embd, F = c->n_ffn, QKV = model_qkv_width(c);
    int FW = model_fc_width(c), HS = ct_model_head_dim(c);
    size_t NC = (size_t)N * C, NF = (size_t)N * F, NFW = (size_t)N * FW;
    size_t NQ = (size_t)N * model_q_width(c);
    const float *res_in = block_input(m, l, NC);
    block_f32 v = block_view(m, l);
    if (model_layer_recomputed(m, l))
        block_forward(m, l, &v, NULL, res_in, false, NULL, NULL, B, T);
    /* res3 = res2 + down(act(fc(norm2(res2)))): dres passes through */
    act_load(m, la->fch, v.fch, NFW);
    if (la->fch_gelu)
        in_load(m, la->fch_gelu, v.fch_gelu, NF);
    else if (model_linear_bwd_reads_x(m, l, LIN_FCPROJ) || (c->sandwich_norm && !la->pf))
        model_mlp_act_fwd(m, v.fch_gelu, v.fch, N);
    zero(m, a->dbig1, NF);
    /* the MLP's c_proj output was dropped out: its gradient is dres o mask (in dln) */
    const float *dmlp = a->dres;
    if (model_drop_p(m, CT_DROPOUT_MLP_RESID) > 0.0f) {
        model_drop_rows(m, a->dln, a->dres, CT_DROPOUT_MLP_RESID, l, B, T);
        dmlp = a->dln;
    }
    if (c->sandwich_norm) { /* through the norm after the MLP: its input is down_proj's */
        if (la->pf) {
            act_load(m, la->pf, v.pf, NC);
        } else { /* full recompute stopped at c_fc: the rest of the MLP again */
            model_linear_fwd(m, l, LIN_FCPROJ, v.pf, v.fch_gelu, NULL, N);
            model_norm_fwd(m, a->dln, NULL, v.pf_rstd, v.pf, w->pfn_w, -1, N);
        }
        zero(m, a->dln, NC);
        model_norm_bwd(m, a->dln, a->dres, v.pf, w->pfn_w, -1, NULL, v.pf_rstd, N);
        dmlp = a->dln;
    }
    model_linear_bwd(m, l, LIN_FCPROJ, a->dbig1, dmlp, v.fch_gelu, in16_of(m, la->fch_gelu),
                     N);
    /* v.fch_gelu may be dbig2 itself: it is not read after this point */
    zero(m, a->dbig2, NFW);
    model_mlp_act_bwd(m, a->dbig2, v.fch, a->dbig1, N);
    act_load(m, la->res2, v.res2, NC);
    if (la->ln2)
        in_load(m, la->ln2, v.ln2, NC);
    else if (model_linear_bwd_reads_x(m, l, LIN_FC))
        model_norm_fwd(m, v.ln2, NULL, NULL, v.res2, w->ln2_w, w->ln2_b, N);
    zero(m, a->dln, NC);
    model_linear_bwd(m, l, LIN_FC, a->dln, a->dbig2, v.ln2, in16_of(m, la->ln2), N);
    model_norm_bwd(m, a->dres, a->dln, v.res2, w->ln2_w, w->ln2_b, v.ln2_mean, v.ln2_rstd, N);
    /* res2 = res_in + o(attn(rope(qknorm(qkv(norm1(res_in)))))) */
    act_load(m, la->atty, v.atty, NQ);
    act_load(m, la->qkv, v.qkv, (size_t)N * QKV);
    /* with q/k norms the kept qkv is the GEMM's output: the attention's input
     * is derived again, bit for bit as the forward's */
    const float *att_in = c->qk_norm ? attn_input(m, l, v.qkv, B, T) : v.qkv;
    zero(m, a->datty, NQ);
    /* dln is free until norm1's backward: the dropped c_proj output's gradient */
    const float *dattn = a->dres;
    if (model_drop_p(m, CT_DROPOUT_ATTN_RESID) > 0.0f) {
        model_drop_rows(m, a->dln, a->dres, CT_DROPOUT_ATTN_RESID, l, B, T);
        dattn = a->dln;
    }
    if (c->sandwich_norm) { /* through the norm after the attention (pa kept, or re-run) */
        act_load(m, la->pa, v.pa, NC);
        zero(m, a->dln, NC);
        model_norm_bwd(m, a->dln, a->dres, v.pa, w->pan_w, -1, NULL, v.pa_rstd, N);
        dattn = a->dln;
    }
    model_linear_bwd(m, l, LIN_PROJ, a->datty, dattn, v.atty, NULL, N);
    zero(m, a->dbig1, (size_t)N * QKV);
    model_attn_bwd(m, l, a->dbig1, a->datty, att_in, v.atty, v.lse, B, T);
    if (c->pos == CT_POS_ROPE)
        k->rope_backward(be, a->dbig1, model_positions(m), B, T, c->n_head, c->n_kv_head, HS, 0,
                         rope_table(m, l));
    if (c->qk_norm) {
        /* a frozen base's norm weights: their gradients go to the sink */
        float *dwq = m->grads ? model_g(m, w->q_norm) : a->lora_sink;
        float *dwk = m->grads ? model_g(m, w->k_norm) : a->lora_sink + HS;
        k->qknorm_backward(be, a->dbig1, dwq, dwk, a->dbig1, v.qkv, model_p(m, w->q_norm),
                           model_p(m, w->k_norm), a->qk_rstd, N, c->n_head, c->n_kv_head, HS,
                           model_wofs(c));
    }
    if (la->ln1)
        in_load(m, la->ln1, v.ln1, NC);
    else if (model_linear_bwd_reads_x(m, l, LIN_QKV))
        model_norm_fwd(m, v.ln1, NULL, NULL, res_in, w->ln1_w, w->ln1_b, N);
    zero(m, a->dln, NC);
    model_linear_bwd(m, l, LIN_QKV, a->dln, a->dbig1, v.ln1, in16_of(m, la->ln1), N);
    model_norm_bwd(m, a->dres, a->dln, res_in, w->ln1_w, w->ln1_b, v.ln1_mean, v.ln1_rstd, N);
}

/* Tell the gradient hook that the flat-buffer span of table entries idx[0..n)
 * is final (-1 entries are tensors the variant lacks). The span runs from the
 * lowest offset to the highest end, so it also takes the entries laid out
 * between them (LLaMA's k, v and up projections, which no index names). */
static void grad_ready(ct_model *m, const int *idx, int n) {
    /* with LoRA the trainable gradients are the adapter's own buffer, not
     * these spans of the base: its allreduce runs after the backward */
    if (!m->grad_hook || m->lora) return;
    size_t lo = SIZE_MAX, hi = 0;
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0) continue;
        const ct_param *p = &m->table[idx[i]];
        if (p->offset < lo) lo = p->offset;
        if (p->offset + p->numel > hi) hi = p->offset + p->numel;
    }
    if (hi > lo) m->grad_hook(lo, hi, m->grad_hook_user);
}

void ct_model_set_grad_hook(ct_model *m, ct_grad_ready_fn fn, void *user) {
    m->grad_hook = fn;
    m->grad_hook_user = fn ? user : NULL;
}

static void backward_body(ct_model *m, const int32_t *inputs, int B, int T) {
    ct_backend *be = m->be;
    const ct_backend_i *k = be->i;
    const ct_model_config *c = &m->cfg;
    int N = B * T, C = c->n_embd, L = c->n_layer;
    size_t NC = (size_t)N * C;
    model_acts *a = &m->acts;
    /* final norm: dlnf sits in dln (written by the fused head). Its input is
     * the last block's output: with bf16 storage the forward's exact fp32
     * copy is still in acts.res, so that is what it reads. */
    const float *res_last = acts_bf16(m) ? a->res : (const float *)a->layers[L - 1].res3;
    zero(m, a->dres, NC);
    model_norm_bwd(m, a->dres, a->dln, res_last, m->lnf_w, m->lnf_b, a->lnf_mean, a->lnf_rstd, N);
    /* the final norm and an untied head (its gradient came with the fused loss) */
    int fin[3] = {m->lnf_w, m->lnf_b, m->head_w != m->wte ? m->head_w : -1};
    grad_ready(m, fin, 3);
    for (int l = L - 1; l >= 0; l--) {
        block_backward(m, l, B, T);
        grad_ready(m, (const int *)&m->layers[l], (int)(sizeof(layer_idx) / sizeof(int)));
    }
    /* Gemma scaled the embeddings: so is their gradient (dres is not read after) */
    if (c->embed_scale && (m->grads || model_embed_g(m)))
        k->scale(be, a->dres, model_embed_scale(c), NC);
    if (m->grads) { /* a frozen base (LoRA) has no embedding gradient */
        /* the embedding was dropped out in place: so is its gradient */
        model_drop_rows(m, a->dres, a->dres, CT_DROPOUT_EMBD, 0, B, T);
        k->encoder_backward(be, model_g(m, m->wte), model_g(m, m->wpe), a->dres, inputs,
                            model_positions(m), B, T, C);
        int emb[2] = {m->wte, m->wpe};
        grad_ready(m, emb, 2); /* the tied head's part came first */
    } else if (model_embed_g(m)) { /* LoRA's modules_to_save copy of embed_tokens */
        k->encoder_backward(be, model_embed_g(m), NULL, a->dres, inputs, model_positions(m), B,
                            T, C);
    }
}

/* ------------------------------------------------------- entry points */

static ct_status check_tokens(const ct_model *m, const int32_t *tok, size_t n, const char *what) {
    int V = m->cfg.vocab_size;
    for (size_t i = 0; i < n; i++) {
        if (tok[i] < 0 || tok[i] >= V)
            return CT_ERR(CT_ERR_ARG, "%s token %d at position %zu is out of range: expected 0..%d "
                          "(model vocab_size %d)", what, tok[i], i, V - 1, V);
    }
    return CT_OK;
}

/* Targets are tokens in [0,V) or < 0 (not counted); *count gets how many
 * are counted. */
static ct_status check_targets(const ct_model *m, const int32_t *tg, size_t n, size_t *count) {
    int V = m->cfg.vocab_size;
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        if (tg[i] >= V)
            return CT_ERR(CT_ERR_ARG, "target token %d at position %zu is out of range: expected "
                          "0..%d, or < 0 for a token not counted in the loss (model vocab_size "
                          "%d)", tg[i], i, V - 1, V);
        c += tg[i] >= 0;
    }
    *count = c;
    return CT_OK;
}

/* (B,T) fits the reserve. */
static ct_status check_fit(const ct_model *m, int B, int T) {
    if (!m->B) return CT_ERR(CT_ERR_ARG, "ct_model_reserve was not called");
    if (B < 1 || T < 1 || T > m->cfg.n_ctx || (size_t)B * T > (size_t)m->B * m->T)
        return CT_ERR(CT_ERR_ARG, "batch B=%d T=%d does not fit the reserved B=%d T=%d", B, T,
                      m->B, m->T);
    return CT_OK;
}

/* (B,T) fits the reserve, training was reserved for, and (B,T) is the
 * positions' shape when they are set. */
static ct_status check_shape(const ct_model *m, int B, int T, bool training) {
    ct_status st = check_fit(m, B, T);
    if (st) return st;
    if (training && !m->training)
        return CT_ERR(CT_ERR_ARG, "model was reserved for inference, not training");
    if (m->pos_B && (B != m->pos_B || T != m->pos_T))
        return CT_ERR(CT_ERR_ARG, "batch B=%d T=%d does not match the positions set for B=%d "
                      "T=%d (ct_model_set_positions(m, NULL, 0, 0) clears them)", B, T, m->pos_B,
                      m->pos_T);
    return CT_OK;
}

ct_status ct_model_set_positions(ct_model *m, const int32_t *pos, int B, int T) {
    if (!pos) { /* back to 0..T-1 in every row */
        m->pos_B = m->pos_T = 0;
        m->acts.look_T = 0; /* the window's rows are built again for them */
        return CT_OK;
    }
    ct_status st = check_fit(m, B, T);
    if (st) return st;
    for (int b = 0; b < B; b++) {
        const int32_t *p = pos + (size_t)b * T;
        if (p[0] != 0)
            return CT_ERR(CT_ERR_ARG, "position at row %d, column 0 is %d: expected 0 (a row "
                          "starts an example)", b, p[0]);
        for (int t = 1; t < T; t++) {
            if (p[t] != 0 && p[t] != p[t - 1] + 1)
                return CT_ERR(CT_ERR_ARG, "position at row %d, column %d is %d: expected 0 (an "
                              "example starts) or %d (the previous plus 1)", b, t, p[t],
                              p[t - 1] + 1);
        }
    }
    ct_be_upload(m->be, m->acts.pos, pos, (size_t)B * T * sizeof(int32_t));
    if (m->acts.look) look_upload(m, pos, B, T); /* each example's window */
    m->acts.look_T = 0;
    m->pos_B = B;
    m->pos_T = T;
    return CT_OK;
}

/* Upload the batch's token ids into the arena; *din, *dtg are their device
 * copies (dtg NULL when targets is). */
static void upload_tokens(ct_model *m, const int32_t *inputs, const int32_t *targets, size_t N,
                          const int32_t **din, const int32_t **dtg) {
    ct_be_upload(m->be, m->acts.tok_in, inputs, N * sizeof(int32_t));
    *din = m->acts.tok_in;
    *dtg = NULL;
    if (targets) {
        ct_be_upload(m->be, m->acts.tok_tg, targets, N * sizeof(int32_t));
        *dtg = m->acts.tok_tg;
    }
}

/* Seconds between two points of the backend's stream. */
static double be_seconds(ct_model *m, const ct_event *a, const ct_event *b) {
    return m->be->i->event_elapsed(m->be, a, b);
}

ct_status ct_model_forward(ct_model *m, const int32_t *inputs, const int32_t *targets, int B,
                           int T, float *mean_loss) {
    ct_status st;
    size_t N = (size_t)B * T;
    if ((st = check_shape(m, B, T, false))) return st;
    size_t count = 0;
    if ((st = check_tokens(m, inputs, N, "input"))) return st;
    if ((st = check_targets(m, targets, N, &count))) return st;
    const int32_t *din, *dtg;
    upload_tokens(m, inputs, targets, N, &din, &dtg);
    forward_body(m, din, B, T, false);
    *mean_loss = (float)head_forward(m, dtg, (int)N, count, false, 0.0f, NULL);
    return m->be->i->synchronize(m->be);
}

ct_status ct_model_forward_backward(ct_model *m, const int32_t *inputs, const int32_t *targets,
                                    int B, int T, float grad_weight, float *mean_loss) {
    return ct_model_forward_backward_timed(m, inputs, targets, B, T, grad_weight, mean_loss, NULL);
}

/* Checks a training pass and enqueues it: upload, forward, head (loss and its
 * gradient), backward, with events ev[0..3] at its start, after the blocks,
 * after the head and at its end. *mean_loss is the head's (0 when queued:
 * the loss sum went to the device accumulator). */
static ct_status pass_enqueue(ct_model *m, const int32_t *inputs, const int32_t *targets, int B,
                              int T, float grad_weight, ct_event ev[4], float *mean_loss) {
    ct_status st;
    size_t N = (size_t)B * T;
    if ((st = check_shape(m, B, T, true))) return st;
    size_t count = 0;
    if ((st = check_tokens(m, inputs, N, "input"))) return st;
    if ((st = check_targets(m, targets, N, &count))) return st;
    ct_backend *be = m->be;
    if (m->queued && !m->q_open) { /* a new step: its sums start at 0 (queued, no wait) */
        be->i->memset(be, m->acts.step_acc, 0, 2 * sizeof(double));
        m->q_open = true;
    }
    be->i->event_record(be, &ev[0]);
    m->head_bwd_s = 0;
    /* dropout applies in this pass (and its backward), the adapters' too */
    model_drop_begin(m, T);
    if (m->lora) m->lora->dropping = true;
    const int32_t *din, *dtg;
    upload_tokens(m, inputs, targets, N, &din, &dtg);
    forward_body(m, din, B, T, true);
    be->i->event_record(be, &ev[1]);
    /* the mean is over the counted targets; none counted: loss 0, no gradient */
    float dloss = count ? grad_weight / (float)count : 0.0f;
    *mean_loss = (float)head_forward(m, dtg, (int)N, count, true, dloss, NULL);
    be->i->event_record(be, &ev[2]);
    backward_body(m, din, B, T);
    if (m->lora) m->lora->dropping = false;
    m->dropping = false;
    be->i->event_record(be, &ev[3]);
    return CT_OK;
}

/* The trace's spans of a pass timed from its events. */
static void pass_trace(ct_model *m, const ct_event ev[4], double fwd, double bwd) {
    ct_trace *tr = ct_ctx_trace(m->ctx);
    if (!tr) return;
    double t1 = ev[0].t + be_seconds(m, &ev[0], &ev[1]), t2 = ev[0].t + fwd;
    ct_trace_span(tr, "forward", "model", CT_TRACE_TID_MAIN, ev[0].t, t1, -1);
    ct_trace_span(tr, "head", "model", CT_TRACE_TID_MAIN, t1, t2, -1);
    ct_trace_span(tr, "backward", "model", CT_TRACE_TID_MAIN, t2, t2 + bwd, -1);
}

ct_status ct_model_forward_backward_timed(ct_model *m, const int32_t *inputs,
                                          const int32_t *targets, int B, int T,
                                          float grad_weight, float *mean_loss,
                                          ct_model_timing *timing) {
    ct_status st;
    ct_event ev[4];
    CT_ASSERT(!m->queued);
    if ((st = pass_enqueue(m, inputs, targets, B, T, grad_weight, ev, mean_loss))) return st;
    ct_backend *be = m->be;
    if ((st = be->i->synchronize(be))) return st;
    double fwd = be_seconds(m, &ev[0], &ev[2]), bwd = be_seconds(m, &ev[2], &ev[3]);
    /* the head's dX and dW GEMMs ran inside the forward's chunk loop: they are backward work */
    if (timing) *timing = (ct_model_timing){fwd - m->head_bwd_s, bwd + m->head_bwd_s};
    pass_trace(m, ev, fwd, bwd);
    return CT_OK;
}

/* Time what the queued passes kept: each head backward pair moves its time
 * from forward to backward; each finished pass adds its split (and its trace
 * spans) and is dropped. A pass still being enqueued stays. */
static void queue_time(ct_model *m) {
    for (int i = 0; i + 1 < m->n_qev; i += 2) {
        double dt = be_seconds(m, &m->q_ev[i], &m->q_ev[i + 1]);
        m->q_fwd_s -= dt;
        m->q_bwd_s += dt;
    }
    m->n_qev = 0;
    int kept = 0;
    for (int i = 0; i < m->n_q; i++) {
        model_queued *q = &m->q[i];
        if (!q->done) {
            m->q[kept++] = *q;
            continue;
        }
        double fwd = be_seconds(m, &q->e[0], &q->e[2]), bwd = be_seconds(m, &q->e[2], &q->e[3]);
        m->q_fwd_s += fwd;
        m->q_bwd_s += bwd;
        pass_trace(m, q->e, fwd, bwd);
    }
    m->n_q = kept;
}

ct_status ct_model_forward_backward_queued(ct_model *m, const int32_t *inputs,
                                           const int32_t *targets, int B, int T,
                                           float grad_weight) {
    ct_status st;
    if (m->n_q + 1 > m->cap_q) {
        int cap = m->cap_q ? 2 * m->cap_q : 8;
        model_queued *q = realloc(m->q, (size_t)cap * sizeof *q);
        if (!q) return CT_ERR(CT_ERR_OOM, "out of memory queueing a micro-batch");
        m->q = q;
        m->cap_q = cap;
    }
    if (m->n_qev + 4 * (m->n_q + 1) > MODEL_QUEUED_EVENTS) queue_time(m);
    model_queued *q = &m->q[m->n_q++];
    q->done = false;
    float unused;
    m->queued = true;
    st = pass_enqueue(m, inputs, targets, B, T, grad_weight, q->e, &unused);
    m->queued = false;
    if (st) {
        m->n_q--; /* nothing was enqueued (the checks come first) */
        return st;
    }
    q->done = true;
    return CT_OK;
}

ct_status ct_model_step_read(ct_model *m, double *loss_sum, double *grad_sumsq,
                             ct_model_timing *timing) {
    ct_backend *be = m->be;
    double acc[2] = {0, 0};
    if (!m->training || !m->acts.step_acc)
        return CT_ERR(CT_ERR_ARG, "model was reserved for inference, not training");
    if (!m->q_open) /* no pass queued since the last read: no loss */
        be->i->memset(be, m->acts.step_acc, 0, sizeof acc);
    size_t n = ct_model_trainable_numel(m);
    ct_be_reduce_add(be, m->acts.step_acc + 1, ct_model_trainable_grads(m), n, true);
    /* the step's one wait: everything queued before it is done after it */
    ct_be_download(be, acc, m->acts.step_acc, sizeof acc);
    ct_status st = be->i->synchronize(be);
    m->q_open = false;
    queue_time(m);
    if (timing) *timing = (ct_model_timing){m->q_fwd_s, m->q_bwd_s};
    m->q_fwd_s = m->q_bwd_s = 0;
    if (st) return st;
    *loss_sum = acc[0];
    *grad_sumsq = acc[1];
    return CT_OK;
}

ct_status ct_model_logits(ct_model *m, const int32_t *inputs, int B, int T, float *logits) {
    ct_status st;
    if ((st = check_shape(m, B, T, false))) return st;
    if ((st = check_tokens(m, inputs, (size_t)B * T, "input"))) return st;
    const int32_t *din, *dtg;
    upload_tokens(m, inputs, NULL, (size_t)B * T, &din, &dtg);
    forward_body(m, din, B, T, false);
    head_forward(m, NULL, B * T, 0, false, 0.0f, logits);
    return m->be->i->synchronize(m->be);
}
