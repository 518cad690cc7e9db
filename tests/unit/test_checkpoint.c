/*
 * The checkpoint store on a tiny GPT-2: save / verify / latest / read_blob
 * round trips with and without zstd (bytes and weights identical, the
 * directory loads as a Hugging Face model), keep_last pruning and replacing a
 * step, damaged checkpoints (a flipped byte in the weights, a blob or the
 * manifest; a truncated or deleted file) failing verify while latest falls
 * back with a warning, signature mismatches, a full disk during save (a file
 * size limit in a forked child) leaving the earlier checkpoint intact, an
 * unwritable run directory, stale temporary directories, zstd frames that
 * pass the file hash but decode to the wrong bytes, manifests of another
 * version or format, and bad arguments.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/model.h"
#include "io/fileio.h"
#include "train/checkpoint.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <xxhash.h>
#include <zstd.h>

static char root[128];
static ct_ctx *ctx;

/* ---------------------------------------------------------------- fixtures */

typedef struct logcap {
    int warns;
    char last[2048];
} logcap;

static void log_capture(ct_log_level level, const char *msg, void *user) {
    logcap *c = user;
    if (level != CT_LOG_WARN) return;
    c->warns++;
    snprintf(c->last, sizeof c->last, "%s", msg);
}

static ct_model *tiny_model(uint64_t seed) {
    ct_model_config c;
    if (ct_model_config_preset(&c, "gpt2-tiny") != CT_OK) return NULL;
    ct_model *m = NULL;
    if (ct_model_init(&m, ctx, &c) != CT_OK) return NULL;
    ct_model_init_weights(m, seed);
    return m;
}

/* Training-state stand-ins: "optimizer" is 3 MiB (several read chunks and
 * zstd output buffers), half of it compressible; "state" is small; "empty"
 * has no bytes. */
enum { OPT_BYTES = 3 << 20, STATE_BYTES = 777 };
static uint8_t opt_bytes[OPT_BYTES], state_bytes[STATE_BYTES];

static void fill_blobs(uint64_t seed) {
    ct_rng r;
    ct_rng_init(&r, seed);
    for (size_t i = 0; i < OPT_BYTES; i++)
        opt_bytes[i] = i < OPT_BYTES / 2 ? (uint8_t)ct_rng_u32(&r) : (uint8_t)(i % 7);
    for (size_t i = 0; i < STATE_BYTES; i++) state_bytes[i] = (uint8_t)ct_rng_u32(&r);
}

static int make_blobs(ct_ckpt_blob *b) {
    b[0] = (ct_ckpt_blob){"optimizer", opt_bytes, sizeof opt_bytes};
    b[1] = (ct_ckpt_blob){"state", state_bytes, sizeof state_bytes};
    b[2] = (ct_ckpt_blob){"empty", NULL, 0};
    return 3;
}

static void make_run(char *out, size_t cap, const char *name) {
    ct_tmpdir_join(out, cap, root, name);
    CHECK(ct_mkdir_p(out) == CT_OK);
}

static ct_status save(const char *run, int64_t step, ct_model *m, bool compress, int keep_last,
                      const char *sig) {
    ct_ckpt_blob b[3];
    int n = make_blobs(b);
    ct_ckpt_opts o = ct_ckpt_opts_default();
    o.compress = compress;
    o.keep_last = keep_last;
    o.signature = sig;
    return ct_ckpt_save(run, step, m, b, n, &o, NULL, 0);
}

static void step_dir(char *out, size_t cap, const char *run, int64_t step) {
    snprintf(out, cap, "%s/checkpoints/step_%08lld", run, (long long)step);
}

/* The weights in dir load as a Hugging Face model equal to m's. */
static bool loads_same(const char *dir, ct_model *m) {
    ct_model *l = NULL;
    if (ct_model_load_hf(&l, ctx, dir) != CT_OK) {
        fprintf(stderr, "load %s: %s\n", dir, ct_last_error());
        return false;
    }
    bool same = ct_model_numel(l) == ct_model_numel(m) &&
                memcmp(ct_model_params(l), ct_model_params(m),
                       ct_model_numel(m) * sizeof(float)) == 0;
    ct_model_free(l);
    return same;
}

static void flip_byte(const char *path, long offset) {
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL);
    if (!fp) return;
    fseek(fp, offset, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, offset, SEEK_SET);
    fputc(c ^ 0x10, fp);
    fclose(fp);
}

static bool read_blob_equals(const char *dir, const char *name, const void *want, size_t n) {
    void *got = NULL;
    size_t size = 1;
    ct_status st = ct_ckpt_read_blob(dir, name, &got, &size);
    bool ok = st == CT_OK && got && size == n && (n == 0 || memcmp(got, want, n) == 0);
    if (st) fprintf(stderr, "read_blob %s: %s\n", name, ct_last_error());
    free(got);
    return ok;
}

/* ---------------------------------------------------------------- tests */

static void test_round_trip(bool compress) {
    char run[256], out[512], sig[512], p[768];
    make_run(run, sizeof run, compress ? "rt_zstd" : "rt_raw");
    ct_model *m = tiny_model(11);
    CHECK(m != NULL);
    if (!m) return;
    CHECK(ct_ckpt_signature(m, sig, sizeof sig) == CT_OK);
    CHECK(strstr(sig, "gpt2") && strstr(sig, "n_layer=2"));
    fill_blobs(5);
    ct_ckpt_blob b[3];
    int n = make_blobs(b);
    ct_ckpt_opts o = {.compress = compress, .keep_last = 0, .signature = sig};
    CHECK(ct_ckpt_save(run, 42, m, b, n, &o, out, sizeof out) == CT_OK);
    char want[512];
    step_dir(want, sizeof want, run, 42);
    CHECK_MSG(strcmp(out, want) == 0, "%s", out);
    /* the files, and nothing else (generation_config.json: a GPT-2 carries its
     * <|endoftext|> as bos and eos) */
    CHECK(ct_tmpdir_count(out) == 7);
    const char *files[] = {"config.json", "model.safetensors", "generation_config.json",
                           "MANIFEST.json",
                           compress ? "optimizer.bin.zst" : "optimizer.bin",
                           compress ? "state.bin.zst" : "state.bin",
                           compress ? "empty.bin.zst" : "empty.bin"};
    for (int i = 0; i < 7; i++) CHECK_MSG(ct_tmpdir_size(ct_tmpdir_join(p, sizeof p, out, files[i])) >= 0, "%s", files[i]);
    ct_tmpdir_join(p, sizeof p, run, "checkpoints");
    CHECK(ct_tmpdir_count(p) == 1); /* no temporary directory left */
    long opt_size = ct_tmpdir_size(ct_tmpdir_join(p, sizeof p, out, files[4]));
    if (compress) {
        /* a zstd frame, smaller than the raw bytes (half of them repeat) */
        unsigned char magic[4] = {0};
        CHECK(ct_tmpdir_read(p, magic, 4) == 4);
        CHECK(magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd);
        CHECK_MSG(opt_size < (long)OPT_BYTES * 3 / 4, "%ld", opt_size);
    } else {
        CHECK(opt_size == (long)OPT_BYTES);
    }
    int64_t step = -1;
    CHECK(ct_ckpt_verify(out, sig, &step) == CT_OK && step == 42);
    CHECK(ct_ckpt_verify(out, NULL, NULL) == CT_OK);
    char latest[512] = "";
    step = -1;
    CHECK(ct_ckpt_latest(run, sig, latest, sizeof latest, &step) == CT_OK);
    CHECK(step == 42 && strcmp(latest, out) == 0);
    CHECK(read_blob_equals(out, "optimizer", opt_bytes, OPT_BYTES));
    CHECK(read_blob_equals(out, "state", state_bytes, STATE_BYTES));
    CHECK(read_blob_equals(out, "empty", NULL, 0));
    CHECK(loads_same(out, m));
    /* asking for what is not there */
    void *d = (void *)1;
    size_t sz = 1;
    CHECK(ct_ckpt_read_blob(out, "nope", &d, &sz) == CT_ERR_FORMAT && d == NULL && sz == 0);
    CHECK(strstr(ct_last_error(), "nope") != NULL);
    CHECK(ct_ckpt_read_blob(out, "../state", &d, &sz) == CT_ERR_ARG);
    int64_t *steps = NULL;
    int ns = 0;
    CHECK(ct_ckpt_list(run, &steps, &ns) == CT_OK && ns == 1 && steps && steps[0] == 42);
    free(steps);
    ct_model_free(m);
}

static void expect_steps(const char *run, const int64_t *want, int n) {
    int64_t *steps = NULL;
    int got = 0;
    CHECK(ct_ckpt_list(run, &steps, &got) == CT_OK);
    bool same = got == n;
    for (int i = 0; same && i < n; i++) same = steps[i] == want[i];
    CHECK_MSG(same, "got %d steps, first %lld", got, got ? (long long)steps[0] : -1LL);
    free(steps);
}

static void test_keep_last(void) {
    char run[256], ck[512], dir[512];
    make_run(run, sizeof run, "keep");
    ct_model *m = tiny_model(3);
    if (!m) return;
    fill_blobs(1);
    for (int s = 1; s <= 5; s++) CHECK(save(run, s, m, false, 2, NULL) == CT_OK);
    expect_steps(run, (int64_t[]){4, 5}, 2);
    /* an older step just written is kept, the oldest of the rest goes */
    CHECK(save(run, 3, m, true, 2, NULL) == CT_OK);
    expect_steps(run, (int64_t[]){3, 5}, 2);
    /* keep_last 0 keeps everything */
    CHECK(save(run, 6, m, false, 0, NULL) == CT_OK);
    expect_steps(run, (int64_t[]){3, 5, 6}, 3);
    /* saving an existing step replaces it */
    ct_model_params(m)[0] += 1.0f;
    fill_blobs(2);
    CHECK(save(run, 5, m, false, 0, NULL) == CT_OK);
    expect_steps(run, (int64_t[]){3, 5, 6}, 3);
    step_dir(dir, sizeof dir, run, 5);
    CHECK(ct_ckpt_verify(dir, NULL, NULL) == CT_OK);
    CHECK(read_blob_equals(dir, "state", state_bytes, STATE_BYTES));
    CHECK(loads_same(dir, m));
    ct_tmpdir_join(ck, sizeof ck, run, "checkpoints");
    CHECK(ct_tmpdir_count(ck) == 3);
    /* keep_last 1 leaves only the new one */
    CHECK(save(run, 7, m, false, 1, NULL) == CT_OK);
    expect_steps(run, (int64_t[]){7}, 1);
    CHECK(ct_tmpdir_count(ck) == 1);
    ct_model_free(m);
}

typedef enum damage {
    DMG_WEIGHTS,
    DMG_BLOB,
    DMG_ZBLOB,
    DMG_MANIFEST_STEP,
    DMG_MANIFEST_HASH,
    DMG_TRUNCATE,
    DMG_DELETE,
    DMG_NO_MANIFEST,
    DMG_COUNT
} damage;

static void test_damage(damage kind) {
    static const char *names[DMG_COUNT] = {"weights", "blob", "zblob", "man_step",
                                           "man_hash", "truncate", "delete", "no_manifest"};
    static const ct_status want[DMG_COUNT] = {CT_ERR_FORMAT, CT_ERR_FORMAT, CT_ERR_FORMAT,
                                              CT_ERR_FORMAT, CT_ERR_FORMAT, CT_ERR_FORMAT,
                                              CT_ERR_IO, CT_ERR_IO};
    char run[256], good[512], bad[512], p[768], rn[64];
    snprintf(rn, sizeof rn, "dmg_%s", names[kind]);
    make_run(run, sizeof run, rn);
    ct_model *m = tiny_model(21);
    if (!m) return;
    fill_blobs(9);
    bool z = kind == DMG_ZBLOB;
    CHECK(save(run, 100, m, z, 0, "sig") == CT_OK);
    CHECK(save(run, 200, m, z, 0, "sig") == CT_OK);
    step_dir(good, sizeof good, run, 100);
    step_dir(bad, sizeof bad, run, 200);
    CHECK(ct_ckpt_verify(bad, "sig", NULL) == CT_OK);
    const char *hit = NULL; /* the file the error must name */
    switch (kind) {
    case DMG_WEIGHTS:
        hit = "model.safetensors";
        ct_tmpdir_join(p, sizeof p, bad, hit);
        flip_byte(p, ct_tmpdir_size(p) - 5);
        break;
    case DMG_BLOB:
        hit = "optimizer.bin";
        flip_byte(ct_tmpdir_join(p, sizeof p, bad, hit), 1234567);
        break;
    case DMG_ZBLOB:
        hit = "optimizer.bin.zst";
        ct_tmpdir_join(p, sizeof p, bad, hit);
        flip_byte(p, ct_tmpdir_size(p) / 2);
        break;
    case DMG_MANIFEST_STEP:
    case DMG_MANIFEST_HASH: {
        /* still valid JSON: only the manifest's own hash can tell */
        hit = "MANIFEST.json";
        char text[8192] = {0};
        ct_tmpdir_join(p, sizeof p, bad, hit);
        CHECK(ct_tmpdir_read(p, text, sizeof text - 1) > 0);
        const char *at = strstr(text, kind == DMG_MANIFEST_STEP ? "\"step\": 200" : "\"manifest_xxh64\": \"");
        CHECK(at != NULL);
        if (!at) break;
        long off = (long)(at - text) + (kind == DMG_MANIFEST_STEP ? 8 : 19);
        text[off] = text[off] == '1' ? '3' : '1'; /* step 200 -> 100; a hex digit changes */
        CHECK(ct_tmpdir_write(p, text, strlen(text)) == 0);
        break;
    }
    case DMG_TRUNCATE:
        hit = "state.bin";
        CHECK(truncate(ct_tmpdir_join(p, sizeof p, bad, hit), STATE_BYTES - 1) == 0);
        break;
    case DMG_DELETE:
        hit = "state.bin";
        CHECK(unlink(ct_tmpdir_join(p, sizeof p, bad, hit)) == 0);
        break;
    case DMG_NO_MANIFEST:
        hit = "MANIFEST.json";
        CHECK(unlink(ct_tmpdir_join(p, sizeof p, bad, hit)) == 0);
        break;
    default:
        break;
    }
    ct_status st = ct_ckpt_verify(bad, "sig", NULL);
    CHECK_MSG(st == want[kind], "%s: status %d: %s", names[kind], (int)st, ct_last_error());
    CHECK_MSG(hit && strstr(ct_last_error(), hit), "%s: %s", names[kind], ct_last_error());
    /* latest falls back to the older one, with one warning naming the bad one */
    logcap cap = {0};
    ct_log_set(log_capture, &cap);
    char latest[512] = "";
    int64_t step = -1;
    st = ct_ckpt_latest(run, "sig", latest, sizeof latest, &step);
    ct_log_set(NULL, NULL);
    CHECK_MSG(st == CT_OK && step == 100 && strcmp(latest, good) == 0, "%s: %s", names[kind],
              ct_last_error());
    CHECK(cap.warns == 1 && strstr(cap.last, "step_00000200") && strstr(cap.last, hit));
    /* a damaged blob is refused by read_blob too */
    if (kind == DMG_BLOB || kind == DMG_ZBLOB) {
        void *d = NULL;
        size_t sz = 0;
        CHECK(ct_ckpt_read_blob(bad, "optimizer", &d, &sz) == CT_ERR_FORMAT && d == NULL);
        CHECK(strstr(ct_last_error(), hit) != NULL);
        CHECK(read_blob_equals(bad, "state", state_bytes, STATE_BYTES)); /* the others are fine */
    }
    /* damage the older one too: nothing valid is left */
    if (kind == DMG_WEIGHTS) {
        CHECK(unlink(ct_tmpdir_join(p, sizeof p, good, "config.json")) == 0);
        cap.warns = 0;
        ct_log_set(log_capture, &cap);
        st = ct_ckpt_latest(run, "sig", latest, sizeof latest, &step);
        ct_log_set(NULL, NULL);
        CHECK(st == CT_ERR_IO && cap.warns == 2);
        CHECK(strstr(ct_last_error(), "no valid checkpoint") && strstr(ct_last_error(), run));
    }
    ct_model_free(m);
}

/* Replace file `name` of checkpoint dir with n bytes and re-seal the manifest
 * (the entry's size and xxh64, then the manifest's own hash), as a writer with
 * a bug would: verify passes, and only read_blob's decoding checks remain. */
static void reseal(const char *dir, const char *name, const void *data, size_t n) {
    char p[768], text[8192] = {0}, entry[256], out[8192];
    CHECK(ct_tmpdir_write(ct_tmpdir_join(p, sizeof p, dir, name), data, n) == 0);
    ct_tmpdir_join(p, sizeof p, dir, "MANIFEST.json");
    CHECK(ct_tmpdir_read(p, text, sizeof text - 1) > 0);
    snprintf(entry, sizeof entry, "{\"name\": \"%s\", \"size\": ", name);
    char *at = strstr(text, entry), *hash_at = at ? strstr(at, "\"xxh64\": \"") : NULL;
    CHECK(at && hash_at);
    if (!at || !hash_at) return;
    int k = snprintf(out, sizeof out, "%.*s%s%zu, \"xxh64\": \"%016llx%s", (int)(at - text), text,
                     entry, n, (unsigned long long)XXH64(data, n, 0), hash_at + 10 + 16);
    char *key = strstr(out, "\"manifest_xxh64\": \"");
    CHECK(k > 0 && key != NULL);
    if (!key) return;
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH64(out, (size_t)(key - out), 0));
    memcpy(key + 19, hex, 16);
    CHECK(ct_tmpdir_write(p, out, strlen(out)) == 0);
}

/* Frames that pass the stored-file hash but decode wrongly are refused by
 * verify (so resume falls back to an older checkpoint) and by read_blob. */
static void test_bad_frames(void) {
    char run[256], dir[512], latest[512];
    make_run(run, sizeof run, "frames");
    ct_model *m = tiny_model(5);
    if (!m) return;
    fill_blobs(7);
    CHECK(save(run, 1, m, true, 0, NULL) == CT_OK);
    CHECK(save(run, 2, m, true, 0, NULL) == CT_OK);
    step_dir(dir, sizeof dir, run, 2);
    CHECK(read_blob_equals(dir, "state", state_bytes, STATE_BYTES));
    static uint8_t raw[STATE_BYTES + 1], frame[4096];
    memcpy(raw, state_bytes, STATE_BYTES);
    raw[STATE_BYTES] = 1;
    const struct { size_t raw_n; int tweak; const char *says; } cases[] = {
        {STATE_BYTES + 1, 0, "more bytes"},
        {STATE_BYTES - 1, 0, "fewer bytes"},
        {STATE_BYTES, 1, "after the end"},     /* a stray byte after the frame */
        {STATE_BYTES, 2, "raw_xxh64"},         /* same size, other bytes */
        {STATE_BYTES, 3, ""},                  /* not zstd at all */
    };
    for (int i = 0; i < 5; i++) {
        if (cases[i].tweak == 2) raw[0] ^= 1;
        size_t n = ZSTD_compress(frame, sizeof frame, raw, cases[i].raw_n, 3);
        if (cases[i].tweak == 2) raw[0] ^= 1;
        CHECK(!ZSTD_isError(n));
        if (ZSTD_isError(n)) continue;
        if (cases[i].tweak == 1) frame[n++] = 0x55;
        if (cases[i].tweak == 3) memset(frame, 0x55, n);
        reseal(dir, "state.bin.zst", frame, n);
        CHECK(ct_ckpt_verify(dir, NULL, NULL) == CT_ERR_FORMAT);
        CHECK_MSG(strstr(ct_last_error(), "state.bin.zst") && strstr(ct_last_error(), cases[i].says),
                  "case %d: verify: %s", i, ct_last_error());
        int64_t got = -1;
        CHECK(ct_ckpt_latest(run, NULL, latest, sizeof latest, &got) == CT_OK && got == 1);
        void *d = NULL;
        size_t sz = 0;
        CHECK(ct_ckpt_read_blob(dir, "state", &d, &sz) == CT_ERR_FORMAT && d == NULL);
        CHECK_MSG(strstr(ct_last_error(), "state.bin.zst") && strstr(ct_last_error(), cases[i].says),
                  "case %d: %s", i, ct_last_error());
    }
    ct_model_free(m);
}

/* Manifests of another version or of something else entirely. */
static void test_foreign_manifest(void) {
    char run[256], dir[512], p[768];
    make_run(run, sizeof run, "foreign");
    ct_model *m = tiny_model(6);
    if (!m) return;
    fill_blobs(8);
    CHECK(save(run, 3, m, false, 0, NULL) == CT_OK);
    step_dir(dir, sizeof dir, run, 3);
    ct_tmpdir_join(p, sizeof p, dir, "MANIFEST.json");
    const char *newer = "{\"format\": \"ctrain-checkpoint\", \"version\": 2}";
    CHECK(ct_tmpdir_write(p, newer, strlen(newer)) == 0);
    CHECK(ct_ckpt_verify(dir, NULL, NULL) == CT_ERR_FORMAT);
    CHECK_MSG(strstr(ct_last_error(), "version 2") && strstr(ct_last_hint(), "newer"), "%s",
              ct_last_error());
    const char *other = "{\"format\": \"something\", \"version\": 1}";
    CHECK(ct_tmpdir_write(p, other, strlen(other)) == 0);
    CHECK(ct_ckpt_verify(dir, NULL, NULL) == CT_ERR_FORMAT);
    CHECK(strstr(ct_last_error(), "not a checkpoint manifest") && strstr(ct_last_error(), p));
    void *d = NULL;
    size_t sz = 0;
    CHECK(ct_ckpt_read_blob(dir, "state", &d, &sz) == CT_ERR_FORMAT && d == NULL);
    ct_model_free(m);
}

static void test_signature(void) {
    char run[256], dir[512], sig_a[512], sig_b[512];
    make_run(run, sizeof run, "sig");
    ct_model *a = tiny_model(1);
    ct_model_config c;
    ct_model_config_gpt2(&c, 1, 2, 16, 50, 8);
    ct_model *b = NULL;
    CHECK(ct_model_init(&b, ctx, &c) == CT_OK);
    if (!a || !b) return;
    CHECK(ct_ckpt_signature(a, sig_a, sizeof sig_a) == CT_OK);
    CHECK(ct_ckpt_signature(b, sig_b, sizeof sig_b) == CT_OK);
    CHECK(strcmp(sig_a, sig_b) != 0);
    CHECK(ct_ckpt_signature(a, sig_b, 8) == CT_ERR_ARG);
    fill_blobs(4);
    CHECK(save(run, 1, a, false, 0, sig_a) == CT_OK);
    step_dir(dir, sizeof dir, run, 1);
    CHECK(ct_ckpt_signature(b, sig_b, sizeof sig_b) == CT_OK);
    CHECK(ct_ckpt_verify(dir, sig_b, NULL) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), sig_a) && strstr(ct_last_error(), sig_b));
    /* latest does not fall back past a checkpoint of another model */
    CHECK(ct_ckpt_latest(run, sig_b, NULL, 0, NULL) == CT_ERR_ARG);
    /* no signature recorded */
    CHECK(save(run, 2, a, false, 0, NULL) == CT_OK);
    step_dir(dir, sizeof dir, run, 2);
    CHECK(ct_ckpt_verify(dir, sig_a, NULL) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "no signature") != NULL);
    CHECK(ct_ckpt_verify(dir, "", NULL) == CT_OK);
    ct_model_free(a);
    ct_model_free(b);
}

/* Save step 2 in a child whose files may not grow past `limit` bytes. */
static void test_full_disk(long limit, bool compress) {
    char run[256], ck[512], dir[512], rn[64];
    snprintf(rn, sizeof rn, "full_%ld_%d", limit, (int)compress);
    make_run(run, sizeof run, rn);
    ct_model *m = tiny_model(8);
    if (!m) return;
    fill_blobs(6);
    CHECK(save(run, 1, m, compress, 1, NULL) == CT_OK);
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim;
        getrlimit(RLIMIT_FSIZE, &lim);
        lim.rlim_cur = (rlim_t)limit;
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(3);
        ct_model_params(m)[0] += 1.0f; /* different weights than step 1 */
        ct_status st = save(run, 2, m, compress, 1, NULL);
        const char *msg = ct_last_error();
        ssize_t w = write(fds[1], msg, strlen(msg));
        (void)w;
        _exit(st == CT_ERR_IO ? 0 : st == CT_OK ? 1 : 2);
    }
    close(fds[1]);
    char msg[2048] = {0};
    size_t got = 0;
    for (ssize_t k; (k = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0;) got += (size_t)k;
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "limit %ld: status %d: %s", limit,
              status, msg);
    CHECK_MSG(strstr(msg, run) && strstr(msg, "too large"), "%s", msg);
    /* nothing of step 2 is left; step 1 still verifies and loads the old weights */
    ct_tmpdir_join(ck, sizeof ck, run, "checkpoints");
    CHECK_MSG(ct_tmpdir_count(ck) == 1, "limit %ld: %d entries", limit, ct_tmpdir_count(ck));
    step_dir(dir, sizeof dir, run, 1);
    CHECK(ct_ckpt_verify(dir, NULL, NULL) == CT_OK);
    CHECK(loads_same(dir, m));
    CHECK(read_blob_equals(dir, "optimizer", opt_bytes, OPT_BYTES));
    ct_model_free(m);
}

static void test_unwritable(void) {
    char file[256], run[512];
    ct_tmpdir_join(file, sizeof file, root, "plainfile");
    CHECK(ct_tmpdir_write(file, "x", 1) == 0);
    ct_tmpdir_join(run, sizeof run, file, "run");
    ct_model *m = tiny_model(2);
    if (!m) return;
    fill_blobs(2);
    CHECK(save(run, 1, m, false, 0, NULL) == CT_ERR_IO);
    CHECK_MSG(strstr(ct_last_error(), run) != NULL, "%s", ct_last_error());
    /* nothing there: list is empty, latest says so */
    int64_t *steps = (int64_t *)1;
    int n = 5;
    ct_tmpdir_join(run, sizeof run, root, "never_made");
    CHECK(ct_ckpt_list(run, &steps, &n) == CT_OK && n == 0 && steps == NULL);
    CHECK(ct_ckpt_latest(run, NULL, NULL, 0, NULL) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), "no valid checkpoint") && strstr(ct_last_error(), run));
    ct_model_free(m);
}

static void test_stale_tmp(void) {
    char run[256], ck[512], p[768], q[900];
    make_run(run, sizeof run, "stale");
    ct_tmpdir_join(ck, sizeof ck, run, "checkpoints");
    CHECK(ct_mkdir_p(ck) == CT_OK);
    pid_t dead = fork(); /* a pid that has just exited */
    if (dead == 0) _exit(0);
    CHECK(dead > 0 && waitpid(dead, NULL, 0) == dead);
    const struct { const char *fmt; long pid; bool stays_after_list; } dirs[] = {
        {"step_00000007.tmp-%ld", (long)dead, false},          /* writer died */
        {"step_00000008.tmp-x%ld", 0, false},                  /* not a pid at all */
        {"step_00000009.tmp-%ld", (long)getpid(), true},       /* ours: only save removes it */
        {"step_00000010.tmp-%ld-pruned", (long)getppid(), true} /* a live writer's */
    };
    for (int i = 0; i < 4; i++) {
        char name[128];
        snprintf(name, sizeof name, dirs[i].fmt, dirs[i].pid);
        CHECK(ct_mkdir_p(ct_tmpdir_join(p, sizeof p, ck, name)) == CT_OK);
        CHECK(ct_tmpdir_write(ct_tmpdir_join(q, sizeof q, p, "model.safetensors"), "junk", 4) == 0);
    }
    int64_t *steps = NULL;
    int n = -1;
    CHECK(ct_ckpt_list(run, &steps, &n) == CT_OK && n == 0);
    free(steps);
    CHECK(ct_tmpdir_count(ck) == 2);
    ct_model *m = tiny_model(4);
    if (!m) return;
    fill_blobs(3);
    CHECK(save(run, 1, m, false, 0, NULL) == CT_OK);
    CHECK(ct_tmpdir_count(ck) == 2); /* step_00000001 and the live writer's */
    char live[128];
    snprintf(live, sizeof live, dirs[3].fmt, dirs[3].pid);
    CHECK(ct_tmpdir_size(ct_tmpdir_join(p, sizeof p, ck, live)) >= 0);
    ct_model_free(m);
}

static void test_bad_args(void) {
    char run[256], ck[512], small[8];
    make_run(run, sizeof run, "args");
    ct_model *m = tiny_model(1);
    if (!m) return;
    ct_ckpt_blob b[2] = {{"a/b", "x", 1}, {"ok", "y", 1}};
    CHECK(ct_ckpt_save(run, 1, m, b, 1, NULL, NULL, 0) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "a/b") != NULL);
    b[0].name = "ok";
    CHECK(ct_ckpt_save(run, 1, m, b, 2, NULL, NULL, 0) == CT_ERR_ARG);
    b[0].name = "";
    CHECK(ct_ckpt_save(run, 1, m, b, 1, NULL, NULL, 0) == CT_ERR_ARG);
    CHECK(ct_ckpt_save(run, -1, m, NULL, 0, NULL, NULL, 0) == CT_ERR_ARG);
    CHECK(ct_ckpt_save(run, 1, m, NULL, 0, NULL, small, sizeof small) == CT_ERR_ARG);
    CHECK(ct_ckpt_save("", 1, m, NULL, 0, NULL, NULL, 0) == CT_ERR_ARG);
    ct_tmpdir_join(ck, sizeof ck, run, "checkpoints");
    CHECK(ct_tmpdir_size(ck) == -1); /* refused before touching the disk */
    /* weights only, no blobs, defaults */
    CHECK(ct_ckpt_save(run, 0, m, NULL, 0, NULL, NULL, 0) == CT_OK);
    CHECK(ct_ckpt_latest(run, NULL, small, sizeof small, NULL) == CT_ERR_ARG);
    ct_model_free(m);
}

int main(void) {
    if (!ct_tmpdir_make(root, sizeof root, "ckpt")) {
        fprintf(stderr, "cannot create a temp dir\n");
        return 1;
    }
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = 1;
    if (ct_ctx_init(&ctx, &cp) != CT_OK) return 1;
    test_round_trip(false);
    test_round_trip(true);
    test_keep_last();
    for (int k = 0; k < DMG_COUNT; k++) test_damage((damage)k);
    test_bad_frames();
    test_foreign_manifest();
    test_signature();
    /* the weights file of gpt2-tiny is ~60 KB: fail inside it, then inside the
     * optimizer blob (3 MiB raw, ~1.6 MiB compressed) */
    test_full_disk(20000, false);
    test_full_disk(1000000, false);
    test_full_disk(1000000, true);
    test_unwritable();
    test_stale_tmp();
    test_bad_args();
    ct_ctx_free(ctx);
    ct_tmpdir_remove(root);
    return ct_test_result("test_checkpoint");
}
