/* C++ operator new and delete (hooks.h has what the hooks share). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hooks.h"

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
    void *f = mlk_next_symbol(mangled);
    if (!f) {
        /* libstdc++ loaded later with RTLD_LOCAL (a C program's C++ plugin). */
        void *lib = mlk_real.dlopen ? mlk_real.dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD) : NULL;
        if (lib)
            f = dlsym(lib, mangled);
    }
    return f;
}

typedef void *(*new_fn)();
typedef void (*delete_fn)();

static void *fallback_new(size_t size)
{
    void *p = mlk_real.malloc(size ? size : 1);
    if (!p) {
        mlk_warn("operator new: out of memory and no C++ runtime to throw bad_alloc", "", "");
        abort();
    }
    return p;
}

/* A new'd block 16 bytes longer, for its trailer: malloc's, or for an
 * aligned new (aligned: 1) posix_memalign's at its alignment -- an
 * alignment that is no power of two is left to the C++ runtime (NULL). */
static inline __attribute__((always_inline)) void *new_trailed(size_t size, int aligned, size_t al)
{
    if (!aligned)
        return mlk_real.malloc(size + MLK_TRAILER_SIZE);
    void *p;
    if (!al || (al & (al - 1)) ||
        mlk_real.posix_memalign(&p, al < sizeof(void *) ? sizeof(void *) : al, size + MLK_TRAILER_SIZE))
        return NULL;
    return p;
}

/* aligned: 1 for the align_val_t forms, whose alignment is `al` and whose
 * blocks are of the aligned family (`family`, with log2 of `al`). */
#define NEW_HOOK(mangled, kind, family, aligned, al, params, args)                                 \
    EXPORT void *mangled params                                                                    \
    {                                                                                              \
        static new_fn next;                                                                        \
        /* (Trailing first: it means the real functions are resolved, see   \
         * interpose.c's malloc.) */                                        \
        if (TRAILING() && TRAILABLE(size)) {                                                       \
            /* Most news: one malloc.  If it fails, the C++ runtime's      \
             * new below runs the new-handler loop or throws. */           \
            void *p = new_trailed(size, aligned, al);                                              \
            if (MLK_LIKELY(p != NULL)) {                                                           \
                trailed(p, size, kind,                                                             \
                        MLK_TRAILER_TAG(family, aligned ? __builtin_ctzll(al) : 0));               \
                return p;                                                                          \
            }                                                                                      \
        } else if (!READY()) {                                                                     \
            return mlk_boot_alloc(size, aligned && (al) > 16 && !((al) & ((al) - 1)) ? (al) : 16);    \
        }                                                                                          \
        if (!aligned && EARLY(size)) {                                                             \
            void *p = mlk_early_malloc(size, 0);                                                   \
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
#define K MLK_KIND_NEW
NEW_HOOK(_Znwm, K, MLK_FAMILY_NEW, 0, 0, (size_t size), (size))
NEW_HOOK(_Znam, K, MLK_FAMILY_NEW_ARRAY, 0, 0, (size_t size), (size))
NEW_HOOK(_ZnwmRKSt9nothrow_t, K, MLK_FAMILY_NEW, 0, 0, (size_t size, const nothrow_t *nt), (size, nt))
NEW_HOOK(_ZnamRKSt9nothrow_t, K, MLK_FAMILY_NEW_ARRAY, 0, 0, (size_t size, const nothrow_t *nt), (size, nt))
NEW_HOOK(_ZnwmSt11align_val_t, K, MLK_FAMILY_NEW_ALIGNED, 1, al, (size_t size, size_t al), (size, al))
NEW_HOOK(_ZnamSt11align_val_t, K, MLK_FAMILY_NEW_ARRAY_ALIGNED, 1, al, (size_t size, size_t al), (size, al))
NEW_HOOK(_ZnwmSt11align_val_tRKSt9nothrow_t, K, MLK_FAMILY_NEW_ALIGNED, 1, al,
         (size_t size, size_t al, const nothrow_t *nt), (size, al, nt))
NEW_HOOK(_ZnamSt11align_val_tRKSt9nothrow_t, K, MLK_FAMILY_NEW_ARRAY_ALIGNED, 1, al,
         (size_t size, size_t al, const nothrow_t *nt), (size, al, nt))
#undef K

/* call: MLK_CALL_DELETE*; size: the sized forms' size, else MLK_NO_SIZE;
 * al: the aligned forms' alignment, else 0 (all for misuse.c: a block of
 * another family, size or alignment is recorded). */
/* (The common delete -- not an aligned one -- in its fast way first, as
 * free's: interpose.c; the rest in mangled##_slow, READY's call and the
 * bootstrap blocks too: the fast way says no to both.) */
#define DELETE_HOOK(mangled, call, size, al, params, args)                                         \
    static __attribute__((noinline)) void mangled##_slow params;                                  \
    EXPORT void mangled params                                                                     \
    {                                                                                              \
        if (!p)                                                                                    \
            return;                                                                                \
        if (!(al) && MLK_LIKELY(mlk_trailer_free_fast(p, FAMILY_FREED_BY(call), size))) {          \
            mlk_real.free(p); /* the runtime's delete would only call free */                      \
            return;                                                                                \
        }                                                                                          \
        mangled##_slow args;                                                                       \
    }                                                                                              \
    static __attribute__((noinline)) void mangled##_slow params                                   \
    {                                                                                              \
        static delete_fn next;                                                                     \
        if (mlk_is_boot(p) || !READY())                                                            \
            return;                                                                                \
        if (free_shared(p, call, size, al) || free_trailed(p, call, size, al)) /* (as free) */     \
            return;                                                                                \
        if (MLK_UNLIKELY(!next))                                                                   \
            next = (delete_fn)next_symbol(#mangled);                                               \
        if (!before_free(p, call))                                                                 \
            return; /* a double or invalid delete, held back (misuse=hold) */                      \
        if (!next) {                                                                               \
            mlk_real.free(p);                                                                      \
        } else if (mlk_in_hook) {                                                                  \
            next args;                                                                             \
        } else {                                                                                   \
            mlk_in_hook = 1;                                                                       \
            next args;                                                                             \
            mlk_in_hook = 0;                                                                       \
        }                                                                                          \
    }

#define D MLK_CALL_DELETE
#define DA MLK_CALL_DELETE_ARRAY
#define DL MLK_CALL_DELETE_ALIGNED
#define DAL MLK_CALL_DELETE_ARRAY_ALIGNED
#define NONE MLK_NO_SIZE
DELETE_HOOK(_ZdlPv, D, NONE, 0, (void *p), (p))
DELETE_HOOK(_ZdaPv, DA, NONE, 0, (void *p), (p))
DELETE_HOOK(_ZdlPvm, D, n, 0, (void *p, size_t n), (p, n))
DELETE_HOOK(_ZdaPvm, DA, n, 0, (void *p, size_t n), (p, n))
DELETE_HOOK(_ZdlPvRKSt9nothrow_t, D, NONE, 0, (void *p, const nothrow_t *nt), (p, nt))
DELETE_HOOK(_ZdaPvRKSt9nothrow_t, DA, NONE, 0, (void *p, const nothrow_t *nt), (p, nt))
DELETE_HOOK(_ZdlPvSt11align_val_t, DL, NONE, al, (void *p, size_t al), (p, al))
DELETE_HOOK(_ZdaPvSt11align_val_t, DAL, NONE, al, (void *p, size_t al), (p, al))
DELETE_HOOK(_ZdlPvmSt11align_val_t, DL, n, al, (void *p, size_t n, size_t al), (p, n, al))
DELETE_HOOK(_ZdaPvmSt11align_val_t, DAL, n, al, (void *p, size_t n, size_t al), (p, n, al))
DELETE_HOOK(_ZdlPvSt11align_val_tRKSt9nothrow_t, DL, NONE, al, (void *p, size_t al, const nothrow_t *nt), (p, al, nt))
DELETE_HOOK(_ZdaPvSt11align_val_tRKSt9nothrow_t, DAL, NONE, al, (void *p, size_t al, const nothrow_t *nt),
            (p, al, nt))
#undef D
#undef DA
#undef DL
#undef DAL
#undef NONE
