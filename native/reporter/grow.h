/* Growing an array by doubling: the reporter's C keeps its lists (blocks,
 * the flood's work, spans, mappings, threads) this way. */
#ifndef MLK_GROW_H
#define MLK_GROW_H

#include <stdint.h>
#include <stdlib.h>

/* `array` (n elements of elem bytes, room for *cap) with room for one more:
 * itself, or moved to twice the room (`first` the first time).  NULL when
 * out of memory; `array` and *cap are then as they were. */
static inline void *mlk_grow(void *array, int64_t n, int64_t *cap, size_t elem, int64_t first)
{
    if (n < *cap)
        return array;
    int64_t want = *cap ? 2 * *cap : first;
    void *more = realloc(array, (size_t)want * elem);
    if (more)
        *cap = want;
    return more;
}

#endif
