/*
 * Threaded softmax cross-entropy with its fused gradient, parallel over rows
 * (each row reads and writes only its own logits). Three vector passes per
 * row: the max, exp(x - max) with its sum, and the gradient. When the gradient
 * is wanted the exponentials are stored in dlogits on the way (it may alias
 * logits; the target's logit is read first), so exp runs once per element.
 * The row sum accumulates 16 float lanes per 4096-element block into a double.
 * Same semantics as ref/loss.c.
 */
#include <math.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/vmath.h"

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
