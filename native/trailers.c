/* Which stack allocated each live block, kept in the block itself: every
 * block allocated while recording is 16 bytes longer than asked for, and
 * its last 16 usable bytes (the real allocator's malloc_usable_size) hold a
 * trailer: the stack id and size, and a check word that says "ours".
 *
 * Why at the end and not in front: the program keeps the real allocator's
 * pointer, so a block that reaches libc's free past us (a library loaded
 * with RTLD_DEEPBIND binds straight to libc) is still a valid block -- it is
 * only not subtracted -- where a header in front would make libc free a
 * pointer it never returned.  And the trailer of any block, ours or not, lies
 * inside that block, so reading it to ask "ours?" can never fault.
 *
 * Why not the side table (addrs.c), which sampling mode and blocks from
 * before collection still use: a free then costs a lookup in a table that
 * outgrows every cache (a random line per block: jq's 3.2M live blocks made
 * the table a fifth of the traced run), while the trailer shares its cache
 * line with the next chunk's header, which the real malloc and free touch
 * anyway.  What a table could do and this cannot is list the live blocks;
 * `track=table` keeps the table for everything.
 *
 * Stack counters change under a lock, as in addrs.c, so that fork() can stop
 * them all: here a lock per thread (from a small pool), which no other
 * thread wants as long as there are fewer threads than locks. */
#define _GNU_SOURCE
#include <sys/auxv.h>
#include <time.h>

#include "mlk.h"

#define TRAILER_STACK_BITS 24
#define UNCOUNTED ((1u << TRAILER_STACK_BITS) - 1)
#define MAX_COUNTED_SIZE (1ull << (64 - TRAILER_STACK_BITS))
#define THREAD_LOCKS 64

uint64_t mlk_trailer_key;

static struct {
    mlk_lock_t lock;
} __attribute__((aligned(64))) thread_locks[THREAD_LOCKS];

static __thread unsigned lock_plus_one __attribute__((tls_model("initial-exec")));
static unsigned threads_seen;

static mlk_lock_t *lock_of_thread(void)
{
    unsigned l = lock_plus_one;
    if (MLK_UNLIKELY(!l))
        lock_plus_one = l = 1 + __atomic_fetch_add(&threads_seen, 1, __ATOMIC_RELAXED) % THREAD_LOCKS;
    return &thread_locks[l - 1].lock;
}

void mlk_trailers_enable(void)
{
    if (__atomic_load_n(&mlk_trailer_key, __ATOMIC_RELAXED))
        return;
    /* Random per process (the kernel's AT_RANDOM bytes, mixed with the
     * clock), so that no data the program stores can look like a trailer
     * except by a 2^-64 chance; forked children keep it with their blocks. */
    uint64_t key = mlk_now_ns(CLOCK_MONOTONIC) * 0x9e3779b97f4a7c15ull;
    const uint64_t *r = (const uint64_t *)getauxval(AT_RANDOM);
    if (r)
        key ^= r[1];
    __atomic_store_n(&mlk_trailer_key, key | 1, __ATOMIC_RELEASE);
}

int mlk_trailer_write(void *p, size_t usable, uint64_t size, uint32_t stack)
{
    struct mlk_trailer *t = mlk_trailer_at(p, usable);
    int counted = stack < UNCOUNTED && size < MAX_COUNTED_SIZE;
    t->meta = counted ? size << TRAILER_STACK_BITS | stack : UNCOUNTED;
    t->check = (uint64_t)p ^ mlk_trailer_key;
    if (counted) {
        mlk_lock_t *l = lock_of_thread();
        mlk_lock(l);
        mlk_stack_count_alloc(stack, size);
        mlk_unlock(l);
    }
    return counted;
}

uint64_t mlk_trailer_take(struct mlk_trailer *t)
{
    uint64_t meta = t->meta;
    t->check = 0; /* the memory may become anyone's block, at the same address */
    return meta;
}

void mlk_trailer_restore(void *p, struct mlk_trailer *t)
{
    t->check = (uint64_t)p ^ mlk_trailer_key;
}

void mlk_trailer_uncount(uint64_t meta)
{
    uint32_t stack = (uint32_t)(meta & UNCOUNTED);
    /* Not ever_collected: a forked child that could not get a segment of
     * its own, which must not touch the parent's. */
    if (stack == UNCOUNTED || MLK_UNLIKELY(!mlk_ever_collected))
        return;
    int64_t size = (int64_t)(meta >> TRAILER_STACK_BITS);
    /* A free inside our own code can only be a signal handler's that
     * interrupted a hook of this thread -- which may hold this thread's
     * lock.  It is counted without the lock (only a fork at that very
     * moment could then copy a half-updated counter). */
    if (mlk_in_hook) {
        mlk_stack_account(stack, -size, -1);
        return;
    }
    /* The guard, so that a signal handler that allocates meanwhile passes
     * straight through instead of waiting for this thread's own lock. */
    mlk_in_hook = 1;
    mlk_lock_t *l = lock_of_thread();
    mlk_lock(l);
    mlk_stack_account(stack, -size, -1);
    mlk_unlock(l);
    mlk_in_hook = 0;
}

void mlk_trailers_lock_for_fork(int acquire)
{
    for (unsigned i = 0; i < THREAD_LOCKS; i++) {
        if (acquire)
            mlk_lock(&thread_locks[i].lock);
        else
            mlk_unlock(&thread_locks[i].lock);
    }
}
