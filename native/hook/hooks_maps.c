/* Hooks of the mappings (mmap, munmap, mprotect, mremap) and of the
 * dynamic loader (dlopen, dlmopen, dlclose): the shared parts are in hooks.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hooks.h"
#include "route/got.h"
#include "route/route.h"

/* ---- mappings ----------------------------------------------------------- */

static size_t page_round(size_t len)
{
    size_t page = 4096;
    return (len + page - 1) & ~(page - 1);
}

/* MAP_SHARED_VALIDATE is MAP_SHARED with flags checked: shared too. */
static int shared_kind(int flags)
{
    int type = flags & MAP_TYPE;
    return type == MAP_SHARED || type == MAP_SHARED_VALIDATE ? MLK_KIND_SHARED : MLK_KIND_MMAP;
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
    void *p = mlk_real.mmap ? mlk_real.mmap(addr, len, prot, flags, fd, off)
                        : raw_mmap(addr, len, prot, flags, fd, off);
    if (p == MAP_FAILED || mlk_in_hook || !mlk_ever_collected || BY_THE_ALLOCATOR())
        return p;
    BEGIN_HOOK();
    if ((flags & MAP_ANONYMOUS) && prot == PROT_NONE)
        mlk_record_reserve(p, page_round(len)); /* address space, not memory: see mprotect */
    else if ((flags & MAP_ANONYMOUS) && mlk_collecting && mlk_sample(page_round(len)))
        mlk_record_mmap(p, page_round(len), shared_kind(flags)); /* replaces what was there */
    else if (flags & (MAP_FIXED | MAP_ANONYMOUS))
        mlk_record_munmap(p, page_round(len));
    END_HOOK();
    return p;
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

EXPORT int munmap(void *addr, size_t len)
{
    int r = mlk_real.munmap ? mlk_real.munmap(addr, len)
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
    int r = mlk_real.mprotect ? mlk_real.mprotect(addr, len, prot)
                          : (int)mlk_syscall6(SYS_mprotect, (long)addr, (long)len, prot, 0, 0, 0);
    if (r < 0 && !mlk_real.mprotect) {
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
    void *p = mlk_real.mremap(old, old_len, new_len, flags, target);
    if (p == MAP_FAILED || mlk_in_hook || !mlk_ever_collected || BY_THE_ALLOCATOR())
        return p;
    BEGIN_HOOK();
    /* Like realloc: the old range is freed, the new one is a new block of
     * the caller of mremap — but only for mappings we were tracking. */
    int kind;
    int tracked = mlk_region_tracked((uint64_t)old, page_round(old_len), &kind) != 0;
    int reservation = mlk_region_reserved((uint64_t)old, page_round(old_len)) == page_round(old_len);
    if (tracked || reservation || (flags & MREMAP_FIXED))
        mlk_record_munmap(old, page_round(old_len));
    if (reservation) {
        mlk_record_reserve(p, page_round(new_len));
        END_HOOK();
        return p;
    }
    if (tracked && mlk_collecting && mlk_sample(page_round(new_len)))
        mlk_record_mmap(p, page_round(new_len), kind == MLK_KIND_SHARED ? kind : MLK_KIND_MMAP);
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
    char found[4096];
    const char *path = mlk_dlopen_search(file, (uintptr_t)__builtin_return_address(0), found, sizeof found);
    void *h = mlk_real.dlopen(path ? path : file, mode);
    if (h && !mlk_in_hook) {
        BEGIN_HOOK();
        mlk_after_dl_change();
        if (MLK_UNLIKELY(mlk_attach_mode))
            mlk_attach_route_new_modules();
        else {
            if (mode & RTLD_DEEPBIND) /* its lookups find libc's malloc before ours */
                mlk_got_route_deepbind(h);
            mlk_route_after_dlopen(h);
        }
        END_HOOK();
    }
    return h;
}

/* dlmopen into a namespace of its own: the library gets its own copy of the
 * C library, whose malloc the preload is not in front of -- nothing it
 * allocates there is seen.  Said (once; every report's blind line, check
 * exit 3), not silently missed.  (A tail call to the real one: the loader
 * reads the caller's place, for $ORIGIN, from the return address.) */
static void *(*next_dlmopen)(Lmid_t, const char *, int);

static __attribute__((noinline)) void say_own_namespace(const char *file)
{
    char line[600];
    snprintf(line, sizeof line, "%.400s was loaded by dlmopen into a link-map namespace of its own, with its "
             "own C library: allocations made there are not seen", file ? file : "a library");
    BEGIN_HOOK();
    mlk_route_say_blind(line);
    END_HOOK();
}

EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode)
{
    if (MLK_UNLIKELY(!next_dlmopen))
        *(void **)&next_dlmopen = dlsym(RTLD_NEXT, "dlmopen");
    if (MLK_UNLIKELY(!next_dlmopen))
        return NULL;
    if (lmid != LM_ID_BASE && !mlk_in_hook)
        say_own_namespace(file);
    return next_dlmopen(lmid, file, mode);
}

EXPORT int dlclose(void *handle)
{
    if (!READY())
        return -1;
    int r = mlk_real.dlclose(handle);
    if (!mlk_in_hook) {
        BEGIN_HOOK();
        mlk_after_dl_change();
        if (!mlk_attach_mode)
            mlk_route_after_dlclose();
        END_HOOK();
    }
    return r;
}

