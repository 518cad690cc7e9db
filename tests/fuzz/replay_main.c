/*
 * Replay driver: runs a harness's LLVMFuzzerTestOneInput on saved inputs
 * without libFuzzer, so the corpora and reproducers run under any compiler
 * (gcc, ASan+UBSan builds) as part of the test suite.
 *
 *   fuzz_<harness>_replay PATH...
 *
 * A PATH that is a file is one input; a directory contributes every regular
 * file below it (recursively, in name order), except names starting with '.'
 * and README files. A PATH that does not exist is skipped with a note (an
 * empty reproducer directory is not an error). Each input is copied into a
 * buffer of exactly its size, so a read past the end is caught by ASan. The
 * name of each input is printed before it runs, so a crash names its input.
 * Exit status: 0 when every input ran, 2 for a usage or read error; an input
 * that breaks an oracle aborts the process.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || sb.st_size < 0) {
        fclose(fp);
        fprintf(stderr, "replay: cannot stat %s\n", path);
        return -1;
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || (n && fread(buf, 1, n, fp) != n)) {
        free(buf);
        fclose(fp);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return -1;
    }
    fclose(fp);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    /* an exact-size copy: ASan sees any read past the input's end */
    uint8_t *in = malloc(n ? n : 1);
    if (!in) {
        free(buf);
        return -1;
    }
    if (n) memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 1;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every input under path; returns inputs run, or -1 on a read error. */
static long run_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: %s does not exist, skipped\n", path);
        return 0;
    }
    if (!S_ISDIR(sb.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: cannot open directory %s\n", path);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !strncmp(e->d_name, "README", 6)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n]) n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_names);
    long total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(path) + strlen(names[i]) + 2;
        char *sub = malloc(len);
        long r = -1;
        if (sub) {
            snprintf(sub, len, "%s/%s", path, names[i]);
            r = run_path(sub);
            free(sub);
        }
        if (r < 0) total = -1;
        else if (total >= 0) total += r;
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return total;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    long total = 0;
    bool bad = false;
    for (int i = 1; i < argc; i++) {
        long r = run_path(argv[i]);
        if (r < 0) bad = true;
        else total += r;
    }
    fprintf(stderr, "replay: %ld inputs ran%s\n", total, bad ? ", some could not be read" : "");
    return bad ? 2 : 0;
}
