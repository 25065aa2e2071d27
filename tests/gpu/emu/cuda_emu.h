// CUDA-on-threads: just enough of the CUDA execution model to run skiff's
// kernels (trainer/cuda/: the layer headers and attention_dev.cuh) on the
// CPU, so their indexing, masking, tiling and reductions are checked where
// no GPU exists. One block at a time;
// each CUDA thread is an OS thread; __syncthreads/__syncwarp are barriers;
// __shfl_xor_sync goes through a per-warp exchange buffer; __shared__
// variables become statics (one block runs at a time, so that is exact);
// mma.sync, ldmatrix and cp.async (trainer/cuda/mma_dev.cuh) exchange the
// lanes' fragments and compute with the PTX ISA's documented layouts. What
// this cannot check: real warp divergence/timing, that the hardware matches
// the documented layouts, races between cp.async stages, speed.
#ifndef SKIFF_CUDA_EMU_H
#define SKIFF_CUDA_EMU_H

#define SKIFF_CUDA_EMU 1
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include <barrier>
#include <functional>
#include <memory>
#include <semaphore>
#include <thread>
#include <type_traits>
#include <vector>

#undef __shared__
#define __shared__ static
#define __launch_bounds__(...)

#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim
inline thread_local uint3 emu_threadIdx, emu_blockIdx;
inline thread_local dim3 emu_blockDim, emu_gridDim;
inline thread_local std::barrier<> *emu_bar, *emu_wbar;
inline thread_local float *emu_xch;
inline thread_local unsigned char *emu_wx; // per-warp exchange for fragments (32 x EMU_WX bytes)
#define EMU_WX 64
inline thread_local int emu_lane;
alignas(256) inline unsigned char emu_smem[256 * 1024];
inline unsigned char *emu_dyn_smem() { return emu_smem; }

inline void __syncthreads() { emu_bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu_wbar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o)
{
    emu_xch[emu_lane] = v;
    emu_wbar->arrive_and_wait();
    float r = emu_xch[emu_lane ^ o];
    emu_wbar->arrive_and_wait();
    return r;
}
inline float __expf(float x) { return expf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

// A pool of worker threads, one per CUDA thread of a block (at most 1024),
// created once: creating threads per block made emulated runs minutes long.
struct emu_pool {
    std::vector<std::thread> th;
    std::vector<std::unique_ptr<std::binary_semaphore>> go;
    std::counting_semaphore<1 << 20> done{0};
    std::function<void(unsigned)> job;
    bool quit = false;
    emu_pool()
    {
        th.reserve(1024);
        go.reserve(1024);
    }
    void run(unsigned n, std::function<void(unsigned)> f)
    {
        while (th.size() < n) {
            unsigned id = (unsigned)th.size();
            go.emplace_back(new std::binary_semaphore(0));
            th.emplace_back([this, id] {
                for (;;) {
                    go[id]->acquire();
                    if (quit) return;
                    job(id);
                    done.release();
                }
            });
        }
        job = std::move(f);
        for (unsigned i = 0; i < n; i++) go[i]->release();
        for (unsigned i = 0; i < n; i++) done.acquire();
    }
    ~emu_pool()
    {
        quit = true;
        for (auto &g : go) g->release();
        for (auto &t : th) t.join();
    }
};
inline emu_pool emu_the_pool;

// Runs f() as every thread of every block of grid, blocks one after another.
template <typename F> void emu_launch(dim3 grid, dim3 block, F f)
{
    unsigned n = block.x * block.y * block.z, nw = (n + 31) / 32;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                std::barrier<> bar(n);
                std::vector<std::unique_ptr<std::barrier<>>> wb;
                std::vector<float> xch(32 * nw);
                std::vector<unsigned char> wx((size_t)32 * EMU_WX * nw);
                for (unsigned w = 0; w < nw; w++) wb.emplace_back(new std::barrier<>(std::min(32u, n - w * 32)));
                emu_the_pool.run(n, [&](unsigned t) {
                    emu_threadIdx = make_uint3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
                    emu_blockIdx = make_uint3(bx, by, bz);
                    emu_blockDim = block;
                    emu_gridDim = grid;
                    emu_bar = &bar;
                    emu_wbar = wb[t / 32].get();
                    emu_xch = &xch[(t / 32) * 32];
                    emu_wx = &wx[(size_t)(t / 32) * 32 * EMU_WX];
                    emu_lane = t % 32;
                    f();
                    emu_wbar->arrive_and_drop(); // an exited thread no longer counts
                    emu_bar->arrive_and_drop();
                });
            }
}

// ---- warp-level PTX stand-ins (trainer/cuda/mma_dev.cuh) ----------------------
// Every lane of the warp publishes its piece, all wait, each lane reads what
// it needs, all wait again (so the buffer can be reused by the next call).
template <typename P> inline void emu_exchange(const P &mine, P *all)
{
    static_assert(sizeof(P) <= EMU_WX, "fragment exchange too large");
    memcpy(emu_wx + emu_lane * EMU_WX, &mine, sizeof(P));
    emu_wbar->arrive_and_wait();
    for (int l = 0; l < 32; l++) memcpy(&all[l], emu_wx + l * EMU_WX, sizeof(P));
    emu_wbar->arrive_and_wait();
}
inline float emu_lo16(uint32_t r, bool bf)
{
    unsigned short h = (unsigned short)(r & 0xffff);
    return bf ? __bfloat162float(__ushort_as_bfloat16(h)) : __half2float(__ushort_as_half(h));
}
inline float emu_hi16(uint32_t r, bool bf) { return emu_lo16(r >> 16, bf); }

// An mma's A and B registers of all 32 lanes of the warp, by lane.
struct emu_frag {
    uint32_t a[4], b[2];
};
inline void emu_gather_frags(const uint32_t a[4], const uint32_t b[2], emu_frag all[32])
{
    emu_frag mine;
    memcpy(mine.a, a, sizeof(mine.a));
    memcpy(mine.b, b, sizeof(mine.b));
    emu_exchange(mine, all);
}

// m16n8k16, 16-bit inputs: the fragment layouts of the PTX ISA.
inline void emu_mma16816(float d[4], const uint32_t a[4], const uint32_t b[2], bool bf)
{
    emu_frag all[32];
    emu_gather_frags(a, b, all);
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        const emu_frag &f = all[l];
        for (int h = 0; h < 2; h++) {
            float (*lo)(uint32_t, bool) = h ? emu_hi16 : emu_lo16;
            A[g][2 * t + h] = lo(f.a[0], bf);
            A[g + 8][2 * t + h] = lo(f.a[1], bf);
            A[g][2 * t + 8 + h] = lo(f.a[2], bf);
            A[g + 8][2 * t + 8 + h] = lo(f.a[3], bf);
            B[2 * t + h][g] = lo(f.b[0], bf);
            B[2 * t + 8 + h][g] = lo(f.b[1], bf);
        }
    }
    int g = emu_lane >> 2, t = emu_lane & 3;
    for (int i = 0; i < 4; i++) {
        int r = g + (i >> 1) * 8, c = 2 * t + (i & 1);
        float s = d[i];
        for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
        d[i] = s;
    }
}
template <typename T> inline void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    emu_mma16816(d, a, b, std::is_same_v<T, __nv_bfloat16>);
}

// TF32 rounding of cvt.rna.tf32.f32: to nearest, ties away from zero.
inline uint32_t to_tf32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
    return u;
}

// m16n8k8, tf32 inputs.
inline void mma_1688_tf32(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    emu_frag all[32];
    emu_gather_frags(a, b, all);
    float A[16][8], B[8][8];
    auto f = [](uint32_t u) {
        float v;
        memcpy(&v, &u, 4);
        return v;
    };
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        A[g][t] = f(all[l].a[0]);
        A[g + 8][t] = f(all[l].a[1]);
        A[g][t + 4] = f(all[l].a[2]);
        A[g + 8][t + 4] = f(all[l].a[3]);
        B[t][g] = f(all[l].b[0]);
        B[t + 4][g] = f(all[l].b[1]);
    }
    int g = emu_lane >> 2, t = emu_lane & 3;
    for (int i = 0; i < 4; i++) {
        int r = g + (i >> 1) * 8, c = 2 * t + (i & 1);
        float s = d[i];
        for (int k = 0; k < 8; k++) s += A[r][k] * B[k][c];
        d[i] = s;
    }
}

// ldmatrix .x4 (.trans): lane l gives the row address of row l%8 of matrix l/8.
inline void emu_ldsm(uint32_t r[4], const void *row, bool trans)
{
    const unsigned char *all[32];
    emu_exchange((const unsigned char *)row, all);
    int g = emu_lane >> 2, t = emu_lane & 3;
    for (int i = 0; i < 4; i++) {
        uint16_t lo, hi;
        if (!trans) { // (row g, cols 2t, 2t+1)
            memcpy(&lo, all[8 * i + g] + 4 * t, 2);
            memcpy(&hi, all[8 * i + g] + 4 * t + 2, 2);
        } else { // (rows 2t, 2t+1, col g)
            memcpy(&lo, all[8 * i + 2 * t] + 2 * g, 2);
            memcpy(&hi, all[8 * i + 2 * t + 1] + 2 * g, 2);
        }
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}
inline void ldsm_x4(uint32_t r[4], const void *row) { emu_ldsm(r, row, false); }
inline void ldsm_x4_t(uint32_t r[4], const void *row) { emu_ldsm(r, row, true); }

// cp.async completes at once here: the emulation checks the addressing and
// the zero fill, not the asynchrony (races between stages need a real GPU).
inline void cp_async16(void *smem, const void *gmem, bool valid)
{
    if (valid)
        memcpy(smem, gmem, 16);
    else
        memset(smem, 0, 16);
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}

// fp32 rounded to TF32's 10 mantissa bits, to nearest (ties to even): how the
// cuBLASLt stand-in (runtime_emu.cpp) rounds TF32 GEMM inputs.
inline float emu_round_tf32(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x0fffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&v, &u, 4);
    return v;
}

#endif
