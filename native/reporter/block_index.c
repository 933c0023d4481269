/* Address -> block, for the scan's flood (scan.h).  Blocks are sorted by
 * start and do not overlap.  Each 4 KB page a small block overlaps maps
 * to the run of blocks overlapping it (first index, count): a lookup is one
 * probe of an open-addressed table and a binary search over that run,
 * which lies in one or two cache lines of the block array.  Blocks bigger
 * than BIG would put thousands of pages in the table: they go in a list
 * of their own, searched when the page is not in the table. */
#include <stdlib.h>

#include "scan.h"
#include "sorted.h"

_Static_assert(offsetof(struct mlk_block, start) == 0, "mlk_lower_bound keys blocks by start");

#define PAGE_SHIFT 12
#define BIG (64u << 10)

struct slot {
    uint64_t page_plus1; /* 0: empty */
    int64_t first;
    int64_t count;
};

struct mlk_block_index {
    struct slot *slots;
    uint64_t mask;
    int64_t *big; /* indices of the big blocks, in address order */
    int64_t nbig;
};

static uint64_t hash(uint64_t page) { return (page * 0x9e3779b97f4a7c15ull) >> 17; }

static struct slot *slot_of(const struct mlk_block_index *ix, uint64_t page)
{
    for (uint64_t h = hash(page) & ix->mask;; h = (h + 1) & ix->mask) {
        struct slot *s = &ix->slots[h];
        if (s->page_plus1 == page + 1 || s->page_plus1 == 0)
            return s;
    }
}

static uint64_t extent_end(const struct mlk_block *b) { return b->start + (b->size ? b->size : 1); }

struct mlk_block_index *mlk_block_index_build(const struct mlk_block *blocks, int64_t n)
{
    struct mlk_block_index *ix = calloc(1, sizeof *ix);
    if (!ix)
        return NULL;
    uint64_t pages = 0;
    for (int64_t i = 0; i < n; i++) {
        if (blocks[i].size > BIG)
            ix->nbig++;
        else
            pages += ((extent_end(&blocks[i]) - 1) >> PAGE_SHIFT) - (blocks[i].start >> PAGE_SHIFT) + 1;
    }
    uint64_t cap = 64;
    while (cap < 2 * pages)
        cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    ix->big = malloc((size_t)(ix->nbig ? ix->nbig : 1) * sizeof *ix->big);
    if (!ix->slots || !ix->big) {
        mlk_block_index_free(ix);
        return NULL;
    }
    ix->mask = cap - 1;
    ix->nbig = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct mlk_block *b = &blocks[i];
        if (b->size > BIG) {
            ix->big[ix->nbig++] = i;
            continue;
        }
        for (uint64_t page = b->start >> PAGE_SHIFT; page <= (extent_end(b) - 1) >> PAGE_SHIFT; page++) {
            struct slot *s = slot_of(ix, page);
            if (!s->page_plus1)
                *s = (struct slot){page + 1, i, 0};
            s->count++; /* blocks come in address order: a page's run is contiguous */
        }
    }
    return ix;
}

void mlk_block_index_free(struct mlk_block_index *ix)
{
    if (!ix)
        return;
    free(ix->slots);
    free(ix->big);
    free(ix);
}

int64_t mlk_block_index_find(const struct mlk_block_index *ix, const struct mlk_block *blocks,
                             int64_t n, uint64_t p)
{
    const struct slot *s = slot_of(ix, p >> PAGE_SHIFT);
    if (s->page_plus1) {
        /* the last block of the run starting at or below p (p + 1 cannot
         * wrap: the caller asks only below the highest block's end) */
        int64_t lo = s->first + mlk_lower_bound(blocks + s->first, s->count, sizeof *blocks, p + 1);
        if (lo > s->first && p < extent_end(&blocks[lo - 1]))
            return lo - 1;
    }
    int64_t lo = 0, hi = ix->nbig;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (blocks[ix->big[mid]].start <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    (void)n;
    if (lo > 0 && p < extent_end(&blocks[ix->big[lo - 1]]))
        return ix->big[lo - 1];
    return -1;
}
