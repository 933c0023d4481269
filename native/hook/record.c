/* What the allocator hooks call: capture a backtrace, intern it, and keep
 * the per-block and per-stack books.  Runs with the thread's recursion guard
 * set, so anything called from here passes straight through the hooks. */
#define _GNU_SOURCE
#include <math.h>
#include <sys/mman.h>

#include "mlk.h"
#include "usdt.h"
#include "trailers.h"

static int warned_stacks, warned_blocks;
#define UNKNOWN_FREES_WARN 1000

/* The stack walked and interned (a walk not found whole with its id). */
static __attribute__((noinline)) uint32_t stack_walked_fully(int kind, uint32_t epoch)
{
    uint64_t ips[MLK_MAX_DEPTH];
    int truncated = 0;
    uint32_t id;
    int depth = mlk_backtrace(ips, (int)mlk_seg->depth, &truncated, kind, epoch, &id);
    /* (A walk cut at the depth is not counted here: its stack says so,
     * MLK_STACK_CUT, and the reporter sums those stacks' allocations -- a
     * locked add on the header line every allocation reads was the price
     * of counting here, per cut walk.) */
    if (id == MLK_NO_STACK) {
        id = mlk_stack_intern(ips, depth, kind, epoch, truncated);
        if (id != MLK_NO_STACK)
            mlk_walk_remember_stack(kind, epoch, id);
    }
    if (MLK_UNLIKELY(id == MLK_NO_STACK)) {
        __atomic_add_fetch(&mlk_seg->dropped_stacks, 1, __ATOMIC_RELAXED);
        if (!__atomic_exchange_n(&warned_stacks, 1, __ATOMIC_RELAXED))
            mlk_warn("the stack table is full; further new call stacks are not recorded ",
                     "(the reports count them as dropped)",
                     mlk_segment_as_limit ? "; it was made smaller to fit the address-space limit "
                                            "(ulimit -v): raise that limit for a larger one" : "");
    }
    return id;
}

/* The stack of a walk that the quick look (mlk_walk_known) did not find.
 * (The older walks' look before the full walk's 512-byte frame: cc1, which
 * seldom wants it, paid 0.1% for that frame set up around it.) */
static uint32_t stack_walked(int kind, uint32_t epoch)
{
    if (mlk_walk_quick) {
        uint32_t id = mlk_walk_known_older(kind, epoch);
        if (id != MLK_NO_STACK)
            return id;
    }
    return stack_walked_fully(kind, epoch);
}

static inline uint32_t current_stack(int kind, int looked)
{
    /* A walk that matched a remembered one from its first frame comes with
     * the id interned for that one: same frames, kind and unloads. */
    uint32_t epoch = __atomic_load_n(&mlk_unload_epoch, __ATOMIC_ACQUIRE);
    uint32_t id = MLK_NO_STACK;
    if (mlk_walk_quick && !looked)
        id = mlk_walk_known(kind, epoch);
    if (id == MLK_NO_STACK)
        id = stack_walked(kind, epoch);
    if (MLK_UNLIKELY(mlk_py_reading) && id != MLK_NO_STACK)
        id = mlk_py_stack(id, kind, epoch); /* (the native walk's memo keeps the native stack's id) */
    if (MLK_UNLIKELY(mlk_lazy_spawn_at) && id != MLK_NO_STACK && id >= mlk_lazy_spawn_at)
        mlk_lazy_spawn();
    return id;
}

/* For the program's own blocks (api/custom.c): its stack here. */
uint32_t mlk_current_stack(int kind) { return current_stack(kind, 0); }

static void dropped_block(void)
{
    __atomic_add_fetch(&mlk_seg->dropped_blocks, 1, __ATOMIC_RELAXED);
    if (!__atomic_exchange_n(&warned_blocks, 1, __ATOMIC_RELAXED))
        mlk_warn("cannot track some live blocks (out of memory for the address table, or a ",
                 "block of 1 TiB or more); the reports count the blocks not tracked", "");
}

/* The bytes a sampled block of `size` stands for (usdt.h). */
static uint64_t sample_weight(uint64_t size)
{
    double kept = -expm1(-(double)size / (double)mlk_sample_bytes); /* the chance it was sampled */
    return kept > 0 ? (uint64_t)((double)size / kept + 0.5) : size;
}

void mlk_record_alloc(void *p, size_t size, int kind)
{
    if (!p)
        return;
    if (MLK_UNLIKELY(mlk_thread_not_recording))
        return; /* memleak_recording(0): not recorded (docs/api.md: its free is an unknown one) */
    /* The block's table line is most likely a cache miss (big heaps: a
     * random line of a big table); the backtrace takes long enough to hide it. */
    mlk_addr_prefetch((uint64_t)p);
    uint32_t id = current_stack(kind, 0);
    if (id == MLK_NO_STACK)
        return;
    if (mlk_addr_insert((uint64_t)p, id, size, 1)) {
        MLK_EVENT(MLK_EVENT_ALLOC, p, size, id);
        if (mlk_sample_bytes)
            MLK_PROBE_ALLOC(p, size, sample_weight(size));
    } else {
        dropped_block();
    }
}

void mlk_record_trailed(void *p, size_t usable, size_t size, int kind, uint64_t tag, int looked)
{
    /* The trailer is written even without a stack: it is what tells the
     * free that the block is ours. */
    if (MLK_UNLIKELY(mlk_thread_not_recording)) {
        /* memleak_recording(0), __lsan_disable: not counted, never lost,
         * its pointers followed -- the scan's treatment of our own blocks. */
        mlk_trailer_write_uncounted(p, usable, size, 1);
        return;
    }
    uint32_t id = current_stack(kind, looked);
    if (!mlk_trailer_write(p, usable, size, id, tag) && id != MLK_NO_STACK)
        dropped_block(); /* a size or stack id beyond what a trailer holds */
}

int mlk_record_take(void *p, uint32_t *stack, uint64_t *size)
{
    if (mlk_addr_remove((uint64_t)p, stack, size)) {
        MLK_EVENT(MLK_EVENT_FREE, p, *size, *stack);
        if (mlk_sample_bytes)
            MLK_PROBE_FREE(p);
        if (MLK_UNLIKELY(mlk_ignored_count))
            mlk_ignored_forget((uint64_t)p, (uint64_t)p + (*size ? *size : 1));
        return 1;
    }
    if (mlk_collecting && !mlk_sample_bytes) { /* when sampling, most blocks are unrecorded */
        /* A few are normal (the loader allocates before we start); many mean
         * an allocator we do not see (RTLD_DEEPBIND, a static malloc): say so once. */
        /* Attached, they are the program's blocks from before: expected. */
        if (__atomic_add_fetch(&mlk_seg->unknown_frees, 1, __ATOMIC_RELAXED) == UNKNOWN_FREES_WARN &&
            !mlk_attach_mode)
            mlk_warn("1000 frees of blocks it never saw allocated: made where it does not look -- an ",
                     "allocator's entry points it does not route (the blind line names those it finds), a "
                     "malloc bound past it (RTLD_DEEPBIND, a static one), or while memleak_recording(0); ",
                     "reports count them as unknown-frees");
    }
    return 0;
}

int mlk_record_free(void *p)
{
    uint32_t stack;
    uint64_t size;
    return mlk_record_take(p, &stack, &size);
}

void mlk_record_put_back(void *p, uint32_t stack, uint64_t size)
{
    if (mlk_addr_insert((uint64_t)p, stack, size, 0)) {
        MLK_EVENT(MLK_EVENT_ALLOC, p, size, stack);
        if (mlk_sample_bytes) /* (its take said free) */
            MLK_PROBE_ALLOC(p, size, sample_weight(size));
    } else {
        dropped_block();
    }
}

void mlk_record_mmap(void *p, size_t len, int kind)
{
    uint32_t id = current_stack(kind, 0);
    if (id != MLK_NO_STACK && !mlk_region_insert((uint64_t)p, len, id))
        dropped_block();
}

void mlk_record_munmap(void *p, size_t len) { mlk_region_remove((uint64_t)p, len); }

void mlk_record_reserve(void *p, size_t len) { mlk_region_reserve((uint64_t)p, len); }

void mlk_record_mprotect(void *p, size_t len, int prot)
{
    if (prot == PROT_NONE) {
        mlk_region_close((uint64_t)p, len);
        return;
    }
    uint64_t opened = mlk_region_reserved((uint64_t)p, len);
    if (!opened)
        return; /* the common case: not a reservation of ours (W^X flips, RELRO) */
    uint32_t id = MLK_NO_STACK;
    if (mlk_collecting && mlk_sample(opened))
        id = current_stack(MLK_KIND_MMAP, 0);
    if (!mlk_region_open((uint64_t)p, len, id))
        dropped_block();
}
