/* io/config: YAML + overrides, errors that name the file, line and key. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_test.h"
#include "ctrain/config.h"

static char dir[64];

static const char *write_file(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

/* Like write_file, for text that holds NUL bytes. */
static const char *write_bytes(const char *name, const char *data, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    return path;
}

/* CHECK that the last error is exactly "<dir>/<name>:<rest>". */
#define CHECK_ERROR_IS(name, rest)                                                       \
    do {                                                                                 \
        char want_[2048];                                                                \
        snprintf(want_, sizeof want_, "%s/%s:%s", dir, name, rest);                      \
        CHECK_MSG(strcmp(ct_last_error(), want_) == 0, "got '%s', want '%s'",           \
                  ct_last_error(), want_);                                               \
    } while (0)

/* A key `depth` mappings deep: k1:\n  k2:\n ... kD: 1, each name `width`
 * characters long (k1 padded with x). Fills path with the dotted key path of
 * the first `upto` names. */
static char *nested_yaml(int depth, int width, int upto, char *path, size_t path_n) {
    size_t cap = (size_t)depth * ((size_t)depth * 2 + (size_t)width + 8) + 16;
    char *y = calloc(1, cap);
    size_t used = 0;
    path[0] = '\0';
    for (int d = 1; d <= depth; d++) {
        char name[128];
        int n = snprintf(name, sizeof name, "k%d", d);
        while (n < width) name[n++] = 'x';
        name[n] = '\0';
        used += (size_t)snprintf(y + used, cap - used, "%*s%s:%s\n", 2 * (d - 1), "", name,
                                 d == depth ? " 1" : "");
        if (d <= upto) {
            if (d > 1) strncat(path, ".", path_n - strlen(path) - 1);
            strncat(path, name, path_n - strlen(path) - 1);
        }
    }
    return y;
}

/* Hostile strings for a string key: each must survive set -> YAML -> load. */
static const char *hostile[] = {
    "a\nb", "line\n", "\n", "\n\n", "tab\there", "\t", "crlf\r\n", "cr\r", "\a\b\v\f\x1b",
    "\x01\x02\x1f\x7f", "\"quoted\"", "\"", "'single'", "'", "back\\slash", "\\", "\\n", "\\\"",
    " lead", "trail ", " ", "   ", "a  b", "a\t", "#hash", "a #b", "a# b", "a #", "key: value",
    "a:b", ":", "a:", "-", "--", "- x", "-x", "?", "? x", "---", "--- x", "...", "[a, b]", "]",
    "{a: 1}", "}", "a,b", ",", "&anchor", "*alias", "!tag", "!!str x", "|", "|-\n  x", ">", "%pct",
    "@at", "`tick`", "=", "<<", "~", "~/x", "true", "false", "True", "FALSE", "yes", "No", "on",
    "OFF", "y", "n", "Y", "null", "Null", "NULL", "1", "0", "-1", "+1", "1.5", ".5", "1e3", "inf",
    "-inf", "nan", ".inf", "-.inf", ".nan", ".NaN", "0x1F", "0o17", "0b101", "1_000", "2024-01-01",
    "2024-01-01T00:00:00Z", "12:30:00", "64x128", "runs/latest", "./x", "../x", "/abs/path", "a b",
    "donn\xc3\xa9" "es/\xc3\xa9t\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "emoji \xf0\x9f\x98\x80",
    "nel\xc2\x85", "\xc2\x85", "ls\xe2\x80\xa8ps\xe2\x80\xa9", "\xef\xbb\xbf", "bom\xef\xbb\xbfmid",
    "c1\xc2\x80\xc2\x9f", "\xef\xbf\xbe\xef\xbf\xbf", "\xef\xbf\xbd", "\xc2\xa0nbsp\xc2\xa0", "",
    "a\\\nb\"c'd#e: f",
};
static const char *hostile_keys[] = {"run.dir", "data.train", "lora.targets", "model.preset",
                                     "model.init_from", "tune.settings", "debug.bad_steps"};

/* set -> ct_config_to_yaml -> load gives back the same value and config.
 * Returns 1 when the value does not fit the key (skipped), 0 when it round
 * trips, -1 (after a CHECK failure) when it does not. */
static int round_trip(const char *key, const char *value) {
    ct_config v, w;
    ct_config_default(&v);
    ct_config_default(&w);
    ct_status st = ct_config_set(&v, key, value, "test");
    if (st != CT_OK) {
        CHECK_MSG(strstr(ct_last_error(), "too long") != NULL, "%s = '%s': %s", key, value,
                  ct_last_error());
        return 1;
    }
    char *yaml = ct_config_to_yaml(&v);
    CHECK(yaml != NULL);
    if (!yaml) return -1;
    const char *p = write_file("round_hostile.yaml", yaml);
    st = ct_config_load_yaml(&w, p);
    bool same = st == CT_OK && memcmp(&v, &w, sizeof v) == 0;
    CHECK_MSG(same, "%s = '%s' does not round-trip: %s", key, value,
              st ? ct_last_error() : "loads back changed");
    free(yaml);
    return same ? 0 : -1;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ct_config_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    ct_config c;
    ct_config_default(&c);
    CHECK(c.train.batch_size == 4 && !c.data.shuffle && strcmp(c.schedule.name, "constant") == 0);

    const char *good = write_file("good.yaml",
                                  "model:\n  preset: gpt2-tiny\n  n_layer: 3\n"
                                  "data:\n  train: \"a b.bin\"\n  shuffle: true\n"
                                  "optim:\n  lr: 1e-3\n  weight_decay: 0.1\n"
                                  "schedule:\n  name: cosine\n"
                                  "run:\n  dir: ~\n");
    CHECK(ct_config_load_yaml(&c, good) == CT_OK);
    CHECK(strcmp(c.model.preset, "gpt2-tiny") == 0 && c.model.n_layer == 3);
    CHECK(strcmp(c.data.train, "a b.bin") == 0 && c.data.shuffle);
    CHECK(c.optim.lr == 1e-3 && c.optim.weight_decay == 0.1);
    CHECK(strcmp(c.schedule.name, "cosine") == 0);
    CHECK(strcmp(c.run.dir, "runs/latest") == 0); /* null keeps the default */

    /* overrides win and are typed */
    CHECK(ct_config_apply_override(&c, "train.batch_size=8") == CT_OK && c.train.batch_size == 8);
    CHECK(ct_config_apply_override(&c, "train.steps=1e3") == CT_OK && c.train.steps == 1000);
    CHECK(ct_config_apply_override(&c, "data.shuffle=false") == CT_OK && !c.data.shuffle);

    /* unknown key: names it and suggests the closest */
    CHECK(ct_config_apply_override(&c, "optim.lrr=1") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "optim.lrr") != NULL);
    CHECK(strstr(ct_last_hint(), "optim.lr") != NULL);
    CHECK(ct_config_apply_override(&c, "train.batch=1") == CT_ERR_ARG);
    CHECK(strstr(ct_last_hint(), "train.batch_size") != NULL);
    /* a close key of the same section wins over an equal leaf elsewhere */
    CHECK(ct_config_apply_override(&c, "lora.rank=8") == CT_ERR_ARG);
    CHECK(strstr(ct_last_hint(), "'lora.r'") != NULL);
    /* ... but a leaf that only exists in another section is still found */
    CHECK(ct_config_apply_override(&c, "train.lr=1") == CT_ERR_ARG);
    CHECK(strstr(ct_last_hint(), "'optim.lr'") != NULL);
    /* wrong types and ranges */
    CHECK(ct_config_apply_override(&c, "train.batch_size=four") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "expected an integer") != NULL);
    CHECK(ct_config_apply_override(&c, "train.batch_size=2.5") == CT_ERR_ARG);
    CHECK(ct_config_apply_override(&c, "train.batch_size=0") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "out of range") != NULL);
    CHECK(ct_config_apply_override(&c, "optim.lr=abc") == CT_ERR_ARG);
    CHECK(ct_config_apply_override(&c, "optim.lr=nan") == CT_ERR_ARG);
    CHECK(ct_config_apply_override(&c, "data.shuffle=maybe") == CT_ERR_ARG);
    CHECK(ct_config_apply_override(&c, "schedule.name=exp") == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "constant|cosine|linear|onecycle") != NULL);
    CHECK(ct_config_apply_override(&c, "novalue") == CT_ERR_ARG);
    CHECK(c.train.batch_size == 8); /* failed sets change nothing */

    /* YAML errors name the file and line */
    const char *bad_key = write_file("bad_key.yaml", "train:\n  steps: 5\n  batchsize: 3\n");
    CHECK(ct_config_load_yaml(&c, bad_key) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "bad_key.yaml:3") != NULL);
    CHECK(strstr(ct_last_error(), "train.batchsize") != NULL);
    CHECK(strstr(ct_last_hint(), "train.batch_size") != NULL);
    const char *bad_type = write_file("bad_type.yaml", "optim:\n  lr: fast\n");
    CHECK(ct_config_load_yaml(&c, bad_type) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "bad_type.yaml:2") && strstr(ct_last_error(), "optim.lr"));
    const char *bad_yaml = write_file("bad.yaml", "optim:\n  lr: [1, 2\n");
    CHECK(ct_config_load_yaml(&c, bad_yaml) != CT_OK);
    CHECK(strstr(ct_last_error(), "bad.yaml") != NULL);
    CHECK(ct_config_load_yaml(&c, "/nonexistent/x.yaml") == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), "/nonexistent/x.yaml") != NULL);

    /* cross-key validation */
    ct_config v;
    ct_config_default(&v);
    v.train.steps = 10;
    v.schedule.warmup_steps = 20;
    CHECK(ct_config_validate(&v) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "schedule.warmup_steps") != NULL);

    ct_config_default(&v);
    CHECK(ct_config_validate(&v) == CT_OK);
    CHECK(ct_config_apply_override(&v, "run.memory_limit=12GB") == CT_OK);
    CHECK(ct_config_validate(&v) == CT_OK);
    CHECK(ct_config_apply_override(&v, "run.memory_limit=lots") == CT_OK);
    CHECK(ct_config_validate(&v) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "run.memory_limit") != NULL);
    CHECK(ct_config_apply_override(&v, "run.memory_limit=150%") == CT_OK);
    CHECK(ct_config_validate(&v) == CT_ERR_ARG);

    /* the printed YAML reads back to the same configuration */
    ct_config_default(&v);
    CHECK(ct_config_apply_override(&v, "optim.lr=0.0003") == CT_OK);
    CHECK(ct_config_apply_override(&v, "data.train=with: colon.bin") == CT_OK);
    char *yaml = ct_config_to_yaml(&v);
    CHECK(yaml != NULL);
    const char *round = write_file("round.yaml", yaml);
    ct_config w;
    ct_config_default(&w);
    CHECK(ct_config_load_yaml(&w, round) == CT_OK);
    CHECK(memcmp(&v, &w, sizeof v) == 0);
    free(yaml);

    /* 1. nesting: a key at depth 7 and 8 is an unknown key with its whole path
     * (depth 8 used to be copied one row past the key stack); a 9th mapping is
     * refused naming the line and the 8 keys above it, so is the 9th of 50 */
    for (int width = 2; width <= 63; width += 61) {
        static const int depths[] = {7, 8, 9, 50};
        for (size_t i = 0; i < sizeof depths / sizeof *depths; i++) {
            int d = depths[i];
            char path[1024], rest[1200];
            char *y = nested_yaml(d, width, d <= 8 ? d : 8, path, sizeof path);
            const char *f = write_file("deep.yaml", y);
            ct_config_default(&v);
            ct_status st = ct_config_load_yaml(&v, f);
            if (d <= 8) {
                CHECK_MSG(st == CT_ERR_ARG, "depth %d: status %d: %s", d, st, ct_last_error());
                snprintf(rest, sizeof rest, "%d: unknown config key '%s'", d, path);
            } else {
                CHECK_MSG(st == CT_ERR_FORMAT, "depth %d: status %d: %s", d, st, ct_last_error());
                snprintf(rest, sizeof rest, "9: %s: mappings nested deeper than 8 levels: "
                         "expected section: then key: value", path);
            }
            CHECK_ERROR_IS("deep.yaml", rest);
            free(y);
        }
    }

    /* 2. a sequence or mapping where a key is expected: the message names the
     * file, line and the keys above, never a key name the stack held before */
    struct {
        const char *text, *rest;
    } not_keys[] = {
        {"{[a, b]: 1}\n", "1: a key must be a plain scalar, found a sequence"},
        {"? [a]\n: 1\n", "1: a key must be a plain scalar, found a sequence"},
        {"{{a: 1}: 2}\n", "1: a key must be a plain scalar, found a mapping"},
        {"train:\n  steps: 1\n  ? [a]\n  : 1\n",
         "3: train: a key must be a plain scalar, found a sequence"},
        {"train:\n  steps: 1\n  ? {a: 1}\n  : 1\n",
         "3: train: a key must be a plain scalar, found a mapping"},
        {"- a\n- b\n", "1: expected a mapping of keys, found a sequence"},
        {"train:\n  steps: [1, 2]\n",
         "2: train.steps: lists are not supported; use a comma-separated string"},
    };
    for (size_t i = 0; i < sizeof not_keys / sizeof *not_keys; i++) {
        const char *f = write_file("not_key.yaml", not_keys[i].text);
        ct_config_default(&v);
        ct_status st = ct_config_load_yaml(&v, f);
        ct_status want = i == 6 ? CT_ERR_ARG : CT_ERR_FORMAT; /* a list as a value: as before */
        CHECK_MSG(st == want, "case %zu: status %d", i, st);
        CHECK_ERROR_IS("not_key.yaml", not_keys[i].rest);
    }

    /* 3. hostile strings in string keys survive set -> YAML -> load unchanged */
    int failed = 0, tried = 0;
    for (size_t k = 0; k < sizeof hostile_keys / sizeof *hostile_keys; k++)
        for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++) {
            int r = round_trip(hostile_keys[k], hostile[i]);
            failed += r < 0;
            tried += r == 0;
        }
    /* ... and so do random ones (fixed seed) drawn from the awkward pieces */
    static const char *pieces[] = {"\n", "\r", "\t", " ", "\"", "'", "\\", "#", ":", ": ", " #",
                                   "-", "?", ",", "[", "]", "{", "}", "&", "*", "!", "|", ">",
                                   "%", "@", "`", "~", "=", "<", ".", "/", "0", "1", "e", "x",
                                   "a", "Z", "\x01", "\x1b", "\x7f", "\xc3\xa9", "\xc2\x85",
                                   "\xc2\x9f", "\xe2\x80\xa8", "\xef\xbb\xbf", "\xef\xbf\xbf",
                                   "\xf0\x9f\x98\x80", "null", "true", "no"};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int t = 0; t < 1500; t++) {
        char s[256] = "";
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int n = (int)((rng >> 33) % 12);
        for (int j = 0; j < n; j++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            strcat(s, pieces[(rng >> 33) % (sizeof pieces / sizeof *pieces)]);
        }
        int r = round_trip(t % 2 ? "data.train" : "lora.targets", s);
        failed += r < 0;
        tried += r == 0;
    }
    /* ... and the longest value, escapes making its YAML twice as long */
    char longest[CT_PATH_MAX];
    for (size_t j = 0; j + 1 < sizeof longest; j++) longest[j] = "\n\"\\\x01"[j % 4];
    longest[sizeof longest - 1] = '\0';
    int r = round_trip("data.train", longest);
    failed += r != 0;
    tried += r == 0;
    CHECK_MSG(failed == 0, "%d of %d hostile strings did not round-trip", failed, tried + failed);
    /* bytes that are not UTF-8 cannot be written as YAML text: refused when set */
    ct_config_default(&v);
    CHECK(ct_config_set(&v, "run.dir", "runs/\xff\xfe", "command line") == CT_ERR_ARG);
    CHECK_MSG(strcmp(ct_last_error(), "command line: run.dir = 'runs/\\xFF\\xFE': expected UTF-8 "
                     "text (config.yaml records it)") == 0, "got '%s'", ct_last_error());
    CHECK(strcmp(v.run.dir, "runs/latest") == 0);
    CHECK(ct_config_set(&v, "run.dir", "runs/\xc3", "command line") == CT_ERR_ARG);
    CHECK(ct_config_set(&v, "run.dir", "\xed\xa0\x80", "command line") == CT_ERR_ARG); /* U+D800 */
    CHECK(ct_config_set(&v, "run.dir", "\xc0\xaf", "command line") == CT_ERR_ARG); /* overlong */

    /* 4. a NUL inside a value or key, from an escape or a raw byte, is refused
     * naming the file, the line and the key (it used to cut the value short) */
    struct {
        const char *text;
        size_t n;
        const char *rest;
    } nuls[] = {
#define T(s) s, sizeof s - 1
        {T("run:\n  dir: \"ab\\0cd\"\n"), "2: run.dir: the value holds a NUL character: "
                                           "expected text without NUL"},
        {T("run:\n  dir: \"ab\\x00\"\n"), "2: run.dir: the value holds a NUL character: "
                                           "expected text without NUL"},
        {T("run:\n  dir: \"\\u0000\"\n"), "2: run.dir: the value holds a NUL character: "
                                           "expected text without NUL"},
        {T("train:\n  steps: 3\nrun:\n  dir: ab\0cd\n"),
         "4: run.dir: the value holds a NUL character: expected text without NUL"},
        {T("run:\n  dir: \"ab\n\n   c\0d\"\n"),
         "4: run.dir: the value holds a NUL character: expected text without NUL"},
        {T("run:\n  dir: ab\0"), "2: run.dir: the value holds a NUL character: "
                                  "expected text without NUL"},
        {T("run:\n  \"d\\0ir\": x\n"), "2: run: the key 'd\\0ir' holds a NUL character: "
                                         "expected text without NUL"},
        {T("run:\n  d\0ir: x\n"), "2: run: the key 'd\\0ir' holds a NUL character: "
                                    "expected text without NUL"},
        {T("run:\n  dir: x\n\0  keep_last: 2\n"), "3: the key '\\0  keep_last' holds a NUL "
                                                  "character: expected text without NUL"},
        {T("run:\n  dir: x   # a comment\0\n  keep_last: 2\n"),
         "2: run.dir: a NUL byte: expected YAML text without NUL bytes"},
        {T("run:\n  dir: x\n  # \0\n"), "3: run.dir: a NUL byte: expected YAML text without "
                                         "NUL bytes"},
#undef T
    };
    for (size_t i = 0; i < sizeof nuls / sizeof *nuls; i++) {
        const char *f = write_bytes("nul.yaml", nuls[i].text, nuls[i].n);
        ct_config_default(&v);
        ct_status st = ct_config_load_yaml(&v, f);
        CHECK_MSG(st == CT_ERR_FORMAT, "case %zu: status %d", i, st);
        CHECK_ERROR_IS("nul.yaml", nuls[i].rest);
    }
    /* other raw control bytes: libyaml refuses them; the line is the byte's */
    const char *ctl = write_file("ctl.yaml", "train:\n  steps: 3\n  seed: 1\x01\n");
    CHECK(ct_config_load_yaml(&v, ctl) == CT_ERR_FORMAT);
    CHECK_ERROR_IS("ctl.yaml", "3: invalid YAML: control characters are not allowed "
                   "(byte 0x01 at offset 27)");

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return ct_test_result("test_config");
}
