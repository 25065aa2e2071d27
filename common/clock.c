/* See clock.h. */
#include "clock.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double skiff_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double skiff_now_ms(void)
{
    return skiff_now_s() * 1e3;
}

void skiff_trace(bool on, const char *what)
{
    if (on)
        fprintf(stderr, "skiff-trace: %.3f %d %s\n", skiff_now_ms(), (int)getpid(), what);
}
