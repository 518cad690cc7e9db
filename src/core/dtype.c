/*
 * Element types and fp32 <-> bf16 / f16 conversion. The scalar conversions
 * are exact bit manipulations (no FPU rounding mode involved), so results are
 * the same on every host. The in-memory bf16 array converters use the same
 * rounding written without branches, so the compiler vectorises them; with
 * OpenMP, long arrays are split over threads. Leaves out: fp8 conversion and
 * SIMD paths for the file formats.
 */
#include "core/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dtype_info {
    const char *name; /* safetensors spelling */
    size_t size;      /* bytes per element */
} dtype_info;

static const dtype_info dtype_table[CT_DTYPE_COUNT] = {
    [CT_DTYPE_F32] = {"F32", 4},         [CT_DTYPE_F16] = {"F16", 2},
    [CT_DTYPE_BF16] = {"BF16", 2},       [CT_DTYPE_I32] = {"I32", 4},
    [CT_DTYPE_I64] = {"I64", 8},         [CT_DTYPE_U16] = {"U16", 2},
    [CT_DTYPE_U32] = {"U32", 4},         [CT_DTYPE_I8] = {"I8", 1},
    [CT_DTYPE_U8] = {"U8", 1},           [CT_DTYPE_BOOL] = {"BOOL", 1},
    [CT_DTYPE_I16] = {"I16", 2},         [CT_DTYPE_U64] = {"U64", 8},
    [CT_DTYPE_F64] = {"F64", 8},         [CT_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [CT_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};

size_t ct_dtype_size(ct_dtype dt) {
    if ((int)dt < 0 || dt >= CT_DTYPE_COUNT) return 0;
    return dtype_table[dt].size;
}

const char *ct_dtype_name(ct_dtype dt) {
    if ((int)dt < 0 || dt >= CT_DTYPE_COUNT) return "?";
    return dtype_table[dt].name;
}

ct_status ct_dtype_from_name(ct_dtype *out, const char *name) {
    if (name) {
        for (int i = 0; i < CT_DTYPE_COUNT; i++) {
            if (strcmp(name, dtype_table[i].name) == 0) {
                *out = (ct_dtype)i;
                return CT_OK;
            }
        }
    }
    return CT_ERR(CT_ERR_ARG, "unknown dtype '%s' (expected one of F32, F16, BF16, I32, I64, "
                              "U16, U32, I8, U8, BOOL, I16, U64, F64, F8_E4M3, F8_E5M2)",
                  name ? name : "(null)");
}

bool ct_dtype_is_float(ct_dtype dt) {
    return dt == CT_DTYPE_F32 || dt == CT_DTYPE_F16 || dt == CT_DTYPE_BF16 || dt == CT_DTYPE_F64;
}

/* ---------------------------------------------------------------- scalars */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float ct_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

/* fp32 bits -> bf16 bits, without branches (a select), so loops vectorise. */
static inline uint16_t bf16_round_bits(uint32_t u) {
    /* Add just under half an ulp, plus one when the kept lsb is odd: ties go
     * to even. A carry into the exponent is the correct rounding (up to inf). */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    /* NaN: keep sign and top payload bits, force the quiet bit so that
     * truncating the payload can never turn it into inf */
    uint32_t nan = (u >> 16) | 0x0040u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

uint16_t ct_f32_to_bf16(float f) { return bf16_round_bits(f32_bits(f)); }

float ct_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13)); /* inf, NaN */
    if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0) return f32_from_bits(sign); /* +-0 */
    /* subnormal man * 2^-24: shift the leading one up to the implicit bit */
    uint32_t e = 113; /* biased fp32 exponent of 2^-14 */
    while (!(man & 0x400u)) {
        man <<= 1;
        e--;
    }
    return f32_from_bits(sign | (e << 23) | ((man & 0x3ffu) << 13));
}

uint16_t ct_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t x = u & 0x7fffffffu;
    if (x > 0x7f800000u) { /* NaN: quiet, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    }
    /* 65520 = halfway between 65504 (largest half, odd mantissa) and 65536:
     * that tie and everything above rounds to inf */
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (x >= 0x38800000u) {
        /* normal half: rebias the exponent (127 -> 15), drop 13 mantissa bits */
        uint32_t h = (x - 0x38000000u) >> 13;
        uint32_t rem = x & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carry may bump exponent */
        return (uint16_t)(sign | h);
    }
    /* at or below 2^-25 (half the smallest subnormal): ties to even give 0 */
    if (x <= 0x33000000u) return sign;
    /* subnormal half: value = m * 2^(e-150), result counts units of 2^-24 */
    uint32_t e = x >> 23;                   /* 102..112 */
    uint32_t m = (x & 0x7fffffu) | 0x800000u; /* explicit leading one */
    uint32_t shift = 126u - e;              /* 14..24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++; /* may become the smallest normal */
    return (uint16_t)(sign | h);
}

/* ---------------------------------------------------------------- arrays */

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

ct_status ct_convert_to_f32(float *dst, const void *src, ct_dtype dt, size_t n) {
    const uint8_t *s = (const uint8_t *)src;
    switch (dt) {
    case CT_DTYPE_F32:
        if (host_is_little_endian()) {
            if (n) memcpy(dst, s, n * sizeof(float));
        } else {
            for (size_t i = 0; i < n; i++) dst[i] = f32_from_bits(ct_le_load_u32(s + 4 * i));
        }
        return CT_OK;
    case CT_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = ct_bf16_to_f32(ct_le_load_u16(s + 2 * i));
        return CT_OK;
    case CT_DTYPE_F16:
        for (size_t i = 0; i < n; i++) dst[i] = ct_f16_to_f32(ct_le_load_u16(s + 2 * i));
        return CT_OK;
    case CT_DTYPE_F64:
        for (size_t i = 0; i < n; i++) {
            uint64_t u = ct_le_load_u64(s + 8 * i);
            double d;
            memcpy(&d, &u, sizeof d);
            dst[i] = (float)d;
        }
        return CT_OK;
    default: break;
    }
    return CT_ERR(CT_ERR_ARG, "cannot convert dtype %s to F32 (expected F32, F16, BF16 or F64)",
                  ct_dtype_name(dt));
}

ct_status ct_convert_from_f32(void *dst, ct_dtype dt, const float *src, size_t n) {
    uint8_t *d = (uint8_t *)dst;
    switch (dt) {
    case CT_DTYPE_F32:
        if (host_is_little_endian()) {
            if (n) memcpy(d, src, n * sizeof(float));
        } else {
            for (size_t i = 0; i < n; i++) ct_le_store_u32(d + 4 * i, f32_bits(src[i]));
        }
        return CT_OK;
    case CT_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) ct_le_store_u16(d + 2 * i, ct_f32_to_bf16(src[i]));
        return CT_OK;
    case CT_DTYPE_F16:
        for (size_t i = 0; i < n; i++) ct_le_store_u16(d + 2 * i, ct_f32_to_f16(src[i]));
        return CT_OK;
    default: break;
    }
    return CT_ERR(CT_ERR_ARG, "cannot convert F32 to dtype %s (expected F32, F16 or BF16)",
                  ct_dtype_name(dt));
}

/* ------------------------------------------------------ in-memory bf16 arrays */

/* Below this many elements a conversion stays on the calling thread. */
#define BF16_PARALLEL_MIN ((size_t)1 << 16)

void ct_f32_to_bf16_array(uint16_t *restrict dst, const float *restrict src, size_t n) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd schedule(static) if (n >= BF16_PARALLEL_MIN)
#endif
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        dst[i] = bf16_round_bits(u);
    }
}

void ct_bf16_to_f32_array(float *restrict dst, const uint16_t *restrict src, size_t n) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd schedule(static) if (n >= BF16_PARALLEL_MIN)
#endif
    for (size_t i = 0; i < n; i++) dst[i] = f32_from_bits((uint32_t)src[i] << 16);
}

void ct_f32_round_bf16_array(float *dst, const float *src, size_t n) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for simd schedule(static) if (n >= BF16_PARALLEL_MIN)
#endif
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        dst[i] = f32_from_bits((uint32_t)bf16_round_bits(u) << 16);
    }
}

double ct_f32_decimal(float v) {
    if (!isfinite(v)) return (double)v;
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) return strtod(buf, NULL);
    }
    return (double)v; /* 9 digits always read back */
}
