/* memleak_abi.h -- the table libmemleak's tracer exports (mlk_api_v1) and
 * the types its calls take: the one definition, shared by memleak.h and by
 * the tracer itself (native/hook/api/api.c).  Include memleak.h, not this. */
#ifndef MEMLEAK_ABI_H
#define MEMLEAK_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Live memory: what a report's live-bytes and live-blocks count (heap
 * blocks and anonymous mappings from every stack). */
struct memleak_counts {
    int64_t bytes;
    int64_t blocks;
};

/* The calling thread's memory since it began (jemalloc's
 * thread.allocated and thread.deallocated): what it allocated, and what it
 * freed -- whichever thread had allocated that. */
struct memleak_thread_counts {
    struct memleak_counts allocated;
    struct memleak_counts freed;
};

/* What a leak check found: valgrind's categories (docs/scan.md). */
struct memleak_leaks {
    struct memleak_counts definitely; /* nothing points to them */
    struct memleak_counts indirectly; /* only lost blocks point to them */
    struct memleak_counts possibly;   /* only pointers into their middle */
    struct memleak_counts reachable;  /* still pointed to */
};

/* The tracer's table (native/hook/api/api.c); later versions only add
 * fields at the end, and say their size. */
struct memleak__api_v1 {
    uint32_t version;
    uint32_t size;
    int (*report)(const char *label, char *path, size_t path_len);
    int (*live)(struct memleak_counts *out);
    int (*leak_check)(struct memleak_leaks *out);
    /* Added later than the three above: memleak__has() tells whether the
     * tracer in the process has them. */
    int (*last_check)(struct memleak_leaks *out);
    void (*malloclike)(const void *addr, size_t size);
    void (*freelike)(const void *addr);
    void (*resize)(const void *addr, size_t old_size, size_t new_size);
    void (*pool_create)(const void *pool, unsigned flags);
    void (*pool_destroy)(const void *pool);
    void (*pool_alloc)(const void *pool, const void *addr, size_t size);
    void (*pool_free)(const void *pool, const void *addr);
    void (*pool_trim)(const void *pool, const void *addr, size_t size);
    void (*pool_move)(const void *from, const void *to);
    void (*pool_change)(const void *pool, const void *from, const void *to, size_t size);
    int (*pool_exists)(const void *pool);
    void (*ignore_object)(const void *p);
    void (*root_region)(const void *p, size_t size, int add);
    void (*recording)(int on);
    void (*resource_acquire)(const char *kind, uint64_t id, uint64_t weight);
    void (*resource_release)(const char *kind, uint64_t id);
    int (*resource_live)(const char *kind, struct memleak_counts *out);
    int (*thread_counts)(struct memleak_thread_counts *out);
};

/* A pool's flags, valgrind's (VALGRIND_MEMPOOL_AUTO_FREE, _METAPOOL). */
#define MEMLEAK_POOL_AUTO_FREE 1 /* with METAPOOL: freeing a chunk frees the blocks inside */
#define MEMLEAK_POOL_METAPOOL 2  /* chunks are superblocks malloc-like blocks are cut from */

#ifdef __cplusplus
}
#endif

#endif
