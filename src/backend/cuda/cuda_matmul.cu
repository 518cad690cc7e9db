/*
 * The CUDA backend's dense layers through cuBLAS. A row-major (R,K) matrix
 * is the column-major (K,R) one, its transpose, so every call is the
 * transposed product in column-major terms: out^T (OC,N) = W^T-view^T (OC,C)
 * x inp^T (C,N), and so on; no copies, the transposes are flags. fp32 runs in fp32 (cuBLAS's default math mode:
 * no TF32), for parity with PyTorch with TF32 off. Mixed precision (train.precision=bf16)
 * rounds the fp32 operand into a bf16 workspace and calls cublasGemmEx with
 * bf16 inputs, fp32 compute and fp32 output (tensor cores); the _in16
 * forwards take an input the model keeps in bf16 as the operand, with no
 * rounding pass. A forward with a
 * bias runs through cuBLASLt's bias epilogue, and matmul_gelu_forward through
 * its bias+GELU epilogue that also writes the pre-activation (cuda_lt.cu),
 * each configuration first checked once against the plain path below on a
 * small problem: when Lt is missing, refuses, or disagrees, one info line and
 * the plain path for the rest of the run (CT_CUDA_GEMM=cublas: always). The
 * plain path pre-fills the output with the bias and uses beta = 1, as the cpu
 * backend does, and runs the GELU kernel after the GEMM. The bias gradient is
 * a column sum in double, one thread per column. Leaves out: Lt in the
 * backward (DGELU, BGRAD epilogues) and bf16 outputs through Lt.
 * The bf16 vocabulary head (matmul_forward_bf16_out16, _backward_bf16_dout16)
 * writes its logits as bf16 from GemmEx (bf16 C, rows padded to ld) and
 * reads the loss's bf16 gradient as the backward GEMMs' operand directly; its
 * GEMMs take the vocabulary's rows in a multiple of 8 and then the few left,
 * so the big ones meet the tensor cores' alignment rules (GPT-2's 50257).
 * train.precision=fp16 (GPUs without bf16: T4, V100) takes the plain path with
 * IEEE half inputs (CUDA_R_16F), fp32 compute and output; no Lt epilogue.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda_colsum.cuh"
#include "backend/cuda/cuda_common.cuh"

static cublasHandle_t handle(ct_backend *be) { return (cublasHandle_t)cuda_st(be)->cublas; }

static void blas_ok(ct_backend *be, cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) cuda_latch(be, 1000 + (int)s, what, "cuBLAS error");
    else cuda_launched(be, what);
}

__global__ void k_bias_rows(float *out, const float *bias, int N, int OC) {
    size_t n = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}
/* out (N,OC) = bias rows, or untouched; returns the beta to use. */
static float prefill_bias(ct_backend *be, float *out, const float *bias, int N, int OC) {
    if (!bias) return 0.0f;
    k_bias_rows<<<cuda_grid((size_t)N * OC, 256), 256, 0, cuda_stream(be)>>>(out, bias, N, OC);
    cuda_launched(be, "matmul bias");
    return 1.0f;
}

static void dbias_add(ct_backend *be, float *dbias, const float *dout, int N, int OC) {
    cuda_colsum(be, COLSUM_BIAS, dbias, NULL, dout, NULL, NULL, NULL, N, OC);
}

/* The plain fp32 forward: bias pre-filled, sgemm with beta = 1. */
static void plain_forward(ct_backend *be, float *out, const float *inp, const float *weight,
                          const float *bias, int N, int C, int OC) {
    float one = 1.0f, beta = prefill_bias(be, out, bias, N, OC);
    if (C <= 0) {
        if (!bias) cuda_ok(be, cudaMemsetAsync(out, 0, (size_t)N * OC * 4, cuda_stream(be)),
                           "matmul");
        return;
    }
    /* out^T (OC,N) = W^T-view: W row-major (OC,C) is column-major (C,OC) */
    blas_ok(be, cuda_blas(be)->sgemm(handle(be), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp,
                            C, &beta, out, OC),
            "matmul_forward");
}

static bool lt_ready(ct_backend *be, int cfg);
static const char *const lt_names[4] = {"bias epilogue, fp32", "bias epilogue, bf16 inputs",
                                        "bias+GELU epilogue, fp32",
                                        "bias+GELU epilogue, bf16 inputs"};

/* One Lt GEMM of configuration cfg when it is usable for this shape; false
 * (nothing enqueued) when the caller must take the plain path. No kernel
 * for this call's shape and alignments: the plain path for this call; any
 * other refusal turns the configuration off for the rest of the run. */
static bool lt_try(ct_backend *be, int cfg, float *out, float *pre, const void *weight,
                   const void *inp, const float *bias, int N, int C, int OC) {
    bool gelu = cfg == CUDA_LT_GELU || cfg == CUDA_LT_GELU_BF16;
    if (N <= 0 || C <= 0 || OC <= 0) return false;
    /* the checked epilogues add a bias; the aux matrix's ld is a multiple of 8 */
    if (!bias || (gelu && OC % 8 != 0)) return false;
    if (!lt_ready(be, cfg)) return false;
    cublasStatus_t st = cuda_lt_gemm(be, cfg == CUDA_LT_BIAS_BF16 || cfg == CUDA_LT_GELU_BF16,
                                     gelu, out, pre, weight, inp, bias, N, C, OC);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
        /* no kernel for this shape and these alignments (a bf16 weight at an
         * odd offset, say): the plain path for this call, said once */
        if (!cuda_st(be)->lt_nokernel[cfg]++)
            ct_log(CT_LOG_INFO, "cuBLASLt %s has no kernel for a %d x %d x %d GEMM at these "
                   "alignments: plain cuBLAS for such calls", lt_names[cfg], N, C, OC);
        return false;
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        cuda_st(be)->lt_ok[cfg] = -1;
        ct_log(CT_LOG_INFO, "cuBLASLt %s refused a %d x %d x %d GEMM (status %d): plain "
               "cuBLAS for it from here on", lt_names[cfg], N, C, OC, (int)st);
        return false;
    }
    cuda_launched(be, gelu ? "matmul_gelu_forward (cuBLASLt)" : "matmul_forward (cuBLASLt)");
    return true;
}

extern "C" void ct_matmul_forward_cuda(ct_backend *be, float *out, const float *inp,
                                       const float *weight, const float *bias, int N, int C,
                                       int OC) {
    if (N <= 0 || OC <= 0) return;
    if (bias && lt_try(be, CUDA_LT_BIAS, out, NULL, weight, inp, bias, N, C, OC)) return;
    plain_forward(be, out, inp, weight, bias, N, C, OC);
}

extern "C" void ct_matmul_backward_cuda(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        int N, int C, int OC) {
    /* C == 0: no products, but dbias still sums dout's columns, as ref's does */
    if (N <= 0 || OC <= 0) return;
    float one = 1.0f;
    if (dinp && C > 0) /* dinp^T (C,N) += W-view (C,OC) x dout^T (OC,N) */
        blas_ok(be, cuda_blas(be)->sgemm(handle(be), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C,
                                dout, OC, &one, dinp, C),
                "matmul_backward dinp");
    if (dweight && C > 0) /* dW^T (C,OC) += inp^T (C,N) x dout (N,OC) */
        blas_ok(be, cuda_blas(be)->sgemm(handle(be), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout,
                                OC, &one, dweight, C),
                "matmul_backward dweight");
    if (dbias) dbias_add(be, dbias, dout, N, OC);
}

/* n bf16 values of the backend's workspace (grown when too small; the step's
 * shapes repeat, so it settles after the first step): the mixed-precision
 * GEMMs' operand copies and the bf16 attention's (cuda_flash.cu). */
uint16_t *cuda_bf16_workspace(ct_backend *be, size_t n) {
    cuda_state *s = cuda_st(be);
    if (!cuda_workspace(be, &s->ws, &s->ws_bytes, n * sizeof(uint16_t), "bf16 GEMM workspace"))
        return NULL;
    return (uint16_t *)s->ws;
}
static const uint16_t *bf16_operand(ct_backend *be, const float *x, size_t n) {
    uint16_t *ws = cuda_bf16_workspace(be, n);
    if (ws) ct_f32_to_bf16_cuda(be, ws, x, n);
    return ws;
}

/* GemmEx on 16-bit inputs of type ab (CUDA_R_16BF or CUDA_R_16F), fp32
 * compute (and scale), output Cm of type ct (CUDA_R_32F, or CUDA_R_16BF:
 * the fp32 sums rounded). */
static void gemm_16_to(ct_backend *be, cudaDataType ab, cublasOperation_t ta,
                       cublasOperation_t tb, int m, int n, int k, const uint16_t *A, int lda,
                       const uint16_t *B, int ldb, float beta, void *Cm, cudaDataType ct, int ldc,
                       const char *what) {
    float one = 1.0f;
    blas_ok(be, cuda_blas(be)->gemm_ex(handle(be), ta, tb, m, n, k, &one, A, ab, lda, B, ab, ldb,
                                       &beta, Cm, ct, ldc, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
            what);
}

/* gemm_16_to with fp32 output. */
static void gemm_16(ct_backend *be, cudaDataType ab, cublasOperation_t ta, cublasOperation_t tb,
                    int m, int n, int k, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                    float beta, float *Cm, int ldc, const char *what) {
    gemm_16_to(be, ab, ta, tb, m, n, k, A, lda, B, ldb, beta, Cm, CUDA_R_32F, ldc, what);
}

static void gemm_bf16(ct_backend *be, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                      int k, const uint16_t *A, int lda, const uint16_t *B, int ldb, float beta,
                      float *Cm, int ldc, const char *what) {
    gemm_16(be, CUDA_R_16BF, ta, tb, m, n, k, A, lda, B, ldb, beta, Cm, ldc, what);
}

/* The plain bf16 forward on a bf16 input: bias pre-filled, GemmEx with beta = 1. */
static void plain_forward_bf16(ct_backend *be, float *out, const uint16_t *x16,
                               const uint16_t *weight16, const float *bias, int N, int C,
                               int OC) {
    float beta = prefill_bias(be, out, bias, N, OC);
    if (C <= 0) {
        if (!bias) cuda_ok(be, cudaMemsetAsync(out, 0, (size_t)N * OC * 4, cuda_stream(be)),
                           "matmul");
        return;
    }
    gemm_bf16(be, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight16, C, x16, C, beta, out, OC,
              "matmul_forward_bf16");
}

/* The bf16 forwards read their input as bf16: an fp32 input is rounded into
 * the workspace first (NULL: the workspace could not grow, error set), a
 * bf16 one (the _in16 entries: a value the model keeps in bf16) is read as
 * it is. C == 0 needs no operand. Call it after lt_ready: the first use's
 * check rounds its own operand into the same workspace (and may regrow it). */
static const uint16_t *x16_of(ct_backend *be, const float *inp, const uint16_t *inp16, size_t n) {
    return inp16 || n == 0 ? inp16 : bf16_operand(be, inp, n);
}

static void forward_bf16(ct_backend *be, float *out, const float *inp, const uint16_t *inp16,
                         const uint16_t *weight16, const float *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    bool lt = bias && C > 0 && lt_ready(be, CUDA_LT_BIAS_BF16);
    const uint16_t *x16 = x16_of(be, inp, inp16, (size_t)N * (C > 0 ? C : 0));
    if (!x16 && C > 0) return;
    if (lt && lt_try(be, CUDA_LT_BIAS_BF16, out, NULL, weight16, x16, bias, N, C, OC)) return;
    plain_forward_bf16(be, out, x16, weight16, bias, N, C, OC);
}

extern "C" void ct_matmul_forward_bf16_cuda(ct_backend *be, float *out, const float *inp,
                                            const uint16_t *weight16, const float *bias, int N,
                                            int C, int OC) {
    forward_bf16(be, out, inp, NULL, weight16, bias, N, C, OC);
}

extern "C" void ct_matmul_forward_bf16_in16_cuda(ct_backend *be, float *out,
                                                 const uint16_t *inp16, const uint16_t *weight16,
                                                 const float *bias, int N, int C, int OC) {
    forward_bf16(be, out, NULL, inp16, weight16, bias, N, C, OC);
}

/* pre (N,OC) = inp @ W^T + bias, out (N,OC) = gelu(pre): one Lt GEMM with
 * the GELU_AUX_BIAS epilogue, or the plain GEMM and the GELU kernel (no bias,
 * OC not a multiple of 8, or Lt off). */
extern "C" void ct_matmul_gelu_forward_cuda(ct_backend *be, float *pre, float *out,
                                            const float *inp, const float *weight,
                                            const float *bias, int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (lt_try(be, CUDA_LT_GELU, out, pre, weight, inp, bias, N, C, OC)) return;
    plain_forward(be, pre, inp, weight, bias, N, C, OC);
    ct_gelu_forward_cuda(be, out, pre, (size_t)N * OC);
}

static void gelu_forward_bf16(ct_backend *be, float *pre, float *out, const float *inp,
                              const uint16_t *inp16, const uint16_t *weight16, const float *bias,
                              int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    bool lt = bias && C > 0 && OC % 8 == 0 && lt_ready(be, CUDA_LT_GELU_BF16);
    const uint16_t *x16 = x16_of(be, inp, inp16, (size_t)N * (C > 0 ? C : 0));
    if (!x16 && C > 0) return;
    if (lt && lt_try(be, CUDA_LT_GELU_BF16, out, pre, weight16, x16, bias, N, C, OC)) return;
    plain_forward_bf16(be, pre, x16, weight16, bias, N, C, OC);
    ct_gelu_forward_cuda(be, out, pre, (size_t)N * OC);
}

extern "C" void ct_matmul_gelu_forward_bf16_cuda(ct_backend *be, float *pre, float *out,
                                                 const float *inp, const uint16_t *weight16,
                                                 const float *bias, int N, int C, int OC) {
    gelu_forward_bf16(be, pre, out, inp, NULL, weight16, bias, N, C, OC);
}

extern "C" void ct_matmul_gelu_forward_bf16_in16_cuda(ct_backend *be, float *pre, float *out,
                                                      const uint16_t *inp16,
                                                      const uint16_t *weight16,
                                                      const float *bias, int N, int C, int OC) {
    gelu_forward_bf16(be, pre, out, NULL, inp16, weight16, bias, N, C, OC);
}

/* ------------------------------------------------ the check before first use */

/* Deterministic values in [-a, a). */
static void fill_host(float *x, size_t n, uint32_t seed, float a) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = a * ((float)(seed >> 8) / 8388608.0f - 1.0f);
    }
}

/* The largest |got - want| / (TOL_ABS + TOL_REL |want|) over n. */
#define LT_TOL_ABS 2e-5
#define LT_TOL_REL 2e-5
static double lt_err(const float *got, const float *want, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (LT_TOL_ABS + LT_TOL_REL * fabs(want[i]));
        if (isnan(e)) return INFINITY;
        if (e > worst) worst = e;
    }
    return worst;
}

/* Run configuration cfg once on a 32 x 64 x 64 problem (pre-activations
 * spread over about [-6, 6], where GELU's tanh form and the erf one differ by
 * up to 4e-4, far beyond the tolerance) through Lt and through the plain
 * path, and compare every output within 2e-5 + 2e-5 |want|. A faithful
 * epilogue differs by the order of the sums only (about 1e-6 here). */
static bool lt_selftest(ct_backend *be, int cfg) {
    enum { N = 32, C = 64, OC = 64 };
    bool bf16 = cfg == CUDA_LT_BIAS_BF16 || cfg == CUDA_LT_GELU_BF16;
    bool gelu = cfg == CUDA_LT_GELU || cfg == CUDA_LT_GELU_BF16;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    size_t nh = nx + nw + OC;
    float *h = (float *)malloc((nh + 4 * no) * sizeof(float));
    char *d = NULL;
    const char *why = NULL;
    char buf[160];
    bool ok = false;
    if (!h) {
        why = "out of host memory";
        goto done;
    }
    {
        float *hx = h, *hw = hx + nx, *hb = hw + nw, *got = hb + OC;
        fill_host(hx, nx, 1u, 1.0f);
        fill_host(hw, nw, 2u, 0.75f);
        fill_host(hb, OC, 3u, 1.0f);
        size_t bytes = (nh + 4 * no) * sizeof(float) + nw * sizeof(uint16_t);
        if (cudaMalloc((void **)&d, bytes) != cudaSuccess) {
            cudaGetLastError();
            why = "no GPU memory for the check";
            goto done;
        }
        float *dx = (float *)d, *dw = dx + nx, *db = dw + nw, *o_lt = db + OC, *p_lt = o_lt + no;
        float *o_ref = p_lt + no, *p_ref = o_ref + no;
        uint16_t *dw16 = (uint16_t *)(p_ref + no);
        cudaStream_t st = cuda_stream(be);
        cudaMemcpyAsync(dx, h, nh * sizeof(float), cudaMemcpyHostToDevice, st);
        cudaMemsetAsync(o_lt, 0, 4 * no * sizeof(float), st);
        const void *w = dw;
        if (bf16) {
            ct_f32_to_bf16_cuda(be, dw16, dw, nw);
            w = dw16;
        }
        /* the plain path: what the run would otherwise compute */
        float *plain_out = gelu ? p_ref : o_ref;
        const void *x = dx;
        if (bf16 && !(x = bf16_operand(be, dx, nx))) {
            why = "no bf16 workspace";
            goto done;
        }
        if (bf16) plain_forward_bf16(be, plain_out, (const uint16_t *)x, dw16, db, N, C, OC);
        else plain_forward(be, plain_out, dx, dw, db, N, C, OC);
        if (gelu) ct_gelu_forward_cuda(be, o_ref, p_ref, no);
        cublasStatus_t cs = cuda_lt_gemm(be, bf16, gelu, o_lt, p_lt, w, x, db, N, C, OC);
        cudaError_t e = cudaStreamSynchronize(st);
        if (cs != CUBLAS_STATUS_SUCCESS) {
            snprintf(buf, sizeof buf, "cuBLASLt status %d", (int)cs);
            why = buf;
            goto done;
        }
        if (e == cudaSuccess)
            e = cudaMemcpy(got, o_lt, 4 * no * sizeof(float), cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            snprintf(buf, sizeof buf, "%s", cudaGetErrorString(e));
            why = buf;
            goto done;
        }
        const float *g_out = got, *g_pre = got + no, *w_out = got + 2 * no,
                    *w_pre = got + 3 * no;
        double err = lt_err(g_out, w_out, no);
        if (gelu) {
            double ep = lt_err(g_pre, w_pre, no);
            if (ep > err) err = ep;
        }
        if (err > 1.0) {
            snprintf(buf, sizeof buf, "it differs from cuBLAS + our kernels by %.1fx the "
                     "tolerance (%g + %g |x|)", err, LT_TOL_ABS, LT_TOL_REL);
            why = buf;
            goto done;
        }
        ct_log(CT_LOG_DEBUG, "cuBLASLt %s: checked against cuBLAS (%.2f of the tolerance)",
               lt_names[cfg], err);
        ok = true;
    }
done:
    if (d) cudaFree(d);
    free(h);
    if (!ok)
        ct_log(CT_LOG_INFO, "cuBLASLt %s is off: %s; plain cuBLAS and our kernels for the rest "
               "of the run", lt_names[cfg], why);
    return ok;
}

/* Whether configuration cfg may run through Lt: checked at its first use. */
static bool lt_ready(ct_backend *be, int cfg) {
    cuda_state *s = cuda_st(be);
    if (!s->lt) return false;
    if (s->lt_ok[cfg] == 0) s->lt_ok[cfg] = lt_selftest(be, cfg) ? 1 : -1;
    return s->lt_ok[cfg] > 0;
}

extern "C" void ct_matmul_backward_bf16_cuda(ct_backend *be, float *dinp, float *dweight,
                                             float *dbias, const float *dout,
                                             const uint16_t *inp16, const uint16_t *weight16,
                                             int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return; /* C == 0: dbias only, as ref */
    if ((dinp || dweight) && C > 0) {
        const uint16_t *d16;
        if (dbias) { /* the bias gradient and dout's bf16 copy in one read of dout */
            uint16_t *ws = cuda_bf16_workspace(be, (size_t)N * OC);
            if (!ws) return;
            cuda_colsum_bias_copy16(be, dbias, ws, dout, N, OC);
            d16 = ws;
            dbias = NULL;
        } else if (!(d16 = bf16_operand(be, dout, (size_t)N * OC))) {
            return;
        }
        if (dinp)
            gemm_bf16(be, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight16, C, d16, OC, 1.0f, dinp, C,
                      "matmul_backward_bf16 dinp");
        if (dweight)
            gemm_bf16(be, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp16, C, d16, OC, 1.0f, dweight,
                      C, "matmul_backward_bf16 dweight");
    }
    if (dbias) dbias_add(be, dbias, dout, N, OC);
}

/* ------------------------------------------- the bf16 head (bf16 logits) */

/* The vocabulary's rows split for the tensor cores: cuBLAS runs its fast
 * kernels only where every operand's contiguous extent is a multiple of 16
 * bytes (its "Tensor Core Usage" rules), and GPT-2's 50257 is odd. So each
 * head GEMM runs on the first V8 = V rounded down to 8 rows, and the last
 * V - V8 (at most 7) in a second, small call. */
static int vocab_main(int V) { return V & ~7; }

/* out16 (N, rows ld apart) = bf16(bf16(inp) @ weight16^T): GemmEx with a bf16
 * C (ldc = ld), beta 0 so C is never read, over the vocabulary's first V8
 * rows and then its last few; cuBLAS writes the m rows of the column-major C
 * only, so columns OC..ld-1 stay as they were.
 * C == 0: zero sums, written as bf16 zeros into the same columns. */
extern "C" void ct_matmul_forward_bf16_out16_cuda(ct_backend *be, uint16_t *out16, int ld,
                                                  const float *inp, const uint16_t *weight16,
                                                  int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (C <= 0) {
        cuda_ok(be, cudaMemset2DAsync(out16, (size_t)ld * sizeof(uint16_t), 0,
                                      (size_t)OC * sizeof(uint16_t), (size_t)N, cuda_stream(be)),
                "matmul_forward_bf16_out16");
        return;
    }
    const uint16_t *x16 = bf16_operand(be, inp, (size_t)N * C);
    if (!x16) return;
    /* out^T (V,N), ld apart = W^T-view (V,C) x inp16^T (C,N), by rows of V */
    for (int v0 = 0, v1 = vocab_main(OC); v0 < OC; v0 = v1, v1 = OC)
        if (v1 > v0)
            gemm_16_to(be, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, v1 - v0, N, C,
                       weight16 + (size_t)v0 * C, C, x16, C, 0.0f, out16 + v0, CUDA_R_16BF, ld,
                       "matmul_forward_bf16_out16");
}

/* matmul_backward_bf16 from a gradient that is bf16 already (the bf16 head's
 * loss wrote it): dout16 is the GEMMs' operand as it is, rows ld apart (its
 * column-major view (OC,N) with leading dimension ld), no conversion, no
 * workspace; beta 1 into the fp32 dinp and dweight; the vocabulary split as
 * the forward's (dinp sums the first V8 rows' products, then the rest's). */
extern "C" void ct_matmul_backward_bf16_dout16_cuda(ct_backend *be, float *dinp, float *dweight,
                                                    const uint16_t *dout16, int ld,
                                                    const uint16_t *inp16,
                                                    const uint16_t *weight16, int N, int C,
                                                    int OC) {
    if (N <= 0 || OC <= 0 || C <= 0) return;
    for (int v0 = 0, v1 = vocab_main(OC); v0 < OC; v0 = v1, v1 = OC) {
        if (v1 == v0) continue;
        const uint16_t *w = weight16 + (size_t)v0 * C, *d = dout16 + v0;
        if (dinp) /* dinp^T (C,N) += W-view (C,v) x dout16^T (v,N) */
            gemm_bf16(be, CUBLAS_OP_N, CUBLAS_OP_N, C, N, v1 - v0, w, C, d, ld, 1.0f, dinp, C,
                      "matmul_backward_bf16_dout16 dinp");
        if (dweight) /* dW^T (C,v) += inp16^T (C,N) x dout16 (N,v) */
            gemm_bf16(be, CUBLAS_OP_N, CUBLAS_OP_T, C, v1 - v0, N, inp16, C, d, ld, 1.0f,
                      dweight + (size_t)v0 * C, C, "matmul_backward_bf16_dout16 dweight");
    }
}

/* ------------------------------------------- train.precision = fp16 */

/* An fp16 copy of x (n) in the backend's workspace, as bf16_operand. */
static const uint16_t *f16_operand(ct_backend *be, const float *x, size_t n) {
    cuda_state *s = cuda_st(be);
    if (!cuda_workspace(be, &s->ws, &s->ws_bytes, n * sizeof(uint16_t), "fp16 GEMM workspace"))
        return NULL;
    ct_f32_to_f16_cuda(be, (uint16_t *)s->ws, x, n);
    return (const uint16_t *)s->ws;
}

/* out (N,OC) = fp16(inp) @ weight16^T + bias: bias pre-filled, GemmEx on
 * fp16 inputs with beta = 1 (the plain bf16 forward's shape). */
extern "C" void ct_matmul_forward_f16_cuda(ct_backend *be, float *out, const float *inp,
                                           const uint16_t *weight16, const float *bias, int N,
                                           int C, int OC) {
    if (N <= 0 || OC <= 0) return;
    float beta = prefill_bias(be, out, bias, N, OC);
    if (C <= 0) {
        if (!bias) cuda_ok(be, cudaMemsetAsync(out, 0, (size_t)N * OC * 4, cuda_stream(be)),
                           "matmul");
        return;
    }
    const uint16_t *x16 = f16_operand(be, inp, (size_t)N * C);
    if (!x16) return;
    gemm_16(be, CUDA_R_16F, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight16, C, x16, C, beta, out,
            OC, "matmul_forward_f16");
}

extern "C" void ct_matmul_backward_f16_cuda(ct_backend *be, float *dinp, float *dweight,
                                            float *dbias, const float *dout,
                                            const uint16_t *inp16, const uint16_t *weight16,
                                            int N, int C, int OC) {
    if (N <= 0 || OC <= 0) return; /* C == 0: dbias only, as ref */
    if ((dinp || dweight) && C > 0) {
        /* dout scaled by the loss scale: a value past 65504 becomes inf here,
         * and the step's gradient norm says overflow */
        const uint16_t *d16 = f16_operand(be, dout, (size_t)N * OC);
        if (!d16) return;
        if (dinp)
            gemm_16(be, CUDA_R_16F, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight16, C, d16, OC,
                    1.0f, dinp, C, "matmul_backward_f16 dinp");
        if (dweight)
            gemm_16(be, CUDA_R_16F, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp16, C, d16, OC, 1.0f,
                    dweight, C, "matmul_backward_f16 dweight");
    }
    if (dbias) dbias_add(be, dbias, dout, N, OC);
}
