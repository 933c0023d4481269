/* What the reachability scan's parts share (reporter side only). */
#ifndef MLK_SCAN_H
#define MLK_SCAN_H

#include <stdint.h>

/* One live block the scan found. */
struct mlk_block {
    uint64_t start, size, end; /* end: past its trailer (the extent it occupies) */
    uint32_t stack;
    uint8_t state;
    uint8_t heuristic; /* MLK_HEUR_* that made it reachable (heuristics.h), or 0 */
    uint8_t header;    /* where it was first pointed into (headers.h), or 0 */
    uint8_t custom;    /* one of the program's own blocks (memleak.h, valgrind's MALLOCLIKE/MEMPOOL) */
};

/* Which block holds an address: a hash of 4 KB pages to the blocks that
 * overlap each (block_index.c), so that following a pointer costs a hash
 * probe and a search among a page's few blocks instead of a binary search
 * over all of them -- the flood follows every heap pointer of the heap. */
struct mlk_block_index;

struct mlk_block_index *mlk_block_index_build(const struct mlk_block *blocks, int64_t n);
void mlk_block_index_free(struct mlk_block_index *ix);
/* The index of the block whose [start, start + max(size, 1)) holds p, or -1. */
int64_t mlk_block_index_find(const struct mlk_block_index *ix, const struct mlk_block *blocks,
                             int64_t n, uint64_t p);

/* Where the frames of each stack id are, in the segment: what the scan
 * groups blocks by allocation site with (headers.c). */
struct mlk_scan_stacks {
    const int64_t *off, *depth; /* per stack id */
    int64_t n;
    const uint64_t *frames;
    uint64_t nframes;
};

#endif
