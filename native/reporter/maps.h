/* A stopped process's memory mappings, as the reachability scan sees them
 * (maps.c).  Reporter side only. */
#ifndef MLK_MAPS_H
#define MLK_MAPS_H

#include <stdint.h>

#include "heuristics.h"

/* A private writable mapping: what may hold blocks or roots. */
struct mlk_region {
    uint64_t lo, hi;
    int anon;           /* anonymous (or [heap]/[stack]): may hold blocks */
    int root;           /* scanned as a root (unless heap) */
    int heap;           /* holds blocks not in their own mapping: not a root */
    uint64_t root_from; /* a thread's stack: roots start here */
    int stack_of_thread;
};

struct mlk_maps {
    struct mlk_region *regions; /* sorted */
    int64_t nregions, regions_cap;
    struct mlk_file_map *files; /* file mappings, any permission: for the heuristics */
    int64_t nfiles, files_cap;
    struct mlk_file_map *shared; /* readable shared mappings: not scanned, but a root region
                                  * the program registered there is read (lo, hi) */
    int64_t nshared, shared_cap;
    int pagemap;                /* /proc/PID/pagemap, or -1 */
};

/* Read /proc/PID/maps, leaving out libmtrace's own memory (its library
 * and [own_lo, own_hi)), the kernel's and shared mappings.  0, or -1. */
int mlk_maps_read(struct mlk_maps *m, int pid, uint64_t own_lo, uint64_t own_hi);
void mlk_maps_free(struct mlk_maps *m);
struct mlk_region *mlk_region_of(const struct mlk_maps *m, uint64_t addr);
/* Calls each(ctx, lo, hi, arg) for the runs of [lo, hi) whose pages were
 * ever touched (present or swapped out); the rest reads as zeros. */
void mlk_touched_runs(const struct mlk_maps *m, uint64_t lo, uint64_t hi,
                      void (*each)(void *ctx, uint64_t lo, uint64_t hi, void *arg), void *ctx, void *arg);

#endif
