/*
 * `ctrain report RUN_DIR [--out FILE]`: one self-contained HTML page about a
 * run (src/tools/report.h), written atomically to RUN_DIR/report.html or FILE;
 * prints the path written. Exit 2 and nothing written when the run directory,
 * its metrics or an output path is wrong.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tools/report.h"

static void report_usage(void) {
    printf("usage: ctrain report RUN_DIR [--out FILE]\n"
           "  one HTML file (no outside resources) with the run's summary, plots of loss,\n"
           "  lr, grad norm, tokens/s, MFU, memory and the step-time split, its alerts and\n"
           "  rollbacks, config and hardware; read from RUN_DIR/metrics.jsonl,\n"
           "  config.yaml and hw.json\n"
           "options:\n"
           "  --out FILE  where to write it (default RUN_DIR/report.html)\n");
}

int cmd_report(int argc, char **argv) {
    const char *run_dir = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            report_usage();
            return 0;
        }
        if (!strcmp(o, "--out")) {
            if (i + 1 >= argc) return cli_usage_error("report", "--out needs a file name");
            out = argv[++i];
        } else if (o[0] == '-' && o[1]) {
            return cli_usage_error("report", "unknown option '%s'", o);
        } else if (run_dir) {
            return cli_usage_error("report", "one RUN_DIR only (got '%s' and '%s')", run_dir, o);
        } else {
            run_dir = o;
        }
    }
    if (!run_dir) return cli_usage_error("report", "missing RUN_DIR (the run.dir of a training run)");
    char written[4096];
    if (ct_report_write(run_dir, out, written, sizeof written)) return cli_fail("report");
    printf("%s\n", written);
    return 0;
}
