/*
 * The data-parallel layer over MPI (built when CMake finds MPI: CT_USE_MPI);
 * the only file of the project that includes mpi.h. Every collective is the
 * nonblocking form, waited on by polling with a deadline, so no call blocks
 * longer than the timeout: a dead or stuck rank becomes CT_ERR_DIST. The
 * gradient average runs as in-place Iallreduce calls over buckets of the
 * flat buffer, each started once the backward pass has finished all of it
 * and driven forward by later reports.
 * When a wait runs long, the ranks it still waits for are named: every wait
 * answers liveness pings on a communicator of its own, and a rank whose wait
 * reaches 80% of the timeout pings the others; at the timeout, those that did
 * not answer (dead, hung, or cut off) are named with their hosts.
 * Leaves out: an MPI progress thread (progress happens inside our calls) and
 * counts above INT_MAX in one shard gather (refused with CT_ERR_DIST).
 */
#include "dist/dist_int.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOST_MAX 64     /* a rank's host name, as MPI_Get_processor_name gives it */
#define TAG_PING 1      /* on d->live: "are you there?", payload: the round */
#define TAG_PONG 2      /* the answer, echoing the round */
#define PROBE_AT 0.8    /* a wait pings the others at this fraction of the timeout */

struct ct_dist {
    bool mpi;             /* MPI was initialised by us */
    int rank, world, local;
    int local_rank; /* this rank among those of its machine; -1 for one process */
    double timeout;       /* seconds; 0: none */
    double comm_s;        /* seconds in communication since the last take */
    bool failed_together; /* an agreed error was returned */

    /* the gradient average of the current step */
    float *grads;
    size_t numel, bucket; /* elements; bucket: per bucket */
    int nb, cap;          /* buckets now, allocated */
    size_t *done;         /* (cap) final elements per bucket */
    bool *started;        /* (cap) */
    MPI_Request *reqs;    /* (cap) */
    int next;             /* first bucket not started, in start order */
    ct_status pending;    /* a failure met in ct_dist_grad_ready */
    char pending_msg[512];

    /* liveness: who a long wait still waits for */
    MPI_Comm live;        /* a duplicate of MPI_COMM_WORLD for pings and pongs */
    char (*hosts)[HOST_MAX]; /* (world) every rank's host */
    int round;            /* the current probe's number */
    int ping_in, pong_in; /* receive buffers */
    int *pong_buf;        /* (world) the answers of the current probe */
    MPI_Request *pongs;   /* (world) their receives; MPI_REQUEST_NULL: none */
};

bool ct_dist_built_with_mpi(void) { return true; }

static ct_status mpi_fail(const ct_dist *d, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "code %d", rc);
    return CT_ERR(CT_ERR_DIST, "rank %d: %s failed: %s", d->rank, what, s);
}

static void pause_briefly(void) {
    struct timespec ts = {0, 50000}; /* 50 us */
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------- liveness */

/* Answer the pings that arrived (and drop pongs of a finished probe). Sends
 * are fire-and-forget: a pong to a rank that is gone is never waited for. */
static void serve_pings(ct_dist *d) {
    if (d->live == MPI_COMM_NULL) return;
    for (int k = 0; k < 16; k++) {
        int flag = 0;
        MPI_Status s;
        if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, d->live, &flag, &s) != MPI_SUCCESS || !flag)
            return;
        int *into = s.MPI_TAG == TAG_PING ? &d->ping_in : &d->pong_in;
        if (MPI_Recv(into, 1, MPI_INT, s.MPI_SOURCE, s.MPI_TAG, d->live, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS)
            return;
        if (s.MPI_TAG != TAG_PING) continue;
        MPI_Request r;
        if (MPI_Isend(&d->ping_in, 1, MPI_INT, s.MPI_SOURCE, TAG_PONG, d->live, &r) ==
            MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

/* Ping every other rank; their answers are collected by probe_lost. */
static void probe_start(ct_dist *d) {
    d->round++;
    for (int p = 0; p < d->world; p++) {
        d->pongs[p] = MPI_REQUEST_NULL;
        d->pong_buf[p] = -1;
        if (p == d->rank) continue;
        MPI_Irecv(&d->pong_buf[p], 1, MPI_INT, p, TAG_PONG, d->live, &d->pongs[p]);
        MPI_Request r;
        if (MPI_Isend(&d->round, 1, MPI_INT, p, TAG_PING, d->live, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

/* Collect the answers; a pong of an older round is waited past. */
static void probe_poll(ct_dist *d) {
    for (int p = 0; p < d->world; p++) {
        int flag = 0;
        if (d->pongs[p] == MPI_REQUEST_NULL) continue;
        if (MPI_Test(&d->pongs[p], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) continue;
        if (d->pong_buf[p] != d->round) /* stale: wait for this round's */
            MPI_Irecv(&d->pong_buf[p], 1, MPI_INT, p, TAG_PONG, d->live, &d->pongs[p]);
    }
}

/* End a probe: cancel the receives still open (a late pong is dropped by
 * serve_pings). */
static void probe_end(ct_dist *d) {
    for (int p = 0; p < d->world; p++) {
        if (d->pongs[p] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&d->pongs[p]);
        MPI_Request_free(&d->pongs[p]);
    }
}

/* "rank 1 (host b)" for every rank that did not answer this round. */
static int probe_lost(const ct_dist *d, char *out, size_t cap) {
    int n = 0;
    size_t len = 0;
    out[0] = '\0';
    for (int p = 0; p < d->world; p++) {
        if (p == d->rank || d->pong_buf[p] == d->round) continue;
        if (n++ < 8 && len < cap) {
            int k = snprintf(out + len, cap - len, "%srank %d (host %s)", n > 1 ? ", " : "", p,
                             d->hosts[p]);
            len += k > 0 ? (size_t)k : 0;
        }
    }
    if (n > 8 && len < cap) snprintf(out + len, cap - len, " and %d more", n - 8);
    return n;
}

/* Wait for n requests, polling, for at most the timeout. */
static ct_status wait_reqs(ct_dist *d, int n, MPI_Request *r, const char *what) {
    double t0 = MPI_Wtime();
    bool probing = false;
    for (int spins = 0;; spins++) {
        int flag = 0;
        int rc = MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            if (probing) probe_end(d);
            return mpi_fail(d, rc, what);
        }
        if (flag) break;
        if ((spins & 63) == 0) serve_pings(d);
        double waited = MPI_Wtime() - t0;
        if (d->timeout > 0 && d->live != MPI_COMM_NULL) {
            if (!probing && waited > PROBE_AT * d->timeout) {
                probe_start(d);
                probing = true;
            }
            if (probing) probe_poll(d);
        }
        if (d->timeout > 0 && waited > d->timeout) {
            char lost[512] = "";
            int nlost = probing ? probe_lost(d, lost, sizeof lost) : 0;
            if (probing) probe_end(d);
            ct_status st;
            if (nlost)
                st = CT_ERR(CT_ERR_DIST, "rank %d on %s: %s: no answer for %.0f s "
                            "(dist.timeout_s); lost: %s, which does not answer on the network "
                            "either: it died, hangs, or its host or link is down", d->rank,
                            d->hosts[d->rank], what, d->timeout, lost);
            else
                st = CT_ERR(CT_ERR_DIST, "rank %d on %s: %s: no answer from the other ranks "
                            "for %.0f s (dist.timeout_s), though every rank answers on the "
                            "network: one is much slower, or stuck elsewhere", d->rank,
                            d->hosts[d->rank], what, d->timeout);
            ct_error_hint("see the other ranks' output; raise dist.timeout_s when steps, "
                          "evaluations or checkpoints legitimately take longer");
            return st;
        }
        if (spins > 200) pause_briefly(); /* leave the cores to a slower local rank */
    }
    if (probing) probe_end(d);
    d->comm_s += MPI_Wtime() - t0;
    return CT_OK;
}

ct_status ct_dist_init(ct_dist **out) {
    *out = NULL;
    ct_dist *d = calloc(1, sizeof *d);
    if (!d) return CT_ERR(CT_ERR_OOM, "out of memory for the communicator");
    d->world = d->local = 1;
    d->local_rank = -1;
    d->live = MPI_COMM_NULL;
    d->timeout = 600;
    if (!ct_dist_launched()) {
        *out = d;
        return CT_OK;
    }
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        free(d);
        return CT_ERR(CT_ERR_DIST, "MPI_Init_thread failed (code %d)", rc);
    }
    d->mpi = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->world);
    /* liveness: a communicator of its own and every rank's host, gathered
     * here where MPI_Init has just made every rank meet anyway */
    d->live = MPI_COMM_NULL;
    d->hosts = calloc((size_t)d->world, sizeof *d->hosts);
    d->pong_buf = calloc((size_t)d->world, sizeof *d->pong_buf);
    d->pongs = calloc((size_t)d->world, sizeof *d->pongs);
    if (!d->hosts || !d->pong_buf || !d->pongs) {
        ct_dist_free(d);
        return CT_ERR(CT_ERR_OOM, "out of memory for the communicator");
    }
    char me[MPI_MAX_PROCESSOR_NAME] = "", host[HOST_MAX] = "";
    int len = 0;
    if (MPI_Get_processor_name(me, &len) != MPI_SUCCESS || !me[0]) snprintf(me, sizeof me, "?");
    /* a host name longer than HOST_MAX is cut (names are for messages only) */
    memcpy(host, me, strnlen(me, sizeof host - 1));
    if (MPI_Allgather(host, HOST_MAX, MPI_CHAR, d->hosts, HOST_MAX, MPI_CHAR, MPI_COMM_WORLD) !=
        MPI_SUCCESS)
        for (int i = 0; i < d->world; i++) snprintf(d->hosts[i], HOST_MAX, "?");
    for (int i = 0; i < d->world; i++) d->hosts[i][HOST_MAX - 1] = '\0';
    if (MPI_Comm_dup(MPI_COMM_WORLD, &d->live) != MPI_SUCCESS) d->live = MPI_COMM_NULL;
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL,
                            &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &d->local);
        MPI_Comm_rank(node, &d->local_rank);
        MPI_Comm_free(&node);
    }
    *out = d;
    return CT_OK;
}

void ct_dist_free(ct_dist *d) {
    if (!d) return;
    if (d->live != MPI_COMM_NULL) MPI_Comm_free(&d->live);
    if (d->mpi) MPI_Finalize();
    free(d->hosts);
    free(d->pong_buf);
    free(d->pongs);
    free(d->done);
    free(d->started);
    free(d->reqs);
    free(d);
}

void ct_dist_abort(ct_dist *d, int code) {
    if (d && d->mpi) MPI_Abort(MPI_COMM_WORLD, code);
}

int ct_dist_rank(const ct_dist *d) { return d ? d->rank : 0; }
int ct_dist_world(const ct_dist *d) { return d ? d->world : 1; }
int ct_dist_local_size(const ct_dist *d) { return d ? d->local : 1; }
int ct_dist_local_rank(const ct_dist *d) { return d && d->world > 1 ? d->local_rank : -1; }
const char *ct_dist_host(const ct_dist *d, int rank) {
    return d && d->hosts && rank >= 0 && rank < d->world ? d->hosts[rank] : "";
}
void ct_dist_set_timeout(ct_dist *d, double seconds) {
    if (d) d->timeout = seconds > 0 ? seconds : 0;
}
bool ct_dist_failed_together(const ct_dist *d) { return d && d->failed_together; }

double ct_dist_take_comm_s(ct_dist *d) {
    if (!d) return 0;
    double s = d->comm_s;
    d->comm_s = 0;
    return s;
}

static bool active(const ct_dist *d) { return d && d->mpi && d->world > 1; }

/* ---------------------------------------------------------- collectives */

ct_status ct_dist_bcast(ct_dist *d, void *buf, size_t bytes, int root) {
    if (!active(d)) return CT_OK;
    uint8_t *p = buf;
    while (bytes > 0) {
        int n = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
        MPI_Request r;
        int rc = MPI_Ibcast(p, n, MPI_BYTE, root, MPI_COMM_WORLD, &r);
        if (rc != MPI_SUCCESS) return mpi_fail(d, rc, "broadcast");
        ct_status st = wait_reqs(d, 1, &r, "broadcast");
        if (st) return st;
        p += n;
        bytes -= (size_t)n;
    }
    return CT_OK;
}

ct_status ct_dist_allgather_f64(ct_dist *d, const double *mine, int n, double *all) {
    if (!active(d)) {
        memcpy(all, mine, (size_t)n * sizeof *all);
        return CT_OK;
    }
    MPI_Request r;
    int rc = MPI_Iallgather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD, &r);
    if (rc != MPI_SUCCESS) return mpi_fail(d, rc, "allgather");
    return wait_reqs(d, 1, &r, "allgather");
}

ct_status ct_dist_allreduce_f32(ct_dist *d, float *buf, size_t n) {
    if (!active(d)) return CT_OK;
    while (n > 0) {
        int c = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        MPI_Request r;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
        if (rc != MPI_SUCCESS) return mpi_fail(d, rc, "allreduce");
        ct_status st = wait_reqs(d, 1, &r, "allreduce");
        if (st) return st;
        buf += c;
        n -= (size_t)c;
    }
    return CT_OK;
}

/* ------------------------------------------------------------ agreement */

ct_status ct_dist_agree(ct_dist *d, ct_status local, const char *what) {
    if (!active(d)) return local;
    int *all = malloc((size_t)d->world * sizeof *all);
    if (!all) return CT_ERR(CT_ERR_OOM, "out of memory agreeing on %s", what);
    int mine = (int)local;
    MPI_Request r;
    int rc = MPI_Iallgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD, &r);
    ct_status st = rc != MPI_SUCCESS ? mpi_fail(d, rc, "agreement") :
                   wait_reqs(d, 1, &r, "agreement");
    int failed = -1;
    for (int i = 0; !st && i < d->world && failed < 0; i++)
        if (all[i] != CT_OK) failed = i;
    free(all);
    if (st) return st;
    if (failed < 0) return CT_OK;
    /* the lowest failing rank tells everyone why: message, then hint */
    char msg[DIST_MSG_MAX];
    memset(msg, 0, sizeof msg);
    if (d->rank == failed) {
        snprintf(msg, DIST_MSG_TEXT, "%s", ct_last_error());
        snprintf(msg + DIST_MSG_TEXT, DIST_MSG_MAX - DIST_MSG_TEXT, "%s", ct_last_hint());
    }
    /* the exchange sets no error on success, so a failing rank's own stays */
    if ((st = ct_dist_bcast(d, msg, sizeof msg, failed))) return st;
    msg[DIST_MSG_TEXT - 1] = msg[DIST_MSG_MAX - 1] = '\0';
    d->failed_together = true;
    if (local != CT_OK) return local;
    st = CT_ERR(CT_ERR_DIST, "rank %d failed (%s): %s", failed, what, msg);
    if (msg[DIST_MSG_TEXT]) ct_error_hint("%s", msg + DIST_MSG_TEXT);
    return st;
}

ct_status ct_dist_check_same(ct_dist *d, const char *text, const char *what) {
    if (!active(d)) return CT_OK;
    uint64_t h = dist_hash_text(text);
    uint64_t *all = malloc((size_t)d->world * sizeof *all);
    if (!all) return CT_ERR(CT_ERR_OOM, "out of memory comparing the %s", what);
    MPI_Request r;
    int rc = MPI_Iallgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD, &r);
    ct_status st = rc != MPI_SUCCESS ? mpi_fail(d, rc, "comparing the configuration") :
                   wait_reqs(d, 1, &r, "comparing the configuration");
    int differs = -1;
    for (int i = 1; !st && i < d->world && differs < 0; i++)
        if (all[i] != all[0]) differs = i;
    free(all);
    if (st || differs < 0) return st;
    /* rank 0's text goes to the first differing rank's side, which says where */
    uint64_t len = strlen(text) + 1;
    if ((st = ct_dist_bcast(d, &len, sizeof len, 0))) return st;
    char *root = malloc(len);
    if (!root) return CT_ERR(CT_ERR_OOM, "out of memory comparing the %s", what);
    if (d->rank == 0) memcpy(root, text, len);
    st = ct_dist_bcast(d, root, len, 0);
    char where[512] = "";
    if (!st && d->rank == differs) dist_describe_diff(root, text, d->rank, where, sizeof where);
    free(root);
    if (st || (st = ct_dist_bcast(d, where, sizeof where, differs))) return st;
    where[sizeof where - 1] = '\0';
    d->failed_together = true;
    st = CT_ERR(CT_ERR_ARG, "the ranks were given different %ss: rank %d's differs from rank "
                "0's at %s", what, differs, where);
    ct_error_hint("start every rank with the same --config file and key=value arguments");
    return st;
}

/* ---------------------------------------------------- gradient average */

ct_status ct_dist_grad_begin(ct_dist *d, float *grads, size_t numel, size_t bucket_elems) {
    if (!active(d)) return CT_OK;
    size_t bucket = bucket_elems ? bucket_elems : numel;
    if (bucket > (size_t)INT_MAX) bucket = (size_t)INT_MAX;
    if (bucket < 1) bucket = 1;
    size_t nb = numel ? (numel + bucket - 1) / bucket : 0;
    if (nb > (size_t)INT_MAX) return CT_ERR(CT_ERR_ARG, "too many gradient buckets (%zu)", nb);
    if ((int)nb > d->cap) {
        free(d->done);
        free(d->started);
        free(d->reqs);
        d->done = calloc(nb, sizeof *d->done);
        d->started = calloc(nb, sizeof *d->started);
        d->reqs = calloc(nb, sizeof *d->reqs);
        d->cap = d->done && d->started && d->reqs ? (int)nb : 0;
        if (!d->cap) return CT_ERR(CT_ERR_OOM, "out of memory for %zu gradient buckets", nb);
    }
    d->grads = grads;
    d->numel = numel;
    d->bucket = bucket;
    d->nb = (int)nb;
    d->next = 0;
    d->pending = CT_OK;
    for (int b = 0; b < d->nb; b++) {
        d->done[b] = 0;
        d->started[b] = false;
        d->reqs[b] = MPI_REQUEST_NULL;
    }
    return CT_OK;
}

static size_t bucket_len(const ct_dist *d, int b) {
    size_t lo = (size_t)b * d->bucket;
    return d->numel - lo < d->bucket ? d->numel - lo : d->bucket;
}

static void start_bucket(ct_dist *d, int b) {
    if (d->started[b] || d->pending) return;
    d->started[b] = true;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, d->grads + (size_t)b * d->bucket, (int)bucket_len(d, b),
                            MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &d->reqs[b]);
    if (rc != MPI_SUCCESS) {
        d->pending = mpi_fail(d, rc, "gradient allreduce");
        snprintf(d->pending_msg, sizeof d->pending_msg, "%s", ct_last_error());
    }
}

void ct_dist_grad_ready(ct_dist *d, size_t lo, size_t hi) {
    if (!active(d) || !d->grads || hi <= lo) return;
    double t0 = MPI_Wtime();
    if (hi > d->numel) hi = d->numel;
    for (size_t b = lo / d->bucket; b < (size_t)d->nb && b * d->bucket < hi; b++) {
        size_t blo = b * d->bucket, bhi = blo + bucket_len(d, (int)b);
        size_t a = lo > blo ? lo : blo, z = hi < bhi ? hi : bhi;
        if (z > a) d->done[b] += z - a;
        if (d->done[b] >= bhi - blo) start_bucket(d, (int)b);
    }
    /* let the started buckets move on while the backward continues */
    int flag;
    if (!d->pending) MPI_Testall(d->nb, d->reqs, &flag, MPI_STATUSES_IGNORE);
    d->comm_s += MPI_Wtime() - t0;
}

ct_status ct_dist_grad_finish(ct_dist *d) {
    if (!active(d) || !d->grads) return CT_OK;
    for (int b = 0; b < d->nb; b++) start_bucket(d, b);
    ct_status st = d->pending;
    if (st) {
        st = CT_ERR(st, "%s", d->pending_msg);
    } else {
        st = wait_reqs(d, d->nb, d->reqs, "gradient allreduce");
    }
    d->grads = NULL;
    return st;
}

/* ------------------------------------------------------ ZeRO-1 shards */

/* counts and displacements of the shard layout, as MPI ints. */
static ct_status shard_counts(ct_dist *d, size_t numel, int **counts, int **displs) {
    *counts = malloc((size_t)d->world * sizeof **counts);
    *displs = malloc((size_t)d->world * sizeof **displs);
    if (!*counts || !*displs) return CT_ERR(CT_ERR_OOM, "out of memory for the shard layout");
    if (numel > (size_t)INT_MAX)
        return CT_ERR(CT_ERR_DIST, "%zu parameters: one gather of ZeRO shards handles at most "
                      "%d elements", numel, INT_MAX);
    for (int r = 0; r < d->world; r++) {
        size_t lo, n;
        ct_dist_shard(numel, d->world, r, &lo, &n);
        (*counts)[r] = (int)n;
        (*displs)[r] = (int)lo;
    }
    return CT_OK;
}

ct_status ct_dist_allgather_shards(ct_dist *d, float *buf, size_t numel) {
    if (!active(d)) return CT_OK;
    int *counts = NULL, *displs = NULL;
    ct_status st = shard_counts(d, numel, &counts, &displs);
    if (!st) {
        MPI_Request r;
        int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs,
                                 MPI_FLOAT, MPI_COMM_WORLD, &r);
        st = rc != MPI_SUCCESS ? mpi_fail(d, rc, "parameter allgather") :
             wait_reqs(d, 1, &r, "parameter allgather");
    }
    free(counts);
    free(displs);
    return st;
}

ct_status ct_dist_gather_shards(ct_dist *d, const float *shard, float *full, size_t numel) {
    if (!active(d)) {
        if (full && full != shard) memcpy(full, shard, numel * sizeof *full);
        return CT_OK;
    }
    int *counts = NULL, *displs = NULL;
    ct_status st = shard_counts(d, numel, &counts, &displs);
    if (!st) {
        MPI_Request r;
        int rc = MPI_Igatherv(shard, counts[d->rank], MPI_FLOAT, full, counts, displs, MPI_FLOAT,
                              0, MPI_COMM_WORLD, &r);
        st = rc != MPI_SUCCESS ? mpi_fail(d, rc, "optimizer-state gather") :
             wait_reqs(d, 1, &r, "optimizer-state gather");
    }
    free(counts);
    free(displs);
    return st;
}
