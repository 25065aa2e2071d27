// Warp-level tensor-core building blocks for the attention kernels: PTX
// mma.sync (m16n8k16 bf16/fp16, m16n8k8 tf32), ldmatrix, cp.async, and a
// small per-type layer (struct mma_ops<T>) that loads operand fragments from
// shared memory and turns accumulator fragments into A operands, so P and dS
// stay in registers (FlashAttention-2's structure).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 / m16n8k8"),
// with g = lane / 4 and t = lane % 4:
//   C/D 16x8 fp32: c0,c1 = (g, 2t), (g, 2t+1); c2,c3 = (g+8, 2t), (g+8, 2t+1)
//   A 16x16 16-bit, 4 regs of 2: (g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
//   B 16x8 16-bit, 2 regs of 2 (k, n): (2t.., g), (2t+8.., g)
//   A 16x8 tf32: (g, t), (g+8, t), (g, t+4), (g+8, t+4); B 8x8 tf32: (t, g), (t+4, g)
// Under SKIFF_CUDA_EMU (tests/gpu/emu/cuda_emu.h) the same functions exist
// for the CPU emulation: they exchange the fragments of the 32 lanes and
// compute with exactly these layouts, so the emulated kernels check the index
// arithmetic of this file and of the kernels that use it.
#ifndef SKIFF_CUDA_MMA_DEV_CUH
#define SKIFF_CUDA_MMA_DEV_CUH

#include "common.cuh"

#ifndef SKIFF_CUDA_EMU
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// d += a * b (16x8 += 16x16 * 16x8), bf16 or fp16 inputs, fp32 accumulate.
template <typename T> __device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]);
template <> __device__ __forceinline__ void mma_16816<bf16>(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <> __device__ __forceinline__ void mma_16816<fp16>(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// d += a * b (16x8 += 16x8 * 8x8), tf32 inputs (see to_tf32), fp32 accumulate.
__device__ __forceinline__ void mma_1688_tf32(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// fp32 -> tf32 (round to nearest, ties away), as the bits of a .b32 operand.
__device__ __forceinline__ uint32_t to_tf32(float x)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
// Four 8x8 b16 matrices; lane l gives the address of row l%8 of matrix l/8.
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}
// The same, each matrix transposed.
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}
// 16 bytes global -> shared without a register round trip; zero-filled when
// !valid (rows past the end of the sequence).
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
#endif

// Two 16-bit values (lo = the lower column/row index) in one .b32 register.
__host__ __device__ __forceinline__ uint32_t bits16(bf16 x) { return __bfloat16_as_ushort(x); }
__host__ __device__ __forceinline__ uint32_t bits16(fp16 x) { return __half_as_ushort(x); }
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    return bits16(from_f<T>(lo)) | (bits16(from_f<T>(hi)) << 16);
}

template <typename T> struct mma_ops;

// bf16 / fp16: m16n8k16, fragments through ldmatrix.
template <typename T> struct mma16_ops {
    static constexpr int KS = 16; // k per mma
    static constexpr int PAD = 8; // row padding in elements: 16 bytes, so the 8 rows an
                                  // ldmatrix phase reads fall in different banks
    // A (16 x 16) from row-major smem: rows r0.., columns k0..
    __device__ __forceinline__ static void load_a(uint32_t a[4], const T *s, int ld, int r0, int k0)
    {
        int l = threadIdx.x & 31;
        ldsm_x4(a, s + (size_t)(r0 + (l & 15)) * ld + k0 + (l >> 4) * 8);
    }
    // B for two n-tiles (n0.., n0+8..) x k0..k0+15 where B(k, n) = s[n][k].
    __device__ __forceinline__ static void load_b_nt(uint32_t b[2][2], const T *s, int ld, int n0, int k0)
    {
        int l = threadIdx.x & 31;
        uint32_t r[4];
        ldsm_x4(r, s + (size_t)(n0 + (l & 7) + (l >> 4) * 8) * ld + k0 + ((l >> 3) & 1) * 8);
        b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
    }
    // B for two n-tiles where B(k, n) = s[k][n] (k0.. rows, n0.. columns).
    __device__ __forceinline__ static void load_b_nn(uint32_t b[2][2], const T *s, int ld, int k0, int n0)
    {
        int l = threadIdx.x & 31;
        uint32_t r[4];
        ldsm_x4_t(r, s + (size_t)(k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + n0 + (l >> 4) * 8);
        b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
    }
    // The A operand over k = columns [16j, 16j+16) of a 16-row accumulator
    // held as 8-column tiles c[2j], c[2j+1] (P or dS, rounded to T).
    __device__ __forceinline__ static void a_from_c(uint32_t a[4], const float c0[4], const float c1[4])
    {
        a[0] = pack2<T>(c0[0], c0[1]);
        a[1] = pack2<T>(c0[2], c0[3]);
        a[2] = pack2<T>(c1[0], c1[1]);
        a[3] = pack2<T>(c1[2], c1[3]);
    }
    __device__ __forceinline__ static void mma(float d[4], const uint32_t a[4], const uint32_t b[2])
    {
        mma_16816<T>(d, a, b);
    }
};
template <> struct mma_ops<bf16> : mma16_ops<bf16> {
};
template <> struct mma_ops<fp16> : mma16_ops<fp16> {
};

// fp32 storage: m16n8k8 TF32, fragments with plain 32-bit shared loads (row
// stride HS+4 words keeps the 32 lanes of each load in different banks).
// a_from_c permutes k inside each 8-column tile (A column t <-> key 2t, t+4
// <-> 2t+1, which is how the accumulator holds them), and load_b_nn reads B
// with the same permutation, so the product is unchanged.
template <> struct mma_ops<float> {
    static constexpr int KS = 8;
    static constexpr int PAD = 4;
    __device__ __forceinline__ static void load_a(uint32_t a[4], const float *s, int ld, int r0, int k0)
    {
        int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
        const float *p = s + (size_t)(r0 + g) * ld + k0 + t;
        a[0] = to_tf32(p[0]);
        a[1] = to_tf32(p[8 * ld]);
        a[2] = to_tf32(p[4]);
        a[3] = to_tf32(p[8 * ld + 4]);
    }
    // Two n-tiles x 8 k; B(k, n) = s[n][k].
    __device__ __forceinline__ static void load_b_nt(uint32_t b[2][2], const float *s, int ld, int n0, int k0)
    {
        int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
        for (int j = 0; j < 2; j++) {
            const float *p = s + (size_t)(n0 + 8 * j + g) * ld + k0 + t;
            b[j][0] = to_tf32(p[0]);
            b[j][1] = to_tf32(p[4]);
        }
    }
    // Two n-tiles x 8 k; B(k, n) = s[k][n], k permuted as in a_from_c.
    __device__ __forceinline__ static void load_b_nn(uint32_t b[2][2], const float *s, int ld, int k0, int n0)
    {
        int l = threadIdx.x & 31, g = l >> 2, t = l & 3;
        for (int j = 0; j < 2; j++) {
            const float *p = s + (size_t)(k0 + 2 * t) * ld + n0 + 8 * j + g;
            b[j][0] = to_tf32(p[0]);
            b[j][1] = to_tf32(p[ld]);
        }
    }
    // A over k = the 8 columns of accumulator tile c (c1 unused).
    __device__ __forceinline__ static void a_from_c(uint32_t a[4], const float c[4], const float *)
    {
        a[0] = to_tf32(c[0]);
        a[1] = to_tf32(c[2]);
        a[2] = to_tf32(c[1]);
        a[3] = to_tf32(c[3]);
    }
    __device__ __forceinline__ static void mma(float d[4], const uint32_t a[4], const uint32_t b[2])
    {
        mma_1688_tf32(d, a, b);
    }
};

#endif
