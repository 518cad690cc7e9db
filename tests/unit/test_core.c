/* core/: tagged allocation counters, arena, errors, RNG. */
#include <string.h>

#include "ct_test.h"
#include "core/strbuf.h"
#include "ctrain/core.h"

static void test_alloc_counters(void) {
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
    ct_memstats s;
    void *a = ct_alloc(ctx, 1000, CT_TAG_PARAMS);
    void *b = ct_alloc(ctx, 3000, CT_TAG_GRADS);
    CHECK(a && b);
    CHECK(((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0);
    CHECK(((unsigned char *)a)[999] == 0); /* zero-filled */
    ct_ctx_memstats(ctx, &s);
    CHECK(s.current[CT_TAG_PARAMS] == 1000);
    CHECK(s.current[CT_TAG_GRADS] == 3000);
    CHECK(s.total_current == 4000);
    ct_free(ctx, b);
    void *c = ct_alloc(ctx, 500, CT_TAG_GRADS);
    ct_ctx_memstats(ctx, &s);
    CHECK(s.current[CT_TAG_GRADS] == 500);
    CHECK(s.peak[CT_TAG_GRADS] == 3000);
    CHECK(s.total_peak == 4000);
    ct_free(ctx, a);
    ct_free(ctx, c);
    ct_free(ctx, NULL);
    ct_ctx_memstats(ctx, &s);
    CHECK(s.total_current == 0);
    /* an impossible allocation fails with a status, not a crash */
    void *huge = ct_alloc(ctx, SIZE_MAX - 16, CT_TAG_ACTS);
    CHECK(huge == NULL && ct_last_status() == CT_ERR_OOM);
    CHECK(strstr(ct_last_error(), "acts") != NULL);
    ct_ctx_free(ctx);
    ct_ctx_free(NULL);
}

static void test_arena(void) {
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
    ct_arena a;
    CHECK(ct_arena_init(&a, ctx, 256, CT_TAG_ACTS) == CT_OK);
    float *x = ct_arena_alloc(&a, 10);
    float *y = ct_arena_alloc(&a, 100);
    CHECK(x && y && (uint8_t *)y - (uint8_t *)x == 64);
    CHECK(((uintptr_t)y & 63) == 0);
    size_t mark = ct_arena_mark(&a);
    CHECK(ct_arena_alloc(&a, 64) != NULL);
    CHECK(ct_arena_alloc(&a, 1) == NULL); /* 64 + 128 + 64 = 256 used */
    CHECK(ct_last_status() == CT_ERR_OOM);
    ct_arena_reset(&a, mark);
    CHECK(ct_arena_alloc(&a, 64) != NULL);
    CHECK(a.peak == 256);
    ct_memstats s;
    ct_ctx_memstats(ctx, &s);
    CHECK(s.current[CT_TAG_ACTS] == 256);
    ct_arena_free(&a, ctx);
    ct_ctx_memstats(ctx, &s);
    CHECK(s.current[CT_TAG_ACTS] == 0);
    /* wrapping caller memory aligns the start */
    static unsigned char buf[300];
    ct_arena w;
    ct_arena_wrap(&w, buf + 1, 299, CT_TAG_SCRATCH);
    void *p = ct_arena_alloc(&w, 8);
    CHECK(p && ((uintptr_t)p & 63) == 0);
    ct_ctx_free(ctx);
}

static void test_errors(void) {
    ct_error_clear();
    CHECK(ct_last_status() == CT_OK && ct_last_error()[0] == '\0');
    ct_status st = CT_ERR(CT_ERR_FORMAT, "file %s: bad %d", "x.bin", 7);
    CHECK(st == CT_ERR_FORMAT);
    CHECK(strcmp(ct_last_error(), "file x.bin: bad 7") == 0);
    CHECK(strstr(ct_last_site(), "test_core.c:") == ct_last_site());
    ct_error_hint("do %s", "this");
    CHECK(strcmp(ct_last_hint(), "do this") == 0);
    ct_error_prefix("loading");
    CHECK(strcmp(ct_last_error(), "loading: file x.bin: bad 7") == 0);
    CHECK(strcmp(ct_status_str(CT_ERR_IO), "io") == 0);
}

static void test_rng(void) {
    /* mt19937 with the standard seed: the 10000th output is 4123659995
     * (the value C++'s std::mt19937 is required to produce) */
    ct_rng r;
    ct_rng_init(&r, 5489);
    uint32_t x = 0;
    for (int i = 0; i < 10000; i++) x = ct_rng_u32(&r);
    CHECK(x == 4123659995u);
    /* same seed, same stream; normals have the right moments */
    ct_rng a, b;
    ct_rng_init(&a, 42);
    ct_rng_init(&b, 42);
    enum { N = 100000 };
    static float u[N], v[N];
    ct_rng_normal(&a, u, N, 1.0f, 2.0f);
    ct_rng_normal(&b, v, N, 1.0f, 2.0f);
    CHECK(memcmp(u, v, sizeof u) == 0);
    double mean = 0, var = 0;
    for (int i = 0; i < N; i++) mean += u[i];
    mean /= N;
    for (int i = 0; i < N; i++) var += (u[i] - mean) * (u[i] - mean);
    var /= N;
    CHECK_MSG(fabs(mean - 1.0) < 0.03, "mean %g", mean);
    CHECK_MSG(fabs(var - 4.0) < 0.1, "var %g", var);
    float f = ct_rng_float(&a);
    CHECK(f >= 0.0f && f < 1.0f);
}

/* The growable text buffer: short and long printf, raw appends with NULs
 * inside, growth across its first 4096 bytes, free. */
static void test_strbuf(void) {
    ct_strbuf b = {0};
    ct_strbuf_printf(&b, "%s=%d;", "x", 42);
    CHECK(b.len == 5 && !strcmp(b.p, "x=42;"));
    char big[1000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    for (int i = 0; i < 10; i++) ct_strbuf_printf(&b, "[%s]", big); /* > 256: the long path */
    CHECK(b.len == 5 + 10 * 1001 && b.cap > b.len && b.p[b.len] == 0 && !b.oom);
    CHECK(b.p[5] == '[' && b.p[5 + 1000] == ']' && b.p[6] == 'a');
    ct_strbuf_append(&b, "z\0z", 3);
    CHECK(b.len == 5 + 10 * 1001 + 3 && b.p[b.len - 2] == 0 && b.p[b.len - 1] == 'z');
    ct_strbuf_free(&b);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
    ct_strbuf_free(NULL);
}

int main(void) {
    test_alloc_counters();
    test_arena();
    test_errors();
    test_rng();
    test_strbuf();
    return ct_test_result("test_core");
}
