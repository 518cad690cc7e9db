/*
 * Internal layout of ct_model, shared by model.c (table, memory, forward,
 * backward), decode.c (KV-cache inference) and hf.c (Hugging Face import and
 * export). Not installed.
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

/* Activations of one block kept for backward. Shapes use N = B*T, F = n_ffn. */
typedef struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
    float *qkv;                       /* (N,3C) */
    float *atty;                      /* (N,C) attention output before c_proj */
    float *lse;                       /* (B,NH,T) */
    float *res2;                      /* (N,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
    float *fch, *fch_gelu;            /* (N,F), (N,F) */
    float *res3;                      /* (N,C) residual after the MLP */
} layer_acts;

typedef struct model_acts {
    float *encoded;                   /* (N,C) */
    layer_acts *layers;               /* [L] */
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
    int B, T, chunk; /* reserved shape; chunk = rows per logits chunk */
    bool training;
    ct_arena arena;
    model_acts acts;
    decode_state dec;
};

static inline float *model_p(ct_model *m, int idx) {
    return idx < 0 ? NULL : m->params + m->table[idx].offset;
}
static inline float *model_g(ct_model *m, int idx) {
    return idx < 0 || !m->grads ? NULL : m->grads + m->table[idx].offset;
}

/* Build the parameter table for cfg (allocates m->table, m->layers). */
ct_status model_build_table(ct_model *m);

#endif
