/*
 * `ctrain train [--config FILE.yaml] [key=value ...]`: builds the effective
 * configuration (defaults, then the YAML file, then overrides), runs
 * ct_train_run and shows its progress on stderr: step/total, loss, lr,
 * tokens/s, ETA, peak memory, MFU, validation loss, skipped updates and the
 * monitor's standing alert, redrawn in
 * place on a terminal and as plain lines every run.log_every steps otherwise.
 * Under mpirun every rank runs this; rank 0 alone shows progress, information
 * and warnings, every rank its own final error (naming the rank), and a
 * failure the other ranks do not know of aborts the job.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"
#include "backend/device.h"
#include "stop.h"
#include "ctrain/train.h"

/* ------------------------------------------------------------ progress */

/* The progress line's state. On a terminal the line is redrawn in place
 * (\r, clear to end of line) and ended with a newline only when it must stay
 * (an evaluation, a skipped step, the last step) or before a log message;
 * elsewhere each shown step is one plain line. */
typedef struct train_progress {
    const ct_config *cfg;
    ct_ctx *ctx;
    int rank;          /* MPI rank; only rank 0 shows progress */
    bool tty;          /* stderr is a terminal */
    bool pending;      /* an in-place line is on screen without its newline */
    char line[512];    /* the last line drawn, redrawn after a log message */
    int64_t seen;      /* steps reported so far */
    int64_t skipped;   /* skipped updates so far */
    double t_last;     /* wall time of the previous report, seconds */
    double first;      /* step time of the first reported step, seconds */
    double elapsed;    /* wall time of the reported steps after the first, seconds */
    double t_drawn;    /* wall time of the last in-place redraw */
} train_progress;

/* "950 B", "12.3 KiB", "1.5 GiB" */
static void fmt_bytes(char *buf, size_t cap, double bytes) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

/* "950", "67.6K", "1.2M" */
static void fmt_count(char *buf, size_t cap, double n) {
    if (n < 1e3) snprintf(buf, cap, "%.0f", n);
    else if (n < 1e6) snprintf(buf, cap, "%.1fK", n / 1e3);
    else if (n < 1e9) snprintf(buf, cap, "%.1fM", n / 1e6);
    else snprintf(buf, cap, "%.1fG", n / 1e9);
}

/* "42s", "3m07s", "2h05m", "3d04h" */
static void fmt_duration(char *buf, size_t cap, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    long long t = (long long)(s + 0.5);
    if (t < 60) snprintf(buf, cap, "%llds", t);
    else if (t < 3600) snprintf(buf, cap, "%lldm%02llds", t / 60, t % 60);
    else if (t < 86400) snprintf(buf, cap, "%lldh%02lldm", t / 3600, t % 3600 / 60);
    else snprintf(buf, cap, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
}

/* Log messages while the run is on: the default stderr format, but an
 * in-place progress line is cleared first and redrawn after, so the message
 * stays and the progress line stays at the bottom. */
static void progress_log(ct_log_level level, const char *msg, void *user) {
    train_progress *p = user;
    if (level < CT_LOG_INFO) return;
    static const char *names[CT_LOG_COUNT] = {"debug", "info", "warning", "error"};
    if (p->pending) fputs("\r\033[K", stderr);
    if (level == CT_LOG_INFO) fprintf(stderr, "%s\n", msg);
    else fprintf(stderr, "%s: %s\n", names[level], msg);
    if (p->pending) fputs(p->line, stderr);
    fflush(stderr);
}

/* Other ranks than 0: logged errors only, naming the rank (their warnings
 * repeat rank 0's, since the ranks take the same decisions). */
static void rank_log(ct_log_level level, const char *msg, void *user) {
    const train_progress *p = user;
    if (level < CT_LOG_ERROR) return;
    fprintf(stderr, "rank %d: error: %s\n", p->rank, msg);
}

/* debug.kill_step / debug.hang_step: the failures a multi-rank test needs. */
static void debug_rank_faults(const train_progress *p, int64_t step) {
    const ct_config *c = p->cfg;
    if (p->rank != c->debug.rank) return;
    if (c->debug.kill_step && step == c->debug.kill_step) {
        fprintf(stderr, "rank %d: debug.kill_step: killing myself after step %lld\n", p->rank,
                (long long)step);
        raise(SIGKILL);
    }
    if (c->debug.hang_step && step == c->debug.hang_step) {
        fprintf(stderr, "rank %d: debug.hang_step: hanging after step %lld\n", p->rank,
                (long long)step);
        for (;;) sleep(1000); /* until something kills us */
    }
}

/* Cut a line redrawn in place to the terminal's width (less one column), so
 * that it never wraps: "\r" would then redraw only its last row. The cut
 * end is "..."; whatever it hides (the standing alert, mostly) was logged in
 * full when it began. */
static void tty_fit(char *line) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col < 20) return;
    size_t width = (size_t)ws.ws_col - 1, n = strlen(line);
    if (n <= width) return;
    memcpy(line + width - 3, "...", 4);
}

static void print_progress(const ct_step_info *s, void *user) {
    train_progress *p = user;
    /* a run whose first step is k+1 resumed from step k's checkpoint */
    if (p->seen == 0 && s->step > 1) cli_stop_progress(s->step - 1, s->step - 1);
    cli_stop_progress(s->step, s->checkpointed ? s->step : -1);
    debug_rank_faults(p, s->step);
    if (p->rank != 0) return;
    double now = ct_time_s();
    /* mean wall time per step, evaluations and checkpoints included. The
     * first step reported (its own step time) warms caches, threads and pages
     * up, so once later steps exist the mean is over those alone. */
    if (p->seen) p->elapsed += now - p->t_last;
    else p->first = s->step_ms * 1e-3;
    p->t_last = now;
    p->seen++;
    double mean = p->seen > 1 ? p->elapsed / (double)(p->seen - 1) : p->first;
    if (s->skipped) p->skipped++;
    bool val = !isnan(s->val_loss), last = s->step == s->steps;
    /* lines that stay on a tty: evaluations, skips, the last step, and every
     * run.log_every steps (every 5% of the run when log_every is 1, so a
     * terminal keeps a record without scrolling a line per step) */
    int64_t every = p->cfg->run.log_every > 1 ? p->cfg->run.log_every
                                              : (s->steps >= 40 ? s->steps / 20 : 1);
    bool keep = val || s->skipped || s->rolled_back || last ||
                (p->tty && s->step % every == 0);
    if (p->tty) {
        if (!keep && now - p->t_drawn < 0.1) return; /* at most ~10 redraws a second */
    } else if (s->step % p->cfg->run.log_every != 0 && s->step != 1 && !keep) {
        return;
    }
    ct_memstats ms;
    ct_ctx_memstats(p->ctx, &ms);
    char eta[32], mem[32];
    fmt_duration(eta, sizeof eta, mean * (double)(s->steps - s->step));
    fmt_bytes(mem, sizeof mem, (double)ms.total_peak);
    char mfu[16];
    if (isfinite(s->mfu)) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * s->mfu);
    else snprintf(mfu, sizeof mfu, "n/a");
    char gpu[48] = ""; /* a GPU watched through NVML */
    if (isfinite(s->gpu_util_pct)) {
        int k = snprintf(gpu, sizeof gpu, " | GPU %.0f%%", s->gpu_util_pct);
        if (isfinite(s->gpu_power_w) && k > 0)
            snprintf(gpu + k, sizeof gpu - (size_t)k, " %.0f W", s->gpu_power_w);
    }
    char ep[48] = "";
    if (s->epochs > 0) snprintf(ep, sizeof ep, " | epoch %.2f/%lld", s->epoch, (long long)s->epochs);
    int n = snprintf(p->line, sizeof p->line,
                     "step %5lld/%lld%s | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.0f ms | "
                     "ETA %s | mem %s | MFU %s%s",
                     (long long)s->step, (long long)s->steps, ep, s->loss, s->lr, s->grad_norm,
                     s->tokens_per_s, s->step_ms, eta, mem, mfu, gpu);
    if (val && n > 0 && (size_t)n < sizeof p->line) {
        char vt[32];
        fmt_count(vt, sizeof vt, (double)s->val_tokens);
        n += snprintf(p->line + n, sizeof p->line - (size_t)n, " | val %.4f (%s tok)",
                      s->val_loss, vt);
    }
    if (s->loss_scale > 0 && n > 0 && (size_t)n < sizeof p->line) /* fp16 */
        n += snprintf(p->line + n, sizeof p->line - (size_t)n, " | scale %.9g", s->loss_scale);
    if (s->skipped && n > 0 && (size_t)n < sizeof p->line)
        n += snprintf(p->line + n, sizeof p->line - (size_t)n, " | %s (%lld so far)",
                      s->overflow ? "FP16 OVERFLOW, SKIPPED"
                      : s->spike  ? "SPIKE, SKIPPED"
                                  : "SKIPPED",
                      (long long)p->skipped);
    if (s->rolled_back && n > 0 && (size_t)n < sizeof p->line)
        n += snprintf(p->line + n, sizeof p->line - (size_t)n,
                      " | ROLLED BACK to step %lld, lr x%.3g (%lld rollbacks)",
                      (long long)s->rollback_to, s->lr_factor, (long long)s->rollbacks);
    /* the standing alert last, so a long message only runs off the end */
    if (s->alert_level > 0 && n > 0 && (size_t)n < sizeof p->line)
        snprintf(p->line + n, sizeof p->line - (size_t)n, " | %s %s",
                 s->alert_level > 1 ? "CRITICAL" : "WARNING", s->alert);
    if (p->tty) {
        if (!keep) tty_fit(p->line); /* redrawn in place: it must not wrap */
        fprintf(stderr, "\r\033[K%s", p->line);
        p->pending = !keep;
        if (keep) fputc('\n', stderr);
        p->t_drawn = now;
    } else {
        fprintf(stderr, "%s\n", p->line);
    }
    fflush(stderr);
}

int cmd_train(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ctrain train [--config FILE.yaml] [--print-config] [--tokenizer DIR]\n"
                   "                    [key=value ...]\n"
                   "Keys are dotted paths (optim.lr=1e-3); --print-config lists them all.\n"
                   "--tokenizer DIR is data.tokenizer=DIR: the model's tokenizer, when the files\n"
                   "beside model.init_from do not load (the run is refused otherwise) or it has\n"
                   "none; it must match the shards' (manifest.json) and goes into run.dir.\n");
            return 0;
        }
    }
    /* join the mpirun job first (one process when not launched by it), so
     * that even a config one rank cannot read ends every rank */
    ct_dist *dist = NULL;
    if (ct_dist_init(&dist)) return cli_fail("train");
    int rank = ct_dist_rank(dist), world = ct_dist_world(dist);
    ct_config cfg;
    bool print_only;
    int rc = cli_load_config("train", argc, argv, &cfg, &print_only);
    if (world > 1 && ct_dist_agree(dist, rc ? CT_ERR_ARG : CT_OK, "reading the configuration")) {
        if (!rc) rc = cli_fail("train"); /* a failed rank has printed its own error */
        ct_dist_free(dist);
        return rc;
    }
    if (rc || print_only) ct_dist_free(dist);
    if (rc) return rc;
    if (print_only) {
        /* a config that contradicts itself is refused here too, not only by a run */
        if (ct_config_validate(&cfg)) return cli_fail("train");
        char *yaml = ct_config_to_yaml(&cfg);
        if (!yaml) return cli_fail("train");
        fputs(yaml, stdout);
        free(yaml);
        return 0;
    }
    ct_ctx *ctx = NULL;
    ct_ctx_params cp;
    /* under mpirun each rank of a machine takes its own GPU (run.device=cuda) */
    int local_rank = ct_device_local_rank();
    if (local_rank < 0) local_rank = ct_dist_local_rank(dist);
    if (cli_ctx_params(&cfg, local_rank, &cp)) {
        rc = cli_fail("train");
        ct_dist_free(dist);
        return rc;
    }
    int local = ct_dist_local_size(dist);
    if (local > 1) {
        /* ranks sharing a machine share its cores: split them, and leave
         * placement to the launcher (pinning would stack every rank's
         * threads on the same first cores) */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (!cp.n_threads) cp.n_threads = cpus > local ? (int)(cpus / local) : 1;
        cp.pin_threads = false;
    }
    ct_status st = ct_ctx_init(&ctx, &cp);
    if (world > 1) st = ct_dist_agree(dist, st, "creating the context");
    if (st) {
        rc = cli_fail("train");
        ct_dist_free(dist);
        return rc;
    }
    train_progress prog = {0};
    prog.cfg = &cfg;
    prog.ctx = ctx;
    prog.rank = rank;
    prog.tty = rank == 0 && isatty(STDERR_FILENO);
    ct_log_set(rank == 0 ? progress_log : rank_log, &prog);
    ct_train_hooks hooks = {print_progress, &prog, cli_stop_install(rank != 0), dist};
    ct_train_result res;
    st = ct_train_run_with(ctx, &cfg, &hooks, &res);
    cli_stop_restore();
    ct_log_set(NULL, NULL);
    if (prog.pending) fputc('\n', stderr); /* keep the last line above what follows */
    ct_ctx_free(ctx);
    if (st) {
        char who[48];
        snprintf(who, sizeof who, world > 1 ? "train (rank %d)" : "train", rank);
        rc = cli_fail(who);
        /* the others may wait on this rank in a collective: end the job */
        if (world > 1 && !ct_dist_failed_together(dist)) ct_dist_abort(dist, rc);
        ct_dist_free(dist);
        return rc;
    }
    ct_dist_free(dist);
    if (rank != 0) return res.end == CT_TRAIN_END_STOPPED ? 128 + res.stop_value : 0;
    if (res.end == CT_TRAIN_END_STOPPED) {
        fprintf(stderr, "ctrain train: stopped by signal %d after step %lld; checkpoint %s; "
                "continue with train.resume=auto\n", res.stop_value, (long long)res.last_step,
                res.checkpoint);
        return 128 + res.stop_value;
    }
    if (cfg.lora.r > 0 || cfg.lora.init_from[0])
        fprintf(stderr, "ctrain train: done; LoRA adapter saved to %s (adapter_config.json, "
                "adapter_model.safetensors); `ctrain merge` folds it into the base\n",
                cfg.run.dir);
    else
        fprintf(stderr, "ctrain train: done; model saved to %s (config.json, model.safetensors)\n",
                cfg.run.dir);
    return 0;
}
