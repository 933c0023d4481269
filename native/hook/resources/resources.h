/* Resources other than memory (table.c), and file descriptors as the
 * built-in kind (fds.c): what the descriptor hooks, the in-program API
 * (api/api.c: memleak_resource_acquire/release) and control.c call. */
#ifndef MLK_RESOURCES_H
#define MLK_RESOURCES_H

#include <stdint.h>

#include "../mlk.h"

#define MLK_FD_KIND 0 /* file descriptors: the first kind named, when tracked */

/* The index of the resource kind named `name` (at most
 * MLK_RESOURCE_NAME_MAX - 1 bytes of it count), named now if new and
 * `create`; -1 when the tracer has no segment, no such kind, or every kind
 * is taken. */
MLK_HIDDEN int mlk_resource_kind(const char *name, int create);

/* Resource `id` of kind `kind` is held, with `weight`, from `stack`
 * (MLK_NO_STACK: held but in no entry).  One already held under that id
 * was let go unseen (a descriptor number is reused only after a close):
 * it ends first. */
MLK_HIDDEN void mlk_resource_acquire(int kind, uint64_t id, uint64_t weight, uint32_t stack);
/* ... let go: 1 if it was held. */
MLK_HIDDEN int mlk_resource_release(int kind, uint64_t id);
/* Every id of `kind` in [lo, hi] let go (close_range). */
MLK_HIDDEN void mlk_resource_release_range(int kind, uint64_t lo, uint64_t hi);

/* exec: the descriptors marked close-on-exec end with the image, so the
 * old image's last report must not count them -- set apart before the
 * call, counted again if it fails. */
MLK_HIDDEN void mlk_fds_before_exec(void);
MLK_HIDDEN void mlk_fds_exec_failed(void);
/* The exec hooks' calls around the real one (fds.c: guarded, this
 * process's books only). */
MLK_HIDDEN void mlk_fds_exec_begins(void);
MLK_HIDDEN void mlk_fds_exec_returned(void);

/* Descriptors above 2 open now but ours (fds.c). */
MLK_HIDDEN uint32_t mlk_fds_open_now(void);

/* Held across fork like the other tables' locks. */
MLK_HIDDEN void mlk_resources_lock_for_fork(int acquire);
/* The segment is made: file descriptors are named kind 0 when tracked. */
MLK_HIDDEN void mlk_resources_segment_made(int track_fds);

#endif
