/*
 * Inside the run report: the SVG plots report_svg.c draws for report_html.c.
 * A plot is a fixed-size <svg> with a frame, round ticks, grid lines, axis
 * labels, a legend and vertical markers (alerts, rollbacks) with tooltips.
 * Leaves out: log scales and second y axes (two quantities get two plots).
 */
#ifndef CT_TOOLS_REPORT_INT_H
#define CT_TOOLS_REPORT_INT_H

#include "tools/report.h"

#define REPORT_SVG_W 880  /* px */
#define REPORT_SVG_H 270  /* px */

typedef enum report_style {
    REPORT_STYLE_LINE = 0,
    REPORT_STYLE_DASHED = 1, /* a limit or a reference */
    REPORT_STYLE_DOTS = 2,   /* sparse points (validation) joined by a thin line */
    REPORT_STYLE_COUNT
} report_style;

typedef struct report_series {
    const char *label; /* legend text (escaped on output) */
    const char *color; /* CSS colour */
    const double *x;   /* [n] steps, ascending */
    const double *y;   /* [n] NaN: no value */
    size_t n;
    double scale;      /* y is drawn as y * scale (unit changes); 0 means 1 */
    report_style style;
} report_series;

typedef struct report_marker {
    double x;          /* step */
    const char *color;
    bool dashed;
    char text[320];    /* tooltip (escaped on output) */
} report_marker;

typedef struct report_legend_extra {
    const char *label;
    const char *color;
    bool dashed;
} report_legend_extra;

typedef struct report_plot {
    const char *ylabel;  /* with its unit, e.g. "memory (GiB)" */
    bool y_from_zero;    /* include 0 in the y range */
    const report_series *s;
    int ns;
    const report_marker *m;
    size_t nm;
    const report_legend_extra *extra; /* legend-only entries (marker kinds) */
    int nextra;
    size_t max_points;   /* per series */
} report_plot;

/* Append one <svg> line plot. Borrows p. Sets b->oom on allocation failure. */
void report_svg_lines(ct_strbuf *b, const report_plot *p);

typedef struct report_stack {
    const char *ylabel;
    const char *const *labels; /* [nl] bottom layer first */
    const char *const *colors; /* [nl] */
    const double *const *y;    /* [nl][n]; NaN counts as 0 */
    int nl;
    const double *x;           /* [n] steps, ascending */
    size_t n;
    const report_marker *m;
    size_t nm;
    const report_legend_extra *extra;
    int nextra;
    size_t max_points;         /* buckets */
} report_stack;

/* Append one <svg> stacked-area plot. Borrows p. */
void report_svg_stack(ct_strbuf *b, const report_stack *p);

/* Format v for a tick label or a table cell: "%.4g" style, trimmed. */
void report_fmt_num(char *buf, size_t cap, double v);

/* The page's pieces report_html.c writes for report_gpu.c: a note paragraph,
 * a plot's <h3> title, a summary table row (all text escaped). */
void report_html_note(ct_strbuf *b, const char *text);
void report_html_title(ct_strbuf *b, const char *title);
void report_html_row(ct_strbuf *b, const char *key, const char *val);

/* The GPU section (report_gpu.c): nothing for a run without "device" lines;
 * else an <h2> GPU with the summary of ct_report_gpu_summary and plots of
 * utilisation (with the gpu_util alerts of mk, which holds one marker per
 * alert of d, in d's order), memory and power, or a note when the run's GPU
 * was not watched. Sets b->oom on allocation failure. */
void report_gpu_section(ct_strbuf *b, const ct_report_data *d, const report_marker *mk,
                        size_t max_points);

#endif
