/* How long the blocks a scan finds have been live: what each scan saw is
 * kept (in the reporter, never in the program), and the next scan matches
 * its blocks against it.  Reporter side only. */
#ifndef MLK_AGE_H
#define MLK_AGE_H

#include <stdint.h>

#define MLK_AGE_BUCKETS 8

struct mlk_age_history;

/* One block of the current scan, in address order. */
struct mlk_aged_block {
    uint64_t start, size;
    uint32_t stack;
};

struct mlk_age_history *mlk_age_history_new(void);
void mlk_age_history_free(struct mlk_age_history *h);

/* Match this scan's blocks (sorted by start; stacks >= nstacks are not
 * counted per stack) against the history, count per stack how many were
 * first seen at each earlier scan, and make this scan the history.
 * per_stack_age: nstacks rows of MLK_AGE_BUCKETS counts, added to;
 * bucket_seq: the report seq of each bucket (0: unused).  Returns 0, or
 * -1 when out of memory (the history is then dropped). */
int mlk_age_update(struct mlk_age_history *h, const struct mlk_aged_block *blocks, int64_t n,
                   uint32_t seq, int64_t nstacks, int64_t *per_stack_age, int32_t *bucket_seq);

#endif
