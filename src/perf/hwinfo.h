/*
 * The hardware profile of this machine: cores and SMT, cache sizes, the SIMD
 * features the kernels care about, RAM and the cgroup limits on memory and
 * CPU, the CPUs this process may run on, whether an NVIDIA GPU is present, and
 * a short signature naming the kind of machine (for tuned profiles keyed by
 * it). Reading it runs no benchmark: only /proc, /sys and a few syscalls.
 * Every source is optional; a missing or unreadable file leaves its fields
 * unknown (0, false, "") and is never an error. The parsers take the file's
 * text so they can be tested on samples. ct_hwinfo_to_json writes a profile
 * with the measured roofs a caller hands it (`ctrain hw --json`, run.dir/hw.json).
 * ct_hwinfo_cpu_sample tells how busy the machine is: the CPU time other
 * processes take on this process's CPUs between two samples (/proc/stat).
 * Leaves out: taking measurements (see perf/bench.h), NUMA layout, frequencies beyond the nominal clock, GPU
 * details beyond the model name.
 */
#ifndef CT_PERF_HWINFO_H
#define CT_PERF_HWINFO_H

#include <stdbool.h>
#include <stddef.h>

#include "ctrain/core.h"

typedef struct ct_hwinfo {
    char cpu_model[128];     /* "AMD EPYC 9654 96-Core Processor"; "" unknown */
    int physical_cores;      /* distinct (socket, core) pairs */
    int logical_cpus;        /* online CPUs (hardware threads) */
    int threads_per_core;    /* SMT ways: logical / physical */
    int allowed_cpus;        /* CPUs in this process's affinity mask */
    double cpu_quota;        /* cgroup CPU quota in CPUs; 0 = none */
    size_t l1d, l2, l3;      /* bytes per cache instance; 0 unknown */
    bool avx2, fma, avx512f, avx512_bf16, amx, neon; /* amx: amx_tile and amx_bf16 */
    bool amx_tile, amx_bf16, amx_int8; /* the AMX flags one by one */
    int amx_perm;            /* whether the kernel lets this process use the AMX tiles
                              * (Linux arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA): 1 yes,
                              * 0 refused (amx_perm_errno says why), -1 not asked (no
                              * amx_tile flag, or not Linux x86-64) */
    int amx_perm_errno;      /* the request's errno when amx_perm is 0 */
    size_t ram_bytes;          /* MemTotal; 0 unknown */
    size_t cgroup_limit_bytes; /* cgroup memory limit; 0 = none */
    bool gpu;                  /* an NVIDIA GPU is present */
    char gpu_name[128];        /* its model when the driver says; "" otherwise */
    double nominal_mhz;        /* "cpu MHz" of /proc/cpuinfo; 0 unknown */
    double measured_mhz;       /* the clock a dependent-add loop measures (boost included); 0 unknown */
    double theoretical_gflops; /* fp32 FMA peak of the allowed cores at measured_mhz (else nominal) */
    char signature[64];        /* "<arch>-<16 hex digits>"; stable for a machine kind */
} ct_hwinfo;

/* Measured roofs that go with a profile in its JSON form. A field that was
 * not measured is 0 (the JSON leaves it out). */
typedef struct ct_hw_roofs {
    int threads;             /* threads the benchmarks ran on */
    int gemm_n;              /* sgemm size n (n x n x n); 0: the peak was not measured */
    size_t membw_mib;        /* MiB per bandwidth array */
    double gemm_gflops;      /* sustained sgemm GFLOP/s (a bf16 run's trainer: its bf16
                              * GEMM peak, the same as gemm_bf16_gflops) */
    double gemm_bf16_gflops; /* sustained bf16 GEMM GFLOP/s (bf16 inputs, fp32 sums) */
    double fma_gflops;       /* register-only FMA ceiling GFLOP/s */
    double membw_gbps;       /* triad bandwidth GB/s */
    const char *gemm_source; /* where gemm_gflops came from ("measured", "config"); NULL: not
                              * written */
} ct_hw_roofs;

/* The profile as one JSON object with a trailing newline, the form `ctrain hw
 * --json` prints and run.dir/hw.json holds: every ct_hwinfo field, the BLAS
 * AMX flags one by one, the kernel's AMX permission (null: not asked), the
 * bf16 instructions GEMMs get (ct_hwinfo_bf16: "none", "avx512_bf16", "amx")
 * and why, the BLAS core name and OPENBLAS_CORETYPE (null when unset), then the roofs when r is
 * non-NULL. Borrows h and r. Returns owned text (release with free); NULL and
 * CT_ERR_OOM on failure. */
char *ct_hwinfo_to_json(const ct_hwinfo *h, const ct_hw_roofs *r);

/* Fills *out from this machine. Cheap (no benchmarks); never fails on missing
 * files. Asks the kernel for AMX tile permission when the CPU has AMX (as
 * oneDNN does before it uses the tiles; the grant is the process's). Returns
 * CT_OK; CT_ASSERTs out. */
ct_status ct_hwinfo_read(ct_hwinfo *out);

/* The memory this process can use: min(RAM, cgroup limit), ignoring unknown
 * (0) values; 0 when both are unknown. Borrows h. */
size_t ct_hwinfo_memory_available(const ct_hwinfo *h);

/* Parses /proc/cpuinfo text into cpu_model, logical_cpus (the "processor"
 * entries), physical_cores ("physical id" x "core id" pairs; falls back to
 * "cpu cores" per socket, then to logical_cpus), threads_per_core,
 * nominal_mhz and the ISA flags (x86 "flags", aarch64 "Features": asimd is
 * NEON; amx is amx_tile and amx_bf16; amx_perm, no flag, becomes -1: not
 * asked). Fields it cannot find are left as they were. Borrows text.
 * CT_ERR_FORMAT when the text holds no "processor" entry. */
ct_status ct_hwinfo_parse_cpuinfo(const char *text, ct_hwinfo *out);

/* The bf16 instructions this CPU offers GEMMs: AMX tiles (amx_tile and
 * amx_bf16, and the kernel allows them: amx_perm 1), else AVX512_BF16
 * (vdpbf16ps), else none. From h's fields only (tests feed flag strings). */
typedef enum ct_hw_bf16 {
    CT_HW_BF16_NONE = 0,
    CT_HW_BF16_AVX512 = 1,
    CT_HW_BF16_AMX = 2,
    CT_HW_BF16_COUNT
} ct_hw_bf16;
ct_hw_bf16 ct_hwinfo_bf16(const ct_hwinfo *h);
/* The same in words with the reason, into buf (cap bytes), e.g. "AMX (amx_tile,
 * amx_bf16; the kernel allows the tiles)", "AVX512_BF16 (AMX tiles present
 * but the kernel refused them: Operation not permitted)", "none: no
 * AVX512_BF16 or AMX-BF16 on this CPU". Returns buf. */
const char *ct_hwinfo_bf16_describe(const ct_hwinfo *h, char *buf, size_t cap);

/* Parses /proc/meminfo text: MemTotal in bytes into *ram_bytes. Borrows text.
 * CT_ERR_FORMAT when there is no "MemTotal: N kB" line. */
ct_status ct_hwinfo_parse_meminfo(const char *text, size_t *ram_bytes);

/* Parses a cgroup memory limit (v2 memory.max or v1 memory.limit_in_bytes):
 * "max", or a value of 2^60 bytes or more (v1's "unlimited"), gives 0 = no
 * limit; otherwise the byte count. Borrows text. CT_ERR_FORMAT otherwise. */
ct_status ct_hwinfo_parse_cgroup_max(const char *text, size_t *out);

/* Parses a cgroup v2 cpu.max ("QUOTA PERIOD" or "max PERIOD") into CPUs
 * (quota / period; 0 = no quota). Borrows text. CT_ERR_FORMAT otherwise. */
ct_status ct_hwinfo_parse_cpu_max(const char *text, double *cpus);

/* Parses a sysfs cache size ("48K", "2048K", "32M", "1G", or plain bytes)
 * into bytes. Borrows text. CT_ERR_FORMAT otherwise. */
ct_status ct_hwinfo_parse_size(const char *text, size_t *bytes);

/* ------------------------------------------------------------ load */

/* CPU time on the CPUs this process may run on, and this process's own, at
 * one moment. Two samples give the other processes' share in between: a
 * benchmark on a shared machine says how busy the machine was. */
typedef struct ct_hw_cpu_sample {
    double t;      /* ct_time_s() */
    double busy_s; /* non-idle seconds (all but idle and iowait) of the allowed CPUs */
    double self_s; /* this process's user + system seconds, all threads */
    int cpus;      /* allowed CPUs counted in busy_s */
    bool ok;       /* /proc/stat and getrusage were read */
} ct_hw_cpu_sample;

/* Other processes count as busy above this many CPUs (on average). */
#define CT_HW_BUSY_CPUS 0.25

/* Fills *out now. Never fails: out->ok = false when /proc/stat is unreadable. */
void ct_hwinfo_cpu_sample(ct_hw_cpu_sample *out);

/* Other processes' average CPU use between samples a and b (b later), in CPUs
 * (0 .. b->cpus): the allowed CPUs' busy time less this process's, over the
 * wall time. Jiffy resolution (1/100 s per CPU), so windows under ~0.2 s are
 * coarse. -1 when either sample is not ok or no time passed. Borrows both. */
double ct_hwinfo_cpu_others(const ct_hw_cpu_sample *a, const ct_hw_cpu_sample *b);

/* Sleeps seconds (this process idle) and returns what other processes used of
 * this process's CPUs meanwhile, in CPUs; -1 unknown. */
double ct_hwinfo_cpu_idle_probe(double seconds);

/* Parses /proc/stat text: sums the non-idle ticks (user, nice, system, irq,
 * softirq, steal) and all ticks of the "cpuN" lines whose N has mask[N] != 0
 * (mask NULL: every cpuN line; N >= mask_n: not counted). Writes the sums and
 * the number of lines counted. Borrows text and mask. CT_ERR_FORMAT when no
 * cpuN line parses. */
ct_status ct_hwinfo_parse_stat(const char *text, const unsigned char *mask, int mask_n,
                               double *busy_ticks, double *total_ticks, int *cpus);

#endif
