/* What the hook files share (interpose.c: the malloc family and the
 * lookup of the real functions; hooks_maps.c: mappings and the loader;
 * hooks_cxx.c: C++ new and delete; hooks_process.c: mtrace, exec and
 * descriptors): the table of the next definitions, the recursion guard,
 * and how a block is recorded and forgotten.  Inline helpers only: each
 * is on some hook's hot path.
 *
 * Order matters for correctness under threads: a free is recorded *before*
 * the real free (after it, another thread could be handed the same address
 * and record it first), an allocation *after* the real allocation. */
#ifndef MLK_HOOKS_H
#define MLK_HOOKS_H

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <sys/types.h>

#include "mlk.h"
#include "trailers.h"

#define EXPORT __attribute__((visibility("default")))

struct mlk_real_fns {
    void *(*malloc)(size_t);
    void (*free)(void *);
    size_t (*malloc_usable_size)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    void *(*mmap)(void *, size_t, int, int, int, off_t);
    int (*munmap)(void *, size_t);
    int (*mprotect)(void *, size_t, int);
    void *(*mremap)(void *, size_t, size_t, int, ...);
    void *(*dlopen)(const char *, int);
    int (*dlclose)(void *);
};
extern MLK_HIDDEN struct mlk_real_fns mlk_real; /* the next definitions (interpose.c) */
/* A next definition at `from` was routed (route.c): our calls to it go to
 * `to`, the original, instead of through the routing hook. */
MLK_HIDDEN void mlk_real_redirect(void *from, void *to);
/* Its routing could not be written after all: calls to `from` again. */
MLK_HIDDEN void mlk_real_unredirect(void *from);
/* The table was filled again (interpose.c's resolve): redirects and
 * guards applied again (forwarding.c). */
MLK_HIDDEN void mlk_real_refilled(void);
/* A routed family's allocator also serves our malloc: the table's calls
 * raise the recursion guard from now on (forwarding.c). */
MLK_HIDDEN void mlk_real_guard_forwarding(void);
/* Where a next definition lives: its own address, not a trampoline's or a thunk's. */
MLK_HIDDEN void *mlk_real_home(void *fn);

/* For dlopen of a bare name from `caller` (its return address): the path
 * the loader would have found in the caller's own DT_RUNPATH/DT_RPATH, in
 * out; NULL: pass the name as it is (dlopen_search.c). */
MLK_HIDDEN const char *mlk_dlopen_search(const char *file, uintptr_t caller, char *out, size_t out_len);

/* Bootstrap: allocations made while dlsym runs (interpose.c). */
#define MLK_BOOT_ARENA (64 * 1024)
extern MLK_HIDDEN char mlk_boot_arena[MLK_BOOT_ARENA];
static inline int mlk_is_boot(const void *p)
{
    return (const char *)p >= mlk_boot_arena && (const char *)p < mlk_boot_arena + MLK_BOOT_ARENA;
}
MLK_HIDDEN void *mlk_boot_alloc(size_t size, size_t align);

#define READY() (MLK_LIKELY(mlk_real.free != NULL) || (mlk_ensure_real(), mlk_real.free != NULL))
MLK_HIDDEN void mlk_ensure_real(void);


/* The guard: record only when collecting and not inside our own code. */
#define RECORDING() (MLK_LIKELY(!mlk_in_hook) && mlk_collecting)
/* errno is libc's thread-local, reached through a call to __errno_location
 * each time; its address never changes for a thread, so ask once. */
/* (mlk_errno_at: mlk_hot's field, mlk.h.) */
static inline int *thread_errno(void)
{
    int *e = mlk_errno_at;
    if (MLK_UNLIKELY(!e))
        mlk_errno_at = e = &errno;
    return e;
}
#define BEGIN_HOOK() int *errno_p_ = thread_errno(); int saved_errno_ = *errno_p_; mlk_in_hook = 1
#define END_HOOK() mlk_in_hook = 0; *errno_p_ = saved_errno_

/* Trailers (trailers.c): record new blocks in 16 extra bytes at their end. */
#define TRAILING() (RECORDING() && mlk_trailer_key)
/* A block of 16 GiB or more (the trailer's size bits) is kept in the side
 * table instead (and a request too big to grow by 16 bytes, which the
 * real allocator refuses, takes that path too). */
#define TRAILABLE(size) ((size) < MLK_TRAILED_SIZE_MAX)

/* tag: MLK_TRAILER_TAG, the block's family and alignment (MALLOC_TAG for
 * the malloc family's) */
#define MALLOC_TAG MLK_TRAILER_TAG(MLK_FAMILY_MALLOC, 0)
/* The whole way of recording new block p with a trailer, when the hook's
 * fast way said no: out of line, so that the fast way saves no registers
 * for its calls.  The walk start is set: by trailed, in the hook's frame
 * (which these may replace: tail calls; the start's state is the caller's,
 * above it).  looked: the quick look was made, and missed.  Returns p. */
MLK_HIDDEN void *mlk_trailed_whole(void *p, size_t size, int kind, uint64_t tag, int looked);
/* A thread that rests from whole walks (its stack by its remembered paths,
 * mlk_trailer_alloc_by_path), or that counts on the shared stripe
 * (mlk_trailer_alloc_shared): that way, inlined, then the whole way if it
 * said no -- a tail call, so that the way that answers nearly every
 * allocation of such a thread pays one frame (cc1: a frame here that
 * called the way, which saved its own registers again, was ~40
 * instructions an allocation). */
MLK_HIDDEN void *mlk_trailed_resting(void *p, size_t size, int kind, uint64_t tag);
MLK_HIDDEN void *mlk_trailed_shared(void *p, size_t size, int kind, uint64_t tag);
/* Which of those, by what the fast way said (0; -1, its quick look
 * missed; MLK_FAST_SHARED_NEXT; MLK_FAST_RESTING): jumps only. */
static __attribute__((noinline)) void *trailed_slow(void *p, size_t size, int kind, uint64_t tag, int fast)
{
    if (fast == MLK_FAST_RESTING)
        return mlk_trailed_resting(p, size, kind, tag);
    if (fast == MLK_FAST_SHARED_NEXT)
        return mlk_trailed_shared(p, size, kind, tag);
    return mlk_trailed_whole(p, size, kind, tag, fast < 0);
}

/* Records new block p, the allocator's with room for its trailer; returns p. */
static inline __attribute__((always_inline)) void *trailed(void *p, size_t size, int kind, uint64_t tag)
{
    struct mlk_walk_start here = MLK_FRAME_HERE();
    int fast = mlk_trailer_alloc_fast(p, size, kind, tag, here);
    if (MLK_LIKELY(fast > 0))
        return p;
    mlk_walk_start = here;
    return trailed_slow(p, size, kind, tag, fast);
}

/* The usable size of a block about to be freed, where its trailer ends:
 * with glibc's malloc read from its chunk header (mlk_glibc_usable: never
 * reading on from a header glibc would call invalid).  (Not for a new
 * block: glibc's own malloc_usable_size, a call, measured cheaper there
 * than the header's checks inline -- bench/callgrind.py alloc-glibc,
 * 96.8M -> 97.9M instructions.) */
static inline size_t block_usable(void *p)
{
    return MLK_LIKELY(mlk_glibc_heap) ? mlk_glibc_usable(p) : mlk_real.malloc_usable_size(p);
}

/* p's trailer if p is a block recorded with one, else NULL. */
static inline struct mlk_trailer *trailer(void *p)
{
    if (MLK_LIKELY(!mlk_trailer_key))
        return NULL;
    if (MLK_UNLIKELY(mlk_reads_guarded) && !mlk_block_readable(p))
        return NULL; /* (misuse=hold: a wild pointer, mlk_misuse_untrailed names it) */
    size_t usable = block_usable(p);
    return usable >= MLK_TRAILER_SIZE ? mlk_trailer_of(p, usable) : NULL;
}

/* Before collection starts from load (mlk_early_trailers): a block with
 * an uncounted trailer, for the scan.  Never on the collecting path. */
MLK_HIDDEN void *mlk_early_malloc(size_t size, int zeroed);
extern MLK_HIDDEN __thread int mlk_in_early __attribute__((tls_model("initial-exec")));
#define EARLY(size) (MLK_UNLIKELY(mlk_early_trailers) && !mlk_collecting && TRAILABLE(size) && !mlk_in_early)

/* Mapping calls made by that allocator itself. */
#define BY_THE_ALLOCATOR() mlk_is_allocator_address((uint64_t)__builtin_return_address(0))

/* A new block without a trailer recorded, its walk starting at the
 * caller of the function this expands in. */
static inline __attribute__((always_inline)) void recorded(void *p, size_t size, int kind)
{
    BEGIN_HOOK();
    MLK_WALK_FROM_HERE();
    mlk_record_alloc(p, size, kind);
    END_HOOK();
}

static inline __attribute__((always_inline)) void after_alloc(void *p, size_t size, int kind)
{
    if (p && RECORDING() && mlk_sample(size))
        recorded(p, size, kind);
}

/* The family whose blocks `call` (MLK_CALL_*) frees. */
#define FAMILY_FREED_BY(call) ((uint32_t)((call) == MLK_CALL_REALLOC ? MLK_FAMILY_MALLOC : (call)))

/* `call` frees a block whose trailer said `meta` (`given`: a sized
 * delete's size, else MLK_NO_SIZE; `align`: an aligned delete's
 * alignment, else 0): another family's block, or a size or alignment not
 * the block's, is recorded as misuse.  The free goes on either way.
 * (No walk start is set: a misuse is rare, and the walk skips our frames.) */
static inline __attribute__((always_inline)) void check_trailed_free(uint64_t meta, int call, size_t given,
                                                                     size_t align)
{
    if (MLK_UNLIKELY(mlk_trailer_family_of(meta) != FAMILY_FREED_BY(call) ||
                     (given != MLK_NO_SIZE && given != mlk_trailer_size_of(meta)) ||
                     (align && align != mlk_trailer_align_of(meta))))
        mlk_misuse_trailed(meta, call, given, align);
}

/* 1 when `call` of p -- a pointer with no trailer, in no table -- must not
 * reach the allocator: a double or invalid free, held back (misuse=hold),
 * or a second free of a block the quarantine holds. */
static inline int held_back(void *p, int call)
{
    return MLK_UNLIKELY(mlk_trailer_key != 0) && p && !mlk_in_hook && mlk_misuse_untrailed(p, call);
}

/* Forgets a block without a trailer before its real free (by `call`,
 * MLK_CALL_*): 0 when that free must not happen -- a double or invalid
 * free held back (misuse=hold). */
static inline __attribute__((always_inline)) int before_free(void *p, int call)
{
    if (p && !mlk_in_hook && mlk_ever_collected && mlk_maybe_recorded(p)) {
        BEGIN_HOOK();
        int known = mlk_record_free(p);
        END_HOOK();
        if (known)
            return 1;
    }
    return !held_back(p, call);
}

/* The free's fast way for a thread on the shared stripe, which the fast
 * way (mlk_trailer_free_fast) leaves to the whole way: tried there first
 * (sampling, or a thread that owns a stripe, passes with one test).
 * Returns 1 when the block was freed. */
static inline __attribute__((always_inline)) int free_shared(void *p, int call, size_t given, size_t align)
{
    if (MLK_LIKELY(align || !mlk_trailer_key || mlk_stack_owns_stripe()) ||
        !mlk_trailer_free_shared(p, FAMILY_FREED_BY(call), given))
        return 0;
    mlk_real.free(p);
    return 1;
}

/* A block with a trailer is forgotten by its trailer alone, before the
 * real free (nothing else can reach it after).  The trailer says which
 * family made it, its size and alignment: a free by another family's
 * call, a sized delete of another size (`given`; MLK_NO_SIZE for none),
 * an aligned delete of another alignment (`align`; 0 for none), is
 * recorded as misuse -- and the free goes on, as it would bare. */
static inline __attribute__((always_inline)) int free_trailed(void *p, int call, size_t given, size_t align)
{
    struct mlk_trailer *t = trailer(p);
    if (!t)
        return 0;
    uint64_t meta = mlk_trailer_take(t);
    check_trailed_free(meta, call, given, align);
    uint64_t reserved = (uint64_t)((char *)t - (char *)p);
    mlk_trailer_uncount(p, meta, reserved);
    if (MLK_UNLIKELY(mlk_quarantine_cap) && !mlk_in_hook)
        mlk_quarantine_put(p, reserved + MLK_TRAILER_SIZE);
    else
        mlk_real.free(p);
    return 1;
}

/* The next definition of `name`, looked up once (for hooks added after
 * start-up, outside the `real` table). */
#define LAZY_NEXT(var, name) (var ? var : (*(void **)&var = mlk_next_symbol(name), var))

#endif
