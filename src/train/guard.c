/*
 * The stability guard (see guard.h): non-finite checks, z-scores of the loss
 * and the gradient norm against a ring of recent good steps, and the
 * consecutive-bad-step count that asks for a rollback. Statistics are summed
 * in double from the oldest entry to the newest, so the same ring gives the
 * same verdicts bit for bit (a resumed run matches an unbroken one).
 */
#include "train/guard.h"

#include <math.h>
#include <string.h>

/* A window whose values are (nearly) all equal has a standard deviation of 0;
 * dividing by it would call any rise a spike. The deviation used is at least
 * this share of the mean's magnitude. */
#define GUARD_STD_FLOOR 1e-3

ct_guard_params ct_guard_params_default(void) {
    ct_guard_params p = {.window = 50, .zscore = 6.0, .min_steps = 20, .max_bad = 3,
                         .lr_factor = 0.5, .norm_spikes = true};
    return p;
}

void ct_guard_init(ct_guard *g, const ct_guard_params *p) {
    CT_ASSERT(p->window >= 1 && p->window <= CT_GUARD_WINDOW_MAX);
    memset(g, 0, sizeof *g);
    g->p = *p;
    g->lr_factor = 1.0;
    g->z_loss = g->z_norm = NAN;
}

void ct_guard_stats(const ct_guard *g, int which, double *mean, double *std) {
    const double *x = which ? g->norm : g->loss;
    *mean = *std = 0;
    if (g->count == 0) return;
    double sum = 0;
    for (int i = 0; i < g->count; i++) sum += x[(g->head + i) % g->p.window];
    double mu = sum / g->count, ss = 0;
    for (int i = 0; i < g->count; i++) {
        double d = x[(g->head + i) % g->p.window] - mu;
        ss += d * d;
    }
    *mean = mu;
    *std = sqrt(ss / g->count);
}

/* z-score of v against the window (which as in ct_guard_stats). */
static double guard_z(const ct_guard *g, int which, double v) {
    double mean, std;
    ct_guard_stats(g, which, &mean, &std);
    double floor = GUARD_STD_FLOOR * fabs(mean);
    if (std < floor) std = floor;
    if (std <= 0) return v > mean ? INFINITY : 0.0;
    return (v - mean) / std;
}

/* Append to the ring (indices modulo p.window); when full, the newest
 * overwrites the oldest. */
static void guard_push(ct_guard *g, double loss, double norm) {
    int cap = g->p.window, at;
    if (g->count < cap) {
        at = (g->head + g->count) % cap;
        g->count++;
    } else {
        at = g->head;
        g->head = (g->head + 1) % cap;
    }
    g->loss[at] = loss;
    g->norm[at] = norm;
}

ct_guard_action ct_guard_judge(ct_guard *g, int64_t step, double loss, double norm,
                               ct_guard_verdict *verdict) {
    ct_guard_verdict v = CT_GUARD_GOOD;
    g->z_loss = g->z_norm = NAN;
    if (!isfinite(loss)) {
        v = CT_GUARD_NONFINITE_LOSS;
    } else if (!isfinite(norm)) {
        v = CT_GUARD_NONFINITE_GRAD;
    } else if (g->p.zscore > 0 && g->count >= g->p.min_steps) {
        g->z_loss = guard_z(g, 0, loss);
        g->z_norm = guard_z(g, 1, norm);
        if (g->z_loss > g->p.zscore)
            v = CT_GUARD_SPIKE_LOSS;
        else if (g->p.norm_spikes && g->z_norm > g->p.zscore)
            v = CT_GUARD_SPIKE_NORM;
    }
    if (verdict) *verdict = v;
    if (v == CT_GUARD_GOOD) {
        guard_push(g, loss, norm);
        g->bad_run = 0;
        g->bad_start = 0;
        return CT_GUARD_UPDATE;
    }
    g->skipped++;
    if (v == CT_GUARD_SPIKE_LOSS || v == CT_GUARD_SPIKE_NORM) g->spikes++;
    if (g->bad_run++ == 0) g->bad_start = step;
    if (g->p.max_bad > 0 && g->bad_run >= g->p.max_bad) return CT_GUARD_ROLLBACK;
    return CT_GUARD_SKIP;
}

void ct_guard_rolled_back(ct_guard *g) {
    g->rollbacks++;
    g->lr_factor *= g->p.lr_factor;
    g->bad_run = 0;
    g->bad_start = 0;
}

void ct_guard_take_window(ct_guard *g, const ct_guard *from) {
    int n = from->count < g->p.window ? from->count : g->p.window;
    int skip = from->count - n; /* the oldest entries that do not fit */
    double loss[CT_GUARD_WINDOW_MAX], norm[CT_GUARD_WINDOW_MAX];
    for (int i = 0; i < n; i++) {
        int at = (from->head + skip + i) % from->p.window;
        loss[i] = from->loss[at];
        norm[i] = from->norm[at];
    }
    memcpy(g->loss, loss, (size_t)n * sizeof *loss);
    memcpy(g->norm, norm, (size_t)n * sizeof *norm);
    g->head = 0;
    g->count = n;
}

const char *ct_guard_verdict_str(ct_guard_verdict v) {
    static const char *names[CT_GUARD_VERDICT_COUNT] = {
        "good", "non-finite loss", "non-finite gradient", "loss spike", "grad-norm spike"};
    return (unsigned)v < CT_GUARD_VERDICT_COUNT ? names[v] : "?";
}
