/*
 * Vector exp for the cpu kernels, written once with GCC/Clang vector
 * extensions: the kernels' loops go 16 floats at a time (v16f), which the
 * compiler maps onto whatever the target has (one AVX-512 register, two AVX2
 * registers, four SSE registers), so there is no per-ISA code and no
 * scalar-only path to keep in step. The exp itself, and the loops that are
 * mostly exp (softmax rows), run on the target's own width (vnf, below).
 * Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two so r is
 * exact), a degree-6 polynomial for e^r, 2^n through the exponent bits. About
 * 1 ulp on [-87, 88]; inputs are clamped there, so exp of a very negative
 * number is ~1e-38 rather than 0 (callers that need exact zeros, masks, write
 * them). NaN in gives NaN out. Internal to src/backend/cpu.
 */
#ifndef CT_KERNELS_CPU_VMATH_H
#define CT_KERNELS_CPU_VMATH_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
#define V16 16

/* The target's own vector (16 floats with AVX-512, 8 with AVX, 4 else).
 * Comparisons and selects are done at this width: on a 64-byte vector GCC
 * splits them lane by lane into scalar compares and branches wherever the
 * target's registers are narrower (AVX2: v16_exp ran ~8x slower than at this
 * width, and attention's softmax with it). Lane for lane the same operations,
 * so the results do not depend on the width. */
#if defined(__AVX512F__)
#define VN 16
#elif defined(__AVX__)
#define VN 8
#else
#define VN 4
#endif
typedef float vnf __attribute__((vector_size(VN * 4)));
typedef int32_t vni __attribute__((vector_size(VN * 4)));
typedef uint32_t vnu __attribute__((vector_size(VN * 4)));
typedef uint16_t vnh __attribute__((vector_size(VN * 2)));

static inline v16f v16_load(const float *p) {
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v16_store(float *p, v16f v) { memcpy(p, &v, sizeof v); }
static inline v16f v16_set1(float x) { return (v16f){0} + x; }
static inline vnf vn_set1(float x) { return (vnf){0} + x; }
/* mask ? a : b, mask lanes all-ones or zero (a vector comparison's result). */
static inline vnf vn_select(vni mask, vnf a, vnf b) {
    return (vnf)(((vni)a & mask) | ((vni)b & ~mask));
}

/* Each lane's bf16 bits (nearest even, NaN made quiet: tile.h's
 * ct_t16_round), in its low half; vn_bf16 narrows them to 16-bit lanes. */
static inline vnu vn_bf16_bits(vnf x) {
    vnu u = (vnu)x;
    vnu r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    vni nan = (vni)(u & 0x7fffffffu) > 0x7f800000;
    return (vnu)vn_select(nan, (vnf)((u >> 16) | 0x40u), (vnf)r);
}
static inline vnh vn_bf16(vnf x) { return __builtin_convertvector(vn_bf16_bits(x), vnh); }
/* vn_bf16 in one vcvtneps2bf16 where the target has it (AVX512_BF16, 16
 * lanes), which reads a subnormal as zero (vn_bf16 rounds it): for values that
 * are normal, 0 or NaN, or whose subnormals matter to nothing. */
#if VN == 16 && defined(__AVX512BW__) && defined(__AVX512BF16__)
#include <immintrin.h>
static inline vnh vn_bf16_daz(vnf x) {
    __m256bh h = _mm512_cvtneps_pbh((__m512)x);
    vnh r;
    memcpy(&r, &h, sizeof r);
    return r;
}
#else
static inline vnh vn_bf16_daz(vnf x) { return vn_bf16(x); }
#endif

/* exp on the clamped range [-87.34, 88.38] (vn_exp's body). */
static inline vnf vn_exp_clamped(vnf xc) {
    // n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer (|x/ln2| < 2^22)
    const vnf shifter = vn_set1(12582912.0f);
    vnf n = (xc * 1.44269504088896341f + shifter) - shifter;
    vnf r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    vnf p = vn_set1(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    vnf y = p * (r * r) + r + 1.0f;
    vni e = (__builtin_convertvector(n, vni) + 127) << 23;
    return y * (vnf)e;
}
#define VN_EXP_LO (-87.3365478515625f)

static inline vnf vn_exp(vnf x) {
    const vnf hi = vn_set1(88.3762626647949f), lo = vn_set1(VN_EXP_LO);
    vni nan = x != x;
    vnf xc = vn_select(x > hi, hi, x);
    xc = vn_select(xc < lo, lo, xc);
    return vn_select(nan, x, vn_exp_clamped(xc));
}

/* vn_exp of x <= 0 (a score less its row's maximum, or its log-sum-exp):
 * the same bits there without the upper clamp and the NaN select (a NaN
 * still comes out NaN, through the arithmetic). */
static inline vnf vn_exp_nonpos(vnf x) {
    const vnf lo = vn_set1(VN_EXP_LO);
    return vn_exp_clamped(vn_select(x < lo, lo, x));
}

/* exp of each lane: vn_exp on each native-width piece (taken apart and put
 * together with shuffles: through memory, GCC went by way of the integer
 * registers, and v16_exp cost ~10 cycles a lane on AVX2). */
static inline v16f v16_exp(v16f x) {
#if VN == 16
    return vn_exp(x);
#elif VN == 8
    vnf lo = vn_exp(__builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7));
    vnf hi = vn_exp(__builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15));
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#else
    vnf a = vn_exp(__builtin_shufflevector(x, x, 0, 1, 2, 3));
    vnf b = vn_exp(__builtin_shufflevector(x, x, 4, 5, 6, 7));
    vnf c = vn_exp(__builtin_shufflevector(x, x, 8, 9, 10, 11));
    vnf d = vn_exp(__builtin_shufflevector(x, x, 12, 13, 14, 15));
    typedef float v8f __attribute__((vector_size(32)));
    v8f ab = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7);
    v8f cd = __builtin_shufflevector(c, d, 0, 1, 2, 3, 4, 5, 6, 7);
    return __builtin_shufflevector(ab, cd, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#endif
}

/* Scalar twin (the same polynomial), for loop tails. */
static inline float s_exp(float x) {
    vnf v = vn_set1(x);
    return vn_exp(v)[0];
}

/* x[i] = exp(x[i] - sub) for i < n; returns the sum of the results. Runs at
 * the native width, summed as 16 lanes (V16 / VN accumulators), so the sum is
 * the same on every target. */
static inline float v_exp_sub_sum(float *x, int n, float sub) {
    vnf acc[V16 / VN];
    for (int c = 0; c < V16 / VN; c++) acc[c] = vn_set1(0.0f);
    const vnf vs = vn_set1(sub);
    int i = 0;
    for (; i + V16 <= n; i += V16) {
        for (int c = 0; c < V16 / VN; c++) {
            vnf v;
            memcpy(&v, x + i + c * VN, sizeof v);
            vnf e = vn_exp(v - vs);
            memcpy(x + i + c * VN, &e, sizeof e);
            acc[c] += e;
        }
    }
    float s = 0.0f;
    for (int c = 0; c < V16 / VN; c++)
        for (int l = 0; l < VN; l++) s += acc[c][l];
    for (; i < n; i++) {
        x[i] = s_exp(x[i] - sub);
        s += x[i];
    }
    return s;
}

/* The lanes' sum and largest, folded in halves: log2(VN) steps where a loop
 * over the lanes is VN - 1 dependent scalar ones (a softmax row pays this
 * once per tile). The sum's order is the tree's, not the lanes'. */
typedef float vh4f __attribute__((vector_size(16)));
typedef int32_t vh4i __attribute__((vector_size(16)));
#if VN >= 8
typedef float vh8f __attribute__((vector_size(32)));
typedef int32_t vh8i __attribute__((vector_size(32)));
#endif
static inline vh4f vh4_max(vh4f a, vh4f b) {
    vh4i m = a > b;
    return (vh4f)(((vh4i)a & m) | ((vh4i)b & ~m));
}
static inline vh4f vn_fold4(vnf v, bool max) {
#if VN == 16
    vh8f a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
    vh8f b = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    vh8i m = a > b;
    vh8f h = max ? (vh8f)(((vh8i)a & m) | ((vh8i)b & ~m)) : a + b;
#elif VN == 8
    vh8f h = v;
#endif
#if VN >= 8
    vh4f lo = __builtin_shufflevector(h, h, 0, 1, 2, 3), hi = __builtin_shufflevector(h, h, 4, 5, 6, 7);
    return max ? vh4_max(lo, hi) : lo + hi;
#else
    (void)max;
    return v;
#endif
}
static inline float vn_hsum(vnf v) {
    vh4f q = vn_fold4(v, false);
    q = q + __builtin_shufflevector(q, q, 2, 3, 0, 1);
    q = q + __builtin_shufflevector(q, q, 1, 0, 3, 2);
    return q[0];
}
static inline float vn_hmax(vnf v) {
    vh4f q = vn_fold4(v, true);
    q = vh4_max(q, __builtin_shufflevector(q, q, 2, 3, 0, 1));
    q = vh4_max(q, __builtin_shufflevector(q, q, 1, 0, 3, 2));
    return q[0];
}

/* Largest of x[0..n), n >= 1. */
static inline float v_max(const float *x, int n) {
    float m = x[0];
    int i = 0;
    if (n >= VN) {
        vnf acc;
        memcpy(&acc, x, sizeof acc);
        for (i = VN; i + VN <= n; i += VN) {
            vnf v;
            memcpy(&v, x + i, sizeof v);
            acc = vn_select(v > acc, v, acc);
        }
        m = vn_hmax(acc);
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

#endif
