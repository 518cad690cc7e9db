/*
 * Fuzz the safetensors reader (src/io/safetensors.c): the input is the file.
 * Oracles: a failed open names the file; every tensor of an open file is
 * found by its name, its sizes agree (numel = product of the shape, nbytes =
 * numel * element size), every float tensor converts to fp32 (F32 bit for
 * bit, a 2-D one also transposed), and what was read writes back with
 * ct_st_write as F32 and reads back with the same names, shapes and bits.
 */
#include "fuzz.h"

#include "core/dtype.h"
#include "io/safetensors.h"

#define ROUNDTRIP_MAX_NUMEL (1 << 20) /* larger files skip the write-back */

/* Library-written seeds (CT_FUZZ_SEED_OUT): the writer's own layouts. */
static void dump_seeds(const char *dir) {
    if (!getenv("CT_FUZZ_SEED_OUT")) return;
    static const float v[24] = {0.f,  1.f,   -2.5f, 3.25f, 1e-8f, -1e8f, 65504.f, 0.5f,
                                7.f,  -7.f,  1e-3f, 2.f,   4.f,   8.f,   16.f,    32.f,
                                0.1f, -0.1f, 0.2f,  0.3f,  0.4f,  0.5f,  0.6f,    0.7f};
    const char *meta[] = {"format", "pt", "note", "seed \"quoted\"\n"};
    ct_st_entry e[6] = {
        {.name = "w", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {4, 6}, .data = v},
        {.name = "h", .dtype = CT_DTYPE_F16, .ndim = 1, .shape = {8}, .data = v},
        {.name = "b", .dtype = CT_DTYPE_BF16, .ndim = 3, .shape = {2, 2, 3}, .data = v},
        {.name = "s", .dtype = CT_DTYPE_F32, .ndim = 0, .data = v + 3},
        {.name = "empty", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {0, 5}, .data = NULL},
        {.name = "t", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {3, 2}, .data = v,
         .transpose = true},
    };
    struct {
        const char *name;
        int n, n_meta;
    } files[] = {{"lib_mixed.safetensors", 6, 2}, {"lib_one.safetensors", 1, 1},
                 {"lib_none.safetensors", 0, 0}, {"lib_scalar_empty.safetensors", 2, 0}};
    char path[FUZZ_PATH_MAX];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        fuzz_join(path, dir, "seed.safetensors");
        const ct_st_entry *first = i == 3 ? e + 3 : e;
        if (ct_st_write(path, first, files[i].n, meta, files[i].n_meta))
            fuzz_die("cannot write seed", path);
        size_t n = 0;
        char *b = fuzz_read(path, &n);
        if (!b) fuzz_die("cannot read", path);
        fuzz_seed_out(files[i].name, b, n);
        free(b);
    }
}

static bool same_bits(const float *a, const float *b, size_t n) {
    return n == 0 || memcmp(a, b, n * sizeof *a) == 0;
}

/* Write every tensor (all float) back as F32, reopen, compare. */
static void roundtrip(const char *dir, const ct_safetensors *sf, float **vals) {
    int n = ct_st_count(sf);
    ct_st_entry *e = calloc((size_t)(n ? n : 1), sizeof *e);
    if (!e) return;
    for (int i = 0; i < n; i++) {
        const ct_st_tensor *t = ct_st_tensor_at(sf, i);
        e[i].name = t->name;
        e[i].dtype = CT_DTYPE_F32;
        e[i].ndim = t->ndim;
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        e[i].data = vals[i];
    }
    char out[FUZZ_PATH_MAX];
    fuzz_join(out, dir, "back.safetensors");
    ct_error_clear();
    ct_status st = ct_st_write(out, e, n, NULL, 0);
    fuzz_check_error(st, "ct_st_write", out);
    if (st) {
        free(e);
        return;
    }
    ct_safetensors *b = NULL;
    ct_error_clear();
    st = ct_st_open(&b, out);
    if (st) fuzz_fail("ct_st_write wrote a file ct_st_open refuses: %s", ct_last_error());
    if (ct_st_count(b) != n) fuzz_fail("wrote %d tensors, read back %d", n, ct_st_count(b));
    for (int i = 0; i < n; i++) {
        const ct_st_tensor *t = ct_st_find(b, e[i].name);
        if (!t) fuzz_fail("tensor '%s' written, not found on reading back", e[i].name);
        if (t->ndim != e[i].ndim || memcmp(t->shape, e[i].shape, sizeof t->shape) ||
            t->dtype != CT_DTYPE_F32)
            fuzz_fail("tensor '%s' read back with another shape or dtype", e[i].name);
        float *v = malloc((size_t)t->numel * sizeof *v + 1);
        if (!v) continue;
        if (ct_st_read_f32(b, t, v, false)) fuzz_fail("reading back '%s': %s", e[i].name,
                                                      ct_last_error());
        if (!same_bits(v, vals[i], (size_t)t->numel))
            fuzz_fail("tensor '%s' read back with other values", e[i].name);
        free(v);
    }
    ct_st_close(b);
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("safetensors");
    static bool seeded;
    if (!seeded) {
        seeded = true;
        dump_seeds(dir);
    }
    char path[FUZZ_PATH_MAX];
    fuzz_join(path, dir, "in.safetensors");
    fuzz_write(path, data, size);

    ct_safetensors *sf = NULL;
    ct_error_clear();
    ct_status st = ct_st_open(&sf, path);
    fuzz_check_error(st, "ct_st_open", path);
    if (st) return 0;

    int n = ct_st_count(sf);
    float **vals = calloc((size_t)(n ? n : 1), sizeof *vals);
    bool all_float = vals != NULL;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const ct_st_tensor *t = ct_st_tensor_at(sf, i);
        if (!t || !t->name) fuzz_fail("tensor %d of %d is missing", i, n);
        if (ct_st_find(sf, t->name) != t) fuzz_fail("ct_st_find('%s') is not tensor %d", t->name, i);
        if (t->ndim < 0 || t->ndim > CT_ST_MAX_DIMS) fuzz_fail("tensor '%s': ndim %d", t->name, t->ndim);
        uint64_t un = 1; /* wraps instead of overflowing: compared below */
        for (int d = 0; d < t->ndim; d++) un *= (uint64_t)t->shape[d];
        int64_t numel = (int64_t)un;
        if (un > (uint64_t)INT64_MAX || numel != t->numel || t->nbytes != (size_t)numel * ct_dtype_size(t->dtype) ||
            (size_t)numel > size)
            fuzz_fail("tensor '%s': numel %lld, nbytes %zu do not match its shape and dtype",
                      t->name, (long long)t->numel, t->nbytes);
        if (!ct_dtype_is_float(t->dtype)) {
            float one;
            ct_error_clear();
            st = ct_st_read_f32(sf, t, &one, false);
            if (st == CT_OK && t->numel > 0)
                fuzz_fail("ct_st_read_f32 converted integer tensor '%s'", t->name);
            fuzz_check_error(st, "ct_st_read_f32", path);
            all_float = false;
            continue;
        }
        total += numel;
        float *v = malloc((size_t)numel * sizeof *v + 1);
        if (!v) {
            all_float = false;
            continue;
        }
        if (vals) vals[i] = v;
        ct_error_clear();
        if ((st = ct_st_read_f32(sf, t, v, false)))
            fuzz_fail("ct_st_read_f32 refused float tensor '%s': %s", t->name, ct_last_error());
        if (t->dtype == CT_DTYPE_F32 && numel && memcmp(v, t->data, t->nbytes) != 0)
            fuzz_fail("F32 tensor '%s' converted to other bits", t->name);
        if (t->ndim == 2) {
            float *tr = malloc((size_t)numel * sizeof *tr + 1);
            if (tr) {
                if ((st = ct_st_read_f32(sf, t, tr, true)))
                    fuzz_fail("transposed read of '%s' failed: %s", t->name, ct_last_error());
                int64_t R = t->shape[0], C = t->shape[1];
                for (int64_t r = 0; r < R; r++)
                    for (int64_t c = 0; c < C; c++)
                        if (memcmp(&tr[c * R + r], &v[r * C + c], sizeof *v))
                            fuzz_fail("transposed read of '%s' differs at (%lld, %lld)", t->name,
                                      (long long)r, (long long)c);
                free(tr);
            }
        }
    }
    (void)ct_st_metadata(sf, "format");
    (void)ct_st_find(sf, "");
    if (all_float && total <= ROUNDTRIP_MAX_NUMEL) roundtrip(dir, sf, vals);
    for (int i = 0; vals && i < n; i++) free(vals[i]);
    free(vals);
    ct_st_close(sf);
    return 0;
}
