/*
 * cuBLASLt for the CUDA backend's forward GEMMs with an epilogue: the bias
 * added inside the GEMM (CUBLASLT_EPILOGUE_BIAS) and, for GPT-2's MLP, bias
 * then GELU with the pre-activation written beside the output
 * (CUBLASLT_EPILOGUE_GELU_AUX_BIAS). libcublasLt is loaded with dlopen when
 * the backend starts, as libcublas is (cuda_common.cuh says why), and only
 * for run.device=cuda; CT_CUDA_GEMM=cublas leaves it unloaded. This file runs
 * one Lt GEMM and nothing else: which calls take it, and the check of each
 * configuration against the plain cuBLAS path before its first use, are
 * cuda_matmul.cu's. A GEMM's plan (its descriptor, matrix layouts and the
 * heuristic's algorithm) is made at the first call of its key
 * (cuda_lt_cache.h: configuration, shape, alignments) and kept on the
 * backend's state until the backend is freed, so a step's repeated shapes
 * ask the heuristic once; the bias and aux pointers are set on the kept
 * descriptor at each call. Only plans that worked are kept: a refusal is
 * met again, as before, at the next call (tests/gpu/cuda_lt_plans.cu runs
 * this file against a stand-in libcublasLt, no GPU needed). Leaves out: Lt
 * for the backward (DGELU, BGRAD) and bf16 outputs.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

/* The entry points, typed by the header's own declarations. */
typedef struct lt_fns {
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
} lt_fns;

/* A kept GEMM: out^T (OC,N) = op(W) x inp^T in column-major terms. */
typedef struct lt_plan {
    cublasLtMatmulDesc_t desc; /* compute type, transposes, epilogue, aux ld */
    cublasLtMatrixLayout_t la, lb, ld; /* W (C,OC), inp^T (C,N), out^T and C (OC,N) */
    cublasLtMatmulAlgo_t algo; /* the heuristic's first choice */
} lt_plan;

/* Destroy what p holds (any part may be NULL) and empty it. */
static void plan_free(const lt_fns *f, lt_plan *p) {
    if (p->ld) f->layout_destroy(p->ld);
    if (p->lb) f->layout_destroy(p->lb);
    if (p->la) f->layout_destroy(p->la);
    if (p->desc) f->desc_destroy(p->desc);
    memset(p, 0, sizeof *p);
}

void cuda_lt_release(cuda_state *s) {
    const lt_fns *f = (const lt_fns *)s->lt_fns;
    lt_plan *plans = (lt_plan *)s->lt_plans;
    cuda_lt_cache *c = &s->lt_cache;
    if (f && plans) {
        for (int i = 0; i < CUDA_LT_CACHE_SIZE; i++)
            if (cuda_lt_cache_live(c, i)) plan_free(f, &plans[i]);
        if (c->tick)
            ct_log(CT_LOG_DEBUG, "cuBLASLt plans: %llu calls found theirs, %llu made one, %llu "
                   "made way", (unsigned long long)c->hits, (unsigned long long)c->misses,
                   (unsigned long long)c->evictions);
    }
    free(plans);
    memset(c, 0, sizeof *c);
    if (f && s->lt) f->destroy((cublasLtHandle_t)s->lt);
    free(s->lt_fns);
    if (s->lt_lib) dlclose(s->lt_lib);
    s->lt = s->lt_fns = s->lt_lib = s->lt_plans = NULL;
}

static void lt_off(cuda_state *s, const char *why) {
    ct_log(CT_LOG_INFO, "cuBLASLt is off (%s): the GEMMs add their bias and GELU in separate "
           "kernels", why);
    cuda_lt_release(s);
}

void cuda_lt_load(cuda_state *s) {
    const char *env = getenv("CT_CUDA_GEMM");
    if (env && strcmp(env, "cublas") == 0) return; /* asked for: no line */
    char so[256], why[512];
    s->lt_lib = cuda_lib_open("libcublasLt", so, sizeof so);
    if (!s->lt_lib) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "cannot load %s: %s", so, e ? e : "not found");
        lt_off(s, why);
        return;
    }
    lt_fns *f = (lt_fns *)calloc(1, sizeof *f);
    if (!f) {
        lt_off(s, "out of memory");
        return;
    }
    s->lt_fns = f;
    s->lt_plans = calloc(CUDA_LT_CACHE_SIZE, sizeof(lt_plan));
    if (!s->lt_plans) {
        lt_off(s, "out of memory");
        return;
    }
    struct {
        void **slot;
        const char *sym;
    } syms[] = {{(void **)&f->create, "cublasLtCreate"},
                {(void **)&f->destroy, "cublasLtDestroy"},
                {(void **)&f->desc_create, "cublasLtMatmulDescCreate"},
                {(void **)&f->desc_destroy, "cublasLtMatmulDescDestroy"},
                {(void **)&f->desc_set, "cublasLtMatmulDescSetAttribute"},
                {(void **)&f->layout_create, "cublasLtMatrixLayoutCreate"},
                {(void **)&f->layout_destroy, "cublasLtMatrixLayoutDestroy"},
                {(void **)&f->pref_create, "cublasLtMatmulPreferenceCreate"},
                {(void **)&f->pref_destroy, "cublasLtMatmulPreferenceDestroy"},
                {(void **)&f->pref_set, "cublasLtMatmulPreferenceSetAttribute"},
                {(void **)&f->heuristic, "cublasLtMatmulAlgoGetHeuristic"},
                {(void **)&f->matmul, "cublasLtMatmul"}};
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        *syms[i].slot = dlsym(s->lt_lib, syms[i].sym);
        if (!*syms[i].slot) {
            snprintf(why, sizeof why, "%s lacks %s", so, syms[i].sym);
            lt_off(s, why);
            return;
        }
    }
    cublasLtHandle_t h = NULL;
    cublasStatus_t cs = f->create(&h);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, sizeof why, "cublasLtCreate: status %d", (int)cs);
        lt_off(s, why);
        return;
    }
    s->lt = h;
}

/* The largest power of two (at most 256) that divides p's address: what the
 * heuristic may assume of a matrix's alignment (its default, 256, would let
 * it pick a kernel that reads a weight at an odd offset of the flat buffer
 * with wide loads). */
static uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

/* Make plan p for key k (the caller's bias and aux pointers set on it, as
 * the heuristic may read them): the descriptor, the layouts and the
 * heuristic's first algorithm for k's alignments. On a refusal p is left
 * empty and the status of the step that refused comes back
 * (CUBLAS_STATUS_NOT_SUPPORTED: no kernel for this shape and alignments). */
static cublasStatus_t plan_make(const cuda_state *s, const lt_fns *f, lt_plan *p,
                                const cuda_lt_key *k, const float *bias, float *pre) {
    bool bf16 = k->cfg == CUDA_LT_BIAS_BF16 || k->cfg == CUDA_LT_GELU_BF16;
    bool gelu = k->cfg == CUDA_LT_GELU || k->cfg == CUDA_LT_GELU_BF16;
    cudaDataType ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(p, 0, sizeof *p);
    /* fp32 compute and scale: fp32 inputs stay fp32 (TF32 would be
     * CUBLAS_COMPUTE_32F_FAST_TF32), bf16 ones multiply exactly and sum in fp32 */
    cublasStatus_t st = f->desc_create(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    /* column-major, as the plain path: out^T (OC,N) = op_T(W (C,OC)) x inp^T (C,N) */
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epi = gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS;
    int64_t aux_ld = k->OC;
    uint64_t ws = CT_CUDA_CUBLAS_WS_BYTES;
    uint32_t al_w = k->al_w, al_x = k->al_x, al_o = k->al_o;
#define LT_TRY(call)                                                                           \
    do {                                                                                       \
        if (st == CUBLAS_STATUS_SUCCESS) st = (call);                                          \
    } while (0)
    LT_TRY(f->desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(f->desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_TRY(f->desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    /* the bias (OC) runs along D's rows (fp32: D's type); the aux matrix
     * (pre-activation, D's type, fp32) is (OC,N) with leading dimension OC */
    LT_TRY(f->desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (gelu) {
        LT_TRY(f->desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre));
        LT_TRY(f->desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                           sizeof aux_ld));
    }
    LT_TRY(f->layout_create(&p->la, ab, (uint64_t)k->C, (uint64_t)k->OC, k->C));
    LT_TRY(f->layout_create(&p->lb, ab, (uint64_t)k->C, (uint64_t)k->N, k->C));
    LT_TRY(f->layout_create(&p->ld, CUDA_R_32F, (uint64_t)k->OC, (uint64_t)k->N, k->OC));
    LT_TRY(f->pref_create(&pref));
    LT_TRY(f->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT_TRY(f->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w, sizeof al_w));
    LT_TRY(f->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_x, sizeof al_x));
    LT_TRY(f->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_o, sizeof al_o));
    LT_TRY(f->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_o, sizeof al_o));
    LT_TRY(f->heuristic((cublasLtHandle_t)s->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1,
                        &res, &found));
#undef LT_TRY
    if (st == CUBLAS_STATUS_SUCCESS && found < 1) st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (pref) f->pref_destroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS) p->algo = res.algo;
    else plan_free(f, p);
    return st;
}

cublasStatus_t cuda_lt_gemm(ct_backend *be, bool bf16, bool gelu, float *out, float *pre,
                            const void *weight, const void *inp, const float *bias, int N, int C,
                            int OC) {
    cuda_state *s = cuda_st(be);
    const lt_fns *f = (const lt_fns *)s->lt_fns;
    lt_plan *plans = (lt_plan *)s->lt_plans;
    if (!s->lt || !f || !plans) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!bias) return CUBLAS_STATUS_INVALID_VALUE;
    cuda_lt_key k;
    memset(&k, 0, sizeof k);
    k.cfg = gelu ? (bf16 ? CUDA_LT_GELU_BF16 : CUDA_LT_GELU)
                 : (bf16 ? CUDA_LT_BIAS_BF16 : CUDA_LT_BIAS);
    k.N = N, k.C = C, k.OC = OC;
    k.al_w = align_of(weight), k.al_x = align_of(inp), k.al_o = align_of(out);
    k.al_bias = align_of(bias), k.al_aux = gelu ? align_of(pre) : 0;
    int i = cuda_lt_cache_find(&s->lt_cache, &k);
    if (i < 0) {
        lt_plan made;
        cublasStatus_t st = plan_make(s, f, &made, &k, bias, pre);
        if (st != CUBLAS_STATUS_SUCCESS) return st; /* not kept: asked again next time */
        bool evicted;
        i = cuda_lt_cache_claim(&s->lt_cache, &k, &evicted);
        if (evicted) plan_free(f, &plans[i]);
        plans[i] = made;
    }
    /* this call's pointers on the kept descriptor: the matmul reads them
     * when it is enqueued (one host thread, one stream: no other call can
     * change them in between) */
    lt_plan *p = &plans[i];
    cublasStatus_t st = f->desc_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (gelu && st == CUBLAS_STATUS_SUCCESS)
        st = f->desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof pre);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    float one = 1.0f, zero = 0.0f;
    return f->matmul((cublasLtHandle_t)s->lt, p->desc, &one, weight, p->la, inp, p->lb, &zero,
                     out, p->ld, out, p->ld, &p->algo, s->blas_ws, CT_CUDA_CUBLAS_WS_BYTES,
                     cuda_stream(be));
}
