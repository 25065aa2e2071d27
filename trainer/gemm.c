/* Blocked SGEMM for the CPU trainer (see gemm.h for the contract).
 *
 * Hand-written rather than a BLAS: a BLAS promises no order of summation.
 * Its kernel, its edge code and how it splits the work may change with the
 * CPU, the thread count and the library version (MKL ships a separate
 * "conditional numerical reproducibility" mode for that reason), while the
 * data-parallel tests need --threads 1 and --threads 2 to give the same
 * bits, and a test can only hold a BLAS to a tolerance. Here every element
 * of C is one ordered chain over k, so only the instruction set can change
 * the bits, and tests/unit/trainer/test_layers.c checks exactly that.
 *
 * Structure (the usual one for register-tiled GEMM): for a block of NC
 * columns and KC steps of k, B is packed into NR-wide panels (each panel's
 * rows contiguous); for a block of MC rows, A is packed into MR-tall panels;
 * the register kernel then walks the panels, keeping an MR x NR tile of C in
 * registers for KC multiply-adds. Packing makes every operand layout (x W^T,
 * dy W, dy^T x) look the same to the kernel and keeps its loads sequential. */
#include "gemm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#else
/* Compiled without OpenMP (the fuzzers link the trainer's parsers so, and
 * reach gemm() through gpt2_create): one thread, the same bits. */
static int omp_get_max_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
static int omp_get_num_threads(void) { return 1; }
#endif

/* One 64-byte vector type for every kernel: GCC lowers it to one zmm, two
 * ymm or four xmm registers depending on the target of the function it is
 * inlined into, so one kernel body serves every instruction set. */
typedef float vec __attribute__((vector_size(64)));
typedef float vec_u __attribute__((vector_size(64), aligned(4))); /* unaligned C rows */
#define VL 16
#define MAX_MR 8
#define MAX_NV 3
#define MAX_NR (MAX_NV * VL)

/* c (mr x nr tile, row stride ldc) = (load ? c : init row or 0) + a b, with
 * a packed (kc, MR) and b packed (kc, NR): each lane is one element of C and
 * sees p = 0..kc-1 in order. */
static inline __attribute__((always_inline)) void tile(int kc, const float *restrict a, const float *restrict b,
                                                       float *restrict c, long ldc, int load, const float *init,
                                                       const int mr, const int nv)
{
    vec acc[MAX_MR][MAX_NV];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++)
            acc[i][v] = load   ? *(const vec_u *)(c + i * ldc + v * VL)
                        : init ? *(const vec_u *)(init + v * VL)
                               : (vec){0};
    for (int p = 0; p < kc; p++) {
        vec bv[MAX_NV];
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) bv[v] = *(const vec *)(b + ((long)p * nv + v) * VL);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            float s = a[(long)p * mr + i];
#pragma GCC unroll 3
            for (int v = 0; v < nv; v++) acc[i][v] += bv[v] * s;
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 3
        for (int v = 0; v < nv; v++) *(vec_u *)(c + i * ldc + v * VL) = acc[i][v];
}

typedef void kernel_fn(int kc, const float *a, const float *b, float *c, long ldc, int load, const float *init);

struct kernel {
    const char *name;
    kernel_fn *fn;
    int mr, nv;
};

/* Tile shapes fill the register file: AVX-512 has 32 zmm (8x48: 24
 * accumulators, 3 for B, 1 broadcast), AVX2 16 ymm (6x16: 12 + 2 + 1). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("arch=x86-64-v4"))) static void kernel_avx512(int kc, const float *a, const float *b, float *c,
                                                                    long ldc, int load, const float *init)
{
    tile(kc, a, b, c, ldc, load, init, 8, 3);
}

__attribute__((target("arch=x86-64-v3"))) static void kernel_avx2(int kc, const float *a, const float *b, float *c,
                                                                  long ldc, int load, const float *init)
{
    tile(kc, a, b, c, ldc, load, init, 6, 1);
}
#define HAVE_X86_KERNELS 1
#endif

static void kernel_generic(int kc, const float *a, const float *b, float *c, long ldc, int load, const float *init)
{
    tile(kc, a, b, c, ldc, load, init, 4, 1);
}

static const struct kernel kernels[] = {
#ifdef HAVE_X86_KERNELS
    {"avx512", kernel_avx512, 8, 3},
    {"avx2", kernel_avx2, 6, 1},
#endif
    {"generic", kernel_generic, 4, 1},
};
#define NKERNELS (int)(sizeof kernels / sizeof kernels[0])

static int kernel_runs_here(int i)
{
#ifdef HAVE_X86_KERNELS
    __builtin_cpu_init();
    if (kernels[i].fn == kernel_avx512) return __builtin_cpu_supports("x86-64-v4");
    if (kernels[i].fn == kernel_avx2) return __builtin_cpu_supports("x86-64-v3");
#endif
    return kernels[i].fn == kernel_generic;
}

static const struct kernel *forced;

/* The widest kernel the CPU runs; one choice for the life of the process. */
static const struct kernel *pick(void)
{
    if (forced) return forced;
    for (int i = 0; i < NKERNELS; i++)
        if (kernel_runs_here(i)) return &kernels[i];
    return &kernels[NKERNELS - 1];
}

const char *gemm_kernel_name(void) { return pick()->name; }

int gemm_force_kernel(const char *name)
{
    for (int i = 0; i < NKERNELS; i++) {
        if (name && !strcmp(name, kernels[i].name) && kernel_runs_here(i)) {
            forced = &kernels[i];
            return 0;
        }
    }
    if (name) return -1;
    forced = NULL;
    return 0;
}

/* ---- packing ------------------------------------------------------------- */

static int min_int(int x, int y) { return x < y ? x : y; }

/* One panel: lane l (< w) at step p comes from src[l*ls + p*ps] and goes to
 * dst[p*W + l]; lanes w..W-1 are zeros. The loops follow whichever source
 * index is unit-stride; the transposing case goes in runs of 16 steps so
 * each source row is read a cache line at a time. */
static void pack_panel(int w, int W, int kc, const float *src, long ls, long ps, float *dst)
{
    if (ls == 1) {
        for (int p = 0; p < kc; p++) {
            const float *s = src + p * ps;
            float *d = dst + (long)p * W;
            for (int l = 0; l < w; l++) d[l] = s[l];
        }
    } else if (ps == 1) {
        int p0 = 0;
        for (; p0 + 16 <= kc; p0 += 16)
            for (int l = 0; l < w; l++) {
                const float *s = src + l * ls + p0;
                float *d = dst + (long)p0 * W + l;
                for (int q = 0; q < 16; q++) d[(long)q * W] = s[q];
            }
        for (int l = 0; l < w; l++)
            for (int p = p0; p < kc; p++) dst[(long)p * W + l] = src[l * ls + p];
    } else {
        for (int p = 0; p < kc; p++)
            for (int l = 0; l < w; l++) dst[(long)p * W + l] = src[l * ls + p * ps];
    }
    if (w < W)
        for (int p = 0; p < kc; p++)
            for (int l = w; l < W; l++) dst[(long)p * W + l] = 0.0f;
}

/* A rows [0,mc) x k [0,kc) -> panels of MR rows, each (kc, MR). */
static void pack_a(int mc, int kc, const float *a, long rs, long cs, int MR, float *dst)
{
    for (int i0 = 0; i0 < mc; i0 += MR, dst += (long)kc * MR)
        pack_panel(min_int(MR, mc - i0), MR, kc, a + i0 * rs, rs, cs, dst);
}

/* B k [0,kc) x columns [0,nc) -> panels of NR columns, each (kc, NR). */
static void pack_b(int kc, int nc, const float *b, long rs, long cs, int NR, float *dst)
{
    for (int j0 = 0; j0 < nc; j0 += NR, dst += (long)kc * NR)
        pack_panel(min_int(NR, nc - j0), NR, kc, b + j0 * cs, cs, rs, dst);
}

/* ---- blocking ------------------------------------------------------------ */

enum { KC = 256, MC_TARGET = 256, NC_TARGET = 768 };

struct job {
    const struct kernel *k;
    int K, MC, NC;
    struct gemm_operand a, b;
    float *c;
    long ldc;
    const float *bias;
    int accumulate;
};

/* The C block [m0,m1) x [n0,n1), all of k, on the calling thread. */
static void run_block(const struct job *j, int m0, int m1, int n0, int n1, float *ap, float *bp)
{
    const int MR = j->k->mr, NR = j->k->nv * VL;
    kernel_fn *fn = j->k->fn;
    float edge[MAX_MR * MAX_NR], einit[MAX_NR];
    for (int jc = n0; jc < n1; jc += j->NC) {
        int nc = min_int(j->NC, n1 - jc);
        for (int pc = 0; pc < j->K; pc += KC) {
            int kc = min_int(KC, j->K - pc);
            int load = j->accumulate || pc > 0;
            pack_b(kc, nc, j->b.p + pc * j->b.rs + jc * j->b.cs, j->b.rs, j->b.cs, NR, bp);
            for (int ic = m0; ic < m1; ic += j->MC) {
                int mc = min_int(j->MC, m1 - ic);
                pack_a(mc, kc, j->a.p + ic * j->a.rs + pc * j->a.cs, j->a.rs, j->a.cs, MR, ap);
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = min_int(NR, nc - jr);
                    const float *bpan = bp + (long)(jr / NR) * kc * NR;
                    const float *init = load || !j->bias ? NULL : j->bias + jc + jr;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int mr = min_int(MR, mc - ir);
                        const float *apan = ap + (long)(ir / MR) * kc * MR;
                        float *c = j->c + (long)(ic + ir) * j->ldc + jc + jr;
                        if (mr == MR && nr == NR) {
                            fn(kc, apan, bpan, c, j->ldc, load, init);
                            continue;
                        }
                        /* edge tile: the same kernel on a padded copy, so
                         * these elements are computed exactly like the rest */
                        memset(edge, 0, sizeof edge);
                        if (load)
                            for (int i = 0; i < mr; i++)
                                memcpy(edge + i * NR, c + i * j->ldc, (size_t)nr * sizeof(float));
                        if (init) {
                            memset(einit, 0, sizeof einit);
                            memcpy(einit, init, (size_t)nr * sizeof(float));
                        }
                        fn(kc, apan, bpan, edge, NR, load, init ? einit : NULL);
                        for (int i = 0; i < mr; i++) memcpy(c + i * j->ldc, edge + i * NR, (size_t)nr * sizeof(float));
                    }
                }
            }
        }
    }
}

/* Packing buffers, one slice per thread, grown on demand and kept: a
 * training step makes ~100 calls, and fresh pages for each would cost more
 * than the small products themselves. The lock also makes concurrent
 * callers safe (the trainer has one). */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static float *pool;
static size_t pool_floats;

__attribute__((destructor)) static void pool_free(void)
{
    free(pool);
    pool = NULL;
    pool_floats = 0;
}

/* Floats of packing space one thread needs with kernel k: an A block and a
 * B block, each rounded up to 64 bytes. */
static size_t a_block(const struct kernel *k) { return ((size_t)(MC_TARGET / k->mr * k->mr) * KC + 15) / 16 * 16; }
static size_t per_thread(const struct kernel *k)
{
    int NR = k->nv * VL;
    return a_block(k) + ((size_t)KC * (NC_TARGET / NR * NR) + 15) / 16 * 16;
}

/* Grows the pool to `threads` slices (call with pool_lock held). Returns
 * how many slices it holds afterwards (fewer when memory ran out). */
static int pool_grow(size_t per, int threads)
{
    if (pool_floats < per * (size_t)threads) {
        float *p = aligned_alloc(64, per * (size_t)threads * sizeof(float));
        if (p) {
            free(pool);
            pool = p;
            pool_floats = per * (size_t)threads;
        }
    }
    return (int)(pool_floats / per);
}

int gemm_reserve(skiff_err *err)
{
    int threads = omp_get_max_threads();
    size_t per = per_thread(pick());
    pthread_mutex_lock(&pool_lock);
    int have = pool_grow(per, threads);
    pthread_mutex_unlock(&pool_lock);
    if (have < threads)
        return skiff_error(err, ENOMEM, "allocating GEMM packing buffers (%zu MiB for %d threads)",
                           per * (size_t)threads * sizeof(float) >> 20, threads);
    return 0;
}

static void fill_rows(int M, int N, float *c, long ldc, const float *bias)
{
    for (int i = 0; i < M; i++)
        for (int jj = 0; jj < N; jj++) c[(long)i * ldc + jj] = bias ? bias[jj] : 0.0f;
}

void gemm(int M, int N, int K, struct gemm_operand a, struct gemm_operand b, float *c, long ldc, const float *bias,
          int accumulate)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate) fill_rows(M, N, c, ldc, bias);
        return;
    }
    const struct kernel *k = pick();
    const int MR = k->mr, NR = k->nv * VL;
    struct job j = {.k = k,
                    .K = K,
                    .MC = MC_TARGET / MR * MR,
                    .NC = NC_TARGET / NR * NR,
                    .a = a,
                    .b = b,
                    .c = c,
                    .ldc = ldc,
                    .bias = bias,
                    .accumulate = accumulate};
    size_t per = per_thread(k);
    /* Threads split C in whole tiles along one dimension, and each packs
     * all of the other operand: split the columns when A is the smaller
     * operand (M <= N), the rows otherwise, unless that leaves threads idle. */
    int T = omp_get_max_threads();
    int tm = (M + MR - 1) / MR, tn = (N + NR - 1) / NR;
    int split_n = M <= N ? tn >= T || tn >= tm : !(tm >= T || tm >= tn);
    int tiles = split_n ? tn : tm;
    if (T > tiles) T = tiles;

    pthread_mutex_lock(&pool_lock);
    /* short of memory, fewer threads do the same work (the same bits);
     * gemm_reserve() at model creation makes this the exception */
    int have = pool_grow(per, T);
    if (have < 1) {
        pthread_mutex_unlock(&pool_lock);
        fprintf(stderr, "gemm: out of memory for %zu MiB of packing buffers\n", per * sizeof(float) >> 20);
        abort();
    }
    if (T > have) T = have;
#pragma omp parallel num_threads(T)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int lo = (int)((long)t * tiles / nt), hi = (int)((long)(t + 1) * tiles / nt);
        int m0 = 0, m1 = M, n0 = 0, n1 = N;
        if (split_n) {
            n0 = lo * NR;
            n1 = min_int(N, hi * NR);
        } else {
            m0 = lo * MR;
            m1 = min_int(M, hi * MR);
        }
        float *ap = pool + per * t;
        float *bp = ap + a_block(k);
        if (m0 < m1 && n0 < n1) run_block(&j, m0, m1, n0, n1, ap, bp);
    }
    pthread_mutex_unlock(&pool_lock);
}
