/*
 * Fuzz the PEFT adapter_config.json reader (ct_lora_config_load_peft,
 * src/models/lora_peft.c): the input is adapter_config.json in an adapter
 * directory, read for a tiny GPT-2 and for a tiny LLaMA; each directory also
 * holds the adapter_model.safetensors the library saved for that model (r 2,
 * two target modules).
 * Oracles: failures name the directory; options that load validate and
 * attach to a fresh model; when the adapter weights then load too, they are
 * exactly the ones saved (a config can only load the weights it describes).
 */
#include "fuzz_fixture.h"

typedef struct peft_fixture {
    const char *preset, *targets;
    char dir[FUZZ_PATH_MAX];
    float *ref; /* the saved adapter's weights */
    size_t ref_n;
} peft_fixture;

static peft_fixture fx[2] = {{.preset = "gpt2-tiny", .targets = "c_attn,mlp.c_proj"},
                             {.preset = "llama-tiny", .targets = "q_proj,down_proj"}};

static void setup(const char *dir) {
    for (int i = 0; i < 2; i++) {
        peft_fixture *f = &fx[i];
        ct_model *m = fuzz_model(f->preset);
        ct_lora_opts o = {.r = 2, .alpha = 4.f, .dropout = 0.f};
        if (ct_lora_targets_parse(ct_model_get_config(m), f->targets, "targets", &o.targets) ||
            ct_model_lora_attach(m, &o) || ct_model_lora_init_weights(m, 7))
            fuzz_die("cannot attach adapters to", f->preset);
        /* B starts at zero: give it values, so a wrong mapping shows */
        f->ref_n = ct_model_trainable_numel(m);
        float *w = ct_model_trainable_params(m);
        for (size_t k = 0; k < f->ref_n; k++) w[k] += (float)(k % 17) * 0.125f;
        f->ref = malloc(f->ref_n * sizeof *f->ref);
        if (!f->ref) fuzz_die("out of memory", f->preset);
        memcpy(f->ref, w, f->ref_n * sizeof *f->ref);
        fuzz_join(f->dir, dir, f->preset);
        fuzz_mkdir(f->dir);
        if (ct_model_lora_save_peft(m, f->dir, f->preset)) {
            fprintf(stderr, "fuzz harness: save %s: %s\n", f->dir, ct_last_error());
            exit(3);
        }
        ct_model_free(m);
        char p[FUZZ_PATH_MAX], name[64];
        size_t n = 0;
        char *b = fuzz_read(fuzz_join(p, f->dir, "adapter_config.json"), &n);
        snprintf(name, sizeof name, "%s_adapter_config.json", f->preset);
        if (b) fuzz_seed_out(name, b, n);
        free(b);
    }
}

static void check(peft_fixture *f) {
    ct_model_config cfg;
    if (ct_model_config_preset(&cfg, f->preset)) fuzz_die("no preset", f->preset);
    ct_lora_opts o;
    memset(&o, 0, sizeof o);
    ct_error_clear();
    ct_status st = ct_lora_config_load_peft(&cfg, f->dir, &o);
    fuzz_check_error(st, "ct_lora_config_load_peft", f->dir);
    if (st) return;
    ct_error_clear();
    if (ct_lora_opts_validate(&cfg, &o))
        fuzz_fail("adapter_config.json loaded options that do not validate: %s", ct_last_error());
    ct_model *m = fuzz_model(f->preset);
    ct_error_clear();
    if (ct_model_lora_attach(m, &o))
        fuzz_fail("loaded adapter options do not attach: %s", ct_last_error());
    ct_error_clear();
    st = ct_model_lora_load_peft(m, f->dir);
    fuzz_check_error(st, "ct_model_lora_load_peft", f->dir);
    if (!st && (ct_model_trainable_numel(m) != f->ref_n ||
                memcmp(ct_model_trainable_params(m), f->ref, f->ref_n * sizeof *f->ref) != 0))
        fuzz_fail("the adapter loaded with this config holds other weights than were saved "
                  "(%zu vs %zu values)", ct_model_trainable_numel(m), f->ref_n);
    ct_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("peft");
    if (!fx[0].ref) setup(dir);
    char p[FUZZ_PATH_MAX];
    for (int i = 0; i < 2; i++) {
        fuzz_write(fuzz_join(p, fx[i].dir, "adapter_config.json"), data, size);
        check(&fx[i]);
    }
    return 0;
}
