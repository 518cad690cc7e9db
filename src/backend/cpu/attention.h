/*
 * The key windows of causal attention's tiles, and the dot product of two
 * rows, shared by the fp32 and bf16 kernels (attention.c, attention_bf16.c). Packed rows (positions pos,
 * several examples per batch row): query t sees keys [s(t), t], s(t) = t -
 * pos[t] its example's start; without positions s(t) = 0. Internal to
 * src/backend/cpu.
 */
#ifndef CT_CPU_ATTENTION_H
#define CT_CPU_ATTENTION_H

#include <stdint.h>

/* a . b over n floats (D = dout . out, decoding's scores) */
static inline float attention_dot(const float *a, const float *b, int n) {
    float acc = 0.0f;
#ifdef CT_USE_OPENMP
#pragma omp simd reduction(+ : acc)
#endif
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

/* Keys of tile [c0, c0+bc) visible to query row r: a prefix of the tile. */
static inline int visible(int r, int c0, int bc) {
    int n = r - c0 + 1;
    return n < 0 ? 0 : n > bc ? bc : n;
}

/* The first key query r sees: its example's start r - pos[r] (pos the batch
 * row's positions), or 0 without positions. */
static inline int seg_start(const int32_t *pos, int r) { return pos ? r - pos[r] : 0; }

/* Keys of tile [c0, c0+bc) before row r's example: the first a of the tile,
 * masked (0 without positions). */
static inline int hidden(const int32_t *pos, int r, int c0, int bc) {
    int n = seg_start(pos, r) - c0;
    return n < 0 ? 0 : n > bc ? bc : n;
}

#endif
