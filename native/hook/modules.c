/* The loaded-module map, kept in the segment so that the reporter can turn
 * addresses into (module, offset) even after a dlclose or the program's death.
 *
 * The map is synchronised with the dynamic loader by mlk_modules_scan(): at
 * start, after each dlopen/dlclose we see, and whenever a new backtrace holds
 * an address outside every known module (which catches libraries the loader
 * maps for itself, such as NSS modules).  A private sorted array of the live
 * ranges answers "is this address known?" without touching the segment. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/syscall.h>

#include "mlk.h"
#include "unwind_cfi.h"

uint32_t mlk_unload_epoch;

struct live_range {
    uint64_t lo, hi;
    uint32_t module;  /* index into the segment's module array */
};

#define MAX_LIVE 8192
static struct live_range *live;  /* sorted by lo; mmap'd once */
static uint32_t live_count;
static mlk_lock_t modules_lock;
static uint64_t self_lo, self_hi;
static const void *self_probe;
/* The allocator our hooks forward to, when it is a library of its own
 * (jemalloc, tcmalloc, mimalloc; not libc, whose malloc maps its memory
 * past our hooks).  Its own mmaps hold the blocks we already count. */
static uint64_t allocator_lo, allocator_hi;
static const void *allocator_probe;

struct scan_state {
    struct live_range *seen;
    uint32_t seen_count;
    uint32_t epoch; /* the scan's: modules it finds new are loaded as of it */
};

static void read_build_id(struct dl_phdr_info *info, struct mlk_module *m)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
        const char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const char *name = p + sizeof *nh;
            const char *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (desc + nh->n_descsz > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                uint32_t n = nh->n_descsz < MLK_BUILD_ID_MAX ? nh->n_descsz : MLK_BUILD_ID_MAX;
                memcpy(m->build_id, desc, n);
                m->build_id_len = n;
                return;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
}

static const char *module_path(const struct dl_phdr_info *info)
{
    return info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name /* the main program: */
                                                 : mlk_strings() + mlk_seg->exe_off;
}

/* Is `m` the object the loader reports in `info`?  Same place and extent
 * is not enough: after a dlclose another library may be loaded exactly
 * where the closed one was, between two scans, and its addresses must not
 * be read as the old one's.  So the path and build-id must match too. */
static int same_module(const struct mlk_module *m, struct dl_phdr_info *info, uint64_t lo, uint64_t hi)
{
    if (m->base != info->dlpi_addr || m->lo != lo || m->hi != hi)
        return 0;
    const char *path = module_path(info);
    size_t n = mlk_strlen(path);
    if (m->path_len && (m->path_len != n || memcmp(mlk_strings() + m->path_off, path, n) != 0))
        return 0;
    struct mlk_module probe;
    probe.build_id_len = 0;
    read_build_id(info, &probe);
    return probe.build_id_len == m->build_id_len &&
           memcmp(probe.build_id, m->build_id, probe.build_id_len) == 0;
}

static uint32_t add_module(struct dl_phdr_info *info, uint64_t lo, uint64_t hi, uint32_t epoch)
{
    struct mlk_header *h = mlk_seg;
    uint64_t idx = h->modules_used;
    if (idx >= h->modules_cap)
        return UINT32_MAX;
    struct mlk_module *m = &mlk_modules()[idx];
    memset(m, 0, sizeof *m);
    m->base = info->dlpi_addr;
    m->lo = lo;
    m->hi = hi;
    const char *path = module_path(info);
    m->path_len = (uint32_t)mlk_strlen(path);
    m->path_off = mlk_string_add(path, m->path_len);
    if (m->path_off == UINT32_MAX)
        m->path_len = 0, m->path_off = 0;
    read_build_id(info, m);
    m->load_epoch = epoch;
    __atomic_store_n(&h->modules_used, idx + 1, __ATOMIC_RELEASE);
    return (uint32_t)idx;
}

/* The loader's count of unloads (dl_phdr_info.dlpi_subs) at our last scan. */
static unsigned long long scanned_subs;

static int has_subs(size_t size)
{
    return size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(unsigned long long);
}

void mlk_module_range(const struct dl_phdr_info *info, uint64_t *lo, uint64_t *hi)
{
    *lo = UINT64_MAX, *hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uint64_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < *lo)
            *lo = a;
        if (a + ph->p_memsz > *hi)
            *hi = a + ph->p_memsz;
    }
}

static int scan_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct scan_state *st = arg;
    if (has_subs(size))
        scanned_subs = info->dlpi_subs;
    uint64_t lo, hi;
    mlk_module_range(info, &lo, &hi);
    if (lo >= hi || st->seen_count >= MAX_LIVE)
        return 0;
    st->seen[st->seen_count].lo = lo;
    st->seen[st->seen_count].hi = hi;
    st->seen[st->seen_count].module = UINT32_MAX;
    /* Known and still loaded? */
    struct mlk_module *mods = mlk_modules();
    for (uint32_t i = 0; i < live_count; i++) {
        struct mlk_module *m = &mods[live[i].module];
        if (same_module(m, info, lo, hi)) {
            st->seen[st->seen_count].module = live[i].module;
            break;
        }
    }
    if (st->seen[st->seen_count].module == UINT32_MAX)
        st->seen[st->seen_count].module = add_module(info, lo, hi, st->epoch);
    if (st->seen[st->seen_count].module != UINT32_MAX)
        st->seen_count++;
    return 0;
}

static void sort_ranges(struct live_range *r, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) { /* insertion sort: n is small, mostly sorted */
        struct live_range x = r[i];
        uint32_t j = i;
        while (j > 0 && r[j - 1].lo > x.lo) {
            r[j] = r[j - 1];
            j--;
        }
        r[j] = x;
    }
}

static void range_holding(const void *probe, uint64_t *lo, uint64_t *hi)
{
    for (uint32_t i = 0; i < live_count; i++)
        if ((uint64_t)probe >= live[i].lo && (uint64_t)probe < live[i].hi) {
            *lo = live[i].lo;
            *hi = live[i].hi;
        }
}

void mlk_modules_scan(void)
{
    if (!mlk_seg)
        return;
    static struct live_range *seen;
    mlk_lock(&modules_lock);
    if (!live) {
        live = mlk_map_anon(MAX_LIVE * sizeof *live);
        seen = mlk_map_anon(MAX_LIVE * sizeof *seen);
        if (!live || !seen) {
            mlk_unlock(&modules_lock);
            return;
        }
    }
    struct mlk_header *h = mlk_seg;
    struct scan_state st = {seen, 0, 0};
    /* Each scan opens a new epoch.  A module is valid for a stack recorded at
     * epoch E when load_epoch <= E < unload_epoch (or it was never unloaded);
     * stacks read the epoch only after the scan that covers their frames.
     * The new epoch is published when the scan is done, not as it starts: a
     * stack recorded meanwhile by another thread, in a module this scan then
     * finds unloaded (that thread's dlclose came after its allocation), must
     * read the epoch before that unload (it read the unload's own epoch, and
     * its frames lost their names: test_robustness's dlopen loops, 1 in 60). */
    uint32_t next_epoch = h->map_epoch + 1;
    int unloaded = 0;
    st.epoch = next_epoch;
    dl_iterate_phdr(scan_one, &st);
    /* Modules we knew that the loader no longer lists were unloaded. */
    struct mlk_module *mods = mlk_modules();
    for (uint32_t i = 0; i < live_count; i++) {
        int still = 0;
        for (uint32_t j = 0; j < st.seen_count; j++)
            if (seen[j].module == live[i].module) {
                still = 1;
                break;
            }
        if (!still) {
            mods[live[i].module].unload_epoch = next_epoch;
            __atomic_add_fetch(&mlk_unload_epoch, 1, __ATOMIC_RELEASE);
            __atomic_add_fetch(&h->unload_epoch, 1, __ATOMIC_RELEASE);
            unloaded = 1;
        }
    }
    /* Published after the loader's list was read (so after any unload it
     * saw) and before the ranges a walk checks its frames against (so a
     * walk that finds its frames covered reads this epoch or a later one). */
    __atomic_store_n(&h->map_epoch, next_epoch, __ATOMIC_RELEASE);
    if (unloaded)
        mlk_unwind_forget();
    sort_ranges(seen, st.seen_count);
    memcpy(live, seen, st.seen_count * sizeof *live);
    __atomic_store_n(&live_count, st.seen_count, __ATOMIC_RELEASE);
    if (self_probe && !self_hi)
        range_holding(self_probe, &self_lo, &self_hi);
    if (allocator_probe && !allocator_hi)
        range_holding(allocator_probe, &allocator_lo, &allocator_hi);
    mlk_unlock(&modules_lock);
}

/* Unsynchronised read of the live ranges: a scan only ever replaces the
 * array contents under the lock, and a stale answer merely causes one more
 * scan, so taking the lock on this path is not worth it. */
static int known(uint64_t ip, uint64_t *lo, uint64_t *hi)
{
    uint32_t n = __atomic_load_n(&live_count, __ATOMIC_ACQUIRE);
    uint32_t a = 0, b = n;
    while (a < b) {
        uint32_t m = (a + b) / 2;
        if (live[m].hi <= ip)
            a = m + 1;
        else
            b = m;
    }
    if (a >= n || ip < live[a].lo || ip >= live[a].hi)
        return 0;
    *lo = live[a].lo, *hi = live[a].hi;
    return 1;
}

int mlk_modules_cover(const uint64_t *ips, int n)
{
    if (!live)
        return 0;
    /* (A stack's frames are mostly in one module, the program's: the range
     * the last frame was in is asked first -- cc1's 8.1k new stacks took a
     * search of the ranges per frame, 6.9M instructions.) */
    uint64_t lo = 1, hi = 0;
    for (int i = 0; i < n; i++)
        if (!(ips[i] >= lo && ips[i] < hi) && !known(ips[i], &lo, &hi))
            return 0;
    return 1;
}

void mlk_modules_set_self(const void *p) { self_probe = p; }

int mlk_is_self_address(uint64_t ip) { return ip >= self_lo && ip < self_hi; }

void mlk_modules_set_allocator(const void *p) { allocator_probe = p; }

int mlk_is_allocator_address(uint64_t ip) { return ip >= allocator_lo && ip < allocator_hi; }

void mlk_modules_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&modules_lock, acquire);
}

/* libc loads and unloads some modules itself (NSS, iconv), past the
 * dlopen/dlclose we interpose.  An unload we did not see leaves the old
 * module's range in our map and its unwind rules in the cache; a library
 * then loaded there, whose constructors allocate before dlopen returns,
 * would be unwound and named as the old one.  So before each dlopen we ask
 * the loader how many unloads there have been, and rescan if that changed. */
static int read_subs(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (has_subs(size))
        *(unsigned long long *)arg = info->dlpi_subs;
    return 1; /* the same in every entry: one is enough */
}

void mlk_modules_catch_up(void)
{
    if (!mlk_seg)
        return;
    unsigned long long subs = __atomic_load_n(&scanned_subs, __ATOMIC_RELAXED);
    dl_iterate_phdr(read_subs, &subs);
    if (subs != __atomic_load_n(&scanned_subs, __ATOMIC_RELAXED))
        mlk_modules_scan();
}

int mlk_object_of(const void *addr, const void **base, const char **name)
{
    void *start, *map;
    int found = mlk_find_object(addr, &start, &map);
    if (found >= 0) {
        const struct link_map *lm = map;
        if (found) {
            *base = start;
            if (name)
                *name = lm && lm->l_name ? lm->l_name : "";
        }
        return found;
    }
    Dl_info info;
    if (!dladdr(addr, &info))
        return 0;
    *base = info.dli_fbase;
    if (name)
        *name = info.dli_fname ? info.dli_fname : "";
    return 1;
}
