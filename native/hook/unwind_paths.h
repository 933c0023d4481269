/* Each thread's remembered paths.  Included by unwind.c alone,
 * inside its x86-64 part: the walk, its steps and its lookups are one
 * translation unit, so that the steps inline into the loops that run them
 * per frame (split out by duty, not to be compiled apart). */
#ifndef MLK_UNWIND_PATHS_H
#define MLK_UNWIND_PATHS_H

/* ---- remembered paths, per thread ----------------------------------------
 * Where remembering whole walks by their first state does not pay (a
 * thread "resting", above), it is most often because the thread's paths are
 * too many for MEMO_WALKS and share their first states: gcc's cc1 makes 829k
 * allocations from 8.1k distinct stacks, nearly all through the same few
 * allocator wrappers, so its walks differ only from the second or third
 * frame on.  A path is such a walk made short: its first PATH_KEY_STEPS
 * frames and the state after them are its key, and the rest is the list of
 * the stack words the walk read from there on, in the order it read them,
 * with the values it read.  (A saved rbp word is kept only if a later rule
 * computes its CFA from it: other rbp values are whatever the register held
 * and must not make the path differ.)  The rules are a function of the
 * address, so from the same state the walk reads the same words as long as
 * it reads the same values: checking a path is one load and compare per
 * word, in the walk's order, stopping at the first that differs (so no
 * word is read that the walk itself would not read), and a path that holds
 * gives the frames, how the walk ended, and the stack id interned for it --
 * no walk by rules past the key, no hashing and looking up of the stack.
 *
 * Paths sharing a key (the same wrappers called from the same place) sit
 * together in one set, most recently used first.  Paths are replaced in
 * turn; a set entry left naming a replaced path does not match its key.
 * cc1: 99% of its walks are a remembered path (8.6k written for 789k
 * walks; bench/run.py's 9.6M walks: 69k), 4.5% fewer cycles in all by
 * bench/callgrind.py's count.  More than
 * PATH_WAYS paths under one key (tests/programs/manypaths.c: 32) and they
 * push each other out: then the finds fall under MEMO_MIN_FINDS a window
 * and the thread rests from paths as well, walking by the rules alone. */

#define PATH_KEY_STEPS 3
/* 8k sets of 8 ways: 256 KiB, touched as used.  (2k sets overflowed on
 * cc1: three times as many paths written, 97% found instead of 99%.) */
#define PATH_SET_BITS 13
#define PATH_WAYS 8
#define PATH_IDX_BITS 14           /* a set entry: tag bits | path index + 1 */
#define PATH_IDX_MASK ((1u << PATH_IDX_BITS) - 1)
#define PATH_MAX_COUNT PATH_IDX_MASK
#define PATH_WORDS_AT_ONCE 4
#define PATH_BYTES (4u << 20)      /* the most one thread's paths may take */

/* 12 bytes: the lines a check reads are most of its cost (cc1: 8.1k paths,
 * several times the last-level cache). */
struct path_word {
    uint32_t at;                   /* where the walk read it, from the state's sp */
    uint64_t expect;               /* what it read */
} __attribute__((packed));

struct path {
    uint64_t ip[PATH_KEY_STEPS + 1]; /* the key: first frames, and the state's ip after them */
    uint64_t sp, bp;               /* the state's sp and rbp (rbp compared only if bp_in_key) */
    uint32_t generation;           /* rules_generation it was walked under; 0: being written */
    uint32_t id, id_epoch;         /* the stack interned for it (id MLK_NO_STACK: none yet) */
    uint8_t id_kind;
    uint8_t bp_in_key;             /* a rule uses the state's rbp before any saved one is read */
    uint8_t frames;                /* frames of the whole walk */
    uint8_t more;                  /* it stopped at max */
    uint16_t nwords;
    struct path_word word[];       /* 2 x (max - PATH_KEY_STEPS) at most */
} __attribute__((aligned(64)));

struct paths {
    uint32_t count;                /* paths it has room for */
    uint32_t victim;               /* the one the next new path replaces */
    size_t path_size;
    struct payoff payoff;          /* whether paths pay */
    uint32_t sets[1u << PATH_SET_BITS][PATH_WAYS];
    /* then `count` paths of path_size bytes */
};
#define PATHS_HEAD ((sizeof(struct paths) + 63) & ~(size_t)63) /* paths start on a cache line */
#define PATHS_NONE ((struct paths *)1) /* none for this thread (depth too small, or out of memory) */

static inline struct path *path_at(struct paths *pc, uint32_t i)
{
    return (struct path *)((char *)pc + PATHS_HEAD + (size_t)i * pc->path_size);
}

static struct paths *paths_of(struct memo *m)
{
    if (MLK_LIKELY(m->paths != NULL))
        return m->paths;
    if (m->max <= PATH_KEY_STEPS + 1)
        return m->paths = PATHS_NONE; /* no room for a path past its key */
    size_t words = 2 * (size_t)m->max; /* a return address and a saved rbp per step, at most */
    size_t path_size = (sizeof(struct path) + words * sizeof(struct path_word) + 63) & ~(size_t)63;
    size_t count = (PATH_BYTES - PATHS_HEAD) / path_size;
    if (count > PATH_MAX_COUNT)
        count = PATH_MAX_COUNT;
    struct paths *pc = mlk_map_anon(PATHS_HEAD + count * path_size);
    if (!pc)
        return m->paths = PATHS_NONE;
    pc->count = (uint32_t)count;
    pc->path_size = path_size;
    payoff_start(&pc->payoff);
    return m->paths = pc;
}

static const uint64_t path_mul[] = {0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull, 0x27d4eb2f165667c5ull,
                                     0x94d049bb133111ebull};
_Static_assert(PATH_KEY_STEPS <= sizeof path_mul / sizeof path_mul[0], "a multiplier per key frame");

static inline uint64_t path_hash(const uint64_t *ips, uint64_t ip, uint64_t sp)
{
    uint64_t h = sp + ip * 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < PATH_KEY_STEPS; k++)
        h += ips[k] * path_mul[k];
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ h >> 29;
}

/* Whether every stack word path p read (from the state's sp) still holds
 * what it read.  Four at a time -- 4 instructions a word, where a loop's
 * test and step made it 7 (cc1 reads ~13 a walk) -- after the odd ones
 * (nwords % 4) one by one: padding the list to a multiple of four instead
 * made a check read one more of the path's lines as often as not (cc1:
 * +0.7M last-level misses, more than the instructions saved).  In the
 * walk's order, stopping at the first word that differs (the ||s): no
 * word is read that the walk itself would not. */
#define PATH_WORD_HOLDS(w) (*(const uint64_t *)(sp + (w).at) == (w).expect)
static inline int path_holds(const struct path *p, uint64_t sp)
{
    const struct path_word *w = p->word, *end = w + p->nwords;
    switch (p->nwords % PATH_WORDS_AT_ONCE) {
    case 3:
        if (!PATH_WORD_HOLDS(*w))
            return 0;
        w++;
        /* fall through */
    case 2:
        if (!PATH_WORD_HOLDS(*w))
            return 0;
        w++;
        /* fall through */
    case 1:
        if (!PATH_WORD_HOLDS(*w))
            return 0;
        w++;
    }
    for (; w < end; w += PATH_WORDS_AT_ONCE)
        if (!PATH_WORD_HOLDS(w[0]) || !PATH_WORD_HOLDS(w[1]) || !PATH_WORD_HOLDS(w[2]) || !PATH_WORD_HOLDS(w[3]))
            return 0;
    return 1;
}
_Static_assert(PATH_WORDS_AT_ONCE == 4, "path_holds checks four words at a time");

/* The walk from state (ip, sp, bp) through the remembered paths; returns as
 * fast_backtrace does, or PATH_PLAIN: walk by the rules alone. */
#define PATH_PLAIN (-2)
/* (Inline: a call and its register saves were 1% of cc1's cost.) */
static inline __attribute__((always_inline)) int
path_walk(struct paths *pc, struct path **last, uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch,
          uint32_t *known, uint64_t ip, uint64_t sp, uint64_t bp, uint32_t generation)
{
    const uint64_t *rules = cache;
    uint64_t ra_at, bp_at;
    int r, uses_bp;
    if (!payoff_try(&pc->payoff))
        return PATH_PLAIN;
    /* The key: the first frames by the rules. */
    for (int k = 0; k < PATH_KEY_STEPS; k++) {
        ips[k] = ip;
        r = RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp);
        if (r <= 0)
            return r < 0 ? -1 : k + 1;
    }
    uint64_t h = path_hash(ips, ip, sp);
    uint32_t tag = (uint32_t)h & ~PATH_IDX_MASK;
    uint32_t *set = pc->sets[h >> (64 - PATH_SET_BITS)];
    for (int w = 0; w < PATH_WAYS; w++) {
        uint32_t e = set[w];
        if ((e & ~PATH_IDX_MASK) != tag || !(e & PATH_IDX_MASK))
            continue;
        struct path *p = path_at(pc, (e & PATH_IDX_MASK) - 1);
        int same_key = p->generation == generation && p->ip[PATH_KEY_STEPS] == ip && p->sp == sp &&
                       (!p->bp_in_key || p->bp == bp);
        for (int k = 0; k < PATH_KEY_STEPS; k++)
            same_key &= p->ip[k] == ips[k];
        if (!same_key)
            continue;
        if (!path_holds(p, sp))
            continue;
        /* This walk is the path's. */
        for (uint32_t i = 0, moved = e; i <= (uint32_t)w; i++) { /* to the front (not memmove: a call) */
            uint32_t t = set[i];
            set[i] = moved;
            moved = t;
        }
        pc->payoff.finds++;
        if (MLK_LIKELY(p->id != MLK_NO_STACK && p->id_kind == (uint8_t)kind && p->id_epoch == unload_epoch)) {
            *truncated = p->more;
            *known = p->id;
            return p->frames;
        }
        break; /* its frames are walked again, and its id is this walk's */
    }
    /* A new path (or one whose frames are wanted): the rest of the walk by
     * the rules, written down in the slot of the path it replaces (unusable
     * meanwhile).  Which saved rbp words a later rule used is known only at
     * the end: `used` has a bit per word. */
    struct path *p = path_at(pc, pc->victim);
    uint64_t ip_at_key = ip, sp_at_key = sp, bp_at_key = bp;
    uint64_t used[(2 * MLK_MAX_DEPTH + 63) / 64] = {0};
    int nw = 0, last_bp_word = -1, bp_used_first = 0, n = PATH_KEY_STEPS;
    int keep = 1; /* every word within 4 GiB above the state's sp */
    p->generation = 0;
    for (;; n++) {
        if (n >= max) {
            *truncated = 1;
            break;
        }
        ips[n] = ip;
        r = RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp);
        if (MLK_UNLIKELY(uses_bp)) { /* the rbp before this step's: the state's, or the last saved one read */
            if (last_bp_word < 0)
                bp_used_first = 1;
            else
                used[last_bp_word / 64] |= 1ull << (last_bp_word % 64);
        }
        if (MLK_UNLIKELY(r < 0))
            return -1;
        if (ra_at) {
            keep &= ra_at - sp_at_key < (1ull << 32);
            used[nw / 64] |= 1ull << (nw % 64);
            p->word[nw++] = (struct path_word){(uint32_t)(ra_at - sp_at_key), ip};
        }
        if (bp_at) {
            keep &= bp_at - sp_at_key < (1ull << 32);
            last_bp_word = nw;
            p->word[nw++] = (struct path_word){(uint32_t)(bp_at - sp_at_key), bp};
        }
        if (r == 0) {
            n++;
            break;
        }
    }
    if (!keep)
        return n;
    /* (Saved rbp words no rule used are not the path's: the register's
     * value then is whatever the code kept in it, and must not matter.) */
    int kept = 0;
    for (int i = 0; i < nw; i++)
        if (used[i / 64] >> (i % 64) & 1)
            p->word[kept++] = p->word[i];
    p->nwords = (uint16_t)kept;
    for (int k = 0; k < PATH_KEY_STEPS; k++)
        p->ip[k] = ips[k];
    p->ip[PATH_KEY_STEPS] = ip_at_key;
    p->sp = sp_at_key;
    p->bp = bp_at_key;
    p->bp_in_key = (uint8_t)bp_used_first;
    p->frames = (uint8_t)n;
    p->more = (uint8_t)*truncated;
    p->id = MLK_NO_STACK;
    p->generation = generation;
    for (int w = PATH_WAYS - 1; w > 0; w--)
        set[w] = set[w - 1];
    set[0] = tag | (pc->victim + 1);
    pc->victim = pc->victim + 1 < pc->count ? pc->victim + 1 : 0;
    *last = p;
    return n;
}


#endif
