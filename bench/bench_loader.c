/*
 * Loader overhead, model-free: (1) open + validate a ~100 MB shard (header
 * check and the token < vocab_size scan), cold (pages dropped with
 * posix_fadvise) and warm, against the old int32-chunk check; (2) batches per
 * second with prefetch off and on, alone and with a simulated training step
 * that spins for a fixed time per batch (the wait the step sees is what
 * prefetch hides); (3) the same for instruction data (shards with .sft
 * sidecars: rows of whole examples, packed or one per row). Not a test: it
 * prints figures and exits 0.
 *
 * Built with the rest (bench/CMakeLists.txt); run from the repository root
 * after `make`: build/bench/bench_loader [DIR]
 * DIR (default /tmp) receives a 100 MB shard and a 40 MB instruction dataset
 * (4 shards and their sidecars), removed at exit.
 */
#include "ctrain/train.h"
#include "data/shard/shard.h"
#include "data/shard/sft_shard.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_TOKENS 50000000 /* version 1: 100 MB of tokens */
#define VOCAB 50257
#define SFT_SHARDS 4
#define SFT_TOKENS 5000000 /* per shard: 4 x 10 MB */

static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* The check the loader did before: 64K tokens at a time through an int32 buffer. */
static double old_check_s(const char *path) {
    double t0 = ct_time_s();
    ct_shard *s = NULL;
    if (ct_shard_open(&s, path)) return -1;
    enum { CHUNK = 1 << 16 };
    int32_t *buf = malloc(CHUNK * sizeof *buf);
    int64_t n = ct_shard_ntokens(s), bad = 0;
    for (int64_t p = 0; p < n; p += CHUNK) {
        int64_t cnt = n - p < CHUNK ? n - p : CHUNK;
        if (ct_shard_read(s, p, cnt, buf)) break;
        for (int64_t i = 0; i < cnt; i++) bad += buf[i] < 0 || buf[i] >= VOCAB;
    }
    free(buf);
    ct_shard_close(s);
    double dt = ct_time_s() - t0;
    if (bad) fprintf(stderr, "unexpected: %lld bad tokens\n", (long long)bad);
    return dt;
}

static double open_s(const char *path, int vocab, int prefetch) {
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = path;
    o.B = 8;
    o.T = 1024;
    o.vocab_size = vocab;
    o.prefetch = prefetch;
    ct_loader *l = NULL;
    double t0 = ct_time_s();
    ct_status st = ct_loader_init(&l, &o);
    double dt = ct_time_s() - t0;
    if (st) fprintf(stderr, "init: %s\n", ct_last_error());
    ct_loader_free(l);
    return dt;
}

static void spin(double seconds) {
    double end = ct_time_s() + seconds;
    while (ct_time_s() < end) {
    }
}

/* Take n batches; step_s of simulated work after each; cold: drop the
 * shard's pages first. */
static void run(const char *path, int B, int T, bool shuffle, int prefetch, int n,
                double step_s, bool cold) {
    if (cold) drop_cache(path);
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = path;
    o.B = B;
    o.T = T;
    o.vocab_size = 0; /* measured above; here only the batches */
    o.shuffle = shuffle;
    o.seed = 1;
    o.prefetch = prefetch;
    ct_loader *l = NULL;
    if (ct_loader_init(&l, &o)) {
        fprintf(stderr, "init: %s\n", ct_last_error());
        return;
    }
    int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    double t0 = ct_time_s();
    for (int i = 0; i < n; i++) {
        if (ct_loader_next(l, in, tg)) {
            fprintf(stderr, "next: %s\n", ct_last_error());
            break;
        }
        if (step_s > 0) spin(step_s);
    }
    double dt = ct_time_s() - t0;
    printf("  B=%d T=%d %-10s %-4s prefetch %d, step %3.0f us: %8.0f batches/s %7.1f Mtok/s, "
           "wait %6.2f us/batch\n", B, T, shuffle ? "shuffled" : "sequential",
           cold ? "cold" : "warm", prefetch, step_s * 1e6, n / dt,
           (double)n * B * T / dt / 1e6, ct_loader_wait_total_s(l) / n * 1e6);
    free(in);
    free(tg);
    ct_loader_free(l);
}

/* SFT_SHARDS instruction shards under dir (sft_<pid>_<k>.bin + .sft):
 * examples of 16..1024 tokens, the second half of each counted. */
static int write_sft(const char *dir, uint64_t x) {
    uint32_t *tok = malloc((size_t)SFT_TOKENS * sizeof *tok);
    uint8_t *mask = malloc(1100);
    if (!tok || !mask) return 1;
    for (int k = 0; k < SFT_SHARDS; k++) {
        char path[1024], side[1040];
        snprintf(path, sizeof path, "%s/sft_%d_%d.bin", dir, (int)getpid(), k);
        snprintf(side, sizeof side, "%s/sft_%d_%d.sft", dir, (int)getpid(), k);
        for (int64_t i = 0; i < SFT_TOKENS; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            tok[i] = (uint32_t)(x % VOCAB);
        }
        ct_sft_writer *w = NULL;
        if (ct_shard_write(path, tok, SFT_TOKENS, 1) || ct_sft_writer_open(&w, side)) {
            fprintf(stderr, "%s\n", ct_last_error());
            return 1;
        }
        for (int64_t at = 0; at < SFT_TOKENS;) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            int64_t n = 16 + (int64_t)(x % 1009);
            if (n > SFT_TOKENS - at) n = SFT_TOKENS - at;
            for (int64_t i = 0; i < n; i++) mask[i] = i > n / 2;
            if (ct_sft_writer_add(w, mask, n)) {
                fprintf(stderr, "%s\n", ct_last_error());
                return 1;
            }
            at += n;
        }
        if (ct_sft_writer_commit(w)) {
            fprintf(stderr, "%s\n", ct_last_error());
            return 1;
        }
    }
    free(tok);
    free(mask);
    return 0;
}

static void unlink_sft(const char *dir) {
    for (int k = 0; k < SFT_SHARDS; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/sft_%d_%d.bin", dir, (int)getpid(), k);
        unlink(path);
        snprintf(path, sizeof path, "%s/sft_%d_%d.sft", dir, (int)getpid(), k);
        unlink(path);
    }
}

/* Take n instruction batches (with positions, as the trainer does). */
static void run_sft(const char *glob, int B, int T, bool shuffle, bool packing, int prefetch,
                    int n) {
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = glob;
    o.B = B;
    o.T = T;
    o.shuffle = shuffle;
    o.packing = packing;
    o.seed = 1;
    o.prefetch = prefetch;
    ct_loader *l = NULL;
    double t0 = ct_time_s();
    if (ct_loader_init(&l, &o)) {
        fprintf(stderr, "init: %s\n", ct_last_error());
        return;
    }
    double open_s = ct_time_s() - t0;
    size_t bt = (size_t)B * T;
    int32_t *in = malloc(bt * sizeof *in), *tg = malloc(bt * sizeof *tg);
    int32_t *pos = malloc(bt * sizeof *pos);
    int64_t counted = 0;
    t0 = ct_time_s();
    for (int i = 0; i < n; i++) {
        counted += ct_loader_counted_ahead(l, 1);
        if (ct_loader_next_pos(l, in, tg, pos)) {
            fprintf(stderr, "next: %s\n", ct_last_error());
            break;
        }
    }
    double dt = ct_time_s() - t0;
    printf("  sft B=%d T=%d %-10s %-7s prefetch %d: open %6.1f ms, %8.0f batches/s %7.1f "
           "Mtok/s, wait %6.2f us/batch (%lld counted)\n", B, T,
           shuffle ? "shuffled" : "sequential", packing ? "packed" : "one/row", prefetch,
           open_s * 1e3, n / dt, (double)n * B * T / dt / 1e6,
           ct_loader_wait_total_s(l) / n * 1e6, (long long)counted);
    free(in);
    free(tg);
    free(pos);
    ct_loader_free(l);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char path[1024];
    snprintf(path, sizeof path, "%s/bench_loader_%d.bin", dir, (int)getpid());
    uint32_t *tok = malloc((size_t)N_TOKENS * sizeof *tok);
    if (!tok) return 1;
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < N_TOKENS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        tok[i] = (uint32_t)(x % VOCAB);
    }
    if (ct_shard_write(path, tok, N_TOKENS, 1)) {
        fprintf(stderr, "%s\n", ct_last_error());
        return 1;
    }
    free(tok);
    printf("shard %s: %d tokens (version 1, %.1f MB)\n", path, N_TOKENS,
           (N_TOKENS * 2.0 + 1024) / 1e6);

    printf("open + validate (B=8, T=1024, prefetch 0):\n");
    drop_cache(path);
    printf("  cold (pages dropped):        %7.1f ms\n", open_s(path, VOCAB, 0) * 1e3);
    for (int r = 0; r < 3; r++)
        printf("  warm, vocab check:           %7.1f ms\n", open_s(path, VOCAB, 0) * 1e3);
    printf("  warm, no vocab check:        %7.1f ms\n", open_s(path, 0, 0) * 1e3);
    printf("  warm, old int32-chunk check: %7.1f ms\n", old_check_s(path) * 1e3);
    printf("  warm, vocab check, prefetch 2 (thread start and stop): %.1f ms\n",
           open_s(path, VOCAB, 2) * 1e3);

    const int pfs[] = {0, 2, 8};
    printf("throughput, model-free loop (no step):\n");
    for (int sh = 0; sh <= 1; sh++)
        for (int i = 0; i < 3; i++) run(path, 8, 1024, sh, pfs[i], 20000, 0, false);
    printf("with a simulated 500 us step (spin) after each batch:\n");
    for (int cold = 0; cold <= 1; cold++)
        for (int i = 0; i < 3; i++) run(path, 8, 1024, true, pfs[i], 2000, 500e-6, cold);
    unlink(path);

    if (write_sft(dir, 0x2545F4914F6CDD1Dull)) return 1;
    char sglob[1024];
    snprintf(sglob, sizeof sglob, "%s/sft_%d_*.bin", dir, (int)getpid());
    printf("instruction data, %d shards of %d tokens (examples of 16..1024 tokens):\n",
           SFT_SHARDS, SFT_TOKENS);
    for (int pf = 0; pf <= 2; pf += 2) {
        run_sft(sglob, 8, 1024, true, true, pf, 5000);
        run_sft(sglob, 8, 1024, false, false, pf, 5000);
    }
    unlink_sft(dir);
    return 0;
}
