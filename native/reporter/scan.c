/* The reachability scan: which live blocks of a stopped process are
 * definitely lost, indirectly lost, possibly lost or still reachable --
 * valgrind memcheck's categories, by memcheck's rules (mc_leakcheck.c):
 *
 *   1. list the live blocks (mlk_scan_list_blocks, scan_blocks.c);
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
#include "scan.h"
#include "sorted.h"
#include "world.h"

#include "scan_state.h"

#define EXPORT __attribute__((visibility("default")))

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
        for (int64_t r = 0; hi && r < s->maps.nshared; r++) { /* and in shared ones, read for it alone */
            const struct mlk_file_map *m = &s->maps.shared[r];
            uint64_t a = lo > m->lo ? lo : m->lo, b = hi < m->hi ? hi : m->hi;
            if (a < b)
                mlk_touched_runs(&s->maps, a, b, scan_root_run, s, NULL);
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
        uint64_t from = th->dead_stack ? r->hi : th->sp - RED_ZONE > r->lo ? th->sp - RED_ZONE : r->lo;
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
    mlk_scan_list_blocks(&s, key, table, custom_table);
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
