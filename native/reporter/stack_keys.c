/* The reporter's stack keys, in C (libmemleak/daemon/diff.py's KeyTable
 * and FrameResolver own the arrays).  A stack's key is its allocator
 * family (a small code) and its frames as tokens -- one per distinct
 * module-relative address -- so that stacks which differ only in where a
 * module was loaded are one entry.  A report of a million new stacks keys
 * every one of them: in Python that was ~10 us a stack (a tuple of
 * addresses, a dictionary look-up per frame, the key's bytes hashed); here
 * it is a loop over the segment's own frame words.
 *
 * Python keeps the judgement: which module holds an address (the module
 * list, dlclose, Python's frames) and which answers may be cached.  An
 * address is in the cache below only once Python resolved it to a token
 * that cannot depend on when the stack was recorded; a stack with an
 * address not in it is left to Python, which resolves it and caches it. */

#include <stdint.h>
#include <string.h>

#include "report_core.h"

#define EXPORT __attribute__((visibility("default")))

/* Distinct keys: the words of each (kind code, then tokens) in one pool. */
struct mlk_rc_keys {
    int32_t *pool;    /* every key's words, one after another */
    int64_t used;     /* words of pool used */
    int64_t room;     /* words of pool */
    int64_t *start;   /* key id -> its first word in pool */
    int32_t *len;     /* key id -> its words */
    int64_t nkeys;    /* key ids in use: 0 .. nkeys - 1 */
    int64_t key_room; /* entries of start and len */
    int64_t *slots;   /* open addressing on the words: key id + 1, 0 empty */
    int64_t nslots;   /* a power of two, at least twice nkeys */
};

/* Return addresses already resolved to a token, for good. */
struct mlk_rc_addrs {
    uint64_t *addr;   /* open addressing: the address (0: empty) */
    int32_t *token;   /* its token */
    int64_t nslots;   /* a power of two */
    int64_t count;    /* addresses in */
};

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint64_t words_hash(const int32_t *w, int32_t n)
{
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ull;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)w[i]) * 0x100000001B3ull;
    return mix(h);
}

static int64_t *key_slot(const struct mlk_rc_keys *k, const int32_t *w, int32_t n)
{
    uint64_t mask = (uint64_t)k->nslots - 1;
    for (uint64_t i = words_hash(w, n) & mask;; i = (i + 1) & mask) {
        int64_t id = k->slots[i] - 1;
        if (id < 0 || (k->len[id] == n && !memcmp(k->pool + k->start[id], w, (size_t)n * sizeof *w)))
            return &k->slots[i];
    }
}

/* The key id of these words, made if new.  -1: no room (the caller grows
 * the pool, the ids' arrays or the slots, and asks again). */
EXPORT int64_t mlk_rc_key_intern(struct mlk_rc_keys *k, const int32_t *w, int32_t n)
{
    int64_t *slot = key_slot(k, w, n);
    if (*slot)
        return *slot - 1;
    if (k->used + n > k->room || k->nkeys >= k->key_room || 2 * (k->nkeys + 1) > k->nslots)
        return -1;
    int64_t id = k->nkeys++;
    memcpy(k->pool + k->used, w, (size_t)n * sizeof *w);
    k->start[id] = k->used;
    k->len[id] = n;
    k->used += n;
    *slot = id + 1;
    return id;
}

/* Put every key back in fresh (all-zero) slots. */
EXPORT void mlk_rc_keys_rehash(struct mlk_rc_keys *k)
{
    for (int64_t id = 0; id < k->nkeys; id++)
        *key_slot(k, k->pool + k->start[id], k->len[id]) = id + 1;
}

static int64_t addr_find(const struct mlk_rc_addrs *a, uint64_t addr)
{
    uint64_t mask = (uint64_t)a->nslots - 1;
    for (uint64_t i = mix(addr) & mask;; i = (i + 1) & mask)
        if (a->addr[i] == addr || !a->addr[i])
            return (int64_t)i;
}

/* Remember addr's token.  0: no room (the caller doubles the slots,
 * re-puts what it has, and asks again); address 0 is never cached. */
EXPORT int mlk_rc_addr_put(struct mlk_rc_addrs *a, uint64_t addr, int32_t token)
{
    if (!addr)
        return 1;
    int64_t i = addr_find(a, addr);
    if (!a->addr[i]) {
        if (2 * (a->count + 1) > a->nslots)
            return 0;
        a->count++;
        a->addr[i] = addr;
    }
    a->token[i] = token;
    return 1;
}

#define KEY_WORDS_MAX 4096
_Static_assert(KEY_WORDS_MAX == MLK_RC_LINES_MAX, "a key's frames are a text's lines");
#define KIND_VALUES (1 << 17) /* a stack's kind column: MLK_KIND_* | 1 << 16 if cut */

/* Key the stacks at positions[from..n) (stack ids) whose every address
 * is cached: key_of[id] := their key id.  The others -- an address not
 * cached yet, a stack Python must read (special[id]), or more words than
 * KEY_WORDS_MAX -- are added to left[] (up to cap; *nleft counts them all).
 * frames: the segment's frame words; off, depth, kind: each stack's;
 * code_of_kind: a key's first word for each kind value (its family, and
 * 1 << 16 when cut at the depth: KIND_VALUES entries).  Returns n when done, or
 * the index of the position whose key found no room: the caller grows the
 * key table and calls again from there. */
EXPORT int64_t mlk_rc_key_stacks(struct mlk_rc_keys *k, const struct mlk_rc_addrs *a, const uint64_t *frames,
                                 int64_t nframes, const int64_t *off, const int64_t *depth, const int64_t *kind,
                                 const int32_t *code_of_kind,
                                 const uint8_t *special, const int64_t *positions, int64_t from, int64_t n,
                                 int64_t *key_of, int64_t *left, int64_t cap, int64_t *nleft)
{
    int32_t w[KEY_WORDS_MAX + 1];
    for (int64_t p = from; p < n; p++) {
        int64_t id = positions[p];
        int64_t o = off[id], d = depth[id];
        int ok = !special[id] && d >= 0 && d <= KEY_WORDS_MAX && o >= 0 && o + d <= nframes &&
                 kind[id] >= 0 && kind[id] < KIND_VALUES && code_of_kind[kind[id]] >= 0;
        w[0] = ok ? code_of_kind[kind[id]] : 0;
        for (int64_t f = 0; ok && f < d; f++) {
            int64_t i = addr_find(a, frames[o + f]);
            if (!a->addr[i] || a->token[i] < 0) /* not asked yet, or its answer depends on when */
                ok = 0;
            else
                w[f + 1] = a->token[i];
        }
        if (!ok) {
            if (*nleft < cap)
                left[*nleft] = id;
            ++*nleft;
            continue;
        }
        int64_t key = mlk_rc_key_intern(k, w, (int32_t)d + 1);
        if (key < 0)
            return p;
        key_of[id] = key;
    }
    return n;
}

/* The addresses of stacks ids[from..n) not in the cache yet, each once:
 * each is put in with token -1 (asked: keying still passes it by) and
 * added to out[] (*nout of them, cap at most).  Returns n when done, or
 * the index of the stack it stopped at: the cache or out[] needs room. */
EXPORT int64_t mlk_rc_addr_misses(struct mlk_rc_addrs *a, const uint64_t *frames, int64_t nframes,
                                  const int64_t *off, const int64_t *depth, const uint8_t *special,
                                  const int64_t *ids, int64_t from, int64_t n, uint64_t *out, int64_t cap,
                                  int64_t *nout)
{
    for (int64_t p = from; p < n; p++) {
        int64_t id = ids[p], o = off[id], d = depth[id];
        if (special[id] || d < 0 || d > KEY_WORDS_MAX || o < 0 || o + d > nframes)
            continue;
        if (2 * (a->count + d) > a->nslots || *nout + d > cap)
            return p;
        for (int64_t f = 0; f < d; f++) {
            uint64_t addr = frames[o + f];
            int64_t i = addr_find(a, addr);
            if (!addr || a->addr[i])
                continue;
            a->addr[i] = addr;
            a->token[i] = -1;
            a->count++;
            out[(*nout)++] = addr;
        }
    }
    return n;
}

/* The text store's side of mlk_rc_key_texts (text_store.py's TextStore). */
struct mlk_rc_store {
    const int32_t *pool;   /* the store's stored runs of line ids */
    int64_t *key_first;    /* key id -> its run's place in pool, MLK_RC_DERIVED or MLK_RC_NO_TEXT
                            * (report_core.h) */
    int32_t *key_lines;
    int8_t *key_kind;
    int64_t *canon;        /* key id -> the first key with its text (-1: itself) */
    int64_t keys;          /* entries of the four above */
    /* The first key of each distinct text (kind and line ids): open
     * addressing, a word a slot -- the text hash's high half over key id +
     * 1 (0: empty; a million keys' table is 32 MiB, not 64) -- so that
     * texts are compared where they are, not copied. */
    uint64_t *texts;
    int64_t ntexts_slots;  /* a power of two, at least twice ntexts */
    int64_t ntexts;
    const struct mlk_rc_derive *derive; /* where derived runs come from */
};

/* Key's line ids (*n), in pool or made in buf; NULL: no text. */
static const int32_t *lines_of(const struct mlk_rc_store *s, int64_t key, int32_t *buf, int32_t *n)
{
    return mlk_rc_key_line_ids(s->pool, s->key_first, s->key_lines, s->keys, s->derive, key, buf, n);
}

static uint64_t text_hash(int8_t kind, const int32_t *lines, int32_t n)
{
    uint64_t h = (uint64_t)(uint8_t)kind * 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)lines[i]) * 0x100000001B3ull;
    return mix(h) | 1; /* never 0 */
}

/* canon[key] from the texts table, key's text being stored (in pool or
 * out).  0: the table needs room (the caller doubles it and re-puts). */
static int set_canon(struct mlk_rc_store *s, int64_t key)
{
    int32_t mine[MLK_RC_LINES_MAX], theirs[MLK_RC_LINES_MAX], n = 0, m = 0;
    const int32_t *lines = lines_of(s, key, mine, &n);
    if (!lines) { /* (a derived run of a frame not named: never, as add_keys checks) */
        s->canon[key] = -1;
        return 1;
    }
    uint64_t h = text_hash(s->key_kind[key], lines, n), mask = (uint64_t)s->ntexts_slots - 1;
    if (key + 1 > 0xffffffffll) { /* (4G keys: not merged by text) */
        s->canon[key] = -1;
        return 1;
    }
    uint64_t tag = h & ~0xffffffffull, mine_word = tag | (uint64_t)(key + 1);
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        uint64_t *slot = &s->texts[i];
        if (!*slot) {
            if (2 * (s->ntexts + 1) > s->ntexts_slots)
                return 0;
            *slot = mine_word;
            s->ntexts++;
            s->canon[key] = -1;
            return 1;
        }
        int64_t other = (int64_t)(*slot & 0xffffffffull) - 1;
        const int32_t *others = other < s->keys && other != key && (*slot & ~0xffffffffull) == tag
                                    ? lines_of(s, other, theirs, &m) : NULL;
        if (other >= s->keys || s->key_first[other] == MLK_RC_NO_TEXT) { /* (no text now: never, but never read) */
            *slot = mine_word;
            s->canon[key] = -1;
            return 1;
        }
        if (others && s->key_kind[other] == s->key_kind[key] && m == n &&
            !memcmp(others, lines, (size_t)n * sizeof *lines)) {
            s->canon[key] = other;
            return 1;
        }
        if (other == key) {
            s->canon[key] = -1;
            return 1;
        }
    }
}

/* canon[key] for a key whose text Python stored (TextStore.set_key), or
 * for each key of a texts table being rebuilt.  0: no room. */
EXPORT int mlk_rc_text_canon(struct mlk_rc_store *s, int64_t key)
{
    return key >= 0 && key < s->keys ? set_canon(s, key) : 1;
}

/* Give text to the keys key_ids[from..n) whose every frame token has a
 * line (token_line[token] >= 0; -1: a frame of our own, left out; -2: not
 * symbolized yet, or any other value: Python's to judge) and none is a
 * Python frame or the evaluation loop's (python_token: they are merged,
 * in Python): a derived run (MLK_RC_DERIVED: nothing stored), their kind
 * (kind_byte[the key's kind code]) and canon.  The others are added to
 * left[] (*nleft, at most cap).  Returns n when done, or the index of the
 * key that found no room (the texts table full): the caller makes room and
 * calls again. */
EXPORT int64_t mlk_rc_key_texts(const struct mlk_rc_keys *k, const int64_t *key_ids, int64_t from, int64_t n,
                                const int32_t *token_line, const uint8_t *python_token, int64_t ntokens,
                                const int8_t *kind_byte, int64_t nkinds, struct mlk_rc_store *s, int64_t *left,
                                int64_t cap, int64_t *nleft)
{
    for (int64_t p = from; p < n; p++) {
        int64_t key = key_ids[p];
        int ok = key >= 0 && key < k->nkeys && key < s->keys && k->len[key] >= 1 &&
                 k->len[key] <= KEY_WORDS_MAX + 1;
        const int32_t *words = ok ? k->pool + k->start[key] : NULL;
        ok = ok && words[0] >= 0 && words[0] < nkinds;
        int32_t lines = 0;
        for (int32_t i = 1; ok && i < k->len[key]; i++) {
            int32_t t = words[i];
            int32_t l = t >= 0 && t < ntokens && !python_token[t] ? token_line[t] : -2;
            if (l >= 0)
                lines++;
            else if (l != -1)
                ok = 0;
        }
        if (!ok) {
            if (*nleft < cap)
                left[*nleft] = key;
            ++*nleft;
            continue;
        }
        if (2 * (s->ntexts + 1) > s->ntexts_slots)
            return p;
        s->key_first[key] = MLK_RC_DERIVED;
        s->key_lines[key] = lines;
        s->key_kind[key] = kind_byte[words[0]];
        set_canon(s, key); /* (room checked above) */
    }
    return n;
}

/* The frame tokens of keys key_ids[from..n) that have no line yet
 * (token_line -2), each once: marked -4 (asked) and added to out[]
 * (*nout, cap at most).  Returns n when done, or the index of the key
 * whose tokens found out[] full. */
EXPORT int64_t mlk_rc_key_tokens_unnamed(const struct mlk_rc_keys *k, const int64_t *key_ids, int64_t from,
                                         int64_t n, int32_t *token_line, int64_t ntokens, int32_t *out,
                                         int64_t cap, int64_t *nout)
{
    for (int64_t p = from; p < n; p++) {
        int64_t key = key_ids[p];
        if (key < 0 || key >= k->nkeys)
            continue;
        if (*nout + k->len[key] > cap)
            return p;
        const int32_t *words = k->pool + k->start[key];
        for (int32_t i = 1; i < k->len[key]; i++)
            if (words[i] >= 0 && words[i] < ntokens && token_line[words[i]] == -2) {
                token_line[words[i]] = -4;
                out[(*nout)++] = words[i];
            }
    }
    return n;
}

/* Put the first key of each text (canon -1, with text) in fresh, larger
 * (all-zero) texts slots.  0: still no room. */
EXPORT int mlk_rc_texts_rebuild(struct mlk_rc_store *s)
{
    s->ntexts = 0;
    for (int64_t key = 0; key < s->keys; key++)
        if (s->key_first[key] != MLK_RC_NO_TEXT && s->canon[key] == -1 && !set_canon(s, key))
            return 0;
    return 1;
}

/* Where a newly published stack's words are (segment.py's columns). */
struct mlk_rc_learn {
    const int64_t *words;      /* the segment's stack entries, `per` words each */
    int64_t per, w_state, w_frames, w_epochs, w_flags;
    const uint64_t *frames;    /* the segment's frame words */
    int64_t frames_used;       /* as read before the entries' states */
    int64_t max_depth;
    uint32_t ready;            /* MLK_STACK_READY */
    uint64_t cut_flag;         /* MLK_STACK_CUT, in the flags word */
    const uint8_t *ordinary;   /* kind -> 1: nothing for Python to note (64 kinds) */
    int tag_shift;             /* a Python stack's first word >> tag_shift == tag_native */
    uint64_t tag_native;
    int64_t *kind, *off, *epoch, *depth; /* the columns, by stack id */
    uint8_t *ok;
};

/* segment.py's _fill for stacks first..n-1 that are ready, whole (not
 * cut), of an ordinary kind, without Python frames and plainly in bounds:
 * their columns, and ok.  The others -- not ready yet, or anything Python
 * must look at or count -- are written to others[] (all of them: cap is
 * n - first).  Returns how many others. */
EXPORT int64_t mlk_rc_learn_stacks(const struct mlk_rc_learn *l, int64_t first, int64_t n, int64_t *others)
{
    int64_t found = 0;
    for (int64_t i = first; i < n; i++) {
        const int64_t *w = l->words + i * l->per;
        uint64_t state = (uint64_t)w[l->w_state];
        int64_t depth = (int64_t)(state >> 32 & 0xffff), kind = (int64_t)(state >> 48 & 0xffff);
        int64_t off = w[l->w_frames];
        int plain = (uint32_t)state == l->ready && kind < 64 && l->ordinary[kind] && depth <= l->max_depth &&
                    off >= 0 && off + depth <= l->frames_used && !((uint64_t)w[l->w_flags] & l->cut_flag) &&
                    !(depth && l->frames[off] >> l->tag_shift == l->tag_native);
        if (!plain) {
            others[found++] = i;
            continue;
        }
        l->kind[i] = kind;
        l->off[i] = off;
        l->epoch[i] = (int64_t)((uint64_t)w[l->w_epochs] & 0xffffffff);
        l->depth[i] = depth;
        l->ok[i] = 1;
    }
    return found;
}
