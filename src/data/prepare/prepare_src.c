/*
 * `ctrain prepare`'s inputs: list files, directories, globs and stdin; map
 * each source when its turn comes; cut it into documents (a whole text file,
 * the pieces between separators, or JSONL lines).
 */
#include "data/prepare/prepare_impl.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/fileio.h"

typedef struct src_list {
    prep_source *v;
    int n, cap;
} src_list;

static ct_status src_push(src_list *l, const char *path, int64_t size, const ct_prepare_opts *o) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        prep_source *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return CT_ERR(CT_ERR_OOM, "out of memory listing inputs");
        l->v = v;
        l->cap = cap;
    }
    prep_source *s = &l->v[l->n];
    memset(s, 0, sizeof *s);
    if (!(s->path = strdup(path))) return CT_ERR(CT_ERR_OOM, "out of memory listing inputs");
    s->size = size;
    s->format = o->format;
    if (s->format == CT_PREP_FORMAT_AUTO) {
        const char *dot = strrchr(path, '.');
        bool jsonl = dot && (!strcmp(dot, ".jsonl") || !strcmp(dot, ".ndjson"));
        s->format = jsonl ? CT_PREP_FORMAT_JSONL : CT_PREP_FORMAT_TEXT;
    }
    l->n++;
    return CT_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file under dir, recursively, sorted by path; entries whose
 * name starts with '.' are skipped. Empty files are skipped with a warning. */
static ct_status walk_dir(src_list *l, const char *dir, const ct_prepare_opts *o, int depth) {
    if (depth > 64) return CT_ERR(CT_ERR_ARG, "%s: directories nested too deeply", dir);
    DIR *d = opendir(dir);
    if (!d) return CT_ERR(CT_ERR_IO, "%s: cannot read directory: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    ct_status st = CT_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                st = CT_ERR(CT_ERR_OOM, "out of memory listing %s", dir);
                goto fail;
            }
            names = nn;
        }
        size_t need = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(need))) {
            st = CT_ERR(CT_ERR_OOM, "out of memory listing %s", dir);
            goto fail;
        }
        snprintf(names[n++], need, "%s/%s", dir, e->d_name);
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && st == CT_OK; i++) {
        struct stat sb;
        if (stat(names[i], &sb) != 0) continue; /* a dangling link */
        if (S_ISDIR(sb.st_mode)) {
            st = walk_dir(l, names[i], o, depth + 1);
        } else if (S_ISREG(sb.st_mode)) {
            if (sb.st_size == 0) ct_log(CT_LOG_WARN, "%s: empty file, skipped", names[i]);
            else st = src_push(l, names[i], (int64_t)sb.st_size, o);
        }
    }
fail:
    closedir(d);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

/* A path named on the command line (or matched by a glob). */
static ct_status add_path(src_list *l, const char *path, const ct_prepare_opts *o) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return CT_ERR(CT_ERR_IO, "%s: cannot open input: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        int before = l->n;
        ct_status st = walk_dir(l, path, o, 0);
        if (st) return st;
        if (l->n == before)
            return CT_ERR(CT_ERR_ARG, "%s: empty input: the directory holds no non-empty files",
                          path);
        return CT_OK;
    }
    if (!S_ISREG(sb.st_mode))
        return CT_ERR(CT_ERR_ARG, "%s: not a regular file or directory", path);
    if (sb.st_size == 0) return CT_ERR(CT_ERR_ARG, "%s: empty input (0 bytes)", path);
    if (access(path, R_OK) != 0)
        return CT_ERR(CT_ERR_IO, "%s: cannot read input: %s", path, strerror(errno));
    return src_push(l, path, (int64_t)sb.st_size, o);
}

static ct_status read_stdin(prep_source *s) {
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    if (!buf) return CT_ERR(CT_ERR_OOM, "out of memory reading stdin");
    for (;;) {
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                return CT_ERR(CT_ERR_OOM, "out of memory reading stdin (%zu bytes so far)", len);
            }
            buf = nb;
        }
        size_t k = fread(buf + len, 1, cap - len, stdin);
        len += k;
        if (k == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        return CT_ERR(CT_ERR_IO, "<stdin>: read failed");
    }
    if (len == 0) {
        free(buf);
        return CT_ERR(CT_ERR_ARG, "<stdin>: empty input (0 bytes)");
    }
    s->data = buf;
    s->len = len;
    s->size = (int64_t)len;
    return CT_OK;
}

ct_status prep_sources_list(const ct_prepare_opts *o, prep_source **out, int *n,
                            int64_t *bytes_total) {
    src_list l = {0};
    ct_status st = CT_OK;
    bool had_stdin = false;
    *out = NULL;
    *n = 0;
    *bytes_total = 0;
    if (o->n_inputs < 1) return CT_ERR(CT_ERR_ARG, "no input given: name files, directories, "
                                       "globs, or - for stdin");
    for (int i = 0; i < o->n_inputs && st == CT_OK; i++) {
        const char *in = o->inputs[i];
        struct stat sb;
        if (!strcmp(in, "-")) {
            if (had_stdin) {
                st = CT_ERR(CT_ERR_ARG, "stdin (-) is named twice");
                break;
            }
            had_stdin = true;
            if ((st = src_push(&l, "<stdin>", 0, o))) break;
            prep_source *s = &l.v[l.n - 1];
            s->is_stdin = true;
            if (o->format == CT_PREP_FORMAT_AUTO) s->format = CT_PREP_FORMAT_TEXT;
            st = read_stdin(s);
        } else if (stat(in, &sb) != 0 && strpbrk(in, "*?[")) {
            glob_t g;
            int rc = glob(in, 0, NULL, &g);
            if (rc != 0) {
                if (rc != GLOB_NOMATCH) globfree(&g);
                st = CT_ERR(CT_ERR_IO, "%s: no files match this pattern", in);
                break;
            }
            for (size_t k = 0; k < g.gl_pathc && st == CT_OK; k++)
                st = add_path(&l, g.gl_pathv[k], o);
            globfree(&g);
        } else {
            st = add_path(&l, in, o);
        }
    }
    if (st) {
        prep_sources_free(l.v, l.n);
        return st;
    }
    for (int i = 0; i < l.n; i++) *bytes_total += l.v[i].size;
    *out = l.v;
    *n = l.n;
    return CT_OK;
}

void prep_sources_free(prep_source *s, int n) {
    if (!s) return;
    for (int i = 0; i < n; i++) {
        prep_source_close(&s[i]);
        if (s[i].is_stdin) free((void *)s[i].data);
        free(s[i].path);
    }
    free(s);
}

ct_status prep_source_open(prep_source *s) {
    if (!s->is_stdin && !s->data) {
        const void *map;
        size_t len;
        ct_status st = ct_file_map(s->path, 1, NULL, &map, &len);
        if (st) return st;
        s->data = map;
        s->len = len;
        s->mapped = true;
        if ((int64_t)len != s->size)
            ct_log(CT_LOG_WARN, "%s: changed size while being read (%lld -> %zu bytes)", s->path,
                   (long long)s->size, len);
    }
    XXH128_hash_t h = XXH3_128bits(s->data, s->len);
    snprintf(s->hash_hex, sizeof s->hash_hex, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
    return CT_OK;
}

void prep_source_close(prep_source *s) {
    if (s->mapped) {
        ct_file_unmap(s->data, s->len);
        s->data = NULL;
        s->len = 0;
        s->mapped = false;
    }
}

/* First occurrence of needle[0..m) in hay[0..n), or NULL (memmem is not POSIX). */
static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    while (n >= m) {
        const char *p = memchr(hay, needle[0], n - m + 1);
        if (!p) return NULL;
        if (!memcmp(p, needle, m)) return p;
        n -= (size_t)(p - hay) + 1;
        hay = p + 1;
    }
    return NULL;
}

static bool blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r' && p[i] != '\n') return false;
    return true;
}

bool prep_source_next(const ct_prepare_opts *o, prep_source *s, int src, prep_doc *out) {
    const char *base = s->data;
    size_t len = s->len;
    while (!s->done && s->cursor < len) {
        size_t start = s->cursor, end;
        int64_t line = 0;
        if (s->format == CT_PREP_FORMAT_JSONL) {
            const char *nl = memchr(base + start, '\n', len - start);
            end = nl ? (size_t)(nl - base) : len;
            s->cursor = nl ? end + 1 : len;
            line = ++s->line;
            if (blank(base + start, end - start)) continue;
        } else if (o->separator && o->separator_len) {
            const char *sep = find_bytes(base + start, len - start, o->separator, o->separator_len);
            end = sep ? (size_t)(sep - base) : len;
            s->cursor = sep ? end + o->separator_len : len;
            if (end == start) continue; /* nothing between two separators */
        } else {
            end = len;
            s->cursor = len;
        }
        out->src = src;
        out->raw = base + start;
        out->len = end - start;
        out->offset = (int64_t)start;
        out->line = line;
        out->hash = XXH3_64bits(out->raw, out->len);
        out->bad = false;
        return true;
    }
    s->done = true;
    return false;
}

bool prep_jsonl_text(const char *raw, size_t len, const char *field, cJSON **json,
                     const char **text, size_t *text_len, char *why, size_t cap) {
    *json = NULL;
    cJSON *j = cJSON_ParseWithLength(raw, len);
    if (!j) {
        snprintf(why, cap, "not valid JSON");
        return false;
    }
    if (!cJSON_IsObject(j)) {
        snprintf(why, cap, "not a JSON object");
        cJSON_Delete(j);
        return false;
    }
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    if (!v) {
        snprintf(why, cap, "no field \"%s\"", field);
        cJSON_Delete(j);
        return false;
    }
    if (!cJSON_IsString(v) || !v->valuestring) {
        snprintf(why, cap, "field \"%s\" is not a string", field);
        cJSON_Delete(j);
        return false;
    }
    *json = j;
    *text = v->valuestring;
    *text_len = strlen(v->valuestring);
    return true;
}
