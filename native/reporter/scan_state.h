/* What the scan's two files share -- scan.c (the roots, the flood, the
 * cliques, and the scan itself) and scan_blocks.c (listing the live
 * blocks): the scan's state and its limits.  Reporter side only. */
#ifndef MLK_SCAN_STATE_H
#define MLK_SCAN_STATE_H

#include <stdint.h>

#include "../trailer_format.h"
#include "heuristics.h"
#include "headers.h"
#include "maps.h"
#include "scan.h"

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


/* Step 1: every live block of the process into s->blocks, sorted and
 * indexed (scan_blocks.c).  key: the trailers' check key; table, custom_table:
 * the hook's address table and custom-block table, in the process (0: none). */
void mlk_scan_list_blocks(struct scan *s, uint64_t key, uint64_t table, uint64_t custom_table);

#endif
