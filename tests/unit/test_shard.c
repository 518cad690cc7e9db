/*
 * Token shard tests: v1 and v2 round trips (exact header bytes, tokens via
 * ct_shard_token and ct_shard_read), llm.c's LLaMA-3 variant, and the errors:
 * bad magic, unknown version, zero tokens, truncated, trailing bytes, short
 * header, missing file, out-of-range reads, tokens too large for version 1.
 */
#include "core/dtype.h"
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "data/shard/shard.h"

#include <stdint.h>
#include <string.h>

static char tmpdir[128];

/* A shard file from raw header fields and ntok_bytes bytes of tokens. */
static void craft(const char *path, int32_t magic, int32_t version, int32_t ntok,
                  size_t tok_bytes) {
    size_t total = CT_SHARD_HEADER_BYTES + tok_bytes;
    uint8_t *buf = calloc(1, total);
    ct_le_store_u32(buf, (uint32_t)magic);
    ct_le_store_u32(buf + 4, (uint32_t)version);
    ct_le_store_u32(buf + 8, (uint32_t)ntok);
    for (size_t i = 0; i < tok_bytes; i++) buf[CT_SHARD_HEADER_BYTES + i] = (uint8_t)(i * 7);
    CHECK(ct_tmpdir_write(path, buf, total) == 0);
    free(buf);
}

static void expect_fail_at(int line, const char *path, ct_status code, const char *frag1,
                           const char *frag2) {
    ct_shard *s = (ct_shard *)(uintptr_t)1;
    ct_error_clear();
    ct_status st = ct_shard_open(&s, path);
    const char *msg = ct_last_error();
    CHECK_MSG(st == code, "line %d: status %d, expected %d; message: %s", line, st, code, msg);
    CHECK_MSG(s == NULL, "line %d: *out not NULL on failure", line);
    CHECK_MSG(strstr(msg, path) != NULL, "line %d: message lacks the path: %s", line, msg);
    if (frag1) CHECK_MSG(strstr(msg, frag1) != NULL, "line %d: message lacks '%s': %s", line, frag1, msg);
    if (frag2) CHECK_MSG(strstr(msg, frag2) != NULL, "line %d: message lacks '%s': %s", line, frag2, msg);
    if (st == CT_OK) ct_shard_close(s);
}
#define EXPECT_FAIL(path, code, f1, f2) expect_fail_at(__LINE__, path, code, f1, f2)

static void test_round_trip(int version) {
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmpdir, version == 1 ? "v1.bin" : "v2.bin");
    enum { N = 100003 }; /* more than one write chunk, odd */
    uint32_t *tok = malloc(sizeof *tok * N);
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)((i * 2654435761u) % (version == 1 ? 65536u : 200000u));
    tok[0] = 50256;
    tok[1] = version == 1 ? 65535 : 150000;
    tok[2] = 0;
    CHECK(ct_shard_write(p, tok, N, version) == CT_OK);
    int tsize = version == 1 ? 2 : 4;
    CHECK(ct_tmpdir_size(p) == CT_SHARD_HEADER_BYTES + (long)N * tsize);

    /* header bytes as llm.c writes them */
    uint8_t head[CT_SHARD_HEADER_BYTES];
    CHECK(ct_tmpdir_read(p, head, sizeof head) == (long)sizeof head);
    CHECK(ct_le_load_u32(head) == 20240520u);
    CHECK(ct_le_load_u32(head + 4) == (uint32_t)version);
    CHECK(ct_le_load_u32(head + 8) == (uint32_t)N);
    int nonzero = 0;
    for (int i = 12; i < CT_SHARD_HEADER_BYTES; i++) nonzero += head[i] != 0;
    CHECK(nonzero == 0);

    ct_shard *s = NULL;
    CHECK(ct_shard_open(&s, p) == CT_OK);
    if (!s) {
        free(tok);
        return;
    }
    CHECK(strcmp(ct_shard_path(s), p) == 0);
    CHECK(ct_shard_ntokens(s) == N);
    CHECK(ct_shard_token_bytes(s) == tsize);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += ct_shard_token(s, i) != tok[i];
    CHECK(bad == 0);
    int32_t *out = malloc(sizeof *out * N);
    CHECK(ct_shard_read(s, 0, N, out) == CT_OK);
    bad = 0;
    for (int i = 0; i < N; i++) bad += out[i] != (int32_t)tok[i];
    CHECK(bad == 0);
    CHECK(ct_shard_read(s, N - 5, 5, out) == CT_OK && out[4] == (int32_t)tok[N - 1]);
    CHECK(ct_shard_read(s, N, 0, out) == CT_OK);
    CHECK(ct_shard_read(s, N - 5, 6, out) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), p) != NULL);
    CHECK(ct_shard_read(s, -1, 2, out) == CT_ERR_ARG);
    CHECK(ct_shard_read(s, 0, -1, out) == CT_ERR_ARG);
    ct_shard_close(s);
    ct_shard_close(NULL);
    free(out);
    free(tok);
}

static void test_errors(void) {
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmpdir, "bad.bin");

    craft(p, 12345, 1, 4, 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "bad magic number 12345, expected 20240520 (an llm.c token shard)", NULL);
    craft(p, 20240520, 3, 4, 16);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "version 3", "expected 1");
    craft(p, 20240520, 0, 4, 8);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "version 0", NULL);
    craft(p, 20240801, 1, 4, 8); /* llama-3 magic needs version 7 */
    EXPECT_FAIL(p, CT_ERR_FORMAT, "version 1", NULL);
    craft(p, 20240520, 1, 0, 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "no tokens", NULL);
    craft(p, 20240520, 1, -3, 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "negative", NULL);
    craft(p, 20240520, 1, 10, 19); /* one byte short */
    EXPECT_FAIL(p, CT_ERR_FORMAT, "truncated", "10 tokens");
    craft(p, 20240520, 2, 10, 20); /* v2 needs 40 bytes */
    EXPECT_FAIL(p, CT_ERR_FORMAT, "truncated", "10 tokens of 4 bytes");
    craft(p, 20240520, 1, 10, 21);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "1 trailing bytes", NULL);
    CHECK(ct_tmpdir_write(p, "\x28\xd4\x34\x01", 4) == 0); /* magic only */
    EXPECT_FAIL(p, CT_ERR_FORMAT, "shorter than the 1024-byte header", NULL);
    CHECK(ct_tmpdir_write(p, "", 0) == 0);
    EXPECT_FAIL(p, CT_ERR_FORMAT, "0 bytes", NULL);

    ct_tmpdir_join(p, sizeof p, tmpdir, "missing.bin");
    EXPECT_FAIL(p, CT_ERR_IO, "No such file", NULL);
    EXPECT_FAIL(tmpdir, CT_ERR_IO, "not a regular file", NULL);

    /* llm.c's LLaMA-3 shards: magic 20240801, version 7, uint32 tokens */
    ct_tmpdir_join(p, sizeof p, tmpdir, "llama3.bin");
    craft(p, 20240801, 7, 3, 12);
    ct_shard *s = NULL;
    CHECK(ct_shard_open(&s, p) == CT_OK);
    if (s) {
        CHECK(ct_shard_ntokens(s) == 3 && ct_shard_token_bytes(s) == 4);
        CHECK(ct_shard_token(s, 0) == 0x150e0700u); /* bytes 0, 7, 14, 21 */
        ct_shard_close(s);
    }

    /* v2 token above INT32_MAX: token() returns it, read() into int32 refuses */
    ct_tmpdir_join(p, sizeof p, tmpdir, "huge.bin");
    uint32_t big[3] = {1, 4000000000u, 2};
    CHECK(ct_shard_write(p, big, 3, 2) == CT_OK);
    CHECK(ct_shard_open(&s, p) == CT_OK);
    if (s) {
        int32_t out[3];
        CHECK(ct_shard_token(s, 1) == 4000000000u);
        CHECK(ct_shard_read(s, 0, 3, out) == CT_ERR_FORMAT);
        CHECK(strstr(ct_last_error(), "4000000000") && strstr(ct_last_error(), "position 1"));
        CHECK(ct_shard_read(s, 2, 1, out) == CT_OK && out[0] == 2);
        ct_shard_close(s);
    }

    /* writer argument errors: nothing is created */
    ct_tmpdir_join(p, sizeof p, tmpdir, "w.bin");
    uint32_t t[4] = {5, 65535, 70000, 9};
    CHECK(ct_shard_write(p, t, 4, 1) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "70000") && strstr(ct_last_error(), "position 2"));
    CHECK(strstr(ct_last_error(), p) != NULL);
    CHECK(ct_shard_write(p, t, 4, 3) == CT_ERR_ARG);
    CHECK(ct_shard_write(p, t, 0, 2) == CT_ERR_ARG);
    CHECK(ct_shard_write(p, NULL, 4, 2) == CT_ERR_ARG);
    CHECK(ct_tmpdir_size(p) == -1);
    CHECK(ct_shard_write(p, t, 4, 2) == CT_OK); /* fine as version 2 */
    /* into a directory that does not exist */
    ct_tmpdir_join(p, sizeof p, tmpdir, "nodir/x.bin");
    CHECK(ct_shard_write(p, t, 2, 1) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), p) != NULL);
}

int main(void) {
    if (!ct_tmpdir_make(tmpdir, sizeof tmpdir, "shard")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_round_trip(1);
    test_round_trip(2);
    test_errors();
    /* only the files the tests wrote remain: no temp files */
    CHECK(ct_tmpdir_count(tmpdir) == 6);
    CHECK(ct_tmpdir_remove(tmpdir) == 0);
    return ct_test_result("test_shard");
}
