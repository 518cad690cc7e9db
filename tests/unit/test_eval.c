/*
 * The scoring library (train/eval.h) on a 1-layer GPT-2: ct_eval_run against
 * a hand-made loop over the same sequential windows (all windows once, a
 * given count, a count that wraps, two shards, a directory's val_*.bin),
 * perplexity == exp(loss), the progress callback, and its errors (a short
 * shard, a token >= vocab_size, T > n_ctx, a model reserved for another
 * shape, non-finite weights). ct_eval_load_model on a Hugging Face directory,
 * a verified checkpoint (and one with a flipped byte), and a run directory
 * whose newest checkpoint is damaged.
 */
#include "ct_test.h"
#include "ct_tmpdir.h"
#include "ctrain/model.h"
#include "data/shard/shard.h"
#include "io/fileio.h"
#include "train/checkpoint.h"
#include "train/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { V = 48, NCTX = 16 };
static char root[128];
static ct_ctx *ctx;

static ct_model *small_model(uint64_t seed) {
    ct_model_config c;
    ct_model_config_gpt2(&c, 1, 2, 16, V, NCTX);
    ct_model *m = NULL;
    if (ct_model_init(&m, ctx, &c) != CT_OK) return NULL;
    ct_model_init_weights(m, seed);
    return m;
}

static uint32_t *make_tokens(int64_t n, uint64_t seed) {
    uint32_t *t = malloc((size_t)n * sizeof *t);
    ct_rng r;
    ct_rng_init(&r, seed);
    for (int64_t i = 0; i < n; i++) t[i] = ct_rng_u32(&r) % V;
    return t;
}

/* Mean loss of n sequential windows of B*T+1 tokens over the concatenated
 * shards (each shard's windows in turn, then back to the first), computed
 * with ct_model_forward one window at a time. */
static double manual_mean(ct_model *m, uint32_t *const *shards, const int64_t *lens, int n_shards,
                          int B, int T, int64_t n) {
    int32_t *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
    int s = 0;
    int64_t p = 0;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        while (p + (int64_t)B * T + 1 > lens[s]) {
            s = (s + 1) % n_shards;
            p = 0;
        }
        for (int64_t j = 0; j < (int64_t)B * T; j++) {
            in[j] = (int32_t)shards[s][p + j];
            tg[j] = (int32_t)shards[s][p + j + 1];
        }
        float loss = 0;
        CHECK(ct_model_forward(m, in, tg, B, T, &loss) == CT_OK);
        sum += loss;
        p += (int64_t)B * T;
    }
    free(in);
    free(tg);
    return sum / (double)n;
}

static int progress_calls;
static int64_t progress_last_done, progress_total;
static void count_progress(int64_t done, int64_t total, double loss, void *user) {
    (void)loss;
    CHECK(user == &progress_calls);
    CHECK(done == progress_last_done + 1);
    progress_last_done = done;
    progress_total = total;
    progress_calls++;
}

static void test_run(void) {
    char a[256], b[256], dir[256], p[256];
    ct_tmpdir_join(a, sizeof a, root, "a.bin");
    ct_tmpdir_join(b, sizeof b, root, "b.bin");
    const int64_t la = 1000, lb = 333;
    uint32_t *ta = make_tokens(la, 1), *tb = make_tokens(lb, 2);
    CHECK(ct_shard_write(a, ta, la, 1) == CT_OK);
    CHECK(ct_shard_write(b, tb, lb, 2) == CT_OK);
    ct_model *m = small_model(7);
    CHECK(m != NULL);
    if (!m) return;
    const int B = 3, T = 16;
    uint32_t *one[1] = {ta};
    int64_t one_len[1] = {la};

    /* every full window once */
    ct_eval_opts o = ct_eval_opts_default();
    o.data = a;
    o.B = B;
    o.T = T;
    o.progress = count_progress;
    o.user = &progress_calls;
    ct_eval_result r;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_OK);
    int64_t nwin = (la - 1) / (B * T);
    CHECK(r.batches == nwin && r.tokens == nwin * B * T);
    CHECK(r.shards == 1 && r.data_tokens == la);
    double want = manual_mean(m, one, one_len, 1, B, T, nwin);
    CHECK_MSG(fabs(r.loss - want) <= 1e-12 * fabs(want), "%.17g vs %.17g", r.loss, want);
    CHECK(r.perplexity == exp(r.loss));
    CHECK(r.loss > 0.5 * log(V) && r.loss < 2 * log(V)); /* random weights: about ln V */
    CHECK(progress_calls == nwin && progress_total == nwin);

    /* a count past the end wraps to the first window, as the trainer's loader does */
    o.progress = NULL;
    o.batches = nwin + 4;
    o.prefetch = 0;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_OK);
    want = manual_mean(m, one, one_len, 1, B, T, nwin + 4);
    CHECK(r.batches == nwin + 4);
    CHECK_MSG(fabs(r.loss - want) <= 1e-12 * fabs(want), "%.17g vs %.17g", r.loss, want);
    o.batches = 2;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_OK);
    CHECK(fabs(r.loss - manual_mean(m, one, one_len, 1, B, T, 2)) <= 1e-12 * r.loss);

    /* two shards through a glob, sorted by path: a.bin's windows, then b.bin's */
    uint32_t *two[2] = {ta, tb};
    int64_t two_len[2] = {la, lb};
    snprintf(p, sizeof p, "%s/?.bin", root);
    o.data = p;
    o.batches = 0;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_OK);
    int64_t nwin2 = nwin + (lb - 1) / (B * T);
    CHECK(r.shards == 2 && r.batches == nwin2 && r.data_tokens == la + lb);
    want = manual_mean(m, two, two_len, 2, B, T, nwin2);
    CHECK_MSG(fabs(r.loss - want) <= 1e-12 * fabs(want), "%.17g vs %.17g", r.loss, want);

    /* a directory: val_*.bin is preferred over the other shards */
    ct_tmpdir_join(dir, sizeof dir, root, "shards");
    CHECK(ct_mkdir_p(dir) == CT_OK);
    ct_tmpdir_join(p, sizeof p, dir, "train_000000.bin");
    CHECK(ct_shard_write(p, ta, la, 1) == CT_OK);
    ct_tmpdir_join(p, sizeof p, dir, "val_000000.bin");
    CHECK(ct_shard_write(p, tb, lb, 1) == CT_OK);
    o.data = dir;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_OK);
    uint32_t *vb[1] = {tb};
    int64_t vb_len[1] = {lb};
    CHECK(r.shards == 1 && r.batches == (lb - 1) / (B * T));
    CHECK(fabs(r.loss - manual_mean(m, vb, vb_len, 1, B, T, r.batches)) <= 1e-12 * r.loss);
    o.split = "train";
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_OK);
    CHECK(r.shards == 1 && r.batches == nwin);

    /* errors */
    o = ct_eval_opts_default();
    o.B = B;
    o.T = T;
    ct_tmpdir_join(p, sizeof p, root, "short.bin");
    CHECK(ct_shard_write(p, ta, (int64_t)B * T, 1) == CT_OK); /* one token short */
    o.data = p;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "short.bin") != NULL);
    ta[500] = V; /* one token outside the vocabulary */
    ct_tmpdir_join(p, sizeof p, root, "oov.bin");
    CHECK(ct_shard_write(p, ta, la, 1) == CT_OK);
    ta[500] = 0;
    o.data = p;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "oov.bin") && strstr(ct_last_error(), "index 500"));
    ct_tmpdir_join(p, sizeof p, root, "missing.bin");
    o.data = p;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), "missing.bin") != NULL);
    o.data = a;
    o.T = NCTX + 1;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_ERR_ARG);
    CHECK(strstr(ct_last_error(), "n_ctx") != NULL);
    o.T = T;
    o.batches = -1;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_ERR_ARG);
    o.batches = 0;
    o.B = B + 1; /* the model is reserved for B x T now */
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_ERR_ARG);
    o.B = B;
    float *w = ct_model_params(m);
    w[ct_model_find_param(m, "ln_f.weight")->offset] = NAN;
    CHECK(ct_eval_run(ctx, m, &o, &r) == CT_ERR_NUMERIC);
    CHECK(strstr(ct_last_error(), "batch 1") != NULL);

    ct_model_free(m);
    free(ta);
    free(tb);
}

static bool same_weights(ct_model *x, ct_model *y) {
    return ct_model_numel(x) == ct_model_numel(y) &&
           memcmp(ct_model_params(x), ct_model_params(y), ct_model_numel(x) * sizeof(float)) == 0;
}

static void flip_byte(const char *path, long from_end) {
    long n = ct_tmpdir_size(path);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL && n > from_end);
    if (!f) return;
    fseek(f, n - from_end, SEEK_SET);
    int c = fgetc(f);
    fseek(f, n - from_end, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void test_load(void) {
    char hf[256], run[256], ck[512], p[600], resolved[600];
    ct_model *a = small_model(11), *b = small_model(12), *got = NULL;
    CHECK(a && b);
    if (!a || !b) return;
    int64_t step = 0;

    /* a Hugging Face directory */
    ct_tmpdir_join(hf, sizeof hf, root, "hf");
    CHECK(ct_model_save_hf(a, hf, "model.safetensors", false, true) == CT_OK);
    CHECK(ct_eval_load_model(&got, ctx, hf, resolved, sizeof resolved, &step) == CT_OK);
    CHECK(got && same_weights(got, a) && step == -1 && strcmp(resolved, hf) == 0);
    ct_model_free(got);

    /* checkpoints of steps 3 (weights a) and 6 (weights b) in a run directory */
    ct_tmpdir_join(run, sizeof run, root, "run");
    ct_ckpt_opts co = ct_ckpt_opts_default();
    uint8_t state[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ct_ckpt_blob blob = {"state", state, sizeof state};
    CHECK(ct_ckpt_save(run, 3, a, &blob, 1, &co, NULL, 0) == CT_OK);
    CHECK(ct_ckpt_save(run, 6, b, &blob, 1, &co, ck, sizeof ck) == CT_OK);
    CHECK(ct_eval_load_model(&got, ctx, ck, NULL, 0, &step) == CT_OK);
    CHECK(got && same_weights(got, b) && step == 6);
    ct_model_free(got);
    /* the run directory itself has no config.json: its newest valid checkpoint */
    CHECK(ct_eval_load_model(&got, ctx, run, resolved, sizeof resolved, &step) == CT_OK);
    CHECK(got && same_weights(got, b) && step == 6 && strcmp(resolved, ck) == 0);
    ct_model_free(got);

    /* a flipped byte in step 6's weights: refused when named, passed over in the run */
    snprintf(p, sizeof p, "%s/model.safetensors", ck);
    flip_byte(p, 5);
    got = NULL;
    CHECK(ct_eval_load_model(&got, ctx, ck, NULL, 0, &step) == CT_ERR_FORMAT);
    CHECK(got == NULL && strstr(ct_last_error(), "model.safetensors") != NULL);
    CHECK(ct_eval_load_model(&got, ctx, run, NULL, 0, &step) == CT_OK);
    CHECK(got && same_weights(got, a) && step == 3);
    ct_model_free(got);

    /* errors */
    ct_tmpdir_join(p, sizeof p, root, "nothing");
    got = NULL;
    CHECK(ct_eval_load_model(&got, ctx, p, NULL, 0, NULL) == CT_ERR_IO);
    CHECK(got == NULL && strstr(ct_last_error(), "nothing") != NULL);
    ct_tmpdir_join(p, sizeof p, root, "a.bin"); /* a file, not a directory */
    CHECK(ct_eval_load_model(&got, ctx, p, NULL, 0, NULL) == CT_ERR_ARG);
    CHECK(ct_eval_load_model(&got, ctx, hf, resolved, 4, NULL) == CT_ERR_ARG);
    CHECK(got == NULL);

    ct_model_free(a);
    ct_model_free(b);
}

static void quiet(ct_log_level level, const char *msg, void *user) {
    (void)level;
    (void)msg;
    (void)user;
}

int main(void) {
    if (!ct_tmpdir_make(root, sizeof root, "eval")) {
        perror("mkdtemp");
        return 1;
    }
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = 2;
    if (ct_ctx_init(&ctx, &cp) != CT_OK) return 1;
    ct_log_set(quiet, NULL); /* the damaged checkpoint's warning is expected */
    test_run();
    test_load();
    ct_log_set(NULL, NULL);
    ct_ctx_free(ctx);
    int rc = ct_test_result("test_eval");
    if (rc == 0) ct_tmpdir_remove(root);
    return rc;
}
