/* The CPU kernels' contracts beyond their gradients (test_gradcheck.c):
 * gemm() gives every element of C as one ordered multiply-add chain over k,
 * whatever the thread count, blocking or operand layout; the vectorised exp
 * and tanh stay close to libm; the softmax is a distribution. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "layers/crossentropy.h"
#include "layers/vmath.h"
#include "model.h"

static uint64_t rs = 777;
static float frand(void) /* uniform in [-1, 1) */
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}
static float *rnd(size_t n)
{
    float *p = malloc(n * sizeof(float));
    cr_assert(p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

/* The SIMD kernels (and any kernel on a target whose baseline has FMA) fuse
 * each multiply-add; the x86-64 baseline kernel rounds twice. */
static int kernel_fuses(void)
{
#ifdef __FP_FAST_FMAF
    return 1;
#else
    return strcmp(gemm_kernel_name(), "generic") != 0;
#endif
}

/* C = init + A B with A (M,K) at a[i*ars + p*acs], B (K,N) at b[p*brs + j*bcs],
 * element by element in the order the contract promises. */
static void reference(int M, int N, int K, const float *a, long ars, long acs, const float *b, long brs, long bcs,
                      float *c, const float *bias, int accumulate)
{
    int fuse = kernel_fuses();
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = accumulate ? c[(long)i * N + j] : bias ? bias[j] : 0.0f;
            for (int p = 0; p < K; p++) {
                float x = a[i * ars + p * acs], y = b[p * brs + j * bcs];
                if (fuse) {
                    acc = fmaf(x, y, acc);
                } else {
                    volatile float prod = x * y; /* no contraction, whatever the flags */
                    acc = acc + prod;
                }
            }
            c[(long)i * N + j] = acc;
        }
}

/* One product in every layout the trainer uses, at sizes that leave partial
 * tiles and (K > 256) several k blocks; compared bit for bit. */
static void check_shape(int M, int N, int K)
{
    float *a = rnd((size_t)M * K), *at = malloc(sizeof(float) * M * K);
    float *b = rnd((size_t)K * N), *bt = malloc(sizeof(float) * K * N);
    float *bias = rnd((size_t)N), *c0 = rnd((size_t)M * N);
    float *c = malloc(sizeof(float) * M * N), *r = malloc(sizeof(float) * M * N);
    cr_assert(at && bt && c && r);
    for (int i = 0; i < M; i++)
        for (int p = 0; p < K; p++)
            at[(long)p * M + i] = a[(long)i * K + p];
    for (int p = 0; p < K; p++)
        for (int j = 0; j < N; j++)
            bt[(long)j * K + p] = b[(long)p * N + j];
    struct {
        const float *a;
        long ars, acs;
        const float *b;
        long brs, bcs;
    } lay[] = {
        {a, K, 1, bt, 1, K}, /* x W^T (forward) */
        {a, K, 1, b, N, 1},  /* dy W (input gradient) */
        {at, 1, M, b, N, 1}, /* dy^T x (weight gradient) */
    };
    for (size_t l = 0; l < sizeof lay / sizeof lay[0]; l++) {
        for (int mode = 0; mode < 3; mode++) { /* overwrite, overwrite + bias, accumulate */
            const float *bs = mode == 1 ? bias : NULL;
            int acc = mode == 2;
            memcpy(r, c0, sizeof(float) * M * N);
            reference(M, N, K, lay[l].a, lay[l].ars, lay[l].acs, lay[l].b, lay[l].brs, lay[l].bcs, r, bs, acc);
            for (int threads = 1; threads <= 3; threads++) {
                omp_set_num_threads(threads);
                memcpy(c, c0, sizeof(float) * M * N);
                gemm(M, N, K, (struct gemm_operand){lay[l].a, lay[l].ars, lay[l].acs},
                     (struct gemm_operand){lay[l].b, lay[l].brs, lay[l].bcs}, c, N, bs, acc);
                for (long i = 0; i < (long)M * N; i++)
                    cr_assert(!memcmp(&c[i], &r[i], sizeof(float)),
                              "%dx%dx%d layout %zu mode %d threads %d kernel %s: C[%ld] %.9g, "
                              "ordered chain %.9g",
                              M, N, K, l, mode, threads, gemm_kernel_name(), i, c[i], r[i]);
            }
        }
    }
    omp_set_num_threads(omp_get_num_procs());
    free(a), free(at), free(b), free(bt), free(bias), free(c0), free(c), free(r);
}

/* every kernel this CPU can run, not only the one it picks */
Test(gemm, is_the_ordered_chain_for_any_thread_count)
{
    const char *names[] = {"avx512", "avx2", "generic"};
    int ran = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (gemm_force_kernel(names[i]) < 0)
            continue;
        ran++;
        check_shape(1, 1, 1);
        check_shape(37, 53, 300); /* partial tiles both ways, two k blocks */
        check_shape(64, 96, 64);
        check_shape(9, 200, 17);
        check_shape(300, 20, 513); /* split over rows, three k blocks */
    }
    gemm_force_kernel(NULL);
    cr_assert(ran >= 1 && gemm_force_kernel("generic") == 0, "the generic kernel runs everywhere");
    gemm_force_kernel(NULL);
    cr_assert(gemm_force_kernel("no-such-kernel") < 0);
}

Test(gemm, zero_k_gives_the_initial_value)
{
    float c[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {7, 8, 9};
    gemm(2, 3, 0, (struct gemm_operand){NULL, 0, 1}, (struct gemm_operand){NULL, 3, 1}, c, 3, bias, 0);
    float want[6] = {7, 8, 9, 7, 8, 9};
    cr_assert(!memcmp(c, want, sizeof c));
    gemm(2, 3, 0, (struct gemm_operand){NULL, 0, 1}, (struct gemm_operand){NULL, 3, 1}, c, 3, NULL, 1);
    cr_assert(!memcmp(c, want, sizeof c));
}

Test(vmath, exp_and_tanh_follow_libm)
{
    double e_exp = 0, e_tanh = 0;
    for (double x = -87.0; x < 88.0; x += 0.0007) {
        float f = (float)x;
        double r = exp((double)f);
        e_exp = fmax(e_exp, fabs(vm_exp(f) - r) / r);
        double t = tanh((double)f);
        if (t != 0)
            e_tanh = fmax(e_tanh, fabs(vm_tanh(f) - t) / fabs(t));
    }
    for (float f = 1e-30f; f < 1.0f; f *= 1.01f) { /* tanh near 0: relative, both signs */
        e_tanh = fmax(e_tanh, fabs(vm_tanh(f) - tanh((double)f)) / tanh((double)f));
        e_tanh = fmax(e_tanh, fabs(vm_tanh(-f) + tanh((double)f)) / tanh((double)f));
    }
    cr_assert(e_exp < 2e-7, "exp: max relative error %.3g", e_exp);
    cr_assert(e_tanh < 5e-7, "tanh: max relative error %.3g", e_tanh);
    cr_assert(isnan(vm_exp(NAN)) && isnan(vm_tanh(NAN)));
    cr_assert(vm_exp(-1000.0f) >= 0.0f && vm_exp(-1000.0f) < 2e-38f);
    cr_assert(isfinite(vm_exp(1000.0f)) && vm_exp(1000.0f) > 1e38f);
    cr_assert(vm_tanh(50.0f) == 1.0f && vm_tanh(-50.0f) == -1.0f && vm_tanh(0.0f) == 0.0f);
}

Test(softmax, is_a_distribution_over_the_real_tokens)
{
    int N = 5, V = 1003, Vp = 1024;
    float *l = rnd((size_t)N * Vp), *p = malloc(sizeof(float) * N * Vp);
    cr_assert(p);
    for (int i = 0; i < N * Vp; i++)
        l[i] *= 20.0f;
    softmax_forward(p, l, N, V, Vp);
    for (int n = 0; n < N; n++) {
        double s = 0, mx = -INFINITY;
        for (int i = 0; i < V; i++)
            mx = fmax(mx, l[n * Vp + i]);
        for (int i = 0; i < V; i++)
            s += exp((double)l[n * Vp + i] - mx);
        double total = 0;
        /* logits - max rounds to float (up to 2e-6 of e^x at |x| ~ 40), as
         * in any fp32 softmax */
        for (int i = 0; i < V; i++) {
            double want = exp((double)l[n * Vp + i] - mx) / s;
            cr_assert(fabs(p[n * Vp + i] - want) <= 4e-6 * want + 1e-30, "row %d col %d: %.9g vs %.9g", n, i,
                      p[n * Vp + i], want);
            total += p[n * Vp + i];
        }
        cr_assert(fabs(total - 1.0) < 1e-5, "row %d sums to %.9g", n, total);
        for (int i = V; i < Vp; i++)
            cr_assert(p[n * Vp + i] == 0.0f);
    }
    free(l), free(p);
}

/* gpt2_zero_grad does not touch the buffer: the next backward writes every
 * element. Same bits as a zeroed buffer, whatever was there before. */
Test(model, zero_grad_writes_every_gradient_element)
{
    struct gpt2_config cfg = {
        .max_seq_len = 16, .vocab_size = 50, .padded_vocab_size = 64, .num_layers = 2, .num_heads = 2, .channels = 32};
    struct gpt2 m;
    skiff_err err;
    cr_assert_eq(gpt2_create(&m, &cfg, 2, 12, &err), 0, "%s", err.msg);
    gpt2_init_params(&cfg, m.params, 3);
    int in[24], tg[24];
    for (int i = 0; i < 24; i++)
        in[i] = (i * 7 + 3) % 50, tg[i] = (i * 5 + 1) % 50;
    gpt2_forward(&m, in, tg);
    memset(m.grads, 0, m.num_params * sizeof(float));
    gpt2_backward(&m, 1.0f); /* no zero_grad: adds to the zeroed buffer */
    float *want = malloc(m.num_params * sizeof(float));
    cr_assert(want);
    memcpy(want, m.grads, m.num_params * sizeof(float));
    for (size_t i = 0; i < m.num_params; i++)
        m.grads[i] = NAN;
    gpt2_zero_grad(&m);
    gpt2_backward(&m, 1.0f);
    for (size_t i = 0; i < m.num_params; i++)
        cr_assert(!memcmp(&m.grads[i], &want[i], sizeof(float)), "grads[%zu]: %.9g, want %.9g", i, m.grads[i], want[i]);
    /* and the backward after that accumulates again */
    gpt2_backward(&m, 1.0f);
    cr_assert(m.grads[m.param_offsets[GPT2_LNFB]] != want[m.param_offsets[GPT2_LNFB]] ||
              want[m.param_offsets[GPT2_LNFB]] == 0.0f);
    free(want);
    gpt2_destroy(&m);
}
