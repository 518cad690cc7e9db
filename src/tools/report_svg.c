/*
 * The run report, part two: the text buffer and HTML escaping, downsampling,
 * round ticks, SVG path data and the two kinds of plot (lines, stacked areas).
 * Every number in the SVG has one decimal, so a plot costs about 12 bytes per
 * point. Leaves out: text measurement (labels are placed by fixed widths).
 */
#include "tools/report_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ buffer */

void ct_report_escape(ct_strbuf *b, const char *s, size_t n) {
    size_t run = 0; /* start of the pending plain run */
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        switch (s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        case '\0': rep = ""; break;
        default: continue;
        }
        ct_strbuf_append(b, s + run, i - run);
        ct_strbuf_append(b, rep, strlen(rep));
        run = i + 1;
    }
    ct_strbuf_append(b, s + run, n - run);
}

static void buf_esc(ct_strbuf *b, const char *s) { ct_report_escape(b, s, strlen(s)); }

/* ------------------------------------------------------------ downsampling */

size_t ct_report_downsample(double *ox, double *oy, size_t max_out, const double *xs,
                            const double *ys, size_t n) {
    CT_ASSERT(max_out >= 2);
    if (n <= max_out) {
        memcpy(ox, xs, n * sizeof *xs);
        memcpy(oy, ys, n * sizeof *ys);
        return n;
    }
    size_t nb = max_out / 2, w = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * n / nb, hi = (b + 1) * n / nb;
        size_t imin = hi, imax = hi;
        for (size_t i = lo; i < hi; i++) {
            if (!isfinite(ys[i])) continue;
            if (imin == hi || ys[i] < ys[imin]) imin = i;
            if (imax == hi || ys[i] > ys[imax]) imax = i;
        }
        if (imin == hi) { /* nothing finite: keep the gap */
            ox[w] = xs[lo];
            oy[w++] = NAN;
            continue;
        }
        size_t a = imin < imax ? imin : imax, c = imin < imax ? imax : imin;
        ox[w] = xs[a];
        oy[w++] = ys[a];
        if (c != a) {
            ox[w] = xs[c];
            oy[w++] = ys[c];
        }
    }
    return w;
}

size_t ct_report_downsample_mean(double *ox, double *oy, size_t max_buckets, const double *xs,
                                 const double *ys, size_t n) {
    CT_ASSERT(max_buckets >= 1);
    size_t nb = n < max_buckets ? n : max_buckets;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * n / nb, hi = (b + 1) * n / nb;
        double sx = 0, sy = 0;
        size_t ny = 0;
        for (size_t i = lo; i < hi; i++) {
            sx += xs[i];
            if (isfinite(ys[i])) {
                sy += ys[i];
                ny++;
            }
        }
        ox[b] = sx / (double)(hi - lo);
        oy[b] = ny ? sy / (double)ny : NAN;
    }
    return nb;
}

/* ------------------------------------------------------------------- ticks */

int ct_report_ticks(double lo, double hi, int target, double *ticks, int max) {
    if (max < 1 || !isfinite(lo) || !isfinite(hi)) return 0;
    if (hi < lo) {
        double t = lo;
        lo = hi;
        hi = t;
    }
    if (hi == lo) {
        ticks[0] = lo;
        return 1;
    }
    if (target < 1) target = 1;
    double raw = (hi - lo) / target;
    double mag = pow(10.0, floor(log10(raw)));
    double norm = raw / mag;
    double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    double first = ceil(lo / step - 1e-9) * step;
    int k = 0;
    for (int i = 0; k < max; i++) {
        double t = first + i * step;
        if (t > hi + step * 1e-9) break;
        if (fabs(t) < step * 1e-9) t = 0; /* no "-0" or 1e-17 */
        ticks[k++] = t;
    }
    return k;
}

void report_fmt_num(char *buf, size_t cap, double v) {
    if (!isfinite(v)) {
        snprintf(buf, cap, "n/a");
        return;
    }
    double a = fabs(v);
    if (a != 0 && (a < 1e-3 || a >= 1e7)) snprintf(buf, cap, "%.3g", v);
    else if (a >= 1000 || v == floor(v)) snprintf(buf, cap, "%.0f", v);
    else snprintf(buf, cap, "%.4g", v);
}

/* Labels for ticks of spacing step: enough decimals to tell them apart. */
static void fmt_tick(char *buf, size_t cap, double v, double step) {
    double a = fabs(v);
    if (a != 0 && (a < 1e-3 || a >= 1e7)) {
        snprintf(buf, cap, "%.3g", v);
        return;
    }
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 6) dec = 6;
    snprintf(buf, cap, "%.*f", dec, v);
}

/* ------------------------------------------------------------------- paths */

static double frame_x(const ct_report_frame *f, double x) {
    double d = f->x1 - f->x0;
    return f->px + (d > 0 ? (x - f->x0) / d : 0.5) * f->pw;
}

static double frame_y(const ct_report_frame *f, double y) {
    double d = f->y1 - f->y0;
    return f->py + f->ph - (d > 0 ? (y - f->y0) / d : 0.5) * f->ph;
}

void ct_report_svg_path(ct_strbuf *b, const ct_report_frame *f, const double *xs,
                        const double *ys, size_t n) {
    size_t run = 0; /* points in the current run */
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ys[i]) || !isfinite(xs[i])) {
            if (run == 1) ct_strbuf_append(b, "h0", 2);
            run = 0;
            continue;
        }
        ct_strbuf_printf(b, "%s%.1f %.1f", run ? "L" : "M", frame_x(f, xs[i]),
                             frame_y(f, ys[i]));
        run++;
    }
    if (run == 1) ct_strbuf_append(b, "h0", 2);
}

/* ------------------------------------------------------------------ frames */

#define PLOT_LEFT 72.0
#define PLOT_RIGHT 16.0
#define PLOT_TOP 30.0
#define PLOT_BOTTOM 42.0

static ct_report_frame frame_make(double x0, double x1, double y0, double y1) {
    if (!(x1 > x0)) {
        x0 -= 1;
        x1 += 1;
    }
    if (!(y1 > y0)) {
        double pad = fabs(y0) > 0 ? fabs(y0) * 0.1 : 1.0;
        y0 -= pad;
        y1 += pad;
    } else {
        double pad = (y1 - y0) * 0.05;
        y0 = y0 == 0 ? 0 : y0 - pad;
        y1 += pad;
    }
    return (ct_report_frame){.x0 = x0, .x1 = x1, .y0 = y0, .y1 = y1, .px = PLOT_LEFT,
                             .py = PLOT_TOP, .pw = REPORT_SVG_W - PLOT_LEFT - PLOT_RIGHT,
                             .ph = REPORT_SVG_H - PLOT_TOP - PLOT_BOTTOM};
}

/* The frame, grid, ticks and axis labels. */
static void svg_axes(ct_strbuf *b, const ct_report_frame *f, const char *ylabel) {
    ct_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                         "class=\"frame\"/>\n", f->px, f->py, f->pw, f->ph);
    double t[16];
    char lab[48];
    int ny = ct_report_ticks(f->y0, f->y1, 5, t, 16);
    double ystep = ny > 1 ? t[1] - t[0] : fabs(t[0]) > 0 ? fabs(t[0]) : 1;
    for (int i = 0; i < ny; i++) {
        double y = frame_y(f, t[i]);
        fmt_tick(lab, sizeof lab, t[i], ystep);
        ct_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                             "class=\"grid\"/><text x=\"%.1f\" y=\"%.1f\" class=\"yt\">%s</text>\n",
                             f->px, y, f->px + f->pw, y, f->px - 6, y + 4, lab);
    }
    /* steps are whole numbers: at least 1 between ticks */
    int nx = ct_report_ticks(f->x0, f->x1, 8, t, 16);
    double xstep = nx > 1 ? t[1] - t[0] : 1;
    for (int i = 0; i < nx; i++) {
        if (xstep < 1 && t[i] != floor(t[i])) continue;
        double x = frame_x(f, t[i]);
        fmt_tick(lab, sizeof lab, t[i], xstep < 1 ? 1 : xstep);
        ct_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                             "class=\"tick\"/><text x=\"%.1f\" y=\"%.1f\" class=\"xt\">%s</text>\n",
                             x, f->py + f->ph, x, f->py + f->ph + 5, x, f->py + f->ph + 18, lab);
    }
    ct_strbuf_printf(b, "<text x=\"%.1f\" y=\"%d\" class=\"xl\">step</text>\n",
                         f->px + f->pw / 2, REPORT_SVG_H - 6);
    ct_strbuf_printf(b, "<text transform=\"translate(14 %.1f) rotate(-90)\" class=\"yl\">",
                         f->py + f->ph / 2);
    buf_esc(b, ylabel);
    ct_strbuf_append(b, "</text>\n", 8);
}

/* A legend entry at *x along the top; advances *x by a width from the text. */
static void svg_legend_item(ct_strbuf *b, double *x, const char *label, const char *color,
                            report_style style, bool area) {
    if (area)
        ct_strbuf_printf(b, "<rect x=\"%.1f\" y=\"8\" width=\"14\" height=\"10\" fill=\"%s\"/>",
                             *x, color);
    else
        ct_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"13\" x2=\"%.1f\" y2=\"13\" stroke=\"%s\" "
                             "stroke-width=\"2.5\"%s/>", *x, *x + 18, color,
                             style == REPORT_STYLE_DASHED ? " stroke-dasharray=\"5 3\"" : "");
    ct_strbuf_printf(b, "<text x=\"%.1f\" y=\"17\" class=\"lg\">", *x + 22);
    buf_esc(b, label);
    ct_strbuf_append(b, "</text>\n", 8);
    *x += 34 + 6.6 * (double)strlen(label);
}

static void svg_markers(ct_strbuf *b, const ct_report_frame *f, const report_marker *m,
                        size_t nm) {
    for (size_t i = 0; i < nm; i++) {
        if (!(m[i].x >= f->x0 && m[i].x <= f->x1)) continue;
        double x = frame_x(f, m[i].x);
        ct_strbuf_printf(b, "<g class=\"mk\"><title>");
        buf_esc(b, m[i].text);
        ct_strbuf_printf(b, "</title><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                             "stroke=\"%s\" stroke-width=\"1.5\"%s/><path d=\"M%.1f %.1fl-5 -7h10z\" "
                             "fill=\"%s\"/></g>\n", x, f->py, x, f->py + f->ph, m[i].color,
                             m[i].dashed ? " stroke-dasharray=\"4 3\"" : "", x, f->py, m[i].color);
    }
}

static void svg_open(ct_strbuf *b) {
    ct_strbuf_printf(b, "<svg class=\"plot\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                         "role=\"img\">\n", REPORT_SVG_W, REPORT_SVG_H, REPORT_SVG_W, REPORT_SVG_H);
}

/* --------------------------------------------------------------- line plot */

void report_svg_lines(ct_strbuf *b, const report_plot *p) {
    size_t maxp = p->max_points < 8 ? 8 : p->max_points;
    double *dx[16], *dy[16];
    size_t dn[16];
    int ns = p->ns < 16 ? p->ns : 16;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int s = 0; s < ns; s++) {
        const report_series *se = &p->s[s];
        size_t cap = se->n < maxp ? se->n : maxp;
        dx[s] = malloc((cap ? cap : 1) * sizeof(double));
        dy[s] = malloc((cap ? cap : 1) * sizeof(double));
        dn[s] = 0;
        if (!dx[s] || !dy[s]) {
            b->oom = true;
            continue;
        }
        dn[s] = ct_report_downsample(dx[s], dy[s], maxp, se->x, se->y, se->n);
        double sc = se->scale != 0 ? se->scale : 1;
        for (size_t i = 0; i < dn[s]; i++) {
            dy[s][i] *= sc;
            if (dx[s][i] < x0) x0 = dx[s][i];
            if (dx[s][i] > x1) x1 = dx[s][i];
            if (!isfinite(dy[s][i])) continue;
            if (dy[s][i] < y0) y0 = dy[s][i];
            if (dy[s][i] > y1) y1 = dy[s][i];
        }
    }
    for (size_t i = 0; i < p->nm; i++) { /* an alert after the last recorded step stays visible */
        if (p->m[i].x < x0) x0 = p->m[i].x;
        if (p->m[i].x > x1) x1 = p->m[i].x;
    }
    if (!isfinite(x0)) x0 = x1 = 0;
    if (!isfinite(y0)) y0 = y1 = 0;
    if (p->y_from_zero && y0 > 0) y0 = 0;
    ct_report_frame f = frame_make(x0, x1, y0, y1);
    svg_open(b);
    svg_axes(b, &f, p->ylabel);
    for (int s = 0; s < ns; s++) {
        const report_series *se = &p->s[s];
        if (!dn[s]) continue;
        const char *dash = se->style == REPORT_STYLE_DASHED ? " stroke-dasharray=\"6 4\"" : "";
        double wdt = se->style == REPORT_STYLE_DOTS ? 1.2 : 1.8;
        ct_strbuf_printf(b, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" "
                             "stroke-linejoin=\"round\" stroke-linecap=\"round\"%s d=\"",
                             se->color, wdt, dash);
        ct_report_svg_path(b, &f, dx[s], dy[s], dn[s]);
        ct_strbuf_append(b, "\"/>\n", 4);
        if (se->style == REPORT_STYLE_DOTS || dn[s] <= 3) { /* a line of 1-3 points hides them */
            for (size_t i = 0; i < dn[s]; i++)
                if (isfinite(dy[s][i]))
                    ct_strbuf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>",
                                         frame_x(&f, dx[s][i]), frame_y(&f, dy[s][i]), se->color);
            ct_strbuf_append(b, "\n", 1);
        }
    }
    svg_markers(b, &f, p->m, p->nm);
    double lx = f.px;
    for (int s = 0; s < ns; s++) svg_legend_item(b, &lx, p->s[s].label, p->s[s].color, p->s[s].style, false);
    for (int e = 0; e < p->nextra; e++)
        svg_legend_item(b, &lx, p->extra[e].label, p->extra[e].color,
                        p->extra[e].dashed ? REPORT_STYLE_DASHED : REPORT_STYLE_LINE, false);
    ct_strbuf_append(b, "</svg>\n", 7);
    for (int s = 0; s < ns; s++) {
        free(dx[s]);
        free(dy[s]);
    }
}

/* ------------------------------------------------------------ stacked plot */

void report_svg_stack(ct_strbuf *b, const report_stack *p) {
    size_t nb = p->max_points < 4 ? 4 : p->max_points;
    if (nb > p->n) nb = p->n;
    int nl = p->nl < 8 ? p->nl : 8;
    size_t m = nb == 1 ? 2 : nb; /* one step is drawn as a bar one step wide */
    double *x = malloc(m * sizeof *x), *tmp = malloc(m * sizeof *tmp);
    double *cum = calloc((size_t)(nl + 1) * m, sizeof *cum);
    if (!x || !tmp || !cum || !nb) {
        if (nb) b->oom = true;
        goto done;
    }
    for (int l = 0; l < nl; l++) {
        ct_report_downsample_mean(x, tmp, nb, p->x, p->y[l], p->n);
        for (size_t i = 0; i < nb; i++)
            cum[(size_t)(l + 1) * m + i] = cum[(size_t)l * m + i] + (isfinite(tmp[i]) ? tmp[i] : 0);
    }
    if (nb == 1) {
        x[1] = x[0] + 0.5;
        x[0] -= 0.5;
        for (int l = 0; l <= nl; l++) cum[(size_t)l * m + 1] = cum[(size_t)l * m];
    }
    double ymax = 0;
    for (size_t i = 0; i < m; i++)
        if (cum[(size_t)nl * m + i] > ymax) ymax = cum[(size_t)nl * m + i];
    double x0 = x[0], x1 = x[m - 1];
    for (size_t i = 0; i < p->nm; i++) {
        if (p->m[i].x < x0) x0 = p->m[i].x;
        if (p->m[i].x > x1) x1 = p->m[i].x;
    }
    ct_report_frame f = frame_make(x0, x1, 0, ymax);
    svg_open(b);
    svg_axes(b, &f, p->ylabel);
    for (int l = 0; l < nl; l++) {
        const double *lo = cum + (size_t)l * m, *hi = cum + (size_t)(l + 1) * m;
        ct_strbuf_printf(b, "<path fill=\"%s\" fill-opacity=\"0.85\" stroke=\"none\" d=\"",
                             p->colors[l]);
        for (size_t i = 0; i < m; i++)
            ct_strbuf_printf(b, "%s%.1f %.1f", i ? "L" : "M", frame_x(&f, x[i]),
                                 frame_y(&f, hi[i]));
        for (size_t i = m; i-- > 0;)
            ct_strbuf_printf(b, "L%.1f %.1f", frame_x(&f, x[i]), frame_y(&f, lo[i]));
        ct_strbuf_append(b, "Z\"/>\n", 5);
    }
    svg_markers(b, &f, p->m, p->nm);
    double lx = f.px;
    for (int l = 0; l < nl; l++)
        svg_legend_item(b, &lx, p->labels[l], p->colors[l], REPORT_STYLE_LINE, true);
    for (int e = 0; e < p->nextra; e++)
        svg_legend_item(b, &lx, p->extra[e].label, p->extra[e].color,
                        p->extra[e].dashed ? REPORT_STYLE_DASHED : REPORT_STYLE_LINE, false);
    ct_strbuf_append(b, "</svg>\n", 7);
done:
    free(x);
    free(tmp);
    free(cum);
}
