/*
 * A device's memory and peaks, without a GPU (src/backend/device.c, the sim
 * backend's capacity, the plan's device part in src/perf/memplan.c, the
 * monitor on a device run): the theoretical GPU peaks from compute
 * capability, multiprocessors and clock; which GPU a rank takes and how many
 * ranks share it; the launcher's local rank; the sim allocator refusing what
 * its capacity does not hold, as cudaMalloc would, and counting its peak; the
 * CUDA workspaces the plan counts; a device plan whose device part is what
 * run.memory_limit bounds (batch_size=auto fits the device, a refusal names
 * device memory); MFU and the memory alert against a GPU's figures; bf16
 * refused on a GPU of compute capability below 8.0, and the compute
 * capability sim reports when CT_SIM_COMPUTE_CAPABILITY names one.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ctx.h"
#include "backend/device.h"
#include "ct_test.h"
#include "ctrain/config.h"
#include "ctrain/model.h"
#include "perf/memplan.h"
#include "perf/monitor.h"

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-9; }

static void test_theory(void) {
    /* H100 SXM: 132 multiprocessors, 1980 MHz: 128 fp32 lanes, 2048 bf16 FMAs */
    CHECK(near(ct_gpu_theory_gflops(9, 0, 132, 1980, false), 2.0 * 128 * 132 * 1980e6 / 1e9));
    CHECK(near(ct_gpu_theory_gflops(9, 0, 132, 1980, true), 2.0 * 2048 * 132 * 1980e6 / 1e9));
    /* A100: 108 at 1410 MHz: NVIDIA's 19.5 and 312 TFLOP/s */
    CHECK(fabs(ct_gpu_theory_gflops(8, 0, 108, 1410, false) - 19500) < 10);
    CHECK(fabs(ct_gpu_theory_gflops(8, 0, 108, 1410, true) - 312000) < 200);
    CHECK(near(ct_gpu_theory_gflops(8, 9, 58, 2040, true), 2.0 * 512 * 58 * 2040e6 / 1e9));
    /* unknown architectures and missing figures: n/a */
    CHECK(ct_gpu_theory_gflops(7, 5, 40, 1590, false) == 0);
    CHECK(ct_gpu_theory_gflops(9, 0, 0, 1980, true) == 0);
    CHECK(ct_gpu_theory_gflops(9, 0, 132, 0, true) == 0);
}

static void test_rank_device(void) {
    CHECK(ct_device_for_rank("cuda", -1, 4) == 0);
    CHECK(ct_device_for_rank("cuda", 0, 4) == 0);
    CHECK(ct_device_for_rank("cuda", 3, 4) == 3);
    CHECK(ct_device_for_rank("cuda", 5, 4) == 1); /* more ranks than GPUs: round-robin */
    CHECK(ct_device_for_rank("cuda", 2, 0) == 2); /* count unknown: the init says */
    CHECK(ct_device_for_rank("cuda:2", 3, 4) == 2); /* cuda:N overrides the rank */
    CHECK(ct_device_for_rank("cuda:0", 7, 8) == 0);
    CHECK(ct_device_for_rank("cpu", 1, 4) == -1);
    CHECK(ct_device_for_rank("cuda:x", 1, 4) == -1);
    CHECK(ct_device_for_rank("cuda:1x", 1, 4) == -1);
    CHECK(ct_device_share("cuda", 8, 4) == 2);
    CHECK(ct_device_share("cuda", 3, 4) == 1);
    CHECK(ct_device_share("cuda", 5, 2) == 3);
    CHECK(ct_device_share("cuda:1", 4, 8) == 4);
    CHECK(ct_device_share("cuda", 1, 0) == 1);

    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                 "PMI_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    CHECK(ct_device_local_rank() == -1);
    setenv("SLURM_LOCALID", "2", 1);
    CHECK(ct_device_local_rank() == 2);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1); /* Open MPI's comes first */
    CHECK(ct_device_local_rank() == 3);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "three", 1); /* not a number: the next one */
    CHECK(ct_device_local_rank() == 2);
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

static void test_sim_capacity(void) {
    ct_ctx *ctx = NULL;
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = CT_BACKEND_SIM;
    cp.n_threads = 1;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    ct_backend *be = ct_ctx_base_backend(ctx);
    ct_device_info di;
    /* without a capacity sim has no memory of its own to plan */
    CHECK(!ct_backend_has_device_memory(be));
    CHECK(ct_backend_device_info(be, &di) == CT_ERR_ARG);
    double g;
    CHECK(ct_backend_gemm_peak(be, CT_PREC_FP32, 64, 1, &g) == CT_ERR_ARG && g == 0);
    ct_ctx_free(ctx);

    cp.sim_device_memory = 1 << 20;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    be = ct_ctx_base_backend(ctx);
    CHECK(ct_backend_has_device_memory(be));
    void *a = be->i->buf_alloc(be, 600 << 10, CT_TAG_ACTS);
    CHECK(a != NULL);
    /* past the capacity: refused as a full GPU refuses, naming the setting */
    void *b = be->i->buf_alloc(be, 600 << 10, CT_TAG_ACTS);
    CHECK(b == NULL && ct_last_status() == CT_ERR_OOM);
    CHECK(strstr(ct_last_error(), "debug.sim_device_memory") != NULL);
    ct_error_clear();
    CHECK(ct_backend_device_info(be, &di) == CT_OK);
    CHECK(di.mem_total == 1 << 20 && di.mem_base_free == 1 << 20);
    CHECK(di.mem_free == (1 << 20) - (600 << 10));
    CHECK(di.mem_peak_used == 600 << 10);
    CHECK(di.cc_major == 0 && di.fp32_theory_gflops == 0);
    be->i->buf_free(be, a);
    b = be->i->buf_alloc(be, 900 << 10, CT_TAG_ACTS); /* fits once a is gone */
    CHECK(b != NULL);
    CHECK(ct_backend_device_info(be, &di) == CT_OK && di.mem_peak_used == 900 << 10);
    be->i->buf_free(be, b);
    CHECK(ct_backend_device_info(be, &di) == CT_OK && di.mem_free == 1 << 20);
    ct_ctx_free(ctx);
}

/* CT_SIM_COMPUTE_CAPABILITY: the compute capability sim reports (what the
 * bf16 refusal's end-to-end test runs on); a malformed value is refused. */
static void test_sim_compute_capability(void) {
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = CT_BACKEND_SIM;
    cp.n_threads = 1;
    cp.sim_device_memory = 1 << 20;
    static const struct { const char *v; int major, minor; } ok[] = {
        {"7.5", 7, 5}, {"8.0", 8, 0}, {"10.0", 10, 0}, {"", 0, 0}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        setenv("CT_SIM_COMPUTE_CAPABILITY", ok[i].v, 1);
        ct_ctx *ctx = NULL;
        CHECK_MSG(ct_ctx_init(&ctx, &cp) == CT_OK, "%s: %s", ok[i].v, ct_last_error());
        ct_device_info di;
        CHECK(ctx && ct_backend_device_info(ct_ctx_base_backend(ctx), &di) == CT_OK);
        CHECK_MSG(ctx && di.cc_major == ok[i].major && di.cc_minor == ok[i].minor, "%s: %d.%d",
                  ok[i].v, di.cc_major, di.cc_minor);
        ct_ctx_free(ctx);
    }
    static const char *const bad[] = {"7", "7.", "7.x", ".5", "x", "0.0", "7.5.1", "7.50", "-7.5"};
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    for (size_t i = 0; ctx && i < sizeof bad / sizeof *bad; i++) {
        setenv("CT_SIM_COMPUTE_CAPABILITY", bad[i], 1);
        ct_device_info di;
        CHECK_MSG(ct_backend_device_info(ct_ctx_base_backend(ctx), &di) == CT_ERR_ARG,
                  "%s accepted", bad[i]);
        CHECK(strstr(ct_last_error(), "CT_SIM_COMPUTE_CAPABILITY") != NULL);
        ct_error_clear();
    }
    ct_ctx_free(ctx);
    unsetenv("CT_SIM_COMPUTE_CAPABILITY");
}

/* The workspace rule, written out for one shape: C 64, 4 heads, F 256,
 * V 1000, B 2, T 32 (N 64 rows, a head chunk of all 64). */
static void test_cuda_ws(void) {
    ct_model_config c;
    ct_model_config_gpt2(&c, 2, 4, 64, 1000, 64);
    ct_model_opts o = ct_model_opts_default();
    size_t att = 2 * 4 * 32 * sizeof(double);
    size_t col = 2 * 64 * 256 * sizeof(double); /* 64 chunks, the MLP's 4C = 256 columns */
    size_t enc = 2 * 64 * sizeof(uint64_t);     /* the embedding backward's sort keys */
    CHECK(ct_run_plan_cuda_ws(&c, 2, 32, &o, NULL) == att + col + enc);
    /* bf16: the largest fp32 GEMM operand, the head's dlogits chunk (64 x 1000) */
    o.precision = CT_PREC_BF16;
    CHECK(ct_run_plan_cuda_ws(&c, 2, 32, &o, NULL) == 64 * 1000 * 2 + att + col + enc);
    /* fewer rows than chunks: a chunk per row */
    o.precision = CT_PREC_FP32;
    CHECK(ct_run_plan_cuda_ws(&c, 1, 16, &o, NULL) == 1 * 4 * 16 * sizeof(double) +
                                                         2 * 16 * 256 * sizeof(double) +
                                                         2 * 16 * sizeof(uint64_t));
    /* the chunks: about 2^18 threads, at least 64 chunks, at most a row each */
    CHECK(ct_cuda_colsum_chunks(0, 768) == 1 && ct_cuda_colsum_chunks(5, 768) == 5 &&
          ct_cuda_colsum_chunks(64, 768) == 64 && ct_cuda_colsum_chunks(100000, 8192) == 64);
    CHECK(ct_cuda_colsum_chunks(16384, 768) == 342 && ct_cuda_colsum_chunks(16384, 3072) == 86 &&
          ct_cuda_colsum_chunks(16384, 64) == 4096 && ct_cuda_colsum_chunks(1000, 64) == 1000);
    /* GPT-2 124M at B=16, T=1024: the most partials of the widths it sums
     * (768 channels: 342 chunks; qkv 2304: 114; 3072: 86; head size 64: 4096) */
    ct_model_config g;
    CHECK(ct_model_config_preset(&g, "gpt2") == CT_OK);
    size_t most = 0, w[] = {768, 2304, 3072, 64};
    for (int i = 0; i < 4; i++)
        if (2 * (size_t)ct_cuda_colsum_chunks(16384, (int)w[i]) * w[i] * 8 > most)
            most = 2 * (size_t)ct_cuda_colsum_chunks(16384, (int)w[i]) * w[i] * 8;
    CHECK(most == 2 * 86 * 3072 * 8);
    CHECK(ct_run_plan_cuda_ws(&g, 16, 1024, &o, NULL) ==
          16 * 12 * 1024 * sizeof(double) + most + 2 * 16384 * sizeof(uint64_t));
    /* bf16 at head size 64: the attention's bf16 q, k, v and dout share the
     * GEMMs' workspace; here they are its largest use (64 rows of (2 NH + 2
     * NKV) HS = 512, against the GEMMs' largest copy, the q, k, v linear's
     * dout: 64 rows of (NH + 2 NKV) HS = 384) */
    ct_model_config l;
    ct_model_config_llama(&l, 2, 2, 2, 128, 64, 100, 64);
    o.precision = CT_PREC_FP32;
    size_t base = ct_run_plan_cuda_ws(&l, 2, 32, &o, NULL);
    o.precision = CT_PREC_BF16;
    CHECK(ct_run_plan_cuda_ws(&l, 2, 32, &o, NULL) == base + 64 * 512 * 2);
    CHECK(ct_cuda_ws_attention_bf16_bytes(64, 2, 2, 64, true, 0.0f) == 64 * 512 * 2);
    /* not where the fp32 kernels run: attention dropout, other head sizes */
    l.attn_pdrop = 0.1f;
    CHECK(ct_run_plan_cuda_ws(&l, 2, 32, &o, NULL) == base + 64 * 384 * 2);
    l.attn_pdrop = 0.0f;
    ct_model_config_llama(&l, 2, 4, 4, 128, 64, 100, 64); /* head size 32 */
    size_t base32 = ct_run_plan_cuda_ws(&l, 2, 32, &(ct_model_opts){.precision = CT_PREC_FP32}, NULL);
    CHECK(ct_run_plan_cuda_ws(&l, 2, 32, &o, NULL) == base32 + 64 * 384 * 2);
    CHECK(ct_cuda_ws_attention_bf16_bytes(64, 4, 4, 32, true, 0.0f) == 0 &&
          ct_cuda_ws_attention_bf16_bytes(64, 2, 2, 128, false, 0.0f) == 0);
}

/* A plan of cfg (B, T, sizes) on a simulated device of `free` bytes. */
static ct_status device_plan(ct_config *cfg, const ct_model_config *mc, size_t free_bytes,
                             bool cuda, ct_run_plan *p, size_t *limit) {
    ct_run_env env;
    CHECK(ct_run_env_measure(&env, NULL) == CT_OK);
    env.device = true;
    env.device_cuda = cuda;
    env.device_free = env.device_total = free_bytes;
    env.device_share = 1;
    snprintf(env.device_name, sizeof env.device_name, "test GPU");
    return ct_run_plan_for_env(cfg, mc, 1, 1, &env, p, limit);
}

static void test_device_plan(void) {
    ct_model_config mc;
    ct_model_config_gpt2(&mc, 2, 2, 64, 256, 64);
    ct_config *cfg = malloc(sizeof *cfg);
    ct_config_default(cfg);
    cfg->train.seq_len = 64;
    cfg->train.batch_size = 4;
    snprintf(cfg->run.memory_limit, sizeof cfg->run.memory_limit, "50%%");
    ct_run_plan p;
    size_t limit = 0;
    size_t gib = (size_t)1 << 30;
    CHECK(device_plan(cfg, &mc, gib, true, &p, &limit) == CT_OK);
    /* the device holds the tensors and the backend's workspaces and reserve */
    CHECK(p.device == p.model.total + p.optim + p.dev_ws + p.dev_reserve);
    CHECK(p.dev_ws == ct_run_plan_cuda_ws(&mc, 4, 64, &p.opts, NULL));
    CHECK(p.dev_reserve == (size_t)CT_CUDA_RESERVE_MIB << 20);
    CHECK(p.total == p.data + p.shards + p.runtime); /* the host part only */
    CHECK(limit == gib / 2); /* run.memory_limit is of the device's free memory */
    /* sim: no workspaces, no reserve */
    CHECK(device_plan(cfg, &mc, gib, false, &p, &limit) == CT_OK);
    CHECK(p.device == p.model.total + p.optim && p.dev_ws == 0 && p.dev_reserve == 0);

    /* batch_size=auto fits the device: the largest divisor of the effective
     * batch whose device part is under the limit */
    cfg->train.batch_size = 0;
    cfg->train.effective_batch = 32;
    snprintf(cfg->run.memory_limit, sizeof cfg->run.memory_limit, "100%%");
    ct_run_plan p8;
    cfg->train.batch_size = 8;
    cfg->train.effective_batch = 0;
    CHECK(device_plan(cfg, &mc, gib, false, &p8, &limit) == CT_OK);
    size_t cap = p8.device + 1; /* B = 8 fits just; 16 does not */
    cfg->train.batch_size = 0;
    cfg->train.effective_batch = 32;
    CHECK(device_plan(cfg, &mc, cap, false, &p, &limit) == CT_OK);
    CHECK(p.B == 8 && p.grad_accum == 4 && p.device <= cap);
    /* a byte limit past the device is the device's size */
    snprintf(cfg->run.memory_limit, sizeof cfg->run.memory_limit, "64GB");
    CHECK(device_plan(cfg, &mc, cap, false, &p, &limit) == CT_OK && p.B == 8 && limit == cap);
    /* nothing fits: refused before anything is allocated, the device named */
    cfg->train.batch_size = 4;
    cfg->train.effective_batch = 0;
    CHECK(device_plan(cfg, &mc, p8.model.params, false, &p, &limit) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "device memory on test GPU") != NULL);
    ct_error_clear();
    free(cfg);
}

static void test_monitor_gpu(void) {
    ct_model_config mc;
    ct_model_config_gpt2(&mc, 12, 12, 768, 50257, 1024);
    ct_config *cfg = malloc(sizeof *cfg);
    ct_config_default(cfg);
    /* an H100's bf16 peaks: measured 700 TFLOP/s, theoretical 1070 */
    double peak = 700e3, theory = ct_gpu_theory_gflops(9, 0, 132, 1980, true);
    ct_monitor_params p;
    ct_monitor_params_for_run(&p, cfg, &mc, 16, 1024, 1, 0, peak, theory, 64ull << 30,
                              60ull << 30);
    p.device_memory = true;
    CHECK(p.gemm_peak_gflops == peak && p.theory_gflops == theory && p.peak_set_aside == 0);
    double fpt = p.step_flops / p.step_tokens;
    CHECK(near(p.expected_tokens_per_s, cfg->alerts.expected_mfu * peak * 1e9 / fpt));
    ct_monitor_sample s = {0};
    s.step = 1;
    s.loss = 5;
    s.step_s = 0.1;
    s.rss_bytes = 1ull << 30;
    s.device_bytes = 62ull << 30;
    ct_monitor_figures f;
    ct_monitor_figures_of(&p, &s, &f);
    CHECK(near(f.gflops, p.step_flops / 0.1 / 1e9));
    CHECK(near(f.mfu, f.gflops / peak) && near(f.mfu_theory, f.gflops / theory));
    /* memory is the device's: 62 of 64 GiB, not the 1 GiB of RSS */
    CHECK(near(f.value[CT_ALERT_MEMORY], 62.0 / 64.0));
    ct_monitor m;
    ct_monitor_init(&m, &p);
    ct_alert ev[CT_ALERT_KIND_COUNT];
    int n = ct_monitor_update(&m, &s, &f, ev);
    bool seen = false;
    for (int i = 0; i < n; i++)
        if (ev[i].kind == CT_ALERT_MEMORY)
            seen = strstr(ev[i].message, "device memory") != NULL &&
                   ev[i].value == (double)(62ull << 30);
    CHECK(seen);
    free(cfg);
}

/* bf16 on a GPU without bf16 GEMMs (compute capability < 8.0) is refused,
 * naming the key, the GPU, its compute capability and the fix; fp32 passes
 * everywhere, and bf16 from 8.0 on. */
static void test_bf16_capability(void) {
    CHECK(!ct_gpu_has_bf16(7, 5) && !ct_gpu_has_bf16(7, 0));
    CHECK(ct_gpu_has_bf16(8, 0) && ct_gpu_has_bf16(8, 6) && ct_gpu_has_bf16(9, 0));
    ct_device_info t4 = {.name = "Tesla T4", .index = 1, .cc_major = 7, .cc_minor = 5};
    CHECK(ct_device_check_bf16(&t4, "bf16", NULL) == CT_ERR_ARG);
    CHECK_MSG(strstr(ct_last_error(), "train.precision = bf16") &&
              strstr(ct_last_error(), "Tesla T4 (cuda:1, compute capability 7.5)"),
              "%s", ct_last_error());
    CHECK_MSG(strstr(ct_last_hint(), "train.precision=fp32"), "%s", ct_last_hint());
    ct_error_clear();
    CHECK(ct_device_check_bf16(&t4, "fp32", NULL) == CT_OK);
    CHECK(ct_device_check_bf16(&t4, "fp32", "fp32") == CT_OK);
    CHECK(ct_device_check_bf16(&t4, "fp32", "bf16") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "lora.base_dtype = bf16") &&
          !strstr(ct_last_error(), "train.precision") &&
          strstr(ct_last_hint(), "lora.base_dtype=fp32"));
    ct_error_clear();
    CHECK(ct_device_check_bf16(&t4, "bf16", "bf16") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "train.precision = bf16 and lora.base_dtype = bf16") &&
          strstr(ct_last_hint(), "train.precision=fp32 and lora.base_dtype=fp32"));
    ct_error_clear();
    ct_device_info a100 = {.name = "NVIDIA A100", .cc_major = 8, .cc_minor = 0};
    ct_device_info h100 = {.name = "NVIDIA H100", .cc_major = 9, .cc_minor = 0};
    ct_device_info sim = {.name = "sim"}; /* no compute capability */
    const ct_device_info *ok[] = {&a100, &h100, &sim};
    for (int i = 0; i < 3; i++) {
        CHECK(ct_device_check_bf16(ok[i], "bf16", "bf16") == CT_OK);
        CHECK(ct_device_check_bf16(ok[i], "fp32", NULL) == CT_OK);
    }
}

/* fp16 (with loss scaling) only where bf16 is missing: refused on the CPU
 * (no device) and on compute capability 8.0 and later, each naming the key,
 * the device and the way out; accepted at 7.5 and 7.0 and on a device with no
 * capability (sim without one). */
static void test_fp16_capability(void) {
    CHECK(ct_device_check_fp16(NULL) == CT_ERR_ARG);
    CHECK_MSG(strstr(ct_last_error(), "train.precision = fp16") &&
              strstr(ct_last_error(), "CPU") && strstr(ct_last_hint(), "bf16") &&
              strstr(ct_last_hint(), "fp32"), "%s / %s", ct_last_error(), ct_last_hint());
    ct_error_clear();
    ct_device_info a100 = {.name = "NVIDIA A100", .index = 2, .cc_major = 8, .cc_minor = 0};
    ct_device_info h100 = {.name = "NVIDIA H100", .cc_major = 9, .cc_minor = 0};
    ct_device_info l4 = {.name = "NVIDIA L4", .cc_major = 8, .cc_minor = 9};
    const ct_device_info *no[] = {&a100, &h100, &l4};
    for (int i = 0; i < 3; i++) {
        CHECK(ct_device_check_fp16(no[i]) == CT_ERR_ARG);
        CHECK_MSG(strstr(ct_last_error(), "train.precision = fp16") &&
                  strstr(ct_last_error(), no[i]->name) &&
                  strstr(ct_last_hint(), "train.precision=bf16"),
                  "%s / %s", ct_last_error(), ct_last_hint());
        ct_error_clear();
    }
    CHECK(strstr((ct_device_check_fp16(&a100), ct_last_error()),
                 "cuda:2, compute capability 8.0") != NULL);
    ct_error_clear();
    ct_device_info t4 = {.name = "Tesla T4", .cc_major = 7, .cc_minor = 5};
    ct_device_info v100 = {.name = "Tesla V100", .cc_major = 7, .cc_minor = 0};
    ct_device_info sim = {.name = "sim"};
    CHECK(ct_device_check_fp16(&t4) == CT_OK && ct_device_check_fp16(&v100) == CT_OK &&
          ct_device_check_fp16(&sim) == CT_OK);
}

int main(void) {
    test_fp16_capability();
    test_theory();
    test_rank_device();
    unsetenv("CT_SIM_COMPUTE_CAPABILITY");
    test_sim_capacity();
    test_sim_compute_capability();
    test_cuda_ws();
    test_device_plan();
    test_monitor_gpu();
    test_bf16_capability();
    return ct_test_result("test_device");
}
