/* memleak.h -- what a program can ask libmemleak from its own code.
 *
 * Nothing to link: the calls find the tracer when it is in the process
 * (LD_PRELOAD=libmtrace.so, `libmemleak run`, `libmemleak attach`) and do
 * nothing when it is not -- a program built with this header runs
 * unchanged without it.  Build with the flag `libmemleak cflags` prints;
 * on glibc before 2.34 add -ldl.  C and C++.  docs/api.md says what each
 * call costs.
 *
 *   memleak_report(label, path, len)  write a report now, labelled; returns
 *                                     when it is on disk, its path in `path`
 *   memleak_live(&counts)             bytes and blocks live now
 *   memleak_thread(&tc)               what the calling thread allocated and
 *                                     freed since it began
 *   memleak_thread_live(&counts)      ... the first minus the second
 *   memleak_save(&sp)                 a savepoint: what is live now
 *   memleak_thread_save(&sp)          a savepoint of the calling thread's
 *   memleak_since(&sp, &counts)       live now minus live at the savepoint
 *   MEMLEAK_ASSERT_NOTHING_ADDED(sp)  abort, saying what, if more is live
 *                                     than at the savepoint
 *   memleak_leak_check(&leaks)        a reachability scan now: valgrind's
 *                                     four categories, in bytes and blocks
 *   memleak_scope_begin(&scope)       gperftools' NoLeaks() as two calls:
 *   memleak_scope_end(&scope, &left)  what the code between them left live,
 *                                     and how much of it nothing points to
 *
 * Blocks of the program's own allocator (valgrind's model; the valgrind
 * headers of `libmemleak cflags --valgrind` map its requests to these):
 *   memleak_malloclike(addr, size)    a block handed out, at the caller's stack
 *   memleak_freelike(addr)            ... and given back
 *   memleak_resize(addr, old, new)    resized in place
 *   memleak_pool_create(pool, flags)  a pool named by an address
 *   memleak_pool_alloc(pool, addr, size), memleak_pool_free(pool, addr)
 *   memleak_pool_trim(pool, addr, size)   keep only the chunks inside
 *   memleak_pool_move(from, to)       the pool's name changes
 *   memleak_pool_change(pool, from, to, size)  a chunk moves or resizes
 *   memleak_pool_exists(pool)         1 if the tracer knows the pool
 *   memleak_pool_destroy(pool)        the pool and all its chunks end
 *   memleak_last_check(&leaks)        the totals of the last leak check
 *
 * What the leak check should know (LeakSanitizer's interface maps to these):
 *   memleak_ignore(p)                 the block p points into is never lost
 *   memleak_root_region(p, size, on)  memory the scan reads as roots (on=1),
 *                                     or no longer (on=0, the same p, size)
 *   memleak_recording(on)             this thread's allocations recorded, or
 *                                     not (nesting); MEMLEAK_NOT_RECORDED in C++
 *
 * Resources other than memory (file descriptors are built in, as "fd"):
 *   memleak_resource_acquire(kind, id, weight)  resource `id` of the named
 *                                     kind is held, at the caller's stack
 *   memleak_resource_release(kind, id)          ... and let go
 *   memleak_resource_live(kind, &counts)        weight and count held now
 */
#ifndef MEMLEAK_H
#define MEMLEAK_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "memleak_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A savepoint: what was live when it was taken.  `traced` is 0 when the
 * tracer was absent or not collecting then (comparisons then say 0);
 * `thread` is 1 for the calling thread's (memleak_thread_save). */
struct memleak_savepoint {
    struct memleak_counts live;
    int traced;
    int thread;
};

/* The table has `field` (a tracer at least as new as the field). */
#define memleak__has(api, field)                                                                      \
    ((api)->size >= offsetof(struct memleak__api_v1, field) + sizeof((api)->field))

/* The tracer's table by a weak reference: resolved by the loader (to NULL
 * without the tracer), with no call that could leave anything allocated --
 * in a position-independent executable or a shared library.  (A non-PIE
 * executable's weak reference is resolved to NULL at link time.) */
extern const struct memleak__api_v1 mlk_api_v1 __attribute__((weak));

/* The table, or NULL without the tracer.  Found once and kept; not found,
 * looked for again by the calls that are rare anyway (a report, a check:
 * an attach may have come since), and by the frequent ones (a pool's
 * blocks) once every 65,536 calls -- so that blocks announced after an
 * attach are seen, for one failing dlopen(RTLD_NOLOAD) per 65,536 calls
 * without the tracer. */
static inline const struct memleak__api_v1 *memleak__api(int look_again)
{
    static const struct memleak__api_v1 *volatile api;
    static volatile int looked;
    static unsigned misses;
    const struct memleak__api_v1 *found = api;
    if (found || (looked && !look_again && (++misses & 0xffff)))
        return found;
    found = &mlk_api_v1;
    if (!found) {
        /* Attached (loaded by dlopen, in no global scope), or a non-PIE
         * program: by the tracer's soname.  Not loaded, dlopen with
         * RTLD_NOLOAD fails with no error message kept (glibc keeps only its
         * per-thread dl state, ~68 bytes, freed at exit); loaded, the loader
         * keeps the name it was asked by (a few bytes, once). */
        void *lib = dlopen("libmtrace.so", RTLD_LAZY | RTLD_NOLOAD);
        if (lib) {
            found = (const struct memleak__api_v1 *)dlsym(lib, "mlk_api_v1");
            dlclose(lib);
        }
    }
    if (found && (found->version < 1 || !memleak__has(found, leak_check)))
        found = NULL;
    api = found;
    looked = 1;
    return found;
}

/* Write a report now, synchronously, with `label` in its header and its
 * file name (prog-PID-SEQ-LABEL.memlog; cleaned to letters, digits and
 * ._+@=,%~ -- anything else becomes '_' -- 63 at most; NULL or "" for
 * none: docs/memlog.md).  Returns 0
 * once the file is on disk, its path in `path` (if not NULL, `path_len`
 * bytes at most); -1 when no report was written (no tracer, collection
 * off, the reporter did not answer in time).  Costs a report: from
 * milliseconds to seconds, with the number of stacks. */
static inline int memleak_report(const char *label, char *path, size_t path_len)
{
    const struct memleak__api_v1 *api = memleak__api(1);
    if (path && path_len)
        path[0] = 0;
    return api ? api->report(label, path, path_len) : -1;
}

/* The bytes and blocks live now, in *out: 0; -1 (and zeros) without the
 * tracer or before it collected anything.  Sums every stack's counters
 * (about a millisecond per 10,000 stacks). */
static inline int memleak_live(struct memleak_counts *out)
{
    const struct memleak__api_v1 *api = memleak__api(0);
    if (!api) {
        if (out)
            out->bytes = out->blocks = 0;
        return -1;
    }
    return api->live(out);
}

/* What the calling thread allocated and freed since it began (freed:
 * blocks it freed, whichever thread had allocated them; custom blocks and
 * resources apart, as in memleak_live): 0; -1 and zeros without the tracer
 * or before it collected anything.  A few loads: cheap enough for every
 * request of a server. */
static inline int memleak_thread(struct memleak_thread_counts *out)
{
    const struct memleak__api_v1 *api = memleak__api(0);
    if (!api || !memleak__has(api, thread_counts)) {
        struct memleak_thread_counts none = {{0, 0}, {0, 0}};
        *out = none;
        return -1;
    }
    return api->thread_counts(out);
}

/* What the calling thread added to the live memory: allocated minus freed.
 * Equal to the live bytes and blocks of its allocations while the blocks
 * it makes are freed on it (a block handed to another thread and freed
 * there stays in this count and comes off that thread's). */
static inline int memleak_thread_live(struct memleak_counts *out)
{
    struct memleak_thread_counts t;
    int r = memleak_thread(&t);
    out->bytes = t.allocated.bytes - t.freed.bytes;
    out->blocks = t.allocated.blocks - t.freed.blocks;
    return r;
}

/* Take a savepoint: 0, or -1 without the tracer (the savepoint then
 * compares as nothing added).  Process-wide: every thread's allocations
 * and frees since count. */
static inline int memleak_save(struct memleak_savepoint *sp)
{
    sp->thread = 0;
    sp->traced = memleak_live(&sp->live) == 0;
    return sp->traced ? 0 : -1;
}

/* A savepoint of the calling thread's own allocations and frees
 * (memleak_thread_live): what other threads do meanwhile does not count.
 * Compare it on the same thread. */
static inline int memleak_thread_save(struct memleak_savepoint *sp)
{
    sp->thread = 1;
    sp->traced = memleak_thread_live(&sp->live) == 0;
    return sp->traced ? 0 : -1;
}

/* What is live now beyond what was at savepoint `sp` (negative: less), in
 * *added: 0; -1 and zeros when either side was not traced.  For a thread's
 * savepoint, what this thread added since. */
static inline int memleak_since(const struct memleak_savepoint *sp, struct memleak_counts *added)
{
    struct memleak_counts now;
    added->bytes = added->blocks = 0;
    if (!sp->traced || (sp->thread ? memleak_thread_live(&now) : memleak_live(&now)) != 0)
        return -1;
    added->bytes = now.bytes - sp->live.bytes;
    added->blocks = now.blocks - sp->live.blocks;
    return 0;
}

/* A leak check now: the tracer's reachability scan (its threads stopped
 * for milliseconds, this one waiting), written as a report (reason check)
 * and returned in *out: 0; -1 and zeros when none could be made (no
 * tracer, collection off, no ptrace rights: the report or stderr says
 * why).  Costs a scan: milliseconds per 100 MB of heap, plus a report. */
static inline int memleak_leak_check(struct memleak_leaks *out)
{
    const struct memleak__api_v1 *api = memleak__api(1);
    struct memleak_leaks none = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    *out = none;
    return api ? api->leak_check(out) : -1;
}

/* A region of code checked for leaks (gperftools' HeapLeakChecker, LSan's
 * recoverable check): begin, run the code, end.  `left` is what is live
 * now beyond what was at the beginning (process-wide: every thread's
 * allocations count), `lost` how much more is definitely or indirectly
 * lost than at the beginning (a scan at each end; with scan 0 at begin,
 * none is made and `lost` stays 0).  0, or -1 when not traced. */
struct memleak_scope {
    struct memleak_savepoint start;
    struct memleak_leaks leaks_at_start;
    int scanned;
};
struct memleak_scope_result {
    struct memleak_counts left;
    struct memleak_counts lost;
};

static inline int memleak_scope_begin(struct memleak_scope *scope, int scan)
{
    scope->scanned = scan && memleak_leak_check(&scope->leaks_at_start) == 0;
    return memleak_save(&scope->start);
}

static inline int memleak_scope_end(const struct memleak_scope *scope, struct memleak_scope_result *r)
{
    struct memleak_leaks now;
    r->lost.bytes = r->lost.blocks = 0;
    if (memleak_since(&scope->start, &r->left) != 0)
        return -1;
    if (scope->scanned && memleak_leak_check(&now) == 0) {
        const struct memleak_leaks *was = &scope->leaks_at_start;
        r->lost.bytes = now.definitely.bytes + now.indirectly.bytes - was->definitely.bytes -
                        was->indirectly.bytes;
        r->lost.blocks = now.definitely.blocks + now.indirectly.blocks - was->definitely.blocks -
                         was->indirectly.blocks;
    }
    return 0;
}

/* log-malloc2's ASSERT: if more is live now than at savepoint `sp`, say
 * where and how much on stderr and abort().  Without the tracer it passes. */
#define MEMLEAK_ASSERT_NOTHING_ADDED(sp) memleak__assert_nothing_added(&(sp), __FILE__, __LINE__)

static inline void memleak__assert_nothing_added(const struct memleak_savepoint *sp, const char *file,
                                                 int line)
{
    struct memleak_counts added;
    if (memleak_since(sp, &added) == 0 && (added.bytes > 0 || added.blocks > 0)) {
        fprintf(stderr, "%s:%d: libmemleak: %lld bytes in %lld blocks live since the savepoint\n", file,
                line, (long long)added.bytes, (long long)added.blocks);
        abort();
    }
}

/* ---- blocks of the program's own allocator ----
 *
 * A pool allocator, an arena, a free list: memory the program took from
 * malloc or mmap and hands out itself.  Announced, its blocks are entries
 * of the reports like malloc's (kind=custom), at the stack of the call
 * that announced them -- put it in the outermost allocation function, as
 * for valgrind -- and the scan puts them in valgrind's categories, setting
 * aside the heap blocks that hold them.  Their bytes lie inside blocks the
 * allocator already counts, so a report's live-bytes does not add them
 * again (docs/api.md: which view the totals take).
 *
 * These are macros, not functions, so that the call into the tracer is
 * made from the caller's own frame (its stack is the caller's, without a
 * frame of this header).  Without the tracer each costs a load and a
 * branch.  Pool flags: MEMLEAK_POOL_METAPOOL, MEMLEAK_POOL_AUTO_FREE
 * (memleak_abi.h), valgrind's. */

#define memleak__call(field, args)                                                                    \
    do {                                                                                               \
        const struct memleak__api_v1 *memleak__a = memleak__api(0);                                   \
        if (memleak__a && memleak__has(memleak__a, field))                                            \
            memleak__a->field args;                                                                    \
    } while (0)

#define memleak_malloclike(addr, size) memleak__call(malloclike, ((const void *)(addr), (size_t)(size)))
#define memleak_freelike(addr) memleak__call(freelike, ((const void *)(addr)))
#define memleak_resize(addr, old_size, new_size)                                                      \
    memleak__call(resize, ((const void *)(addr), (size_t)(old_size), (size_t)(new_size)))
#define memleak_pool_create(pool, flags) memleak__call(pool_create, ((const void *)(pool), (unsigned)(flags)))
#define memleak_pool_destroy(pool) memleak__call(pool_destroy, ((const void *)(pool)))
#define memleak_pool_alloc(pool, addr, size)                                                          \
    memleak__call(pool_alloc, ((const void *)(pool), (const void *)(addr), (size_t)(size)))
#define memleak_pool_free(pool, addr) memleak__call(pool_free, ((const void *)(pool), (const void *)(addr)))
#define memleak_pool_trim(pool, addr, size)                                                           \
    memleak__call(pool_trim, ((const void *)(pool), (const void *)(addr), (size_t)(size)))
#define memleak_pool_move(from, to) memleak__call(pool_move, ((const void *)(from), (const void *)(to)))
#define memleak_pool_change(pool, from, to, size)                                                     \
    memleak__call(pool_change,                                                                         \
                  ((const void *)(pool), (const void *)(from), (const void *)(to), (size_t)(size)))

/* 1 if the tracer knows the pool, else 0 (always 0 without the tracer). */
static inline int memleak_pool_exists(const void *pool)
{
    const struct memleak__api_v1 *api = memleak__api(0);
    return api && memleak__has(api, pool_exists) ? api->pool_exists(pool) : 0;
}

/* The totals of the process's last leak check (memleak_leak_check, or any
 * report that carried a scan): 0; -1 and zeros when there was none. */
static inline int memleak_last_check(struct memleak_leaks *out)
{
    const struct memleak__api_v1 *api = memleak__api(0);
    struct memleak_leaks none = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    *out = none;
    return api && memleak__has(api, last_check) ? api->last_check(out) : -1;
}

/* ---- what the leak check should know ---- */

/* The block `p` points into (its start or inside it) is never called lost,
 * and what it points to is reachable through it -- a cache kept on
 * purpose, a singleton (LSan's __lsan_ignore_object).  Until it is freed. */
static inline void memleak_ignore(const void *p)
{
    const struct memleak__api_v1 *api = memleak__api(0);
    if (api && memleak__has(api, ignore_object))
        api->ignore_object(p);
}

/* Memory the program manages itself (its own mmap'd tables) that holds
 * pointers to heap blocks: on=1, the scan reads its words as roots; on=0,
 * no longer (the same p and size as registered). */
static inline void memleak_root_region(const void *p, size_t size, int on)
{
    const struct memleak__api_v1 *api = memleak__api(0);
    if (api && memleak__has(api, root_region))
        api->root_region(p, size, on);
}

/* on=0: this thread's allocations from now are not recorded -- in no
 * report, never lost, their pointers followed -- until as many on=1 calls
 * (they nest; LSan's __lsan_disable/__lsan_enable).  Frees are still
 * recorded.  Costs nothing on the allocations of other threads. */
static inline void memleak_recording(int on)
{
    const struct memleak__api_v1 *api = memleak__api(0);
    if (api && memleak__has(api, recording))
        api->recording(on);
}

/* ---- resources other than memory ---- */

/* Resource `id` of the kind named `kind` (a GPU buffer by its handle, a
 * connection by its address: up to 31 bytes of name, 32 kinds in all, "fd"
 * being file descriptors) is held from here, with `weight` (its bytes, or
 * 1): reports count it per stack in a section of its own, with the same
 * deltas as memory, and `report` ranks what grows.  Acquiring an id that
 * is held ends the old one first.  Macros, so that the stack is the
 * caller's; a lock and a backtrace each (microseconds), nothing without
 * the tracer. */
#define memleak_resource_acquire(kind, id, weight)                                                    \
    memleak__call(resource_acquire, ((const char *)(kind), (uint64_t)(id), (uint64_t)(weight)))
#define memleak_resource_release(kind, id) memleak__call(resource_release, ((const char *)(kind), (uint64_t)(id)))

/* The weight and number of resources of `kind` held now, in *out: 0; -1
 * and zeros without the tracer or when no such kind was named ("fd" under
 * MEMLEAK_CONFIG fds=no).  Sums the stacks' counters, like memleak_live. */
static inline int memleak_resource_live(const char *kind, struct memleak_counts *out)
{
    const struct memleak__api_v1 *api = memleak__api(0);
    if (!api || !memleak__has(api, resource_live)) {
        if (out)
            out->bytes = out->blocks = 0;
        return -1;
    }
    return api->resource_live(kind, out);
}

#ifdef __cplusplus
}

/* A scope whose allocations are not recorded (LSan's ScopedDisabler). */
struct memleak_not_recorded {
    memleak_not_recorded() { memleak_recording(0); }
    ~memleak_not_recorded() { memleak_recording(1); }
    memleak_not_recorded(const memleak_not_recorded &) = delete;
    memleak_not_recorded &operator=(const memleak_not_recorded &) = delete;
};
#define MEMLEAK__CAT2(a, b) a##b
#define MEMLEAK__CAT(a, b) MEMLEAK__CAT2(a, b)
#define MEMLEAK_NOT_RECORDED memleak_not_recorded MEMLEAK__CAT(memleak__scope_, __LINE__)
#endif

#endif
