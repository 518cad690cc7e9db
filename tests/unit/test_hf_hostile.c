/*
 * models/ against hostile Hugging Face directories and configs (findings of a
 * fuzzing campaign): config.json sizes beyond the caps of the YAML keys are
 * refused naming the file, the key and the range; configs whose parameter
 * count or int widths would wrap are refused by ct_model_config_validate and
 * the memory plan; a config.json that declares more than its weights hold
 * fails on the headers before any parameter memory is allocated (fp32 and
 * bf16 LoRA base); an index without "weight_map" names the index file.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/model.h"

static char tmp[64];

static void write_text(const char *dir, const char *name, const char *text) {
    char p[256];
    ct_tmpdir_join(p, sizeof p, dir, name);
    CHECK(ct_tmpdir_write(p, text, strlen(text)) == 0);
}

static void make_dir(char *out, size_t cap, const char *name) {
    ct_tmpdir_join(out, cap, tmp, name);
    CHECK(mkdir(out, 0755) == 0);
}

static bool has(const char *msg, const char *s) { return strstr(msg, s) != NULL; }

/* A config.json (text) in dir/name is refused by ct_model_config_load_hf with
 * CT_ERR_FORMAT, the message holding the path, key and want. */
static void expect_cfg_refused(const char *name, const char *json, const char *key,
                               const char *want) {
    char dir[256], path[320];
    make_dir(dir, sizeof dir, name);
    write_text(dir, "config.json", json);
    snprintf(path, sizeof path, "%s/config.json", dir);
    ct_model_config c;
    ct_error_clear();
    ct_status st = ct_model_config_load_hf(&c, dir);
    const char *msg = ct_last_error();
    CHECK_MSG(st == CT_ERR_FORMAT, "%s: status %d (%s)", name, (int)st, msg);
    CHECK_MSG(has(msg, path) && has(msg, key) && has(msg, want), "%s: message '%s' lacks %s, "
              "%s or %s", name, msg, path, key, want);
}

static void test_config_caps(void) {
    const char *gpt2 = "{\"model_type\": \"gpt2\", \"n_layer\": %s, \"n_head\": %s, "
                       "\"n_embd\": %s, \"vocab_size\": %s, \"n_positions\": %s, "
                       "\"n_inner\": %s}";
    char j[512];
    snprintf(j, sizeof j, gpt2, "5000", "2", "16", "64", "32", "null");
    expect_cfg_refused("g_layer", j, "\"n_layer\"", "1..4096");
    snprintf(j, sizeof j, gpt2, "1000000000", "2", "16", "64", "32", "null");
    expect_cfg_refused("g_layer_1e9", j, "\"n_layer\"", "1..4096");
    snprintf(j, sizeof j, gpt2, "2", "1", "1000000000", "64", "32", "null");
    expect_cfg_refused("g_embd", j, "\"n_embd\"", "1..1048576");
    snprintf(j, sizeof j, gpt2, "2", "5000", "20000", "64", "32", "null");
    expect_cfg_refused("g_head", j, "\"n_head\"", "1..4096");
    snprintf(j, sizeof j, gpt2, "2", "2", "16", "20000000", "32", "null");
    expect_cfg_refused("g_vocab", j, "\"vocab_size\"", "2..16777216");
    snprintf(j, sizeof j, gpt2, "2", "2", "16", "64", "2000000", "null");
    expect_cfg_refused("g_ctx", j, "\"n_positions\"", "1..1048576");
    snprintf(j, sizeof j, gpt2, "2", "2", "16", "64", "32", "1000000000");
    expect_cfg_refused("g_inner", j, "\"n_inner\"", "0..4194304");
    snprintf(j, sizeof j, gpt2, "2", "2", "16", "64", "32", "1e300");
    expect_cfg_refused("g_inner_huge", j, "\"n_inner\"", "0..4194304");

    const char *llama = "{\"model_type\": \"llama\", \"num_hidden_layers\": %s, "
                        "\"hidden_size\": %s, \"intermediate_size\": %s, "
                        "\"num_attention_heads\": %s, \"num_key_value_heads\": %s, "
                        "\"vocab_size\": %s, \"max_position_embeddings\": %s}";
    snprintf(j, sizeof j, llama, "4097", "32", "88", "4", "2", "64", "32");
    expect_cfg_refused("l_layer", j, "\"num_hidden_layers\"", "1..4096");
    snprintf(j, sizeof j, llama, "2", "2097152", "88", "4", "2", "64", "32");
    expect_cfg_refused("l_embd", j, "\"hidden_size\"", "1..1048576");
    snprintf(j, sizeof j, llama, "2", "32", "1000000000", "4", "2", "64", "32");
    expect_cfg_refused("l_ffn", j, "\"intermediate_size\"", "1..4194304");
    snprintf(j, sizeof j, llama, "2", "32768", "88", "8192", "2", "64", "32");
    expect_cfg_refused("l_head", j, "\"num_attention_heads\"", "1..4096");
    snprintf(j, sizeof j, llama, "2", "32", "88", "4", "1000000000", "64", "32");
    expect_cfg_refused("l_kv", j, "\"num_key_value_heads\"", "1..4096");
    snprintf(j, sizeof j, llama, "2", "32", "88", "4", "2", "1000000000", "32");
    expect_cfg_refused("l_vocab", j, "\"vocab_size\"", "2..16777216");
    snprintf(j, sizeof j, llama, "2", "32", "88", "4", "2", "64", "1000000000");
    expect_cfg_refused("l_ctx", j, "\"max_position_embeddings\"", "1..1048576");

    /* the caps themselves are accepted */
    char dir[256];
    make_dir(dir, sizeof dir, "g_at_caps");
    snprintf(j, sizeof j, gpt2, "4096", "4096", "1048576", "16777216", "1048576", "4194304");
    write_text(dir, "config.json", j);
    ct_model_config c;
    ct_status st = ct_model_config_load_hf(&c, dir);
    CHECK_MSG(st == CT_OK, "sizes at the caps: %s", ct_last_error());
    CHECK(c.n_layer == 4096 && c.n_ffn == 4194304 && c.vocab_size == 16777216);
}

/* Configs built through the API (no caps): validate refuses whatever would
 * wrap, and the memory plan does not report a wrapped size. */
static void test_validate_wrap(void) {
    ct_model_config c;
    ct_model_plan plan;
    /* int widths: fused q,k,v of 3 * 2^30 > INT_MAX */
    ct_model_config_llama(&c, 1, 2, 2, 1 << 30, 64, 64, 8);
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    CHECK(has(ct_last_error(), "overflow"));
    /* SwiGLU's gate and up: 2 * n_ffn > INT_MAX */
    ct_model_config_llama(&c, 1, 2, 2, 64, 1 << 30, 64, 8);
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    /* widths fit an int, the parameter count wraps size_t: 64 layers of
     * 5 * 2^57 parameters */
    ct_model_config_llama(&c, 64, 1, 1, 1 << 28, 1 << 29, 1 << 30, 8);
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    CHECK_MSG(has(ct_last_error(), "parameter count"), "%s", ct_last_error());
    memset(&plan, 0, sizeof plan);
    ct_status st = ct_model_plan_memory(&c, 1, 1, true, &plan);
    CHECK_MSG(st == CT_ERR_ARG, "plan of a wrapping model: status %d, %zu parameter bytes",
              (int)st, plan.params);
    /* no wrap, but its weights, grads and moments would not fit in size_t */
    ct_model_config_llama(&c, 4, 1, 1, 1 << 28, 1 << 29, 1 << 30, 8);
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    /* GPT-2, n_ffn set past 4 * n_embd (n_inner): the same */
    ct_model_config_gpt2(&c, 4096, 1, 1 << 20, 1 << 24, 1 << 20);
    c.n_ffn = 1 << 30;
    CHECK(ct_model_config_validate(&c) == CT_ERR_ARG);
    /* the largest config.json allows is counted exactly and plans */
    ct_model_config_llama(&c, 4096, 4096, 4096, 1 << 20, 1 << 22, 1 << 24, 1 << 20);
    CHECK_MSG(ct_model_config_validate(&c) == CT_OK, "%s", ct_last_error());
    CHECK(ct_model_plan_memory(&c, 1, 1, false, &plan) == CT_OK);
    size_t C = 1 << 20, F = 1 << 22, V = 1 << 24;
    size_t numel = 2 * V * C + C + 4096 * (2 * C + 4 * C * C + 3 * F * C);
    CHECK_MSG(plan.params == numel * sizeof(float), "plan %zu, expected %zu", plan.params,
              numel * sizeof(float));
}

/* A tiny model exported to dir (config.json + model.safetensors). */
static void export_tiny(ct_ctx *ctx, const char *dir, bool llama) {
    ct_model_config c;
    if (llama)
        ct_model_config_llama(&c, 2, 4, 2, 32, 88, 64, 32);
    else
        ct_model_config_gpt2(&c, 2, 2, 16, 64, 32);
    ct_model *m = NULL;
    CHECK(ct_model_init(&m, ctx, &c) == CT_OK);
    if (!m) return;
    CHECK(ct_model_init_weights(m, 1) == CT_OK);
    CHECK(ct_model_export_hf(m, dir, false) == CT_OK);
    ct_model_free(m);
}

/* dir's config.json with "key": value replaced (a text edit of our export). */
static void set_key(const char *dir, const char *key, const char *value) {
    char path[320], buf[8192], out[8192];
    snprintf(path, sizeof path, "%s/config.json", dir);
    long n = ct_tmpdir_read(path, buf, sizeof buf - 1);
    CHECK(n > 0);
    if (n <= 0) return;
    buf[n] = '\0';
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    char *at = strstr(buf, pat);
    CHECK(at != NULL);
    if (!at) return;
    char *end = at + strlen(pat);
    while (*end && *end != ',' && *end != '\n' && *end != '}') end++;
    snprintf(out, sizeof out, "%.*s\"%s\": %s%s", (int)(at - buf), buf, key, value, end);
    CHECK(ct_tmpdir_write(path, out, strlen(out)) == 0);
}

/* A config.json declaring a 16M-token vocabulary (1 GiB of fp32 embedding at
 * n_embd 16) over tiny weights: refused naming the tensor and the file, with
 * no parameter memory allocated first. */
static void test_check_before_alloc(void) {
    for (int llama = 0; llama < 2; llama++) {
        for (int b16 = 0; b16 < 2; b16++) {
            ct_ctx *ctx = NULL;
            CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
            if (!ctx) return;
            char dir[256], st_path[320];
            snprintf(st_path, sizeof st_path, "lie_%d_%d", llama, b16);
            make_dir(dir, sizeof dir, st_path);
            export_tiny(ctx, dir, llama);
            set_key(dir, "vocab_size", "16000000");
            snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
            ct_memstats before, after;
            ct_ctx_memstats(ctx, &before);
            ct_model *m = NULL;
            ct_lora_opts lo = {.r = 2, .alpha = 4, .targets = 1, .base_bf16 = true};
            ct_status st = b16 ? ct_model_load_hf_lora(&m, ctx, dir, &lo)
                               : ct_model_load_hf(&m, ctx, dir);
            const char *msg = ct_last_error();
            const char *wte = llama ? "model.embed_tokens.weight" : "wte.weight";
            CHECK_MSG(st == CT_ERR_FORMAT && !m, "llama %d bf16 %d: status %d", llama, b16,
                      (int)st);
            CHECK_MSG(has(msg, st_path) && has(msg, wte) && has(msg, "16000000"),
                      "message '%s' lacks %s, %s or 16000000", msg, st_path, wte);
            ct_ctx_memstats(ctx, &after);
            int64_t grew = after.total_peak - before.total_peak;
            CHECK_MSG(grew < ((int64_t)16 << 20), "llama %d bf16 %d: %lld bytes allocated "
                      "before the weights were checked", llama, b16, (long long)grew);
            ct_model_free(m);
            ct_ctx_free(ctx);
        }
    }
}

/* An index without weight_map names the index file. */
static void test_index_without_map(void) {
    ct_ctx *ctx = NULL;
    CHECK(ct_ctx_init(&ctx, NULL) == CT_OK);
    if (!ctx) return;
    const char *bad[] = {"{\"metadata\": {}}", "{\"metadata\": {}, \"weight_map\": [1, 2]}"};
    for (int i = 0; i < 2; i++) {
        char dir[256], idx[320], name[32];
        snprintf(name, sizeof name, "nomap_%d", i);
        make_dir(dir, sizeof dir, name);
        export_tiny(ctx, dir, true);
        char st_path[320];
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
        CHECK(unlink(st_path) == 0);
        write_text(dir, "model.safetensors.index.json", bad[i]);
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
        ct_model *m = NULL;
        ct_status st = ct_model_load_hf(&m, ctx, dir);
        const char *msg = ct_last_error();
        CHECK_MSG(st == CT_ERR_FORMAT && !m, "status %d", (int)st);
        CHECK_MSG(has(msg, idx) && has(msg, "weight_map"), "message '%s' lacks %s", msg, idx);
        ct_model_free(m);
    }
    ct_ctx_free(ctx);
}

int main(void) {
    if (!ct_tmpdir_make(tmp, sizeof tmp, "hf_hostile")) {
        perror("mkdtemp");
        return 1;
    }
    test_config_caps();
    test_validate_wrap();
    test_check_before_alloc();
    test_index_without_map();
    int rc = ct_test_result("test_hf_hostile");
    if (rc == 0) ct_tmpdir_remove(tmp);
    return rc;
}
