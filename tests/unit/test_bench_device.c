/*
 * The kernel suite's roofline on a device (src/tools/bench_kernels.c with a
 * queued backend, here sim): each kernel's compute bound is the device's GEMM
 * peak it was given, the 16-bit kernels' (names with "16") the bf16 one; its
 * memory bound is the device's own copy rate, against the bytes read and
 * written together; the level is "device". With no peak (fma_gflops 0) there
 * is no roofline. (`ctrain bench kernels --device cuda` passes cuBLAS's
 * peaks; the GPU check runs it.)
 */
#include <math.h>
#include <string.h>

#include "backend/ctx.h"
#include "ct_test.h"
#include "ctrain/model.h"
#include "tools/bench_tools.h"

#define MAX_ITEMS 64

typedef struct seen {
    ct_bench_item it[MAX_ITEMS];
    int n;
} seen;

static void keep(const ct_bench_item *it, void *user) {
    seen *s = user;
    if (s->n < MAX_ITEMS) s->it[s->n++] = *it;
}

static const ct_bench_item *find(const seen *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->it[i].name, name)) return &s->it[i];
    return NULL;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

static void run(ct_ctx *ctx, const ct_model_config *mc, double fma, double g16, seen *out) {
    memset(out, 0, sizeof *out);
    ct_bench_kernel_opts o = {"gemm.fc.fwd,gemm_bf16.fc_proj.fwd,gelu.bwd", 1, NULL, 0, g16};
    CHECK(ct_bench_kernels(ctx, mc, 2, 32, fma, &o, keep, out) == CT_OK);
}

int main(void) {
    ct_ctx_params cp = ct_ctx_params_default();
    cp.backend = CT_BACKEND_SIM;
    cp.n_threads = 1;
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    CHECK(ct_ctx_base_backend(ctx)->queued);
    ct_model_config mc;
    CHECK(ct_model_config_preset(&mc, "gpt2-tiny") == CT_OK);
    mc.vocab_size = 64;

    /* slow peaks: the GEMMs are compute-bound at the peak of their precision */
    seen s;
    run(ctx, &mc, 0.5, 2.0, &s);
    const ct_bench_item *f32 = find(&s, "gemm.fc.fwd"), *f16 = find(&s, "gemm_bf16.fc_proj.fwd");
    CHECK(f32 && f16);
    if (f32 && f16) {
        CHECK(!strcmp(f32->bound, "compute") && f32->bound_rate == 0.5);
        CHECK(near(f32->roof_s, f32->flops / 0.5e9));
        CHECK(!strcmp(f16->bound, "compute") && f16->bound_rate == 2.0);
        CHECK(near(f16->roof_s, f16->flops / 2e9));
        CHECK(!strcmp(f32->level, "device") && !strcmp(f16->level, "device"));
    }
    /* fast peaks: GELU's backward is bound by the device's copy rate, on its
     * bytes read and written together */
    run(ctx, &mc, 1e12, 1e12, &s);
    const ct_bench_item *g = find(&s, "gelu.bwd");
    CHECK(g != NULL);
    if (g) {
        CHECK(!strcmp(g->bound, "memory") && g->bound_rate > 0);
        CHECK(near(g->roof_s, (g->read_bytes + g->write_bytes) / (g->bound_rate * 1e9)));
        CHECK(!strcmp(g->level, "device"));
    }
    /* no peak: no roofline */
    run(ctx, &mc, 0, 0, &s);
    CHECK(s.n >= 3); /* gemm_bf16.fc_proj.fwd_in16 matches too */
    for (int i = 0; i < s.n; i++) CHECK(s.it[i].roof_s == 0 && s.it[i].seconds > 0);
    ct_ctx_free(ctx);
    return ct_test_result("test_bench_device");
}
