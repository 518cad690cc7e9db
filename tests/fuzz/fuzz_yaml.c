/*
 * Fuzz the YAML config loader (src/io/config_yaml.c, src/io/config.c): the
 * input is the config file, applied over the defaults.
 * Oracles: a failed load names the file; what the writer writes reads back to
 * the same config: ct_config_to_yaml of the loaded config, loaded again over
 * the defaults, must load and write the same text. The loaded config is also
 * put through ct_config_validate and the parsers of its text keys, whose
 * failures must name the key (not a file: they have none).
 */
#include "fuzz.h"

#include "ctrain/config.h"

static void check_key_error(ct_status st, const char *what) {
    if (st == CT_OK) return;
    const char *e = ct_last_error();
    if (!e || !e[0]) fuzz_fail("%s failed (%s) with an empty error", what, ct_status_str(st));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fuzz_dir("yaml");
    char path[FUZZ_PATH_MAX], back[FUZZ_PATH_MAX];
    fuzz_join(path, dir, "config.yaml");
    fuzz_join(back, dir, "written.yaml");
    fuzz_write(path, data, size);

    static ct_config cfg, again; /* large: kept off the stack */
    ct_config_default(&cfg);
    ct_error_clear();
    ct_status st = ct_config_load_yaml(&cfg, path);
    fuzz_check_error(st, "ct_config_load_yaml", path);
    if (st) return 0;

    char *y1 = ct_config_to_yaml(&cfg);
    if (!y1) return 0; /* out of memory */
    fuzz_write(back, y1, strlen(y1));
    ct_config_default(&again);
    ct_error_clear();
    st = ct_config_load_yaml(&again, back);
    if (st)
        fuzz_fail("ct_config_to_yaml wrote a config that does not load back: %s\n--- written:\n%s",
                  ct_last_error(), y1);
    char *y2 = ct_config_to_yaml(&again);
    if (y2 && strcmp(y1, y2) != 0) {
        const char *a = y1, *b = y2;
        while (*a && *a == *b) a++, b++;
        const char *line = a;
        while (line > y1 && line[-1] != '\n') line--;
        fuzz_fail("the config read back differs from the one written, at byte %zu:\n"
                  "written:   %.120s\nread back: %.120s",
                  (size_t)(a - y1), line, y2 + (line - y1));
    }
    free(y1);
    free(y2);

    /* the cross-key checks and the text keys' parsers on what was loaded */
    ct_error_clear();
    check_key_error(ct_config_validate(&cfg), "ct_config_validate");
    size_t bytes = 0;
    ct_error_clear();
    check_key_error(ct_config_memory_limit(cfg.run.memory_limit, (size_t)1 << 34, &bytes),
                    "ct_config_memory_limit");
    int bq = 0, bk = 0, kind = 0, index = 0;
    ct_error_clear();
    check_key_error(ct_config_attention_tiles(cfg.run.attention_tiles, &bq, &bk),
                    "ct_config_attention_tiles");
    int64_t first = 0, last = 0;
    if (cfg.run.trace[0]) {
        ct_error_clear();
        check_key_error(ct_config_trace_steps(cfg.run.trace, &first, &last), "ct_config_trace_steps");
    }
    ct_error_clear();
    check_key_error(ct_config_device(cfg.run.device, &kind, &index), "ct_config_device");
    return 0;
}
