/*
 * A stand-in for libcublasLt for tests/gpu/cuda_lt_plans.cu: the entry
 * points src/backend/cuda/cuda_lt.cu loads, with the header's own
 * signatures, doing no arithmetic. It counts what is created and destroyed,
 * keeps the attributes set on each descriptor and preference, and records
 * what each cublasLtMatmul was given (the pointers, the bias and aux
 * pointers on the descriptor at that moment, the algorithm), so the test can
 * see which calls asked the heuristic and what each GEMM would have run
 * with. The heuristic "finds no kernel" when D has 24 rows (OC = 24). Built
 * as libcublasLt.so.<major> in a directory of its own, found through
 * LD_LIBRARY_PATH. Not thread-safe (one test thread).
 */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

/* What the test reads back (fake_lt_state). */
typedef struct fake_lt {
    int handles, descs, layouts, prefs;        /* live */
    int desc_made, heuristics, matmuls;        /* so far */
    /* the last matmul */
    const void *A, *B, *C, *bias, *aux;
    void *D;
    uint64_t algo_rows, d_rows;                /* the algorithm's tag, D's rows */
    uint32_t al_a;                             /* the A alignment its plan was asked with */
} fake_lt;

static fake_lt g;
static int g_handle;

typedef struct fdesc {
    const void *bias, *aux;
} fdesc;
typedef struct flayout {
    uint64_t rows, cols;
} flayout;
typedef struct fpref {
    uint32_t al_a;
} fpref;

__attribute__((visibility("default"))) fake_lt *fake_lt_state(void) { return &g; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    g.handles++;
    *h = (cublasLtHandle_t)&g_handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    (void)h;
    g.handles--;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct,
                                        cudaDataType_t st) {
    (void)ct, (void)st;
    fdesc *f = calloc(1, sizeof *f);
    if (!f) return CUBLAS_STATUS_ALLOC_FAILED;
    g.descs++, g.desc_made++;
    *d = (cublasLtMatmulDesc_t)f;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    g.descs--;
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    fdesc *f = (fdesc *)d;
    if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER && size == sizeof(void *))
        memcpy(&f->bias, buf, size);
    if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER && size == sizeof(void *))
        memcpy(&f->aux, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    (void)type, (void)ld;
    flayout *f = calloc(1, sizeof *f);
    if (!f) return CUBLAS_STATUS_ALLOC_FAILED;
    f->rows = rows, f->cols = cols;
    g.layouts++;
    *l = (cublasLtMatrixLayout_t)f;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    g.layouts--;
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    fpref *f = calloc(1, sizeof *f);
    if (!f) return CUBLAS_STATUS_ALLOC_FAILED;
    g.prefs++;
    *p = (cublasLtMatmulPreference_t)f;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    g.prefs--;
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size) {
    if (attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && size == sizeof(uint32_t))
        memcpy(&((fpref *)p)->al_a, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}
/* The algorithm carries D's rows and the A alignment asked (data[0], [1]),
 * so a GEMM run with another plan's algorithm shows. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t p, int want,
                                              cublasLtMatmulHeuristicResult_t res[], int *found) {
    (void)h, (void)d, (void)A, (void)B, (void)C, (void)want;
    g.heuristics++;
    uint64_t rows = ((flayout *)D)->rows;
    if (rows == 24) {
        *found = 0;
        return CUBLAS_STATUS_SUCCESS;
    }
    memset(&res[0], 0, sizeof res[0]);
    res[0].algo.data[0] = rows;
    res[0].algo.data[1] = ((fpref *)p)->al_a;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                              cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t stream) {
    (void)h, (void)alpha, (void)Ad, (void)Bd, (void)beta, (void)Cd, (void)ws, (void)ws_bytes,
        (void)stream;
    g.matmuls++;
    g.A = A, g.B = B, g.C = C, g.D = D;
    g.bias = ((fdesc *)d)->bias, g.aux = ((fdesc *)d)->aux;
    g.algo_rows = algo->data[0];
    g.al_a = (uint32_t)algo->data[1];
    g.d_rows = ((flayout *)Dd)->rows;
    return CUBLAS_STATUS_SUCCESS;
}
