/* Pipeline stages of the CPU model (gpt2_set_stage, trainer/pipeline.h):
 * the blocks split into contiguous stages, and a model run as two stages
 * (the first's output copied into the second's input, the second's input
 * gradient back into the first) gives the loss and the gradients of the
 * whole model, each stage holding only its own tensors; the plan's
 * data-parallel windows under --pp. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "pipeline.h"
#include "policy.h"

Test(pipeline, split_is_contiguous_and_front_loaded)
{
    int lo, hi, at = 0;
    int want[] = {2, 1, 1}; /* L 4 over 3 stages: the first L % N take one more */
    for (int s = 0; s < 3; s++) {
        train_stage_blocks(4, 3, s, &lo, &hi);
        cr_assert_eq(lo, at, "stage %d starts where %d ended", s, s - 1);
        cr_assert_eq(hi - lo, want[s], "stage %d has %d blocks", s, want[s]);
        at = hi;
    }
    cr_assert_eq(at, 4);
    for (int s = 0; s < 4; s++) {
        train_stage_blocks(12, 4, s, &lo, &hi);
        cr_assert_eq(lo, 3 * s);
        cr_assert_eq(hi, 3 * s + 3);
    }
}

static void fill_tokens(int *in, int *tg, int n, int V)
{
    for (int i = 0; i < n; i++) {
        in[i] = (i * 7 + 3) % V;
        tg[i] = (i * 11 + 5) % V;
    }
}

static void two_stages(int recompute)
{
    skiff_err err;
    struct gpt2_config cfg;
    cr_assert_eq(gpt2_config_preset("mini", &cfg, &err), 0); /* L 4 */
    int B = 2, T = 16, BT = B * T;
    struct gpt2 whole, s0, s1;
    cr_assert_eq(gpt2_create(&whole, &cfg, B, T, &err), 0);
    cr_assert_eq(gpt2_create(&s0, &cfg, B, T, &err), 0);
    cr_assert_eq(gpt2_create(&s1, &cfg, B, T, &err), 0);
    if (recompute) {
        cr_assert_eq(gpt2_recompute(&whole, &err), 0);
        cr_assert_eq(gpt2_recompute(&s0, &err), 0);
        cr_assert_eq(gpt2_recompute(&s1, &err), 0);
    }
    gpt2_init_params(&cfg, whole.params, 7);
    memcpy(s0.params, whole.params, whole.num_params * sizeof(float));
    memcpy(s1.params, whole.params, whole.num_params * sizeof(float));
    /* a stage keeps its tensors' values and holds those only */
    cr_assert_eq(gpt2_set_stage(&s0, 0, 3, &err), 0);
    cr_assert_eq(gpt2_set_stage(&s1, 3, 4, &err), 0);
    cr_assert_neq(gpt2_set_stage(&s1, 3, 4, &err), 0, "a stage is made once");
    cr_assert_lt(s1.num_acts, whole.num_acts, "a stage keeps only its blocks' activations");
    size_t C = (size_t)cfg.channels, Vp = (size_t)cfg.padded_vocab_size, blk = 12 * C * C + 13 * C;
    cr_assert_eq(s0.num_held, Vp * C + (size_t)cfg.max_seq_len * C + 3 * blk, "stage 0: wte, wpe, 3 blocks");
    cr_assert_eq(s1.num_held, blk + 2 * C + Vp * C, "stage 1: 1 block, lnf, wte");
    cr_assert_eq(s1.held_sizes[GPT2_WPE], 0, "the last stage holds no wpe");
    int *in = malloc(BT * sizeof(int)), *tg = malloc(BT * sizeof(int));
    fill_tokens(in, tg, BT, cfg.vocab_size);

    float want = gpt2_forward(&whole, in, tg);
    gpt2_zero_grad(&whole);
    gpt2_backward(&whole, 0.5f);

    cr_assert_eq(gpt2_forward(&s0, in, tg), -1.0f, "an earlier stage has no loss");
    memcpy(gpt2_stage_in(&s1), gpt2_stage_out(&s0), (size_t)BT * cfg.channels * sizeof(float));
    float got = gpt2_forward(&s1, in, tg);
    cr_assert_eq(got, want, "the last stage's loss is the whole model's, bit for bit");
    gpt2_zero_grad(&s1);
    gpt2_backward(&s1, 0.5f);
    s0.stage_dout = gpt2_stage_din(&s1);
    gpt2_zero_grad(&s0);
    gpt2_backward(&s0, 0.5f);

    /* each stage's block slices equal the whole model's bit for bit; wte's
     * two halves (embedding, LM head) add up to it within rounding */
    size_t L = (size_t)cfg.num_layers;
    for (int i = GPT2_LN1W; i <= GPT2_FCPROJB; i++) {
        size_t per = whole.param_sizes[i] / L, off = whole.param_offsets[i];
        for (size_t l = 0; l < L; l++) {
            const struct gpt2 *s = l < 3 ? &s0 : &s1;
            const float *g = s->grads + s->held_offsets[i] + (l - (size_t)s->layer_lo) * per;
            cr_assert_eq(memcmp(g, whole.grads + off + l * per, per * sizeof(float)), 0, "%s layer %zu",
                         gpt2_param_names[i], l);
        }
    }
    size_t wpe = whole.param_offsets[GPT2_WPE], lnf = whole.param_offsets[GPT2_LNFW];
    cr_assert_eq(
        memcmp(s0.grads + s0.held_offsets[GPT2_WPE], whole.grads + wpe, whole.param_sizes[GPT2_WPE] * sizeof(float)),
        0);
    cr_assert_eq(memcmp(s1.grads + s1.held_offsets[GPT2_LNFW], whole.grads + lnf, 2 * C * sizeof(float)), 0);
    size_t wte = whole.param_offsets[GPT2_WTE];
    const float *g0 = s0.grads + s0.held_offsets[GPT2_WTE], *g1 = s1.grads + s1.held_offsets[GPT2_WTE];
    double worst = 0;
    for (size_t j = 0; j < whole.param_sizes[GPT2_WTE]; j++) {
        double d = fabs((double)g0[j] + g1[j] - whole.grads[wte + j]);
        if (d > worst)
            worst = d;
    }
    cr_assert_lt(worst, 1e-7, "wte: embedding + head gradients = the whole model's (worst %g)", worst);
    free(in);
    free(tg);
    gpt2_destroy(&whole);
    gpt2_destroy(&s0);
    gpt2_destroy(&s1);
}

Test(pipeline, two_stages_equal_the_whole_model)
{
    two_stages(0);
}
Test(pipeline, two_stages_equal_the_whole_model_with_recompute)
{
    two_stages(1);
}

Test(pipeline, stages_of_one_pipeline_read_the_same_batches)
{
    struct train_opts o;
    skiff_err err;
    train_opts_defaults(&o);
    cr_assert_eq(gpt2_config_preset("tiny", &o.cfg, &err), 0);
    o.batch = 2;
    o.grad_accum = 4;
    o.steps = 10;
    o.pp = 2;
    /* world 4, pp 2: rank = stage * 2 + dp_rank */
    struct train_plan a, b, c;
    train_plan_init(&a, &o, 1000, 4, 1); /* stage 0, dp 1 */
    train_plan_init(&b, &o, 1000, 4, 3); /* stage 1, dp 1 */
    train_plan_init(&c, &o, 1000, 4, 2); /* stage 1, dp 0 */
    cr_assert_eq(a.world, 2, "the data-parallel size");
    cr_assert_eq(a.rank, 1);
    cr_assert_eq(a.pp_rank, 0);
    cr_assert_eq(b.rank, 1);
    cr_assert_eq(b.pp_rank, 1);
    cr_assert_eq(c.rank, 0);
    cr_assert_eq(c.pp_rank, 1);
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(train_plan_window(&a, &o, 3, k), train_plan_window(&b, &o, 3, k), "micro-batch %d", k);
        /* global batch B*M*DP = 16 windows per step, DP ranks interleaved */
        cr_assert_eq(train_plan_window(&c, &o, 3, k), 3u * 16 + (uint64_t)k * 4);
    }
}
