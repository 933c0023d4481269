/* Routing allocators that are not the one our exported symbols forward to:
 * a module that the program's symbol lookups find before ours (an
 * executable that defines malloc -- Chromium's allocator shim, a static
 * tcmalloc -- or a library preloaded ahead of us) has its entry points
 * patched to jump to the hooks of routed.c, and so has every module that
 * defines an allocator family's own names (mi_malloc, mallocx, tc_malloc).
 * One door: mlk_route_start. */
#ifndef MLK_ROUTE_H
#define MLK_ROUTE_H

#include <stddef.h>
#include <stdint.h>

enum mlk_route_role {
    MLK_ROUTE_CORE,  /* malloc, free, calloc, realloc: all routed, or none of the module's entries */
    MLK_ROUTE_FREE,  /* a way to free: unrouted, its blocks would look leaked -- all or none too */
    MLK_ROUTE_ALLOC, /* a way to allocate: unrouted, its blocks are not seen (said) */
};

struct mlk_route_entry {
    const char *name;
    void *hook;      /* routed.c's function */
    void **original; /* where routed.c calls the original (set once routed) */
    int role;
};
/* Every entry routed.c has a hook for (entries.h): the usual names first
 * ([0, mlk_route_usual_count): malloc, operator new, ...), then the
 * families called by their own names (mi_*, mallocx & co, tc_*). */
#define MLK_ROUTE_MAX_ENTRIES 256 /* more than the table (routed.c asserts it) */
extern const struct mlk_route_entry mlk_route_entries[];
extern const int mlk_route_entry_count;
extern const int mlk_route_usual_count;
/* Entry i was routed: `trailed`, its allocator also serves our exported
 * malloc; `helper`, the function it needed beside it, if any. */
void mlk_route_entry_routed(int i, int trailed, void *helper);
/* Under attach (attach.c): the family entry named `name` (-1: none), and
 * the hook a module's offset-table slot for entry i is to hold (NULL: not
 * routable -- its definition or mi_heap_destroy's helper is missing). */
int mlk_route_family_index(const char *name);
void *mlk_route_attach_hook(int i);

/* At start: route every allocator entry point that wins the program's
 * lookups over ours.  What could not be routed is appended to `blind`
 * (the blind-spot line), with the reason; what was routed to `routed`.
 * `why_not`: a reason not to patch at all (an attach: the program's
 * threads run on while entries would be rewritten), said in `blind`. */
void mlk_route_start(const char *why_not, char *blind, size_t blind_len, char *routed, size_t routed_len);
/* The allocator module at `module` (its base) exports ways to allocate
 * beside a free that nothing routes (PREFIX_malloc and PREFIX_free):
 * appended to `blind` (unrouted.c). */
void mlk_route_say_unrouted(const void *module, char *blind, size_t blind_len);
/* Under attach the executable's own entries are planned by
 * mlk_route_start and held, to be written while the program's other
 * threads are stopped (a jump written over instructions a thread is
 * part-way through would wreck it).  mlk_route_held: how many patches wait
 * (0: none, nothing to stop the threads for).  mlk_route_commit_held:
 * writes them, given where every other thread is (its instruction
 * pointer): 1 when one is inside bytes to be overwritten (nothing written:
 * let them run and try again), else 0.  Stores and system calls only.
 * mlk_route_say_held: what was routed or not, appended to the lines (held
 * and never written: not seen, `why_not_written`). */
int mlk_route_held(void);
/* After a detach: how many held entries are patched, and writing their
 * original bytes back (stores and system calls only, as the commit). */
int mlk_route_patched_held(void);
void mlk_route_unpatch_held(void);
int mlk_route_commit_held(const uint64_t *pcs, int npcs);
void mlk_route_say_held(const char *why_not_written, char *blind, size_t blind_len, char *routed,
                        size_t routed_len);
/* One more line for the blind list (not seen, and why), from outside the
 * routing (hooks_maps.c: dlmopen): said once on stderr, and in every report
 * from now on (the segment's blind line). */
void mlk_route_say_blind(const char *line);
/* After a dlopen (not under attach, whose offset tables see to it): the
 * families the module opened and its dependencies define (a plugin linked
 * with libmimalloc, loaded RTLD_LOCAL), routed like those at start; what
 * was routed or not is added to mlk_blind/mlk_routed and the segment's. */
void mlk_route_after_dlopen(void *handle);
/* After a dlclose: a routed family's module that is gone may come back
 * (at the same address or not), to be routed again then. */
void mlk_route_after_dlclose(void);

#endif
