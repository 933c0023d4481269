/* Which stack allocated each live block, so a free can be subtracted from the
 * stack of the matching allocation -- for the blocks that have no trailer
 * (trailers.c): in sampling mode, with track=table, and for blocks from
 * before collection started.  Private to the process (the reporter never
 * needs it) and inherited as is by a forked child.
 *
 * Heap blocks: 256 shards chosen by address (shard_of), each an open-addressing
 * table with linear probing and backward-shift deletion under its own
 * spinlock, so threads rarely meet.  Stack counters are changed inside the
 * shard lock: holding every shard lock therefore means no counter is moving,
 * which is what fork() needs to copy a consistent segment.
 *
 * Anonymous mappings: a sorted interval list under one lock, because munmap
 * and mremap may cut any page range out of any number of mappings. */
#define _GNU_SOURCE
#include <string.h>

#include "mlk.h"

#define SHARD_BITS 8
#define SHARDS (1u << SHARD_BITS)
#define FIRST_CAP 256u
#define STACK_BITS MLK_ADDR_STACK_BITS
#define MAX_BLOCK_SIZE (1ull << (64 - STACK_BITS))

struct slot {
    uint64_t addr;  /* 0 = empty */
    uint64_t meta;  /* size << STACK_BITS | stack id */
};

struct shard {
    mlk_lock_t lock;
    struct slot *slots;
    uint64_t mask;
    uint64_t used;
} __attribute__((aligned(64)));

static struct shard shards[SHARDS];

/* What the scan reads from outside (shm_layout.h: addr_table). */
_Static_assert(SHARDS == MLK_ADDR_SHARDS && sizeof(struct shard) == MLK_ADDR_SHARD_BYTES &&
               __builtin_offsetof(struct shard, slots) == MLK_ADDR_SLOTS_AT &&
               __builtin_offsetof(struct shard, mask) == MLK_ADDR_MASK_AT && sizeof(struct slot) == 16,
               "the address table's layout is read by the scan (shm_layout.h)");

uint64_t mlk_addr_table(void) { return (uint64_t)shards; }

/* Sampling mode: see mlk_maybe_recorded in mlk.h.  A slot that reaches 255
 * stays there (then it only costs a lock on frees that hash to it). */
uint8_t mlk_sampled_filter[1u << MLK_FILTER_BITS];

static void filter_add(uint64_t addr, int delta)
{
    uint8_t *slot = &mlk_sampled_filter[mlk_filter_index(addr)];
    uint8_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    while (v != 255 && !__atomic_compare_exchange_n(slot, &v, (uint8_t)(v + delta), 1,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* (Not stacks.c's mix64, MurmurHash3's finalizer: with that one here the
 * address table's probes grew -- a routed allocation and free cost 75 more
 * instructions, bench/callgrind.py --only tcmalloc-static, 128.5M -> 139.8M.) */
static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

/* Where a block goes: its shard (low 8 bits) and its home slot (the bits
 * above).  Blocks are hashed by 1 KiB window of the heap, and within a
 * window each 16-byte granule has a slot of its own, in address order: the
 * blocks malloc hands out one after another -- and frees together -- sit in
 * the same few cache lines and page of the table instead of one random line
 * each, which was most of the cost of a program holding millions of blocks
 * (the table outgrows every cache).  Windows still land at random, so no
 * address pattern piles up: a window holds at most 32 blocks (glibc's
 * smallest chunk is 32 bytes), half of its 64 slots; an allocator with
 * 16-byte classes fills windows, which only makes probes longer. */
#define WINDOW_BITS 6
/* An allocator whose 16-byte classes fill windows -- CPython's pymalloc,
 * routed (runtimes/pymalloc.c) -- makes a window's blocks a run of 64 slots
 * and two such windows on one place a run that every probe walks: 67
 * probes a lookup (bench/python.py: its table took 420 of the 1,270M
 * instructions).  There each block is hashed on its own
 * (mlk_addr_hash_each_block), chosen while the table is still empty. */
static int each_block;

int mlk_addr_hash_each_block(void)
{
    for (unsigned i = 0; i < SHARDS; i++)
        if (__atomic_load_n(&shards[i].used, __ATOMIC_ACQUIRE))
            return 0;
    each_block = 1;
    return 1;
}

static inline uint64_t hash_of(uint64_t addr)
{
    if (MLK_UNLIKELY(each_block))
        return mix(addr >> 4);
    uint64_t w = mix(addr >> (4 + WINDOW_BITS));
    uint64_t granule = (addr >> 4) & ((1u << WINDOW_BITS) - 1);
    return (w >> SHARD_BITS) << (SHARD_BITS + WINDOW_BITS) | granule << SHARD_BITS |
           (w & (SHARDS - 1));
}

/* The shard of a block: 4 bits from the 64 MiB region it lies in, 4 from
 * its 1 KiB window.  glibc gives each thread's arena heaps of their own,
 * aligned to 64 MiB, so threads mostly take shards no other thread takes:
 * their lock words and slots stay in their own core's cache instead of
 * bouncing between cores at every malloc and free.  One heap still spreads
 * over 16 shards, so that none grows too large to rehash at once. */
static inline struct shard *shard_of(uint64_t addr, uint64_t h)
{
    return &shards[((mix(addr >> 26) << 4) & 0xf0) | (h & 0x0f)];
}

static int grow(struct shard *s)
{
    uint64_t cap = s->slots ? (s->mask + 1) * 2 : FIRST_CAP;
    struct slot *fresh = mlk_map_anon(cap * sizeof *fresh);
    if (!fresh)
        return 0;
    uint64_t mask = cap - 1;
    if (s->slots) {
        for (uint64_t i = 0; i <= s->mask; i++) {
            if (!s->slots[i].addr)
                continue;
            uint64_t j = (hash_of(s->slots[i].addr) >> SHARD_BITS) & mask;
            while (fresh[j].addr)
                j = (j + 1) & mask;
            fresh[j] = s->slots[i];
        }
        mlk_unmap(s->slots, (s->mask + 1) * sizeof *s->slots);
    }
    s->slots = fresh;
    s->mask = mask;
    return 1;
}

/* Index of addr's slot, or of the empty slot where it would go. */
static uint64_t find(struct shard *s, uint64_t addr, uint64_t h)
{
    uint64_t i = (h >> SHARD_BITS) & s->mask;
    while (s->slots[i].addr && s->slots[i].addr != addr)
        i = (i + 1) & s->mask;
    return i;
}

static void erase(struct shard *s, uint64_t i)
{
    /* Backward-shift deletion keeps probe chains intact without tombstones. */
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & s->mask;
        if (!s->slots[j].addr)
            break;
        uint64_t home = (hash_of(s->slots[j].addr) >> SHARD_BITS) & s->mask;
        /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
        if ((i <= j) ? (home <= i || home > j) : (home <= i && home > j)) {
            s->slots[i] = s->slots[j];
            i = j;
        }
    }
    s->slots[i].addr = 0;
    s->slots[i].meta = 0;
    s->used--;
}

void mlk_addr_prefetch(uint64_t addr)
{
    /* Unlocked reads: a grow may swap the table meanwhile, and then this
     * prefetches a wrong line -- a prefetch never faults. */
    uint64_t h = hash_of(addr);
    struct shard *s = shard_of(addr, h);
    struct slot *slots = __atomic_load_n(&s->slots, __ATOMIC_RELAXED);
    if (slots)
        __builtin_prefetch(&slots[(h >> SHARD_BITS) & __atomic_load_n(&s->mask, __ATOMIC_RELAXED)], 1);
}

int mlk_addr_insert(uint64_t addr, uint32_t stack, uint64_t size, int is_new)
{
    if (size >= MAX_BLOCK_SIZE || stack >= (1u << STACK_BITS))
        return 0;
    uint64_t h = hash_of(addr);
    struct shard *s = shard_of(addr, h);
    mlk_lock(&s->lock);
    /* Grow at 80% full: the table is most of what tracing adds to a big
     * heap (16 bytes a slot), and the probes a fuller table costs stay in
     * the lines the miss brought in (jq, 3.2M blocks: 411 -> 381 MB peak,
     * time unchanged against 70%). */
    if ((!s->slots || (s->used + 1) * 10 > (s->mask + 1) * 8) && !grow(s)) {
        mlk_unlock(&s->lock);
        return 0;
    }
    uint64_t i = find(s, addr, h);
    if (s->slots[i].addr) {
        /* Still recorded as live: it was freed in a way we did not see.
         * Count that free now so the old stack does not leak forever. */
        uint64_t m = s->slots[i].meta;
        mlk_stack_account((uint32_t)(m & ((1u << STACK_BITS) - 1)), -(int64_t)(m >> STACK_BITS), -1);
        MLK_EVENT(MLK_EVENT_FREE, addr, m >> STACK_BITS, (uint32_t)(m & ((1u << STACK_BITS) - 1)));
    } else {
        s->used++;
        if (mlk_sample_bytes)
            filter_add(addr, 1);
    }
    s->slots[i].addr = addr;
    s->slots[i].meta = size << STACK_BITS | stack;
    if (is_new)
        mlk_stack_count_alloc(stack, size);
    else
        mlk_stack_account(stack, (int64_t)size, 1);
    mlk_unlock(&s->lock);
    return 1;
}

int mlk_addr_remove(uint64_t addr, uint32_t *stack, uint64_t *size)
{
    uint64_t h = hash_of(addr);
    struct shard *s = shard_of(addr, h);
    mlk_lock(&s->lock);
    if (!s->slots) {
        mlk_unlock(&s->lock);
        return 0;
    }
    uint64_t i = find(s, addr, h);
    if (!s->slots[i].addr) {
        mlk_unlock(&s->lock);
        return 0;
    }
    uint64_t m = s->slots[i].meta;
    *stack = (uint32_t)(m & ((1u << STACK_BITS) - 1));
    *size = m >> STACK_BITS;
    mlk_stack_account(*stack, -(int64_t)*size, -1);
    erase(s, i);
    if (mlk_sample_bytes)
        filter_add(addr, -1);
    mlk_unlock(&s->lock);
    return 1;
}

/* ---- anonymous mappings ------------------------------------------------ */
/* Two interval maps under one lock: `mapped`, the accessible anonymous
 * mappings, each counted for the stack that made it; and `reserved`, the
 * inaccessible (PROT_NONE) ones -- address space set aside, as JITs, VMs and
 * allocators do, which costs no memory until mprotect opens a part of it.
 * Opening moves the part from reserved to mapped, counted for the stack that
 * opened it; closing again (PROT_NONE) moves it back. */

struct region {
    uint64_t start, end;
    uint32_t stack;
};

_Static_assert(sizeof(struct region) == MLK_REGION_BYTES, "shm_layout.h: region_table");

/* The reporter reads `mapped`'s first two words (shm_layout.h region_table). */
struct region_table {
    struct region *r;
    uint64_t count, cap;
    int counted;            /* account bytes for each region's stack */
};

static mlk_lock_t regions_lock;
static struct region_table mapped = {.counted = 1}, reserved;

uint64_t mlk_region_table(void) { return (uint64_t)(uintptr_t)&mapped; }

static int table_reserve(struct region_table *t, uint64_t need)
{
    if (need <= t->cap)
        return 1;
    uint64_t cap = t->cap ? t->cap * 2 : 256;
    while (cap < need)
        cap *= 2;
    struct region *fresh = mlk_map_anon(cap * sizeof *fresh);
    if (!fresh)
        return 0;
    if (t->r) {
        memcpy(fresh, t->r, t->count * sizeof *fresh);
        mlk_unmap(t->r, t->cap * sizeof *t->r);
    }
    t->r = fresh;
    t->cap = cap;
    return 1;
}

/* First region whose end is above addr. */
static uint64_t first_after(const struct region_table *t, uint64_t addr)
{
    uint64_t a = 0, b = t->count;
    while (a < b) {
        uint64_t m = (a + b) / 2;
        if (t->r[m].end <= addr)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* A piece of a counted mapping at `at` is gone (bytes < 0), or a mapping
 * split in two (blocks +1). */
static void account(const struct region_table *t, uint64_t at, uint32_t stack, int64_t bytes, int64_t blocks)
{
    if (!t->counted)
        return;
    mlk_stack_account(stack, bytes, blocks);
    /* (a piece the log says unmapped: its address, length, and what it
     * did to the count of mappings -- gone, cut, or split in two) */
    if (bytes)
        MLK_EVENT(MLK_EVENT_UNMAP | (int)(blocks + 1) << MLK_EVENT_BLOCKS_SHIFT, at, (uint64_t)-bytes, stack);
}

static void remove_locked(struct region_table *t, uint64_t start, uint64_t end)
{
    uint64_t i = first_after(t, start);
    while (i < t->count && t->r[i].start < end) {
        struct region *r = &t->r[i];
        uint64_t cut_lo = r->start > start ? r->start : start;
        uint64_t cut_hi = r->end < end ? r->end : end;
        int64_t bytes = -(int64_t)(cut_hi - cut_lo);
        if (cut_lo > r->start && cut_hi < r->end) {
            /* A hole in the middle: one mapping becomes two. */
            if (!table_reserve(t, t->count + 1)) {
                /* Cannot split: keep the lower piece only, account the rest. */
                account(t, cut_lo, r->stack, -(int64_t)(r->end - cut_lo), 0);
                r->end = cut_lo;
                i++;
                continue;
            }
            r = &t->r[i];
            memmove(&t->r[i + 2], &t->r[i + 1], (t->count - i - 1) * sizeof *r);
            t->count++;
            t->r[i + 1] = (struct region){cut_hi, r->end, r->stack};
            r->end = cut_lo;
            account(t, cut_lo, r->stack, bytes, +1);
            i += 2;
        } else if (cut_lo == r->start && cut_hi == r->end) {
            account(t, cut_lo, r->stack, bytes, -1);
            memmove(&t->r[i], &t->r[i + 1], (t->count - i - 1) * sizeof *r);
            t->count--;
        } else {
            account(t, cut_lo, r->stack, bytes, 0);
            if (cut_lo == r->start)
                r->start = cut_hi;
            else
                r->end = cut_lo;
            i++;
        }
    }
}

static int insert_locked(struct region_table *t, uint64_t start, uint64_t len, uint32_t stack)
{
    if (!table_reserve(t, t->count + 1))
        return 0;
    uint64_t i = first_after(t, start);
    memmove(&t->r[i + 1], &t->r[i], (t->count - i) * sizeof *t->r);
    t->r[i] = (struct region){start, start + len, stack};
    t->count++;
    if (t->counted) {
        mlk_stack_count_alloc(stack, len);
        MLK_EVENT(MLK_EVENT_MAP, start, len, stack);
    }
    return 1;
}

static uint64_t overlap_locked(const struct region_table *t, uint64_t start, uint64_t end)
{
    uint64_t total = 0;
    for (uint64_t i = first_after(t, start); i < t->count && t->r[i].start < end; i++) {
        uint64_t lo = t->r[i].start > start ? t->r[i].start : start;
        uint64_t hi = t->r[i].end < end ? t->r[i].end : end;
        total += hi - lo;
    }
    return total;
}

static int tables_empty(void)
{
    return !__atomic_load_n(&mapped.count, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&reserved.count, __ATOMIC_RELAXED);
}

int mlk_region_insert(uint64_t start, uint64_t len, uint32_t stack)
{
    mlk_lock(&regions_lock);
    remove_locked(&mapped, start, start + len); /* whatever was there is gone */
    remove_locked(&reserved, start, start + len);
    int ok = insert_locked(&mapped, start, len, stack);
    mlk_unlock(&regions_lock);
    return ok;
}

void mlk_region_reserve(uint64_t start, uint64_t len)
{
    mlk_lock(&regions_lock);
    remove_locked(&mapped, start, start + len);
    remove_locked(&reserved, start, start + len);
    insert_locked(&reserved, start, len, MLK_NO_STACK); /* no room: it just stays unknown */
    mlk_unlock(&regions_lock);
}

void mlk_region_remove(uint64_t start, uint64_t len)
{
    if (tables_empty())
        return;
    mlk_lock(&regions_lock);
    remove_locked(&mapped, start, start + len);
    remove_locked(&reserved, start, start + len);
    mlk_unlock(&regions_lock);
}

void mlk_region_close(uint64_t start, uint64_t len)
{
    if (!__atomic_load_n(&mapped.count, __ATOMIC_RELAXED))
        return;
    uint64_t end = start + len;
    mlk_lock(&regions_lock);
    /* Each mapped piece in the range is no longer memory in use, but the
     * address space stays set aside. */
    for (uint64_t i = first_after(&mapped, start); i < mapped.count && mapped.r[i].start < end;) {
        uint64_t lo = mapped.r[i].start > start ? mapped.r[i].start : start;
        uint64_t hi = mapped.r[i].end < end ? mapped.r[i].end : end;
        remove_locked(&mapped, lo, hi);
        remove_locked(&reserved, lo, hi);
        insert_locked(&reserved, lo, hi - lo, MLK_NO_STACK);
        i = first_after(&mapped, hi);
    }
    mlk_unlock(&regions_lock);
}

uint64_t mlk_region_reserved(uint64_t start, uint64_t len)
{
    if (!__atomic_load_n(&reserved.count, __ATOMIC_RELAXED))
        return 0;
    mlk_lock(&regions_lock);
    uint64_t total = overlap_locked(&reserved, start, start + len);
    mlk_unlock(&regions_lock);
    return total;
}

int mlk_region_open(uint64_t start, uint64_t len, uint32_t stack)
{
    uint64_t end = start + len;
    int ok = 1;
    mlk_lock(&regions_lock);
    for (uint64_t i = first_after(&reserved, start); i < reserved.count && reserved.r[i].start < end;) {
        uint64_t lo = reserved.r[i].start > start ? reserved.r[i].start : start;
        uint64_t hi = reserved.r[i].end < end ? reserved.r[i].end : end;
        remove_locked(&reserved, lo, hi);
        if (stack != MLK_NO_STACK)
            ok &= insert_locked(&mapped, lo, hi - lo, stack);
        i = first_after(&reserved, hi);
    }
    mlk_unlock(&regions_lock);
    return ok;
}

/* A forked child shares its parent's MAP_SHARED mappings: they are the
 * parent's, counted there once -- in the child they would count again, in
 * every backend PostgreSQL forks.  Runs in the child with our locks held. */
void mlk_regions_fork_child(void)
{
    if (!mlk_seg)
        return;
    const struct mlk_stack *st = mlk_stacks();
    for (uint64_t i = mapped.count; i-- > 0;) {
        struct region r = mapped.r[i];
        if (st[r.stack].kind == MLK_KIND_SHARED)
            remove_locked(&mapped, r.start, r.end);
    }
}

uint64_t mlk_region_tracked(uint64_t start, uint64_t len, int *kind)
{
    mlk_lock(&regions_lock);
    uint64_t total = overlap_locked(&mapped, start, start + len);
    uint64_t i = first_after(&mapped, start);
    *kind = total && i < mapped.count ? mlk_stacks()[mapped.r[i].stack].kind : -1;
    mlk_unlock(&regions_lock);
    return total;
}

void mlk_addrs_lock_for_fork(int acquire)
{
    for (unsigned i = 0; i < SHARDS; i++) {
        mlk_lock_across_fork(&shards[i].lock, acquire);
    }
    mlk_lock_across_fork(&regions_lock, acquire);
}
