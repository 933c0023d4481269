/* Routing a module's calls through its global offset table: every entry
 * of the table (JUMP_SLOT: calls through the PLT; GLOB_DAT: function
 * pointers taken later) that names a function we hook is rewritten to our
 * hook -- the technique of heaptrack's injector.  Two users:
 *   - an attach (attach.c): our library was loaded last, by dlopen, so no
 *     module's lookups find our malloc; every loaded module is routed,
 *     remembered, and written back at detach;
 *   - a module loaded with RTLD_DEEPBIND while preloaded (the dlopen hook):
 *     its lookups find the C library's malloc before ours, so its table is
 *     routed the same way (mlk_got_route_deepbind).
 * Entries under PT_GNU_RELRO are read-only once the loader is done: opened
 * for the write and closed again. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "../mlk.h"
#include "got.h"
#include "route.h"

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
    /* descriptors (resources/fds.c) */
    "open", "open64", "openat", "openat64", "__open_2", "__open64_2", "__openat_2", "__openat64_2",
    "creat", "creat64", "socket", "accept", "accept4", "dup", "eventfd", "timerfd_create", "epoll_create",
    "epoll_create1", "inotify_init", "inotify_init1", "memfd_create", "mkstemp", "mkstemp64", "mkostemp",
    "mkostemp64", "mkstemps", "mkostemps", "posix_openpt", "shm_open", "signalfd", "pipe", "pipe2",
    "socketpair", "fcntl", "fcntl64", "recvmsg", "recvmmsg", "fopen", "fopen64", "tmpfile", "tmpfile64",
    "popen", "freopen", "freopen64", "fclose", "pclose", "opendir", "closedir",
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
static uint64_t self_base;

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
    const uint32_t *gnu_hash;
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
        case DT_GNU_HASH: t->gnu_hash = (const void *)absolute(dyn->d_un.d_ptr, base); break;
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

static int already_routed(void **slot)
{
    for (size_t i = 0; i < nrouted; i++)
        if (routed[i].slot == slot)
            return 1;
    return 0;
}

int mlk_got_route_module(struct dl_phdr_info *info, struct mlk_got_pass *pass)
{
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
                if (!ours[idx] || ((size_t)idx < second_pass) != pass->frees ||
                    (pass->not_its_own && mlk_module_defines(info, name)))
                    continue;
                hook = ours[idx];
            } else if (!pass->families) {
                continue;
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
            if (pass->remember && remember(slot, *slot, in_relro) != 0) {
                pass->failed = 1;
                return 1;
            }
            write_slot(slot, hook, in_relro);
        }
    }
    return 0;
}

void mlk_got_unroute_all(void)
{
    for (size_t i = nrouted; i-- > 0;)
        write_slot(routed[i].slot, routed[i].was, routed[i].in_relro);
    nrouted = 0;
}

static int say(char *why, size_t why_len, const char *a, const char *b)
{
    snprintf(why, why_len, "%s%s", a, b);
    return -1;
}

int mlk_got_find_ours(char *why, size_t why_len)
{
    if (ours[second_pass])
        return 0;
    Dl_info info;
    if (!dladdr((void *)&mlk_got_find_ours, &info) || !info.dli_fname)
        return say(why, why_len, "cannot find libmtrace.so in the process", "");
    self_base = (uint64_t)(uintptr_t)info.dli_fbase;
    void *self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!self)
        return say(why, why_len, "cannot open libmtrace.so again in the process: ", dlerror());
    for (size_t i = 0; i < NROUTED; i++) {
        ours[i] = dlsym(self, routed_names[i]);
        if (strcmp(routed_names[i], SECOND_PASS_FROM) == 0)
            second_pass = i;
    }
    dlclose(self);
    return ours[second_pass] ? 0 : say(why, why_len, "libmtrace.so has no malloc", "");
}


void *mlk_got_ours_for(const char *name)
{
    int i = routed_index(name);
    char why[128];
    if (i < 0 || mlk_got_find_ours(why, sizeof why) != 0)
        return NULL;
    return ours[i];
}

int mlk_module_defines(const struct dl_phdr_info *info, const char *name)
{
    return mlk_module_symbol(info, name) != 0;
}

uintptr_t mlk_module_symbol(const struct dl_phdr_info *info, const char *name)
{
    struct dyn_tables t;
    if (read_dynamic(info, &t) != 0 || !t.gnu_hash)
        return 1; /* not to be told: taken to define it (its address unknown) */
    const uint32_t *gh = t.gnu_hash;
    const ElfW(Sym) *symtab = t.symtab;
    const char *strtab = t.strtab;
    uint32_t h = 5381;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = h * 33 + *c;
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_size = gh[2], bloom_shift = gh[3];
    if (!nbuckets || !bloom_size)
        return 0;
    const uint64_t *bloom = (const uint64_t *)(gh + 4);
    const uint32_t *buckets = (const uint32_t *)(bloom + bloom_size), *chain = buckets + nbuckets;
    uint64_t word = bloom[(h / 64) % bloom_size];
    uint64_t mask = (1ull << (h % 64)) | (1ull << ((h >> bloom_shift) % 64));
    if ((word & mask) != mask)
        return 0;
    for (uint32_t i = buckets[h % nbuckets]; i >= symoffset; i++) {
        uint32_t h2 = chain[i - symoffset];
        if ((h | 1) == (h2 | 1) && symtab[i].st_shndx != SHN_UNDEF && !strcmp(name, strtab + symtab[i].st_name))
            return symtab[i].st_value ? info->dlpi_addr + symtab[i].st_value : 1;
        if (h2 & 1)
            break;
    }
    return 0;
}

void mlk_module_each_function(const struct dl_phdr_info *info,
                              void (*each)(const char *name, uintptr_t addr, void *arg), void *arg)
{
    struct dyn_tables t;
    if (read_dynamic(info, &t) != 0 || !t.gnu_hash || !t.symtab || !t.strtab)
        return;
    const uint32_t *gh = t.gnu_hash;
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_size = gh[2];
    if (!nbuckets)
        return;
    const uint32_t *buckets = (const uint32_t *)((const uint64_t *)(gh + 4) + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    /* The GNU hash table lists the exported symbols from symoffset on, one
     * chain a bucket, each chain's last entry marked by the low bit. */
    for (uint32_t b = 0; b < nbuckets; b++) {
        for (uint32_t i = buckets[b]; i >= symoffset && i - symoffset < (1u << 24); i++) {
            const ElfW(Sym) *s = &t.symtab[i];
            if (s->st_shndx != SHN_UNDEF && ELF64_ST_TYPE(s->st_info) == STT_FUNC && s->st_value)
                each(t.strtab + s->st_name, info->dlpi_addr + s->st_value, arg);
            if (chain[i - symoffset] & 1)
                break;
        }
    }
}

/* ---- RTLD_DEEPBIND ------------------------------------------------------- */

static int route_if_handle(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct mlk_got_pass *pass = data;
    if ((uintptr_t)info->dlpi_addr != pass->only)
        return 0;
    mlk_got_route_module(info, pass);
    return 1;
}

void mlk_got_route_deepbind(void *handle)
{
    struct link_map *lm = NULL;
    char why[256];
    if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || mlk_got_find_ours(why, sizeof why) != 0)
        return;
    /* Only the module opened: its dependencies loaded with it bind deep
     * too, and are not routed (a known limit, docs/allocators.md).  A name
     * it defines itself is its own (a plugin with an allocator of its own
     * inside): left to it. */
    struct mlk_got_pass frees = {.frees = 1, .not_its_own = 1, .only = (uintptr_t)lm->l_addr},
                        rest = {.frees = 0, .not_its_own = 1, .only = (uintptr_t)lm->l_addr};
    dl_iterate_phdr(route_if_handle, &frees);
    dl_iterate_phdr(route_if_handle, &rest);
}
