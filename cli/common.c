/*
 * What every subcommand shares: the error printers, the configuration loader
 * (defaults, the YAML file, a tuned profile's settings, then key=value
 * overrides) and the backend named by CTRAIN_DEVICE. main.c dispatches to
 * cmd_*.c, and they call down into this file, never back into main.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "tools/tune.h"

ct_status cli_device_from_env(ct_ctx_params *cp) {
    const char *dev = getenv("CTRAIN_DEVICE");
    if (!dev || !*dev) return CT_OK;
    int kind, index;
    ct_status st = ct_config_device(dev, &kind, &index);
    if (st) return st;
    cp->backend = (ct_backend_kind)kind;
    return CT_OK;
}

int cli_fail(const char *cmd) {
    fprintf(stderr, "ctrain %s: error: %s\n", cmd, ct_last_error());
    if (ct_last_hint()[0]) fprintf(stderr, "  hint: %s\n", ct_last_hint());
    return 2;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "ctrain %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  hint: run `ctrain %s --help`\n", cmd);
    return 2;
}

/* A model directory key given a file inside it (model.init_from=DIR/model.safetensors,
 * DIR/config.json): the directory, said on stderr. */
static void cli_dir_of_file(const char *cmd, const char *key, char *path, size_t cap) {
    struct stat sb;
    if (!path[0] || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    char *slash = strrchr(path, '/');
    char dir[CT_PATH_MAX];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    fprintf(stderr, "ctrain %s: %s = %s is a file: using its directory %s\n", cmd, key, path, dir);
    snprintf(path, cap, "%s", dir);
}

int cli_load_config(const char *cmd, int argc, char **argv, ct_config *cfg, bool *print_only) {
    ct_config_default(cfg);
    /* CTRAIN_DEVICE: the default of run.device (the test suite runs on sim) */
    const char *dev = getenv("CTRAIN_DEVICE");
    if (dev && *dev) snprintf(cfg->run.device, sizeof cfg->run.device, "%s", dev);
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
    bool tuned; /* a tuned profile: its settings apply here, so overrides still win */
    if (config_path && ct_tune_profile_apply_here(cfg, config_path, &tuned))
        return cli_fail(cmd);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config")) {
            i++;
            continue;
        }
        if (!strcmp(argv[i], "--print-config") || !strcmp(argv[i], "--json")) continue;
        if (argv[i][0] == '-') return cli_usage_error(cmd, "unknown option '%s'", argv[i]);
        if (ct_config_apply_override(cfg, argv[i])) return cli_fail(cmd);
    }
    cli_dir_of_file(cmd, "model.init_from", cfg->model.init_from, sizeof cfg->model.init_from);
    cli_dir_of_file(cmd, "lora.init_from", cfg->lora.init_from, sizeof cfg->lora.init_from);
    return 0;
}
