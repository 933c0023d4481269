/* Allocator families called by their own names: mimalloc's mi_* API,
 * jemalloc's non-standard one (mallocx, rallocx, ... and the je_ and
 * _rjem_ prefixed builds, Rust's among them) and tcmalloc's tc_*.  A
 * program that calls mi_malloc gets a block that never passes through
 * malloc, so these entry points are routed like the malloc family of an
 * executable that defines its own (route.c decides which, patch.c makes
 * them jump): wherever they are defined, in the executable or in a library
 * behind ours.
 *
 * Every hook here is one function of six word arguments (all these
 * functions take integer and pointer arguments only, at most six, so the
 * registers they are passed in are the same) that hands its entry's
 * description to family_call: which argument is the size, the count, the
 * old pointer, and what the call does with them.
 *
 * A block is one block whichever family's entry made or frees it: routed
 * blocks are kept in the address table, which every free asks; and where
 * the family's allocator is also the malloc our exported hooks forward to
 * (a program linked with -lmimalloc), a block our malloc made carries a
 * trailer that the family's free (mi_free of a malloc'ed block) takes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

#include "route.h"
#include "routed.h"

enum shape {
    ALLOC,        /* returns the block: size (times count) */
    POSIX_ALIGN,  /* (void **out, align, size): 0 and *out */
    REALLOC,      /* the old pointer and the new size (times count); NULL: old left in place */
    REALLOCF,     /* the same, but a failure frees the old block (mi_reallocf) */
    FREE,         /* the pointer */
    STRDUP,       /* a copy of a string: strlen + 1 bytes */
    REALPATH,     /* allocates only when its `resolved` argument (ptr_at) is NULL */
    EXPAND,       /* (p, size): p grown or shrunk in place, or NULL and p as it was */
    XALLOCX,      /* jemalloc: (p, size, extra, flags) -> the real size, in place */
    HEAP_DESTROY, /* mimalloc: every block of the heap freed at once */
};
#define NONE 7 /* no such argument */

struct family_entry {
    word (*orig)(word, word, word, word, word, word);
    uint8_t shape, size_at, count_at, ptr_at, kind;
    bool trailed; /* set by route.c: this allocator also serves our exported malloc */
};

/* name, id, shape, size_at, count_at, ptr_at, kind */
#define MI(X)                                                                                      \
    X("mi_malloc", mi_malloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                                \
    X("mi_zalloc", mi_zalloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                                \
    X("mi_malloc_small", mi_malloc_small, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                    \
    X("mi_zalloc_small", mi_zalloc_small, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                    \
    X("mi_calloc", mi_calloc, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC)                                   \
    X("mi_mallocn", mi_mallocn, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC)                                 \
    X("mi_malloc_aligned", mi_malloc_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                \
    X("mi_malloc_aligned_at", mi_malloc_aligned_at, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)          \
    X("mi_zalloc_aligned", mi_zalloc_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                \
    X("mi_zalloc_aligned_at", mi_zalloc_aligned_at, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)          \
    X("mi_calloc_aligned", mi_calloc_aligned, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC)                   \
    X("mi_calloc_aligned_at", mi_calloc_aligned_at, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC)             \
    X("mi_memalign", mi_memalign, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)                            \
    X("mi_aligned_alloc", mi_aligned_alloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)                  \
    X("mi_valloc", mi_valloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                                \
    X("mi_pvalloc", mi_pvalloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                              \
    X("mi_posix_memalign", mi_posix_memalign, POSIX_ALIGN, 2, NONE, NONE, MLK_KIND_MALLOC)          \
    X("mi_new", mi_new, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)                                         \
    X("mi_new_n", mi_new_n, ALLOC, 1, 0, NONE, MLK_KIND_NEW)                                        \
    X("mi_new_nothrow", mi_new_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)                         \
    X("mi_new_aligned", mi_new_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)                         \
    X("mi_new_aligned_nothrow", mi_new_aligned_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)         \
    X("mi_strdup", mi_strdup, STRDUP, NONE, NONE, NONE, MLK_KIND_MALLOC)                            \
    X("mi_strndup", mi_strndup, STRDUP, NONE, NONE, NONE, MLK_KIND_MALLOC)                          \
    X("mi_realpath", mi_realpath, REALPATH, NONE, NONE, 1, MLK_KIND_MALLOC)                         \
    X("mi_realloc", mi_realloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)                               \
    X("mi_reallocn", mi_reallocn, REALLOC, 2, 1, 0, MLK_KIND_MALLOC)                                \
    X("mi_reallocarray", mi_reallocarray, REALLOC, 2, 1, 0, MLK_KIND_MALLOC)                        \
    X("mi_reallocf", mi_reallocf, REALLOCF, 1, NONE, 0, MLK_KIND_MALLOC)                            \
    X("mi_rezalloc", mi_rezalloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)                             \
    X("mi_recalloc", mi_recalloc, REALLOC, 2, 1, 0, MLK_KIND_MALLOC)                                \
    X("mi_realloc_aligned", mi_realloc_aligned, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)               \
    X("mi_realloc_aligned_at", mi_realloc_aligned_at, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)         \
    X("mi_rezalloc_aligned", mi_rezalloc_aligned, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)             \
    X("mi_rezalloc_aligned_at", mi_rezalloc_aligned_at, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)       \
    X("mi_recalloc_aligned", mi_recalloc_aligned, REALLOC, 2, 1, 0, MLK_KIND_MALLOC)                \
    X("mi_recalloc_aligned_at", mi_recalloc_aligned_at, REALLOC, 2, 1, 0, MLK_KIND_MALLOC)          \
    X("mi_new_realloc", mi_new_realloc, REALLOC, 1, NONE, 0, MLK_KIND_NEW)                          \
    X("mi_new_reallocn", mi_new_reallocn, REALLOC, 2, 1, 0, MLK_KIND_NEW)                           \
    X("mi_expand", mi_expand, EXPAND, 1, NONE, 0, MLK_KIND_MALLOC)                                  \
    X("mi_heap_malloc", mi_heap_malloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)                      \
    X("mi_heap_zalloc", mi_heap_zalloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)                      \
    X("mi_heap_malloc_small", mi_heap_malloc_small, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)          \
    X("mi_heap_calloc", mi_heap_calloc, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC)                         \
    X("mi_heap_mallocn", mi_heap_mallocn, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC)                       \
    X("mi_heap_malloc_aligned", mi_heap_malloc_aligned, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)      \
    X("mi_heap_malloc_aligned_at", mi_heap_malloc_aligned_at, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC) \
    X("mi_heap_zalloc_aligned", mi_heap_zalloc_aligned, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)      \
    X("mi_heap_zalloc_aligned_at", mi_heap_zalloc_aligned_at, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC) \
    X("mi_heap_calloc_aligned", mi_heap_calloc_aligned, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC)         \
    X("mi_heap_calloc_aligned_at", mi_heap_calloc_aligned_at, ALLOC, 2, 1, NONE, MLK_KIND_MALLOC)   \
    X("mi_heap_alloc_new", mi_heap_alloc_new, ALLOC, 1, NONE, NONE, MLK_KIND_NEW)                   \
    X("mi_heap_alloc_new_n", mi_heap_alloc_new_n, ALLOC, 2, 1, NONE, MLK_KIND_NEW)                  \
    X("mi_heap_strdup", mi_heap_strdup, STRDUP, NONE, NONE, NONE, MLK_KIND_MALLOC)                  \
    X("mi_heap_strndup", mi_heap_strndup, STRDUP, NONE, NONE, NONE, MLK_KIND_MALLOC)                \
    X("mi_heap_realpath", mi_heap_realpath, REALPATH, NONE, NONE, 2, MLK_KIND_MALLOC)               \
    X("mi_heap_realloc", mi_heap_realloc, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC)                     \
    X("mi_heap_reallocn", mi_heap_reallocn, REALLOC, 3, 2, 1, MLK_KIND_MALLOC)                      \
    X("mi_heap_reallocf", mi_heap_reallocf, REALLOCF, 2, NONE, 1, MLK_KIND_MALLOC)                  \
    X("mi_heap_rezalloc", mi_heap_rezalloc, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC)                   \
    X("mi_heap_recalloc", mi_heap_recalloc, REALLOC, 3, 2, 1, MLK_KIND_MALLOC)                      \
    X("mi_heap_realloc_aligned", mi_heap_realloc_aligned, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC)     \
    X("mi_heap_realloc_aligned_at", mi_heap_realloc_aligned_at, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC) \
    X("mi_heap_rezalloc_aligned", mi_heap_rezalloc_aligned, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC)   \
    X("mi_heap_rezalloc_aligned_at", mi_heap_rezalloc_aligned_at, REALLOC, 2, NONE, 1, MLK_KIND_MALLOC) \
    X("mi_heap_recalloc_aligned", mi_heap_recalloc_aligned, REALLOC, 3, 2, 1, MLK_KIND_MALLOC)      \
    X("mi_heap_recalloc_aligned_at", mi_heap_recalloc_aligned_at, REALLOC, 3, 2, 1, MLK_KIND_MALLOC) \
    X("mi_free", mi_free, FREE, NONE, NONE, 0, 0)                                                   \
    X("mi_cfree", mi_cfree, FREE, NONE, NONE, 0, 0)                                                 \
    X("mi_free_size", mi_free_size, FREE, NONE, NONE, 0, 0)                                         \
    X("mi_free_aligned", mi_free_aligned, FREE, NONE, NONE, 0, 0)                                   \
    X("mi_free_size_aligned", mi_free_size_aligned, FREE, NONE, NONE, 0, 0)                         \
    X("mi_heap_destroy", mi_heap_destroy, HEAP_DESTROY, NONE, NONE, 0, 0)

/* jemalloc's API under one prefix: "" (Debian's libjemalloc), "je_", "_rjem_" (Rust). */
#define JE(X, p, P)                                                                                \
    X(#p "mallocx", P##mallocx, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                              \
    X(#p "rallocx", P##rallocx, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)                               \
    X(#p "xallocx", P##xallocx, XALLOCX, 1, NONE, 0, MLK_KIND_MALLOC)                               \
    X(#p "dallocx", P##dallocx, FREE, NONE, NONE, 0, 0)                                             \
    X(#p "sdallocx", P##sdallocx, FREE, NONE, NONE, 0, 0)
#define JE_PREFIXED(X, p, P)                                                                       \
    JE(X, p, P)                                                                                    \
    X(#p "malloc", P##malloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                                \
    X(#p "calloc", P##calloc, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC)                                   \
    X(#p "realloc", P##realloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)                               \
    X(#p "free", P##free, FREE, NONE, NONE, 0, 0)                                                   \
    X(#p "posix_memalign", P##posix_memalign, POSIX_ALIGN, 2, NONE, NONE, MLK_KIND_MALLOC)          \
    X(#p "aligned_alloc", P##aligned_alloc, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)                  \
    X(#p "memalign", P##memalign, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)                            \
    X(#p "valloc", P##valloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)

#define TC(X)                                                                                      \
    X("tc_malloc", tc_malloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                                \
    X("tc_malloc_skip_new_handler", tc_malloc_skip_new_handler, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC) \
    X("tc_calloc", tc_calloc, ALLOC, 1, 0, NONE, MLK_KIND_MALLOC)                                   \
    X("tc_memalign", tc_memalign, ALLOC, 1, NONE, NONE, MLK_KIND_MALLOC)                            \
    X("tc_valloc", tc_valloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                                \
    X("tc_pvalloc", tc_pvalloc, ALLOC, 0, NONE, NONE, MLK_KIND_MALLOC)                              \
    X("tc_posix_memalign", tc_posix_memalign, POSIX_ALIGN, 2, NONE, NONE, MLK_KIND_MALLOC)          \
    X("tc_realloc", tc_realloc, REALLOC, 1, NONE, 0, MLK_KIND_MALLOC)                               \
    X("tc_new", tc_new, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)                                         \
    X("tc_newarray", tc_newarray, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)                               \
    X("tc_new_nothrow", tc_new_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)                         \
    X("tc_newarray_nothrow", tc_newarray_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)               \
    X("tc_new_aligned", tc_new_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)                         \
    X("tc_newarray_aligned", tc_newarray_aligned, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)               \
    X("tc_new_aligned_nothrow", tc_new_aligned_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW)         \
    X("tc_newarray_aligned_nothrow", tc_newarray_aligned_nothrow, ALLOC, 0, NONE, NONE, MLK_KIND_NEW) \
    X("tc_free", tc_free, FREE, NONE, NONE, 0, 0)                                                   \
    X("tc_cfree", tc_cfree, FREE, NONE, NONE, 0, 0)                                                 \
    X("tc_free_sized", tc_free_sized, FREE, NONE, NONE, 0, 0)                                       \
    X("tc_delete", tc_delete, FREE, NONE, NONE, 0, 0)                                               \
    X("tc_deletearray", tc_deletearray, FREE, NONE, NONE, 0, 0)                                     \
    X("tc_delete_nothrow", tc_delete_nothrow, FREE, NONE, NONE, 0, 0)                               \
    X("tc_deletearray_nothrow", tc_deletearray_nothrow, FREE, NONE, NONE, 0, 0)                     \
    X("tc_delete_sized", tc_delete_sized, FREE, NONE, NONE, 0, 0)                                   \
    X("tc_deletearray_sized", tc_deletearray_sized, FREE, NONE, NONE, 0, 0)                         \
    X("tc_delete_aligned", tc_delete_aligned, FREE, NONE, NONE, 0, 0)                               \
    X("tc_deletearray_aligned", tc_deletearray_aligned, FREE, NONE, NONE, 0, 0)                     \
    X("tc_delete_sized_aligned", tc_delete_sized_aligned, FREE, NONE, NONE, 0, 0)                   \
    X("tc_deletearray_sized_aligned", tc_deletearray_sized_aligned, FREE, NONE, NONE, 0, 0)         \
    X("tc_delete_aligned_nothrow", tc_delete_aligned_nothrow, FREE, NONE, NONE, 0, 0)               \
    X("tc_deletearray_aligned_nothrow", tc_deletearray_aligned_nothrow, FREE, NONE, NONE, 0, 0)

#define ALL(X) MI(X) JE(X, , ) JE_PREFIXED(X, je_, je_) JE_PREFIXED(X, _rjem_, _rjem_) TC(X)

#define AS_INDEX(name, id, ...) ID_##id,
enum { ALL(AS_INDEX) FAMILY_ENTRIES };

#define AS_DESCRIPTION(name, id, shape, size_at, count_at, ptr_at, kind)                             \
    [ID_##id] = {NULL, shape, size_at, count_at, ptr_at, kind, false},
static struct family_entry entries[FAMILY_ENTRIES] = {ALL(AS_DESCRIPTION)};

typedef word (*original_fn)(word, word, word, word, word, word);
#define ORIGINAL(e, a) (e)->orig(a[0], a[1], a[2], a[3], a[4], a[5])

/* mimalloc's heap walker, for mi_heap_destroy (route.c looks it up). */
static bool (*visit_blocks)(void *heap, bool all, bool (*visitor)(const void *, const void *, void *, size_t, void *),
                            void *arg);

static bool forget_block(const void *heap, const void *area, void *block, size_t size, void *arg)
{
    (void)heap, (void)area, (void)size, (void)arg;
    if (block && mlk_ever_collected && mlk_maybe_recorded(block)) {
        uint32_t stack;
        uint64_t bytes;
        mlk_addr_remove((uint64_t)block, &stack, &bytes); /* (a heap's blocks are routed ones) */
    }
    return true;
}

static size_t times(const struct family_entry *e, const word *a, bool *overflow)
{
    size_t size = a[e->size_at];
    *overflow = e->count_at != NONE && __builtin_mul_overflow(size, (size_t)a[e->count_at], &size);
    return size;
}

static word family_call(struct family_entry *e, word *a)
{
    if (mlk_in_hook)
        return ORIGINAL(e, a);
    bool overflow;
    switch (e->shape) {
    case ALLOC: {
        word p = GUARDED(ORIGINAL(e, a));
        size_t size = times(e, a, &overflow);
        if (!overflow)
            after_alloc((void *)p, size, e->kind);
        return p;
    }
    case POSIX_ALIGN: {
        word r = GUARDED(ORIGINAL(e, a));
        if ((int)r == 0)
            after_alloc(*(void **)a[0], a[e->size_at], e->kind);
        return r;
    }
    case STRDUP:
    case REALPATH: {
        word p = GUARDED(ORIGINAL(e, a));
        if (p && (e->shape == STRDUP || !a[e->ptr_at]))
            after_alloc((void *)p, strlen((const char *)p) + 1, e->kind);
        return p;
    }
    case FREE: {
        void *p = (void *)a[e->ptr_at];
        if (mlk_is_boot(p))
            return 0; /* made while we looked up the real functions: ours to keep */
        struct mlk_routed_taken taken;
        mlk_routed_take(p, e->trailed, &taken);
        mlk_routed_moved(&taken);
        return GUARDED(ORIGINAL(e, a));
    }
    case REALLOC:
    case REALLOCF: {
        void *old = (void *)a[e->ptr_at];
        size_t size = times(e, a, &overflow);
        struct mlk_routed_taken taken;
        mlk_routed_take(old, e->trailed, &taken);
        word p = GUARDED(ORIGINAL(e, a));
        if (!p && size != 0 && e->shape == REALLOC) {
            mlk_routed_put_back(old, &taken);
            return 0;
        }
        mlk_routed_moved(&taken);
        if (!overflow)
            after_alloc((void *)p, size, e->kind);
        return p;
    }
    case EXPAND:
    case XALLOCX: {
        /* In place: the block keeps its stack, with its new size. */
        void *p = (void *)a[e->ptr_at];
        struct mlk_routed_taken taken;
        mlk_routed_take(p, 0, &taken);
        word r = GUARDED(ORIGINAL(e, a));
        if (taken.had) {
            size_t want = a[e->size_at], extra = a[2];
            if (e->shape == EXPAND && r)
                taken.size = want;
            else if (e->shape == XALLOCX && r >= want)
                taken.size = r < want + extra ? r : want + extra; /* what the caller may use */
            mlk_routed_put_back(p, &taken);
        }
        return r;
    }
    case HEAP_DESTROY:
        if (visit_blocks && a[0] && mlk_ever_collected) {
            GUARDED(visit_blocks((void *)a[0], true, forget_block, NULL));
            forget_block(NULL, NULL, (void *)a[0], 0, NULL); /* the heap itself, mi_free'd inside */
        }
        return GUARDED(ORIGINAL(e, a));
    }
    return ORIGINAL(e, a);
}

#define AS_HOOK(name, id, ...)                                                                     \
    static word routed_##id(word a0, word a1, word a2, word a3, word a4, word a5)                  \
    {                                                                                              \
        word a[6] = {a0, a1, a2, a3, a4, a5};                                                      \
        return family_call(&entries[ID_##id], a);                                                  \
    }
ALL(AS_HOOK)

#define ROLE(shape) ((shape) == FREE || (shape) == HEAP_DESTROY ? MLK_ROUTE_FREE : MLK_ROUTE_ALLOC)
#define AS_ROUTE_ENTRY(name, id, shape, ...) {name, (void *)routed_##id, (void **)&entries[ID_##id].orig, ROLE(shape)},
const struct mlk_route_entry mlk_family_entries[] = {ALL(AS_ROUTE_ENTRY)};
const int mlk_family_entry_count = FAMILY_ENTRIES;

void mlk_family_routed(int i, int trailed, void *heap_visitor)
{
    entries[i].trailed = trailed;
    if (entries[i].shape == HEAP_DESTROY)
        *(void **)&visit_blocks = heap_visitor;
}

_Static_assert(FAMILY_ENTRIES + 64 <= 256, "route.c's MAX_ENTRIES holds a module's entries of both tables");

/* ---- under attach (attach.c): the entries reached through modules' offset tables */

int mlk_family_index(const char *name)
{
    /* (every relocation of every module asks: most names are not ours) */
    if (strncmp(name, "mi_", 3) && strncmp(name, "tc_", 3) && strncmp(name, "je_", 3) &&
        strncmp(name, "_rjem_", 6) && !strstr(name, "allocx"))
        return -1;
    for (int i = 0; i < FAMILY_ENTRIES; i++)
        if (!strcmp(mlk_family_entries[i].name, name))
            return i;
    return -1;
}

void *mlk_family_attach_hook(int i)
{
    if (!entries[i].orig) {
        void *fn = dlsym(RTLD_DEFAULT, mlk_family_entries[i].name);
        Dl_info where, next;
        if (!fn || !dladdr(fn, &where))
            return NULL;
        void *helper = entries[i].shape == HEAP_DESTROY ? dlsym(RTLD_DEFAULT, "mi_heap_visit_blocks") : NULL;
        if (entries[i].shape == HEAP_DESTROY && !helper)
            return NULL;
        int trailed = mlk_real.malloc && dladdr((void *)mlk_real.malloc, &next) &&
                      next.dli_fbase == where.dli_fbase;
        mlk_family_routed(i, trailed, helper);
        __atomic_store_n((void **)&entries[i].orig, fn, __ATOMIC_RELEASE);
    }
    return mlk_family_entries[i].hook;
}
