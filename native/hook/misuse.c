/* Misuse of the allocator, seen where the free hooks read a block's
 * trailer: a block freed again, a pointer freed that was never allocated
 * (on the stack, in a module's data), a block freed by another family's
 * call (malloc'd and deleted, new[]'d and deleted), a sized delete whose
 * size is not the block's.  Each is recorded in the segment with the
 * misusing call's stack and the block's allocation stack, counted per
 * (kind, call, both stacks): the reports list them, with valgrind's words.
 *
 * What it costs: nothing on a good free but the compare of two bits of the
 * trailer's word, which the free reads anyway (and, for a sized delete, of
 * its size); a misuse takes a backtrace and a short locked search.
 *
 * What it cannot see (no shadow memory): a second free after the
 * allocator handed the memory out again, or merged it with a neighbour
 * (glibc then aborts on its own, "double free or corruption") -- unless
 * the quarantine (quarantine.c) still held the block, which it then names
 * with the first free's stack;
 * a free of a pointer into a block's middle; blocks made without a
 * trailer (sampling, track=table, aligned new, before collection, a
 * routed allocator's). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

#include "hooks.h"

static mlk_lock_t lock;

/* The record for this misuse, made if new; NULL when the table is full. */
static struct mlk_misuse *record_of(struct mlk_header *h, int kind, int call, int family, uint32_t at,
                                    uint32_t alloc_stack, uint64_t keyed)
{
    uint32_t n = h->misuse_used;
    for (uint32_t i = 0; i < n && i < MLK_MISUSE_MAX; i++) {
        struct mlk_misuse *m = &h->misuse[i];
        if (m->kind == kind && m->call == call && m->family == family && m->at_stack == at &&
            m->alloc_stack == alloc_stack && (kind == MLK_MISUSE_SIZE ? m->given == keyed : m->where == keyed))
            return m;
    }
    if (n >= MLK_MISUSE_MAX)
        return NULL;
    struct mlk_misuse *m = &h->misuse[n];
    m->kind = (uint16_t)kind;
    m->call = (uint8_t)call;
    m->family = (uint8_t)family;
    m->at_stack = at;
    m->alloc_stack = alloc_stack;
    m->where = kind == MLK_MISUSE_SIZE ? 0 : (uint32_t)keyed;
    m->given = kind == MLK_MISUSE_SIZE ? keyed : 0;
    __atomic_store_n(&m->state, MLK_MISUSE_READY, __ATOMIC_RELEASE);
    __atomic_store_n(&h->misuse_used, n + 1, __ATOMIC_RELEASE);
    return m;
}

/* Records one misuse at the caller's stack (the walk skips our frames);
 * the caller has its guard up. */
static void record(int kind, int call, int family, uint32_t alloc_stack, uint64_t size, uint64_t given,
                   uint32_t where, uint32_t first_free)
{
    struct mlk_header *h = mlk_seg;
    __atomic_add_fetch(&h->misuse_total, 1, __ATOMIC_RELAXED);
    uint32_t at = mlk_current_stack(MLK_KIND_FREE_SITE);
    mlk_lock(&lock);
    struct mlk_misuse *m =
        record_of(h, kind, call, family, at, alloc_stack, kind == MLK_MISUSE_SIZE ? given : where);
    if (m) {
        if (!m->size)
            m->size = size;
        if (kind == MLK_MISUSE_INVALID_FREE && !m->given)
            m->given = given; /* the first such address */
        if (!m->first_free && first_free != MLK_NO_STACK)
            m->first_free = first_free + 1;
        __atomic_add_fetch(&m->count, 1, __ATOMIC_RELAXED);
    } else {
        __atomic_add_fetch(&h->misuse_dropped, 1, __ATOMIC_RELAXED);
    }
    mlk_unlock(&lock);
}

static int watching(void)
{
    return mlk_seg && mlk_collecting && mlk_seg->misuse_mode != MLK_MISUSE_OFF;
}

void mlk_misuse_trailed(uint64_t meta, int call, size_t given)
{
    uint32_t stack = mlk_trailer_stack_of(meta);
    if (stack == MLK_TRAILER_UNCOUNTED || mlk_in_hook || !watching())
        return; /* a block not counted keeps no family; our own frees are not the program's */
    uint32_t family = mlk_trailer_family_of(meta);
    uint64_t size = meta >> MLK_TRAILER_STACK_BITS;
    BEGIN_HOOK();
    if (family != FAMILY_FREED_BY(call)) {
        if (!mlk_seg->misuse_no_families)
            record(MLK_MISUSE_MISMATCH, call, family, stack, size, 0, 0, MLK_NO_STACK);
    } else if (given != MLK_NO_SIZE && given != size) {
        record(MLK_MISUSE_SIZE, call, family, stack, size, given, 0, MLK_NO_STACK);
    }
    END_HOOK();
}

/* The allocation stack and size a freed block's trailer still holds, if
 * they are plausible (glibc's tcache writes its key over the meta word of
 * the smallest blocks once they are freed). */
static int freed_meta(uint64_t meta, size_t usable, uint32_t *stack, uint64_t *size, int *family)
{
    uint64_t sz = meta >> MLK_TRAILER_STACK_BITS;
    uint32_t id = mlk_trailer_stack_of(meta);
    int fam = (int)mlk_trailer_family_of(meta);
    if (id == MLK_TRAILER_UNCOUNTED || fam > MLK_FAMILY_NEW_ARRAY || id >= mlk_seg->stacks_used ||
        sz + MLK_TRAILER_SIZE > usable || usable - (sz + MLK_TRAILER_SIZE) >= 32)
        return 0;
    *stack = id, *size = sz, *family = fam;
    return 1;
}

/* The calling thread's stack, [lo, hi), asked once per thread (glibc
 * reads /proc/self/maps for the main thread's: under the guard, its own
 * allocations and descriptors pass straight through). */
static __thread uint64_t stack_lo __attribute__((tls_model("initial-exec")));
static __thread uint64_t stack_hi __attribute__((tls_model("initial-exec")));

static int on_this_threads_stack(uint64_t a)
{
    if (!stack_hi) {
        pthread_attr_t attr;
        void *lo = NULL;
        size_t size = 0;
        BEGIN_HOOK();
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            pthread_attr_getstack(&attr, &lo, &size);
            pthread_attr_destroy(&attr);
        }
        END_HOOK();
        stack_lo = (uint64_t)lo;
        stack_hi = size ? (uint64_t)lo + size : 1;
    }
    return a >= stack_lo && a < stack_hi;
}

int mlk_misuse_untrailed(void *p, int call)
{
    if (mlk_in_hook || !mlk_trailer_key || mlk_sample_bytes)
        return 0;
    int watch = watching(), hold = watch && mlk_seg->misuse_mode == MLK_MISUSE_HOLD;
    if (!watch && !mlk_quarantine_cap)
        return 0;
    /* The hook already read p's usable size this way (to look for a
     * trailer): reading it again reads nothing new. */
    size_t usable = mlk_glibc_heap ? mlk_glibc_usable(p) : mlk_real.malloc_usable_size(p);
    if (usable >= MLK_TRAILER_SIZE) {
        struct mlk_trailer *t = mlk_trailer_at(p, usable);
        if (t->check == ((uint64_t)p ^ mlk_trailer_key ^ MLK_TRAILER_FREED)) {
            uint32_t first_free = MLK_NO_STACK;
            int held = mlk_quarantine_cap && mlk_quarantine_holds(p, &first_free);
            if (watch) {
                uint32_t stack = MLK_NO_STACK;
                uint64_t size = 0;
                int family = 255;
                freed_meta(t->meta, usable, &stack, &size, &family);
                BEGIN_HOOK();
                record(MLK_MISUSE_DOUBLE_FREE, call, family, stack, size, 0, 0, first_free);
                END_HOOK();
            }
            return held || hold; /* a held block is live to the allocator: never passed on */
        }
    }
    if (!watch)
        return 0;
    uint64_t a = (uint64_t)p;
    uint32_t where = on_this_threads_stack(a)    ? MLK_WHERE_STACK
                     : mlk_modules_cover(&a, 1)    ? MLK_WHERE_GLOBAL
                     : mlk_glibc_heap && !usable ? MLK_WHERE_NOT_A_BLOCK
                                                   : 0;
    if (!where)
        return 0; /* another allocator's, or made before collection: not ours to judge */
    BEGIN_HOOK();
    record(MLK_MISUSE_INVALID_FREE, call, 255, MLK_NO_STACK, 0, a, where, MLK_NO_STACK);
    END_HOOK();
    return hold;
}

void mlk_misuse_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&lock, acquire);
    mlk_quarantine_lock_for_fork(acquire);
}

/* Whether every global operator new and delete the program calls is ours
 * (then a block's family is what made it): asked as collection starts. */
void mlk_misuse_segment_made(void)
{
    static const char *const names[] = {"_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm"};
    Dl_info mine, theirs;
    if (!dladdr((void *)&mlk_misuse_segment_made, &mine))
        return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *f = dlsym(RTLD_DEFAULT, names[i]);
        if (f && dladdr(f, &theirs) && theirs.dli_fbase != mine.dli_fbase) {
            mlk_seg->misuse_no_families = 1;
            return;
        }
    }
}
