/* Which stack allocated each live block, so a free can be subtracted from the
 * stack of the matching allocation.  Private to the process (the reporter
 * never needs it) and inherited as is by a forked child.
 *
 * Heap blocks: 256 shards chosen by address hash, each an open-addressing
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
#define STACK_BITS 24
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

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
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
            uint64_t j = (mix(s->slots[i].addr) >> SHARD_BITS) & mask;
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
        uint64_t home = (mix(s->slots[j].addr) >> SHARD_BITS) & s->mask;
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

int mlk_addr_insert(uint64_t addr, uint32_t stack, uint64_t size, int is_new)
{
    if (size >= MAX_BLOCK_SIZE || stack >= (1u << STACK_BITS))
        return 0;
    uint64_t h = mix(addr);
    struct shard *s = &shards[h & (SHARDS - 1)];
    mlk_lock(&s->lock);
    if ((!s->slots || (s->used + 1) * 10 > (s->mask + 1) * 7) && !grow(s)) {
        mlk_unlock(&s->lock);
        return 0;
    }
    uint64_t i = find(s, addr, h);
    if (s->slots[i].addr) {
        /* Still recorded as live: it was freed in a way we did not see.
         * Count that free now so the old stack does not leak forever. */
        uint64_t m = s->slots[i].meta;
        mlk_stack_account((uint32_t)(m & ((1u << STACK_BITS) - 1)), -(int64_t)(m >> STACK_BITS), -1);
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
    uint64_t h = mix(addr);
    struct shard *s = &shards[h & (SHARDS - 1)];
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

struct region {
    uint64_t start, end;
    uint32_t stack;
};

static mlk_lock_t regions_lock;
static struct region *regions;
static uint64_t regions_count, regions_cap;

static int regions_reserve(uint64_t need)
{
    if (need <= regions_cap)
        return 1;
    uint64_t cap = regions_cap ? regions_cap * 2 : 256;
    while (cap < need)
        cap *= 2;
    struct region *fresh = mlk_map_anon(cap * sizeof *fresh);
    if (!fresh)
        return 0;
    if (regions) {
        memcpy(fresh, regions, regions_count * sizeof *fresh);
        mlk_unmap(regions, regions_cap * sizeof *regions);
    }
    regions = fresh;
    regions_cap = cap;
    return 1;
}

/* First region whose end is above addr. */
static uint64_t first_after(uint64_t addr)
{
    uint64_t a = 0, b = regions_count;
    while (a < b) {
        uint64_t m = (a + b) / 2;
        if (regions[m].end <= addr)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

static void remove_locked(uint64_t start, uint64_t end)
{
    uint64_t i = first_after(start);
    while (i < regions_count && regions[i].start < end) {
        struct region *r = &regions[i];
        uint64_t cut_lo = r->start > start ? r->start : start;
        uint64_t cut_hi = r->end < end ? r->end : end;
        int64_t bytes = -(int64_t)(cut_hi - cut_lo);
        if (cut_lo > r->start && cut_hi < r->end) {
            /* A hole in the middle: one mapping becomes two. */
            if (!regions_reserve(regions_count + 1)) {
                /* Cannot split: keep the lower piece only, account the rest. */
                bytes = -(int64_t)(r->end - cut_lo);
                mlk_stack_account(r->stack, bytes, 0);
                r->end = cut_lo;
                i++;
                continue;
            }
            r = &regions[i];
            memmove(&regions[i + 2], &regions[i + 1], (regions_count - i - 1) * sizeof *r);
            regions_count++;
            regions[i + 1] = (struct region){cut_hi, r->end, r->stack};
            r->end = cut_lo;
            mlk_stack_account(r->stack, bytes, +1);
            i += 2;
        } else if (cut_lo == r->start && cut_hi == r->end) {
            mlk_stack_account(r->stack, bytes, -1);
            memmove(&regions[i], &regions[i + 1], (regions_count - i - 1) * sizeof *r);
            regions_count--;
        } else {
            mlk_stack_account(r->stack, bytes, 0);
            if (cut_lo == r->start)
                r->start = cut_hi;
            else
                r->end = cut_lo;
            i++;
        }
    }
}

int mlk_region_insert(uint64_t start, uint64_t len, uint32_t stack)
{
    mlk_lock(&regions_lock);
    remove_locked(start, start + len); /* whatever was there is gone */
    if (!regions_reserve(regions_count + 1)) {
        mlk_unlock(&regions_lock);
        return 0;
    }
    uint64_t i = first_after(start);
    memmove(&regions[i + 1], &regions[i], (regions_count - i) * sizeof *regions);
    regions[i] = (struct region){start, start + len, stack};
    regions_count++;
    mlk_stack_count_alloc(stack, len);
    mlk_unlock(&regions_lock);
    return 1;
}

void mlk_region_remove(uint64_t start, uint64_t len)
{
    if (!__atomic_load_n(&regions_count, __ATOMIC_RELAXED))
        return;
    mlk_lock(&regions_lock);
    remove_locked(start, start + len);
    mlk_unlock(&regions_lock);
}

uint64_t mlk_region_tracked(uint64_t start, uint64_t len)
{
    uint64_t end = start + len, total = 0;
    mlk_lock(&regions_lock);
    for (uint64_t i = first_after(start); i < regions_count && regions[i].start < end; i++) {
        uint64_t lo = regions[i].start > start ? regions[i].start : start;
        uint64_t hi = regions[i].end < end ? regions[i].end : end;
        total += hi - lo;
    }
    mlk_unlock(&regions_lock);
    return total;
}

void mlk_addrs_lock_for_fork(int acquire)
{
    for (unsigned i = 0; i < SHARDS; i++) {
        if (acquire)
            mlk_lock(&shards[i].lock);
        else
            mlk_unlock(&shards[i].lock);
    }
    if (acquire)
        mlk_lock(&regions_lock);
    else
        mlk_unlock(&regions_lock);
}
