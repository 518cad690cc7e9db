/*
 * Internal layout of ct_model, shared by model.c (config, table, memory plan),
 * model_train.c (forward, backward, recompute), decode.c (KV-cache inference)
 * and hf.c (Hugging Face import and export). Not installed.
 */
#ifndef CT_MODEL_IMPL_H
#define CT_MODEL_IMPL_H

#include <math.h>

#include "backend/ctx.h"
#include "ctrain/model.h"

/* Indices into the parameter table for one block; -1 where the variant has no
 * such tensor (e.g. no biases). */
typedef struct layer_idx {
    int ln1_w, ln1_b;
    int qkv_w, qkv_b;   /* (QKVW, C) fused q,k,v: HF GPT-2's c_attn, or LLaMA's
                         * q_proj, k_proj, v_proj back to back (qkv_w is q's) */
    int proj_w, proj_b; /* (C, C) */
    int ln2_w, ln2_b;
    int fc_w, fc_b;         /* (FW, C): c_fc, or LLaMA's gate_proj, up_proj back to back */
    int fcproj_w, fcproj_b; /* (C, F) */
    int q_norm, k_norm;     /* (HS), (HS): Qwen3's and Gemma's per-head RMSNorm weights */
    int pan_w, pfn_w;       /* (C), (C): Gemma's norms after the attention and after the
                             * MLP (post_attention_layernorm, post_feedforward_layernorm) */
} layer_idx;

/* Width of the fused q,k,v rows: (NH + 2*NKV) * HS (3C for GPT-2). */
static inline int model_qkv_width(const ct_model_config *c) {
    return (c->n_head + 2 * c->n_kv_head) * ct_model_head_dim(c);
}
/* Width of the q part of those rows and of the attention output: NH * HS
 * (C unless the family sets its own head size). */
static inline int model_q_width(const ct_model_config *c) {
    return c->n_head * ct_model_head_dim(c);
}
/* Bytes of the model's RoPE table (ct_model_rope_inv_freq, HS/2 floats). */
static inline size_t model_rope_table_bytes(const ct_model_config *c) {
    int half = ct_model_head_dim(c) / 2;
    return (size_t)(half > 0 ? half : 1) * sizeof(float);
}
/* Compute cfg's RoPE table on the host and upload it to dst (device memory
 * of model_rope_table_bytes); local: the sliding layers' table. */
void model_upload_rope_table(ct_model *m, float *dst, bool local);
/* Set a LLaMA-layout config's family switches (Qwen2's biases, Qwen3's and
 * Gemma's q/k norms, Gemma's norms, GeGLU, embedding scale, window pattern
 * and local RoPE base); sizes and the window itself are the caller's. */
void model_family_defaults(ct_model_config *c, ct_family f);
/* Gemma's embedding scale: sqrt(n_embd) rounded to fp32, as its forward
 * makes the scale a float tensor. */
static inline float model_embed_scale(const ct_model_config *c) {
    return (float)sqrt((double)c->n_embd);
}
/* The RMSNorm weight offset of cfg's norms: 1 for Gemma's (1 + weight), else 0. */
static inline float model_wofs(const ct_model_config *c) { return c->norm_offset ? 1.0f : 0.0f; }
/* Width of the first MLP GEMM's output: F, or 2F for SwiGLU's and GeGLU's
 * gate and up. */
static inline int model_fc_width(const ct_model_config *c) {
    return c->mlp != CT_MLP_GELU ? 2 * c->n_ffn : c->n_ffn;
}

/* Whether block l is re-run in the backward (recompute full over every block,
 * or over the first opts.recompute_layers). */
bool model_layer_recomputed(const ct_model *m, int l);

/* Activations of one block kept for backward. Shapes use N = B*T, F = n_ffn.
 * The tensors are stored in the model's activation dtype (opts.act_dtype):
 * float when fp32, bf16 bit patterns (uint16_t) when bf16, hence void *;
 * ln1, ln2 and fch_gelu as their GEMMs' 16-bit operands under
 * model_acts.in16.
 * Which ones exist depends on the recompute policy (NULL when dropped):
 *   none:  all of them;
 *   light: all but ln1, ln2 and fch_gelu (re-derived in backward);
 *   full:  only res3, the residual stream (the block input of the next block);
 *          with opts.recompute_layers = K, that in the first K blocks only,
 *          the others keeping what none keeps.
 * The statistics are fp32 whatever the dtype (they are small and the
 * backward divides by them); full drops them too. */
typedef struct layer_acts {
    void *ln1;                     /* (N,C) */
    void *qkv;                     /* (N,QKVW) after RoPE when rotary; with q/k norms
                                    * before them (and RoPE): the GEMM's output */
    void *atty;                    /* (N,NQ) attention output before c_proj */
    void *res2;                    /* (N,C) residual after attention */
    void *ln2;                     /* (N,C) */
    void *fch, *fch_gelu;          /* (N,FW), (N,F): MLP pre-activation and activation */
    void *res3;                    /* (N,C) residual after the MLP */
    void *pa, *pf;                 /* (N,C), (N,C): sandwich norms' inputs, the o_proj
                                    * and down_proj outputs (Gemma) */
    float *pa_rstd, *pf_rstd;      /* (N), (N) their statistics */
    float *ln1_mean, *ln1_rstd;    /* (N), (N); no mean with RMSNorm */
    float *lse;                    /* (B,NH,T) */
    float *ln2_mean, *ln2_rstd;    /* (N), (N) */
} layer_acts;

/* fp32 buffers one block's math runs on: what the kernels read and write.
 * For a layer, each field is its kept fp32 buffer when there is one, else the
 * shared work buffer (see block_view in model_train.c). */
typedef struct block_f32 {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
    float *qkv;                       /* (N,QKVW) */
    float *atty, *lse;                /* (N,NQ), (B,NH,T) */
    float *res2;                      /* (N,C) */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
    float *fch, *fch_gelu;            /* (N,FW), (N,F) */
    float *pa, *pa_rstd, *pf, *pf_rstd; /* (N,C), (N), (N,C), (N): sandwich norms */
} block_f32;

typedef struct model_acts {
    void *encoded;                    /* (N,C) act dtype: the first block's input */
    layer_acts *layers;               /* [L] */
    /* One block's fp32 work set, shared by all layers: a field exists when
     * some layer's value is not kept or kept as bf16. ln1 and ln2 share one
     * buffer (each is re-derived or reloaded right before use); when
     * training, fch_gelu is the dbig2 gradient scratch (the forward does not
     * use it, and the backward reads gelu before it zeroes dbig2). */
    block_f32 work;
    /* Training under precision bf16/fp16 without adapters, recompute none:
     * the layers' ln1, ln2 and fch_gelu are kept as the 16-bit operands of
     * the GEMMs they feed (model_to16's rounding, which is all the weight
     * gradient reads), not in the activation dtype; their fp32 values live in
     * the work set for the forward only, and the backward reads nothing else
     * of them (the norms' backwards take the norm's input and statistics). */
    bool in16;
    float *res;                       /* (N,C) fp32 residual stream (bf16 storage only) */
    /* q/k norms: the attention's input (q and k normalised and turned, v
     * copied) and the heads' statistics, derived from the kept GEMM output
     * by the forward and again by the backward (bit for bit), for one block
     * at a time */
    float *qkn;                       /* (N,QKVW) */
    float *qk_rstd;                   /* (N,NH+NKV) */
    float *lnf, *lnf_mean, *lnf_rstd; /* (N,C), (N), (N) */
    float *losses;                    /* (N) */
    double *step_acc;                 /* (2), training: the queued step's loss sum and
                                       * gradient sum of squares (ct_model_step_read) */
    float *logits;                    /* (chunk, V) */
    int32_t *tok_in, *tok_tg;         /* (N), (N): the batch's token ids, uploaded */
    int32_t *pos;                     /* (N): ct_model_set_positions' positions, uploaded */
    float *rope_inv;                  /* (HS/2): RoPE's inverse frequencies, uploaded by
                                       * ct_model_reserve; NULL without RoPE */
    float *rope_inv_local;            /* (HS/2): the sliding layers' (Gemma); NULL without */
    int32_t *look;                    /* (N): sliding layers: how far back each query
                                       * sees, min(position, W - 1), the attention
                                       * kernels' positions; NULL without a window */
    int32_t *look_host;               /* (N) host scratch to build look in */
    int look_T;                       /* the T look holds positions 0..T-1 for (0: set
                                       * from ct_model_set_positions) */
    /* gradient scratch (training only) */
    float *dres;  /* (N,C) gradient of the residual stream */
    float *dln;   /* (N,C) */
    float *datty; /* (N,NQ) */
    float *dbig1; /* (N, max(F,QKVW)) */
    float *dbig2; /* (N,FW) */
    /* LoRA (NULL without adapters) */
    float *lora_h;    /* (L, nmod, N, r): A x of every adapter, kept for backward */
    float *lora_tmp;  /* (N, max adapted out): B h rows, then scaled dY rows */
    float *lora_dh;   /* (N, r) */
    float *lora_xd;   /* (N, max adapted in): the dropped-out input (dropout > 0) */
    /* adapters sharing a GEMM's input (lora_group_max: G of them, input width
     * GI; NULL when no GEMM has two): their A's stacked, the stacked product
     * x [A_1; ...; A_G]^T (forward) or the stacked dh (backward), and the
     * stacked A gradient (training) */
    float *lora_a_all;  /* (G r, GI) */
    float *lora_h_all;  /* (N, G r) */
    float *lora_da_all; /* (G r, GI) */
    float *lora_sink; /* (2 max(C,HS)): where frozen norms' weight gradients go (never read) */
    /* precision bf16, training, full model: the bf16 copy of one GEMM input
     * (a linear's or a head chunk's), rounded before its weight gradient */
    uint16_t *inp16;  /* (N, max(C,F)) */
    float *base_w;    /* (max GEMM weight span): a bf16 base matrix widened for one call */
    float *base_wpe;  /* (n_ctx, C): GPT-2's positions, widened beside wte */
} model_acts;

/* The four linear layers of a block (fused GEMMs; adapters sit on them). */
enum { LIN_QKV = 0, LIN_PROJ = 1, LIN_FC = 2, LIN_FCPROJ = 3 };

/* Linear layer `lin` of block l: its weight and bias table indices (bias -1
 * when the arch has none), input and output widths. */
typedef struct linear_shape {
    int w, b, in, out;
} linear_shape;
linear_shape model_linear_shape(const ct_model *m, int l, int lin);
/* out(N, out) = x(N, in) W^T + b, plus the layer's LoRA adapters: the one
 * place a block's GEMMs run (a bf16 base is widened by model_p). x16, when
 * not NULL, is x's 16-bit rounding kept by the model (model_acts.in16): the
 * bf16 GEMM reads it as its operand where the backend takes one
 * (matmul_forward_bf16_in16), else x is rounded as usual; same results. */
void model_linear_fwd(ct_model *m, int l, int lin, float *out, const float *x,
                      const uint16_t *x16, int N);
/* GPT-2's c_fc and its GELU in one backend call (matmul_gelu_forward):
 * pre(N, F) = x W^T + b, out(N, F) = gelu(pre). False, with nothing done,
 * when the backend has no such entry or a LoRA adapter adds to c_fc's output
 * before the GELU: the caller then runs model_linear_fwd and the GELU. */
bool model_linear_gelu_fwd(ct_model *m, int l, float *pre, float *out, const float *x,
                           const uint16_t *x16, int N);
/* dx(N, in) += dout W (+ the adapters' input gradient); dW, db += ... into
 * the gradient buffer (none for a frozen base); the adapters' dA, dB += ...;
 * x is the forward's input. Under precision bf16/fp16, x16 (not NULL) is x's
 * kept 16-bit rounding: the weight gradient reads it and x is not read
 * (adapters never come with one). */
void model_linear_bwd(ct_model *m, int l, int lin, float *dx, const float *dout, const float *x,
                      const uint16_t *x16, int N);
/* Whether model_linear_bwd of linear lin in layer l reads its input x: for
 * the weight gradient, or for an adapter's dA. A frozen LoRA base's linear
 * without an adapter reads only dout and W. */
bool model_linear_bwd_reads_x(ct_model *m, int l, int lin);

/* Where module kind k sits: its GEMM, its columns of that GEMM's fused output
 * [col0, col0+out), its input width and its base weight's table suffix. */
typedef struct lora_mod {
    const char *path; /* below the layer: "self_attn.q_proj", "attn.c_attn" */
    int gemm, col0, out, in;
} lora_mod;

/* The attached adapters. Adapter table entry 2*(l*nmod + s) is A of layer l,
 * slot s (the s-th targeted kind), entry 2*(...)+1 its B. */
typedef struct model_lora {
    ct_lora_opts o;
    float scale;          /* alpha / r */
    int nmod;             /* targeted kinds per layer */
    int kinds[8];         /* [nmod] the kinds, ascending */
    lora_mod mods[8];     /* [nmod] */
    int max_out, max_in;  /* over the targeted modules */
    ct_param *table;
    int n_table;
    size_t numel;
    float *params, *grads;
    bool dropping;        /* inside forward_backward: dropout applies (keyed as the
                           * model's dropout: its drop_key and drop_row0) */
    bool batch;           /* adapters sharing a GEMM's input run their A side as one
                           * GEMM when their inputs are equal (true unless a test
                           * asks for the per-module path) */
    int save_embed, save_head; /* modules_to_save: table indices of the trainable copies
                                * of embed_tokens and lm_head (after the A, B pairs); -1 */
} model_lora;

/* modules_to_save: the embedding and head matrices the passes read, (V, C)
 * each: an adapter's trainable copy when it has one, else the base's; and
 * the copies' gradients (NULL for the base's, which is frozen). */
const float *model_embed_w(ct_model *m);
float *model_embed_g(ct_model *m);
/* The embedding's forward (encoder_forward) into out (B,T,C): a bf16 base's
 * token table is read row by row (encoder_forward_wte16), never widened
 * whole; otherwise model_embed_w's fp32 table. */
void model_encoder_fwd(ct_model *m, float *out, const int32_t *inp, const int32_t *pos, int B,
                       int T, int pos0);
const float *model_head_copy(ct_model *m);
float *model_head_copy_g(ct_model *m);

/* Kind k of cfg's arch; false when k is out of range. */
bool lora_mod_of(const ct_model_config *c, int k, lora_mod *out);
/* Free the attached adapters (model_free; merge). */
void model_lora_free(ct_model *m);

/* Numel of the adapter for cfg and lo (0 when r == 0). */
size_t lora_numel(const ct_model_config *c, const ct_lora_opts *lo);
/* The most adapters lo targets on one GEMM of cfg (0 without adapters) and,
 * over the GEMMs that carry two or more, the widest input (*in; 0 when none
 * does): what the stacked buffers of model_acts are sized by. */
int lora_group_max(const ct_model_config *c, const ct_lora_opts *lo, int *in);
/* Choose between the batched A side (on, the default) and one GEMM per
 * adapter (the reference the batched path is tested against). */
void model_lora_set_batch(ct_model *m, bool on);
/* Add the adapters on GEMM `gemm` of layer l to its output out (N, OUTW),
 * given its input x (N, in); keeps A x in acts.lora_h. */
void model_lora_forward(ct_model *m, int l, int gemm, float *out, int OUTW, const float *x,
                        int N);
/* Whether an adapter sits on GEMM `gemm` (the same in every layer). */
bool model_lora_on(const ct_model *m, int gemm);
/* Backward of those adapters: dA, dB += ...; dx (N, in) += the adapters'
 * input gradient, given dout (N, OUTW) and the forward's x. */
void model_lora_backward(ct_model *m, int l, int gemm, float *dx, const float *dout, int OUTW,
                         const float *x, int N);

typedef struct decode_state {
    int max_len, len;
    float *kcache, *vcache; /* (L, max_len, NKV*HS) each; keys after RoPE */
    float *x, *ln, *qkv, *atty, *tmp, *fch, *fch_gelu; /* one row each */
    float *qkn, *qk_rstd;   /* one row, q/k norms only: qkv normalised */
    float *rope_inv;        /* (HS/2) RoPE's inverse frequencies; NULL without RoPE */
    float *rope_inv_local;  /* (HS/2) the sliding layers'; NULL without a window */
    float *logits;  /* (V) */
    int32_t *token; /* (1) the step's token id, uploaded */
    void *block; /* owns all of the above */
} decode_state;

/* A queued pass's events: e[0] start, e[1] blocks done, e[2] head done, e[3]
 * backward done (done: all four recorded). */
typedef struct model_queued {
    ct_event e[4];
    bool done;
} model_queued;
/* The most events queued passes keep before they are timed early (a wait):
 * well under the CUDA backend's ring of 4096. */
#define MODEL_QUEUED_EVENTS 1024

struct ct_model {
    ct_ctx *ctx;
    ct_backend *be; /* the context's backend when the model was made: every
                     * tensor below is its device memory */
    ct_model_config cfg;
    ct_param *table;
    int n_table;
    size_t numel;
    int wte, wpe, lnf_w, lnf_b, head_w; /* table indices; -1 if absent; head_w == wte when tied */
    char *gen_config;                   /* owned: the generation_config.json the model was
                                         * loaded with (written back as it was), or NULL */
    layer_idx *layers;                  /* [L] */
    float *params;                      /* flat (numel) */
    float *grads;                       /* flat (numel) or NULL (always with LoRA) */
    model_lora *lora;                   /* attached adapters or NULL */
    /* bf16 base storage (LoRA): params is NULL, the matrices live in params16,
     * the 1-D weights in fp32 in small */
    uint16_t *params16;                 /* (numel) bf16 bits, or NULL */
    float *small;                       /* fp32 1-D weights */
    size_t *small_off;                  /* [n_table] offset of a 1-D entry in small */
    size_t *span;                       /* [n_table] elements one GEMM reads from the entry:
                                         * the fused q,k,v or gate,up rows from the first */
    /* precision bf16/fp16: 16-bit copies of the matrices the GEMMs read (every 2-D
     * entry but GPT-2's wpe and an untied embedding), made from the fp32
     * master weights by ct_model_refresh_weights16, never per GEMM. NULL for
     * fp32, and with a bf16 LoRA base (its GEMMs read params16 as it is). */
    uint16_t *w16;                      /* (w16_numel) bf16 or fp16 bits */
    size_t w16_numel;
    size_t *w16_off;                    /* [n_table] an entry's offset in w16; SIZE_MAX: none */
    bool w16_fresh;                     /* w16 equals the master weights */
    /* activations */
    ct_model_opts opts; /* recompute policy, activation dtype, matmul precision */
    int B, T, chunk; /* reserved shape; chunk = rows per logits chunk */
    int pos_B, pos_T; /* shape of the positions in acts.pos; 0 when none are set */
    bool training;
    ct_arena arena;
    model_acts acts;
    decode_state dec;
    ct_grad_ready_fn grad_hook; /* ct_model_set_grad_hook; NULL: none */
    void *grad_hook_user;
    double head_bwd_s; /* seconds of the fused head's backward GEMMs in the last
                        * forward_backward (its time split counts them as backward) */
    /* queued micro-batches (ct_model_forward_backward_queued): their events,
     * timed by the step's read (the device accumulator is acts.step_acc) */
    bool queued;           /* inside a queued pass: head_forward keeps its events */
    bool q_open;           /* a queued step has begun: acts.step_acc holds its sums */
    model_queued *q;       /* [n_q] the queued passes */
    int n_q, cap_q;
    ct_event *q_ev;        /* [n_qev] the head backward's (start, end) event pairs */
    int n_qev, cap_qev;
    double q_fwd_s, q_bwd_s; /* the time split of passes already timed this step */
    /* dropout masks (dropout.c): the probabilities are cfg's */
    uint64_t drop_key;  /* the masks' key of the current pass */
    int64_t drop_row0;  /* global index of the batch's first row */
    bool drop_key_set;  /* ct_model_set_dropout_key was called; else drop_pass keys */
    uint64_t drop_pass; /* forward_backward calls: the key until one is set */
    bool dropping;      /* inside forward_backward: dropout applies */
    int drop_T;         /* the pass's sequence length (rows of T tokens from drop_row0) */
};

/* Dropout (dropout.c). The probability site s applies in the current pass:
 * its p while m->dropping, else 0 (no mask is drawn). */
float model_drop_p(const ct_model *m, ct_dropout_site s);
/* The mask key of site s of layer l (0 for the embedding) under m->drop_key. */
uint64_t model_drop_key(const ct_model *m, ct_dropout_site s, int l);
/* Start a training pass over rows of T tokens: m->dropping, and the pass's
 * key when none was set. */
void model_drop_begin(ct_model *m, int T);
/* Inverted dropout IN PLACE on x (B,T,C) at site s (embedding or residual)
 * of layer l, elements indexed from row0's first; nothing when the site's p
 * is 0. Applied to the gradient of x it is its own backward. */
void model_drop_rows(ct_model *m, float *out, const float *x, ct_dropout_site s, int l, int B,
                     int T);

/* Device memory of the model's backend (zero-filled, counted under tag;
 * NULL and ct_last_error on failure) and its release (NULL is fine). */
static inline void *model_buf_alloc(ct_model *m, size_t bytes, ct_tag tag) {
    return m->be->i->buf_alloc(m->be, bytes, tag);
}
static inline void model_buf_free(ct_model *m, void *p) {
    if (p) m->be->i->buf_free(m->be, p);
}

/* Initialise a tensor of n floats at device dst from the host: fill(x, n,
 * user) writes all n at once (the draws of torch's normal_ depend on how many
 * are asked for), into dst itself on a host-visible backend, else into a host
 * staging buffer that is then uploaded. CT_ERR_OOM when staging fails. */
typedef void (*model_fill_fn)(float *x, size_t n, void *user);
ct_status model_stage_fill(ct_model *m, float *dst, size_t n, model_fill_fn fill, void *user);

/* Host access to device memory for the edges (files, PEFT, hashing).
 * model_host_read: bytes at dev readable on the host: dev itself on a
 * host-visible backend, else a downloaded staging copy (*stage owns it).
 * model_host_write: where to write bytes bound for dev: dev itself, or a
 * staging buffer (*stage) that model_host_done uploads. model_host_done
 * (upload when writing) releases *stage; NULL stage does nothing. The
 * accessors return NULL (with ct_last_error) when staging fails. */
const void *model_host_read(ct_model *m, const void *dev, size_t bytes, void **stage);
void *model_host_write(ct_model *m, void *dev, size_t bytes, void **stage);
void model_host_done(ct_model *m, void *dev, size_t bytes, void *stage, bool upload);

/* An fp32 view of a bf16-stored base entry: 1-D weights from small, a matrix
 * widened into acts.base_w (acts.base_wpe for wpe), valid until the next call. */
float *weights_bf16_view(ct_model *m, int idx);
static inline float *model_p(ct_model *m, int idx) {
    if (idx < 0) return NULL;
    return m->params16 ? weights_bf16_view(m, idx) : m->params + m->table[idx].offset;
}
/* Precision bf16: the GEMMs read bf16 weights (and attention may run in bf16). */
static inline bool model_bf16(const ct_model *m) { return m->opts.precision == CT_PREC_BF16; }
/* Precision bf16 or fp16: the linears' and the head's GEMMs read 16-bit
 * inputs and the weights' 16-bit copies (w16: bf16 or fp16 bits); the three
 * helpers below pick the entries of the run's 16-bit type. Attention, norms
 * and the rest stay fp32 under fp16. */
static inline bool model_half(const ct_model *m) { return m->opts.precision != CT_PREC_FP32; }
/* dst(n) = the 16-bit type's rounding of src (f32_to_bf16 or f32_to_f16). */
static inline void model_to16(const ct_model *m, uint16_t *dst, const float *src, size_t n) {
    if (m->opts.precision == CT_PREC_FP16) m->be->i->f32_to_f16(m->be, dst, src, n);
    else m->be->i->f32_to_bf16(m->be, dst, src, n);
}
/* matmul_forward_bf16 or _f16 (backend.h). */
static inline void model_mm16_fwd(const ct_model *m, float *out, const float *inp,
                                  const uint16_t *w16, const float *bias, int N, int C, int OC) {
    if (m->opts.precision == CT_PREC_FP16)
        m->be->i->matmul_forward_f16(m->be, out, inp, w16, bias, N, C, OC);
    else
        m->be->i->matmul_forward_bf16(m->be, out, inp, w16, bias, N, C, OC);
}
/* matmul_backward_bf16 or _f16 (backend.h). */
static inline void model_mm16_bwd(const ct_model *m, float *dinp, float *dw, float *db,
                                  const float *dout, const uint16_t *inp16, const uint16_t *w16,
                                  int N, int C, int OC) {
    if (m->opts.precision == CT_PREC_FP16)
        m->be->i->matmul_backward_f16(m->be, dinp, dw, db, dout, inp16, w16, N, C, OC);
    else
        m->be->i->matmul_backward_bf16(m->be, dinp, dw, db, dout, inp16, w16, N, C, OC);
}
/* Whether table entry i is a matrix some GEMM reads (a linear's or the head). */
bool weights16_entry(const ct_model *t, int i);
/* Elements of the bf16 weight copies of t's table (entries weights16_entry). */
size_t weights16_numel(const ct_model *t);
/* The 16-bit weights a GEMM of precision bf16/fp16 reads for entry idx (a
 * matrix): its copy in w16, or a bf16 LoRA base itself (bf16 only:
 * ct_model_set_opts refuses fp16 over it). */
static inline const uint16_t *model_w16(const ct_model *m, int idx) {
    if (m->params16) return m->params16 + m->table[idx].offset;
    CT_ASSERT(m->w16 && m->w16_off[idx] != SIZE_MAX);
    return m->w16 + m->w16_off[idx];
}
/* Allocate the copies for precision bf16/fp16 (nothing when they exist, for fp32,
 * or with a bf16 base) and fill them; ct_model_set_opts calls it. */
ct_status weights16_alloc(ct_model *m);
/* Free them (NULL-safe). */
void weights16_free(ct_model *m);
/* The master weights changed (loaded, initialised, merged): refresh the
 * copies now, a frozen base's included. */
void model_weights_changed(ct_model *m);
static inline float *model_g(ct_model *m, int idx) {
    return idx < 0 || !m->grads ? NULL : m->grads + m->table[idx].offset;
}

/* The switches of the family, as calls into m->be (model_train.c):
 * norm: LayerNorm (weight w, bias b; mean, rstd) or RMSNorm (weight; rstd
 * only). Statistics may be NULL in the forward. w, b are table indices. */
void model_norm_fwd(const ct_model *m, float *out, float *mean, float *rstd, const float *inp,
                    int w, int b, int N);
/* The residual add and the norm after it in one pass: res = a + b (res may
 * be a or b), then the norm of res into out (and mean, rstd), the same bits
 * as the add followed by model_norm_fwd. */
void model_residual_norm_fwd(const ct_model *m, float *res, float *out, float *mean, float *rstd,
                             const float *a, const float *b, int w, int bias, int N);
/* dinp += ...; parameter gradients accumulate into m->grads. */
void model_norm_bwd(ct_model *m, float *dinp, const float *dout, const float *inp, int w, int b,
                    const float *mean, const float *rstd, int N);
/* Attention over fused qkv rows (model_qkv_width): GPT-2's multi-head is
 * grouped-query attention with as many KV heads as query heads. */
/* l is the layer (its attention-probability dropout in a training pass). */
void model_attn_fwd(const ct_model *m, int l, float *out, float *lse, const float *qkv, int B,
                    int T);
void model_attn_bwd(const ct_model *m, int l, float *dqkv, const float *dout, const float *qkv,
                    const float *out, const float *lse, int B, int T);
/* The MLP activation: GELU of fch (N,F), or SwiGLU of fch (N,2F) = [gate | up];
 * out (N,F). The backward adds into dfch (N,FW). */
void model_mlp_act_fwd(const ct_model *m, float *out, const float *fch, int N);
void model_mlp_act_bwd(const ct_model *m, float *dfch, const float *fch, const float *dout,
                       int N);

/* ct_model_init, with the fp32 parameter buffer only when alloc_params (a
 * bf16 LoRA base is read straight into lora_base16_alloc's buffers). */
ct_status model_init_impl(ct_model **out, ct_ctx *ctx, const ct_model_config *cfg,
                          bool alloc_params);
/* The weight store (weights.c). Bytes of a bf16-stored base for cfg
 * (matrices bf16, 1-D fp32) and the largest span one GEMM reads from the
 * table (elements). */
size_t weights_bf16_bytes(const ct_model *table_only);
size_t weights_max_span(const ct_model_config *c);
/* Allocate the bf16 base storage of m (params16, small, small_off, span). */
ct_status weights_bf16_alloc(ct_model *m);
/* Round m's fp32 weights to the bf16 store: matrices to params16, 1-D
 * weights kept fp32 in small; the fp32 buffer is freed. */
ct_status weights_to_bf16(ct_model *m);

/* Build the parameter table for cfg (allocates m->table, m->layers). */
ct_status model_build_table(ct_model *m);


#endif
