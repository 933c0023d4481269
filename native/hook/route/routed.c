/* The hooks that routed entry points jump to (route.c decides which entry
 * points; patch.c makes them jump): the malloc family's usual names in a
 * module that wins their lookup over ours (Chromium's executable, a static
 * tcmalloc), and the families called by their own names -- mimalloc's
 * mi_*, jemalloc's mallocx & co (and the je_ and _rjem_ builds, Rust's
 * among them), tcmalloc's tc_* -- wherever they are defined.
 *
 * Each hook is one function of six word arguments (all these functions
 * take integer and pointer arguments only, at most six, so the registers
 * they are passed in are the same) that hands its entry's description
 * (entries.h: which argument is the size, the count, the old pointer, what
 * the call does with them) to routed_call.  That runs the program's own
 * function through its trampoline with the guard set -- so what the
 * allocator does inside (its own mappings, its calloc calling its malloc,
 * tcmalloc's operator new for its MallocExtension) is not counted again --
 * and records the block in the address table, never with a trailer: the
 * trailer's place comes from glibc's malloc_usable_size, which knows
 * nothing of these blocks.  errno is the allocator's: the guard goes up
 * before the call and the recording saves and restores errno around it.
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

#include "../hooks.h"
#include "route.h"

typedef uintptr_t word;

/* The guard is dropped again if operator new throws through us (these
 * files are compiled with -fexceptions). */
static inline void mlk_drop_guard(int *unused)
{
    (void)unused;
    mlk_in_hook = 0;
}
#define GUARDED(call)                                                                              \
    ({                                                                                             \
        int guard_ __attribute__((cleanup(mlk_drop_guard))) = 0;                                   \
        (void)guard_;                                                                              \
        mlk_in_hook = 1;                                                                           \
        call;                                                                                      \
    })

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

#define BY_SHAPE (-1) /* entries.h's role: by the shape */

/* What an entry's call does with its arguments (entries.h's row). */
struct routed_shape {
    uint8_t shape, size_at, count_at, ptr_at, kind;
};

/* An entry's state, set by route.c when it is routed. */
struct routed_entry {
    word (*orig)(word, word, word, word, word, word);
    uint8_t shape;
    bool trailed; /* this allocator also serves our exported malloc */
};

#include "entries.h"

/* The old block of a realloc is forgotten before the call (another thread
 * may be handed its address the moment it is freed) and put back if the
 * allocator refuses and leaves it in place.  `trailed`: the block may be one
 * our exported malloc made through this same allocator, with a trailer (a
 * family whose allocator is also the malloc we forward to: mimalloc's
 * mi_realloc of a malloc'ed block); else only the address table is asked. */
struct taken {
    struct mlk_trailer *trailer;
    uint64_t trailer_meta;
    uint64_t reserved; /* of a trailed block: its trailer's offset */
    int had;
    uint32_t stack;
    uint64_t size;
};
static void take(void *old, int trailed, struct taken *taken)
{
    *taken = (struct taken){0};
    taken->stack = MLK_NO_STACK;
    if (!old)
        return;
    if (trailed && (taken->trailer = trailer(old))) {
        taken->trailer_meta = mlk_trailer_take(taken->trailer);
        taken->reserved = (uint64_t)((char *)taken->trailer - (char *)old);
        return;
    }
    if (mlk_ever_collected && mlk_maybe_recorded(old)) {
        BEGIN_HOOK();
        taken->had = mlk_record_take(old, &taken->stack, &taken->size);
        END_HOOK();
    }
}

static void put_back(void *old, struct taken *taken)
{
    if (taken->trailer) {
        mlk_trailer_restore(old, taken->trailer);
    } else if (taken->had) {
        BEGIN_HOOK();
        mlk_record_put_back(old, taken->stack, taken->size);
        END_HOOK();
    }
}

/* The call moved or freed it. */
static void moved(struct taken *taken)
{
    if (taken->trailer)
        mlk_trailer_uncount((char *)taken->trailer - taken->reserved, taken->trailer_meta, taken->reserved);
}

#define AS_INDEX(name, id, ...) ID_##id,
enum { ALL(AS_INDEX) ENTRIES };
#define AS_ONE(...) +1
enum { USUAL_ENTRIES = 0 USUAL(AS_ONE) };

#define AS_STATE(name, id, shape, ...) [ID_##id] = {NULL, shape, false},
static struct routed_entry entries[ENTRIES] = {ALL(AS_STATE)};

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

static inline size_t times(struct routed_shape d, const word *a, bool *overflow)
{
    size_t size = a[d.size_at];
    *overflow = d.count_at != NONE && __builtin_mul_overflow(size, (size_t)a[d.count_at], &size);
    return size;
}

/* Inlined into each hook with its entry's shape as constants: the switch
 * and the argument picking fold away, and each hook is the few lines its
 * shape needs (a generic out-of-line one cost 84 more instructions per
 * allocation and free: bench/callgrind.py --only tcmalloc-static). */
static inline __attribute__((always_inline)) word routed_call(struct routed_shape d, struct routed_entry *e,
                                                              word *a)
{
    if (mlk_in_hook)
        return ORIGINAL(e, a);
    bool overflow;
    switch (d.shape) {
    case ALLOC: {
        word p = GUARDED(ORIGINAL(e, a));
        size_t size = times(d, a, &overflow);
        if (!overflow)
            after_alloc((void *)p, size, d.kind);
        return p;
    }
    case POSIX_ALIGN: {
        word r = GUARDED(ORIGINAL(e, a));
        if ((int)r == 0)
            after_alloc(*(void **)a[0], a[d.size_at], d.kind);
        return r;
    }
    case STRDUP:
    case REALPATH: {
        word p = GUARDED(ORIGINAL(e, a));
        if (p && (d.shape == STRDUP || !a[d.ptr_at]))
            after_alloc((void *)p, strlen((const char *)p) + 1, d.kind);
        return p;
    }
    case FREE: {
        void *p = (void *)a[d.ptr_at];
        if (mlk_is_boot(p))
            return 0; /* made while we looked up the real functions: ours to keep */
        struct taken taken;
        take(p, e->trailed, &taken);
        moved(&taken);
        return GUARDED(ORIGINAL(e, a));
    }
    case REALLOC:
    case REALLOCF: {
        void *old = (void *)a[d.ptr_at];
        size_t size = times(d, a, &overflow);
        struct taken taken;
        take(old, e->trailed, &taken);
        word p = GUARDED(ORIGINAL(e, a));
        if (!p && size != 0 && d.shape == REALLOC) {
            put_back(old, &taken);
            return 0;
        }
        moved(&taken);
        if (!overflow)
            after_alloc((void *)p, size, d.kind);
        return p;
    }
    case EXPAND:
    case XALLOCX: {
        /* In place: the block keeps its stack, with its new size. */
        void *p = (void *)a[d.ptr_at];
        struct taken taken;
        take(p, 0, &taken);
        word r = GUARDED(ORIGINAL(e, a));
        if (taken.had) {
            size_t want = a[d.size_at], extra = a[2];
            if (d.shape == EXPAND && r)
                taken.size = want;
            else if (d.shape == XALLOCX && r >= want)
                taken.size = r < want + extra ? r : want + extra; /* what the caller may use */
            put_back(p, &taken);
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

#define AS_HOOK(name, id, shape, size_at, count_at, ptr_at, kind, role)                              \
    static word routed_##id(word a0, word a1, word a2, word a3, word a4, word a5)                  \
    {                                                                                              \
        word a[6] = {a0, a1, a2, a3, a4, a5};                                                      \
        return routed_call((struct routed_shape){shape, size_at, count_at, ptr_at, kind}, &entries[ID_##id], a); \
    }
ALL(AS_HOOK)

#define ROLE(shape, role)                                                                          \
    ((role) != BY_SHAPE ? (role) : (shape) == FREE || (shape) == HEAP_DESTROY ? MLK_ROUTE_FREE : MLK_ROUTE_ALLOC)
#define AS_ROUTE_ENTRY(name, id, shape, size_at, count_at, ptr_at, kind, role)                       \
    {name, (void *)routed_##id, (void **)&entries[ID_##id].orig, ROLE(shape, role)},
const struct mlk_route_entry mlk_route_entries[] = {ALL(AS_ROUTE_ENTRY)};
const int mlk_route_entry_count = ENTRIES;
const int mlk_route_usual_count = USUAL_ENTRIES;

void mlk_route_entry_routed(int i, int trailed, void *heap_visitor)
{
    entries[i].trailed = trailed;
    if (trailed)
        mlk_real_guard_forwarding(); /* its malloc family calls this entry: our calls of it hold the guard */
    if (entries[i].shape == HEAP_DESTROY)
        *(void **)&visit_blocks = heap_visitor;
}

_Static_assert(ENTRIES <= MLK_ROUTE_MAX_ENTRIES, "route.c's candidates hold every entry a module could define");

/* ---- under attach (attach.c): the entries reached through modules' offset tables */

int mlk_route_family_index(const char *name)
{
    /* (every relocation of every module asks: most names are not ours) */
    if (strncmp(name, "mi_", 3) && strncmp(name, "tc_", 3) && strncmp(name, "je_", 3) &&
        strncmp(name, "_rjem_", 6) && strncmp(name, "moz_arena_", 10) && !strstr(name, "allocx"))
        return -1;
    for (int i = USUAL_ENTRIES; i < ENTRIES; i++)
        if (!strcmp(mlk_route_entries[i].name, name))
            return i;
    return -1;
}

void *mlk_route_attach_hook(int i)
{
    if (!entries[i].orig) {
        void *fn = dlsym(RTLD_DEFAULT, mlk_route_entries[i].name);
        Dl_info where, next;
        if (!fn || !dladdr(fn, &where))
            return NULL;
        void *helper = entries[i].shape == HEAP_DESTROY ? dlsym(RTLD_DEFAULT, "mi_heap_visit_blocks") : NULL;
        if (entries[i].shape == HEAP_DESTROY && !helper)
            return NULL;
        int trailed = mlk_real.malloc && dladdr(mlk_real_home((void *)mlk_real.malloc), &next) &&
                      next.dli_fbase == where.dli_fbase;
        mlk_route_entry_routed(i, trailed, helper);
        __atomic_store_n((void **)&entries[i].orig, fn, __ATOMIC_RELEASE);
    }
    return mlk_route_entries[i].hook;
}
