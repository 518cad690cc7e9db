/*
 * Vector exp for the cpu kernels, written once with GCC/Clang vector
 * extensions: 16 floats per vector, which the compiler maps onto whatever the
 * target has (one AVX-512 register, two AVX2 registers, four SSE registers),
 * so there is no per-ISA code and no scalar-only path to keep in step.
 * Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so r is
 * exact), a degree-6 polynomial for e^r, 2^n through the exponent bits. About
 * 1 ulp on [-87, 88]; inputs are clamped there, so exp of a very negative
 * number is ~1e-38 rather than 0 (callers that need exact zeros, masks, write
 * them). NaN in gives NaN out. Internal to src/backend/cpu.
 */
#ifndef CT_KERNELS_CPU_VMATH_H
#define CT_KERNELS_CPU_VMATH_H

#include <stdint.h>
#include <string.h>

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define V16 16

static inline v16f v16_load(const float *p) {
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v16_store(float *p, v16f v) { memcpy(p, &v, sizeof v); }
static inline v16f v16_set1(float x) { return (v16f){0} + x; }
/* mask ? a : b, mask lanes all-ones or zero (a vector comparison's result). */
static inline v16f v16_select(v16i mask, v16f a, v16f b) {
    return (v16f)(((v16i)a & mask) | ((v16i)b & ~mask));
}

static inline v16f v16_exp(v16f x) {
    const v16f hi = v16_set1(88.3762626647949f), lo = v16_set1(-87.3365478515625f);
    v16i nan = x != x;
    v16f xc = v16_select(x > hi, hi, x);
    xc = v16_select(xc < lo, lo, xc);
    // n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer (|x/ln2| < 2^22)
    const v16f shifter = v16_set1(12582912.0f);
    v16f n = (xc * 1.44269504088896341f + shifter) - shifter;
    v16f r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v16f p = v16_set1(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    v16f y = p * (r * r) + r + 1.0f;
    v16i e = (__builtin_convertvector(n, v16i) + 127) << 23;
    y = y * (v16f)e;
    return v16_select(nan, x, y);
}

/* Scalar twin (the same polynomial), for loop tails. */
static inline float s_exp(float x) {
    float buf[V16] = {0};
    buf[0] = x;
    v16_store(buf, v16_exp(v16_load(buf)));
    return buf[0];
}

/* x[i] = exp(x[i] - sub) for i < n; returns the sum of the results. */
static inline float v_exp_sub_sum(float *x, int n, float sub) {
    v16f acc = {0};
    int i = 0;
    for (; i + V16 <= n; i += V16) {
        v16f e = v16_exp(v16_load(x + i) - sub);
        v16_store(x + i, e);
        acc += e;
    }
    float s = 0.0f;
    for (int l = 0; l < V16; l++) s += acc[l];
    for (; i < n; i++) {
        x[i] = s_exp(x[i] - sub);
        s += x[i];
    }
    return s;
}

/* Largest of x[0..n), n >= 1. */
static inline float v_max(const float *x, int n) {
    float m = x[0];
    int i = 0;
    if (n >= V16) {
        v16f acc = v16_load(x);
        for (i = V16; i + V16 <= n; i += V16) {
            v16f v = v16_load(x + i);
            acc = v16_select(v > acc, v, acc);
        }
        m = acc[0];
        for (int l = 1; l < V16; l++) m = acc[l] > m ? acc[l] : m;
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

#endif
