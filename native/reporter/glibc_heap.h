/* Blocks of glibc's malloc without a trailer (glibc_heap.c): an attached
 * process's blocks from before the attach.  Reporter side only. */
#ifndef MLK_GLIBC_HEAP_H
#define MLK_GLIBC_HEAP_H

#include <stdint.h>

#include "maps.h"

typedef void (*mlk_untrailed_fn)(void *ctx, uint64_t start, uint64_t usable);

/* Calls each(ctx, start, usable size) for every in-use chunk of the glibc
 * heaps among regions[0..n) ([heap], other arenas' heaps, blocks in a
 * mapping of their own) -- trailed or not: the caller tells them apart.
 * walked[i] says whether region i was walked as a heap (its gaps are free
 * memory then, not roots).  Returns the heaps walked, or -1. */
int64_t mlk_glibc_untrailed(int pid, const struct mlk_region *regions, int64_t n,
                            mlk_untrailed_fn each, void *ctx, uint8_t *walked);

#endif
