/* dlsym and dlvsym, for the lookups the preload cannot see.  A lookup in
 * one library's own handle finds that library's definition, not the first
 * in the program's lookup order: Python's ctypes.CDLL("libc.so.6").malloc
 * -- the usual way to call libc from Python -- got glibc's malloc itself,
 * and every block it made and freed went past the tracer, unseen and
 * unsaid.  So where such a lookup finds exactly the definition one of our
 * hooks forwards to (the next one after ours, as a lookup from our library
 * with RTLD_NEXT finds it), the caller gets our hook instead -- what the
 * program's own references to the name get.  Any other definition (a
 * library's own malloc asked for by name, jemalloc's say) is left as found,
 * and so is every lookup our own code makes.
 *
 * RTLD_DEFAULT and RTLD_NEXT lookups are answered for the caller's own
 * place in the lookup order, which the loader tells from the return
 * address: those go on to the real function as a tail call, with the
 * caller's return address where it was (tests/test_dlsym.py checks that a
 * program's RTLD_NEXT still finds what follows it). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "hooks.h"
#include "route/got.h"

static void *(*next_dlsym)(void *, const char *);
static void *(*next_dlvsym)(void *, const char *, const char *);
static uintptr_t self_lo, self_hi; /* our own mapped range */

struct finding {
    uintptr_t self_base; /* our load bias */
    int past_self;       /* the iteration has passed our library */
};

/* The first definitions after ours (the loader's order: the program, the
 * preloads, then the libraries they need), and where we are. */
static int find_next(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct finding *f = data;
    if (info->dlpi_addr == f->self_base) {
        f->past_self = 1;
        for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
            if (ph->p_type != PT_LOAD)
                continue;
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
            if (!self_lo || lo < self_lo)
                self_lo = lo;
            if (hi > self_hi)
                self_hi = hi;
        }
        return 0;
    }
    if (!f->past_self)
        return 0;
    uintptr_t s = mlk_module_symbol(info, "dlsym"), v = mlk_module_symbol(info, "dlvsym");
    if (!next_dlsym && s > 1)
        __atomic_store_n((void **)&next_dlsym, (void *)s, __ATOMIC_RELEASE);
    if (!next_dlvsym && v > 1)
        __atomic_store_n((void **)&next_dlvsym, (void *)v, __ATOMIC_RELEASE);
    return next_dlsym && next_dlvsym;
}

static __attribute__((noinline)) void resolve_next(void)
{
    Dl_info me;
    if (!dladdr((void *)&resolve_next, &me))
        return;
    struct finding f = {(uintptr_t)me.dli_fbase, 0};
    dl_iterate_phdr(find_next, &f);
}

/* What a lookup in a given handle hands back: ours, where `found` is the
 * definition our hook of that name forwards to. */
static void *ours_instead(const char *name, void *found, uintptr_t caller)
{
    if (!found || !name || (caller >= self_lo && caller < self_hi) ||
        ((uintptr_t)found >= self_lo && (uintptr_t)found < self_hi))
        return found;
    void *ours = mlk_got_ours_for(name);
    if (!ours)
        return found;
    void *next = next_dlsym(RTLD_NEXT, name); /* (asked from here: the one after ours) */
    return next == found ? ours : found;
}

EXPORT void *dlsym(void *handle, const char *name)
{
    if (MLK_UNLIKELY(!next_dlsym))
        resolve_next();
    if (MLK_UNLIKELY(!next_dlsym))
        return NULL;
    if (handle == RTLD_DEFAULT || handle == RTLD_NEXT)
        return next_dlsym(handle, name); /* (a tail call: the caller is the program's) */
    return ours_instead(name, next_dlsym(handle, name), (uintptr_t)__builtin_return_address(0));
}

EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
    if (MLK_UNLIKELY(!next_dlvsym))
        resolve_next();
    if (MLK_UNLIKELY(!next_dlvsym))
        return NULL;
    if (handle == RTLD_DEFAULT || handle == RTLD_NEXT)
        return next_dlvsym(handle, name, version);
    return ours_instead(name, next_dlvsym(handle, name, version), (uintptr_t)__builtin_return_address(0));
}
