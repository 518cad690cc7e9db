/*
 * The data-parallel layer without a launcher (src/dist): the ZeRO-1 shard
 * layout (covering, padded, empty shards), one process's communicator (rank 0
 * of 1; collectives are local; an error agreed with itself keeps its
 * message), the description of differing configs, and the sharded AdamW
 * range against a full update. The multi-rank behaviour is tested through
 * mpirun in tests/cli/test_mpi.py.
 */
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "ctrain/dist.h"
#include "ctrain/train.h"
#include "dist/dist_int.h"

static void test_shards(void) {
    static const size_t sizes[] = {0, 1, 2, 7, 8128, 8129};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        for (int world = 1; world <= 9; world++) {
            size_t numel = sizes[i], next = 0, biggest = 0;
            int bad = 0;
            for (int r = 0; r < world; r++) {
                size_t lo, n;
                ct_dist_shard(numel, world, r, &lo, &n);
                /* consecutive, covering, none longer than ceil(numel / world) */
                bad += lo != next || n > (numel + (size_t)world - 1) / (size_t)world;
                next = lo + n;
                biggest = n > biggest ? n : biggest;
            }
            CHECK_MSG(bad == 0 && next == numel, "numel %zu world %d", numel, world);
            CHECK(biggest == (numel + (size_t)world - 1) / (size_t)world);
        }
    }
    /* padded, not refused: 7 over 3 ranks is 3 + 3 + 1; 2 over 4 leaves two empty */
    size_t lo, n;
    ct_dist_shard(7, 3, 2, &lo, &n);
    CHECK(lo == 6 && n == 1);
    ct_dist_shard(2, 4, 3, &lo, &n);
    CHECK(lo == 2 && n == 0);
}

static void test_one_process(void) {
    /* NULL is one process */
    CHECK(ct_dist_rank(NULL) == 0 && ct_dist_world(NULL) == 1 && ct_dist_local_size(NULL) == 1);
    ct_dist *d = NULL;
    CHECK(!ct_dist_launched()); /* ctest does not start us through mpirun */
    CHECK(ct_dist_init(&d) == CT_OK && d);
    CHECK(ct_dist_rank(d) == 0 && ct_dist_world(d) == 1);
    double mine[3] = {1.5, -2, 3}, all[3] = {0};
    CHECK(ct_dist_allgather_f64(d, mine, 3, all) == CT_OK && !memcmp(mine, all, sizeof all));
    float g[5] = {1, 2, 3, 4, 5};
    CHECK(ct_dist_grad_begin(d, g, 5, 2) == CT_OK);
    ct_dist_grad_ready(d, 0, 5);
    CHECK(ct_dist_grad_finish(d) == CT_OK && g[0] == 1 && g[4] == 5);
    float full[5] = {0};
    CHECK(ct_dist_gather_shards(d, g, full, 5) == CT_OK && !memcmp(g, full, sizeof full));
    CHECK(ct_dist_allgather_shards(d, g, 5) == CT_OK);
    CHECK(ct_dist_check_same(d, "a: 1\n", "configuration") == CT_OK);
    CHECK(ct_dist_agree(d, CT_OK, "setup") == CT_OK);
    ct_status st = CT_ERR(CT_ERR_IO, "disk.bin: cannot read");
    CHECK(ct_dist_agree(d, st, "setup") == CT_ERR_IO);
    CHECK(strstr(ct_last_error(), "disk.bin") != NULL);
    CHECK(!ct_dist_failed_together(d));
    CHECK(ct_dist_take_comm_s(d) == 0);
    ct_dist_free(d);
    ct_dist_free(NULL);
}

static void test_describe_diff(void) {
    const char *root = "model:\n  n_layer: 2\noptim:\n  lr: 0.001    # peak\n  eps: 1e-08\n";
    const char *mine = "model:\n  n_layer: 2\noptim:\n  lr: 0.002    # peak\n  eps: 1e-08\n";
    char out[512];
    dist_describe_diff(root, mine, 3, out, sizeof out);
    CHECK_MSG(strstr(out, "optim.lr") && strstr(out, "line 4") && strstr(out, "0.001") &&
              strstr(out, "rank 3 has '  lr: 0.002"), "%s", out);
    /* a text that ends early */
    dist_describe_diff("a: 1\nb: 2\n", "a: 1\n", 1, out, sizeof out);
    CHECK_MSG(strstr(out, "line 2") && strstr(out, "'b: 2'") && strstr(out, "rank 1 has ''"),
              "%s", out);
    CHECK(dist_hash_text(root) != dist_hash_text(mine));
    CHECK(dist_hash_text(root) == dist_hash_text(root));
}

/* ZeRO-1's arithmetic: AdamW over ranges equals one full update bit for bit,
 * with the weight decay rule of each tensor kept at a range's edges. */
static void test_adamw_ranges(void) {
    ct_ctx *ctx = NULL;
    ct_ctx_params cp = ct_ctx_params_default();
    cp.n_threads = 2;
    CHECK(ct_ctx_init(&ctx, &cp) == CT_OK);
    ct_model_config mc;
    CHECK(ct_model_config_preset(&mc, "gpt2-tiny") == CT_OK);
    ct_model *a = NULL, *b = NULL;
    CHECK(ct_model_init(&a, ctx, &mc) == CT_OK && ct_model_init(&b, ctx, &mc) == CT_OK);
    ct_model_init_weights(a, 5);
    ct_model_init_weights(b, 5);
    CHECK(ct_model_reserve(a, 1, 4, true) == CT_OK && ct_model_reserve(b, 1, 4, true) == CT_OK);
    size_t numel = ct_model_numel(a);
    float *ga = ct_model_grads(a), *gb = ct_model_grads(b);
    for (size_t i = 0; i < numel; i++) ga[i] = gb[i] = (float)((i * 37 % 101) - 50) * 1e-3f;
    ct_adamw full;
    CHECK(ct_adamw_init(&full, ctx, numel) == CT_OK);
    int world = 3;
    ct_adamw part[3];
    for (int r = 0; r < world; r++) {
        size_t lo, n;
        ct_dist_shard(numel, world, r, &lo, &n);
        CHECK(ct_adamw_init_range(&part[r], ctx, numel, lo, n) == CT_OK);
    }
    ct_adamw_params ap = {0.9f, 0.95f, 1e-8f, 0.1f};
    for (int step = 0; step < 3; step++) {
        ct_adamw_step(&full, a, &ap, 1e-2f, 0.7f);
        for (int r = 0; r < world; r++) ct_adamw_step(&part[r], b, &ap, 1e-2f, 0.7f);
    }
    CHECK(!memcmp(ct_model_params(a), ct_model_params(b), numel * sizeof(float)));
    /* the shards' moments are the full optimizer's, piece by piece */
    int bad = 0;
    for (int r = 0; r < world; r++)
        bad += memcmp(part[r].m, full.m + part[r].lo, part[r].n * sizeof(float)) != 0 ||
               memcmp(part[r].v, full.v + part[r].lo, part[r].n * sizeof(float)) != 0;
    CHECK(bad == 0);
    /* the sum of squares of the shards is the norm's */
    double sum = 0;
    for (int r = 0; r < world; r++) sum += ct_grad_sumsq_range(a, part[r].lo, part[r].n);
    double norm = ct_grad_norm(a);
    CHECK_MSG(sum > 0 && (sum - norm * norm) / sum < 1e-12 && (norm * norm - sum) / sum < 1e-12,
              "%.17g vs %.17g", sum, norm * norm);
    for (int r = 0; r < world; r++) ct_adamw_free(&part[r]);
    ct_adamw_free(&full);
    ct_model_free(a);
    ct_model_free(b);
    ct_ctx_free(ctx);
}

int main(void) {
    test_shards();
    test_one_process();
    test_describe_diff();
    test_adamw_ranges();
    return ct_test_result("test_dist");
}
