/* The exported allocator symbols of the malloc family, and the lookup of
 * the real functions they forward to (the `real` table, hooks.h).  Each
 * calls the real function and then records the event; the bootstrap path
 * serves allocations made while dlsym runs.  The other hooks: hooks_maps.c,
 * hooks_cxx.c, hooks_process.c. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "hooks.h"

__thread struct mlk_thread_hot mlk_hot __attribute__((tls_model("initial-exec"))) = {.no_free_way = 1};
__thread int mlk_in_early __attribute__((tls_model("initial-exec")));
struct mlk_real_fns mlk_real;

/* ---- bootstrap: allocations made while dlsym runs ----------------------- */
char mlk_boot_arena[MLK_BOOT_ARENA] __attribute__((aligned(64)));
static size_t boot_used;
static int resolving;

void *mlk_boot_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    size_t start = (boot_used + 16 + align - 1) & ~(align - 1);
    if (start + size > MLK_BOOT_ARENA)
        return NULL;
    ((size_t *)(mlk_boot_arena + start))[-1] = size; /* for realloc */
    boot_used = start + size;
    return mlk_boot_arena + start; /* static, hence zeroed: fine for calloc */
}

static void resolve(void)
{
    resolving = 1;
#define GET(name) *(void **)&mlk_real.name = mlk_next_symbol(#name)
    GET(malloc);
    GET(free);
    GET(malloc_usable_size);
    GET(calloc);
    GET(realloc);
    GET(posix_memalign);
    GET(aligned_alloc);
    GET(memalign);
    GET(valloc);
    GET(pvalloc);
    GET(mmap);
    GET(munmap);
    GET(mprotect);
    GET(mremap);
    GET(dlopen);
    GET(dlclose);
#undef GET
    mlk_real_refilled();
    if (mlk_real.free)
        mlk_fast_off_set(MLK_FAST_NOT_READY, 0); /* (after the table: a free's fast way then calls it) */
    if (!mlk_attach_mode) /* an attach finds the program's blocks made already */
        mlk_trailers_decide_early(mlk_real.malloc_usable_size != NULL);
    resolving = 0;
}


void mlk_resolve_real(void)
{
    if (!mlk_real.free)
        resolve();
}

void mlk_ensure_real(void)
{
    if (!resolving)
        resolve();
}

/* Before collection starts from load (mlk_early_trailers): a block with
 * an uncounted trailer, for the scan.  Never on the collecting path. */
__attribute__((noinline)) void *mlk_early_malloc(size_t size, int zeroed)
{
    /* The real allocator may allocate while we call it (tcmalloc's
     * malloc_usable_size makes its MallocExtension with operator new, which
     * is ours): those nested blocks go straight to it (EARLY is false while
     * this is set), or the early path would recurse without end. */
    mlk_in_early = 1;
    void *p = zeroed ? mlk_real.calloc(1, size + MLK_TRAILER_SIZE) : mlk_real.malloc(size + MLK_TRAILER_SIZE);
    if (p)
        mlk_trailer_write_uncounted(p, mlk_real.malloc_usable_size(p), size, mlk_in_hook);
    mlk_in_early = 0;
    return p;
}

/* Where the malloc we forward to lives, when that is not libc: jemalloc
 * or tcmalloc preloaded or linked in (Debian's redis).  Their mmaps are the
 * arenas that hold the blocks our malloc hooks already count; counted
 * again they doubled redis's live bytes (the mapping hooks skip them). */
void mlk_note_allocator(void)
{
    const void *base;
    const char *file;
    void *home = mlk_real_home((void *)mlk_real.malloc);
    if (!home || !mlk_object_of(home, &base, &file))
        return;
    const char *name = strrchr(file, '/');
    name = name ? name + 1 : file;
    if (strncmp(name, "libc.so", 7) != 0 && strncmp(name, "libc-", 5) != 0)
        mlk_modules_set_allocator(home);
}


int mlk_glibc_heap;

int mlk_trailers_possible(void)
{
    /* The trailer's place comes from the allocator's own malloc_usable_size:
     * only when the malloc we call has one of its own.  (Looked up here:
     * nothing may have called malloc yet -- this once relied on the
     * reporter's environment being built with it.) */
    mlk_ensure_real();
    const void *a, *b;
    const char *a_file;
    int possible = mlk_real.malloc && mlk_real.malloc_usable_size &&
                   mlk_object_of(mlk_real_home((void *)mlk_real.malloc), &a, &a_file) &&
                   mlk_object_of(mlk_real_home((void *)mlk_real.malloc_usable_size), &b, NULL) && a == b;
    if (possible) {
        size_t n = strlen(a_file);
        mlk_glibc_heap = n >= 9 && strcmp(a_file + n - 9, "libc.so.6") == 0 && (n == 9 || a_file[n - 10] == '/');
        mlk_fast_off_set(MLK_FAST_NOT_GLIBC, !mlk_glibc_heap);
    }
    return possible;
}

/* ---- malloc family ------------------------------------------------------ */

/* The ways after the allocation's fast way (hooks.h's trailed_slow). */
__attribute__((noinline)) void *mlk_trailed_whole(void *p, size_t size, int kind, uint64_t tag, int looked)
{
    BEGIN_HOOK();
    mlk_record_trailed(p, mlk_real.malloc_usable_size(p), size, kind, tag, looked);
    END_HOOK();
    return p;
}

/* After a way that answered `fast` (mlk_trailer_alloc_fast's answers):
 * done, its walk start used; or the whole way, a tail call. */
static inline __attribute__((always_inline)) void *trailed_after(int fast, void *p, size_t size, int kind,
                                                                 uint64_t tag)
{
    if (fast > 0) {
        mlk_walk_start.sp = 0; /* (used) */
        return p;
    }
    return mlk_trailed_whole(p, size, kind, tag, fast < 0);
}

__attribute__((noinline)) void *mlk_trailed_resting(void *p, size_t size, int kind, uint64_t tag)
{
    return trailed_after(mlk_trailer_alloc_by_path(p, size, kind, tag, mlk_walk_start), p, size, kind, tag);
}

__attribute__((noinline)) void *mlk_trailed_shared(void *p, size_t size, int kind, uint64_t tag)
{
    return trailed_after(mlk_trailer_alloc_shared(p, size, kind, tag, mlk_walk_start), p, size, kind, tag);
}

/* malloc's recording ways, each reached by a jump from malloc (its last
 * call), so that their frames -- which the walk start's frame address
 * needs -- are not malloc's: an allocation that is not recorded (sampling,
 * not collecting) then costs no frame at all.  (Their return address is
 * still the program's.) */
static __attribute__((noinline)) void *malloc_trailed(size_t size)
{
    void *p = mlk_real.malloc(size + MLK_TRAILER_SIZE);
    return p ? trailed(p, size, MLK_KIND_MALLOC, MALLOC_TAG) : p;
}

static __attribute__((noinline)) void *malloc_recorded(size_t size)
{
    void *p = mlk_real.malloc(size);
    if (p)
        recorded(p, size, MLK_KIND_MALLOC);
    return p;
}

/* The sampling countdown ran out: a new draw says whether this one is recorded. */
static __attribute__((noinline)) void *malloc_sample_due(size_t size)
{
    if (!mlk_sample_slow(size))
        return mlk_real.malloc(size);
    return malloc_recorded(size);
}

/* malloc once the real functions are known. */
static inline __attribute__((always_inline)) void *malloc_ready(size_t size)
{
    if (TRAILING() && TRAILABLE(size))
        return malloc_trailed(size);
    if (EARLY(size))
        return mlk_early_malloc(size, 0);
    if (RECORDING()) {
        if (MLK_LIKELY(!mlk_sample_bytes))
            return malloc_recorded(size);
        /* Sampled by its size before the real call rather than after (the
         * same draws, but for an allocation that fails): not this one. */
        if (mlk_sample_countdown(size))
            return mlk_real.malloc(size);
        return malloc_sample_due(size);
    }
    return mlk_real.malloc(size);
}

/* malloc before they are: they are looked up (a call, out of line so that
 * malloc's own frame keeps nothing for it), or the bootstrap arena answers
 * while the lookup itself allocates. */
static __attribute__((noinline)) void *malloc_unready(size_t size)
{
    if (!READY())
        return mlk_boot_alloc(size, 16);
    return malloc_ready(size);
}

EXPORT void *malloc(size_t size)
{
    /* (The common case asked first, before READY: trailing means the real
     * functions are resolved -- the trailer key is made only once they
     * are, by mlk_trailers_possible or mlk_trailers_decide_early.) */
    if (MLK_LIKELY(TRAILING() && TRAILABLE(size)))
        return malloc_trailed(size);
    if (MLK_UNLIKELY(!mlk_real.free))
        return malloc_unready(size);
    return malloc_ready(size);
}

/* Whether our malloc comes before the next one in the program's symbol
 * lookups: we were preloaded (or linked in), not dlopen'ed.  Told by the
 * order of the loaded modules (the lookup order): ours before the module
 * of the malloc we forward to.  (Asking dlsym(RTLD_DEFAULT, "malloc")
 * would not do: in a non-PIE program that takes malloc's address, the
 * answer is the program's own PLT entry.) */
struct lookup_order {
    uintptr_t ours, next;
    int ours_at, next_at, at;
};

static int note_position(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct lookup_order *o = data;
    if (info->dlpi_addr == o->ours && o->ours_at < 0)
        o->ours_at = o->at;
    if (info->dlpi_addr == o->next && o->next_at < 0)
        o->next_at = o->at;
    o->at++;
    return 0;
}

int mlk_loaded_as_preload(void)
{
    const void *mine, *next;
    void *next_malloc = dlsym(RTLD_NEXT, "malloc");
    if (!mlk_object_of((void *)&mlk_loaded_as_preload, &mine, NULL) || !next_malloc ||
        !mlk_object_of(next_malloc, &next, NULL))
        return 1; /* cannot tell: behave as always */
    struct lookup_order o = {(uintptr_t)mine, (uintptr_t)next, -1, -1, 0};
    /* The object's start (dladdr's dli_fbase); dlpi_addr the load bias: equal
     * for shared objects, which both are. */
    dl_iterate_phdr(note_position, &o);
    return o.ours_at < 0 || o.next_at < 0 || o.ours_at < o.next_at;
}

/* A free that never reaches the real free: a bootstrap block's (the
 * arena is static), or -- which cannot happen, only bootstrap blocks exist
 * before it -- one before the real functions are resolved. */
static inline int free_of_nothing_real(void *p)
{
    return mlk_is_boot(p) || !READY();
}

/* The free of a block without a trailer, p a real one. */
static inline void free_real_untrailed(void *p)
{
    if (before_free(p, MLK_CALL_FREE))
        mlk_real.free(p);
}

/* free where no block has a trailer (sampling, track=table). */
static __attribute__((noinline)) void free_untrailed(void *p)
{
    if (!free_of_nothing_real(p))
        free_real_untrailed(p);
}

/* free's every other case but the common one (mlk_trailer_free_fast). */
static __attribute__((noinline)) void free_slow(void *p)
{
    if (free_of_nothing_real(p))
        return;
    if (free_shared(p, MLK_CALL_FREE, MLK_NO_SIZE, 0) || free_trailed(p, MLK_CALL_FREE, MLK_NO_SIZE, 0))
        return;
    free_real_untrailed(p);
}

EXPORT void free(void *p)
{
    /* (A bootstrap block, and a free before the real functions are
     * resolved -- READY's resolution is a call -- are told on the slow ways
     * only: the fast way says no to both, and the common free pays no test
     * for either: 8 instructions a free.) */
    if (!p)
        return;
    /* (Sampling, track=table: no block has a trailer.  Tested here though
     * the fast way's word says it too: asked after the fast way, it cost
     * sampled churn 2.4% for 0.1% of full capture's.) */
    if (MLK_UNLIKELY(!mlk_trailer_key)) {
        free_untrailed(p);
        return;
    }
    if (MLK_LIKELY(mlk_trailer_free_fast(p, FAMILY_FREED_BY(MLK_CALL_FREE), MLK_NO_SIZE))) {
        mlk_real.free(p);
        return;
    }
    free_slow(p);
}

/* C23's sized frees (glibc 2.41) and the old cfree: each is free here.
 * Were they to reach libc past us, the blocks would still be freed (the
 * trailer leaves the pointer alone), but never subtracted. */
EXPORT void free_sized(void *p, size_t size)
{
    (void)size;
    free(p);
}

EXPORT void free_aligned_sized(void *p, size_t align, size_t size)
{
    (void)align, (void)size;
    free(p);
}

EXPORT void cfree(void *p) { free(p); }

EXPORT size_t malloc_usable_size(void *p)
{
    if (!p)
        return 0;
    if (mlk_is_boot(p))
        return ((size_t *)p)[-1];
    if (!READY() || !mlk_real.malloc_usable_size)
        return 0;
    size_t usable = mlk_real.malloc_usable_size(p);
    if (mlk_trailer_key && mlk_trailer_of(p, usable))
        return usable - MLK_TRAILER_SIZE; /* the trailer is not the program's */
    return usable;
}

EXPORT void *calloc(size_t n, size_t size)
{
    size_t total;
    /* (Trailing first: it means the real functions are resolved, see malloc.) */
    if (TRAILING() && !__builtin_mul_overflow(n, size, &total) && TRAILABLE(total)) {
        void *p = mlk_real.calloc(1, total + MLK_TRAILER_SIZE);
        if (p)
            trailed(p, total, MLK_KIND_MALLOC, MALLOC_TAG);
        return p;
    }
    if (!READY()) {
        if (__builtin_mul_overflow(n, size, &total))
            return NULL;
        return mlk_boot_alloc(total, 16);
    }
    if (EARLY(0) && !__builtin_mul_overflow(n, size, &total) && TRAILABLE(total))
        return mlk_early_malloc(total, 1);
    void *p = mlk_real.calloc(n, size);
    after_alloc(p, n * size, MLK_KIND_MALLOC);
    return p;
}

/* realloc of a block with a trailer (t, taken) under the quarantine:
 * always a new block, the old one uncounted and held (valgrind's realloc
 * always moves too), so that a later free of the old pointer is caught,
 * the realloc's stack its first free.  `bytes` with the new block's
 * trailer; NULL, the old block untouched, if there is no memory. */
static void *realloc_into_quarantine(void *old, struct mlk_trailer *t, uint64_t taken, size_t size, size_t bytes)
{
    void *p = mlk_real.malloc(bytes);
    if (!p)
        return NULL;
    uint64_t reserved = (uint64_t)((char *)t - (char *)old); /* the old block's bytes, as realloc copies */
    memcpy(p, old, reserved < size ? reserved : size);
    mlk_trailer_uncount(old, taken, reserved);
    mlk_quarantine_put(old, reserved + MLK_TRAILER_SIZE);
    return p;
}

static void *realloc_impl(void *old, size_t size)
{
    int trailing = TRAILING() && TRAILABLE(size);
    int early = !trailing && EARLY(size) && size != 0;
    size_t extra = trailing || early ? MLK_TRAILER_SIZE : 0;
    void *p;
    if (!old || mlk_is_boot(old)) {
        p = mlk_real.malloc(size + extra);
        if (p && old) {
            size_t had = ((size_t *)old)[-1];
            memcpy(p, old, had < size ? had : size);
        }
    } else {
        /* realloc(p, 0) frees p (glibc): it must stay a 0 for the real one. */
        if (size == 0)
            trailing = early = 0, extra = 0;
        /* Forget the old block first (see the top of this file); put it
         * back if the real realloc fails and leaves it in place. */
        struct mlk_trailer *t = trailer(old);
        uint64_t taken = 0;
        uint32_t stack = MLK_NO_STACK;
        uint64_t old_size = 0;
        int had = 0;
        if (t) {
            taken = mlk_trailer_take(t);
            check_trailed_free(taken, MLK_CALL_REALLOC, MLK_NO_SIZE, 0); /* a new'd block realloc'd */
        } else if (!mlk_in_hook && mlk_ever_collected && mlk_maybe_recorded(old)) {
            BEGIN_HOOK();
            had = mlk_record_take(old, &stack, &old_size);
            END_HOOK();
        }
        if (!t && !had && held_back(old, MLK_CALL_REALLOC)) {
            errno = ENOMEM; /* a freed or invalid block, held back (misuse=hold): as valgrind, NULL */
            return NULL;
        }
        int quarantined = t && MLK_UNLIKELY(mlk_quarantine_cap) && size != 0 && !mlk_in_hook;
        p = quarantined ? realloc_into_quarantine(old, t, taken, size, size + extra)
                        : mlk_real.realloc(old, size + extra);
        if (!p && size != 0) {
            if (t) {
                mlk_trailer_restore(old, t);
            } else if (had) {
                BEGIN_HOOK();
                mlk_record_put_back(old, stack, old_size);
                END_HOOK();
            }
            return NULL;
        }
        if (t && !quarantined)
            mlk_trailer_uncount(old, taken, (uint64_t)((char *)t - (char *)old));
    }
    if (p) {
        if (trailing)
            trailed(p, size, MLK_KIND_MALLOC, MALLOC_TAG);
        else if (early)
            mlk_trailer_write_uncounted(p, mlk_real.malloc_usable_size(p), size, mlk_in_hook);
        else
            after_alloc(p, size, MLK_KIND_MALLOC);
    }
    return p;
}

EXPORT void *realloc(void *old, size_t size)
{
    if (!READY()) {
        void *p = mlk_boot_alloc(size, 16);
        if (p && old)
            memcpy(p, old, ((size_t *)old)[-1] < size ? ((size_t *)old)[-1] : size);
        return p;
    }
    return realloc_impl(old, size);
}

EXPORT void *reallocarray(void *old, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(old, total);
}

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (!READY()) {
        void *p = mlk_boot_alloc(size, align);
        if (!p)
            return ENOMEM;
        *out = p;
        return 0;
    }
    if (TRAILING() && TRAILABLE(size)) {
        int r = mlk_real.posix_memalign(out, align, size + MLK_TRAILER_SIZE);
        if (r == 0)
            trailed(*out, size, MLK_KIND_MALLOC, MALLOC_TAG);
        return r;
    }
    int r = mlk_real.posix_memalign(out, align, size);
    if (r == 0)
        after_alloc(*out, size, MLK_KIND_MALLOC);
    return r;
}

#define ALIGNED_HOOK(name, params, call, trailed_call, size_expr)                                  \
    EXPORT void *name params                                                                       \
    {                                                                                              \
        if (!READY())                                                                              \
            return NULL;                                                                           \
        /* (size_expr too: what is counted, pvalloc's whole pages) */                              \
        if (TRAILING() && TRAILABLE(size) && TRAILABLE(size_expr)) {                               \
            void *p = mlk_real.trailed_call;                                                           \
            if (p)                                                                                 \
                trailed(p, size_expr, MLK_KIND_MALLOC, MALLOC_TAG);                                            \
            return p;                                                                              \
        }                                                                                          \
        void *p = mlk_real.call;                                                                       \
        after_alloc(p, size_expr, MLK_KIND_MALLOC);                                                \
        return p;                                                                                  \
    }

#define T MLK_TRAILER_SIZE
ALIGNED_HOOK(aligned_alloc, (size_t align, size_t size), aligned_alloc(align, size),
             aligned_alloc(align, size + T), size)
ALIGNED_HOOK(memalign, (size_t align, size_t size), memalign(align, size), memalign(align, size + T), size)
ALIGNED_HOOK(valloc, (size_t size), valloc(size), valloc(size + T), size)
/* pvalloc allocates whole pages: that is what the program holds. */
ALIGNED_HOOK(pvalloc, (size_t size), pvalloc(size), pvalloc(size + T),
             size ? (size + (size_t)getpagesize() - 1) & ~((size_t)getpagesize() - 1)
                  : (size_t)getpagesize())
#undef T

