/*
 * Subcommands of the ctrain program. Each returns the process exit status:
 * 0 on success, 2 on any error (bad input, missing or corrupt files, full disk),
 * after printing the error through cli_fail.
 */
#ifndef CT_CLI_H
#define CT_CLI_H
#include "ctrain/config.h"
#include "ctrain/core.h"

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_hw(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_merge(int argc, char **argv);

/* Print ct_last_error() (and its hint) prefixed with "ctrain <cmd>: error:";
 * returns 2. */
int cli_fail(const char *cmd);
/* Print a usage error; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CT_PRINTF(2, 3);

/* Parse --config FILE, --print-config and key=value arguments into cfg. A
 * tuned profile's settings (tune.signature, tune.settings) apply after the
 * file and before the key=value overrides.
 * Returns 0 to go on, 1 when the config was printed (caller exits 0), 2 on
 * error (already printed). */
int cli_load_config(const char *cmd, int argc, char **argv, ct_config *cfg, bool *print_only);
/* The backend of commands without a config (eval, sample): CTRAIN_DEVICE
 * when set, as run.device spells it. CT_ERR_ARG for a bad name. */
ct_status cli_device_from_env(ct_ctx_params *cp);
#endif
