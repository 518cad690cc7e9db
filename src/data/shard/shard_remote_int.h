/*
 * What shard_remote.c (the context, its memory tier and the shards' blocks)
 * and remote_manifest.c (the manifest: parsing, listing, its disk-cache copy)
 * share: the context's layout and the cache keys.
 * Not part of shard_remote.h: nothing outside those two files includes this.
 */
#ifndef CT_SHARD_REMOTE_INT_H
#define CT_SHARD_REMOTE_INT_H

#include "ctrain/config.h" /* CT_PATH_MAX */
#include "data/shard/shard_remote.h"

#include <pthread.h>

#define REMOTE_ERR_MAX 1024

typedef struct mem_slot {
    const ct_rshard *owner; /* NULL: free */
    int64_t block;
    uint64_t used;          /* LRU clock */
    size_t len;
    uint8_t *data;          /* block_bytes */
} mem_slot;

/* How a context reaches the network (set by ct_remote_list, before any shard
 * is opened on it). */
enum { REMOTE_NET_ON = 0, REMOTE_NET_DOWN = 1, REMOTE_NET_OFF = 2 };

struct ct_remote_ctx {
    ct_remote_data_opts o;
    char cache_dir[CT_PATH_MAX];
    ct_blockcache *cache;
    pthread_mutex_t mu; /* slots, clock, stats */
    mem_slot slots[CT_REMOTE_MEM_SLOTS];
    uint64_t clock;
    ct_remote_data_stats st;
    bool warned_cache_write;
    /* REMOTE_NET_DOWN: the server could not be reached when the manifest was
     * asked for, and the cached copy stands in (a missing block gets one
     * attempt); REMOTE_NET_OFF: data.offline (no request at all) */
    int net;
    char net_why[REMOTE_ERR_MAX];  /* REMOTE_NET_DOWN: what the manifest's request met */
    char split[8];                 /* "train" | "val", for messages */
    int64_t cached_blocks, blocks; /* of the split's shards, when the copy was taken */
};

/* A shard's disk-cache key (32 hex digits and a NUL): where it is (as
 * displayed: no credentials or query) and what it holds, so a dataset
 * prepared again at the same URL never reads an older one's blocks. */
void remote_shard_key(const char *disp, const char *hash, int64_t bytes, char key[33]);
/* The reason in a transport error, without the URL it starts with (disp) and
 * the count of a single attempt: for messages that name the URL themselves. */
void remote_net_reason(char *buf, size_t cap, const char *err, const char *disp);

#endif
