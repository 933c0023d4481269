/* Each stack's counters: what the allocations and frees from it add up
 * to, counted in stripes -- a cache line per stripe per stack -- so that
 * threads counting on the same stacks do not share a line (stacks.c
 * interns the stacks these count for).  Also each thread's own totals
 * (memleak_thread). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>

#include "mlk.h"

_Static_assert(sizeof(struct mlk_counters) == 64 && sizeof(struct mlk_stack) == 64,
               "a stack's identity is a cache line, and its counters in a stripe another");

/* This thread's counter stripe.  The first threads to count much own a
 * stripe each (all but the last) and update it with plain loads and stores
 * -- a locked add costs more than the rest of the bookkeeping of a free.
 * Every other thread adds atomically to the last stripe, which nobody owns;
 * a thread starts there, and claims a stripe of its own after
 * STRIPE_CLAIM_AFTER counts (the main thread of a server, which allocates
 * a little before starting its workers, would otherwise keep one for
 * nothing).  An owner gives its stripe up when it exits (its TLS
 * destructor), after turning to the shared stripe itself for whatever its
 * later destructors free; a thread that comes later may then own it.  (The
 * reporter reads each counter word whole either way.) */
/* The thread's stripe, and its memory totals (memleak_thread, jemalloc's
 * thread.allocated / thread.deallocated): what it allocated and what it
 * freed, whoever allocated that.  Per thread because a block's trailer has
 * no room for the thread that made it, and an exact per-thread live count
 * would put an atomic on another thread's line at every cross-thread free.
 * Plain adds: only this thread writes them (a signal handler's free inside
 * one of its hooks can lose one event).  One variable, so that one TLS
 * offset serves both -- and the hooks' other hot words too. */
#define mine (mlk_hot.counts) /* (mlk.h's hot words: stripe_plus_one; claim_in, on the shared stripe the
                               * counts before it tries to own one; allocated bytes, freed bytes,
                               * allocated blocks, freed blocks -- an event's two adds not side by
                               * side, which gcc would make five vector instructions instead of two) */
#define stripe_plus_one mine.stripe_plus_one
#define SHARED_STRIPE MLK_COUNTER_STRIPES /* (plus one) the stripe nobody owns */
static uint32_t stripe_owned[MLK_COUNTER_STRIPES - 1]; /* 1: a live thread owns it */
static pthread_key_t stripe_key;   /* its destructor gives the stripe up */
static int stripe_key_made;

/* Whether stripe s (plus one) is one a thread owns: 1 to SHARED_STRIPE - 1
 * (not 0, no stripe yet, nor the shared one), in one unsigned test. */
static inline int owned_stripe(unsigned s) { return s - 1 < SHARED_STRIPE - 1; }

/* The thread's stripe becomes s (plus one), its fast-way bit with it, and
 * where its counters of stack 0 are: its counters of stack id are id lines
 * on -- a shift and one add from thread-local storage.  The stripe is
 * marked used first (the reporter reads no other: a stripe nobody counted
 * in is never touched).  (Set only while counting, so the array exists;
 * and it never moves: a forked child maps its copy of the segment over
 * the parent's.) */
static unsigned set_stripe(unsigned s)
{
    uint32_t bit = 1u << (s - 1);
    if (!(__atomic_load_n(&mlk_seg->stripes_used, __ATOMIC_RELAXED) & bit))
        __atomic_fetch_or(&mlk_seg->stripes_used, bit, __ATOMIC_SEQ_CST);
    stripe_plus_one = s;
    mine.stripe_base = (char *)mlk_stripe(s - 1);
    mlk_thread_fast_set(MLK_THREAD_STRIPE, owned_stripe(s));
    return s;
}

#define STRIPE_CLAIM_AFTER 256
#define STRIPE_CLAIM_RETRY 65536 /* all were owned: try again after this many */

static void stripe_release(void *unused)
{
    (void)unused;
    unsigned s = stripe_plus_one;
    set_stripe(SHARED_STRIPE); /* this thread's later counts: atomic, on the shared one */
    mine.claim_in = 0;               /* (never to claim again: 2^32 counts away) */
    if (s && s < SHARED_STRIPE)
        __atomic_store_n(&stripe_owned[s - 1], 0, __ATOMIC_RELEASE); /* after its last plain store */
}

static __attribute__((noinline)) unsigned claim_stripe(void)
{
    if (!stripe_plus_one) { /* the thread's first count */
        mine.claim_in = STRIPE_CLAIM_AFTER;
        return set_stripe(SHARED_STRIPE);
    }
    mine.claim_in = STRIPE_CLAIM_RETRY;
    for (unsigned i = 0; stripe_key_made && i < SHARED_STRIPE - 1; i++) {
        uint32_t free_ = 0;
        if (__atomic_load_n(&stripe_owned[i], __ATOMIC_RELAXED) ||
            !__atomic_compare_exchange_n(&stripe_owned[i], &free_, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            continue;
        if (pthread_setspecific(stripe_key, (void *)1) == 0)
            return set_stripe(i + 1);
        __atomic_store_n(&stripe_owned[i], 0, __ATOMIC_RELEASE); /* could not be given up at exit */
        break;
    }
    return set_stripe(SHARED_STRIPE);
}

static inline unsigned stripe_of_thread(void)
{
    unsigned s = stripe_plus_one;
    if (MLK_UNLIKELY(!owned_stripe(s)) && (!s || --mine.claim_in == 0))
        s = claim_stripe();
    return s;
}

void mlk_stacks_init(void)
{
    if (!stripe_key_made)
        stripe_key_made = pthread_key_create(&stripe_key, stripe_release) == 0;
}

void mlk_stacks_fork_child(void)
{
    /* One thread now: the stripes the others owned are free. */
    for (unsigned i = 0; i < SHARED_STRIPE - 1; i++)
        stripe_owned[i] = stripe_plus_one == i + 1;
}

int mlk_stack_owns_stripe(void) { return owned_stripe(stripe_plus_one); }

/* A plain add to a counter of a stripe this thread owns: one add to
 * memory on x86-64 (no lock: no other thread writes it) -- where the C
 * atomics' relaxed load and store were three instructions, and a signal
 * handler's count on this thread between them was lost.  (The reporter
 * reads the counter as an aligned word: the old value or the new.) */
#if defined(__x86_64__)
#define OWN_ADD(counter, v) __asm__ volatile("addq %1, %0" : "+m"(counter) : "er"((uint64_t)(v)))
#else
#define OWN_ADD(counter, v) \
    __atomic_store_n(&(counter), __atomic_load_n(&(counter), __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED)
#endif

/* Adds v to a counter of this thread's stripe. */
static inline void bump(unsigned stripe_plus_one_, uint64_t *counter, uint64_t v)
{
    if (stripe_plus_one_ != SHARED_STRIPE)
        OWN_ADD(*counter, v);
    else
        __atomic_add_fetch(counter, v, __ATOMIC_RELAXED);
}

/* Stack id's counters in the stripe this thread owns, or NULL (it shares
 * the last one, or has not counted yet): then its event goes through
 * add_slow.  (So that an owner's count makes no call, and saves no
 * registers for one: the stripes' claim cost sqlite3 0.6% while inline.) */
/* Stack id's counters in this thread's stripe (set_stripe's base, one
 * line a stack). */
static inline struct mlk_counters *counters_at_base(uint32_t id)
{
    return (struct mlk_counters *)(mine.stripe_base + (uint64_t)id * sizeof(struct mlk_counters));
}

static inline struct mlk_counters *owned_counters(uint32_t id)
{
    return MLK_LIKELY(owned_stripe(stripe_plus_one)) ? counters_at_base(id) : NULL;
}

#define FIELD(name) offsetof(struct mlk_counters, name)

/* Adds va, vb, vc to the counters at offsets a, b, c of stack id's counters
 * in this thread's stripe, claiming one when due (a thread's first counts,
 * or a sharer's): plain adds on an owned stripe, locked ones on the shared.
 * Inline where a thread that owns no stripe is the common case (a sharer's
 * fast ways: mlk_stack_count_unowned), else out of line (add_slow). */
static inline __attribute__((always_inline)) void add_to_stripe(uint32_t id, size_t a, uint64_t va, size_t b,
                                                                uint64_t vb, size_t c, uint64_t vc)
{
    unsigned s = stripe_of_thread();
    char *at = (char *)counters_at_base(id);
    if (va)
        bump(s, (uint64_t *)(at + a), va);
    if (vb)
        bump(s, (uint64_t *)(at + b), vb);
    if (vc)
        bump(s, (uint64_t *)(at + c), vc);
}

static __attribute__((noinline)) void add_slow(uint32_t id, size_t a, uint64_t va, size_t b, uint64_t vb,
                                               size_t c, uint64_t vc)
{
    add_to_stripe(id, a, va, b, vb, c, vc);
}

static inline void count_alloc(uint32_t id, uint64_t bytes)
{
    struct mlk_counters *c = owned_counters(id);
    if (MLK_UNLIKELY(!c)) {
        add_slow(id, FIELD(alloc_count), 1, FIELD(alloc_bytes), bytes, 0, 0);
        return;
    }
    OWN_ADD(c->alloc_count, 1);
    OWN_ADD(c->alloc_bytes, bytes);
}

static inline void account(uint32_t id, int64_t bytes, int64_t blocks)
{
    struct mlk_counters *c = owned_counters(id);
    if (MLK_UNLIKELY(!c)) {
        add_slow(id, FIELD(freed_bytes), (uint64_t)-bytes, FIELD(freed_count), (uint64_t)-blocks, 0, 0);
        return;
    }
    OWN_ADD(c->freed_bytes, -bytes);
    OWN_ADD(c->freed_count, -blocks);
}

/* The thread's totals of an allocation and a free (memleak_thread). */
static inline void totals_alloc(int64_t bytes, int64_t blocks)
{
    mine.totals[0] += bytes;
    mine.totals[2] += blocks;
}

static inline void totals_free(int64_t bytes, int64_t blocks)
{
    mine.totals[1] += bytes;
    mine.totals[3] += blocks;
}

/* (Each: the thread's totals first, so that the counters' slow way is a
 * tail call.) */
void mlk_stack_count_alloc(uint32_t id, uint64_t bytes)
{
    totals_alloc((int64_t)bytes, 1);
    count_alloc(id, bytes);
}

void mlk_stack_account(uint32_t id, int64_t bytes, int64_t blocks)
{
    totals_free(-bytes, -blocks);
    account(id, bytes, blocks);
}

/* (Inlined into the trailer's write and free, across files by the link-time
 * optimizer: then their owner's path makes no call at all and saves no
 * registers for one -- sqlite3 -0.9M instructions, churn -2.4M.) */
__attribute__((always_inline)) inline struct mlk_counters *mlk_stack_owned_counters(uint32_t id)
{
    return owned_counters(id);
}

__attribute__((always_inline)) inline struct mlk_counters *mlk_stack_owned_counters_known(uint32_t id)
{
    return counters_at_base(id);
}

__attribute__((always_inline)) inline void mlk_stack_count_owned(struct mlk_counters *c, uint64_t bytes,
                                                                 uint64_t slack)
{
    totals_alloc((int64_t)bytes, 1);
    OWN_ADD(c->alloc_count, 1);
    OWN_ADD(c->alloc_bytes, bytes);
    OWN_ADD(c->alloc_slack, slack);
}

/* A thread on the shared stripe takes the fast ways too (a server's third
 * and later threads took the whole slow way for every allocation and free:
 * bench/programs/kvserver.cc, 4 connection threads, 905M instructions for
 * 200k requests; a stripe each, 742M).  Its counts there are
 * the way of a thread without a stripe of its own (add_to_stripe: locked
 * adds, a stripe claimed when one is due), inline -- through add_slow, a
 * call, kv-server took 871M instructions instead of 840M. */
__attribute__((always_inline)) inline int mlk_stack_on_shared_stripe(void)
{
    return stripe_plus_one == SHARED_STRIPE;
}

__attribute__((always_inline)) inline void mlk_stack_count_unowned(uint32_t id, uint64_t bytes, uint64_t slack)
{
    totals_alloc((int64_t)bytes, 1);
    add_to_stripe(id, FIELD(alloc_count), 1, FIELD(alloc_bytes), bytes, FIELD(alloc_slack), slack);
}

__attribute__((always_inline)) inline void mlk_stack_uncount_unowned(uint32_t id, uint64_t bytes, uint64_t slack)
{
    totals_free((int64_t)bytes, 1);
    add_to_stripe(id, FIELD(freed_bytes), bytes, FIELD(freed_count), 1, FIELD(freed_slack), slack);
}

__attribute__((always_inline)) inline void mlk_stack_count_trailed(uint32_t id, uint64_t bytes, uint64_t slack)
{
    struct mlk_counters *c = owned_counters(id);
    if (MLK_UNLIKELY(!c)) {
        totals_alloc((int64_t)bytes, 1);
        add_slow(id, FIELD(alloc_count), 1, FIELD(alloc_bytes), bytes, FIELD(alloc_slack), slack);
        return;
    }
    mlk_stack_count_owned(c, bytes, slack);
}

__attribute__((always_inline)) inline void mlk_stack_uncount_owned(struct mlk_counters *c, uint64_t bytes,
                                                                   uint64_t slack)
{
    totals_free((int64_t)bytes, 1);
    OWN_ADD(c->freed_bytes, (int64_t)bytes);
    OWN_ADD(c->freed_count, 1);
    OWN_ADD(c->freed_slack, slack);
}

__attribute__((always_inline)) inline void mlk_stack_uncount_trailed(uint32_t id, uint64_t bytes, uint64_t slack)
{
    struct mlk_counters *c = owned_counters(id);
    if (MLK_UNLIKELY(!c)) {
        totals_free((int64_t)bytes, 1);
        add_slow(id, FIELD(freed_bytes), bytes, FIELD(freed_count), 1, FIELD(freed_slack), slack);
        return;
    }
    mlk_stack_uncount_owned(c, bytes, slack);
}

void mlk_stack_count_alloc_other(uint32_t id, uint64_t bytes) { count_alloc(id, bytes); }

void mlk_stack_account_other(uint32_t id, int64_t bytes, int64_t blocks) { account(id, bytes, blocks); }

void mlk_thread_totals(int64_t out[4])
{
    out[0] = mine.totals[0]; /* allocated bytes, blocks; freed bytes, blocks */
    out[1] = mine.totals[2];
    out[2] = mine.totals[1];
    out[3] = mine.totals[3];
}
