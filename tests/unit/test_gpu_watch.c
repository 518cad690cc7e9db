/*
 * The GPU watch (src/perf/gpu_watch.c) against a fake NVML
 * (tests/fake/fake_nvml.c, scripted through CT_FAKE_NVML): loading through
 * CT_NVML_LIB, every figure in its unit (mW -> W, bytes -> MiB), a figure the
 * device does not report (NaN, the rest kept), a read that fails entirely;
 * the watch off (no error, one info line) when the library is missing, lacks
 * NVML's functions, nvmlInit fails or the device is unknown; and the
 * low-utilisation rule on an injected clock (below 90% for 60 s fires once,
 * an interruption restarts the window, the first sample at 90% clears).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "perf/gpu_watch.h"

#ifndef CT_FAKE_NVML_PATH
#error "CT_FAKE_NVML_PATH: the build passes the fake NVML library's path"
#endif

typedef struct log_capture {
    int info;
    char last[512];
} log_capture;

static void capture(ct_log_level level, const char *msg, void *user) {
    log_capture *c = user;
    if (level != CT_LOG_INFO) return;
    c->info++;
    snprintf(c->last, sizeof c->last, "%s", msg);
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fmax(1, fabs(b)); }

/* Off: CT_OK, no watch, one info line holding `expect`, and why the same. */
static void check_off_bus(const char *lib, int index, const char *bus, const char *expect) {
    log_capture c = {0};
    ct_log_set(capture, &c);
    ct_gpu_watch *w = (ct_gpu_watch *)&c; /* must be overwritten with NULL */
    char why[256];
    ct_status st = ct_gpu_watch_open(&w, lib, index, bus, why, sizeof why);
    ct_log_set(NULL, NULL);
    CHECK(st == CT_OK);
    CHECK(w == NULL);
    CHECK_MSG(c.info == 1, "%d info lines", c.info);
    CHECK_MSG(strstr(c.last, "gpu watch off") && strstr(c.last, expect), "log: %s", c.last);
    CHECK_MSG(strstr(why, expect) != NULL, "why: %s", why);
    ct_gpu_watch_close(w);
}

static void check_off(const char *lib, int index, const char *expect) {
    check_off_bus(lib, index, NULL, expect);
}

static void test_off(void) {
    check_off("/nonexistent/libnvidia-ml.so.1", 0, "/nonexistent/libnvidia-ml.so.1");
    check_off("libm.so.6", 0, "lacks nvmlInit_v2"); /* a library, but not NVML */
    setenv("CT_FAKE_NVML", "init=9", 1);
    check_off(CT_FAKE_NVML_PATH, 0, "Driver Not Loaded");
    setenv("CT_FAKE_NVML", "devices=1", 1);
    check_off(CT_FAKE_NVML_PATH, 1, "no NVML device 1");
    check_off(CT_FAKE_NVML_PATH, -1, "no NVML device -1");
    /* the override names the library when none is given */
    setenv("CT_NVML_LIB", "/nonexistent/nvml-override.so", 1);
    check_off(NULL, 0, "/nonexistent/nvml-override.so");
    unsetenv("CT_NVML_LIB");
}

static void test_read(void) {
    setenv("CT_NVML_LIB", CT_FAKE_NVML_PATH, 1);
    /* 3.5 GiB of 80 GiB used, 312.5 W */
    setenv("CT_FAKE_NVML",
           "devices=2 util=97 mem_util=41 mem_used=3758096384 mem_total=85899345920 "
           "power=312500 temp=67 sm_clock=1980 mem_clock=2619",
           1);
    ct_gpu_watch *w = NULL;
    CHECK(ct_gpu_watch_open(&w, NULL, 1, NULL, NULL, 0) == CT_OK);
    unsetenv("CT_NVML_LIB");
    CHECK(w != NULL);
    if (!w) return;
    CHECK_MSG(strcmp(ct_gpu_watch_name(w), "Fake GPU 1") == 0, "%s", ct_gpu_watch_name(w));
    ct_gpu_sample s;
    CHECK(ct_gpu_watch_read(w, &s) == CT_OK);
    CHECK(near(s.util_pct, 97));
    CHECK(near(s.mem_util_pct, 41));
    CHECK_MSG(near(s.mem_used_mib, 3584), "%g MiB", s.mem_used_mib);
    CHECK_MSG(near(s.mem_total_mib, 81920), "%g MiB", s.mem_total_mib);
    CHECK_MSG(near(s.power_w, 312.5), "%g W", s.power_w);
    CHECK(near(s.temp_c, 67));
    CHECK(near(s.sm_clock_mhz, 1980));
    CHECK(near(s.mem_clock_mhz, 2619));

    /* every read asks again */
    setenv("CT_FAKE_NVML", "devices=2 util=12 mem_used=1048576 mem_total=2097152 power=999 "
                           "temp=40 sm_clock=210 mem_clock=405",
           1);
    CHECK(ct_gpu_watch_read(w, &s) == CT_OK);
    CHECK(near(s.util_pct, 12));
    CHECK(near(s.mem_util_pct, 0));
    CHECK(near(s.mem_used_mib, 1));
    CHECK(near(s.mem_total_mib, 2));
    CHECK(near(s.power_w, 0.999));
    CHECK(near(s.temp_c, 40) && near(s.sm_clock_mhz, 210) && near(s.mem_clock_mhz, 405));

    /* power not supported on this board: NaN, the rest still read */
    setenv("CT_FAKE_NVML", "devices=2 util=88 power=5000 temp=50 no_power=1", 1);
    CHECK(ct_gpu_watch_read(w, &s) == CT_OK);
    CHECK(isnan(s.power_w));
    CHECK(near(s.util_pct, 88) && near(s.temp_c, 50));

    /* the GPU fell off the bus: nothing reads, an I/O error naming NVML's reason */
    setenv("CT_FAKE_NVML", "devices=2 util=88 fail=15", 1);
    CHECK(ct_gpu_watch_read(w, &s) == CT_ERR_IO);
    CHECK_MSG(strstr(ct_last_error(), "GPU is lost") != NULL, "%s", ct_last_error());
    ct_error_clear();
    CHECK(isnan(s.util_pct) && isnan(s.mem_used_mib) && isnan(s.power_w) && isnan(s.temp_c) &&
          isnan(s.sm_clock_mhz) && isnan(s.mem_clock_mhz));
    ct_gpu_watch_close(w);
    unsetenv("CT_FAKE_NVML");
}

static void test_rule(void) {
    ct_gpu_util_rule r;
    ct_gpu_util_rule_init(&r, CT_GPU_UTIL_THRESHOLD_PCT, CT_GPU_UTIL_WINDOW_S);
    CHECK(r.threshold_pct == 90 && r.window_s == 60);
    double low = -1;
    /* busy: nothing; exactly at the threshold is not low */
    CHECK(ct_gpu_util_rule_update(&r, 0, 99, &low) == CT_GPU_UTIL_NONE && low == 0);
    CHECK(ct_gpu_util_rule_update(&r, 1, 90, &low) == CT_GPU_UTIL_NONE && low == 0);
    /* low from t = 10 for 59 s, then one busy sample: the window restarts */
    int fired = 0;
    for (int t = 10; t <= 69; t++) fired += ct_gpu_util_rule_update(&r, t, 89, &low) != 0;
    CHECK(fired == 0 && near(low, 59));
    CHECK(ct_gpu_util_rule_update(&r, 70, 95, &low) == CT_GPU_UTIL_NONE);
    /* low from t = 100 (one sample a second, a missing reading at 130):
     * fires once, at t = 160, and not again while it stays low */
    int fired_at = -1;
    fired = 0;
    for (int t = 100; t <= 200; t++) {
        ct_gpu_util_event e = ct_gpu_util_rule_update(&r, t, t == 130 ? NAN : 45, &low);
        CHECK(e != CT_GPU_UTIL_CLEARED);
        if (e == CT_GPU_UTIL_FIRED) {
            fired++;
            fired_at = t;
        }
    }
    CHECK_MSG(fired == 1 && fired_at == 160, "fired %d times, at %d", fired, fired_at);
    CHECK(near(low, 100));
    /* back to work: cleared once, then quiet */
    CHECK(ct_gpu_util_rule_update(&r, 201, 93, &low) == CT_GPU_UTIL_CLEARED && low == 0);
    CHECK(ct_gpu_util_rule_update(&r, 202, 93, &low) == CT_GPU_UTIL_NONE);
    /* a second starvation fires again; sparse samples count by time, not number */
    CHECK(ct_gpu_util_rule_update(&r, 300, 10, NULL) == CT_GPU_UTIL_NONE);
    CHECK(ct_gpu_util_rule_update(&r, 330, 10, NULL) == CT_GPU_UTIL_NONE);
    CHECK(ct_gpu_util_rule_update(&r, 360, 10, NULL) == CT_GPU_UTIL_FIRED);
}

/* The GPU CUDA runs on is found by its PCI bus id, not by CUDA's index: under
 * CUDA_VISIBLE_DEVICES=1, cuda:0 is NVML's device 1. An unknown bus id turns
 * the watch off rather than watching the GPU of the same index; a driver
 * without the lookup falls back to the index. */
static void test_bus_id(void) {
    setenv("CT_FAKE_NVML", "devices=2 util=55", 1);
    ct_gpu_watch *w = NULL;
    CHECK(ct_gpu_watch_open(&w, CT_FAKE_NVML_PATH, 0, "0000:11:00.0", NULL, 0) == CT_OK);
    CHECK(w != NULL);
    if (w) CHECK_MSG(strcmp(ct_gpu_watch_name(w), "Fake GPU 1") == 0, "%s", ct_gpu_watch_name(w));
    ct_gpu_watch_close(w);
    check_off_bus(CT_FAKE_NVML_PATH, 0, "0000:3B:00.0", "no NVML device at PCI bus id 0000:3B:00.0");
    /* an empty bus id (sim, or CUDA did not say): the index */
    w = NULL;
    CHECK(ct_gpu_watch_open(&w, CT_FAKE_NVML_PATH, 1, "", NULL, 0) == CT_OK);
    if (w) CHECK_MSG(strcmp(ct_gpu_watch_name(w), "Fake GPU 1") == 0, "%s", ct_gpu_watch_name(w));
    CHECK(w != NULL);
    ct_gpu_watch_close(w);
    setenv("CT_FAKE_NVML", "devices=2 no_bus_id=1", 1);
    w = NULL;
    CHECK(ct_gpu_watch_open(&w, CT_FAKE_NVML_PATH, 0, "0000:11:00.0", NULL, 0) == CT_OK);
    if (w) CHECK_MSG(strcmp(ct_gpu_watch_name(w), "Fake GPU 0") == 0, "%s", ct_gpu_watch_name(w));
    CHECK(w != NULL);
    ct_gpu_watch_close(w);
    unsetenv("CT_FAKE_NVML");
}

int main(void) {
    test_off();
    test_read();
    test_bus_id();
    test_rule();
    return ct_test_result("test_gpu_watch");
}
