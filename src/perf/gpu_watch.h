/*
 * The GPU watched while it trains: utilisation, memory, power, temperature
 * and clocks read through NVML, the driver's management library, loaded at
 * run time (dlopen of libnvidia-ml.so.1, or the file named by CT_NVML_LIB):
 * no header and no link-time dependency, so every build carries the watch
 * and a machine without the driver simply runs without it.
 *
 * A missing library, a failing nvmlInit or an unknown device leaves the
 * watch off with one info line: never an error. A figure the device does
 * not report (power on some boards) reads NaN; the others still count.
 *
 * Also here: the low-utilisation rule, a pure function of (time, utilisation)
 * so tests drive it with their own clock: utilisation below the threshold
 * (90%) on every sample for a window (60 s) means the loader or the host is
 * starving the GPU. Leaves out: matching NVML's device to CUDA's by PCI bus
 * id (the CUDA index is used as NVML's, which holds unless
 * CUDA_VISIBLE_DEVICES reorders the GPUs) and per-process figures.
 */
#ifndef CT_PERF_GPU_WATCH_H
#define CT_PERF_GPU_WATCH_H

#include <stdbool.h>

#include "ctrain/core.h"

/* One reading. NaN where the device does not report the figure. */
typedef struct ct_gpu_sample {
    double util_pct;      /* kernels running, % of the driver's last sample period
                           * (1/6 s to 1 s depending on the GPU) */
    double mem_util_pct;  /* device memory read or written, % of that period */
    double mem_used_mib;  /* device memory in use by every process, MiB (2^20 bytes) */
    double mem_total_mib; /* the device's memory, MiB */
    double power_w;       /* board power draw, W (NVML reports mW) */
    double temp_c;        /* GPU die temperature, degrees C */
    double sm_clock_mhz;  /* SM clock now, MHz */
    double mem_clock_mhz; /* memory clock now, MHz */
} ct_gpu_sample;

typedef struct ct_gpu_watch ct_gpu_watch;

/* The library loaded when lib is NULL: $CT_NVML_LIB when set and not empty,
 * else "libnvidia-ml.so.1". */
#define CT_NVML_LIB_DEFAULT "libnvidia-ml.so.1"

/* Start watching a GPU through lib (NULL: see CT_NVML_LIB_DEFAULT): the one
 * at PCI bus id pci_bus_id ("0000:3B:00.0", as CUDA names it) when that is
 * given and not empty, since CUDA's numbering is not NVML's under
 * CUDA_VISIBLE_DEVICES or CUDA's fastest-first order; else NVML's device
 * device_index (an NVML without the bus-id lookup falls back to it too). *out is owned (release with ct_gpu_watch_close), or
 * NULL when the watch is off: the library is missing, lacks a function,
 * nvmlInit fails or the device is unknown; one CT_LOG_INFO line then says
 * why, and why (when not NULL) holds the same reason. CT_OK in every case
 * but CT_ERR_OOM. Not thread-safe per watch. */
ct_status ct_gpu_watch_open(ct_gpu_watch **out, const char *lib, int device_index,
                            const char *pci_bus_id, char *why, size_t why_len);

/* Shut NVML down and unload it. NULL is fine. */
void ct_gpu_watch_close(ct_gpu_watch *w);

/* Read every figure into *out. A figure that fails to read is NaN; CT_ERR_IO
 * (with NVML's message) only when none could be read (the GPU fell off the
 * bus, the driver went away). */
ct_status ct_gpu_watch_read(ct_gpu_watch *w, ct_gpu_sample *out);

/* NVML's device name ("NVIDIA H100 80GB HBM3"), or "" when it did not say.
 * Owned by w. */
const char *ct_gpu_watch_name(const ct_gpu_watch *w);

/* ------------------------------------------------- low-utilisation rule */

#define CT_GPU_UTIL_THRESHOLD_PCT 90.0
#define CT_GPU_UTIL_WINDOW_S 60.0

/* Utilisation below threshold_pct on every sample for window_s fires once;
 * the first sample at or above it clears. Plain data: set threshold_pct and
 * window_s, the rest zero (ct_gpu_util_rule_init does this). */
typedef struct ct_gpu_util_rule {
    double threshold_pct; /* below this is low, % */
    double window_s;      /* low for this long fires, s */
    bool low;             /* the last sample was low */
    double low_since;     /* time of the first sample of the low stretch, s */
    bool firing;          /* fired and not yet cleared */
} ct_gpu_util_rule;

void ct_gpu_util_rule_init(ct_gpu_util_rule *r, double threshold_pct, double window_s);

typedef enum ct_gpu_util_event {
    CT_GPU_UTIL_NONE = 0,
    CT_GPU_UTIL_FIRED = 1,   /* low for the whole window: report it */
    CT_GPU_UTIL_CLEARED = 2, /* back at or above the threshold after firing */
} ct_gpu_util_event;

/* Feed a sample taken at now_s (any monotonic clock, seconds; not before the
 * previous sample's) with utilisation util_pct. A NaN utilisation is no
 * sample: nothing changes. *low_for_s (when not NULL) receives how long the
 * current low stretch has lasted (0 when not low). */
ct_gpu_util_event ct_gpu_util_rule_update(ct_gpu_util_rule *r, double now_s, double util_pct,
                                          double *low_for_s);

#endif
