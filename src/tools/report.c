/*
 * The run report: load a run directory (report_data.c), render the page
 * (report_html.c, with the SVG pieces of report_svg.c) and write it
 * atomically. The top of the report's files: it calls each of them, and none
 * calls back.
 */
#include "tools/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "io/fileio.h"

ct_status ct_report_write(const char *run_dir, const char *out_path, char *written, size_t cap) {
    if (cap) written[0] = '\0';
    ct_report_data *d = NULL;
    char *html = NULL, *def = NULL;
    size_t len = 0;
    ct_status st = ct_report_load(&d, run_dir);
    if (st) return st;
    if ((st = ct_report_render(d, 0, &html, &len))) goto done;
    if (!out_path) {
        size_t n = strlen(d->run_dir) + 16;
        if (!(def = malloc(n))) {
            st = CT_ERR(CT_ERR_OOM, "out of memory for the report path");
            goto done;
        }
        snprintf(def, n, "%s/report.html", d->run_dir);
        out_path = def;
    }
    if ((st = ct_file_write_atomic(out_path, html, len))) goto done;
    if (cap) snprintf(written, cap, "%s", out_path);
done:
    free(def);
    free(html);
    ct_report_free(d);
    return st;
}
