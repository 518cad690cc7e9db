/*
 * Learning-rate schedules: constant, cosine and linear decay (each with linear
 * warmup and a floor), and OneCycle with the phase arithmetic of
 * torch.optim.lr_scheduler.OneCycleLR (two phases, cos or linear annealing).
 */
#include "ctrain/optim.h"

#include <math.h>
#include <string.h>

ct_status ct_schedule_from_config(ct_schedule *s, const ct_config *cfg) {
    memset(s, 0, sizeof *s);
    static const char *names[CT_SCHED_COUNT] = {"constant", "cosine", "linear", "onecycle"};
    s->kind = CT_SCHED_COUNT;
    for (int i = 0; i < CT_SCHED_COUNT; i++)
        if (strcmp(cfg->schedule.name, names[i]) == 0) s->kind = (ct_sched_kind)i;
    if (s->kind == CT_SCHED_COUNT)
        return CT_ERR(CT_ERR_ARG, "schedule.name = '%s': expected constant, cosine, linear or "
                      "onecycle", cfg->schedule.name);
    s->lr = cfg->optim.lr;
    s->min_lr = cfg->schedule.min_lr;
    s->warmup_steps = cfg->schedule.warmup_steps;
    s->total_steps = cfg->train.steps;
    s->pct_start = cfg->schedule.pct_start;
    s->div_factor = cfg->schedule.div_factor;
    s->final_div_factor = cfg->schedule.final_div_factor;
    s->anneal_linear = strcmp(cfg->schedule.anneal, "linear") == 0;
    return CT_OK;
}

static double anneal(bool linear, double start, double end, double pct) {
    if (linear) return (end - start) * pct + start;
    return end + (start - end) / 2.0 * (cos(CT_PI * pct) + 1.0);
}

static double onecycle_lr(const ct_schedule *s, int64_t step) {
    double initial = s->lr / s->div_factor;
    double final_lr = initial / s->final_div_factor;
    double end1 = s->pct_start * (double)s->total_steps - 1.0;
    double end2 = (double)s->total_steps - 1.0;
    double x = (double)step;
    if (x <= end1) return anneal(s->anneal_linear, initial, s->lr, x / end1);
    return anneal(s->anneal_linear, s->lr, final_lr, (x - end1) / (end2 - end1));
}

double ct_schedule_lr(const ct_schedule *s, int64_t step) {
    if (s->kind == CT_SCHED_ONECYCLE) return onecycle_lr(s, step);
    if (step < s->warmup_steps) return s->lr * (double)(step + 1) / (double)s->warmup_steps;
    if (s->kind == CT_SCHED_CONSTANT) return s->lr;
    int64_t span = s->total_steps - s->warmup_steps;
    double progress = span > 0 ? (double)(step - s->warmup_steps) / (double)span : 1.0;
    if (progress > 1.0) progress = 1.0;
    if (s->kind == CT_SCHED_COSINE)
        return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(CT_PI * progress));
    return s->lr + (s->min_lr - s->lr) * progress; /* linear */
}
