/*
 * The device questions of backend/device.h: answered by the CUDA backend
 * (backend/cuda/cuda_info.cu) on a GPU, by the sim backend's capacity (and
 * the compute capability CT_SIM_COMPUTE_CAPABILITY names) in tests, refused
 * for host memory; and the pure parts (the theoretical GPU
 * peaks, a rank's GPU) that need no device at all.
 */
#include "backend/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim.h"
#ifdef CT_USE_CUDA
#include "backend/cuda/cuda_int.h"
#endif

static bool is_cuda(const ct_backend *be) {
#ifdef CT_USE_CUDA
    return be && be->i == &ct_backend_cuda_i;
#else
    (void)be;
    return false;
#endif
}

static bool is_sim(const ct_backend *be) { return be && be->i == &ct_backend_sim_i; }

bool ct_backend_has_device_memory(const ct_backend *be) {
    if (is_cuda(be)) return true;
    size_t cap = 0;
    if (is_sim(be)) ct_sim_memory(be, &cap, NULL, NULL);
    return cap > 0;
}

/* The compute capability sim reports: CT_SIM_COMPUTE_CAPABILITY ("7.5"), so
 * what a GPU's compute capability decides (bf16 refused below 8.0) is tested
 * end to end; unset or empty: 0.0, none. CT_ERR_ARG names a malformed value. */
ct_status ct_device_sim_capability(int *major, int *minor) {
    const char *v = getenv("CT_SIM_COMPUTE_CAPABILITY");
    if (!v || !*v) return CT_OK;
    char *e = NULL;
    long ma = strtol(v, &e, 10), mi = -1;
    if (e != v && *e == '.' && e[1] >= '0' && e[1] <= '9') {
        const char *m = e + 1;
        mi = strtol(m, &e, 10);
    }
    if (*e || ma < 1 || ma > 99 || mi < 0 || mi > 9) {
        ct_status st = CT_ERR(CT_ERR_ARG, "CT_SIM_COMPUTE_CAPABILITY = \"%.40s\": expected "
                              "MAJOR.MINOR, such as 7.5", v);
        ct_error_hint("unset it, or give the compute capability the sim device should report");
        return st;
    }
    *major = (int)ma;
    *minor = (int)mi;
    return CT_OK;
}

ct_status ct_backend_device_info(ct_backend *be, ct_device_info *out) {
    memset(out, 0, sizeof *out);
#ifdef CT_USE_CUDA
    if (is_cuda(be)) return ct_cuda_device_info(be, out);
#endif
    size_t cap = 0, used = 0, peak = 0;
    if (is_sim(be)) ct_sim_memory(be, &cap, &used, &peak);
    if (!cap)
        return CT_ERR(CT_ERR_ARG, "backend %s has no device memory of its own",
                      be && be->i ? be->i->name : "?");
    snprintf(out->name, sizeof out->name, "sim");
    out->mem_total = cap;
    out->mem_free = cap - used;
    /* sim's "context" takes nothing: all of it is the run's */
    out->mem_base_free = cap;
    out->mem_peak_used = peak;
    return ct_device_sim_capability(&out->cc_major, &out->cc_minor);
}

ct_status ct_backend_gemm_peak(ct_backend *be, int prec, int n, int reps, double *gflops) {
    *gflops = 0;
#ifdef CT_USE_CUDA
    if (is_cuda(be)) return ct_cuda_gemm_peak(be, prec, n, reps, gflops);
#else
    (void)prec;
    (void)n;
    (void)reps;
#endif
    return CT_ERR(CT_ERR_ARG, "backend %s has no GPU to measure a GEMM peak on",
                  be && be->i ? be->i->name : "?");
}

void ct_backend_sim_set_capacity(ct_backend *be, size_t cap) {
    if (is_sim(be)) ct_sim_set_capacity(be, cap);
}

double ct_gpu_theory_gflops(int major, int minor, int sms, double clock_mhz, bool bf16) {
    static const struct {
        int major, minor, fp32_lanes, bf16_fma;
    } rates[] = {{8, 0, 64, 1024}, {8, 6, 128, 512}, {8, 9, 128, 512}, {9, 0, 128, 2048},
                 {10, 0, 128, 4096}};
    if (sms <= 0 || !(clock_mhz > 0)) return 0;
    for (size_t i = 0; i < sizeof rates / sizeof *rates; i++) {
        if (rates[i].major != major || rates[i].minor != minor) continue;
        double per_clock = 2.0 * (bf16 ? rates[i].bf16_fma : rates[i].fp32_lanes);
        return per_clock * sms * clock_mhz * 1e6 / 1e9;
    }
    return 0;
}

bool ct_gpu_has_bf16(int major, int minor) {
    (void)minor;
    return major >= 8;
}

ct_status ct_device_check_bf16(const ct_device_info *di, const char *precision,
                               const char *base_dtype) {
    if (di->cc_major <= 0 || ct_gpu_has_bf16(di->cc_major, di->cc_minor)) return CT_OK;
    bool prec = precision && !strcmp(precision, "bf16");
    bool base = base_dtype && !strcmp(base_dtype, "bf16");
    if (!prec && !base) return CT_OK;
    const char *key = prec && base ? "train.precision = bf16 and lora.base_dtype"
                      : prec       ? "train.precision"
                                   : "lora.base_dtype";
    const char *fix = prec && base ? "set train.precision=fp32 and lora.base_dtype=fp32 (fp32 "
                                     "runs on every GPU)"
                      : prec       ? "set train.precision=fp32 (fp32 runs on every GPU)"
                                   : "set lora.base_dtype=fp32 (a frozen base kept in fp32 runs "
                                     "on every GPU)";
    ct_status st = CT_ERR(CT_ERR_ARG, "%s = bf16: the GPU %s (cuda:%d, compute capability "
                          "%d.%d) cannot run bf16 GEMMs: cuBLAS's bf16 inputs need compute "
                          "capability 8.0 (Ampere) or later", key, di->name[0] ? di->name : "?",
                          di->index, di->cc_major, di->cc_minor);
    ct_error_hint("%s, or run on a GPU of compute capability 8.0 or later", fix);
    return st;
}

ct_status ct_device_check_fp16(const ct_device_info *di) {
    if (!di) {
        ct_status st = CT_ERR(CT_ERR_ARG, "train.precision = fp16 on the CPU: fp16 is for NVIDIA "
                              "GPUs without bf16 (compute capability below 8.0: T4, V100), with "
                              "dynamic loss scaling; a CPU has no fp16 GEMMs here");
        ct_error_hint("on a CPU use train.precision=bf16 where it has bf16 instructions "
                      "(AVX512_BF16, AMX), or fp32 (the default)");
        return st;
    }
    if (di->cc_major <= 0 || !ct_gpu_has_bf16(di->cc_major, di->cc_minor)) return CT_OK;
    ct_status st = CT_ERR(CT_ERR_ARG, "train.precision = fp16 on the GPU %s (cuda:%d, compute "
                          "capability %d.%d): this GPU has bf16, and fp16 (with loss scaling) is "
                          "only for GPUs without it (compute capability below 8.0: T4, V100)",
                          di->name[0] ? di->name : "?", di->index, di->cc_major, di->cc_minor);
    ct_error_hint("this GPU has bf16: use train.precision=bf16, same speed, no loss scaling");
    return st;
}

int ct_device_for_rank(const char *spec, int local_rank, int n_devices) {
    if (!spec) return -1;
    int index;
    char tail;
    if (sscanf(spec, "cuda:%d%c", &index, &tail) == 1) return index >= 0 ? index : -1;
    if (strcmp(spec, "cuda") != 0) return -1;
    if (local_rank <= 0) return 0;
    return n_devices > 0 ? local_rank % n_devices : local_rank;
}

int ct_device_share(const char *spec, int local_size, int n_devices) {
    if (local_size < 1) local_size = 1;
    if (n_devices < 1) n_devices = 1;
    int index;
    char tail;
    if (spec && sscanf(spec, "cuda:%d%c", &index, &tail) == 1) return local_size;
    return (local_size + n_devices - 1) / n_devices;
}

int ct_device_local_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "PMI_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long r = strtol(v, &end, 10);
        if (*end == 0 && r >= 0 && r < 1 << 20) return (int)r;
    }
    return -1;
}
