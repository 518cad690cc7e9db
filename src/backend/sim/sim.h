/*
 * The sim backend's own state: the capacity a test gives its "device"
 * memory (debug.sim_device_memory) and what its device buffers hold, now and
 * at most, so a plan's device part and batch_size=auto are checked against
 * an allocator that refuses what does not fit, as a GPU's would. Internal to
 * src/backend (backend.c makes it, device.c reads it).
 */
#ifndef CT_BACKEND_SIM_H
#define CT_BACKEND_SIM_H

#include <stddef.h>

#include "backend/backend.h"

/* Attach the state to be (a sim backend): capacity 0 (no limit). CT_ERR_OOM. */
ct_status ct_sim_init(ct_backend *be);
/* Release it (NULL state is fine). */
void ct_sim_free(ct_backend *be);
/* Allocations past cap bytes of device buffers fail (0: no limit). */
void ct_sim_set_capacity(ct_backend *be, size_t cap);
/* The capacity, the bytes of live device buffers and their high-water mark
 * (any pointer may be NULL); all 0 without a state. */
void ct_sim_memory(const ct_backend *be, size_t *cap, size_t *used, size_t *peak);

#endif
