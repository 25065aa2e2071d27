/* exp and tanh in plain arithmetic, so loops over them vectorise.
 *
 * libm's expf/tanhf are scalar calls (glibc's vector variants are only
 * declared under -ffast-math, which this code may not use: the determinism
 * tests need reassociation-free sums). GELU and the softmaxes spend most of
 * their time in them, so these are written out: round-to-nearest range
 * reduction and a Taylor polynomial, branch-free, every lane independent.
 * Accuracy against libm in double (tests/unit/trainer/test_layers.c): exp
 * within 1e-7 relative, tanh within 4e-7. Results are exact functions of the
 * input: no dependence on the thread count or on the position in a loop. */
#ifndef SKIFF_LAYER_VMATH_H
#define SKIFF_LAYER_VMATH_H

#include <stdint.h>
#include <string.h>

/* Elementwise loops get an AVX-512 and an AVX2 copy next to the baseline
 * one (picked at load time), as the GEMM kernels do. Not under the CUDA
 * emulation, which compiles these headers as C++ at -O1 as its reference. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SKIFF_CUDA_EMU) && !defined(__cplusplus)
#define VMATH_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VMATH_CLONES
#endif

static inline float vm_bits_to_float(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

/* e^x. Inputs below -87.3 give ~1e-38 instead of 0 or a subnormal, above
 * 88 give ~1.6e38 instead of inf; NaN stays NaN. */
static inline float vm_exp(float x)
{
    float xc = x < -87.3f ? -87.3f : x > 88.0f ? 88.0f : x;
    /* n = round(x / ln 2) by the 1.5 * 2^23 trick (exact for |n| < 2^22) */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    /* r = x - n ln 2 in two parts (ln 2 = hi + lo, hi with 9 trailing
     * zero bits so n * hi is exact), |r| <= 0.35 */
    float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    /* e^r by Taylor to degree 7: truncation < 5e-9 relative on |r| <= 0.35 */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float y = p * vm_bits_to_float(((int32_t)n + 127) << 23);
    return x != x ? x : y;
}

/* tanh(x): 1 - 2 / (e^{2|x|} + 1) with the sign restored; below 1/4, where
 * that difference loses bits, the odd series to x^11 (truncation < 1e-10). */
static inline float vm_tanh(float x)
{
    float a = x < 0 ? -x : x;
    float big = 1.0f - 2.0f / (vm_exp(2.0f * a) + 1.0f);
    float a2 = a * a;
    float q = 1382.0f / 155925.0f;
    q = q * a2 - 62.0f / 2835.0f;
    q = q * a2 + 17.0f / 315.0f;
    q = q * a2 - 2.0f / 15.0f;
    q = q * a2 + 1.0f / 3.0f;
    float small = a - a * a2 * q;
    float t = a < 0.25f ? small : big;
    return x < 0 ? -t : t;
}

/* Sums in VM_LANES interleaved partial sums combined in a fixed order: the
 * loops vectorise without reassociation, and the bits depend only on n and
 * the data, not on threads or alignment. */
#define VM_LANES 16

static inline float vm_dot(const float *x, const float *y, int n)
{
    float s[VM_LANES] = {0};
    int nl = n / VM_LANES * VM_LANES;
    for (int i = 0; i < nl; i += VM_LANES)
        for (int j = 0; j < VM_LANES; j++) s[j] += x[i + j] * y[i + j];
    float r = 0.0f;
    for (int j = 0; j < VM_LANES; j++) r += s[j];
    for (int i = nl; i < n; i++) r += x[i] * y[i];
    return r;
}

static inline float vm_sum(const float *x, int n)
{
    float s[VM_LANES] = {0};
    int nl = n / VM_LANES * VM_LANES;
    for (int i = 0; i < nl; i += VM_LANES)
        for (int j = 0; j < VM_LANES; j++) s[j] += x[i + j];
    float r = 0.0f;
    for (int j = 0; j < VM_LANES; j++) r += s[j];
    for (int i = nl; i < n; i++) r += x[i];
    return r;
}

/* sum of (x - m)^2 */
static inline float vm_sumsq_dev(const float *x, float m, int n)
{
    float s[VM_LANES] = {0};
    int nl = n / VM_LANES * VM_LANES;
    for (int i = 0; i < nl; i += VM_LANES)
        for (int j = 0; j < VM_LANES; j++) s[j] += (x[i + j] - m) * (x[i + j] - m);
    float r = 0.0f;
    for (int j = 0; j < VM_LANES; j++) r += s[j];
    for (int i = nl; i < n; i++) r += (x[i] - m) * (x[i] - m);
    return r;
}

#endif
