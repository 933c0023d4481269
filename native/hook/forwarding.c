/* How our exported hooks reach the next definitions (the `real` table,
 * hooks.h, which interpose.c's resolve fills by dlsym): the changes made
 * to the table after it is filled, applied again each time it is.
 *
 * Redirects.  A next definition that route.c routes (its first bytes now
 * jump to a routing hook: a static tcmalloc's malloc, tcmalloc's
 * posix_memalign, which is its tc_posix_memalign) is called through its
 * trampoline instead -- its original code -- so that no call of ours goes
 * through the routing hook as well, counted twice.
 *
 * Guarded forwarding.  When a routed family's allocator is also the malloc
 * we forward to (a program linked with -lmimalloc or -ltcmalloc_minimal),
 * that allocator's own malloc family calls its routed entry points:
 * mimalloc's posix_memalign jumps to mi_posix_memalign, its realloc to
 * mi_heap_realloc; tcmalloc's posix_memalign calls tc_memalign.  A block
 * our hook counts would then be counted by the routing hook too (21-38
 * phantom live blocks per 10,000 calls, and frees of blocks never seen:
 * #64 item 1).  So the table's allocation entries are then thunks that
 * raise the recursion guard around the call, which the routing hooks
 * obey.  glibc's heap (no routed family serves it) keeps the plain
 * entries: its calls pay nothing. */
#define _GNU_SOURCE
#include "hooks.h"

#define MAX_REDIRECTS 32
_Static_assert(sizeof(struct mlk_real_fns) / sizeof(void *) <= MAX_REDIRECTS, "a redirect per next definition");
static struct {
    void *from, *to;
} redirects[MAX_REDIRECTS];
static int redirect_count;

/* The allocation entries as they are, while the table holds thunks. */
static struct mlk_real_fns forwarded;
static int guarding;

#define SLOTS (sizeof(struct mlk_real_fns) / sizeof(void *))

static void redirect_table(void **fns)
{
    for (int r = 0; r < redirect_count; r++)
        for (size_t i = 0; i < SLOTS; i++)
            if (fns[i] == redirects[r].from)
                __atomic_store_n(&fns[i], redirects[r].to, __ATOMIC_RELEASE);
}

#define GUARDED_CALL(name, args)                                                                   \
    ({                                                                                             \
        int was_ = mlk_guard_up();                                                                 \
        __auto_type r_ = forwarded.name args;                                                      \
        mlk_in_hook = was_;                                                                        \
        r_;                                                                                        \
    })
static void *guarded_malloc(size_t n) { return GUARDED_CALL(malloc, (n)); }
static void *guarded_calloc(size_t n, size_t size) { return GUARDED_CALL(calloc, (n, size)); }
static void *guarded_realloc(void *p, size_t n) { return GUARDED_CALL(realloc, (p, n)); }
static int guarded_posix_memalign(void **out, size_t al, size_t n) { return GUARDED_CALL(posix_memalign, (out, al, n)); }
static void *guarded_aligned_alloc(size_t al, size_t n) { return GUARDED_CALL(aligned_alloc, (al, n)); }
static void *guarded_memalign(size_t al, size_t n) { return GUARDED_CALL(memalign, (al, n)); }
static void *guarded_valloc(size_t n) { return GUARDED_CALL(valloc, (n)); }
static void *guarded_pvalloc(size_t n) { return GUARDED_CALL(pvalloc, (n)); }
static size_t guarded_malloc_usable_size(void *p) { return GUARDED_CALL(malloc_usable_size, (p)); }
static void guarded_free(void *p)
{
    int was = mlk_guard_up();
    forwarded.free(p);
    mlk_in_hook = was;
}

/* Each allocation entry of the table and its thunk. */
#define GUARDS(X)                                                                                  \
    X(malloc) X(free) X(malloc_usable_size) X(calloc) X(realloc) X(posix_memalign) X(aligned_alloc) \
        X(memalign) X(valloc) X(pvalloc)
static void *thunk_of(size_t offset)
{
#define AS_THUNK(name) if (offset == offsetof(struct mlk_real_fns, name)) return (void *)guarded_##name;
    GUARDS(AS_THUNK)
#undef AS_THUNK
    return NULL;
}

/* The thunks into the table, each entry's next definition kept (filled
 * first: a thread may call the thunk the moment it is in). */
static void guard_table(void)
{
#define AS_GUARD(name)                                                                             \
    if (mlk_real.name && (void *)mlk_real.name != thunk_of(offsetof(struct mlk_real_fns, name))) {  \
        __atomic_store_n((void **)&forwarded.name, (void *)mlk_real.name, __ATOMIC_RELEASE);       \
        __atomic_store_n((void **)&mlk_real.name, thunk_of(offsetof(struct mlk_real_fns, name)),   \
                         __ATOMIC_RELEASE);                                                        \
    }
    GUARDS(AS_GUARD)
#undef AS_GUARD
}

void mlk_real_refilled(void)
{
    redirect_table((void **)&mlk_real);
    redirect_table((void **)&forwarded);
    if (guarding)
        guard_table();
}

void mlk_real_guard_forwarding(void)
{
    if (__atomic_exchange_n(&guarding, 1, __ATOMIC_ACQ_REL))
        return;
    guard_table();
}

void mlk_real_redirect(void *from, void *to)
{
    /* Kept only if it is one of ours (a module routes up to ~100 entries,
     * the table has a few next definitions): the table fills again with
     * the same addresses. */
    void **fns = (void **)&mlk_real, **kept = (void **)&forwarded;
    int ours = 0;
    for (size_t i = 0; i < SLOTS; i++)
        ours |= fns[i] == from || kept[i] == from;
    if (!ours || redirect_count == MAX_REDIRECTS)
        return; /* (MAX_REDIRECTS is more than the table's size: cannot be full) */
    redirects[redirect_count++] = (typeof(redirects[0])){from, to};
    mlk_real_refilled();
}

static void unredirect_table(void **fns, void *from, void *to)
{
    for (size_t i = 0; i < SLOTS; i++)
        if (fns[i] == to)
            __atomic_store_n(&fns[i], from, __ATOMIC_RELEASE);
}

void mlk_real_unredirect(void *from)
{
    for (int r = 0; r < redirect_count; r++) {
        if (redirects[r].from != from)
            continue;
        unredirect_table((void **)&mlk_real, from, redirects[r].to);
        unredirect_table((void **)&forwarded, from, redirects[r].to);
        redirects[r] = redirects[--redirect_count];
        return;
    }
}

void *mlk_real_home(void *fn)
{
    for (size_t i = 0; i < SLOTS; i++)
        if (fn && fn == thunk_of(i * sizeof(void *)))
            fn = ((void **)&forwarded)[i];
    for (int r = 0; r < redirect_count; r++)
        if (redirects[r].to == fn)
            return redirects[r].from;
    return fn;
}
