/*
 * `ctrain train [--config FILE.yaml] [key=value ...]`: builds the effective
 * configuration (defaults, then the YAML file, then overrides), prints a
 * progress line per step on stderr and runs ct_train_run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "stop.h"
#include "ctrain/train.h"

int cli_load_config(const char *cmd, int argc, char **argv, ct_config *cfg, bool *print_only) {
    ct_config_default(cfg);
    *print_only = false;
    const char *config_path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) return cli_usage_error(cmd, "--config needs a file");
            config_path = argv[++i];
        } else if (!strcmp(argv[i], "--print-config")) {
            *print_only = true;
        }
    }
    if (config_path && ct_config_load_yaml(cfg, config_path)) return cli_fail(cmd);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) {
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--print-config") || !strcmp(argv[i], "--json")) continue;
        if (argv[i][0] == '-') return cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        if (ct_config_apply_override(cfg, argv[i])) return cli_fail(cmd);
    }
    return 0;
}

static void print_progress(const ct_step_info *s, void *user) {
    const ct_config *cfg = user;
    if (s->step % cfg->run.log_every != 0 && s->step != s->steps && s->step != 1) return;
    fprintf(stderr, "step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.0f ms%s",
            (long long)s->step, (long long)s->steps, s->loss, s->lr, s->grad_norm,
            s->tokens_per_s, s->step_ms, s->skipped ? " | SKIPPED" : "");
    if (!isnan(s->val_loss)) fprintf(stderr, " | val %.4f", s->val_loss);
    fputc('\n', stderr);
}

int cmd_train(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ctrain train [--config FILE.yaml] [--print-config] [key=value ...]\n"
                   "Keys are dotted paths (optim.lr=1e-3); --print-config lists them all.\n");
            return 0;
        }
    }
    ct_config cfg;
    bool print_only;
    int rc = cli_load_config("train", argc, argv, &cfg, &print_only);
    if (rc) return rc;
    if (print_only) {
        char *yaml = ct_config_to_yaml(&cfg);
        if (!yaml) return cli_fail("train");
        fputs(yaml, stdout);
        free(yaml);
        return 0;
    }
    ct_ctx *ctx = NULL;
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = (int)cfg.run.threads;
    if (ct_ctx_init(&ctx, &cp)) return cli_fail("train");
    ct_train_hooks hooks = {print_progress, &cfg, cli_stop_install()};
    ct_train_result res;
    ct_status st = ct_train_run_with(ctx, &cfg, &hooks, &res);
    cli_stop_restore();
    ct_ctx_free(ctx);
    if (st) return cli_fail("train");
    if (res.end == CT_TRAIN_END_STOPPED) {
        fprintf(stderr, "ctrain train: stopped by signal %d after step %lld; checkpoint %s; "
                "continue with train.resume=auto\n", res.stop_value, (long long)res.last_step,
                res.checkpoint);
        return 128 + res.stop_value;
    }
    fprintf(stderr, "ctrain train: done; model saved to %s (config.json, model.safetensors)\n",
            cfg.run.dir);
    return 0;
}
