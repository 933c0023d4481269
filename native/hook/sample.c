/* Sampling mode: the decision which allocations are recorded.
 *
 * A Poisson process over allocated bytes: every thread counts down a
 * distance drawn from an exponential distribution with mean
 * mlk_sample_bytes, and the allocation during which the count reaches zero
 * is recorded.  So an allocation of s bytes is recorded with probability
 * 1 - exp(-s / mlk_sample_bytes), independently of the others, which is
 * what the reporter divides by to estimate the real totals.  Unrecorded
 * allocations cost one thread-local subtraction (mlk_sample in mlk.h);
 * their frees are skipped by a filter in addrs.c. */
#define _GNU_SOURCE
#include <math.h>
#include <time.h>

#include "mlk.h"

uint64_t mlk_sample_bytes;
__thread int64_t mlk_sample_left __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng_state __attribute__((tls_model("initial-exec")));

static uint64_t next_random(void)
{
    if (MLK_UNLIKELY(rng_state == 0)) {
        uint64_t seed = mlk_now_ns(CLOCK_MONOTONIC) ^ (uint64_t)&rng_state ^
                        ((uint64_t)mlk_syscall6(186 /* gettid */, 0, 0, 0, 0, 0, 0) << 32);
        rng_state = seed | 1;
    }
    /* xorshift64*: fast, and plenty for choosing sample points. */
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

static int64_t draw_interval(void)
{
    double u = (double)((next_random() >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
    double d = -log(u) * (double)mlk_sample_bytes;
    if (d < 1)
        return 1;
    if (d > 4e18)
        return (int64_t)4e18;
    return (int64_t)d;
}

int mlk_sample_slow(size_t size)
{
    if (MLK_UNLIKELY(rng_state == 0)) {
        /* This thread's first allocation: start its countdown without
         * recording, so every thread's first allocation is not a sample. */
        mlk_sample_left = draw_interval();
        if (mlk_sample_countdown(size))
            return 0;
    }
    mlk_sample_left = draw_interval();
    return 1;
}
