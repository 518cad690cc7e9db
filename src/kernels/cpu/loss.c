/*
 * Threaded softmax cross-entropy with its fused gradient, parallel over rows
 * (each row reads and writes only its own logits). Exponentials are float, the
 * row sum is double; same semantics as ref/loss.c.
 */
#include <math.h>

#include "kernels/cpu/cpu.h"

/* losses (N) = logsumexp(row) - row[target] (0 where target < 0); logits (N,V);
 * targets (N). dlogits (N,V), when non-NULL, is WRITTEN with
 * (softmax - onehot) * dloss and may alias logits. */
void ct_crossentropy_forward_cpu(float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, int N, int V, float dloss) {
#ifdef CT_USE_OPENMP
#pragma omp parallel for
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
        float maxval = x[0];
        for (int i = 1; i < V; i++) maxval = x[i] > maxval ? x[i] : maxval;
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += expf(x[i] - maxval);
        float log_sum = (float)log(sum);
        // the loss reads x[target] before dx (possibly x itself) is overwritten
        losses[n] = (maxval - x[target]) + log_sum;
        if (dx) {
            float lse = maxval + log_sum;
            for (int i = 0; i < V; i++) {
                float p = expf(x[i] - lse);
                dx[i] = (p - (i == target ? 1.0f : 0.0f)) * dloss;
            }
        }
    }
}
