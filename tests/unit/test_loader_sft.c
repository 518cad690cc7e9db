/*
 * Loader tests over instruction shards (.bin + .sft sidecars written here):
 * the exact rows, targets and positions of a hand-made set (packing on and
 * off), random sets against a plain reimplementation of the spec in
 * include/ctrain/loader.h (shuffle, group_by_length, packing, ranks,
 * accumulation, prefetch, three epochs), every example once per epoch with
 * the empty rows at the end, counted_ahead across an epoch boundary, two
 * ranks at B against one at 2B, exact resume, skip and reset, position mode
 * checks, bad sidecars and mixed shards, the truncation warning, and the new
 * calls on plain shards.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/loader.h"
#include "data/shard/shard.h"
#include "data/shard/sft_shard.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXE 300
#define MAXLEN 40
#define MAXSH 4
#define MAXT 32
#define MAXROWS (MAXE + 64)

/* A set of examples split over shards: tokens encode (example, position). */
typedef struct ex_set {
    int E, nsh;
    int end[MAXSH]; /* examples of shard s end before end[s] */
    int len[MAXE];
    uint32_t tok[MAXE][MAXLEN];
    uint8_t mask[MAXE][MAXLEN];
} ex_set;

static char root[64];
static uint64_t rng_state = 12345;

static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* Write set d into a new directory under root as train_*.bin + .sft. */
static void write_set(char *dir, size_t cap, const char *tag, const ex_set *d, bool sidecars) {
    snprintf(dir, cap, "%s/%s", root, tag);
    CHECK(mkdir(dir, 0755) == 0);
    int first = 0;
    for (int s = 0; s < d->nsh; s++) {
        uint32_t *t = malloc((size_t)MAXE * MAXLEN * sizeof *t);
        int64_t n = 0;
        char p[512], q[512];
        snprintf(p, sizeof p, "%s/train_%06d.bin", dir, s);
        snprintf(q, sizeof q, "%s/train_%06d.sft", dir, s);
        ct_sft_writer *w = NULL;
        if (sidecars) CHECK(ct_sft_writer_open(&w, q) == CT_OK);
        for (int x = first; x < d->end[s]; x++) {
            for (int k = 0; k < d->len[x]; k++) t[n++] = d->tok[x][k];
            if (w) CHECK(ct_sft_writer_add(w, d->mask[x], d->len[x]) == CT_OK);
        }
        CHECK(ct_shard_write(p, t, n, 1 + s % 2) == CT_OK);
        if (w) CHECK(ct_sft_writer_commit(w) == CT_OK);
        free(t);
        first = d->end[s];
    }
}

/* Random examples: lengths 1..maxlen (some exactly T, 1, longer than T). */
static void random_set(ex_set *d, int E, int nsh, int T, int maxlen) {
    memset(d, 0, sizeof *d);
    d->E = E;
    d->nsh = nsh;
    for (int x = 0; x < E; x++) {
        int r = (int)rnd(10);
        d->len[x] = r == 0 ? 1 : r == 1 ? T : r == 2 ? T + 1 + (int)rnd((uint32_t)(maxlen - T)) :
                    1 + (int)rnd((uint32_t)T);
        for (int k = 0; k < d->len[x]; k++) {
            d->tok[x][k] = (uint32_t)(1 + x * MAXLEN + k);
            d->mask[x][k] = k > 0 && rnd(3) != 0;
        }
    }
    for (int s = 0; s < nsh; s++) d->end[s] = s == nsh - 1 ? E : (E * (s + 1)) / nsh;
}

/* ------------------------------------------------------------ reference */

typedef struct ref_cfg {
    int B, T, world, accum;
    bool shuffle, packing, group;
    uint64_t seed;
} ref_cfg;

static uint64_t ref_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int ref_n(const ex_set *d, const ref_cfg *c, int x) {
    return d->len[x] < c->T ? d->len[x] : c->T;
}

/* The rows of one epoch as the spec says, empty rows included: rin, rtg,
 * rpos [rows][T]. Returns the row count; *real: rows holding examples. */
static int ref_epoch(const ex_set *d, const ref_cfg *c, int64_t epoch, int32_t *rin,
                     int32_t *rtg, int32_t *rpos, int *real) {
    int order[MAXE], E = d->E, T = c->T;
    for (int i = 0; i < E; i++) order[i] = i;
    if (c->shuffle) {
        uint64_t st = ref_mix(ref_mix(ref_mix(c->seed) ^ (uint64_t)epoch) ^ 0);
        for (int i = E - 1; i > 0; i--) {
            st += 0x9e3779b97f4a7c15ull;
            int j = (int)(ref_mix(st) % (uint64_t)(i + 1));
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    if (c->group) { /* stable insertion sort, longest first, per run */
        int run = 50 * c->B * c->world;
        for (int lo = 0; lo < E; lo += run) {
            int hi = lo + run < E ? lo + run : E;
            for (int i = lo + 1; i < hi; i++) {
                int key = order[i], j = i - 1;
                while (j >= lo && ref_n(d, c, order[j]) < ref_n(d, c, key)) {
                    order[j + 1] = order[j];
                    j--;
                }
                order[j + 1] = key;
            }
        }
    }
    int rows = 0, col = T; /* col: the current row's next column (T: no row yet) */
    for (int i = 0; i < E; i++) {
        int x = order[i], n = ref_n(d, c, x);
        if (!c->packing || col + n > T) {
            if (rows > 0)
                for (int k = col; k < T; k++) {
                    rin[(rows - 1) * T + k] = 0;
                    rtg[(rows - 1) * T + k] = -1;
                    rpos[(rows - 1) * T + k] = k - col;
                }
            rows++;
            col = 0;
        }
        int32_t *ri = rin + (rows - 1) * T, *rt = rtg + (rows - 1) * T, *rp = rpos + (rows - 1) * T;
        for (int k = 0; k < n; k++) {
            ri[col + k] = (int32_t)d->tok[x][k];
            rt[col + k] = k + 1 < n && d->mask[x][k + 1] ? (int32_t)d->tok[x][k + 1] : -1;
            rp[col + k] = k;
        }
        col += n;
    }
    for (int k = col; k < T; k++) {
        rin[(rows - 1) * T + k] = 0;
        rtg[(rows - 1) * T + k] = -1;
        rpos[(rows - 1) * T + k] = k - col;
    }
    *real = rows;
    int step = c->B * c->world * c->accum;
    while (rows % step) {
        for (int k = 0; k < T; k++) {
            rin[rows * T + k] = 0;
            rtg[rows * T + k] = -1;
            rpos[rows * T + k] = k;
        }
        rows++;
    }
    return rows;
}

/* ------------------------------------------------------------ helpers */

static ct_loader *open_sft(int line, const char *spec, const ref_cfg *c, int rank, int prefetch,
                           int vocab) {
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = spec;
    o.B = c->B;
    o.T = c->T;
    o.vocab_size = vocab;
    o.shuffle = c->shuffle;
    o.seed = c->seed;
    o.rank = rank;
    o.world = c->world;
    o.prefetch = prefetch;
    o.packing = c->packing;
    o.group_by_length = c->group;
    o.accum = c->accum;
    ct_loader *l = NULL;
    ct_status st = ct_loader_init(&l, &o);
    CHECK_MSG(st == CT_OK && l, "line %d: init failed: %s", line, ct_last_error());
    return l;
}
#define OPEN(spec, c, rank, pf) open_sft(__LINE__, spec, c, rank, pf, 100000)

static bool rows_equal(const int32_t *a, const int32_t *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* ------------------------------------------------------------ hand-made */

/* Five examples over two shards, T = 8: see the expectations below. */
static void hand_set(ex_set *d) {
    static const uint32_t toks[5][10] = {{10, 11, 12, 13},
                                         {20, 21, 22},
                                         {30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
                                         {40},
                                         {50, 51, 52, 53, 54}};
    static const uint8_t masks[5][10] = {{0, 0, 1, 1}, {0, 1, 1}, {0, 0, 0, 0, 0, 1, 1, 1, 1, 1},
                                         {0}, {0, 1, 0, 1, 1}};
    static const int lens[5] = {4, 3, 10, 1, 5};
    memset(d, 0, sizeof *d);
    d->E = 5;
    d->nsh = 2;
    d->end[0] = 2;
    d->end[1] = 5;
    for (int x = 0; x < 5; x++) {
        d->len[x] = lens[x];
        memcpy(d->tok[x], toks[x], sizeof toks[x]);
        memcpy(d->mask[x], masks[x], sizeof masks[x]);
    }
}

static int warn_count;
static void count_warn(ct_log_level lv, const char *msg, void *user) {
    (void)user;
    if (lv == CT_LOG_WARN && strstr(msg, "--max-len") && strstr(msg, "1 of 5 examples")) warn_count++;
}

/* The other tests' truncation warnings are expected: keep the output short. */
static void quiet(ct_log_level lv, const char *msg, void *user) {
    (void)user;
    if (lv >= CT_LOG_WARN && !strstr(msg, "--max-len")) fprintf(stderr, "%s\n", msg);
}

static void test_hand(void) {
    ex_set *d = malloc(sizeof *d);
    hand_set(d);
    char dir[256];
    write_set(dir, sizeof dir, "hand", d, true);
    ref_cfg c = {.B = 2, .T = 8, .world = 1, .accum = 1, .packing = true};

    /* packing: rows {e0 e1} {e2 cut to 8} {e3 e4} and one empty row */
    static const int32_t pin[4][8] = {{10, 11, 12, 13, 20, 21, 22, 0},
                                      {30, 31, 32, 33, 34, 35, 36, 37},
                                      {40, 50, 51, 52, 53, 54, 0, 0},
                                      {0, 0, 0, 0, 0, 0, 0, 0}};
    static const int32_t ptg[4][8] = {{-1, 12, 13, -1, 21, 22, -1, -1},
                                      {-1, -1, -1, -1, 35, 36, 37, -1},
                                      {-1, 51, -1, 53, 54, -1, -1, -1},
                                      {-1, -1, -1, -1, -1, -1, -1, -1}};
    static const int32_t ppos[4][8] = {{0, 1, 2, 3, 0, 1, 2, 0},
                                       {0, 1, 2, 3, 4, 5, 6, 7},
                                       {0, 0, 1, 2, 3, 4, 0, 1},
                                       {0, 1, 2, 3, 4, 5, 6, 7}};
    for (int pf = 0; pf <= 2; pf += 2) {
        warn_count = 0;
        ct_log_set(count_warn, NULL);
        ct_loader *l = OPEN(dir, &c, 0, pf);
        ct_log_set(quiet, NULL);
        if (!l) break;
        CHECK(warn_count == 1);
        CHECK(ct_loader_is_sft(l));
        CHECK(ct_loader_batches_per_epoch(l) == 2 && ct_loader_batches_in_epoch(l, 7) == 2);
        CHECK(ct_loader_total_tokens(l) == 4 + 3 + 10 + 1 + 5);
        CHECK(ct_loader_num_shards(l) == 2);
        ct_loader_sft_stats s;
        CHECK(ct_loader_sft_stats_get(l, &s));
        CHECK(s.examples == 5 && s.truncated == 1 && s.rows == 3 && s.counted == 10);
        CHECK(s.fill > 21.0 / 24 - 1e-12 && s.fill < 21.0 / 24 + 1e-12);
        CHECK(ct_loader_counted_ahead(l, 0) == 0);
        CHECK(ct_loader_counted_ahead(l, 1) == 7);
        CHECK(ct_loader_counted_ahead(l, 2) == 10);
        CHECK(ct_loader_counted_ahead(l, 3) == 17); /* into epoch 1 */
        ct_loader_pos p;
        ct_loader_get_pos(l, &p);
        CHECK(p.epoch == 0 && p.index == 0 && p.shard == 0 && p.offset == 0 && p.shuffled == 6);
        for (int e = 0; e < 2; e++) {
            for (int m = 0; m < 2; m++) {
                int32_t in[16], tg[16], pos[16];
                if (m == 1) {
                    ct_loader_get_pos(l, &p); /* the batch starts with e3: shard 1, token 10 */
                    CHECK(p.epoch == e && p.index == 1 && p.shard == 1 && p.offset == 10);
                    CHECK(ct_loader_counted_ahead(l, 1) == 3);
                }
                CHECK(ct_loader_next_pos(l, in, tg, pos) == CT_OK);
                CHECK(rows_equal(in, pin[2 * m], 8) && rows_equal(in + 8, pin[2 * m + 1], 8));
                CHECK(rows_equal(tg, ptg[2 * m], 8) && rows_equal(tg + 8, ptg[2 * m + 1], 8));
                CHECK(rows_equal(pos, ppos[2 * m], 8) && rows_equal(pos + 8, ppos[2 * m + 1], 8));
            }
        }
        /* the plain call: the same rows without positions */
        ct_loader_reset(l);
        int32_t in[16], tg[16];
        CHECK(ct_loader_next(l, in, tg) == CT_OK);
        CHECK(rows_equal(in, pin[0], 8) && rows_equal(tg + 8, ptg[1], 8));
        ct_loader_free(l);
    }
    /* a second rank does not warn */
    ref_cfg c2 = c;
    c2.world = 2;
    warn_count = 0;
    ct_log_set(count_warn, NULL);
    ct_loader *l1 = OPEN(dir, &c2, 1, 0);
    ct_log_set(quiet, NULL);
    CHECK(warn_count == 0);
    ct_loader_free(l1);

    /* no packing: one example per row; 5 rows + 1 empty = 3 batches */
    c.packing = false;
    ct_loader *l = OPEN(dir, &c, 0, 0);
    if (l) {
        CHECK(ct_loader_batches_per_epoch(l) == 3);
        int32_t in[16], tg[16], pos[16];
        static const int32_t r0[8] = {10, 11, 12, 13, 0, 0, 0, 0};
        static const int32_t t0[8] = {-1, 12, 13, -1, -1, -1, -1, -1};
        static const int32_t q0[8] = {0, 1, 2, 3, 0, 1, 2, 3};
        static const int32_t r1[8] = {20, 21, 22, 0, 0, 0, 0, 0};
        static const int32_t t1[8] = {21, 22, -1, -1, -1, -1, -1, -1};
        static const int32_t q1[8] = {0, 1, 2, 0, 1, 2, 3, 4};
        CHECK(ct_loader_next_pos(l, in, tg, pos) == CT_OK);
        CHECK(rows_equal(in, r0, 8) && rows_equal(tg, t0, 8) && rows_equal(pos, q0, 8));
        CHECK(rows_equal(in + 8, r1, 8) && rows_equal(tg + 8, t1, 8) && rows_equal(pos + 8, q1, 8));
        /* from batch 1: {e2, e3} 3 + {e4, empty} 3, then epoch 1's {e0, e1} 4 */
        CHECK(ct_loader_counted_ahead(l, 2) == 6 && ct_loader_counted_ahead(l, 3) == 10);
        CHECK(ct_loader_next_pos(l, in, tg, pos) == CT_OK); /* e2, e3 */
        CHECK(in[0] == 30 && in[7] == 37 && tg[7] == -1 && in[8] == 40 && tg[8] == -1 &&
              pos[9] == 0);
        ct_loader_pos p;
        ct_loader_get_pos(l, &p);
        CHECK(p.shard == 1 && p.offset == 11 && p.shuffled == 2); /* e4 */
        CHECK(ct_loader_next_pos(l, in, tg, pos) == CT_OK);
        CHECK(in[0] == 50 && tg[0] == 51 && tg[1] == -1 && in[8] == 0 && pos[15] == 7);
        ct_loader_free(l);
    }
    free(d);
}

/* ------------------------------------------------------------ random sets */

typedef struct epoch_rows {
    int rows, real;
    int32_t in[MAXROWS * MAXT], tg[MAXROWS * MAXT], pos[MAXROWS * MAXT];
} epoch_rows;

/* Every rank's batches of three epochs against the reference; the examples
 * of each epoch once each; counted_ahead; get_pos. */
static void check_config(const char *dir, const ex_set *d, const ref_cfg *c, int prefetch) {
    ct_loader *ls[3] = {NULL, NULL, NULL};
    for (int r = 0; r < c->world; r++)
        if (!(ls[r] = OPEN(dir, c, r, prefetch))) goto done;
    epoch_rows *er = malloc(sizeof *er);
    int T = c->T, BT = c->B * T;
    int32_t *in = malloc((size_t)BT * sizeof *in), *tg = malloc((size_t)BT * sizeof *tg),
            *pos = malloc((size_t)BT * sizeof *pos);
    int bad = 0, bad_count = 0, bad_once = 0, bad_ahead = 0, bad_pos = 0;
    for (int64_t e = 0; e < 3; e++) {
        er->rows = ref_epoch(d, c, e, er->in, er->tg, er->pos, &er->real);
        int64_t per = er->rows / (c->B * c->world);
        int seen[MAXE] = {0};
        for (int r = 0; r < c->world; r++) {
            if (ct_loader_batches_in_epoch(ls[r], e) != per ||
                ct_loader_batches_per_epoch(ls[r]) != per)
                bad_count++;
        }
        for (int64_t m = 0; m < per; m++) {
            /* counted_ahead of rank 0 for 1 and `per` batches (the latter
             * runs into the next epoch unless m == 0) */
            int64_t want1 = 0;
            for (int k = 0; k < c->world * BT; k++)
                want1 += er->tg[(m * c->world) * BT + k] >= 0;
            if (ct_loader_counted_ahead(ls[0], 1) != want1) bad_ahead++;
            for (int r = 0; r < c->world; r++) {
                ct_loader_pos p;
                ct_loader_get_pos(ls[r], &p);
                if (p.epoch != e || p.index != m) bad_pos++;
                if (ct_loader_next_pos(ls[r], in, tg, pos) != CT_OK) {
                    bad++;
                    continue;
                }
                int64_t row0 = (m * c->world + r) * c->B;
                if (!rows_equal(in, er->in + row0 * T, BT) || !rows_equal(tg, er->tg + row0 * T, BT) ||
                    !rows_equal(pos, er->pos + row0 * T, BT))
                    bad++;
                /* decode the examples from the tokens: each exactly once */
                for (int k = 0; k < BT; k++) {
                    if (in[k] == 0) continue;
                    int x = (in[k] - 1) / MAXLEN, kk = (in[k] - 1) % MAXLEN;
                    if (pos[k] != kk) bad_once++;
                    if (kk == 0) seen[x]++;
                }
            }
        }
        for (int x = 0; x < d->E; x++) bad_once += seen[x] != 1;
        /* empty rows only at the end, padded to whole steps */
        for (int i = 0; i < er->rows; i++) {
            bool empty = er->in[i * T] == 0;
            if (empty != (i >= er->real)) bad_once++;
        }
        if (er->rows % (c->B * c->world * c->accum)) bad_once++;
    }
    CHECK_MSG(bad == 0 && bad_count == 0 && bad_once == 0 && bad_ahead == 0 && bad_pos == 0,
              "B=%d T=%d world=%d accum=%d shuffle=%d packing=%d group=%d prefetch=%d: %d bad "
              "batches, %d bad counts, %d bad coverage, %d bad counted_ahead, %d bad positions",
              c->B, c->T, c->world, c->accum, c->shuffle, c->packing, c->group, prefetch, bad,
              bad_count, bad_once, bad_ahead, bad_pos);
    /* counted_ahead over an epoch boundary: from the middle of epoch 3 */
    ct_loader *l = ls[0];
    ct_loader_reset(l);
    int64_t per0 = ct_loader_batches_in_epoch(l, 0), per1 = ct_loader_batches_in_epoch(l, 1);
    int64_t from = per0 / 2, n = per0 - from + per1 / 2 + 1;
    int64_t want = 0;
    for (int64_t e = 0; e < 2; e++) {
        er->rows = ref_epoch(d, c, e, er->in, er->tg, er->pos, &er->real);
        int64_t lo = e == 0 ? from * c->world * BT : 0;
        int64_t hi = e == 0 ? (int64_t)er->rows * T : (n - (per0 - from)) * c->world * BT;
        if (hi > (int64_t)er->rows * T) hi = (int64_t)er->rows * T;
        for (int64_t k = lo; k < hi; k++) want += er->tg[k] >= 0;
    }
    CHECK(ct_loader_skip(l, from) == CT_OK);
    int64_t got = ct_loader_counted_ahead(l, n);
    CHECK_MSG(got == want, "counted_ahead(%lld) from %lld: %lld, expected %lld", (long long)n,
              (long long)from, (long long)got, (long long)want);
    free(in);
    free(tg);
    free(pos);
    free(er);
done:
    for (int r = 0; r < 3; r++) ct_loader_free(ls[r]);
}

static void test_random(void) {
    ex_set *d = malloc(sizeof *d);
    for (int round = 0; round < 3; round++) {
        int T = round == 0 ? 8 : round == 1 ? 16 : 5;
        int E = round == 0 ? 37 : round == 1 ? 150 : 13;
        random_set(d, E, round == 2 ? 1 : 3, T, round == 1 ? MAXLEN : 2 * T);
        char dir[256], tag[32];
        snprintf(tag, sizeof tag, "rand%d", round);
        write_set(dir, sizeof dir, tag, d, true);
        for (int cfg = 0; cfg < 16; cfg++) {
            ref_cfg c = {.B = 1 + round % 2 + cfg % 2, .T = T, .world = 1 + (cfg / 2) % 3,
                         .accum = 1 + (cfg / 4) % 2, .shuffle = cfg & 4, .packing = !(cfg & 8),
                         .group = cfg % 3 == 0, .seed = 7 + (uint64_t)cfg};
            if (round == 2) c.B = 2 + cfg % 3; /* 50*B*world > E: one group */
            check_config(dir, d, &c, cfg % 5 == 0 ? 0 : 2);
        }
        /* group_by_length with runs shorter than the set: runs of 50 */
        ref_cfg c = {.B = 1, .T = T, .world = 1, .accum = 1, .shuffle = true, .packing = true,
                     .group = true, .seed = 3};
        check_config(dir, d, &c, 0);
        c.packing = false;
        check_config(dir, d, &c, 3);
    }
    free(d);
}

/* Two ranks at B read what one rank at 2B reads, row for row. */
static void test_world_vs_batch(void) {
    ex_set *d = malloc(sizeof *d);
    random_set(d, 120, 2, 12, 30);
    char dir[256];
    write_set(dir, sizeof dir, "world", d, true);
    for (int v = 0; v < 4; v++) {
        ref_cfg one = {.B = 6, .T = 12, .world = 1, .accum = 2, .shuffle = v & 1,
                       .packing = !(v & 2), .group = v == 1, .seed = 11};
        ref_cfg two = one;
        two.B = 3;
        two.world = 2;
        ct_loader *a = OPEN(dir, &one, 0, 2), *r0 = OPEN(dir, &two, 0, 0), *r1 = OPEN(dir, &two, 1, 2);
        if (!a || !r0 || !r1) break;
        CHECK(ct_loader_batches_in_epoch(a, 1) == ct_loader_batches_in_epoch(r0, 1));
        int bad = 0;
        int32_t in[72], tg[72], pos[72], i0[36], t0[36], p0[36], i1[36], t1[36], p1[36];
        for (int m = 0; m < 3 * ct_loader_batches_per_epoch(a) + 1; m++) {
            if (ct_loader_counted_ahead(a, 2) != ct_loader_counted_ahead(r0, 2)) bad++;
            bad += ct_loader_next_pos(a, in, tg, pos) != CT_OK;
            bad += ct_loader_next_pos(r0, i0, t0, p0) != CT_OK;
            bad += ct_loader_next_pos(r1, i1, t1, p1) != CT_OK;
            bad += !rows_equal(in, i0, 36) || !rows_equal(in + 36, i1, 36);
            bad += !rows_equal(tg, t0, 36) || !rows_equal(tg + 36, t1, 36);
            bad += !rows_equal(pos, p0, 36) || !rows_equal(pos + 36, p1, 36);
        }
        CHECK_MSG(bad == 0, "variant %d: %d differences", v, bad);
        ct_loader_free(a);
        ct_loader_free(r0);
        ct_loader_free(r1);
    }
    free(d);
}

/* ------------------------------------------------------------ resume */

static void test_resume(void) {
    ex_set *d = malloc(sizeof *d);
    random_set(d, 90, 3, 10, 25);
    char dir[256];
    write_set(dir, sizeof dir, "resume", d, true);
    ref_cfg c = {.B = 2, .T = 10, .world = 2, .accum = 2, .shuffle = true, .packing = true,
                 .group = true, .seed = 99};
    enum { BT = 20 };
    for (int pa = 0; pa <= 2; pa += 2) {
        ct_loader *ref = OPEN(dir, &c, 1, pa);
        if (!ref) break;
        int64_t per0 = ct_loader_batches_in_epoch(ref, 0);
        int64_t stops[3] = {per0 / 2, per0, per0 + ct_loader_batches_in_epoch(ref, 1) - 1};
        int64_t total = stops[2] + 2 * per0;
        int32_t (*rin)[BT] = malloc((size_t)total * sizeof *rin);
        int32_t (*rtg)[BT] = malloc((size_t)total * sizeof *rtg);
        int32_t (*rps)[BT] = malloc((size_t)total * sizeof *rps);
        ct_loader_pos at[3];
        int k = 0;
        for (int64_t m = 0; m < total; m++) {
            if (k < 3 && m == stops[k]) ct_loader_get_pos(ref, &at[k++]);
            CHECK(ct_loader_next_pos(ref, rin[m], rtg[m], rps[m]) == CT_OK);
        }
        CHECK(at[1].epoch == 1 && at[1].index == 0 && at[2].epoch == 1);
        for (int pb = 0; pb <= 3; pb += 3) {
            for (int s = 0; s < 3; s++) {
                /* set_pos from a fresh loader, and skip */
                ct_loader *b = OPEN(dir, &c, 1, pb), *sk = OPEN(dir, &c, 1, pb);
                if (!b || !sk) break;
                int32_t warm[BT], wt[BT], wp[BT];
                CHECK(ct_loader_next_pos(b, warm, wt, wp) == CT_OK); /* moved first */
                CHECK(ct_loader_set_pos(b, &at[s]) == CT_OK);
                CHECK(ct_loader_skip(sk, stops[s]) == CT_OK);
                ct_loader_pos q;
                ct_loader_get_pos(b, &q);
                CHECK(!memcmp(&q, &at[s], sizeof q));
                ct_loader_get_pos(sk, &q);
                CHECK(!memcmp(&q, &at[s], sizeof q));
                int bad = 0;
                for (int64_t m = stops[s]; m < total; m++) {
                    int32_t in[BT], tg[BT], pos[BT];
                    bad += ct_loader_next_pos(b, in, tg, pos) != CT_OK;
                    bad += !rows_equal(in, rin[m], BT) || !rows_equal(tg, rtg[m], BT) ||
                           !rows_equal(pos, rps[m], BT);
                    bad += ct_loader_next_pos(sk, in, tg, pos) != CT_OK;
                    bad += !rows_equal(in, rin[m], BT) || !rows_equal(tg, rtg[m], BT);
                }
                CHECK_MSG(bad == 0, "prefetch %d/%d stop %d: %d differences", pa, pb, s, bad);
                /* a position rank 0 took fits rank 1 too */
                ct_loader *r0 = OPEN(dir, &c, 0, 0);
                if (r0) {
                    ct_loader_pos p0;
                    CHECK(ct_loader_skip(r0, stops[s]) == CT_OK);
                    ct_loader_get_pos(r0, &p0);
                    CHECK(ct_loader_set_pos(b, &p0) == CT_OK);
                    int32_t in[BT], tg[BT];
                    CHECK(ct_loader_next(b, in, tg) == CT_OK && rows_equal(in, rin[stops[s]], BT));
                    ct_loader_free(r0);
                }
                /* reset: back to the first batch */
                ct_loader_reset(b);
                int32_t in[BT], tg[BT], pos[BT];
                CHECK(ct_loader_next_pos(b, in, tg, pos) == CT_OK && rows_equal(in, rin[0], BT) &&
                      rows_equal(pos, rps[0], BT));
                ct_loader_free(b);
                ct_loader_free(sk);
            }
        }
        free(rin);
        free(rtg);
        free(rps);
        ct_loader_free(ref);
    }

    /* positions of another mode, or that do not fit, are refused; the loader stays */
    ct_loader *l = OPEN(dir, &c, 0, 2);
    ref_cfg np = c;
    np.packing = false;
    ct_loader *other = OPEN(dir, &np, 0, 0);
    if (l && other) {
        int32_t in[BT], tg[BT], in2[BT], tg2[BT];
        CHECK(ct_loader_skip(l, 3) == CT_OK);
        ct_loader_pos good, p;
        ct_loader_get_pos(l, &good);
        CHECK(good.shuffled == (1 | 2 | 4 | 8));
        ct_loader_get_pos(other, &p);
        ct_error_clear();
        CHECK(ct_loader_set_pos(l, &p) == CT_ERR_ARG && strstr(ct_last_error(), "packing off"));
        p = good;
        p.shuffled = 1; /* a plain shuffled loader's */
        CHECK(ct_loader_set_pos(l, &p) == CT_ERR_ARG && strstr(ct_last_error(), "instruction"));
        p = good;
        p.offset += 1;
        CHECK(ct_loader_set_pos(l, &p) == CT_ERR_ARG && strstr(ct_last_error(), "train_00000"));
        p = good;
        p.index = 100000;
        CHECK(ct_loader_set_pos(l, &p) == CT_ERR_ARG && strstr(ct_last_error(), "outside epoch"));
        p = good;
        p.epoch = -1;
        CHECK(ct_loader_set_pos(l, &p) == CT_ERR_ARG);
        p = good;
        p.shard = 9;
        CHECK(ct_loader_set_pos(l, &p) == CT_ERR_ARG);
        ct_loader_get_pos(l, &p);
        CHECK(!memcmp(&p, &good, sizeof p));
        CHECK(ct_loader_next(l, in, tg) == CT_OK);
        CHECK(ct_loader_set_pos(l, &good) == CT_OK);
        CHECK(ct_loader_next(l, in2, tg2) == CT_OK && rows_equal(in, in2, BT) &&
              rows_equal(tg, tg2, BT));
        CHECK(ct_loader_skip(l, -1) == CT_ERR_ARG);
    }
    ct_loader_free(l);
    ct_loader_free(other);
    free(d);
}

/* ------------------------------------------------------------ bad inputs */

static void expect_fail(int line, const char *spec, int vocab, ct_status code, const char *f1,
                        const char *f2) {
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = spec;
    o.B = 2;
    o.T = 8;
    o.vocab_size = vocab;
    ct_loader *l = (ct_loader *)(uintptr_t)1;
    ct_error_clear();
    ct_status st = ct_loader_init(&l, &o);
    const char *msg = ct_last_error();
    CHECK_MSG(st == code && l == NULL, "line %d: status %d, expected %d: %s", line, st, code, msg);
    if (f1) CHECK_MSG(strstr(msg, f1), "line %d: message lacks '%s': %s", line, f1, msg);
    if (f2) CHECK_MSG(strstr(msg, f2), "line %d: message lacks '%s': %s", line, f2, msg);
    if (st == CT_OK) ct_loader_free(l);
}
#define FAIL(spec, vocab, code, f1, f2) expect_fail(__LINE__, spec, vocab, code, f1, f2)

static void test_bad(void) {
    ex_set *d = malloc(sizeof *d);
    hand_set(d);
    char dir[256], p0[512], s0[512], p1[512], s1[512];
    /* a sidecar that does not match its shard: one token fewer */
    write_set(dir, sizeof dir, "bad_mismatch", d, true);
    snprintf(p1, sizeof p1, "%s/train_000001.bin", dir);
    snprintf(s1, sizeof s1, "%s/train_000001.sft", dir);
    ct_sft_writer *w;
    CHECK(ct_sft_writer_open(&w, s1) == CT_OK);
    CHECK(ct_sft_writer_add(w, d->mask[2], 10) == CT_OK);
    CHECK(ct_sft_writer_add(w, d->mask[4], 5) == CT_OK);
    CHECK(ct_sft_writer_commit(w) == CT_OK);
    FAIL(dir, 0, CT_ERR_FORMAT, s1, p1);
    /* a sidecar that is not one */
    CHECK(ct_tmpdir_write(s1, "garbage garbage garbage garbage garbage", 39) == 0);
    FAIL(dir, 0, CT_ERR_FORMAT, s1, "magic");

    /* mixed: shard 1 has no sidecar */
    write_set(dir, sizeof dir, "bad_mixed", d, true);
    snprintf(p0, sizeof p0, "%s/train_000000.bin", dir);
    snprintf(s0, sizeof s0, "%s/train_000000.sft", dir);
    snprintf(p1, sizeof p1, "%s/train_000001.bin", dir);
    snprintf(s1, sizeof s1, "%s/train_000001.sft", dir);
    CHECK(remove(s1) == 0);
    FAIL(dir, 0, CT_ERR_FORMAT, p0, p1);
    CHECK(strstr(ct_last_error(), "mix") != NULL);
    /* the other way round */
    CHECK(rename(s0, s1) == 0);
    FAIL(dir, 0, CT_ERR_FORMAT, p1, p0);
    /* a manifest saying instruction data, but no sidecars at all */
    CHECK(remove(s1) == 0);
    char man[512];
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    const char *text = "{\"format\": \"ctrain-sft/1\", \"shards\": []}\n";
    CHECK(ct_tmpdir_write(man, text, strlen(text)) == 0);
    FAIL(dir, 0, CT_ERR_IO, s0, NULL);
    /* a plain manifest: plain shards, as before */
    const char *plain = "{\"format\": \"ctrain-shards/1\", \"note\": \"ctrain-sft/1\"}\n";
    CHECK(ct_tmpdir_write(man, plain, strlen(plain)) == 0);
    ct_loader_opts o = ct_loader_opts_default();
    o.spec = dir;
    o.B = 1;
    o.T = 4;
    ct_loader *l = NULL;
    CHECK(ct_loader_init(&l, &o) == CT_OK && l && !ct_loader_is_sft(l));
    ct_loader_free(l);

    /* a token out of the vocabulary is named with its shard */
    write_set(dir, sizeof dir, "bad_vocab", d, true);
    snprintf(p1, sizeof p1, "%s/train_000001.bin", dir);
    FAIL(dir, 40, CT_ERR_ARG, p1, "token 40 at index 10");
    /* a glob of instruction shards is instruction data; with the manifest only, too */
    snprintf(p0, sizeof p0, "%s/train_*.bin", dir);
    o.spec = p0;
    o.T = 8;
    l = NULL;
    CHECK(ct_loader_init(&l, &o) == CT_OK && l && ct_loader_is_sft(l));
    ct_loader_free(l);
    free(d);
}

/* The new calls on plain shards. */
static void test_plain(void) {
    char dir[256], p[512];
    snprintf(dir, sizeof dir, "%s/plain", root);
    CHECK(mkdir(dir, 0755) == 0);
    uint32_t t[500];
    for (int i = 0; i < 500; i++) t[i] = (uint32_t)(i * 7 % 300);
    snprintf(p, sizeof p, "%s/train_000000.bin", dir);
    CHECK(ct_shard_write(p, t, 500, 1) == CT_OK);
    for (int pf = 0; pf <= 2; pf += 2) {
        ct_loader_opts o = ct_loader_opts_default();
        o.spec = dir;
        o.B = 3;
        o.T = 7;
        o.world = 2;
        o.rank = 1;
        o.shuffle = pf > 0;
        o.prefetch = pf;
        ct_loader *a = NULL, *b = NULL;
        CHECK(ct_loader_init(&a, &o) == CT_OK && ct_loader_init(&b, &o) == CT_OK);
        if (!a || !b) break;
        CHECK(!ct_loader_is_sft(a));
        ct_loader_sft_stats s;
        CHECK(!ct_loader_sft_stats_get(a, &s) && s.examples == 0);
        CHECK(ct_loader_counted_ahead(a, 3) == 3 * 2 * 21 && ct_loader_counted_ahead(a, 0) == 0);
        CHECK(ct_loader_batches_in_epoch(a, 4) == ct_loader_batches_per_epoch(a));
        int bad = 0;
        for (int m = 0; m < 30; m++) {
            int32_t i1[21], t1[21], i2[21], t2[21], pos[21];
            bad += ct_loader_next(a, i1, t1) != CT_OK || ct_loader_next_pos(b, i2, t2, pos) != CT_OK;
            bad += !rows_equal(i1, i2, 21) || !rows_equal(t1, t2, 21);
            for (int k = 0; k < 21; k++) bad += pos[k] != k % 7;
        }
        CHECK(bad == 0);
        ct_loader_pos q;
        ct_loader_get_pos(a, &q);
        CHECK(q.shuffled == (pf > 0 ? 1 : 0));
        ct_loader_free(a);
        ct_loader_free(b);
    }
}

int main(void) {
    if (!ct_tmpdir_make(root, sizeof root, "loader_sft")) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    ct_log_set(quiet, NULL);
    test_hand();
    test_random();
    test_world_vs_batch();
    test_resume();
    test_bad();
    test_plain();
    ct_log_set(NULL, NULL);
    CHECK(ct_tmpdir_remove(root) == 0);
    return ct_test_result("test_loader_sft");
}
