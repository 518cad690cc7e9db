/*
 * The CUDA backend's internals, shared by its C table (cuda_table.c) and its
 * CUDA sources: the state behind ct_backend.state, and every entry of
 * ct_backend_i it implements (C linkage). Compiled only with CT_USE_CUDA;
 * nothing outside src/backend/cuda includes a CUDA header.
 * Entries are enqueued on the backend's one stream; a launch or library error
 * is latched (the first one wins) and returned by synchronize, as the seam
 * says. Leaves out: several streams and graphs (later, with the GPU
 * performance work).
 */
#ifndef CT_BACKEND_CUDA_INT_H
#define CT_BACKEND_CUDA_INT_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend/backend.h"
#include "backend/ctx.h"
#include "backend/device.h"
#include "backend/cuda/cuda_lt_cache.h"

/* Reduction partials: one double per block of the fixed grid, summed on the
 * host in block order, so sum and sumsq are deterministic. */
#define CUDA_RED_BLOCKS 256
/* Events for timing: a ring reused round-robin (ct_event is a value type the
 * callers never release). */
#define CUDA_EVENTS 4096
/* Uploads without a wait: up to CUDA_UP_SLOT_BYTES are copied into the next
 * of CUDA_UP_SLOTS pinned slots and sent from there; a slot is reused once
 * its copy has been read (the host waits only when it runs that far ahead). */
#define CUDA_UP_SLOTS 16
#define CUDA_UP_SLOT_BYTES ((size_t)512 << 10)

typedef struct cuda_buf {
    void *p;
    size_t bytes;
    int tag;
    int pinned; /* host_alloc's pinned host memory, else a device buffer */
} cuda_buf;

typedef struct cuda_state {
    int device;
    void *stream;          /* cudaStream_t */
    void *cublas;          /* cublasHandle_t */
    void *cublas_lib;      /* dlopen handle of libcublas (loaded at init, never linked) */
    void *cublas_fns;      /* its entry points (cublas_fns, cuda_common.cuh) */
    int err;               /* the first latched cudaError_t / cublasStatus_t; 0: none */
    char err_what[320];    /* what failed, with the library's words */
    cuda_buf *bufs;        /* live allocations, for the counters */
    int n_bufs, cap_bufs;
    double *red;           /* device: CUDA_RED_BLOCKS partials */
    double *red_host;      /* pinned: their copy */
    unsigned long long *count;      /* device: nonfinite's counter */
    unsigned long long *count_host; /* pinned */
    void *ws;              /* device: bf16 operand workspace of the mixed-precision GEMMs */
    size_t ws_bytes;
    double *att_ws;        /* device: attention backward's D = rowsum(dout o out), (B,NH,T) */
    size_t att_ws_bytes;
    int fa_ready;          /* tensor-core attention's shared memory: 0 not asked yet,
                            * else the FA_* bits of the kernels granted it
                            * (cuda_flash.cu), -1 none (the exact kernels run) */
    double *col_ws;        /* device: the column sums' partials (cuda_colsum.cuh) */
    size_t col_ws_bytes;
    void *enc_ws;          /* device: the embedding backward's sort keys (cuda_encoder_bwd.cuh) */
    size_t enc_ws_bytes;
    void *events[CUDA_EVENTS]; /* cudaEvent_t */
    int next_event;
    void *up_ring;         /* pinned: the upload slots (made at the first small upload) */
    void *up_done[CUDA_UP_SLOTS]; /* cudaEvent_t: the slot's copy has been read */
    int up_next;
    char name[256];        /* the device's name */
    /* debugging (cuda_check.h): CT_CUDA_SYNC=1 waits after every launch and
     * cuBLAS call; CT_CUDA_FAULT=NAME faults on purpose after launch NAME */
    int sync_each;
    char fault_after[64];
    void *blas_ws;         /* device: cuBLAS's workspace, CT_CUDA_CUBLAS_WS_BYTES (cuBLASLt's
                            * too: both run on the one stream, one call at a time) */
    /* cuBLASLt (cuda_lt.cu): the bias and GELU epilogues; NULL lt when it is
     * off (CT_CUDA_GEMM=cublas, or the library did not load) */
    void *lt_lib;          /* dlopen handle of libcublasLt */
    void *lt_fns;          /* its entry points (lt_fns, cuda_lt.cu) */
    void *lt;              /* cublasLtHandle_t */
    cuda_lt_cache lt_cache; /* the plans' keys and order of use (cuda_lt_cache.h) */
    void *lt_plans;        /* the plans of its slots, CUDA_LT_CACHE_SIZE (lt_plan, cuda_lt.cu) */
    int lt_ok[4];          /* per CUDA_LT_* configuration: 0 not checked yet, 1 checked
                            * against the plain path, -1 off for the rest of the run */
    int lt_nokernel[4];    /* calls the heuristic found no kernel for (the plain path ran) */
    /* the device (cuda_info.cu) */
    int cc_major, cc_minor, sms;
    double clock_mhz;      /* peak SM clock the driver reports */
    size_t mem_total;      /* bytes */
    size_t mem_base_free;  /* free when init had finished */
    size_t mem_min_free;   /* the least free seen since (cuda_mem_sample) */
} cuda_state;

/* Initialise be for CUDA device `device` (run.device cuda:N): CT_ERR_ARG "no
 * CUDA device: ..." with the driver's reason when none is usable. */
ct_status ct_cuda_init(ct_backend *be, int device);
void ct_cuda_free(ct_backend *be);
/* Devices the driver sees; 0 with the driver's reason in why when none. */
int ct_cuda_device_count(char *why, size_t why_size);
/* Device dev's name ("" when it cannot be read). */
void ct_cuda_device_name(int dev, char *name, size_t name_size);

/* Latch the first error (code != 0) with what failed; later ones are dropped. */
void cuda_latch(ct_backend *be, int code, const char *what, const char *detail);
/* Record the device's free memory now (its low-water mark is the run's peak). */
void cuda_mem_sample(ct_backend *be);
/* The device's properties and memory (backend/device.h); CT_OK. */
ct_status ct_cuda_device_info(ct_backend *be, ct_device_info *out);
/* cuBLAS's sustained fp32, bf16 or fp16 GEMM rate on the device (prec 0, 1,
 * 2: backend/device.h). */
ct_status ct_cuda_gemm_peak(ct_backend *be, int prec, int n, int reps, double *gflops);
/* The backend's state. */
static inline cuda_state *cuda_st(ct_backend *be) { return (cuda_state *)be->state; }

/* memory, stream, reductions, elementwise (cuda_core.cu) */
void *ct_buf_alloc_cuda(ct_backend *be, size_t bytes, ct_tag tag);
void ct_buf_free_cuda(ct_backend *be, void *p);
void *ct_host_alloc_cuda(ct_backend *be, size_t bytes, ct_tag tag);
void ct_host_free_cuda(ct_backend *be, void *p);
void ct_memset_cuda(ct_backend *be, void *dst, int value, size_t bytes);
void ct_upload_cuda(ct_backend *be, void *dst, const void *src, size_t bytes);
void ct_download_cuda(ct_backend *be, void *dst, const void *src, size_t bytes);
void ct_copy_cuda(ct_backend *be, void *dst, const void *src, size_t bytes);
void ct_f32_to_bf16_cuda(ct_backend *be, uint16_t *dst, const float *src, size_t n);
void ct_bf16_to_f32_cuda(ct_backend *be, float *dst, const uint16_t *src, size_t n);
void ct_f32_to_f16_cuda(ct_backend *be, uint16_t *dst, const float *src, size_t n);
void ct_scale_add_cuda(ct_backend *be, float *y, int ldy, const float *x, int ldx, int rows,
                       int cols, float a, bool accumulate);
void ct_fill_cuda(ct_backend *be, float *x, float value, size_t n);
void ct_scale_cuda(ct_backend *be, float *x, float a, size_t n);
double ct_sum_cuda(ct_backend *be, const float *x, size_t n);
double ct_sumsq_cuda(ct_backend *be, const float *x, size_t n);
size_t ct_nonfinite_cuda(ct_backend *be, const float *x, size_t n);
void ct_reduce_add_cuda(ct_backend *be, double *dst, const float *x, size_t n, bool squares);
void ct_dropout_forward_cuda(ct_backend *be, float *out, const float *inp, size_t n, float p,
                             uint64_t key, uint64_t offset);
void ct_dropout_backward_cuda(ct_backend *be, float *dinp, const float *dout, size_t n, float p,
                              uint64_t key, uint64_t offset);
ct_status ct_synchronize_cuda(ct_backend *be);
void ct_event_record_cuda(ct_backend *be, ct_event *ev);
double ct_event_elapsed_cuda(ct_backend *be, const ct_event *a, const ct_event *b);
void ct_adamw_update_cuda(ct_backend *be, float *params, const float *grads, float *m, float *v,
                          size_t n, float lr, float beta1, float beta2, float eps,
                          float weight_decay, float grad_scale, int64_t t);

/* row kernels (cuda_kernels.cu) */
void ct_encoder_forward_cuda(ct_backend *be, float *out, const int32_t *inp, const float *wte,
                             const float *wpe, const int32_t *pos, int B, int T, int C, int pos0);
void ct_encoder_forward_wte16_cuda(ct_backend *be, float *out, const int32_t *inp,
                                   const uint16_t *wte16, const float *wpe, const int32_t *pos,
                                   int B, int T, int C, int pos0);
void ct_encoder_backward_cuda(ct_backend *be, float *dwte, float *dwpe, const float *dout,
                              const int32_t *inp, const int32_t *pos, int B, int T, int C);
void ct_layernorm_forward_cuda(ct_backend *be, float *out, float *mean, float *rstd,
                               const float *inp, const float *weight, const float *bias, int N,
                               int C, float eps);
void ct_residual_layernorm_forward_cuda(ct_backend *be, float *res, float *out, float *mean,
                                       float *rstd, const float *a, const float *b,
                                       const float *weight, const float *bias, int N, int C,
                                       float eps);
void ct_layernorm_backward_cuda(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight,
                                const float *mean, const float *rstd, int N, int C);
void ct_rmsnorm_forward_cuda(ct_backend *be, float *out, float *rstd, const float *inp,
                             const float *weight, int N, int C, float eps, float wofs);
void ct_residual_rmsnorm_forward_cuda(ct_backend *be, float *res, float *out, float *rstd,
                                     const float *a, const float *b, const float *weight, int N,
                                     int C, float eps, float wofs);
void ct_rmsnorm_backward_cuda(ct_backend *be, float *dinp, float *dweight, const float *dout,
                              const float *inp, const float *weight, const float *rstd, int N,
                              int C, float wofs);
void ct_rope_forward_cuda(ct_backend *be, float *qkv, const int32_t *pos, int B, int T, int NH,
                          int NKV, int HS, int pos0, const float *inv_freq);
void ct_rope_backward_cuda(ct_backend *be, float *dqkv, const int32_t *pos, int B, int T, int NH,
                           int NKV, int HS, int pos0, const float *inv_freq);
void ct_qknorm_forward_cuda(ct_backend *be, float *out, float *rstd, const float *inp,
                            const float *wq, const float *wk, int N, int NH, int NKV, int HS,
                            float eps, float wofs);
void ct_qknorm_backward_cuda(ct_backend *be, float *dinp, float *dwq, float *dwk,
                             const float *dout, const float *inp, const float *wq,
                             const float *wk, const float *rstd, int N, int NH, int NKV, int HS,
                             float wofs);
void ct_swiglu_forward_cuda(ct_backend *be, float *out, const float *inp, int N, int F);
void ct_swiglu_backward_cuda(ct_backend *be, float *dinp, const float *inp, const float *dout,
                             int N, int F);
void ct_geglu_forward_cuda(ct_backend *be, float *out, const float *inp, int N, int F);
void ct_geglu_backward_cuda(ct_backend *be, float *dinp, const float *inp, const float *dout,
                            int N, int F);
void ct_gelu_forward_cuda(ct_backend *be, float *out, const float *inp, size_t n);
void ct_gelu_backward_cuda(ct_backend *be, float *dinp, const float *inp, const float *dout,
                           size_t n);
void ct_residual_forward_cuda(ct_backend *be, float *out, const float *a, const float *b,
                              size_t n);
void ct_residual_backward_cuda(ct_backend *be, float *da, float *db, const float *dout, size_t n);
void ct_crossentropy_forward_cuda(ct_backend *be, float *losses, float *dlogits,
                                  const float *logits, const int32_t *targets, int N, int V,
                                  float dloss);
void ct_crossentropy_forward_bf16_cuda(ct_backend *be, float *losses, uint16_t *dlogits16,
                                       const uint16_t *logits16, int ld, const int32_t *targets,
                                       int N, int V, float dloss);

/* GEMMs through cuBLAS and cuBLASLt (cuda_matmul.cu, cuda_lt.cu) */
void ct_matmul_forward_cuda(ct_backend *be, float *out, const float *inp, const float *weight,
                            const float *bias, int N, int C, int OC);
void ct_matmul_backward_cuda(ct_backend *be, float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp, const float *weight, int N,
                             int C, int OC);
void ct_matmul_forward_bf16_cuda(ct_backend *be, float *out, const float *inp,
                                 const uint16_t *weight16, const float *bias, int N, int C,
                                 int OC);
void ct_matmul_gelu_forward_cuda(ct_backend *be, float *pre, float *out, const float *inp,
                                 const float *weight, const float *bias, int N, int C, int OC);
void ct_matmul_gelu_forward_bf16_cuda(ct_backend *be, float *pre, float *out, const float *inp,
                                      const uint16_t *weight16, const float *bias, int N, int C,
                                      int OC);
void ct_matmul_forward_bf16_in16_cuda(ct_backend *be, float *out, const uint16_t *inp16,
                                      const uint16_t *weight16, const float *bias, int N, int C,
                                      int OC);
void ct_matmul_gelu_forward_bf16_in16_cuda(ct_backend *be, float *pre, float *out,
                                           const uint16_t *inp16, const uint16_t *weight16,
                                           const float *bias, int N, int C, int OC);
void ct_layernorm_forward_out16_cuda(ct_backend *be, float *res, uint16_t *out16, float *mean,
                                     float *rstd, const float *a, const float *b,
                                     const float *weight, const float *bias, int N, int C,
                                     float eps);
void ct_rmsnorm_forward_out16_cuda(ct_backend *be, float *res, uint16_t *out16, float *rstd,
                                   const float *a, const float *b, const float *weight, int N,
                                   int C, float eps, float wofs);
void ct_mlp_act_forward_out16_cuda(ct_backend *be, uint16_t *out16, const float *inp, int N,
                                   int F, int act);
void ct_matmul_backward_bf16_cuda(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                  const float *dout, const uint16_t *inp16,
                                  const uint16_t *weight16, int N, int C, int OC);
void ct_matmul_forward_bf16_out16_cuda(ct_backend *be, uint16_t *out16, int ld,
                                       const float *inp, const uint16_t *weight16, int N, int C,
                                       int OC);
void ct_matmul_backward_bf16_dout16_cuda(ct_backend *be, float *dinp, float *dweight,
                                         const uint16_t *dout16, int ld, const uint16_t *inp16,
                                         const uint16_t *weight16, int N, int C, int OC);
void ct_matmul_forward_f16_cuda(ct_backend *be, float *out, const float *inp,
                                const uint16_t *weight16, const float *bias, int N, int C,
                                int OC);
void ct_matmul_backward_f16_cuda(ct_backend *be, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const uint16_t *inp16,
                                 const uint16_t *weight16, int N, int C, int OC);

/* attention (cuda_attention.cu; the _bf16 entries in cuda_flash.cu) */
void ct_attention_forward_cuda(ct_backend *be, float *out, float *lse, const float *qkv,
                               const int32_t *pos, const ct_attn_dropout *drop, int B, int T,
                               int NH, int NKV, int HS);
void ct_attention_backward_cuda(ct_backend *be, float *dqkv, const float *dout, const float *qkv,
                                const float *out, const float *lse, const int32_t *pos,
                                const ct_attn_dropout *drop, int B, int T, int NH, int NKV,
                                int HS);
void ct_attention_forward_bf16_cuda(ct_backend *be, float *out, float *lse, const float *qkv,
                                    const int32_t *pos, const ct_attn_dropout *drop, int B,
                                    int T, int NH, int NKV, int HS);
void ct_attention_backward_bf16_cuda(ct_backend *be, float *dqkv, const float *dout,
                                     const float *qkv, const float *out, const float *lse,
                                     const int32_t *pos, const ct_attn_dropout *drop, int B,
                                     int T, int NH, int NKV, int HS);
void ct_attention_decode_cuda(ct_backend *be, float *out, const float *q, const float *kcache,
                              const float *vcache, int n, int NH, int NKV, int HS);

#ifdef __cplusplus
}
#endif
#endif
