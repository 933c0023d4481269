/* The survivors view (Carlo Wood's libmemleak was built around it): of a
 * stack's live blocks, how many have been live since report 2, since
 * report 5...  A leak's blocks pile up in the old buckets; a cache's are
 * replaced and stay young.
 *
 * Done without a word of cost on the allocation path: each scan walks
 * every live block anyway, so the reporter keeps what the last scan saw --
 * start, size, stack and the seq of the scan that first saw it -- sorted
 * by address, and merges the next scan's sorted blocks with it.  A block
 * counts as the same block when start, size and stack are the same (one
 * freed and made again at the same address, by the same stack, with the
 * same size, between two scans, is taken for a survivor: the price of
 * not touching the hot path).  Ages are in scans, and so in the reports
 * that carried them: a block first seen by the first scan may be older. */
#include <stdlib.h>
#include <string.h>

#include "age.h"

#define EXPORT __attribute__((visibility("default")))

struct seen {
    uint64_t start, size;
    uint32_t stack;
    uint32_t first_seq;  /* the report seq of the scan that first saw it */
};

struct mlk_age_history {
    struct seen *v;
    int64_t n;
};

EXPORT struct mlk_age_history *mlk_age_history_new(void)
{
    return calloc(1, sizeof(struct mlk_age_history));
}

EXPORT void mlk_age_history_free(struct mlk_age_history *h)
{
    if (h)
        free(h->v);
    free(h);
}

static int by_seq(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The buckets: the distinct first-seen seqs older than this scan, the
 * newest MLK_AGE_BUCKETS of them; older ones fall in the oldest bucket
 * kept ("since then or before"). */
static int choose_buckets(const struct mlk_age_history *h, uint32_t seq, int32_t *bucket_seq)
{
    uint32_t found[MLK_AGE_BUCKETS + 1];
    int nfound = 0;
    memset(bucket_seq, 0, MLK_AGE_BUCKETS * sizeof *bucket_seq);
    for (int64_t i = 0; i < h->n; i++) {
        uint32_t s = h->v[i].first_seq;
        if (s == seq)
            continue;
        int k = 0;
        while (k < nfound && found[k] != s)
            k++;
        if (k < nfound)
            continue;
        if (nfound < MLK_AGE_BUCKETS + 1) {
            found[nfound++] = s;
        } else { /* keep the newest: replace the oldest if this is newer */
            int oldest = 0;
            for (int j = 1; j < nfound; j++)
                if (found[j] < found[oldest])
                    oldest = j;
            if (s > found[oldest])
                found[oldest] = s;
        }
    }
    qsort(found, (size_t)nfound, sizeof found[0], by_seq);
    int skip = nfound > MLK_AGE_BUCKETS ? nfound - MLK_AGE_BUCKETS : 0;
    for (int k = skip; k < nfound; k++)
        bucket_seq[k - skip] = (int32_t)found[k];
    return nfound - skip;
}

static int bucket_of(const int32_t *bucket_seq, int nbuckets, uint32_t first_seq)
{
    for (int k = nbuckets - 1; k > 0; k--)
        if ((uint32_t)bucket_seq[k] <= first_seq)
            return k;
    return 0; /* the oldest bucket, or older */
}

EXPORT int mlk_age_update(struct mlk_age_history *h, const struct mlk_aged_block *blocks, int64_t n,
                          uint32_t seq, int64_t nstacks, int64_t *per_stack_age, int32_t *bucket_seq)
{
    int nbuckets = choose_buckets(h, seq, bucket_seq);
    struct seen *next = malloc((size_t)(n ? n : 1) * sizeof *next);
    if (!next) {
        free(h->v);
        h->v = NULL;
        h->n = 0;
        return -1;
    }
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct mlk_aged_block *b = &blocks[i];
        while (j < h->n && h->v[j].start < b->start)
            j++;
        uint32_t first = seq;
        if (j < h->n && h->v[j].start == b->start && h->v[j].size == b->size &&
            h->v[j].stack == b->stack) {
            first = h->v[j].first_seq;
            if (nbuckets && b->stack < nstacks)
                per_stack_age[(int64_t)b->stack * MLK_AGE_BUCKETS + bucket_of(bucket_seq, nbuckets, first)]++;
        }
        next[i] = (struct seen){b->start, b->size, b->stack, first};
    }
    free(h->v);
    h->v = next;
    h->n = n;
    return 0;
}
