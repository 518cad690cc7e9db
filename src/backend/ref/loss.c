/*
 * Reference softmax cross-entropy over a vocabulary, fused with its gradient
 * (torch.nn.functional.cross_entropy, reduction 'none', ignore_index < 0).
 * Stable: logits are shifted by the row max; sums are in double.
 * Leaves out: label smoothing and class weights.
 */
#include <math.h>

#include "backend/ref/ref.h"

/* losses (N) = logsumexp(logits row) - logits[target], 0 where target < 0.
 * logits (N,V); targets (N) in [0,V) or negative to ignore. If dlogits (N,V) is
 * non-NULL it is WRITTEN with (softmax - onehot(target)) * dloss (zero rows for
 * ignored targets); it may alias logits.
 * Ref: https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html */
void ct_crossentropy_forward_ref(ct_backend *be, float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, int N, int V, float dloss) {
    (void)be;
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
        double maxval = x[0];
        for (int i = 1; i < V; i++)
            if (x[i] > maxval) maxval = x[i];
        double sum = 0.0;
        for (int i = 0; i < V; i++) sum += exp(x[i] - maxval);
        double lse = maxval + log(sum);
        // the loss reads x[target] before dx (possibly x itself) is overwritten
        losses[n] = (float)(lse - x[target]);
        if (dx) {
            for (int i = 0; i < V; i++) {
                double p = exp(x[i] - lse);
                dx[i] = (float)((p - (i == target ? 1.0 : 0.0)) * dloss);
            }
        }
    }
}
