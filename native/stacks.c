/* Backtrace -> stack id, in the shared table.
 *
 * Entries live in the segment's append-only stacks array, so the reporter
 * reads them without any lock.  Finding an entry goes through a private
 * open-addressing index (slot = stack id + 1, 0 = empty), read and filled
 * lock-free with compare-and-swap.  When the index is half full one thread
 * builds a bigger one from the entries array and publishes it; entries added
 * to the old index meanwhile may later be added again, which is harmless:
 * each entry has its own counters and the reporter merges equal stacks.  Old
 * indexes are never freed (a reader may still be in one); together they
 * weigh less than the current one. */
#define _GNU_SOURCE
#include <string.h>

#include "mlk.h"

struct stack_index {
    uint64_t mask;
    uint64_t used;
    uint32_t slots[];
};

static struct stack_index *current_index;
static mlk_lock_t grow_lock;

/* A private copy of each entry's key.  Lookups compare against it instead of
 * the shared entry, whose cache line the counters of other threads keep
 * dirty: reading it there cost more than the whole rest of a lookup. */
struct stack_key {
    uint64_t hash;
    uint64_t frames_off;
    uint32_t depth;
    uint32_t kind;
};
static struct stack_key *keys;

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Each frame is multiplied by its own odd constant and the products are
 * summed, then mixed once: the multiplications do not wait for each other
 * (a chain of full mixes, one per frame, did -- a sixth of the cost of a
 * malloc), and a frame's position still matters. */
static uint64_t hash_stack(const uint64_t *ips, int depth, int kind, uint32_t unload_epoch)
{
    uint64_t h = ((uint64_t)kind << 32 | unload_epoch) ^ (uint64_t)depth << 48;
    uint64_t m = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < depth; i++) {
        h += (ips[i] ^ ips[i] >> 29) * m;
        m += 0xd6e8feb86659fd92ull; /* even: m stays odd */
    }
    return mix64(h) | 1; /* never 0 */
}

static struct stack_index *new_index(uint64_t cap)
{
    struct stack_index *ix = mlk_map_anon(sizeof *ix + cap * sizeof(uint32_t));
    if (ix)
        ix->mask = cap - 1;
    return ix;
}

static int same_stack(uint32_t id, uint64_t hash, const uint64_t *ips, int depth, int kind)
{
    const struct stack_key *k = &keys[id];
    return k->hash == hash && k->depth == (uint32_t)depth && k->kind == (uint32_t)kind &&
           memcmp(mlk_frames() + k->frames_off, ips, (size_t)depth * sizeof *ips) == 0;
}

/* Put an existing entry into an index (used while growing). */
static void index_put(struct stack_index *ix, uint32_t id, uint64_t hash)
{
    for (uint64_t i = hash & ix->mask;; i = (i + 1) & ix->mask)
        if (ix->slots[i] == 0) {
            ix->slots[i] = id + 1;
            ix->used++;
            return;
        }
}

static void maybe_grow(struct stack_index *ix)
{
    if (ix->used * 2 < ix->mask + 1 || !__sync_bool_compare_and_swap(&grow_lock.held, 0, 1))
        return;
    if (__atomic_load_n(&current_index, __ATOMIC_ACQUIRE) == ix) {
        struct stack_index *bigger = new_index((ix->mask + 1) * 4);
        if (bigger) {
            struct mlk_stack *st = mlk_stacks();
            uint64_t n = __atomic_load_n(&mlk_seg->stacks_used, __ATOMIC_ACQUIRE);
            if (n > mlk_seg->stacks_cap)
                n = mlk_seg->stacks_cap;
            for (uint64_t id = 0; id < n; id++)
                if (__atomic_load_n(&st[id].state, __ATOMIC_ACQUIRE) == MLK_STACK_READY)
                    index_put(bigger, (uint32_t)id, keys[id].hash);
            __atomic_store_n(&current_index, bigger, __ATOMIC_RELEASE);
        }
    }
    mlk_unlock(&grow_lock);
}

static uint32_t create_entry(uint64_t hash, const uint64_t *ips, int depth, int kind, uint32_t unload_epoch)
{
    struct mlk_header *h = mlk_seg;
    uint64_t id = __atomic_fetch_add(&h->stacks_used, 1, __ATOMIC_ACQ_REL);
    if (id >= h->stacks_cap) {
        __atomic_store_n(&h->stacks_used, h->stacks_cap, __ATOMIC_RELAXED);
        return MLK_NO_STACK;
    }
    uint64_t off = __atomic_fetch_add(&h->frames_used, (uint64_t)depth, __ATOMIC_ACQ_REL);
    if (off + (uint64_t)depth > h->frames_cap)
        return MLK_NO_STACK; /* the entry stays EMPTY: readers skip it */
    memcpy(mlk_frames() + off, ips, (size_t)depth * sizeof *ips);
    struct mlk_stack *e = &mlk_stacks()[id];
    e->hash = hash;
    e->depth = (uint16_t)depth;
    e->kind = (uint16_t)kind;
    e->frames_off = off;
    e->map_epoch = __atomic_load_n(&h->map_epoch, __ATOMIC_ACQUIRE);
    e->unload_epoch = unload_epoch;
    keys[id] = (struct stack_key){hash, off, (uint32_t)depth, (uint32_t)kind};
    __atomic_store_n(&e->state, MLK_STACK_READY, __ATOMIC_RELEASE);
    return (uint32_t)id;
}

uint32_t mlk_stack_intern(const uint64_t *ips, int depth, int kind)
{
    struct stack_index *ix = __atomic_load_n(&current_index, __ATOMIC_ACQUIRE);
    if (MLK_UNLIKELY(!ix)) {
        mlk_lock(&grow_lock);
        if (!keys)
            keys = mlk_map_anon(mlk_seg->stacks_cap * sizeof *keys); /* sparse until used */
        if (!current_index && keys)
            __atomic_store_n(&current_index, new_index(1u << 14), __ATOMIC_RELEASE);
        mlk_unlock(&grow_lock);
        ix = __atomic_load_n(&current_index, __ATOMIC_ACQUIRE);
        if (!ix)
            return MLK_NO_STACK;
    }
    uint32_t unload_epoch = __atomic_load_n(&mlk_seg->unload_epoch, __ATOMIC_ACQUIRE);
    uint64_t hash = hash_stack(ips, depth, kind, unload_epoch);
    uint32_t created = MLK_NO_STACK;
    for (uint64_t i = hash & ix->mask;; i = (i + 1) & ix->mask) {
        uint32_t slot = __atomic_load_n(&ix->slots[i], __ATOMIC_ACQUIRE);
        if (slot == 0) {
            if (created == MLK_NO_STACK) {
                /* A backtrace through code mapped since the last scan: learn
                 * about that module before anyone needs to symbolize it. */
                if (!mlk_modules_cover(ips, depth))
                    mlk_modules_scan();
                created = create_entry(hash, ips, depth, kind, unload_epoch);
                if (created == MLK_NO_STACK)
                    return MLK_NO_STACK;
            }
            if (__atomic_compare_exchange_n(&ix->slots[i], &slot, created + 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                __atomic_add_fetch(&ix->used, 1, __ATOMIC_RELAXED);
                maybe_grow(ix);
                return created;
            }
            /* Lost the race for this slot: look at what won it. */
        }
        if (slot && same_stack(slot - 1, hash, ips, depth, kind))
            return slot - 1; /* our created entry, if any, stays unused */
        if (ix->used > ix->mask) /* cannot happen while growth works; never spin */
            return created;
    }
}

_Static_assert(sizeof(struct mlk_counters) == 64 && offsetof(struct mlk_stack, counters) == 64 &&
                   sizeof(((struct mlk_stack *)0)->counters) / 64 == MLK_COUNTER_STRIPES,
               "a stack entry is cache lines: identity, then one per counter stripe");

/* This thread's counter stripe.  The first thread to count owns stripe 0 and
 * updates it with plain loads and stores -- a locked add costs more than the
 * rest of the bookkeeping of a free, and most programs that allocate a lot
 * do it from one thread.  The other threads take stripes 1 and 2 in turn and
 * add atomically: two workers (while the owner, say main, waits for them)
 * then still count on lines of their own.  (The reporter reads each counter
 * word whole either way.)  Ownership is not handed on when the owner exits:
 * the simple rule is the safe one. */
static __thread unsigned stripe_plus_one __attribute__((tls_model("initial-exec")));
static unsigned threads_counting;

static inline unsigned stripe_of_thread(void)
{
    unsigned s = stripe_plus_one;
    if (MLK_UNLIKELY(!s)) {
        unsigned nth = __atomic_fetch_add(&threads_counting, 1, __ATOMIC_RELAXED);
        s = nth == 0 ? 1 : 2 + (nth - 1) % (MLK_COUNTER_STRIPES - 1);
        stripe_plus_one = s;
    }
    return s;
}

/* Adds v to a counter of this thread's stripe. */
static inline void bump(unsigned stripe_plus_one_, uint64_t *counter, uint64_t v)
{
    if (stripe_plus_one_ == 1)
        __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
    else
        __atomic_add_fetch(counter, v, __ATOMIC_RELAXED);
}

void mlk_stack_count_alloc(uint32_t id, uint64_t bytes)
{
    unsigned s = stripe_of_thread();
    struct mlk_counters *c = &mlk_stacks()[id].counters[s - 1];
    bump(s, &c->alloc_count, 1);
    bump(s, &c->alloc_bytes, bytes);
}

void mlk_stack_account(uint32_t id, int64_t bytes, int64_t blocks)
{
    unsigned s = stripe_of_thread();
    struct mlk_counters *c = &mlk_stacks()[id].counters[s - 1];
    if (bytes)
        bump(s, (uint64_t *)&c->freed_bytes, (uint64_t)-bytes);
    if (blocks)
        bump(s, (uint64_t *)&c->freed_count, (uint64_t)-blocks);
}

void mlk_stacks_lock_for_fork(int acquire)
{
    if (acquire)
        mlk_lock(&grow_lock);
    else
        mlk_unlock(&grow_lock);
}
