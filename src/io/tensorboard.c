/*
 * TensorBoard event-file writer (format and durability in tensorboard.h):
 * hand-encoded protobuf Events framed as TFRecords with table-driven CRC-32C.
 * Leaves out: the SSE4.2 crc32 instruction (records are tens of bytes, so the
 * table is fast enough) and every summary kind but scalars.
 */
#include "io/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/fileio.h"

#define TB_FILE_VERSION "brain.Event:2"
#define TB_MAX_SUFFIX 100 /* events files tried per (second, host, pid) */

/* Protobuf wire types and the keys (field << 3 | wire type) this file writes. */
enum {
    TB_WIRE_VARINT = 0,
    TB_WIRE_FIXED64 = 1,
    TB_WIRE_LEN = 2,
    TB_WIRE_FIXED32 = 5,
};
#define TB_KEY(field, wire) ((uint8_t)(((field) << 3) | (wire)))

struct ct_tb {
    int fd;               /* the event file, opened O_APPEND */
    char *path;           /* the event file */
    uint8_t *pend;        /* encoded records not yet written to fd */
    size_t pend_len;      /* bytes of pend in use */
    size_t pend_cap;      /* bytes of pend allocated */
    int64_t unflushed;    /* records in pend */
    double last_flush;    /* ct_time_s() of the last write to fd */
    bool failed;          /* a write failed: every later call refuses */
    char err[160];        /* what failed, for the refusals */
};

/* CRC-32C lookup table: entry i is the reflected CRC (polynomial 0x82f63b78)
 * of the byte i, generated once by the bitwise definition and checked against
 * it in tests/unit/test_tensorboard.c. */
static const uint32_t tb_crc_table[256] = {
    0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
    0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
    0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
    0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
    0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
    0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
    0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
    0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
    0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
    0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
    0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
    0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
    0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
    0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
    0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
    0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
    0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
    0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
    0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
    0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
    0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
    0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
    0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
    0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
    0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
    0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
    0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
    0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
    0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
    0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
    0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
    0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
    0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
    0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
    0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
    0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
    0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
    0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
    0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
    0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
    0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
    0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
    0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

uint32_t ct_tb_crc32c(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = tb_crc_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

uint32_t ct_tb_crc_mask(uint32_t crc) {
    /* rotate right by 15, then add a constant (wraps mod 2^32) */
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

size_t ct_tb_put_varint(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80); /* low 7 bits, more to come */
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static size_t tb_varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void tb_put_le(uint8_t *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

double ct_tb_wall_time(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (double)time(NULL);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *ct_tb_path(const ct_tb *tb) { return tb->path; }

/* ------------------------------------------------------------ encoding */

/* Appends to a buffer whose size the caller computed beforehand. */
typedef struct tb_out {
    uint8_t *p;
} tb_out;

static void tb_emit_key(tb_out *o, uint8_t key) { *o->p++ = key; }
static void tb_emit_varint(tb_out *o, uint64_t v) { o->p += ct_tb_put_varint(o->p, v); }
static void tb_emit_bytes(tb_out *o, const void *data, size_t n) {
    memcpy(o->p, data, n);
    o->p += n;
}
static void tb_emit_double(tb_out *o, double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    tb_put_le(o->p, bits, 8);
    o->p += 8;
}
static void tb_emit_float(tb_out *o, float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    tb_put_le(o->p, bits, 4);
    o->p += 4;
}

/* double to float32, saturating to +-infinity instead of the undefined
 * out-of-range conversion. */
static float tb_to_float(double x) {
    if (x > FLT_MAX) return INFINITY;
    if (x < -FLT_MAX) return -INFINITY;
    return (float)x;
}

/* Bytes of one Summary.Value {tag, simple_value}. */
static size_t tb_value_size(size_t tag_len) {
    return 1 + tb_varint_len(tag_len) + tag_len + 1 + 4;
}

/* Make room at the end of tb->pend for a record of `data_len` bytes of
 * Event plus the 16 framing bytes; returns where the record starts. */
static ct_status tb_reserve(ct_tb *tb, size_t data_len, uint8_t **rec) {
    size_t need = tb->pend_len + data_len + 16;
    if (need > tb->pend_cap) {
        size_t cap = tb->pend_cap ? tb->pend_cap : 4096;
        while (cap < need) cap *= 2;
        uint8_t *b = realloc(tb->pend, cap);
        if (!b) return CT_ERR(CT_ERR_OOM, "%s: out of memory for a %zu-byte event", tb->path, need);
        tb->pend = b;
        tb->pend_cap = cap;
    }
    *rec = tb->pend + tb->pend_len;
    return CT_OK;
}

/* ---------------------------------------------------------------- writing */

/* Thread-safe strerror into a caller buffer (XSI strerror_r). */
static const char *tb_strerror(int err, char *buf, size_t len) {
    if (strerror_r(err, buf, len) != 0) snprintf(buf, len, "error %d", err);
    return buf;
}

static ct_status tb_refuse(const ct_tb *tb) {
    ct_status st = CT_ERR(CT_ERR_IO, "%s: an earlier write failed (%s); no more events are "
                          "written to this file", tb->path, tb->err);
    ct_error_hint("check the free space of the run directory's disk");
    return st;
}

/* Record a failed write (errno err) and poison the writer. */
static ct_status tb_fail(ct_tb *tb, const char *what, int err) {
    char ebuf[96];
    snprintf(tb->err, sizeof tb->err, "%s: %s", what, tb_strerror(err, ebuf, sizeof ebuf));
    tb->failed = true;
    ct_status st = CT_ERR(CT_ERR_IO, "%s: %s", tb->path, tb->err);
    if (err == ENOSPC || err == EDQUOT || err == EFBIG)
        ct_error_hint("the disk (or quota, or file size limit) is full: free space or set "
                      "run.dir somewhere else");
    return st;
}

/* Write every pending byte to the file (retrying short writes) and empty the
 * pending buffer either way. Returns 0 or the errno of the failure; touches
 * no error state, so ct_tb_close can use it. */
static int tb_write_pending(ct_tb *tb) {
    size_t done = 0;
    int err = 0;
    while (done < tb->pend_len) {
        ssize_t w = write(tb->fd, tb->pend + done, tb->pend_len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            err = w < 0 ? errno : EIO;
            break;
        }
        done += (size_t)w;
    }
    tb->pend_len = 0;
    tb->unflushed = 0;
    tb->last_flush = ct_time_s();
    return err;
}

/* tb_write_pending; a failure poisons the writer, so nothing follows a record
 * that may be torn. */
static ct_status tb_write_out(ct_tb *tb) {
    int err = tb_write_pending(tb);
    return err ? tb_fail(tb, "write failed", err) : CT_OK;
}

/* Frame the data_len bytes of Event at rec + 12 as a TFRecord, keep it
 * pending, and write out when the record or time budget is spent. */
static ct_status tb_add_record(ct_tb *tb, uint8_t *rec, size_t data_len) {
    tb_put_le(rec, data_len, 8);
    tb_put_le(rec + 8, ct_tb_crc_mask(ct_tb_crc32c(0, rec, 8)), 4);
    tb_put_le(rec + 12 + data_len, ct_tb_crc_mask(ct_tb_crc32c(0, rec + 12, data_len)), 4);
    tb->pend_len += data_len + 16;
    tb->unflushed++;
    if (tb->unflushed >= CT_TB_FLUSH_RECORDS || ct_time_s() - tb->last_flush >= CT_TB_FLUSH_SECONDS)
        return tb_write_out(tb);
    return CT_OK;
}

ct_status ct_tb_scalars(ct_tb *tb, int64_t step, double wall_time, int n,
                        const char *const *tags, const double *vals) {
    if (tb->failed) return tb_refuse(tb);
    if (n < 1) return CT_ERR(CT_ERR_ARG, "%s: an event needs at least one value (n = %d)", tb->path, n);
    size_t summary_len = 0;
    for (int i = 0; i < n; i++) {
        size_t tl = tags[i] ? strlen(tags[i]) : 0;
        if (tl == 0 || tl > CT_TB_TAG_MAX)
            return CT_ERR(CT_ERR_ARG, "%s: scalar tag %d is %s: expected 1..%d bytes", tb->path, i,
                          tl ? "too long" : "empty", CT_TB_TAG_MAX);
        size_t vs = tb_value_size(tl);
        summary_len += 1 + tb_varint_len(vs) + vs;
    }
    uint64_t ustep = (uint64_t)step; /* int64 varints carry two's complement */
    size_t event_len = (1 + 8) + (1 + tb_varint_len(ustep)) +
                       (1 + tb_varint_len(summary_len) + summary_len);
    uint8_t *rec = NULL;
    ct_status st = tb_reserve(tb, event_len, &rec);
    if (st) return st;

    tb_out o = {rec + 12};
    tb_emit_key(&o, TB_KEY(1, TB_WIRE_FIXED64)); /* Event.wall_time */
    tb_emit_double(&o, wall_time);
    tb_emit_key(&o, TB_KEY(2, TB_WIRE_VARINT)); /* Event.step */
    tb_emit_varint(&o, ustep);
    tb_emit_key(&o, TB_KEY(5, TB_WIRE_LEN)); /* Event.summary */
    tb_emit_varint(&o, summary_len);
    for (int i = 0; i < n; i++) {
        size_t tl = strlen(tags[i]);
        tb_emit_key(&o, TB_KEY(1, TB_WIRE_LEN)); /* Summary.value */
        tb_emit_varint(&o, tb_value_size(tl));
        tb_emit_key(&o, TB_KEY(1, TB_WIRE_LEN)); /* Value.tag */
        tb_emit_varint(&o, tl);
        tb_emit_bytes(&o, tags[i], tl);
        tb_emit_key(&o, TB_KEY(2, TB_WIRE_FIXED32)); /* Value.simple_value */
        tb_emit_float(&o, tb_to_float(vals[i]));
    }
    CT_ASSERT((size_t)(o.p - (rec + 12)) == event_len);
    return tb_add_record(tb, rec, event_len);
}

ct_status ct_tb_scalar(ct_tb *tb, const char *tag, int64_t step, double value,
                       double wall_time) {
    return ct_tb_scalars(tb, step, wall_time, 1, &tag, &value);
}

ct_status ct_tb_flush(ct_tb *tb) {
    if (tb->failed) return tb_refuse(tb);
    ct_status st = tb_write_out(tb);
    if (st) return st;
    if (fsync(tb->fd) != 0) return tb_fail(tb, "fsync failed", errno);
    return CT_OK;
}

void ct_tb_close(ct_tb *tb) {
    if (!tb) return;
    if (tb->fd >= 0) {
        /* no error reporting here: the caller's last error must survive */
        if (!tb->failed && tb_write_pending(tb) == 0) (void)fsync(tb->fd);
        close(tb->fd);
    }
    free(tb->pend);
    free(tb->path);
    free(tb);
}

/* ------------------------------------------------------------------ open */

/* The host name with anything but [A-Za-z0-9._-] replaced by '_', so it is
 * safe inside a file name; "localhost" when unknown. */
static void tb_hostname(char *out, size_t len) {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    size_t i = 0;
    for (; host[i] && i + 1 < len; i++) {
        char c = host[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_';
        out[i] = ok ? c : '_';
    }
    out[i] = '\0';
}

/* Create the event file exclusively (never truncating one that exists) and
 * fill tb->path and tb->fd. */
static ct_status tb_create(ct_tb *tb, const char *dir) {
    char host[128];
    tb_hostname(host, sizeof host);
    long long now = (long long)time(NULL);
    long pid = (long)getpid();
    for (int k = 0; k < TB_MAX_SUFFIX; k++) {
        char suffix[16] = "";
        if (k) snprintf(suffix, sizeof suffix, ".%d", k);
        const char *fmt = "%s/events.out.tfevents.%lld.%s.%ld.ctrain%s";
        int len = snprintf(NULL, 0, fmt, dir, now, host, pid, suffix);
        if (len < 0) return CT_ERR(CT_ERR_ARG, "%s: cannot form an event file name", dir);
        free(tb->path);
        tb->path = malloc((size_t)len + 1);
        if (!tb->path) return CT_ERR(CT_ERR_OOM, "out of memory for the event file name");
        snprintf(tb->path, (size_t)len + 1, fmt, dir, now, host, pid, suffix);
        int fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) {
            char ebuf[96];
            ct_status st = CT_ERR(CT_ERR_IO, "%s: cannot create the TensorBoard event file: %s",
                                  tb->path, tb_strerror(errno, ebuf, sizeof ebuf));
            ct_error_hint("check that run.dir is writable");
            return st;
        }
        tb->fd = fd;
        return CT_OK;
    }
    return CT_ERR(CT_ERR_IO, "%s: %d event files of this second, host and process exist already",
                  tb->path, TB_MAX_SUFFIX);
}

/* fsync the directory so the new file's name survives a crash. */
static ct_status tb_sync_dir(const char *dir) {
    char ebuf[96];
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CT_ERR(CT_ERR_IO, "%s: cannot open directory to fsync: %s", dir,
                      tb_strerror(errno, ebuf, sizeof ebuf));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    /* some file systems refuse fsync on directories; that is not an error */
    if (rc != 0 && err != EINVAL && err != EROFS)
        return CT_ERR(CT_ERR_IO, "%s: directory fsync failed: %s", dir,
                      tb_strerror(err, ebuf, sizeof ebuf));
    return CT_OK;
}

ct_status ct_tb_open(ct_tb **out, const char *dir) {
    *out = NULL;
    ct_status st = ct_mkdir_p(dir);
    if (st) return st;
    ct_tb *tb = calloc(1, sizeof *tb);
    if (!tb) return CT_ERR(CT_ERR_OOM, "out of memory for the TensorBoard writer");
    tb->fd = -1;
    tb->last_flush = ct_time_s();
    if ((st = tb_create(tb, dir))) goto fail;

    /* the first Event: {wall_time, file_version} */
    size_t vlen = strlen(TB_FILE_VERSION);
    size_t event_len = (1 + 8) + (1 + tb_varint_len(vlen) + vlen);
    uint8_t *rec = NULL;
    if ((st = tb_reserve(tb, event_len, &rec))) goto fail;
    tb_out o = {rec + 12};
    tb_emit_key(&o, TB_KEY(1, TB_WIRE_FIXED64)); /* Event.wall_time */
    tb_emit_double(&o, ct_tb_wall_time());
    tb_emit_key(&o, TB_KEY(3, TB_WIRE_LEN)); /* Event.file_version */
    tb_emit_varint(&o, vlen);
    tb_emit_bytes(&o, TB_FILE_VERSION, vlen);
    CT_ASSERT((size_t)(o.p - (rec + 12)) == event_len);
    if ((st = tb_add_record(tb, rec, event_len))) goto fail;
    if ((st = ct_tb_flush(tb))) goto fail;
    if ((st = tb_sync_dir(dir))) goto fail;
    *out = tb;
    return CT_OK;
fail:
    if (tb->fd >= 0) {
        close(tb->fd);
        remove(tb->path); /* a file that is not a complete event file helps nobody */
    }
    free(tb->pend);
    free(tb->path);
    free(tb);
    return st;
}
