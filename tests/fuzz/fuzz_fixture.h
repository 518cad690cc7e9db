/*
 * Fixtures the model-directory harnesses build once per process with the
 * library itself: a one-thread context and tiny models (the gpt2-tiny and
 * llama-tiny presets, weights from a fixed seed), so every run of a harness
 * sees the same files. Not a harness itself.
 */
#ifndef CT_FUZZ_FIXTURE_H
#define CT_FUZZ_FIXTURE_H

#include "fuzz.h"

#include "ctrain/model.h"

static ct_ctx *fuzz_ctx_buf;

/* The process's context (one thread, CPU backend). */
static inline ct_ctx *fuzz_ctx(void) {
    if (!fuzz_ctx_buf) {
        ct_ctx_params p = ct_ctx_params_default();
        p.n_threads = 1;
        p.pin_threads = false;
        p.backend = CT_BACKEND_CPU;
        if (ct_ctx_init(&fuzz_ctx_buf, &p)) {
            fprintf(stderr, "fuzz harness: ct_ctx_init: %s\n", ct_last_error());
            exit(3);
        }
    }
    return fuzz_ctx_buf;
}

/* A model of preset `preset` with weights from seed 1234. */
static inline ct_model *fuzz_model(const char *preset) {
    ct_model_config c;
    ct_model *m = NULL;
    if (ct_model_config_preset(&c, preset) || ct_model_init(&m, fuzz_ctx(), &c) ||
        ct_model_init_weights(m, 1234)) {
        fprintf(stderr, "fuzz harness: model %s: %s\n", preset, ct_last_error());
        exit(3);
    }
    return m;
}

/* Export preset's model as a Hugging Face directory dir (config.json and
 * model.safetensors, F32). */
static inline void fuzz_export(const char *preset, const char *dir) {
    ct_model *m = fuzz_model(preset);
    fuzz_mkdir(dir);
    if (ct_model_export_hf(m, dir, false)) {
        fprintf(stderr, "fuzz harness: export %s: %s\n", dir, ct_last_error());
        exit(3);
    }
    ct_model_free(m);
}

#endif
