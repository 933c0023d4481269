"""The reporter's per-stack loops, in C (native/reporter/report_core.c,
built into libmlkreport.so beside this file): the counters of every stack,
the changed ones merged by key and sorted, the entries written out, the
baseline committed.  Python keeps the judgement (modules, symbols, header).

The arrays passed in and out are `array('q')`/`array('i')` objects and the
segment's own memory; nothing is copied per stack in Python."""

import errno
import os
from array import array
from typing import NamedTuple

import cffi

from libmemleak import reporter_library
from libmemleak.daemon.layout import ffi as layout_ffi

ffi = cffi.FFI()
ffi.include(layout_ffi)
ffi.cdef("""
struct mlk_rc_row { int64_t key, pos, bytes, blocks, live_bytes, live_blocks, samples, allocs,
                    scan_at, touched, touched_changed, slack; };
struct mlk_rc_derive { const int32_t *words; const int64_t *start; const int32_t *len; int64_t nkeys;
                       const int32_t *token_line; int64_t ntokens; };
struct mlk_rc_texts { const char *arena; const int64_t *line_off; const int32_t *pool;
                      const int64_t *key_first; const int32_t *key_lines; const int8_t *key_kind;
                      int64_t keys; const int32_t *since_seq; int32_t depth; const char *kind_text;
                      int32_t table; int64_t inline_rows, permanent_pool, permanent_lines;
                      const int64_t *scans; const struct mlk_rc_derive *derive; };
struct mlk_rc_table { int32_t *key_mark; int64_t nkeys; int32_t *line_mark; int64_t nlines;
                      int32_t stamp, scope_first; };
int64_t mlk_rc_table_render(struct mlk_rc_table *, const struct mlk_rc_row *, int64_t, int64_t,
                            const struct mlk_rc_texts *, char *, int64_t, int64_t *);
int64_t mlk_rc_resources_last(struct mlk_rc_row *, int64_t, const int8_t *, int64_t, int, struct mlk_rc_row *,
                              int64_t);
void mlk_rc_columns(const struct mlk_stack *, const struct mlk_counters *, int64_t, const uint32_t *, int64_t,
                    const uint8_t *, int64_t *, int64_t *, int64_t *, int64_t *, int64_t *, int64_t *, int64_t *,
                    int64_t *);
int64_t mlk_rc_shown(int64_t, const int64_t *, const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                     const int64_t *, const int64_t *);
int64_t mlk_rc_unkeyed(int64_t, const int64_t *, const int64_t *, const int64_t *,
                       const int64_t *, const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                       int64_t *, int64_t);
int64_t mlk_rc_merge(int64_t, const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                     const int64_t *, int64_t, int64_t *, const int64_t *, const int64_t *,
                     const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                     const int64_t *, const int64_t *, const int64_t *, struct mlk_rc_row *, int64_t *);
int64_t mlk_rc_touched(int, uint64_t, const struct mlk_stack *, int64_t, int64_t *, int64_t *, int64_t);
int64_t mlk_rc_merge_same_text(struct mlk_rc_row *, int64_t, const int64_t *, int64_t, int64_t *,
                               int64_t, int64_t *);
int64_t mlk_rc_textless(const struct mlk_rc_row *, int64_t, const int64_t *, int64_t, int64_t *,
                        int64_t);
int64_t mlk_rc_render(const struct mlk_rc_row *, int64_t, int64_t, const struct mlk_rc_texts *,
                      char *, int64_t, int64_t *);
size_t mlk_read_mem(int, uint64_t, void *, size_t);
uint32_t mlk_rc_post_snapshot(struct mlk_header *);
uint32_t mlk_rc_post_scan(struct mlk_header *);
int mlk_rc_claim_reporter(struct mlk_header *, int32_t, int32_t);
struct mlk_world;
struct mlk_scan_totals { int64_t bytes[4], blocks[4]; int64_t heap_blocks, unattributed, root_bytes,
                         heap_bytes_read, threads, phase_ns[4], heuristic_bytes[5],
                         heuristic_blocks[5], before_bytes[4], before_blocks[4];
                         int64_t held_bytes, held_blocks; };
struct mlk_world *mlk_world_stop(int, char *, int);
void mlk_world_resume(struct mlk_world *);
int mlk_world_threads(const struct mlk_world *);
void mlk_world_forget_thread(struct mlk_world *, int);
struct mlk_age_history;
struct mlk_age_history *mlk_age_history_new(void);
void mlk_age_history_free(struct mlk_age_history *);
struct mlk_scan_stacks { const int64_t *off, *depth; int64_t n; const uint64_t *frames; uint64_t nframes; };
int mlk_scan_heap(const struct mlk_world *, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, unsigned,
                  int64_t,
                  int64_t *,
                  struct mlk_scan_totals *, struct mlk_age_history *, uint32_t, int64_t *, int32_t *,
                  const struct mlk_scan_stacks *, int64_t *, int64_t, int64_t *, char *, int);
void mlk_rc_commit(struct mlk_stack *, int64_t, const int64_t *, const int64_t *,
                   const int64_t *, const int64_t *, const int64_t *, const int64_t *);
int64_t mlk_rc_commit_records(int, int64_t, const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                              const int64_t *, const int64_t *, const int64_t *);
""")
try:
    lib = reporter_library(ffi)
except OSError as e:  # the installation is broken: say which file, not a traceback
    raise ImportError(str(e)) from None

ROW_WORDS = ffi.sizeof("struct mlk_rc_row") // 8
SCAN_WORDS = 16  # a scanned row's words apart (MLK_RC_SCAN_WORDS: lost[8], since[8])
COLUMNS = ("live_bytes", "live_blocks", "alloc_count", "alloc_bytes",
           "reported_bytes", "reported_blocks", "reported_allocs", "live_slack")


def read_words(pid, addr, n):
    """n 64-bit words of process pid's memory at addr (zeros where it
    cannot be read: the process is gone, or the page is not mapped)."""
    buf = ffi.new("uint64_t[]", n)
    lib.mlk_read_mem(pid, addr, buf, 8 * n)
    return list(buf)


def _q(a):
    return ffi.from_buffer("int64_t[]", a)


def _as_q(seq):
    return seq if isinstance(seq, array) and seq.typecode == "q" else array("q", seq)


def zeros(n, typecode="q"):
    return array(typecode, [0]) * n  # (one C loop: from bytes(n * size) it was two allocations and a copy)


def extend_to(a, n, fill=-1):
    """Lengthen array a to n entries of `fill` (never shortens)."""
    if n > len(a):
        a.extend(array(a.typecode, [fill]) * (n - len(a)))


def _collected(fill):
    """The list of ints a C function writes: fill(out, cap) writes at most
    cap of them into out and returns how many there are."""
    cap = 1024
    while True:
        out = zeros(cap)
        found = fill(_q(out), cap)
        if found <= cap:
            return out[:found].tolist()
        cap = found


def positions_are_ids(ids):
    """True when a snapshot's ids are 0..n-1, so that arrays indexed by
    stack id serve as its per-position columns (the usual case: every
    stack is ok)."""
    return isinstance(ids, range) and ids.start == 0 and ids.step == 1


def columns(stacks_ptr, stripes_ptr, stripe_len, stripes_used_ptr, n, ok):
    """Per-stack counters of stacks 0..n-1 (zeros for those not ok), as a
    dict of array('q') named as in COLUMNS: summed over the counter stripes
    of stripe_len stacks each at stripes_ptr, those *stripes_used_ptr says
    were counted in."""
    cols = {name: zeros(n) for name in COLUMNS}
    lib.mlk_rc_columns(stacks_ptr, stripes_ptr, stripe_len, stripes_used_ptr, n, ffi.from_buffer("uint8_t[]", ok),
                       *[_q(cols[name]) for name in COLUMNS])
    return cols


def commit(stacks_ptr, live_bytes, live_blocks, reported_bytes, reported_blocks, alloc_count,
           reported_allocs):
    """reported := live (and allocations made) in the segment, for stacks
    0..n-1 (positions are ids)."""
    lib.mlk_rc_commit(stacks_ptr, len(live_bytes), _q(live_bytes), _q(live_blocks),
                      _q(reported_bytes), _q(reported_blocks), _q(alloc_count),
                      _q(reported_allocs))


def write_commit_records(fd, ids, live_bytes, live_blocks, reported_bytes, reported_blocks, alloc_count,
                         reported_allocs):
    """What commit() writes, for a snapshot's positions, written to fd as
    records (id, live bytes, blocks, allocations), one per position whose
    baseline moves: how many, or -1 (a write failed)."""
    id_words = ffi.NULL if positions_are_ids(ids) else _q(_as_q(ids))
    cols = [_q(c) for c in (live_bytes, live_blocks, reported_bytes, reported_blocks, alloc_count,
                            reported_allocs)]
    return lib.mlk_rc_commit_records(fd, len(live_bytes), id_words, *cols)


class Changes:
    """The changed stacks of a snapshot, column by column (array('q'))."""

    def __init__(self, live_bytes, live_blocks, reported_bytes, reported_blocks, samples=None,
                 allocs=None, scan=None, age=None, touched=None, slack=None):
        """samples: for a sampled snapshot, the recorded (unscaled) live and
        reported blocks, whose difference each row carries; allocs: the
        allocation counts now and at the previous report, likewise; scan:
        a scan's split of each position's live blocks, 8 words a position
        (bytes, blocks of each category), or None; age: likewise, the blocks
        of each position live since each earlier scan (8 buckets); touched:
        the bytes of each position's mappings ever touched, now and at the
        previous report (a position whose count moved is an entry); slack:
        each position's live slack, or None where not measured."""
        self.scan = scan
        self.age = age
        self.touched = [_as_q(c) for c in touched] if touched else None
        self.cols = [_as_q(c) for c in (live_bytes, live_blocks, reported_bytes, reported_blocks)]
        self.samples = [_as_q(c) for c in samples] if samples else None
        self.allocs = [_as_q(c) for c in allocs] if allocs else None
        self.slack = _as_q(slack) if slack is not None else None
        self.n = len(self.cols[0])

    def unkeyed(self, key_of):
        """Positions that are entries (as merge() takes them) whose key_of
        entry is still -1."""
        cols = [_q(c) for c in self.cols]
        scan = _q(self.scan) if self.scan is not None else ffi.NULL
        touched = list(map(_q, self.touched)) if self.touched else [ffi.NULL, ffi.NULL]
        return _collected(lambda out, cap: lib.mlk_rc_unkeyed(self.n, *cols, scan, *touched, _q(key_of),
                                                              out, cap))

    def merge(self, key_of, nkeys, scratch):
        """Rows (one per key, report order).  scratch: array('q') of at least
        nkeys entries, all -1 (left so)."""
        touched = list(map(_q, self.touched)) if self.touched else [ffi.NULL, ffi.NULL]
        shown = lib.mlk_rc_shown(self.n, *map(_q, self.cols),
                                 _q(self.scan) if self.scan is not None else ffi.NULL, *touched)
        rows = zeros(max(shown, 1) * ROW_WORDS)  # (a report of few changes among a million stacks: small)
        scans = zeros(max(shown, 1) * SCAN_WORDS) if self.scan is not None else None  # (only a scan's)
        with ffi.from_buffer("struct mlk_rc_row[]", rows) as out:
            samples = list(map(_q, self.samples)) if self.samples else [ffi.NULL, ffi.NULL]
            allocs = list(map(_q, self.allocs)) if self.allocs else [ffi.NULL, ffi.NULL]
            scan = _q(self.scan) if self.scan is not None else ffi.NULL
            age = _q(self.age) if self.age is not None else ffi.NULL
            touched = list(map(_q, self.touched)) if self.touched else [ffi.NULL, ffi.NULL]
            count = lib.mlk_rc_merge(self.n, *map(_q, self.cols), _q(key_of), nkeys, _q(scratch),
                                     *samples, *allocs, scan, age, *touched,
                                     _q(self.slack) if self.slack is not None else ffi.NULL, out,
                                     _q(scans) if scans is not None else ffi.NULL)
        if count < 0:
            raise ValueError("a changed stack has no key")
        del rows[count * ROW_WORDS:]
        return Rows(rows, scans)


class Rows:
    """Report entries as fixed-size records: key, pos, bytes, blocks,
    live_bytes, live_blocks, samples, allocs, scan_at, touched,
    touched_changed, slack (struct mlk_rc_row); a scan report's split of
    each row's blocks apart, SCAN_WORDS a row (`scans`, or None)."""

    BASE_WORDS = 8  # key .. allocs; then scan_at, touched, touched_changed, slack
    SCAN_AT = 8

    def __init__(self, words, scans=None):
        self.words = words
        self.scans = scans

    @classmethod
    def of(cls, base):
        """Rows from records of their first BASE_WORDS fields (flat), not scanned."""
        words = array("q")
        for i in range(0, len(base), cls.BASE_WORDS):
            words.extend(base[i:i + cls.BASE_WORDS])
            words.extend([-1, -1, 0, -1])  # no scan; touched, slack not measured
        return cls(words)

    def __len__(self):
        return len(self.words) // ROW_WORDS

    def row(self, i):
        """key, pos, bytes, blocks, live_bytes, live_blocks, samples, allocs."""
        return self.words[i * ROW_WORDS:i * ROW_WORDS + self.BASE_WORDS].tolist()

    def lost(self, i):
        """A scan report's split of row i (bytes, blocks per category), or None."""
        at = self.words[i * ROW_WORDS + self.SCAN_AT]
        return self.scans[at * SCAN_WORDS:at * SCAN_WORDS + 8].tolist() if at >= 0 and self.scans else None

    def since(self, i):
        """A scan report's blocks of row i live since each earlier scan (8 buckets)."""
        at = self.words[i * ROW_WORDS + self.SCAN_AT]
        if at < 0 or not self.scans:
            return [0] * 8
        return self.scans[at * SCAN_WORDS + 8:(at + 1) * SCAN_WORDS].tolist()

    def pointer(self):
        """The rows for C; the returned object keeps the buffer exported
        (the array cannot be resized) while it lives."""
        return ffi.from_buffer("struct mlk_rc_row[]", self.words)

    def merge_same_text(self, canon, scratch):
        """Merge rows whose keys print the same frames (canon: key id ->
        the key id first seen with that text, -1 for itself); scratch as
        for Changes.merge, of at least as many entries as key ids."""
        with self.pointer() as rows:
            count = lib.mlk_rc_merge_same_text(rows, len(self), _q(canon), len(canon), _q(scratch),
                                               len(scratch), _q(self.scans) if self.scans is not None else ffi.NULL)
        del self.words[count * ROW_WORDS:]

    def resources_last(self, key_kind, first_resource_kind):
        """Move the rows of resource keys (key_kind: TextStore.key_kind)
        after the others, each group keeping its order."""
        if not len(self):
            return
        need = 64
        while need:
            scratch = zeros(need * ROW_WORDS)
            with self.pointer() as rows, ffi.from_buffer("struct mlk_rc_row[]", scratch) as room:
                need = lib.mlk_rc_resources_last(rows, len(self), ffi.from_buffer("int8_t[]", key_kind),
                                                 len(key_kind), first_resource_kind, room, need)

    def textless(self, key_first):
        """Key ids of rows without text in key_first (-1)."""
        rows, n = self.pointer(), len(self)
        return _collected(lambda out, cap: lib.mlk_rc_textless(rows, n, _q(key_first), len(key_first),
                                                               out, cap))


# Pages of mappings looked at per report (8 bytes of pagemap each): 16 GiB,
# 32 MB of pagemap read at most.
TOUCH_PAGES_MAX = 1 << 22


class Touched(NamedTuple):
    """What of the program's anonymous mappings was ever touched
    (native/reporter/mappings.c)."""
    per_stack: array     # stack id -> bytes of its mappings touched
    by_kind: dict        # kind name -> (mapped bytes, mappings, touched bytes)
    partial: bool        # TOUCH_PAGES_MAX ran out: counts are low


def touched(pid, table, stacks_ptr, nstacks, kind_names):
    """A Touched for the process pid, whose table of mappings is at
    `table` in it; None if the process is gone; or why it cannot be told
    (str)."""
    if not table:
        return "the program's library is too old to tell"
    per_stack, sums = zeros(nstacks), zeros(3 * len(kind_names))
    got = lib.mlk_rc_touched(pid, table, stacks_ptr, nstacks, _q(per_stack), _q(sums), TOUCH_PAGES_MAX)
    if got == -1 and ffi.errno == errno.ESRCH:
        return None  # gone: nothing to tell, and nothing wrong
    if got == -1:
        return os.strerror(ffi.errno) if ffi.errno else "the process could not be read"
    by_kind = {name: tuple(sums[3 * code:3 * code + 3]) for code, name in kind_names.items()}
    return Touched(per_stack, by_kind, got == -2)


def chunks(write, total, chunk_bytes):
    """Bytes pieces of about chunk_bytes from a C writer of items 0..total:
    write(at, buffer, cap, next) writes items from `at` into the buffer and
    returns the bytes written (-needed if not even one fits)."""
    out = bytearray(chunk_bytes)
    nxt = ffi.new("int64_t *")
    at = 0
    while at < total:
        with ffi.from_buffer("char[]", out) as buf:
            size = write(at, buf, len(out), nxt)
        if size < 0:  # one item larger than the buffer
            out = bytearray(-size)
            continue
        at = nxt[0]
        yield bytes(out[:size])
