/* Go with cgo: across runtime.asmcgocall's stack switch (runtimes/go.c). */
#ifndef MLK_RUNTIMES_GO_H
#define MLK_RUNTIMES_GO_H 1

#include <stdint.h>

#include "../mlk.h"

/* Where asmcgocall keeps what the switch back needs: the goroutine (g) at
 * [sp + g], its stack's top at [g + hi] (its bottom just below), the depth
 * of its sp below that top at [sp + depth]. */
struct mlk_go_switch {
    int g, hi, depth;
};

/* Is return address ra the point where asmcgocall switches back to the
 * goroutine's stack (its instructions there)?  Its offsets, if sw. */
MLK_HIDDEN int mlk_go_switch_at(uint64_t ra, struct mlk_go_switch *sw);
/* The same, for a frame of a libgcc walk: known switches by one compare
 * (the rules' walk has met each before it asks libgcc); its offsets in sw. */
MLK_HIDDEN int mlk_go_switch_known(uint64_t ra, struct mlk_go_switch *sw);
/* The Go frames above that switch, from the state (sp, rbp) of its frame:
 * how many were written to ips (at most max; *truncated: more followed). */
MLK_HIDDEN int mlk_go_frames(const struct mlk_go_switch *sw, uint64_t sp, uint64_t bp, uint64_t *ips, int max,
                             int *truncated);

#endif
