/* glibc's own statistics of its arenas, read from outside the program
 * (glibc_arenas.c).  Reporter side only. */
#ifndef MLK_GLIBC_ARENAS_H
#define MLK_GLIBC_ARENAS_H

#include <stdint.h>

#define MLK_ARENA_CLASSES 8 /* free chunks by size: <64, <256, <1K, <4K, <16K, <64K, <256K, more */

struct mlk_glibc_arena {
    uint64_t at;                   /* its struct malloc_state */
    uint64_t system, max_system;   /* memory it has from the system now, and at most */
    uint64_t top;                  /* the top chunk's bytes (free, at the end of its memory) */
    uint64_t bins_bytes, bins_chunks;  /* free chunks in its bins (unsorted included) */
    uint64_t fast_bytes, fast_chunks;  /* ... and in its fastbins */
    uint64_t class_bytes[MLK_ARENA_CLASSES], class_chunks[MLK_ARENA_CLASSES]; /* bins and fastbins */
    int32_t partial;               /* a list could not be read to its end */
    int32_t pad;
};

/* The arenas of glibc's malloc in process pid, main first, in glibc's ring
 * order (malloc_info's "heap nr"): up to max written to out; returns how
 * many there are (0: none found), -1 out of memory.  [heap_lo, heap_hi):
 * [heap] (0, 0 if none); search: nsearch (lo, hi) ranges that may hold the
 * main arena (the C library's data); named: addresses other arenas' heaps
 * name (their heap_info's first word), used when no main arena is found. */
int mlk_glibc_arenas(int pid, uint64_t heap_lo, uint64_t heap_hi, const uint64_t *search, int nsearch,
                     const uint64_t *named, int nnamed, struct mlk_glibc_arena *out, int max);

#endif
