/*
 * Reference softmax cross-entropy over a vocabulary, fused with its gradient
 * (torch.nn.functional.cross_entropy, reduction 'none', ignore_index < 0).
 * Stable: logits are shifted by the row max; sums are in double.
 * The bf16 twin reads bf16 logits (the bf16 head) and rounds its gradient.
 * Leaves out: label smoothing and class weights.
 */
#include <math.h>

#include "backend/ref/ref.h"
#include "core/dtype.h"

/* losses (N) = logsumexp(logits row) - logits[target], 0 where target < 0.
 * logits (N,V); targets (N) in [0,V) or negative to ignore. If dlogits (N,V) is
 * non-NULL it is WRITTEN with (softmax - onehot(target)) * dloss (zero rows for
 * ignored targets); it may alias logits.
 * Ref: https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html */
/* One row's loss and gradient over x or x16 (bf16 bits), written into dx or
 * dx16 (either may alias its input): the shared body of the fp32 and bf16
 * entries. */
static inline double xent_at(const float *x, const uint16_t *x16, int i) {
    return x16 ? (double)ct_bf16_to_f32(x16[i]) : (double)x[i];
}
static float xent_row(const float *x, const uint16_t *x16, float *dx, uint16_t *dx16,
                      int32_t target, int V, float dloss) {
    if (target < 0) {
        for (int i = 0; dx && i < V; i++) dx[i] = 0.0f;
        for (int i = 0; dx16 && i < V; i++) dx16[i] = 0;
        return 0.0f;
    }
    double maxval = xent_at(x, x16, 0);
    for (int i = 1; i < V; i++)
        if (xent_at(x, x16, i) > maxval) maxval = xent_at(x, x16, i);
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp(xent_at(x, x16, i) - maxval);
    double lse = maxval + log(sum);
    // the loss reads x[target] before dx (possibly x itself) is overwritten
    float loss = (float)(lse - xent_at(x, x16, target));
    for (int i = 0; (dx || dx16) && i < V; i++) {
        double p = exp(xent_at(x, x16, i) - lse);
        float g = (float)((p - (i == target ? 1.0 : 0.0)) * dloss);
        if (dx) dx[i] = g;
        else dx16[i] = ct_f32_to_bf16(g);
    }
    return loss;
}

void ct_crossentropy_forward_ref(ct_backend *be, float *losses, float *dlogits, const float *logits,
                                 const int32_t *targets, int N, int V, float dloss) {
    (void)be;
    for (int n = 0; n < N; n++)
        losses[n] = xent_row(logits + (size_t)n * V, NULL,
                             dlogits ? dlogits + (size_t)n * V : NULL, NULL, targets[n], V, dloss);
}

/* The same over bf16 logits16 (N, rows ld apart), widened exactly; the
 * gradient rounded to bf16 (nearest even) into dlogits16 (may alias). */
void ct_crossentropy_forward_bf16_ref(ct_backend *be, float *losses, uint16_t *dlogits16,
                                      const uint16_t *logits16, int ld, const int32_t *targets,
                                      int N, int V, float dloss) {
    (void)be;
    for (int n = 0; n < N; n++)
        losses[n] = xent_row(NULL, logits16 + (size_t)n * ld, NULL,
                             dlogits16 ? dlogits16 + (size_t)n * ld : NULL, targets[n], V, dloss);
}
