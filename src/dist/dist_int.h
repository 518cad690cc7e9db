/*
 * Pieces of the data-parallel layer shared by both builds: launcher
 * detection, the shard layout, and the description of where two ranks'
 * configurations differ. dist_mpi.c (with MPI) and dist_none.c (one process)
 * each implement the rest of include/ctrain/dist.h. Not installed.
 */
#ifndef CT_DIST_INT_H
#define CT_DIST_INT_H

#include "ctrain/dist.h"

#include <stddef.h>
#include <stdint.h>

#define DIST_MSG_TEXT 1024 /* an agreed error: its message, */
#define DIST_MSG_MAX 1536  /* then its hint */

/* The world size the launcher announces in the environment; 0 when none. */
int dist_env_world(void);

/* 64-bit hash of text (xxh64, seed 0). */
uint64_t dist_hash_text(const char *text);

/* Describe the first line where text `mine` (rank `rank`) differs from
 * `root` (rank 0's) into out (cap bytes): "line N: rank 0 has 'a', rank R
 * has 'b'". */
void dist_describe_diff(const char *root, const char *mine, int rank, char *out, size_t cap);

#endif
