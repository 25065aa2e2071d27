/* Blocked SGEMM for the CPU trainer (see gemm.h for the contract).
 *
 * Hand-written rather than a BLAS: a BLAS splits the k sum differently
 * depending on the thread count and the CPU (OpenBLAS, BLIS and MKL all
 * do), and the data-parallel tests need one process with --threads 1 and 2
 * to give the same bits. Here every element of C is a single ordered chain
 * over k, so only the instruction set can change the bits.
 *
 * Structure (the usual one for register-tiled GEMM): for a block of NC
 * columns and KC steps of k, B is packed into NR-wide panels (each panel's
 * rows contiguous); for a block of MC rows, A is packed into MR-tall panels;
 * the register kernel then walks the panels, keeping an MR x NR tile of C in
 * registers for KC multiply-adds. Packing makes every operand layout (x W^T,
 * dy W, dy^T x) look the same to the kernel and keeps its loads sequential. */
#include "gemm.h"

#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
static inline __attribute__((always_inline)) void tile(int kc, const float *restrict a,
                                                       const float *restrict b, float *restrict c,
                                                       long ldc, int load, const float *init,
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

typedef void kernel_fn(int kc, const float *a, const float *b, float *c, long ldc, int load,
                       const float *init);

struct kernel {
    const char *name;
    kernel_fn *fn;
    int mr, nv;
};

/* Tile shapes fill the register file: AVX-512 has 32 zmm (8x48: 24
 * accumulators, 3 for B, 1 broadcast), AVX2 16 ymm (6x16: 12 + 2 + 1). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("arch=x86-64-v4"))) static void kernel_avx512(int kc, const float *a,
                                                                   const float *b, float *c,
                                                                   long ldc, int load,
                                                                   const float *init)
{
    tile(kc, a, b, c, ldc, load, init, 8, 3);
}

__attribute__((target("arch=x86-64-v3"))) static void kernel_avx2(int kc, const float *a,
                                                                 const float *b, float *c,
                                                                 long ldc, int load,
                                                                 const float *init)
{
    tile(kc, a, b, c, ldc, load, init, 6, 1);
}
#define HAVE_X86_KERNELS 1
#endif

static void kernel_generic(int kc, const float *a, const float *b, float *c, long ldc, int load,
                           const float *init)
{
    tile(kc, a, b, c, ldc, load, init, 4, 1);
}

static const struct kernel *pick(void)
{
    static const struct kernel generic = {"generic", kernel_generic, 4, 1};
#ifdef HAVE_X86_KERNELS
    static const struct kernel avx512 = {"avx512", kernel_avx512, 8, 3};
    static const struct kernel avx2 = {"avx2", kernel_avx2, 6, 1};
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) return &avx512;
    if (__builtin_cpu_supports("x86-64-v3")) return &avx2;
#endif
    return &generic;
}

const char *gemm_kernel_name(void) { return pick()->name; }

/* ---- packing ------------------------------------------------------------- */

static int min_int(int x, int y) { return x < y ? x : y; }

/* A rows [0,mc) x k [0,kc) -> panels of MR rows, each (kc, MR); rows past mc
 * are zeros. The inner loop runs along whichever index is unit-stride. */
static void pack_a(int mc, int kc, const float *a, long rs, long cs, int MR, float *dst)
{
    for (int i0 = 0; i0 < mc; i0 += MR, dst += (long)kc * MR) {
        int mr = min_int(MR, mc - i0);
        const float *s = a + i0 * rs;
        if (cs == 1) {
            for (int i = 0; i < mr; i++)
                for (int p = 0; p < kc; p++) dst[(long)p * MR + i] = s[i * rs + p];
        } else {
            for (int p = 0; p < kc; p++)
                for (int i = 0; i < mr; i++) dst[(long)p * MR + i] = s[i * rs + p * cs];
        }
        for (int p = 0; p < kc && mr < MR; p++)
            for (int i = mr; i < MR; i++) dst[(long)p * MR + i] = 0.0f;
    }
}

/* B k [0,kc) x columns [0,nc) -> panels of NR columns, each (kc, NR). */
static void pack_b(int kc, int nc, const float *b, long rs, long cs, int NR, float *dst)
{
    for (int j0 = 0; j0 < nc; j0 += NR, dst += (long)kc * NR) {
        int nr = min_int(NR, nc - j0);
        const float *s = b + j0 * cs;
        if (cs == 1) {
            for (int p = 0; p < kc; p++) {
                memcpy(dst + (long)p * NR, s + p * rs, (size_t)nr * sizeof(float));
                for (int j = nr; j < NR; j++) dst[(long)p * NR + j] = 0.0f;
            }
        } else {
            for (int j = 0; j < nr; j++)
                for (int p = 0; p < kc; p++) dst[(long)p * NR + j] = s[j * cs + p * rs];
            for (int p = 0; p < kc && nr < NR; p++)
                for (int j = nr; j < NR; j++) dst[(long)p * NR + j] = 0.0f;
        }
    }
}

/* ---- blocking ------------------------------------------------------------ */

enum { KC = 256, MC_TARGET = 256, NC_TARGET = 1536 };

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
                        for (int i = 0; i < mr; i++)
                            memcpy(c + i * j->ldc, edge + i * NR, (size_t)nr * sizeof(float));
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

static void fill_rows(int M, int N, float *c, long ldc, const float *bias)
{
    for (int i = 0; i < M; i++)
        for (int jj = 0; jj < N; jj++) c[(long)i * ldc + jj] = bias ? bias[jj] : 0.0f;
}

void gemm(int M, int N, int K, struct gemm_operand a, struct gemm_operand b, float *c, long ldc,
          const float *bias, int accumulate)
{
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate) fill_rows(M, N, c, ldc, bias);
        return;
    }
    const struct kernel *k = pick();
    const int MR = k->mr, NR = k->nv * VL;
    struct job j = {.k = k, .K = K, .MC = MC_TARGET / MR * MR, .NC = NC_TARGET / NR * NR,
                    .a = a, .b = b, .c = c, .ldc = ldc, .bias = bias, .accumulate = accumulate};
    /* per thread: one A block and one B block, each rounded to 64 bytes */
    size_t per = ((size_t)j.MC * KC + 15) / 16 * 16 + ((size_t)KC * j.NC + 15) / 16 * 16;
    int T = omp_get_max_threads();
    /* split the dimension with more tiles, in whole tiles */
    int tm = (M + MR - 1) / MR, tn = (N + NR - 1) / NR, split_n = tn >= tm;
    int tiles = split_n ? tn : tm;
    if (T > tiles) T = tiles;

    pthread_mutex_lock(&pool_lock);
    if (pool_floats < per * T) {
        free(pool);
        pool = aligned_alloc(64, per * T * sizeof(float));
        pool_floats = pool ? per * T : 0;
        if (!pool) {
            /* out of memory for 2 MB a thread: nothing sensible to
             * return through a void product; fail loudly */
            pthread_mutex_unlock(&pool_lock);
            abort();
        }
    }
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
        float *bp = ap + ((size_t)j.MC * KC + 15) / 16 * 16;
        if (m0 < m1 && n0 < n1) run_block(&j, m0, m1, n0, n1, ap, bp);
    }
    pthread_mutex_unlock(&pool_lock);
}
