/*
 * safetensors tests: exact bytes of a tiny file, a write/read round trip
 * (F32, BF16, F16, transposed, scalar and empty tensors, metadata with
 * characters that need escaping), atomic overwrite, writer argument errors,
 * and every corruption the reader must reject, each as a crafted file: the
 * status code and a message naming the file (and the tensor) are checked.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "io/safetensors.h"

#include <stdint.h>
#include <string.h>

static char tmpdir[128];

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k = 0;
    k = (k + 1) % 4;
    return ct_tmpdir_join(buf[k], sizeof buf[k], tmpdir, name);
}

/* Write a safetensors-shaped file: u64 length of `json`, json, then
 * data_bytes bytes of data (a ramp). */
static void craft(const char *path, const char *json, size_t data_bytes) {
    size_t jn = strlen(json);
    size_t total = 8 + jn + data_bytes;
    uint8_t *buf = malloc(total);
    ct_le_store_u64(buf, (uint64_t)jn);
    memcpy(buf + 8, json, jn);
    for (size_t i = 0; i < data_bytes; i++) buf[8 + jn + i] = (uint8_t)i;
    CHECK(ct_tmpdir_write(path, buf, total) == 0);
    free(buf);
}

/* Open must fail with `code`; the message names the path and holds each of
 * the (up to two) fragments. */
static void expect_fail_at(int line, const char *path, ct_status code, const char *frag1,
                           const char *frag2) {
    ct_safetensors *st = (ct_safetensors *)(uintptr_t)1;
    ct_error_clear();
    ct_status s = ct_st_open(&st, path);
    const char *msg = ct_last_error();
    CHECK_MSG(s == code, "line %d: status %d (%s), expected %d; message: %s", line, s,
              ct_status_str(s), code, msg);
    CHECK_MSG(st == NULL, "line %d: *out not NULL on failure", line);
    CHECK_MSG(strstr(msg, path) != NULL, "line %d: message lacks the path: %s", line, msg);
    if (frag1) CHECK_MSG(strstr(msg, frag1) != NULL, "line %d: message lacks '%s': %s", line, frag1, msg);
    if (frag2) CHECK_MSG(strstr(msg, frag2) != NULL, "line %d: message lacks '%s': %s", line, frag2, msg);
    if (s == CT_OK) ct_st_close(st);
}
#define EXPECT_FAIL(path, code, f1, f2) expect_fail_at(__LINE__, path, code, f1, f2)

static void test_exact_bytes(void) {
    const char *p = tpath("tiny.safetensors");
    const float x[2] = {1.0f, -2.0f};
    ct_st_entry e = {.name = "x", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {2}, .data = x};
    const char *meta[] = {"format", "pt"};
    CHECK(ct_st_write(p, &e, 1, meta, 1) == CT_OK);
    const char *json =
        "{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
        "\"data_offsets\":[0,8]}}";
    size_t jn = strlen(json), padded = (jn + 7) / 8 * 8;
    uint8_t got[256];
    long n = ct_tmpdir_read(p, got, sizeof got);
    CHECK(n == (long)(8 + padded + 8));
    CHECK(ct_le_load_u64(got) == padded);
    CHECK(memcmp(got + 8, json, jn) == 0);
    for (size_t i = jn; i < padded; i++) CHECK(got[8 + i] == ' ');
    const uint8_t data[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0};
    CHECK(memcmp(got + 8 + padded, data, 8) == 0);
}

static void test_round_trip(void) {
    const char *p = tpath("model.safetensors");
    float a[3 * 5], b[4], c_src[3 * 2], s0[1] = {42.5f}, f_src[3 * 4], g[6];
    for (int i = 0; i < 15; i++) a[i] = (float)i * 0.37f - 2.0f;
    for (int i = 0; i < 4; i++) b[i] = 1.0f / (float)(i + 3);
    for (int i = 0; i < 6; i++) c_src[i] = (float)(i + 1); /* (3, 2) source */
    for (int i = 0; i < 12; i++) f_src[i] = (float)i * 1.001f; /* (3, 4) source */
    for (int i = 0; i < 6; i++) g[i] = (float)i / 7.0f;
    ct_st_entry es[] = {
        {.name = "a.weight", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {3, 5}, .data = a},
        {.name = "b.bf16", .dtype = CT_DTYPE_BF16, .ndim = 1, .shape = {4}, .data = b},
        {.name = "c.transposed", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {2, 3},
         .data = c_src, .transpose = true},
        {.name = "d.scalar", .dtype = CT_DTYPE_F32, .ndim = 0, .data = s0},
        {.name = "e.empty", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "f.bf16t", .dtype = CT_DTYPE_BF16, .ndim = 2, .shape = {4, 3}, .data = f_src,
         .transpose = true},
        {.name = "g.\"quoted\"\\name", .dtype = CT_DTYPE_F16, .ndim = 3, .shape = {1, 2, 3},
         .data = g},
    };
    const int n = (int)(sizeof es / sizeof es[0]);
    const char *meta[] = {"format", "pt", "note", "tab\there \"q\" back\\slash\nnewline"};
    CHECK(ct_st_write(p, es, n, meta, 2) == CT_OK);
    CHECK(ct_tmpdir_count(tmpdir) == 2); /* tiny + model: no temp files left */

    /* header length is a multiple of 8 */
    uint8_t head[8];
    CHECK(ct_tmpdir_read(p, head, 8) == 8);
    CHECK(ct_le_load_u64(head) % 8 == 0);

    ct_safetensors *st = NULL;
    CHECK(ct_st_open(&st, p) == CT_OK);
    if (!st) return;
    CHECK(strcmp(ct_st_path(st), p) == 0);
    CHECK(ct_st_count(st) == n);
    CHECK(strcmp(ct_st_metadata(st, "format"), "pt") == 0);
    CHECK(strcmp(ct_st_metadata(st, "note"), meta[3]) == 0);
    CHECK(ct_st_metadata(st, "missing") == NULL);
    CHECK(ct_st_find(st, "nope") == NULL);
    CHECK(ct_st_find(st, "a.weigh") == NULL);
    for (int i = 0; i < n; i++) {
        const ct_st_tensor *t = ct_st_tensor_at(st, i);
        CHECK(strcmp(t->name, es[i].name) == 0); /* header order = given order */
        CHECK(ct_st_find(st, es[i].name) == t);
        CHECK(t->dtype == es[i].dtype);
        CHECK(t->ndim == es[i].ndim);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            CHECK(t->shape[d] == es[i].shape[d]);
            numel *= es[i].shape[d];
        }
        CHECK(t->numel == numel);
        CHECK(t->nbytes == (size_t)numel * ct_dtype_size(t->dtype));
    }
    /* tensors are packed in order */
    for (int i = 1; i < n; i++) {
        const ct_st_tensor *prev = ct_st_tensor_at(st, i - 1), *t = ct_st_tensor_at(st, i);
        CHECK((const uint8_t *)t->data == (const uint8_t *)prev->data + prev->nbytes);
    }

    float out[64];
    const ct_st_tensor *t = ct_st_find(st, "a.weight");
    CHECK(ct_st_read_f32(st, t, out, false) == CT_OK);
    for (int i = 0; i < 15; i++) CHECK(out[i] == a[i]);
    /* read transposed: (3,5) -> (5,3) */
    CHECK(ct_st_read_f32(st, t, out, true) == CT_OK);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++) CHECK(out[c * 3 + r] == a[r * 5 + c]);

    t = ct_st_find(st, "b.bf16");
    CHECK(ct_st_read_f32(st, t, out, false) == CT_OK);
    for (int i = 0; i < 4; i++) {
        CHECK(out[i] == ct_bf16_to_f32(ct_f32_to_bf16(b[i])));
        CHECK(fabsf(out[i] - b[i]) <= fabsf(b[i]) / 256.0f);
    }

    /* c was written transposed: stored (2,3)[i][j] = source (3,2)[j][i] */
    t = ct_st_find(st, "c.transposed");
    CHECK(ct_st_read_f32(st, t, out, false) == CT_OK);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) CHECK(out[i * 3 + j] == c_src[j * 2 + i]);
    /* and reading it transposed gives the source back */
    CHECK(ct_st_read_f32(st, t, out, true) == CT_OK);
    for (int i = 0; i < 6; i++) CHECK(out[i] == c_src[i]);

    t = ct_st_find(st, "d.scalar");
    CHECK(t->numel == 1 && t->nbytes == 4);
    CHECK(ct_st_read_f32(st, t, out, false) == CT_OK && out[0] == 42.5f);
    CHECK(ct_st_read_f32(st, t, out, true) == CT_ERR_FORMAT); /* 0-D cannot transpose */
    CHECK(strstr(ct_last_error(), "d.scalar") && strstr(ct_last_error(), p));

    t = ct_st_find(st, "e.empty");
    CHECK(t->numel == 0 && t->nbytes == 0);
    CHECK(ct_st_read_f32(st, t, out, false) == CT_OK);
    CHECK(ct_st_read_f32(st, t, out, true) == CT_OK);

    t = ct_st_find(st, "f.bf16t");
    CHECK(ct_st_read_f32(st, t, out, true) == CT_OK);
    for (int i = 0; i < 12; i++) CHECK(out[i] == ct_bf16_to_f32(ct_f32_to_bf16(f_src[i])));

    t = ct_st_find(st, "g.\"quoted\"\\name");
    CHECK(t != NULL);
    if (t) {
        CHECK(ct_st_read_f32(st, t, out, false) == CT_OK);
        for (int i = 0; i < 6; i++) CHECK(out[i] == ct_f16_to_f32(ct_f32_to_f16(g[i])));
    }
    ct_st_close(st);

    /* atomic overwrite: the same path now holds the new content */
    float z[2] = {7.0f, 8.0f};
    ct_st_entry ez = {.name = "z", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {2}, .data = z};
    CHECK(ct_st_write(p, &ez, 1, meta, 1) == CT_OK);
    CHECK(ct_st_open(&st, p) == CT_OK);
    if (!st) return;
    CHECK(ct_st_count(st) == 1 && ct_st_find(st, "a.weight") == NULL);
    CHECK(ct_st_read_f32(st, ct_st_find(st, "z"), out, false) == CT_OK && out[1] == 8.0f);
    CHECK(ct_st_metadata(st, "note") == NULL);
    ct_st_close(st);
    ct_st_close(NULL);

    /* no metadata, no tensors: still a valid file */
    const char *pe = tpath("empty.safetensors");
    CHECK(ct_st_write(pe, NULL, 0, NULL, 0) == CT_OK);
    CHECK(ct_st_open(&st, pe) == CT_OK);
    if (st) {
        CHECK(ct_st_count(st) == 0 && ct_st_metadata(st, "format") == NULL);
        ct_st_close(st);
    }
}

/* A transpose larger than one tile and one stream chunk row group. */
static void test_big_transpose(void) {
    const char *p = tpath("big.safetensors");
    enum { R = 70, C = 133 }; /* written shape (R, C); source (C, R) */
    float *src = malloc(sizeof(float) * R * C), *out = malloc(sizeof(float) * R * C);
    for (int i = 0; i < R * C; i++) src[i] = (float)i;
    ct_st_entry e = {.name = "w", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {R, C},
                     .data = src, .transpose = true};
    CHECK(ct_st_write(p, &e, 1, NULL, 0) == CT_OK);
    ct_safetensors *st = NULL;
    CHECK(ct_st_open(&st, p) == CT_OK);
    if (st) {
        const ct_st_tensor *t = ct_st_find(st, "w");
        CHECK(ct_st_read_f32(st, t, out, false) == CT_OK);
        int bad = 0;
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) bad += out[i * C + j] != src[j * R + i];
        CHECK(bad == 0);
        CHECK(ct_st_read_f32(st, t, out, true) == CT_OK);
        CHECK(memcmp(out, src, sizeof(float) * R * C) == 0);
        ct_st_close(st);
    }
    free(out);
    free(src);
}

static void test_write_errors(void) {
    float v[4] = {0};
    const char *p = tpath("bad_write.safetensors");
    ct_st_entry dup[2] = {
        {.name = "same", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {4}, .data = v},
        {.name = "same", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {4}, .data = v},
    };
    CHECK(ct_st_write(p, dup, 2, NULL, 0) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "same") != NULL);
    ct_st_entry e = {.name = "t1", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {4}, .data = v,
                     .transpose = true};
    CHECK(ct_st_write(p, &e, 1, NULL, 0) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "t1") != NULL);
    e = (ct_st_entry){.name = "i32", .dtype = CT_DTYPE_I32, .ndim = 1, .shape = {4}, .data = v};
    CHECK(ct_st_write(p, &e, 1, NULL, 0) == CT_ERR_ARG);
    e = (ct_st_entry){.name = "neg", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {-4}, .data = v};
    CHECK(ct_st_write(p, &e, 1, NULL, 0) == CT_ERR_ARG);
    e = (ct_st_entry){.name = "__metadata__", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {4},
                      .data = v};
    CHECK(ct_st_write(p, &e, 1, NULL, 0) == CT_ERR_ARG);
    e = (ct_st_entry){.name = "null", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {4}};
    CHECK(ct_st_write(p, &e, 1, NULL, 0) == CT_ERR_ARG);
    CHECK(ct_tmpdir_size(p) == -1); /* nothing was created */
    /* a directory that does not exist: CT_ERR_IO naming the path */
    e = (ct_st_entry){.name = "ok", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {4}, .data = v};
    const char *nodir = tpath("no/such/dir/x.safetensors");
    CHECK(ct_st_write(nodir, &e, 1, NULL, 0) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), nodir) != NULL);
}

static void test_corrupt(void) {
    char p[512];
    /* shorter than 8 bytes, and empty */
    ct_tmpdir_join(p, sizeof p, tmpdir, "short.safetensors");
    CHECK(ct_tmpdir_write(p, "abc", 3) == 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "8-byte", NULL);
    ct_tmpdir_join(p, sizeof p, tmpdir, "zero.safetensors");
    CHECK(ct_tmpdir_write(p, "", 0) == 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "0 bytes", NULL);

    /* header length larger than the file */
    ct_tmpdir_join(p, sizeof p, tmpdir, "hlen.safetensors");
    {
        uint8_t buf[8 + 20];
        ct_le_store_u64(buf, 1000);
        memset(buf + 8, ' ', 20);
        CHECK(ct_tmpdir_write(p, buf, sizeof buf) == 0);
        EXPECT_FAIL(p, CT_ERR_FORMAT, "header length 1000", NULL);
        ct_le_store_u64(buf, UINT64_MAX); /* must not wrap around */
        CHECK(ct_tmpdir_write(p, buf, sizeof buf) == 0);
        EXPECT_FAIL(p, CT_ERR_FORMAT, "header length", NULL);
        ct_le_store_u64(buf, 0);
        CHECK(ct_tmpdir_write(p, buf, sizeof buf) == 0);
        EXPECT_FAIL(p, CT_ERR_FORMAT, "not a JSON object", NULL);
    }

    /* header not valid JSON / not an object / junk after it */
    ct_tmpdir_join(p, sizeof p, tmpdir, "json.safetensors");
    craft(p, "{\"w\": {\"dtype\": \"F32\", ", 16);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "not valid JSON", NULL);
    craft(p, "[1, 2]", 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "not a JSON object", NULL);
    craft(p, "{} xyz", 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "after the header", NULL);
    craft(p, "{\"w.entry\": 5}", 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.entry", "expected an object");

    /* dtype */
    craft(p, "{\"w.bad\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.bad", "unknown dtype \"F33\"");
    craft(p, "{\"w.bad\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.bad", "dtype");
    craft(p, "{\"w.bad\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.bad", "dtype");

    /* shape */
    craft(p, "{\"w.shape\":{\"dtype\":\"F32\",\"shape\":5,\"data_offsets\":[0,20]}}", 20);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.shape", "shape");
    craft(p, "{\"w.shape\":{\"dtype\":\"F32\",\"data_offsets\":[0,20]}}", 20);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.shape", "shape");
    craft(p, "{\"w.shape\":{\"dtype\":\"F32\",\"shape\":[-1,2],\"data_offsets\":[0,8]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.shape", "shape[0] is -1");
    craft(p, "{\"w.shape\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,12]}}", 12);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.shape", "shape[1] is 1.5");
    craft(p, "{\"w.shape\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.shape", "shape[0]");
    craft(p, "{\"w.shape\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
             "\"data_offsets\":[0,4]}}", 4);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.shape", "9 dimensions");
    craft(p, "{\"w.shape\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
             "\"data_offsets\":[0,4]}}", 4);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.shape", "overflow");

    /* data_offsets */
    craft(p, "{\"w.off\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.off", "data_offsets");
    craft(p, "{\"w.off\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.off", "data_offsets");
    craft(p, "{\"w.off\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}}", 16);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.off", "data_offsets");
    craft(p, "{\"w.off\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.off", "data_offsets");
    craft(p, "{\"w.off\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.off", "data_offsets");
    craft(p, "{\"w.off\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.off", "begin > end");
    craft(p, "{\"w.off\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.off", "beyond the data buffer, which holds 7 bytes");
    craft(p, "{\"w.off\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e300]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.off", "data_offsets");

    /* size does not match dtype x shape */
    craft(p, "{\"w.size\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 16);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.size", "span 12 bytes, expected 16");
    craft(p, "{\"w.size\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.size", "expected 8");

    /* overlapping tensors; duplicate names */
    craft(p, "{\"w.one\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"w.two\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 24);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.one", "w.two");
    craft(p, "{\"w.two\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
             "\"w.one\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "overlap", "w.two");
    craft(p, "{\"w.dup\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"w.dup\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "w.dup", "more than once");

    /* metadata must be strings */
    craft(p, "{\"__metadata__\":{\"format\":1}}", 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "__metadata__", "format");
    craft(p, "{\"__metadata__\":[\"pt\"]}", 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "__metadata__", NULL);

    /* accepted: zero-size tensors anywhere, a gap, trailing bytes, padding */
    craft(p, "{\"w.a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
             "\"w.z\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[12,12]},"
             "\"w.b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[16,17]}}     ", 20);
    ct_safetensors *st = NULL;
    CHECK(ct_st_open(&st, p) == CT_OK);
    if (st) {
        CHECK(ct_st_count(st) == 3);
        const ct_st_tensor *t = ct_st_find(st, "w.b");
        CHECK(t && t->ndim == 0 && t->numel == 1 && *(const uint8_t *)t->data == 16);
        float out[2];
        CHECK(ct_st_read_f32(st, t, out, false) == CT_ERR_FORMAT); /* U8 is not a float */
        CHECK(strstr(ct_last_error(), "w.b") && strstr(ct_last_error(), "U8"));
        ct_st_close(st);
    }

    /* a real file cut short */
    const char *g2 = tpath("g2.safetensors");
    float w[64];
    for (int i = 0; i < 64; i++) w[i] = (float)i;
    ct_st_entry es[2] = {
        {.name = "first", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {32}, .data = w},
        {.name = "second", .dtype = CT_DTYPE_F32, .ndim = 2, .shape = {4, 8}, .data = w + 32},
    };
    CHECK(ct_st_write(g2, es, 2, NULL, 0) == CT_OK);
    long sz = ct_tmpdir_size(g2);
    uint8_t *buf = malloc((size_t)sz);
    CHECK(ct_tmpdir_read(g2, buf, (size_t)sz) == sz);
    ct_tmpdir_join(p, sizeof p, tmpdir, "truncated.safetensors");
    CHECK(ct_tmpdir_write(p, buf, (size_t)sz - 5) == 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "second", "beyond the data buffer");
    CHECK(strstr(ct_last_hint(), "truncated") != NULL);
    CHECK(ct_tmpdir_write(p, buf, 40) == 0); /* cut inside the header */
    EXPECT_FAIL(p, CT_ERR_FORMAT, "header length", NULL);
    free(buf);

    /* missing file, a directory */
    ct_tmpdir_join(p, sizeof p, tmpdir, "missing.safetensors");
    EXPECT_FAIL(p, CT_ERR_IO, "No such file", NULL);
    EXPECT_FAIL(tmpdir, CT_ERR_IO, "not a regular file", NULL);
}

int main(void) {
    if (!ct_tmpdir_make(tmpdir, sizeof tmpdir, "st")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_exact_bytes();
    test_round_trip();
    test_big_transpose();
    test_write_errors();
    test_corrupt();
    CHECK(ct_tmpdir_remove(tmpdir) == 0);
    return ct_test_result("test_safetensors");
}
