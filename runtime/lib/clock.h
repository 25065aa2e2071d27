/* One monotonic clock for timeouts and timing lines. */
#ifndef SKIFF_CLOCK_H
#define SKIFF_CLOCK_H

/* CLOCK_MONOTONIC in milliseconds. */
double skiff_now_ms(void);

#endif
