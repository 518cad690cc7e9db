/*
 * dtype tests: names and sizes, exhaustive 16-bit round trips, rounding to
 * nearest even on hand-picked bit patterns, a nearest-value property check
 * on random inputs, inf / NaN / subnormals, and the array conversions on
 * unaligned buffers.
 */
#include "core/dtype.h"
#include "ct_test.h"

#include <stdint.h>
#include <string.h>

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng_u32(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

static void test_names(void) {
    CHECK(ct_dtype_size(CT_DTYPE_F32) == 4);
    CHECK(ct_dtype_size(CT_DTYPE_F16) == 2);
    CHECK(ct_dtype_size(CT_DTYPE_BF16) == 2);
    CHECK(ct_dtype_size(CT_DTYPE_I32) == 4);
    CHECK(ct_dtype_size(CT_DTYPE_I64) == 8);
    CHECK(ct_dtype_size(CT_DTYPE_U16) == 2);
    CHECK(ct_dtype_size(CT_DTYPE_U32) == 4);
    CHECK(ct_dtype_size(CT_DTYPE_COUNT) == 0);
    CHECK(strcmp(ct_dtype_name(CT_DTYPE_BF16), "BF16") == 0);
    CHECK(strcmp(ct_dtype_name(CT_DTYPE_F32), "F32") == 0);
    CHECK(strcmp(ct_dtype_name(CT_DTYPE_COUNT), "?") == 0);
    /* serialized numbers never change */
    CHECK(CT_DTYPE_F32 == 0 && CT_DTYPE_F16 == 1 && CT_DTYPE_BF16 == 2 && CT_DTYPE_I32 == 3 &&
          CT_DTYPE_I64 == 4 && CT_DTYPE_U16 == 5 && CT_DTYPE_U32 == 6);
    for (int i = 0; i < CT_DTYPE_COUNT; i++) {
        ct_dtype dt = CT_DTYPE_COUNT;
        CHECK(ct_dtype_size((ct_dtype)i) > 0);
        CHECK(ct_dtype_from_name(&dt, ct_dtype_name((ct_dtype)i)) == CT_OK);
        CHECK(dt == (ct_dtype)i);
    }
    ct_dtype dt;
    CHECK(ct_dtype_from_name(&dt, "f32") == CT_ERR_ARG); /* case-sensitive */
    CHECK(strstr(ct_last_error(), "f32") != NULL);
    CHECK(ct_dtype_from_name(&dt, "") == CT_ERR_ARG);
    CHECK(ct_dtype_from_name(&dt, NULL) == CT_ERR_ARG);
    CHECK(ct_dtype_is_float(CT_DTYPE_BF16) && !ct_dtype_is_float(CT_DTYPE_I32));
}

static void test_bf16(void) {
    /* every bf16 value survives bf16 -> f32 -> bf16; NaN stays NaN */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ct_bf16_to_f32((uint16_t)h);
        CHECK(bits_of(f) == h << 16);
        uint16_t back = ct_f32_to_bf16(f);
        if (bf16_is_nan((uint16_t)h)) bad += !bf16_is_nan(back) || (back & 0x8000) != (h & 0x8000);
        else bad += back != h;
    }
    CHECK_MSG(bad == 0, "%d bf16 patterns failed the round trip", bad);

    /* round to nearest, ties to even */
    CHECK(ct_f32_to_bf16(from_bits(0x3f800000)) == 0x3f80); /* 1.0 exact */
    CHECK(ct_f32_to_bf16(from_bits(0x3f807fff)) == 0x3f80); /* below half: down */
    CHECK(ct_f32_to_bf16(from_bits(0x3f808000)) == 0x3f80); /* tie, even lsb: down */
    CHECK(ct_f32_to_bf16(from_bits(0x3f808001)) == 0x3f81); /* above half: up */
    CHECK(ct_f32_to_bf16(from_bits(0x3f818000)) == 0x3f82); /* tie, odd lsb: up to even */
    CHECK(ct_f32_to_bf16(from_bits(0xbf818000)) == 0xbf82); /* sign is symmetric */
    CHECK(ct_f32_to_bf16(from_bits(0x3fffffff)) == 0x4000); /* carry into the exponent */
    CHECK(ct_f32_to_bf16(from_bits(0x7f7fffff)) == 0x7f80); /* FLT_MAX rounds to inf */
    CHECK(ct_f32_to_bf16(from_bits(0x7f7f7fff)) == 0x7f7f); /* stays the largest bf16 */
    /* inf, nan, zeros, subnormals */
    CHECK(ct_f32_to_bf16(from_bits(0x7f800000)) == 0x7f80);
    CHECK(ct_f32_to_bf16(from_bits(0xff800000)) == 0xff80);
    CHECK(ct_f32_to_bf16(from_bits(0x7fc00000)) == 0x7fc0);
    CHECK(ct_f32_to_bf16(from_bits(0xffc00000)) == 0xffc0);
    CHECK(bf16_is_nan(ct_f32_to_bf16(from_bits(0x7f800001)))); /* payload only in low bits */
    CHECK(bf16_is_nan(ct_f32_to_bf16(from_bits(0x7fffffff))));  /* must not carry to 0x8000 */
    CHECK(ct_f32_to_bf16(from_bits(0x7fffffff)) >> 15 == 0);
    CHECK(ct_f32_to_bf16(0.0f) == 0x0000);
    CHECK(ct_f32_to_bf16(from_bits(0x80000000)) == 0x8000);
    CHECK(ct_f32_to_bf16(from_bits(0x00000001)) == 0x0000); /* tiny subnormal: down */
    CHECK(ct_f32_to_bf16(from_bits(0x00008000)) == 0x0000); /* tie, even: down */
    CHECK(ct_f32_to_bf16(from_bits(0x00018000)) == 0x0002); /* tie, odd: up */
    CHECK(ct_f32_to_bf16(from_bits(0x00010000)) == 0x0001); /* bf16 subnormal, exact */
    CHECK(ct_bf16_to_f32(0x0001) == from_bits(0x00010000));

    /* property: the result is the nearest bf16, ties to even (finite inputs
     * whose neighbours are finite) */
    int wrong = 0;
    for (int k = 0; k < 200000; k++) {
        uint32_t u = rng_u32();
        if ((u & 0x7f800000) >= 0x7f000000) continue; /* keep clear of inf/NaN */
        float x = from_bits(u);
        uint16_t h = ct_f32_to_bf16(x);
        double d0 = fabs((double)ct_bf16_to_f32(h) - (double)x);
        double dlo = fabs((double)ct_bf16_to_f32((uint16_t)(h - 1)) - (double)x);
        double dhi = fabs((double)ct_bf16_to_f32((uint16_t)(h + 1)) - (double)x);
        if ((h & 0x7fff) == 0) dlo = INFINITY; /* h-1 wraps across zero */
        if (d0 > dlo || d0 > dhi) wrong++;
        if ((d0 == dlo || d0 == dhi) && d0 != 0 && (h & 1)) wrong++;
    }
    CHECK_MSG(wrong == 0, "%d random values not rounded to the nearest even bf16", wrong);
}

static void test_f16(void) {
    /* known values */
    CHECK(ct_f16_to_f32(0x3c00) == 1.0f);
    CHECK(ct_f16_to_f32(0xc000) == -2.0f);
    CHECK(ct_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(ct_f16_to_f32(0x0400) == ldexpf(1.0f, -14)); /* smallest normal */
    CHECK(ct_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    CHECK(ct_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24)); /* largest subnormal */
    CHECK(ct_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    CHECK(ct_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(isinf(ct_f16_to_f32(0x7c00)) && ct_f16_to_f32(0x7c00) > 0);
    CHECK(isinf(ct_f16_to_f32(0xfc00)) && ct_f16_to_f32(0xfc00) < 0);
    CHECK(isnan(ct_f16_to_f32(0x7e00)));
    CHECK(isnan(ct_f16_to_f32(0x7c01))); /* signalling NaN stays NaN */
    CHECK(bits_of(ct_f16_to_f32(0x8000)) == 0x80000000u);

    /* exhaustive round trip */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ct_f16_to_f32((uint16_t)h);
        uint16_t back = ct_f32_to_f16(f);
        if (f16_is_nan((uint16_t)h)) bad += !isnan(f) || !f16_is_nan(back) || (back & 0x8000) != (h & 0x8000);
        else bad += back != h;
    }
    CHECK_MSG(bad == 0, "%d f16 patterns failed the round trip", bad);

    /* round to nearest, ties to even */
    const float one = 1.0f, ulp = ldexpf(1.0f, -10);
    CHECK(ct_f32_to_f16(one + ulp / 2) == 0x3c00);          /* tie, even: down */
    CHECK(ct_f32_to_f16(one + 3 * ulp / 2) == 0x3c02);      /* tie, odd: up */
    CHECK(ct_f32_to_f16(nextafterf(one + ulp / 2, 2.0f)) == 0x3c01); /* above tie */
    CHECK(ct_f32_to_f16(nextafterf(one + 3 * ulp / 2, 0.0f)) == 0x3c01); /* below tie */
    CHECK(ct_f32_to_f16(-(one + 3 * ulp / 2)) == 0xbc02);
    CHECK(ct_f32_to_f16(2047.5f) == 0x6800); /* 2047.5 -> tie between 2047 and 2048: 2048 even */
    CHECK(ct_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(ct_f32_to_f16(65519.996f) == 0x7bff);   /* just under the tie */
    CHECK(ct_f32_to_f16(65520.0f) == 0x7c00);     /* tie with an odd max: inf */
    CHECK(ct_f32_to_f16(1e10f) == 0x7c00);
    CHECK(ct_f32_to_f16(-1e10f) == 0xfc00);
    CHECK(ct_f32_to_f16(INFINITY) == 0x7c00);
    CHECK(ct_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(f16_is_nan(ct_f32_to_f16(NAN)));
    CHECK(f16_is_nan(ct_f32_to_f16(from_bits(0x7f800001)))); /* low payload: still NaN */
    CHECK(ct_f32_to_f16(from_bits(0xffc00000)) == 0xfe00);
    /* subnormals and underflow */
    CHECK(ct_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001);
    CHECK(ct_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);            /* tie, even: 0 */
    CHECK(ct_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(ct_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002);            /* 1.5 units: tie, up to 2 */
    CHECK(ct_f32_to_f16(ldexpf(5.0f, -25)) == 0x0002);            /* 2.5 units: tie, down to 2 */
    CHECK(ct_f32_to_f16(ldexpf(1023.5f, -24)) == 0x0400);         /* tie, odd: up to the smallest normal */
    CHECK(ct_f32_to_f16(ldexpf(1022.5f, -24)) == 0x03fe);         /* tie, even: down */
    CHECK(ct_f32_to_f16(-ldexpf(1.0f, -24)) == 0x8001);
    CHECK(ct_f32_to_f16(1e-10f) == 0x0000);
    CHECK(ct_f32_to_f16(-1e-10f) == 0x8000);
    CHECK(ct_f32_to_f16(from_bits(0x00000001)) == 0x0000); /* f32 subnormal */

    /* property: nearest f16, ties to even, over the finite range */
    int wrong = 0;
    for (int k = 0; k < 200000; k++) {
        /* exponents 2^-30 .. 2^15, random mantissa and sign */
        uint32_t u = rng_u32();
        uint32_t e = 97 + (u >> 8) % 46;
        uint32_t x_bits = (u & 0x80000000u) | (e << 23) | (rng_u32() & 0x7fffffu);
        float x = from_bits(x_bits);
        if (fabsf(x) >= 65504.0f) continue;
        uint16_t h = ct_f32_to_f16(x);
        double d0 = fabs((double)ct_f16_to_f32(h) - (double)x);
        double dlo = fabs((double)ct_f16_to_f32((uint16_t)(h - 1)) - (double)x);
        double dhi = fabs((double)ct_f16_to_f32((uint16_t)(h + 1)) - (double)x);
        if ((h & 0x7fff) == 0) dlo = INFINITY;
        if (d0 > dlo || d0 > dhi) wrong++;
        if ((d0 == dlo || d0 == dhi) && d0 != 0 && (h & 1)) wrong++;
    }
    CHECK_MSG(wrong == 0, "%d random values not rounded to the nearest even f16", wrong);
}

static void test_arrays(void) {
    enum { N = 37 };
    float src[N], dst[N];
    for (int i = 0; i < N; i++) src[i] = (float)(i - 18) * 0.71f;
    /* +1 byte offset: conversions must not assume alignment */
    uint8_t raw[N * 8 + 1];
    const ct_dtype dts[] = {CT_DTYPE_F32, CT_DTYPE_BF16, CT_DTYPE_F16};
    for (int k = 0; k < 3; k++) {
        ct_dtype dt = dts[k];
        CHECK(ct_convert_from_f32(raw + 1, dt, src, N) == CT_OK);
        CHECK(ct_convert_to_f32(dst, raw + 1, dt, N) == CT_OK);
        for (int i = 0; i < N; i++) {
            float want = dt == CT_DTYPE_F32    ? src[i]
                         : dt == CT_DTYPE_BF16 ? ct_bf16_to_f32(ct_f32_to_bf16(src[i]))
                                               : ct_f16_to_f32(ct_f32_to_f16(src[i]));
            CHECK(dst[i] == want);
        }
    }
    /* stored little-endian whatever the host */
    CHECK(ct_convert_from_f32(raw + 1, CT_DTYPE_F32, (const float[]){1.0f}, 1) == CT_OK);
    CHECK(raw[1] == 0x00 && raw[2] == 0x00 && raw[3] == 0x80 && raw[4] == 0x3f);
    CHECK(ct_convert_from_f32(raw + 1, CT_DTYPE_BF16, (const float[]){-2.0f}, 1) == CT_OK);
    CHECK(raw[1] == 0x00 && raw[2] == 0xc0);
    /* F64 source */
    const uint8_t f64_half[8] = {0, 0, 0, 0, 0, 0, 0xe0, 0x3f}; /* 0.5 */
    memcpy(raw + 3, f64_half, 8);
    CHECK(ct_convert_to_f32(dst, raw + 3, CT_DTYPE_F64, 1) == CT_OK && dst[0] == 0.5f);
    /* unsupported */
    CHECK(ct_convert_to_f32(dst, raw, CT_DTYPE_I32, 1) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "I32") != NULL);
    CHECK(ct_convert_from_f32(raw, CT_DTYPE_U8, src, 1) == CT_ERR_ARG);
    CHECK(ct_convert_to_f32(dst, raw, CT_DTYPE_F32, 0) == CT_OK); /* n = 0 is fine */
}

static void test_le(void) {
    uint8_t b[9] = {0};
    ct_le_store_u16(b + 1, 0xbeef);
    CHECK(b[1] == 0xef && b[2] == 0xbe && ct_le_load_u16(b + 1) == 0xbeef);
    ct_le_store_u32(b + 1, 0x01020304u);
    CHECK(b[1] == 4 && b[4] == 1 && ct_le_load_u32(b + 1) == 0x01020304u);
    ct_le_store_u64(b + 1, 0x0102030405060708ull);
    CHECK(b[1] == 8 && b[8] == 1 && ct_le_load_u64(b + 1) == 0x0102030405060708ull);
}

int main(void) {
    test_names();
    test_bf16();
    test_f16();
    test_arrays();
    test_le();
    return ct_test_result("test_dtype");
}
