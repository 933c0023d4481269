/* Backtrace -> stack id, in the shared table.
 *
 * Entries live in the segment's append-only stacks array, so the reporter
 * reads them without any lock.  Finding an entry goes through a private
 * open-addressing index, read and filled lock-free.  When the index is half
 * full one thread builds a bigger one from the entries array and publishes
 * it; entries added to the old index meanwhile may later be added again,
 * which is harmless: each entry has its own counters and the reporter
 * merges equal stacks.  Past 3/4 full nothing is added to an index: a
 * thread with a new stack waits for the bigger one (or builds it).  Old
 * indexes are never freed (a reader may still be in one); together they
 * weigh less than the current one. */
#define _GNU_SOURCE
#include <stddef.h>
#include <string.h>

#include "mlk.h"

/* A slot holds an entry's hash and, packed in one word, everything else a
 * lookup compares (id, where its frames are, depth, kind), so that a lookup
 * reads one line of the index and then the frames: with the hash alone in
 * the index, a private array of keys beside it was a second dependent cache
 * miss per allocation (cc1: 8,774 stacks, 9M lookups).  A slot is claimed
 * by a compare-and-swap of its hash from 0 and becomes usable when its
 * entry word is stored (never 0: the id is stored plus one).  A lookup that
 * meets a claimed slot whose entry is not stored yet goes on probing, and
 * may add the same stack a second time: harmless, as above. */
struct index_slot {
    uint64_t hash;
    uint64_t entry;  /* id + 1 | frames_off << 23 | depth << 49 | kind << 56 */
};
#define ENTRY_ID_BITS 23
#define ENTRY_OFF_BITS 26
#define ENTRY_DEPTH_BITS 7
#define ENTRY_SHAPE_SHIFT (ENTRY_ID_BITS + ENTRY_OFF_BITS) /* then depth | kind << ENTRY_DEPTH_BITS */
_Static_assert(MLK_STACKS_CAP < (1ull << ENTRY_ID_BITS) && MLK_FRAMES_CAP <= (1ull << ENTRY_OFF_BITS) &&
                   MLK_MAX_DEPTH < (1 << ENTRY_DEPTH_BITS) && MLK_PY_MAX_WORDS < (1 << ENTRY_DEPTH_BITS),
               "an index slot's entry word holds any id, frame offset and depth");

static inline uint64_t pack_entry(uint32_t id, uint64_t frames_off, int depth, int kind)
{
    return (uint64_t)(id + 1) | frames_off << ENTRY_ID_BITS |
           ((uint64_t)depth | (uint64_t)kind << ENTRY_DEPTH_BITS) << ENTRY_SHAPE_SHIFT;
}

struct stack_index {
    uint64_t mask;
    uint64_t used;
    struct index_slot slots[];
};

static struct stack_index *current_index;
static mlk_lock_t grow_lock;

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
 * malloc), and a frame's position still matters.  The constants are random
 * (splitmix64 of a fixed seed): with constants in arithmetic progression the
 * sum of two stacks made of the same few return addresses depended only on
 * how many and which *sum* of positions held each address, and recursive
 * code (bench/scale.py's binary tree: 65,536 stacks of left/right frames)
 * had a few thousand distinct hashes -- interning spent 84% of the run in
 * memcmp along colliding chains. */
static const uint64_t position_mul[MLK_MAX_DEPTH] = {
    0x958185477ebce269ull, 0xbad54d3ffa321111ull, 0x1894384b8667db95ull, 0xff437149783018f9ull,
    0x0237d5d89f7c3c65ull, 0x516705cba8dd63e5ull, 0xe5754e4775db529bull, 0x7ec01523bdb56ae3ull,
    0x7cfaaa0c5cf186bfull, 0xde9eb7fdadf75b35ull, 0x1089929f780f34afull, 0xb8dba84deb0272c5ull,
    0x4980d07ace20340bull, 0x617067e55c6f8bd3ull, 0x1a6cb0c407b5bcb5ull, 0x447cedd60b6c8b55ull,
    0xb9e4c6557b4d95cdull, 0x0dc27d70d19fb8fbull, 0xce9838637d07599dull, 0x7a2ee4490f499aabull,
    0xc6516cfdb128b525ull, 0x1e1a76102900a30full, 0xa5bde8af47f59bb9ull, 0x86be8fbfae4ee683ull,
    0xd11b7000800b9795ull, 0x333a396e641566d3ull, 0x7a07f255492f0949ull, 0x9f2b4098bd7dcf01ull,
    0x1799193a98db9363ull, 0x7fc781fef1d0a937ull, 0x234eb7304c451651ull, 0x8d1332c3295f6f9bull,
    0x61e91faa846ca11dull, 0xed1ae33abd5dc9dbull, 0xfd159b16af5e0d85ull, 0x4909fc05876490cbull,
    0x6ca35c06a704ced1ull, 0x5a95e7b4516e96abull, 0xdbf1c763dba9a2c1ull, 0x90e960ad320c71adull,
    0x13d08c78c607fe09ull, 0xc5c432c21c1f0c0dull, 0x4f9b5c473eb12861ull, 0xa9b036f945d8691bull,
    0x72af94de20e9c0cfull, 0xbda7b0d7c5c08fc5ull, 0x86e4880b3cd4af17ull, 0x4d1ff28a1fa3bb61ull,
    0x1cd0e2b00517530dull, 0x659f07cc0d267711ull, 0xaa2d25127bc3600dull, 0x257b8a2c69fc5c33ull,
    0xef8e661ebd3b7defull, 0x814c9d30ed18b399ull, 0x1e987efa5187ecddull, 0x62e301c007065435ull,
    0x1b45d418dac231e9ull, 0xffec8863ca2e00c3ull, 0x98c634560d2eef93ull, 0x863fc3d036601811ull,
    0x4df1cf2fc09130d5ull, 0x47f696438b728c2full, 0x9cfb4f96c1a19b83ull, 0x39b5ee7409b82fb9ull,
};

/* A stack longer than the walk's depth: one with Python frames (up to
 * MLK_PY_MAX_WORDS words); each word past MLK_MAX_DEPTH takes its
 * position's constant of the first 64 plus an even number of its own. */
static __attribute__((noinline)) uint64_t hash_long_stack(const uint64_t *ips, int depth, uint64_t h)
{
    for (int i = 0; i < depth; i++)
        h += ips[i] * (position_mul[i & (MLK_MAX_DEPTH - 1)] + (uint64_t)(i / MLK_MAX_DEPTH) * 2);
    return mix64(h) | 1;
}

static uint64_t hash_stack(const uint64_t *ips, int depth, int kind, uint32_t unload_epoch)
{
    uint64_t h = ((uint64_t)kind << 32 | unload_epoch) ^ (uint64_t)depth << 48;
    if (MLK_UNLIKELY(depth > MLK_MAX_DEPTH))
        return hash_long_stack(ips, depth, h);
#pragma GCC unroll 4
    for (int i = 0; i < depth; i++)
        h += ips[i] * position_mul[i];
    return mix64(h) | 1; /* never 0 */
}

static struct stack_index *new_index(uint64_t cap)
{
    struct stack_index *ix = mlk_map_anon(sizeof *ix + cap * sizeof(struct index_slot));
    if (ix)
        ix->mask = cap - 1;
    return ix;
}

static inline uint32_t entry_id(uint64_t entry) { return (uint32_t)(entry & ((1u << ENTRY_ID_BITS) - 1)) - 1; }
static inline uint64_t entry_frames_off(uint64_t entry)
{
    return entry >> ENTRY_ID_BITS & ((1ull << ENTRY_OFF_BITS) - 1);
}

/* Is the entry word's stack these frames?  (The hash matched.)  The
 * comparison is one accumulated difference and one branch, not memcmp: the
 * branch is predicted equal, so the program runs on while the frames, most
 * likely a cache miss, are still being loaded. */
static inline int same_stack(uint64_t entry, const uint64_t *ips, int depth, int kind)
{
    if (entry >> ENTRY_SHAPE_SHIFT != ((uint64_t)depth | (uint64_t)kind << ENTRY_DEPTH_BITS))
        return 0; /* another depth or kind */
    const uint64_t *frames = mlk_frames() + entry_frames_off(entry);
    uint64_t diff = 0;
#pragma GCC unroll 4
    for (int i = 0; i < depth; i++)
        diff |= frames[i] ^ ips[i];
    return diff == 0;
}

/* Put an existing entry into an index (used while growing). */
static void index_put(struct stack_index *ix, uint64_t hash, uint64_t entry)
{
    for (uint64_t i = hash & ix->mask;; i = (i + 1) & ix->mask)
        if (ix->slots[i].hash == 0) {
            ix->slots[i].hash = hash;
            ix->slots[i].entry = entry;
            ix->used++;
            return;
        }
}

/* Replaces ix, if it is still the current index, by one 4 times bigger,
 * built from the entries array.  Called with grow_lock held. */
static void grow_locked(struct stack_index *ix)
{
    if (__atomic_load_n(&current_index, __ATOMIC_ACQUIRE) == ix) {
        struct stack_index *bigger = new_index((ix->mask + 1) * 4);
        if (bigger) {
            struct mlk_stack *st = mlk_stacks();
            uint64_t n = __atomic_load_n(&mlk_seg->stacks_used, __ATOMIC_ACQUIRE);
            if (n > mlk_seg->stacks_cap)
                n = mlk_seg->stacks_cap;
            for (uint64_t id = 0; id < n; id++)
                if (__atomic_load_n(&st[id].state, __ATOMIC_ACQUIRE) == MLK_STACK_READY &&
                    st[id].kind != MLK_KIND_PYCODE) /* (a record: in no index) */
                    index_put(bigger, st[id].hash,
                              pack_entry((uint32_t)id, st[id].frames_off, st[id].depth, st[id].kind));
            __atomic_store_n(&current_index, bigger, __ATOMIC_RELEASE);
        }
    }
}

/* At half full, the thread that sees it grows the index unless another
 * already is; the others go on (until 3/4: see intern_in). */
static void maybe_grow(struct stack_index *ix)
{
    if (ix->used * 2 < ix->mask + 1 || !__sync_bool_compare_and_swap(&grow_lock.held, 0, 1))
        return;
    grow_locked(ix);
    mlk_unlock(&grow_lock);
}

/* A new entry of `depth` frames, EMPTY (readers skip it) until published:
 * its id, and where its frames go; MLK_NO_STACK when the table is full. */
static uint32_t reserve_entry(int depth, uint64_t **frames, uint64_t *frames_off)
{
    struct mlk_header *h = mlk_seg;
    uint64_t id = __atomic_fetch_add(&h->stacks_used, 1, __ATOMIC_ACQ_REL);
    if (id >= h->stacks_cap) {
        __atomic_store_n(&h->stacks_used, h->stacks_cap, __ATOMIC_RELAXED);
        return MLK_NO_STACK;
    }
    uint64_t off = __atomic_fetch_add(&h->frames_used, (uint64_t)depth, __ATOMIC_ACQ_REL);
    if (off + (uint64_t)depth > h->frames_cap)
        return MLK_NO_STACK; /* the entry stays EMPTY */
    *frames = mlk_frames() + off;
    *frames_off = off;
    return (uint32_t)id;
}

static void publish_entry(uint32_t id, uint64_t hash, uint64_t off, int depth, int kind, uint32_t unload_epoch,
                          int cut)
{
    struct mlk_stack *e = &mlk_stacks()[id];
    e->hash = hash;
    e->depth = (uint16_t)depth;
    e->kind = (uint16_t)kind;
    e->frames_off = off;
    e->map_epoch = __atomic_load_n(&mlk_seg->map_epoch, __ATOMIC_ACQUIRE);
    e->unload_epoch = unload_epoch;
    e->flags = cut ? MLK_STACK_CUT : 0;
    __atomic_store_n(&e->state, MLK_STACK_READY, __ATOMIC_RELEASE);
}

static uint32_t create_entry(uint64_t hash, const uint64_t *ips, int depth, int kind, uint32_t unload_epoch,
                             int cut, uint64_t *frames_off)
{
    struct mlk_header *h = mlk_seg;
    uint64_t *frames, off;
    uint32_t id = reserve_entry(depth, &frames, &off);
    if (id == MLK_NO_STACK)
        return MLK_NO_STACK;
    memcpy(frames, ips, (size_t)depth * sizeof *ips);
    publish_entry(id, hash, off, depth, kind, unload_epoch, cut);
    if (!(ips[0] >> 63)) { /* (a stack of interpreter frames' words: its native frames are another's) */
        int ends_without_table;
        int by_fp = mlk_frames_by_fp(ips, depth, &ends_without_table);
        if (by_fp) {
            __atomic_add_fetch(&h->fp_stacks, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&h->fp_frames, (uint64_t)by_fp, __ATOMIC_RELAXED);
        }
        if (ends_without_table && !cut)
            __atomic_add_fetch(&h->fp_stopped_stacks, 1, __ATOMIC_RELAXED);
    }
    *frames_off = off;
    return (uint32_t)id;
}

void mlk_stack_add_record(int words, void (*fill)(uint64_t *at, const void *arg), const void *arg, int kind)
{
    uint64_t *frames, off;
    uint32_t id = reserve_entry(words, &frames, &off);
    if (id == MLK_NO_STACK) {
        __atomic_add_fetch(&mlk_seg->dropped_stacks, 1, __ATOMIC_RELAXED);
        return;
    }
    fill(frames, arg);
    publish_entry(id, 0, off, words, kind, 0, 0);
}

/* The stack's id through index ix, adding it if it is new; INDEX_FULL when
 * ix is too full to add to (the caller grows it or waits for it to grow). */
#define INDEX_FULL (MLK_NO_STACK - 1)
static uint32_t intern_in(struct stack_index *ix, uint64_t hash, const uint64_t *ips, int depth, int kind,
                          uint32_t unload_epoch, int cut)
{
    for (uint64_t i = hash & ix->mask, probes = 0; probes <= ix->mask; i = (i + 1) & ix->mask, probes++) {
        struct index_slot *slot = &ix->slots[i];
        uint64_t h = __atomic_load_n(&slot->hash, __ATOMIC_ACQUIRE);
        if (h == 0) {
            /* A new stack.  Not into an index 3/4 full: while one thread
             * builds the bigger index, the others would go on filling this
             * one, and with many threads making new stacks (bench/scale.py,
             * 16 threads) it filled up and stacks were dropped. */
            if (__atomic_load_n(&ix->used, __ATOMIC_RELAXED) * 4 >= (ix->mask + 1) * 3)
                return INDEX_FULL;
            if (!__atomic_compare_exchange_n(&slot->hash, &h, hash, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                if (h != hash)
                    continue; /* another stack took it */
            } else {
                /* Ours: a backtrace through code mapped since the last
                 * scan learns about that module before anyone needs to
                 * symbolize it. */
                if (MLK_UNLIKELY(ips[0] >> MLK_PY_TAG_SHIFT == MLK_PY_TAG_NATIVE))
                    mlk_py_describe_codes(ips, depth); /* (its native frames: in their own entry) */
                else if (!mlk_modules_cover(ips, depth))
                    mlk_modules_scan();
                uint64_t off;
                uint32_t id = create_entry(hash, ips, depth, kind, unload_epoch, cut, &off);
                if (id == MLK_NO_STACK)
                    return MLK_NO_STACK; /* the slot stays claimed and never matches */
                __atomic_store_n(&slot->entry, pack_entry(id, off, depth, kind), __ATOMIC_RELEASE);
                __atomic_add_fetch(&ix->used, 1, __ATOMIC_RELAXED);
                maybe_grow(ix);
                return id;
            }
        }
        if (h == hash) {
            uint64_t entry = __atomic_load_n(&slot->entry, __ATOMIC_ACQUIRE);
            if (entry && same_stack(entry, ips, depth, kind))
                return entry_id(entry);
        }
    }
    return INDEX_FULL;
}

uint32_t mlk_stack_intern(const uint64_t *ips, int depth, int kind, uint32_t unload_epoch, int cut)
{
    struct stack_index *ix = __atomic_load_n(&current_index, __ATOMIC_ACQUIRE);
    if (MLK_UNLIKELY(!ix)) {
        mlk_lock(&grow_lock);
        if (!current_index)
            __atomic_store_n(&current_index, new_index(1u << 13), __ATOMIC_RELEASE);
        mlk_unlock(&grow_lock);
        ix = __atomic_load_n(&current_index, __ATOMIC_ACQUIRE);
        if (!ix)
            return MLK_NO_STACK;
    }
    uint64_t hash = hash_stack(ips, depth, kind, unload_epoch);
    for (;;) {
        uint32_t id = intern_in(ix, hash, ips, depth, kind, unload_epoch, cut);
        if (MLK_LIKELY(id != INDEX_FULL))
            return id;
        /* Too full to add to: grow it, or wait for the thread growing it
         * (the lock is held only while the bigger index is built).  A
         * growth that failed (out of memory) leaves the same index: then
         * the stack is dropped, and the reports count it. */
        mlk_lock(&grow_lock);
        grow_locked(ix); /* (nothing to do if another thread grew it meanwhile) */
        struct stack_index *now = __atomic_load_n(&current_index, __ATOMIC_ACQUIRE);
        mlk_unlock(&grow_lock);
        if (now == ix)
            return MLK_NO_STACK;
        ix = now;
    }
}

void mlk_stacks_lock_for_fork(int acquire)
{
    mlk_lock_across_fork(&grow_lock, acquire);
}
