/*
 * A stand-in for libnvidia-ml.so.1, built only for the tests: the NVML
 * functions src/perf/gpu_watch.c resolves, answering from the environment
 * variable CT_FAKE_NVML, read at every call so a test scripts a sequence of
 * readings with setenv. Its text is "key=value" words separated by spaces:
 *   util mem_util (%), mem_used mem_total (bytes), power (mW), temp (C),
 *   sm_clock mem_clock (MHz), devices (how many GPUs; 1 by default),
 *   init (the nvmlInit_v2 return code; 0 by default),
 *   fail (a return code every reading function gives; 0 by default),
 *   no_power=1 (nvmlDeviceGetPowerUsage answers NOT_SUPPORTED, 3),
 *   no_bus_id=1 (nvmlDeviceGetHandleByPciBusId_v2 answers
 *   FUNCTION_NOT_FOUND, 13, as a driver without it does).
 * Device i sits at PCI bus id "0000:i+0x10:00.0" ("0000:11:00.0" for device 1),
 * the way a machine's bus ids need not follow CUDA's numbering.
 * A key that is absent reads 0. The argument layouts are NVML's documented
 * ABI. Leaves out everything gpu_watch.c does not call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

typedef struct fake_util {
    unsigned int gpu, memory;
} fake_util;
typedef struct fake_memory {
    unsigned long long total, free, used;
} fake_memory;

static unsigned long long fake_get(const char *key, unsigned long long dflt) {
    const char *s = getenv("CT_FAKE_NVML");
    size_t n = strlen(key);
    while (s && *s) {
        while (*s == ' ') s++;
        if (strncmp(s, key, n) == 0 && s[n] == '=') return strtoull(s + n + 1, NULL, 10);
        s = strchr(s, ' ');
    }
    return dflt;
}

/* the device handle is the index + 1, never dereferenced */
static int fake_check(void *dev) {
    unsigned long long i = (unsigned long long)(size_t)dev;
    if (i == 0 || i > fake_get("devices", 1)) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    return (int)fake_get("fail", 0);
}

FAKE_EXPORT int nvmlInit_v2(void);
FAKE_EXPORT int nvmlShutdown(void);
FAKE_EXPORT const char *nvmlErrorString(int r);
FAKE_EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **dev);
FAKE_EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, void **dev);
FAKE_EXPORT int nvmlDeviceGetName(void *dev, char *name, unsigned int len);
FAKE_EXPORT int nvmlDeviceGetUtilizationRates(void *dev, fake_util *u);
FAKE_EXPORT int nvmlDeviceGetMemoryInfo(void *dev, fake_memory *m);
FAKE_EXPORT int nvmlDeviceGetPowerUsage(void *dev, unsigned int *mw);
FAKE_EXPORT int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned int *t);
FAKE_EXPORT int nvmlDeviceGetClockInfo(void *dev, int type, unsigned int *mhz);

int nvmlInit_v2(void) { return (int)fake_get("init", 0); }
int nvmlShutdown(void) { return 0; }

const char *nvmlErrorString(int r) {
    switch (r) {
    case 0: return "Success";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 6: return "Not Found";
    case 9: return "Driver Not Loaded";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **dev) {
    if (index >= fake_get("devices", 1)) return 2;
    *dev = (void *)(size_t)(index + 1);
    return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, void **dev) {
    if (fake_get("no_bus_id", 0)) return 13;
    unsigned int bus = 0;
    int end = 0;
    sscanf(bus_id, "0000:%2x:00.0%n", &bus, &end);
    if (end == 0 || bus_id[end] || bus < 0x10 || bus - 0x10 >= fake_get("devices", 1))
        return 6; /* NVML_ERROR_NOT_FOUND */
    *dev = (void *)(size_t)(bus - 0x10 + 1);
    return 0;
}

int nvmlDeviceGetName(void *dev, char *name, unsigned int len) {
    int r = fake_check(dev);
    if (r) return r;
    snprintf(name, len, "Fake GPU %u", (unsigned)((size_t)dev - 1));
    return 0;
}

int nvmlDeviceGetUtilizationRates(void *dev, fake_util *u) {
    int r = fake_check(dev);
    if (r) return r;
    u->gpu = (unsigned)fake_get("util", 0);
    u->memory = (unsigned)fake_get("mem_util", 0);
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *dev, fake_memory *m) {
    int r = fake_check(dev);
    if (r) return r;
    m->total = fake_get("mem_total", 0);
    m->used = fake_get("mem_used", 0);
    m->free = m->total - m->used;
    return 0;
}

int nvmlDeviceGetPowerUsage(void *dev, unsigned int *mw) {
    int r = fake_check(dev);
    if (r) return r;
    if (fake_get("no_power", 0)) return 3; /* NVML_ERROR_NOT_SUPPORTED */
    *mw = (unsigned)fake_get("power", 0);
    return 0;
}

int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned int *t) {
    int r = fake_check(dev);
    if (r) return r;
    if (sensor != 0) return 2; /* only NVML_TEMPERATURE_GPU */
    *t = (unsigned)fake_get("temp", 0);
    return 0;
}

int nvmlDeviceGetClockInfo(void *dev, int type, unsigned int *mhz) {
    int r = fake_check(dev);
    if (r) return r;
    if (type == 1) *mhz = (unsigned)fake_get("sm_clock", 0);      /* NVML_CLOCK_SM */
    else if (type == 2) *mhz = (unsigned)fake_get("mem_clock", 0); /* NVML_CLOCK_MEM */
    else return 2;
    return 0;
}
