/*
 * safetensors reader (mmap + full header validation) and writer (streamed
 * through a small buffer, atomic). The reader trusts nothing in the file:
 * every number is checked against the file size before it is used, so a
 * corrupt or hostile file is an error message, never an out-of-bounds read.
 * Leaves out: sharded checkpoints and name mapping (see safetensors.h).
 */
#include "io/safetensors.h"

#include "io/fileio.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * File format (https://github.com/huggingface/safetensors, "Format"):
 *
 *   offset 0   u64, little-endian: N, the byte length of the header
 *   offset 8   N bytes: a UTF-8 JSON object (may be padded at the end with
 *              spaces; writers pad so the data starts 8-byte aligned):
 *                {
 *                  "__metadata__": {"format": "pt", ...},     optional, str -> str
 *                  "<tensor name>": {
 *                    "dtype": "F32" | "F16" | "BF16" | "I64" | ...,
 *                    "shape": [d0, d1, ...],                   row-major, [] = scalar
 *                    "data_offsets": [begin, end]              bytes, relative to the
 *                  },                                          start of the data buffer
 *                  ...
 *                }
 *   offset 8+N the data buffer: each tensor's elements, little-endian,
 *              row-major, at [begin, end); end - begin == numel * dtype size.
 *
 * Checked here: the file holds at least 8 bytes; 0 < N <= file size - 8 and
 * N <= 100 MiB (the reference implementation's limit); the header is one JSON
 * object followed only by whitespace; __metadata__ (at most one) is an object
 * of strings; every other key is a tensor whose dtype is known, whose shape
 * is a list of at most 8 non-negative integers, and whose data_offsets are two
 * non-negative integers with begin <= end <= data buffer size and
 * end - begin == numel * dtype size; names are unique; tensors do not overlap.
 * Gaps between tensors and trailing bytes are tolerated (the reference
 * implementation rejects them; they are harmless to a reader).
 */

#define ST_MAX_HEADER ((uint64_t)100 << 20)
#define ST_MAX_JSON_INT 9007199254740992.0 /* 2^53: larger doubles lose integers */

struct ct_safetensors {
    char *path;
    const uint8_t *map;        /* the whole file, read-only */
    size_t map_len;            /* bytes */
    cJSON *root;               /* parsed header; tensor names point into it */
    const cJSON *meta;         /* __metadata__ object or NULL */
    ct_st_tensor *tensors;     /* [n], header order */
    const ct_st_tensor **by_name; /* [n], sorted by name, for ct_st_find */
    int n;
};

/* ---------------------------------------------------------------- helpers */

static char *st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* A short description of a JSON value for error messages: "1.5", "\"abc\"",
 * "an array", ... */
static const char *st_json_describe(const cJSON *v, char *buf, size_t len) {
    if (!v) snprintf(buf, len, "nothing");
    else if (cJSON_IsNumber(v)) snprintf(buf, len, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v)) snprintf(buf, len, "the string \"%.40s\"", v->valuestring);
    else if (cJSON_IsArray(v)) snprintf(buf, len, "an array of %d", cJSON_GetArraySize(v));
    else if (cJSON_IsObject(v)) snprintf(buf, len, "an object");
    else if (cJSON_IsBool(v)) snprintf(buf, len, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v)) snprintf(buf, len, "null");
    else snprintf(buf, len, "an invalid value");
    return buf;
}

/* A JSON number that is a non-negative integer exactly representable. */
static bool st_json_uint(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_JSON_INT)) return false; /* also rejects NaN */
    int64_t i = (int64_t)d;
    if ((double)i != d) return false;
    *out = i;
    return true;
}

static int st_cmp_name(const void *a, const void *b) {
    const ct_st_tensor *x = *(const ct_st_tensor *const *)a;
    const ct_st_tensor *y = *(const ct_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int st_cmp_data(const void *a, const void *b) {
    const ct_st_tensor *x = *(const ct_st_tensor *const *)a;
    const ct_st_tensor *y = *(const ct_st_tensor *const *)b;
    const uint8_t *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

/* "[768, 2304]" */
static const char *st_shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}

/* ---------------------------------------------------------------- reader */

/* Parse one tensor entry `item` (key = name) into t. data_size: bytes in the
 * data buffer, which starts at `data`. */
static ct_status st_parse_tensor(ct_st_tensor *t, const cJSON *item, const char *path,
                                 const uint8_t *data, int64_t data_size) {
    char what[96];
    const char *name = item->string;
    t->name = name;
    if (!cJSON_IsObject(item))
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: tensor '%s': expected an object with dtype, shape and data_offsets, "
                      "found %s", path, name, st_json_describe(item, what, sizeof what));

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dtype))
        return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s': \"dtype\" should be a string, found %s",
                      path, name, st_json_describe(dtype, what, sizeof what));
    if (ct_dtype_from_name(&t->dtype, dtype->valuestring) != CT_OK)
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: tensor '%s': unknown dtype \"%s\" (expected one of F32, F16, BF16, "
                      "F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL, F8_E4M3, F8_E5M2)",
                      path, name, dtype->valuestring);

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!cJSON_IsArray(shape))
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: tensor '%s': \"shape\" should be a list of non-negative integers, "
                      "found %s", path, name, st_json_describe(shape, what, sizeof what));
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > CT_ST_MAX_DIMS)
        return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s': shape has %d dimensions, at most %d "
                                     "are supported", path, name, ndim, CT_ST_MAX_DIMS);
    t->ndim = ndim;
    t->numel = 1;
    int d = 0;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape) {
        int64_t v;
        if (!st_json_uint(dim, &v))
            return CT_ERR(CT_ERR_FORMAT,
                          "%s: tensor '%s': shape[%d] is %s, expected a non-negative integer",
                          path, name, d, st_json_describe(dim, what, sizeof what));
        if (v != 0 && t->numel > INT64_MAX / v)
            return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s': shape overflows 64 bits", path, name);
        t->numel *= v;
        t->shape[d++] = v;
    }

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    int64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !st_json_uint(cJSON_GetArrayItem(offs, 0), &begin) ||
        !st_json_uint(cJSON_GetArrayItem(offs, 1), &end))
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: tensor '%s': \"data_offsets\" should be [begin, end], two "
                      "non-negative integers, found %s", path, name,
                      st_json_describe(offs, what, sizeof what));
    if (begin > end)
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] has begin > end",
                      path, name, begin, end);
    if (end > data_size) {
        ct_status st = CT_ERR(CT_ERR_FORMAT,
                              "%s: tensor '%s': data_offsets end %" PRId64 " is beyond the data "
                              "buffer, which holds %" PRId64 " bytes", path, name, end, data_size);
        ct_error_hint("the file is truncated or its header is corrupt");
        return st;
    }
    size_t esize = ct_dtype_size(t->dtype);
    char sbuf[160];
    if (t->numel > INT64_MAX / (int64_t)esize)
        return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s': shape %s is too large", path, name,
                      st_shape_str(t->shape, ndim, sbuf, sizeof sbuf));
    if (end - begin != t->numel * (int64_t)esize)
        return CT_ERR(CT_ERR_FORMAT,
                      "%s: tensor '%s': data_offsets span %" PRId64 " bytes, expected %" PRId64
                      " (%s shape %s: %" PRId64 " elements x %zu bytes)", path, name,
                      end - begin, t->numel * (int64_t)esize, ct_dtype_name(t->dtype),
                      st_shape_str(t->shape, ndim, sbuf, sizeof sbuf), t->numel, esize);
    t->data = data + begin;
    t->nbytes = (size_t)(end - begin);
    return CT_OK;
}

static ct_status st_parse_metadata(const cJSON *meta, const char *path) {
    char what[96];
    if (!cJSON_IsObject(meta))
        return CT_ERR(CT_ERR_FORMAT, "%s: \"__metadata__\" should be an object of strings, "
                      "found %s", path, st_json_describe(meta, what, sizeof what));
    const cJSON *kv;
    cJSON_ArrayForEach(kv, meta) {
        if (!cJSON_IsString(kv))
            return CT_ERR(CT_ERR_FORMAT, "%s: __metadata__ key '%s' should map to a string, "
                          "found %s", path, kv->string, st_json_describe(kv, what, sizeof what));
    }
    return CT_OK;
}

ct_status ct_st_open(ct_safetensors **out, const char *path) {
    ct_status st = CT_OK;
    *out = NULL;
    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "safetensors: empty path");
    ct_safetensors *s = calloc(1, sizeof *s);
    if (!s) return CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
    s->path = st_strdup(path);
    if (!s->path) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
        goto fail;
    }

    static const ct_file_map_msgs msgs = {
        .missing_hint = "check the path; a model directory holds model.safetensors",
        .short_what = "safetensors header length",
        .short_hint = "the file is truncated or not a safetensors file",
    };
    const void *map = NULL;
    st = ct_file_map(path, 8, &msgs, &map, &s->map_len);
    if (st != CT_OK) goto fail;
    s->map = map;
    int64_t fsize = (int64_t)s->map_len;

    uint64_t hlen = ct_le_load_u64(s->map);
    if (hlen > (uint64_t)(fsize - 8)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: header length %" PRIu64 " is larger than the file "
                    "(%" PRId64 " bytes after the 8-byte length)", path, hlen, fsize - 8);
        ct_error_hint("the file is truncated or not a safetensors file");
        goto fail;
    }
    if (hlen > ST_MAX_HEADER) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the limit of %" PRIu64
                    " bytes", path, hlen, ST_MAX_HEADER);
        goto fail;
    }
    const char *hdr = (const char *)s->map + 8;
    size_t hn = (size_t)hlen;
    const uint8_t *data = s->map + 8 + hn;
    int64_t data_size = fsize - 8 - (int64_t)hn;
    if (hn == 0 || hdr[0] != '{') {
        st = CT_ERR(CT_ERR_FORMAT, "%s: header is not a JSON object (expected '{' at byte 8, "
                    "found %s)", path, hn == 0 ? "an empty header" : "something else");
        ct_error_hint("the file is not a safetensors file");
        goto fail;
    }
    const char *end = NULL;
    s->root = cJSON_ParseWithLengthOpts(hdr, hn, &end, false);
    if (!s->root) {
        size_t at = (end && end >= hdr && end <= hdr + hn) ? (size_t)(end - hdr) : 0;
        st = CT_ERR(CT_ERR_FORMAT, "%s: header is not valid JSON (error near header byte %zu "
                    "of %zu)", path, at, hn);
        goto fail;
    }
    for (const char *p = end; p && p < hdr + hn; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
            st = CT_ERR(CT_ERR_FORMAT, "%s: unexpected bytes after the header's JSON object "
                        "(header byte %zu of %zu)", path, (size_t)(p - hdr), hn);
            goto fail;
        }
    }
    if (!cJSON_IsObject(s->root)) {
        st = CT_ERR(CT_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto fail;
    }

    /* count tensors; validate __metadata__ */
    int n = 0, n_meta = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, s->root) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (++n_meta > 1) {
                st = CT_ERR(CT_ERR_FORMAT, "%s: \"__metadata__\" appears twice", path);
                goto fail;
            }
            st = st_parse_metadata(item, path);
            if (st != CT_OK) goto fail;
            s->meta = item;
        } else {
            n++;
        }
    }
    s->tensors = calloc(n ? (size_t)n : 1, sizeof *s->tensors);
    s->by_name = calloc(n ? (size_t)n : 1, sizeof *s->by_name);
    if (!s->tensors || !s->by_name) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory for %d tensor descriptors", path, n);
        goto fail;
    }
    cJSON_ArrayForEach(item, s->root) {
        if (item == s->meta) continue;
        st = st_parse_tensor(&s->tensors[s->n], item, path, data, data_size);
        if (st != CT_OK) goto fail;
        s->by_name[s->n] = &s->tensors[s->n];
        s->n++;
    }

    /* unique names */
    qsort(s->by_name, (size_t)s->n, sizeof *s->by_name, st_cmp_name);
    for (int i = 1; i < s->n; i++) {
        if (strcmp(s->by_name[i - 1]->name, s->by_name[i]->name) == 0) {
            st = CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' appears more than once in the header",
                        path, s->by_name[i]->name);
            goto fail;
        }
    }

    /* no overlaps: sort by begin; each non-empty tensor starts at or after the
     * furthest end seen so far */
    if (s->n > 1) {
        const ct_st_tensor **by_data = malloc((size_t)s->n * sizeof *by_data);
        if (!by_data) {
            st = CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
            goto fail;
        }
        memcpy(by_data, s->by_name, (size_t)s->n * sizeof *by_data);
        qsort(by_data, (size_t)s->n, sizeof *by_data, st_cmp_data);
        const ct_st_tensor *far = NULL; /* the tensor reaching furthest so far */
        for (int i = 0; i < s->n; i++) {
            const ct_st_tensor *t = by_data[i];
            if (t->nbytes == 0) continue;
            const uint8_t *tb = t->data;
            if (far && tb < (const uint8_t *)far->data + far->nbytes) {
                int64_t fb = (const uint8_t *)far->data - data, tb0 = tb - data;
                st = CT_ERR(CT_ERR_FORMAT,
                            "%s: tensors '%s' (bytes [%" PRId64 ", %" PRId64 ")) and '%s' "
                            "(bytes [%" PRId64 ", %" PRId64 ")) overlap", path, far->name, fb,
                            fb + (int64_t)far->nbytes, t->name, tb0, tb0 + (int64_t)t->nbytes);
                free(by_data);
                goto fail;
            }
            if (!far || tb + t->nbytes > (const uint8_t *)far->data + far->nbytes) far = t;
        }
        free(by_data);
    }
    *out = s;
    return CT_OK;
fail:
    ct_st_close(s);
    return st;
}

void ct_st_close(ct_safetensors *st) {
    if (!st) return;
    ct_file_unmap(st->map, st->map_len);
    cJSON_Delete(st->root);
    free(st->by_name);
    free(st->tensors);
    free(st->path);
    free(st);
}

const char *ct_st_path(const ct_safetensors *st) { return st->path; }

int ct_st_count(const ct_safetensors *st) { return st->n; }

const ct_st_tensor *ct_st_tensor_at(const ct_safetensors *st, int i) {
    CT_ASSERT(i >= 0 && i < st->n);
    return &st->tensors[i];
}

const ct_st_tensor *ct_st_find(const ct_safetensors *st, const char *name) {
    size_t lo = 0, hi = (size_t)st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, st->by_name[mid]->name);
        if (c == 0) return st->by_name[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

const char *ct_st_metadata(const ct_safetensors *st, const char *key) {
    if (!st->meta) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(st->meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

#define ST_TILE 32

ct_status ct_st_read_f32(const ct_safetensors *st, const ct_st_tensor *t, float *out,
                         bool transpose) {
    if (!ct_dtype_is_float(t->dtype))
        return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected F32, F16, BF16 "
                      "or F64", st->path, t->name, ct_dtype_name(t->dtype));
    if (!transpose) return ct_convert_to_f32(out, t->data, t->dtype, (size_t)t->numel);
    if (t->ndim != 2)
        return CT_ERR(CT_ERR_FORMAT, "%s: tensor '%s' has %d dimensions, expected 2 to read it "
                      "transposed", st->path, t->name, t->ndim);
    /* in (R, C) -> out (C, R), a tile at a time so both sides stay in cache */
    const int64_t R = t->shape[0], C = t->shape[1];
    const size_t es = ct_dtype_size(t->dtype);
    const uint8_t *in = t->data;
    float tile[ST_TILE][ST_TILE];
    for (int64_t i0 = 0; i0 < R; i0 += ST_TILE) {
        int64_t ni = R - i0 < ST_TILE ? R - i0 : ST_TILE;
        for (int64_t j0 = 0; j0 < C; j0 += ST_TILE) {
            int64_t nj = C - j0 < ST_TILE ? C - j0 : ST_TILE;
            for (int64_t i = 0; i < ni; i++) {
                const uint8_t *row = in + ((size_t)(i0 + i) * (size_t)C + (size_t)j0) * es;
                ct_convert_to_f32(tile[i], row, t->dtype, (size_t)nj);
            }
            for (int64_t j = 0; j < nj; j++) {
                float *dst = out + (size_t)(j0 + j) * (size_t)R + (size_t)i0;
                for (int64_t i = 0; i < ni; i++) dst[i] = tile[i][j];
            }
        }
    }
    return CT_OK;
}

/* ---------------------------------------------------------------- writer */

/* Growable string for the JSON header. */
typedef struct st_sbuf {
    char *p;
    size_t len, cap; /* bytes */
    bool oom;
} st_sbuf;

static void sb_put(st_sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(st_sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_i64(st_sbuf *b, int64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRId64, v);
    sb_put(b, tmp, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped;
 * other bytes (UTF-8) copied as they are. */
static void sb_json_string(st_sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int st_cmp_entry_name(const void *a, const void *b) {
    const ct_st_entry *x = *(const ct_st_entry *const *)a;
    const ct_st_entry *y = *(const ct_st_entry *const *)b;
    return strcmp(x->name, y->name);
}

/* Check one entry; *nbytes receives its stored size. */
static ct_status st_check_entry(const ct_st_entry *e, int i, const char *path, int64_t *numel,
                                int64_t *nbytes) {
    if (!e->name || !e->name[0])
        return CT_ERR(CT_ERR_ARG, "%s: entry %d has no name", path, i);
    if (strcmp(e->name, "__metadata__") == 0)
        return CT_ERR(CT_ERR_ARG, "%s: entry %d: \"__metadata__\" is reserved", path, i);
    if (e->dtype != CT_DTYPE_F32 && e->dtype != CT_DTYPE_BF16 && e->dtype != CT_DTYPE_F16)
        return CT_ERR(CT_ERR_ARG, "%s: tensor '%s': cannot write dtype %s (F32, BF16 or F16)",
                      path, e->name, ct_dtype_name(e->dtype));
    if (e->ndim < 0 || e->ndim > CT_ST_MAX_DIMS)
        return CT_ERR(CT_ERR_ARG, "%s: tensor '%s': ndim %d outside [0, %d]", path, e->name,
                      e->ndim, CT_ST_MAX_DIMS);
    if (e->transpose && e->ndim != 2)
        return CT_ERR(CT_ERR_ARG, "%s: tensor '%s': transpose needs 2 dimensions, has %d", path,
                      e->name, e->ndim);
    int64_t ne = 1;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0)
            return CT_ERR(CT_ERR_ARG, "%s: tensor '%s': shape[%d] = %" PRId64 " is negative",
                          path, e->name, d, e->shape[d]);
        if (e->shape[d] && ne > INT64_MAX / 8 / e->shape[d])
            return CT_ERR(CT_ERR_ARG, "%s: tensor '%s': shape overflows", path, e->name);
        ne *= e->shape[d];
    }
    if (ne > 0 && !e->data)
        return CT_ERR(CT_ERR_ARG, "%s: tensor '%s': data is NULL", path, e->name);
    *numel = ne;
    *nbytes = ne * (int64_t)ct_dtype_size(e->dtype);
    return CT_OK;
}

#define ST_CHUNK ((size_t)1 << 18) /* floats per streamed chunk */

/* Stream one entry's data: convert (and maybe transpose) through fbuf/bbuf. */
static ct_status st_write_data(ct_afile *f, const ct_st_entry *e, int64_t numel, float *fbuf,
                               size_t fcap, uint8_t *bbuf) {
    ct_status st = CT_OK;
    size_t es = ct_dtype_size(e->dtype);
    if (!e->transpose) {
        for (int64_t off = 0; off < numel; off += (int64_t)fcap) {
            size_t cnt = (size_t)(numel - off) < fcap ? (size_t)(numel - off) : fcap;
            ct_convert_from_f32(bbuf, e->dtype, e->data + off, cnt);
            if ((st = ct_afile_write(f, bbuf, cnt * es)) != CT_OK) return st;
        }
        return CT_OK;
    }
    /* written (R, C) = source (C, R) transposed: out[i][j] = src[j*R + i].
     * Gather a group of output rows at a time; the inner loop reads the
     * source contiguously. */
    const int64_t R = e->shape[0], C = e->shape[1];
    if (R == 0 || C == 0) return CT_OK;
    int64_t rows = (int64_t)(fcap / (size_t)C); /* >= 1: fcap >= C by construction */
    for (int64_t i0 = 0; i0 < R; i0 += rows) {
        int64_t ni = R - i0 < rows ? R - i0 : rows;
        for (int64_t j = 0; j < C; j++) {
            const float *src = e->data + (size_t)j * (size_t)R + (size_t)i0;
            for (int64_t i = 0; i < ni; i++) fbuf[(size_t)i * (size_t)C + (size_t)j] = src[i];
        }
        size_t cnt = (size_t)(ni * C);
        ct_convert_from_f32(bbuf, e->dtype, fbuf, cnt);
        if ((st = ct_afile_write(f, bbuf, cnt * es)) != CT_OK) return st;
    }
    return CT_OK;
}

ct_status ct_st_write(const char *path, const ct_st_entry *entries, int n,
                      const char *const *meta_kv, int n_meta) {
    ct_status st = CT_OK;
    st_sbuf hb = {0};
    const ct_st_entry **sorted = NULL;
    float *fbuf = NULL;
    uint8_t *bbuf = NULL;
    ct_afile *f = NULL;

    if (!path || !path[0]) return CT_ERR(CT_ERR_ARG, "safetensors write: empty path");
    if (n < 0 || (n > 0 && !entries) || n_meta < 0 || (n_meta > 0 && !meta_kv))
        return CT_ERR(CT_ERR_ARG, "%s: bad entry or metadata arguments (n=%d, n_meta=%d)", path,
                      n, n_meta);
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i])
            return CT_ERR(CT_ERR_ARG, "%s: metadata %s %d is NULL", path,
                          i % 2 ? "value" : "key", i / 2);

    /* validate entries and size the transpose buffer */
    size_t fcap = ST_CHUNK;
    for (int i = 0; i < n; i++) {
        int64_t numel, nbytes;
        if ((st = st_check_entry(&entries[i], i, path, &numel, &nbytes)) != CT_OK) return st;
        if (entries[i].transpose && (size_t)entries[i].shape[1] > fcap)
            fcap = (size_t)entries[i].shape[1];
    }
    if (n > 0) {
        sorted = malloc((size_t)n * sizeof *sorted);
        if (!sorted) {
            st = CT_ERR(CT_ERR_OOM, "%s: out of memory", path);
            goto fail;
        }
        for (int i = 0; i < n; i++) sorted[i] = &entries[i];
        qsort(sorted, (size_t)n, sizeof *sorted, st_cmp_entry_name);
        for (int i = 1; i < n; i++) {
            if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
                st = CT_ERR(CT_ERR_ARG, "%s: tensor '%s' given twice", path, sorted[i]->name);
                goto fail;
            }
        }
    }

    /* header: __metadata__ first, then the tensors in the given order */
    sb_str(&hb, "{");
    bool first = true;
    if (n_meta > 0) {
        sb_str(&hb, "\"__metadata__\":{");
        for (int k = 0; k < n_meta; k++) {
            if (k) sb_str(&hb, ",");
            sb_json_string(&hb, meta_kv[2 * k]);
            sb_str(&hb, ":");
            sb_json_string(&hb, meta_kv[2 * k + 1]);
        }
        sb_str(&hb, "}");
        first = false;
    }
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const ct_st_entry *e = &entries[i];
        int64_t numel, nbytes;
        st_check_entry(e, i, path, &numel, &nbytes);
        if (!first) sb_str(&hb, ",");
        first = false;
        sb_json_string(&hb, e->name);
        sb_str(&hb, ":{\"dtype\":\"");
        sb_str(&hb, ct_dtype_name(e->dtype));
        sb_str(&hb, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) sb_str(&hb, ",");
            sb_i64(&hb, e->shape[d]);
        }
        sb_str(&hb, "],\"data_offsets\":[");
        sb_i64(&hb, offset);
        sb_str(&hb, ",");
        sb_i64(&hb, offset + nbytes);
        sb_str(&hb, "]}");
        offset += nbytes;
    }
    sb_str(&hb, "}");
    while (hb.len % 8 != 0) sb_str(&hb, " "); /* data starts at 8 + len: 8-aligned */
    if (hb.oom) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory building the header", path);
        goto fail;
    }

    fbuf = malloc(fcap * sizeof *fbuf);
    bbuf = malloc(fcap * sizeof(float));
    if (!fbuf || !bbuf) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory for the write buffer", path);
        goto fail;
    }
    if ((st = ct_afile_open(&f, path)) != CT_OK) goto fail;
    uint8_t lenbuf[8];
    ct_le_store_u64(lenbuf, (uint64_t)hb.len);
    if ((st = ct_afile_write(f, lenbuf, sizeof lenbuf)) != CT_OK) goto fail;
    if ((st = ct_afile_write(f, hb.p, hb.len)) != CT_OK) goto fail;
    for (int i = 0; i < n; i++) {
        int64_t numel, nbytes;
        st_check_entry(&entries[i], i, path, &numel, &nbytes);
        if ((st = st_write_data(f, &entries[i], numel, fbuf, fcap, bbuf)) != CT_OK) goto fail;
    }
    CT_ASSERT(ct_afile_tell(f) == 8 + (int64_t)hb.len + offset);
    st = ct_afile_commit(f);
    f = NULL;
    if (st != CT_OK) goto fail;
    free(bbuf);
    free(fbuf);
    free(sorted);
    free(hb.p);
    return CT_OK;
fail:
    ct_afile_abort(f);
    free(bbuf);
    free(fbuf);
    free(sorted);
    free(hb.p);
    return st;
}
