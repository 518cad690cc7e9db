/*
 * The GEMM libraries side by side on the exact GEMMs of a GPT-2 124M training
 * step (backend/cpu/matmul.c's calls: forward out = in W^T + bias, dinp +=
 * dout W, dW += dout^T in; qkv 768->2304, attention projection 768->768, fc
 * 768->3072, fc projection 3072->768, 12 layers with their own weights, and the
 * tied head 768->50257 in chunks of ct_model_head_chunk_rows rows), in one
 * process, interleaved, repeated; medians. Columns: OpenBLAS (ct_sgemm),
 * oneDNN's dnnl_sgemm, oneDNN fp32 matmul primitives (ct_gemm_primitive), bf16
 * primitives on bf16 operands, and bf16 with A rounded per call
 * (ct_gemm_f32_bf16: the weights stored bf16, the activations fp32). Then the
 * attention kernel's tile GEMMs (64 x 128 tiles on the strided qkv rows, one
 * (batch, head) per thread, from inside a parallel region) on each fp32 path.
 * Not a test: it prints figures and exits 0 (2 on bad arguments).
 *
 *   build/bench/bench_gemm [--batch 4] [--seqs 64,256] [--reps 5] [--threads 2]
 */
#include "backend/cpu/gemm.h"
#include "core/dtype.h"
#include "ctrain/model.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef CT_USE_OPENMP
#include <omp.h>
#endif
#ifdef CT_HAVE_DNNL
#include <dnnl.h>
#endif

enum { M_BLAS, M_DNNL_SGEMM, M_PRIM, M_BF16, M_BF16_CVT, M_COUNT };
static const char *METHOD[M_COUNT] = {"openblas", "dnnl_sgemm", "prim-f32", "prim-bf16",
                                      "bf16+cvtA"};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The 1-minute load average (other processes share the cores). */
static double loadavg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1) l = -1;
    if (f) fclose(f);
    return l;
}

static void *xmalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64)) {
        fprintf(stderr, "bench_gemm: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        x[i] = scale * (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

/* One GEMM of the step: C (M,N) = op(A) op(B) (+ C when beta), as bf16 too. */
typedef struct gemm_op {
    bool ta, tb;
    int M, N, K;
    const float *A, *B;
    const uint16_t *Ah, *Bh;
    float beta;
    float *C;
} gemm_op;

/* Runs op with method m; false when the method cannot run it. */
static bool run_op(int m, const gemm_op *o) {
    int lda = o->ta ? o->M : o->K, ldb = o->tb ? o->K : o->N, ldc = o->N;
    switch (m) {
    case M_BLAS:
        ct_sgemm(CT_GEMM_OPENBLAS, o->ta, o->tb, o->M, o->N, o->K, 1.0f, o->A, lda, o->B, ldb,
                 o->beta, o->C, ldc);
        return true;
    case M_DNNL_SGEMM:
#ifdef CT_HAVE_DNNL
        return dnnl_sgemm(o->ta ? 'T' : 'N', o->tb ? 'T' : 'N', o->M, o->N, o->K, 1.0f, o->A, lda,
                          o->B, ldb, o->beta, o->C, ldc) == dnnl_success;
#else
        return false;
#endif
    case M_PRIM:
        return ct_gemm_primitive(CT_GEMM_F32, o->ta, o->tb, o->M, o->N, o->K, 1.0f, o->A, lda,
                                 o->B, ldb, o->beta, o->C, ldc);
    case M_BF16:
        return ct_gemm_primitive(CT_GEMM_BF16, o->ta, o->tb, o->M, o->N, o->K, 1.0f, o->Ah, lda,
                                 o->Bh, ldb, o->beta, o->C, ldc);
    case M_BF16_CVT:
        return ct_gemm_primitive(CT_GEMM_F32_BF16, o->ta, o->tb, o->M, o->N, o->K, 1.0f, o->A,
                                 lda, o->Bh, ldb, o->beta, o->C, ldc);
    }
    return false;
}

/* A linear (in -> out) of the step: its weights per layer (fp32 and bf16) and
 * their gradients. */
typedef struct linear {
    const char *name;
    int in, out, count; /* count: layers (or head chunks) */
    float **w, **dw;
    uint16_t **wh;
} linear;

/* Activation buffers shared by every GEMM (N x widest, fp32 and bf16). */
typedef struct acts {
    float *x, *dy, *y, *dx;
    uint16_t *xh, *dyh;
} acts;

/* The three GEMMs of linear l, layer i, over N rows: 0 forward, 1 dinp, 2 dW. */
static gemm_op op_of(const linear *l, int i, int which, int N, const acts *a, bool bias) {
    switch (which) {
    case 0: /* out (N,OUT) = x (N,IN) W (OUT,IN)^T (+ the bias prefilled: beta 1) */
        return (gemm_op){false, true, N, l->out, l->in, a->x, l->w[i], a->xh, l->wh[i],
                         bias ? 1.0f : 0.0f, a->y};
    case 1: /* dinp (N,IN) += dy (N,OUT) W (OUT,IN) */
        return (gemm_op){false, false, N, l->in, l->out, a->dy, l->w[i], a->dyh, l->wh[i], 1.0f,
                         a->dx};
    default: /* dW (OUT,IN) += dy^T (OUT,N) x (N,IN); bf16+cvtA: dy rounded, x stored bf16 */
        return (gemm_op){true, false, l->out, l->in, N, a->dy, a->x, a->dyh, a->xh, 1.0f, l->dw[i]};
    }
}

static void linear_alloc(linear *l, const char *name, int in, int out, int count) {
    *l = (linear){name, in, out, count, NULL, NULL, NULL};
    l->w = calloc((size_t)count, sizeof *l->w);
    l->dw = calloc((size_t)count, sizeof *l->dw);
    l->wh = calloc((size_t)count, sizeof *l->wh);
    size_t n = (size_t)in * out;
    for (int i = 0; i < count; i++) {
        l->w[i] = xmalloc(n * sizeof(float));
        l->dw[i] = xmalloc(n * sizeof(float));
        l->wh[i] = xmalloc(n * sizeof(uint16_t));
        fill(l->w[i], n, 0.02f);
        memset(l->dw[i], 0, n * sizeof(float));
        ct_f32_to_bf16_array(l->wh[i], l->w[i], n);
    }
}

static void linear_free(linear *l) {
    for (int i = 0; i < l->count; i++) free(l->w[i]), free(l->dw[i]), free(l->wh[i]);
    free(l->w), free(l->dw), free(l->wh);
}

/* ------------------------------------------------------------ step GEMMs */

static void bench_step(int B, int T, int reps) {
    int N = B * T, C = 768, V = 50257, L = 12;
    ct_model_config cfg;
    ct_model_config_preset(&cfg, "gpt2");
    int rows = ct_model_head_chunk_rows(&cfg, N), chunks = (N + rows - 1) / rows;
    enum { NL = 5 };
    linear lin[NL];
    linear_alloc(&lin[0], "qkv", C, 3 * C, L);
    linear_alloc(&lin[1], "proj", C, C, L);
    linear_alloc(&lin[2], "fc", C, 4 * C, L);
    linear_alloc(&lin[3], "fcproj", 4 * C, C, L);
    linear_alloc(&lin[4], "head", C, V, 1); /* tied: one weight, `chunks` chunks of `rows` */
    size_t big = (size_t)N * (size_t)(4 * C), hbig = (size_t)rows * V;
    if (hbig > big) big = hbig;
    acts a = {xmalloc(big * 4), xmalloc(big * 4), xmalloc(big * 4), xmalloc(big * 4),
              xmalloc(big * 2), xmalloc(big * 2)};
    fill(a.x, big, 1.0f);
    fill(a.dy, big, 0.01f);
    memset(a.y, 0, big * 4);
    memset(a.dx, 0, big * 4);
    ct_f32_to_bf16_array(a.xh, a.x, big);
    ct_f32_to_bf16_array(a.dyh, a.dy, big);

    /* t[l][which][method][rep]: seconds for all `count` layers (or chunks) */
    static double t[NL][3][M_COUNT][64];
    bool ok[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) ok[m] = true;
    for (int rep = -1; rep < reps; rep++) /* rep -1: warm-up, primitives created */
        for (int l = 0; l < NL; l++)
            for (int w = 0; w < 3; w++)
                for (int m = 0; m < M_COUNT; m++) {
                    if (!ok[m]) continue;
                    int n = l == 4 ? chunks : L, r = l == 4 ? rows : N;
                    double t0 = now_s();
                    for (int i = 0; i < n; i++) {
                        gemm_op o = op_of(&lin[l], l == 4 ? 0 : i, w, r, &a, l != 4);
                        if (!run_op(m, &o)) ok[m] = false;
                    }
                    if (rep >= 0) t[l][w][m][rep] = now_s() - t0;
                }
    printf("\n### GPT-2 124M, B=%d T=%d (N=%d rows; head: %d chunk(s) of %d rows), %d reps, "
           "GFLOP/s (median); load average %.2f\n\n",
           B, T, N, chunks, rows, reps, loadavg());
    printf("| GEMM | M x N x K | count |");
    for (int m = 0; m < M_COUNT; m++) printf(" %s |", METHOD[m]);
    printf("\n|---|---|---|");
    for (int m = 0; m < M_COUNT; m++) printf("---|");
    printf("\n");
    double sum[M_COUNT] = {0}, best[M_COUNT] = {0};
    static const char *WHICH[3] = {"fwd", "dinp", "dW"};
    for (int l = 0; l < NL; l++)
        for (int w = 0; w < 3; w++) {
            int n = l == 4 ? chunks : L, r = l == 4 ? rows : N;
            gemm_op o = op_of(&lin[l], 0, w, r, &a, l != 4);
            double fl = 2.0 * o.M * o.N * o.K * n;
            printf("| %s %s %c%c | %d x %d x %d | %d |", lin[l].name, WHICH[w], o.ta ? 'T' : 'N',
                   o.tb ? 'T' : 'N', o.M, o.N, o.K, n);
            for (int m = 0; m < M_COUNT; m++) {
                if (!ok[m]) {
                    printf(" n/a |");
                    continue;
                }
                double md = median(t[l][w][m], reps); /* sorts: [0] is the fastest */
                sum[m] += md;
                best[m] += t[l][w][m][0];
                printf(" %.0f |", fl / md / 1e9);
            }
            printf("\n");
        }
    printf("| **GEMM-only step, s** | | |");
    for (int m = 0; m < M_COUNT; m++) ok[m] ? printf(" **%.3f** |", sum[m]) : printf(" n/a |");
    printf("\n| GEMM-only step, best of %d, s | | |", reps);
    for (int m = 0; m < M_COUNT; m++) ok[m] ? printf(" %.3f |", best[m]) : printf(" n/a |");
    printf("\n| step vs openblas (medians) | | |");
    for (int m = 0; m < M_COUNT; m++) ok[m] ? printf(" %.2fx |", sum[M_BLAS] / sum[m]) : printf(" |");
    printf("\n");
    for (int l = 0; l < NL; l++) linear_free(&lin[l]);
    free(a.x), free(a.dy), free(a.y), free(a.dx), free(a.xh), free(a.dyh);
}

/* ------------------------------------------------------------ attention tiles */

/* The attention kernel's fp32 GEMM calls for one (batch, head), forward then
 * backward (backend/cpu/attention.c's loops, without the softmax between). */
static void att_head(int path, const float *q, const float *k, const float *v, float *dq,
                     float *dk, float *dv, const float *dout, float *S, float *O, float *dP, int T,
                     int HS, int ld, int C, int BQ, int BK) {
    float scale = 0.125f;
    for (int r0 = 0; r0 < T; r0 += BQ) {
        int br = T - r0 < BQ ? T - r0 : BQ, kend = r0 + br;
        for (int c0 = 0; c0 < kend; c0 += BK) {
            int bc = kend - c0 < BK ? kend - c0 : BK;
#define G(ta, tb, M, N, K, al, A, lda, B, ldb, be, Cc, ldc)                                       \
    do {                                                                                          \
        if (path == M_PRIM &&                                                                     \
            ct_gemm_primitive(CT_GEMM_F32, ta, tb, M, N, K, al, A, lda, B, ldb, be, Cc, ldc))     \
            break;                                                                                \
        ct_sgemm(path == M_BLAS ? CT_GEMM_OPENBLAS : CT_GEMM_ONEDNN, ta, tb, M, N, K, al, A, lda, \
                 B, ldb, be, Cc, ldc);                                                            \
    } while (0)
            G(false, true, br, bc, HS, scale, q + (size_t)r0 * ld, ld, k + (size_t)c0 * ld, ld,
              0.0f, S, bc);
            G(false, false, br, HS, bc, 1.0f, S, bc, v + (size_t)c0 * ld, ld, 1.0f, O, HS);
        }
    }
    for (int c0 = 0; c0 < T; c0 += BK) {
        int bc = T - c0 < BK ? T - c0 : BK;
        for (int r0 = (c0 / BQ) * BQ; r0 < T; r0 += BQ) {
            int br = T - r0 < BQ ? T - r0 : BQ;
            const float *qr = q + (size_t)r0 * ld, *dor = dout + (size_t)r0 * C;
            G(false, true, br, bc, HS, scale, qr, ld, k + (size_t)c0 * ld, ld, 0.0f, S, bc);
            G(true, false, bc, HS, br, 1.0f, S, bc, dor, C, 1.0f, dv + (size_t)c0 * ld, ld);
            G(false, true, br, bc, HS, 1.0f, dor, C, v + (size_t)c0 * ld, ld, 0.0f, dP, bc);
            G(false, false, br, HS, bc, 1.0f, dP, bc, k + (size_t)c0 * ld, ld, 1.0f,
              dq + (size_t)r0 * ld, ld);
            G(true, false, bc, HS, br, 1.0f, dP, bc, qr, ld, 1.0f, dk + (size_t)c0 * ld, ld);
#undef G
        }
    }
}

/* GEMM FLOPs of att_head: every tile's 2 forward and 5 backward products. */
static double att_flops(int T, int HS, int BQ, int BK) {
    double f = 0;
    for (int r0 = 0; r0 < T; r0 += BQ) {
        int br = T - r0 < BQ ? T - r0 : BQ, kend = r0 + br;
        for (int c0 = 0; c0 < kend; c0 += BK) f += 2.0 * 2 * br * (kend - c0 < BK ? kend - c0 : BK) * HS;
    }
    for (int c0 = 0; c0 < T; c0 += BK) {
        int bc = T - c0 < BK ? T - c0 : BK;
        for (int r0 = (c0 / BQ) * BQ; r0 < T; r0 += BQ) f += 5.0 * 2 * (T - r0 < BQ ? T - r0 : BQ) * bc * HS;
    }
    return f;
}

static void bench_attention(int B, int T, int reps) {
    int NH = 12, HS = 64, C = NH * HS, ld = 3 * C, BQ = 64, BK = 128;
    size_t nq = (size_t)B * T * ld, nc = (size_t)B * T * C;
    float *qkv = xmalloc(nq * 4), *dqkv = xmalloc(nq * 4), *dout = xmalloc(nc * 4);
    fill(qkv, nq, 1.0f);
    fill(dout, nc, 0.01f);
    memset(dqkv, 0, nq * 4);
    static const int paths[3] = {M_BLAS, M_DNNL_SGEMM, M_PRIM};
    double t[3][64];
    for (int rep = -1; rep < reps; rep++)
        for (int p = 0; p < 3; p++) {
            double t0 = now_s();
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
            for (int bh = 0; bh < B * NH; bh++) {
                int b = bh / NH, h = bh % NH;
                float S[64 * 128], O[64 * 64], dP[64 * 128];
                memset(O, 0, sizeof O);
                size_t base = (size_t)b * T * ld + (size_t)h * HS;
                att_head(paths[p], qkv + base, qkv + base + C, qkv + base + 2 * C, dqkv + base,
                         dqkv + base + C, dqkv + base + 2 * C, dout + (size_t)b * T * C + h * HS,
                         S, O, dP, T, HS, ld, C, BQ, BK);
            }
            if (rep >= 0) t[p][rep] = now_s() - t0;
        }
    double fl = att_flops(T, HS, BQ, BK) * B * NH;
    printf("\n### attention tiles (B=%d T=%d, 12 heads of 64, %dx%d tiles, from a parallel "
           "region): GEMM seconds (GFLOP/s), median of %d\n\n| openblas | dnnl_sgemm | prim-f32 |\n"
           "|---|---|---|\n|",
           B, T, BQ, BK, reps);
    for (int p = 0; p < 3; p++) {
        double md = median(t[p], reps);
        printf(" %.4f (%.0f) |", md, fl / md / 1e9);
    }
    printf("\n");
    free(qkv), free(dqkv), free(dout);
}

/* ------------------------------------------------------------ small shapes */

/* Per-call cost on small dense shapes at the top level (overhead dominated). */
static void bench_small(int reps) {
    static const int sizes[] = {16, 64, 128};
    printf("\n### small dense GEMMs (NT, top level): microseconds per call, median of %d\n\n"
           "| M=N=K | openblas | dnnl_sgemm | prim-f32 |\n|---|---|---|---|\n",
           reps);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int n = sizes[s], calls = 2000;
        float *A = xmalloc((size_t)n * n * 4), *B = xmalloc((size_t)n * n * 4), *C = xmalloc((size_t)n * n * 4);
        fill(A, (size_t)n * n, 1.0f);
        fill(B, (size_t)n * n, 1.0f);
        gemm_op o = {false, true, n, n, n, A, B, NULL, NULL, 0.0f, C};
        double t[3][64];
        for (int rep = -1; rep < reps; rep++)
            for (int m = 0; m < 3; m++) {
                double t0 = now_s();
                for (int i = 0; i < calls; i++) run_op(m, &o);
                if (rep >= 0) t[m][rep] = (now_s() - t0) / calls;
            }
        printf("| %d |", n);
        for (int m = 0; m < 3; m++) printf(" %.1f |", median(t[m], reps) * 1e6);
        printf("\n");
        free(A), free(B), free(C);
    }
}

int main(int argc, char **argv) {
    int B = 4, reps = 5, threads = 2, seqs[8] = {64, 256}, nseq = 2;
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows appear as they are measured */
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--batch") && v) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && v) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && v) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seqs") && v) {
            nseq = 0;
            for (char *p = argv[++i]; *p && nseq < 8;) {
                seqs[nseq++] = (int)strtol(p, &p, 10);
                if (*p == ',') p++;
                else if (*p) break;
            }
        } else {
            fprintf(stderr, "usage: bench_gemm [--batch B] [--seqs T,T..] [--reps R] [--threads N]\n");
            return 2;
        }
    }
    if (B < 1 || reps < 1 || reps > 64 || threads < 1 || nseq < 1) {
        fprintf(stderr, "bench_gemm: bad arguments\n");
        return 2;
    }
    for (int i = 0; i < nseq; i++)
        if (seqs[i] < 1 || seqs[i] > 1024) {
            fprintf(stderr, "bench_gemm: T must be 1..1024\n");
            return 2;
        }
#ifdef CT_USE_OPENMP
    omp_set_num_threads(threads);
#endif
    openblas_set_num_threads(threads);
    char cpu[256] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    for (char line[512]; f && fgets(line, sizeof line, f);)
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("# bench_gemm: %s, %d threads; OpenBLAS %s (core %s, OPENBLAS_CORETYPE=%s)", cpu,
           threads, openblas_get_config(), openblas_get_corename(), ct ? ct : "unset");
#ifdef CT_HAVE_DNNL
    const dnnl_version_t *dv = dnnl_version();
    printf("; oneDNN %d.%d.%d (ISA 0x%x)", dv->major, dv->minor, dv->patch,
           (unsigned)dnnl_get_effective_cpu_isa());
#else
    printf("; no oneDNN");
#endif
    printf("; native bf16: %s; load average %.2f\n", ct_gemm_have_bf16() ? "yes" : "no",
           loadavg());
    for (int i = 0; i < nseq; i++) bench_step(B, seqs[i], reps);
    for (int i = 0; i < nseq; i++) bench_attention(B, seqs[i], reps);
    bench_small(reps);
    ct_gemm_stats st;
    ct_gemm_stats_get(&st);
    printf("\nGEMM layer: %d primitives cached (%llu created, %llu refused), %d buffer sets, "
           "scratchpads %.2f MiB, packed B %.2f MiB, operand copies %.2f MiB\n",
           st.primitives, (unsigned long long)st.created, (unsigned long long)st.refused,
           st.buffers, st.scratch_bytes / 1048576.0, st.packed_bytes / 1048576.0,
           st.convert_bytes / 1048576.0);
    printf("load average at the end: %.2f\n", loadavg());
    ct_gemm_release();
    return 0;
}
