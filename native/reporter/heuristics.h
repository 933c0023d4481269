/* valgrind's leak-check heuristics for interior pointers (heuristics.c). */
#ifndef MLK_HEURISTICS_H
#define MLK_HEURISTICS_H

#include <stdint.h>

#include "scan.h"

/* The heuristic a block was reached by (0: none); bit n of a set is
 * heuristic n. */
#define MLK_HEUR_NONE 0
#define MLK_HEUR_STDSTRING 1
#define MLK_HEUR_LENGTH64 2
#define MLK_HEUR_NEWARRAY 3
#define MLK_HEUR_MULTIPLE_INHERITANCE 4
/* The sets, as the segment's field has them (../shm_layout.h, which has no
 * include guard: included by the .c files that use these). */
#define MLK_HEUR_VALGRIND MLK_SCAN_HEURISTICS_VALGRIND /* the four above: valgrind's own */
/* Not valgrind's: a pointer at the offset of its allocation site's header
 * (headers.c), learned during the scan. */
#define MLK_HEUR_HEADER 5
#define MLK_HEUR_ALL MLK_SCAN_HEURISTICS_ALL
/* Not a heuristic: an option of mlk_scan_heap passed in the same word --
 * the process was attached to, its older blocks are not listed (scan.c). */
#define MLK_SCAN_UNLISTED_HEAP_IS_ROOT 0x40000000u

/* A file mapping of the process: where vtables and code can be. */
struct mlk_file_map {
    uint64_t lo, hi;
    int readable, executable;
};

struct mlk_heuristics;
/* maps: sorted by address, kept by the caller while the heuristics live. */
struct mlk_heuristics *mlk_heuristics_new(int pid, unsigned set, const struct mlk_file_map *maps,
                                          int nmaps);
void mlk_heuristics_free(struct mlk_heuristics *h);
/* Which heuristic (of the set) makes interior pointer p reach block b
 * (the block at `index`), or MLK_HEUR_NONE. */
int mlk_heuristic_reaches(struct mlk_heuristics *h, uint64_t p, int64_t index, const struct mlk_block *b);

#endif
