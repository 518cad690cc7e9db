/* io/config: YAML + overrides, errors that name the file, line and key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrain/config.h"

static char dir[64];

static const char *write_file(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ct_config_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    ct_config c;
    ct_config_default(&c);
    CHECK(c.train.batch_size == 4 && !c.data.shuffle && strcmp(c.schedule.name, "constant") == 0);

    const char *good = write_file("good.yaml",
                                  "model:\n  preset: gpt2-tiny\n  n_layer: 3\n"
                                  "data:\n  train: \"a b.bin\"\n  shuffle: true\n"
                                  "optim:\n  lr: 1e-3\n  weight_decay: 0.1\n"
                                  "schedule:\n  name: cosine\n"
                                  "run:\n  dir: ~\n");
    CHECK(ct_config_load_yaml(&c, good) == CT_OK);
    CHECK(strcmp(c.model.preset, "gpt2-tiny") == 0 && c.model.n_layer == 3);
    CHECK(strcmp(c.data.train, "a b.bin") == 0 && c.data.shuffle);
    CHECK(c.optim.lr == 1e-3 && c.optim.weight_decay == 0.1);
    CHECK(strcmp(c.schedule.name, "cosine") == 0);
    CHECK(strcmp(c.run.dir, "runs/latest") == 0); /* null keeps the default */

    /* overrides win and are typed */
    CHECK(ct_config_apply_override(&c, "train.batch_size=8") == CT_OK && c.train.batch_size == 8);
    CHECK(ct_config_apply_override(&c, "train.steps=1e3") == CT_OK && c.train.steps == 1000);
    CHECK(ct_config_apply_override(&c, "data.shuffle=false") == CT_OK && !c.data.shuffle);

    /* unknown key: names it and suggests the closest */
    CHECK(ct_config_apply_override(&c, "optim.lrr=1") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "optim.lrr") != NULL);
    CHECK(strstr(ct_last_hint(), "optim.lr") != NULL);
    CHECK(ct_config_apply_override(&c, "train.batch=1") == CT_ERR_ARG);
    CHECK(strstr(ct_last_hint(), "train.batch_size") != NULL);
    /* a close key of the same section wins over an equal leaf elsewhere */
    CHECK(ct_config_apply_override(&c, "lora.rank=8") == CT_ERR_ARG);
    CHECK(strstr(ct_last_hint(), "'lora.r'") != NULL);
    /* ... but a leaf that only exists in another section is still found */
    CHECK(ct_config_apply_override(&c, "train.lr=1") == CT_ERR_ARG);
    CHECK(strstr(ct_last_hint(), "'optim.lr'") != NULL);
    /* wrong types and ranges */
    CHECK(ct_config_apply_override(&c, "train.batch_size=four") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "expected an integer") != NULL);
    CHECK(ct_config_apply_override(&c, "train.batch_size=2.5") == CT_ERR_ARG);
    CHECK(ct_config_apply_override(&c, "train.batch_size=0") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "out of range") != NULL);
    CHECK(ct_config_apply_override(&c, "optim.lr=abc") == CT_ERR_ARG);
    CHECK(ct_config_apply_override(&c, "optim.lr=nan") == CT_ERR_ARG);
    CHECK(ct_config_apply_override(&c, "data.shuffle=maybe") == CT_ERR_ARG);
    CHECK(ct_config_apply_override(&c, "schedule.name=exp") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "constant|cosine|linear|onecycle") != NULL);
    CHECK(ct_config_apply_override(&c, "novalue") == CT_ERR_ARG);
    CHECK(c.train.batch_size == 8); /* failed sets change nothing */

    /* YAML errors name the file and line */
    const char *bad_key = write_file("bad_key.yaml", "train:\n  steps: 5\n  batchsize: 3\n");
    CHECK(ct_config_load_yaml(&c, bad_key) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "bad_key.yaml:3") != NULL);
    CHECK(strstr(ct_last_error(), "train.batchsize") != NULL);
    CHECK(strstr(ct_last_hint(), "train.batch_size") != NULL);
    const char *bad_type = write_file("bad_type.yaml", "optim:\n  lr: fast\n");
    CHECK(ct_config_load_yaml(&c, bad_type) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "bad_type.yaml:2") && strstr(ct_last_error(), "optim.lr"));
    const char *bad_yaml = write_file("bad.yaml", "optim:\n  lr: [1, 2\n");
    CHECK(ct_config_load_yaml(&c, bad_yaml) != CT_OK);
    CHECK(strstr(ct_last_error(), "bad.yaml") != NULL);
    CHECK(ct_config_load_yaml(&c, "/nonexistent/x.yaml") == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), "/nonexistent/x.yaml") != NULL);

    /* cross-key validation */
    ct_config v;
    ct_config_default(&v);
    v.train.steps = 10;
    v.schedule.warmup_steps = 20;
    CHECK(ct_config_validate(&v) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "schedule.warmup_steps") != NULL);

    ct_config_default(&v);
    CHECK(ct_config_validate(&v) == CT_OK);
    CHECK(ct_config_apply_override(&v, "run.memory_limit=12GB") == CT_OK);
    CHECK(ct_config_validate(&v) == CT_OK);
    CHECK(ct_config_apply_override(&v, "run.memory_limit=lots") == CT_OK);
    CHECK(ct_config_validate(&v) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "run.memory_limit") != NULL);
    CHECK(ct_config_apply_override(&v, "run.memory_limit=150%") == CT_OK);
    CHECK(ct_config_validate(&v) == CT_ERR_ARG);

    /* the printed YAML reads back to the same configuration */
    ct_config_default(&v);
    CHECK(ct_config_apply_override(&v, "optim.lr=0.0003") == CT_OK);
    CHECK(ct_config_apply_override(&v, "data.train=with: colon.bin") == CT_OK);
    char *yaml = ct_config_to_yaml(&v);
    CHECK(yaml != NULL);
    const char *round = write_file("round.yaml", yaml);
    ct_config w;
    ct_config_default(&w);
    CHECK(ct_config_load_yaml(&w, round) == CT_OK);
    CHECK(memcmp(&v, &w, sizeof v) == 0);
    free(yaml);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return ct_test_result("test_config");
}
