/*
 * Fuzz the Hugging Face config.json reader (src/models/hf.c, hf_llama.c):
 * the input is config.json in a model directory, read with
 * ct_model_config_load_hf and then loaded whole with ct_model_load_hf beside
 * the weights of a tiny GPT-2 and (second directory) a tiny LLaMA.
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
           !memcmp(&a->norm_eps, &b->norm_eps, sizeof a->norm_eps) &&
           !memcmp(&a->rope_theta, &b->rope_theta, sizeof a->rope_theta);
}

static char gdir[FUZZ_PATH_MAX], ldir[FUZZ_PATH_MAX];

static void setup(const char *dir) {
    fuzz_export("gpt2-tiny", fuzz_join(gdir, dir, "gpt2"));
    fuzz_export("llama-tiny", fuzz_join(ldir, dir, "llama"));
    char p[FUZZ_PATH_MAX];
    size_t n = 0;
    char *b = fuzz_read(fuzz_join(p, gdir, "config.json"), &n);
    if (b) fuzz_seed_out("gpt2_tiny_config.json", b, n);
    free(b);
    b = fuzz_read(fuzz_join(p, ldir, "config.json"), &n);
    if (b) fuzz_seed_out("llama_tiny_config.json", b, n);
    free(b);
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
    if (!gdir[0]) setup(dir);
    char p[FUZZ_PATH_MAX];
    fuzz_write(fuzz_join(p, gdir, "config.json"), data, size);
    fuzz_write(fuzz_join(p, ldir, "config.json"), data, size);

    ct_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    ct_error_clear();
    ct_status st = ct_model_config_load_hf(&cfg, gdir);
    fuzz_check_error(st, "ct_model_config_load_hf", gdir);
    if (st) {
        /* the whole load must fail too, naming the directory */
        ct_model *m = NULL;
        ct_error_clear();
        st = ct_model_load_hf(&m, fuzz_ctx(), ldir);
        if (st == CT_OK) fuzz_fail("ct_model_load_hf loaded a config.json that the config reader refuses");
        fuzz_check_error(st, "ct_model_load_hf", ldir);
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
    load_model(gdir, &cfg);
    load_model(ldir, &cfg);
    return 0;
}
