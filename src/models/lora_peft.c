/*
 * PEFT adapter directories for the LoRA adapters of lora.c:
 * adapter_config.json (peft_type "LORA", r, lora_alpha, lora_dropout,
 * target_modules, base_model_name_or_path, bias "none", fan_in_fan_out: true
 * for GPT-2's Conv1D, task_type "CAUSAL_LM") and adapter_model.safetensors
 * holding "base_model.model.<module path>.lora_A.weight" (r, in) and
 * ".lora_B.weight" (out, r), and for modules_to_save (embed_tokens, lm_head)
 * the trained copies as "base_model.model.model.embed_tokens.weight" and
 * "base_model.model.lm_head.weight", as PEFT saves them; F32 when written,
 * F32/F16/BF16 when read.
 * Leaves out: PEFT's other adapter types, regex target_modules, rsLoRA/DoRA,
 * biases, per-layer ranks (rank_pattern), modules_to_save other than
 * embed_tokens and lm_head: such files are refused, naming the key.
 */
#include "models/model_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "core/dtype.h"

#include "io/fileio.h"
#include "io/safetensors.h"

#define PEFT_PREFIX "base_model.model."
#define PEFT_NAME_MAX 128
#define PEFT_PATH_MAX 4160

ct_status ct_model_lora_save_peft(ct_model *m, const char *dir, const char *base) {
    model_lora *a = m->lora;
    if (!a) return CT_ERR(CT_ERR_ARG, "the model has no LoRA adapters to save");
    ct_status st = ct_mkdir_p(dir);
    if (st) return st;
    void *stage;
    const float *params = model_host_read(m, a->params, a->numel * sizeof(float), &stage);
    if (!params) return ct_last_status();
    ct_st_entry *e = calloc((size_t)a->n_table, sizeof *e);
    char(*names)[PEFT_NAME_MAX] = calloc((size_t)a->n_table, sizeof *names);
    if (!e || !names) {
        free(e);
        free(names);
        model_host_done(m, NULL, 0, stage, false);
        return CT_ERR(CT_ERR_OOM, "out of memory saving the LoRA adapters");
    }
    for (int i = 0; i < a->n_table; i++) {
        const ct_param *p = &a->table[i];
        snprintf(names[i], PEFT_NAME_MAX, PEFT_PREFIX "%s", p->name);
        e[i].name = names[i];
        e[i].dtype = CT_DTYPE_F32;
        e[i].ndim = 2;
        e[i].shape[0] = p->shape[0];
        e[i].shape[1] = p->shape[1];
        e[i].data = params + p->offset;
    }
    char path[PEFT_PATH_MAX];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    const char *meta[] = {"format", "pt"};
    st = ct_st_write(path, e, a->n_table, meta, 1);
    free(e);
    free(names);
    model_host_done(m, NULL, 0, stage, false);
    if (st) return st;

    cJSON *root = cJSON_CreateObject();
    if (!root) return CT_ERR(CT_ERR_OOM, "out of memory writing adapter_config.json");
    char targets[256];
    ct_lora_targets_format(&m->cfg, a->o.targets, targets, sizeof targets);
    cJSON_AddStringToObject(root, "peft_type", "LORA");
    cJSON_AddStringToObject(root, "task_type", "CAUSAL_LM");
    cJSON_AddStringToObject(root, "base_model_name_or_path", base ? base : "");
    cJSON_AddNumberToObject(root, "r", a->o.r);
    cJSON_AddNumberToObject(root, "lora_alpha", ct_f32_decimal(a->o.alpha));
    cJSON_AddNumberToObject(root, "lora_dropout", ct_f32_decimal(a->o.dropout));
    cJSON *tm = cJSON_AddArrayToObject(root, "target_modules");
    for (char *tok = strtok(targets, ","); tok; tok = strtok(NULL, ","))
        cJSON_AddItemToArray(tm, cJSON_CreateString(tok));
    cJSON_AddStringToObject(root, "bias", "none");
    cJSON_AddBoolToObject(root, "fan_in_fan_out", m->cfg.arch == CT_ARCH_GPT2);
    cJSON_AddBoolToObject(root, "inference_mode", true);
    cJSON_AddBoolToObject(root, "init_lora_weights", true);
    cJSON_AddBoolToObject(root, "use_rslora", false);
    cJSON_AddBoolToObject(root, "use_dora", false);
    if (a->o.save_modules) {
        cJSON *ms = cJSON_AddArrayToObject(root, "modules_to_save");
        if (a->o.save_modules & CT_LORA_SAVE_EMBED)
            cJSON_AddItemToArray(ms, cJSON_CreateString("embed_tokens"));
        if (a->o.save_modules & CT_LORA_SAVE_HEAD)
            cJSON_AddItemToArray(ms, cJSON_CreateString("lm_head"));
    } else {
        cJSON_AddNullToObject(root, "modules_to_save");
    }
    cJSON_AddNullToObject(root, "layers_to_transform");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return CT_ERR(CT_ERR_OOM, "out of memory writing adapter_config.json");
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print leaves room: replace the NUL, write len+1 */
    st = ct_file_write_atomic(path, text, len + 1);
    free(text);
    return st;
}

/* A number field of the adapter config; def when absent (def NAN: required). */
static ct_status json_num(const cJSON *root, const char *path, const char *key, double def,
                          double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        if (isnan(def))
            return CT_ERR(CT_ERR_FORMAT, "%s: key \"%s\" is missing", path, key);
        *out = def;
        return CT_OK;
    }
    if (!cJSON_IsNumber(v))
        return CT_ERR(CT_ERR_FORMAT, "%s: key \"%s\" must be a number", path, key);
    *out = v->valuedouble;
    return CT_OK;
}

static bool json_true(const cJSON *root, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, key));
}

ct_status ct_lora_config_load_peft(const ct_model_config *cfg, const char *dir,
                                   ct_lora_opts *o) {
    char path[PEFT_PATH_MAX];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    cJSON *root = NULL;
    ct_status st = ct_json_read_object(path, &root);
    if (st) {
        ct_error_hint("lora.init_from names a PEFT adapter directory (adapter_config.json and "
                      "adapter_model.safetensors)");
        return st;
    }
    ct_lora_opts r = {0};
    double v = 0;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "bias");
    const cJSON *tm = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
    const cJSON *mts = cJSON_GetObjectItemCaseSensitive(root, "modules_to_save");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rank_pattern");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(root, "alpha_pattern");
    const cJSON *ltt = cJSON_GetObjectItemCaseSensitive(root, "layers_to_transform");
    if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA") != 0) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: key \"peft_type\" must be \"LORA\"", path);
    } else if (bias && !cJSON_IsNull(bias) &&
               (!cJSON_IsString(bias) || strcmp(bias->valuestring, "none") != 0)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: key \"bias\" must be \"none\" (adapter biases are not "
                    "supported)", path);
    } else if (json_true(root, "use_rslora") || json_true(root, "use_dora")) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: use_rslora / use_dora are not supported: expected "
                    "plain LoRA", path);
    } else if ((ltt && !cJSON_IsNull(ltt)) ||
               (rp && cJSON_IsObject(rp) && cJSON_GetArraySize(rp) > 0) ||
               (ap && cJSON_IsObject(ap) && cJSON_GetArraySize(ap) > 0)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: layers_to_transform, rank_pattern and alpha_pattern are "
                    "not supported: expected one rank on whole layers", path);
    } else if (mts && !cJSON_IsNull(mts) && !cJSON_IsArray(mts)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: key \"modules_to_save\" must be null or a list of "
                    "module names", path);
    } else if (!(st = json_num(root, path, "r", NAN, &v))) {
        if (v < 1 || v > 65536 || v != floor(v))
            st = CT_ERR(CT_ERR_FORMAT, "%s: key \"r\" = %g: expected an integer rank 1..65536",
                        path, v);
        else /* only a checked value is converted: 1e10 or inf would be undefined */
            r.r = (int)v;
    }
    if (!st && !(st = json_num(root, path, "lora_alpha", 8.0, &v))) r.alpha = (float)v;
    if (!st && !(st = json_num(root, path, "lora_dropout", 0.0, &v))) r.dropout = (float)v;
    if (!st) {
        char list[512] = "";
        if (!cJSON_IsArray(tm)) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: key \"target_modules\" must be a list of module "
                        "names (a regex string is not supported)", path);
        } else {
            const cJSON *it;
            cJSON_ArrayForEach(it, tm) {
                if (!cJSON_IsString(it) || strlen(list) + strlen(it->valuestring) + 2 >
                                               sizeof list) {
                    st = CT_ERR(CT_ERR_FORMAT, "%s: key \"target_modules\" must hold module "
                                "names", path);
                    break;
                }
                if (list[0]) strcat(list, ",");
                strcat(list, it->valuestring);
            }
        }
        char key[PEFT_PATH_MAX + 32];
        snprintf(key, sizeof key, "%s: target_modules", path);
        if (!st) st = ct_lora_targets_parse(cfg, list, key, &r.targets);
    }
    if (!st && cJSON_IsArray(mts)) {
        char list[256] = "";
        const cJSON *it;
        cJSON_ArrayForEach(it, mts) {
            if (!cJSON_IsString(it) || strlen(list) + strlen(it->valuestring) + 2 > sizeof list) {
                st = CT_ERR(CT_ERR_FORMAT, "%s: key \"modules_to_save\" must hold module names",
                            path);
                break;
            }
            if (list[0]) strcat(list, ",");
            strcat(list, it->valuestring);
        }
        char key[PEFT_PATH_MAX + 32];
        snprintf(key, sizeof key, "%s: modules_to_save", path);
        if (!st) st = ct_lora_save_modules_parse(cfg, list, key, &r.save_modules);
    }
    cJSON_Delete(root);
    if (st) return st;
    if ((st = ct_lora_opts_validate(cfg, &r))) {
        ct_error_prefix("%s", path);
        return st;
    }
    *o = r;
    return CT_OK;
}

ct_status ct_model_lora_load_peft(ct_model *m, const char *dir) {
    model_lora *a = m->lora;
    if (!a) return CT_ERR(CT_ERR_ARG, "attach LoRA adapters before loading %s", dir);
    char path[PEFT_PATH_MAX];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    ct_safetensors *sf = NULL;
    ct_status st = ct_st_open(&sf, path);
    if (st) return st;
    char name[PEFT_NAME_MAX];
    for (int i = 0; i < a->n_table && !st; i++) {
        const ct_param *p = &a->table[i];
        snprintf(name, sizeof name, PEFT_PREFIX "%s", p->name);
        const ct_st_tensor *t = ct_st_find(sf, name);
        if (!t) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' is missing: the adapter does not adapt "
                        "this model's modules (targets or layers differ)", path, name);
        } else if (t->ndim != 2 || t->shape[0] != p->shape[0] || t->shape[1] != p->shape[1]) {
            bool copy = i == a->save_embed || i == a->save_head;
            st = CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld] (%d dims), "
                        "expected [%lld, %lld] (%s)", path, name, (long long)t->shape[0],
                        (long long)(t->ndim > 1 ? t->shape[1] : 0), t->ndim,
                        (long long)p->shape[0], (long long)p->shape[1],
                        copy ? "modules_to_save: vocab_size x hidden_size of the base"
                             : "r on the module's width");
        } else if (t->dtype != CT_DTYPE_F32 && t->dtype != CT_DTYPE_F16 &&
                   t->dtype != CT_DTYPE_BF16) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16",
                        path, name, ct_dtype_name(t->dtype));
        } else {
            void *stage;
            float *dev = a->params + p->offset;
            float *dst = model_host_write(m, dev, p->numel * sizeof(float), &stage);
            st = dst ? ct_st_read_f32(sf, t, dst, false) : ct_last_status();
            model_host_done(m, dev, p->numel * sizeof(float), stage, !st);
        }
    }
    /* a tensor the adapter table does not hold: a module this model lacks */
    for (int i = 0; i < ct_st_count(sf) && !st; i++) {
        const ct_st_tensor *t = ct_st_tensor_at(sf, i);
        size_t k = strlen(PEFT_PREFIX);
        bool known = false;
        if (strncmp(t->name, PEFT_PREFIX, k) == 0)
            for (int j = 0; j < a->n_table && !known; j++)
                known = strcmp(t->name + k, a->table[j].name) == 0;
        if (!known)
            st = CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' adapts no module of this model (expected "
                        "only %s<module>.lora_A.weight / .lora_B.weight of the targets, and the "
                        "modules_to_save of adapter_config.json)", path, t->name, PEFT_PREFIX);
    }
    ct_st_close(sf);
    return st;
}
