/* The reachability scan, step 1: the live blocks of the stopped process --
 * found by their trailers in its anonymous memory, read from the hook's
 * address table and custom table, sorted, the holders of the program's own
 * blocks set aside, and indexed for the marking (scan.c has the whole
 * scan and why it lists blocks this way). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <stdint.h>

#include "../shm_layout.h"
#include "../trailer_format.h"
#include "grow.h"
#include "glibc_heap.h"
#include "sorted.h"
#include "world.h"

#include "scan_state.h"

/* ---- 1. the live blocks ---------------------------------------------------- */

static void add_block(struct scan *s, uint64_t start, uint64_t trailer, uint64_t meta)
{
    uint32_t stack = mlk_trailer_stack_of(meta);
    uint64_t size = stack == UNCOUNTED ? meta >> TRAILER_STACK_BITS : mlk_trailer_size_of(meta);
    if (meta == MLK_TRAILER_OURS_META)
        stack = OURS;
    if (stack == UNCOUNTED && (meta & MLK_TRAILER_SIZED) && (size & MLK_TRAILER_SIZE_MASK) <= trailer - start)
        size &= MLK_TRAILER_SIZE_MASK; /* made before collection: its size is kept */
    else if (stack >= UNCOUNTED)
        size = trailer - start; /* its size is not kept: at most this */
    else if (start + size > trailer || trailer - (start + size) > size + 2 * PAGE)
        return; /* not where its own trailer would be: a stale copy */
    struct mlk_block *blocks = mlk_grow(s->blocks, s->nblocks, &s->cap, sizeof *blocks, 65536);
    if (!blocks)
        return;
    s->blocks = blocks;
    s->blocks[s->nblocks++] = (struct mlk_block){start, size, trailer + 16, stack, UNREACHED, 0, 0, 0};
}

struct trailer_walk {
    uint64_t key;
    uint64_t prev;  /* the word before the current one (a trailer's meta) */
};

static void find_trailers(void *ctx, uint64_t lo, uint64_t hi, void *arg)
{
    struct scan *s = ctx;
    struct trailer_walk *t = arg;
    t->prev = 0;
    for (uint64_t at = lo; at < hi; at += CHUNK) {
        size_t len = hi - at < CHUNK ? (size_t)(hi - at) : CHUNK;
        mlk_read_mem(s->pid, at, s->buf, len);
        const uint64_t *w = (const uint64_t *)s->buf;
        for (size_t i = 0; i < len / 8; i++) {
            uint64_t x = at + 8 * i, start = w[i] ^ t->key;
            /* the check word sits 8 bytes into the trailer; the block starts below */
            if (start < x - 8 && x - 8 - start < MAX_BLOCK_SPAN && !(start & 7) && start >= s->lowest)
                add_block(s, start, x - 8, i ? w[i - 1] : t->prev);
        }
        t->prev = len >= 8 ? w[len / 8 - 1] : 0;
    }
}

static int by_start(const void *a, const void *b)
{
    const struct mlk_block *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? 1 : -1; /* the larger extent first */
    return (int)x->custom - (int)y->custom; /* a block over the same bytes as the program's holds it */
}

/* Sorted and without overlaps.  A block whose extent lies inside
 * another's is a stale trailer in the other's bytes (a block freed behind
 * libmtrace's back, its memory reused): the outer one is the live block. */
static void drop_stale(struct scan *s)
{
    qsort(s->blocks, (size_t)s->nblocks, sizeof *s->blocks, by_start);
    int64_t kept = 0;
    for (int64_t i = 0; i < s->nblocks; i++) {
        if (kept && s->blocks[i].start < s->blocks[kept - 1].end)
            continue;
        s->blocks[kept++] = s->blocks[i];
    }
    s->nblocks = kept;
}

/* The program's own blocks lie inside blocks of the allocator's (a pool's
 * superblocks) or of a metapool's: every block that holds one is set
 * aside -- counted in held_*, classified in no category -- so that the
 * scan sees the program's blocks, none twice (valgrind: "every mempool
 * chunk, and every malloc region that doesn't contain one").  They were
 * appended after the others; on return all are sorted, without overlaps. */
static void drop_holders(struct scan *s, int64_t first_custom)
{
    if (first_custom == s->nblocks)
        return;
    qsort(s->blocks, (size_t)s->nblocks, sizeof *s->blocks, by_start);
    /* Sorted by start, the larger extent first: a holder comes before the
     * blocks inside it, so each block is tested against the next custom
     * one that starts at or after it. */
    int64_t kept = 0, next_custom = s->nblocks;
    uint8_t *holds = calloc((size_t)s->nblocks, 1);
    if (!holds)
        return;
    for (int64_t i = s->nblocks - 1; i >= 0; i--) {
        struct mlk_block *b = &s->blocks[i];
        if (next_custom < s->nblocks && s->blocks[next_custom].start < b->end)
            holds[i] = 1;
        if (b->custom)
            next_custom = i;
    }
    for (int64_t i = 0; i < s->nblocks; i++) {
        struct mlk_block *b = &s->blocks[i];
        if (holds[i]) {
            s->totals->held_bytes += (int64_t)b->size;
            s->totals->held_blocks++;
            continue;
        }
        /* Two of the program's blocks that overlap without one holding the
         * other (a misannounced pool): the first stays. */
        if (kept && b->start < s->blocks[kept - 1].end)
            continue;
        s->blocks[kept++] = *b;
    }
    free(holds);
    s->nblocks = kept;
}

/* The address index and the filters over the final blocks. */
static void index_blocks(struct scan *s)
{
    int64_t kept = s->nblocks;
    s->lowest = kept ? s->blocks[0].start : 0;
    s->highest = kept ? s->blocks[kept - 1].end : 0;
    s->index = mlk_block_index_build(s->blocks, kept); /* NULL (no memory): binary search */
    s->granules = calloc((1u << GRANULE_BITS) / 64, sizeof *s->granules);
    for (int64_t i = 0; s->granules && i < kept; i++) {
        const struct mlk_block *b = &s->blocks[i];
        uint64_t last = (b->start + (b->size ? b->size : 1) - 1) >> GRANULE_SHIFT;
        for (uint64_t g = b->start >> GRANULE_SHIFT; g <= last; g++) {
            uint64_t h = GRANULE_HASH(g << GRANULE_SHIFT);
            s->granules[h / 64] |= 1ull << (h % 64);
        }
    }
}

static void exclude_span(struct scan *s, uint64_t lo, uint64_t hi)
{
    uint64_t *spans = mlk_grow(s->spans, s->nspans, &s->spans_cap, 2 * sizeof *spans, 256);
    if (!spans)
        return;
    s->spans = spans;
    s->spans[2 * s->nspans] = lo;
    s->spans[2 * s->nspans + 1] = hi;
    s->nspans++;
}

/* Which memory is the heap (its bytes are scanned only as blocks, never
 * as roots): the [heap] mapping; a block that glibc mmapped on its own,
 * exactly its chunk (the kernel may merge that mapping with a neighbour
 * of the program's); any other mapping that holds blocks (glibc's other
 * arenas, jemalloc's extents), whole. */
static void mark_heap(struct scan *s)
{
    for (int64_t i = 0; i < s->nblocks; i++) {
        struct mlk_block *b = &s->blocks[i];
        struct mlk_region *r = mlk_region_of(&s->maps, b->start);
        if (!r || r->heap)
            continue;
        uint64_t header[2]; /* glibc's chunk header: prev_size, size | flags */
        if (b->start >= 16 && mlk_read_mem(s->pid, b->start - 16, header, 16) == 16) {
            uint64_t chunk = b->start - 16, size = header[1] & ~7ull, before = header[0];
            if ((header[1] & 2) && !((chunk - before) % PAGE) && !((size + before) % PAGE) &&
                chunk - before >= r->lo && chunk + size <= r->hi && b->end <= chunk + size) {
                exclude_span(s, chunk - before, chunk + size);
                continue;
            }
        }
        r->heap = 1;
    }
}

/* An in-use chunk of glibc's: a block from before the attach unless a
 * trailer listed it already. */
static void add_untrailed(void *ctx, uint64_t start, uint64_t usable)
{
    struct scan *s = ctx;
    int64_t i = mlk_lower_bound(s->blocks, s->ntrailed, sizeof *s->blocks, start);
    if (i < s->ntrailed && s->blocks[i].start == start)
        return;
    struct mlk_block *blocks = mlk_grow(s->blocks, s->nblocks, &s->cap, sizeof *blocks, 65536);
    if (!blocks)
        return;
    s->blocks = blocks;
    s->blocks[s->nblocks++] = (struct mlk_block){start, usable, start + usable, BEFORE_ATTACH, UNREACHED, 0, 0, 0};
}

/* A block a table of the hook's lists (the process writes the tables):
 * taken when it lies in the process's writable memory, from its start to
 * its end -- a forged table (or slots read on past a table's end) would
 * otherwise have the scan read terabytes of nothing.  0: out of memory. */
static int list_block(struct scan *s, uint64_t start, uint64_t size, uint32_t stack, int custom)
{
    if (start < 4096 || size >= MAX_BLOCK_SPAN || start + size < start)
        return 1;
    if (!mlk_region_of(&s->maps, start) || !mlk_region_of(&s->maps, start + (size ? size : 1) - 1))
        return 1;
    struct mlk_block *blocks = mlk_grow(s->blocks, s->nblocks, &s->cap, sizeof *blocks, 65536);
    if (!blocks)
        return 0;
    s->blocks = blocks;
    s->blocks[s->nblocks++] = (struct mlk_block){start, size, start + (size ? size : 1), stack, UNREACHED, 0, 0,
                                                 (uint8_t)custom};
    return 1;
}

/* The blocks kept in the hook's address table, not by trailer (a routed
 * allocator's: native/hook/route/): read from its shards (shm_layout.h
 * addr_table), each bounded -- the process writes them. */
static void add_table_blocks(struct scan *s, uint64_t table)
{
    uint8_t shards[MLK_ADDR_SHARDS * MLK_ADDR_SHARD_BYTES];
    if (!table || mlk_read_mem(s->pid, table, shards, sizeof shards) != sizeof shards)
        return;
    for (int i = 0; i < MLK_ADDR_SHARDS; i++) {
        uint64_t slots, mask;
        memcpy(&slots, shards + i * MLK_ADDR_SHARD_BYTES + MLK_ADDR_SLOTS_AT, 8);
        memcpy(&mask, shards + i * MLK_ADDR_SHARD_BYTES + MLK_ADDR_MASK_AT, 8);
        if (!slots || mask >= (1ull << 32) || (mask & (mask + 1)))
            continue; /* empty, or not a table's mask */
        uint64_t bytes = (mask + 1) * 16;
        for (uint64_t at = 0; at < bytes; at += CHUNK) {
            size_t len = bytes - at < CHUNK ? (size_t)(bytes - at) : CHUNK;
            if (mlk_read_mem(s->pid, slots + at, s->buf, len) != len)
                break;
            const uint64_t *w = (const uint64_t *)s->buf;
            for (size_t k = 0; k + 1 < len / 8; k += 2) {
                uint64_t start = w[k], size = w[k + 1] >> MLK_ADDR_STACK_BITS;
                uint32_t stack = (uint32_t)(w[k + 1] & ((1u << MLK_ADDR_STACK_BITS) - 1));
                if (!(start & 7) && !list_block(s, start, size, stack, 0))
                    return;
            }
        }
    }
}

/* The program's own blocks (native/hook/api/custom.c, shm_layout.h
 * custom_table): read like the address table, as hostile input. */
static void add_custom_blocks(struct scan *s, uint64_t custom_table)
{
    uint64_t where[2]; /* the node array, nodes ever used */
    if (!custom_table || mlk_read_mem(s->pid, custom_table, where, sizeof where) != sizeof where)
        return;
    if (!where[0] || where[1] > (1ull << 30))
        return;
    uint64_t bytes = where[1] * MLK_CUSTOM_NODE_BYTES;
    for (uint64_t at = 0; at < bytes; at += CHUNK - CHUNK % MLK_CUSTOM_NODE_BYTES) {
        uint64_t step = CHUNK - CHUNK % MLK_CUSTOM_NODE_BYTES;
        size_t len = bytes - at < step ? (size_t)(bytes - at) : (size_t)step;
        if (mlk_read_mem(s->pid, where[0] + at, s->buf, len) != len)
            break;
        for (size_t k = 0; k + MLK_CUSTOM_NODE_BYTES <= len; k += MLK_CUSTOM_NODE_BYTES) {
            uint64_t start, size;
            uint32_t stack;
            memcpy(&start, s->buf + k, 8);
            memcpy(&size, s->buf + k + 8, 8);
            memcpy(&stack, s->buf + k + 16, 4);
            if (!list_block(s, start, size, stack, 1))
                return;
        }
    }
}

void mlk_scan_list_blocks(struct scan *s, uint64_t key, uint64_t table, uint64_t custom_table)
{
    struct trailer_walk t = {key, 0};
    s->lowest = 4096;
    for (int i = 0; key && i < s->maps.nregions; i++)
        if (s->maps.regions[i].anon)
            mlk_touched_runs(&s->maps, s->maps.regions[i].lo, s->maps.regions[i].hi, find_trailers, s, &t);
    add_table_blocks(s, table);
    if (s->unlisted_heap_is_root) { /* attached: the blocks from before, from glibc's chains */
        qsort(s->blocks, (size_t)s->nblocks, sizeof *s->blocks, by_start);
        s->ntrailed = s->nblocks;
        s->walked = calloc((size_t)(s->maps.nregions ? s->maps.nregions : 1), 1);
        if (s->walked)
            mlk_glibc_untrailed(s->pid, s->maps.regions, s->maps.nregions, add_untrailed, s, s->walked);
    }
    drop_stale(s);
    mark_heap(s); /* the holders too: the heap is not a root, held or not */
    int64_t first_custom = s->nblocks;
    add_custom_blocks(s, custom_table);
    drop_holders(s, first_custom);
    index_blocks(s);
}
