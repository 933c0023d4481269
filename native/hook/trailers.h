/* Live block -> (stack, size), in the block itself: the trailer
 * (trailers.c), and glibc's chunk header as the free path reads it. */
#ifndef MLK_TRAILERS_H
#define MLK_TRAILERS_H 1

#include "mlk.h"

/* The last 16 usable bytes of a block recorded with a trailer (the block is
 * allocated 16 bytes longer).  Packed: an allocator's usable size need not
 * be a multiple of 8. */
struct mlk_trailer {
    uint64_t meta;   /* alignment, size << 24, family, stack id; all ones below bit 24: not counted (trailer_format.h) */
    uint64_t check;  /* block address ^ mlk_trailer_key: "this block has a trailer" */
} __attribute__((packed));
#define MLK_TRAILER_SIZE sizeof(struct mlk_trailer)
/* Nonzero once trailers are in use (never reset: blocks keep theirs). */
extern MLK_HIDDEN uint64_t mlk_trailer_key;
static inline struct mlk_trailer *mlk_trailer_at(void *p, size_t usable)
{
    return (struct mlk_trailer *)((char *)p + usable - MLK_TRAILER_SIZE);
}
/* p's trailer, or NULL if p (of `usable` bytes) has none.  Reads only
 * inside the block, so it is safe for any block of any allocator. */
static inline struct mlk_trailer *mlk_trailer_of(void *p, size_t usable)
{
    if (usable < MLK_TRAILER_SIZE)
        return NULL;
    struct mlk_trailer *t = mlk_trailer_at(p, usable);
    return t->check == ((uint64_t)p ^ mlk_trailer_key) ? t : NULL;
}
/* The real malloc is glibc's (interpose.c, with mlk_trailers_possible):
 * a pointer about to be freed is then read as glibc's free reads it. */
extern MLK_HIDDEN int mlk_glibc_heap;
/* The usable size of glibc chunk p from its header alone -- the checks
 * glibc's free makes before it reads anything else (alignment, a size
 * too small, an mmapped chunk not on page boundaries; a size that wraps,
 * implied by ours below),
 * and 0 when they fail: a pointer glibc would call invalid is never read
 * further.  One check is ours: a chunk of 1 TiB or more is none --
 * the word before a pointer into a block's middle is the program's data
 * (text, a pointer, a double all read as sizes far past that), and the
 * trailer's read must not follow it off the heap.  Unlike glibc's
 * malloc_usable_size, it does not read the next chunk, and a freed chunk
 * keeps its size (so its trailer, marked freed, can be found: misuse.c). */
#define MLK_CHUNK_SIZE_MAX (1ull << 40)
static inline size_t mlk_glibc_usable(const void *p)
{
    uint64_t a = (uint64_t)p, field = ((const uint64_t *)p)[-1], size = field & ~7ull;
    /* size < 32 or >= the bound: one unsigned compare.  (glibc's check
     * that the chunk does not wrap around the address space, p > -size,
     * cannot fail under that bound for an address user space has, below
     * 2^57: not made -- five instructions a free.) */
    if (MLK_UNLIKELY(((a | size) & 15) || size - 32 >= MLK_CHUNK_SIZE_MAX - 32))
        return 0;
    if (MLK_UNLIKELY(field & 2)) { /* IS_MMAPPED: prev_size is the offset from the mapping's start */
        uint64_t before = ((const uint64_t *)p)[-2];
        return ((a - 16 - before) | (before + size)) & 4095 ? 0 : size - 16;
    }
    return size - 8;
}
/* The same of a block glibc's allocator has just returned (its header is
 * glibc's own: nothing to check). */
static inline size_t mlk_glibc_usable_new(const void *p)
{
    uint64_t field = ((const uint64_t *)p)[-1];
    /* (IS_MMAPPED, 2: 16 bytes of header, else 8 -- as 8 more for that
     * bit times 4, without a compare: three instructions fewer) */
    return (field & ~7ull) - 8 - ((field & 2) << 2);
}
MLK_HIDDEN void mlk_trailers_enable(void);
MLK_HIDDEN int mlk_trailers_in_use(void);   /* collection records blocks with trailers */
/* Blocks made before collection starts from load get an uncounted trailer
 * (trailers.c: the scan must see them); set at the first hook call. */
extern MLK_HIDDEN int mlk_early_trailers;
MLK_HIDDEN void mlk_trailers_decide_early(int allocator_has_usable_size);
MLK_HIDDEN void mlk_trailer_write_uncounted(void *p, size_t usable, size_t size, int ours);
MLK_HIDDEN int mlk_trailers_possible(void);  /* interpose.c: the allocator allows them */
/* Writes p's trailer and counts the block for `stack` (MLK_NO_STACK: not
 * counted), tag its family and alignment (MLK_TRAILER_TAG); 0 if it could
 * not be counted. */
MLK_HIDDEN int mlk_trailer_write(void *p, size_t usable, uint64_t size, uint32_t stack, uint64_t tag);
/* Marks the block freed (its trailer no longer says "ours", but "ours,
 * freed": misuse.c finds a second free by it) and returns what
 * mlk_trailer_uncount needs; restore re-marks it (a realloc that failed). */
MLK_HIDDEN uint64_t mlk_trailer_take(struct mlk_trailer *t);
MLK_HIDDEN void mlk_trailer_restore(void *p, struct mlk_trailer *t);
/* Uncounts block p, taken (its meta word), whose trailer sat `reserved`
 * bytes after its start (the trailer's address less the block's). */
MLK_HIDDEN void mlk_trailer_uncount(void *p, uint64_t taken, uint64_t reserved);
/* The common free of block p, whose trailer is of `family` and (given:
 * a sized delete's size, else MLK_NO_SIZE) of that size: checked, marked
 * freed and uncounted with no call, and 1 -- the caller then frees it for
 * real; or 0 with nothing done, for the whole way (free_trailed and the
 * rest).  (Inlined into free and delete: see trailers.c.) */
MLK_HIDDEN int mlk_trailer_free_fast(void *p, uint32_t family, size_t given);
/* The same for a thread counting on the shared stripe (the whole ways of
 * free and delete try it first). */
MLK_HIDDEN int mlk_trailer_free_shared(void *p, uint32_t family, size_t given);
/* The common recording of a new block p of `size` (the allocator's, with
 * room for its trailer; size below MLK_TRAILED_SIZE_MAX: every hook that
 * trails a block has asked TRAILABLE, hooks.h), of `kind` and `tag` (mlk_trailer_write's), whose
 * hook frame's state is `at` (MLK_FRAME_HERE): its walk found whole by the quick
 * look, its trailer written and counted with no call, and 1; or 0 with
 * nothing done, for the whole way (mlk_record_trailed), -1 if the quick
 * look missed.  (Inlined into the hooks: see trailers.c.) */
MLK_HIDDEN int mlk_trailer_alloc_fast(void *p, uint64_t size, int kind, uint64_t tag, struct mlk_walk_start at);
/* The same for a thread counting on the shared stripe (locked adds; the
 * whole way tries it where the fast way said MLK_FAST_SHARED_NEXT: it was
 * not tried for that reason alone). */
#define MLK_FAST_SHARED_NEXT (-2)
MLK_HIDDEN int mlk_trailer_alloc_shared(void *p, uint64_t size, int kind, uint64_t tag, struct mlk_walk_start at);
/* The same for a thread resting from whole walks, its stack found by its
 * remembered paths (mlk_walk_known_path; the whole way tries it where the
 * fast way said MLK_FAST_RESTING -- only there: it does not ask again what
 * the fast way asked before it said so), on its own stripe or the shared one. */
#define MLK_FAST_RESTING (-3)
MLK_HIDDEN int mlk_trailer_alloc_by_path(void *p, uint64_t size, int kind, uint64_t tag, struct mlk_walk_start at);
extern MLK_HIDDEN uint32_t mlk_slack_floor; /* the allocator's smallest usable size, if known */
MLK_HIDDEN void mlk_trailers_lock_for_fork(int acquire);  /* before fork; after, in the parent */
MLK_HIDDEN void mlk_trailers_fork_child(void);            /* after fork, in the child */

#endif
