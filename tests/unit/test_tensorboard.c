/*
 * TensorBoard writer: CRC-32C against published vectors and a bitwise
 * reference, the TFRecord mask, protobuf varints, and files written by
 * ct_tb_* read back by a small independent reader below (framing, both CRCs,
 * Event/Summary/Value decoding), including corruption, a truncated tail, the
 * record-count flush and a write that hits the file size limit.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ct_test.h"
#include "io/tensorboard.h"
#include "unit/ct_tmpdir.h"

/* ------------------------------------------------------- reference CRC */

/* CRC-32C bit by bit from the definition (reflected polynomial 0x82f63b78). */
static uint32_t crc_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void test_crc(void) {
    const char *digits = "123456789";
    CHECK(ct_tb_crc32c(0, digits, 9) == 0xE3069283u);
    uint8_t buf[32];
    memset(buf, 0, sizeof buf);
    CHECK(ct_tb_crc32c(0, buf, 32) == 0x8A9136AAu); /* RFC 3720 B.4 */
    memset(buf, 0xff, sizeof buf);
    CHECK(ct_tb_crc32c(0, buf, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    CHECK(ct_tb_crc32c(0, buf, 32) == 0x46DD794Eu);
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    CHECK(ct_tb_crc32c(0, buf, 32) == 0x113FDB5Cu);
    CHECK(ct_tb_crc32c(0, "", 0) == 0);

    /* the table against the bitwise definition, and chaining */
    uint8_t rnd[1000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof rnd; i++) {
        x = x * 1103515245u + 12345u;
        rnd[i] = (uint8_t)(x >> 16);
    }
    int bad = 0;
    for (size_t n = 0; n <= sizeof rnd; n += 37)
        if (ct_tb_crc32c(0, rnd, n) != crc_bitwise(rnd, n)) bad++;
    CHECK(bad == 0);
    CHECK(ct_tb_crc32c(ct_tb_crc32c(0, rnd, 333), rnd + 333, 667) == crc_bitwise(rnd, 1000));

    CHECK(ct_tb_crc_mask(0) == 0xa282ead8u);
    CHECK(ct_tb_crc_mask(0xE3069283u) == 0xc78ab0e5u);
    CHECK(ct_tb_crc_mask(0xffffffffu) == 0xa282ead7u);
}

/* ---------------------------------------------------------------- varint */

static int varint_is(uint64_t v, const uint8_t *want, size_t n) {
    uint8_t out[16];
    memset(out, 0xee, sizeof out);
    size_t k = ct_tb_put_varint(out, v);
    return k == n && memcmp(out, want, n) == 0 && out[n] == 0xee;
}

static void test_varint(void) {
    CHECK(varint_is(0, (const uint8_t[]){0x00}, 1));
    CHECK(varint_is(1, (const uint8_t[]){0x01}, 1));
    CHECK(varint_is(127, (const uint8_t[]){0x7f}, 1));
    CHECK(varint_is(128, (const uint8_t[]){0x80, 0x01}, 2));
    CHECK(varint_is(150, (const uint8_t[]){0x96, 0x01}, 2));
    CHECK(varint_is(300, (const uint8_t[]){0xac, 0x02}, 2));
    CHECK(varint_is(16384, (const uint8_t[]){0x80, 0x80, 0x01}, 3));
    CHECK(varint_is(INT64_MAX,
                    (const uint8_t[]){0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 9));
    /* int64 -1 travels as two's complement: ten bytes */
    CHECK(varint_is((uint64_t)(int64_t)-1,
                    (const uint8_t[]){0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
                    10));
}

/* ------------------------------------------------------ a small reader */

#define RD_MAX_EVENTS 256
#define RD_MAX_VALUES 8

typedef struct rd_event {
    double wall_time;
    int64_t step;
    char file_version[64];
    int n;                          /* values */
    char tag[RD_MAX_VALUES][1100];
    float val[RD_MAX_VALUES];
} rd_event;

typedef struct rd_file {
    rd_event ev[RD_MAX_EVENTS];
    int n;
    int truncated;  /* the file ends inside a record */
    int crc_errors; /* records whose length or data CRC is wrong (reading stops) */
    int proto_errors;
} rd_file;

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t rd_mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

/* Varint at *p (bounded by end); -1 when malformed. */
static int rd_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end) return -1;
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

/* Walk the fields of one message: calls back with (field, wire, varint value,
 * pointer+length for fixed and length-delimited ones). */
typedef int (*rd_field_fn)(void *u, int field, int wire, uint64_t v, const uint8_t *p, size_t n);
static int rd_message(const uint8_t *p, size_t n, rd_field_fn fn, void *u) {
    const uint8_t *end = p + n;
    while (p < end) {
        uint64_t key, v = 0;
        if (rd_varint(&p, end, &key)) return -1;
        int field = (int)(key >> 3), wire = (int)(key & 7);
        const uint8_t *q = p;
        size_t len = 0;
        if (wire == 0) {
            if (rd_varint(&p, end, &v)) return -1;
        } else if (wire == 1 || wire == 5) {
            len = wire == 1 ? 8 : 4;
            if ((size_t)(end - p) < len) return -1;
            v = rd_le(p, (int)len);
            p += len;
        } else if (wire == 2) {
            if (rd_varint(&p, end, &v) || v > (uint64_t)(end - p)) return -1;
            q = p;
            len = (size_t)v;
            p += len;
        } else {
            return -1;
        }
        if (fn(u, field, wire, v, q, len)) return -1;
    }
    return 0;
}

static int rd_value_field(void *u, int field, int wire, uint64_t v, const uint8_t *p, size_t n) {
    rd_event *e = u;
    if (field == 1 && wire == 2 && n < sizeof e->tag[0]) {
        memcpy(e->tag[e->n], p, n);
        e->tag[e->n][n] = '\0';
    } else if (field == 2 && wire == 5) {
        uint32_t bits = (uint32_t)v;
        memcpy(&e->val[e->n], &bits, 4);
    } else {
        return -1;
    }
    return 0;
}

static int rd_summary_field(void *u, int field, int wire, uint64_t v, const uint8_t *p, size_t n) {
    (void)v;
    rd_event *e = u;
    if (field != 1 || wire != 2 || e->n >= RD_MAX_VALUES) return -1;
    if (rd_message(p, n, rd_value_field, e)) return -1;
    e->n++;
    return 0;
}

static int rd_event_field(void *u, int field, int wire, uint64_t v, const uint8_t *p, size_t n) {
    rd_event *e = u;
    if (field == 1 && wire == 1) {
        memcpy(&e->wall_time, &v, 8);
    } else if (field == 2 && wire == 0) {
        e->step = (int64_t)v;
    } else if (field == 3 && wire == 2 && n < sizeof e->file_version) {
        memcpy(e->file_version, p, n);
        e->file_version[n] = '\0';
    } else if (field == 5 && wire == 2) {
        return rd_message(p, n, rd_summary_field, e);
    } else {
        return -1;
    }
    return 0;
}

/* Read every record of path into f; 0 unless the file cannot be read. */
static int rd_read(const char *path, rd_file *f) {
    memset(f, 0, sizeof *f);
    long size = ct_tmpdir_size(path);
    if (size < 0) return -1;
    uint8_t *b = malloc((size_t)size + 1);
    if (!b || ct_tmpdir_read(path, b, (size_t)size) != size) {
        free(b);
        return -1;
    }
    size_t off = 0, total = (size_t)size;
    while (off < total) {
        if (total - off < 12) {
            f->truncated = 1;
            break;
        }
        uint64_t len = rd_le(b + off, 8);
        if ((uint32_t)rd_le(b + off + 8, 4) != rd_mask(crc_bitwise(b + off, 8))) {
            f->crc_errors++;
            break;
        }
        if (len > total - off - 12 || total - off - 12 - len < 4) {
            f->truncated = 1;
            break;
        }
        const uint8_t *data = b + off + 12;
        if ((uint32_t)rd_le(data + len, 4) != rd_mask(crc_bitwise(data, (size_t)len))) {
            f->crc_errors++;
            break;
        }
        if (f->n < RD_MAX_EVENTS) {
            if (rd_message(data, (size_t)len, rd_event_field, &f->ev[f->n])) f->proto_errors++;
            f->n++;
        }
        off += 12 + (size_t)len + 4;
    }
    free(b);
    return 0;
}

/* ------------------------------------------------------------ the files */

static rd_file g_rd; /* large: keep it off the stack */

static void test_roundtrip(const char *dir) {
    ct_tb *tb = NULL;
    CHECK(ct_tb_open(&tb, dir) == CT_OK);
    if (!tb) return;
    const char *path = ct_tb_path(tb);
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/events.out.tfevents.", dir);
    CHECK(strncmp(path, prefix, strlen(prefix)) == 0);
    CHECK(strstr(path, ".ctrain") != NULL);

    /* the file_version record is on disk before any scalar */
    CHECK(rd_read(path, &g_rd) == 0);
    CHECK(g_rd.n == 1 && g_rd.crc_errors == 0 && !g_rd.truncated);
    CHECK(strcmp(g_rd.ev[0].file_version, "brain.Event:2") == 0);

    double t0 = ct_tb_wall_time();
    char long_tag[301];
    memset(long_tag, 'x', 300);
    memcpy(long_tag, "long/", 5);
    long_tag[300] = '\0';
    CHECK(ct_tb_scalar(tb, "train/loss", 1, 2.5, t0) == CT_OK);
    const char *tags[] = {"train/lr", "train/grad_norm", long_tag};
    double vals[] = {3e-4, 1.0 / 3.0, -7.25};
    CHECK(ct_tb_scalars(tb, 2, t0 + 1.5, 3, tags, vals) == CT_OK);
    CHECK(ct_tb_scalar(tb, "val/loss", 5000000000LL, NAN, t0 + 2) == CT_OK);
    CHECK(ct_tb_scalar(tb, "memory/peak_bytes", 3, 123456789.0, t0 + 3) == CT_OK);

    /* bad arguments change nothing */
    CHECK(ct_tb_scalar(tb, "", 4, 1.0, t0) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), path) != NULL);
    CHECK(ct_tb_scalars(tb, 4, t0, 0, tags, vals) == CT_ERR_ARG);
    char huge[CT_TB_TAG_MAX + 2];
    memset(huge, 'a', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    CHECK(ct_tb_scalar(tb, huge, 4, 1.0, t0) == CT_ERR_ARG);

    CHECK(ct_tb_flush(tb) == CT_OK);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", path);
    ct_tb_close(tb);

    CHECK(rd_read(saved, &g_rd) == 0);
    CHECK_MSG(g_rd.n == 5, "%d events", g_rd.n);
    CHECK(g_rd.crc_errors == 0 && g_rd.proto_errors == 0 && !g_rd.truncated);
    if (g_rd.n != 5) return;
    rd_event *e = g_rd.ev;
    CHECK(e[0].n == 0 && fabs(e[0].wall_time - t0) < 60);
    CHECK(e[1].step == 1 && e[1].wall_time == t0 && e[1].n == 1);
    CHECK(strcmp(e[1].tag[0], "train/loss") == 0 && e[1].val[0] == 2.5f);
    CHECK(e[2].step == 2 && e[2].wall_time == t0 + 1.5 && e[2].n == 3);
    CHECK(strcmp(e[2].tag[0], "train/lr") == 0 && e[2].val[0] == (float)3e-4);
    CHECK(strcmp(e[2].tag[1], "train/grad_norm") == 0 && e[2].val[1] == (float)(1.0 / 3.0));
    CHECK(strcmp(e[2].tag[2], long_tag) == 0 && e[2].val[2] == -7.25f);
    CHECK(e[3].step == 5000000000LL && strcmp(e[3].tag[0], "val/loss") == 0 && isnan(e[3].val[0]));
    CHECK(e[4].step == 3 && e[4].val[0] == (float)123456789.0);
    CHECK(e[1].file_version[0] == '\0');

    /* one flipped byte inside a record's data is caught by the data CRC */
    long size = ct_tmpdir_size(saved);
    uint8_t *raw = malloc((size_t)size);
    CHECK(raw && ct_tmpdir_read(saved, raw, (size_t)size) == size);
    if (!raw) return;
    char copy[1100];
    snprintf(copy, sizeof copy, "%s/corrupt.bin", dir);
    size_t first = 12 + (size_t)rd_le(raw, 8) + 4; /* start of the second record */
    raw[first + 12 + 5] ^= 0x01;
    CHECK(ct_tmpdir_write(copy, raw, (size_t)size) == 0);
    CHECK(rd_read(copy, &g_rd) == 0 && g_rd.crc_errors == 1 && g_rd.n == 1);
    raw[first + 12 + 5] ^= 0x01;
    /* ... and one in a length field by the length CRC */
    raw[first + 1] ^= 0x40;
    CHECK(ct_tmpdir_write(copy, raw, (size_t)size) == 0);
    CHECK(rd_read(copy, &g_rd) == 0 && g_rd.crc_errors == 1 && g_rd.n == 1);
    raw[first + 1] ^= 0x40;
    /* a torn last record (as a crash may leave) keeps every earlier one */
    CHECK(ct_tmpdir_write(copy, raw, (size_t)size - 3) == 0);
    CHECK(rd_read(copy, &g_rd) == 0 && g_rd.truncated && g_rd.n == 4 && g_rd.crc_errors == 0);
    free(raw);
    remove(copy);
}

/* A second writer in the same directory and second gets its own file. */
static void test_two_writers(const char *dir) {
    ct_tb *a = NULL, *b = NULL;
    CHECK(ct_tb_open(&a, dir) == CT_OK);
    CHECK(ct_tb_open(&b, dir) == CT_OK);
    if (a && b) {
        CHECK(strcmp(ct_tb_path(a), ct_tb_path(b)) != 0);
        CHECK(ct_tb_scalar(a, "a", 1, 1.0, 1.0) == CT_OK);
        CHECK(ct_tb_scalar(b, "b", 1, 2.0, 1.0) == CT_OK);
    }
    ct_tb_close(a);
    ct_tb_close(b);
    CHECK(ct_tmpdir_count(dir) == 2);
}

/* Doubles beyond float32's range are stored as infinities of their sign. */
static void test_out_of_range(const char *dir) {
    ct_tb *tb = NULL;
    CHECK(ct_tb_open(&tb, dir) == CT_OK);
    if (!tb) return;
    const char *tags[] = {"big", "small", "inf", "max"};
    double vals[] = {1e300, -1e300, -INFINITY, 3.4028234663852886e38};
    CHECK(ct_tb_scalars(tb, 7, 1.0, 4, tags, vals) == CT_OK);
    CHECK(ct_tb_flush(tb) == CT_OK);
    CHECK(rd_read(ct_tb_path(tb), &g_rd) == 0 && g_rd.n == 2 && g_rd.ev[1].n == 4);
    CHECK(isinf(g_rd.ev[1].val[0]) && g_rd.ev[1].val[0] > 0);
    CHECK(isinf(g_rd.ev[1].val[1]) && g_rd.ev[1].val[1] < 0);
    CHECK(isinf(g_rd.ev[1].val[2]) && g_rd.ev[1].val[2] < 0);
    CHECK(g_rd.ev[1].val[3] == 3.4028234663852886e38f);
    ct_tb_close(tb);
}

/* Records reach the file without ct_tb_flush once CT_TB_FLUSH_RECORDS are
 * pending; a few records stay in memory until then. */
static void test_auto_flush(const char *dir) {
    ct_tb *tb = NULL;
    CHECK(ct_tb_open(&tb, dir) == CT_OK);
    if (!tb) return;
    long size0 = ct_tmpdir_size(ct_tb_path(tb));
    double t = ct_time_s();
    CHECK(ct_tb_scalar(tb, "s", 1, 1.0, 1.0) == CT_OK);
    if (ct_time_s() - t < 1.0) CHECK(ct_tmpdir_size(ct_tb_path(tb)) == size0);
    for (int i = 2; i <= CT_TB_FLUSH_RECORDS; i++) CHECK(ct_tb_scalar(tb, "s", i, 1.0, 1.0) == CT_OK);
    CHECK(rd_read(ct_tb_path(tb), &g_rd) == 0);
    CHECK_MSG(g_rd.n == 1 + CT_TB_FLUSH_RECORDS, "%d events", g_rd.n);
    ct_tb_close(tb);
}

/* A write that fails (here: the file size limit, as a full disk would) is
 * CT_ERR_IO naming the file, poisons the writer, and leaves a file whose
 * complete records still read back. */
static void test_write_error(const char *dir) {
    ct_tb *tb = NULL;
    CHECK(ct_tb_open(&tb, dir) == CT_OK);
    if (!tb) return;
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
    long size0 = ct_tmpdir_size(ct_tb_path(tb));
    struct rlimit lim = old;
    lim.rlim_cur = (rlim_t)size0 + 1000;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    ct_status st = CT_OK;
    int written = 0;
    for (int i = 1; i <= 1000 && st == CT_OK; i++) {
        st = ct_tb_scalar(tb, "train/loss", i, (double)i, 1.0);
        if (st == CT_OK) st = ct_tb_flush(tb);
        if (st == CT_OK) written = i;
    }
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, old_sig);
    CHECK(st == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), ct_tb_path(tb)) != NULL);
    CHECK(written > 0 && written < 1000);
    /* poisoned even though the limit is lifted */
    CHECK(ct_tb_scalar(tb, "train/loss", 2000, 1.0, 1.0) == CT_ERR_IO);
    CHECK(ct_tb_flush(tb) == CT_ERR_IO);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", ct_tb_path(tb));
    ct_tb_close(tb);
    CHECK(rd_read(saved, &g_rd) == 0);
    CHECK_MSG(g_rd.n == 1 + written && g_rd.crc_errors == 0, "%d events, %d written", g_rd.n,
              written);
    CHECK(g_rd.n > 1 && g_rd.ev[g_rd.n - 1].step == written);
}

static void test_open_errors(const char *dir) {
    char file[512];
    ct_tmpdir_join(file, sizeof file, dir, "plain_file");
    CHECK(ct_tmpdir_write(file, "x", 1) == 0);
    ct_tb *tb = (ct_tb *)&tb; /* must be reset to NULL */
    CHECK(ct_tb_open(&tb, file) == CT_ERR_IO);
    CHECK(tb == NULL);
    CHECK(strstr(ct_last_error(), "plain_file") != NULL);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/new/sub", dir);
    CHECK(ct_tb_open(&tb, sub) == CT_OK); /* missing directories are created */
    ct_tb_close(tb);
    ct_tb_close(NULL);
}

int main(void) {
    test_crc();
    test_varint();
    char dir[64];
    if (!ct_tmpdir_make(dir, sizeof dir, "tb")) {
        fprintf(stderr, "cannot make a temp dir\n");
        return 1;
    }
    char d1[128], d2[128], d3[128], d4[128], d5[128];
    const char *sub[] = {"rt", "two", "auto", "err", "open"};
    char *ds[] = {d1, d2, d3, d4, d5};
    for (int i = 0; i < 5; i++) {
        ct_tmpdir_join(ds[i], 128, dir, sub[i]);
        mkdir(ds[i], 0777);
    }
    test_roundtrip(d1);
    test_two_writers(d2);
    test_auto_flush(d3);
    test_out_of_range(d3);
    test_write_error(d4);
    test_open_errors(d5);
    ct_tmpdir_remove(dir);
    return ct_test_result("test_tensorboard");
}
