/*
 * Internals of the Hugging Face import and export shared by hf.c (GPT-2,
 * the load and save entry points) and hf_llama.c (LlamaConfig, sharded weight
 * sets). Not installed.
 */
#ifndef CT_MODELS_HF_IMPL_H
#define CT_MODELS_HF_IMPL_H

#include <cJSON.h>

#include "io/safetensors.h"
#include "models/model_impl.h"

#define HF_PATH_MAX 4096

/* The ranges config.json's sizes may take: the caps of the YAML keys model.*
 * (src/io/config.c's key table), so a directory cannot ask for a model the
 * config file could not. */
#define HF_MAX_LAYERS 4096     /* model.n_layer */
#define HF_MAX_HEADS 4096      /* model.n_head, model.n_kv_head */
#define HF_MAX_EMBD (1 << 20)  /* model.n_embd */
#define HF_MAX_FFN (1 << 22)   /* model.n_ffn */
#define HF_MAX_VOCAB (1 << 24) /* model.vocab_size */
#define HF_MAX_CTX (1 << 20)   /* model.n_ctx */

/* An integer field of config.json (root, borrowed) in lo..hi into *out.
 * Absent or null: *found false (when found is NULL, that is an error naming
 * the key as missing). CT_ERR_FORMAT naming path, the key and the range. */
ct_status hf_json_int(const cJSON *root, const char *key, int lo, int hi, int *out, bool *found,
                      const char *path);

/* A dropout probability field of config.json in [0, 1) into *out; absent or
 * null: dflt. CT_ERR_FORMAT naming path and the key. */
ct_status hf_json_prob(const cJSON *root, const char *key, double dflt, float *out,
                       const char *path);

/* The config.json fields (root, borrowed) of a LLaMA-layout family fam
 * (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config) into *cfg; path
 * names the file in messages. CT_ERR_FORMAT naming the file, the key and its
 * value. */
ct_status hf_llama_config(ct_model_config *cfg, const cJSON *root, ct_family fam,
                          const char *path);
/* The family's config for m (LlamaConfig, MistralConfig, ...). Returns owned
 * JSON (release with cJSON_Delete), NULL when out of memory. */
cJSON *hf_llama_config_json(const ct_model *m);
/* bos_token_id, pad_token_id (integers or null) and eos_token_id (an
 * integer, a list of up to 4, or null) of root into cfg's has_bos, ...,
 * n_eos; CT_ERR_FORMAT naming path and the key. */
ct_status hf_token_ids(ct_model_config *cfg, const cJSON *root, const char *path);
/* The token ids cfg carries, as config.json and generation_config.json
 * hold them (eos_token_id a list when there are several). */
void hf_add_token_ids(cJSON *root, const ct_model_config *c);

/* The weights of a model directory: model.safetensors, or the shards named by
 * model.safetensors.index.json. */
typedef struct hf_weights {
    ct_safetensors **files;      /* [n], owned */
    const char **names;          /* [n] shard file names (borrowed from index) */
    int n;
    cJSON *index;                /* parsed index (owned) or NULL */
    const cJSON *map;            /* its weight_map, or NULL */
    char index_path[HF_PATH_MAX]; /* "" when not sharded */
} hf_weights;

/* Open every file of the set. Fills *w (release with hf_weights_close, also
 * after an error). CT_ERR_IO naming the index and the shard when a shard is
 * missing; CT_ERR_FORMAT for a malformed index or file. */
ct_status hf_weights_open(hf_weights *w, const char *dir);
void hf_weights_close(hf_weights *w);
/* The tensor called name (NULL when absent; *file then NULL), from the shard
 * the index names for it. Borrowed from w. */
const ct_st_tensor *hf_weights_find(const hf_weights *w, const char *name,
                                    const ct_safetensors **file);
/* The file to name in messages: the index when sharded, else the one file. */
const char *hf_weights_where(const hf_weights *w);

#endif
