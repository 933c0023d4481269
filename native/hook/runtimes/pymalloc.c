/* CPython's own allocator routed (#60, docs/languages.md): pymalloc serves
 * PyObject_Malloc and PyMem_Malloc -- every Python object -- from 1 MiB
 * arenas it maps itself, so a leak of objects showed only as "a new arena"
 * blamed on whichever call opened it.  Its two domains (PYMEM_DOMAIN_MEM,
 * PYMEM_DOMAIN_OBJ) are wrapped through CPython's own interface for it,
 * PyMem_SetAllocator -- the one tracemalloc uses -- before the interpreter
 * starts (allowed then, and then no block of its was made unseen): each
 * block is recorded at its stack, Python frames and all, in the address
 * table, as a routed allocator's blocks are; pymalloc itself runs with the
 * guard up, so its arenas are not counted again, nor its big requests'
 * mallocs.
 *
 * An interpreter already running (attach, collection started late) is
 * routed by the first thread seen allocating with the GIL held
 * (mlk_pymalloc_route_running).  Not routed -- and every report says so
 * (`# python:`): one whose allocator is not pymalloc's (PYTHONMALLOC=malloc:
 * malloc sees every object anyway; the debug allocators, which replace
 * ours as the interpreter starts). */
#define _GNU_SOURCE
#include <string.h>

#include "../hooks.h"
#include "cpython.h"

/* PyMemAllocatorEx (Include/cpython/pymem.h). */
struct allocator {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr);
};
enum { DOMAIN_RAW = 0, DOMAIN_MEM = 1, DOMAIN_OBJ = 2 };

static struct allocator was_mem, was_obj; /* pymalloc's, which ours call (ctx: which) */

/* pymalloc's call with the guard up: what it does inside (an arena's
 * mmap, a big request's malloc) is not counted again. */
#define UNDER_GUARD(call)                                                                          \
    ({                                                                                             \
        mlk_in_hook = 1;                                                                           \
        __typeof__(call) r_ = call;                                                                \
        mlk_in_hook = 0;                                                                           \
        r_;                                                                                        \
    })

static void forget(void *p, uint32_t *stack, uint64_t *size, int *had)
{
    *had = 0;
    if (p && mlk_ever_collected && mlk_maybe_recorded(p)) {
        BEGIN_HOOK();
        *had = mlk_addr_remove((uint64_t)p, stack, size);
        END_HOOK();
    }
}

static void *routed_malloc(void *ctx, size_t size)
{
    const struct allocator *a = ctx;
    if (mlk_in_hook)
        return a->malloc(a->ctx, size);
    void *p = UNDER_GUARD(a->malloc(a->ctx, size));
    after_alloc(p, size, MLK_KIND_MALLOC);
    return p;
}

static void *routed_calloc(void *ctx, size_t nelem, size_t elsize)
{
    const struct allocator *a = ctx;
    if (mlk_in_hook)
        return a->calloc(a->ctx, nelem, elsize);
    void *p = UNDER_GUARD(a->calloc(a->ctx, nelem, elsize));
    size_t size;
    if (!__builtin_mul_overflow(nelem, elsize, &size))
        after_alloc(p, size, MLK_KIND_MALLOC);
    return p;
}

static void *routed_realloc(void *ctx, void *old, size_t size)
{
    const struct allocator *a = ctx;
    if (mlk_in_hook)
        return a->realloc(a->ctx, old, size);
    uint32_t stack;
    uint64_t was_size;
    int had;
    forget(old, &stack, &was_size, &had); /* (before: its address may be another's the moment it is freed) */
    void *p = UNDER_GUARD(a->realloc(a->ctx, old, size));
    if (!p) {
        if (had) { /* refused: the old block stays as it was */
            BEGIN_HOOK();
            mlk_record_put_back(old, stack, was_size);
            END_HOOK();
        }
        return p;
    }
    after_alloc(p, size, MLK_KIND_MALLOC);
    return p;
}

static void routed_free(void *ctx, void *p)
{
    const struct allocator *a = ctx;
    if (!mlk_in_hook) {
        uint32_t stack;
        uint64_t size;
        int had;
        forget(p, &stack, &size, &had);
    }
    int in_hook = mlk_in_hook;
    mlk_in_hook = 1;
    a->free(a->ctx, p);
    mlk_in_hook = in_hook;
}

static void (*get_allocator)(int, struct allocator *);
static void (*set_allocator)(int, struct allocator *);
static int route(int early);

/* At the segment's making, in a CPython whose frames are read: pymalloc's
 * domains wrapped, if the interpreter has not started and they are
 * pymalloc's.  MLK_PYMALLOC_*: routed, or why not. */
int mlk_pymalloc_route(void)
{
    int (*initialized)(void) = (int (*)(void))mlk_py_symbol("Py_IsInitialized");
    set_allocator = (void (*)(int, struct allocator *))mlk_py_symbol("PyMem_SetAllocator");
    get_allocator = (void (*)(int, struct allocator *))mlk_py_symbol("PyMem_GetAllocator");
    if (!initialized || !get_allocator || !set_allocator) {
        get_allocator = NULL;
        return MLK_PYMALLOC_NO_INTERFACE;
    }
    if (initialized())
        return MLK_PYMALLOC_RUNNING; /* (mlk_pymalloc_route_running, later, with the GIL) */
    return route(1);
}

/* An interpreter that ran before collection started (attach, a late
 * mtrace()): routed by a thread that holds the GIL -- PyMem_SetAllocator's
 * condition once it runs; no other thread is inside pymalloc then.  Its
 * older blocks were never recorded (an attached process's older blocks
 * have no trailer, and pymalloc's none at all): their frees and reallocs,
 * through our wrappers with the guard up, find nothing to take, as
 * before. */
int mlk_pymalloc_route_running(void)
{
    return get_allocator ? route(0) : MLK_PYMALLOC_NO_INTERFACE;
}

/* early: before the program's threads run, so the address table's hash
 * may still change (with threads allocating meanwhile, a block hashed one
 * way could be looked for the other). */
static int route(int early)
{
    struct allocator raw, mem, obj;
    get_allocator(DOMAIN_RAW, &raw);
    get_allocator(DOMAIN_MEM, &mem);
    get_allocator(DOMAIN_OBJ, &obj);
    if (obj.malloc == routed_malloc || mem.malloc == routed_malloc)
        return MLK_PYMALLOC_ROUTED; /* (ours already: wrapping them again would call themselves) */
    if (obj.malloc == raw.malloc || mem.malloc == raw.malloc)
        return MLK_PYMALLOC_MALLOC;
    if (early)
        mlk_addr_hash_each_block(); /* (its dense blocks: see there) */
    was_mem = mem, was_obj = obj;
    struct allocator ours = {&was_mem, routed_malloc, routed_calloc, routed_realloc, routed_free};
    set_allocator(DOMAIN_MEM, &ours);
    ours.ctx = &was_obj;
    set_allocator(DOMAIN_OBJ, &ours);
    return MLK_PYMALLOC_ROUTED;
}

/* Once the interpreter runs (its first Python stack): still ours?  Its
 * start replaces them where PYTHONMALLOC (or -X dev) names an allocator. */
int mlk_pymalloc_still_routed(void)
{
    struct allocator obj;
    get_allocator(DOMAIN_OBJ, &obj);
    return obj.malloc == routed_malloc;
}
