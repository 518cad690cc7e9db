/*
 * The text of a tuned profile: a comment block that a person reads (the
 * machine, the roofs, every trial and the winner) above the user's config
 * with its tune: section filled in, which is what `--config` reads back.
 * Leaves out: writing the file (the caller writes it atomically). See tune.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "tools/tune.h"

/* the profile is a few dozen lines of printf into one buffer */
#define put ct_strbuf_printf

static const double MiB = 1024.0 * 1024.0;

char *ct_tune_profile_yaml(const ct_config *base, const ct_tune_result *r) {
    ct_strbuf b = {0};
    put(&b, "# ctrain tuned profile, measured by `ctrain tune` at %s\n", r->date);
    put(&b, "# machine %s (%s), %d CPUs for this process\n", r->signature,
        r->cpu_model[0] ? r->cpu_model : "unknown CPU", r->cores);
    put(&b, "# roofs: sgemm %.1f GFLOP/s (the MFU denominator), triad bandwidth %.1f GB/s; "
        "run.memory_limit %.0f MiB\n", r->gemm_peak_gflops, r->membw_gbps, r->limit / MiB);
    put(&b, "# search: level %s (tune.search %s), %d sequences x %d tokens per optimizer step, "
        "%d trial(s) in %.0f s%s\n", r->level, base->tune.search, r->effective_batch, r->T,
        r->n_trials, r->elapsed_s, r->budget_hit ? ", stopped by tune.budget_s" : "");
    put(&b, "#   threads     B accum recompute acts  tiles     plan MiB     tokens/s    MFU\n");
    for (int i = 0; i < r->n_trials; i++) {
        const ct_tune_trial *t = &r->trials[i];
        const ct_tune_point *p = &t->p;
        char tiles[16];
        snprintf(tiles, sizeof tiles, "%dx%d", p->tile_q, p->tile_k);
        put(&b, "#   %7d %5d %5d %-9s %-5s %-9s %9.0f", p->threads, p->B, p->grad_accum,
            ct_model_recompute_name(p->opts.recompute), ct_model_act_dtype_name(p->opts.act_dtype),
            tiles, t->plan_bytes / MiB);
        if (t->measured)
            put(&b, " %12.1f %5.1f%%%s\n", t->tokens_per_s, 100.0 * t->mfu,
                i == r->best ? "  <- best" : "");
        else
            put(&b, "  skipped: over run.memory_limit\n");
    }
    char settings[CT_PATH_MAX] = "";
    ct_config c = *base;
    if (r->best >= 0) {
        const ct_tune_trial *w = &r->trials[r->best];
        ct_tune_settings_format(&w->p, settings, sizeof settings);
        c.tune.tokens_per_s = w->tokens_per_s;
        c.tune.mfu = w->mfu;
    }
    snprintf(c.tune.signature, sizeof c.tune.signature, "%s", r->signature);
    snprintf(c.tune.level, sizeof c.tune.level, "%s", r->level);
    snprintf(c.tune.settings, sizeof c.tune.settings, "%s", settings);
    snprintf(c.tune.date, sizeof c.tune.date, "%s", r->date);
    put(&b, "# Use: ctrain train --config THIS_FILE (key=value arguments still override it).\n"
        "# On a machine with another signature tune.settings is ignored with a warning:\n"
        "# re-run ctrain tune there.\n");
    char *yaml = ct_config_to_yaml(&c);
    if (!yaml) b.oom = true;
    else put(&b, "%s", yaml);
    free(yaml);
    if (b.oom) {
        ct_strbuf_free(&b);
        CT_ERR(CT_ERR_OOM, "out of memory writing the tuned profile");
        return NULL;
    }
    return b.p;
}
