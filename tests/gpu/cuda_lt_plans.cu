/*
 * The CUDA backend's kept cuBLASLt plans (src/backend/cuda/cuda_lt.cu)
 * without a GPU: cuda_lt_load, cuda_lt_gemm and cuda_lt_release run against
 * a stand-in libcublasLt (fake_cublaslt.c, through LD_LIBRARY_PATH) that
 * records what each GEMM was given. Checks: a repeated shape asks the
 * heuristic once and makes one descriptor; every call's GEMM runs with its
 * own bias, aux (pre-activation) and matrix pointers, and with the algorithm
 * of its own plan; a change of configuration or of any alignment makes a new
 * plan; a shape with no kernel is refused with CUBLAS_STATUS_NOT_SUPPORTED
 * and nothing of it kept (the heuristic is asked again next time, as before
 * plans were kept); the table stays at 64 plans with more shapes; release
 * destroys every descriptor, layout and preference and the handle. No
 * arithmetic is checked here (the GPU tests and the first-use self-check
 * against plain cuBLAS do that).
 *
 * usage: cuda_lt_plans   (exit 0: every check passed)
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

typedef struct fake_lt {
    int handles, descs, layouts, prefs;
    int desc_made, heuristics, matmuls;
    const void *A, *B, *C, *bias, *aux;
    void *D;
    uint64_t algo_rows, d_rows;
    uint32_t al_a;
} fake_lt;

static int fails = 0;
#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            fails++;                                                               \
        }                                                                          \
    } while (0)

/* Addresses never dereferenced (the stand-in only records them), 256-aligned. */
static void *addr(uintptr_t k) { return (void *)(uintptr_t)(0x100000 + k * 0x10000); }

int main(void) {
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    ct_backend be;
    memset(&be, 0, sizeof be);
    be.state = s;
    cuda_lt_load(s);
    char so[64];
    snprintf(so, sizeof so, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    void *lib = dlopen(so, RTLD_NOW | RTLD_NOLOAD);
    fake_lt *(*state)(void) = lib ? (fake_lt * (*)(void)) dlsym(lib, "fake_lt_state") : NULL;
    if (!s->lt || !state) {
        fprintf(stderr, "cuda_lt_plans: the stand-in %s did not load (LD_LIBRARY_PATH?)\n", so);
        return 1;
    }
    fake_lt *g = state();
    const void *w = addr(1), *x = addr(2);
    float *o = (float *)addr(3), *o2 = (float *)addr(4), *pre = (float *)addr(5),
          *pre2 = (float *)addr(6);
    const float *b = (const float *)addr(7), *b2 = (const float *)addr(8);
    const cublasStatus_t ok = CUBLAS_STATUS_SUCCESS;

    /* the first call makes the plan; the second, with other pointers, reuses it */
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b, 32, 64, 128) == ok);
    CHECK(g->desc_made == 1 && g->heuristics == 1 && g->matmuls == 1);
    CHECK(g->bias == b && g->D == o && g->C == o && g->A == w && g->B == x);
    CHECK(g->descs == 1 && g->layouts == 3 && g->prefs == 0);
    CHECK(cuda_lt_gemm(&be, false, false, o2, NULL, x, w, b2, 32, 64, 128) == ok);
    CHECK(g->desc_made == 1 && g->heuristics == 1 && g->matmuls == 2);
    CHECK(g->bias == b2 && g->D == o2 && g->A == x && g->B == w && g->algo_rows == 128);

    /* bias+GELU: a plan of its own; the aux pointer follows the call */
    CHECK(cuda_lt_gemm(&be, false, true, o, pre, w, x, b, 32, 64, 128) == ok);
    CHECK(g->desc_made == 2 && g->heuristics == 2 && g->aux == pre && g->bias == b);
    CHECK(cuda_lt_gemm(&be, false, true, o2, pre2, w, x, b2, 32, 64, 128) == ok);
    CHECK(g->desc_made == 2 && g->heuristics == 2 && g->aux == pre2 && g->bias == b2);
    /* the bias-only plan again: its descriptor never had an aux pointer */
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b, 32, 64, 128) == ok);
    CHECK(g->heuristics == 2 && g->aux == NULL);
    /* bf16 inputs: another plan */
    CHECK(cuda_lt_gemm(&be, true, false, o, NULL, w, x, b, 32, 64, 128) == ok);
    CHECK(g->heuristics == 3);

    /* an alignment of any pointer the heuristic sees makes a new plan */
    const char *wc = (const char *)w;
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, wc + 4, x, b, 32, 64, 128) == ok);
    CHECK(g->heuristics == 4 && g->al_a == 4);
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b + 2, 32, 64, 128) == ok);
    CHECK(g->heuristics == 5 && g->al_a == 256 && g->bias == b + 2);
    CHECK(cuda_lt_gemm(&be, false, true, o, pre + 1, w, x, b, 32, 64, 128) == ok);
    CHECK(g->heuristics == 6 && g->aux == pre + 1);
    CHECK(cuda_lt_gemm(&be, false, false, o + 1, NULL, w, x, b, 32, 64, 128) == ok);
    CHECK(g->heuristics == 7);
    /* and the aligned call still finds its own */
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b, 32, 64, 128) == ok);
    CHECK(g->heuristics == 7 && g->al_a == 256 && g->algo_rows == 128);
    /* another shape: its own plan, its own algorithm */
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b, 32, 64, 256) == ok);
    CHECK(g->heuristics == 8 && g->algo_rows == 256 && g->d_rows == 256);

    /* no kernel: refused, nothing kept, asked again at the next call */
    int made = g->desc_made, live = g->descs, mm = g->matmuls;
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b, 32, 64, 24) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b, 32, 64, 24) ==
          CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(g->heuristics == 10 && g->desc_made == made + 2 && g->descs == live &&
          g->matmuls == mm && g->prefs == 0);
    /* no bias: refused before anything, as before */
    CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, NULL, 32, 64, 128) ==
          CUBLAS_STATUS_INVALID_VALUE);

    /* more shapes than slots: at most CUDA_LT_CACHE_SIZE plans live */
    for (int n = 1; n <= 100; n++)
        CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b, n, 64, 128) == ok);
    CHECK(g->descs == CUDA_LT_CACHE_SIZE && g->layouts == 3 * CUDA_LT_CACHE_SIZE);
    int h = g->heuristics;
    for (int n = 100; n > 100 - CUDA_LT_CACHE_SIZE; n--) /* the latest 64 stayed */
        CHECK(cuda_lt_gemm(&be, false, false, o, NULL, w, x, b, n, 64, 128) == ok);
    CHECK(g->heuristics == h);
    CHECK(g->matmuls == mm + 100 + CUDA_LT_CACHE_SIZE);

    /* release: everything destroyed */
    cuda_lt_release(s);
    CHECK(g->descs == 0 && g->layouts == 0 && g->prefs == 0 && g->handles == 0);
    CHECK(!s->lt && !s->lt_plans && !s->lt_fns);
    /* a release without plans (never loaded) is harmless */
    cuda_lt_release(s);
    free(s);
    printf("cuda_lt_plans: %d failure(s)\n", fails);
    return fails ? 1 : 0;
}
