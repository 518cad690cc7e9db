/*
 * Fuzz the benchmark baseline reader (ct_baseline_load, src/tools/baseline.c):
 * the input is the baseline JSON file.
 * Oracles: a failed load names the file; what loads saves, and the saved file
 * loads back to the same baseline (saved again, byte for byte the same file),
 * which is comparable with itself and, its kernel names being distinct, shows
 * no regression against itself.
 */
#include "fuzz.h"

#include "tools/baseline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("baseline");
    char path[FUZZ_PATH_MAX], a[FUZZ_PATH_MAX], b[FUZZ_PATH_MAX];
    fuzz_join(path, dir, "baseline.json");
    fuzz_join(a, dir, "saved1.json");
    fuzz_join(b, dir, "saved2.json");
    fuzz_write(path, data, size);

    static ct_baseline base, back; /* large: kept off the stack */
    ct_error_clear();
    ct_status st = ct_baseline_load(&base, path);
    fuzz_check_error(st, "ct_baseline_load", path);
    if (st) return 0;
    if (base.n < 0 || base.n > CT_BASELINE_MAX_KERNELS) fuzz_fail("loaded %d kernels", base.n);
    ct_error_clear();
    if ((st = ct_baseline_save(&base, a))) {
        fuzz_check_error(st, "ct_baseline_save", a);
        return 0;
    }
    ct_error_clear();
    if (ct_baseline_load(&back, a))
        fuzz_fail("a saved baseline does not load back: %s", ct_last_error());
    if ((st = ct_baseline_save(&back, b))) return 0;
    size_t n1 = 0, n2 = 0;
    char *t1 = fuzz_read(a, &n1), *t2 = fuzz_read(b, &n2);
    if (t1 && t2 && (n1 != n2 || memcmp(t1, t2, n1) != 0))
        fuzz_fail("the baseline read back saves differently:\n--- first:\n%s\n--- second:\n%s", t1, t2);
    free(t1);
    free(t2);
    ct_error_clear();
    if (ct_baseline_check(&base, &back, a))
        fuzz_fail("a baseline is not comparable with its own copy: %s", ct_last_error());
    for (int i = 0; i < base.n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(base.k[i].name, base.k[j].name)) return 0; /* rows match by name */
    ct_baseline_row rows[CT_BASELINE_MAX_KERNELS];
    int reg = ct_baseline_compare(&base, &back, rows);
    if (reg != 0) fuzz_fail("a baseline regressed against its own copy (%d rows)", reg);
    return 0;
}
