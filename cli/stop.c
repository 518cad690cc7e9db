/*
 * The stop flag behind cli/stop.h. The handler stores the signal number and
 * writes its message with write(2), formatting numbers by hand: both are
 * async-signal-safe. The second signal writes what is saved and _exits.
 * SA_RESTART keeps file writes from failing with EINTR.
 */
#include "stop.h"

#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_flag = 0;
static volatile sig_atomic_t stop_quiet = 0;
static volatile sig_atomic_t done_steps = 0;   /* steps finished */
static volatile sig_atomic_t ckpt_step = -1;   /* the last checkpoint's step; -1: none */
static struct sigaction old_int, old_term;

/* Append s to buf at *n (cap bytes). */
static void put(char *buf, size_t cap, size_t *n, const char *s) {
    while (*s && *n + 1 < cap) buf[(*n)++] = *s++;
}

static void put_num(char *buf, size_t cap, size_t *n, long v) {
    char d[24];
    int k = 0;
    if (v < 0) {
        put(buf, cap, n, "-");
        v = -v;
    }
    do {
        d[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && k < (int)sizeof d);
    while (k > 0 && *n + 1 < cap) buf[(*n)++] = d[--k];
}

static void stop_handler(int sig) {
    char m[320];
    size_t n = 0;
    const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (stop_flag == 0) {
        stop_flag = sig;
        if (stop_quiet) return;
        put(m, sizeof m, &n, "\nctrain train: ");
        put(m, sizeof m, &n, name);
        put(m, sizeof m, &n, ": finishing step ");
        put_num(m, sizeof m, &n, (long)done_steps + 1);
        put(m, sizeof m, &n, ", then checkpointing; ");
        put(m, sizeof m, &n, sig == SIGINT ? "press Ctrl-C again" : "a second signal");
        put(m, sizeof m, &n, " to stop without saving\n");
        ssize_t w = write(STDERR_FILENO, m, n);
        (void)w;
        return;
    }
    if (!stop_quiet) {
        put(m, sizeof m, &n, "\nctrain train: second ");
        put(m, sizeof m, &n, name);
        put(m, sizeof m, &n, ": stopped at once, without saving step ");
        put_num(m, sizeof m, &n, (long)done_steps + 1);
        if (ckpt_step >= 0) {
            put(m, sizeof m, &n, "; the last checkpoint is step ");
            put_num(m, sizeof m, &n, (long)ckpt_step);
            put(m, sizeof m, &n, " (continue with train.resume=auto)\n");
        } else {
            put(m, sizeof m, &n, "; no checkpoint was written, so this run's training is lost"
                                 " (run.checkpoint_every=N saves every N steps)\n");
        }
        ssize_t w = write(STDERR_FILENO, m, n);
        (void)w;
    }
    _exit(128 + sig);
}

volatile sig_atomic_t *cli_stop_install(bool quiet) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop_handler;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT); /* one handler at a time */
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESTART;
    stop_quiet = quiet;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    return &stop_flag;
}

void cli_stop_progress(int64_t step, int64_t checkpoint_step) {
    done_steps = (sig_atomic_t)(step > 0x7fffffff ? 0x7fffffff : step);
    if (checkpoint_step >= 0)
        ckpt_step = (sig_atomic_t)(checkpoint_step > 0x7fffffff ? 0x7fffffff : checkpoint_step);
}

void cli_stop_restore(void) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
}
