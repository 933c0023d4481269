/* Resources other than memory: which are held, and from which stack.
 *
 * A resource is a (kind, id) pair -- a file descriptor (kind 0, its
 * number), or whatever the program names through memleak.h (a GPU buffer
 * by its handle, a connection by its address) -- held with a weight.  Each
 * held one is counted at its acquiring stack like a heap block: the stack's
 * kind is MLK_KIND_RESOURCE + the resource kind, its bytes the weights and
 * its blocks the count, so every report's deltas, the reporter's merge and
 * `report`'s ranking work on them unchanged (docs/memlog.md, "resources").
 *
 * One table for every kind: open addressing with linear probing, removal
 * by shifting back (no tombstones, so a server that opens and closes a
 * million sockets keeps short probes), in libmtrace's own maps, one lock.
 * Acquisitions and releases are system calls or the program's rare
 * announcements, so a lock costs nothing that shows. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>

#include "resources.h"

#define EMPTY 0
#define HELD 1
#define SET_APART 2 /* a close-on-exec descriptor while an exec is under way: not counted */

struct slot {
    uint64_t id;
    uint64_t weight;
    uint32_t stack;
    uint16_t kind;
    uint16_t state;
};

static mlk_lock_t lock;
static struct slot *slots;
static uint64_t mask; /* capacity - 1; capacity a power of two, 0 before the first */
static uint64_t held;

#define FIRST_CAPACITY 256
#define MAX_CAPACITY (1ull << 26) /* 64M resources held: 1.5 GiB of table */

static inline uint64_t home_of(int kind, uint64_t id)
{
    uint64_t h = (id ^ (uint64_t)kind << 56) * 0x9e3779b97f4a7c15ull;
    return (h ^ h >> 29) & mask;
}

static void dropped(void)
{
    if (mlk_seg)
        __atomic_add_fetch(&mlk_seg->resources_dropped, 1, __ATOMIC_RELAXED);
}

/* ---- kinds ---- */

static const char *name_of(uint32_t r) { return mlk_seg->resource_names + r * MLK_RESOURCE_NAME_MAX; }

static int same_name(const char *stored, const char *name)
{
    size_t i = 0;
    for (; i < MLK_RESOURCE_NAME_MAX - 1 && name[i]; i++)
        if (stored[i] != name[i])
            return 0;
    return stored[i] == 0;
}

static int find_kind(const char *name, uint32_t n)
{
    for (uint32_t r = 0; r < n; r++)
        if (same_name(name_of(r), name))
            return (int)r;
    return -1;
}

int mlk_resource_kind(const char *name, int create)
{
    struct mlk_header *h = mlk_seg;
    if (!h || !name)
        return -1;
    uint32_t n = __atomic_load_n(&h->resource_kinds, __ATOMIC_ACQUIRE);
    if (n > MLK_RESOURCE_KINDS)
        return -1;
    int r = find_kind(name, n);
    if (r >= 0 || !create)
        return r;
    mlk_lock(&lock);
    n = h->resource_kinds;
    r = find_kind(name, n);
    if (r < 0 && n < MLK_RESOURCE_KINDS) {
        char *to = h->resource_names + n * MLK_RESOURCE_NAME_MAX;
        size_t i = 0;
        /* As given, cut; the reporter cleans it again (the program wrote it). */
        for (; i < MLK_RESOURCE_NAME_MAX - 1 && name[i]; i++)
            to[i] = name[i];
        to[i] = 0;
        __atomic_store_n(&h->resource_kinds, n + 1, __ATOMIC_RELEASE);
        r = (int)n;
    }
    mlk_unlock(&lock);
    if (r < 0) {
        dropped();
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            mlk_warn("a 33rd kind of resource was named (memleak_resource_acquire): 32 kinds are tracked at "
                     "most, fd included; the others are not (the reports count them as resources-dropped)",
                     "", "");
    }
    return r;
}

void mlk_resources_segment_made(int track_fds)
{
    mlk_seg->fds_tracked = track_fds ? 1 : 0;
    if (track_fds && mlk_seg->resource_kinds == 0) {
        mlk_resource_kind("fd", 1); /* kind 0 (MLK_FD_KIND) */
        mlk_seg->fds_before = mlk_fds_open_now();
    }
}

/* ---- the table ---- */

static struct slot *find(int kind, uint64_t id)
{
    if (!slots)
        return NULL;
    for (uint64_t i = home_of(kind, id);; i = (i + 1) & mask) {
        struct slot *s = &slots[i];
        if (s->state == EMPTY)
            return NULL;
        if (s->id == id && s->kind == kind)
            return s;
    }
}

static struct slot *place(int kind, uint64_t id)
{
    uint64_t i = home_of(kind, id);
    while (slots[i].state != EMPTY)
        i = (i + 1) & mask;
    return &slots[i];
}

static int make_room(void)
{
    uint64_t cap = slots ? mask + 1 : 0;
    if (slots && held < cap / 2)
        return 1;
    uint64_t bigger = cap ? cap * 2 : FIRST_CAPACITY;
    if (bigger > MAX_CAPACITY)
        return 0;
    struct slot *fresh = mlk_map_anon(bigger * sizeof *fresh);
    if (!fresh)
        return 0;
    struct slot *old = slots;
    slots = fresh;
    mask = bigger - 1;
    for (uint64_t i = 0; i < cap; i++)
        if (old[i].state != EMPTY)
            *place(old[i].kind, old[i].id) = old[i];
    if (old)
        mlk_unmap(old, cap * sizeof *old);
    return 1;
}

/* Empties slot s, shifting back the slots after it that probed past it. */
static void remove_slot(struct slot *s)
{
    uint64_t i = (uint64_t)(s - slots);
    for (uint64_t j = i;;) {
        j = (j + 1) & mask;
        if (slots[j].state == EMPTY)
            break;
        uint64_t k = home_of(slots[j].kind, slots[j].id);
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        slots[i] = slots[j];
        i = j;
    }
    slots[i].state = EMPTY;
    held--;
}

/* What slot s counts, taken off its stack. */
static void uncount(const struct slot *s)
{
    if (s->state == HELD && s->stack != MLK_NO_STACK)
        mlk_stack_account_other(s->stack, -(int64_t)s->weight, -1);
}

void mlk_resource_acquire(int kind, uint64_t id, uint64_t weight, uint32_t stack)
{
    if (kind < 0 || kind >= MLK_RESOURCE_KINDS)
        return;
    if (weight > (uint64_t)INT64_MAX)
        weight = (uint64_t)INT64_MAX;
    mlk_lock(&lock);
    struct slot *s = find(kind, id);
    if (s) {
        uncount(s); /* let go unseen */
    } else if (make_room()) {
        s = place(kind, id);
        held++;
    }
    if (s) {
        *s = (struct slot){id, weight, stack, (uint16_t)kind, HELD};
        if (stack != MLK_NO_STACK)
            mlk_stack_count_alloc_other(stack, weight);
    }
    mlk_unlock(&lock);
    if (!s)
        dropped();
}

int mlk_resource_release(int kind, uint64_t id)
{
    if (kind < 0 || kind >= MLK_RESOURCE_KINDS)
        return 0;
    mlk_lock(&lock);
    struct slot *s = find(kind, id);
    if (s) {
        uncount(s);
        remove_slot(s);
    }
    mlk_unlock(&lock);
    return s != NULL;
}

void mlk_resource_release_range(int kind, uint64_t lo, uint64_t hi)
{
    if (hi < lo)
        return;
    mlk_lock(&lock);
    if (slots && hi - lo < mask + 1) { /* a few ids: look each up */
        for (uint64_t id = lo;; id++) {
            struct slot *s = find(kind, id);
            if (s) {
                uncount(s);
                remove_slot(s);
            }
            if (id == hi)
                break;
        }
    } else if (slots) { /* closefrom(3): a walk of the table; a slot shifted back is looked at again */
        for (uint64_t i = 0; i <= mask;) {
            struct slot *s = &slots[i];
            if (s->state != EMPTY && s->kind == kind && s->id >= lo && s->id <= hi) {
                uncount(s);
                remove_slot(s);
                continue;
            }
            i++;
        }
    }
    mlk_unlock(&lock);
}

/* ---- exec ---- */

void mlk_fds_before_exec(void)
{
    mlk_lock(&lock);
    for (uint64_t i = 0; slots && i <= mask; i++) {
        struct slot *s = &slots[i];
        if (s->state != HELD || s->kind != MLK_FD_KIND)
            continue;
        long flags = mlk_syscall6(SYS_fcntl, (long)s->id, F_GETFD, 0, 0, 0, 0);
        if (flags >= 0 && (flags & FD_CLOEXEC)) {
            uncount(s);
            s->state = SET_APART;
        }
    }
    mlk_unlock(&lock);
}

void mlk_fds_exec_failed(void)
{
    mlk_lock(&lock);
    for (uint64_t i = 0; slots && i <= mask; i++) {
        struct slot *s = &slots[i];
        if (s->state != SET_APART)
            continue;
        s->state = HELD;
        if (s->stack != MLK_NO_STACK)
            mlk_stack_account_other(s->stack, (int64_t)s->weight, 1);
    }
    mlk_unlock(&lock);
}

void mlk_resources_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&lock, acquire);
}
