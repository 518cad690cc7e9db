/*
 * `ctrain plan [--config F] [key=value ...] [--json]`: the memory plan of a
 * training run, computed from the configuration without allocating, for its
 * train.recompute policy and train.activation_dtype.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ctrain/train.h"

int cmd_plan(int argc, char **argv) {
    bool json = false, print_only;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ctrain plan [--config FILE.yaml] [key=value ...] [--json]\n");
            return 0;
        }
    }
    ct_config cfg;
    int rc = cli_load_config("plan", argc, argv, &cfg, &print_only);
    if (rc) return rc;
    ct_model_config mc;
    if (cfg.model.init_from[0]) {
        /* the shape comes from the directory's config.json */
        if (ct_model_config_load_hf(&mc, cfg.model.init_from)) return cli_fail("plan");
    } else if (ct_model_config_from(&mc, &cfg)) {
        return cli_fail("plan");
    }
    ct_model_plan p;
    ct_model_opts mo;
    int B = (int)cfg.train.batch_size, T = (int)cfg.train.seq_len;
    if (ct_model_opts_from_names(&mo, cfg.train.recompute, cfg.train.activation_dtype))
        return cli_fail("plan");
    if (ct_model_plan_memory_opts(&mc, B, T, true, &mo, &p)) return cli_fail("plan");
    const char *rc_name = ct_model_recompute_name(mo.recompute);
    const char *dt_name = ct_model_act_dtype_name(mo.act_dtype);
    size_t optim = 2 * p.params;
    size_t data = 2 * (size_t)B * T * sizeof(int32_t);
    size_t total = p.total + optim + data;
    if (json) {
        printf("{\"recompute\": \"%s\", \"activation_dtype\": \"%s\", "
               "\"params_bytes\": %zu, \"grads_bytes\": %zu, \"optim_bytes\": %zu, "
               "\"acts_bytes\": %zu, \"work_bytes\": %zu, \"scratch_bytes\": %zu, "
               "\"data_bytes\": %zu, \"total_bytes\": %zu}\n",
               rc_name, dt_name, p.params, p.grads, optim, p.acts, p.work, p.scratch, data, total);
        return 0;
    }
    const double MiB = 1024.0 * 1024.0;
    printf("memory plan (B=%d, T=%d, %d layers, C=%d, V=%d; recompute %s, activations %s)\n",
           B, T, mc.n_layer, mc.n_embd, mc.vocab_size, rc_name, dt_name);
    printf("  params   %10.1f MiB\n", p.params / MiB);
    printf("  grads    %10.1f MiB\n", p.grads / MiB);
    printf("  optim    %10.1f MiB  (AdamW m, v)\n", optim / MiB);
    printf("  acts     %10.1f MiB  (kept for backward, %s)\n", p.acts / MiB, dt_name);
    printf("  work     %10.1f MiB  (one block in fp32: recomputed and widened activations)\n",
           p.work / MiB);
    printf("  scratch  %10.1f MiB  (gradient activations, logits chunk)\n", p.scratch / MiB);
    printf("  data     %10.1f MiB\n", data / MiB);
    printf("  total    %10.1f MiB\n", total / MiB);
    return 0;
}
