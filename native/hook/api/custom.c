/* Blocks the program hands out from memory it manages itself: memleak.h's
 * malloc-like blocks and pools, which valgrind's MALLOCLIKE_BLOCK and
 * MEMPOOL_* requests map to (libmemleak/include/valgrind/).  valgrind's
 * model, facts from its documentation:
 *
 *   - a malloc-like block is a block like malloc's, at the stack of the
 *     call that announced it; a free-like call ends it; a resize changes
 *     its size in place;
 *   - a pool is named by an address (its anchor); its chunks end one by
 *     one, all together when the pool is destroyed, or by a trim that
 *     keeps only those inside a range; a pool can be renamed (move) and a
 *     chunk moved or resized (change);
 *   - a metapool's chunks are superblocks that malloc-like blocks are cut
 *     from, and with auto-free, freeing one ends the blocks inside it.
 *
 * Each block is counted at its stack like a heap block, with the stack's
 * kind MLK_KIND_CUSTOM: reports show such entries as kind=custom, their
 * bytes lie inside blocks the allocator already counts (a pool's
 * superblocks), so no total adds them twice (docs/api.md).  The scan lists
 * them from this table (shm_layout.h custom_table) and sets aside the heap
 * blocks that hold them, as valgrind's leak check does.
 *
 * One lock for all of it: pool allocators are rarely shared by threads,
 * and this is the price only programs that announce blocks pay.  Memory
 * from libmtrace's own maps, never the program's malloc. */
#define _GNU_SOURCE
#include <string.h>

#include "../mlk.h"
#include "custom.h"

#define NONE 0u /* node and pool links are index + 1; 0 ends a list */

/* A block, read by the scan: its first 20 bytes are shm_layout.h's
 * MLK_CUSTOM_* layout. */
struct node {
    uint64_t addr; /* 0: unused */
    uint64_t size;
    uint32_t stack;
    uint32_t pool;      /* the pool's index + 1; 0: a malloc-like block */
    uint32_t hash_next; /* the next node of its hash bucket */
    uint32_t prev, next; /* the other blocks of its pool (or of no pool) */
    uint32_t unused;
};
_Static_assert(sizeof(struct node) == MLK_CUSTOM_NODE_BYTES, "the scan reads nodes (shm_layout.h)");

struct pool {
    uint64_t anchor;
    uint32_t flags;  /* MEMLEAK_POOL_* */
    uint32_t first;  /* its blocks */
    uint32_t hash_next;
    uint32_t in_use;
};

static mlk_lock_t lock;
/* The scan reads these two words: where the nodes are and how many were
 * ever used (shm_layout.h custom_table). */
static struct {
    struct node *nodes;
    uint64_t used;
} table;
static uint32_t nodes_cap, free_nodes;
static uint32_t *buckets; /* node index + 1, by address hash; as many as nodes_cap */
static uint32_t loose_first; /* the malloc-like blocks' list */
static struct pool *pools;
static uint32_t pools_used, pools_cap, free_pools;
static uint32_t *pool_buckets; /* pool index + 1, by anchor hash; as many as pools_cap */

uint64_t mlk_custom_table(void) { return (uint64_t)&table; }

static inline uint32_t hash_of(uint64_t a, uint32_t cap)
{
    return (uint32_t)(((a >> 3) * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

/* A bigger copy of an array of `n` elements of `each` bytes in our own
 * maps, or NULL. */
static void *grown(void *old, size_t n, size_t new_n, size_t each)
{
    void *fresh = mlk_map_anon(new_n * each);
    if (!fresh)
        return NULL;
    if (old) {
        memcpy(fresh, old, n * each);
        mlk_unmap(old, n * each);
    }
    return fresh;
}

/* ---- nodes ---- */

static int nodes_make_room(void)
{
    if (free_nodes || table.used < nodes_cap)
        return 1;
    uint32_t cap = nodes_cap ? nodes_cap * 2 : 1024;
    if (cap > (1u << 30))
        return 0;
    struct node *nodes = grown(table.nodes, nodes_cap, cap, sizeof *nodes);
    uint32_t *fresh_buckets = grown(NULL, 0, cap, sizeof *buckets);
    if (!nodes || !fresh_buckets) {
        if (nodes)
            mlk_unmap(nodes, (size_t)cap * sizeof *nodes); /* the old ones stay */
        return 0;
    }
    __atomic_store_n(&table.nodes, nodes, __ATOMIC_RELEASE);
    mlk_unmap(buckets, (size_t)nodes_cap * sizeof *buckets);
    buckets = fresh_buckets;
    nodes_cap = cap;
    for (uint32_t i = 0; i < table.used; i++)
        if (nodes[i].addr) {
            uint32_t h = hash_of(nodes[i].addr, cap);
            nodes[i].hash_next = buckets[h];
            buckets[h] = i + 1;
        }
    return 1;
}

static uint32_t *list_of(uint32_t pool) { return pool ? &pools[pool - 1].first : &loose_first; }

static struct node *find(uint64_t addr)
{
    if (!nodes_cap)
        return NULL;
    for (uint32_t i = buckets[hash_of(addr, nodes_cap)]; i; i = table.nodes[i - 1].hash_next)
        if (table.nodes[i - 1].addr == addr)
            return &table.nodes[i - 1];
    return NULL;
}

static void insert(uint64_t addr, uint64_t size, uint32_t stack, uint32_t pool)
{
    if (!nodes_make_room()) {
        __atomic_add_fetch(&mlk_seg->dropped_blocks, 1, __ATOMIC_RELAXED);
        return;
    }
    uint32_t i;
    if (free_nodes) {
        i = free_nodes;
        free_nodes = table.nodes[i - 1].next;
    } else {
        i = (uint32_t)table.used + 1;
        __atomic_store_n(&table.used, table.used + 1, __ATOMIC_RELEASE);
    }
    struct node *n = &table.nodes[i - 1];
    uint32_t h = hash_of(addr, nodes_cap);
    uint32_t *list = list_of(pool);
    *n = (struct node){0, size, stack, pool, buckets[h], NONE, *list, 0};
    if (*list)
        table.nodes[*list - 1].prev = i;
    *list = i;
    buckets[h] = i;
    __atomic_store_n(&n->addr, addr, __ATOMIC_RELEASE); /* complete: the scan may take it */
    if (stack != MLK_NO_STACK)
        mlk_stack_count_alloc_other(stack, size);
}

/* Ends the block: uncounted, out of its bucket and its pool's list. */
static void drop(struct node *n)
{
    uint32_t i = (uint32_t)(n - table.nodes) + 1;
    if (n->stack != MLK_NO_STACK)
        mlk_stack_account_other(n->stack, -(int64_t)n->size, -1);
    for (uint32_t *at = &buckets[hash_of(n->addr, nodes_cap)]; *at; at = &table.nodes[*at - 1].hash_next)
        if (*at == i) {
            *at = n->hash_next;
            break;
        }
    if (n->prev)
        table.nodes[n->prev - 1].next = n->next;
    else
        *list_of(n->pool) = n->next;
    if (n->next)
        table.nodes[n->next - 1].prev = n->prev;
    __atomic_store_n(&n->addr, 0, __ATOMIC_RELEASE);
    n->next = free_nodes;
    free_nodes = i;
}

/* Moves the block to a new address (its stack stays: valgrind's
 * MEMPOOL_CHANGE keeps the allocation's). */
static void rekey(struct node *n, uint64_t addr, uint64_t size)
{
    uint32_t stack = n->stack, pool = n->pool;
    uint64_t old = n->size;
    n->stack = MLK_NO_STACK; /* dropped and put back: counted as the change only */
    drop(n);
    insert(addr, size, MLK_NO_STACK, pool);
    struct node *moved = find(addr);
    if (moved)
        moved->stack = stack;
    if (stack != MLK_NO_STACK)
        mlk_stack_account_other(stack, moved ? (int64_t)size - (int64_t)old : -(int64_t)old, moved ? 0 : -1);
}

/* ---- pools ---- */

static struct pool *pool_find(uint64_t anchor)
{
    if (!pools_cap)
        return NULL;
    for (uint32_t i = pool_buckets[hash_of(anchor, pools_cap)]; i; i = pools[i - 1].hash_next)
        if (pools[i - 1].anchor == anchor)
            return &pools[i - 1];
    return NULL;
}

static void pool_hash(struct pool *p, int in)
{
    uint32_t i = (uint32_t)(p - pools) + 1;
    uint32_t *at = &pool_buckets[hash_of(p->anchor, pools_cap)];
    if (in) {
        p->hash_next = *at;
        *at = i;
        return;
    }
    for (; *at; at = &pools[*at - 1].hash_next)
        if (*at == i) {
            *at = p->hash_next;
            return;
        }
}

static struct pool *pool_new(uint64_t anchor, uint32_t flags)
{
    if (!free_pools && pools_used == pools_cap) {
        uint32_t cap = pools_cap ? pools_cap * 2 : 256;
        struct pool *fresh = grown(pools, pools_cap, cap, sizeof *pools);
        uint32_t *fresh_buckets = grown(NULL, 0, cap, sizeof *pool_buckets);
        if (!fresh || !fresh_buckets)
            return NULL;
        mlk_unmap(pool_buckets, (size_t)pools_cap * sizeof *pool_buckets);
        pools = fresh;
        pool_buckets = fresh_buckets;
        pools_cap = cap;
        for (uint32_t i = 0; i < pools_used; i++)
            if (pools[i].in_use)
                pool_hash(&pools[i], 1);
    }
    uint32_t i = free_pools ? free_pools : ++pools_used;
    if (free_pools)
        free_pools = pools[i - 1].first;
    struct pool *p = &pools[i - 1];
    *p = (struct pool){anchor, flags, NONE, 0, 1};
    pool_hash(p, 1);
    return p;
}

/* The malloc-like blocks inside [lo, hi): an auto-free metapool's chunk
 * takes them with it. */
static void drop_loose_inside(uint64_t lo, uint64_t hi)
{
    for (uint32_t i = loose_first; i;) {
        struct node *n = &table.nodes[i - 1];
        i = n->next;
        if (n->addr >= lo && n->addr < hi)
            drop(n);
    }
}

static void drop_chunk(struct pool *p, struct node *n)
{
    uint64_t lo = n->addr, hi = n->addr + n->size;
    drop(n);
    if ((p->flags & MLK_POOL_FLAGS) == MLK_POOL_FLAGS) /* an auto-free metapool */
        drop_loose_inside(lo, hi);
}

/* ---- the calls (api.c exports them in mlk_api_v1) ---- */

/* Runs the statements with the thread's guard up and the lock held, in a
 * traced process.  A new block's stack is taken before (caller_stack): the
 * walk may take the loader's lock. */
#define LOCKED(...)                                                                                    \
    do {                                                                                               \
        if (mlk_seg)                                                                                   \
            MLK_GUARDED(&lock, __VA_ARGS__);                                                           \
    } while (0)

/* The stack a new block of `size` bytes is counted at, or MLK_NO_STACK:
 * not collecting, or (sampling) not a sample -- sampled like malloc's
 * blocks, so that a sampled report's estimates hold for these too. */
static uint32_t caller_stack(size_t size)
{
    if (!mlk_seg || !mlk_collecting || !mlk_sample(size))
        return MLK_NO_STACK;
    int was = mlk_guard_up();
    uint32_t id = mlk_current_stack(MLK_KIND_CUSTOM);
    mlk_in_hook = was;
    return id;
}

/* A block announced again without its end (reused memory the program
 * did not say it freed) replaces the old one, as its free would. */
static void announce(uint64_t addr, uint64_t size, uint32_t stack, uint32_t pool)
{
    struct node *old = find(addr);
    if (old)
        drop(old);
    if (stack != MLK_NO_STACK)
        insert(addr, size, stack, pool);
}

/* A block the program announces must fit in the address space: a size of
 * 2^56 bytes or more, or one that runs past its end, is no block (a
 * SIZE_MAX was counted as -1 byte, #64 item 15): ignored, said once. */
#define MAX_BLOCK (1ull << 56)
static int sizes_refused;

static int plausible(const void *addr, size_t size, const char *call)
{
    if (size < MAX_BLOCK && (uint64_t)addr + size >= (uint64_t)addr)
        return 1;
    if (!__atomic_exchange_n(&sizes_refused, 1, __ATOMIC_RELAXED))
        mlk_warn(call, ": a block too large for the address space (a size of 2^56 bytes or more, or past "
                       "its end) is no block: ignored (this and any later such announcement)", "");
    return 0;
}

void mlk_custom_malloclike(const void *addr, size_t size)
{
    if (!addr || !plausible(addr, size, "memleak_malloclike / MALLOCLIKE_BLOCK"))
        return; /* (NULL: valgrind ignores it too) */
    uint32_t stack = caller_stack(size);
    LOCKED(announce((uint64_t)addr, size, stack, 0));
}

void mlk_custom_freelike(const void *addr)
{
    LOCKED({
        struct node *n = find((uint64_t)addr);
        if (n)
            drop(n);
    });
}

void mlk_custom_resize(const void *addr, size_t old_size, size_t new_size)
{
    (void)old_size; /* the block knows its size */
    if (!plausible(addr, new_size, "memleak_resize / RESIZEINPLACE_BLOCK"))
        return;
    LOCKED({
        struct node *n = find((uint64_t)addr);
        if (n) {
            if (n->stack != MLK_NO_STACK)
                mlk_stack_account_other(n->stack, (int64_t)new_size - (int64_t)n->size, 0);
            n->size = new_size;
        }
    });
}

void mlk_custom_pool_create(const void *anchor, unsigned flags)
{
    LOCKED(if (!pool_find((uint64_t)anchor)) pool_new((uint64_t)anchor, flags & MLK_POOL_FLAGS));
}

void mlk_custom_pool_destroy(const void *anchor)
{
    LOCKED({
        struct pool *p = pool_find((uint64_t)anchor);
        if (p) {
            while (p->first)
                drop_chunk(p, &table.nodes[p->first - 1]);
            pool_hash(p, 0);
            p->in_use = 0;
            p->anchor = 0;
            p->first = free_pools;
            free_pools = (uint32_t)(p - pools) + 1;
        }
    });
}

void mlk_custom_pool_alloc(const void *anchor, const void *addr, size_t size)
{
    if (!addr || !plausible(addr, size, "memleak_pool_alloc / MEMPOOL_ALLOC"))
        return;
    uint32_t stack = caller_stack(size);
    LOCKED({
        struct pool *p = pool_find((uint64_t)anchor);
        if (p)
            announce((uint64_t)addr, size, stack, (uint32_t)(p - pools) + 1);
    });
}

void mlk_custom_pool_free(const void *anchor, const void *addr)
{
    LOCKED({
        struct pool *p = pool_find((uint64_t)anchor);
        struct node *n = p ? find((uint64_t)addr) : NULL;
        if (n && n->pool == (uint32_t)(p - pools) + 1)
            drop_chunk(p, n);
    });
}

/* valgrind's MEMPOOL_TRIM: the pool's chunks wholly outside [addr,
 * addr+size) end; those that straddle an edge keep only their part inside. */
void mlk_custom_pool_trim(const void *anchor, const void *addr, size_t size)
{
    uint64_t lo = (uint64_t)addr, hi = lo + size;
    LOCKED({
        struct pool *p = pool_find((uint64_t)anchor);
        for (uint32_t i = p ? p->first : 0; i;) {
            struct node *n = &table.nodes[i - 1];
            i = n->next;
            uint64_t a = n->addr, b = n->addr + n->size;
            if (b <= lo || a >= hi)
                drop_chunk(p, n);
            else if (a < lo || b > hi)
                rekey(n, a < lo ? lo : a, (b > hi ? hi : b) - (a < lo ? lo : a));
        }
    });
}

void mlk_custom_pool_move(const void *from, const void *to)
{
    LOCKED({
        struct pool *p = pool_find((uint64_t)from);
        if (p && !pool_find((uint64_t)to)) {
            pool_hash(p, 0);
            p->anchor = (uint64_t)to;
            pool_hash(p, 1);
        }
    });
}

void mlk_custom_pool_change(const void *anchor, const void *from, const void *to, size_t size)
{
    if (!plausible(to, size, "memleak_pool_change / MEMPOOL_CHANGE"))
        return;
    LOCKED({
        struct pool *p = pool_find((uint64_t)anchor);
        struct node *n = p ? find((uint64_t)from) : NULL;
        if (n && n->pool == (uint32_t)(p - pools) + 1) {
            struct node *there = from != to ? find((uint64_t)to) : NULL;
            if (there)
                drop(there);
            rekey(n, (uint64_t)to, size);
        }
    });
}

int mlk_custom_pool_exists(const void *anchor)
{
    int found = 0;
    LOCKED(found = pool_find((uint64_t)anchor) != NULL);
    return found;
}

int mlk_custom_block_at(const void *addr, uint32_t *stack, uint64_t *size)
{
    int what = 0;
    if (!__atomic_load_n(&table.used, __ATOMIC_RELAXED))
        return 0; /* the program announced none: the common case, without the lock */
    LOCKED({
        struct node *n = find((uint64_t)addr);
        if (n) {
            what = n->pool ? MLK_WHERE_POOL_CHUNK : MLK_WHERE_CUSTOM_BLOCK;
            *stack = n->stack, *size = n->size;
        }
    });
    return what;
}

void mlk_custom_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&lock, acquire);
}
