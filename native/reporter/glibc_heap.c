/* The blocks of glibc's malloc that carry no trailer -- an attached
 * process's blocks from before the attach -- found by walking the chunk
 * chains of its heaps, so that the scan can classify them too.
 *
 * glibc keeps every chunk of a heap in one chain: a chunk's second word is
 * its size (a multiple of 16) with flag bits, the next chunk starts that
 * many bytes on, and a chunk is in use when the next one's PREV_INUSE bit
 * (1) is set.  The main arena's heap is [heap], from its start; every other
 * arena's heaps are mappings that start with glibc's heap_info (and, for an
 * arena's first heap, the arena itself) before the first chunk -- where
 * exactly depends on glibc's version, so each likely place is tried and a
 * chain is believed only if it runs, chunk by chunk, exactly to the heap's
 * end.  A block too big for the heaps is a mapping of its own whose first
 * words are a chunk header with IS_MMAPPED (2).
 *
 * Free chunks that glibc caches without marking them free (the per-thread
 * tcache, the arenas' fastbins) look in use from the chain, and their
 * links are mangled (safe-linking: the pointer XOR its own address >> 12),
 * so the flood could not follow them: they would look lost.  They are
 * found and left out: each tcache (a 0x290-byte chunk of 64 counts and 64
 * list heads, the first chunk a thread's arena gives) and each arena's
 * fastbins (a non-main arena's address is in its heaps' heap_info; the
 * main arena is found in the C library's data as the structure whose top
 * pointer is [heap]'s last chunk), their lists followed unmangled. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "glibc_heap.h"
#include "grow.h"
#include "sorted.h"
#include "world.h"

#define PREV_INUSE 1ull
#define IS_MMAPPED 2ull
#define FLAGS 7ull
#define MIN_CHUNK 32
#define WINDOW (64 * 1024)
#define PAGE 4096ull
#define TCACHE_CHUNK 0x290ull      /* 64 uint16 counts + 64 pointers + the header */
#define TCACHE_BINS 64
#define TCACHE_MAX_COUNT 65535
#define FASTBINS 10
#define ARENA_TOP 96               /* offsetof(struct malloc_state, top), 64-bit */
#define ARENA_FASTBINS 16
#define LIST_MAX 100000            /* a list longer than this is not one */

struct chunk {
    uint64_t at, size; /* chunk address (header), chunk size */
    int free;          /* cached by glibc: not a block */
};

struct chunks {
    struct chunk *v;
    int64_t n, cap;
    uint64_t main_top;  /* [heap]'s last chunk, for finding the main arena */
};

/* Forward reads of one process's memory through a window. */
struct reader {
    int pid;
    uint64_t lo, len;
    unsigned char buf[WINDOW];
};

static int word_at(struct reader *r, uint64_t addr, uint64_t *out)
{
    if (addr < r->lo || addr + 8 > r->lo + r->len) {
        r->lo = addr & ~(PAGE - 1);
        r->len = mlk_read_mem(r->pid, r->lo, r->buf, WINDOW) == WINDOW ? WINDOW : 0;
        if (!r->len) { /* near a mapping's end: a page at a time */
            r->len = mlk_read_mem(r->pid, r->lo, r->buf, PAGE) == PAGE ? PAGE : 0;
            if (!r->len)
                return -1;
        }
    }
    memcpy(out, r->buf + (addr - r->lo), 8);
    return 0;
}

/* Whether the chain from `first` runs to exactly `end` (a heap extended
 * into a new mapping ends its old part with a 16-byte fencepost and a
 * 0-sized one: that is an end too). */
static int chain_holds(struct reader *r, uint64_t first, uint64_t end)
{
    uint64_t at = first, size;
    while (at < end) {
        if (word_at(r, at + 8, &size) != 0)
            return 0;
        size &= ~FLAGS;
        if (size == 0)
            return end - at <= 2 * MIN_CHUNK;
        if (size % 16 || at + size > end)
            return 0;
        at += size;
    }
    return at == end;
}

static void add_chunk(struct chunks *c, uint64_t at, uint64_t size)
{
    struct chunk *v = mlk_grow(c->v, c->n, &c->cap, sizeof *v, 4096);
    if (!v)
        return;
    c->v = v;
    c->v[c->n++] = (struct chunk){at, size, 0};
}

/* The in-use chunks of one chain; returns the last chunk (the top). */
static uint64_t walk_chain(struct reader *r, uint64_t first, uint64_t end, struct chunks *c)
{
    uint64_t at = first, size, next_size;
    while (at < end) {
        if (word_at(r, at + 8, &size) != 0 || (size & ~FLAGS) == 0)
            return at;
        size &= ~FLAGS;
        uint64_t next = at + size;
        if (next >= end || word_at(r, next + 8, &next_size) != 0)
            return at; /* the last chunk is the top: free */
        if ((next_size & PREV_INUSE) && size >= MIN_CHUNK)
            add_chunk(c, at, size);
        at = next;
    }
    return at;
}

_Static_assert(offsetof(struct chunk, at) == 0, "mlk_lower_bound keys chunks by address");

static int64_t chunk_at(const struct chunks *c, uint64_t at)
{
    int64_t i = mlk_lower_bound(c->v, c->n, sizeof *c->v, at);
    return i < c->n && c->v[i].at == at ? i : -1;
}

/* Mark free the chunks of one cached list: `head` a chunk address, each
 * link the next chunk's user pointer (tcache) or chunk address (fastbins)
 * stored mangled at the chunk's user pointer. */
static void mark_list(struct reader *r, struct chunks *c, uint64_t head, uint64_t link_to_chunk)
{
    uint64_t at = head, stored;
    for (int steps = 0; at && steps < LIST_MAX; steps++) {
        int64_t i = chunk_at(c, at);
        if (i < 0 || c->v[i].free)
            return;
        c->v[i].free = 1;
        if (word_at(r, at + 16, &stored) != 0)
            return;
        uint64_t next = ((at + 16) >> 12) ^ stored; /* safe-linking, glibc 2.32+ */
        at = next ? next - link_to_chunk : 0;
    }
}

static void mark_tcaches(struct reader *r, struct chunks *c)
{
    for (int64_t i = 0; i < c->n; i++) {
        if (c->v[i].size != TCACHE_CHUNK)
            continue;
        uint64_t base = c->v[i].at + 16, words[16 + TCACHE_BINS];
        int ok = 1, listed = 0;
        for (int k = 0; ok && k < 16 + TCACHE_BINS; k++)
            ok = word_at(r, base + 8 * (uint64_t)k, &words[k]) == 0;
        for (int b = 0; ok && b < TCACHE_BINS; b++) {
            uint16_t count = (uint16_t)(words[b / 4] >> (16 * (b % 4)));
            uint64_t head = words[16 + b];
            /* each list head is a cached chunk's user pointer, or 0 with a count of 0 */
            if ((count == 0) != (head == 0) || (head && chunk_at(c, head - 16) < 0))
                ok = 0;
            listed += count != 0;
        }
        if (!ok || !listed)
            continue;
        for (int b = 0; b < TCACHE_BINS; b++)
            if (words[16 + b])
                mark_list(r, c, words[16 + b] - 16, 16);
    }
}

static void mark_fastbins(struct reader *r, struct chunks *c, uint64_t arena)
{
    for (int b = 0; b < FASTBINS; b++) {
        uint64_t head;
        if (word_at(r, arena + ARENA_FASTBINS + 8 * (uint64_t)b, &head) == 0 && head)
            mark_list(r, c, head, 0);
    }
}

/* The main arena: in the C library's data, the structure whose top
 * pointer is [heap]'s last chunk (and whose fastbins are empty or in it). */
static uint64_t find_main_arena(struct reader *r, const struct chunks *c, const struct mlk_region *regions,
                                int64_t n, uint64_t top)
{
    for (int64_t i = 0; top && i < n; i++) {
        const struct mlk_region *g = &regions[i];
        if (g->anon || g->hi - g->lo > 64 * PAGE)
            continue; /* the C library's .data/.bss: small, file-backed */
        for (uint64_t at = g->lo + ARENA_TOP; at + 8 <= g->hi; at += 8) {
            uint64_t w;
            if (word_at(r, at, &w) != 0 || w != top)
                continue;
            uint64_t arena = at - ARENA_TOP, f;
            int ok = 1;
            for (int b = 0; ok && b < FASTBINS; b++)
                ok = word_at(r, arena + ARENA_FASTBINS + 8 * (uint64_t)b, &f) == 0 &&
                     (f == 0 || chunk_at(c, f) >= 0);
            if (ok)
                return arena;
        }
    }
    return 0;
}

/* Where a non-main heap's chain may start: after heap_info (32 or 48
 * bytes by glibc's version) and, in an arena's first heap, the arena
 * (struct malloc_state, 2200 bytes on 64-bit), 16-aligned for the user
 * pointer; then every 16 bytes of the first page. */
static uint64_t heap_start(struct reader *r, uint64_t lo, uint64_t end)
{
    static const uint64_t likely[] = {2240, 2256, 32, 48};
    for (size_t i = 0; i < sizeof likely / sizeof likely[0]; i++)
        if (lo + likely[i] < end && chain_holds(r, lo + likely[i], end))
            return lo + likely[i];
    for (uint64_t off = 16; off < PAGE && lo + off < end; off += 16)
        if (chain_holds(r, lo + off, end))
            return lo + off;
    return 0;
}

int64_t mlk_glibc_untrailed(int pid, const struct mlk_region *regions, int64_t n,
                            mlk_untrailed_fn each, void *ctx, uint8_t *walked)
{
    struct reader *r = malloc(sizeof *r);
    struct chunks c = {0};
    uint64_t arenas[64];
    int narenas = 0;
    if (!r)
        return -1;
    r->pid = pid, r->lo = 0, r->len = 0;
    int64_t heaps = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct mlk_region *g = &regions[i];
        walked[i] = 0;
        if (!g->anon)
            continue;
        uint64_t first = 0, end = g->hi, w0, w1, w2;
        int brk_heap = g->heap; /* before the scan marks any other: [heap] itself */
        if (brk_heap) {
            first = chain_holds(r, g->lo, g->hi) ? g->lo : 0;
        } else if (word_at(r, g->lo, &w0) == 0 && word_at(r, g->lo + 8, &w1) == 0) {
            if ((w1 & IS_MMAPPED) && w0 % 16 == 0 && (w1 & ~FLAGS) % PAGE == 0 && (w1 & ~FLAGS) &&
                g->lo + w0 + (w1 & ~FLAGS) <= g->hi) {
                each(ctx, g->lo + w0 + 16, (w1 & ~FLAGS) - 16); /* a block in its own mapping */
                walked[i] = 1;
                continue;
            }
            /* heap_info: the arena (a pointer), the previous heap, the size in use */
            if (w0 && word_at(r, g->lo + 16, &w2) == 0 && w2 > PAGE / 2 && g->lo + w2 <= g->hi &&
                !(g->lo & (PAGE * 256 - 1))) {
                end = g->lo + w2;
                first = heap_start(r, g->lo, end);
                if (first && narenas < 64)
                    arenas[narenas++] = w0;
            }
        }
        if (!first)
            continue;
        uint64_t top = walk_chain(r, first, end, &c);
        if (brk_heap)
            c.main_top = top;
        walked[i] = 1;
        heaps++;
    }
    /* Left out: what glibc keeps cached, free. */
    mark_tcaches(r, &c);
    uint64_t main_arena = find_main_arena(r, &c, regions, n, c.main_top);
    if (main_arena)
        mark_fastbins(r, &c, main_arena);
    for (int a = 0; a < narenas; a++) {
        int seen = 0;
        for (int b = 0; b < a; b++)
            seen |= arenas[b] == arenas[a];
        if (!seen)
            mark_fastbins(r, &c, arenas[a]);
    }
    for (int64_t i = 0; i < c.n; i++)
        if (!c.v[i].free)
            each(ctx, c.v[i].at + 16, c.v[i].size - 8); /* usable bytes run into the next header */
    free(c.v);
    free(r);
    return heaps;
}
