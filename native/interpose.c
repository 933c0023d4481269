/* The exported allocator symbols.  Each calls the real function and then
 * records the event; nothing else lives here but the recursion guard and
 * the bootstrap path used while the real functions are being looked up.
 *
 * Order matters for correctness under threads: a free is recorded *before*
 * the real free (after it, another thread could be handed the same address
 * and record it first), an allocation *after* the real allocation. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mlk.h"

#define EXPORT __attribute__((visibility("default")))

__thread int mlk_in_hook __attribute__((tls_model("initial-exec")));

static struct {
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
} real;

/* ---- bootstrap: allocations made while dlsym runs ----------------------- */
static char boot_arena[64 * 1024] __attribute__((aligned(64)));
static size_t boot_used;
static int resolving;

static int is_boot(const void *p)
{
    return (const char *)p >= boot_arena && (const char *)p < boot_arena + sizeof boot_arena;
}

static void *boot_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    size_t start = (boot_used + 16 + align - 1) & ~(align - 1);
    if (start + size > sizeof boot_arena)
        return NULL;
    ((size_t *)(boot_arena + start))[-1] = size; /* for realloc */
    boot_used = start + size;
    return boot_arena + start; /* static, hence zeroed: fine for calloc */
}

static void resolve(void)
{
    resolving = 1;
#define GET(name) *(void **)&real.name = dlsym(MLK_NEXT_HANDLE, #name)
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
    if (!mlk_attach_mode) /* an attach finds the program's blocks made already */
        mlk_trailers_decide_early(real.malloc_usable_size != NULL);
    resolving = 0;
}

void mlk_resolve_real(void)
{
    if (!real.free)
        resolve();
}

/* Before collection starts from load (mlk_early_trailers): a block with
 * an uncounted trailer, for the scan.  Never on the collecting path. */
static __attribute__((noinline)) void *early_malloc(size_t size, int zeroed)
{
    void *p = zeroed ? real.calloc(1, size + MLK_TRAILER_SIZE) : real.malloc(size + MLK_TRAILER_SIZE);
    if (p)
        mlk_trailer_write_uncounted(p, real.malloc_usable_size(p), size, mlk_in_hook);
    return p;
}
#define EARLY(size) (MLK_UNLIKELY(mlk_early_trailers) && !mlk_collecting && TRAILABLE(size))

#define READY() (MLK_LIKELY(real.free != NULL) || (ensure_real(), real.free != NULL))
static void ensure_real(void)
{
    if (!resolving)
        resolve();
}

/* The guard: record only when collecting and not inside our own code. */
#define RECORDING() (MLK_LIKELY(!mlk_in_hook) && mlk_collecting)
/* errno is libc's thread-local, reached through a call to __errno_location
 * each time; its address never changes for a thread, so ask once. */
static __thread int *errno_at __attribute__((tls_model("initial-exec")));
static inline int *thread_errno(void)
{
    int *e = errno_at;
    if (MLK_UNLIKELY(!e))
        errno_at = e = &errno;
    return e;
}
#define BEGIN_HOOK() int *errno_p_ = thread_errno(); int saved_errno_ = *errno_p_; mlk_in_hook = 1
#define END_HOOK() mlk_in_hook = 0; *errno_p_ = saved_errno_

/* Trailers (trailers.c): record new blocks in 16 extra bytes at their end.
 * A request too big to grow by 16 bytes takes the ordinary path, where the
 * real allocator refuses it. */
#define TRAILING() (RECORDING() && mlk_trailer_key)
#define TRAILABLE(size) ((size) <= (size_t)PTRDIFF_MAX - MLK_TRAILER_SIZE)

static inline __attribute__((always_inline)) void trailed(void *p, size_t size, int kind)
{
    BEGIN_HOOK();
    MLK_WALK_FROM_HERE();
    mlk_record_trailed(p, real.malloc_usable_size(p), size, kind);
    END_HOOK();
}

/* p's trailer if p is a block recorded with one, else NULL. */
static inline struct mlk_trailer *trailer(void *p)
{
    if (MLK_LIKELY(!mlk_trailer_key))
        return NULL;
    return mlk_trailer_of(p, real.malloc_usable_size(p));
}

/* Where the malloc we forward to lives, when that is not libc: jemalloc
 * or tcmalloc preloaded or linked in (Debian's redis).  Their mmaps are the
 * arenas that hold the blocks our malloc hooks already count; counted
 * again they doubled redis's live bytes (the mapping hooks skip them). */
void mlk_note_allocator(void)
{
    Dl_info info;
    if (!real.malloc || !dladdr((void *)real.malloc, &info) || !info.dli_fname)
        return;
    const char *name = strrchr(info.dli_fname, '/');
    name = name ? name + 1 : info.dli_fname;
    if (strncmp(name, "libc.so", 7) != 0 && strncmp(name, "libc-", 5) != 0)
        mlk_modules_set_allocator((void *)real.malloc);
}

/* Mapping calls made by that allocator itself. */
#define BY_THE_ALLOCATOR() mlk_is_allocator_address((uint64_t)__builtin_return_address(0))

int mlk_trailers_possible(void)
{
    /* The trailer's place comes from the allocator's own malloc_usable_size:
     * only when the malloc we call has one of its own. */
    Dl_info a, b;
    return real.malloc && real.malloc_usable_size && dladdr((void *)real.malloc, &a) &&
           dladdr((void *)real.malloc_usable_size, &b) && a.dli_fbase == b.dli_fbase;
}

static inline __attribute__((always_inline)) void after_alloc(void *p, size_t size, int kind)
{
    if (p && RECORDING() && mlk_sample(size)) {
        BEGIN_HOOK();
        MLK_WALK_FROM_HERE();
        mlk_record_alloc(p, size, kind);
        END_HOOK();
    }
}

static inline void before_free(void *p)
{
    if (p && !mlk_in_hook && mlk_ever_collected && mlk_maybe_recorded(p)) {
        BEGIN_HOOK();
        mlk_record_free(p);
        END_HOOK();
    }
}

/* ---- malloc family ------------------------------------------------------ */

EXPORT void *malloc(size_t size)
{
    if (!READY())
        return boot_alloc(size, 16);
    if (TRAILING() && TRAILABLE(size)) {
        void *p = real.malloc(size + MLK_TRAILER_SIZE);
        if (p)
            trailed(p, size, MLK_KIND_MALLOC);
        return p;
    }
    if (EARLY(size))
        return early_malloc(size, 0);
    void *p = real.malloc(size);
    after_alloc(p, size, MLK_KIND_MALLOC);
    return p;
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
    Dl_info mine, next;
    void *next_malloc = dlsym(RTLD_NEXT, "malloc");
    if (!dladdr((void *)&mlk_loaded_as_preload, &mine) || !next_malloc || !dladdr(next_malloc, &next))
        return 1; /* cannot tell: behave as always */
    struct lookup_order o = {(uintptr_t)mine.dli_fbase, (uintptr_t)next.dli_fbase, -1, -1, 0};
    /* dli_fbase is the mapping's start; dlpi_addr the load bias: equal
     * for shared objects, which both are. */
    dl_iterate_phdr(note_position, &o);
    return o.ours_at < 0 || o.next_at < 0 || o.ours_at < o.next_at;
}

/* A block with a trailer is forgotten by its trailer alone, before the
 * real free (nothing else can reach it after). */
static inline int free_trailed(void *p)
{
    struct mlk_trailer *t = trailer(p);
    if (!t)
        return 0;
    mlk_trailer_uncount(mlk_trailer_take(t));
    real.free(p);
    return 1;
}

EXPORT void free(void *p)
{
    if (!p || is_boot(p))
        return;
    if (!READY())
        return; /* cannot happen: only boot pointers exist before resolution */
    if (free_trailed(p))
        return;
    before_free(p);
    real.free(p);
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
    if (is_boot(p))
        return ((size_t *)p)[-1];
    if (!READY() || !real.malloc_usable_size)
        return 0;
    size_t usable = real.malloc_usable_size(p);
    if (mlk_trailer_key && mlk_trailer_of(p, usable))
        return usable - MLK_TRAILER_SIZE; /* the trailer is not the program's */
    return usable;
}

EXPORT void *calloc(size_t n, size_t size)
{
    if (!READY()) {
        size_t total;
        if (__builtin_mul_overflow(n, size, &total))
            return NULL;
        return boot_alloc(total, 16);
    }
    size_t total;
    if (TRAILING() && !__builtin_mul_overflow(n, size, &total) && TRAILABLE(total)) {
        void *p = real.calloc(1, total + MLK_TRAILER_SIZE);
        if (p)
            trailed(p, total, MLK_KIND_MALLOC);
        return p;
    }
    if (EARLY(0) && !__builtin_mul_overflow(n, size, &total) && TRAILABLE(total))
        return early_malloc(total, 1);
    void *p = real.calloc(n, size);
    after_alloc(p, n * size, MLK_KIND_MALLOC);
    return p;
}

static void *realloc_impl(void *old, size_t size)
{
    int trailing = TRAILING() && TRAILABLE(size);
    int early = !trailing && EARLY(size) && size != 0;
    size_t extra = trailing || early ? MLK_TRAILER_SIZE : 0;
    void *p;
    if (!old || is_boot(old)) {
        p = real.malloc(size + extra);
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
        } else if (!mlk_in_hook && mlk_ever_collected && mlk_maybe_recorded(old)) {
            BEGIN_HOOK();
            had = mlk_record_take(old, &stack, &old_size);
            END_HOOK();
        }
        p = real.realloc(old, size + extra);
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
        if (t)
            mlk_trailer_uncount(taken);
    }
    if (p) {
        if (trailing)
            trailed(p, size, MLK_KIND_MALLOC);
        else if (early)
            mlk_trailer_write_uncounted(p, real.malloc_usable_size(p), size, mlk_in_hook);
        else
            after_alloc(p, size, MLK_KIND_MALLOC);
    }
    return p;
}

EXPORT void *realloc(void *old, size_t size)
{
    if (!READY()) {
        void *p = boot_alloc(size, 16);
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
        void *p = boot_alloc(size, align);
        if (!p)
            return ENOMEM;
        *out = p;
        return 0;
    }
    if (TRAILING() && TRAILABLE(size)) {
        int r = real.posix_memalign(out, align, size + MLK_TRAILER_SIZE);
        if (r == 0)
            trailed(*out, size, MLK_KIND_MALLOC);
        return r;
    }
    int r = real.posix_memalign(out, align, size);
    if (r == 0)
        after_alloc(*out, size, MLK_KIND_MALLOC);
    return r;
}

#define ALIGNED_HOOK(name, params, call, trailed_call, size_expr)                                  \
    EXPORT void *name params                                                                       \
    {                                                                                              \
        if (!READY())                                                                              \
            return NULL;                                                                           \
        if (TRAILING() && TRAILABLE(size)) {                                                       \
            void *p = real.trailed_call;                                                           \
            if (p)                                                                                 \
                trailed(p, size_expr, MLK_KIND_MALLOC);                                            \
            return p;                                                                              \
        }                                                                                          \
        void *p = real.call;                                                                       \
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

/* ---- mappings ----------------------------------------------------------- */

static size_t page_round(size_t len)
{
    size_t page = 4096;
    return (len + page - 1) & ~(page - 1);
}

static void *raw_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    long r = mlk_syscall6(SYS_mmap, (long)addr, (long)len, prot, flags, fd, off);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return MAP_FAILED;
    }
    return (void *)r;
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *p = real.mmap ? real.mmap(addr, len, prot, flags, fd, off)
                        : raw_mmap(addr, len, prot, flags, fd, off);
    if (p == MAP_FAILED || mlk_in_hook || !mlk_ever_collected || BY_THE_ALLOCATOR())
        return p;
    BEGIN_HOOK();
    if ((flags & MAP_ANONYMOUS) && prot == PROT_NONE)
        mlk_record_reserve(p, page_round(len)); /* address space, not memory: see mprotect */
    else if ((flags & MAP_ANONYMOUS) && mlk_collecting && mlk_sample(page_round(len)))
        mlk_record_mmap(p, page_round(len)); /* replaces what was there */
    else if (flags & (MAP_FIXED | MAP_ANONYMOUS))
        mlk_record_munmap(p, page_round(len));
    END_HOOK();
    return p;
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

EXPORT int munmap(void *addr, size_t len)
{
    int r = real.munmap ? real.munmap(addr, len)
                        : (int)mlk_syscall6(SYS_munmap, (long)addr, (long)len, 0, 0, 0, 0);
    if (r == 0 && !mlk_in_hook && mlk_ever_collected && !BY_THE_ALLOCATOR()) {
        BEGIN_HOOK();
        mlk_record_munmap(addr, page_round(len));
        END_HOOK();
    }
    return r;
}

/* Opening part of a PROT_NONE reservation is when it becomes memory in
 * use (and closing it again, when it stops being). */
EXPORT int mprotect(void *addr, size_t len, int prot)
{
    int r = real.mprotect ? real.mprotect(addr, len, prot)
                          : (int)mlk_syscall6(SYS_mprotect, (long)addr, (long)len, prot, 0, 0, 0);
    if (r < 0 && !real.mprotect) {
        errno = -r;
        r = -1;
    }
    if (r == 0 && !mlk_in_hook && mlk_ever_collected && !BY_THE_ALLOCATOR()) {
        BEGIN_HOOK();
        mlk_record_mprotect(addr, page_round(len), prot);
        END_HOOK();
    }
    return r;
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    void *target = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        target = va_arg(ap, void *);
        va_end(ap);
    }
    if (!READY())
        return MAP_FAILED;
    void *p = real.mremap(old, old_len, new_len, flags, target);
    if (p == MAP_FAILED || mlk_in_hook || !mlk_ever_collected || BY_THE_ALLOCATOR())
        return p;
    BEGIN_HOOK();
    /* Like realloc: the old range is freed, the new one is a new block of
     * the caller of mremap — but only for mappings we were tracking. */
    int tracked = mlk_region_tracked((uint64_t)old, page_round(old_len)) != 0;
    int reservation = mlk_region_reserved((uint64_t)old, page_round(old_len)) == page_round(old_len);
    if (tracked || reservation || (flags & MREMAP_FIXED))
        mlk_record_munmap(old, page_round(old_len));
    if (reservation) {
        mlk_record_reserve(p, page_round(new_len));
        END_HOOK();
        return p;
    }
    if (tracked && mlk_collecting && mlk_sample(page_round(new_len)))
        mlk_record_mmap(p, page_round(new_len));
    else if (tracked || (flags & MREMAP_FIXED))
        mlk_record_munmap(p, page_round(new_len));
    END_HOOK();
    return p;
}

/* ---- the dynamic loader ------------------------------------------------- */

EXPORT void *dlopen(const char *file, int mode)
{
    if (!READY())
        return NULL;
    if (!mlk_in_hook && mlk_ever_collected) {
        BEGIN_HOOK();
        mlk_modules_catch_up();
        END_HOOK();
    }
    void *h = real.dlopen(file, mode);
    if (h && !mlk_in_hook) {
        BEGIN_HOOK();
        mlk_after_dl_change();
        if (MLK_UNLIKELY(mlk_attach_mode))
            mlk_attach_route_new_modules();
        END_HOOK();
    }
    return h;
}

EXPORT int dlclose(void *handle)
{
    if (!READY())
        return -1;
    int r = real.dlclose(handle);
    if (!mlk_in_hook) {
        BEGIN_HOOK();
        mlk_after_dl_change();
        END_HOOK();
    }
    return r;
}

/* ---- C++ operators -------------------------------------------------------
 * Ours come first in symbol lookup.  Each delegates to the next definition
 * (libstdc++'s, which implements the new-handler loop and throws bad_alloc)
 * with the guard set, so its inner malloc is not counted a second time.  The
 * guard is a cleanup variable, so it is also reset when bad_alloc unwinds
 * through us (this file is compiled with -fexceptions). */

static void clear_guard(int *unused)
{
    (void)unused;
    mlk_in_hook = 0;
}

static void *next_symbol(const char *mangled)
{
    void *f = dlsym(MLK_NEXT_HANDLE, mangled);
    if (!f) {
        /* libstdc++ loaded later with RTLD_LOCAL (a C program's C++ plugin). */
        void *lib = real.dlopen ? real.dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD) : NULL;
        if (lib)
            f = dlsym(lib, mangled);
    }
    return f;
}

typedef void *(*new_fn)();
typedef void (*delete_fn)();

static void *fallback_new(size_t size)
{
    void *p = real.malloc(size ? size : 1);
    if (!p) {
        mlk_warn("operator new: out of memory and no C++ runtime to throw bad_alloc", "", "");
        abort();
    }
    return p;
}

#define NEW_HOOK(mangled, kind, fast, params, args)                                                      \
    EXPORT void *mangled params                                                                    \
    {                                                                                              \
        static new_fn next;                                                                        \
        if (!READY())                                                                              \
            return boot_alloc(size, 16);                                                           \
        if (fast && TRAILING() && TRAILABLE(size)) {                                               \
            /* Most news: one malloc.  If it fails, the C++ runtime's      \
             * new below runs the new-handler loop or throws. */           \
            void *p = real.malloc(size + MLK_TRAILER_SIZE);                                        \
            if (MLK_LIKELY(p != NULL)) {                                                           \
                trailed(p, size, kind);                                                            \
                return p;                                                                          \
            }                                                                                      \
        }                                                                                          \
        if (fast && EARLY(size)) {                                                                 \
            void *p = early_malloc(size, 0);                                                       \
            if (MLK_LIKELY(p != NULL))                                                             \
                return p;                                                                          \
        }                                                                                          \
        if (MLK_UNLIKELY(!next))                                                                   \
            next = (new_fn)next_symbol(#mangled);                                                  \
        void *p;                                                                                   \
        if (mlk_in_hook) {                                                                         \
            p = next ? next args : fallback_new(size);                                             \
        } else {                                                                                   \
            int guard __attribute__((cleanup(clear_guard))) = 0;                                   \
            (void)guard;                                                                           \
            mlk_in_hook = 1;                                                                       \
            p = next ? next args : fallback_new(size);                                             \
        }                                                                                          \
        after_alloc(p, size, kind);                                                                \
        return p;                                                                                  \
    }

typedef struct nothrow_t nothrow_t;
/* align_val_t is an enum of size_t: passed as a size_t. */
NEW_HOOK(_Znwm, MLK_KIND_NEW, 1, (size_t size), (size))
NEW_HOOK(_Znam, MLK_KIND_NEW, 1, (size_t size), (size))
NEW_HOOK(_ZnwmRKSt9nothrow_t, MLK_KIND_NEW, 1, (size_t size, const nothrow_t *nt), (size, nt))
NEW_HOOK(_ZnamRKSt9nothrow_t, MLK_KIND_NEW, 1, (size_t size, const nothrow_t *nt), (size, nt))
NEW_HOOK(_ZnwmSt11align_val_t, MLK_KIND_NEW, 0, (size_t size, size_t al), (size, al))
NEW_HOOK(_ZnamSt11align_val_t, MLK_KIND_NEW, 0, (size_t size, size_t al), (size, al))
NEW_HOOK(_ZnwmSt11align_val_tRKSt9nothrow_t, MLK_KIND_NEW, 0, (size_t size, size_t al, const nothrow_t *nt),
         (size, al, nt))
NEW_HOOK(_ZnamSt11align_val_tRKSt9nothrow_t, MLK_KIND_NEW, 0, (size_t size, size_t al, const nothrow_t *nt),
         (size, al, nt))

#define DELETE_HOOK(mangled, params, args)                                                         \
    EXPORT void mangled params                                                                     \
    {                                                                                              \
        static delete_fn next;                                                                     \
        if (!p || is_boot(p))                                                                      \
            return;                                                                                \
        if (!READY())                                                                              \
            return;                                                                                \
        if (free_trailed(p)) /* the runtime's delete would only call free */                    \
            return;                                                                                \
        if (MLK_UNLIKELY(!next))                                                                   \
            next = (delete_fn)next_symbol(#mangled);                                               \
        before_free(p);                                                                            \
        if (!next) {                                                                               \
            real.free(p);                                                                          \
        } else if (mlk_in_hook) {                                                                  \
            next args;                                                                             \
        } else {                                                                                   \
            mlk_in_hook = 1;                                                                       \
            next args;                                                                             \
            mlk_in_hook = 0;                                                                       \
        }                                                                                          \
    }

DELETE_HOOK(_ZdlPv, (void *p), (p))
DELETE_HOOK(_ZdaPv, (void *p), (p))
DELETE_HOOK(_ZdlPvm, (void *p, size_t n), (p, n))
DELETE_HOOK(_ZdaPvm, (void *p, size_t n), (p, n))
DELETE_HOOK(_ZdlPvRKSt9nothrow_t, (void *p, const nothrow_t *nt), (p, nt))
DELETE_HOOK(_ZdaPvRKSt9nothrow_t, (void *p, const nothrow_t *nt), (p, nt))
DELETE_HOOK(_ZdlPvSt11align_val_t, (void *p, size_t al), (p, al))
DELETE_HOOK(_ZdaPvSt11align_val_t, (void *p, size_t al), (p, al))
DELETE_HOOK(_ZdlPvmSt11align_val_t, (void *p, size_t n, size_t al), (p, n, al))
DELETE_HOOK(_ZdaPvmSt11align_val_t, (void *p, size_t n, size_t al), (p, n, al))
DELETE_HOOK(_ZdlPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const nothrow_t *nt), (p, al, nt))
DELETE_HOOK(_ZdaPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const nothrow_t *nt), (p, al, nt))

/* ---- glibc's <mcheck.h> API: the program controls reporting ------------- */

/* The program's first mtrace() means "start": it starts collection, or does
 * nothing when collection already runs (MEMLEAK_CONFIG unset or mtraceinit),
 * so the program gets the same reports either way.  Later calls report, or
 * restart collection after a muntrace(). */
EXPORT void mtrace(void)
{
    static int calls;
    BEGIN_HOOK();
    mlk_init();
    int first = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED) == 0;
    if (!mlk_collecting)
        mlk_start_collecting();
    else if (!first && mlk_seg)
        mlk_request_report(&mlk_seg->mtrace_requests, 1);
    END_HOOK();
}

EXPORT void muntrace(void)
{
    BEGIN_HOOK();
    if (mlk_collecting_or_paused() && mlk_seg) {
        mlk_stop_collecting();
        mlk_request_report(&mlk_seg->muntrace_requests, 1);
    }
    END_HOOK();
}

/* ---- exec: the image is about to be replaced ------------------------------
 * The old image's reporter must not take the new image's exit for its own
 * death, so each exec entry point marks the segment first (and clears the
 * mark if the call fails).  glibc's exec variants call execve internally,
 * not through the PLT, so each exported one is hooked. */

static void exec_mark(int pending)
{
    if (mlk_seg && mlk_seg->pid == mlk_getpid())
        __atomic_store_n(&mlk_seg->exec_pending, (uint32_t)pending, __ATOMIC_RELEASE);
}

/* The next definition of `name`, looked up once (for hooks added after
 * start-up, outside the `real` table). */
#define LAZY_NEXT(var, name) (var ? var : (*(void **)&var = dlsym(MLK_NEXT_HANDLE, name), var))

#define EXEC_HOOK(name, params, args)                                                              \
    EXPORT int name params                                                                         \
    {                                                                                              \
        static int (*next) params;                                                                 \
        if (!LAZY_NEXT(next, #name)) {                                                             \
            errno = ENOSYS;                                                                        \
            return -1;                                                                             \
        }                                                                                          \
        exec_mark(1);                                                                              \
        int r = next args;                                                                         \
        int saved = errno;                                                                         \
        exec_mark(0);                                                                              \
        errno = saved;                                                                             \
        return r;                                                                                  \
    }

EXEC_HOOK(execve, (const char *path, char *const argv[], char *const envp[]), (path, argv, envp))
EXEC_HOOK(execv, (const char *path, char *const argv[]), (path, argv))
EXEC_HOOK(execvp, (const char *file, char *const argv[]), (file, argv))
EXEC_HOOK(execvpe, (const char *file, char *const argv[], char *const envp[]), (file, argv, envp))
EXEC_HOOK(fexecve, (int fd, char *const argv[], char *const envp[]), (fd, argv, envp))
EXEC_HOOK(execveat, (int dirfd, const char *path, char *const argv[], char *const envp[], int flags),
          (dirfd, path, argv, envp, flags))

/* The list forms: collect the arguments, then go through the vector forms. */
#define MAX_EXEC_ARGS 4096
static int collect_args(const char *arg0, va_list ap, char **argv, char ***envp_out)
{
    int n = 0;
    argv[n++] = (char *)arg0;
    while (argv[n - 1] && n < MAX_EXEC_ARGS)
        argv[n++] = va_arg(ap, char *);
    if (argv[n - 1]) {
        errno = E2BIG;
        return -1;
    }
    if (envp_out)
        *envp_out = va_arg(ap, char **);
    return 0;
}

EXPORT int execl(const char *path, const char *arg, ...)
{
    char *argv[MAX_EXEC_ARGS];
    va_list ap;
    va_start(ap, arg);
    int ok = collect_args(arg, ap, argv, NULL);
    va_end(ap);
    return ok < 0 ? -1 : execv(path, argv);
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
    char *argv[MAX_EXEC_ARGS];
    va_list ap;
    va_start(ap, arg);
    int ok = collect_args(arg, ap, argv, NULL);
    va_end(ap);
    return ok < 0 ? -1 : execvp(file, argv);
}

EXPORT int execle(const char *path, const char *arg, ...)
{
    char *argv[MAX_EXEC_ARGS];
    char **envp;
    va_list ap;
    va_start(ap, arg);
    int ok = collect_args(arg, ap, argv, &envp);
    va_end(ap);
    return ok < 0 ? -1 : execve(path, argv, envp);
}

/* ---- our descriptor: programs that close or reuse every fd ----------------
 * Daemons close every descriptor; that would take the segment's memfd, and a
 * reporter started later could not be handed it.  So before the program
 * closes or overwrites our descriptor, it is moved out of the way; when a
 * whole range up to the top is closed, a reporter is started first instead
 * (it holds the segment from then on). */

static void protect_segment_fd(int lo, int hi)
{
    if (mlk_seg_fd < lo || mlk_seg_fd > hi || mlk_in_hook)
        return;
    BEGIN_HOOK();
    mlk_segment_fd_threatened(lo, hi);
    END_HOOK();
}

#define FD_HOOK(ret, name, params, args, lo, hi)                                                   \
    EXPORT ret name params                                                                         \
    {                                                                                              \
        static ret (*next) params;                                                                 \
        if (!LAZY_NEXT(next, #name)) {                                                             \
            errno = ENOSYS;                                                                        \
            return (ret)-1;                                                                        \
        }                                                                                          \
        protect_segment_fd(lo, hi);                                                                \
        return next args;                                                                          \
    }

FD_HOOK(int, close, (int fd), (fd), fd, fd)
FD_HOOK(int, dup2, (int oldfd, int newfd), (oldfd, newfd), newfd, newfd)
FD_HOOK(int, dup3, (int oldfd, int newfd, int flags), (oldfd, newfd, flags), newfd, newfd)
FD_HOOK(int, close_range, (unsigned first, unsigned last, int flags), (first, last, flags),
        (int)(first > 0x7fffffffu ? 0x7fffffff : first), (int)(last > 0x7fffffffu ? 0x7fffffff : last))

EXPORT void closefrom(int lowfd)
{
    static void (*next)(int);
    protect_segment_fd(lowfd < 0 ? 0 : lowfd, 0x7fffffff);
    if (LAZY_NEXT(next, "closefrom"))
        next(lowfd);
}
