/*
 * The training monitor (src/perf/monitor.c), fed hand-made samples: the
 * run's parameters from a config (FLOPs, expected rate, automatic loss
 * ceilings), the derived figures (tokens/s, GFLOP/s, both MFUs), warning
 * against critical levels for each kind, the warm-up of the timed kinds, the
 * de-duplication of reports (enter, repeat every N, clear), the alert a
 * one-line display shows, the /proc/self/status parser, and the alerts.*
 * range checks of the config.
 */
#include <math.h>
#include <string.h>

#include "ct_test.h"
#include "ctrain/config.h"
#include "perf/bench.h"
#include "perf/monitor.h"

static bool near(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

/* Parameters with simple numbers: 1e9 FLOPs and 1000 tokens per step, a
 * 100 GFLOP/s GEMM peak, 200 theoretical, 1000 tokens/s expected, 1 GiB limit. */
static ct_monitor_params simple_params(void) {
    ct_monitor_params p;
    memset(&p, 0, sizeof p);
    p.step_flops = 1e9;
    p.step_tokens = 1000;
    p.gemm_peak_gflops = 100;
    p.theory_gflops = 200;
    p.expected_tokens_per_s = 1000;
    p.mem_limit_bytes = 1024.0 * 1024 * 1024;
    p.warning[CT_ALERT_MEMORY] = 0.90;
    p.critical[CT_ALERT_MEMORY] = 0.95;
    p.warning[CT_ALERT_THROUGHPUT] = 0.5;
    p.critical[CT_ALERT_THROUGHPUT] = 0.25;
    p.warning[CT_ALERT_LOSS] = 5;
    p.critical[CT_ALERT_LOSS] = 10;
    p.warning[CT_ALERT_DATA_WAIT] = 0.1;
    p.critical[CT_ALERT_DATA_WAIT] = 0.3;
    p.warmup_steps = 0;
    p.repeat_every = 0;
    p.data_wait_min_s = 0;
    return p;
}

/* A quiet step: 1 s (so 1000 tokens/s, 1 GFLOP/s), no data wait, loss 3,
 * RSS at half the limit. */
static ct_monitor_sample quiet(int64_t step) {
    ct_monitor_sample s;
    memset(&s, 0, sizeof s);
    s.step = step;
    s.loss = 3;
    s.step_s = 1.0;
    s.data_s = 0.0;
    s.fwd_s = 0.4;
    s.bwd_s = 0.5;
    s.opt_s = 0.1;
    s.rss_bytes = 512u << 20;
    s.rss_peak_bytes = 600u << 20;
    return s;
}

static void test_params_for_run(void) {
    ct_config cfg;
    ct_config_default(&cfg);
    ct_model_config mc;
    ct_model_config_gpt2(&mc, 2, 2, 64, 1000, 128);
    ct_monitor_params p;
    ct_monitor_params_for_run(&p, &cfg, &mc, 4, 32, 3, 0, 50.0, 80.0, 1000, 700);
    double f = ct_bench_step_flops(&mc, 4, 32);
    CHECK(f > 0 && near(p.step_flops, 3 * f, 1e-12));
    CHECK(p.step_tokens == 4 * 32 * 3);
    /* expected: expected_mfu x peak / FLOPs per token */
    double per_token = 3 * f / (4 * 32 * 3);
    CHECK_MSG(near(p.expected_tokens_per_s, cfg.alerts.expected_mfu * 50e9 / per_token, 1e-12),
              "expected %g", p.expected_tokens_per_s);
    /* both loss keys 0: 1.25 and 2 x ln(V) */
    CHECK(near(p.warning[CT_ALERT_LOSS], 1.25 * log(1000.0), 1e-12));
    CHECK(near(p.critical[CT_ALERT_LOSS], 2 * log(1000.0), 1e-12));
    CHECK(p.warning[CT_ALERT_MEMORY] == 0.90 && p.critical[CT_ALERT_MEMORY] == 0.95);
    CHECK(p.mem_limit_bytes == 1000 && p.plan_bytes == 700);
    CHECK(near(p.data_wait_min_s, cfg.alerts.data_wait_min_ms * 1e-3, 1e-12));
    CHECK(p.gemm_peak_gflops == 50 && p.theory_gflops == 80 && p.peak_set_aside == 0);
    /* a measured peak under a tenth of the theoretical one was measured while
     * busy: set aside for the theory, and no rate is expected from it */
    ct_monitor_params_for_run(&p, &cfg, &mc, 4, 32, 3, 0, 5.0, 80.0, 1000, 700);
    CHECK(p.gemm_peak_gflops == 80 && p.peak_set_aside == 5 && p.expected_tokens_per_s == 0);
    /* ... but a configured peak is the user's */
    cfg.alerts.gemm_peak_gflops = 5;
    ct_monitor_params_for_run(&p, &cfg, &mc, 4, 32, 3, 0, 5.0, 80.0, 1000, 700);
    CHECK(p.gemm_peak_gflops == 5 && p.peak_set_aside == 0 && p.expected_tokens_per_s > 0);
    cfg.alerts.gemm_peak_gflops = 0;
    /* LoRA: the frozen base skips its weight gradients (4 per weight per token
     * instead of 6), the adapters do all 6 */
    ct_monitor_params pl;
    ct_monitor_params_for_run(&pl, &cfg, &mc, 4, 32, 3, 1000, 50.0, 80.0, 1000, 700);
    double attn = 12.0 * mc.n_layer * mc.n_embd * (32.0 * 33 / 2) * 4;
    double w6 = f - attn; /* 6 x tokens x the GEMM weights */
    CHECK(near(pl.step_flops, 3 * (w6 * 4 / 6 + 6.0 * 4 * 32 * 1000 + attn), 1e-12));
    /* overrides: a set rate wins; one loss key set keeps the other off */
    cfg.alerts.expected_tokens_per_s = 1234;
    cfg.alerts.loss_critical = 7;
    ct_monitor_params_for_run(&p, &cfg, &mc, 4, 32, 1, 0, 0.0, 0.0, 1000, 700);
    CHECK(p.expected_tokens_per_s == 1234);
    CHECK(p.warning[CT_ALERT_LOSS] == 0 && p.critical[CT_ALERT_LOSS] == 7);
    /* no peak and no override: no expectation (no throughput alerts) */
    cfg.alerts.expected_tokens_per_s = 0;
    ct_monitor_params_for_run(&p, &cfg, &mc, 4, 32, 1, 0, 0.0, 0.0, 1000, 700);
    CHECK(p.expected_tokens_per_s == 0);
}

static void test_figures(void) {
    ct_monitor_params p = simple_params();
    ct_monitor_sample s = quiet(1);
    s.step_s = 0.25; /* 4e9 FLOP/s */
    ct_monitor_figures fig;
    ct_monitor_figures_of(&p, &s, &fig);
    CHECK(near(fig.tokens_per_s, 4000, 1e-12));
    CHECK(near(fig.gflops, 4, 1e-12));
    CHECK(near(fig.mfu, 0.04, 1e-12));        /* 4 / 100 */
    CHECK(near(fig.mfu_theory, 0.02, 1e-12)); /* 4 / 200 */
    CHECK(near(fig.value[CT_ALERT_MEMORY], 0.5, 1e-12));
    CHECK(near(fig.value[CT_ALERT_THROUGHPUT], 4, 1e-12));
    p.gemm_peak_gflops = 0;
    p.theory_gflops = -1;
    ct_monitor_figures_of(&p, &s, &fig);
    CHECK(isnan(fig.mfu) && isnan(fig.mfu_theory)); /* unknown peaks: n/a, not 0 or inf */
}

/* A step faster than the GEMM peak in use: the peak was low (a busy moment);
 * MFU counts against the theoretical peak from then on, never against the
 * step's own rate (which would read 100%), and is n/a once a step beats the
 * theoretical peak too. */
static void test_peak_raised(void) {
    ct_monitor_params p = simple_params();
    p.gemm_peak_gflops = 2; /* the simple step does 1 GFLOP */
    p.theory_gflops = 8;
    ct_monitor m;
    ct_monitor_init(&m, &p);
    ct_alert ev[CT_ALERT_KIND_COUNT];
    ct_monitor_figures fig;
    ct_monitor_sample s = quiet(1); /* 1 GFLOP/s: below the peak */
    ct_monitor_update(&m, &s, &fig, ev);
    CHECK(near(fig.mfu, 0.5, 1e-12) && m.peak_raised_at == 0);
    s = quiet(2);
    s.step_s = 0.25; /* 4 GFLOP/s: above the peak, below the theory */
    ct_monitor_update(&m, &s, &fig, ev);
    CHECK(near(fig.mfu, 0.5, 1e-12) && near(m.p.gemm_peak_gflops, 8, 1e-12));
    CHECK(m.peak_raised_at == 2 && m.peak_measured == 2);
    s = quiet(3); /* back to 1 GFLOP/s: an eighth of the theoretical peak */
    ct_monitor_update(&m, &s, &fig, ev);
    CHECK(near(fig.mfu, 0.125, 1e-12) && near(fig.mfu_theory, 0.125, 1e-12));
    s = quiet(4);
    s.step_s = 0.1; /* 10 GFLOP/s: above the theory too: MFU is unknown */
    ct_monitor_update(&m, &s, &fig, ev);
    CHECK(isnan(fig.mfu) && m.p.gemm_peak_gflops == 0 && m.peak_raised_at == 4);
    s = quiet(5);
    ct_monitor_update(&m, &s, &fig, ev);
    CHECK(isnan(fig.mfu) && near(fig.mfu_theory, 1.0 / 8, 1e-12));
    /* no theoretical peak: a beaten peak leaves MFU unknown at once */
    p.theory_gflops = 0;
    ct_monitor_init(&m, &p);
    s = quiet(1);
    s.step_s = 0.25;
    ct_monitor_update(&m, &s, &fig, ev);
    CHECK(isnan(fig.mfu) && m.p.gemm_peak_gflops == 0);
}

static int find_kind(const ct_alert *ev, int n, ct_alert_kind k) {
    for (int i = 0; i < n; i++)
        if (ev[i].kind == k) return i;
    return -1;
}

static void test_levels(void) {
    ct_monitor_params p = simple_params();
    ct_monitor m;
    ct_monitor_init(&m, &p);
    ct_monitor_figures fig;
    ct_alert ev[CT_ALERT_KIND_COUNT];
    ct_monitor_sample s = quiet(1);
    CHECK(ct_monitor_update(&m, &s, &fig, ev) == 0);
    CHECK(ct_monitor_active(&m) == NULL);

    /* memory: 92% is a warning, 96% critical; value and threshold in bytes */
    s = quiet(2);
    s.rss_bytes = (size_t)(0.92 * p.mem_limit_bytes);
    int n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 1 && ev[0].kind == CT_ALERT_MEMORY && ev[0].level == CT_ALERT_WARNING);
    CHECK(n == 1 && ev[0].value == (double)s.rss_bytes &&
          near(ev[0].threshold, 0.90 * p.mem_limit_bytes, 1e-12));
    CHECK(n == 1 && strstr(ev[0].message, "run.memory_limit") != NULL);
    s = quiet(3);
    s.rss_bytes = (size_t)(0.96 * p.mem_limit_bytes);
    n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 1 && ev[0].level == CT_ALERT_CRITICAL &&
          near(ev[0].threshold, 0.95 * p.mem_limit_bytes, 1e-12));

    /* throughput is judged below its thresholds, on the median tokens/s of
     * the last CT_MONITOR_WINDOW steps: 400 of 1000 is a warning, 200
     * critical; tokens/s in the report */
    CHECK(CT_MONITOR_WINDOW == 5);
    ct_monitor_init(&m, &p);
    s = quiet(1);
    s.step_s = 2.5; /* 400 tokens/s */
    n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 1 && ev[0].kind == CT_ALERT_THROUGHPUT && ev[0].level == CT_ALERT_WARNING);
    CHECK(n == 1 && near(ev[0].value, 400, 1e-12) && near(ev[0].threshold, 500, 1e-12));
    static const double secs[] = {5, 5, 2, 2, 2}; /* 200, 200, 500, 500, 500 tokens/s */
    static const double medians[] = {300, 200, 300, 400, 500};
    static const int levels[] = {1, 2, 1, 1, 0};
    for (int i = 0; i < 5; i++) {
        s = quiet(2 + i);
        s.step_s = secs[i];
        n = ct_monitor_update(&m, &s, &fig, ev);
        CHECK_MSG(near(fig.value[CT_ALERT_THROUGHPUT] * 1000, medians[i], 1e-12),
                  "step %d: median %g", 2 + i, fig.value[CT_ALERT_THROUGHPUT] * 1000);
        CHECK_MSG(m.level[CT_ALERT_THROUGHPUT] == (ct_alert_level)levels[i], "step %d", 2 + i);
        CHECK(n == (i == 0 || i == 3 ? 0 : 1)); /* reports only on changes */
        if (i == 1) CHECK(n == 1 && near(ev[0].value, 200, 1e-12) && ev[0].threshold == 250);
    }
    /* the critical report carries the median; at exactly the threshold
     * (500) it is not past it: cleared */
    CHECK(n == 1 && ev[0].cleared && ev[0].level == CT_ALERT_OK);
    /* one slow step among fast ones raises nothing */
    ct_monitor_init(&m, &p);
    for (int i = 1; i <= 8; i++) {
        s = quiet(i);
        s.step_s = i == 5 ? 100 : 0.5; /* 10 tokens/s once, 2000 otherwise */
        CHECK(ct_monitor_update(&m, &s, &fig, ev) == 0);
    }

    /* loss: above 5 warns, above 10 critical, a non-finite loss is critical */
    ct_monitor_init(&m, &p);
    s = quiet(1);
    s.loss = 6;
    n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 1 && ev[0].kind == CT_ALERT_LOSS && ev[0].level == CT_ALERT_WARNING &&
          ev[0].value == 6 && ev[0].threshold == 5);
    s = quiet(2);
    s.loss = NAN;
    n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 1 && ev[0].level == CT_ALERT_CRITICAL && ev[0].threshold == 10);
    CHECK(n == 1 && strstr(ev[0].message, "not finite") != NULL);

    /* data wait: share of the step; ms in the report */
    ct_monitor_init(&m, &p);
    s = quiet(1);
    s.step_s = 0.1;
    s.data_s = 0.02; /* 20% */
    n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 1 && ev[0].kind == CT_ALERT_DATA_WAIT && ev[0].level == CT_ALERT_WARNING);
    CHECK(n == 1 && near(ev[0].value, 20, 1e-9) && near(ev[0].threshold, 10, 1e-9));
    s.step = 2;
    s.data_s = 0.05; /* 50% */
    n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 1 && ev[0].level == CT_ALERT_CRITICAL && near(ev[0].threshold, 30, 1e-9));
    /* waits under data_wait_min_s are not judged, whatever their share */
    p.data_wait_min_s = 0.06;
    ct_monitor_init(&m, &p);
    CHECK(ct_monitor_update(&m, &s, &fig, ev) == 0);
    s.data_s = 0.07;
    CHECK(ct_monitor_update(&m, &s, &fig, ev) == 1);
    p = simple_params();

    /* a threshold of 0 is off: only the critical level of memory remains */
    p.warning[CT_ALERT_MEMORY] = 0;
    ct_monitor_init(&m, &p);
    s = quiet(1);
    s.rss_bytes = (size_t)(0.92 * p.mem_limit_bytes);
    CHECK(ct_monitor_update(&m, &s, &fig, ev) == 0);
    /* several kinds at once are reported in kind order */
    p = simple_params();
    ct_monitor_init(&m, &p);
    s = quiet(1);
    s.rss_bytes = (size_t)(0.99 * p.mem_limit_bytes);
    s.loss = 7;
    n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 2 && ev[0].kind == CT_ALERT_MEMORY && ev[1].kind == CT_ALERT_LOSS);
}

static void test_warmup(void) {
    ct_monitor_params p = simple_params();
    p.warmup_steps = 3;
    ct_monitor m;
    ct_monitor_init(&m, &p);
    ct_monitor_figures fig;
    ct_alert ev[CT_ALERT_KIND_COUNT];
    /* slow, data-starved steps inside the warm-up: nothing; the loss is
     * judged from the start */
    for (int i = 1; i <= 3; i++) {
        ct_monitor_sample s = quiet(i);
        s.step_s = 10;
        s.data_s = 9;
        s.loss = i == 2 ? 20 : 3;
        int n = ct_monitor_update(&m, &s, &fig, ev);
        CHECK_MSG(n == (i == 1 ? 0 : 1), "step %d: %d reports", i, n);
        if (n) CHECK(ev[0].kind == CT_ALERT_LOSS);
    }
    ct_monitor_sample s = quiet(4);
    s.step_s = 10;
    s.data_s = 9;
    int n = ct_monitor_update(&m, &s, &fig, ev);
    CHECK(n == 2 && find_kind(ev, n, CT_ALERT_THROUGHPUT) >= 0 &&
          find_kind(ev, n, CT_ALERT_DATA_WAIT) >= 0);
}

static void test_dedup(void) {
    ct_monitor_params p = simple_params();
    ct_monitor m;
    ct_monitor_init(&m, &p);
    ct_monitor_figures fig;
    ct_alert ev[CT_ALERT_KIND_COUNT];
    int reports = 0, clears = 0;
    /* steps 1..20 above the warning: one report, not twenty */
    for (int i = 1; i <= 20; i++) {
        ct_monitor_sample s = quiet(i);
        s.loss = 6;
        int n = ct_monitor_update(&m, &s, &fig, ev);
        for (int k = 0; k < n; k++) reports += !ev[k].cleared;
    }
    CHECK_MSG(reports == 1, "%d reports", reports);
    CHECK(m.level[CT_ALERT_LOSS] == CT_ALERT_WARNING);
    /* back below: one clear, then silence */
    for (int i = 21; i <= 25; i++) {
        ct_monitor_sample s = quiet(i);
        int n = ct_monitor_update(&m, &s, &fig, ev);
        for (int k = 0; k < n; k++) clears += ev[k].cleared;
        if (i == 21)
            CHECK(n == 1 && ev[0].cleared && ev[0].kind == CT_ALERT_LOSS &&
                  strstr(ev[0].message, "since step 1)") != NULL);
    }
    CHECK(clears == 1);
    CHECK(ct_monitor_active(&m) == NULL);

    /* repeat_every 5: a standing alert is reported again every 5 steps */
    p.repeat_every = 5;
    ct_monitor_init(&m, &p);
    int at[8], na = 0;
    for (int i = 1; i <= 16; i++) {
        ct_monitor_sample s = quiet(i);
        s.loss = 6;
        int n = ct_monitor_update(&m, &s, &fig, ev);
        if (n == 1 && na < 8) at[na++] = i;
        if (n == 1 && i > 1) CHECK(ev[0].repeat);
    }
    CHECK_MSG(na == 4 && at[0] == 1 && at[1] == 6 && at[2] == 11 && at[3] == 16,
              "%d reports", na);
    /* a change of level is reported at once whatever repeat_every says */
    ct_monitor_sample s = quiet(17);
    s.loss = 11;
    CHECK(ct_monitor_update(&m, &s, &fig, ev) == 1 && ev[0].level == CT_ALERT_CRITICAL &&
          !ev[0].repeat);
    s.step = 18;
    s.loss = 6; /* critical -> warning is a change too */
    CHECK(ct_monitor_update(&m, &s, &fig, ev) == 1 && ev[0].level == CT_ALERT_WARNING);
}

static void test_active(void) {
    ct_monitor_params p = simple_params();
    ct_monitor m;
    ct_monitor_init(&m, &p);
    ct_monitor_figures fig;
    ct_alert ev[CT_ALERT_KIND_COUNT];
    ct_monitor_sample s = quiet(1);
    s.loss = 6; /* loss warning */
    ct_monitor_update(&m, &s, &fig, ev);
    const ct_alert *a = ct_monitor_active(&m);
    CHECK(a && a->kind == CT_ALERT_LOSS);
    s = quiet(2);
    s.loss = 6;
    s.rss_bytes = (size_t)(0.99 * p.mem_limit_bytes); /* memory critical */
    ct_monitor_update(&m, &s, &fig, ev);
    a = ct_monitor_active(&m);
    CHECK(a && a->kind == CT_ALERT_MEMORY && a->level == CT_ALERT_CRITICAL);
    s = quiet(3);
    s.loss = 6;
    s.rss_bytes = (size_t)(0.99 * p.mem_limit_bytes);
    s.step_s = 0.1;
    s.data_s = 0.05; /* a newer critical: data wait */
    ct_monitor_update(&m, &s, &fig, ev);
    a = ct_monitor_active(&m);
    CHECK(a && a->kind == CT_ALERT_DATA_WAIT);
    /* the most severe wins over a newer warning */
    s = quiet(4);
    s.loss = 6;
    s.rss_bytes = (size_t)(0.99 * p.mem_limit_bytes);
    s.step_s = 0.1;
    s.data_s = 0.02; /* data wait down to a warning */
    ct_monitor_update(&m, &s, &fig, ev);
    a = ct_monitor_active(&m);
    CHECK(a && a->kind == CT_ALERT_MEMORY);
    CHECK(!strcmp(ct_alert_kind_str(CT_ALERT_DATA_WAIT), "data_wait"));
    CHECK(!strcmp(ct_alert_level_str(CT_ALERT_CRITICAL), "critical"));
    CHECK(!strcmp(ct_alert_kind_str((ct_alert_kind)99), "?"));
}

static void test_process(void) {
    size_t rss = 0, peak = 0;
    const char *text = "Name:\tctrain\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\n"
                       "VmRSS:\t    1024 kB\nThreads:\t3\n";
    CHECK(ct_monitor_parse_status(text, &rss, &peak) == CT_OK);
    CHECK(rss == 1024 * 1024 && peak == 2048 * 1024);
    CHECK(ct_monitor_parse_status("Name:\tx\nVmRSS:\t1 kB\n", &rss, &peak) == CT_ERR_FORMAT);
    CHECK(strstr(ct_last_error(), "VmHWM") != NULL);
    CHECK(ct_monitor_parse_status("VmRSS: lots\nVmHWM: 1 kB\n", &rss, &peak) == CT_ERR_FORMAT);
    int64_t faults = -1;
    CHECK(ct_monitor_read_process(&rss, &peak, &faults) == CT_OK);
    CHECK(rss > 0 && peak >= rss && faults >= 0);
}

static void test_config_checks(void) {
    ct_config cfg;
    ct_config_default(&cfg);
    CHECK(ct_config_validate(&cfg) == CT_OK);
    CHECK(ct_config_set(&cfg, "alerts.memory_warning", "0.97", "test") == CT_OK);
    CHECK(ct_config_validate(&cfg) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "alerts.memory_warning") != NULL &&
          strstr(ct_last_error(), "alerts.memory_critical") != NULL);
    CHECK(ct_config_set(&cfg, "alerts.memory_critical", "0", "test") == CT_OK); /* level off */
    CHECK(ct_config_validate(&cfg) == CT_OK);
    /* throughput alerts fire below: the warning fraction must be the higher */
    ct_config_default(&cfg);
    CHECK(ct_config_set(&cfg, "alerts.throughput_warning", "0.2", "test") == CT_OK);
    CHECK(ct_config_validate(&cfg) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "alerts.throughput_warning") != NULL);
    ct_config_default(&cfg);
    CHECK(ct_config_set(&cfg, "alerts.loss_warning", "9", "test") == CT_OK);
    CHECK(ct_config_set(&cfg, "alerts.loss_critical", "8", "test") == CT_OK);
    CHECK(ct_config_validate(&cfg) == CT_ERR_ARG);
    /* ranges */
    CHECK(ct_config_set(&cfg, "alerts.data_wait_warning", "1.5", "test") == CT_ERR_ARG);
    CHECK(ct_config_set(&cfg, "alerts.expected_mfu", "0", "test") == CT_ERR_ARG);
    CHECK(ct_config_set(&cfg, "alerts.throughput_critical", "-0.1", "test") == CT_ERR_ARG);
    CHECK(ct_config_set(&cfg, "alerts.warmup_steps", "2.5", "test") == CT_ERR_ARG);
    CHECK(ct_config_set(&cfg, "alerts.data_wait_min_ms", "-1", "test") == CT_ERR_ARG);
    CHECK(ct_config_has_key("alerts.gemm_peak_gflops") &&
          ct_config_has_key("alerts.expected_tokens_per_s") &&
          ct_config_has_key("alerts.repeat_every"));
}

int main(void) {
    test_params_for_run();
    test_figures();
    test_peak_raised();
    test_levels();
    test_warmup();
    test_dedup();
    test_active();
    test_process();
    test_config_checks();
    return ct_test_result("test_monitor");
}
