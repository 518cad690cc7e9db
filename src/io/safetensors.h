/*
 * safetensors files (the Hugging Face weight format): a validating, mmap'd
 * reader and a streaming, atomic writer. The format is specified in
 * safetensors.c next to the reader.
 * Leaves out: sharded checkpoints (model.safetensors.index.json; callers open
 * each shard), writing dtypes other than F32/F16/BF16, and tensor name
 * mapping (models/ knows the Hugging Face names and layouts).
 */
#ifndef CT_SAFETENSORS_H
#define CT_SAFETENSORS_H

#include "core/dtype.h"
#include "ctrain/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CT_ST_MAX_DIMS 8

/* One tensor of an open file. Everything it points to belongs to the file and
 * lives until ct_st_close. */
typedef struct ct_st_tensor {
    const char *name;
    ct_dtype dtype;
    int ndim;                       /* 0..CT_ST_MAX_DIMS (0: a scalar) */
    int64_t shape[CT_ST_MAX_DIMS];  /* elements per dim; unused dims are 0 */
    int64_t numel;                  /* product of shape (1 for a scalar) */
    const void *data;               /* nbytes of little-endian elements in the
                                       mapping; NOT necessarily aligned */
    size_t nbytes;                  /* numel * ct_dtype_size(dtype) */
} ct_st_tensor;

typedef struct ct_safetensors ct_safetensors; /* an open file: opaque */

/* Map `path` read-only and validate the whole header against the file size:
 * header length, JSON syntax, every tensor's dtype, shape and data_offsets,
 * sizes that match dtype and shape, no overlapping tensors, no duplicate
 * names, __metadata__ holding only strings. Returns owned *out; release with
 * ct_st_close. Errors: CT_ERR_IO (missing or unreadable file), CT_ERR_FORMAT
 * (message names the file, the tensor and what was expected vs found),
 * CT_ERR_OOM. Thread-safe; the opened object is read-only afterwards, so
 * several threads may read from it at once. */
ct_status ct_st_open(ct_safetensors **out, const char *path);
void ct_st_close(ct_safetensors *st); /* NULL is fine */

const char *ct_st_path(const ct_safetensors *st);
int ct_st_count(const ct_safetensors *st);
/* Tensors in header order; i in [0, ct_st_count). */
const ct_st_tensor *ct_st_tensor_at(const ct_safetensors *st, int i);
/* NULL when no tensor has this exact name (sets no error). */
const ct_st_tensor *ct_st_find(const ct_safetensors *st, const char *name);
/* Value of a __metadata__ key, or NULL. Borrowed from st. */
const char *ct_st_metadata(const ct_safetensors *st, const char *key);

/* Convert tensor t of st (F32, F16, BF16 or F64) to fp32 into out, which holds
 * t->numel floats. transpose=false: same layout. transpose=true: t must be 2-D
 * (R, C) and out receives the (C, R) transpose, row-major (Hugging Face GPT-2
 * Conv1D [in, out] -> our [out, in]). Errors: CT_ERR_FORMAT naming the file
 * and tensor (integer dtype, not 2-D for a transpose). */
ct_status ct_st_read_f32(const ct_safetensors *st, const ct_st_tensor *t, float *out,
                         bool transpose);

/* One tensor to write. */
typedef struct ct_st_entry {
    const char *name;
    ct_dtype dtype;                /* as stored: F32, BF16 or F16 */
    int ndim;                      /* 0..CT_ST_MAX_DIMS */
    int64_t shape[CT_ST_MAX_DIMS]; /* shape AS WRITTEN */
    const float *data;             /* fp32 source, borrowed; may be NULL if numel is 0 */
    bool transpose;                /* ndim must be 2: data is (shape[1], shape[0])
                                      row-major and is written transposed */
} ct_st_entry;

/* Write a safetensors file atomically (temp file, fsync, rename): the
 * entries in the given order, packed without gaps, the header padded with
 * spaces so the data starts at a multiple of 8 bytes. meta_kv holds n_meta
 * key/value pairs as 2*n_meta strings (k0, v0, k1, v1, ...) for __metadata__;
 * transformers requires {"format": "pt"}. Data is streamed through a small
 * buffer: no copy of the whole model is made.
 * Errors: CT_ERR_ARG (bad entry: names the entry), CT_ERR_IO, CT_ERR_OOM. */
ct_status ct_st_write(const char *path, const ct_st_entry *entries, int n,
                      const char *const *meta_kv, int n_meta);

#endif
