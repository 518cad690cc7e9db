/*
 * Seeded RNG: mt19937 plus the float and normal sampling of torch's CPU
 * generator, so ct_rng_init(s) + ct_rng_normal(n) reproduces
 * torch.manual_seed(s); torch.empty(n).normal_(mean, std).
 * torch fills tensors of >= 16 elements with uniforms first and transforms them
 * 16 at a time (Box-Muller on pairs j, j+8); smaller tensors draw doubles one
 * pair at a time and cache the second sample.
 */
#include "ctrain/core.h"

#include <math.h>

#define MT_N 624
#define MT_M 397

void ct_rng_init(ct_rng *r, uint64_t seed) {
    r->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (int j = 1; j < MT_N; j++) {
        uint32_t prev = r->state[j - 1];
        r->state[j] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)j;
    }
    r->index = MT_N;
    r->has_next_normal = false;
    r->next_normal = 0.0;
}

static void mt_twist(ct_rng *r) {
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (r->state[i] & 0x80000000u) | (r->state[(i + 1) % MT_N] & 0x7fffffffu);
        uint32_t next = r->state[(i + MT_M) % MT_N] ^ (y >> 1);
        if (y & 1u) next ^= 0x9908b0dfu;
        r->state[i] = next;
    }
    r->index = 0;
}

uint32_t ct_rng_u32(ct_rng *r) {
    if (r->index >= MT_N) mt_twist(r);
    uint32_t y = r->state[r->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

float ct_rng_float(ct_rng *r) {
    return (float)(ct_rng_u32(r) & ((1u << 24) - 1)) * (1.0f / 16777216.0f);
}

double ct_rng_double(ct_rng *r) {
    uint64_t hi = ct_rng_u32(r), lo = ct_rng_u32(r);
    uint64_t x = (hi << 32) | lo;
    return (double)(x & ((UINT64_C(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* Box-Muller on 16 uniforms: pairs (j, j+8) become two normals. */
static void normal_fill_16(float *d, float mean, float std) {
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j];
        float u2 = d[j + 8];
        float radius = sqrtf(-2.0f * logf(u1));
        float theta = 2.0f * (float)CT_PI * u2;
        d[j] = radius * cosf(theta) * std + mean;
        d[j + 8] = radius * sinf(theta) * std + mean;
    }
}

void ct_rng_normal(ct_rng *r, float *out, size_t n, float mean, float std) {
    if (n >= 16) {
        for (size_t i = 0; i < n; i++) out[i] = ct_rng_float(r);
        for (size_t i = 0; i + 16 <= n; i += 16) normal_fill_16(out + i, mean, std);
        if (n % 16 != 0) {
            /* torch redraws the last 16 values to cover the tail */
            float *tail = out + n - 16;
            for (int i = 0; i < 16; i++) tail[i] = ct_rng_float(r);
            normal_fill_16(tail, mean, std);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (r->has_next_normal) {
            r->has_next_normal = false;
            out[i] = (float)(r->next_normal * std + mean);
            continue;
        }
        double u1 = ct_rng_double(r);
        double u2 = ct_rng_double(r);
        double radius = sqrt(-2.0 * log(1.0 - u2));
        double theta = 2.0 * CT_PI * u1;
        r->next_normal = radius * sin(theta);
        r->has_next_normal = true;
        out[i] = (float)(radius * cos(theta) * std + mean);
    }
}
