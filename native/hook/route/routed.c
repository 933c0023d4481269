/* The hooks that routed entry points jump to (route.c decides which entry
 * points; patch.c makes them jump).  Each runs the program's own function
 * through its trampoline with the guard set -- so what that allocator does
 * inside (its own mappings, its calloc calling its malloc, tcmalloc's
 * operator new for its MallocExtension) is not counted again -- and records
 * the block in the address table, never with a trailer: the trailer's place
 * comes from glibc's malloc_usable_size, which knows nothing of these
 * blocks.  errno is the allocator's: the guard goes up before the call and
 * the recording saves and restores errno around itself. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "../hooks.h"
#include "route.h"
#include "routed.h"

/* size first, then up to two pass-through arguments (alignment, nothrow):
 * malloc, valloc, pvalloc and every operator new. */
#define SIZE_FIRST(fn, kind)                                                                       \
    static void *(*orig_##fn)(size_t, word, word);                                                 \
    static void *routed_##fn(size_t size, word a, word b)                                          \
    {                                                                                              \
        if (mlk_in_hook)                                                                           \
            return orig_##fn(size, a, b);                                                          \
        void *p = GUARDED(orig_##fn(size, a, b));                                                  \
        after_alloc(p, size, kind);                                                                \
        return p;                                                                                  \
    }

/* the pointer first, then up to two pass-through arguments (size,
 * alignment, nothrow): free, cfree, the sized frees, every operator delete. */
#define POINTER_FIRST(fn)                                                                          \
    static void (*orig_##fn)(void *, word, word);                                                  \
    static void routed_##fn(void *p, word a, word b)                                               \
    {                                                                                              \
        if (mlk_in_hook) {                                                                         \
            orig_##fn(p, a, b);                                                                    \
            return;                                                                                \
        }                                                                                          \
        before_free(p); /* blocks made before routing are in no table: nothing */                 \
        GUARDED(orig_##fn(p, a, b));                                                               \
    }

/* alignment first: memalign, aligned_alloc. */
#define ALIGN_FIRST(fn)                                                                            \
    static void *(*orig_##fn)(size_t, size_t);                                                     \
    static void *routed_##fn(size_t align, size_t size)                                            \
    {                                                                                              \
        if (mlk_in_hook)                                                                           \
            return orig_##fn(align, size);                                                         \
        void *p = GUARDED(orig_##fn(align, size));                                                 \
        after_alloc(p, size, MLK_KIND_MALLOC);                                                     \
        return p;                                                                                  \
    }

SIZE_FIRST(malloc, MLK_KIND_MALLOC)
SIZE_FIRST(valloc, MLK_KIND_MALLOC)
SIZE_FIRST(pvalloc, MLK_KIND_MALLOC)
SIZE_FIRST(new, MLK_KIND_NEW)
SIZE_FIRST(new_array, MLK_KIND_NEW)
SIZE_FIRST(new_nothrow, MLK_KIND_NEW)
SIZE_FIRST(new_array_nothrow, MLK_KIND_NEW)
SIZE_FIRST(new_aligned, MLK_KIND_NEW)
SIZE_FIRST(new_array_aligned, MLK_KIND_NEW)
SIZE_FIRST(new_aligned_nothrow, MLK_KIND_NEW)
SIZE_FIRST(new_array_aligned_nothrow, MLK_KIND_NEW)
ALIGN_FIRST(memalign)
ALIGN_FIRST(aligned_alloc)
POINTER_FIRST(free)
POINTER_FIRST(cfree)
POINTER_FIRST(free_sized)
POINTER_FIRST(free_aligned_sized)
POINTER_FIRST(delete)
POINTER_FIRST(delete_array)
POINTER_FIRST(delete_sized)
POINTER_FIRST(delete_array_sized)
POINTER_FIRST(delete_nothrow)
POINTER_FIRST(delete_array_nothrow)
POINTER_FIRST(delete_aligned)
POINTER_FIRST(delete_array_aligned)
POINTER_FIRST(delete_sized_aligned)
POINTER_FIRST(delete_array_sized_aligned)
POINTER_FIRST(delete_aligned_nothrow)
POINTER_FIRST(delete_array_aligned_nothrow)

static void *(*orig_calloc)(size_t, size_t);
static void *routed_calloc(size_t n, size_t size)
{
    if (mlk_in_hook)
        return orig_calloc(n, size);
    void *p = GUARDED(orig_calloc(n, size));
    after_alloc(p, n * size, MLK_KIND_MALLOC); /* p is NULL if n * size overflowed */
    return p;
}

static int (*orig_posix_memalign)(void **, size_t, size_t);
static int routed_posix_memalign(void **out, size_t align, size_t size)
{
    if (mlk_in_hook)
        return orig_posix_memalign(out, align, size);
    int r = GUARDED(orig_posix_memalign(out, align, size));
    if (r == 0)
        after_alloc(*out, size, MLK_KIND_MALLOC);
    return r;
}

void mlk_routed_take(void *old, int trailed, struct mlk_routed_taken *taken)
{
    *taken = (struct mlk_routed_taken){0};
    taken->stack = MLK_NO_STACK;
    if (!old)
        return;
    if (trailed && (taken->trailer = trailer(old))) {
        taken->trailer_meta = mlk_trailer_take(taken->trailer);
        return;
    }
    if (mlk_ever_collected && mlk_maybe_recorded(old)) {
        BEGIN_HOOK();
        taken->had = mlk_record_take(old, &taken->stack, &taken->size);
        END_HOOK();
    }
}

void mlk_routed_put_back(void *old, struct mlk_routed_taken *taken)
{
    if (taken->trailer) {
        mlk_trailer_restore(old, taken->trailer);
    } else if (taken->had) {
        BEGIN_HOOK();
        mlk_record_put_back(old, taken->stack, taken->size);
        END_HOOK();
    }
}

void mlk_routed_moved(struct mlk_routed_taken *taken)
{
    if (taken->trailer)
        mlk_trailer_uncount(taken->trailer_meta);
}

/* realloc and reallocarray: the old block forgotten first. */
static void *moved(void *old, size_t size, void *(*call)(void *, size_t, size_t), size_t n, size_t each)
{
    struct mlk_routed_taken taken;
    mlk_routed_take(old, 0, &taken);
    void *p = GUARDED(call(old, n, each));
    if (!p && size != 0) {
        mlk_routed_put_back(old, &taken);
        return NULL;
    }
    mlk_routed_moved(&taken);
    after_alloc(p, size, MLK_KIND_MALLOC);
    return p;
}

static void *(*orig_realloc)(void *, size_t);
static void *call_realloc(void *old, size_t size, size_t unused)
{
    (void)unused;
    return orig_realloc(old, size);
}
static void *routed_realloc(void *old, size_t size)
{
    if (mlk_in_hook)
        return orig_realloc(old, size);
    return moved(old, size, call_realloc, size, 0);
}

static void *(*orig_reallocarray)(void *, size_t, size_t);
static void *routed_reallocarray(void *old, size_t n, size_t size)
{
    size_t total;
    if (mlk_in_hook || __builtin_mul_overflow(n, size, &total))
        return orig_reallocarray(old, n, size);
    return moved(old, total, orig_reallocarray, n, size);
}

#define ENTRY(name, fn, role) {name, (void *)routed_##fn, (void **)&orig_##fn, role}
const struct mlk_route_entry mlk_route_entries[] = {
    /* the malloc family first: where names share one address (tcmalloc's
     * malloc is tc_malloc, its operator new may be folded into it), the
     * first one routes it */
    ENTRY("malloc", malloc, MLK_ROUTE_CORE),
    ENTRY("free", free, MLK_ROUTE_CORE),
    ENTRY("calloc", calloc, MLK_ROUTE_CORE),
    ENTRY("realloc", realloc, MLK_ROUTE_CORE),
    ENTRY("reallocarray", reallocarray, MLK_ROUTE_ALLOC),
    ENTRY("memalign", memalign, MLK_ROUTE_ALLOC),
    ENTRY("aligned_alloc", aligned_alloc, MLK_ROUTE_ALLOC),
    ENTRY("posix_memalign", posix_memalign, MLK_ROUTE_ALLOC),
    ENTRY("valloc", valloc, MLK_ROUTE_ALLOC),
    ENTRY("pvalloc", pvalloc, MLK_ROUTE_ALLOC),
    ENTRY("cfree", cfree, MLK_ROUTE_FREE),
    ENTRY("free_sized", free_sized, MLK_ROUTE_FREE),
    ENTRY("free_aligned_sized", free_aligned_sized, MLK_ROUTE_FREE),
    ENTRY("_Znwm", new, MLK_ROUTE_ALLOC),
    ENTRY("_Znam", new_array, MLK_ROUTE_ALLOC),
    ENTRY("_ZnwmRKSt9nothrow_t", new_nothrow, MLK_ROUTE_ALLOC),
    ENTRY("_ZnamRKSt9nothrow_t", new_array_nothrow, MLK_ROUTE_ALLOC),
    ENTRY("_ZnwmSt11align_val_t", new_aligned, MLK_ROUTE_ALLOC),
    ENTRY("_ZnamSt11align_val_t", new_array_aligned, MLK_ROUTE_ALLOC),
    ENTRY("_ZnwmSt11align_val_tRKSt9nothrow_t", new_aligned_nothrow, MLK_ROUTE_ALLOC),
    ENTRY("_ZnamSt11align_val_tRKSt9nothrow_t", new_array_aligned_nothrow, MLK_ROUTE_ALLOC),
    ENTRY("_ZdlPv", delete, MLK_ROUTE_FREE),
    ENTRY("_ZdaPv", delete_array, MLK_ROUTE_FREE),
    ENTRY("_ZdlPvm", delete_sized, MLK_ROUTE_FREE),
    ENTRY("_ZdaPvm", delete_array_sized, MLK_ROUTE_FREE),
    ENTRY("_ZdlPvRKSt9nothrow_t", delete_nothrow, MLK_ROUTE_FREE),
    ENTRY("_ZdaPvRKSt9nothrow_t", delete_array_nothrow, MLK_ROUTE_FREE),
    ENTRY("_ZdlPvSt11align_val_t", delete_aligned, MLK_ROUTE_FREE),
    ENTRY("_ZdaPvSt11align_val_t", delete_array_aligned, MLK_ROUTE_FREE),
    ENTRY("_ZdlPvmSt11align_val_t", delete_sized_aligned, MLK_ROUTE_FREE),
    ENTRY("_ZdaPvmSt11align_val_t", delete_array_sized_aligned, MLK_ROUTE_FREE),
    ENTRY("_ZdlPvSt11align_val_tRKSt9nothrow_t", delete_aligned_nothrow, MLK_ROUTE_FREE),
    ENTRY("_ZdaPvSt11align_val_tRKSt9nothrow_t", delete_array_aligned_nothrow, MLK_ROUTE_FREE),
};
const int mlk_route_entry_count = sizeof mlk_route_entries / sizeof mlk_route_entries[0];
