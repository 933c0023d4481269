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
 * allocator wrappers, so its walks differ only from the second frame on.
 * A path is such a walk made short: its first PATH_KEY_STEPS frame(s) and
 * the state after them are its key, and the rest is the list of
 * the stack words the walk read from there on, in the order it read them
 * (where, and a fingerprint of the values it read).  (A saved rbp word is
 * kept only if a later rule computes its CFA from it: other rbp values are
 * whatever the register held and must not make the path differ.)  The
 * rules are a function of the address, so from the same state the walk
 * reads the same words as long as it reads the same values: checking a
 * path is one load and mix per word (see struct path for why every word
 * is read, and when that is safe), and a path that holds gives the frames,
 * how the walk ended, and the stack id interned for it -- no walk by rules
 * past the key, no hashing and looking up of the stack.
 *
 * Paths sharing a key (the same wrapper called from the same place) sit
 * together in one set, a new one first and a found one moved a place
 * forward (path_find: by how often they are found).  Paths are replaced in
 * turn; a set entry left naming a replaced path does not match its key.
 * cc1: 99% of its walks are a remembered path (~7k written for 789k
 * walks), 4.5% fewer cycles in all by bench/callgrind.py's count.  More
 * than PATH_WAYS paths under one key (tests/programs/manypaths.c: 128) and
 * they push each other out: then the finds fall under MEMO_MIN_FINDS a
 * window and the thread rests from paths as well, walking by the rules
 * alone.
 *
 * One frame of key, not three (session 41): each key step is a rule
 * lookup, and past the allocator's caller -- whose rules are a handful,
 * always cached -- they are the program's call sites, cold in the rule
 * cache (cc1: ~25 cycles of misses and ~40 instructions an allocation).  A
 * shorter key holds more paths (cc1: 4.0k keys of one frame for 5.6k of
 * three, up to ~30 paths), so a set has 32 ways, two cache lines; a set's
 * front line holds nearly every find.  cc1: -31M est. cycles (-0.8%), and
 * fewer paths written (15.5k walks by the rules, 18.1k before).  With 8 or
 * 16 ways a key of one frame overflowed its set (+63M, -18M); a key of no
 * frame (the allocator's caller's state alone) holds too many (+86M). */

#define PATH_KEY_STEPS 1
/* 2k sets of 32 ways: 256 KiB, touched as used. */
#define PATH_SET_BITS 11
#define PATH_WAYS 32
#define PATH_IDX_BITS 14           /* a set entry: tag bits | path index + 1 */
#define PATH_IDX_MASK ((1u << PATH_IDX_BITS) - 1)
#define PATH_MAX_COUNT PATH_IDX_MASK
#define PATH_BYTES (4u << 20)      /* the most one thread's paths may take */

/* A path is checked by a fingerprint of the words it read
 * (words_fingerprint), not by their values one by one: the values were
 * most of its size (cc1: a path of ~13 words took 4 cache lines, and its
 * checks caused 3.0M of the run's 5.6M last-level read misses), and the
 * positions alone, 2 bytes a word, leave a path of up to 13 words on one
 * line.  The fingerprint starts from the key's hash (path_hash, a
 * bijection of each key frame: the set and its tag name them with 29 bits
 * only) mixed with the rules' generation and the path's owner
 * (path_gen_owner): compared through the fingerprint rather than kept as
 * a field, they leave the head small: 32 bytes with the link to the next
 * path (see path_find), so up to 16 words are on its first line (cc1's
 * paths, keyed by one frame, have 15-16; when they had ~13.5 and 10 fitted,
 * they spilled onto a second line half the time: 368k last-level misses).
 *
 * Every word is read, not only up to the first that differs as the walk
 * would: so a path is kept only where every word it reads lies on this
 * thread's own stack, between the state's sp and the stack's known end
 * (unwind_fp.c's extent; none known, as on a signal stack: no path), and
 * is used only by the thread that wrote it (owner: its memo's, counted up
 * each time a thread takes the memo, and asked with the sp before any
 * word is read: path_sp) from exactly that sp -- whose words up to that
 * end stay mapped for the thread's life. */
#define PATH_MORE 0x80
/* (Bits 32-39: the product's middle, where the words' low bits -- those
 * in which return addresses differ -- have been mixed in.) */
#define PATH_LEAD_CHECK(h) ((uint8_t)((h) >> 32))
#define PATH_HEAD_BYTES 32 /* (16 words on its first line) */
struct path {
    uint64_t sp;                   /* the state's sp after the key, with its owner (path_sp; compared
                                      exactly); 0: being written */
    uint64_t check;                /* the fingerprint of the key's frames, generation and owner, rbp if
                                      bp_in_key, the words (path_check_start, then words_fingerprint) */
    uint32_t id, id_epoch;         /* the stack interned for it (id MLK_NO_STACK: none yet) */
    uint8_t id_kind;
    uint8_t bp_in_key;             /* a rule uses the state's rbp before any saved one is read */
    uint8_t frames_more;           /* frames of the whole walk, | PATH_MORE if it stopped at max */
    uint8_t lead;                  /* PATH_LEAD_CHECK of the fingerprint after WORDS_LEAD words */
    uint8_t nwords;                /* (at most 2 * (MLK_MAX_DEPTH - PATH_KEY_STEPS)) */
    uint8_t first;                 /* the low byte of the first word (see path_find) */
    uint16_t next;                 /* the path found right after it the last time (index + 1), or 0 */
    uint16_t at[];                 /* where each word is, in eighths above sp, in the walk's order (a
                                      path of none: at[0] is 0, its first byte the word at sp's) */
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct path, at) == PATH_HEAD_BYTES, "a path's head, then its words");
_Static_assert(PATH_MAX_COUNT <= UINT16_MAX, "a path's next in 16 bits");

struct paths {
    uint32_t count;                /* paths it has room for */
    uint32_t victim;               /* the one the next new path replaces */
    size_t path_size;
    struct payoff payoff;          /* whether paths pay */
    uint32_t last;                 /* the path found or written last (index + 1), or 0 */
    uint32_t sets[1u << PATH_SET_BITS][PATH_WAYS];
    /* then `count` paths of path_size bytes */
};
#define PATHS_HEAD ((sizeof(struct paths) + 63) & ~(size_t)63) /* paths start on a cache line */
#define PATHS_NONE ((struct paths *)1) /* none for this thread (depth too small, or out of memory) */

/* What a window of whole walks must find for whole walks to pay.  Against
 * walking by the rules alone, one walk in MEMO_MIN_FINDS (bar_alone).  But
 * once the thread has paths that pay (they exist, and are not resting), a
 * window of whole walks competes with them: each walk it does not find is
 * a walk by the rules, written down (cc1: ~2,500 instructions), where a
 * path found costs ~500 and a whole walk found ~100 -- so whole walks pay
 * only if nearly all are found, a window that finds fewer sends the thread
 * back to its paths, and it rests longer before it tries again (its paths,
 * not the rules, carry it meanwhile).  cc1's windows found 1 walk in 8
 * often enough that it kept trying: 32.8k of its 837k allocations were
 * walked by the rules in such windows; now 4.2k. */
static const struct payoff_bar bar_beside_paths = {MEMO_WINDOW * 3 / 4, MEMO_REST_MAX * 8};
static inline const struct payoff_bar *whole_walks_bar(const struct memo *m)
{
    const struct paths *pc = m->paths;
    return pc > PATHS_NONE && !pc->payoff.resting ? &bar_beside_paths : &bar_alone;
}

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
    /* A return address and a saved rbp per step past the key, at most:
     * room for every word a walk of m->max frames reads (path_walk is
     * given only this memo's max). */
    size_t words = 2 * (size_t)(m->max - PATH_KEY_STEPS);
    size_t path_size = (PATH_HEAD_BYTES + words * sizeof(uint16_t) + 63) & ~(size_t)63;
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

/* A thread takes the memo, and with it these paths, as their owner `owner`.
 * A path names its owner with 16 bits only (path_sp), so every 65,536
 * owners the paths are dropped: else one written by the owner as many
 * owners before could be taken for this thread's from the same sp --
 * after a server's thread per request, say, whose stacks glibc reuses --
 * and its words read up to that thread's stack end, not this one's.
 * Dropped by emptying the sets: a path is reached only through its set
 * entry or a link from a path reached since (not by clearing each path's
 * sp, which would touch all 4 MiB of them). */
static void paths_handed_over(struct paths *pc, uint32_t owner)
{
    if (pc <= PATHS_NONE)
        return;
    pc->last = 0; /* (the other thread's last path) */
    if ((uint16_t)owner == 0)
        memset(pc->sets, 0, sizeof pc->sets);
}

/* (Odd, so each product is a bijection of its frame; below 2^31, so that
 * x86-64 multiplies by an immediate, with no 10-byte load of a constant
 * into a register first: the mix below spreads them over all the bits.) */
static const uint64_t path_mul[] = {0x27d4eb2full, 0x165667b1ull, 0x5bd1e995ull, 0x61c88647ull};
_Static_assert(PATH_KEY_STEPS <= sizeof path_mul / sizeof path_mul[0], "a multiplier per key frame");

static inline uint64_t path_hash(const uint64_t *ips, uint64_t ip, uint64_t sp)
{
    uint64_t h = sp + ip * 0x7feb352dull;
    for (int k = 0; k < PATH_KEY_STEPS; k++)
        h += ips[k] * path_mul[k];
    /* (The set is named by the top bits, which the multiplication fills
     * from all the others; the tag's, bits 14-31, come from the sum's low
     * half and -- by the shift -- its high one.) */
    h ^= h >> 31;
    return h * 0xbf58476d1ce4e5b9ull;
}

/* A key's hash (path_hash) names its set, and its tag in the set. */
static inline uint32_t *path_set_of(struct paths *pc, uint64_t h)
{
    return pc->sets[h >> (64 - PATH_SET_BITS)];
}
#define PATH_TAG(h) ((uint32_t)(h) & ~PATH_IDX_MASK)

/* What a path is compared with besides its words: the rules' generation it
 * was walked under, and whose it is (see struct path). */
static inline uint64_t path_gen_owner(const struct memo *m, uint32_t generation)
{
    return (uint64_t)generation << 32 | m->owner;
}

/* A path's sp as kept and compared: the state's sp with the low 16 bits of
 * its owner above an address's 48 (by xor: still exact for one owner), so
 * that a path written by the thread that had the memo before is turned
 * away before any of its words is read -- their places, up to that
 * thread's stack end, may lie beyond this thread's.  (The fingerprint,
 * which has the whole owner, turned it away only after reading them all.) */
static inline uint64_t path_sp(uint64_t sp, uint64_t gen_owner)
{
    return sp ^ (uint64_t)(uint16_t)gen_owner << 48;
}

/* Where a path's fingerprint starts: the key's hash h, then gen_owner,
 * then the state's rbp where the path's first rule uses it. */
static inline uint64_t path_check_start(uint64_t h, uint64_t gen_owner, int bp_in_key, uint64_t bp)
{
    uint64_t c = words_mix1(h, gen_owner);
    return bp_in_key ? words_mix1(c, bp) : c;
}

/* The first PATH_KEY_STEPS frames from state (*ip, *sp, *bp), by the rules,
 * into ips, and the state after them: PATH_KEY_WHOLE; else the walk ended
 * within them, with that many frames, or -1 (libgcc's turn). */
#define PATH_KEY_WHOLE (MLK_MAX_DEPTH + 1)
static inline __attribute__((always_inline)) int path_key(uint64_t *ips, uint64_t *ipp, uint64_t *spp,
                                                          uint64_t *bpp)
{
    const uint64_t *rules = cache;
    uint64_t ip = *ipp, sp = *spp, bp = *bpp, ra_at, bp_at;
    int uses_bp; /* (the key's steps are the path's, whatever rbp they used) */
    /* (Unrolled: the key's frames then stay in registers for path_hash,
     * where a loop kept them in memory and moved its state around.) */
#pragma GCC unroll 4
    for (int k = 0; k < PATH_KEY_STEPS; k++) {
        ips[k] = ip;
        int r = RULE_STEP(ip, sp, bp, ra_at, bp_at, uses_bp);
        if (r <= 0)
            return r < 0 ? -1 : k + 1;
    }
    (void)uses_bp;
    *ipp = ip, *spp = sp, *bpp = bp;
    return PATH_KEY_WHOLE;
}

/* Whether path p, of this thread's paths, is the walk from state (sp, bp)
 * after a key whose check is key_check (path_find's), by its words. */
static inline __attribute__((always_inline)) int path_holds(const struct path *p, uint64_t kept_sp,
                                                            uint64_t key_check, uint64_t sp, uint64_t bp)
{
    /* (Paths of one key differ most often in the word read first -- the
     * caller after the key's frame.  A byte of that word rules most of them
     * out with one load.) */
    if (p->sp != kept_sp || p->first != (uint8_t)*(const uint64_t *)(sp + (uint64_t)p->at[0] * 8))
        return 0;
    uint64_t c = p->bp_in_key ? words_mix1(key_check, bp) : key_check;
    const uint16_t *at = p->at;
    unsigned n = p->nwords;
    /* (And a path whose first word's byte holds may still differ further
     * on: cc1, keyed by one frame, computed 0.44 wrong fingerprints a
     * find, whole, ~15 words each; 98% of them differed within the first
     * 8 words.  The fingerprint so far, checked after them, turns those
     * away: -12M est. cycles.) */
    if (n >= WORDS_LEAD) {
        c = words_lead(c, at, sp);
        if (PATH_LEAD_CHECK(c) != p->lead)
            return 0;
        at += WORDS_LEAD, n -= WORDS_LEAD;
    }
    return words_fingerprint(c, at, n, sp) == p->check;
}

/* Path idx (index + 1) was found by a look through its set, or written:
 * it is the last one's next (not its own: a walk whose path's id is not
 * the one wanted finds it twice, mlk_walk_known_path's look and then
 * path_walk's), and the last one now. */
static inline void path_follows(struct paths *pc, uint32_t idx)
{
    if (pc->last && pc->last != idx)
        path_at(pc, pc->last - 1)->next = (uint16_t)idx;
    pc->last = idx;
}

/* The path of the key ips[0..PATH_KEY_STEPS-1] with state (ip, sp, bp)
 * after it whose words all hold (gen_owner: path_gen_owner's); or NULL.
 * *h_out: the key's hash (where a new path of this key goes).
 *
 * A program's allocations come in sequences that repeat (cc1: the path
 * found after a path was the one found after it the time before 86% of
 * the time), so the path that came after the last one found is looked at
 * first: when it holds, neither the set's line nor another path's is read
 * (cc1: -56M est. cycles, -1.5%; a find read the set's line and 1.83
 * paths' before).  Else the key's set is looked through, and the path
 * found is moved a place forward in it and becomes the last one's next. */
static inline __attribute__((always_inline)) struct path *
path_find(struct paths *pc, const uint64_t *ips, uint64_t ip, uint64_t sp, uint64_t bp, uint64_t gen_owner,
          uint64_t *h_out)
{
    uint64_t h = path_hash(ips, ip, sp);
    uint64_t key_check = words_mix1(h, gen_owner); /* (h: a bijection of each key frame, see path_hash) */
    uint64_t kept_sp = path_sp(sp, gen_owner);
    *h_out = h;
    /* (The links are hints: a path replaced since, or another owner's, or
     * another key's, is turned away by its check as any other.) */
    if (pc->last) {
        uint32_t next = path_at(pc, pc->last - 1)->next;
        struct path *p = next ? path_at(pc, next - 1) : NULL;
        if (p && path_holds(p, kept_sp, key_check, sp, bp)) {
            pc->last = next;
            return p;
        }
    }
    uint32_t tag = PATH_TAG(h);
    uint32_t *set = path_set_of(pc, h);
    for (int w = 0; w < PATH_WAYS; w++) {
        uint32_t e = set[w];
        if ((e & ~PATH_IDX_MASK) != tag || !(e & PATH_IDX_MASK))
            continue;
        struct path *p = path_at(pc, (e & PATH_IDX_MASK) - 1);
        if (!path_holds(p, kept_sp, key_check, sp, bp))
            continue;
        if (w) { /* one place forward, not to the front: two paths of one key in turn
                    each had the other's fingerprint computed first (most finds are the
                    front's already) */
            set[w] = set[w - 1];
            set[w - 1] = e;
        }
        path_follows(pc, e & PATH_IDX_MASK);
        return p;
    }
    return NULL;
}

/* The walk from state (ip, sp, bp) through the remembered paths; returns as
 * fast_backtrace does, or PATH_PLAIN: walk by the rules alone. */
#define PATH_PLAIN (-2)
/* (Inline: a call and its register saves were 1% of cc1's cost.) */
static inline __attribute__((always_inline)) int
path_walk(struct memo *m, struct paths *pc, uint64_t *ips, int max, int *truncated, int kind, uint32_t unload_epoch,
          uint32_t *known, uint64_t ip, uint64_t sp, uint64_t bp, uint32_t generation)
{
    const uint64_t *rules = cache;
    uint64_t ra_at, bp_at;
    int r, uses_bp;
    if (!payoff_try(&pc->payoff, &bar_alone))
        return PATH_PLAIN;
    r = path_key(ips, &ip, &sp, &bp);
    if (r != PATH_KEY_WHOLE)
        return r;
    uint64_t h;
    struct path *found = path_find(pc, ips, ip, sp, bp, path_gen_owner(m, generation), &h);
    if (found) {
        pc->payoff.counts += PAYOFF_FIND;
        if (MLK_LIKELY(found->id != MLK_NO_STACK && found->id_kind == (uint8_t)kind &&
                       found->id_epoch == unload_epoch)) {
            *truncated = (found->frames_more & PATH_MORE) != 0;
            *known = found->id;
            return found->frames_more & ~PATH_MORE;
        }
        /* (else its frames are walked again, and its id is this walk's) */
    }
    /* A new path (or one whose frames are wanted): the rest of the walk by
     * the rules, written down in the slot of the path it replaces (unusable
     * meanwhile).  Which saved rbp words a later rule used is known only at
     * the end: `used` has a bit per word. */
    struct path *p = path_at(pc, pc->victim);
    uint64_t sp_at_key = sp, bp_at_key = bp;
    uint64_t used[(2 * MLK_MAX_DEPTH + 63) / 64] = {0};
    uint64_t value[2 * MLK_MAX_DEPTH];
    uint64_t reach = 0; /* the furthest word above the state's sp */
    int nw = 0, last_bp_word = -1, bp_used_first = 0, n = PATH_KEY_STEPS;
    p->sp = 0; /* (found by no key until written whole) */
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
        /* (Below the state's sp, or in no eighth that fits: reach says so.) */
        if (ra_at) {
            reach |= ra_at - sp_at_key;
            used[nw / 64] |= 1ull << (nw % 64);
            p->at[nw] = (uint16_t)((ra_at - sp_at_key) / 8);
            value[nw++] = ip;
        }
        if (bp_at) {
            reach |= bp_at - sp_at_key;
            last_bp_word = nw;
            p->at[nw] = (uint16_t)((bp_at - sp_at_key) / 8);
            value[nw++] = bp;
        }
        if (r == 0) {
            n++;
            break;
        }
    }
    /* Kept only where each word is an eighth that fits, and the furthest
     * lies on this thread's stack (see struct path). */
    uint64_t furthest = 0;
    for (int i = 0; i < nw; i++)
        furthest = p->at[i] > furthest ? p->at[i] : furthest;
    uint64_t end = mlk_fp_stack_end(sp_at_key);
    if ((reach & 7) || reach >= 8ull << 16 || !end || sp_at_key >= end || (end - sp_at_key) / 8 <= furthest)
        return n;
    /* (Saved rbp words no rule used are not the path's: the register's
     * value then is whatever the code kept in it, and must not matter.) */
    uint64_t c = path_check_start(h, path_gen_owner(m, generation), bp_used_first, bp_at_key);
    int kept = 0;
    for (int i = 0; i < nw; i++)
        if (used[i / 64] >> (i % 64) & 1) {
            value[kept] = value[i];
            p->at[kept++] = p->at[i];
        }
    _Static_assert(2 * (MLK_MAX_DEPTH - PATH_KEY_STEPS) <= 255, "a path's words counted in a byte");
    if (!kept)
        p->at[0] = 0; /* (room for two words at least: paths_of) */
    p->first = (uint8_t)(kept ? value[0] : *(const uint64_t *)sp_at_key);
    p->nwords = (uint8_t)kept;
    unsigned lead = kept >= WORDS_LEAD ? WORDS_LEAD : 0; /* (as path_find checks it) */
    c = values_fingerprint(c, value, lead);
    p->lead = PATH_LEAD_CHECK(c);
    p->check = values_fingerprint(c, value + lead, (unsigned)kept - lead);
    p->bp_in_key = (uint8_t)bp_used_first;
    _Static_assert(MLK_MAX_DEPTH < PATH_MORE, "a path's frames counted beside its more bit");
    p->frames_more = (uint8_t)(n | (*truncated ? PATH_MORE : 0));
    p->id = MLK_NO_STACK;
    p->next = 0;
    p->sp = path_sp(sp_at_key, path_gen_owner(m, generation)); /* (last: usable from now on) */
    uint32_t *set = path_set_of(pc, h);
    for (int w = PATH_WAYS - 1; w > 0; w--)
        set[w] = set[w - 1];
    set[0] = PATH_TAG(h) | (pc->victim + 1);
    path_follows(pc, pc->victim + 1);
    pc->victim = pc->victim + 1 < pc->count ? pc->victim + 1 : 0;
    m->last_path = p;
    return n;
}


#endif
