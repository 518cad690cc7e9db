/*
 * The run directory as a whole: a lock that keeps a second run out while one
 * writes to it, what results an earlier run left there, and their removal
 * when the user asks to start over (train.resume=never run.overwrite=true).
 * Not installed; used by the trainer (rank 0).
 */
#ifndef CT_TRAIN_RUN_DIR_H
#define CT_TRAIN_RUN_DIR_H

#include <stdbool.h>
#include <stddef.h>

#include "ctrain/config.h"

#define RUN_LOCK_NAME "run.lock"

typedef struct run_lock run_lock; /* opaque: the locked file and what was created */

/* Lock run.dir for this process: creates the directory (and its parents)
 * when missing, then takes an exclusive lock on dir/run.lock, holding this
 * process's pid, host, start time and `what`. A lock held by a live process
 * is refused with CT_ERR_ARG naming its pid, host and start; one left by a
 * process that is gone is taken over (logged). Returns owned *out; release
 * with run_dir_unlock. */
ct_status run_dir_lock(const char *dir, const char *what, run_lock **out);

/* Release the lock and remove run.lock. When `failed`, the directories the
 * lock created (run.dir and missing parents) go too while empty, so a run
 * refused during setup leaves nothing behind. NULL does nothing. */
void run_dir_unlock(run_lock *l, bool failed);

/* The results of an earlier run in dir: a short list ("3 checkpoints,
 * model.safetensors, metrics.jsonl") into what (cap bytes); the count of
 * items found (0: none, or dir missing). */
int run_dir_results(const char *dir, char *what, size_t cap);

/* Remove what an earlier ctrain run wrote in dir. everything (run.overwrite):
 * checkpoints/, weights and their config, metrics, event files, config.yaml,
 * hw.json, trace and report; otherwise only the leftovers of a run that
 * saved no weights (metrics, event files, hw.json, trace). Files ctrain does
 * not write (tokenizer files among them) stay. The number of entries removed
 * goes to *removed. */
ct_status run_dir_clear(const char *dir, bool everything, int *removed);

#endif
