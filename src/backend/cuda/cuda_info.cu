/*
 * What the CUDA backend says about its GPU (backend/device.h): the
 * properties read at init (compute capability, multiprocessors, the peak SM
 * clock), the memory cudaMemGetInfo reports now, at init and at its lowest
 * since (the run's peak), the theoretical peaks from those, and the GEMM
 * peak cuBLAS sustains on it: fp32 with the backend's math mode (no TF32)
 * or bf16 inputs with fp32 accumulation on the tensor cores, timed with
 * events on the backend's stream. Leaves out: NVML (clocks under load,
 * power), and GEMM shapes other than square.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"

extern "C" ct_status ct_cuda_device_info(ct_backend *be, ct_device_info *out) {
    cuda_state *s = cuda_st(be);
    memset(out, 0, sizeof *out);
    cuda_mem_sample(be);
    snprintf(out->name, sizeof out->name, "%.127s", s->name);
    out->index = s->device;
    if (cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, s->device) !=
        cudaSuccess) {
        cudaGetLastError();
        out->pci_bus_id[0] = '\0';
    }
    out->cc_major = s->cc_major;
    out->cc_minor = s->cc_minor;
    out->sms = s->sms;
    out->clock_mhz = s->clock_mhz;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    out->mem_total = total_b ? total_b : s->mem_total;
    out->mem_free = free_b;
    out->mem_base_free = s->mem_base_free;
    out->mem_peak_used = s->mem_base_free > s->mem_min_free ? s->mem_base_free - s->mem_min_free
                                                            : 0;
    out->fp32_theory_gflops = ct_gpu_theory_gflops(s->cc_major, s->cc_minor, s->sms,
                                                   s->clock_mhz, false);
    out->bf16_theory_gflops = ct_gpu_theory_gflops(s->cc_major, s->cc_minor, s->sms,
                                                   s->clock_mhz, true);
    return CT_OK;
}

__global__ void k_fill_pattern(float *x, size_t n, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = scale * (float)((i * 2654435761u) % 1024u) / 1024.0f;
}

extern "C" ct_status ct_cuda_gemm_peak(ct_backend *be, int prec, int n, int reps,
                                       double *gflops) {
    bool in16 = prec == 1 || prec == 2;          /* bf16 or fp16 inputs */
    cudaDataType ab = prec == 2 ? CUDA_R_16F : CUDA_R_16BF;
    const char *what = prec == 2 ? "GemmEx fp16" : prec == 1 ? "GemmEx bf16" : "sgemm";
    cuda_state *s = cuda_st(be);
    const cublas_fns *f = cuda_blas(be);
    cudaStream_t st = cuda_stream(be);
    *gflops = 0;
    if (n < 64) n = 64;
    if (reps < 1) reps = 1;
    size_t nn = (size_t)n * n, in_bytes = nn * (in16 ? 2 : 4);
    void *a = NULL, *b = NULL;
    float *c = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    ct_status ret = CT_OK;
    if (cudaMalloc(&a, in_bytes) != cudaSuccess || cudaMalloc(&b, in_bytes) != cudaSuccess ||
        cudaMalloc((void **)&c, nn * 4) != cudaSuccess) {
        cudaGetLastError();
        ret = CT_ERR(CT_ERR_OOM, "no GPU memory for a %d x %d GEMM peak measurement", n, n);
        goto fail;
    }
    /* values that keep the sums finite; bf16 inputs through the fp32 kernel
     * and the backend's rounding */
    k_fill_pattern<<<cuda_grid(nn, 256), 256, 0, st>>>(c, nn, 0.01f);
    if (prec == 2) {
        ct_f32_to_f16_cuda(be, (uint16_t *)a, c, nn);
        ct_f32_to_f16_cuda(be, (uint16_t *)b, c, nn);
    } else if (in16) {
        ct_f32_to_bf16_cuda(be, (uint16_t *)a, c, nn);
        ct_f32_to_bf16_cuda(be, (uint16_t *)b, c, nn);
    } else {
        cudaMemcpyAsync(a, c, nn * 4, cudaMemcpyDeviceToDevice, st);
        cudaMemcpyAsync(b, c, nn * 4, cudaMemcpyDeviceToDevice, st);
    }
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        ret = CT_ERR(CT_ERR_IO, "CUDA device %d: cannot create timing events", s->device);
        goto fail;
    }
    {
        float one = 1.0f, zero = 0.0f;
        double best = 0;
        /* the first run warms up (kernel load, heuristics); then the best of reps */
        for (int r = 0; r <= reps; r++) {
            cudaEventRecord(e0, st);
            cublasStatus_t cs;
            if (in16)
                cs = f->gemm_ex((cublasHandle_t)s->cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                                a, ab, n, b, ab, n, &zero, c, CUDA_R_32F, n,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            else
                cs = f->sgemm((cublasHandle_t)s->cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                              (const float *)a, n, (const float *)b, n, &zero, c, n);
            cudaEventRecord(e1, st);
            if (cs != CUBLAS_STATUS_SUCCESS) {
                ret = CT_ERR(CT_ERR_IO, "CUDA device %d: cuBLAS %s failed (status %d) measuring "
                             "the GEMM peak", s->device, what, (int)cs);
                goto fail;
            }
            float ms = 0;
            cudaError_t e = cudaEventSynchronize(e1);
            if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
            if (e != cudaSuccess) {
                ret = CT_ERR(CT_ERR_IO, "CUDA device %d: the GEMM peak measurement failed: %s",
                             s->device, cudaGetErrorString(e));
                goto fail;
            }
            double g = 2.0 * n * (double)n * n / (ms * 1e-3) / 1e9;
            if (r > 0 && g > best) best = g;
        }
        *gflops = best;
    }
fail:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaStreamSynchronize(st);
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    if (c) cudaFree(c);
    return ret;
}
