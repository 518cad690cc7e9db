/*
 * What both builds of the data-parallel layer share (see dist_int.h): the
 * launcher's environment, the ZeRO-1 shard layout and the diff of two
 * configurations. No MPI here.
 */
#include "dist/dist_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

bool ct_dist_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return true;
    return false;
}

int dist_env_world(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 0;
}

void ct_dist_shard(size_t numel, int world, int rank, size_t *lo, size_t *n) {
    CT_ASSERT(world >= 1 && rank >= 0 && rank < world);
    size_t shard = (numel + (size_t)world - 1) / (size_t)world;
    size_t start = shard * (size_t)rank;
    if (start > numel) start = numel;
    size_t len = numel - start < shard ? numel - start : shard;
    *lo = start;
    *n = len;
}

uint64_t dist_hash_text(const char *text) { return XXH64(text, strlen(text), 0); }

/* Copy one line (without its newline) of at most cap-1 bytes into out. */
static void copy_line(const char *s, char *out, size_t cap) {
    size_t n = strcspn(s, "\n");
    if (n >= cap) n = cap - 1;
    memcpy(out, s, n);
    out[n] = '\0';
}

void dist_describe_diff(const char *root, const char *mine, int rank, char *out, size_t cap) {
    int line = 1;
    const char *a = root, *b = mine;
    /* walk both texts line by line until the lines differ */
    for (;;) {
        size_t na = strcspn(a, "\n"), nb = strcspn(b, "\n");
        if (na != nb || memcmp(a, b, na) != 0 || (!a[na]) != (!b[nb])) break;
        if (!a[na]) break; /* equal to the end: only the hashes differed */
        a += na + 1;
        b += nb + 1;
        line++;
    }
    char la[200], lb[200];
    copy_line(a, la, sizeof la);
    copy_line(b, lb, sizeof lb);
    /* a YAML key under a section: name it by its dotted path */
    char key[160] = "";
    size_t ind = strspn(la, " ");
    size_t klen = strcspn(la + ind, ":");
    if (ind > 0 && la[ind + klen] == ':' && klen < 64) {
        for (const char *q = a; q > root;) {
            /* back to the previous line's start */
            const char *e = q - 1, *st = e;
            while (st > root && st[-1] != '\n') st--;
            if (st < e && *st != ' ' && *st != '#') {
                size_t sl = strcspn(st, ":\n");
                if (sl < 64 && st[sl] == ':')
                    snprintf(key, sizeof key, "%.*s.%.*s, ", (int)sl, st, (int)klen, la + ind);
                break;
            }
            q = st;
        }
    }
    snprintf(out, cap, "%sline %d: rank 0 has '%s', rank %d has '%s'", key, line, la, rank, lb);
}
