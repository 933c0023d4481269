/* Tracing a process that was started without us (`libmemleak attach PID`).
 *
 * The attacher (native/reporter/inject.c) makes one of the process's
 * threads call dlopen() on this library and then mlk_attach().  Loaded that
 * way, our malloc is not the one the program's symbol lookups find (it
 * would be only as a preload), so the program's calls are routed to our
 * hooks by rewriting the entries of every loaded module's global offset
 * table that name a function we hook (the technique of heaptrack's
 * injector): JUMP_SLOT entries (calls through the PLT) and GLOB_DAT ones
 * (function pointers taken later).  The dlopen hook routes modules loaded
 * afterwards.  mlk_detach() writes the entries back; the library stays
 * loaded, its hooks inert -- a thread may still be returning into them,
 * and a function pointer taken meanwhile may still point at them.
 *
 * The order of routing matters while other threads run: frees (and
 * reallocs) are routed first everywhere, then allocations.  A block made by
 * libc's malloc and freed by our free is a block from before the attach
 * (counted as such); the reverse -- our block freed by libc's free -- would
 * be counted live for ever, so it must not happen.
 *
 * An executable that defines malloc itself calls it directly, through no
 * table: its entries are patched (route.c), which needs its other threads
 * stopped -- the attacher does that between mlk_attach and
 * mlk_attach_finish, calling mlk_attach_patch with the threads' places.
 * Then the frees' pass runs in mlk_attach and the allocations' only in
 * mlk_attach_finish, after the executable's free is patched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "control.h"
#include "route/route.h"

#define EXPORT __attribute__((visibility("default")))

int mlk_attach_mode;

/* What we route, in the order routed: the frees' pass first (see above),
 * then the rest, whose first name is where the second pass starts. */
#define SECOND_PASS_FROM "malloc"
static const char *const routed_names[] = {
    "free", "cfree", "free_sized", "free_aligned_sized", "realloc", "reallocarray",
    "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
    "munmap", "mremap", "malloc_usable_size",
    SECOND_PASS_FROM, "calloc", "posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc",
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
    "mmap", "mmap64", "mprotect", "dlopen", "dlclose", "mtrace", "muntrace",
    "execve", "execv", "execvp", "execvpe", "fexecve", "execveat", "execl", "execlp", "execle",
    "close", "dup2", "dup3", "close_range", "closefrom",
    "sigaction", "signal", "sysv_signal", "bsd_signal", "sigset",
};
#define NROUTED (sizeof routed_names / sizeof routed_names[0])
static void *ours[NROUTED];
static size_t second_pass; /* index of SECOND_PASS_FROM */

/* Every entry rewritten, with what it held, for detach. */
struct routed {
    void **slot;
    void *was;
    int in_relro;
};
static struct routed *routed;
static size_t nrouted, routed_cap;
static mlk_lock_t routing_lock;
static int attached; /* 1 while routed */
static uint64_t self_base;
static char status[512];

static int set_status(const char *a, const char *b)
{
    snprintf(status, sizeof status, "%s%s", a, b);
    return -1;
}

static int remember(void **slot, void *was, int in_relro)
{
    if (nrouted == routed_cap) {
        size_t cap = routed_cap ? routed_cap * 2 : 4096;
        struct routed *grown = mlk_map_anon(cap * sizeof *grown);
        if (!grown)
            return -1;
        if (routed) {
            memcpy(grown, routed, nrouted * sizeof *routed);
            mlk_unmap(routed, routed_cap * sizeof *routed);
        }
        routed = grown, routed_cap = cap;
    }
    routed[nrouted++] = (struct routed){slot, was, in_relro};
    return 0;
}

static long protect(void *page, size_t len, int prot)
{
    return mlk_syscall6(SYS_mprotect, (long)page, (long)len, prot, 0, 0, 0);
}

/* Write one entry.  Entries under PT_GNU_RELRO are read-only once the
 * loader is done: opened for the write and closed again. */
static void write_slot(void **slot, void *value, int in_relro)
{
    if (!in_relro) {
        __atomic_store_n(slot, value, __ATOMIC_RELEASE);
        return;
    }
    void *page = (void *)((uintptr_t)slot & ~(uintptr_t)4095);
    if (protect(page, 4096, PROT_READ | PROT_WRITE) != 0)
        return;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    protect(page, 4096, PROT_READ);
}

struct dyn_tables {
    const ElfW(Sym) *symtab;
    const char *strtab;
    const ElfW(Rela) *rela[2];
    size_t rela_size[2];
};

/* The loader leaves most d_ptr values relocated, some (the main program's,
 * on some ports) not: below the load bias means not yet. */
static uintptr_t absolute(uintptr_t v, uintptr_t base)
{
    return v < base ? v + base : v;
}

static int read_dynamic(const struct dl_phdr_info *info, struct dyn_tables *t)
{
    memset(t, 0, sizeof *t);
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return -1;
    uintptr_t base = info->dlpi_addr;
    int plt_is_rela = 1;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: t->symtab = (const void *)absolute(dyn->d_un.d_ptr, base); break;
        case DT_STRTAB: t->strtab = (const void *)absolute(dyn->d_un.d_ptr, base); break;
        case DT_RELA: t->rela[0] = (const void *)absolute(dyn->d_un.d_ptr, base); break;
        case DT_RELASZ: t->rela_size[0] = dyn->d_un.d_val; break;
        case DT_JMPREL: t->rela[1] = (const void *)absolute(dyn->d_un.d_ptr, base); break;
        case DT_PLTRELSZ: t->rela_size[1] = dyn->d_un.d_val; break;
        case DT_PLTREL: plt_is_rela = dyn->d_un.d_val == DT_RELA; break;
        }
    }
    if (!plt_is_rela) /* x86-64 and arm64 use RELA only */
        t->rela[1] = NULL;
    return t->symtab && t->strtab ? 0 : -1;
}

static int routed_index(const char *name)
{
    for (size_t i = 0; i < NROUTED; i++)
        if (strcmp(routed_names[i], name) == 0)
            return (int)i;
    return -1;
}

static int is_call_slot(uint32_t type)
{
#if defined(__x86_64__)
    return type == R_X86_64_JUMP_SLOT || type == R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
    return type == R_AARCH64_JUMP_SLOT || type == R_AARCH64_GLOB_DAT;
#else
    (void)type;
    return 0;
#endif
}

struct pass {
    int frees;        /* 1: the frees' pass, 0: the rest */
    int failed;
};
static int allocations_routed; /* the second pass has run (or runs with every later one) */

static int already_routed(void **slot)
{
    for (size_t i = 0; i < nrouted; i++)
        if (routed[i].slot == slot)
            return 1;
    return 0;
}

static int route_module(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct pass *pass = data;
    if (info->dlpi_addr == self_base || !info->dlpi_name || strstr(info->dlpi_name, "linux-vdso"))
        return 0;
    struct dyn_tables t;
    if (read_dynamic(info, &t) != 0)
        return 0;
    /* What the loader made read-only: the RELRO segment's whole pages (its
     * last, partial page stays writable, shared with .data: it must never
     * be closed by us). */
    uintptr_t relro_lo = 0, relro_hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            uintptr_t lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            relro_lo = lo & ~(uintptr_t)4095;
            relro_hi = (lo + info->dlpi_phdr[i].p_memsz) & ~(uintptr_t)4095;
        }
    for (int r = 0; r < 2; r++) {
        size_t n = t.rela[r] ? t.rela_size[r] / sizeof(ElfW(Rela)) : 0;
        for (size_t k = 0; k < n; k++) {
            const ElfW(Rela) *rel = &t.rela[r][k];
            if (!is_call_slot((uint32_t)ELF64_R_TYPE(rel->r_info)))
                continue;
            const char *name = t.strtab + t.symtab[ELF64_R_SYM(rel->r_info)].st_name;
            int idx = routed_index(name);
            void *hook;
            if (idx >= 0) {
                if (!ours[idx] || ((size_t)idx < second_pass) != pass->frees)
                    continue;
                hook = ours[idx];
            } else {
                /* An allocator family called by name (mi_malloc, mallocx,
                 * tc_free): its frees in the frees' pass too. */
                int fam = mlk_route_family_index(name);
                if (fam < 0 || (mlk_route_entries[fam].role != MLK_ROUTE_ALLOC) != pass->frees ||
                    !(hook = mlk_route_attach_hook(fam)))
                    continue;
            }
            void **slot = (void **)(info->dlpi_addr + rel->r_offset);
            if (*slot == hook || already_routed(slot))
                continue;
            int in_relro = (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi;
            if (remember(slot, *slot, in_relro) != 0) {
                pass->failed = 1;
                return 1;
            }
            write_slot(slot, hook, in_relro);
        }
    }
    return 0;
}

/* Route every loaded module's entries (those already routed are left):
 * the frees', and the allocations' too once they are due. */
static int route_all(void)
{
    mlk_lock(&routing_lock);
    struct pass frees = {1, 0}, rest = {0, 0};
    dl_iterate_phdr(route_module, &frees);
    if (!frees.failed && __atomic_load_n(&allocations_routed, __ATOMIC_ACQUIRE))
        dl_iterate_phdr(route_module, &rest);
    mlk_unlock(&routing_lock);
    return frees.failed || rest.failed ? -1 : 0;
}

/* After a dlopen through our hook: route what it loaded. */
void mlk_attach_route_new_modules(void)
{
    if (__atomic_load_n(&attached, __ATOMIC_ACQUIRE))
        route_all();
}

static void unroute_all(void)
{
    mlk_lock(&routing_lock);
    for (size_t i = nrouted; i-- > 0;)
        write_slot(routed[i].slot, routed[i].was, routed[i].in_relro);
    nrouted = 0;
    mlk_unlock(&routing_lock);
}

static int find_ours(void)
{
    Dl_info info;
    if (!dladdr((void *)&mlk_attach_mode, &info) || !info.dli_fname)
        return set_status("cannot find libmtrace.so in the process", "");
    self_base = (uint64_t)(uintptr_t)info.dli_fbase;
    void *self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!self)
        return set_status("cannot open libmtrace.so again in the process: ", dlerror());
    for (size_t i = 0; i < NROUTED; i++) {
        ours[i] = dlsym(self, routed_names[i]);
        if (strcmp(routed_names[i], SECOND_PASS_FROM) == 0)
            second_pass = i;
    }
    dlclose(self);
    return ours[second_pass] ? 0 : set_status("libmtrace.so has no malloc", "");
}

/* Called in the process by the attacher, on one of its threads, the others
 * running.  config is MEMLEAK_CONFIG's syntax (the attacher adds the report
 * directory).  Returns "" when attached, else why not, in one line. */
EXPORT const char *mlk_attach(const char *config)
{
    int was = mlk_in_hook;
    mlk_in_hook = 1;
    status[0] = 0;
    if (mlk_loaded_as_preload())
        set_status("the process is already traced (libmtrace.so preloaded)", "");
    else if (__atomic_load_n(&attached, __ATOMIC_ACQUIRE))
        set_status("the process is already attached", "");
    else if (find_ours() == 0) {
        mlk_attach_mode = 1;
        if (mlk_init_attached(config, status, sizeof status) == 0) {
            /* attached before routing: a dlopen another thread makes through
             * an entry just routed routes what it loads */
            __atomic_store_n(&attached, 1, __ATOMIC_RELEASE);
            /* With entries of the executable to patch, allocations wait for
             * mlk_attach_finish, after its free is patched. */
            __atomic_store_n(&allocations_routed, !mlk_route_held(), __ATOMIC_RELEASE);
            if (route_all() != 0) {
                __atomic_store_n(&attached, 0, __ATOMIC_RELEASE);
                unroute_all();
                mlk_stop_collecting();
                set_status("out of memory for the routing table; nothing routed", "");
            }
        }
    }
    mlk_in_hook = was;
    return status;
}

/* How many of the executable's entries wait to be patched with its other
 * threads stopped (0: no need to stop them). */
EXPORT int mlk_attach_patches_waiting(void)
{
    return __atomic_load_n(&attached, __ATOMIC_ACQUIRE) ? mlk_route_held() : 0;
}

/* Called with every other thread of the process stopped; pcs are their
 * instruction pointers.  Writes the executable's patches: "" when done (or
 * refused: mlk_attach_finish says it), "busy" when a thread is part-way
 * through the bytes to overwrite (nothing written: let the threads run and
 * call again).  Takes no lock and calls neither the loader nor malloc: a
 * stopped thread may hold theirs. */
EXPORT const char *mlk_attach_patch(const uint64_t *pcs, int npcs)
{
    int was = mlk_in_hook;
    mlk_in_hook = 1;
    status[0] = 0;
    if (npcs < 0 || (npcs > 0 && !pcs))
        npcs = 0;
    if (mlk_route_commit_held(pcs, npcs) == 1)
        set_status("busy", "");
    mlk_in_hook = was;
    return status;
}

/* After mlk_attach (and mlk_attach_patch, if any), the threads running:
 * the allocations' pass, and what was routed said.  `why_not` says why
 * the executable's patches, if any wait still, were not written. */
EXPORT const char *mlk_attach_finish(const char *why_not)
{
    int was = mlk_in_hook;
    mlk_in_hook = 1;
    status[0] = 0;
    if (!__atomic_load_n(&attached, __ATOMIC_ACQUIRE)) {
        set_status("the process is not attached", "");
    } else {
        __atomic_store_n(&allocations_routed, 1, __ATOMIC_RELEASE);
        if (route_all() != 0)
            set_status("out of memory for the routing table; allocations not routed", "");
        char reason[300];
        snprintf(reason, sizeof reason, "was not routed (%s)",
                 why_not && why_not[0] ? why_not : "the attacher did not stop the program's threads");
        mlk_route_say_held(reason, mlk_blind, sizeof mlk_blind, mlk_routed, sizeof mlk_routed);
        mlk_segment_say_routing(mlk_blind, mlk_routed);
    }
    mlk_in_hook = was;
    return status;
}

/* Undo the routing and stop collecting; the reporter writes its last
 * report (reason detach) and ends.  Returns "" or why not. */
EXPORT const char *mlk_detach(void)
{
    int was = mlk_in_hook;
    mlk_in_hook = 1;
    status[0] = 0;
    if (!__atomic_exchange_n(&attached, 0, __ATOMIC_ACQ_REL)) {
        set_status("the process is not attached", "");
    } else {
        unroute_all();
        mlk_detach_report();
    }
    mlk_in_hook = was;
    return status;
}

/* After mlk_detach: how many of the executable's entries are still patched
 * (their hooks inert), to be written back with the other threads stopped
 * by mlk_detach_unpatch.  No thread can be part-way through a patch's
 * bytes (a jump is one instruction; the rest int3), and one inside the
 * trampoline runs on into the original: any stop will do. */
EXPORT int mlk_detach_patches_left(void)
{
    return __atomic_load_n(&attached, __ATOMIC_ACQUIRE) ? 0 : mlk_route_patched_held();
}

EXPORT const char *mlk_detach_unpatch(void)
{
    int was = mlk_in_hook;
    mlk_in_hook = 1;
    status[0] = 0;
    if (__atomic_load_n(&attached, __ATOMIC_ACQUIRE))
        set_status("the process is attached", "");
    else
        mlk_route_unpatch_held();
    mlk_in_hook = was;
    return status;
}
