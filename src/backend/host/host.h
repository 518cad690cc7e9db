/*
 * Memory operations of the host-visible backends (ref and cpu): device
 * buffers are counted host allocations, transfers are memcpy, reductions run
 * on the calling thread. Each function has the semantics of its ct_backend_i
 * entry (backend.h). Internal to src/backend.
 */
#ifndef CT_BACKEND_HOST_H
#define CT_BACKEND_HOST_H
#include "backend/backend.h"

void *ct_host_buf_alloc(ct_backend *be, size_t bytes, ct_tag tag);
void ct_host_buf_free(ct_backend *be, void *p);
void ct_host_memset(ct_backend *be, void *dst, int value, size_t bytes);
void ct_host_copy(ct_backend *be, void *dst, const void *src, size_t bytes);
void ct_host_f32_to_bf16(ct_backend *be, uint16_t *dst, const float *src, size_t n);
void ct_host_bf16_to_f32(ct_backend *be, float *dst, const uint16_t *src, size_t n);
/* dst(n) = ct_f32_to_f16(src): fp16 bits, nearest even (the ref backend's
 * f32_to_f16; not in CT_HOST_MEMORY_OPS: the entry is optional). */
void ct_host_f32_to_f16(ct_backend *be, uint16_t *dst, const float *src, size_t n);
void ct_host_scale_add(ct_backend *be, float *y, int ldy, const float *x, int ldx, int rows,
                       int cols, float a, bool accumulate);
void ct_host_fill(ct_backend *be, float *x, float value, size_t n);
void ct_host_scale(ct_backend *be, float *x, float a, size_t n);
double ct_host_sum(ct_backend *be, const float *x, size_t n);
size_t ct_host_nonfinite(ct_backend *be, const float *x, size_t n);
void ct_host_dropout_forward(ct_backend *be, float *out, const float *inp, size_t n, float p,
                             uint64_t key, uint64_t offset);
void ct_host_dropout_backward(ct_backend *be, float *dinp, const float *dout, size_t n, float p,
                              uint64_t key, uint64_t offset);
ct_status ct_host_synchronize(ct_backend *be);
void ct_host_event_record(ct_backend *be, ct_event *ev);
double ct_host_event_elapsed(ct_backend *be, const ct_event *a, const ct_event *b);

/* The memory, stream and timing entries of a host-visible table, for a
 * designated initializer: CT_HOST_MEMORY_OPS, then the kernels (dropout
 * among them: ref's are the host loops above, cpu's threaded). */
#define CT_HOST_MEMORY_OPS                                                                    \
    .buf_alloc = ct_host_buf_alloc, .buf_free = ct_host_buf_free,                             \
    .host_alloc = ct_host_buf_alloc, .host_free = ct_host_buf_free, .memset = ct_host_memset, \
    .upload = ct_host_copy, .download = ct_host_copy, .copy = ct_host_copy,                   \
    .f32_to_bf16 = ct_host_f32_to_bf16, .bf16_to_f32 = ct_host_bf16_to_f32,                   \
    .scale_add = ct_host_scale_add, .fill = ct_host_fill, .scale = ct_host_scale,             \
    .sum = ct_host_sum, .nonfinite = ct_host_nonfinite,                                       \
    .synchronize = ct_host_synchronize, .event_record = ct_host_event_record,                 \
    .event_elapsed = ct_host_event_elapsed
#endif
