/*
 * The data-parallel layer of a build without MPI (CT_USE_MPI off): one
 * process, rank 0 of 1, where every collective is a local no-op or copy. A
 * program started by mpirun with several ranks is refused, since each rank
 * would otherwise train alone on the same data.
 * Leaves out: everything that needs a second process.
 */
#include "dist/dist_int.h"

#include <stdlib.h>
#include <string.h>

struct ct_dist {
    bool failed_together; /* never set: one process agrees with itself */
};

bool ct_dist_built_with_mpi(void) { return false; }

ct_status ct_dist_init(ct_dist **out) {
    *out = NULL;
    int world = dist_env_world();
    if (ct_dist_launched() && world > 1) {
        ct_status st = CT_ERR(CT_ERR_DIST, "started by an MPI launcher with %d ranks, but this "
                              "ctrain was built without MPI: each rank would train alone",
                              world);
        ct_error_hint("install libopenmpi-dev (scripts/bootstrap.sh) and rebuild, or run "
                      "without mpirun");
        return st;
    }
    ct_dist *d = calloc(1, sizeof *d);
    if (!d) return CT_ERR(CT_ERR_OOM, "out of memory for the communicator");
    *out = d;
    return CT_OK;
}

void ct_dist_free(ct_dist *d) { free(d); }
void ct_dist_abort(ct_dist *d, int code) {
    (void)d;
    (void)code;
}
int ct_dist_rank(const ct_dist *d) {
    (void)d;
    return 0;
}
int ct_dist_world(const ct_dist *d) {
    (void)d;
    return 1;
}
int ct_dist_local_size(const ct_dist *d) {
    (void)d;
    return 1;
}
int ct_dist_local_rank(const ct_dist *d) {
    (void)d;
    return -1;
}
const char *ct_dist_host(const ct_dist *d, int rank) {
    (void)d;
    (void)rank;
    return "";
}
void ct_dist_set_timeout(ct_dist *d, double seconds) {
    (void)d;
    (void)seconds;
}
double ct_dist_take_comm_s(ct_dist *d) {
    (void)d;
    return 0;
}
bool ct_dist_failed_together(const ct_dist *d) { return d && d->failed_together; }

ct_status ct_dist_agree(ct_dist *d, ct_status local, const char *what) {
    (void)d;
    (void)what;
    return local;
}

ct_status ct_dist_check_same(ct_dist *d, const char *text, const char *what) {
    (void)d;
    (void)text;
    (void)what;
    return CT_OK;
}

ct_status ct_dist_bcast(ct_dist *d, void *buf, size_t bytes, int root) {
    (void)d;
    (void)buf;
    (void)bytes;
    (void)root;
    return CT_OK;
}

ct_status ct_dist_allgather_f64(ct_dist *d, const double *mine, int n, double *all) {
    (void)d;
    memcpy(all, mine, (size_t)n * sizeof *all);
    return CT_OK;
}

ct_status ct_dist_allreduce_f32(ct_dist *d, float *buf, size_t n) {
    (void)d;
    (void)buf;
    (void)n;
    return CT_OK;
}

ct_status ct_dist_grad_begin(ct_dist *d, float *grads, size_t numel, size_t bucket_elems) {
    (void)d;
    (void)grads;
    (void)numel;
    (void)bucket_elems;
    return CT_OK;
}

void ct_dist_grad_ready(ct_dist *d, size_t lo, size_t hi) {
    (void)d;
    (void)lo;
    (void)hi;
}

ct_status ct_dist_grad_finish(ct_dist *d) {
    (void)d;
    return CT_OK;
}

ct_status ct_dist_allgather_shards(ct_dist *d, float *buf, size_t numel) {
    (void)d;
    (void)buf;
    (void)numel;
    return CT_OK;
}

ct_status ct_dist_gather_shards(ct_dist *d, const float *shard, float *full, size_t numel) {
    (void)d;
    if (full && full != shard) memcpy(full, shard, numel * sizeof *full);
    return CT_OK;
}
