/* The training policy shared by the CPU and CUDA loops; see policy.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "policy.h"

void train_plan_init(struct train_plan *p, const struct train_opts *o, size_t num_params, int world, int rank)
{
    memset(p, 0, sizeof *p);
    p->world = world;
    p->rank = rank;
    p->num_params = num_params;
    p->dp = o->pp > 1 && world % o->pp == 0 ? world / o->pp : world;
    p->dp_rank = rank % p->dp;
    p->n_pad = (num_params + (size_t)world - 1) / (size_t)world * (size_t)world;
    if (o->zero) {
        p->opt_len = p->n_pad / (size_t)world;
        p->opt_off = (size_t)rank * p->opt_len;
    } else {
        p->opt_off = 0;
        p->opt_len = p->n_pad;
    }
    p->start = 0;
    p->end = o->steps;
    if (o->stop_after && o->stop_after < p->end) p->end = o->stop_after;
}

uint64_t train_plan_window(const struct train_plan *p, const struct train_opts *o, int step, int k)
{
    uint64_t B = (uint64_t)o->batch, P = (uint64_t)p->dp;
    uint64_t G = B * (uint64_t)o->grad_accum * P;
    return (uint64_t)step * G + ((uint64_t)k * P + (uint64_t)p->dp_rank) * B;
}

uint64_t train_plan_val_window(const struct train_plan *p, int B, int i)
{
    return ((uint64_t)i * (uint64_t)p->dp + (uint64_t)p->dp_rank) * (uint64_t)B;
}

int train_plan_val_due(const struct train_opts *o, int step)
{
    return o->val && o->val_every && ((step + 1) % o->val_every == 0 || step + 1 == o->steps);
}

int train_plan_save_due(const struct train_opts *o, const struct train_plan *p, int done)
{
    return o->ckpt_dir && ((o->ckpt_every && done % o->ckpt_every == 0) || done == p->end);
}

void train_plan_ckpt(const struct train_plan *p, const struct train_opts *o, int step, float *params, float *m,
                     float *v, struct train_ckpt *c)
{
    int has_opt = o->zero || p->rank == 0;
    memset(c, 0, sizeof *c);
    c->cfg = o->cfg;
    c->world = p->world;
    c->rank = p->rank;
    c->zero = o->zero;
    c->step = step;
    c->data_pos = (uint64_t)step * (uint64_t)o->batch * (uint64_t)o->grad_accum * (uint64_t)p->dp;
    c->rng = o->seed;
    c->num_params = p->n_pad;
    c->opt_off = has_opt ? p->opt_off : 0;
    c->opt_len = has_opt ? p->opt_len : 0;
    c->params = p->rank == 0 ? params : NULL;
    c->m = m;
    c->v = v;
}

int train_resume_load(struct train_plan *p, const struct train_opts *o, float *params, float *m, float *v,
                      skiff_err *err)
{
    struct train_ckpt c;
    train_plan_ckpt(p, o, 0, params, m, v, &c);
    if (train_ckpt_load(o->ckpt_dir, &c, err) < 0) return -1;
    p->start = c.step;
    p->amp = c.amp;
    p->end = o->steps;
    if (o->stop_after && p->start + o->stop_after < p->end) p->end = p->start + o->stop_after;
    return 0;
}

int train_resume_shares_opt(const struct train_plan *p, const struct train_opts *o)
{
    return o->zero == 0 && p->world > 1;
}

int train_resume_agree(const struct train_plan *p, const struct train_opts *o, double mean_start, skiff_err *err)
{
    if (mean_start != (double)p->start)
        return skiff_error(err, 0,
                           "--resume: rank %d's checkpoint is at step %d but the ranks disagree "
                           "(mean %.2f): a save was interrupted; remove %s or restart from scratch",
                           p->rank, p->start, mean_start, o->ckpt_dir);
    /* finished already: success, so a requeued job's `--resume` loop ends */
    if (p->start >= o->steps && p->rank == 0)
        fprintf(stderr,
                "skiff-train: checkpoint in %s is at step %d of --steps %d: nothing "
                "left to do\n",
                o->ckpt_dir, p->start, o->steps);
    return 0;
}

float train_clip_scale(const struct train_opts *o, float norm)
{
    return o->grad_clip > 0 && norm > o->grad_clip ? o->grad_clip / norm : 1.0f;
}

float train_lr(const struct train_opts *o, int step)
{
    if (step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
    float lo = o->lr * o->lr_min_frac;
    if (o->steps <= o->warmup) return o->lr;
    double r = (double)(step - o->warmup) / (double)(o->steps - o->warmup);
    if (r > 1) r = 1;
    double coeff = 0.5 * (1.0 + cos(M_PI * r));
    return (float)(lo + coeff * (o->lr - lo));
}
