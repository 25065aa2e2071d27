/* See clock.h. */
#include "clock.h"

#include <time.h>

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
