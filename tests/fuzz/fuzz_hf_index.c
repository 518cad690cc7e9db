/*
 * Fuzz the sharded-weights index reader (model.safetensors.index.json,
 * hf_weights_open in src/models/hf_llama.c): the input is the index of a tiny
 * LLaMA directory whose weights are split over two shard files, loaded with
 * ct_model_load_hf.
 * Oracles: a failed load names the directory (the index or the shard at
 * fault); a model that loads holds exactly the weights of the shards, bit for
 * bit (a tensor is never read from the wrong place).
 */
#include "fuzz_fixture.h"

#include "io/safetensors.h"

#include <cJSON.h>

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static char idir[FUZZ_PATH_MAX];
static float *ref;
static size_t ref_n;

/* Split dir0/model.safetensors into the two shards of idir; returns the index. */
static char *split_shards(const char *dir0) {
    char p[FUZZ_PATH_MAX];
    ct_safetensors *sf = NULL;
    if (ct_st_open(&sf, fuzz_join(p, dir0, "model.safetensors"))) fuzz_die("cannot open", p);
    int n = ct_st_count(sf), half = n / 2;
    ct_st_entry *e = calloc((size_t)n, sizeof *e);
    float **v = calloc((size_t)n, sizeof *v);
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "metadata");
    cJSON *map = cJSON_AddObjectToObject(root, "weight_map");
    if (!e || !v || !meta || !map) fuzz_die("out of memory", dir0);
    double total = 0;
    for (int i = 0; i < n; i++) {
        const ct_st_tensor *t = ct_st_tensor_at(sf, i);
        v[i] = malloc((size_t)t->numel * sizeof(float) + 1);
        if (!v[i] || ct_st_read_f32(sf, t, v[i], false)) fuzz_die("cannot read", p);
        e[i] = (ct_st_entry){.name = t->name, .dtype = CT_DTYPE_F32, .ndim = t->ndim, .data = v[i]};
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        total += (double)t->numel * 4;
        cJSON_AddStringToObject(map, t->name, i < half ? SHARD1 : SHARD2);
    }
    cJSON_AddNumberToObject(meta, "total_size", total);
    if (ct_st_write(fuzz_join(p, idir, SHARD1), e, half, NULL, 0) ||
        ct_st_write(fuzz_join(p, idir, SHARD2), e + half, n - half, NULL, 0))
        fuzz_die("cannot write shards in", idir);
    char *text = cJSON_Print(root);
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
    free(e);
    cJSON_Delete(root);
    ct_st_close(sf);
    return text;
}

static void setup(const char *dir) {
    char dir0[FUZZ_PATH_MAX], p[FUZZ_PATH_MAX], q[FUZZ_PATH_MAX];
    fuzz_export("llama-tiny", fuzz_join(dir0, dir, "whole"));
    fuzz_mkdir(fuzz_join(idir, dir, "sharded"));
    fuzz_copy(fuzz_join(p, dir0, "config.json"), fuzz_join(q, idir, "config.json"));
    char *index = split_shards(dir0);
    if (!index) fuzz_die("out of memory", dir0);
    fuzz_seed_out("llama_tiny_index.json", index, strlen(index));
    /* the reference: the model loaded from the unsharded file */
    ct_model *m = NULL;
    if (ct_model_load_hf(&m, fuzz_ctx(), dir0)) fuzz_die("cannot load", dir0);
    ref_n = ct_model_numel(m);
    ref = malloc(ref_n * sizeof *ref);
    if (!ref) fuzz_die("out of memory", dir0);
    memcpy(ref, ct_model_params(m), ref_n * sizeof *ref);
    ct_model_free(m);
    /* and the index as written must load */
    fuzz_write(fuzz_join(p, idir, "model.safetensors.index.json"), index, strlen(index));
    if (ct_model_load_hf(&m, fuzz_ctx(), idir)) {
        fprintf(stderr, "fuzz harness: the sharded fixture does not load: %s\n", ct_last_error());
        exit(3);
    }
    ct_model_free(m);
    cJSON_free(index);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("hf_index");
    if (!idir[0]) setup(dir);
    char p[FUZZ_PATH_MAX];
    fuzz_write(fuzz_join(p, idir, "model.safetensors.index.json"), data, size);

    ct_model *m = NULL;
    ct_error_clear();
    ct_status st = ct_model_load_hf(&m, fuzz_ctx(), idir);
    fuzz_check_error(st, "ct_model_load_hf", idir);
    if (st) return 0;
    if (ct_model_numel(m) != ref_n || memcmp(ct_model_params(m), ref, ref_n * sizeof *ref) != 0)
        fuzz_fail("the model loaded through the index holds other weights than its shards");
    ct_model_free(m);
    return 0;
}
