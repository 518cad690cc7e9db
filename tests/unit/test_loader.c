/*
 * Loader tests over small synthetic shards (versions 1 and 2, four lengths):
 * the sequential order against llm.c's loop (shard switches, wraparound,
 * ranks), shuffled epochs (every window once, seed determinism, shard-major
 * order), the dealing of windows to ranks, exact resume and skip in both modes
 * with and without prefetch, reset, position checks, the vocabulary check, a
 * read error carried over from the prefetch thread, and the wait counters.
 * Every token encodes its shard and position, so a batch names its window.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/train.h"
#include "data/shard/shard.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 2, T = 8, BT = B * T, NSH = 4, VOCAB = 120000, NWIN = 126 };
/* windows of B*T+1 tokens at stride B*T: 62 + 22 + 2 + 40 = 126 = NWIN */
static const int64_t shard_len[NSH] = {1000, 357, 40, 644};
static const int shard_ver[NSH] = {1, 2, 1, 2};
static char dir[128];

/* Token i of shard s: version 2 shards hold values above 65535. */
static uint32_t tok_value(int s, int64_t i) {
    return (uint32_t)((shard_ver[s] == 2 ? 100000 : 0) + s * 5000 + i);
}

/* A window's id: shard * 100000 + offset. */
static int64_t win_id(int s, int64_t off) { return (int64_t)s * 100000 + off; }

/* Window id of a batch, or -1 when the batch is not one window's tokens. */
static int64_t batch_id(const int32_t *in, const int32_t *tg) {
    uint32_t v0 = (uint32_t)in[0];
    uint32_t v = v0 >= 100000 ? v0 - 100000 : v0;
    int s = (int)(v / 5000);
    int64_t off = v % 5000;
    if (s < 0 || s >= NSH || off + BT + 1 > shard_len[s]) return -1;
    for (int i = 0; i < BT; i++)
        if ((uint32_t)in[i] != tok_value(s, off + i) || (uint32_t)tg[i] != tok_value(s, off + i + 1))
            return -1;
    return win_id(s, off);
}

static void sleep_ms(int ms) {
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static ct_loader *open_at(int line, const char *spec, bool shuffle, uint64_t seed, int rank,
                          int world, int prefetch) {
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = spec;
    o.B = B;
    o.T = T;
    o.vocab_size = VOCAB;
    o.shuffle = shuffle;
    o.seed = seed;
    o.rank = rank;
    o.world = world;
    o.prefetch = prefetch;
    ct_loader *l = NULL;
    ct_status st = ct_loader_init(&l, &o);
    CHECK_MSG(st == CT_OK && l, "line %d: init failed: %s", line, ct_last_error());
    return l;
}
#define OPEN(shuffle, seed, rank, world, prefetch) \
    open_at(__LINE__, dir, shuffle, seed, rank, world, prefetch)

/* Take n batches into ids[n]; returns how many were whole windows. */
static int take(ct_loader *l, int n, int64_t *ids) {
    int32_t in[BT], tg[BT];
    int good = 0;
    for (int i = 0; i < n; i++) {
        ct_status st = ct_loader_next(l, in, tg);
        ids[i] = st == CT_OK ? batch_id(in, tg) : -2;
        good += ids[i] >= 0;
    }
    return good;
}

static bool same(const int64_t *a, const int64_t *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Batches rank takes per sequential epoch: windows at rank*BT + k*world*BT,
 * while the whole step of all ranks (world*BT + 1 tokens from k*world*BT)
 * fits, so every rank takes the same number. */
static int64_t seq_per_epoch(int rank, int world) {
    int64_t n = 0;
    for (int s = 0; s < NSH; s++)
        for (int64_t p = (int64_t)rank * BT; p - rank * BT + (int64_t)world * BT + 1 <=
             shard_len[s]; p += (int64_t)world * BT)
            n++;
    return n;
}

/* ------------------------------------------------------------ sequential */

/* llm.c's loop: move on (and wrap) only when the next step of all ranks
 * (world*BT + 1 tokens from the step's start) no longer fits. */
typedef struct ref_seq {
    int shard, rank, world;
    int64_t pos;
} ref_seq;

static int64_t ref_seq_next(ref_seq *r) {
    while (r->pos - (int64_t)r->rank * BT + (int64_t)BT * r->world + 1 > shard_len[r->shard]) {
        r->shard = (r->shard + 1) % NSH;
        r->pos = (int64_t)r->rank * BT;
    }
    int64_t id = win_id(r->shard, r->pos);
    r->pos += (int64_t)BT * r->world;
    return id;
}

static void test_sequential(void) {
    for (int world = 1; world <= 3; world++) {
        for (int rank = 0; rank < world; rank++) {
            for (int pf = 0; pf <= 3; pf += 3) {
                ct_loader *l = OPEN(false, 0, rank, world, pf);
                if (!l) return;
                int64_t P = seq_per_epoch(rank, world);
                CHECK(ct_loader_batches_per_epoch(l) == P);
                ref_seq ref = {0, rank, world, (int64_t)rank * BT};
                int bad = 0, bad_pos = 0, saw_short = 0;
                int32_t in[BT], tg[BT];
                for (int64_t m = 0; m < 2 * P + 5; m++) {
                    ct_loader_pos pos;
                    ct_loader_get_pos(l, &pos);
                    int64_t want = ref_seq_next(&ref);
                    if (pos.epoch != m / P || pos.index != m % P || pos.shuffled != 0 ||
                        win_id(pos.shard, pos.offset) != want)
                        bad_pos++;
                    CHECK(ct_loader_next(l, in, tg) == CT_OK);
                    int64_t got = batch_id(in, tg);
                    /* the exact tokens: row b is [p + b*T, p + b*T + T), targets one on */
                    bad += got != want;
                    saw_short += got / 100000 == 2;
                }
                CHECK_MSG(bad == 0, "world %d rank %d prefetch %d: %d batches differ from "
                          "llm.c's order", world, rank, pf, bad);
                CHECK_MSG(bad_pos == 0, "world %d rank %d: %d positions wrong", world, rank,
                          bad_pos);
                /* the 40-token shard holds windows at 0 and 16 only (two epochs read it
                 * twice): both for world 1, one each for both ranks of world 2 (one
                 * step of 2*BT + 1 tokens), none for world 3 (3*BT + 1 > 40) */
                int short_wins = 0;
                for (int64_t p = (int64_t)rank * BT; p - rank * BT + (int64_t)world * BT + 1 <= 40;
                     p += (int64_t)world * BT)
                    short_wins++;
                CHECK(short_wins == (world == 1 ? 2 : world == 2 ? 1 : 0));
                CHECK(saw_short == 2 * short_wins);
                ct_loader_free(l);
            }
        }
    }
    /* world 1 wraps from the last shard to token 0 of the first */
    ct_loader *l = OPEN(false, 0, 0, 1, 2);
    if (!l) return;
    int64_t ids[NWIN + 1];
    CHECK(take(l, NWIN + 1, ids) == NWIN + 1);
    CHECK(ids[0] == win_id(0, 0) && ids[61] == win_id(0, 61 * BT) && ids[62] == win_id(1, 0));
    CHECK(ids[NWIN - 1] == win_id(3, 39 * BT) && ids[NWIN] == win_id(0, 0));
    ct_loader_free(l);
}

/* -------------------------------------------------------------- shuffled */

static void test_shuffle(void) {
    enum { EPOCHS = 4 };
    static int64_t a[EPOCHS * NWIN], b[EPOCHS * NWIN], c[NWIN];
    ct_loader *l = OPEN(true, 42, 0, 1, 0);
    ct_loader *lp = OPEN(true, 42, 0, 1, 4);
    ct_loader *lo = OPEN(true, 43, 0, 1, 1);
    if (!l || !lp || !lo) return;
    CHECK(ct_loader_batches_per_epoch(l) == NWIN);
    CHECK(take(l, EPOCHS * NWIN, a) == EPOCHS * NWIN);
    CHECK(take(lp, EPOCHS * NWIN, b) == EPOCHS * NWIN);
    CHECK(take(lo, NWIN, c) == NWIN);
    CHECK_MSG(same(a, b, EPOCHS * NWIN), "same seed, prefetch 0 vs 4: streams differ");
    CHECK_MSG(!same(a, c, NWIN), "seeds 42 and 43 gave the same order");
    int orders_differ = 0, shard0_shuffled = 0;
    int first_order[NSH] = {0};
    for (int e = 0; e < EPOCHS; e++) {
        const int64_t *ep = a + e * NWIN;
        /* every window exactly once */
        int dup = 0, missing = 0;
        for (int s = 0; s < NSH; s++) {
            for (int64_t off = 0; off + BT + 1 <= shard_len[s]; off += BT) {
                int n = 0;
                for (int i = 0; i < NWIN; i++) n += ep[i] == win_id(s, off);
                missing += n == 0;
                dup += n > 1;
            }
        }
        CHECK_MSG(dup == 0 && missing == 0, "epoch %d: %d windows twice, %d missing", e, dup,
                  missing);
        /* shard-major: the epoch reads its shards one after another */
        int order[NSH], k = 0;
        order[k++] = (int)(ep[0] / 100000);
        for (int i = 1; i < NWIN; i++)
            if (ep[i] / 100000 != ep[i - 1] / 100000) {
                if (k < NSH) order[k] = (int)(ep[i] / 100000);
                k++;
            }
        CHECK_MSG(k == NSH, "epoch %d switches shards %d times, expected %d", e, k - 1, NSH - 1);
        if (e == 0) memcpy(first_order, order, sizeof order);
        else orders_differ += memcmp(first_order, order, sizeof order) != 0;
        /* shard 0's windows are not read in file order */
        int64_t prev = -1;
        for (int i = 0; i < NWIN; i++) {
            if (ep[i] / 100000 != 0) continue;
            if (ep[i] < prev) shard0_shuffled = 1;
            prev = ep[i];
        }
    }
    CHECK_MSG(orders_differ > 0, "the shard order is the same in %d epochs", EPOCHS);
    CHECK(shard0_shuffled);
    CHECK_MSG(!same(a, a + NWIN, NWIN), "epochs 0 and 1 in the same order");
    ct_loader_free(l);
    ct_loader_free(lp);
    ct_loader_free(lo);
}

/* Rank r's k-th batch of an epoch is window k*world + r of the one-rank order. */
static void test_ranks(void) {
    static int64_t one[2 * NWIN], got[2 * NWIN];
    ct_loader *l1 = OPEN(true, 7, 0, 1, 0);
    if (!l1) return;
    CHECK(take(l1, 2 * NWIN, one) == 2 * NWIN);
    ct_loader_free(l1);
    for (int world = 2; world <= 4; world++) {
        int P = NWIN / world;
        static int seen[2][NSH * 100000 / 16 + 1];
        memset(seen, 0, sizeof seen);
        int bad_deal = 0;
        for (int rank = 0; rank < world; rank++) {
            ct_loader *l = OPEN(true, 7, rank, world, rank % 2 ? 2 : 0);
            if (!l) return;
            CHECK(ct_loader_batches_per_epoch(l) == P);
            CHECK(take(l, 2 * P, got) == 2 * P);
            for (int e = 0; e < 2; e++) {
                for (int k = 0; k < P; k++) {
                    int64_t id = got[e * P + k];
                    seen[e][id / 16]++;
                    bad_deal += id != one[e * NWIN + k * world + rank];
                }
            }
            ct_loader_free(l);
        }
        CHECK_MSG(bad_deal == 0, "world %d: %d batches not dealt as window i -> rank i %% "
                  "world", world, bad_deal);
        for (int e = 0; e < 2; e++) {
            int twice = 0, distinct = 0;
            for (size_t i = 0; i < sizeof seen[e] / sizeof seen[e][0]; i++) {
                twice += seen[e][i] > 1;
                distinct += seen[e][i] > 0;
            }
            CHECK_MSG(twice == 0, "world %d epoch %d: %d windows read by two ranks", world, e,
                      twice);
            /* 126 windows: world 2 and 3 cover them all; world 4 leaves 2 out */
            CHECK_MSG(distinct == P * world, "world %d epoch %d: %d windows, expected %d", world,
                      e, distinct, P * world);
        }
    }
}

/* -------------------------------------------------------- resume and skip */

static void test_resume(void) {
    static int64_t ref[3 * NWIN + 8], got[3 * NWIN + 8];
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        for (int rw = 0; rw < 2; rw++) {
            int rank = rw, world = rw + 1;
            ct_loader *r = OPEN(shuffle, 99, rank, world, 0);
            if (!r) return;
            int P = (int)ct_loader_batches_per_epoch(r);
            CHECK(take(r, 3 * P + 8, ref) == 3 * P + 8);
            ct_loader_free(r);
            const int cuts[] = {5, P - 1, P, 2 * P - 2};
            for (int pf = 0; pf <= 4; pf += 4) {
                for (int c = 0; c < 4; c++) {
                    int cut = cuts[c];
                    ct_loader *a = OPEN(shuffle, 99, rank, world, pf);
                    ct_loader *b = OPEN(shuffle, 99, rank, world, pf);
                    if (!a || !b) return;
                    CHECK(take(a, cut, got) == cut && same(got, ref, cut));
                    if (pf) sleep_ms(2); /* let the thread fill its ring */
                    ct_loader_pos pos;
                    ct_loader_get_pos(a, &pos);
                    unsigned char saved[sizeof pos];
                    memcpy(saved, &pos, sizeof pos);
                    CHECK(sizeof pos == 32);
                    CHECK(pos.epoch == cut / P && pos.index == cut % P &&
                          pos.shuffled == shuffle);
                    CHECK(win_id(pos.shard, pos.offset) == ref[cut]);
                    /* the batches read ahead are neither lost nor repeated */
                    CHECK_MSG(take(a, 3, got) == 3 && same(got, ref + cut, 3),
                              "shuffle %d world %d prefetch %d cut %d: continuation differs",
                              shuffle, world, pf, cut);
                    /* back to the saved position while the thread is ahead */
                    CHECK(ct_loader_set_pos(a, &pos) == CT_OK);
                    CHECK(take(a, 6, got) == 6 && same(got, ref + cut, 6));
                    /* a fresh loader from the serialised position, across an epoch end */
                    CHECK(take(b, 4, got) == 4);
                    ct_loader_pos back;
                    memcpy(&back, saved, sizeof back);
                    CHECK(ct_loader_set_pos(b, &back) == CT_OK);
                    CHECK_MSG(take(b, P + 8, got) == P + 8 && same(got, ref + cut, P + 8),
                              "shuffle %d world %d prefetch %d cut %d: resumed stream differs",
                              shuffle, world, pf, cut);
                    ct_loader_free(a);
                    ct_loader_free(b);
                }
            }
        }
    }
}

static void test_skip_reset(void) {
    static int64_t ref[3 * NWIN + 16], got[16];
    for (int shuffle = 0; shuffle <= 1; shuffle++) {
        ct_loader *r = OPEN(shuffle, 5, 0, 1, 0);
        if (!r) return;
        CHECK(take(r, 3 * NWIN + 16, ref) == 3 * NWIN + 16);
        ct_loader_free(r);
        for (int pf = 0; pf <= 4; pf += 4) {
            ct_loader *l = OPEN(shuffle, 5, 0, 1, pf);
            if (!l) return;
            CHECK(take(l, 3, got) == 3 && same(got, ref, 3));
            if (pf) sleep_ms(2);
            CHECK(ct_loader_skip(l, 2) == CT_OK); /* inside the ring when prefetching */
            ct_loader_pos pos;
            ct_loader_get_pos(l, &pos);
            CHECK(pos.index == 5 && win_id(pos.shard, pos.offset) == ref[5]);
            CHECK(take(l, 1, got) == 1 && got[0] == ref[5]);
            CHECK(ct_loader_skip(l, 0) == CT_OK);
            CHECK(ct_loader_skip(l, 2 * NWIN + 3) == CT_OK); /* past the ring, two epochs */
            ct_loader_get_pos(l, &pos);
            CHECK(pos.epoch == 2 && pos.index == 9);
            CHECK(take(l, 4, got) == 4 && same(got, ref + 2 * NWIN + 9, 4));
            CHECK(ct_loader_skip(l, -1) == CT_ERR_ARG);
            CHECK(take(l, 1, got) == 1 && got[0] == ref[2 * NWIN + 13]);
            /* reset: the first batches again (validation reads these every time) */
            for (int rep = 0; rep < 2; rep++) {
                ct_loader_reset(l);
                CHECK(take(l, 10, got) == 10 && same(got, ref, 10));
            }
            ct_loader_free(l);
        }
    }
}

static void test_set_pos_errors(void) {
    ct_loader *l = OPEN(false, 0, 0, 1, 2);
    ct_loader *s1 = OPEN(true, 1, 0, 1, 0);
    ct_loader *s2 = OPEN(true, 2, 0, 1, 0);
    if (!l || !s1 || !s2) return;
    int64_t got[4];
    CHECK(take(l, 3, got) == 3);
    ct_loader_pos good, p;
    ct_loader_get_pos(l, &good);
    struct {
        const char *what;
        ct_loader_pos pos;
        const char *frag;
    } cases[] = {
        {"mode", good, "shuffled loader"},     {"epoch", good, "epoch -1"},
        {"index", good, "index 126"},          {"negative index", good, "index -1"},
        {"shard", good, "shard 4 is out of range"}, {"negative shard", good, "shard -1"},
        {"offset", good, "says token"},        {"other shard", good, "says token"},
    };
    cases[0].pos.shuffled = 1;
    cases[1].pos.epoch = -1;
    cases[2].pos.index = NWIN;
    cases[3].pos.index = -1;
    cases[4].pos.shard = NSH;
    cases[5].pos.shard = -1;
    cases[6].pos.offset += BT;
    cases[7].pos.shard = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_status st = ct_loader_set_pos(l, &cases[i].pos);
        CHECK_MSG(st == CT_ERR_ARG && strstr(ct_last_error(), cases[i].frag),
                  "%s: status %d, message: %s", cases[i].what, st, ct_last_error());
    }
    /* the loader is unchanged by refused positions */
    ct_loader_get_pos(l, &p);
    CHECK(memcmp(&p, &good, sizeof p) == 0);
    CHECK(take(l, 1, got) == 1 && got[0] == win_id(0, 3 * BT));
    /* a position of another seed does not fit this loader */
    ct_loader_get_pos(s1, &p);
    ct_loader_pos p2;
    ct_loader_get_pos(s2, &p2);
    CHECK(win_id(p.shard, p.offset) != win_id(p2.shard, p2.offset));
    CHECK(ct_loader_set_pos(s2, &p) == CT_ERR_ARG);
    ct_loader_free(l);
    ct_loader_free(s1);
    ct_loader_free(s2);
}

/* ------------------------------------------------------------ the checks */

static void expect_init_fail(int line, const ct_loader_opts *o, ct_status code, const char *f1,
                             const char *f2) {
    ct_loader *l = (ct_loader *)(uintptr_t)1;
    ct_error_clear();
    ct_status st = ct_loader_init(&l, o);
    const char *msg = ct_last_error();
    CHECK_MSG(st == code && l == NULL, "line %d: status %d, expected %d: %s", line, st, code,
              msg);
    if (f1) CHECK_MSG(strstr(msg, f1), "line %d: message lacks '%s': %s", line, f1, msg);
    if (f2) CHECK_MSG(strstr(msg, f2), "line %d: message lacks '%s': %s", line, f2, msg);
    if (st == CT_OK) ct_loader_free(l);
}
#define INIT_FAIL(o, code, f1, f2) expect_init_fail(__LINE__, o, code, f1, f2)

static void test_init_errors(void) {
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = dir;
    o.B = B;
    o.T = T;
    o.vocab_size = VOCAB;
    ct_loader_opts x = o;
    x.B = 0;
    INIT_FAIL(&x, CT_ERR_ARG, "B=0", NULL);
    x = o;
    x.rank = 2;
    x.world = 2;
    INIT_FAIL(&x, CT_ERR_ARG, "rank 2 of world 2", NULL);
    x = o;
    x.prefetch = -1;
    INIT_FAIL(&x, CT_ERR_ARG, "data.prefetch", NULL);
    x = o;
    x.spec = NULL;
    INIT_FAIL(&x, CT_ERR_ARG, "data.train is empty", NULL);
    char p[512];
    ct_tmpdir_join(p, sizeof p, dir, "nope.bin");
    x.spec = p;
    INIT_FAIL(&x, CT_ERR_IO, p, NULL);
    ct_tmpdir_join(p, sizeof p, dir, "*.nothing");
    INIT_FAIL(&x, CT_ERR_IO, p, NULL);
    x = o;
    x.T = 600; /* B*T+1 = 1201 > every shard */
    INIT_FAIL(&x, CT_ERR_ARG, "train_000000.bin", "fewer than one batch");
    x = o;
    x.world = 70; /* one step of 70 ranks needs 70*16 + 1 tokens */
    x.rank = 69;
    INIT_FAIL(&x, CT_ERR_ARG, "no shard holds the 1121 tokens", NULL);
    x.shuffle = true;
    x.world = NWIN + 1;
    x.rank = 0;
    INIT_FAIL(&x, CT_ERR_ARG, "126 windows", "127 ranks");
    /* a bad shard among good ones is named */
    char bad[256];
    CHECK(ct_tmpdir_make(bad, sizeof bad, "loader_bad") != NULL);
    uint32_t t[100];
    for (int i = 0; i < 100; i++) t[i] = (uint32_t)i;
    ct_tmpdir_join(p, sizeof p, bad, "train_000000.bin");
    CHECK(ct_shard_write(p, t, 100, 1) == CT_OK);
    ct_tmpdir_join(p, sizeof p, bad, "train_000001.bin");
    CHECK(ct_tmpdir_write(p, "not a shard, too short for a header", 35) == 0);
    x = o;
    x.spec = bad;
    INIT_FAIL(&x, CT_ERR_FORMAT, p, NULL);
    CHECK(ct_tmpdir_remove(bad) == 0);
}

/* Tokens < 500 except `bad` at the given indices; the first must be named. */
static void vocab_case(int version, int64_t n, int64_t i1, uint32_t v1, int64_t i2, uint32_t v2) {
    char sub[256], p[512];
    CHECK(ct_tmpdir_make(sub, sizeof sub, "loader_vocab") != NULL);
    ct_tmpdir_join(p, sizeof p, sub, "train_000000.bin");
    uint32_t *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++) t[i] = (uint32_t)(i * 7919 % 500);
    t[i1] = v1;
    if (i2 >= 0) t[i2] = v2;
    CHECK(ct_shard_write(p, t, n, version) == CT_OK);
    free(t);
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = sub;
    o.B = B;
    o.T = T;
    o.vocab_size = 500;
    char frag[96];
    snprintf(frag, sizeof frag, "token %u at index %lld", v1, (long long)i1);
    INIT_FAIL(&o, CT_ERR_ARG, p, frag);
    CHECK(strstr(ct_last_error(), "vocab_size is 500"));
    /* a vocabulary that holds every token, or no check at all: fine */
    o.vocab_size = (int)(v1 > v2 ? v1 : v2) + 1;
    ct_loader *l = NULL;
    CHECK(ct_loader_init(&l, &o) == CT_OK);
    ct_loader_free(l);
    o.vocab_size = 0;
    CHECK(ct_loader_init(&l, &o) == CT_OK);
    ct_loader_free(l);
    CHECK(ct_tmpdir_remove(sub) == 0);
}

static void test_vocab(void) {
    for (int v = 1; v <= 2; v++) {
        vocab_case(v, 9000, 4101, 500, 8000, 600); /* token == vocab_size, in the 2nd block */
        vocab_case(v, 9000, 0, 501, -1, 0);
        vocab_case(v, 9000, 8999, 65535, -1, 0); /* the last token */
        vocab_case(v, 4096, 4095, 500, -1, 0);   /* one whole block */
    }
    vocab_case(2, 300, 17, 100000, 250, 500);
}

/* A version 2 token above INT32_MAX with the check off fails at read time:
 * on the caller's thread or carried over from the prefetch thread. */
static void test_read_error(void) {
    char sub[256], p[512];
    CHECK(ct_tmpdir_make(sub, sizeof sub, "loader_err") != NULL);
    ct_tmpdir_join(p, sizeof p, sub, "train_000000.bin");
    uint32_t t[200];
    for (int i = 0; i < 200; i++) t[i] = (uint32_t)i;
    t[100] = 4000000000u; /* inside window 6 = tokens [96, 112] */
    CHECK(ct_shard_write(p, t, 200, 2) == CT_OK);
    for (int pf = 0; pf <= 3; pf += 3) {
        ct_loader_opts o = ct_loader_opts_default();
        o.spec = sub;
        o.B = B;
        o.T = T;
        o.prefetch = pf;
        ct_loader *l = NULL;
        CHECK(ct_loader_init(&l, &o) == CT_OK);
        if (!l) break;
        int32_t in[BT], tg[BT];
        ct_loader_pos at2;
        int ok = 0;
        for (int i = 0; i < 6; i++) {
            if (i == 2) ct_loader_get_pos(l, &at2);
            ok += ct_loader_next(l, in, tg) == CT_OK && in[0] == i * BT;
        }
        CHECK(ok == 6);
        for (int rep = 0; rep < 2; rep++) { /* the same error until the position moves */
            ct_error_clear();
            CHECK(ct_loader_next(l, in, tg) == CT_ERR_FORMAT);
            CHECK_MSG(strstr(ct_last_error(), p) && strstr(ct_last_error(), "4000000000") &&
                      strstr(ct_last_error(), "position 100"), "prefetch %d: %s", pf,
                      ct_last_error());
            CHECK_MSG(strstr(ct_last_site(), "shard.c"), "site %s", ct_last_site());
        }
        ct_loader_pos pos;
        ct_loader_get_pos(l, &pos);
        CHECK(pos.index == 6 && pos.offset == 6 * BT);
        CHECK(ct_loader_set_pos(l, &at2) == CT_OK);
        CHECK(ct_loader_next(l, in, tg) == CT_OK && in[0] == 2 * BT);
        CHECK(ct_loader_skip(l, 4) == CT_OK); /* over the bad window */
        CHECK(ct_loader_next(l, in, tg) == CT_OK && in[0] == 7 * BT && tg[BT - 1] == 8 * BT);
        ct_loader_free(l);
    }
    CHECK(ct_tmpdir_remove(sub) == 0);
}

static void test_wait_and_specs(void) {
    for (int pf = 0; pf <= 2; pf += 2) {
        ct_loader *l = OPEN(true, 3, 0, 1, pf);
        if (!l) return;
        CHECK(ct_loader_wait_s(l) == 0 && ct_loader_wait_total_s(l) == 0);
        int32_t in[BT], tg[BT];
        double total = 0;
        int bad = 0;
        for (int i = 0; i < 50; i++) {
            CHECK(ct_loader_next(l, in, tg) == CT_OK);
            double w = ct_loader_wait_s(l);
            total += w;
            bad += !(w >= 0) || ct_loader_wait_total_s(l) != total;
        }
        CHECK(bad == 0);
        CHECK(ct_loader_wait_total_s(l) > 0);
        ct_loader_free(l);
    }
    /* specs: directory with a split, glob, one file */
    ct_loader *l = OPEN(false, 0, 0, 1, 0);
    if (l) {
        CHECK(ct_loader_num_shards(l) == NSH);
        CHECK(ct_loader_total_tokens(l) == 1000 + 357 + 40 + 644);
        ct_loader_free(l);
    }
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = dir;
    o.split = "val";
    o.B = B;
    o.T = T;
    CHECK(ct_loader_init(&l, &o) == CT_OK);
    if (l) {
        CHECK(ct_loader_num_shards(l) == 1 && ct_loader_total_tokens(l) == 300);
        ct_loader_free(l);
    }
    char spec[512];
    snprintf(spec, sizeof spec, "%s/train_00000[13].bin", dir);
    l = open_at(__LINE__, spec, false, 0, 0, 1, 0);
    if (l) {
        int64_t id[23];
        CHECK(ct_loader_num_shards(l) == 2);
        CHECK(take(l, 23, id) == 23 && id[0] == win_id(1, 0) && id[22] == win_id(3, 0));
        ct_loader_free(l);
    }
    ct_tmpdir_join(spec, sizeof spec, dir, "train_000002.bin");
    l = open_at(__LINE__, spec, false, 0, 0, 1, 0);
    if (l) {
        CHECK(ct_loader_num_shards(l) == 1 && ct_loader_batches_per_epoch(l) == 2);
        ct_loader_free(l);
    }
    ct_loader_free(NULL);
}

int main(void) {
    if (!ct_tmpdir_make(dir, sizeof dir, "loader")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    for (int s = 0; s < NSH; s++) {
        uint32_t *t = malloc((size_t)shard_len[s] * sizeof *t);
        for (int64_t i = 0; i < shard_len[s]; i++) t[i] = tok_value(s, i);
        char name[64], p[512];
        snprintf(name, sizeof name, "train_%06d.bin", s);
        CHECK(ct_shard_write(ct_tmpdir_join(p, sizeof p, dir, name), t, shard_len[s],
                             shard_ver[s]) == CT_OK);
        free(t);
    }
    uint32_t v[300];
    for (int i = 0; i < 300; i++) v[i] = (uint32_t)(45000 + i);
    char p[512];
    CHECK(ct_shard_write(ct_tmpdir_join(p, sizeof p, dir, "val_000000.bin"), v, 300, 1) ==
          CT_OK);

    test_sequential();
    test_shuffle();
    test_ranks();
    test_resume();
    test_skip_reset();
    test_set_pos_errors();
    test_init_errors();
    test_vocab();
    test_read_error();
    test_wait_and_specs();
    CHECK(ct_tmpdir_remove(dir) == 0);
    return ct_test_result("test_loader");
}
