/* Which memory of a stopped process the scan reads, and how (maps.h):
 * its private writable mappings from /proc/PID/maps -- anonymous ones may
 * hold blocks, all are roots unless they turn out to be heap -- its file
 * mappings (where the heuristics look for vtables and code), and
 * /proc/PID/pagemap, to skip pages never touched: a mostly unused mapping
 * of gigabytes then costs little. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grow.h"
#include "maps.h"

#define PAGE 4096ull

static void note_file_map(struct mlk_maps *m, uint64_t lo, uint64_t hi, int readable, int executable)
{
    struct mlk_file_map *files = mlk_grow(m->files, m->nfiles, &m->files_cap, sizeof *files, 256);
    if (!files)
        return;
    m->files = files;
    m->files[m->nfiles++] = (struct mlk_file_map){lo, hi, readable, executable};
}

int mlk_maps_read(struct mlk_maps *m, int pid, uint64_t own_lo, uint64_t own_hi)
{
    char path[64], line[4096];
    memset(m, 0, sizeof *m);
    m->pagemap = -1;
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int complete = 1;
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        char perms[8] = "", file[4096] = "";
        if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %4095[^\n]", &lo, &hi, perms, file) < 3)
            continue;
        char *name = file;
        while (*name == ' ')
            name++;
        if (*name && *name != '[')
            note_file_map(m, lo, hi, perms[0] == 'r', perms[2] == 'x');
        if (perms[0] == 'r' && perms[3] == 's') {
            struct mlk_file_map *shared = mlk_grow(m->shared, m->nshared, &m->shared_cap, sizeof *shared, 64);
            if (shared) {
                m->shared = shared;
                m->shared[m->nshared++] = (struct mlk_file_map){lo, hi, 1, 0};
            }
        }
        if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p')
            continue; /* not readable and writable, or shared (not scanned: docs/scan.md) */
        struct mlk_region r = {lo, hi, 0, 1, 0, lo, 0};
        if (!*name || !strcmp(name, "[heap]") || !strcmp(name, "[stack]") ||
            !strncmp(name, "[anon:", 6))
            r.anon = 1;
        else if (name[0] == '[')
            continue; /* [vvar], [vsyscall]...: the kernel's */
        else if (strstr(name, "/libmtrace.so"))
            continue; /* our own tables hold addresses of blocks, not references */
        if (lo >= own_lo && hi <= own_hi)
            continue; /* libmtrace's tables and the unwinder's copies of stack words */
        r.heap = !strcmp(name, "[heap]");
        struct mlk_region *regions = mlk_grow(m->regions, m->nregions, &m->regions_cap, sizeof *regions, 256);
        if (!regions) {
            complete = 0;
            break;
        }
        m->regions = regions;
        m->regions[m->nregions++] = r;
    }
    fclose(f);
    if (!complete)
        return -1;
    snprintf(path, sizeof path, "/proc/%d/pagemap", pid);
    m->pagemap = open(path, O_RDONLY | O_CLOEXEC);
    return 0;
}

void mlk_maps_free(struct mlk_maps *m)
{
    if (m->pagemap >= 0)
        close(m->pagemap);
    free(m->regions);
    free(m->files);
    free(m->shared);
    memset(m, 0, sizeof *m);
    m->pagemap = -1;
}

struct mlk_region *mlk_region_of(const struct mlk_maps *m, uint64_t addr)
{
    int lo = 0, hi = m->nregions;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->regions[mid].hi <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->nregions && m->regions[lo].lo <= addr ? &m->regions[lo] : NULL;
}

void mlk_touched_runs(const struct mlk_maps *m, uint64_t lo, uint64_t hi,
                      void (*each)(void *ctx, uint64_t lo, uint64_t hi, void *arg), void *ctx, void *arg)
{
    if (m->pagemap < 0 || hi - lo <= 64 * PAGE) {
        each(ctx, lo, hi, arg);
        return;
    }
    uint64_t entries[512];
    uint64_t page = lo / PAGE, last = (hi + PAGE - 1) / PAGE, run_lo = 0;
    int in_run = 0;
    while (page < last) {
        size_t want = last - page < 512 ? (size_t)(last - page) : 512;
        ssize_t n = pread(m->pagemap, entries, want * 8, (off_t)(page * 8));
        if (n <= 0) { /* cannot tell: read the rest */
            each(ctx, in_run ? run_lo : page * PAGE > lo ? page * PAGE : lo, hi, arg);
            return;
        }
        for (size_t i = 0; i < (size_t)n / 8; i++, page++) {
            int touched = (entries[i] >> 62) != 0; /* bit 63 present, 62 swapped */
            uint64_t at = page * PAGE > lo ? page * PAGE : lo;
            if (touched && !in_run) {
                run_lo = at;
                in_run = 1;
            } else if (!touched && in_run) {
                each(ctx, run_lo, at, arg);
                in_run = 0;
            }
        }
    }
    if (in_run)
        each(ctx, run_lo, hi, arg);
}
