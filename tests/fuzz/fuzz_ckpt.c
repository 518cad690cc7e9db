/*
 * Fuzz the checkpoint manifest reader (ct_ckpt_verify, src/train/checkpoint.c):
 * the input is MANIFEST.json of a checkpoint directory the library saved for
 * a tiny GPT-2 (config.json, model.safetensors and the blobs "state" and
 * "optimizer", both stored plain and zstd-compressed).
 * The manifest hashes its own text; an input whose "manifest_xxh64" value is
 * "xxxxxxxxxxxxxxxx" gets the right hash filled in before it is written, so
 * the fuzzer gets past that check (seeds come with both forms).
 * Oracles: a failed verify names the directory; a checkpoint that verifies
 * loads: its weights load with ct_model_load_hf and every blob the manifest
 * lists reads back with ct_ckpt_read_blob at the raw size the manifest gives.
 */
#include "fuzz_fixture.h"

#include "train/checkpoint.h"

#include <cJSON.h>
#include <inttypes.h>
#include <xxhash.h>

#define HASH_KEY "\"manifest_xxh64\""
#define PLACEHOLDER "xxxxxxxxxxxxxxxx"

static char cdir[FUZZ_PATH_MAX];

/* The manifest with its hash value replaced by the placeholder. */
static void seed_placeholder(const char *name, const char *text, size_t n) {
    char *copy = malloc(n + 1);
    if (!copy) return;
    memcpy(copy, text, n + 1);
    char *k = NULL;
    for (char *p = strstr(copy, HASH_KEY); p; p = strstr(p + 1, HASH_KEY)) k = p;
    char *q = k ? strchr(k + strlen(HASH_KEY), '"') : NULL;
    if (q && strlen(q + 1) > 16) memcpy(q + 1, PLACEHOLDER, 16);
    fuzz_seed_out(name, copy, n);
    free(copy);
}

static void setup(const char *dir) {
    char run[FUZZ_PATH_MAX], out2[FUZZ_PATH_MAX], p[FUZZ_PATH_MAX], q[FUZZ_PATH_MAX];
    fuzz_join(run, dir, "run");
    ct_model *m = fuzz_model("gpt2-tiny");
    static uint8_t state[64];
    static float optim[1024];
    for (size_t i = 0; i < sizeof state; i++) state[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < 1024; i++) optim[i] = (float)(i % 10) * 0.5f;
    ct_ckpt_blob blobs[2] = {{"state", state, sizeof state}, {"optimizer", optim, sizeof optim}};
    ct_ckpt_opts o = ct_ckpt_opts_default();
    if (ct_ckpt_save(run, 1, m, blobs, 2, &o, cdir, sizeof cdir)) fuzz_die("cannot save in", run);
    o.compress = true;
    if (ct_ckpt_save(run, 2, m, blobs, 2, &o, out2, sizeof out2)) fuzz_die("cannot save in", run);
    ct_model_free(m);
    /* one directory that both manifests describe */
    fuzz_copy(fuzz_join(p, out2, "state.bin.zst"), fuzz_join(q, cdir, "state.bin.zst"));
    fuzz_copy(fuzz_join(p, out2, "optimizer.bin.zst"), fuzz_join(q, cdir, "optimizer.bin.zst"));
    const char *dirs[2] = {cdir, out2};
    for (int i = 0; i < 2; i++) {
        size_t n = 0;
        char *b = fuzz_read(fuzz_join(p, dirs[i], "MANIFEST.json"), &n);
        if (!b) fuzz_die("cannot read", p);
        char name[64];
        snprintf(name, sizeof name, "manifest_%s.json", i ? "zstd" : "plain");
        fuzz_seed_out(name, b, n);
        snprintf(name, sizeof name, "manifest_%s_placeholder.json", i ? "zstd" : "plain");
        seed_placeholder(name, b, n);
        free(b);
    }
    /* the fixture itself must pass the oracle */
    if (ct_ckpt_verify(cdir, NULL, NULL) || ct_ckpt_verify(out2, NULL, NULL)) {
        fprintf(stderr, "fuzz harness: the saved checkpoints do not verify: %s\n", ct_last_error());
        exit(3);
    }
}

/* A copy of the input with the placeholder hash filled in. */
static char *fixup(const uint8_t *data, size_t size) {
    char *t = malloc(size + 1);
    if (!t) return NULL;
    memcpy(t, data, size);
    t[size] = '\0';
    if (strlen(t) != size) return t; /* a NUL inside: leave it to the reader */
    char *k = NULL;
    for (char *p = strstr(t, HASH_KEY); p; p = strstr(p + 1, HASH_KEY)) k = p;
    char *q = k ? strchr(k + strlen(HASH_KEY), '"') : NULL;
    if (q && !strncmp(q + 1, PLACEHOLDER, 16)) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)XXH64(t, (size_t)(k - t), 0));
        memcpy(q + 1, hex, 16);
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("ckpt");
    if (!cdir[0]) setup(dir);
    char *text = fixup(data, size);
    if (!text) return 0;
    char p[FUZZ_PATH_MAX];
    fuzz_write(fuzz_join(p, cdir, "MANIFEST.json"), text, size);

    int64_t step = -1;
    ct_error_clear();
    ct_status st = ct_ckpt_verify(cdir, NULL, &step);
    fuzz_check_error(st, "ct_ckpt_verify", cdir);
    if (st) {
        free(text);
        return 0;
    }
    /* it verified: it must load */
    ct_model *m = NULL;
    ct_error_clear();
    if (ct_model_load_hf(&m, fuzz_ctx(), cdir))
        fuzz_fail("a checkpoint that verifies does not load its weights: %s", ct_last_error());
    ct_model_free(m);
    cJSON *root = cJSON_ParseWithLength(text, size);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const cJSON *blob = cJSON_GetObjectItemCaseSensitive(f, "blob");
        const cJSON *raw = cJSON_GetObjectItemCaseSensitive(f, "raw_size");
        if (!cJSON_IsString(blob)) continue;
        void *bytes = NULL;
        size_t n = 0;
        ct_error_clear();
        if (ct_ckpt_read_blob(cdir, blob->valuestring, &bytes, &n))
            fuzz_fail("a checkpoint that verifies does not load its blob '%s': %s",
                      blob->valuestring, ct_last_error());
        if (!cJSON_IsNumber(raw) || (double)n != raw->valuedouble)
            fuzz_fail("blob '%s' read %zu bytes, the manifest says %g", blob->valuestring, n,
                      cJSON_IsNumber(raw) ? raw->valuedouble : -1.0);
        free(bytes);
    }
    cJSON_Delete(root);
    free(text);
    return 0;
}
