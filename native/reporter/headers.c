/* Blocks held through an allocator's header.  A program's own allocation
 * layer often puts a header in front of what it hands out -- MariaDB's
 * my_malloc returns malloc's block + 24, PostgreSQL's chunks sit behind
 * their headers, sqlite3's memory routines keep the size in front -- so
 * every pointer the program keeps to such a block points a fixed offset
 * in.  valgrind calls those blocks "possibly lost"; they are as reachable
 * as any.  The offset is learned per allocation site (the first frame of
 * the block's stack: the call to malloc inside the wrapper, shared by all
 * of the wrapper's callers) from where the program's pointers land: a
 * site most of whose pointed-into blocks are pointed at one offset, the
 * same for at least MIN_BLOCKS of them, holds its blocks that way.
 * Reporter side only (scan.c). */
#include <stdlib.h>
#include <string.h>

#include "headers.h"

#define MIN_BLOCKS 3    /* blocks pointed into at the same offset before it is a header */
#define SHARE_PCT 90    /* of the site's pointed-into blocks */

struct site {
    uint64_t ip;        /* 0: empty slot */
    uint32_t hits[MLK_HEADER_MAX / 8 + 1]; /* blocks first pointed into at 8 * k */
    uint32_t pointed;   /* blocks pointed into at all */
    uint32_t offset;    /* learned, 0 = none */
    int64_t blocks, bytes; /* reached through it */
};

struct mlk_headers {
    const int64_t *stack_off, *stack_depth; /* per stack id: where its frames are */
    int64_t nstacks;
    const uint64_t *frames;
    uint64_t nframes;
    struct site *sites;
    uint64_t mask;      /* slots - 1 */
    int64_t learned;
};

struct mlk_headers *mlk_headers_new(const int64_t *stack_off, const int64_t *stack_depth, int64_t nstacks,
                                    const uint64_t *frames, uint64_t nframes)
{
    if (!stack_off || !stack_depth || !frames || nstacks <= 0)
        return NULL;
    struct mlk_headers *h = calloc(1, sizeof *h);
    if (h)
        *h = (struct mlk_headers){stack_off, stack_depth, nstacks, frames, nframes, NULL, 0, 0};
    return h;
}

void mlk_headers_free(struct mlk_headers *h)
{
    if (h)
        free(h->sites);
    free(h);
}

/* The site of a block: its stack's first return address, or 0 (no stack
 * of the program's, or a damaged one -- the arrays come from the segment). */
static uint64_t site_ip(const struct mlk_headers *h, const struct mlk_block *b)
{
    if ((int64_t)b->stack >= h->nstacks || h->stack_depth[b->stack] < 1)
        return 0;
    int64_t off = h->stack_off[b->stack];
    return off >= 0 && (uint64_t)off < h->nframes ? h->frames[off] : 0;
}

static struct site *find(const struct mlk_headers *h, uint64_t ip, int insert)
{
    if (!h->sites || !ip)
        return NULL;
    for (uint64_t i = (ip * 0x9e3779b97f4a7c15ull) >> 20 & h->mask;; i = (i + 1) & h->mask) {
        struct site *s = &h->sites[i];
        if (s->ip == ip)
            return s;
        if (!s->ip) {
            if (!insert)
                return NULL;
            s->ip = ip;
            return s;
        }
    }
}

void mlk_header_hit(struct mlk_block *b, uint64_t word, int from_reachable)
{
    uint64_t off = word - b->start;
    if (!off || off > MLK_HEADER_MAX || (off & 7))
        return;
    uint8_t k = (uint8_t)(off / 8);
    if (!(b->header & MLK_HEADER_OFFSET_MASK))
        b->header = k;
    if (from_reachable && (b->header & MLK_HEADER_OFFSET_MASK) == k)
        b->header |= MLK_HEADER_FROM_REACHABLE;
}

int64_t mlk_headers_learn(struct mlk_headers *h, const struct mlk_block *blocks, int64_t n)
{
    if (!h)
        return 0;
    int64_t pointed = 0;
    for (int64_t i = 0; i < n; i++)
        pointed += (blocks[i].header & MLK_HEADER_OFFSET_MASK) != 0;
    if (!pointed)
        return 0;
    uint64_t slots = 64;
    while (slots < 2 * (uint64_t)pointed)
        slots *= 2;
    h->sites = calloc(slots, sizeof *h->sites);
    if (!h->sites)
        return 0; /* no memory: no header is learned, the blocks stay possibly lost */
    h->mask = slots - 1;
    for (int64_t i = 0; i < n; i++) {
        unsigned k = blocks[i].header & MLK_HEADER_OFFSET_MASK;
        struct site *s = k ? find(h, site_ip(h, &blocks[i]), 1) : NULL;
        if (s) {
            s->hits[k]++;
            s->pointed++;
        }
    }
    for (uint64_t i = 0; i < slots; i++) {
        struct site *s = &h->sites[i];
        unsigned best = 0;
        for (unsigned k = 1; k <= MLK_HEADER_MAX / 8; k++)
            if (s->hits[k] > s->hits[best])
                best = k;
        if (best && s->hits[best] >= MIN_BLOCKS && 100ull * s->hits[best] >= (uint64_t)SHARE_PCT * s->pointed) {
            s->offset = 8 * best;
            h->learned++;
        }
    }
    return h->learned;
}

uint64_t mlk_headers_offset(const struct mlk_headers *h, const struct mlk_block *b)
{
    if (!h || !h->learned)
        return 0;
    const struct site *s = find(h, site_ip(h, b), 0);
    return s ? s->offset : 0;
}

void mlk_headers_count(struct mlk_headers *h, const struct mlk_block *b)
{
    struct site *s = h ? find(h, site_ip(h, b), 0) : NULL;
    if (s) {
        s->blocks++;
        s->bytes += (int64_t)b->size;
    }
}

int64_t mlk_headers_list(const struct mlk_headers *h, int64_t *out, int64_t cap)
{
    int64_t found = 0;
    for (uint64_t i = 0; h && h->sites && i <= h->mask; i++) {
        const struct site *s = &h->sites[i];
        if (!s->offset || !s->blocks)
            continue;
        if (found < cap) {
            out[4 * found] = (int64_t)s->ip;
            out[4 * found + 1] = (int64_t)s->offset;
            out[4 * found + 2] = s->blocks;
            out[4 * found + 3] = s->bytes;
        }
        found++;
    }
    return found;
}
