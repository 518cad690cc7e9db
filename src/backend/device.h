/*
 * What a backend with memory of its own says about its device, for the
 * memory plan and the monitor: the GPU's name, multiprocessors, clock and
 * memory (free now, free when the backend started, the most in use since),
 * the theoretical fp32 and bf16 peaks from those, and a GEMM peak measured
 * on the device (cuBLAS); the sim backend answers with the capacity a test
 * gives it (debug.sim_device_memory), so batch_size=auto and the plan's
 * device part are tested without a GPU. Also the rules by which the CUDA
 * backend sizes the workspaces it grows in the first step, which the plan
 * counts (one definition, used by both), and the choice of a rank's GPU.
 * Leaves out: several devices per process, and NVML (the runtime's
 * attributes say enough).
 */
#ifndef CT_BACKEND_DEVICE_H
#define CT_BACKEND_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"

typedef struct ct_device_info {
    char name[128];          /* "NVIDIA H100 80GB HBM3"; "sim" */
    int index;               /* cuda:N */
    char pci_bus_id[32];     /* "0000:3B:00.0" as CUDA names it; "" unknown (sim) */
    int cc_major, cc_minor;  /* compute capability; sim: 0.0, or CT_SIM_COMPUTE_CAPABILITY's */
    int sms;                 /* multiprocessors; 0 for sim */
    double clock_mhz;        /* the SM clock the driver reports as its peak; 0 unknown */
    size_t mem_total;        /* bytes of device memory (sim: its capacity) */
    size_t mem_free;         /* bytes free now */
    size_t mem_base_free;    /* bytes free when the backend had started (its context,
                              * cuBLAS and its own small buffers already taken): what a
                              * run's plan may fill */
    size_t mem_peak_used;    /* the most bytes in use since then, against mem_base_free
                              * (sampled at every allocation and synchronize) */
    double fp32_theory_gflops; /* ct_gpu_theory_gflops; 0 unknown */
    double bf16_theory_gflops;
} ct_device_info;

/* Whether be's tensors live in memory of their own that a plan must fit:
 * cuda, and sim when it was given a capacity. */
bool ct_backend_has_device_memory(const ct_backend *be);
/* Fills *out for such a backend. CT_ERR_ARG otherwise (host memory: the
 * plan's host part is all there is). */
ct_status ct_backend_device_info(ct_backend *be, ct_device_info *out);
/* Sustained GEMM rate on the device, GFLOP/s: the best of reps runs of an
 * n x n x n product of precision prec (a ct_precision: 0 fp32, TF32 off, as
 * the backend runs its fp32 GEMMs; 1 bf16 or 2 fp16 inputs with fp32
 * accumulation; a bool's true is bf16). Its buffers are freed before it
 * returns. CT_ERR_ARG for a backend without a GPU; CT_ERR_OOM. */
ct_status ct_backend_gemm_peak(ct_backend *be, int prec, int n, int reps, double *gflops);

/* The sim backend's device memory: at most cap bytes of its device buffers at
 * once (0: no limit, and no device memory of its own to plan); an allocation
 * past it fails with CT_ERR_OOM as cudaMalloc would. Call before anything is
 * allocated. No-op for other backends. */
void ct_backend_sim_set_capacity(ct_backend *be, size_t cap);

/* The theoretical dense peak of a GPU of compute capability major.minor
 * with sms multiprocessors at clock_mhz, GFLOP/s: fp32 FMA lanes (bf16
 * false) or dense bf16 tensor-core multiply-adds with fp32 accumulation
 * (bf16 true) per multiprocessor and clock, two FLOPs each. The rates of the
 * architectures ctrain knows, from NVIDIA's whitepapers (A100: 19.5 fp32 and
 * 312 bf16 TFLOP/s on 108 multiprocessors at 1410 MHz; H100 SXM: 67 and 989
 * on 132 at 1830-1980 MHz): 8.0: 64 fp32 lanes, 1024 bf16; 8.6 and 8.9: 128,
 * 512; 9.0: 128, 2048; 10.0: 128, 4096. 0 for any other (MFU against the
 * theory is then n/a) or a zero count or clock. */
double ct_gpu_theory_gflops(int major, int minor, int sms, double clock_mhz, bool bf16);

/* Whether a GPU of compute capability major.minor computes in bf16: cuBLAS's
 * bf16-input GEMMs (the tensor cores' bf16 path) and our bf16 kernels need
 * 8.0 (Ampere) or later; a T4 (7.5) or a V100 (7.0) has no bf16 path. Pure. */
bool ct_gpu_has_bf16(int major, int minor);

/* Refuse, before anything is built, a run whose bf16 work the GPU di cannot
 * do: train.precision = precision or lora.base_dtype = base_dtype being
 * "bf16" (NULL: not set) on a GPU of compute capability below 8.0. CT_ERR_ARG
 * names the key and its value, the GPU and its compute capability, with a
 * hint (train.precision=fp32, lora.base_dtype=fp32). fp32 passes on every
 * GPU, and so does a device with no compute capability (sim: 0.0). Pure. */
ct_status ct_device_check_bf16(const ct_device_info *di, const char *precision,
                               const char *base_dtype);

/* Refuse train.precision = fp16 where it does not belong, before anything is
 * built: fp16 with dynamic loss scaling is for NVIDIA GPUs without bf16
 * (compute capability below 8.0: T4, V100). di NULL: the run is on a CPU
 * (run.device cpu or ref): refused, the hint naming bf16 (with bf16
 * instructions) or fp32. A GPU of compute capability 8.0 or later: refused,
 * the hint naming bf16. Below 8.0, or a device without a capability (sim
 * without CT_SIM_COMPUTE_CAPABILITY): CT_OK. CT_ERR_ARG names the key, the
 * device and why. Pure. */
ct_status ct_device_check_fp16(const ct_device_info *di);

/* The compute capability the sim device reports: CT_SIM_COMPUTE_CAPABILITY
 * ("7.5"), 0.0 (untouched) when unset or empty; CT_ERR_ARG names a malformed
 * value. */
ct_status ct_device_sim_capability(int *major, int *minor);

/* The GPU a process takes for run.device = spec (cuda or cuda:N), as
 * `local_rank` of the ranks on its machine (-1: not launched by mpirun) on a
 * machine whose driver sees n_devices GPUs (<= 0: unknown): cuda:N takes N
 * whatever the rank; cuda takes local rank r's GPU r mod n_devices (0 for
 * one process), so ranks on a machine spread over its GPUs and share them
 * round-robin when there are more ranks than GPUs. -1 when spec names no
 * CUDA device. Pure. */
int ct_device_for_rank(const char *spec, int local_rank, int n_devices);
/* How many of the local_size ranks on a machine of n_devices GPUs (<= 0:
 * unknown, taken as 1) share the GPU one of them takes for run.device =
 * spec: all of them for cuda:N, ceil(local_size / n_devices) for cuda (at
 * least 1). Pure. */
int ct_device_share(const char *spec, int local_size, int n_devices);
/* This process's rank among the ranks on its machine, from the launcher's
 * environment (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PMI_LOCAL_RANK,
 * SLURM_LOCALID, LOCAL_RANK, in that order); -1 when none is set. */
int ct_device_local_rank(void);

/* ------------------------------------------------- the CUDA workspaces */
/* What the CUDA backend allocates beyond the model's and the optimizer's
 * buffers, sized here and used there (src/backend/cuda), so the plan counts
 * what the backend will hold. */

/* cuBLAS's workspace, set on the handle at start (cublasSetWorkspace):
 * NVIDIA's recommendation for Hopper, enough for every architecture. The
 * cuBLASLt GEMMs (bias and GELU epilogues) are handed the same buffer: both
 * run on the backend's one stream, one call at a time. It is allocated when
 * the backend starts, before the free memory the plan is read against is
 * sampled, so the plan counts it there; cuBLASLt's kernel code is in
 * CT_CUDA_RESERVE_MIB below, and its check before first use (cuda_matmul.cu)
 * borrows about 80 KB for a moment. */
#define CT_CUDA_CUBLAS_WS_BYTES ((size_t)32 << 20)
/* The column sums' row chunks for N rows of C columns (cuda_colsum.cuh): a
 * thread per column and chunk, about CT_CUDA_COLSUM_THREADS of them (a GPU's
 * worth: 132 multiprocessors of 2048), at least 64 chunks, at most N. */
#define CT_CUDA_COLSUM_THREADS (1 << 18)
static inline int ct_cuda_colsum_chunks(int N, int C) {
    long long c = C > 0 ? C : 1;
    long long k = (CT_CUDA_COLSUM_THREADS + c - 1) / c;
    if (k < 64) k = 64;
    if (k > N) k = N;
    return k > 0 ? (int)k : 1;
}
/* Their partials for N rows of C columns: two (chunks, C) double arrays. */
static inline size_t ct_cuda_ws_colsum_bytes(int N, int C) {
    return (size_t)2 * (size_t)ct_cuda_colsum_chunks(N, C) * (size_t)(C > 0 ? C : 0) *
           sizeof(double);
}
/* Attention backward's D = rowsum(dout o out): (B, NH, T) doubles. */
static inline size_t ct_cuda_ws_attention_bytes(int B, int NH, int T) {
    return (size_t)B * (size_t)NH * (size_t)T * sizeof(double);
}
/* The embedding backward's sort keys for N = B*T rows: two halves of N
 * 64-bit keys (cuda_encoder_bwd.cuh). */
static inline size_t ct_cuda_ws_encoder_bytes(int N) {
    return (size_t)2 * (size_t)(N > 0 ? N : 0) * sizeof(uint64_t);
}
/* The bf16 copy of a mixed-precision GEMM's fp32 operand of n elements. */
static inline size_t ct_cuda_ws_bf16_bytes(size_t n) { return n * 2; }
/* The bf16 attention's copies in the same workspace (cuda_flash.cu: the
 * mma.sync kernels at head sizes 64 and 128, precision bf16, no attention
 * dropout): the backward's q, k, v (N rows of W = (NH + 2 NKV) HS) and dout
 * (N rows of NH HS); the forward's q, k, v fit in that. 0 elsewhere. */
static inline size_t ct_cuda_ws_attention_bf16_bytes(int N, int NH, int NKV, int HS,
                                                     bool bf16, float attn_pdrop) {
    if (!bf16 || (HS != 64 && HS != 128) || attn_pdrop > 0.0f || N <= 0) return 0;
    return ct_cuda_ws_bf16_bytes((size_t)N * (size_t)(2 * NH + 2 * NKV) * (size_t)HS);
}
/* Device memory a CUDA run takes that no buffer of ours accounts for: the
 * kernels' code, loaded on first launch (ours, cuBLAS's and cuBLASLt's, lazily
 * since CUDA 12.2), and the driver's rounding of allocations to its pages. An estimate:
 * the GPU check prints the plan beside the peak the device reports. */
#define CT_CUDA_RESERVE_MIB 256

#endif
