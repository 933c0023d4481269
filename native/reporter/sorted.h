/* Searching the reporter's sorted arrays (blocks by start, glibc's chunks
 * by address): elements of `stride` bytes, each starting with the uint64_t
 * they are sorted by. */
#ifndef MLK_SORTED_H
#define MLK_SORTED_H

#include <stddef.h>
#include <stdint.h>

/* The index of the first of the n elements at `base` whose key is at least
 * `key` (n if none).  Elements with a key below `key + 1` (the last at or
 * below key) end at the index mlk_lower_bound(..., key + 1) - 1. */
static inline int64_t mlk_lower_bound(const void *base, int64_t n, size_t stride, uint64_t key)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (*(const uint64_t *)((const char *)base + (size_t)mid * stride) < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

#endif
