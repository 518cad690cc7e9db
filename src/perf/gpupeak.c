/*
 * A GPU's figures for `ctrain hw` and `ctrain bench peak`: its properties and
 * memory (backend/device.h), the theoretical fp32 and bf16 peaks they give,
 * and the GEMM rates cuBLAS sustains on it, measured on a context of its own
 * (started and released here). Printing is the CLI's. Leaves out: several
 * GPUs at once (cuda:N picks one).
 */
#include "perf/bench.h"

#include <string.h>

#include "backend/ctx.h"
#include "backend/device.h"

ct_status ct_bench_gpu_peaks(int device, bool measure, int n, int reps, ct_gpu_peaks *out) {
    memset(out, 0, sizeof *out);
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = CT_BACKEND_CUDA;
    cp.device = device;
    cp.n_threads = 1;
    cp.pin_threads = false;
    ct_ctx *ctx = NULL;
    ct_status st = ct_ctx_init(&ctx, &cp);
    if (st) return st;
    ct_backend *be = ct_ctx_base_backend(ctx);
    st = ct_backend_device_info(be, &out->info);
    if (!st && measure) {
        out->gemm_n = n;
        st = ct_backend_gemm_peak(be, CT_PREC_FP32, n, reps, &out->fp32_gemm_gflops);
        /* no bf16 GEMM below compute capability 8.0 (a T4): the fp32 figures stand */
        if (!st && ct_gpu_has_bf16(out->info.cc_major, out->info.cc_minor))
            st = ct_backend_gemm_peak(be, CT_PREC_BF16, n, reps, &out->bf16_gemm_gflops);
    }
    ct_ctx_free(ctx);
    return st;
}
