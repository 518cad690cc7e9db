/*
 * Internal layout of ct_model, shared by model.c (config, table, memory plan),
 * model_train.c (forward, backward, recompute), decode.c (KV-cache inference)
 * and hf.c (Hugging Face import and export). Not installed.
 */
#ifndef CT_MODEL_IMPL_H
#define CT_MODEL_IMPL_H

#include "core/ctx.h"
#include "ctrain/model.h"

/* Indices into the parameter table for one block; -1 where the variant has no
 * such tensor (e.g. no biases). */
typedef struct layer_idx {
    int ln1_w, ln1_b;
    int qkv_w, qkv_b;   /* (3C, C) fused q,k,v as HF GPT-2's c_attn */
    int proj_w, proj_b; /* (C, C) */
    int ln2_w, ln2_b;
    int fc_w, fc_b;         /* (F, C) */
    int fcproj_w, fcproj_b; /* (C, F) */
} layer_idx;

/* Activations of one block kept for backward. Shapes use N = B*T, F = n_ffn.
 * The tensors are stored in the model's activation dtype (opts.act_dtype):
 * float when fp32, bf16 bit patterns (uint16_t) when bf16, hence void *.
 * Which ones exist depends on the recompute policy (NULL when dropped):
 *   none:  all of them;
 *   light: all but ln1, ln2 and fch_gelu (re-derived in backward);
 *   full:  only res3, the residual stream (the block input of the next block).
 * The statistics are fp32 whatever the dtype (they are small and the
 * backward divides by them); full drops them too. */
typedef struct layer_acts {
    void *ln1;                     /* (N,C) */
    void *qkv;                     /* (N,3C) */
    void *atty;                    /* (N,C) attention output before c_proj */
    void *res2;                    /* (N,C) residual after attention */
    void *ln2;                     /* (N,C) */
    void *fch, *fch_gelu;          /* (N,F), (N,F) */
    void *res3;                    /* (N,C) residual after the MLP */
    float *ln1_mean, *ln1_rstd;    /* (N), (N) */
    float *lse;                    /* (B,NH,T) */
    float *ln2_mean, *ln2_rstd;    /* (N), (N) */
} layer_acts;

/* fp32 buffers one block's math runs on: what the kernels read and write.
 * For a layer, each field is its kept fp32 buffer when there is one, else the
 * shared work buffer (see block_view in model_train.c). */
typedef struct block_f32 {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
    float *qkv;                       /* (N,3C) */
    float *atty, *lse;                /* (N,C), (B,NH,T) */
    float *res2;                      /* (N,C) */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
    float *fch, *fch_gelu;            /* (N,F), (N,F) */
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
    float *res;                       /* (N,C) fp32 residual stream (bf16 storage only) */
    float *lnf, *lnf_mean, *lnf_rstd; /* (N,C), (N), (N) */
    float *losses;                    /* (N) */
    float *logits;                    /* (chunk, V) */
    /* gradient scratch (training only) */
    float *dres;  /* (N,C) gradient of the residual stream */
    float *dln;   /* (N,C) */
    float *datty; /* (N,C) */
    float *dbig1; /* (N, max(F,3C)) */
    float *dbig2; /* (N,F) */
} model_acts;

typedef struct decode_state {
    int max_len, len;
    float *kcache, *vcache; /* (L, max_len, C) each */
    float *x, *ln, *qkv, *atty, *tmp, *fch, *fch_gelu; /* one row each */
    void *block; /* owns all of the above */
} decode_state;

struct ct_model {
    ct_ctx *ctx;
    const ct_kernels *k;
    ct_model_config cfg;
    ct_param *table;
    int n_table;
    size_t numel;
    int wte, wpe, lnf_w, lnf_b, head_w; /* table indices; -1 if absent */
    layer_idx *layers;                  /* [L] */
    float *params;                      /* flat (numel) */
    float *grads;                       /* flat (numel) or NULL */
    /* activations */
    ct_model_opts opts; /* recompute policy and activation dtype */
    int B, T, chunk; /* reserved shape; chunk = rows per logits chunk */
    bool training;
    ct_arena arena;
    model_acts acts;
    decode_state dec;
    ct_grad_ready_fn grad_hook; /* ct_model_set_grad_hook; NULL: none */
    void *grad_hook_user;
};

static inline float *model_p(ct_model *m, int idx) {
    return idx < 0 ? NULL : m->params + m->table[idx].offset;
}
static inline float *model_g(ct_model *m, int idx) {
    return idx < 0 || !m->grads ? NULL : m->grads + m->table[idx].offset;
}

/* Build the parameter table for cfg (allocates m->table, m->layers). */
ct_status model_build_table(ct_model *m);

/* Write one zero per 4 KiB across [p, p+bytes) so every page is resident
 * before the first step (no page faults inside a step). The memory must
 * already hold zeros (ct_alloc zero-fills), so contents do not change.
 * Borrows p. */
void model_touch_pages(void *p, size_t bytes);

#endif
