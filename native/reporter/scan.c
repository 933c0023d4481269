/* The reachability scan: which live blocks of a stopped process are
 * definitely lost, indirectly lost, possibly lost or still reachable --
 * valgrind memcheck's categories, by memcheck's rules (mc_leakcheck.c):
 *
 *   1. list the live blocks (list_blocks);
 *   2. the roots -- every thread's registers, every thread's stack from its
 *      stack pointer, and all other private writable memory that is not
 *      the heap (module data, TLS, the program's own mmaps) -- mark what
 *      they point to: a pointer to a block's first byte makes it reachable,
 *      a pointer into it makes it possibly lost (mark_from_roots);
 *   3. flood: what a reachable block points to at its start is reachable,
 *      anything else it reaches possibly lost (flood);
 *   4. the blocks still unreached, in address order, each lead a "clique":
 *      what they reach that nobody else reached is indirectly lost, and a
 *      leader not reached from an earlier one is definitely lost
 *      (mark_cliques).
 * Only aligned 8-byte words count; a block's extent is its requested size
 * (a zero-size block counts as one byte), as in memcheck.
 *
 * Listing the blocks costs the allocation hot path nothing: every block
 * libmtrace records carries a trailer whose check word is its address
 * XOR a per-process random key (native/hook/trailers.c).  Reading the
 * anonymous memory once and keeping each word w for which w ^ key is an
 * address a little below it finds every live block -- of glibc, jemalloc
 * or any allocator; a freed block's check word was cleared by its free.
 * Blocks kept without a trailer (a routed allocator's, or all of them
 * under track=table) are read from the hook's address table, and the
 * program's own blocks (memleak.h's custom blocks and pools) from the
 * hook's custom table.  A block that holds any of those is set aside, as
 * valgrind's leak check does: its bytes are the program's blocks, and
 * each of those is classified instead (drop_holders).
 *
 * Memory is read with process_vm_readv, blocks in batches of up to
 * BATCH_IOVS per call; pages never touched (/proc/PID/pagemap) are
 * skipped, so a large mostly-unused mapping costs little. */
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
#include "age.h"
#include "grow.h"
#include "headers.h"
#include "heuristics.h"
#include "maps.h"
#include "glibc_heap.h"
#include "scan.h"
#include "sorted.h"
#include "world.h"

#define EXPORT __attribute__((visibility("default")))

#define TRAILER_STACK_BITS MLK_TRAILER_STACK_BITS /* the format: native/trailer_format.h */
#define UNCOUNTED MLK_TRAILER_UNCOUNTED
#define OURS 0xfffffffeu /* block.stack of libmtrace's own blocks: followed, not counted */
#define BEFORE_ATTACH 0xfffffffdu /* an attached process's older block (glibc_heap.c) */
#define MAX_BLOCK_SPAN (1ull << 40)  /* a trailer further than this from its start is not one */
#define RED_ZONE 128                  /* below the stack pointer, still the function's (x86-64 ABI) */
#define CHUNK (1u << 20)              /* bytes read per call when streaming a region */
#define BATCH_IOVS 1024
#define BATCH_BYTES (4u << 20)
#define PAGE 4096ull
/* Most words of a big program are not heap addresses, but many fall
 * between the lowest and the highest block (a GC heap or an arena of the
 * program's own, mapped among glibc's): a bit per 1 MB granule that holds
 * a block -- hashed into 2^21 bits, 256 KB, which stay in cache -- turns
 * them away before the binary search. */
#define GRANULE_SHIFT 20
#define GRANULE_BITS 21
#define GRANULE_HASH(a) ((((a) >> GRANULE_SHIFT) * 0x9e3779b97f4a7c15ull) >> (64 - GRANULE_BITS))

/* Categories, in report order; also the flood's states (UNREACHED ends as
 * definitely lost). */
enum { UNREACHED = 0, INDIRECT = 1, POSSIBLE = 2, REACHABLE = 3 };

struct mlk_scan_totals {
    int64_t bytes[4];  /* definitely, indirectly, possibly lost, still reachable */
    int64_t blocks[4];
    int64_t heap_blocks;     /* blocks found */
    int64_t unattributed;    /* of them, blocks whose stack is not counted (trailer says so) */
    int64_t root_bytes;      /* bytes of roots read */
    int64_t heap_bytes_read; /* bytes of blocks read */
    int64_t threads;
    int64_t phase_ns[4];     /* listing the blocks, the roots, the flood, the cliques */
    int64_t heuristic_bytes[5], heuristic_blocks[5]; /* of the still reachable, by heuristic */
    int64_t before_bytes[4], before_blocks[4];       /* an attached process's older blocks */
    int64_t held_bytes, held_blocks; /* blocks set aside: they hold the program's own blocks */
};

struct scan {
    int pid;
    struct mlk_heuristics *heur;   /* valgrind's heuristics (heuristics.c), or NULL for none */
    struct mlk_headers *headers;   /* allocators' headers (headers.c), or NULL */
    int headers_learned;           /* after the first flood: follow() applies them */
    uint64_t own_lo, own_hi; /* libmtrace's own maps (native/hook/rt.c): not the program's */
    struct mlk_maps maps;     /* the process's mappings (maps.c) */
    struct mlk_block *blocks;
    int64_t nblocks, cap;
    uint64_t lowest, highest; /* of the blocks' extents: a cheap first filter */
    uint64_t *granules;       /* the second filter: a bit per (hashed) 1 MB that holds a block */
    struct mlk_block_index *index; /* address -> block (block_index.c) */
    int64_t *todo;            /* the flood's work stack (block indices) */
    int64_t ntodo, todo_cap;
    uint64_t *spans;          /* excluded from roots: mmapped chunks, [lo, hi) pairs */
    int64_t nspans, spans_cap;
    struct mlk_scan_totals *totals;
    char *buf;
    int unlisted_heap_is_root; /* MLK_SCAN_UNLISTED_HEAP_IS_ROOT */
    uint8_t *walked;          /* per region: its glibc chunks were all listed */
    int64_t ntrailed;         /* blocks found by trailer: sorted, before the older ones */
};

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

static void list_blocks(struct scan *s, uint64_t key, uint64_t table, uint64_t custom_table)
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

/* ---- 2.-4. marking ------------------------------------------------------- */

static int64_t block_at(const struct scan *s, uint64_t p)
{
    if (p < s->lowest || p >= s->highest)
        return -1;
    if (s->index)
        return mlk_block_index_find(s->index, s->blocks, s->nblocks, p);
    /* the last block starting at or below p (p < highest: p + 1 cannot wrap) */
    int64_t lo = mlk_lower_bound(s->blocks, s->nblocks, sizeof *s->blocks, p + 1);
    if (lo == 0)
        return -1;
    const struct mlk_block *b = &s->blocks[lo - 1];
    return p < b->start + (b->size ? b->size : 1) ? lo - 1 : -1;
}

static void push(struct scan *s, int64_t i)
{
    int64_t *todo = mlk_grow(s->todo, s->ntodo, &s->todo_cap, sizeof *todo, 4096);
    if (!todo)
        return; /* the block is not followed: what it reaches may look lost */
    s->todo = todo;
    s->todo[s->ntodo++] = i;
}

/* What a word found at a place of state `from` (REACHABLE for roots) does
 * to the block it points to.  clique >= 0: the clique pass. */
static inline void follow(struct scan *s, uint64_t word, int from, int64_t clique)
{
    int64_t i = block_at(s, word);
    if (i < 0)
        return;
    struct mlk_block *b = &s->blocks[i];
    if (clique >= 0) {
        if (b->state == UNREACHED && i != clique) {
            b->state = INDIRECT;
            push(s, i);
        }
        return;
    }
    if (b->state == REACHABLE) {
        if (b->heuristic && word == b->start)
            b->heuristic = MLK_HEUR_NONE; /* reached plainly after all */
        return;
    }
    int as_start = word == b->start;
    if (!as_start && s->heur) { /* an interior pointer valgrind's heuristics may accept */
        b->heuristic = (uint8_t)mlk_heuristic_reaches(s->heur, word, i, b);
        as_start = b->heuristic != MLK_HEUR_NONE;
    }
    if (!as_start && s->headers) { /* or the header of the block's allocator */
        if (!s->headers_learned)
            mlk_header_hit(b, word, from == REACHABLE);
        else if (from == REACHABLE && word - b->start == mlk_headers_offset(s->headers, b)) {
            b->heuristic = MLK_HEUR_HEADER;
            as_start = 1;
        }
    }
    if (as_start && from == REACHABLE) {
        b->state = REACHABLE;
        push(s, i);
    } else if (b->state == UNREACHED) {
        b->state = POSSIBLE;
        push(s, i);
    }
}

static void scan_words(struct scan *s, const uint64_t *w, size_t n, int from, int64_t clique)
{
    for (size_t i = 0; i < n; i++)
        if (w[i] - s->lowest < s->highest - s->lowest &&
            (!s->granules || (s->granules[GRANULE_HASH(w[i]) / 64] >> (GRANULE_HASH(w[i]) % 64) & 1)))
            follow(s, w[i], from, clique);
}

static void scan_root_run(void *ctx, uint64_t lo, uint64_t hi, void *unused)
{
    struct scan *s = ctx;
    lo = (lo + 7) & ~7ull;
    for (uint64_t at = lo; at + 8 <= hi; at += CHUNK) {
        size_t len = hi - at < CHUNK ? (size_t)(hi - at) : CHUNK;
        len &= ~(size_t)7;
        mlk_read_mem(s->pid, at, s->buf, len);
        s->totals->root_bytes += (int64_t)len;
        scan_words(s, (const uint64_t *)s->buf, len / 8, REACHABLE, -1);
    }
}

/* A root region less the spans of the heap inside it. */
static void scan_root(struct scan *s, uint64_t lo, uint64_t hi)
{
    for (int k = 0; k < s->nspans && lo < hi; k++) {
        uint64_t a = s->spans[2 * k], b = s->spans[2 * k + 1];
        if (b <= lo || a >= hi)
            continue;
        if (a > lo)
            scan_root(s, lo, a);
        lo = b;
    }
    if (lo < hi)
        mlk_touched_runs(&s->maps, lo, hi, scan_root_run, s, NULL);
}

/* An attached process's blocks from before the attach have no trailer;
 * glibc_heap.c lists them from glibc's chunk chains.  In a heap whose
 * chain could not be followed (another allocator, an unknown layout) they
 * stay unlisted, and one of them may hold the only pointer to a block made
 * since: there the heap between the listed blocks is read as a root
 * (conservative: a stale pointer in a free chunk may keep a block
 * reachable; nothing made since is called lost because an older block
 * points to it). */
static void scan_heap_between_blocks(struct scan *s, const struct mlk_region *r)
{
    int64_t lo = mlk_lower_bound(s->blocks, s->nblocks, sizeof *s->blocks, r->lo);
    uint64_t cursor = r->lo;
    for (int64_t i = lo; i < s->nblocks && s->blocks[i].start < r->hi; i++) {
        if (s->blocks[i].start > cursor)
            scan_root(s, cursor, s->blocks[i].start);
        if (s->blocks[i].end > cursor)
            cursor = s->blocks[i].end;
    }
    if (cursor < r->hi)
        scan_root(s, cursor, r->hi);
}

static int by_first_word(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What the program told the leak check (native/hook/api/lsan.c): the
 * blocks its ignored pointers point into are reachable, and its root
 * regions are roots.  Read as hostile input: bounded, and a region is read
 * only where the process has memory we scan. */
static void mark_told(struct scan *s, uint64_t lsan_table)
{
    uint64_t t[4]; /* struct mlk_lsan_table */
    if (!lsan_table || mlk_read_mem(s->pid, lsan_table, t, sizeof t) != sizeof t)
        return;
    uint64_t n = t[1] < (1u << 20) ? t[1] : (1u << 20);
    for (uint64_t at = 0; t[0] && at < n; at += CHUNK / 8) {
        size_t len = (size_t)((n - at < CHUNK / 8 ? n - at : CHUNK / 8) * 8);
        if (mlk_read_mem(s->pid, t[0] + at * 8, s->buf, len) != len)
            break;
        const uint64_t *p = (const uint64_t *)s->buf;
        for (size_t k = 0; k < len / 8; k++) {
            int64_t i = block_at(s, p[k]);
            if (i >= 0 && s->blocks[i].state != REACHABLE) {
                s->blocks[i].state = REACHABLE;
                push(s, i);
            }
        }
    }
    uint64_t nroots = t[3] < 4096 ? t[3] : 4096;
    uint64_t *regions = nroots && t[2] ? malloc(nroots * 16) : NULL;
    if (!regions || mlk_read_mem(s->pid, t[2], regions, nroots * 16) != nroots * 16) {
        free(regions);
        return;
    }
    /* Merged first, so that overlapping regions (forged ones: each the
     * whole address space) cost one read of the process's memory at most. */
    qsort(regions, (size_t)nroots, 16, by_first_word);
    uint64_t lo = 0, hi = 0;
    for (uint64_t k = 0; k <= nroots; k++) {
        if (k < nroots && regions[2 * k + 1] <= regions[2 * k])
            continue;
        if (k < nroots && regions[2 * k] <= hi && hi) {
            hi = regions[2 * k + 1] > hi ? regions[2 * k + 1] : hi;
            continue;
        }
        for (int r = 0; hi && r < s->maps.nregions; r++) { /* the part in each mapping we read */
            const struct mlk_region *m = &s->maps.regions[r];
            uint64_t a = lo > m->lo ? lo : m->lo, b = hi < m->hi ? hi : m->hi;
            if (a < b)
                scan_root(s, a, b);
        }
        if (k < nroots)
            lo = regions[2 * k], hi = regions[2 * k + 1];
    }
    free(regions);
}

static void mark_from_roots(struct scan *s, const struct mlk_world *w)
{
    /* Blocks not the program's (libmtrace's own, and those a thread made
     * while it asked for none to be recorded) are never lost: roots. */
    for (int64_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].stack == OURS && s->blocks[i].state != REACHABLE) {
            s->blocks[i].state = REACHABLE;
            push(s, i);
        }
    for (int t = 0; t < w->nthreads; t++) {
        const struct mlk_thread *th = &w->threads[t];
        scan_words(s, th->regs, (size_t)th->nregs, REACHABLE, -1);
        struct mlk_region *r = th->sp ? mlk_region_of(&s->maps, th->sp) : NULL;
        if (!r)
            continue; /* its stack pointer is nowhere we scan: registers only */
        uint64_t from = th->sp - RED_ZONE > r->lo ? th->sp - RED_ZONE : r->lo;
        if (!r->stack_of_thread || from < r->root_from) /* two threads on one stack: the lower */
            r->root_from = from;
        r->stack_of_thread = 1;
    }
    for (int i = 0; i < s->maps.nregions; i++) {
        struct mlk_region *r = &s->maps.regions[i];
        if (r->root && !r->heap)
            scan_root(s, r->root_from, r->hi);
        else if (r->heap && s->unlisted_heap_is_root && !(s->walked && s->walked[i]))
            scan_heap_between_blocks(s, r); /* not a heap glibc's chains describe */
    }
}

/* Scan the blocks on the work stack, and those they push, until none is
 * left: up to BATCH_IOVS blocks read in one call. */
static void flood(struct scan *s, int64_t clique)
{
    struct iovec local[BATCH_IOVS], remote[BATCH_IOVS];
    int64_t which[BATCH_IOVS];
    while (s->ntodo > 0) {
        int n = 0;
        size_t used = 0;
        while (s->ntodo > 0 && n < BATCH_IOVS) {
            struct mlk_block *b = &s->blocks[s->todo[s->ntodo - 1]];
            size_t len = (size_t)(b->size & ~7ull);
            if (n > 0 && used + len > BATCH_BYTES)
                break;
            which[n] = s->todo[--s->ntodo];
            if (len > BATCH_BYTES) { /* a big block: on its own, in pieces */
                for (uint64_t off = 0; off < len; off += BATCH_BYTES) {
                    size_t piece = len - off < BATCH_BYTES ? (size_t)(len - off) : BATCH_BYTES;
                    mlk_read_mem(s->pid, b->start + off, s->buf, piece);
                    s->totals->heap_bytes_read += (int64_t)piece;
                    scan_words(s, (const uint64_t *)s->buf, piece / 8, s->blocks[which[0]].state, clique);
                }
                n = -1;
                break;
            }
            local[n] = (struct iovec){s->buf + used, len};
            remote[n] = (struct iovec){(void *)(uintptr_t)b->start, len};
            used += len;
            n++;
        }
        if (n <= 0)
            continue;
        ssize_t got = process_vm_readv(s->pid, local, (unsigned long)n, remote, (unsigned long)n, 0);
        if (got != (ssize_t)used) /* some block unreadable: one at a time, zeros where not */
            for (int k = 0; k < n; k++)
                mlk_read_mem(s->pid, (uint64_t)(uintptr_t)remote[k].iov_base, local[k].iov_base,
                             local[k].iov_len);
        s->totals->heap_bytes_read += (int64_t)used;
        for (int k = 0; k < n; k++)
            scan_words(s, local[k].iov_base, local[k].iov_len / 8, s->blocks[which[k]].state, clique);
    }
}

/* The sites whose blocks are held through a header, learned from the
 * first flood: their blocks a reachable place points to at that offset
 * are reachable, and so is what they reach (a second flood). */
static void through_headers(struct scan *s)
{
    if (!mlk_headers_learn(s->headers, s->blocks, s->nblocks))
        return;
    s->headers_learned = 1;
    for (int64_t i = 0; i < s->nblocks; i++) {
        struct mlk_block *b = &s->blocks[i];
        if (b->state == POSSIBLE && (b->header & MLK_HEADER_FROM_REACHABLE) &&
            8u * (b->header & MLK_HEADER_OFFSET_MASK) == mlk_headers_offset(s->headers, b)) {
            b->state = REACHABLE;
            b->heuristic = MLK_HEUR_HEADER;
            push(s, i);
        }
    }
    flood(s, -1);
}

static void mark_cliques(struct scan *s)
{
    for (int64_t i = 0; i < s->nblocks; i++) {
        if (s->blocks[i].state != UNREACHED)
            continue;
        push(s, i);
        flood(s, i);
    }
}

/* ---- the scan ------------------------------------------------------------ */

/* Classify every live block of the stopped process w->pid.  per_stack:
 * nstacks rows of 8 (bytes then blocks of each category, in the order of
 * struct mlk_scan_totals), added to.  history (or NULL): what earlier
 * scans saw, for per_stack_age and bucket_seq (age.h); seq: the report
 * this scan goes into.  Returns 0, or -1 with `why` set. */
EXPORT int mlk_scan_heap(const struct mlk_world *w, uint64_t key, uint64_t table, uint64_t custom_table,
                         uint64_t lsan_table, uint64_t own_lo, uint64_t own_hi,
                         unsigned heuristics, int64_t nstacks, int64_t *per_stack,
                         struct mlk_scan_totals *totals,
                         struct mlk_age_history *history, uint32_t seq, int64_t *per_stack_age,
                         int32_t *bucket_seq, const struct mlk_scan_stacks *stacks, int64_t *header_sites,
                         int64_t header_cap, int64_t *nheader_sites, char *why, int why_len)
{
    struct scan s = {.pid = w->mem_pid, .own_lo = own_lo, .own_hi = own_hi, .totals = totals,
                     .unlisted_heap_is_root = (heuristics & MLK_SCAN_UNLISTED_HEAP_IS_ROOT) != 0};
    memset(totals, 0, sizeof *totals);
    *nheader_sites = 0;
    totals->threads = w->nthreads;
    s.buf = malloc(BATCH_BYTES > CHUNK ? BATCH_BYTES : CHUNK);
    if (!s.buf || mlk_maps_read(&s.maps, s.pid, own_lo, own_hi) != 0) {
        snprintf(why, (size_t)why_len, "cannot read the memory map of process %d", w->pid);
        free(s.buf);
        mlk_maps_free(&s.maps);
        return -1;
    }
    if (heuristics & MLK_HEUR_VALGRIND)
        s.heur = mlk_heuristics_new(s.pid, heuristics & MLK_HEUR_VALGRIND, s.maps.files, s.maps.nfiles);
    if ((heuristics & (1u << MLK_HEUR_HEADER)) && stacks)
        s.headers = mlk_headers_new(stacks->off, stacks->depth, stacks->n, stacks->frames, stacks->nframes);
    int64_t t0 = mlk_now_monotonic_ns();
    list_blocks(&s, key, table, custom_table);
    int64_t t1 = mlk_now_monotonic_ns();
    mark_from_roots(&s, w);
    mark_told(&s, lsan_table);
    int64_t t2 = mlk_now_monotonic_ns();
    flood(&s, -1);
    through_headers(&s);
    int64_t t3 = mlk_now_monotonic_ns();
    mark_cliques(&s);
    int64_t t4 = mlk_now_monotonic_ns();
    totals->phase_ns[0] = t1 - t0;
    totals->phase_ns[1] = t2 - t1;
    totals->phase_ns[2] = t3 - t2;
    totals->phase_ns[3] = t4 - t3;

    int64_t ours = 0;
    for (int64_t i = 0; i < s.nblocks; i++) {
        const struct mlk_block *b = &s.blocks[i];
        if (b->stack == OURS) {
            ours++;
            continue;
        }
        if (b->stack == BEFORE_ATTACH) {
            totals->before_bytes[b->state == UNREACHED ? 0 : b->state] += (int64_t)b->size;
            totals->before_blocks[b->state == UNREACHED ? 0 : b->state]++;
        }
        totals->bytes[b->state == UNREACHED ? 0 : b->state] += (int64_t)b->size;
        totals->blocks[b->state == UNREACHED ? 0 : b->state]++;
        if (b->state == REACHABLE && b->heuristic) { /* still reachable, by a heuristic */
            totals->heuristic_bytes[b->heuristic - 1] += (int64_t)b->size;
            totals->heuristic_blocks[b->heuristic - 1]++;
            if (b->heuristic == MLK_HEUR_HEADER)
                mlk_headers_count(s.headers, b);
        }
        if (b->stack < nstacks) {
            int64_t *row = &per_stack[b->stack * 8 + 2 * b->state];
            row[0] += (int64_t)b->size;
            row[1]++;
        } else if (b->stack != BEFORE_ATTACH) {
            totals->unattributed++;
        }
    }
    totals->heap_blocks = s.nblocks - ours;
    if (history) { /* the survivors view (age.c), from the blocks in address order */
        struct mlk_aged_block *aged = malloc((size_t)(s.nblocks ? s.nblocks : 1) * sizeof *aged);
        int64_t n = 0;
        for (int64_t i = 0; aged && i < s.nblocks; i++)
            if (s.blocks[i].stack != OURS && s.blocks[i].stack != BEFORE_ATTACH)
                aged[n++] = (struct mlk_aged_block){s.blocks[i].start, s.blocks[i].size,
                                                    s.blocks[i].stack};
        if (aged)
            mlk_age_update(history, aged, n, seq, nstacks, per_stack_age, bucket_seq);
        free(aged);
    }
    mlk_maps_free(&s.maps);
    free(s.buf);
    free(s.blocks);
    free(s.todo);
    free(s.spans);
    free(s.walked);
    free(s.granules);
    mlk_block_index_free(s.index);
    mlk_heuristics_free(s.heur);
    *nheader_sites = mlk_headers_list(s.headers, header_sites, header_cap);
    mlk_headers_free(s.headers);
    return 0;
}
