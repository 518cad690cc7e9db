/*
 * Tokenizer throughput on ONE thread: encodes every *.txt file of a corpus
 * directory (sorted by name) with one ct_tok_state, one call per document
 * (--mode docs, as `ctrain prepare` does) or all of them concatenated in one
 * call (--mode whole), --repeats times, each repeat with a fresh state (a
 * cold word cache). Prints each repeat and a RESULT line with the median.
 * Leaves out: loading time (reported, not counted) and multithreading.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/data.h"
#include "io/fileio.h"

typedef struct doc {
    char *text;
    size_t len;
} doc;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The *.txt files of dir, sorted by name. Returns the count, -1 on error. */
static long load_docs(const char *dir, doc **out) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "bench_tokenizer: cannot open %s\n  hint: run scripts/fetch_data.sh\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t k = strlen(e->d_name);
        if (k < 5 || strcmp(e->d_name + k - 4, ".txt") != 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            names = realloc(names, cap * sizeof *names);
        }
        names[n] = malloc(strlen(dir) + k + 2);
        sprintf(names[n], "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    *out = calloc(n ? n : 1, sizeof **out);
    long rc = (long)n;
    for (size_t i = 0; i < n; i++) {
        if (ct_file_read_all(names[i], &(*out)[i].text, &(*out)[i].len)) {
            fprintf(stderr, "bench_tokenizer: %s\n", ct_last_error());
            rc = -1;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    const char *tok_dir = "data/gpt2-tokenizer", *corpus = "data/brown/text", *mode = "docs";
    int repeats = 5;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--tokenizer")) tok_dir = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--corpus")) corpus = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--mode")) mode = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--repeats")) repeats = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_tokenizer [--tokenizer DIR] [--corpus DIR] [--mode docs|whole] [--repeats N]\n");
            return 2;
        }
    }
    bool whole = !strcmp(mode, "whole");
    if ((!whole && strcmp(mode, "docs")) || repeats < 1 || repeats > 1000) {
        fprintf(stderr, "bench_tokenizer: --mode is docs or whole, --repeats 1..1000\n");
        return 2;
    }
    double t0 = ct_time_s();
    ct_tokenizer *t = NULL;
    if (ct_tokenizer_load(&t, tok_dir)) {
        fprintf(stderr, "bench_tokenizer: %s\n  hint: %s\n", ct_last_error(), ct_last_hint());
        return 2;
    }
    double t_load = ct_time_s() - t0;
    doc *docs = NULL;
    long n_docs = load_docs(corpus, &docs);
    if (n_docs <= 0) {
        if (n_docs == 0) fprintf(stderr, "bench_tokenizer: no *.txt files in %s\n", corpus);
        return 2;
    }
    size_t bytes = 0;
    for (long i = 0; i < n_docs; i++) bytes += docs[i].len;
    if (whole) { /* one document: the concatenation */
        char *all = malloc(bytes);
        size_t o = 0;
        for (long i = 0; i < n_docs; i++) {
            memcpy(all + o, docs[i].text, docs[i].len);
            o += docs[i].len;
            free(docs[i].text);
        }
        docs[0] = (doc){all, bytes};
        n_docs = 1;
    }
    printf("tokenizer %s (%s), loaded in %.3f s\n", tok_dir, ct_tokenizer_identity(t), t_load);
    printf("corpus %s: %zu bytes, %s, 1 thread\n", corpus, bytes, whole ? "one call on the concatenation" : "one call per document");
    double *secs = malloc((size_t)repeats * sizeof *secs);
    ct_tokens ids = {0};
    size_t tokens = 0;
    for (int r = 0; r < repeats; r++) {
        double a = ct_time_s();
        ct_tok_state *s = ct_tok_state_new(t);
        size_t count = 0;
        for (long i = 0; i < n_docs && s; i++) {
            ids.n = 0;
            if (ct_tokenizer_encode(t, s, docs[i].text, docs[i].len, 0, &ids)) {
                fprintf(stderr, "bench_tokenizer: document %ld: %s\n", i, ct_last_error());
                return 2;
            }
            count += ids.n;
        }
        ct_tok_state_free(s);
        secs[r] = ct_time_s() - a;
        if (r > 0 && count != tokens) {
            fprintf(stderr, "bench_tokenizer: repeat %d gave %zu tokens, repeat 1 gave %zu\n", r + 1, count, tokens);
            return 1;
        }
        tokens = count;
        printf("repeat %d: %.4f s, %.2f MB/s, %zu tokens\n", r + 1, secs[r], bytes / secs[r] / 1e6, count);
    }
    qsort(secs, (size_t)repeats, sizeof *secs, cmp_dbl);
    double med = repeats % 2 ? secs[repeats / 2] : 0.5 * (secs[repeats / 2 - 1] + secs[repeats / 2]);
    printf("RESULT impl=ctrain mode=%s bytes=%zu tokens=%zu median_s=%.6f median_mbps=%.3f\n", mode, bytes, tokens, med,
           bytes / med / 1e6);
    ct_tokens_free(&ids);
    for (long i = 0; i < n_docs; i++) free(docs[i].text);
    free(docs);
    free(secs);
    ct_tokenizer_free(t);
    return 0;
}
