/* The run report's parts: metrics.jsonl reading (resume repeats, nulls,
 * alerts, rollbacks, a torn last line against corruption elsewhere),
 * downsampling, ticks, SVG path data, escaping, and the rendered page's
 * bounds (escaped config, no outside references, size of a long run); a GPU
 * run's device lines (nulls, repeats, damage) and its GPU section. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "tools/report.h"
#include "unit/ct_tmpdir.h"

static char tmp[256];

static void put(const char *name, const char *text) {
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmp, name);
    CHECK(ct_tmpdir_write(p, text, strlen(text)) == 0);
}

static bool has(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static size_t count(const char *hay, const char *needle) {
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static const char good_metrics[] =
    "{\"step\": 1, \"split\": \"train\", \"loss\": 5.0, \"lr\": 0.001, \"grad_norm\": 2.0, "
    "\"tokens_per_s\": 1000, \"step_ms\": 64, \"skipped\": 0, \"rollback\": 0, \"mfu\": 0.25}\n"
    "{\"step\": 2, \"split\": \"train\", \"loss\": null, \"lr\": 0.001, \"grad_norm\": null, "
    "\"tokens_per_s\": 1000, \"step_ms\": 64, \"skipped\": 1, \"rollback\": 0}\n"
    "\n"
    "{\"step\": 3, \"split\": \"train\", \"loss\": 9.5, \"lr\": 0.001, \"grad_norm\": 50, "
    "\"tokens_per_s\": 1000, \"step_ms\": 64, \"skipped\": 0, \"rollback\": 1, \"rollback_to\": 1}\n"
    "{\"step\": 3, \"split\": \"alert\", \"level\": \"critical\", \"kind\": \"loss\", \"value\": 9.5, "
    "\"threshold\": 6, \"message\": \"loss <jumped> & rolled back\"}\n"
    "{\"step\": 2, \"split\": \"val\", \"loss\": 4.9, \"best_loss\": 4.9}\n"
    "{\"step\": 2, \"split\": \"train\", \"loss\": 4.8, \"lr\": 0.002, \"grad_norm\": 1.5, "
    "\"tokens_per_s\": 1000, \"step_ms\": 64, \"skipped\": 0, \"rollback\": 0}\n"
    "{\"step\": 3, \"split\": \"train\", \"loss\": 4.7, \"lr\": 0.003, \"grad_norm\": 1.4, "
    "\"tokens_per_s\": 1000, \"step_ms\": 64, \"skipped\": 0, \"rollback\": 0}\n"
    "{\"step\": 3, \"split\": \"future_kind\", \"whatever\": [1, 2]}\n"
    "{\"step\": 4, \"split\": \"val\", \"loss\": 4.6, \"best_loss\": 4.6}\n";

static void test_load(void) {
    put("metrics.jsonl", good_metrics);
    put("config.yaml", "model:\n  preset: gpt2-tiny  # <script>alert(1)</script> & more\n");
    ct_report_data *d = NULL;
    ct_status st = ct_report_load(&d, tmp);
    CHECK_MSG(st == CT_OK, "%s", ct_last_error());
    if (!d) return;
    CHECK(d->n_lines == 10);
    CHECK(d->n_train == 3);
    CHECK(d->n_replaced == 2); /* steps 2 and 3 written again after the rollback */
    CHECK(d->train[0].step == 1 && d->train[1].step == 2 && d->train[2].step == 3);
    CHECK(d->train[1].v[CT_REPORT_KEY_LOSS] == 4.8);  /* the later line wins */
    CHECK(d->train[2].v[CT_REPORT_KEY_LR] == 0.003);
    CHECK(d->train[2].v[CT_REPORT_KEY_ROLLBACK] == 0);
    CHECK(isnan(d->train[1].v[CT_REPORT_KEY_MFU]));   /* absent on that line */
    CHECK(d->train[0].v[CT_REPORT_KEY_MFU] == 0.25);
    CHECK(d->has_key[CT_REPORT_KEY_MFU] && d->has_key[CT_REPORT_KEY_GRAD_NORM]);
    CHECK(!d->has_key[CT_REPORT_KEY_RSS_BYTES] && !d->has_key[CT_REPORT_KEY_T_FWD_MS]);
    /* the rollback line was replaced, but the rollback is kept */
    CHECK(d->n_rollbacks == 1 && d->rollbacks[0].step == 3 && d->rollbacks[0].to == 1 &&
          d->rollbacks[0].line == 4);
    CHECK(d->n_alerts == 1);
    if (d->n_alerts == 1) {
        CHECK(!strcmp(d->alerts[0].level, "critical") && !strcmp(d->alerts[0].kind, "loss"));
        CHECK(d->alerts[0].value == 9.5 && d->alerts[0].threshold == 6);
        CHECK(!strcmp(d->alerts[0].message, "loss <jumped> & rolled back"));
    }
    CHECK(d->n_val == 2 && d->val[1].step == 4 && d->val[1].loss == 4.6);
    CHECK(d->torn_line == 0);
    CHECK(d->config_text && has(d->config_text, "<script>"));
    CHECK(d->hw_text == NULL);

    char *html = NULL;
    size_t len = 0;
    st = ct_report_render(d, 0, &html, &len);
    CHECK_MSG(st == CT_OK, "%s", ct_last_error());
    if (html) {
        CHECK(strlen(html) == len);
        CHECK(!has(html, "<script")); /* the config's tag is escaped */
        CHECK(has(html, "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more"));
        CHECK(has(html, "loss &lt;jumped&gt; &amp; rolled back"));
        CHECK(!has(html, "http://") && !has(html, "https://") && !has(html, "src="));
        CHECK(has(html, "hw.json: not recorded"));
        /* loss, lr, grad norm, tokens/s, MFU and the step split (step_ms only: no split,
         * no data_wait_ms) -> the memory plot and the split are notes */
        CHECK_MSG(count(html, "<svg") == 5, "%zu plots", count(html, "<svg"));
        CHECK(has(html, "rss_bytes, rss_peak_bytes, arena_bytes, plan_bytes, mem_bytes, mem_limit_bytes"));
        CHECK(has(html, "no step-time split"));
        CHECK(has(html, "step 3: rollback to step 1")); /* marker tooltip */
        CHECK(has(html, "step 3: critical loss alert"));
        CHECK(has(html, "25.0% of the measured GEMM peak"));
        CHECK(has(html, "final 4.7 (step 3), best 4.7 (step 3)"));
        CHECK(has(html, "<th>skipped steps</th><td>0</td>")); /* step 2's skip was replaced */
        CHECK(has(html, "2 lines were written again"));
        CHECK(count(html, "<tr><td class=\"n\">3</td><td class=\"crit\">critical") == 1);
    }
    free(html);
    ct_report_free(d);
}

static void expect_error(const char *metrics, ct_status want, const char *needle) {
    put("metrics.jsonl", metrics);
    ct_report_data *d = NULL;
    ct_status st = ct_report_load(&d, tmp);
    CHECK_MSG(st == want && d == NULL, "status %d for %.40s", (int)st, metrics);
    CHECK_MSG(has(ct_last_error(), needle), "error '%s' lacks '%s'", ct_last_error(), needle);
    ct_report_free(d);
}

static void test_bad_input(void) {
    const char *t = "{\"step\": 1, \"split\": \"train\", \"loss\": 3}\n";
    char buf[1024];
    /* a torn last line (a crash mid-write) is skipped */
    snprintf(buf, sizeof buf, "%s%s{\"step\": 2, \"split\": \"tr", t, t);
    put("metrics.jsonl", buf);
    ct_report_data *d = NULL;
    ct_status st = ct_report_load(&d, tmp);
    CHECK_MSG(st == CT_OK, "%s", ct_last_error());
    if (d) CHECK(d->torn_line == 3 && d->n_train == 1 && d->n_replaced == 1);
    ct_report_free(d);
    /* the same damage before the end is an error naming the line */
    snprintf(buf, sizeof buf, "%s{\"step\": 2, \"split\": \"tr\n%s\n", t, t);
    expect_error(buf, CT_ERR_FORMAT, "metrics.jsonl:2: not a JSON object");
    snprintf(buf, sizeof buf, "%s{\"step\": 2, \"split\": \"train\", \"loss\": \"x\"}\n%s", t, t);
    expect_error(buf, CT_ERR_FORMAT, "metrics.jsonl:2: key \"loss\" must be a number");
    /* a whole last line with a wrong key is damage, not a torn write */
    snprintf(buf, sizeof buf, "%s%s{\"split\": \"train\", \"loss\": 1}\n", t, t);
    expect_error(buf, CT_ERR_FORMAT, "metrics.jsonl:3: key \"step\"");
    snprintf(buf, sizeof buf, "[1, 2]\n%s", t);
    expect_error(buf, CT_ERR_FORMAT, "metrics.jsonl:1: not a JSON object");
    expect_error("", CT_ERR_FORMAT, "no metrics in");
    expect_error("{\"step\": 2, \"split\": \"val\", \"loss\": 3}\n", CT_ERR_FORMAT, "no training step");
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmp, "metrics.jsonl");
    remove(p);
    d = NULL;
    CHECK(ct_report_load(&d, tmp) == CT_ERR_FORMAT && !d);
    CHECK(has(ct_last_error(), "no metrics in") && has(ct_last_hint(), "ctrain train run.dir="));
    ct_tmpdir_join(p, sizeof p, tmp, "absent");
    CHECK(ct_report_load(&d, p) == CT_ERR_IO && !d);
    CHECK(has(ct_last_error(), "no such run directory"));
    /* nothing written on error */
    char out[512], written[512] = "x";
    ct_tmpdir_join(out, sizeof out, tmp, "report.html");
    CHECK(ct_report_write(tmp, NULL, written, sizeof written) != CT_OK && written[0] == '\0');
    CHECK(ct_tmpdir_size(out) < 0);
}

/* One step: every plot still has a frame, and the lone points are drawn. An
 * alert after the last train line widens the x range instead of vanishing. */
static void test_single_step(void) {
    put("metrics.jsonl", "{\"step\": 7, \"split\": \"train\", \"loss\": 3, \"lr\": 0.1, "
                         "\"tokens_per_s\": 10, \"step_ms\": 5, \"data_wait_ms\": 1}\n"
                         "{\"step\": 9, \"split\": \"alert\", \"level\": \"warning\", "
                         "\"kind\": \"loss\", \"message\": \"late\"}\n");
    ct_report_data *d = NULL;
    CHECK(ct_report_load(&d, tmp) == CT_OK);
    if (!d) return;
    char *html = NULL;
    size_t len = 0;
    CHECK(ct_report_render(d, 0, &html, &len) == CT_OK);
    if (html) {
        CHECK(count(html, "<svg") == 4); /* loss, lr, tokens/s, data wait vs the rest */
        CHECK(count(html, "<circle") >= 3);
        CHECK(has(html, "step 9: warning loss alert: late"));
        CHECK(has(html, "1 (steps 7 to 7)"));
    }
    free(html);
    ct_report_free(d);
}

static void test_write(void) {
    put("metrics.jsonl", good_metrics);
    put("hw.json", "{\"cpu_model\": \"Test <CPU>\", \"ram_bytes\": 8589934592, \"avx2\": true, "
                   "\"gpu_name\": null, \"nested\": {\"a\": 1}}");
    char written[512], want[512];
    CHECK(ct_report_write(tmp, NULL, written, sizeof written) == CT_OK);
    ct_tmpdir_join(want, sizeof want, tmp, "report.html");
    CHECK(!strcmp(written, want));
    static char page[1 << 20];
    long n = ct_tmpdir_read(want, page, sizeof page - 1);
    CHECK(n > 1000);
    if (n > 0) {
        page[n] = '\0';
        CHECK(has(page, "<th>cpu_model</th><td>Test &lt;CPU&gt;</td>"));
        CHECK(has(page, "8589934592 (8.00 GiB)"));
        CHECK(has(page, "<th>nested.a</th><td>1</td>"));
        CHECK(has(page, "<th>gpu_name</th><td>unknown</td>"));
        CHECK(has(page, "</html>\n"));
    }
    ct_tmpdir_join(want, sizeof want, tmp, "other.html");
    CHECK(ct_report_write(tmp, want, written, sizeof written) == CT_OK && !strcmp(written, want));
    CHECK(ct_tmpdir_size(want) == n);
    remove(want);
    ct_tmpdir_join(want, sizeof want, tmp, "hw.json");
    remove(want);
    ct_tmpdir_join(want, sizeof want, tmp, "report.html");
    remove(want);
}

static void test_escape(void) {
    ct_strbuf b = {0};
    const char s[] = "a<b & c>\"d'e\0f";
    ct_report_escape(&b, s, sizeof s - 1);
    CHECK(b.p && !strcmp(b.p, "a&lt;b &amp; c&gt;&quot;d&#39;ef"));
    ct_strbuf_printf(&b, "|%d|%s", 42, "x");
    CHECK(b.p && !strcmp(b.p, "a&lt;b &amp; c&gt;&quot;d&#39;ef|42|x"));
    char big[1000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ct_strbuf_printf(&b, "%s", big); /* longer than the small-format path */
    CHECK(b.len == strlen(b.p) && b.len == 37 + 999);
    ct_strbuf_free(&b);
    CHECK(b.p == NULL && b.len == 0);
}

static void test_downsample(void) {
    enum { N = 100000, M = 200 };
    double *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    double ox[M], oy[M];
    if (!x || !y) {
        CHECK(0);
        free(x);
        free(y);
        return;
    }
    for (int i = 0; i < N; i++) {
        x[i] = i + 1;
        y[i] = sin(i * 0.001);
    }
    y[12345] = 100;  /* a spike */
    y[54321] = -50;  /* a dip */
    for (int i = 80000; i < 81000; i++) y[i] = NAN; /* a bucket and more with no value */
    size_t n = ct_report_downsample(ox, oy, M, x, y, N);
    CHECK(n <= M && n >= M / 2);
    bool spike = false, dip = false, gap = false, sorted = true;
    for (size_t i = 0; i < n; i++) {
        spike |= oy[i] == 100 && ox[i] == 12346;
        dip |= oy[i] == -50 && ox[i] == 54322;
        gap |= isnan(oy[i]);
        if (i) sorted &= ox[i] > ox[i - 1];
    }
    CHECK(spike && dip && gap && sorted);
    /* few points are copied as they are */
    n = ct_report_downsample(ox, oy, M, x, y, 50);
    CHECK(n == 50 && ox[49] == 50 && oy[10] == y[10]);
    /* means: 10 points 1..10 in 5 buckets of 2 */
    double xs[10], ys[10];
    for (int i = 0; i < 10; i++) xs[i] = ys[i] = i + 1;
    ys[3] = NAN;
    n = ct_report_downsample_mean(ox, oy, 5, xs, ys, 10);
    CHECK(n == 5 && ox[0] == 1.5 && oy[0] == 1.5 && ox[1] == 3.5 && oy[1] == 3 && oy[4] == 9.5);
    free(x);
    free(y);
}

static void test_ticks(void) {
    double t[32];
    int n = ct_report_ticks(0, 1, 5, t, 32);
    CHECK(n == 6 && t[0] == 0 && fabs(t[5] - 1) < 1e-12 && fabs(t[1] - 0.2) < 1e-12);
    n = ct_report_ticks(0.13, 9.7, 5, t, 32);
    CHECK(n == 4 && t[0] == 2 && t[3] == 8);
    n = ct_report_ticks(3, 3, 5, t, 32);
    CHECK(n == 1 && t[0] == 3);
    n = ct_report_ticks(-1e-4, 3e-4, 5, t, 32);
    CHECK(n >= 3 && n <= 10);
    bool zero = false;
    for (int i = 0; i < n; i++) zero |= t[i] == 0.0 && !signbit(t[i]);
    CHECK(zero); /* exactly 0, not -0 or 1e-20 */
    /* over many ranges: inside, ascending, 1/2/5 steps, a sane count */
    unsigned s = 1;
    for (int r = 0; r < 2000; r++) {
        s = s * 1103515245u + 12345u;
        double lo = ((double)(s >> 8) / (1 << 24) - 0.5) * pow(10, (int)(s % 13) - 6);
        s = s * 1103515245u + 12345u;
        double hi = lo + ((double)(s >> 8) / (1 << 24) + 1e-3) * pow(10, (int)(s % 11) - 5);
        if (hi - lo < 1e-6 * fabs(lo)) continue; /* beyond double's resolution for labels */
        n = ct_report_ticks(lo, hi, 5, t, 32);
        bool ok = n >= 2 && n <= 11;
        for (int i = 0; ok && i < n; i++) ok = t[i] >= lo - 1e-9 * (hi - lo) && t[i] <= hi + 1e-9 * (hi - lo);
        if (ok && n >= 2) {
            double st = t[1] - t[0], m = st / pow(10, floor(log10(st)));
            ok = fabs(m - 1) < 1e-6 || fabs(m - 2) < 1e-6 || fabs(m - 5) < 1e-6 || fabs(m - 10) < 1e-6;
            for (int i = 1; ok && i < n; i++) ok = fabs(t[i] - t[i - 1] - st) < 1e-6 * st;
        }
        CHECK_MSG(ok, "ticks of [%g, %g]: %d", lo, hi, n);
        if (!ok) break;
    }
}

static void test_path(void) {
    ct_report_frame f = {.x0 = 0, .x1 = 10, .y0 = 0, .y1 = 10, .px = 0, .py = 0, .pw = 100, .ph = 100};
    ct_strbuf b = {0};
    double x[] = {0, 5, 10}, y[] = {0, 5, 10};
    ct_report_svg_path(&b, &f, x, y, 3);
    CHECK(b.p && !strcmp(b.p, "M0.0 100.0L50.0 50.0L100.0 0.0"));
    ct_strbuf_free(&b);
    /* a NaN breaks the line; a lone point is a zero-length segment */
    double x2[] = {0, 2, 4, 6, 8}, y2[] = {1, NAN, 3, NAN, NAN};
    ct_report_svg_path(&b, &f, x2, y2, 5);
    CHECK(b.p && !strcmp(b.p, "M0.0 90.0h0M40.0 70.0h0"));
    ct_strbuf_free(&b);
    double x3[] = {0, 2, 4}, y3[] = {NAN, 2, 8};
    ct_report_svg_path(&b, &f, x3, y3, 3);
    CHECK(b.p && !strcmp(b.p, "M20.0 80.0L40.0 20.0"));
    ct_strbuf_free(&b);
}

/* A long run stays a small page: the points drawn are bounded. */
static void test_long_run(void) {
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmp, "metrics.jsonl");
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) return;
    size_t n = 60000;
    for (size_t i = 1; i <= n; i++) {
        fprintf(f, "{\"step\": %zu, \"split\": \"train\", \"loss\": %.6f, \"lr\": 0.001, "
                "\"grad_norm\": %.4f, \"tokens_per_s\": %zu, \"step_ms\": 10, \"t_data_ms\": 1, "
                "\"t_fwd_ms\": 3, \"t_bwd_ms\": 5, \"t_opt_ms\": 1, \"t_comm_ms\": 0, "
                "\"rss_bytes\": %zu, \"mem_limit_bytes\": 4294967296, \"mfu\": 0.4}\n",
                i, 10.0 / (1.0 + (double)i / 1000), 1 + sin((double)i), 1000 + i % 97,
                (size_t)1 << 30);
        if (i % 1000 == 0) fprintf(f, "{\"step\": %zu, \"split\": \"val\", \"loss\": 3}\n", i);
    }
    fclose(f);
    ct_report_data *d = NULL;
    CHECK(ct_report_load(&d, tmp) == CT_OK);
    if (!d) return;
    CHECK(d->n_train == n && d->n_val == 60);
    char *html = NULL;
    size_t len = 0;
    CHECK(ct_report_render(d, 500, &html, &len) == CT_OK);
    CHECK_MSG(len < 200 * 1024, "%zu bytes", len);
    CHECK(html && has(html, "drawn as at most 500 points"));
    CHECK(html && count(html, "<svg") == 7);
    CHECK(html && has(html, "of the 4.00 GiB limit (25%)"));
    free(html);
    ct_report_free(d);
    remove(p);
}

/* A GPU run: device lines every step, a GPU reading on some of them (nulls
 * where the board reports nothing), a resume writing a reading again, a
 * gpu_util alert. The summary's figures skip nulls, and the GPU section has
 * its plots; a CPU run's page has no GPU section at all. */
static const char gpu_metrics[] =
    "{\"step\": 1, \"split\": \"train\", \"loss\": 5.0, \"step_ms\": 10}\n"
    "{\"step\": 1, \"split\": \"device\", \"device_peak_bytes\": 1e9, \"device_plan_bytes\": 2e9, "
    "\"device_limit_bytes\": 8e9, \"device_free_bytes\": 7e9, \"host_waits\": 1}\n"
    "{\"step\": 2, \"split\": \"train\", \"loss\": 4.0, \"step_ms\": 10}\n"
    "{\"step\": 2, \"split\": \"device\", \"device_peak_bytes\": 1e9, \"gpu_util\": 40, "
    "\"gpu_mem_util\": 10, \"gpu_mem_used_mib\": 2048, \"gpu_mem_total_mib\": 81559, "
    "\"gpu_power_w\": null, \"gpu_temp_c\": 51, \"gpu_sm_clock_mhz\": 1980, "
    "\"gpu_mem_clock_mhz\": 2619}\n"
    "{\"step\": 3, \"split\": \"train\", \"loss\": 3.0, \"step_ms\": 10}\n"
    "{\"step\": 3, \"split\": \"device\", \"gpu_util\": null, \"gpu_mem_util\": null, "
    "\"gpu_mem_used_mib\": null, \"gpu_mem_total_mib\": null, \"gpu_power_w\": null, "
    "\"gpu_temp_c\": null}\n"
    "{\"step\": 4, \"split\": \"device\", \"gpu_util\": 99, \"gpu_mem_used_mib\": 9000, "
    "\"gpu_mem_total_mib\": 81559, \"gpu_power_w\": 300, \"gpu_temp_c\": 70}\n"
    "{\"step\": 5, \"split\": \"device\", \"gpu_util\": 0, \"gpu_mem_used_mib\": 9100, "
    "\"gpu_mem_total_mib\": 81559, \"gpu_power_w\": 500, \"gpu_temp_c\": 65}\n"
    "{\"step\": 5, \"split\": \"alert\", \"level\": \"warning\", \"kind\": \"gpu_util\", "
    "\"value\": 0, \"threshold\": 90, \"message\": \"GPU starved\"}\n"
    /* a resume writes step 4 again: the later reading wins */
    "{\"step\": 4, \"split\": \"device\", \"gpu_util\": 95, \"gpu_mem_used_mib\": 12000, "
    "\"gpu_mem_total_mib\": 81559, \"gpu_power_w\": 350, \"gpu_temp_c\": 72}\n"
    /* keys the reader does not know (host_waits, a newer writer's figures of
     * any type) are passed over */
    "{\"step\": 6, \"split\": \"device\", \"host_waits\": 3, \"gpu_util\": 96.5, "
    "\"gpu_fan_pct\": \"n/a\", \"gpu_procs\": [{\"pid\": 1}], \"gpu_x\": {\"y\": null}}\n";

static void test_gpu(void) {
    put("metrics.jsonl", gpu_metrics);
    ct_report_data *d = NULL;
    ct_status st = ct_report_load(&d, tmp);
    CHECK_MSG(st == CT_OK, "%s", ct_last_error());
    if (!d) return;
    CHECK(d->has_device);
    /* step 1's line holds no reading; step 3's holds only nulls; step 4 once */
    CHECK_MSG(d->n_gpu == 5, "%zu readings", d->n_gpu);
    if (d->n_gpu == 5) {
        CHECK(d->gpu[0].step == 2 && d->gpu[1].step == 3 && d->gpu[2].step == 4);
        CHECK(d->gpu[2].v[CT_REPORT_GPU_UTIL] == 95 && d->gpu[2].v[CT_REPORT_GPU_POWER_W] == 350);
        CHECK(isnan(d->gpu[0].v[CT_REPORT_GPU_POWER_W]) && isnan(d->gpu[1].v[CT_REPORT_GPU_UTIL]));
    }
    CHECK(d->n_replaced == 0); /* a repeated GPU reading is not a repeated step */
    ct_report_gpu_stats g;
    ct_report_gpu_summary(d, &g);
    /* util over 40, 95, 0, 96.5 (step 3's null skipped, not a 0) */
    CHECK_MSG(g.n_util == 4 && g.util_median == 67.5, "n %zu median %g", g.n_util, g.util_median);
    CHECK_MSG(g.n_util_low == 2, "%zu below 90%%", g.n_util_low);
    CHECK(g.mem_peak_mib == 12000 && g.mem_peak_step == 4 && g.mem_total_mib == 81559);
    CHECK(g.power_median_w == 425 && g.power_max_w == 500); /* 350, 500: nulls skipped */
    CHECK(g.temp_max_c == 72 && g.sm_clock_median_mhz == 1980);
    CHECK(g.n_util_alerts == 1);
    char *html = NULL;
    size_t len = 0;
    st = ct_report_render(d, 0, &html, &len);
    CHECK_MSG(st == CT_OK, "%s", ct_last_error());
    if (html) {
        CHECK(has(html, "<h2>GPU</h2>"));
        /* loss (no step split: no data wait), then GPU utilisation, memory and power */
        CHECK_MSG(count(html, "<svg") == 4, "%zu plots", count(html, "<svg"));
        CHECK(has(html, "<h3>GPU utilisation</h3>\n<svg") && has(html, "<h3>GPU memory</h3>\n<svg") &&
              has(html, "<h3>GPU power</h3>\n<svg"));
        CHECK(has(html, "<th>median utilisation</th><td>67.5%</td>"));
        CHECK(has(html, "<th>readings below 90% utilisation</th><td>50.0% (2 of 4 readings)</td>"));
        CHECK(has(html, "11.72 GiB of 79.65 GiB (15%) at step 4"));
        CHECK(has(html, "<th>board power</th><td>median 425 W, max 500 W</td>"));
        CHECK(has(html, "<th>max temperature</th><td>72 \xc2\xb0" "C</td>"));
        CHECK(has(html, "<th>gpu_util alerts</th><td>1 ("));
        /* the gpu_util alert marks the utilisation plot, not the loss plot */
        const char *gu = strstr(html, "<h3>GPU utilisation</h3>");
        const char *mk = strstr(html, "step 5: warning gpu_util alert: GPU starved");
        CHECK(gu && mk && mk > gu);
    }
    free(html);
    ct_report_free(d);

    /* a GPU whose watch was off: a note, no plot, no empty table */
    put("metrics.jsonl", "{\"step\": 1, \"split\": \"train\", \"loss\": 5.0}\n"
                         "{\"step\": 1, \"split\": \"device\", \"device_peak_bytes\": 1e9}\n");
    d = NULL;
    CHECK(ct_report_load(&d, tmp) == CT_OK);
    if (d) {
        CHECK(d->has_device && d->n_gpu == 0);
        CHECK(ct_report_render(d, 0, &html, &len) == CT_OK);
        CHECK(html && has(html, "<h2>GPU</h2>") && has(html, "hold no GPU reading") &&
              !has(html, "GPU utilisation"));
        free(html);
        ct_report_free(d);
    }

    /* a CPU run: nothing GPU-related on the page */
    put("metrics.jsonl", good_metrics);
    d = NULL;
    CHECK(ct_report_load(&d, tmp) == CT_OK);
    if (d) {
        CHECK(!d->has_device && d->n_gpu == 0);
        CHECK(ct_report_render(d, 0, &html, &len) == CT_OK);
        CHECK(html && !has(html, "GPU") && !has(html, "gpu_"));
        free(html);
        ct_report_free(d);
    }

    /* damaged device lines: an error naming the line and the key, never a crash */
    const char *t = "{\"step\": 1, \"split\": \"train\", \"loss\": 3}\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s{\"step\": 1, \"split\": \"device\", \"gpu_util\": \"high\"}\n%s",
             t, t);
    expect_error(buf, CT_ERR_FORMAT, "metrics.jsonl:2: key \"gpu_util\" must be a number or null");
    snprintf(buf, sizeof buf, "%s{\"step\": 1, \"split\": \"device\", \"gpu_power_w\": [1]}\n", t);
    expect_error(buf, CT_ERR_FORMAT, "metrics.jsonl:2: key \"gpu_power_w\"");
    snprintf(buf, sizeof buf, "%s{\"step\": -1, \"split\": \"device\", \"gpu_util\": 5}\n", t);
    expect_error(buf, CT_ERR_FORMAT, "metrics.jsonl:2: key \"step\"");
    /* a torn last device line is skipped like any other */
    snprintf(buf, sizeof buf, "%s{\"step\": 1, \"split\": \"device\", \"gpu_ut", t);
    put("metrics.jsonl", buf);
    d = NULL;
    CHECK(ct_report_load(&d, tmp) == CT_OK && d && d->torn_line == 2 && d->n_gpu == 0);
    ct_report_free(d);
    /* hostile but well-typed readings render */
    snprintf(buf, sizeof buf, "%s{\"step\": 1, \"split\": \"device\", \"gpu_util\": -1e308, "
             "\"gpu_mem_used_mib\": 1e308, \"gpu_mem_total_mib\": 0, \"gpu_power_w\": 1e300}\n"
             "{\"step\": 900000000000000, \"split\": \"device\", \"gpu_util\": 1e308}\n", t);
    put("metrics.jsonl", buf);
    d = NULL;
    CHECK(ct_report_load(&d, tmp) == CT_OK);
    if (d) {
        html = NULL;
        CHECK(ct_report_render(d, 0, &html, &len) == CT_OK && html && has(html, "</html>"));
        free(html);
        ct_report_free(d);
    }
}

int main(void) {
    if (!ct_tmpdir_make(tmp, sizeof tmp, "report")) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    test_load();
    test_bad_input();
    test_single_step();
    test_write();
    test_escape();
    test_downsample();
    test_ticks();
    test_path();
    test_long_run();
    test_gpu();
    ct_tmpdir_remove(tmp);
    return ct_test_result("test_report");
}
