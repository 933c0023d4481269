"""Stack keys and frame tokens for the reporter's lifetime, kept in arrays
C reads and grows through (native/reporter/stack_keys.c): a report of a
million new stacks keys them in one C loop over the segment's frames
instead of a Python step per frame.

A frame's *token* is a small int per distinct frame (module path and
offset, a bare address, or a Python frame); a stack's *key* is its
allocator family's code and its frames' tokens, and its *key id* a small
int per distinct key.  Both are kept across module-list changes, so caches
by token or key id stay valid."""

from array import array

from libmemleak.daemon.report_core import ffi, lib, zeros

ffi.cdef("""
struct mlk_rc_keys { int32_t *pool; int64_t used, room; int64_t *start; int32_t *len; int64_t nkeys, key_room;
                     int64_t *slots; int64_t nslots; };
struct mlk_rc_addrs { uint64_t *addr; int32_t *token; int64_t nslots, count; };
int64_t mlk_rc_key_intern(struct mlk_rc_keys *, const int32_t *, int32_t);
void mlk_rc_keys_rehash(struct mlk_rc_keys *);
int mlk_rc_addr_put(struct mlk_rc_addrs *, uint64_t, int32_t);
int64_t mlk_rc_addr_misses(struct mlk_rc_addrs *, const uint64_t *, int64_t, const int64_t *, const int64_t *,
                           const uint8_t *, const int64_t *, int64_t, int64_t, uint64_t *, int64_t, int64_t *);
struct mlk_rc_store { const int32_t *pool; int64_t *key_first; int32_t *key_lines; int8_t *key_kind;
                      int64_t *canon; int64_t keys; uint64_t *texts; int64_t ntexts_slots, ntexts;
                      const struct mlk_rc_derive *derive; };
int64_t mlk_rc_key_texts(const struct mlk_rc_keys *, const int64_t *, int64_t, int64_t, const int32_t *,
                         const uint8_t *, int64_t, const int8_t *, int64_t, struct mlk_rc_store *,
                         int64_t *, int64_t, int64_t *);
int mlk_rc_text_canon(struct mlk_rc_store *, int64_t);
int mlk_rc_texts_rebuild(struct mlk_rc_store *);
int64_t mlk_rc_key_tokens_unnamed(const struct mlk_rc_keys *, const int64_t *, int64_t, int64_t, int32_t *,
                                  int64_t, int32_t *, int64_t, int64_t *);
struct mlk_rc_learn { const int64_t *words; int64_t per, w_state, w_frames, w_epochs, w_flags;
                      const uint64_t *frames; int64_t frames_used, max_depth; uint32_t ready; uint64_t cut_flag;
                      const uint8_t *ordinary; int tag_shift; uint64_t tag_native;
                      int64_t *kind, *off, *epoch, *depth; uint8_t *ok; };
int64_t mlk_rc_learn_stacks(const struct mlk_rc_learn *, int64_t, int64_t, int64_t *);
int64_t mlk_rc_key_stacks(struct mlk_rc_keys *, const struct mlk_rc_addrs *, const uint64_t *, int64_t,
                          const int64_t *, const int64_t *, const int64_t *, const int32_t *, const uint8_t *,
                          const int64_t *,
                          int64_t, int64_t, int64_t *, int64_t *, int64_t, int64_t *);
""")


class Bound:
    """C pointers into arrays, released when the block ends (the arrays
    cannot be resized meanwhile)."""

    def __init__(self):
        self.held = []

    def __call__(self, ctype, a):
        self.held.append(ffi.from_buffer(ctype, a))
        return self.held[-1]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for b in self.held:
            ffi.release(b)


class WordTable:
    """Distinct runs of int32 words, each given a small int id in the
    order first seen (mlk_rc_key_intern): stack keys, and the texts of
    keys (TextStore)."""

    def __init__(self):
        self.pool = zeros(1 << 12, "i")   # every run's words, one after another
        self.start = zeros(256)
        self.len = zeros(256, "i")
        self.slots = zeros(512)
        self.count = 0
        self.used = 0

    def intern(self, words):
        """The id of these words (an array('i')), made if new."""
        while True:
            with Bound() as bind:
                k = self.struct(bind)
                got = lib.mlk_rc_key_intern(k, bind("int32_t[]", words), len(words))
                self.sync(k)
            if got >= 0:
                return got
            self.grow(len(words))

    def struct(self, bind):
        return ffi.new("struct mlk_rc_keys *", [bind("int32_t[]", self.pool), self.used, len(self.pool),
                                                bind("int64_t[]", self.start), bind("int32_t[]", self.len),
                                                self.count, len(self.start), bind("int64_t[]", self.slots),
                                                len(self.slots)])

    def sync(self, k):
        """What C changed in the struct k: how much of the arrays is used."""
        self.used, self.count = k.used, k.nkeys

    def grow(self, words):
        """Room for one more run of `words` words (or more)."""
        if self.used + words > len(self.pool):
            # a sixteenth again (by halves, up to half the pool more of zeros
            # were written, so resident, and never used; the idle warm-up
            # keys a batch at a time, so this is how the pool grows), zeros
            # straight in: no temporary array (a
            # large array grows in place: glibc's realloc moves its pages,
            # not its bytes)
            self.pool.frombytes(bytes(4 * max(len(self.pool) // 16, words, 1 << 16)))
        if self.count >= len(self.start):
            more = max(len(self.start) // 8, 4096)  # (an eighth again, as the pool)
            self.start.frombytes(bytes(8 * more))
            self.len.frombytes(bytes(4 * more))
        if 2 * (self.count + 1) > len(self.slots):
            self.slots = zeros(2 * len(self.slots))
            with Bound() as bind:
                lib.mlk_rc_keys_rehash(self.struct(bind))

    def reserve(self, runs, words):
        """Room for `runs` more runs of `words` words in all, made at once:
        a million new keys grown into an eighth at a time were tens of
        copies and rehashes (docs/performance.rst)."""
        if self.used + words > len(self.pool):
            self.pool.frombytes(bytes(4 * (self.used + words - len(self.pool))))
        if self.count + runs > len(self.start):
            more = self.count + runs - len(self.start)
            self.start.frombytes(bytes(8 * more))
            self.len.frombytes(bytes(4 * more))
        size = len(self.slots)
        while 2 * (self.count + runs + 1) > size:
            size *= 2
        if size > len(self.slots):
            self.slots = zeros(size)
            with Bound() as bind:
                lib.mlk_rc_keys_rehash(self.struct(bind))

    def first(self, i):
        return self.pool[self.start[i]]

    def rest(self, i):
        """Run i's words after its first."""
        return self.pool[self.start[i] + 1:self.start[i] + self.len[i]]


class KeyTable:
    def __init__(self):
        self.frames = []        # token -> (module or None, address, (path or None, offset))
        self._tokens = {}       # (path or None, offset) -> token
        self.kinds = []         # kind code -> (kind name ("malloc", ...), cut at the depth)
        self._kind_codes = {}
        self.words = WordTable()  # key id -> its words: kind code, then frame tokens

    @property
    def nkeys(self):
        return self.words.count

    def token(self, module, address):
        pair = (module.path, address - module.base) if module is not None else (None, address)
        t = self._tokens.get(pair)
        if t is None:
            t = self._tokens[pair] = len(self.frames)
            self.frames.append((module, address, pair))
        return t

    def kind_code(self, kind, cut=False):
        """The code a key of this allocator family starts with; a stack cut
        at the depth is another key than a whole one."""
        code = self._kind_codes.get((kind, cut))
        if code is None:
            code = self._kind_codes[(kind, cut)] = len(self.kinds)
            self.kinds.append((kind, cut))
        return code

    def id_of(self, kind, tokens, cut=False):
        """The key id of a stack of this allocator family and frames."""
        return self.words.intern(array("i", [self.kind_code(kind, cut), *tokens]))

    def kind(self, kid):
        """The allocator family of key kid ("malloc", "new", "mmap")."""
        return self.kinds[self.words.first(kid)][0]

    def cut(self, kid):
        """Whether key kid's stack was cut at the configured depth."""
        return self.kinds[self.words.first(kid)][1]

    def tokens(self, kid):
        """The frame tokens of key kid, innermost first (a sequence of ints)."""
        return self.words.rest(kid)

    def key(self, kid):
        """(kind, ((path or None, offset), ...)) and the modules per frame."""
        words, frames = self.tokens(kid), self.frames
        return ((self.kind(kid), tuple([frames[t][2] for t in words])), tuple([frames[t][0] for t in words]))


class AddressCache:
    """Return address -> token, for addresses whose answer cannot depend on
    when the stack was recorded (one module ever held them): what C keys
    stacks by.  Valid for one module list, as the FrameResolver that
    fills it."""

    def __init__(self):
        self.addr = zeros(1 << 10, "Q")
        self.token = zeros(1 << 10, "i")
        self.count = 0

    def struct(self, bind):
        return ffi.new("struct mlk_rc_addrs *", [bind("uint64_t[]", self.addr), bind("int32_t[]", self.token),
                                                 len(self.addr), self.count])

    def put(self, address, token):
        while True:
            with Bound() as bind:
                a = self.struct(bind)
                done = lib.mlk_rc_addr_put(a, address, token)
                self.count = a.count
            if done:
                return
            self._grow()

    def misses(self, columns, ids):
        """The addresses of stacks `ids` (array('q')) not asked about yet,
        each once; they are in the cache from now on, as not known (-1)
        until put()."""
        n, nout, at = len(ids), ffi.new("int64_t *"), 0
        out = zeros(min(1 << 12, 64 * n + 64), "Q")
        while True:
            with Bound() as bind:
                a = self.struct(bind)
                at = lib.mlk_rc_addr_misses(a, bind("uint64_t[]", columns.frames), len(columns.frames),
                                            bind("int64_t[]", columns.off), bind("int64_t[]", columns.depth),
                                            bind("uint8_t[]", columns.special), bind("int64_t[]", ids), at, n,
                                            bind("uint64_t[]", out), len(out), nout)
                self.count = a.count
            if at >= n:
                return out[:nout[0]]
            if len(out) - nout[0] < 4097:
                out.extend(zeros(len(out), "Q"))
            if 2 * (self.count + 4097) > len(self.addr):
                self._grow()

    def _grow(self):
        old = [(a, t) for a, t in zip(self.addr, self.token) if a]  # (-1 tokens too: asked)
        self.addr, self.token, self.count = zeros(2 * len(self.addr), "Q"), zeros(2 * len(self.token), "i"), 0
        with Bound() as bind:
            a = self.struct(bind)
            for address, token in old:
                lib.mlk_rc_addr_put(a, address, token)
            self.count = a.count


KIND_VALUES = 1 << 17  # a stack's kind column: MLK_KIND_* | CUT (stack_keys.c)


def key_stacks(keys, cache, columns, positions, key_of):
    """Key in C the stacks whose ids are `positions` (array('q')) and whose
    every address is cached: key_of[id] := their key id.  Returns the ids
    left for Python.  columns: the segment's KeyColumns."""
    codes = array("i", [-1]) * KIND_VALUES
    # The kinds present: a warm-up batch's own (a set of the whole column
    # at every batch was most of the warm-up's time at a million stacks,
    # which then fell far behind the program: docs/performance.rst).
    for value in set(columns.kind[i] for i in positions) if len(positions) <= 4096 else set(columns.kind):
        if 0 <= value < KIND_VALUES:
            codes[value] = keys.kind_code(columns.kind_name(value & 0xffff), bool(value >> 16))
    n = len(positions)
    left, nleft, at = zeros(n), ffi.new("int64_t *"), 0
    if n > 4096:  # (at most: stacks whose key is known already add nothing; a segment whose stacks
        # overlap -- the program writes it -- is not believed past its frames' words)
        words = sum(map(columns.depth.__getitem__, positions))
        keys.words.reserve(n, n + min(words, len(columns.frames)))
    while True:
        with Bound() as bind:
            k = keys.words.struct(bind)
            at = lib.mlk_rc_key_stacks(k, cache.struct(bind), bind("uint64_t[]", columns.frames),
                                       len(columns.frames), bind("int64_t[]", columns.off),
                                       bind("int64_t[]", columns.depth), bind("int64_t[]", columns.kind),
                                       bind("int32_t[]", codes), bind("uint8_t[]", columns.special),
                                       bind("int64_t[]", positions), at, n, bind("int64_t[]", key_of),
                                       bind("int64_t[]", left), n, nleft)
            keys.words.sync(k)
        if at >= n:
            return left[:nleft[0]]
        keys.words.grow(4097)


def unnamed_tokens(keys, key_ids, token_line):
    """The frame tokens of keys `key_ids` (array('q')) with no line yet
    (token_line -2), each once; they are marked -4 (asked) meanwhile."""
    n, nout, at = len(key_ids), ffi.new("int64_t *"), 0
    out = zeros(min(1 << 12, 64 * n + 64), "i")
    while True:
        with Bound() as bind:
            at = lib.mlk_rc_key_tokens_unnamed(keys.words.struct(bind), bind("int64_t[]", key_ids), at, n,
                                               bind("int32_t[]", token_line), len(token_line),
                                               bind("int32_t[]", out), len(out), nout)
        if at >= n:
            return out[:nout[0]]
        out.extend(zeros(len(out) + 4096, "i"))
