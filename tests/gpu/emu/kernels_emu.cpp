// Runs skiff's CUDA kernels on the CPU (cuda_emu.h) and compares them with
// the CPU reference layers (trainer/layers/*.h): attention forward/backward
// (mma.sync fragments, tiling, masks, online softmax, the separate dK/dV and
// dQ passes) for fp32/TF32, bf16 and fp16
// and head sizes 16/32/64/128, full and partial tiles; residual+LayerNorm
// forward/backward with the deterministic column sums; softmax+cross-entropy;
// embedding backward; GELU; bias gradients; AdamW; the gradient norm.
// Prints PASS:/FAIL: lines; exit 1 when something is outside tolerance.
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "adamw.cuh"
#include "attention128_dev.cuh"
#include "classifier.cuh"
#include "colsum.cuh"
#include "elementwise.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "global_norm.cuh"
#include "layernorm.cuh"

extern "C" {
#include "layers/attention.h"
#include "layers/crossentropy.h"
#include "layers/encoder.h"
#include "layers/gelu.h"
#include "layers/layernorm.h"
}

static int failures = 0;
static void report(const char *what, double err, double tol)
{
    bool ok = std::isfinite(err) && err <= tol;
    printf("%s: emulated kernels: %s (max error %.3g, tolerance %.3g)\n", ok ? "PASS" : "FAIL", what, err, tol);
    failures += !ok;
}

static uint64_t rng = 12345;
static float frand()
{ // uniform in [-1, 1)
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

template <typename T> static std::vector<T> to_t(const std::vector<float> &v)
{
    std::vector<T> o(v.size());
    for (size_t i = 0; i < v.size(); i++) o[i] = from_f<T>(v[i]);
    return o;
}
template <typename T> static std::vector<float> to_f32(const std::vector<T> &v)
{
    std::vector<float> o(v.size());
    for (size_t i = 0; i < v.size(); i++) o[i] = to_f(v[i]);
    return o;
}
// max |a-b| / (max |b| + floor): relative to the scale of the reference
static double relerr(const std::vector<float> &a, const std::vector<float> &b, double floor = 1e-6)
{
    double m = 0, s = floor;
    for (size_t i = 0; i < a.size(); i++) {
        m = std::max(m, (double)std::fabs(a[i] - b[i]));
        s = std::max(s, (double)std::fabs(b[i]));
    }
    return m / s;
}

// ---------------------------------------------------------------- attention
// ROWS = 64: the 64-row kernels (attention_dev.cuh); 128: the 128-row ones
// (attention128_dev.cuh), both against the same reference.
template <typename T, int HS, int ROWS = 64>
static void test_attention(int B, int Tn, int NH, double tol, const char *tname)
{
    int C = NH * HS;
    size_t nq = (size_t)B * Tn * 3 * C, no = (size_t)B * Tn * C;
    std::vector<float> qkv(nq), dout(no);
    for (auto &x : qkv) x = frand() * 1.5f;
    for (auto &x : dout) x = frand();
    auto qkv_t = to_t<T>(qkv), dout_t = to_t<T>(dout);
    auto qkv_r = to_f32(qkv_t), dout_r = to_f32(dout_t); // reference sees the rounded inputs

    std::vector<T> out(no), dqkv(nq);
    std::vector<float> lse((size_t)B * NH * Tn), Dv((size_t)B * NH * Tn);
    int ntile = (Tn + ROWS - 1) / ROWS;
    float scale = 1.0f / sqrtf((float)HS);
    T *o = out.data(), *dq = dqkv.data();
    const T *q = qkv_t.data(), *d = dout_t.data();
    float *l = lse.data(), *D = Dv.data();
    dim3 grid(ntile, NH, B), block(ATT_WARPS * 32);
    size_t lanes = (size_t)B * Tn * NH * (HS * sizeof(T) / 16);
    if constexpr (ROWS == 128) {
        static_assert(att128_cfg<T, HS>::fits, "no 128-row kernels for this type and head size");
        emu_launch(grid, block, [=] { attention128_forward_kernel<T, HS>(o, l, q, Tn, C, NH, scale); });
        emu_launch(dim3((lanes + 255) / 256), dim3(256),
                   [=] { attention_rowdot_kernel<T, HS>(D, d, o, B, Tn, C, NH); });
        emu_launch(grid, block, [=] { attention128_dkdv_kernel<T, HS>(dq, d, q, l, D, Tn, C, NH, scale); });
        emu_launch(grid, block, [=] { attention128_dq_kernel<T, HS>(dq, d, q, l, D, Tn, C, NH, scale); });
    } else {
        emu_launch(grid, block, [=] { attention_forward_kernel<T, HS>(o, l, q, Tn, C, NH, scale); });
        emu_launch(dim3((lanes + 255) / 256), dim3(256),
                   [=] { attention_rowdot_kernel<T, HS>(D, d, o, B, Tn, C, NH); });
        emu_launch(grid, block, [=] { attention_dkdv_kernel<T, HS>(dq, d, q, l, D, Tn, C, NH, scale); });
        emu_launch(grid, block, [=] { attention_dq_kernel<T, HS>(dq, d, q, l, D, Tn, C, NH, scale); });
    }

    std::vector<float> ro(no), pre((size_t)B * NH * Tn * Tn), att(pre.size()), rd(nq, 0.0f), dpre(pre.size(), 0.0f),
        datt(pre.size(), 0.0f);
    attention_forward(ro.data(), pre.data(), att.data(), qkv_r.data(), B, Tn, C, NH);
    attention_backward(rd.data(), dpre.data(), datt.data(), dout_r.data(), qkv_r.data(), att.data(), B, Tn, C, NH);
    // log-sum-exp of the scaled scores per row, from the reference pre-softmax
    std::vector<float> rl(lse.size());
    for (size_t r = 0; r < rl.size(); r++) {
        int t = (int)(r % Tn);
        const float *p = pre.data() + r * Tn;
        double mx = -INFINITY, s = 0;
        for (int k = 0; k <= t; k++) mx = std::max(mx, (double)p[k]);
        for (int k = 0; k <= t; k++) s += exp(p[k] - mx);
        rl[r] = (float)(mx + log(s));
    }
    char name[160];
    snprintf(name, sizeof name, "attention (%d-row tiles) forward %s HS=%d B=%d T=%d NH=%d", ROWS, tname, HS, B, Tn,
             NH);
    report(name, relerr(to_f32(out), ro), tol);
    snprintf(name, sizeof name, "attention (%d-row tiles) log-sum-exp %s HS=%d T=%d", ROWS, tname, HS, Tn);
    report(name, relerr(lse, rl), tol);
    snprintf(name, sizeof name, "attention (%d-row tiles) backward dq,dk,dv %s HS=%d B=%d T=%d NH=%d", ROWS, tname, HS,
             B, Tn, NH);
    report(name, relerr(to_f32(dqkv), rd), 2 * tol);
}

// ---------------------------------------------------------------- layernorm
// NV = 0: the generic kernels (wide rows); else the vectorised one-pass ones
// with NV 16-byte vectors per lane.
template <typename T, int NV> static void test_layernorm(int N, int C, double tol, const char *tname)
{
    size_t n = (size_t)N * C;
    std::vector<float> a(n), b(n), w(C), bias(C), dout(n), dres0(n);
    for (auto &x : a) x = frand() * 2;
    for (auto &x : b) x = frand();
    for (auto &x : w) x = 1 + 0.2f * frand();
    for (auto &x : bias) x = 0.1f * frand();
    for (auto &x : dout) x = frand();
    for (auto &x : dres0) x = frand();
    auto at = to_t<T>(a), bt = to_t<T>(b), wt = to_t<T>(w), biast = to_t<T>(bias), dt = to_t<T>(dout),
         drt = to_t<T>(dres0);
    std::vector<T> res(n), ln(n);
    std::vector<float> mean(N), rstd(N);
    T *pr = res.data(), *pl = ln.data();
    const T *pa = at.data(), *pb = bt.data(), *pw = wt.data(), *pbi = biast.data();
    float *pm = mean.data(), *ps = rstd.data();
    if constexpr (NV == 0)
        emu_launch(dim3((N + 7) / 8), dim3(256),
                   [=] { residual_layernorm_forward_kernel<T>(pr, pl, pm, ps, pa, pb, pw, pbi, N, C); });
    else
        emu_launch(dim3((N + 7) / 8), dim3(256),
                   [=] { residual_layernorm_forward_vec_kernel<T, NV>(pr, pl, pm, ps, pa, pb, pw, pbi, N, C); });
    // reference on the rounded residual the kernel stores
    auto rres = to_f32(res);
    std::vector<float> rsum(n), rln(n), rm(N), rs(N);
    for (size_t i = 0; i < n; i++) rsum[i] = to_f(from_f<T>(to_f(at[i]) + to_f(bt[i])));
    auto wr = to_f32(wt), br = to_f32(biast);
    layernorm_forward(rln.data(), rm.data(), rs.data(), rsum.data(), wr.data(), br.data(), N, C);
    char name[128];
    const char *kind = NV ? "vectorised" : "generic";
    snprintf(name, sizeof name, "residual add %s %s", kind, tname);
    report(name, relerr(rres, rsum), tol);
    snprintf(name, sizeof name, "residual+LayerNorm forward %s %s N=%d C=%d", kind, tname, N, C);
    report(name, relerr(to_f32(ln), rln), tol);

    // backward: dinp += ..., dw/db through the column sums
    std::vector<T> dinp = drt;
    std::vector<float> dw(C, 0.5f), db(C, -0.5f), part((size_t)((N + 255) / 256) * 2 * C);
    T *pdi = dinp.data();
    const T *pd = dt.data(), *px = pr;
    float *pdw = dw.data(), *pdb = db.data(), *pp = part.data();
    unsigned gy = (N + ROWS_PER - 1) / ROWS_PER;
    if constexpr (NV == 0) {
        emu_launch(dim3((N + 7) / 8), dim3(256), [=] { layernorm_backward_kernel<T>(pdi, pd, px, pw, pm, ps, N, C); });
        emu_launch(dim3((C + 31) / 32, gy), dim3(32, 8),
                   [=] { colsum_partial_kernel<T>(pp, pd, px, pm, ps, N, C, 1); });
    } else {
        emu_launch(dim3(gy), dim3(256),
                   [=] { layernorm_backward_vec_kernel<T, NV>(pdi, pp, pd, px, pw, pm, ps, N, C); });
    }
    emu_launch(dim3((C + 255) / 256), dim3(256), [=] { colsum_final_kernel(pdw, pdb, pp, gy, C); });
    auto rdi = to_f32(drt);
    std::vector<float> rdw(C, 0.5f), rdb(C, -0.5f);
    auto dr = to_f32(dt);
    layernorm_backward(rdi.data(), rdw.data(), rdb.data(), dr.data(), rsum.data(), wr.data(), rm.data(), rs.data(), N,
                       C);
    snprintf(name, sizeof name, "LayerNorm backward dx %s %s", kind, tname);
    report(name, relerr(to_f32(dinp), rdi), tol);
    snprintf(name, sizeof name, "LayerNorm backward dw,db (column sums) %s %s", kind, tname);
    report(name, std::max(relerr(dw, rdw), relerr(db, rdb)), tol);
}

// ---------------------------------------------------------------- classifier
template <typename T> static void test_classifier(int N, int V, int Vp, double tol, const char *tname)
{
    std::vector<float> logits((size_t)N * Vp);
    std::vector<int> tg(N);
    for (auto &x : logits) x = 4 * frand();
    for (int i = 0; i < N; i++) tg[i] = (int)((frand() + 1) * 0.5f * V) % V;
    auto lt = to_t<T>(logits);
    auto lr = to_f32(lt);
    std::vector<float> losses(N);
    float dloss = 0.25f;
    T *pl = lt.data();
    float *pls = losses.data();
    const int *pt = tg.data();
    emu_launch(dim3(N), dim3(1024), [=] { fused_classifier_kernel<T>(pl, pls, pt, dloss, V, Vp); });
    std::vector<float> probs((size_t)N * Vp), rloss(N), dl((size_t)N * Vp, 0.0f), dls(N, dloss);
    softmax_forward(probs.data(), lr.data(), N, V, Vp);
    crossentropy_forward(rloss.data(), probs.data(), tg.data(), N, Vp);
    crossentropy_softmax_backward(dl.data(), dls.data(), probs.data(), tg.data(), N, V, Vp);
    char name[128];
    snprintf(name, sizeof name, "softmax+cross-entropy loss %s", tname);
    report(name, relerr(losses, rloss), tol);
    snprintf(name, sizeof name, "softmax+cross-entropy dlogits in place (padding zeroed) %s", tname);
    report(name, relerr(to_f32(lt), dl), tol);
}

// ---------------------------------------------------------------- the rest (fp32)
static void test_misc()
{
    // embedding backward through the host token index; segments of at most 4
    // rows here, so frequent tokens take the partial-sum path
    int B = 3, Tn = 40, C = 48, V = 20, N = B * Tn, SEG = 4;
    std::vector<int> tok(N), csr(enc_csr_ints(N, SEG)), counts(V);
    for (auto &x : tok) x = (int)((frand() + 1) * 0.5f * V) % V;
    for (int i = 0; i < 30; i++) tok[3 * i] = 7; // one token far above SEG
    std::vector<float> dout((size_t)N * C), dwte((size_t)V * C, 0.1f), dwpe((size_t)Tn * C, -0.1f),
        epart((size_t)(2 * (N / SEG) + 2) * C);
    for (auto &x : dout) x = frand();
    auto rwte = dwte, rwpe = dwpe;
    encoder_csr_build(csr.data(), counts.data(), tok.data(), N, V, SEG);
    float *pw = dwte.data(), *pp = dwpe.data(), *pep = epart.data();
    const float *pd = dout.data();
    const int *pc = csr.data();
    int nseg = csr[0], nbig = csr[1];
    emu_launch(dim3(nseg, 1), dim3(128), [=] { encoder_backward_seg_kernel<float>(pw, pep, pd, pc, N, C); });
    emu_launch(dim3(nbig, 1), dim3(256), [=] { encoder_backward_big_kernel(pw, pep, pc, N, C); });
    emu_launch(dim3((Tn * C / 4 + 255) / 256), dim3(256),
               [=] { encoder_backward_wpe_kernel<float>(pp, pd, B, Tn, C); });
    encoder_backward(rwte.data(), rwpe.data(), dout.data(), tok.data(), B, Tn, C);
    char ename[128];
    snprintf(ename, sizeof ename, "embedding backward (%d segments, %d frequent tokens split, wpe over batch)", nseg,
             nbig);
    report(ename, std::max(relerr(dwte, rwte), relerr(dwpe, rwpe)), 1e-5);
    if (nbig == 0) report("embedding backward: the test has a frequent token", INFINITY, 0);

    // embedding forward
    std::vector<float> wte((size_t)V * C), wpe((size_t)Tn * C), enc((size_t)N * C), renc((size_t)N * C);
    for (auto &v : wte) v = frand();
    for (auto &v : wpe) v = frand();
    float *pe = enc.data();
    const float *pwte = wte.data(), *pwpe = wpe.data();
    const int *ptok = tok.data();
    size_t nvec = (size_t)N * C / 4;
    emu_launch(dim3((nvec + 255) / 256), dim3(256),
               [=] { encoder_forward_kernel<float>(pe, ptok, pwte, pwpe, Tn, C, nvec); });
    encoder_forward(renc.data(), tok.data(), wte.data(), wpe.data(), B, Tn, C);
    report("embedding forward", relerr(enc, renc), 1e-6);

    // mean loss accumulation (added to the accumulator)
    std::vector<float> lv(777);
    double lref = 0;
    for (auto &v : lv) v = frand() + 2, lref += v;
    float acc = 1.0f, *pacc = &acc;
    const float *plv = lv.data();
    emu_launch(dim3(1), dim3(1024), [=] { mean_kernel(pacc, plv, 777); });
    report("mean of the losses, accumulated", fabs(acc - 1.0 - lref / 777) / (lref / 777), 1e-6);

    // GELU forward / backward
    size_t n = 5000;
    std::vector<float> x(n), g(n), y(n), ry(n), d(n), rd(n, 0.0f);
    for (size_t i = 0; i < n; i++) x[i] = 5 * frand(), g[i] = frand();
    d = g;
    float *py = y.data(), *pdd = d.data();
    const float *px = x.data();
    emu_launch(dim3((n / 4 + 255) / 256), dim3(256), [=] { gelu_forward_kernel<float>(py, px, n); });
    emu_launch(dim3((n / 4 + 255) / 256), dim3(256), [=] { gelu_backward_kernel<float>(pdd, px, n); });
    gelu_forward(ry.data(), x.data(), n);
    gelu_backward(rd.data(), x.data(), g.data(), n);
    report("GELU forward and backward", std::max(relerr(y, ry), relerr(d, rd)), 1e-5);

    // bias gradient: column sums over 600 rows (3 partial slices)
    int R = 600, OC = 70;
    std::vector<float> m((size_t)R * OC), db(OC, 1.0f), rdb(OC, 1.0f), part((size_t)3 * 2 * OC);
    for (auto &v : m) v = frand();
    for (int r = 0; r < R; r++)
        for (int c = 0; c < OC; c++) rdb[c] += m[(size_t)r * OC + c];
    float *pdb = db.data(), *ppart = part.data();
    const float *pm = m.data();
    unsigned gy = (R + ROWS_PER - 1) / ROWS_PER;
    emu_launch(dim3((OC + 31) / 32, gy), dim3(32, 8),
               [=] { colsum_partial_kernel<float>(ppart, pm, (const float *)NULL, NULL, NULL, R, OC, 0); });
    emu_launch(dim3(1), dim3(256), [=] { colsum_final_kernel(pdb, NULL, ppart, gy, OC); });
    report("bias gradient (deterministic column sums)", relerr(db, rdb), 1e-5);

    // gradient norm, two passes
    size_t ng = 100000;
    std::vector<float> gr(ng), parts(NORM_BLOCKS);
    double ref = 0;
    for (auto &v : gr) v = frand(), ref += (double)v * v;
    float out = 2.0f, *po = &out, *pparts = parts.data();
    const float *pg = gr.data();
    // 32 threads per block instead of 512: the same reduction, far fewer emulated threads
    emu_launch(dim3(NORM_BLOCKS), dim3(32), [=] { norm_partial_kernel(pparts, pg, ng); });
    emu_launch(dim3(1), dim3(NORM_BLOCKS), [=] { norm_final_kernel(po, pparts); });
    report("gradient norm (sum of squares, added to the output)", fabs(out - 2.0 - ref) / ref, 1e-5);

    // AdamW with bf16 copy
    size_t na = 1000;
    std::vector<float> p(na), gg(na), mm(na), vv(na);
    for (size_t i = 0; i < na; i++)
        p[i] = frand(), gg[i] = frand(), mm[i] = 0.1f * frand(), vv[i] = 0.01f * (frand() + 1);
    auto rp = p, rm = mm, rv = vv;
    std::vector<bf16> pb(na);
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f, bc1 = 1 - powf(b1, 3),
          bc2 = 1 - powf(b2, 3);
    float *pp2 = p.data(), *pm2 = mm.data(), *pv2 = vv.data();
    const float *pg2 = gg.data();
    bf16 *ppb = pb.data();
    emu_launch(dim3((na + 255) / 256), dim3(256),
               [=] { adamw_kernel<bf16>(pp2, ppb, pg2, pm2, pv2, na, lr, b1, b2, eps, wd, gs, NULL, 0, bc1, bc2); });
    double e = 0, eb = 0;
    for (size_t i = 0; i < na; i++) {
        float gi = gg[i] * gs, mi = b1 * rm[i] + (1 - b1) * gi, vi = b2 * rv[i] + (1 - b2) * gi * gi;
        float q = rp[i] - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * rp[i]);
        e = std::max(e, (double)fabs(q - p[i]));
        eb = std::max(eb, (double)fabs(__bfloat162float(pb[i]) - q));
    }
    report("AdamW master update", e, 1e-6);
    report("AdamW bf16 copy of the master", eb, 8e-3);

    // AdamW reading the norm on the device: clipping to 1.0, and a skip when
    // the norm is not finite (fp16 overflow) -- the host never waits for it
    float ss = 0;
    for (size_t i = 0; i < na; i++) ss += gg[i] * gg[i];
    float n2[2] = {ss, INFINITY}, clip = 1.0f, igs = 0.5f;
    std::vector<float> pcl(na), mc(na, 0.0f), vc(na, 0.0f), pskip = p;
    for (size_t i = 0; i < na; i++) pcl[i] = p[i];
    auto pref = pcl;
    float *ppc = pcl.data(), *pmc = mc.data(), *pvc = vc.data(), *pps = pskip.data(), *pn2 = n2;
    std::vector<float> ms(na, 0.0f), vs(na, 0.0f);
    float *pms = ms.data(), *pvs = vs.data();
    emu_launch(dim3((na + 255) / 256), dim3(256), [=] {
        adamw_kernel<float>(ppc, (float *)NULL, pg2, pmc, pvc, na, lr, b1, b2, eps, 0, igs, pn2, clip, 1 - b1, 1 - b2);
    });
    emu_launch(dim3((na + 255) / 256), dim3(256), [=] {
        adamw_kernel<float>(pps, (float *)NULL, pg2, pms, pvs, na, lr, b1, b2, eps, 0, igs, pn2 + 1, clip, 1 - b1,
                            1 - b2);
    });
    float norm = sqrtf(ss) * igs, f = norm > clip ? igs * clip / norm : igs;
    double ec = 0, es = 0;
    for (size_t i = 0; i < na; i++) {
        float gi = gg[i] * f, mi = (1 - b1) * gi, vi = (1 - b2) * gi * gi;
        float q = pref[i] - lr * ((mi / (1 - b1)) / (sqrtf(vi / (1 - b2)) + eps));
        ec = std::max(ec, (double)fabs(q - pcl[i]));
        es = std::max(es, (double)fabs(pskip[i] - p[i]) + fabs(ms[i]) + fabs(vs[i]));
    }
    char an[128];
    snprintf(an, sizeof an, "AdamW clips on the device (norm %.2f to 1.0)", norm);
    report(an, ec, 1e-6);
    report("AdamW skips the update when the norm is inf", es, 0);

    // in-order sum over ranks' slots (stride 2) and the fill used for tests
    float slots[7] = {1.5f, 9, 2.25f, 9, -0.5f, 9, 0}, out1 = -1, *pslot = slots, *pout = &out1;
    emu_launch(dim3(1), dim3(1), [=] { strided_sum_kernel(pout, pslot, 3, 2); });
    emu_launch(dim3(1), dim3(32), [=] { fill_f32_kernel(pslot + 6, 4.0f, 1); });
    report("sum over ranks in rank order; fill", fabs(out1 - 3.25f) + fabs(slots[6] - 4.0f), 0);
}

int main()
{
    // fp32 storage: attention rounds to TF32 inside (relative ~1e-3)
    test_attention<float, 64>(2, 128, 2, 5e-3, "fp32/TF32");
    test_attention<float, 16>(1, 96, 2, 5e-3, "fp32/TF32"); // partial tile
    test_attention<bf16, 64>(2, 96, 2, 3e-2, "bf16");       // partial tile
    test_attention<bf16, 32>(1, 64, 3, 3e-2, "bf16");
    test_attention<bf16, 128>(1, 130, 1, 3e-2, "bf16");       // 3 tiles, 2 rows in the last
    test_attention<float, 128>(1, 100, 1, 5e-3, "fp32/TF32"); // W = 32 inner tiles, partial
    test_attention<fp16, 64>(1, 128, 1, 1e-2, "fp16");
    // 128-row tiles: two tiles with a partial second one (warps whose rows
    // are past a key tile skip it), a single partial tile, fp32/TF32
    test_attention<bf16, 64, 128>(1, 200, 2, 3e-2, "bf16");
    test_attention<fp16, 64, 128>(1, 128, 1, 1e-2, "fp16");
    test_attention<bf16, 32, 128>(2, 40, 1, 3e-2, "bf16");
    test_attention<bf16, 16, 128>(1, 256, 2, 3e-2, "bf16");
    test_attention<float, 32, 128>(1, 150, 1, 5e-3, "fp32/TF32");
    test_attention<float, 16, 128>(1, 96, 2, 5e-3, "fp32/TF32");
    test_layernorm<float, 0>(40, 96, 1e-5, "fp32");
    test_layernorm<bf16, 0>(300, 64, 2e-2, "bf16");
    test_layernorm<float, 1>(40, 96, 1e-5, "fp32");   // 24 vectors: lanes 24..31 idle
    test_layernorm<float, 3>(300, 272, 1e-5, "fp32"); // 68 vectors: a partial third round
    test_layernorm<bf16, 1>(300, 64, 2e-2, "bf16");
    test_layernorm<bf16, 2>(600, 320, 2e-2, "bf16"); // 3 row chunks of 256, 8 warps each
    test_classifier<float>(6, 300, 320, 1e-5, "fp32");
    test_classifier<bf16>(4, 300, 320, 2e-2, "bf16");
    test_misc();
    return failures ? 1 : 0;
}
