/* The pipeline's schedules (ppsched.h). */
#include "ppsched.h"

#include <stddef.h>

static int prev(const struct tr_pp_steps *s) { return s->stage > 0 ? s->stage - 1 : -1; }
static int next(const struct tr_pp_steps *s) { return s->stage < s->stages - 1 ? s->stage + 1 : -1; }

/* Receive k's input, run its forward, send its output on. */
static int forward(const struct tr_pp_steps *s, int k, skiff_err *err)
{
    return s->p2p(s->ctx, NULL, -1, s->in(s->ctx, k), prev(s), err) < 0 || s->fwd(s->ctx, k, err) < 0 ||
                   s->p2p(s->ctx, s->out(s->ctx, k), next(s), NULL, -1, err) < 0
               ? -1
               : 0;
}

/* Receive k's output gradient, run its backward, send its input gradient back. */
static int backward(const struct tr_pp_steps *s, int k, skiff_err *err)
{
    return s->p2p(s->ctx, NULL, -1, s->dout(s->ctx), next(s), err) < 0 || s->bwd(s->ctx, k, err) < 0 ||
                   s->p2p(s->ctx, s->din(s->ctx, k), prev(s), NULL, -1, err) < 0
               ? -1
               : 0;
}

int tr_pp_gpipe(const struct tr_pp_steps *s, skiff_err *err)
{
    for (int k = 0; k < s->micro; k++)
        if (forward(s, k, err) < 0) return -1;
    for (int k = 0; k < s->micro; k++)
        if (backward(s, k, err) < 0) return -1;
    return 0;
}

int tr_pp_1f1b(const struct tr_pp_steps *s, skiff_err *err)
{
    int M = s->micro, warm = s->stages - s->stage - 1;
    if (warm > M) warm = M;
    int steady = M - warm, fk = 0, bk = 0;
    for (; fk < warm; fk++)
        if (forward(s, fk, err) < 0) return -1;
    if (steady > 0 && s->p2p(s->ctx, NULL, -1, s->in(s->ctx, fk), prev(s), err) < 0) return -1;
    for (int i = 0; i < steady; i++, fk++, bk++) {
        /* each neighbour exchange one sendrecv: the output forward with
         * the gradient back, then the input gradient back with the next
         * micro-batch's input */
        if (s->fwd(s->ctx, fk, err) < 0 ||
            s->p2p(s->ctx, s->out(s->ctx, fk), next(s), s->dout(s->ctx), next(s), err) < 0 ||
            s->bwd(s->ctx, bk, err) < 0)
            return -1;
        /* the freed slot of bk takes micro-batch fk+1 (warm + 1 slots) */
        int more = i < steady - 1;
        if (s->p2p(s->ctx, s->din(s->ctx, bk), prev(s), more ? s->in(s->ctx, fk + 1) : NULL, more ? prev(s) : -1, err) <
            0)
            return -1;
    }
    for (; bk < M; bk++)
        if (backward(s, bk, err) < 0) return -1;
    return 0;
}
