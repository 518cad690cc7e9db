/*
 * Memory operations of the host-visible backends (see host.h): plain loops in
 * a fixed order, so every reduction is deterministic and equal to a serial
 * sum. The bf16 converters are core's (vectorised, threaded for big arrays).
 */
#include "backend/host/host.h"

#include <math.h>
#include <string.h>

#include "core/dtype.h"

void *ct_host_buf_alloc(ct_backend *be, size_t bytes, ct_tag tag) {
    /* ct_alloc zero-fills, which also makes every page resident */
    return ct_alloc(be->ctx, bytes ? bytes : 1, tag);
}

void ct_host_buf_free(ct_backend *be, void *p) { ct_free(be->ctx, p); }

void ct_host_memset(ct_backend *be, void *dst, int value, size_t bytes) {
    (void)be;
    if (bytes) memset(dst, value, bytes);
}

void ct_host_copy(ct_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && dst != src) memmove(dst, src, bytes);
}

void ct_host_f32_to_bf16(ct_backend *be, uint16_t *dst, const float *src, size_t n) {
    (void)be;
    ct_f32_to_bf16_array(dst, src, n);
}

void ct_host_f32_to_f16(ct_backend *be, uint16_t *dst, const float *src, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) dst[i] = ct_f32_to_f16(src[i]);
}

void ct_host_bf16_to_f32(ct_backend *be, float *dst, const uint16_t *src, size_t n) {
    (void)be;
    ct_bf16_to_f32_array(dst, src, n);
}

void ct_host_scale_add(ct_backend *be, float *y, int ldy, const float *x, int ldx, int rows,
                       int cols, float a, bool accumulate) {
    (void)be;
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * ldy;
        const float *xr = x + (size_t)r * ldx;
        if (accumulate)
            for (int c = 0; c < cols; c++) yr[c] += a * xr[c];
        else
            for (int c = 0; c < cols; c++) yr[c] = a * xr[c];
    }
}

void ct_host_fill(ct_backend *be, float *x, float value, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) x[i] = value;
}

void ct_host_scale(ct_backend *be, float *x, float a, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) x[i] *= a;
}

double ct_host_sum(ct_backend *be, const float *x, size_t n) {
    (void)be;
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc += x[i];
    return acc;
}

size_t ct_host_nonfinite(ct_backend *be, const float *x, size_t n) {
    (void)be;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    return bad;
}

void ct_host_dropout_forward(ct_backend *be, float *out, const float *inp, size_t n, float p,
                             uint64_t key, uint64_t offset) {
    (void)be;
    float inv = 1.0f / (1.0f - p);
    uint32_t thr = ct_dropout_threshold(p);
    for (size_t i = 0; i < n; i++)
        out[i] = ct_dropout_keep_t(key, offset + i, thr) ? inp[i] * inv : 0.0f;
}

void ct_host_dropout_backward(ct_backend *be, float *dinp, const float *dout, size_t n, float p,
                              uint64_t key, uint64_t offset) {
    (void)be;
    float inv = 1.0f / (1.0f - p);
    uint32_t thr = ct_dropout_threshold(p);
    for (size_t i = 0; i < n; i++)
        if (ct_dropout_keep_t(key, offset + i, thr)) dinp[i] += dout[i] * inv;
}

ct_status ct_host_synchronize(ct_backend *be) {
    (void)be;
    return CT_OK; /* every entry ran to completion on the calling thread */
}

void ct_host_event_record(ct_backend *be, ct_event *ev) {
    (void)be;
    ev->t = ct_time_s();
    ev->handle = NULL;
}

double ct_host_event_elapsed(ct_backend *be, const ct_event *a, const ct_event *b) {
    (void)be;
    return b->t - a->t;
}
