/*
 * The hardware profile (hwinfo.h): text parsers for /proc and /sys files,
 * and ct_hwinfo_read, which feeds them this machine's files. A file that is
 * missing or does not parse leaves its fields unknown.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "perf/hwinfo.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#endif
#include <unistd.h>

#include <cblas.h>
#include <xxhash.h>

#include "perf/bench.h"

#define HW_MAX_FILE (16u << 20) /* /proc/cpuinfo of a very large host stays far below */

/* Whole text of a (possibly /proc, size-0) file, NUL-terminated; NULL when
 * it cannot be read. Returns owned; release with free. */
static char *hw_read_text(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len + 1 >= cap) {
            if (cap >= HW_MAX_FILE) break;
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - 1 - len, f);
        len += n;
        if (n == 0) break;
    }
    fclose(f);
    if (buf) buf[len] = 0;
    return buf;
}

/* Trims spaces at both ends of [s, e); writes the trimmed range. */
static void hw_trim(const char **s, const char **e) {
    while (*s < *e && isspace((unsigned char)**s)) (*s)++;
    while (*e > *s && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* Copies [s, e) into dst (size n), truncating, NUL-terminated. */
static void hw_copy(char *dst, size_t n, const char *s, const char *e) {
    size_t len = (size_t)(e - s);
    if (len >= n) len = n - 1;
    memcpy(dst, s, len);
    dst[len] = 0;
}

/* Whether the space-separated word list [s, e) contains word. */
static bool hw_has_word(const char *s, const char *e, const char *word) {
    size_t wl = strlen(word);
    while (s < e) {
        while (s < e && isspace((unsigned char)*s)) s++;
        const char *w = s;
        while (s < e && !isspace((unsigned char)*s)) s++;
        if ((size_t)(s - w) == wl && !memcmp(w, word, wl)) return true;
    }
    return false;
}

static bool hw_key_is(const char *k, const char *ke, const char *name) {
    size_t n = strlen(name);
    return (size_t)(ke - k) == n && !memcmp(k, name, n);
}

static int hw_cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

ct_status ct_hwinfo_parse_cpuinfo(const char *text, ct_hwinfo *out) {
    CT_ASSERT(text && out);
    size_t nproc_lines = 1;
    for (const char *p = text; (p = strstr(p, "processor")); p++) nproc_lines++;
    long long *pairs = malloc(nproc_lines * sizeof *pairs);
    if (!pairs) return CT_ERR(CT_ERR_OOM, "out of memory parsing /proc/cpuinfo");
    size_t npairs = 0;
    int logical = 0, cores_per_socket = 0, siblings = 0;
    long phys = -1, core = -1;
    bool model_seen = false, flags_seen = false, mhz_seen = false;
    char implementer[32] = "", part[32] = "";
    const char *line = text;
    while (*line) {
        const char *eol = strchr(line, '\n');
        if (!eol) eol = line + strlen(line);
        const char *colon = memchr(line, ':', (size_t)(eol - line));
        if (colon) {
            const char *k = line, *ke = colon, *v = colon + 1, *ve = eol;
            hw_trim(&k, &ke);
            hw_trim(&v, &ve);
            if (hw_key_is(k, ke, "processor")) {
                if (phys >= 0 && core >= 0 && npairs < nproc_lines)
                    pairs[npairs++] = phys * 1000000LL + core;
                phys = core = -1;
                logical++;
            } else if (hw_key_is(k, ke, "physical id")) {
                phys = strtol(v, NULL, 10);
            } else if (hw_key_is(k, ke, "core id")) {
                core = strtol(v, NULL, 10);
            } else if (hw_key_is(k, ke, "cpu cores") && !cores_per_socket) {
                cores_per_socket = (int)strtol(v, NULL, 10);
            } else if (hw_key_is(k, ke, "siblings") && !siblings) {
                siblings = (int)strtol(v, NULL, 10);
            } else if (hw_key_is(k, ke, "model name") && !model_seen && ve > v) {
                hw_copy(out->cpu_model, sizeof out->cpu_model, v, ve);
                model_seen = true;
            } else if (hw_key_is(k, ke, "cpu MHz") && !mhz_seen) {
                out->nominal_mhz = strtod(v, NULL);
                mhz_seen = true;
            } else if (hw_key_is(k, ke, "CPU implementer") && !implementer[0]) {
                hw_copy(implementer, sizeof implementer, v, ve);
            } else if (hw_key_is(k, ke, "CPU part") && !part[0]) {
                hw_copy(part, sizeof part, v, ve);
            } else if (hw_key_is(k, ke, "flags") && !flags_seen) {
                flags_seen = true;
                out->avx2 = hw_has_word(v, ve, "avx2");
                out->fma = hw_has_word(v, ve, "fma");
                out->avx512f = hw_has_word(v, ve, "avx512f");
                out->avx512_bf16 = hw_has_word(v, ve, "avx512_bf16");
                out->amx_tile = hw_has_word(v, ve, "amx_tile");
                out->amx_bf16 = hw_has_word(v, ve, "amx_bf16");
                out->amx_int8 = hw_has_word(v, ve, "amx_int8");
                out->amx = out->amx_tile && out->amx_bf16;
                out->amx_perm = -1; /* ct_hwinfo_read asks the kernel */
                out->amx_perm_errno = 0;
            } else if (hw_key_is(k, ke, "Features") && !flags_seen) {
                flags_seen = true;
                out->neon = hw_has_word(v, ve, "asimd");
            }
        }
        line = *eol ? eol + 1 : eol;
    }
    if (phys >= 0 && core >= 0 && npairs < nproc_lines) pairs[npairs++] = phys * 1000000LL + core;
    if (!logical) {
        free(pairs);
        return CT_ERR(CT_ERR_FORMAT, "/proc/cpuinfo: no 'processor' entry; expected one per CPU");
    }
    size_t distinct = 0;
    if (npairs) {
        qsort(pairs, npairs, sizeof *pairs, hw_cmp_ll);
        distinct = 1;
        for (size_t i = 1; i < npairs; i++) distinct += pairs[i] != pairs[i - 1];
    }
    free(pairs);
    int physical = logical;
    if (distinct) physical = (int)distinct;
    else if (cores_per_socket > 0 && siblings >= cores_per_socket)
        physical = (int)((long long)logical * cores_per_socket / siblings);
    if (physical < 1) physical = 1;
    out->logical_cpus = logical;
    out->physical_cores = physical;
    out->threads_per_core = logical >= physical ? logical / physical : 1;
    if (!model_seen && (implementer[0] || part[0]))
        snprintf(out->cpu_model, sizeof out->cpu_model, "CPU implementer %s part %s",
                 implementer[0] ? implementer : "?", part[0] ? part : "?");
    return CT_OK;
}

ct_status ct_hwinfo_parse_meminfo(const char *text, size_t *ram_bytes) {
    CT_ASSERT(text && ram_bytes);
    const char *p = text;
    while ((p = strstr(p, "MemTotal:"))) {
        if (p == text || p[-1] == '\n') {
            char *end;
            errno = 0;
            unsigned long long kb = strtoull(p + 9, &end, 10);
            while (*end == ' ' || *end == '\t') end++;
            if (!errno && end != p + 9 && !strncmp(end, "kB", 2) && kb > 0) {
                *ram_bytes = (size_t)kb * 1024;
                return CT_OK;
            }
            break;
        }
        p++;
    }
    return CT_ERR(CT_ERR_FORMAT, "/proc/meminfo: expected a line 'MemTotal: N kB'");
}

ct_status ct_hwinfo_parse_cgroup_max(const char *text, size_t *out) {
    CT_ASSERT(text && out);
    const char *s = text, *e = text + strlen(text);
    hw_trim(&s, &e);
    if (e - s == 3 && !memcmp(s, "max", 3)) {
        *out = 0;
        return CT_OK;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == e && s < e && isdigit((unsigned char)*s)) {
        /* v1 spells "no limit" as a page-rounded LLONG_MAX */
        *out = errno == ERANGE || v >= (1ull << 60) ? 0 : (size_t)v;
        return CT_OK;
    }
    return CT_ERR(CT_ERR_FORMAT, "cgroup memory limit '%.40s': expected 'max' or a byte count",
                  text);
}

ct_status ct_hwinfo_parse_cpu_max(const char *text, double *cpus) {
    CT_ASSERT(text && cpus);
    char quota[32];
    long long period = 0;
    if (sscanf(text, "%31s %lld", quota, &period) == 2 && period > 0) {
        if (!strcmp(quota, "max")) {
            *cpus = 0;
            return CT_OK;
        }
        char *end;
        long long q = strtoll(quota, &end, 10);
        if (!*end && q > 0) {
            *cpus = (double)q / (double)period;
            return CT_OK;
        }
    }
    return CT_ERR(CT_ERR_FORMAT, "cgroup cpu.max '%.40s': expected 'QUOTA PERIOD' or "
                  "'max PERIOD'", text);
}

ct_status ct_hwinfo_parse_size(const char *text, size_t *bytes) {
    CT_ASSERT(text && bytes);
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || !isdigit((unsigned char)*text))
        return CT_ERR(CT_ERR_FORMAT, "cache size '%.40s': expected a number like 48K", text);
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end || v > (SIZE_MAX >> shift))
        return CT_ERR(CT_ERR_FORMAT, "cache size '%.40s': expected a number like 48K", text);
    *bytes = (size_t)v << shift;
    return CT_OK;
}

/* The L1d, L2 and L3 sizes of cpu0 from sysfs. */
static void hw_read_caches(ct_hwinfo *out) {
    for (int i = 0; i < 16; i++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        char *level = hw_read_text(path);
        if (!level) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        char *type = hw_read_text(path);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        char *size = hw_read_text(path);
        size_t bytes = 0;
        int lv = atoi(level);
        bool instr = type && !strncmp(type, "Instruction", 11);
        if (size && !instr && ct_hwinfo_parse_size(size, &bytes) == CT_OK) {
            if (lv == 1) out->l1d = bytes;
            else if (lv == 2) out->l2 = bytes;
            else if (lv == 3) out->l3 = bytes;
        }
        free(level), free(type), free(size);
    }
}

/* cgroup v2 files first, then v1's. */
static void hw_read_cgroup(ct_hwinfo *out) {
    char *t = hw_read_text("/sys/fs/cgroup/memory.max");
    if (!t) t = hw_read_text("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    size_t lim = 0;
    if (t && ct_hwinfo_parse_cgroup_max(t, &lim) == CT_OK) out->cgroup_limit_bytes = lim;
    free(t);
    double cpus = 0;
    t = hw_read_text("/sys/fs/cgroup/cpu.max");
    if (t) {
        if (ct_hwinfo_parse_cpu_max(t, &cpus) == CT_OK) out->cpu_quota = cpus;
        free(t);
        return;
    }
    char *q = hw_read_text("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    char *p = hw_read_text("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (q && p) {
        long long quota = strtoll(q, NULL, 10), period = strtoll(p, NULL, 10);
        if (quota > 0 && period > 0) out->cpu_quota = (double)quota / (double)period;
    }
    free(q), free(p);
}

/* NVIDIA's driver lists each GPU under /proc/driver/nvidia/gpus/<bus id>/. */
static void hw_read_gpu(ct_hwinfo *out) {
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            out->gpu = true;
            char path[512];
            snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%.200s/information", de->d_name);
            char *t = hw_read_text(path);
            const char *m = t ? strstr(t, "Model:") : NULL;
            if (m) {
                const char *s = m + 6, *e = strchr(s, '\n');
                if (!e) e = s + strlen(s);
                hw_trim(&s, &e);
                hw_copy(out->gpu_name, sizeof out->gpu_name, s, e);
            }
            free(t);
            break;
        }
        closedir(d);
    }
    if (!out->gpu && access("/dev/nvidia0", F_OK) == 0) out->gpu = true;
}

/* Linux's arch_prctl codes for extended state permission (asm/prctl.h, 5.16+)
 * and the XSAVE feature number of the AMX tile data */
#define HW_ARCH_GET_XCOMP_PERM 0x1022
#define HW_ARCH_REQ_XCOMP_PERM 0x1023
#define HW_XFEATURE_XTILEDATA 18

/* Asks the kernel for the AMX tile state, as a process must before its first
 * tile instruction (Linux 5.16 and later; oneDNN asks the same): sets
 * amx_perm to 1 when granted, 0 with the errno when refused (EINVAL: a kernel
 * without AMX support; ENOSYS: older than arch_prctl's codes), -1 when the
 * CPU has no amx_tile flag or this is not Linux x86-64. */
static void hw_amx_permission(ct_hwinfo *h) {
    h->amx_perm = -1;
    h->amx_perm_errno = 0;
    if (!h->amx_tile) return;
#if defined(__linux__) && defined(__x86_64__)
    unsigned long mask = 0;
    if (syscall(SYS_arch_prctl, HW_ARCH_REQ_XCOMP_PERM, HW_XFEATURE_XTILEDATA) == 0 &&
        syscall(SYS_arch_prctl, HW_ARCH_GET_XCOMP_PERM, &mask) == 0 &&
        (mask >> HW_XFEATURE_XTILEDATA) & 1) {
        h->amx_perm = 1;
    } else {
        h->amx_perm = 0;
        h->amx_perm_errno = errno ? errno : EPERM;
    }
#endif
}

ct_hw_bf16 ct_hwinfo_bf16(const ct_hwinfo *h) {
    CT_ASSERT(h);
    if (h->amx_tile && h->amx_bf16 && h->amx_perm == 1) return CT_HW_BF16_AMX;
    if (h->avx512_bf16) return CT_HW_BF16_AVX512;
    return CT_HW_BF16_NONE;
}

const char *ct_hwinfo_bf16_describe(const ct_hwinfo *h, char *buf, size_t cap) {
    CT_ASSERT(h && buf && cap > 0);
    char tiles[160] = "";
    if (h->amx_tile && h->amx_bf16 && h->amx_perm == 0)
        snprintf(tiles, sizeof tiles, "; AMX tiles present but the kernel refused them: %s",
                 strerror(h->amx_perm_errno));
    else if (h->amx_tile && h->amx_bf16 && h->amx_perm < 0)
        snprintf(tiles, sizeof tiles, "; AMX tiles present, the kernel not asked");
    switch (ct_hwinfo_bf16(h)) {
    case CT_HW_BF16_AMX:
        snprintf(buf, cap, "AMX (amx_tile, amx_bf16; the kernel allows the tiles)%s",
                 h->avx512_bf16 ? ", and AVX512_BF16" : "");
        break;
    case CT_HW_BF16_AVX512:
        snprintf(buf, cap, "AVX512_BF16 (vdpbf16ps%s)", tiles);
        break;
    default:
        snprintf(buf, cap, "none: no AVX512_BF16 or AMX-BF16 on this CPU%s%s",
                 h->amx_tile && !h->amx_bf16 ? " (amx_tile without amx_bf16)" : "", tiles);
        break;
    }
    return buf;
}

#if defined(__x86_64__)
#define HW_ARCH "x86_64"
#elif defined(__aarch64__)
#define HW_ARCH "aarch64"
#else
#define HW_ARCH "cpu"
#endif

static void hw_signature(ct_hwinfo *h) {
    char key[512];
    size_t gib = (h->ram_bytes + (512u << 20)) >> 30;
    int n = snprintf(key, sizeof key, "%s|%s|%d|%d%d%d%d%d%d|%zu", HW_ARCH, h->cpu_model,
                     h->logical_cpus, h->avx2, h->fma, h->avx512f, h->avx512_bf16, h->amx,
                     h->neon, gib);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof key) n = (int)sizeof key - 1;
    unsigned long long x = (unsigned long long)XXH64(key, (size_t)n, 0);
    snprintf(h->signature, sizeof h->signature, "%s-%016llx", HW_ARCH, x);
}

ct_status ct_hwinfo_read(ct_hwinfo *out) {
    CT_ASSERT(out);
    memset(out, 0, sizeof *out);
    char *t = hw_read_text("/proc/cpuinfo");
    if (t) (void)ct_hwinfo_parse_cpuinfo(t, out);
    free(t);
    hw_amx_permission(out);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0 && online != out->logical_cpus) {
        /* cpuinfo may list offline or host CPUs; keep the SMT ratio it gave */
        int tpc = out->threads_per_core > 0 ? out->threads_per_core : 1;
        out->logical_cpus = (int)online;
        out->physical_cores = (int)online / tpc > 0 ? (int)online / tpc : 1;
        out->threads_per_core = tpc;
    }
    if (out->logical_cpus < 1) out->logical_cpus = out->physical_cores = out->threads_per_core = 1;
    cpu_set_t set;
    CPU_ZERO(&set);
    out->allowed_cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                                     : out->logical_cpus;
    t = hw_read_text("/proc/meminfo");
    if (t) (void)ct_hwinfo_parse_meminfo(t, &out->ram_bytes);
    free(t);
    hw_read_caches(out);
    hw_read_cgroup(out);
    hw_read_gpu(out);
    /* the parsers above may have recorded a format error; none of it is ours */
    ct_error_clear();
    /* FMA pipes belong to cores, not SMT threads: count the allowed cores,
     * capped by the cgroup quota */
    int cores = out->allowed_cpus / out->threads_per_core;
    if (out->cpu_quota > 0 && out->cpu_quota < cores) cores = (int)ceil(out->cpu_quota);
    if (cores < 1) cores = 1;
    double mhz = 0;
    out->theoretical_gflops = ct_bench_theoretical_gflops(cores, &mhz);
    out->measured_mhz = mhz;
    if (out->nominal_mhz <= 0) out->nominal_mhz = mhz;
    hw_signature(out);
    return CT_OK;
}

size_t ct_hwinfo_memory_available(const ct_hwinfo *h) {
    CT_ASSERT(h);
    size_t a = h->ram_bytes, b = h->cgroup_limit_bytes;
    if (!a) return b;
    if (!b) return a;
    return a < b ? a : b;
}

/* ----------------------------------------------------------------- load */

ct_status ct_hwinfo_parse_stat(const char *text, const unsigned char *mask, int mask_n,
                               double *busy_ticks, double *total_ticks, int *cpus) {
    CT_ASSERT(text && busy_ticks && total_ticks && cpus);
    double busy = 0, total = 0;
    int n = 0;
    for (const char *line = text; line && *line;) {
        const char *next = strchr(line, '\n');
        next = next ? next + 1 : NULL;
        /* "cpuN user nice system idle iowait irq softirq steal ..." ("cpu " is the sum) */
        if (strncmp(line, "cpu", 3) != 0 || !isdigit((unsigned char)line[3])) {
            line = next;
            continue;
        }
        char *end;
        long id = strtol(line + 3, &end, 10);
        line = next;
        if (mask && (id < 0 || id >= mask_n || !mask[id])) continue;
        unsigned long long v[8] = {0};
        int got = 0;
        for (const char *p = end; got < 8; got++) {
            char *e;
            v[got] = strtoull(p, &e, 10);
            if (e == p) break;
            p = e;
        }
        if (got < 4) continue;
        /* idle and iowait are idle; guest time is inside user already */
        double b = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
        busy += b;
        total += b + (double)(v[3] + v[4]);
        n++;
    }
    if (!n)
        return CT_ERR(CT_ERR_FORMAT, "/proc/stat: no 'cpuN user nice system idle ...' line");
    *busy_ticks = busy;
    *total_ticks = total;
    *cpus = n;
    return CT_OK;
}

void ct_hwinfo_cpu_sample(ct_hw_cpu_sample *out) {
    CT_ASSERT(out);
    memset(out, 0, sizeof *out);
    unsigned char mask[CPU_SETSIZE];
    cpu_set_t set;
    CPU_ZERO(&set);
    bool have = sched_getaffinity(0, sizeof set, &set) == 0;
    for (int i = 0; i < CPU_SETSIZE; i++) mask[i] = !have || CPU_ISSET(i, &set);
    struct rusage ru;
    bool have_ru = getrusage(RUSAGE_SELF, &ru) == 0;
    out->t = ct_time_s();
    char *t = hw_read_text("/proc/stat");
    double busy = 0, total = 0;
    long hz = sysconf(_SC_CLK_TCK);
    bool ok = t && have_ru && hz > 0 &&
              ct_hwinfo_parse_stat(t, mask, CPU_SETSIZE, &busy, &total, &out->cpus) == CT_OK;
    free(t);
    if (!ok) {
        ct_error_clear(); /* a missing /proc is "unknown", not an error */
        out->cpus = 0;
        return;
    }
    out->busy_s = busy / (double)hz;
    out->self_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                  (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    out->ok = true;
}

double ct_hwinfo_cpu_others(const ct_hw_cpu_sample *a, const ct_hw_cpu_sample *b) {
    CT_ASSERT(a && b);
    double wall = b->t - a->t;
    if (!a->ok || !b->ok || wall <= 0) return -1;
    double others = ((b->busy_s - a->busy_s) - (b->self_s - a->self_s)) / wall;
    if (others < 0) others = 0; /* jiffy rounding against microsecond rusage */
    return others > b->cpus ? b->cpus : others;
}

double ct_hwinfo_cpu_idle_probe(double seconds) {
    ct_hw_cpu_sample a, b;
    ct_hwinfo_cpu_sample(&a);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    ct_hwinfo_cpu_sample(&b);
    return ct_hwinfo_cpu_others(&a, &b);
}

/* ----------------------------------------------------------------- JSON */

/* s as a JSON string (quotes, backslashes and control bytes escaped). */
static void hw_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static const char *hw_bool(bool b) { return b ? "true" : "false"; }

char *ct_hwinfo_to_json(const ct_hwinfo *h, const ct_hw_roofs *r) {
    CT_ASSERT(h);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        CT_ERR(CT_ERR_OOM, "out of memory for the hardware profile's JSON");
        return NULL;
    }
    fprintf(f, "{\"cpu_model\": ");
    hw_json_str(f, h->cpu_model);
    fprintf(f, ", \"physical_cores\": %d, \"logical_cpus\": %d, \"threads_per_core\": %d, "
            "\"allowed_cpus\": %d, \"cpu_quota\": %.3f, \"l1d_bytes\": %zu, \"l2_bytes\": %zu, "
            "\"l3_bytes\": %zu, \"avx2\": %s, \"fma\": %s, \"avx512f\": %s, \"avx512_bf16\": %s, "
            "\"amx\": %s, \"neon\": %s, \"ram_bytes\": %zu, \"cgroup_limit_bytes\": %zu, "
            "\"memory_available_bytes\": %zu, \"gpu\": %s, \"gpu_name\": ",
            h->physical_cores, h->logical_cpus, h->threads_per_core, h->allowed_cpus,
            h->cpu_quota, h->l1d, h->l2, h->l3, hw_bool(h->avx2), hw_bool(h->fma),
            hw_bool(h->avx512f), hw_bool(h->avx512_bf16), hw_bool(h->amx), hw_bool(h->neon),
            h->ram_bytes, h->cgroup_limit_bytes, ct_hwinfo_memory_available(h), hw_bool(h->gpu));
    hw_json_str(f, h->gpu_name);
    static const char *const bf16_names[CT_HW_BF16_COUNT] = {"none", "avx512_bf16", "amx"};
    char why[256];
    fprintf(f, ", \"amx_tile\": %s, \"amx_bf16\": %s, \"amx_int8\": %s, \"amx_permitted\": %s, "
            "\"bf16\": \"%s\", \"bf16_why\": ", hw_bool(h->amx_tile), hw_bool(h->amx_bf16),
            hw_bool(h->amx_int8), h->amx_perm < 0 ? "null" : hw_bool(h->amx_perm == 1),
            bf16_names[ct_hwinfo_bf16(h)]);
    hw_json_str(f, ct_hwinfo_bf16_describe(h, why, sizeof why));
    fprintf(f, ", \"nominal_mhz\": %.1f, \"measured_mhz\": %.1f, \"theoretical_gflops\": %.4f, "
            "\"signature\": ", h->nominal_mhz, h->measured_mhz, h->theoretical_gflops);
    hw_json_str(f, h->signature);
    fprintf(f, ", \"blas_corename\": ");
    hw_json_str(f, openblas_get_corename());
    fprintf(f, ", \"openblas_coretype\": ");
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    if (coretype) hw_json_str(f, coretype);
    else fprintf(f, "null");
    if (r) {
        fprintf(f, ", \"threads\": %d", r->threads);
        if (r->gemm_n > 0) fprintf(f, ", \"gemm_n\": %d", r->gemm_n);
        if (r->membw_mib > 0) fprintf(f, ", \"membw_mib\": %zu", r->membw_mib);
        if (r->gemm_gflops > 0) fprintf(f, ", \"gemm_peak_gflops\": %.2f", r->gemm_gflops);
        if (r->gemm_bf16_gflops > 0)
            fprintf(f, ", \"gemm_bf16_peak_gflops\": %.2f", r->gemm_bf16_gflops);
        if (r->fma_gflops > 0) fprintf(f, ", \"fma_peak_gflops\": %.2f", r->fma_gflops);
        if (r->membw_gbps > 0) fprintf(f, ", \"membw_gbps\": %.2f", r->membw_gbps);
        if (r->gemm_source) {
            fprintf(f, ", \"gemm_peak_source\": ");
            hw_json_str(f, r->gemm_source);
        }
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0 || !buf) {
        free(buf);
        CT_ERR(CT_ERR_OOM, "out of memory for the hardware profile's JSON");
        return NULL;
    }
    return buf;
}
