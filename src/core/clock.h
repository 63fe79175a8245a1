/* Monotonic wall clock in milliseconds, for timings and scheduling deadlines. */
#ifndef LS_CORE_CLOCK_H
#define LS_CORE_CLOCK_H

#include <time.h>

static inline double ls_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#endif
