/*
 * Attention's tile products (tile.h). One register block is TILE_MR = 6 rows
 * of C by two of the target's vectors: 12 accumulators, with B's two vectors
 * and one broadcast A value beside them, which fills AVX2's 16 registers and
 * half of AVX-512's 32; twelve independent FMA chains cover two FMA pipes'
 * latency. Blocks of fewer rows (M's tail)
 * are the same code with a smaller constant; columns past the last whole
 * block go through a zero-padded copy of B's and C's slices.
 * Built with -ffp-contract=fast (CMakeLists.txt), so c += a * b is one FMA.
 */
#include "backend/cpu/tile.h"

#include <string.h>

/* The target's own vector width (arrays of wider vectors, split in two, did
 * not stay in registers): 16 floats with AVX-512, 8 with AVX, 4 else. Only
 * what gcc and clang both take: vector_size types, their arithmetic and
 * __builtin_shufflevector (gcc 12+); gcc's __builtin_shuffle is not clang's. */
#if defined(__AVX512F__)
#define VW 16
#define LANES0 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
#elif defined(__AVX__)
#define VW 8
#define LANES0 0, 0, 0, 0, 0, 0, 0, 0
#else
#define VW 4
#define LANES0 0, 0, 0, 0
#endif
typedef float vf __attribute__((vector_size(VW * sizeof(float))));
#define TILE_MR 6
#define TILE_NR (2 * VW)
#define TILE_KC 128 /* k rows per pass of the column tail's padded copy */

static inline vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* x in every lane: one broadcast (z + x would add 0 first, as -0 + 0 != -0,
 * and a loop over the lanes became one insert per lane) */
static inline vf vset1(float x) {
    vf v = {x};
    return __builtin_shufflevector(v, v, LANES0);
}

/* Row i of a block: its two accumulators, loaded (or zero), updated by A's
 * value at (i, k) against B's row k (b0, b1), stored. Rows at or past mr
 * are dead code once mr is a constant. */
#define ROW_INIT(i)                                                                            \
    vf c##i##0 = z, c##i##1 = z;                                                               \
    if (mr > i && acc) c##i##0 = vload(C + i * ldc), c##i##1 = vload(C + i * ldc + VW)
#define ROW_FMA(i)                                                                             \
    if (mr > i) {                                                                              \
        vf a_ = vset1(a[i * ars]);                                                                \
        c##i##0 += a_ * b0;                                                                    \
        c##i##1 += a_ * b1;                                                                    \
    }
#define ROW_STORE(i)                                                                           \
    if (mr > i) vstore(C + i * ldc, c##i##0), vstore(C + i * ldc + VW, c##i##1)

/* One block: C (mr x TILE_NR) = (acc ? C : 0) + A (mr x K) B (K x TILE_NR).
 * Always inlined with a constant mr, so the accumulators live in registers. */
static inline __attribute__((always_inline)) void block(int mr, int K, const float *A,
                                                        ptrdiff_t ars, ptrdiff_t acs,
                                                        const float *B, ptrdiff_t ldb, bool acc,
                                                        float *C, ptrdiff_t ldc) {
    const vf z = {0};
    ROW_INIT(0);
    ROW_INIT(1);
    ROW_INIT(2);
    ROW_INIT(3);
    ROW_INIT(4);
    ROW_INIT(5);
    for (int k = 0; k < K; k++) {
        const float *b = B + k * ldb, *a = A + k * acs;
        vf b0 = vload(b), b1 = vload(b + VW);
        ROW_FMA(0)
        ROW_FMA(1)
        ROW_FMA(2)
        ROW_FMA(3)
        ROW_FMA(4)
        ROW_FMA(5)
    }
    ROW_STORE(0);
    ROW_STORE(1);
    ROW_STORE(2);
    ROW_STORE(3);
    ROW_STORE(4);
    ROW_STORE(5);
}

/* All M rows of one TILE_NR-wide column block. */
static void column(int M, int K, const float *A, ptrdiff_t ars, ptrdiff_t acs, const float *B,
                   ptrdiff_t ldb, bool acc, float *C, ptrdiff_t ldc) {
    int i = 0;
    for (; i + TILE_MR <= M; i += TILE_MR)
        block(TILE_MR, K, A + i * ars, ars, acs, B, ldb, acc, C + i * ldc, ldc);
    const float *a = A + i * ars;
    float *c = C + i * ldc;
    switch (M - i) {
    case 5: block(5, K, a, ars, acs, B, ldb, acc, c, ldc); break;
    case 4: block(4, K, a, ars, acs, B, ldb, acc, c, ldc); break;
    case 3: block(3, K, a, ars, acs, B, ldb, acc, c, ldc); break;
    case 2: block(2, K, a, ars, acs, B, ldb, acc, c, ldc); break;
    case 1: block(1, K, a, ars, acs, B, ldb, acc, c, ldc); break;
    default: break;
    }
}

void ct_tile_gemm(int M, int N, int K, const float *A, ptrdiff_t ars, ptrdiff_t acs,
                  const float *B, ptrdiff_t ldb, bool acc, float *C, ptrdiff_t ldc) {
    if (M <= 0 || N <= 0) return;
    int nfull = N / TILE_NR * TILE_NR;
    for (int j = 0; j < nfull; j += TILE_NR) column(M, K, A, ars, acs, B + j, ldb, acc, C + j, ldc);
    int nr = N - nfull;
    if (!nr) return;
    // the last nr < TILE_NR columns: B's and C's slices copied into
    // zero-padded blocks, TILE_KC rows of B at a time
    float Bp[TILE_KC * TILE_NR], Cp[TILE_MR * TILE_NR];
    for (int i0 = 0; i0 < M; i0 += TILE_MR) {
        int mr = M - i0 < TILE_MR ? M - i0 : TILE_MR;
        float *c = C + i0 * ldc + nfull;
        memset(Cp, 0, sizeof Cp);
        if (acc)
            for (int i = 0; i < mr; i++) memcpy(Cp + i * TILE_NR, c + i * ldc, nr * sizeof(float));
        for (int k0 = 0; k0 < K; k0 += TILE_KC) {
            int kc = K - k0 < TILE_KC ? K - k0 : TILE_KC;
            for (int k = 0; k < kc; k++) {
                memcpy(Bp + k * TILE_NR, B + (k0 + k) * ldb + nfull, nr * sizeof(float));
                memset(Bp + k * TILE_NR + nr, 0, (TILE_NR - nr) * sizeof(float));
            }
            column(mr, kc, A + i0 * ars + k0 * acs, ars, acs, Bp, TILE_NR, true, Cp, TILE_NR);
        }
        for (int i = 0; i < mr; i++) memcpy(c + i * ldc, Cp + i * TILE_NR, nr * sizeof(float));
    }
}

void ct_tile_pack_t(float *Bt, const float *B, ptrdiff_t ldb, int N, int K, float alpha) {
    // 8 x 8 squares, so the strided writes stay within a few cache lines
    for (int j0 = 0; j0 < N; j0 += 8) {
        int jn = N - j0 < 8 ? N - j0 : 8;
        for (int k0 = 0; k0 < K; k0 += 8) {
            int kn = K - k0 < 8 ? K - k0 : 8;
            for (int j = 0; j < jn; j++) {
                const float *b = B + (j0 + j) * ldb + k0;
                for (int k = 0; k < kn; k++) Bt[(k0 + k) * (ptrdiff_t)N + j0 + j] = alpha * b[k];
            }
        }
    }
}

void ct_tile_pack_rows(float *Bp, const float *B, ptrdiff_t ldb, int N, int K) {
    for (int j = 0; j < N; j++) memcpy(Bp + (ptrdiff_t)j * K, B + j * ldb, (size_t)K * sizeof(float));
}
