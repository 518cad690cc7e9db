/*
 * The YAML side of the config: the reader (libyaml events, each key=value
 * handed to config.c's table through config_int.h) and the writer behind
 * --print-config and the saved config.yaml. Strings are written plain only
 * where that reads back exactly, else double-quoted with escapes, so a saved
 * config loads back unchanged. Leaves out: YAML anchors, sequences, mappings
 * nested more than 8 deep, NULs and multi-document files (rejected with a
 * clear error naming the file, the line and the key).
 */
#include "ctrain/config.h"

#include <ctype.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "core/strbuf.h"
#include "io/config_int.h"
#include "io/fileio.h"

/* ------------------------------------------------------------------ YAML */

/* Mappings the reader follows. Every key is section.key (two levels); a key
 * deeper than that can only be unknown, so 8 is plenty. */
#define YAML_DEPTH 8
/* Room for a dotted path of YAML_DEPTH keys of up to CT_NAME_MAX - 1 bytes. */
#define KEY_PATH_MAX (YAML_DEPTH * CT_NAME_MAX)

/* The keys open while a file is read. depth mappings are open; name[d] is the
 * last key read in the mapping at depth d (1..depth) when named[d]. */
typedef struct yaml_keys {
    char name[YAML_DEPTH + 1][CT_NAME_MAX];
    bool named[YAML_DEPTH + 1];
    bool expect_key[YAML_DEPTH + 1]; /* the next node at depth d is a key */
    int depth;
} yaml_keys;

/* The dotted path of the open keys: with `last`, down to the last key read
 * at the deepest depth (the key a value belongs to); without, only the keys
 * above the deepest mapping (where a key is expected). */
static const char *key_path(const yaml_keys *y, bool last, char out[KEY_PATH_MAX]) {
    size_t o = 0;
    out[0] = '\0';
    int upto = y->depth - (last && y->named[y->depth] ? 0 : 1);
    for (int d = 1; d <= upto; d++) {
        int w = snprintf(out + o, KEY_PATH_MAX - o, "%s%s", d > 1 ? "." : "", y->name[d]);
        if (w < 0 || (size_t)w >= KEY_PATH_MAX - o) break;
        o += (size_t)w;
    }
    return out;
}

/* "FILE:LINE: KEY.PATH: message", the path left out when empty. */
static ct_status yaml_error(ct_status code, const char *path, size_t line, const char *kpath,
                            const char *fmt, ...) CT_PRINTF(5, 6);
static ct_status yaml_error(ct_status code, const char *path, size_t line, const char *kpath,
                            const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return CT_ERR(code, "%s:%zu: %s%s%s", path, line, kpath, *kpath ? ": " : "", msg);
}

/* The 1-based line of byte `off` of s, counting line breaks as libyaml does:
 * CR LF, CR, LF, NEL, LS and PS. */
static size_t line_at(const unsigned char *s, size_t off) {
    size_t line = 1;
    for (size_t i = 0; i < off; i++) {
        if (s[i] == '\n' || (s[i] == '\r' && (i + 1 >= off || s[i + 1] != '\n')))
            line++;
        else if (s[i] == 0xC2 && i + 1 < off && s[i + 1] == 0x85)
            line++, i++;
        else if (s[i] == 0xE2 && i + 2 < off && s[i + 1] == 0x80 &&
                 (s[i + 2] == 0xA8 || s[i + 2] == 0xA9))
            line++, i += 2;
    }
    return line;
}

/* The line of the first NUL byte of s (n bytes) on line `from` or later. */
static size_t nul_line_from(const unsigned char *s, size_t n, size_t from) {
    for (size_t i = 0; i < n; i++) {
        if (s[i]) continue;
        size_t line = line_at(s, i);
        if (line >= from) return line;
    }
    return from;
}

ct_status ct_config_load_yaml(ct_config *cfg, const char *path) {
    char *raw = NULL, *text = NULL;
    size_t len = 0;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        ct_status dst = CT_ERR(CT_ERR_ARG, "%s: is a directory, expected a YAML config file", path);
        ct_error_hint("name the file, e.g. --config %s/config.yaml (a run directory holds one) "
                      "or --config configs/demo.yaml", path);
        return dst;
    }
    ct_status st = ct_file_read_all(path, &raw, &len);
    if (st) {
        if (st == CT_ERR_IO) ct_error_hint("check the --config path");
        return st;
    }
    /* libyaml refuses a raw NUL byte before reading a single key; put
     * NUL_MARK in its place so the error can say which key holds it (a
     * UTF-16 file, with its BOM, is left to libyaml) */
    const unsigned char *u = (const unsigned char *)raw;
    bool utf16 = len >= 2 && ((u[0] == 0xFE && u[1] == 0xFF) || (u[0] == 0xFF && u[1] == 0xFE));
    size_t nuls = 0, nul_line = 0, text_len = len;
    for (size_t i = 0; !utf16 && i < len; i++) nuls += !raw[i];
    text = raw;
    if (nuls) {
        nul_line = nul_line_from(u, len, 1);
        text_len = len + 2 * nuls;
        text = malloc(text_len + 1);
        if (!text) {
            free(raw);
            return CT_ERR(CT_ERR_OOM, "%s: out of memory reading the config", path);
        }
        for (size_t i = 0, o = 0; i < len; i++) {
            if (raw[i]) {
                text[o++] = raw[i];
            } else {
                memcpy(text + o, NUL_MARK, 3);
                o += 3;
            }
        }
        text[text_len] = '\0';
    }

    yaml_parser_t parser;
    yaml_event_t ev;
    if (!yaml_parser_initialize(&parser)) {
        if (text != raw) free(text);
        free(raw);
        return CT_ERR(CT_ERR_OOM, "%s: cannot initialise the YAML parser", path);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, text_len);

    static const char no_nul[] = "expected text without NUL";
    yaml_keys y;
    memset(&y, 0, sizeof y);
    y.expect_key[0] = true;
    char kpath[KEY_PATH_MAX], last[KEY_PATH_MAX] = ""; /* last: the path of the last key read */
    char show[128];
    int docs = 0;
    bool done = false;
    while (!done) {
        if (!yaml_parser_parse(&parser, &ev)) {
            bool reader = parser.error == YAML_READER_ERROR;
            size_t line = reader ? line_at((const unsigned char *)text, parser.problem_offset)
                                 : parser.problem_mark.line + 1;
            const char *problem = parser.problem ? parser.problem : "parse error";
            if (nuls && line >= nul_line) /* the NUL may be what broke the parse */
                st = yaml_error(CT_ERR_FORMAT, path, nul_line, last,
                                "a NUL byte: expected YAML text without NUL bytes");
            else if (reader)
                st = CT_ERR(CT_ERR_FORMAT, "%s:%zu: invalid YAML: %s (byte 0x%02X at offset %zu)",
                            path, line, problem, (unsigned)parser.problem_value,
                            parser.problem_offset);
            else
                st = CT_ERR(CT_ERR_FORMAT, "%s:%zu: invalid YAML: %s", path, line, problem);
            break;
        }
        size_t line = ev.start_mark.line + 1;
        char where[CT_PATH_MAX + 32];
        snprintf(where, sizeof where, "%s:%zu", path, line);
        if (nuls && line > nul_line) { /* the NUL lay between nodes (in a comment, say) */
            st = yaml_error(CT_ERR_FORMAT, path, nul_line, last,
                            "a NUL byte: expected YAML text without NUL bytes");
            yaml_event_delete(&ev);
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = true; break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1) st = CT_ERR(CT_ERR_FORMAT, "%s: only one YAML document allowed", where);
            break;
        case YAML_MAPPING_START_EVENT:
            if (y.depth > 0 && y.expect_key[y.depth]) {
                st = yaml_error(CT_ERR_FORMAT, path, line, key_path(&y, false, kpath),
                                "a key must be a plain scalar, found a mapping");
            } else if (y.depth >= YAML_DEPTH) {
                st = yaml_error(CT_ERR_FORMAT, path, line, key_path(&y, true, kpath),
                                "mappings nested deeper than %d levels: expected section: then "
                                "key: value", YAML_DEPTH);
                ct_error_hint("`ctrain train --print-config` lists every key");
            } else {
                y.depth++;
                y.expect_key[y.depth] = true;
                y.named[y.depth] = false;
            }
            break;
        case YAML_MAPPING_END_EVENT:
            /* a mapping that was a value completes its parent's key */
            if (y.depth > 0) y.depth--;
            y.expect_key[y.depth] = true;
            break;
        case YAML_SEQUENCE_START_EVENT:
            if (y.depth == 0)
                st = CT_ERR(CT_ERR_FORMAT, "%s: expected a mapping of keys, found a sequence",
                            where);
            else if (y.expect_key[y.depth])
                st = yaml_error(CT_ERR_FORMAT, path, line, key_path(&y, false, kpath),
                                "a key must be a plain scalar, found a sequence");
            else
                st = yaml_error(CT_ERR_ARG, path, line, key_path(&y, true, kpath),
                                "lists are not supported; use a comma-separated string");
            break;
        case YAML_ALIAS_EVENT:
            st = CT_ERR(CT_ERR_FORMAT, "%s: YAML aliases are not supported", where);
            break;
        case YAML_SCALAR_EVENT: {
            const char *v = (const char *)ev.data.scalar.value;
            size_t vlen = ev.data.scalar.length;
            /* a \0 escape, or a raw NUL byte (now NUL_MARK) */
            bool raw_nul = nuls && strstr(v, NUL_MARK);
            bool has_nul = strlen(v) != vlen || raw_nul;
            size_t nline = raw_nul ? nul_line_from(u, len, line) : line;
            if (y.depth == 0) {
                if (vlen > 0)
                    st = CT_ERR(CT_ERR_FORMAT, "%s: expected a mapping of keys, found '%s'",
                                where, config_shown(v, vlen, show, sizeof show));
                break;
            }
            if (y.expect_key[y.depth]) {
                if (has_nul) {
                    st = yaml_error(CT_ERR_FORMAT, path, nline, key_path(&y, false, kpath),
                                    "the key '%s' holds a NUL character: %s",
                                    config_shown(v, vlen, show, sizeof show), no_nul);
                    break;
                }
                bool ctl = false;
                for (size_t i = 0; i < vlen; i++) ctl |= (unsigned char)v[i] < 0x20 || v[i] == 0x7F;
                if (vlen >= CT_NAME_MAX || v[0] == '.' || ctl) {
                    st = CT_ERR(CT_ERR_ARG, "%s: bad key '%s'", where,
                                config_shown(v, vlen, show, sizeof show));
                    break;
                }
                memcpy(y.name[y.depth], v, vlen + 1);
                y.named[y.depth] = true;
                y.expect_key[y.depth] = false;
                key_path(&y, true, last);
            } else {
                key_path(&y, true, kpath);
                if (has_nul) {
                    st = yaml_error(CT_ERR_FORMAT, path, nline, kpath,
                                    "the value holds a NUL character: %s", no_nul);
                    break;
                }
                /* YAML null (~ or empty) leaves the default */
                bool is_null = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                               (strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || vlen == 0);
                const key_def *k = config_find_key(kpath);
                if (!k)
                    st = config_unknown_key(kpath, where);
                else if (!is_null)
                    st = config_set_value(cfg, k, v, where);
                /* a plain value that runs onto the next line is, nearly always, a key
                 * indented deeper than its neighbours ("steps: 10" then "   seq_len: 4"
                 * reads as steps = '10 seq_len') */
                if (st == CT_ERR_ARG && ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                    ev.end_mark.line > ev.start_mark.line)
                    ct_error_hint("the value of %s runs onto line %zu: is that line indented "
                                  "deeper than its neighbours? keys of one section line up",
                                  kpath, (size_t)ev.end_mark.line + 1);
                y.expect_key[y.depth] = true;
            }
            break;
        }
        default: break;
        }
        yaml_event_delete(&ev);
        if (st != CT_OK) break;
    }
    if (st == CT_OK && nuls) /* a NUL that no node held and that broke nothing */
        st = yaml_error(CT_ERR_FORMAT, path, nul_line, last,
                        "a NUL byte: expected YAML text without NUL bytes");
    yaml_parser_delete(&parser);
    if (text != raw) free(text);
    free(raw);
    return st;
}

/* --------------------------------------------------------------- output */

/* True when v, written as a plain YAML scalar, reads back as exactly v, here
 * and in other YAML 1.1 readers (PyYAML): a path or a name of letters,
 * digits and _-./+=~()$^;<> with inner spaces, starting with a letter, '_',
 * '/', "./" or "../", and not a word that YAML reads as null, a bool or a
 * number. Everything else is written double-quoted. */
static bool yaml_plain_ok(const char *v) {
    size_t n = strlen(v);
    if (!n || v[n - 1] == ' ') return false;
    if (!(isalpha((unsigned char)v[0]) || v[0] == '_' || v[0] == '/' || !strncmp(v, "./", 2) ||
          !strncmp(v, "../", 3)))
        return false;
    for (const char *p = v; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_-./+=~()$^;<> ", *p)) return false;
    static const char *words[] = {"null", "y", "n", "yes", "no", "true", "false", "on", "off"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        size_t j = 0;
        while (words[i][j] && tolower((unsigned char)v[j]) == words[i][j]) j++;
        if (!words[i][j] && !v[j]) return false;
    }
    char *end;
    strtod(v, &end); /* inf, nan, infinity */
    return *end != '\0';
}

/* Write v as a YAML scalar that reads back as exactly v: plain when that is
 * safe, else double-quoted with escapes for '"', '\', control characters,
 * line breaks (NEL, LS and PS too) and what libyaml refuses raw (C1
 * controls, U+FEFF, U+FFFE, U+FFFF). Bytes that are not UTF-8 cannot be
 * written; config_set_value refuses them, and here they become U+FFFD. */
static void sb_yaml_string(ct_strbuf *b, const char *v) {
    if (yaml_plain_ok(v)) {
        ct_strbuf_append(b, v, strlen(v));
        return;
    }
    ct_strbuf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)v; *p;) {
        uint32_t cp;
        size_t len = config_utf8_seq(p, &cp);
        if (!len) {
            ct_strbuf_printf(b, "\\uFFFD");
            p++;
            continue;
        }
        switch (cp) {
        case '"': ct_strbuf_append(b, "\\\"", 2); break;
        case '\\': ct_strbuf_append(b, "\\\\", 2); break;
        case '\a': ct_strbuf_append(b, "\\a", 2); break;
        case '\b': ct_strbuf_append(b, "\\b", 2); break;
        case '\t': ct_strbuf_append(b, "\\t", 2); break;
        case '\n': ct_strbuf_append(b, "\\n", 2); break;
        case '\v': ct_strbuf_append(b, "\\v", 2); break;
        case '\f': ct_strbuf_append(b, "\\f", 2); break;
        case '\r': ct_strbuf_append(b, "\\r", 2); break;
        case 0x1B: ct_strbuf_append(b, "\\e", 2); break;
        case 0x85: ct_strbuf_append(b, "\\N", 2); break;
        case 0x2028: ct_strbuf_append(b, "\\L", 2); break;
        case 0x2029: ct_strbuf_append(b, "\\P", 2); break;
        default:
            if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0))
                ct_strbuf_printf(b, "\\x%02X", (unsigned)cp);
            else if (cp == 0xFEFF || cp == 0xFFFE || cp == 0xFFFF)
                ct_strbuf_printf(b, "\\u%04X", (unsigned)cp);
            else
                ct_strbuf_append(b, (const char *)p, len);
        }
        p += len;
    }
    ct_strbuf_append(b, "\"", 1);
}

char *ct_config_to_yaml(const ct_config *cfg) {
    ct_strbuf b = {0};
    char section[CT_NAME_MAX] = "";
    for (size_t i = 0; i < config_n_keys; i++) {
        const key_def *k = &config_keys[i];
        const char *dot = strchr(k->path, '.');
        size_t slen = (size_t)(dot - k->path);
        if (strlen(section) != slen || strncmp(section, k->path, slen) != 0) {
            memcpy(section, k->path, slen);
            section[slen] = '\0';
            ct_strbuf_printf(&b, "%s:\n", section);
        }
        ct_strbuf_printf(&b, "  %s: ", dot + 1);
        const char *base = (const char *)cfg + k->offset;
        switch (k->type) {
        case KEY_INT: {
            int64_t v;
            memcpy(&v, base, sizeof v);
            if (k->words && v == 0)
                ct_strbuf_printf(&b, "%s", k->words);
            else
                ct_strbuf_printf(&b, "%lld", (long long)v);
            break;
        }
        case KEY_FLOAT: {
            double v;
            memcpy(&v, base, sizeof v);
            if (k->words && v == 0) { /* the word stored as 0 */
                ct_strbuf_printf(&b, "%s", k->words);
                break;
            }
            char num[64];
            snprintf(num, sizeof num, "%.15g", v); /* shortest that reads back exactly */
            if (strtod(num, NULL) != v) snprintf(num, sizeof num, "%.17g", v);
            ct_strbuf_printf(&b, "%s", num);
            break;
        }
        case KEY_BOOL: {
            bool v;
            memcpy(&v, base, sizeof v);
            ct_strbuf_printf(&b, "%s", v ? "true" : "false");
            break;
        }
        case KEY_STRING:
        case KEY_ENUM: sb_yaml_string(&b, base); break;
        }
        ct_strbuf_printf(&b, "    # %s\n", k->help);
    }
    if (b.oom) {
        ct_strbuf_free(&b);
        return NULL;
    }
    return b.p;
}
