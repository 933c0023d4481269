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
 * fork() must copy counters no thread is halfway through changing (addrs.c
 * holds a shard lock for that).  A lock per event would be a locked
 * instruction per malloc and per free -- 13% of libmtrace's time on sqlite3
 * even uncontended -- for the sake of an event as rare as fork.  So each
 * thread raises a busy flag of its own with a plain store and then checks a
 * global `forking` word; fork_prepare sets `forking`, runs
 * membarrier(PRIVATE_EXPEDITED) -- a full barrier on every CPU running one
 * of our threads, so each thread either has its flag visible or will see
 * `forking` -- and waits for the flags to drop.  The flag is a bit of the
 * thread's recursion guard, MLK_IN_HOOK_BUSY (mlk.h), which the fast ways
 * raise anyway: one store and one load an event where a flag of its own
 * was a load of its address and two stores more (churn: -5 est. cycles a
 * malloc/free pair); each thread's slot holds the guard's address for fork
 * to read.  Without membarrier (old kernels, seccomp), or past
 * FLAG_SLOTS threads at once, a thread uses a lock from a small pool
 * instead; fork takes those too. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <time.h>

#include "control.h"
#include "trailers.h"

#define TRAILER_STACK_BITS MLK_TRAILER_STACK_BITS /* the format: trailer_format.h */
#define UNCOUNTED MLK_TRAILER_UNCOUNTED
#define MAX_COUNTED_SIZE MLK_TRAILED_SIZE_MAX
#define THREAD_LOCKS 64
#define FLAG_SLOTS 512

uint64_t mlk_trailer_key;

uint32_t mlk_fast_off = MLK_FAST_NO_TRAILERS | MLK_FAST_NOT_GLIBC | MLK_FAST_NOT_COLLECTED | MLK_FAST_NOT_READY;

void mlk_fast_off_set(uint32_t reason, int holds)
{
    if (holds)
        __atomic_or_fetch(&mlk_fast_off, reason, __ATOMIC_SEQ_CST);
    else
        __atomic_and_fetch(&mlk_fast_off, ~reason, __ATOMIC_SEQ_CST);
}

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

/* A slot per thread that may raise MLK_IN_HOOK_BUSY: the address of its
 * guard (thread-local), for fork to read; NULL, a free slot.  The guard
 * lives as long as its thread; slots_lock keeps a thread from leaving
 * (flag_release) while fork reads its guard. */
static int *guards[FLAG_SLOTS];
static mlk_lock_t slots_lock;
#define flag_plus_one (mlk_hot.flag_plus_one) /* (mlk.h's hot words) > 0: its slot; < 0: use a lock; 0: none yet */

static void set_flag(int f)
{
    flag_plus_one = f;
    mlk_thread_fast_set(MLK_THREAD_FLAG, f > 0);
}
static uint32_t forking;
static int fenced; /* membarrier is registered: flags may be used */
static pthread_key_t flag_key;

#define MEMBARRIER_PRIVATE_EXPEDITED 8
#define MEMBARRIER_REGISTER_PRIVATE_EXPEDITED 16

static int register_fence(void)
{
    return mlk_syscall6(SYS_membarrier, MEMBARRIER_REGISTER_PRIVATE_EXPEDITED, 0, 0, 0, 0, 0) == 0;
}

static void flag_release(void *unused)
{
    (void)unused;
    int f = flag_plus_one;
    set_flag(-1); /* frees by later destructors of this thread take a lock */
    if (f > 0) {
        mlk_lock(&slots_lock); /* (not while fork reads the guard) */
        __atomic_store_n(&guards[f - 1], NULL, __ATOMIC_RELEASE);
        mlk_unlock(&slots_lock);
    }
}

static __attribute__((noinline)) int claim_flag(void)
{
    if (__atomic_load_n(&fenced, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < FLAG_SLOTS; i++) {
            int *free_ = NULL;
            /* (Its guard's address is in the slot before its first busy bit.) */
            if (!__atomic_load_n(&guards[i], __ATOMIC_RELAXED) &&
                __atomic_compare_exchange_n(&guards[i], &free_, &mlk_in_hook, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                set_flag(i + 1);
                pthread_setspecific(flag_key, (void *)1); /* flag_release at thread exit */
                return i + 1;
            }
        }
    }
    set_flag(-1);
    return -1;
}

/* Sets the thread's guard to `busy` (MLK_IN_HOOK_BUSY with its bits):
 * 1, or 0 with the guard back at `was` when a fork is under way, which must
 * not split a counter update.  (A thread with a slot: flag_plus_one > 0.) */
static inline int raise_busy(int busy, int was)
{
    __atomic_store_n(&mlk_in_hook, busy, __ATOMIC_RELAXED);
    /* Store, then load: no fence here; fork's membarrier is one. */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (MLK_LIKELY(!__atomic_load_n(&forking, __ATOMIC_RELAXED)))
        return 1;
    __atomic_store_n(&mlk_in_hook, was, __ATOMIC_RELEASE);
    return 0;
}

/* An owner's counter update outside a hook, on the fast ways: the guard up
 * and busy at once (a signal handler's allocation or free meanwhile passes
 * by, and leaves it alone); 0, with the guard down again, when a fork is
 * under way (the whole way then waits for it). */
static inline int owner_update_begin(void) { return raise_busy(MLK_IN_HOOK_BUSY, 0); }

static inline void owner_update_end(void) { __atomic_store_n(&mlk_in_hook, 0, __ATOMIC_RELEASE); }

/* Begins a counter update that fork must not split; returns the guard's
 * value to put back, or -1 when it took its lock instead. */
static inline int update_begin(void)
{
    int f = flag_plus_one;
    if (MLK_UNLIKELY(!f))
        f = claim_flag();
    if (MLK_LIKELY(f > 0)) {
        int was = mlk_in_hook;
        for (;;) {
            if (MLK_LIKELY(raise_busy(was | MLK_IN_HOOK_BUSY, was)))
                return was;
            while (__atomic_load_n(&forking, __ATOMIC_ACQUIRE))
                mlk_syscall6(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
        }
    }
    mlk_lock(lock_of_thread());
    return -1;
}

static inline void update_end(int was)
{
    if (MLK_LIKELY(was >= 0))
        __atomic_store_n(&mlk_in_hook, was, __ATOMIC_RELEASE);
    else
        mlk_unlock(lock_of_thread());
}

/* Random per process (the kernel's AT_RANDOM bytes, mixed with the
 * clock), so that no data the program stores can look like a trailer
 * except by a 2^-64 chance; forked children keep it with their blocks. */
static void make_key(void)
{
    if (__atomic_load_n(&mlk_trailer_key, __ATOMIC_RELAXED))
        return;
    uint64_t key = mlk_now_ns(CLOCK_MONOTONIC) * 0x9e3779b97f4a7c15ull;
    const uint64_t *r = (const uint64_t *)getauxval(AT_RANDOM);
    if (r)
        key ^= r[1];
    __atomic_store_n(&mlk_trailer_key, key | 1, __ATOMIC_RELEASE);
    mlk_fast_off_set(MLK_FAST_NO_TRAILERS, 0);
}

static int collecting_with_trailers;

void mlk_trailers_enable(void)
{
    if (collecting_with_trailers)
        return;
    if (pthread_key_create(&flag_key, flag_release) == 0 && register_fence())
        __atomic_store_n(&fenced, 1, __ATOMIC_RELEASE);
    make_key();
    collecting_with_trailers = 1;
}

int mlk_trailers_in_use(void) { return collecting_with_trailers; }

/* Blocks allocated before libmtrace's constructor runs -- libstdc++'s
 * emergency exception pool, a library's own constructor's tables, an
 * early setenv -- cannot be counted for a stack (there is no segment
 * yet), but the reachability scan must see them as blocks: one of them
 * may hold the only reference to a block made later.  So, when tracing
 * will collect from load with trailers, they get a trailer that says
 * "ours, not counted" from the very first allocation on.  Decided at the
 * first hook call, from the environment as it is then (the constructor
 * stops it if the configuration turns out otherwise); ignored in setuid
 * programs, as the configuration is. */
int mlk_early_trailers;

void mlk_trailers_decide_early(int allocator_has_usable_size)
{
    if (!allocator_has_usable_size || getauxval(AT_SECURE))
        return;
    if (!mlk_config_collects_early_with_trailers(getenv("MEMLEAK_CONFIG")))
        return;
    make_key();
    mlk_early_trailers = 1;
}

/* Block p's trailer t says "ours": its meta word (trailer_format.h). */
static inline void trailer_set(void *p, struct mlk_trailer *t, uint64_t meta)
{
    t->meta = meta;
    t->check = (uint64_t)p ^ mlk_trailer_key;
}

static inline uint64_t counted_meta(uint64_t size, uint64_t tag, uint32_t stack)
{
    return size << TRAILER_STACK_BITS | tag | stack;
}

/* "Ours, freed" instead of "ours": a second free of it says so (misuse.c). */
static inline void trailer_mark_freed(struct mlk_trailer *t) { t->check ^= MLK_TRAILER_FREED; }

void mlk_trailer_write_uncounted(void *p, size_t usable, size_t size, int ours)
{
    struct mlk_trailer *t = mlk_trailer_at(p, usable);
    /* A free never reads an uncounted trailer's other bits; the scan does:
     * MLK_TRAILER_OURS_META, a block of libmtrace's own (made inside a hook:
     * the environment it sets for descendants), which the scan follows but
     * does not count as the program's; else the size asked for, as valgrind
     * counts it. */
    trailer_set(p, t,
                ours ? MLK_TRAILER_OURS_META
                : size <= MLK_TRAILER_SIZE_MASK ? MLK_TRAILER_SIZED | (uint64_t)size << TRAILER_STACK_BITS | UNCOUNTED
                                                 : UNCOUNTED);
}

_Static_assert(MLK_STACKS_CAP - 1 <= MLK_TRAILER_ID_MASK, "a stack id leaves the family's bits alone");

/* Slack: what the allocator reserved for a block beyond its size.  The
 * block's own share is its usable size less the trailer -- what the
 * program would have had bare, since glibc's chunk sizes step by 16 -- but
 * for the smallest blocks: bare, a block of 1 to 8 bytes still takes
 * glibc's smallest chunk (24 usable bytes), where with its trailer it fits
 * in that chunk.  So a block's reserved bytes are raised to the
 * allocator's smallest (slack_floor: set for glibc, 0 elsewhere). */
uint32_t mlk_slack_floor;

/* glibc serves a large block (128 KiB and more by default) by a mapping of
 * its own, of whole pages, whose usable size is the mapping less 16 bytes:
 * there the trailer does not step the size up by 16 as in the heap -- it
 * fits in the last page's rounding -- so the block's bare share is what
 * glibc would have mapped for it alone (its slack was 16 bytes a block
 * short).  Such a usable size is the only kind whose 16 more is a whole
 * number of pages (a heap chunk's usable size is 8 short of a multiple of
 * 16).  x86-64: glibc's pages are 4 KiB. */
static inline uint64_t mapped_slack(uint64_t reserved, uint64_t size)
{
    uint64_t usable = reserved + MLK_TRAILER_SIZE;
    if (!mlk_slack_floor || ((usable + 16) & 4095) != 0)
        return reserved - size;
    uint64_t chunk = (size + 8 + 15) & ~(uint64_t)15; /* glibc's request2size */
    uint64_t bare = ((chunk + 8 + 4095) & ~(uint64_t)4095) - 16;
    return bare - size;
}

static inline uint64_t slack_of(uint64_t reserved, uint64_t size)
{
    if (MLK_UNLIKELY(reserved >= 128 * 1024 - 64))
        return mapped_slack(reserved, size);
    uint64_t floor = mlk_slack_floor;
    return (reserved > floor ? reserved : floor) - size;
}

int mlk_trailer_write(void *p, size_t usable, uint64_t size, uint32_t stack, uint64_t tag)
{
    struct mlk_trailer *t = mlk_trailer_at(p, usable);
    int counted = stack < UNCOUNTED && size < MAX_COUNTED_SIZE;
    trailer_set(p, t, counted ? counted_meta(size, tag, stack) : UNCOUNTED);
    if (counted) {
        int was = update_begin();
        mlk_stack_count_trailed(stack, size, slack_of(usable - MLK_TRAILER_SIZE, size));
        update_end(was);
        MLK_EVENT_AT_REST(MLK_EVENT_ALLOC, p, size, stack);
    }
    return counted;
}

uint64_t mlk_trailer_take(struct mlk_trailer *t)
{
    uint64_t meta = t->meta;
    if (MLK_UNLIKELY(mlk_ignored_count)) /* the block ends: pointers into it are no longer ignored */
        mlk_ignored_forget(t->check ^ mlk_trailer_key, (uint64_t)t + MLK_TRAILER_SIZE);
    /* No longer "ours" (the memory may become anyone's block, at the same
     * address). */
    trailer_mark_freed(t);
    return meta;
}

void mlk_trailer_restore(void *p, struct mlk_trailer *t)
{
    trailer_set(p, t, t->meta);
}

/* mlk_trailer_uncount's every case (see there). */
static __attribute__((noinline)) void uncount_slow(void *p, uint64_t meta, uint64_t reserved)
{
    uint32_t stack = mlk_trailer_stack_of(meta);
    /* Not ever_collected: a forked child that could not get a segment of
     * its own, which must not touch the parent's. */
    if (stack == UNCOUNTED || MLK_UNLIKELY(!mlk_ever_collected))
        return;
    uint64_t size = mlk_trailer_size_of(meta);
    uint64_t slack = slack_of(reserved, size);
    /* A free inside our own code can only be a signal handler's that
     * interrupted a hook of this thread -- which may hold this thread's
     * lock.  It is counted without the lock (only a fork at that very
     * moment could then copy a half-updated counter). */
    if (mlk_in_hook) {
        mlk_stack_uncount_trailed(stack, size, slack);
        MLK_EVENT(MLK_EVENT_FREE, p, size, stack);
        return;
    }
    /* The guard, so that a signal handler that allocates meanwhile passes
     * straight through instead of waiting for this thread's own lock. */
    mlk_in_hook = 1;
    int was = update_begin();
    mlk_stack_uncount_trailed(stack, size, slack);
    update_end(was);
    MLK_EVENT(MLK_EVENT_FREE, p, size, stack);
    mlk_in_hook = 0;
}

void mlk_trailer_uncount(void *p, uint64_t meta, uint64_t reserved)
{
    /* The common case on its own, with no call on its way -- so that it
     * saves no registers for one (14 instructions a free): a counted block,
     * no event log, not inside a hook, the thread's fork slot taken and a
     * counter stripe of its own, no fork under way.  Anything else is
     * uncount_slow's, the same steps with every case. */
    uint32_t stack = mlk_trailer_stack_of(meta);
    if (MLK_UNLIKELY(stack == UNCOUNTED || !mlk_ever_collected || mlk_in_hook || flag_plus_one <= 0 ||
                     (mlk_attention & MLK_ATTEND_EVENTS) ||
                     (!mlk_stack_owns_stripe() && !mlk_stack_on_shared_stripe()))) {
        uncount_slow(p, meta, reserved);
        return;
    }
    if (MLK_UNLIKELY(!owner_update_begin())) {
        uncount_slow(p, meta, reserved); /* (it waits for the fork) */
        return;
    }
    uint64_t size = mlk_trailer_size_of(meta);
    mlk_stack_uncount_trailed(stack, size, slack_of(reserved, size)); /* (the shared stripe's way too) */
    owner_update_end();
}

/* The free's fast way: a block of ours in glibc's heap, counted, freed by
 * its own family (and size), with no event log, quarantine or ignored
 * ranges, outside a hook, the thread's fork slot and a counter stripe of
 * its own, no fork under way.  Every test is made before anything is
 * written, so that a "no" leaves the whole way (free_trailed) a block
 * untouched; and nothing here is a call, so that free and delete -- which
 * inline it and then jump to the real free -- save no registers at all
 * (their prologue and epilogue, the call to mlk_trailer_uncount and its
 * own were ~30 instructions of a free's ~135: churn).  p: not NULL.  Before
 * the real functions are resolved the word says no (MLK_FAST_NOT_READY);
 * a bootstrap block says no by itself: its word before it is the size
 * mlk_boot_alloc wrote, so the trailer looked for lies inside the block
 * (or the size is no chunk's), and it never holds our check word --
 * whose caller, the whole way, is where bootstrap blocks are told. */
/* (shared: the same for a thread on the shared stripe, as alloc_fast_as.) */
static __attribute__((always_inline)) inline int free_fast_as(void *p, uint32_t family, size_t given, int shared)
{
    /* (The owners': outside a hook, with a fork slot and a stripe of its
     * own, in one word, free_closed; the shared stripe's: outside a hook,
     * its slot asked below.) */
    uint32_t off = mlk_fast_off & (MLK_FAST_NO_TRAILERS | MLK_FAST_NOT_GLIBC | MLK_FAST_NOT_COLLECTED |
                                   MLK_FAST_IGNORED | MLK_FAST_QUARANTINE | MLK_FAST_NOT_READY | MLK_FAST_EVENTS |
                                   MLK_FAST_GUARDED);
    if (MLK_UNLIKELY(shared ? off || mlk_in_hook : (off | mlk_hot.free_closed) != 0))
        return 0;
    uint64_t key = mlk_trailer_key;
    size_t usable = mlk_glibc_usable(p); /* (0 for what is not a chunk of glibc's) */
    if (MLK_UNLIKELY(usable < MLK_TRAILER_SIZE))
        return 0;
    struct mlk_trailer *t = mlk_trailer_at(p, usable);
    uint64_t meta = t->meta;
    /* (An uncounted block's family reads 7, which is no family: the
     * family's test turns it away, and past it the stack is a counted
     * one's -- no test of its own.) */
    _Static_assert(MLK_FAMILY_NEW_ARRAY_ALIGNED < 7, "no family reads as an uncounted block's");
    uint32_t stack = (uint32_t)meta & MLK_TRAILER_ID_MASK;
    if (MLK_UNLIKELY(t->check != ((uint64_t)p ^ key) || mlk_trailer_family_of(meta) != family ||
                     (given != MLK_NO_SIZE && given != mlk_trailer_size_of(meta)) ||
                     (shared && !(mlk_hot.fast_alloc & MLK_THREAD_FLAG))))
        return 0;
    if (MLK_UNLIKELY(shared && !mlk_stack_on_shared_stripe()) || MLK_UNLIKELY(!owner_update_begin()))
        return 0;
    struct mlk_counters *c = shared ? NULL : mlk_stack_owned_counters_known(stack);
    trailer_mark_freed(t);
    uint64_t size = mlk_trailer_size_of(meta);
    uint64_t slack = slack_of(usable - MLK_TRAILER_SIZE, size);
    if (shared)
        mlk_stack_uncount_unowned(stack, size, slack);
    else
        mlk_stack_uncount_owned(c, size, slack);
    owner_update_end();
    return 1;
}

__attribute__((always_inline)) inline int mlk_trailer_free_fast(void *p, uint32_t family, size_t given)
{
    return free_fast_as(p, family, given, 0);
}

__attribute__((noinline)) int mlk_trailer_free_shared(void *p, uint32_t family, size_t given)
{
    return free_fast_as(p, family, given, 1);
}

/* The allocation's fast way, as the free's above: a thread whose walks the
 * quick look answers (mlk_walk_quick), glibc's heap, nothing to attend to,
 * the thread's fork slot and a counter stripe of its own -- tested first,
 * before the walk, so that a thread that seldom gets here (cc1's walks are
 * paths) pays a few tests -- then the quick look itself, inlined, from the
 * hook frame's state passed in (`at`).  No call, so no errno to keep and no
 * register saves: mlk_record_trailed's, mlk_walk_known's and their calls,
 * malloc_usable_size's (the new chunk's header read instead), the walk start's
 * stores and loads through thread-local storage were ~60 instructions of
 * the ~290 an allocation cost (churn).  A "no" -- the walk not found whole,
 * a fork under way -- writes nothing but the quick look's window counts;
 * -1 says the quick look was made, and missed: the whole way then does not
 * make it again; MLK_FAST_SHARED_NEXT, that the thread owns no counter
 * stripe (and nothing else said no); MLK_FAST_RESTING, that the thread
 * rests from whole walks (ditto). */
/* (way: the owners' (ALLOC_OWNED); the same for a thread on the shared
 * stripe, which counts with mlk_stack_count_unowned (ALLOC_SHARED); or for
 * a thread resting from whole walks, its stack by its remembered paths, on
 * either stripe (ALLOC_BY_PATH) -- a constant, each caller its own copy.) */
enum alloc_way { ALLOC_OWNED, ALLOC_SHARED, ALLOC_BY_PATH };

/* What rules out the allocation's fast ways whatever the thread's walks
 * and stripe: not glibc's heap, a reporter to start, the thread not
 * recording, something to attend to, no fork slot of its own. */
static inline int fast_ways_closed(void)
{
    return (mlk_fast_off & (MLK_FAST_NOT_GLIBC | MLK_FAST_LAZY_SPAWN | MLK_FAST_PYTHON)) || mlk_thread_not_recording || mlk_attention ||
           flag_plus_one <= 0;
}

/* Why the owners' fast way is not for this allocation: 0, the whole way;
 * MLK_FAST_RESTING, or MLK_FAST_SHARED_NEXT, where that alone said no. */
static __attribute__((noinline)) int owners_way_refused(void)
{
    if (fast_ways_closed())
        return 0;
    if (!mlk_walk_quick)
        return MLK_FAST_RESTING; /* (the whole way tries mlk_trailer_alloc_by_path) */
    if (!mlk_stack_owns_stripe())
        return MLK_FAST_SHARED_NEXT; /* (only that: the whole way tries mlk_trailer_alloc_shared) */
    /* The word lags: a bit lost to a signal handler's write between the
     * load and the store of a writer outside our hooks (the LSan API's).
     * Made whole again here; this allocation takes the whole way. */
    mlk_thread_fast_word(MLK_THREAD_FAST);
    return 0;
}
static __attribute__((always_inline)) inline int alloc_fast_as(void *p, uint64_t size, int kind, uint64_t tag,
                                                               struct mlk_walk_start at, enum alloc_way way)
{
    /* (No test of the size: below MAX_COUNTED_SIZE, the hooks' TRAILABLE.
     * The owners': the thread's conditions in one word (MLK_THREAD_FAST),
     * and why not, out of the way.  By path, none of these: that way is
     * tried only where the owners' way said MLK_FAST_RESTING, after they
     * held, and nothing between changes them; that the thread rests is
     * asked by mlk_walk_known_path, of the memo itself, which
     * mlk_walk_quick mirrors.) */
    if (way == ALLOC_OWNED) {
        unsigned closed = (mlk_fast_off & (MLK_FAST_NOT_GLIBC | MLK_FAST_LAZY_SPAWN | MLK_FAST_PYTHON)) | mlk_attention;
        if (MLK_UNLIKELY(mlk_hot.fast_alloc != MLK_THREAD_FAST || closed)) {
            /* A thread that owns its stripe and rests from whole walks
             * (cc1's, nearly every allocation) is told so here, without
             * owners_way_refused's call: the word's other bits say what
             * fast_ways_closed would (a fork slot of its own, recording),
             * and a bit lags only towards "no". */
            if (mlk_hot.fast_alloc == (MLK_THREAD_FAST & ~MLK_THREAD_QUICK) && !closed)
                return MLK_FAST_RESTING;
            return owners_way_refused();
        }
    } else if (way == ALLOC_SHARED) {
        if (MLK_UNLIKELY(fast_ways_closed() || !mlk_walk_quick))
            return 0;
    }
    /* The stripe it counts on (the owners': theirs, by the test above). */
    int shared = way == ALLOC_SHARED || (way == ALLOC_BY_PATH && !mlk_stack_owns_stripe());
    if (shared && !mlk_stack_on_shared_stripe())
        return 0;
    /* The guard up and busy from here, the look included (as BEGIN_HOOK:
     * a signal handler's allocation meanwhile is not recorded; the look
     * takes no lock and makes no call that could wait for fork). */
    if (MLK_UNLIKELY(!owner_update_begin()))
        return 0;
    uint32_t epoch = __atomic_load_n(&mlk_unload_epoch, __ATOMIC_ACQUIRE);
    uint32_t stack = way == ALLOC_BY_PATH ? mlk_walk_known_path(kind, epoch, at) : mlk_walk_known_at(kind, epoch, at);
    if (MLK_UNLIKELY(stack >= UNCOUNTED)) {
        owner_update_end();
        return stack == MLK_NO_STACK && way != ALLOC_BY_PATH ? -1 : 0;
    }
    size_t usable = mlk_glibc_usable_new(p);
    trailer_set(p, mlk_trailer_at(p, usable), counted_meta(size, tag, stack));
    uint64_t slack = slack_of(usable - MLK_TRAILER_SIZE, size);
    if (shared)
        mlk_stack_count_unowned(stack, size, slack);
    else
        mlk_stack_count_owned(mlk_stack_owned_counters_known(stack), size, slack);
    owner_update_end();
    return 1;
}

__attribute__((always_inline)) inline int mlk_trailer_alloc_fast(void *p, uint64_t size, int kind, uint64_t tag,
                                                                 struct mlk_walk_start at)
{
    return alloc_fast_as(p, size, kind, tag, at, ALLOC_OWNED);
}

/* The same for a thread on the shared stripe, tried where the fast way
 * was not (inlined into mlk_trailed_shared, out of the hooks' way, so
 * that the owners' fast way is as it was). */
__attribute__((always_inline)) inline int mlk_trailer_alloc_shared(void *p, uint64_t size, int kind, uint64_t tag, struct mlk_walk_start at)
{
    return alloc_fast_as(p, size, kind, tag, at, ALLOC_SHARED);
}

/* And for a thread resting from whole walks (cc1), likewise (mlk_trailed_resting). */
__attribute__((always_inline)) inline int mlk_trailer_alloc_by_path(void *p, uint64_t size, int kind, uint64_t tag,
                                                        struct mlk_walk_start at)
{
    return alloc_fast_as(p, size, kind, tag, at, ALLOC_BY_PATH);
}

void mlk_trailers_lock_for_fork(int acquire)
{
    if (acquire) {
        __atomic_store_n(&forking, 1, __ATOMIC_SEQ_CST);
        /* If the barrier failed (it cannot once registered), a thread could
         * be mid-update: the child's copy would be off by that one event. */
        if (__atomic_load_n(&fenced, __ATOMIC_ACQUIRE))
            mlk_syscall6(SYS_membarrier, MEMBARRIER_PRIVATE_EXPEDITED, 0, 0, 0, 0, 0);
        /* Not this thread's own guard: busy, it was interrupted part-way by
         * the signal handler that forks, and resumes the update in both
         * processes. */
        mlk_lock(&slots_lock);
        for (int i = 0; i < FLAG_SLOTS; i++) {
            int *guard = __atomic_load_n(&guards[i], __ATOMIC_ACQUIRE);
            if (guard && guard != &mlk_in_hook)
                while (__atomic_load_n(guard, __ATOMIC_ACQUIRE) & MLK_IN_HOOK_BUSY)
                    __builtin_ia32_pause();
        }
        mlk_unlock(&slots_lock);
    }
    for (unsigned i = 0; i < THREAD_LOCKS; i++) {
        mlk_lock_across_fork(&thread_locks[i].lock, acquire);
    }
    if (!acquire)
        __atomic_store_n(&forking, 0, __ATOMIC_RELEASE);
}

void mlk_trailers_fork_child(void)
{
    /* One thread now: the others' flags are free again.  The membarrier
     * registration belongs to the address space, which is new. */
    for (int i = 0; i < FLAG_SLOTS; i++)
        guards[i] = flag_plus_one == i + 1 ? &mlk_in_hook : NULL;
    if (__atomic_load_n(&fenced, __ATOMIC_RELAXED) && !register_fence()) {
        fenced = 0;
        if (flag_plus_one > 0) {
            guards[flag_plus_one - 1] = NULL;
            set_flag(-1);
        }
    }
    mlk_trailers_lock_for_fork(0);
}
