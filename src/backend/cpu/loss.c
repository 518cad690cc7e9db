/*
 * Threaded softmax cross-entropy with its fused gradient, parallel over rows
 * (each row reads and writes only its own logits). Three vector passes per
 * row: the max, exp(x - max) with its sum, and the gradient. When the gradient
 * is wanted the exponentials are stored in dlogits on the way (it may alias
 * logits; the target's logit is read first), so exp runs once per element.
 * The row sum accumulates 16 float lanes per 4096-element block into a double.
 * Same semantics as ref/loss.c.
 * The bf16 twin (the bf16 head) widens its logits into a pool thread's row of
 * fp32 (or, without one, a block at a time, its exps computed twice) and runs
 * the same passes: its loss is the fp32 kernel's over the widened logits, and
 * its gradient that kernel's rounded (nearest even), but for entries whose
 * exps lie below fp32's normal range, which the fp32 kernel clamps to it and
 * this one computes (scale_round16).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/vmath.h"
#include "core/dtype.h"

#define XENT_BLOCK 4096

/* exp(x - sub) of x (n) into e (n) (may alias x); returns their sum. */
static double exp_block_sum(float *e, const float *x, int n, float sub) {
    double sum = 0.0;
    for (int i0 = 0; i0 < n; i0 += XENT_BLOCK) {
        int len = n - i0 < XENT_BLOCK ? n - i0 : XENT_BLOCK;
        if (e != x)
            for (int i = 0; i < len; i++) e[i0 + i] = x[i0 + i];
        sum += v_exp_sub_sum(e + i0, len, sub);
    }
    return sum;
}

/* losses (N) = logsumexp(row) - row[target] (0 where target < 0); logits (N,V);
 * targets (N). dlogits (N,V), when non-NULL, is WRITTEN with
 * (softmax - onehot) * dloss and may alias logits. */
void ct_crossentropy_forward_cpu(ct_backend *be, float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, int N, int V, float dloss) {
    (void)be;
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *dx = dlogits ? dlogits + (size_t)n * V : NULL;
        int32_t target = targets[n];
        if (target < 0) {
            losses[n] = 0.0f;
            if (dx)
                for (int i = 0; i < V; i++) dx[i] = 0.0f;
            continue;
        }
        float maxval = v_max(x, V);
        float x_target = x[target];
        double sum;
        if (dx) {
            sum = exp_block_sum(dx, x, V, maxval);
        } else {
            // no gradient buffer: sum the exponentials through a small stack block
            float tmp[XENT_BLOCK];
            sum = 0.0;
            for (int i0 = 0; i0 < V; i0 += XENT_BLOCK) {
                int len = V - i0 < XENT_BLOCK ? V - i0 : XENT_BLOCK;
                for (int i = 0; i < len; i++) tmp[i] = x[i0 + i];
                sum += v_exp_sub_sum(tmp, len, maxval);
            }
        }
        float log_sum = (float)log(sum);
        losses[n] = (maxval - x_target) + log_sum;
        if (dx) {
            // dx holds exp(x - max); softmax = that / sum
            float scale = (float)(dloss / sum);
            int i = 0;
            for (; i + V16 <= V; i += V16) v16_store(dx + i, v16_load(dx + i) * scale);
            for (; i < V; i++) dx[i] *= scale;
            dx[target] -= dloss;
        }
    }
}

/* bf16 lanes widened to fp32 */
static inline vnf widen_vn(const uint16_t *p) {
    vnh h;
    memcpy(&h, p, sizeof h);
    return (vnf)(__builtin_convertvector(h, vnu) << 16);
}

/* The largest of x16[0..n) widened, n >= 1, in v_max's order over the same
 * values, and the least into *least (NaN lanes ignored by both, but for a
 * NaN first element, as v_max). */
static float minmax16(const uint16_t *x16, int n, float *least) {
    float m = ct_bf16_to_f32(x16[0]), l = m;
    int i = 0;
    if (n >= VN) {
        vnf hi = widen_vn(x16), lo = hi;
        for (i = VN; i + VN <= n; i += VN) {
            vnf v = widen_vn(x16 + i);
            hi = vn_select(v > hi, v, hi);
            lo = vn_select(v < lo, v, lo);
        }
        m = vn_hmax(hi);
        l = -vn_hmax(-lo);
    }
    for (; i < n; i++) {
        float x = ct_bf16_to_f32(x16[i]);
        m = x > m ? x : m;
        l = x < l ? x : l;
    }
    *least = l;
    return m;
}

/* e[i] = exp(x16[i] widened - sub) for i < n; returns their sum: the fp32
 * kernel's v_exp_sub_sum over the widened values, so the same bits. A
 * difference below VN_EXP_LO gets vn_exp's clamp at fp32's least normal, as
 * in the fp32 kernel; scale_round16 computes those entries of the gradient. */
static float exp16_sub_sum(float *e, const uint16_t *x16, int n, float sub) {
    int i = 0;
    for (; i + VN <= n; i += VN) {
        vnf v = widen_vn(x16 + i);
        memcpy(e + i, &v, sizeof v);
    }
    for (; i < n; i++) e[i] = ct_bf16_to_f32(x16[i]);
    return v_exp_sub_sum(e, n, sub);
}

/* exp(d) * scale for d < VN_EXP_LO, where exp16_sub_sum clamped: exp(d + 64
 * ln2) (normal while d >= VN_EXP_LO - 64 ln2, else 0, as is the result in
 * fp32) times scale, then 2^-64, so that only the last step rounds into the
 * subnormals (a bf16 gradient has them too). */
#define TINY_SHIFT 44.3614195558365f /* 64 ln2 */
static inline vnf tiny_scaled(vnf d, float scale) {
    vnf u = d + TINY_SHIFT;
    vni none = u < VN_EXP_LO;
    vnf t = vn_exp_clamped(vn_select(none, vn_set1(0.0f), u));
    return vn_select(none, vn_set1(0.0f), t * scale * 0x1p-64f);
}

/* dx16[0..n) = bf16(e[i] * scale), e from exp16_sub_sum over x16 less sub.
 * normal: every product is normal (or NaN), so the rounding may read
 * subnormals as 0 (vn_bf16_daz); tiny: the row has differences below
 * VN_EXP_LO, whose entries are computed again from x16 (tiny_scaled). dx16
 * may alias x16: each vector is read before it is written. */
static void scale_round16(uint16_t *dx16, const float *e, const uint16_t *x16, int n, float sub,
                          float scale, bool tiny, bool normal) {
    const vnf lo = vn_set1(VN_EXP_LO);
    int i = 0;
    for (; i + VN <= n; i += VN) {
        vnf v;
        memcpy(&v, e + i, sizeof v);
        vnf p = v * scale;
        if (tiny) {
            vnf d = widen_vn(x16 + i) - sub;
            p = vn_select(d < lo, tiny_scaled(d, scale), p);
        }
        vnh r = normal ? vn_bf16_daz(p) : vn_bf16(p);
        memcpy(dx16 + i, &r, sizeof r);
    }
    for (; i < n; i++) {
        float p = e[i] * scale, d = tiny ? ct_bf16_to_f32(x16[i]) - sub : 0.0f;
        if (d < VN_EXP_LO) p = tiny_scaled(vn_set1(d), scale)[0];
        dx16[i] = ct_f32_to_bf16(p);
    }
}

/* crossentropy_forward over bf16 logits16 (rows ld apart); dlogits16, when
 * non-NULL, is WRITTEN with the gradient rounded to bf16 and may alias
 * logits16. Columns V..ld-1 are neither read nor written. */
void ct_crossentropy_forward_bf16_cpu(ct_backend *be, float *losses, uint16_t *dlogits16,
                                      const uint16_t *logits16, int ld, const int32_t *targets,
                                      int N, int V, float dloss) {
    /* each pool thread's row of exps; none: a block at a time */
    bool rows = dlogits16 && ct_backend_thread_bufs_ready(be, (size_t)V);
#ifdef CT_USE_OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int n = 0; n < N; n++) {
        const uint16_t *x16 = logits16 + (size_t)n * ld;
        uint16_t *dx16 = dlogits16 ? dlogits16 + (size_t)n * ld : NULL;
        int32_t target = targets[n];
        if (target < 0) {
            losses[n] = 0.0f;
            if (dx16) memset(dx16, 0, (size_t)V * sizeof *dx16);
            continue;
        }
        float least, maxval = minmax16(x16, V, &least);
        float x_target = ct_bf16_to_f32(x16[target]);
        /* differences below fp32's normal exps in this row (rare: logits
         * spread by more than 87) */
        bool tiny = least - maxval < VN_EXP_LO;
        float *row = rows ? ct_backend_thread_buf(be, (size_t)V) : NULL, tmp[XENT_BLOCK];
        double sum = 0.0;
        for (int i0 = 0; i0 < V; i0 += XENT_BLOCK) {
            int len = V - i0 < XENT_BLOCK ? V - i0 : XENT_BLOCK;
            sum += exp16_sub_sum(row ? row + i0 : tmp, x16 + i0, len, maxval);
        }
        losses[n] = (maxval - x_target) + (float)log(sum);
        if (!dx16) continue;
        // softmax = exp / sum, as the fp32 kernel scales it; the target's
        // entry less dloss, in fp32, before it is rounded
        float scale = (float)(dloss / sum);
        /* the least product at least twice the least normal (the exps are
         * monotone to within an ulp or two) */
        bool normal = !tiny && s_exp(least - maxval) * scale >= 2.0f * FLT_MIN;
        for (int i0 = 0; i0 < V; i0 += XENT_BLOCK) {
            int len = V - i0 < XENT_BLOCK ? V - i0 : XENT_BLOCK;
            float *e = row ? row + i0 : tmp;
            if (!row) exp16_sub_sum(e, x16 + i0, len, maxval);
            scale_round16(dx16 + i0, e, x16 + i0, len, maxval, scale, tiny, normal);
            if (target >= i0 && target < i0 + len)
                dx16[target] = ct_f32_to_bf16(e[target - i0] * scale - dloss);
        }
    }
}
