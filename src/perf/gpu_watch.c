/*
 * GPU figures through NVML loaded with dlopen, and the low-utilisation rule
 * (see gpu_watch.h). The few NVML types used are written here from NVML's
 * documented ABI, so no nvml.h is needed: nvmlReturn_t is an int enum
 * (NVML_SUCCESS 0), nvmlDevice_t an opaque pointer, nvmlUtilization_t two
 * unsigned ints {gpu, memory} in percent, nvmlMemory_t (v1) three unsigned
 * long longs {total, free, used} in bytes; power is in milliwatts,
 * temperatures in degrees C, clocks in MHz. Leaves out NVML's versioned
 * structs (nvmlMemory_v2_t) and everything but reading.
 */
#include "perf/gpu_watch.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ NVML's ABI, our spelling */

typedef int nvml_ret;                 /* nvmlReturn_t */
typedef struct nvml_device *nvml_dev; /* nvmlDevice_t */
typedef struct nvml_util {            /* nvmlUtilization_t */
    unsigned int gpu, memory;         /* % of the last sample period */
} nvml_util;
typedef struct nvml_memory {          /* nvmlMemory_t (v1) */
    unsigned long long total, free, used; /* bytes */
} nvml_memory;

enum {
    NVML_OK = 0,          /* NVML_SUCCESS */
    NVML_FUNCTION_NOT_FOUND = 13, /* NVML_ERROR_FUNCTION_NOT_FOUND */
    NVML_TEMP_GPU = 0,    /* NVML_TEMPERATURE_GPU */
    NVML_CLK_SM = 1,      /* NVML_CLOCK_SM */
    NVML_CLK_MEM = 2,     /* NVML_CLOCK_MEM */
    NVML_NAME_LEN = 96,   /* NVML_DEVICE_NAME_V2_BUFFER_SIZE */
};

typedef struct nvml_fns {
    nvml_ret (*init)(void);
    nvml_ret (*shutdown)(void);
    const char *(*error_string)(nvml_ret);
    nvml_ret (*handle_by_index)(unsigned int, nvml_dev *);
    nvml_ret (*utilization)(nvml_dev, nvml_util *);
    nvml_ret (*memory)(nvml_dev, nvml_memory *);
    nvml_ret (*power)(nvml_dev, unsigned int *);
    nvml_ret (*temperature)(nvml_dev, int, unsigned int *);
    nvml_ret (*clock)(nvml_dev, int, unsigned int *);
    nvml_ret (*name)(nvml_dev, char *, unsigned int); /* optional */
    nvml_ret (*handle_by_bus_id)(const char *, nvml_dev *); /* optional */
} nvml_fns;

struct ct_gpu_watch {
    void *lib;       /* dlopen handle */
    nvml_fns f;
    nvml_dev dev;
    char name[NVML_NAME_LEN];
};

static void say_off(char *why, size_t why_len, const char *fmt, const char *a, const char *b) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, b);
    ct_log(CT_LOG_INFO, "gpu watch off: %s", msg);
    if (why && why_len) snprintf(why, why_len, "%s", msg);
}

static const char *nvml_err(const ct_gpu_watch *w, nvml_ret r, char *buf, size_t n) {
    const char *s = w->f.error_string ? w->f.error_string(r) : NULL;
    if (s) return s;
    snprintf(buf, n, "NVML error %d", r);
    return buf;
}

/* dlsym into a function pointer: POSIX guarantees the conversion works;
 * ISO C does not define it, hence the memcpy. */
static bool resolve(void *lib, const char *sym, void *fn_ptr, size_t size) {
    void *p = dlsym(lib, sym);
    if (!p) return false;
    memcpy(fn_ptr, &p, size);
    return true;
}
#define RESOLVE(lib, sym, field) resolve(lib, sym, &(field), sizeof(field))

ct_status ct_gpu_watch_open(ct_gpu_watch **out, const char *lib, int device_index,
                            const char *pci_bus_id, char *why, size_t why_len) {
    *out = NULL;
    if (why && why_len) why[0] = '\0';
    if (!lib) {
        const char *env = getenv("CT_NVML_LIB");
        lib = env && env[0] ? env : CT_NVML_LIB_DEFAULT;
    }
    char ebuf[64];
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        say_off(why, why_len, "%s not loaded (%s)", lib, e ? e : "no reason given");
        return CT_OK;
    }
    ct_gpu_watch *w = calloc(1, sizeof *w);
    if (!w) {
        dlclose(h);
        return CT_ERR(CT_ERR_OOM, "gpu watch: out of memory");
    }
    w->lib = h;
    static const char *const syms[] = {"nvmlInit_v2", "nvmlShutdown", "nvmlErrorString",
                                       "nvmlDeviceGetHandleByIndex_v2",
                                       "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
                                       "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature",
                                       "nvmlDeviceGetClockInfo"};
    bool ok[9] = {RESOLVE(h, syms[0], w->f.init),        RESOLVE(h, syms[1], w->f.shutdown),
                  RESOLVE(h, syms[2], w->f.error_string), RESOLVE(h, syms[3], w->f.handle_by_index),
                  RESOLVE(h, syms[4], w->f.utilization),  RESOLVE(h, syms[5], w->f.memory),
                  RESOLVE(h, syms[6], w->f.power),        RESOLVE(h, syms[7], w->f.temperature),
                  RESOLVE(h, syms[8], w->f.clock)};
    for (int i = 0; i < 9; i++) {
        if (ok[i]) continue;
        say_off(why, why_len, "%s lacks %s", lib, syms[i]);
        goto fail;
    }
    if (!RESOLVE(h, "nvmlDeviceGetName", w->f.name)) w->f.name = NULL;
    if (!RESOLVE(h, "nvmlDeviceGetHandleByPciBusId_v2", w->f.handle_by_bus_id))
        w->f.handle_by_bus_id = NULL;
    nvml_ret r = w->f.init();
    if (r != NVML_OK) {
        w->f.shutdown = NULL; /* nothing to shut down */
        say_off(why, why_len, "nvmlInit failed: %s%s", nvml_err(w, r, ebuf, sizeof ebuf), "");
        goto fail;
    }
    char idx[24];
    snprintf(idx, sizeof idx, "%d", device_index);
    bool by_bus = pci_bus_id && pci_bus_id[0] && w->f.handle_by_bus_id;
    if (by_bus && (r = w->f.handle_by_bus_id(pci_bus_id, &w->dev)) == NVML_FUNCTION_NOT_FOUND)
        by_bus = false; /* a driver without the lookup: NVML's numbering it is */
    if (by_bus && r != NVML_OK) {
        /* never the device of the same index instead: it may be another GPU */
        say_off(why, why_len, "no NVML device at PCI bus id %s: %s", pci_bus_id,
                nvml_err(w, r, ebuf, sizeof ebuf));
        goto fail;
    }
    if (!by_bus && (device_index < 0 || (r = w->f.handle_by_index((unsigned int)device_index,
                                                                   &w->dev)) != NVML_OK)) {
        say_off(why, why_len, "no NVML device %s: %s", idx,
                device_index < 0 ? "negative index" : nvml_err(w, r, ebuf, sizeof ebuf));
        goto fail;
    }
    if (w->f.name && w->f.name(w->dev, w->name, sizeof w->name) != NVML_OK) w->name[0] = '\0';
    w->name[sizeof w->name - 1] = '\0';
    if (by_bus)
        ct_log(CT_LOG_INFO, "gpu watch: NVML device at %s%s%s (%s)", pci_bus_id,
               w->name[0] ? " " : "", w->name, lib);
    else
        ct_log(CT_LOG_INFO, "gpu watch: NVML device %d%s%s (%s)", device_index,
               w->name[0] ? " " : "", w->name, lib);
    *out = w;
    return CT_OK;
fail:
    ct_gpu_watch_close(w);
    return CT_OK;
}

void ct_gpu_watch_close(ct_gpu_watch *w) {
    if (!w) return;
    if (w->f.shutdown) w->f.shutdown();
    dlclose(w->lib);
    free(w);
}

const char *ct_gpu_watch_name(const ct_gpu_watch *w) { return w->name; }

ct_status ct_gpu_watch_read(ct_gpu_watch *w, ct_gpu_sample *out) {
    const double nan = NAN, mib = 1024.0 * 1024.0;
    *out = (ct_gpu_sample){nan, nan, nan, nan, nan, nan, nan, nan};
    int good = 0;
    nvml_ret r, last = NVML_OK;
    nvml_util u;
    if ((r = w->f.utilization(w->dev, &u)) == NVML_OK) {
        out->util_pct = u.gpu;
        out->mem_util_pct = u.memory;
        good++;
    } else last = r;
    nvml_memory m;
    if ((r = w->f.memory(w->dev, &m)) == NVML_OK) {
        out->mem_used_mib = (double)m.used / mib;
        out->mem_total_mib = (double)m.total / mib;
        good++;
    } else last = r;
    unsigned int v;
    if ((r = w->f.power(w->dev, &v)) == NVML_OK) {
        out->power_w = v * 1e-3; /* mW */
        good++;
    } else last = r;
    if ((r = w->f.temperature(w->dev, NVML_TEMP_GPU, &v)) == NVML_OK) {
        out->temp_c = v;
        good++;
    } else last = r;
    if ((r = w->f.clock(w->dev, NVML_CLK_SM, &v)) == NVML_OK) {
        out->sm_clock_mhz = v;
        good++;
    } else last = r;
    if ((r = w->f.clock(w->dev, NVML_CLK_MEM, &v)) == NVML_OK) {
        out->mem_clock_mhz = v;
        good++;
    } else last = r;
    if (good) return CT_OK;
    char ebuf[64];
    return CT_ERR(CT_ERR_IO, "gpu watch: NVML read nothing: %s",
                    nvml_err(w, last, ebuf, sizeof ebuf));
}

/* ------------------------------------------------- low-utilisation rule */

void ct_gpu_util_rule_init(ct_gpu_util_rule *r, double threshold_pct, double window_s) {
    memset(r, 0, sizeof *r);
    r->threshold_pct = threshold_pct;
    r->window_s = window_s;
}

ct_gpu_util_event ct_gpu_util_rule_update(ct_gpu_util_rule *r, double now_s, double util_pct,
                                          double *low_for_s) {
    if (isnan(util_pct)) {
        if (low_for_s) *low_for_s = r->low ? now_s - r->low_since : 0;
        return CT_GPU_UTIL_NONE;
    }
    if (util_pct >= r->threshold_pct) {
        bool was = r->firing;
        r->low = r->firing = false;
        if (low_for_s) *low_for_s = 0;
        return was ? CT_GPU_UTIL_CLEARED : CT_GPU_UTIL_NONE;
    }
    if (!r->low) {
        r->low = true;
        r->low_since = now_s;
    }
    double low_for = now_s - r->low_since;
    if (low_for_s) *low_for_s = low_for;
    if (!r->firing && low_for >= r->window_s) {
        r->firing = true;
        return CT_GPU_UTIL_FIRED;
    }
    return CT_GPU_UTIL_NONE;
}
