/*
 * Fuzz the Hugging Face config.json reader (src/models/hf.c, hf_llama.c):
 * the input is config.json in a model directory, read with
 * ct_model_config_load_hf and then loaded whole with ct_model_load_hf beside
 * the weights of a tiny model of each family (GPT-2, LLaMA, Llama 3 with its
 * RoPE scaling and a tied head, Mistral, Qwen2's q,k,v biases, Qwen3's q/k
 * norms and head size, Gemma 3's norms, GeGLU and sliding layers), so a
 * config that matches one of them loads.
 * Oracles: failures name the directory; a config that loads is valid, plans
 * (or refuses to plan) without overflow, and a model that loads has exactly
 * that config. The sizes are checked against the weights before the model is
 * allocated, so a config asking for a huge model over tiny weights must fail
 * fast (libFuzzer's -malloc_limit_mb and -timeout catch one that does not).
 */
#include "fuzz_fixture.h"

static bool same_config(const ct_model_config *a, const ct_model_config *b) {
    return a->arch == b->arch && a->norm == b->norm && a->pos == b->pos && a->mlp == b->mlp &&
           a->n_layer == b->n_layer && a->n_head == b->n_head && a->n_kv_head == b->n_kv_head &&
           a->n_embd == b->n_embd && a->n_ffn == b->n_ffn && a->vocab_size == b->vocab_size &&
           a->n_ctx == b->n_ctx && a->bias == b->bias && a->tied_head == b->tied_head &&
           a->family == b->family && ct_model_head_dim(a) == ct_model_head_dim(b) &&
           a->qkv_bias == b->qkv_bias && a->o_bias == b->o_bias && a->qk_norm == b->qk_norm &&
           a->norm_offset == b->norm_offset && a->sandwich_norm == b->sandwich_norm &&
           a->embed_scale == b->embed_scale && a->sliding_window == b->sliding_window &&
           a->sliding_pattern == b->sliding_pattern &&
           !memcmp(&a->rope_local_theta, &b->rope_local_theta, sizeof a->rope_local_theta) &&
           !memcmp(&a->rope_scaling, &b->rope_scaling, sizeof a->rope_scaling) &&
           !memcmp(&a->norm_eps, &b->norm_eps, sizeof a->norm_eps) &&
           !memcmp(&a->rope_theta, &b->rope_theta, sizeof a->rope_theta);
}

/* The tiny model of each family: its preset and directory. */
static const char *const presets[] = {"gpt2-tiny",  "llama-tiny", "llama3-tiny", "mistral-tiny",
                                      "qwen2-tiny", "qwen3-tiny", "gemma3-tiny"};
#define N_DIRS (sizeof presets / sizeof *presets)
static char dirs[N_DIRS][FUZZ_PATH_MAX];

static void setup(const char *dir) {
    for (size_t i = 0; i < N_DIRS; i++) {
        fuzz_export(presets[i], fuzz_join(dirs[i], dir, presets[i]));
        char p[FUZZ_PATH_MAX], seed[96];
        size_t n = 0;
        char *b = fuzz_read(fuzz_join(p, dirs[i], "config.json"), &n);
        snprintf(seed, sizeof seed, "%s_config.json", presets[i]);
        for (char *c = seed; *c; c++)
            if (*c == '-') *c = '_';
        if (b) fuzz_seed_out(seed, b, n);
        free(b);
    }
}

static void load_model(const char *mdir, const ct_model_config *cfg) {
    ct_model *m = NULL;
    ct_error_clear();
    ct_status st = ct_model_load_hf(&m, fuzz_ctx(), mdir);
    fuzz_check_error(st, "ct_model_load_hf", mdir);
    if (st) return;
    if (!same_config(ct_model_get_config(m), cfg))
        fuzz_fail("ct_model_load_hf built another config than ct_model_config_load_hf read");
    ct_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("hf_config");
    if (!dirs[0][0]) setup(dir);
    char p[FUZZ_PATH_MAX];
    for (size_t i = 0; i < N_DIRS; i++) fuzz_write(fuzz_join(p, dirs[i], "config.json"), data, size);

    ct_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    ct_error_clear();
    ct_status st = ct_model_config_load_hf(&cfg, dirs[0]);
    fuzz_check_error(st, "ct_model_config_load_hf", dirs[0]);
    if (st) {
        /* the whole load must fail too, naming the directory */
        ct_model *m = NULL;
        ct_error_clear();
        st = ct_model_load_hf(&m, fuzz_ctx(), dirs[1]);
        if (st == CT_OK) fuzz_fail("ct_model_load_hf loaded a config.json that the config reader refuses");
        fuzz_check_error(st, "ct_model_load_hf", dirs[1]);
        return 0;
    }
    ct_error_clear();
    if (ct_model_config_validate(&cfg))
        fuzz_fail("ct_model_config_load_hf returned a config that does not validate: %s",
                  ct_last_error());
    ct_model_plan plan;
    for (int training = 0; training < 2; training++) {
        ct_error_clear();
        st = ct_model_plan_memory(&cfg, 1, 1, training, &plan);
        if (st && !ct_last_error()[0]) fuzz_fail("ct_model_plan_memory failed with an empty error");
        if (!st && plan.total < plan.params)
            fuzz_fail("memory plan total %zu below its parameters %zu", plan.total, plan.params);
    }
    for (size_t i = 0; i < N_DIRS; i++) load_model(dirs[i], &cfg);
    return 0;
}
