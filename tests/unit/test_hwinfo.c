/* perf/hwinfo: the /proc and /sys parsers on sample texts, and the profile
 * of this machine. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrain/core.h"
#include "perf/hwinfo.h"

/* One logical CPU of an AMD Zen 4 host; FLAGS_EXTRA is appended to its flags. */
#define AMD_CPU(n, core, extra)                                                       \
    "processor\t: " #n "\n"                                                           \
    "vendor_id\t: AuthenticAMD\n"                                                     \
    "model name\t: AMD EPYC 9654 96-Core Processor\n"                                 \
    "cpu MHz\t\t: 2400.000\n"                                                         \
    "physical id\t: 0\n"                                                              \
    "siblings\t: 4\n"                                                                 \
    "core id\t\t: " #core "\n"                                                        \
    "cpu cores\t: 2\n"                                                                \
    "flags\t\t: fpu sse sse2 avx fma avx2 bmi2" extra "\n"                            \
    "\n"

static void test_cpuinfo_amd(void) {
    /* 2 cores x 2 SMT threads, AVX-512 with BF16, no AMX */
    const char *with512 = AMD_CPU(0, 0, " avx512f avx512bw avx512_bf16 avx512vl")
        AMD_CPU(1, 1, " avx512f avx512bw avx512_bf16 avx512vl")
            AMD_CPU(2, 0, " avx512f avx512bw avx512_bf16 avx512vl")
                AMD_CPU(3, 1, " avx512f avx512bw avx512_bf16 avx512vl");
    ct_hwinfo h;
    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo(with512, &h) == CT_OK);
    CHECK(!strcmp(h.cpu_model, "AMD EPYC 9654 96-Core Processor"));
    CHECK(h.logical_cpus == 4);
    CHECK(h.physical_cores == 2);
    CHECK(h.threads_per_core == 2);
    CHECK(h.avx2 && h.fma && h.avx512f && h.avx512_bf16);
    CHECK(!h.amx && !h.neon);
    CHECK(fabs(h.nominal_mhz - 2400.0) < 1e-9);

    /* the same host without AVX-512; "avx512" words must match whole */
    const char *avx2only = AMD_CPU(0, 0, " avx512_fake") AMD_CPU(1, 1, "");
    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo(avx2only, &h) == CT_OK);
    CHECK(h.avx2 && h.fma);
    CHECK(!h.avx512f && !h.avx512_bf16 && !h.amx);
    CHECK(h.logical_cpus == 2 && h.physical_cores == 2 && h.threads_per_core == 1);

    /* AMX needs both tile and bf16 */
    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo(AMD_CPU(0, 0, " avx512f amx_tile amx_bf16 amx_int8"), &h) ==
          CT_OK);
    CHECK(h.amx && h.avx512f);
    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo(AMD_CPU(0, 0, " amx_tile"), &h) == CT_OK);
    CHECK(!h.amx);
}

/* One CPU with the given flags line, as Linux prints it. */
#define FLAGS_CPU(flags) "processor\t: 0\nmodel name\t: test\nflags\t\t: " flags "\n\n"

/* The bf16 instructions GEMMs get, from flag strings as /proc/cpuinfo of
 * each kind of CPU prints them, and the kernel's AMX answer set by hand:
 * checked on every CPU, whatever this one has. */
static void test_bf16_detection(void) {
    static const struct {
        const char *what, *cpuinfo;
        int perm;        /* amx_perm as the kernel would answer (-1: not asked) */
        ct_hw_bf16 want;
        const char *says; /* a word the description must hold */
    } cases[] = {
        /* Sapphire Rapids: AMX and AVX512_BF16; the kernel grants the tiles */
        {"SPR, tiles granted",
         FLAGS_CPU("fpu avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile amx_int8"),
         1, CT_HW_BF16_AMX, "AMX"},
        /* the same CPU under a kernel that refuses them (pre-5.16, or a
         * seccomp filter): AVX512_BF16 runs, and the refusal is named */
        {"SPR, tiles refused",
         FLAGS_CPU("fpu avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile amx_int8"),
         0, CT_HW_BF16_AVX512, "refused"},
        {"SPR, not asked",
         FLAGS_CPU("avx512f avx512_bf16 amx_bf16 amx_tile"), -1, CT_HW_BF16_AVX512,
         "not asked"},
        /* Zen 4/5, Cooper Lake: AVX512_BF16 only */
        {"Zen 4", FLAGS_CPU("fpu avx2 fma avx512f avx512bw avx512vl avx512_bf16 avx512_vnni"), -1,
         CT_HW_BF16_AVX512, "AVX512_BF16"},
        /* this project's Cascade Lake VM: AVX-512 and VNNI, no bf16 */
        {"Cascade Lake",
         FLAGS_CPU("fpu avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"), -1,
         CT_HW_BF16_NONE, "no AVX512_BF16"},
        /* AVX2 only (Zen 3); words must match whole */
        {"Zen 3", FLAGS_CPU("fpu avx2 fma avx512_bf16x amx_tilex"), -1, CT_HW_BF16_NONE,
         "no AVX512_BF16"},
        /* tiles without bf16 tiles (an int8-only part): no bf16 from AMX */
        {"amx_tile only", FLAGS_CPU("avx512f amx_tile amx_int8"), 1, CT_HW_BF16_NONE,
         "amx_tile without amx_bf16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ct_hwinfo h;
        memset(&h, 0, sizeof h);
        h.amx_perm = 5; /* the parser resets it: not asked */
        CHECK(ct_hwinfo_parse_cpuinfo(cases[i].cpuinfo, &h) == CT_OK);
        CHECK_MSG(h.amx_perm == -1, "%s: amx_perm %d after parsing", cases[i].what, h.amx_perm);
        h.amx_perm = cases[i].perm;
        if (cases[i].perm == 0) h.amx_perm_errno = EPERM;
        ct_hw_bf16 got = ct_hwinfo_bf16(&h);
        char why[256];
        ct_hwinfo_bf16_describe(&h, why, sizeof why);
        CHECK_MSG(got == cases[i].want, "%s: bf16 %d, want %d (%s)", cases[i].what, (int)got,
                  (int)cases[i].want, why);
        CHECK_MSG(strstr(why, cases[i].says) != NULL, "%s: '%s' lacks '%s'", cases[i].what, why,
                  cases[i].says);
    }
    /* the flags one by one */
    ct_hwinfo h;
    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo(FLAGS_CPU("amx_bf16 amx_tile amx_int8 avx512_bf16"), &h) ==
          CT_OK);
    CHECK(h.amx_tile && h.amx_bf16 && h.amx_int8 && h.amx && h.avx512_bf16);
    /* the profile's JSON names them, and the answer */
    h.amx_perm = 1;
    char *json = ct_hwinfo_to_json(&h, NULL);
    CHECK(json && strstr(json, "\"amx_tile\": true") && strstr(json, "\"amx_permitted\": true") &&
          strstr(json, "\"bf16\": \"amx\""));
    free(json);
    h.amx_perm = -1;
    json = ct_hwinfo_to_json(&h, NULL);
    CHECK(json && strstr(json, "\"amx_permitted\": null") &&
          strstr(json, "\"bf16\": \"avx512_bf16\""));
    free(json);
}

/* This machine: the kernel was asked exactly when the CPU has AMX tiles. */
static void test_bf16_this_machine(void) {
    ct_hwinfo h;
    CHECK(ct_hwinfo_read(&h) == CT_OK);
    CHECK_MSG(h.amx_tile ? h.amx_perm >= 0 : h.amx_perm == -1, "amx_tile %d, amx_perm %d",
              h.amx_tile, h.amx_perm);
    CHECK(ct_hwinfo_bf16(&h) != CT_HW_BF16_AMX || h.amx_perm == 1);
}

/* A 2-socket host: 2 sockets x 2 cores x 2 threads = 8 logical CPUs, with
 * core ids repeating across sockets. */
static void test_cpuinfo_two_sockets(void) {
    static const int sock[8] = {0, 0, 1, 1, 0, 0, 1, 1};
    static const int core[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    char text[4096];
    size_t n = 0;
    for (int i = 0; i < 8; i++)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "processor\t: %d\nmodel name\t: Intel(R) Xeon(R) Gold\n"
                              "physical id\t: %d\nsiblings\t: 4\ncore id\t\t: %d\n"
                              "cpu cores\t: 2\nflags\t\t: avx2 fma\n\n",
                              i, sock[i], core[i]);
    ct_hwinfo h;
    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo(text, &h) == CT_OK);
    CHECK(h.logical_cpus == 8);
    CHECK_MSG(h.physical_cores == 4, "physical %d", h.physical_cores);
    CHECK(h.threads_per_core == 2);

    /* no physical/core ids (some VMs): cpu cores / siblings gives the ratio */
    const char *noids = "processor : 0\nsiblings : 2\ncpu cores : 1\n\n"
                        "processor : 1\nsiblings : 2\ncpu cores : 1\n";
    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo(noids, &h) == CT_OK);
    CHECK(h.logical_cpus == 2 && h.physical_cores == 1 && h.threads_per_core == 2);
}

static void test_cpuinfo_arm_and_bad(void) {
    const char *arm = "processor\t: 0\nBogoMIPS\t: 2000.00\n"
                      "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"
                      "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n"
                      "processor\t: 1\nFeatures\t: fp asimd\n";
    ct_hwinfo h;
    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo(arm, &h) == CT_OK);
    CHECK(h.neon && !h.avx2 && !h.fma);
    CHECK(h.logical_cpus == 2 && h.physical_cores == 2);
    CHECK(strstr(h.cpu_model, "0x41") && strstr(h.cpu_model, "0xd0c"));

    memset(&h, 0, sizeof h);
    CHECK(ct_hwinfo_parse_cpuinfo("", &h) == CT_ERR_FORMAT);
    CHECK(strstr(ct_last_error(), "/proc/cpuinfo") != NULL);
    CHECK(ct_hwinfo_parse_cpuinfo("garbage without colons\n", &h) == CT_ERR_FORMAT);
}

static void test_meminfo(void) {
    size_t ram = 0;
    CHECK(ct_hwinfo_parse_meminfo("MemTotal:       24684092 kB\nMemFree:  1000 kB\n", &ram) ==
          CT_OK);
    CHECK(ram == (size_t)24684092 * 1024);
    ram = 7;
    CHECK(ct_hwinfo_parse_meminfo("MemFree: 1000 kB\nSwapTotal: 0 kB\n", &ram) == CT_ERR_FORMAT);
    CHECK(ram == 7);
    CHECK(strstr(ct_last_error(), "MemTotal") != NULL);
    /* a key that merely ends in MemTotal is not it */
    CHECK(ct_hwinfo_parse_meminfo("XMemTotal: 5 kB\n", &ram) == CT_ERR_FORMAT);
    CHECK(ct_hwinfo_parse_meminfo("MemTotal: lots\n", &ram) == CT_ERR_FORMAT);
}

static void test_cgroup(void) {
    size_t lim = 99;
    CHECK(ct_hwinfo_parse_cgroup_max("max\n", &lim) == CT_OK && lim == 0);
    CHECK(ct_hwinfo_parse_cgroup_max("8589934592\n", &lim) == CT_OK && lim == 8589934592ull);
    /* cgroup v1's "unlimited" */
    CHECK(ct_hwinfo_parse_cgroup_max("9223372036854771712\n", &lim) == CT_OK && lim == 0);
    lim = 5;
    CHECK(ct_hwinfo_parse_cgroup_max("12abc\n", &lim) == CT_ERR_FORMAT && lim == 5);
    CHECK(ct_hwinfo_parse_cgroup_max("", &lim) == CT_ERR_FORMAT);
    CHECK(ct_hwinfo_parse_cgroup_max("-4", &lim) == CT_ERR_FORMAT);

    double cpus = -1;
    CHECK(ct_hwinfo_parse_cpu_max("max 100000\n", &cpus) == CT_OK && cpus == 0);
    CHECK(ct_hwinfo_parse_cpu_max("250000 100000\n", &cpus) == CT_OK && fabs(cpus - 2.5) < 1e-12);
    CHECK(ct_hwinfo_parse_cpu_max("250000\n", &cpus) == CT_ERR_FORMAT);
    CHECK(ct_hwinfo_parse_cpu_max("x 100000\n", &cpus) == CT_ERR_FORMAT);

    size_t b = 0;
    CHECK(ct_hwinfo_parse_size("48K\n", &b) == CT_OK && b == 48 * 1024);
    CHECK(ct_hwinfo_parse_size("32M", &b) == CT_OK && b == 32u << 20);
    CHECK(ct_hwinfo_parse_size("512", &b) == CT_OK && b == 512);
    CHECK(ct_hwinfo_parse_size("K", &b) == CT_ERR_FORMAT);
    CHECK(ct_hwinfo_parse_size("4X", &b) == CT_ERR_FORMAT);

    ct_hwinfo h;
    memset(&h, 0, sizeof h);
    h.ram_bytes = 16ull << 30;
    CHECK(ct_hwinfo_memory_available(&h) == 16ull << 30);
    h.cgroup_limit_bytes = 4ull << 30;
    CHECK(ct_hwinfo_memory_available(&h) == 4ull << 30);
    h.ram_bytes = 0;
    CHECK(ct_hwinfo_memory_available(&h) == 4ull << 30);
}

static void test_read_this_machine(void) {
    ct_hwinfo a, b;
    CHECK(ct_hwinfo_read(&a) == CT_OK);
    CHECK(a.logical_cpus >= 1);
    CHECK(a.physical_cores >= 1 && a.physical_cores <= a.logical_cpus);
    CHECK(a.threads_per_core >= 1);
    CHECK(a.allowed_cpus >= 1);
    CHECK(a.ram_bytes > 0);
    CHECK(ct_hwinfo_memory_available(&a) > 0);
    CHECK(a.signature[0] != 0);
    CHECK(a.theoretical_gflops >= 0);
    CHECK(ct_hwinfo_read(&b) == CT_OK);
    CHECK(!strcmp(a.signature, b.signature));
    CHECK(a.logical_cpus == b.logical_cpus && a.ram_bytes == b.ram_bytes);
}

/* /proc/stat: non-idle ticks (idle and iowait left out) of the cpuN lines the
 * mask allows; the "cpu " sum line is not a CPU. */
static void test_proc_stat(void) {
    const char *text = "cpu  100 0 100 800 0 0 0 0 0 0\n"
                       "cpu0 10 1 20 300 5 2 3 4 0 0\n"
                       "cpu1 50 0 50 100 0 0 0 0 0 0\n"
                       "cpu2 7 0 0 93\n"
                       "intr 12345 1 2\nctxt 999\n";
    double busy = 0, total = 0;
    int cpus = 0;
    CHECK(ct_hwinfo_parse_stat(text, NULL, 0, &busy, &total, &cpus) == CT_OK);
    CHECK(cpus == 3 && busy == (10 + 1 + 20 + 2 + 3 + 4) + 100 + 7 &&
          total == busy + 305 + 100 + 93);
    unsigned char mask[2] = {0, 1}; /* cpu1 only; cpu2 is past the mask */
    CHECK(ct_hwinfo_parse_stat(text, mask, 2, &busy, &total, &cpus) == CT_OK);
    CHECK(cpus == 1 && busy == 100 && total == 200);
    CHECK(ct_hwinfo_parse_stat("cpu  1 2 3 4\nintr 5\n", NULL, 0, &busy, &total, &cpus) ==
          CT_ERR_FORMAT);
    /* this machine: two samples; others' use is between 0 and the CPUs counted */
    ct_hw_cpu_sample a, b;
    ct_hwinfo_cpu_sample(&a);
    volatile double x = 0;
    for (int i = 0; i < 20000000; i++) x += i; /* some time of our own */
    ct_hwinfo_cpu_sample(&b);
    double others = ct_hwinfo_cpu_others(&a, &b);
    CHECK(!a.ok || (a.cpus >= 1 && others >= 0 && others <= b.cpus));
    b.ok = false;
    CHECK(ct_hwinfo_cpu_others(&a, &b) == -1);
}

int main(void) {
    test_cpuinfo_amd();
    test_bf16_detection();
    test_bf16_this_machine();
    test_cpuinfo_two_sockets();
    test_cpuinfo_arm_and_bad();
    test_meminfo();
    test_cgroup();
    test_read_this_machine();
    test_proc_stat();
    return ct_test_result("test_hwinfo");
}
