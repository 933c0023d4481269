/* glibc's own statistics of each of its arenas -- what mallinfo2() and
 * malloc_info() compute inside the program -- read from outside it, so
 * that a report can say where malloc's free memory lies without running
 * anything in the program (a call there would take the arenas' locks from
 * wherever the report found the program: inside malloc, in a signal
 * handler) and without the program's help.
 *
 * glibc keeps each arena in a struct malloc_state: on 64-bit, the fastbin
 * list heads at +16, the top chunk at +96, the bins' list heads from +112,
 * the next arena at +2160 (a ring through every arena, the main one
 * included), system_mem at +2184 and max_system_mem at +2192 (glibc 2.26
 * and later).  The main arena lives in the C library's data: it is found
 * as the structure whose top chunk lies in [heap] and ends within it, whose
 * system_mem fits [heap]; the other arenas are the ring's other members,
 * or named by their heaps' heap_info (each heap's first word).
 *
 * Like mallinfo, a chunk is free when it is in a bin (the unsorted bin
 * included) or a fastbin, or is the top; what a thread's tcache holds is in
 * use to glibc and so here.  Bins are doubly linked through plain pointers;
 * fastbin links are mangled (safe-linking, glibc 2.32+: the pointer XOR its
 * own address >> 12).
 *
 * Everything read is the program's to change while it runs: every pointer
 * is checked (16-aligned, readable, the chunk's size fits), every walk is
 * bounded, and an arena whose lists could not be read to their end is
 * said to be partial, never trusted past what was read. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "glibc_arenas.h"
#include "world.h"

#define EXPORT __attribute__((visibility("default")))

#define STATE_BYTES 2200          /* sizeof(struct malloc_state), 64-bit */
#define OFF_FASTBINS 16
#define OFF_TOP 96
#define OFF_BINS 112
#define OFF_NEXT 2160
#define OFF_SYSTEM 2184
#define OFF_MAX_SYSTEM 2192
#define FASTBINS 10
#define BINS 128                  /* bin 1 (unsorted) .. 127 */
#define FLAGS 7ull
#define RING_MAX 4096             /* glibc's arena limit is 8 per core */
#define CHUNKS_MAX 1000000ll      /* free chunks read per report, all arenas: bounded work */
#define CACHE_PAGES 256           /* 1 MiB of the program's pages, direct-mapped */
#define PAGE 4096ull

/* Random reads of one process's memory through a small page cache: a bin's
 * chunks are scattered over the heap, often a few to a page. */
struct pages {
    int pid;
    uint64_t tag[CACHE_PAGES];    /* page address + 1; 0: empty */
    int ok[CACHE_PAGES];
    unsigned char data[CACHE_PAGES][PAGE];
};

static int word(struct pages *c, uint64_t addr, uint64_t *out)
{
    if (addr & 7)
        return -1;
    uint64_t page = addr & ~(PAGE - 1);
    unsigned slot = (unsigned)((page / PAGE) % CACHE_PAGES);
    if (c->tag[slot] != page + 1) {
        c->tag[slot] = page + 1;
        c->ok[slot] = mlk_read_mem(c->pid, page, c->data[slot], PAGE) == PAGE;
    }
    if (!c->ok[slot])
        return -1;
    memcpy(out, c->data[slot] + (addr - page), 8);
    return 0;
}

static uint64_t chunk_size(struct pages *c, uint64_t chunk)
{
    uint64_t size;
    if ((chunk & 15) || word(c, chunk + 8, &size) != 0)
        return 0;
    return size & ~FLAGS;
}

/* The size classes a free chunk is counted in (bytes of the chunk). */
static int size_class(uint64_t size)
{
    static const uint64_t upto[MLK_ARENA_CLASSES - 1] = {64, 256, 1024, 4096, 16384, 65536, 262144};
    int k = 0;
    while (k < MLK_ARENA_CLASSES - 1 && size >= upto[k])
        k++;
    return k;
}

static void count_free(struct mlk_glibc_arena *a, uint64_t size)
{
    int k = size_class(size);
    a->class_chunks[k]++;
    a->class_bytes[k] += size;
}

/* One free list of an arena, from `first` until `end`.  A fastbin's
 * chunks all have one size (`size_is`), each linked to the next through its
 * mangled fd (safe-linking), ending at 0; a bin's have sizes up to `limit`
 * (size_is 0), followed by their plain bk as mallinfo does, back to the
 * bin's head.  Counted into the fastbins' or the bins' totals; a chunk that
 * does not check out, or the budget spent, makes the arena partial.
 * Returns the chunks read. */
static int64_t walk_list(struct pages *c, struct mlk_glibc_arena *a, uint64_t first, uint64_t end,
                         uint64_t size_is, uint64_t limit, int64_t budget)
{
    uint64_t at = first;
    int64_t steps = 0;
    while (at != end) {
        uint64_t size = chunk_size(c, at), link;
        int fits = size_is ? size == size_is : size >= 32 && size <= limit;
        if (steps >= budget || !fits || word(c, at + (size_is ? 16 : 24), &link) != 0) {
            a->partial = 1;
            break;
        }
        *(size_is ? &a->fast_chunks : &a->bins_chunks) += 1;
        *(size_is ? &a->fast_bytes : &a->bins_bytes) += size;
        count_free(a, size);
        steps++;
        at = size_is ? ((at + 16) >> 12) ^ link : link;
    }
    return steps;
}

/* An arena's statistics from its struct malloc_state at `at`; the number
 * of chunks read (0 with a->at == 0 when it is no arena). */
static int64_t read_arena(struct pages *c, uint64_t at, struct mlk_glibc_arena *a, int64_t budget)
{
    uint64_t s[STATE_BYTES / 8];
    memset(a, 0, sizeof *a);
    if (at & 7 || mlk_read_mem(c->pid, at, s, sizeof s) != sizeof s)
        return 0;
    a->at = at;
    a->system = s[OFF_SYSTEM / 8];
    a->max_system = s[OFF_MAX_SYSTEM / 8];
    a->top = chunk_size(c, s[OFF_TOP / 8]);
    if (a->top > a->system) /* an arena's top is its memory's; a larger one was misread */
        a->top = 0, a->partial = 1;
    int64_t steps = 0;
    for (int b = 0; b < FASTBINS; b++)
        steps += walk_list(c, a, s[OFF_FASTBINS / 8 + b], 0, 32 + 16 * (uint64_t)b, 0, budget - steps);
    for (int i = 1; i < BINS; i++) {
        /* the bin's head: the pseudo-chunk whose fd and bk are the bin's two words */
        uint64_t head = at + OFF_BINS + 16 * (uint64_t)(i - 1) - 16;
        uint64_t bk = s[(OFF_BINS + 16 * (i - 1) + 8) / 8];
        steps += walk_list(c, a, bk, head, 0, a->system, budget - steps);
    }
    return steps;
}

/* Whether `at` may be the main arena: its top chunk lies in [heap] and ends
 * within it, its system memory fits [heap] and reaches the top's end, its
 * ring pointer is set. */
static int main_arena_at(struct pages *c, uint64_t at, uint64_t heap_lo, uint64_t heap_hi)
{
    uint64_t top, system, next;
    if (word(c, at + OFF_TOP, &top) != 0 || top < heap_lo || top >= heap_hi || (top & 15))
        return 0;
    uint64_t size = chunk_size(c, top);
    if (!size || top + size > heap_hi)
        return 0;
    if (word(c, at + OFF_SYSTEM, &system) != 0 || !system || system > heap_hi - heap_lo ||
        top + size - system < heap_lo)
        return 0;
    return word(c, at + OFF_NEXT, &next) == 0 && next && !(next & 7);
}

static uint64_t find_main_arena(struct pages *c, uint64_t heap_lo, uint64_t heap_hi,
                                const uint64_t *search, int nsearch)
{
    for (int i = 0; heap_lo < heap_hi && i < nsearch; i++) {
        uint64_t lo = search[2 * i], hi = search[2 * i + 1];
        if (hi <= lo || hi - lo > (64ull << 20))
            continue;
        for (uint64_t at = (lo + 7) & ~7ull; at + STATE_BYTES <= hi; at += 8)
            if (main_arena_at(c, at, heap_lo, heap_hi))
                return at;
    }
    return 0;
}

EXPORT int mlk_glibc_arenas(int pid, uint64_t heap_lo, uint64_t heap_hi, const uint64_t *search, int nsearch,
                            const uint64_t *named, int nnamed, struct mlk_glibc_arena *out, int max)
{
    struct pages *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    c->pid = pid;
    /* Where to start the ring: the main arena, else any arena a heap names. */
    uint64_t start = find_main_arena(c, heap_lo, heap_hi, search, nsearch);
    for (int i = 0; !start && i < nnamed; i++) {
        uint64_t next;
        if (named[i] && !(named[i] & 7) && word(c, named[i] + OFF_NEXT, &next) == 0 && next && !(next & 7))
            start = named[i];
    }
    int n = 0;
    int64_t budget = CHUNKS_MAX;
    uint64_t at = start;
    for (int steps = 0; at && steps < RING_MAX; steps++) {
        struct mlk_glibc_arena a;
        budget -= read_arena(c, at, &a, budget);
        if (!a.at)
            break;
        if (n < max)
            out[n] = a;
        n++;
        if (word(c, at + OFF_NEXT, &at) != 0 || at == start)
            break;
        for (int k = 0; k < n && k < max; k++)
            if (out[k].at == at) /* a ring that does not close on its start: cut */
                at = 0;
    }
    free(c);
    return n;
}
