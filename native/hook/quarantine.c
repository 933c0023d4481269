/* The quarantine (MEMLEAK_CONFIG quarantine=BYTES): freed blocks held back
 * from the allocator, oldest given to it first once more than BYTES are
 * held -- valgrind's and ASan's freed-blocks queue.  While a block is held,
 * nobody else can be handed its memory, so its trailer keeps saying "ours,
 * freed" (trailers.c), and a second free of it is known for a double free
 * however long after the first it comes -- with the first free's stack,
 * which the quarantine keeps beside it (misuse.c asks for it).
 *
 * What it costs, when on: a backtrace per free (the first free's stack),
 * a short lock per free, and up to BYTES of memory.  Off (the default),
 * one load and branch per free (hooks.h).  A double free of a held block
 * never reaches the allocator, whatever misuse= says: the allocator still
 * thinks the block live, and letting it free the block would make the
 * quarantine's own free later the second one. */
#define _GNU_SOURCE
#include "hooks.h"

#define SLOTS (1u << 16) /* blocks held at most, whatever their bytes */
#define EVICT_MAX 64     /* blocks given back per free at most (a big one pushes out many) */

struct held {
    void *p;
    uint64_t bytes;      /* its usable bytes */
    uint32_t free_stack; /* the stack that freed it (MLK_NO_STACK: none) */
};

uint64_t mlk_quarantine_cap;
static struct held *ring;
static uint32_t head, count;
static uint64_t held_bytes;
static mlk_lock_t lock;

void mlk_quarantine_start(uint64_t bytes)
{
    if (!bytes || mlk_quarantine_cap)
        return;
    ring = mlk_map_anon(SLOTS * sizeof *ring);
    if (!ring) {
        mlk_seg->quarantine_refused = bytes; /* every report says so, not only this line */
        mlk_warn("cannot map the quarantine's table; freed blocks go straight to the allocator", "", "");
        return;
    }
    mlk_quarantine_cap = bytes;
    mlk_fast_off_set(MLK_FAST_QUARANTINE, bytes != 0);
    mlk_seg->quarantine_cap = bytes;
}

void mlk_quarantine_put(void *p, uint64_t bytes)
{
    BEGIN_HOOK();
    uint32_t at = mlk_current_stack(MLK_KIND_FREE_SITE);
    void *evict[EVICT_MAX];
    int n = 0;
    mlk_lock(&lock);
    if (count == SLOTS) { /* full of small blocks: the oldest goes */
        evict[n++] = ring[head].p;
        held_bytes -= ring[head].bytes;
        head = (head + 1) % SLOTS;
        count--;
    }
    ring[(head + count) % SLOTS] = (struct held){p, bytes, at};
    count++;
    held_bytes += bytes;
    while (held_bytes > mlk_quarantine_cap && count && n < EVICT_MAX) {
        evict[n++] = ring[head].p;
        held_bytes -= ring[head].bytes;
        head = (head + 1) % SLOTS;
        count--;
    }
    if (mlk_seg) {
        __atomic_store_n(&mlk_seg->quarantine_held, held_bytes, __ATOMIC_RELAXED);
        __atomic_store_n(&mlk_seg->quarantine_blocks, count, __ATOMIC_RELAXED);
    }
    mlk_unlock(&lock);
    for (int i = 0; i < n; i++)
        mlk_real.free(evict[i]);
    END_HOOK();
}

int mlk_quarantine_holds(void *p, uint32_t *free_stack)
{
    int found = 0;
    mlk_lock(&lock);
    for (uint32_t i = 0; i < count && !found; i++) { /* a double free is rare: a plain search */
        const struct held *h = &ring[(head + i) % SLOTS];
        if (h->p == p) {
            *free_stack = h->free_stack;
            found = 1;
        }
    }
    mlk_unlock(&lock);
    return found;
}

void mlk_quarantine_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&lock, acquire);
}
