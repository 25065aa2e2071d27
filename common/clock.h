/* One monotonic clock for timeouts, deadlines and timing lines, in the two
 * units its callers print (the runtime's ms, the trainer's and importer's s). */
#ifndef SKIFF_CLOCK_H
#define SKIFF_CLOCK_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC in milliseconds. */
double skiff_now_ms(void);

/* The same clock in seconds. */
double skiff_now_s(void);

/* "skiff-trace: <monotonic ms> <pid> <what>" on stderr when on (the phase
 * timestamps of SKIFF_TRACE=1, for startup profiling). */
void skiff_trace(bool on, const char *what);

#ifdef __cplusplus
}
#endif

#endif
