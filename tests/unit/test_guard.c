/*
 * The stability guard and the training-state record: non-finite verdicts,
 * z-scores against a hand-computed mean and deviation, min_steps, the
 * zscore=0 switch, the ring when it wraps, max_bad asking for a rollback and
 * a good step ending a bad run, the LR factor, taking a window into a smaller
 * one; the state record's round trip (re-encoding gives the same bytes, a
 * decoded guard judges exactly like the original) and its refusals (magic,
 * version, truncation at every length, trailing bytes, out-of-range fields);
 * trimming metrics.jsonl back to a step with a torn last line.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "train/guard.h"
#include "train/train_state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ct_guard_params params(int window, double z, int min_steps, int max_bad) {
    ct_guard_params p = ct_guard_params_default();
    p.window = window;
    p.zscore = z;
    p.min_steps = min_steps;
    p.max_bad = max_bad;
    return p;
}

static void test_defaults(void) {
    ct_guard_params p = ct_guard_params_default();
    CHECK(p.window == 50 && p.zscore == 6.0 && p.min_steps == 20 && p.max_bad == 3 &&
          p.lr_factor == 0.5);
    ct_guard g;
    ct_guard_init(&g, &p);
    CHECK(g.count == 0 && g.lr_factor == 1.0 && g.bad_run == 0 && g.skipped == 0);
}

static void test_nonfinite(void) {
    ct_guard_params p = params(8, 6, 2, 3);
    ct_guard g;
    ct_guard_init(&g, &p);
    ct_guard_verdict v;
    CHECK(ct_guard_judge(&g, 1, 2.0, 1.0, &v) == CT_GUARD_UPDATE && v == CT_GUARD_GOOD);
    CHECK(ct_guard_judge(&g, 2, NAN, 1.0, &v) == CT_GUARD_SKIP && v == CT_GUARD_NONFINITE_LOSS);
    CHECK(ct_guard_judge(&g, 3, 2.0, INFINITY, &v) == CT_GUARD_SKIP &&
          v == CT_GUARD_NONFINITE_GRAD);
    CHECK(g.bad_run == 2 && g.bad_start == 2 && g.skipped == 2 && g.spikes == 0);
    CHECK(g.count == 1); /* bad steps never join the window */
    CHECK(ct_guard_judge(&g, 4, -INFINITY, 1.0, &v) == CT_GUARD_ROLLBACK);
    CHECK(g.bad_run == 3 && g.bad_start == 2);
    ct_guard_rolled_back(&g);
    CHECK(g.rollbacks == 1 && g.lr_factor == 0.5 && g.bad_run == 0 && g.bad_start == 0);
    ct_guard_rolled_back(&g);
    CHECK(g.lr_factor == 0.25); /* cumulative */
    /* a good step ends a bad run */
    CHECK(ct_guard_judge(&g, 5, NAN, 1, NULL) == CT_GUARD_SKIP);
    CHECK(ct_guard_judge(&g, 6, 2.0, 1.0, NULL) == CT_GUARD_UPDATE);
    CHECK(g.bad_run == 0 && g.bad_start == 0 && g.skipped == 4);
    CHECK(ct_guard_judge(&g, 7, NAN, 1, NULL) == CT_GUARD_SKIP && g.bad_start == 7);
    /* max_bad 0: never a rollback */
    p = params(8, 6, 2, 0);
    ct_guard_init(&g, &p);
    for (int i = 1; i <= 100; i++) CHECK(ct_guard_judge(&g, i, NAN, NAN, NULL) == CT_GUARD_SKIP);
    CHECK(g.bad_run == 100 && g.skipped == 100);
    CHECK(!strcmp(ct_guard_verdict_str(CT_GUARD_SPIKE_NORM), "grad-norm spike"));
}

static void test_zscore(void) {
    ct_guard_params p = params(10, 3.0, 4, 3);
    ct_guard g;
    ct_guard_init(&g, &p);
    /* losses 1,2,3,4: mean 2.5, population std sqrt(1.25) */
    const double loss[] = {1, 2, 3, 4}, norm[] = {10, 10, 10, 10};
    for (int i = 0; i < 3; i++) {
        /* fewer than min_steps good steps: even a huge value is not judged */
        CHECK(ct_guard_judge(&g, i + 1, loss[i], norm[i], NULL) == CT_GUARD_UPDATE);
        CHECK(isnan(g.z_loss));
    }
    CHECK(ct_guard_judge(&g, 4, loss[3], norm[3], NULL) == CT_GUARD_UPDATE);
    double mean, std;
    ct_guard_stats(&g, 0, &mean, &std);
    CHECK(mean == 2.5 && fabs(std - sqrt(1.25)) < 1e-15);
    double limit = 2.5 + 3.0 * sqrt(1.25); /* z = 3 */
    ct_guard_verdict v;
    CHECK(ct_guard_judge(&g, 5, limit + 1e-9, 10, &v) == CT_GUARD_SKIP && v == CT_GUARD_SPIKE_LOSS);
    CHECK(fabs(g.z_loss - 3.0) < 1e-6 && g.spikes == 1);
    CHECK(ct_guard_judge(&g, 6, limit - 1e-9, 10, &v) == CT_GUARD_UPDATE && v == CT_GUARD_GOOD);
    /* a loss far below the mean is never bad */
    CHECK(ct_guard_judge(&g, 7, -100.0, 10, &v) == CT_GUARD_UPDATE);
    /* norms all 10: the deviation floor (1e-3 of the mean) decides */
    CHECK(ct_guard_judge(&g, 8, 2.0, 10.0 + 0.029, &v) == CT_GUARD_UPDATE);
    CHECK(ct_guard_judge(&g, 9, 2.0, 10.5, &v) == CT_GUARD_SKIP && v == CT_GUARD_SPIKE_NORM);
    CHECK(g.spikes == 2 && g.skipped == 2);
    /* zscore 0: spikes are off */
    p = params(10, 0.0, 4, 3);
    ct_guard_init(&g, &p);
    for (int i = 0; i < 10; i++) ct_guard_judge(&g, i + 1, 1.0, 1.0, NULL);
    CHECK(ct_guard_judge(&g, 11, 1e30, 1e30, &v) == CT_GUARD_UPDATE && v == CT_GUARD_GOOD);
    /* norm_spikes off (clipping on): a grad-norm spike alone is an update,
     * but a loss spike still is not */
    p = params(10, 3.0, 4, 3);
    p.norm_spikes = false;
    ct_guard_init(&g, &p);
    for (int i = 0; i < 4; i++) ct_guard_judge(&g, i + 1, loss[i], norm[i], NULL);
    CHECK(ct_guard_judge(&g, 5, 2.0, 1e6, &v) == CT_GUARD_UPDATE && v == CT_GUARD_GOOD);
    CHECK(g.z_norm > 3.0 && g.spikes == 0);
    CHECK(ct_guard_judge(&g, 6, 100.0, 10, &v) == CT_GUARD_SKIP && v == CT_GUARD_SPIKE_LOSS);
}

static void test_ring(void) {
    ct_guard_params p = params(4, 6, 2, 3);
    ct_guard g;
    ct_guard_init(&g, &p);
    for (int i = 1; i <= 10; i++) ct_guard_judge(&g, i, (double)i, 100.0 + i, NULL);
    CHECK(g.count == 4);
    double mean, std;
    ct_guard_stats(&g, 0, &mean, &std); /* 7,8,9,10 */
    CHECK(mean == 8.5 && fabs(std - sqrt(1.25)) < 1e-15);
    ct_guard_stats(&g, 1, &mean, &std);
    CHECK(mean == 108.5);
    /* a smaller window keeps the newest entries, oldest first */
    ct_guard_params q = params(3, 6, 2, 3);
    ct_guard h;
    ct_guard_init(&h, &q);
    h.skipped = 5;
    ct_guard_take_window(&h, &g);
    CHECK(h.count == 3 && h.head == 0 && h.loss[0] == 8 && h.loss[2] == 10 && h.skipped == 5);
    ct_guard_stats(&h, 0, &mean, &std);
    CHECK(mean == 9.0);
    /* and keeps wrapping correctly after that */
    ct_guard_judge(&h, 11, 11.0, 1.0, NULL);
    ct_guard_stats(&h, 0, &mean, &std);
    CHECK(mean == 10.0);
    /* a larger window takes everything */
    ct_guard_params r = params(50, 6, 2, 3);
    ct_guard big;
    ct_guard_init(&big, &r);
    ct_guard_take_window(&big, &g);
    CHECK(big.count == 4 && big.loss[0] == 7 && big.loss[3] == 10);
}

/* ------------------------------------------------------------ state record */

static void fill_state(ct_train_state *s) {
    memset(s, 0, sizeof *s);
    s->step = 1234;
    s->adam_t = 1200;
    s->numel = 8128;
    s->batch_size = 4;
    s->seq_len = 64;
    s->grad_accum = 2;
    s->seed = 1337;
    s->shuffle = true;
    s->pos = (ct_loader_pos){.epoch = 3, .index = 17, .offset = 4096, .shard = 2, .shuffled = 1};
    s->total_steps = 5000;
    ct_guard_params p = params(5, 4.5, 3, 2);
    ct_guard_init(&s->guard, &p);
    for (int i = 1; i <= 8; i++) ct_guard_judge(&s->guard, i, 3.0 + 0.01 * i, 1.0 / i, NULL);
    ct_guard_judge(&s->guard, 9, NAN, 1.0, NULL);
    ct_guard_rolled_back(&s->guard);
    ct_guard_judge(&s->guard, 10, NAN, 1.0, NULL);
    s->best_val = 2.75;
    s->bad_evals = 2;
    s->ckpt_pending = true;
    snprintf(s->init_from, sizeof s->init_from, "models/gpt2");
    s->world = 2;
    s->data_flags = CT_STATE_DATA_SFT | CT_STATE_DATA_PACKING;
    s->best_step = 1000;
    s->loss_scale = 32768.0;
    s->loss_scale_good = 17;
}

static void test_state_round_trip(void) {
    ct_train_state *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    fill_state(a);
    uint8_t *buf = NULL, *buf2 = NULL;
    size_t len = 0, len2 = 0;
    CHECK(ct_train_state_encode(a, &buf, &len) == CT_OK && len > 100);
    CHECK(ct_train_state_decode(b, buf, len, "mem") == CT_OK);
    CHECK(b->step == 1234 && b->adam_t == 1200 && b->numel == 8128 && b->batch_size == 4 &&
          b->seq_len == 64 && b->grad_accum == 2 && b->seed == 1337 && b->shuffle &&
          b->total_steps == 5000 && b->best_val == 2.75 && b->bad_evals == 2 &&
          b->ckpt_pending && !strcmp(b->init_from, "models/gpt2") && b->world == 2 &&
          b->data_flags == 3 && b->best_step == 1000 && b->loss_scale == 32768.0 &&
          b->loss_scale_good == 17);
    CHECK(!memcmp(&a->pos, &b->pos, sizeof a->pos));
    CHECK(b->guard.p.window == 5 && b->guard.p.zscore == 4.5 && b->guard.p.min_steps == 3 &&
          b->guard.p.max_bad == 2 && b->guard.count == 5 && b->guard.head == 0);
    CHECK(b->guard.bad_run == 1 && b->guard.bad_start == 10 && b->guard.skipped == 2 &&
          b->guard.rollbacks == 1 && b->guard.lr_factor == a->guard.lr_factor);
    double ma, sa, mb, sb;
    ct_guard_stats(&a->guard, 0, &ma, &sa);
    ct_guard_stats(&b->guard, 0, &mb, &sb);
    CHECK(ma == mb && sa == sb); /* same values in the same order: bit-equal */
    /* the decoded guard judges the next steps exactly like the original */
    for (int i = 11; i < 30; i++) {
        double loss = 3.0 + 0.013 * (i % 7), norm = 0.2 + 0.05 * (i % 5);
        ct_guard_verdict va, vb;
        CHECK(ct_guard_judge(&a->guard, i, loss, norm, &va) ==
              ct_guard_judge(&b->guard, i, loss, norm, &vb));
        CHECK(va == vb && (isnan(a->guard.z_loss) ? isnan(b->guard.z_loss)
                                                  : a->guard.z_loss == b->guard.z_loss));
    }
    /* re-encoding the decoded record gives the same bytes */
    fill_state(a);
    CHECK(ct_train_state_decode(b, buf, len, "mem") == CT_OK);
    CHECK(ct_train_state_encode(b, &buf2, &len2) == CT_OK);
    CHECK(len2 == len && !memcmp(buf, buf2, len));
    /* NaN best_val (no validation yet) survives */
    a->best_val = NAN;
    free(buf);
    CHECK(ct_train_state_encode(a, &buf, &len) == CT_OK);
    CHECK(ct_train_state_decode(b, buf, len, "mem") == CT_OK && isnan(b->best_val));
    /* little-endian on disk: the magic's bytes spell CTTS, version 4 follows */
    CHECK(!memcmp(buf, "CTTS", 4) && buf[4] == 4 && buf[5] == 0 && buf[6] == 0 && buf[7] == 0);
    /* a version 3 record (no fp16 loss scaler) still reads: no scale (0), the run's default */
    buf[4] = 3;
    CHECK(ct_train_state_decode(b, buf, len - 16, "v3") == CT_OK && b->loss_scale == 0 &&
          b->loss_scale_good == 0 && b->best_step == 1000 && b->step == 1234);
    CHECK(ct_train_state_decode(b, buf, len, "v3") == CT_ERR_FORMAT);
    /* a version 2 record (no data_flags, best_step) still reads: plain data, no best */
    buf[4] = 2;
    CHECK(ct_train_state_decode(b, buf, len - 32, "v2") == CT_OK && b->world == 2 &&
          b->data_flags == 0 && b->best_step == -1 && b->step == 1234 && b->loss_scale == 0);
    CHECK(ct_train_state_decode(b, buf, len, "v2") == CT_ERR_FORMAT);
    /* a version 1 record (no world field either) still reads, as one process */
    buf[4] = 1;
    CHECK(ct_train_state_decode(b, buf, len - 40, "v1") == CT_OK && b->world == 1 &&
          b->step == 1234);
    CHECK(ct_train_state_decode(b, buf, len, "v1") == CT_ERR_FORMAT);
    buf[4] = 4;
    CHECK(buf[8] == (1234 & 0xff) && buf[9] == (1234 >> 8)); /* step 1234 */
    free(buf);
    free(buf2);
    free(a);
    free(b);
}

static void test_state_refusals(void) {
    ct_train_state *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    fill_state(a);
    uint8_t *buf = NULL;
    size_t len = 0;
    CHECK(ct_train_state_encode(a, &buf, &len) == CT_OK);
    uint8_t *bad = malloc(len + 8);
    /* every truncation is refused and names the file */
    int refused = 0;
    for (size_t n = 0; n < len; n++) {
        memset(b, 0x5a, sizeof *b);
        if (ct_train_state_decode(b, buf, n, "ckpt/state.bin") == CT_ERR_FORMAT &&
            strstr(ct_last_error(), "ckpt/state.bin"))
            refused++;
    }
    CHECK_MSG(refused == (int)len, "%d of %zu truncations refused", refused, len);
    /* trailing bytes */
    memcpy(bad, buf, len);
    bad[len] = 0;
    CHECK(ct_train_state_decode(b, bad, len + 1, "x") == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "after its last field"));
    /* magic and version */
    memcpy(bad, buf, len);
    bad[0] = 'X';
    CHECK(ct_train_state_decode(b, bad, len, "x") == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "magic"));
    memcpy(bad, buf, len);
    bad[4] = 5;
    CHECK(ct_train_state_decode(b, bad, len, "x") == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "version 5"));
    /* a best step after the record's own step (before the scaler's 16 bytes) */
    memcpy(bad, buf, len);
    bad[len - 24] = 0xff;
    bad[len - 23] = 0xff;
    CHECK(ct_train_state_decode(b, bad, len, "x") == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "best_step"));
    /* a loss scale below 1 (0.5: f64 0x3fe0...), a negative good-step count */
    memcpy(bad, buf, len);
    memset(bad + len - 16, 0, 8);
    bad[len - 10] = 0xe0;
    bad[len - 9] = 0x3f;
    CHECK(ct_train_state_decode(b, bad, len, "x") == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "loss_scale"));
    memcpy(bad, buf, len);
    bad[len - 1] = 0x80;
    CHECK(ct_train_state_decode(b, bad, len, "x") == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "loss_scale_good"));
    /* a negative step (byte 15 is the step's top byte) */
    memcpy(bad, buf, len);
    bad[15] = 0x80;
    CHECK(ct_train_state_decode(b, bad, len, "x") == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "step"));
    /* the guard's window count beyond its window */
    a->guard.count = 5;
    a->guard.p.window = 5;
    free(buf);
    CHECK(ct_train_state_encode(a, &buf, &len) == CT_OK);
    /* locate guard.count: magic..total_steps is 4+4+8*3+8*5+32+8 bytes, then
     * window, zscore, min_steps, max_bad, lr_factor (5 * 8) */
    size_t at = 4 + 4 + 24 + 40 + 32 + 8 + 40;
    CHECK(buf[at] == 5);
    memcpy(bad, buf, len);
    bad[at] = 6;
    CHECK(ct_train_state_decode(b, bad, len, "x") == CT_ERR_FORMAT &&
          strstr(ct_last_error(), "guard.count"));
    free(bad);
    free(buf);
    free(a);
    free(b);
}

static void test_trim_metrics(void) {
    char dir[128], path[256];
    if (!ct_tmpdir_make(dir, sizeof dir, "guard")) {
        CHECK(!"mkdtemp");
        return;
    }
    ct_tmpdir_join(path, sizeof path, dir, "metrics.jsonl");
    /* a missing file is fine */
    CHECK(ct_train_state_trim_metrics(dir, 5) == CT_OK);
    const char *text = "{\"step\": 1, \"split\": \"train\", \"loss\": 4}\n"
                       "{\"step\": 2, \"split\": \"train\", \"loss\": 3}\n"
                       "{\"step\": 2, \"split\": \"val\", \"loss\": 3.5}\n"
                       "{\"step\": 3, \"split\": \"train\", \"loss\": 2}\n"
                       "{\"step\": 12, \"split\": \"train\", \"loss\": 1}\n"
                       "{\"step\": 13, \"split\": \"tr";
    CHECK(ct_tmpdir_write(path, text, strlen(text)) == 0);
    CHECK(ct_train_state_trim_metrics(dir, 2) == CT_OK);
    char got[1024] = {0};
    long n = ct_tmpdir_read(path, got, sizeof got - 1);
    const char *want = "{\"step\": 1, \"split\": \"train\", \"loss\": 4}\n"
                       "{\"step\": 2, \"split\": \"train\", \"loss\": 3}\n"
                       "{\"step\": 2, \"split\": \"val\", \"loss\": 3.5}\n";
    CHECK_MSG(n == (long)strlen(want) && !strcmp(got, want), "got:\n%s", got);
    /* step 12 must not pass as step 1: only the torn line goes at 12 */
    CHECK(ct_tmpdir_write(path, text, strlen(text)) == 0);
    CHECK(ct_train_state_trim_metrics(dir, 12) == CT_OK);
    memset(got, 0, sizeof got);
    n = ct_tmpdir_read(path, got, sizeof got - 1);
    CHECK(n > 0 && strstr(got, "\"step\": 12,") && !strstr(got, "\"step\": 13"));
    CHECK(ct_tmpdir_count(dir) == 1); /* no temporary file left behind */
    ct_tmpdir_remove(dir);
}

int main(void) {
    test_defaults();
    test_nonfinite();
    test_zscore();
    test_ring();
    test_state_round_trip();
    test_state_refusals();
    test_trim_metrics();
    return ct_test_result("test_guard");
}
