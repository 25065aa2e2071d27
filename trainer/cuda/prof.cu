// Per-op GPU timing; see prof.cuh. One recorder for the process: the
// benchmark profiles one model on one thread.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prof.cuh"

extern "C" {
#include "cuda_model.h"
}

int cuda_prof_enabled;

struct prof_rec {
    const char *key;
    char note[160];
    cudaEvent_t a, b;
    int open;
};

static struct prof_rec *recs;
static size_t nrecs, caprecs;
static long open_at = -1; // the record cuda_prof_end closes and notes attach to

int cuda_prof_begin_(cudaStream_t s, const char *key, skiff_err *err)
{
    if (nrecs == caprecs) {
        size_t nc = caprecs ? 2 * caprecs : 1024;
        struct prof_rec *n = (struct prof_rec *)realloc(recs, nc * sizeof(*n));
        if (!n) return skiff_error(err, ENOMEM, "profile records");
        recs = n;
        caprecs = nc;
    }
    struct prof_rec *r = &recs[nrecs];
    memset(r, 0, sizeof(*r));
    r->key = key;
    CUDA_CHECK(cudaEventCreate(&r->a));
    cudaError_t e = cudaEventCreate(&r->b);
    if (e != cudaSuccess) {
        cudaEventDestroy(r->a);
        CUDA_CHECK(e);
    }
    nrecs++; // owns its events from here on
    CUDA_CHECK(cudaEventRecord(r->a, s));
    r->open = 1;
    open_at = (long)nrecs - 1;
    return 0;
}

int cuda_prof_end_(cudaStream_t s, skiff_err *err)
{
    if (open_at < 0) return skiff_error(err, 0, "%s:%d: profile: no open op", __FILE__, __LINE__);
    struct prof_rec *r = &recs[open_at];
    open_at = -1;
    CUDA_CHECK(cudaEventRecord(r->b, s));
    r->open = 0;
    return 0;
}

void cuda_prof_note_(const char *fmt, ...)
{
    if (open_at < 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(recs[open_at].note, sizeof(recs[open_at].note), fmt, ap);
    va_end(ap);
}

static void prof_clear(void)
{
    for (size_t i = 0; i < nrecs; i++) {
        cudaEventDestroy(recs[i].a);
        cudaEventDestroy(recs[i].b);
    }
    free(recs);
    recs = NULL;
    nrecs = caprecs = 0;
    open_at = -1;
}

extern "C" int cuda_prof_start(skiff_err *)
{
    prof_clear();
    cuda_prof_enabled = 1;
    return 0;
}

// One line per key, in the order the step first ran it: calls and ms per
// step (totals over the profiled steps divided by `steps`), and the distinct
// notes of its GEMMs.
extern "C" int cuda_prof_report(FILE *out, int steps, skiff_err *err)
{
    cuda_prof_enabled = 0;
    int rc = 0;
    if (open_at >= 0) rc = skiff_error(err, 0, "profile: op '%s' was never closed", recs[open_at].key);
    // The last event recorded completes last on its stream; poll all of
    // them (a few hundred queries) so no stream is left unwaited.
    for (size_t i = 0; rc == 0 && i < nrecs; i++)
        rc = cuda_poll_event(recs[i].b, 300 * 1000, NULL, NULL, "profiled step", err);
    if (rc == 0) fprintf(out, "# op\tcalls/step\tms/step\tnotes (GEMM: shape, epilogue, cuBLASLt algorithm)\n");
    char *done = (char *)calloc(nrecs ? nrecs : 1, 1);
    if (!done && rc == 0) rc = skiff_error(err, ENOMEM, "profile report");
    for (size_t i = 0; rc == 0 && i < nrecs; i++) {
        if (done[i]) continue;
        double ms = 0;
        int calls = 0;
        char notes[1024] = "";
        size_t used = 0;
        for (size_t j = i; j < nrecs && rc == 0; j++) {
            if (done[j] || strcmp(recs[j].key, recs[i].key)) continue;
            done[j] = 1;
            float t = 0.0f;
            cudaError_t e = cudaEventElapsedTime(&t, recs[j].a, recs[j].b);
            if (e != cudaSuccess)
                rc = skiff_error(err, 0, "profile: %s: cudaEventElapsedTime: %s", recs[j].key, cudaGetErrorString(e));
            ms += t;
            calls++;
            if (recs[j].note[0] && !strstr(notes, recs[j].note) && used + strlen(recs[j].note) + 4 < sizeof(notes))
                used += (size_t)snprintf(notes + used, sizeof(notes) - used, "%s%s", used ? "; " : "", recs[j].note);
        }
        if (rc == 0)
            fprintf(out, "%s\t%.2f\t%.4f\t%s\n", recs[i].key, (double)calls / steps, ms / steps,
                    notes[0] ? notes : "-");
    }
    free(done);
    prof_clear();
    return rc;
}
