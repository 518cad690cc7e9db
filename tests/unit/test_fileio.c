/*
 * File helper tests: atomic write and read-back, the temp file's life cycle
 * (present while writing, gone after commit or abort), failed writes (a file
 * size limit stands in for a full disk) leaving the target untouched, a failed
 * rename, ct_file_read_all on odd inputs, ct_file_map (contents and each
 * error's wording) and ct_mkdir_p.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "io/fileio.h"

#include <cJSON.h>

#include <signal.h>
#include <string.h>
#include <sys/resource.h>

static char tmpdir[128];

static void test_atomic_round_trip(void) {
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmpdir, "a.txt");
    const char data[] = "hello\0world\n"; /* embedded NUL: binary-safe */
    CHECK(ct_file_write_atomic(p, data, sizeof data - 1) == CT_OK);
    char *got = NULL;
    size_t len = 0;
    CHECK(ct_file_read_all(p, &got, &len) == CT_OK);
    CHECK(len == sizeof data - 1 && got && memcmp(got, data, len) == 0 && got[len] == '\0');
    free(got);
    /* overwrite */
    CHECK(ct_file_write_atomic(p, "new", 3) == CT_OK);
    CHECK(ct_file_read_all(p, &got, NULL) == CT_OK);
    CHECK(got && strcmp(got, "new") == 0);
    free(got);
    /* empty file */
    CHECK(ct_file_write_atomic(p, NULL, 0) == CT_OK);
    CHECK(ct_file_read_all(p, &got, &len) == CT_OK);
    CHECK(len == 0 && got && got[0] == '\0');
    free(got);
    CHECK(ct_tmpdir_count(tmpdir) == 1);
    CHECK(unlink(p) == 0);
}

static void test_afile_life_cycle(void) {
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmpdir, "b.bin");
    ct_afile *f = NULL;
    CHECK(ct_afile_open(&f, p) == CT_OK);
    if (!f) return;
    /* 3 MiB in odd pieces: crosses the stdio buffer several times */
    static uint8_t chunk[300007];
    for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (uint8_t)(i * 31 + 7);
    for (int k = 0; k < 10; k++) CHECK(ct_afile_write(f, chunk, sizeof chunk) == CT_OK);
    CHECK(ct_afile_tell(f) == 10 * (int64_t)sizeof chunk);
    CHECK(ct_tmpdir_size(p) == -1);     /* target not there yet */
    CHECK(ct_tmpdir_count(tmpdir) == 1); /* only the temp file */
    CHECK(ct_afile_commit(f) == CT_OK);
    CHECK(ct_tmpdir_size(p) == 10 * (long)sizeof chunk);
    CHECK(ct_tmpdir_count(tmpdir) == 1);
    char *got = NULL;
    size_t len = 0;
    CHECK(ct_file_read_all(p, &got, &len) == CT_OK);
    CHECK(len == 10 * sizeof chunk && got && memcmp(got + 9 * sizeof chunk, chunk, sizeof chunk) == 0);
    free(got);

    /* abort: the old file stays, the temp file goes */
    CHECK(ct_afile_open(&f, p) == CT_OK);
    CHECK(ct_afile_write(f, "xyz", 3) == CT_OK);
    CHECK(ct_tmpdir_count(tmpdir) == 2);
    ct_afile_abort(f);
    ct_afile_abort(NULL);
    CHECK(ct_tmpdir_count(tmpdir) == 1);
    CHECK(ct_tmpdir_size(p) == 10 * (long)sizeof chunk);
    CHECK(unlink(p) == 0);
}

/* A file size limit makes writes fail with EFBIG, as a full disk would with
 * ENOSPC: the error names the path, and the target is never touched. */
static void test_write_failure(void) {
    char p[512];
    ct_tmpdir_join(p, sizeof p, tmpdir, "c.bin");
    CHECK(ct_file_write_atomic(p, "old", 3) == CT_OK);
    struct rlimit old;
    if (getrlimit(RLIMIT_FSIZE, &old) != 0) return;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 100000;
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
        signal(SIGXFSZ, prev);
        return;
    }
    static uint8_t big[400000];
    /* failure inside write (the stdio buffer overflows and flushes) */
    ct_afile *f = NULL;
    CHECK(ct_afile_open(&f, p) == CT_OK);
    ct_status st = CT_OK;
    for (int k = 0; k < 8 && st == CT_OK; k++) st = ct_afile_write(f, big, sizeof big);
    CHECK(st == CT_ERR_IO);
    CHECK_MSG(strstr(ct_last_error(), p) != NULL, "%s", ct_last_error());
    CHECK_MSG(strstr(ct_last_error(), "too large") != NULL, "%s", ct_last_error());
    CHECK(ct_afile_write(f, "x", 1) == CT_ERR_IO); /* poisoned */
    CHECK(ct_afile_commit(f) == CT_ERR_IO);        /* refuses, cleans up */
    /* failure only at commit (the data sat in the buffer) */
    CHECK(ct_afile_open(&f, p) == CT_OK);
    CHECK(ct_afile_write(f, big, 200000) == CT_OK);
    CHECK(ct_afile_commit(f) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), p) != NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    /* the old content survived; no temp file left */
    char *got = NULL;
    CHECK(ct_file_read_all(p, &got, NULL) == CT_OK);
    CHECK(got && strcmp(got, "old") == 0);
    free(got);
    CHECK(ct_tmpdir_count(tmpdir) == 1);
    CHECK(unlink(p) == 0);
}

static void test_errors(void) {
    char p[512], q[512];
    /* the target is a directory: rename fails, temp file removed */
    ct_tmpdir_join(p, sizeof p, tmpdir, "adir");
    CHECK(ct_mkdir_p(p) == CT_OK);
    ct_tmpdir_join(q, sizeof q, p, "inner");
    CHECK(ct_file_write_atomic(q, "x", 1) == CT_OK); /* non-empty: rename cannot replace it */
    CHECK(ct_file_write_atomic(p, "data", 4) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), p) != NULL);
    CHECK(ct_tmpdir_count(tmpdir) == 1);
    /* missing directory */
    ct_tmpdir_join(p, sizeof p, tmpdir, "nope/file");
    CHECK(ct_file_write_atomic(p, "data", 4) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), p) != NULL);
    char *got = (char *)"sentinel";
    CHECK(ct_file_read_all(p, &got, NULL) == CT_ERR_IO);
    CHECK(got == NULL);
    CHECK(strstr(ct_last_error(), p) && strstr(ct_last_error(), "No such file"));
    CHECK(ct_file_read_all(tmpdir, &got, NULL) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), "directory") != NULL);
    CHECK(ct_file_read_all("", &got, NULL) == CT_ERR_ARG);
    ct_afile *f = NULL;
    CHECK(ct_afile_open(&f, "") == CT_ERR_ARG && f == NULL);
}

static void test_file_map(void) {
    char p[512];
    const void *map = NULL;
    size_t len = 0;
    int before = ct_tmpdir_count(tmpdir);
    static const ct_file_map_msgs msgs = {
        .noun = "widget",
        .missing_hint = "make a widget first",
        .short_what = "header of a widget",
        .short_hint = "the widget is truncated",
    };
    ct_tmpdir_join(p, sizeof p, tmpdir, "map.bin");
    CHECK(ct_file_write_atomic(p, "0123456789", 10) == CT_OK);
    CHECK(ct_file_map(p, 10, &msgs, &map, &len) == CT_OK);
    CHECK(map && len == 10 && memcmp(map, "0123456789", 10) == 0);
    ct_file_unmap(map, len);
    /* too short: the caller's wording and hint; outputs reset */
    map = p;
    len = 99;
    CHECK(ct_file_map(p, 11, &msgs, &map, &len) == CT_ERR_FORMAT);
    CHECK(map == NULL && len == 0);
    CHECK_MSG(strstr(ct_last_error(), "map.bin: file is 10 bytes, shorter than the 11-byte "
                     "header of a widget") != NULL, "%s", ct_last_error());
    CHECK(strcmp(ct_last_hint(), "the widget is truncated") == 0);
    CHECK(ct_file_map(p, 11, NULL, &map, &len) == CT_ERR_FORMAT);
    CHECK_MSG(strstr(ct_last_error(), "shorter than the 11-byte minimum") != NULL, "%s",
              ct_last_error());
    CHECK(ct_last_hint()[0] == '\0');
    /* empty file: nothing to map, fine when min_bytes is 0 */
    CHECK(ct_file_write_atomic(p, NULL, 0) == CT_OK);
    map = p;
    CHECK(ct_file_map(p, 0, NULL, &map, &len) == CT_OK);
    CHECK(map == NULL && len == 0);
    ct_file_unmap(map, len);
    CHECK(ct_file_map(p, 1, &msgs, &map, &len) == CT_ERR_FORMAT);
    CHECK(strstr(ct_last_error(), "file is 0 bytes") != NULL);
    CHECK(unlink(p) == 0);
    /* missing: the noun and the missing-file hint */
    CHECK(ct_file_map(p, 0, &msgs, &map, &len) == CT_ERR_IO);
    CHECK_MSG(strstr(ct_last_error(), "map.bin: cannot open widget: No such file") != NULL, "%s",
              ct_last_error());
    CHECK(strcmp(ct_last_hint(), "make a widget first") == 0);
    CHECK(ct_file_map(p, 0, NULL, &map, &len) == CT_ERR_IO);
    CHECK_MSG(strstr(ct_last_error(), "map.bin: cannot open: No such file") != NULL, "%s",
              ct_last_error());
    CHECK(ct_last_hint()[0] == '\0');
    /* a directory; an empty path */
    CHECK(ct_file_map(tmpdir, 0, &msgs, &map, &len) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), "not a regular file") != NULL);
    CHECK(ct_file_map("", 0, NULL, &map, &len) == CT_ERR_ARG);
    CHECK(map == NULL && len == 0);
    ct_file_unmap(NULL, 0);
    CHECK(ct_tmpdir_count(tmpdir) == before);
}

static void test_mkdir_p(void) {
    char p[512], q[512];
    ct_tmpdir_join(p, sizeof p, tmpdir, "m/n//o/");
    CHECK(ct_mkdir_p(p) == CT_OK);
    CHECK(ct_mkdir_p(p) == CT_OK); /* exists: fine */
    ct_tmpdir_join(q, sizeof q, tmpdir, "m/n/o");
    struct stat sb;
    CHECK(stat(q, &sb) == 0 && S_ISDIR(sb.st_mode));
    /* a component that is a file */
    ct_tmpdir_join(q, sizeof q, tmpdir, "m/file");
    CHECK(ct_file_write_atomic(q, "x", 1) == CT_OK);
    ct_tmpdir_join(p, sizeof p, tmpdir, "m/file/sub");
    CHECK(ct_mkdir_p(p) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), "not a directory") != NULL);
    CHECK(ct_mkdir_p(q) == CT_ERR_IO);
    CHECK(ct_mkdir_p("") == CT_ERR_ARG);
    CHECK(ct_mkdir_p("/") == CT_OK);
}

/* A JSON object file: read, or refused naming the path and what was found. */
static void test_json_object(void) {
    char p[512];
    cJSON *o = NULL;
    ct_tmpdir_join(p, sizeof p, tmpdir, "o.json");
    const char *good = "{\"a\": 1}";
    CHECK(ct_file_write_atomic(p, good, strlen(good)) == CT_OK);
    CHECK(ct_json_read_object(p, &o) == CT_OK && cJSON_IsObject(o));
    CHECK(cJSON_GetObjectItemCaseSensitive(o, "a")->valuedouble == 1);
    cJSON_Delete(o);
    const char *torn = "{\"a\": 1, \"b\"";
    CHECK(ct_file_write_atomic(p, torn, strlen(torn)) == CT_OK);
    CHECK(ct_json_read_object(p, &o) == CT_ERR_FORMAT && o == NULL);
    CHECK(strstr(ct_last_error(), p) && strstr(ct_last_error(), "byte offset"));
    CHECK(ct_file_write_atomic(p, "[1, 2]", 6) == CT_OK);
    CHECK(ct_json_read_object(p, &o) == CT_ERR_FORMAT && o == NULL);
    CHECK(strstr(ct_last_error(), "another JSON value") != NULL);
    ct_tmpdir_join(p, sizeof p, tmpdir, "missing.json");
    CHECK(ct_json_read_object(p, &o) == CT_ERR_IO && o == NULL);
    ct_tmpdir_join(p, sizeof p, tmpdir, "o.json");
    CHECK(remove(p) == 0);
}

int main(void) {
    if (!ct_tmpdir_make(tmpdir, sizeof tmpdir, "fileio")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    test_atomic_round_trip();
    test_afile_life_cycle();
    test_write_failure();
    test_errors();
    test_file_map();
    test_mkdir_p();
    test_json_object();
    CHECK(ct_tmpdir_remove(tmpdir) == 0);
    return ct_test_result("test_fileio");
}
