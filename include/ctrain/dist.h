/*
 * Data-parallel communication: the ranks of an `mpirun` job, the averaged
 * gradient (bucketed allreduces over the flat gradient buffer, started while
 * the backward pass is still running), the ZeRO-1 shard layout with its
 * gathers, and the agreement calls that let every rank end a failed job with
 * the same reason instead of hanging.
 *
 * Every call takes a ct_dist that may be NULL: NULL (or a build without MPI,
 * or a program not started by an MPI launcher) is one process, rank 0 of 1,
 * where every collective is a local no-op. Every wait is bounded by the
 * timeout (ct_dist_set_timeout): a rank that died, hangs or was cut off turns
 * into CT_ERR_DIST on the others, never into a hang, and the message names
 * the ranks (and hosts) that stopped answering. Public types hold no MPI
 * types; src/dist/dist_mpi.c is the only file that includes mpi.h.
 *
 * Leaves out: model parallelism, reduce-scatter of gradients (ZeRO-2/3), and
 * aborting the job: that is the program's decision (ct_dist_abort).
 */
#ifndef CT_DIST_H
#define CT_DIST_H

#include "ctrain/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_dist ct_dist; /* opaque: the communicator and its buffers */

/* True when this process was started by an MPI launcher (mpirun, srun with
 * PMI/PMIx: OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set). Only then
 * does ct_dist_init start MPI, so a plain run stays one fast process. */
CT_API bool ct_dist_launched(void);

/* True when this build has MPI (CT_USE_MPI). */
CT_API bool ct_dist_built_with_mpi(void);

/* Join the job: with MPI built in and a launcher detected, initialises MPI
 * (threads: funneled) and sets errors to return codes; otherwise a
 * single-process communicator. Returns owned *out; release with
 * ct_dist_free (which finalises MPI). Call once per process.
 * Errors: CT_ERR_DIST (MPI failed to start; or launched by mpirun with more
 * than one rank in a build without MPI, so the ranks would each train
 * alone), CT_ERR_OOM. */
CT_API ct_status ct_dist_init(ct_dist **out);
/* Finalise MPI (after the last collective; every rank must call it) and free
 * d. NULL is fine. */
CT_API void ct_dist_free(ct_dist *d);
/* End the whole job now with exit status code on every rank (MPI_Abort);
 * for the program only, after a failure the other ranks do not know about.
 * Returns only without MPI (then it does nothing). */
CT_API void ct_dist_abort(ct_dist *d, int code);

CT_API int ct_dist_rank(const ct_dist *d);       /* 0 for NULL */
CT_API int ct_dist_world(const ct_dist *d);      /* 1 for NULL */
CT_API int ct_dist_local_size(const ct_dist *d); /* ranks on this machine; 1 for NULL */
/* This rank's index among the ranks on its machine (0..local_size-1); -1
 * for one process (NULL, world 1). */
CT_API int ct_dist_local_rank(const ct_dist *d);
/* The host rank runs on (MPI's processor name, gathered at init); "" for an
 * unknown rank, and for one process. */
CT_API const char *ct_dist_host(const ct_dist *d, int rank);

/* Longest wait of any one collective, in seconds; 0: wait forever (the
 * default is 600). Ranks wait for each other's steps, evaluations and rank
 * 0's checkpoint writes, so it must exceed the longest of those. */
CT_API void ct_dist_set_timeout(ct_dist *d, double seconds);

/* Seconds spent inside communication calls since the last call of this
 * function (then reset). 0 for one process. */
CT_API double ct_dist_take_comm_s(ct_dist *d);

/* ------------------------------------------------------------ agreement */

/* Every rank calls it with its own status for the same stage (`what`, for
 * messages: "setup", "step 12"). CT_OK when every rank is fine. Otherwise
 * every rank returns an error: a failing rank keeps its own (message, hint,
 * code); the others get CT_ERR_DIST "rank R failed (what): <R's message>"
 * with R's hint, R the lowest failing rank. Afterwards
 * ct_dist_failed_together is true, so the program may end normally on every
 * rank. Errors of the communication itself: CT_ERR_DIST. */
CT_API ct_status ct_dist_agree(ct_dist *d, ct_status local, const char *what);
/* True after ct_dist_agree returned an error every rank knows of. */
CT_API bool ct_dist_failed_together(const ct_dist *d);

/* Every rank passes its text (a resolved configuration): CT_OK when all are
 * byte-identical (compared by a 64-bit hash). Otherwise CT_ERR_ARG on every
 * rank naming the first rank whose text differs from rank 0's and the first
 * line where it differs (rank 0's line and that rank's). what names the text
 * ("configuration"). Borrows text. */
CT_API ct_status ct_dist_check_same(ct_dist *d, const char *text, const char *what);

/* ---------------------------------------------------------- collectives */

/* Copy root's bytes into buf on every rank. */
CT_API ct_status ct_dist_bcast(ct_dist *d, void *buf, size_t bytes, int root);
/* all[r*n + i] = rank r's mine[i], on every rank (n doubles each). */
CT_API ct_status ct_dist_allgather_f64(ct_dist *d, const double *mine, int n, double *all);
/* Sum of buf over the ranks, in place, on every rank. */
CT_API ct_status ct_dist_allreduce_f32(ct_dist *d, float *buf, size_t n);

/* ---------------------------------------------------- gradient average */

/* Start a gradient average over grads[0..numel) in buckets of bucket_elems
 * floats (0: one bucket). Borrows grads until ct_dist_grad_finish. Then
 * report with ct_dist_grad_ready the ranges whose gradients are final (every
 * rank in the same order); a bucket's allreduce starts as soon as all of it
 * is final. One process: nothing happens. CT_ERR_OOM. */
CT_API ct_status ct_dist_grad_begin(ct_dist *d, float *grads, size_t numel, size_t bucket_elems);
/* grads[lo..hi) are final (disjoint from earlier reports). Starts the
 * buckets that became complete and drives the ones in flight. A failure is
 * kept for ct_dist_grad_finish. Cheap; meant for the model's per-block
 * hook. */
CT_API void ct_dist_grad_ready(ct_dist *d, size_t lo, size_t hi);
/* Start what is left and wait for every bucket: grads then hold the sum of
 * the ranks' gradients, the same on every rank. No division follows: each
 * rank weights its loss by 1/world beforehand, so the sum is the mean.
 * Errors: CT_ERR_DIST (a failed or timed-out allreduce). */
CT_API ct_status ct_dist_grad_finish(ct_dist *d);

/* ------------------------------------------------------ ZeRO-1 shards */

/* Rank `rank`'s shard of a flat buffer of numel elements split over world
 * ranks: shards of ceil(numel / world) elements, the last ones shorter or
 * empty (padded rather than refused). *lo is its first element, *n its
 * length. */
CT_API void ct_dist_shard(size_t numel, int world, int rank, size_t *lo, size_t *n);
/* Every rank holds its own shard of buf (numel elements) up to date: after
 * the call every rank holds all of buf. In place. */
CT_API ct_status ct_dist_allgather_shards(ct_dist *d, float *buf, size_t numel);
/* Rank 0 receives every rank's shard (shard: this rank's ct_dist_shard part,
 * n elements) into full[0..numel); full is only read on rank 0 (may be NULL
 * elsewhere). */
CT_API ct_status ct_dist_gather_shards(ct_dist *d, const float *shard, float *full, size_t numel);

#ifdef __cplusplus
}
#endif
#endif
