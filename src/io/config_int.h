/*
 * Internals of the run configuration shared by config.c (the key table,
 * lookup, value parsing) and config_yaml.c (the YAML reader and writer): the
 * key_def table itself, key lookup, value setting and the UTF-8 and quoting
 * helpers both sides use, so YAML input and key=value overrides go through
 * one parser and one set of error messages. Not installed.
 */
#ifndef CT_IO_CONFIG_INT_H
#define CT_IO_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/config.h"

typedef enum key_type {
    KEY_INT = 0,
    KEY_FLOAT = 1,
    KEY_BOOL = 2,
    KEY_STRING = 3,
    KEY_ENUM = 4, /* a string from a fixed list */
} key_type;

typedef struct key_def {
    const char *path;
    key_type type;
    size_t offset;
    size_t size;         /* for strings: buffer size */
    double min, max;     /* numeric range, inclusive */
    const char *words;   /* KEY_ENUM: "a|b|c"; KEY_INT: a word that is stored as 0 */
    const char *help;
} key_def;

/* Every key, grouped by section in the order --print-config writes them. */
extern const key_def config_keys[];
extern const size_t config_n_keys; /* entries in config_keys */

/* In memory a raw NUL byte of a YAML file becomes U+FDD0, a noncharacter
 * kept for internal use, so that the parser goes on to the scalar that held
 * it and the error can name its key (see ct_config_load_yaml). */
#define NUL_MARK "\xEF\xB7\x90"

/* The table entry for a dotted path; NULL when there is none. */
const key_def *config_find_key(const char *path);

/* CT_ERR_ARG "WHERE: unknown config key", with a "did you mean" hint. */
ct_status config_unknown_key(const char *path, const char *where);

/* Parse v as k's type, check its range and words, and store it in cfg.
 * Errors (CT_ERR_ARG) begin with `where` (a FILE:LINE or "command line"). */
ct_status config_set_value(ct_config *cfg, const key_def *k, const char *v, const char *where);

/* Length of the well-formed UTF-8 sequence at p (1..4) and its code point in
 * *cp; 0 for a stray, truncated, overlong or surrogate sequence, or one past
 * U+10FFFF. */
size_t config_utf8_seq(const unsigned char *p, uint32_t *cp);

/* s (n bytes) quoted for an error message into out (out_n bytes); returns out. */
const char *config_shown(const char *s, size_t n, char *out, size_t out_n);

#endif
