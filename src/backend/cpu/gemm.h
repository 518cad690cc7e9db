/*
 * The CPU backend's GEMMs: fp32 (ct_sgemm) and bf16 inputs with fp32
 * accumulation and output (ct_gemm_bf16, ct_gemm_f32_bf16), on OpenBLAS or
 * oneDNN. run.gemm chooses the library, fixed for a process, so a run and its
 * resume use the same kernels (bit-exact).
 * oneDNN runs as matmul primitives, each created once per shape (sizes,
 * transposes, leading dimensions, alpha, beta, dtypes, threads) and kept in a
 * small LRU cache, with a user scratchpad; a plain (untransposed) B of up to
 * 64 MiB is packed per call into the layout the primitive picks. The memory
 * they use is buffers this layer owns, sized to the largest seen, and
 * ct_gemm_workspace_bytes says their size before the first call, so the
 * memory plan can count them. oneDNN 2.x picks its brgemm kernels (AVX-512,
 * AVX512_BF16 or AMX, chosen at run time) only for dense operands (leading
 * dimension = row length); a padded operand gets its gemm kernels, which
 * allocate their own packing buffers per call, as dnnl_sgemm does. So
 * ct_sgemm sends padded calls, and calls made inside an OpenMP parallel region
 * (attention's tiles, where dnnl_sgemm measured fastest), to dnnl_sgemm.
 * Everything runs on the one OpenMP pool (oneDNN's Debian build uses the
 * OpenMP runtime; inside a parallel region each call stays on its thread).
 * Measurements: bench/bench_gemm.c.
 * bf16 outputs: only the vocabulary head's forward (ct_gemm_f32_bf16_out16).
 * Leaves out: fused bias and activations (post-ops), and oneDNN 3.x's API
 * (such a build uses dnnl_sgemm and the OpenBLAS bf16 path).
 */
#ifndef CT_CPU_GEMM_H
#define CT_CPU_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ct_gemm_lib {
    CT_GEMM_OPENBLAS = 0,
    CT_GEMM_ONEDNN = 1,
} ct_gemm_lib;

/* Operand types of one GEMM; C is fp32 but for the last. */
typedef enum ct_gemm_type {
    CT_GEMM_F32 = 0,          /* A, B fp32 */
    CT_GEMM_BF16 = 1,         /* A, B bf16 (uint16_t bit patterns) */
    CT_GEMM_F32_BF16 = 2,     /* A fp32, rounded to bf16 per call; B bf16 */
    CT_GEMM_F32_BF16_C16 = 3, /* CT_GEMM_F32_BF16 with a bf16 C: the fp32 sums rounded
                               * (ct_gemm_f32_bf16_out16; alpha 1, beta 0) */
    CT_GEMM_TYPE_COUNT
} ct_gemm_type;

/* Row-major C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, where
 * op transposes when ta / tb; lda, ldb, ldc are the row strides of A, B and
 * C as stored (never copied). M, N, K >= 1. beta = 0 ignores C's contents
 * (NaN included), as BLAS does. Thread-safe, also from inside an OpenMP
 * parallel region (the call then stays on its thread). Cannot fail: if oneDNN
 * refuses a shape, OpenBLAS computes it. */
void ct_sgemm(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The same product with bf16 A and B: exact products, fp32 accumulation and
 * output (what PyTorch's bf16 autocast computes for a matmul, before it rounds
 * the output). oneDNN: a bf16 matmul primitive (native on AVX512_BF16 / AMX;
 * oneDNN emulates it, slowly, elsewhere: see ct_gemm_have_bf16). OpenBLAS: A
 * and B are widened to fp32 into this layer's buffer, then cblas_sgemm (same
 * values, since a bf16 widens exactly). Thread-safety and failure as ct_sgemm. */
void ct_gemm_bf16(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, float alpha,
                  const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta, float *C,
                  int ldc);
/* fp32 A (activations) times bf16 B (weights), A rounded to bf16 (nearest
 * even) first: the same numbers as ct_gemm_bf16 on A's bf16 copy. oneDNN 2.x
 * has no matmul with f32 and bf16 inputs, so the call rounds A into this
 * layer's buffer (op(A)'s M x K elements, 2 bytes each), then as
 * ct_gemm_bf16; OpenBLAS rounds A and widens B into fp32 copies. */
void ct_gemm_f32_bf16(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const uint16_t *B, int ldb, float beta, float *C,
                      int ldc);
/* C16 (M,N; rows ldc apart) = bf16(bf16(op(A)) @ op(B)): ct_gemm_f32_bf16's
 * fp32 sums (alpha 1, beta 0) rounded to bf16 as they are stored (nearest
 * even; AVX512_BF16 reads a subnormal sum as zero), so a vocabulary head's
 * logits never exist in fp32 (torch.autocast's bf16 linear output). Columns
 * N..ldc-1 are not written. oneDNN where its bf16 matmul is native
 * (ct_gemm_have_bf16): a matmul primitive with a bf16 destination (brgemm,
 * whose accumulators stay in its tiles, for a dense C); elsewhere OpenBLAS on
 * fp32 copies of A and B, CT_GEMM_OUT16_ROWS rows at a time through an fp32 block, all in
 * this layer's buffer (ct_gemm_workspace_bytes' convert). */
#define CT_GEMM_OUT16_ROWS 64
void ct_gemm_f32_bf16_out16(ct_gemm_lib lib, bool ta, bool tb, int M, int N, int K,
                            const float *A, int lda, const uint16_t *B, int ldb, uint16_t *C16,
                            int ldc);
/* A linear's two backward products on one rounding of its fp32 gradient G
 * (N x OC, dense): dinp (N x C) += bf16(G) W16 (OC x C) and dweight (OC x C)
 * += bf16(G)^T X16 (N x C), the numbers of two ct_gemm_f32_bf16 calls, and
 * dbias (OC), when not NULL, += ct_gemm_colsums of G. oneDNN rounds G once
 * into this layer's buffer (the size one ct_gemm_f32_bf16 call of G takes),
 * in the same pass as the column sums, and runs both bf16 matmuls on it;
 * elsewhere, or when either output is NULL, the two calls as they are. */
void ct_gemm_bwd_f32_bf16(ct_gemm_lib lib, int N, int C, int OC, const float *G,
                          const uint16_t *W16, const uint16_t *X16, float *dinp, float *dweight,
                          float *dbias);
/* dbias (OC) += the column sums of G (N x OC, dense), and, when g16 is not
 * NULL, G rounded to bf16 (nearest even, NaN quiet) into g16 (N x OC) in the
 * same pass. Each column is summed in fp32 over blocks of 64 rows in row
 * order, the blocks' sums added in double in order (a column past the last
 * multiple of 16: in double throughout), so the sums depend on neither the
 * threads nor g16. Threads split the columns. */
void ct_gemm_colsums(float *dbias, uint16_t *g16, const float *G, int N, int OC);
/* The scalar reference of ct_gemm_bf16: products in fp32 (exact for bf16
 * inputs), summed in fp32 in k order. */
void ct_gemm_bf16_ref(bool ta, bool tb, int M, int N, int K, float alpha, const uint16_t *A,
                      int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc);

/* The matmul-primitive path itself, whatever the strides and the caller
 * (ct_sgemm routes some calls elsewhere; tests and bench/bench_gemm.c call
 * this). A, B and C point at fp32 or bf16 data as type says. Returns false,
 * having computed nothing, when the build has no oneDNN 2.x or oneDNN refuses
 * the shape. Thread-safe. */
bool ct_gemm_primitive(ct_gemm_type type, bool ta, bool tb, int M, int N, int K, float alpha,
                       const void *A, int lda, const void *B, int ldb, float beta, void *C,
                       int ldc);

/* The buffers of one calling thread, by part: each part grows on its own. */
typedef struct ct_gemm_workspace {
    size_t scratch; /* oneDNN's scratchpad */
    size_t packed;  /* the packed copy of a plain B (oneDNN, B untransposed, <= 64 MiB) */
    size_t convert; /* operand copies: bf16 A (oneDNN, CT_GEMM_F32_BF16 and _C16); fp32
                     * A and B (OpenBLAS, the bf16 types), and for _C16 an fp32 block
                     * of CT_GEMM_OUT16_ROWS rows of C */
    size_t driver;  /* not this layer's: what oneDNN's gemm kernels malloc per call and
                     * free, all threads of the call together, when the matmul oneDNN
                     * dispatched is gemm:jit (cores without brgemm: AVX2; bf16 without
                     * AVX512_BF16): ct_gemm_driver_bytes on this process's threads */
} ct_gemm_workspace;

/* Bytes this layer holds for one calling thread to run the GEMM M x N x K
 * (dense operands, alpha 1, beta 0 or 1: the larger; beta 0 for _C16) of
 * `type` with `lib`,
 * the sum of the parts scratch, packed and convert, which go to *parts when
 * parts is not NULL (with driver, which is oneDNN's own and not in the sum). OpenBLAS's
 * own buffers for CT_GEMM_F32 are perf/memplan.c's to count (0 here). Each
 * part only grows, so what a run holds is, for each part, the maximum over
 * its shapes, summed over the parts; once per thread that calls from inside a
 * parallel region (once in all when only top-level calls use this layer).
 * Creates (primes) the oneDNN primitives it asks about. Padded operands and
 * dnnl_sgemm's calls allocate inside oneDNN and are not counted; neither is
 * oneDNN's JIT code. Thread-safe. */
size_t ct_gemm_workspace_bytes(ct_gemm_lib lib, ct_gemm_type type, bool ta, bool tb, int M, int N,
                               int K, ct_gemm_workspace *parts);

/* The bytes oneDNN 2.6's gemm kernels (src/cpu/x64/gemm/gemm_driver.cpp)
 * malloc in one call of row-major op(A) (M,K) x op(B) (K,N), dense, with
 * elem-byte operands (4 fp32, 2 bf16) on `threads` threads, all threads
 * together: none where its nocopy kernels run, else a block of A (m_padd x
 * k_padd) and of B (k_padd x n_padd) per thread of the split its threading
 * chooses (or one shared copy of A), with the blocking gemm_info.cpp gives
 * the ISA (isa_bits 512: avx512_core, 256: avx2, else sse41/avx); bf16, whose
 * threading is not modelled, counts whole blocks on every thread and a
 * k-partition's copy of C. Freed after the call; each thread's heap keeps
 * its largest. Pure (tests feed it shapes). */
size_t ct_gemm_driver_bytes(int isa_bits, size_t elem, bool ta, bool tb, int64_t M, int64_t N,
                            int64_t K, int threads);

/* The vector width of the ISA oneDNN dispatches here, in ct_gemm_driver_bytes'
 * terms (512 avx512_core, 256 avx2, 128 below); 0 without oneDNN 2.x. */
int ct_gemm_onednn_isa_bits(void);

/* The GEMM layer's counters (process-wide), for tests and reports. */
typedef struct ct_gemm_stats {
    uint64_t hits;         /* primitive lookups that found one */
    uint64_t created;      /* primitives created (cache misses) */
    uint64_t evicted;      /* least recently used primitives destroyed */
    uint64_t refused;      /* shapes oneDNN refused (the caller fell back) */
    int primitives;        /* in the cache now */
    int buffers;           /* per-thread buffer sets allocated */
    size_t scratch_bytes;  /* oneDNN scratchpads held, all buffer sets */
    size_t convert_bytes;  /* bf16 / fp32 operand copies held, all buffer sets */
    size_t packed_bytes;   /* packed copies of B held, all buffer sets */
} ct_gemm_stats;
void ct_gemm_stats_get(ct_gemm_stats *out);
/* Destroys every cached primitive and frees the buffers (counters reset too).
 * Not while another thread is inside a GEMM of this layer. */
void ct_gemm_release(void);

/* Whether this build has oneDNN. */
bool ct_gemm_have_onednn(void);
/* Whether bf16 GEMMs run on native bf16 instructions here (oneDNN built in and
 * the CPU has AVX512_BF16 or AMX-BF16, as oneDNN detects at run time). */
bool ct_gemm_have_bf16(void);
/* Whether oneDNN runs its brgemm matmul here (AVX-512 cores: it then asks for
 * a scratchpad and packs B); on AVX2 its matmul primitives run the gemm
 * kernels, which hold no workspace of their own. false without oneDNN. */
bool ct_gemm_have_brgemm(void);
/* Which instructions run the bf16 GEMMs (ct_gemm_bf16, ct_gemm_f32_bf16). */
typedef enum ct_gemm_bf16_path {
    CT_GEMM_BF16_AMX = 0,      /* oneDNN's bf16 matmul on AMX tiles */
    CT_GEMM_BF16_NATIVE = 1,   /* oneDNN's bf16 matmul on AVX512_BF16 (vdpbf16ps) */
    CT_GEMM_BF16_EMULATED = 2, /* oneDNN's bf16 matmul on cores without bf16 instructions:
                                * its gemm kernels widen in registers, fp32 FMAs */
    CT_GEMM_BF16_WIDENED = 3,  /* fp32 copies of both operands, then OpenBLAS's sgemm (lib
                                * OpenBLAS, or oneDNN refused: 2.6 has no bf16 matmul on
                                * AVX2 cores) */
    CT_GEMM_BF16_PATH_COUNT
} ct_gemm_bf16_path;
/* The bf16 path of library lib on this machine, asked of oneDNN itself: it
 * creates (primes) a small bf16 matmul primitive and reads the kernel oneDNN
 * chose (ct_gemm_bf16_path_classify). Writes that kernel's name ("" when none
 * ran: OpenBLAS, or refused) to impl (cap bytes) when impl is not NULL.
 * Thread-safe. */
ct_gemm_bf16_path ct_gemm_bf16_path_of(ct_gemm_lib lib, char *impl, size_t cap);
/* The path of a oneDNN bf16 matmul implementation name ("brg:avx512_core_amx"
 * AMX; "brg:avx512_core_bf16" native; "gemm:jit" native when native_isa, the
 * ISA oneDNN dispatches has bf16 instructions, else emulated; NULL or ""
 * (no primitive) widened; another name emulated). */
ct_gemm_bf16_path ct_gemm_bf16_path_classify(const char *impl, bool native_isa);
/* "amx" | "avx512_bf16" | "emulated" | "widened" */
const char *ct_gemm_bf16_path_name(ct_gemm_bf16_path p);
/* Path p of library lib (impl: the kernel ct_gemm_bf16_path_of read, may be
 * NULL or "") in words, with why, into buf (cap bytes): "AMX tiles: oneDNN's
 * bf16 matmul (brg:avx512_core_amx)", "emulated: no AVX512_BF16 or AMX on
 * this CPU: oneDNN's bf16 matmul (gemm:jit) widens in registers, fp32 FMAs
 * (no speed-up over fp32)", ... Returns buf. */
const char *ct_gemm_bf16_path_describe(ct_gemm_bf16_path p, ct_gemm_lib lib, const char *impl,
                                       char *buf, size_t cap);
/* Whether path p runs bf16 instructions (AMX or AVX512_BF16). */
bool ct_gemm_bf16_path_native(ct_gemm_bf16_path p);
/* The library a run uses: lib (run.gemm resolved), except that a bf16 run
 * (bf16) where oneDNN's bf16 matmul is native (native: ct_gemm_have_bf16)
 * runs oneDNN whatever run.gemm says, since OpenBLAS would widen its bf16
 * GEMMs to fp32 (CT_GEMM_BF16_WIDENED: no faster than fp32). */
ct_gemm_lib ct_gemm_lib_for_run(ct_gemm_lib lib, bool bf16, bool native);
/* ct_gemm_lib_of(name), then ct_gemm_lib_for_run with this machine's
 * ct_gemm_have_bf16; -1 as ct_gemm_lib_of. */
int ct_gemm_lib_of_run(const char *name, bool bf16);

/* "openblas" | "onednn" */
const char *ct_gemm_lib_name(ct_gemm_lib lib);
/* The widest vectors, in bits, of OpenBLAS's kernel set `core`
 * (openblas_get_corename(): "SkylakeX" 512, "Haswell" and "Zen" 256,
 * "Prescott" 128, ...), and of this CPU's cores (AVX-512 F/BW/VL 512, AVX
 * 256, else 128). */
int ct_gemm_blas_bits(const char *core);
int ct_gemm_cpu_bits(void);
/* What run.gemm=auto runs: oneDNN where the build has it and OpenBLAS's
 * kernels use narrower vectors than the cores have (OpenBLAS 0.3.21 falls
 * back to Prescott on a CPU it cannot name, and OPENBLAS_CORETYPE may hold
 * it to AVX2 on AVX-512 cores: there oneDNN, which picks the ISA itself, was
 * 3.7x the GPT-2 step on a Xeon and 1.9x the sgemm on a Zen 5); OpenBLAS
 * where both use the full width (on an AVX2 Zen 3 OpenBLAS's step was 2-6%
 * faster, on a Zen 5 their AVX-512 sgemm level). */
ct_gemm_lib ct_gemm_auto_pick(bool onednn_built, int blas_bits, int cpu_bits);
/* Why run.gemm=auto runs what it runs on this machine, in words, into buf
 * (cap bytes), e.g. "OpenBLAS's SkylakeX kernels use the cores' full 512-bit
 * width". Returns buf. */
const char *ct_gemm_auto_why(char *buf, size_t cap);
/* The library run.gemm names: "auto" (ct_gemm_auto_pick on this machine),
 * "onednn", "openblas"; -1 for another word or oneDNN asked of a build
 * without it. */
int ct_gemm_lib_of(const char *name);

#endif
