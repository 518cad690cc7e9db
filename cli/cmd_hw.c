/*
 * `ctrain hw [--json] [--quick] [--no-bench]`: this machine's hardware profile
 * (src/perf/hwinfo.h) and its measured roofs (src/perf/bench.h): sustained
 * sgemm (each GEMM library the build has), the bf16 GEMM on the library and
 * the path a train.precision=bf16 run would take (native, or emulated: then
 * the rate says why bf16 is refused), the register-only FMA ceiling and the
 * triad bandwidth; the AMX flags and the kernel's answer, and the library
 * run.gemm=auto runs and why; with a GPU, its figures and theoretical peaks,
 * and cuBLAS's fp32 and bf16 GEMM peaks on it. --quick runs small benchmarks
 * (sgemm n=512, 32 MiB arrays, GPU GEMMs n=2048) for tests; --no-bench skips
 * them. A readable block by default, one JSON object with --json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cli.h"
#include "backend/cpu/gemm.h"
#include "ctrain/config.h"
#include "backend/ctx.h"
#include "perf/bench.h"
#include "perf/hwinfo.h"

static void hw_usage(void) {
    printf("usage: ctrain hw [--json] [--quick] [--no-bench]\n"
           "  cores, SMT, caches, ISA features, RAM and cgroup limits, allowed CPUs, GPU,\n"
           "  the theoretical FP32 peak and the machine signature, then measured roofs;\n"
           "  with a GPU, its figures, theoretical fp32/bf16 peaks and cuBLAS's GEMM peaks\n"
           "options:\n"
           "  --json      one JSON object on stdout\n"
           "  --quick     small benchmarks (sgemm n=512, 32 MiB bandwidth arrays)\n"
           "  --no-bench  no benchmarks: only what the system files say\n");
}

/* "48 KiB", "2 MiB", "unknown" into buf. */
static const char *hw_bytes(char *buf, size_t n, size_t v) {
    if (!v) snprintf(buf, n, "unknown");
    else if (v >= (1u << 30) && !(v % (1u << 30))) snprintf(buf, n, "%zu GiB", v >> 30);
    else if (v >= (1u << 30)) snprintf(buf, n, "%.1f GiB", (double)v / (1u << 30));
    else if (v >= (1u << 20) && !(v % (1u << 20))) snprintf(buf, n, "%zu MiB", v >> 20);
    else if (v >= (1u << 10)) snprintf(buf, n, "%zu KiB", v >> 10);
    else snprintf(buf, n, "%zu B", v);
    return buf;
}

typedef struct hw_measured {
    ct_gpu_peaks gpu; /* the first GPU's, when there is one (gpu_ok) */
    bool gpu_ok;
    double gemm, fma, bw;
    double lib_gemm[2]; /* sgemm per ct_gemm_lib; -1: not in this build */
    double bf16;        /* bf16 GEMM (bf16 inputs, fp32 sums) on bf16_lib; -1: not measured */
    int threads, gemm_n, lib; /* lib: the one `gemm` measured (run.gemm's default) */
    int bf16_lib;       /* the library a train.precision=bf16 run uses here */
    size_t bw_mib;
} hw_measured;

static int hw_measure(bool quick, hw_measured *m) {
    ct_ctx *ctx;
    ct_ctx_params cp = ct_ctx_params_default();
    if (ct_ctx_init(&ctx, &cp)) return cli_fail("hw");
    m->threads = ct_ctx_threads(ctx);
    m->gemm_n = quick ? 512 : 2048;
    m->bw_mib = quick ? 32 : 128;
    int reps = quick ? 2 : 3;
    int rc = 0;
    m->lib = ct_ctx_base_backend(ctx)->gemm;
    m->lib_gemm[0] = m->lib_gemm[1] = -1;
    if (ct_bench_gemm_peak(ctx, m->gemm_n, reps, &m->gemm) ||
        ct_bench_membw(ctx, m->bw_mib, reps, &m->bw))
        rc = cli_fail("hw");
    else
        m->fma = ct_bench_fma_peak(ctx);
    m->lib_gemm[m->lib] = m->gemm;
    if (!rc && ct_gemm_have_onednn()) { /* the other library, the same way */
        int lib = m->lib == CT_GEMM_ONEDNN ? CT_GEMM_OPENBLAS : CT_GEMM_ONEDNN;
        ct_bench_gemm_info gi;
        if (ct_bench_gemm_peak_lib(ctx, lib, false, m->gemm_n, reps, &gi)) rc = cli_fail("hw");
        else m->lib_gemm[lib] = gi.gflops;
    }
    /* the bf16 GEMMs a bf16 run would make, on the library it would use:
     * native, or (without bf16 instructions) the emulation's rate, which
     * says why bf16 is refused here */
    m->bf16 = -1;
    m->bf16_lib = ct_gemm_lib_for_run((ct_gemm_lib)m->lib, true, ct_gemm_have_bf16());
    if (!rc && ct_gemm_have_onednn()) {
        ct_bench_gemm_info gi;
        if (ct_bench_gemm_peak_lib(ctx, m->bf16_lib, true, m->gemm_n, reps, &gi))
            rc = cli_fail("hw");
        else m->bf16 = gi.gflops;
    }
    ct_ctx_free(ctx);
    return rc;
}

/* The first GPU's figures into m->gpu (its GEMM peaks with bench), when the
 * build and the machine have one; otherwise gpu_ok stays false (ct_cuda_probe
 * says why). */
static void hw_gpu(bool bench, bool quick, hw_measured *m) {
    if (ct_cuda_probe(NULL, 0, NULL, 0) <= 0) return;
    int n = quick ? 2048 : 8192;
    if (ct_bench_gpu_peaks(0, bench, n, quick ? 2 : 3, &m->gpu)) {
        fprintf(stderr, "ctrain hw: warning: the GPU did not start: %s\n", ct_last_error());
        ct_error_clear();
        return;
    }
    m->gpu_ok = true;
}

/* The profile and roofs as ct_hwinfo_to_json writes them (one line). */
/* bench: m's roofs were measured (else only its GPU part may be set). */
static int hw_print_json(const ct_hwinfo *h, const hw_measured *m, bool bench) {
    ct_hw_roofs r = {0};
    if (bench)
        r = (ct_hw_roofs){.threads = m->threads, .gemm_n = m->gemm_n, .membw_mib = m->bw_mib,
                          .gemm_gflops = m->gemm, .fma_gflops = m->fma, .membw_gbps = m->bw,
                          .gemm_bf16_gflops = m->bf16 > 0 ? m->bf16 : 0};
    char *json = ct_hwinfo_to_json(h, bench ? &r : NULL);
    if (!json) return cli_fail("hw");
    /* the CUDA backend's view, added to the profile's object */
    char name[128], why[256];
    int n = ct_cuda_probe(name, sizeof name, why, sizeof why);
    size_t len = strlen(json);
    while (len && json[len - 1] == '\n') json[--len] = 0;
    if (len && json[len - 1] == '}') json[--len] = 0; /* the object's own brace only */
    ct_config defaults;
    ct_config_default(&defaults);
    int bf16_lib = ct_gemm_lib_for_run((ct_gemm_lib)ct_gemm_lib_of(defaults.run.gemm), true,
                                       ct_gemm_have_bf16());
    char impl[64], awhy[256];
    ct_gemm_bf16_path path = ct_gemm_bf16_path_of((ct_gemm_lib)bf16_lib, impl, sizeof impl);
    printf("%s, \"gemm_default\": \"%s\", \"gemm_auto\": \"%s\", \"gemm_auto_why\": ", json,
           defaults.run.gemm, ct_gemm_lib_name((ct_gemm_lib)ct_gemm_lib_of("auto")));
    ct_gemm_auto_why(awhy, sizeof awhy);
    cli_put_json_string(awhy, strlen(awhy));
    printf(", \"onednn_built\": %s, \"bf16_gemm\": \"%s\", \"bf16_gemm_lib\": \"%s\", "
           "\"bf16_gemm_impl\": ", ct_gemm_have_onednn() ? "true" : "false",
           ct_gemm_bf16_path_name(path), ct_gemm_lib_name((ct_gemm_lib)bf16_lib));
    cli_put_json_string(impl, strlen(impl));
    printf(", \"bf16_precision_allowed\": %s",
           ct_gemm_bf16_path_native(path) ? "true" : "false");
    if (bench)
        printf(", \"gemm_peak_openblas_gflops\": %.2f, \"gemm_peak_onednn_gflops\": %.2f",
               m->lib_gemm[CT_GEMM_OPENBLAS], m->lib_gemm[CT_GEMM_ONEDNN]);
    printf(", \"cuda_built\": %s, \"cuda_devices\": %d, \"cuda_name\": ",
           n >= 0 ? "true" : "false", n > 0 ? n : 0);
    cli_put_json_string(name, strlen(name));
    printf(", \"cuda_error\": ");
    const char *err = n > 0 ? "" : why;
    cli_put_json_string(err, strlen(err));
    if (m->gpu_ok) cli_gpu_print(&m->gpu, true);
    printf("}\n");
    free(json);
    return 0;
}

static void hw_print_text(const ct_hwinfo *h, const hw_measured *m, bool bench,
                          const char *coretype) {
    char a[32], b[32], c[32];
    printf("cpu          %s\n", h->cpu_model[0] ? h->cpu_model : "unknown");
    printf("cores        %d physical, %d logical (%d thread%s per core), %d allowed to this "
           "process\n",
           h->physical_cores, h->logical_cpus, h->threads_per_core,
           h->threads_per_core == 1 ? "" : "s", h->allowed_cpus);
    if (h->cpu_quota > 0) printf("cpu quota    %.2f CPUs (cgroup)\n", h->cpu_quota);
    else printf("cpu quota    none\n");
    printf("caches       L1d %s, L2 %s, L3 %s (per instance)\n", hw_bytes(a, sizeof a, h->l1d),
           hw_bytes(b, sizeof b, h->l2), hw_bytes(c, sizeof c, h->l3));
    printf("isa          avx2 %s, fma %s, avx512f %s, avx512_bf16 %s, amx %s, neon %s\n",
           h->avx2 ? "yes" : "no", h->fma ? "yes" : "no", h->avx512f ? "yes" : "no",
           h->avx512_bf16 ? "yes" : "no", h->amx ? "yes" : "no", h->neon ? "yes" : "no");
    printf("amx          amx_tile %s, amx_bf16 %s, amx_int8 %s; kernel permission (arch_prctl "
           "ARCH_REQ_XCOMP_PERM): %s%s\n",
           h->amx_tile ? "yes" : "no", h->amx_bf16 ? "yes" : "no", h->amx_int8 ? "yes" : "no",
           h->amx_perm == 1 ? "granted" : h->amx_perm == 0 ? "refused: " : "not asked (no tiles)",
           h->amx_perm == 0 ? strerror(h->amx_perm_errno) : "");
    char bwhy[256];
    printf("bf16         instructions: %s\n", ct_hwinfo_bf16_describe(h, bwhy, sizeof bwhy));
    printf("memory       RAM %s, cgroup limit %s, available %s\n",
           hw_bytes(a, sizeof a, h->ram_bytes),
           h->cgroup_limit_bytes ? hw_bytes(b, sizeof b, h->cgroup_limit_bytes) : "none",
           hw_bytes(c, sizeof c, ct_hwinfo_memory_available(h)));
    printf("gpu          %s\n", !h->gpu ? "none" : h->gpu_name[0] ? h->gpu_name : "NVIDIA (model unknown)");
    char name[128], why[256];
    int n = ct_cuda_probe(name, sizeof name, why, sizeof why);
    if (n > 0) printf("cuda         %d device%s (run.device=cuda): %s\n", n, n == 1 ? "" : "s", name);
    else printf("cuda         %s\n", n < 0 ? "not built (run.device=cuda exits 2)" : why);
    if (m->gpu_ok) cli_gpu_print(&m->gpu, false);
    printf("peak fp32    %.1f GFLOP/s theoretical at %.0f MHz (the clock measured now; %.0f MHz "
           "nominal)\n", h->theoretical_gflops, h->measured_mhz, h->nominal_mhz);
    printf("openblas     %s kernels, OPENBLAS_CORETYPE %s\n", openblas_get_corename(),
           coretype ? coretype : "not set");
    int autolib = ct_gemm_lib_of("auto");
    ct_config defaults;
    ct_config_default(&defaults);
    printf("gemm         run.gemm=%s (the default) runs %s here: %s\n", defaults.run.gemm,
           autolib == CT_GEMM_ONEDNN ? "oneDNN" : "OpenBLAS", ct_gemm_auto_why(bwhy, sizeof bwhy));
    /* what train.precision=bf16 would run */
    int bf16_lib = ct_gemm_lib_for_run((ct_gemm_lib)ct_gemm_lib_of(defaults.run.gemm), true,
                                       ct_gemm_have_bf16());
    char impl[64];
    ct_gemm_bf16_path path = ct_gemm_bf16_path_of((ct_gemm_lib)bf16_lib, impl, sizeof impl);
    printf("bf16 gemm    %s\n", ct_gemm_bf16_path_describe(path, (ct_gemm_lib)bf16_lib, impl,
                                                          bwhy, sizeof bwhy));
    printf("signature    %s\n", h->signature);
    if (bench) {
        printf("measured     sgemm %dx%dx%d %.1f GFLOP/s (%s), FMA ceiling %.1f GFLOP/s, triad "
               "bandwidth %.1f GB/s (%d threads)\n",
               m->gemm_n, m->gemm_n, m->gemm_n, m->gemm, ct_gemm_lib_name((ct_gemm_lib)m->lib),
               m->fma, m->bw, m->threads);
        if (m->lib_gemm[CT_GEMM_ONEDNN] >= 0)
            printf("sgemm        OpenBLAS %.1f GFLOP/s, oneDNN %.1f GFLOP/s\n",
                   m->lib_gemm[CT_GEMM_OPENBLAS], m->lib_gemm[CT_GEMM_ONEDNN]);
        if (m->bf16 >= 0) {
            ct_gemm_bf16_path bp = ct_gemm_bf16_path_of((ct_gemm_lib)m->bf16_lib, NULL, 0);
            printf("bf16 peak    %.1f GFLOP/s (%s, %s)%s\n", m->bf16,
                   ct_gemm_lib_name((ct_gemm_lib)m->bf16_lib), ct_gemm_bf16_path_name(bp),
                   ct_gemm_bf16_path_native(bp) ? ": MFU of a bf16 run is against it"
                                                : ": not a bf16 speed, so bf16 runs are refused");
        }
    }
}

int cmd_hw(int argc, char **argv) {
    bool json = false, quick = false, bench = true;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            hw_usage();
            return 0;
        }
        if (!strcmp(o, "--json")) json = true;
        else if (!strcmp(o, "--quick")) quick = true;
        else if (!strcmp(o, "--no-bench")) bench = false;
        else return cli_usage_error("hw", "unknown option '%s'", o);
    }
    ct_hwinfo h;
    if (ct_hwinfo_read(&h)) return cli_fail("hw");
    hw_measured m = {0};
    if (bench) {
        int rc = hw_measure(quick, &m);
        if (rc) return rc;
    }
    hw_gpu(bench, quick, &m);
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    if (json) return hw_print_json(&h, &m, bench);
    hw_print_text(&h, &m, bench, coretype);
    return 0;
}
