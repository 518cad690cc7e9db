/*
 * Element types: sizes, safetensors names, and conversions between fp32 and
 * the 16-bit float formats (bf16, IEEE half). Scalar conversions round to
 * nearest, ties to even, and keep NaN a NaN. Also little-endian load/store
 * helpers for parsing files byte by byte (no unaligned or aliasing tricks).
 * Also in-memory bf16 arrays (activation storage): branch-free converters that
 * vectorise and, with OpenMP, split large arrays over threads.
 * Leaves out: fp8 arithmetic (the fp8 types are known by name and size only)
 * and SIMD paths for the file-format conversions; those are cheap next to I/O.
 */
#ifndef CT_DTYPE_H
#define CT_DTYPE_H

#include "ctrain/core.h"

#include <stddef.h>
#include <stdint.h>

/* Serialized in checkpoints: append-only, never renumber. */
typedef enum ct_dtype {
    CT_DTYPE_F32 = 0,
    CT_DTYPE_F16 = 1,
    CT_DTYPE_BF16 = 2,
    CT_DTYPE_I32 = 3,
    CT_DTYPE_I64 = 4,
    CT_DTYPE_U16 = 5,
    CT_DTYPE_U32 = 6,
    CT_DTYPE_I8 = 7,
    CT_DTYPE_U8 = 8,
    CT_DTYPE_BOOL = 9,
    CT_DTYPE_I16 = 10,
    CT_DTYPE_U64 = 11,
    CT_DTYPE_F64 = 12,
    CT_DTYPE_F8_E4M3 = 13,
    CT_DTYPE_F8_E5M2 = 14,
    CT_DTYPE_COUNT
} ct_dtype;

/* Bytes per element; 0 for a value outside the enum. */
size_t ct_dtype_size(ct_dtype dt);
/* safetensors spelling ("F32", "BF16", "I64", ...); "?" outside the enum. */
const char *ct_dtype_name(ct_dtype dt);
/* Parse a safetensors dtype name (exact, case-sensitive). CT_ERR_ARG naming
 * the string when unknown. Thread-safe. */
ct_status ct_dtype_from_name(ct_dtype *out, const char *name);
/* True for the types ct_convert_to_f32 accepts (F32, F16, BF16, F64). */
bool ct_dtype_is_float(ct_dtype dt);

/* ---------------------------------------------------------------- scalars */
/* Values are bit patterns: bf16 and f16 travel as uint16_t. */
float ct_bf16_to_f32(uint16_t h);    /* exact */
uint16_t ct_f32_to_bf16(float f);    /* nearest even; NaN stays NaN (made quiet) */
float ct_f16_to_f32(uint16_t h);     /* exact: subnormals, inf, NaN payload */
uint16_t ct_f32_to_f16(float f);     /* nearest even; overflow -> inf; NaN stays NaN */

/* ---------------------------------------------------------------- arrays */
/* dst[i] = (float)src[i] for n elements stored little-endian in `src` (which
 * may be unaligned, e.g. inside an mmap'd file). dt: F32, F16, BF16 or F64;
 * anything else returns CT_ERR_ARG. dst and src must not overlap. */
ct_status ct_convert_to_f32(float *dst, const void *src, ct_dtype dt, size_t n);
/* The reverse: stores n fp32 values as little-endian dt (F32, F16 or BF16;
 * otherwise CT_ERR_ARG) into dst (may be unaligned). */
ct_status ct_convert_from_f32(void *dst, ct_dtype dt, const float *src, size_t n);

/* ------------------------------------------------------ in-memory bf16 arrays */
/* Native-endian, aligned arrays in memory (not file bytes). dst and src must
 * not overlap. Results equal the scalar conversions element by element
 * (nearest even; NaN stays a quiet NaN). Arrays of 64K elements and more are
 * split over the OpenMP threads (called inside a parallel region, they stay
 * on the calling thread).
 * Both borrow their arguments and cannot fail. */
void ct_f32_to_bf16_array(uint16_t *dst, const float *src, size_t n);
void ct_bf16_to_f32_array(float *dst, const uint16_t *src, size_t n);
/* dst[i] = src[i] rounded to bf16 and widened back (the value a bf16 store
 * would keep), in one pass; dst may equal src (in place), or not overlap it. */
void ct_f32_round_bf16_array(float *dst, const float *src, size_t n);

/* ---------------------------------------------------------------- byte order */
static inline uint16_t ct_le_load_u16(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | (b[1] << 8));
}
static inline uint32_t ct_le_load_u32(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}
static inline uint64_t ct_le_load_u64(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint64_t)ct_le_load_u32(b) | ((uint64_t)ct_le_load_u32(b + 4) << 32);
}
static inline void ct_le_store_u16(void *p, uint16_t v) {
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}
static inline void ct_le_store_u32(void *p, uint32_t v) {
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}
static inline void ct_le_store_u64(void *p, uint64_t v) {
    ct_le_store_u32(p, (uint32_t)v);
    ct_le_store_u32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* The double nearest the shortest decimal that reads back as v (1 to 9
 * significant digits): what a JSON writer should print for a float, so 1e-5
 * stored as a float is written "1e-05", not 9.99999974737875e-06. */
double ct_f32_decimal(float v);

#endif
