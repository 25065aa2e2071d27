// Per-op GPU times of a training step (`gpu_tool bench --ops FILE`): while
// profiling is on, every op of the step is bracketed by two CUDA events on
// the stream it runs on and named by a key that the cost model
// (tests/gpu/budget.c) uses for the same op, so one run on a GPU measures
// what each efficiency of the model assumes. GEMMs add a note: their shape,
// epilogue and the cuBLASLt algorithm the heuristic picked (tile, split-K,
// stages). Off by default: then cuda_prof_begin/end/note only test a flag.
// The timed steps of a benchmark run with it off; a few extra steps are
// profiled after them (event records between launches cost a little).
#ifndef SKIFF_CUDA_PROF_CUH
#define SKIFF_CUDA_PROF_CUH

#include "common.cuh"

extern int cuda_prof_enabled;

// Opens op `key` (a string literal: it is kept, not copied) on stream s.
int cuda_prof_begin_(cudaStream_t s, const char *key, skiff_err *err);
// Closes the op opened last.
int cuda_prof_end_(cudaStream_t s, skiff_err *err);
// printf-style note attached to the op opened last (once per distinct text).
void cuda_prof_note_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define cuda_prof_begin(s, key) (cuda_prof_enabled ? cuda_prof_begin_((s), (key), err) : 0)
#define cuda_prof_end(s) (cuda_prof_enabled ? cuda_prof_end_((s), err) : 0)
#define cuda_prof_note(...)                                                                                            \
    do {                                                                                                               \
        if (cuda_prof_enabled) cuda_prof_note_(__VA_ARGS__);                                                           \
    } while (0)

// TRY(call) bracketed as op `key` on stream s.
#define PROF(s, key, ...)                                                                                              \
    do {                                                                                                               \
        TRY(cuda_prof_begin((s), (key)));                                                                              \
        TRY(__VA_ARGS__);                                                                                              \
        TRY(cuda_prof_end(s));                                                                                         \
    } while (0)

#endif
