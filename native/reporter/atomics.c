/* Atomic operations on the shared segment for the reporter's Python side,
 * which has none of its own (libmemleak/daemon/recorder.py: which of the
 * reporters that hold a segment drains its event pool). */
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

/* Sets *word to desired if it holds expected; returns what it held. */
EXPORT uint32_t mlk_cas_u32(uint32_t *word, uint32_t expected, uint32_t desired)
{
    __atomic_compare_exchange_n(word, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;
}

