"""report_core: the reporter's C loops, on hand-made stack tables and
texts, checked against what the Python format functions write."""

from array import array

from libmemleak.daemon import report_core
from libmemleak.daemon.layout import CONST, ffi
from libmemleak.files.memlog import Entry
from libmemleak.files.memlog_write import render
from libmemleak.daemon.report_core import Changes
from libmemleak.daemon.text_store import TextStore

STRIPES = CONST["MLK_COUNTER_STRIPES"]


class StackTable:
    """Stacks and their counter stripes, as a segment lays them out (a
    stripe of len(rows) counters each); used: the stripes counted in."""

    def __init__(self, rows, used=(1 << STRIPES) - 1):
        """rows: per stack, a list of (alloc_count, alloc_bytes,
        freed_count, freed_bytes) per stripe, and (reported_bytes,
        reported_blocks)."""
        self.n = len(rows)
        self.stacks = ffi.new("struct mlk_stack[]", self.n)
        self.stripes = ffi.new("struct mlk_counters[]", self.n * STRIPES)
        self.used = ffi.new("uint32_t *", used)
        for i, (stripes, (rep_b, rep_k)) in enumerate(rows):
            for k, (ac, ab, fc, fb) in enumerate(stripes):
                c = self.stripes[k * self.n + i]
                c.alloc_count, c.alloc_bytes, c.freed_count, c.freed_bytes = ac, ab, fc, fb
            self.stacks[i].reported_bytes, self.stacks[i].reported_blocks = rep_b, rep_k

    def columns(self, ok):
        return report_core.columns(self.stacks, self.stripes, self.n, self.used, self.n, ok)


def test_columns_sum_the_stripes_and_zero_the_stacks_not_ok():
    table = StackTable([
        ([(3, 300, 1, 100), (2, 50, 2, 50), (0, 0, 0, 0)], (10, 1)),
        ([(9, 9, 0, 0)] * STRIPES, (0, 0)),                     # not ok: zeros
        # counters that wrapped in the program: live is still the difference
        ([((1 << 64) - 1, (1 << 64) - 8, (1 << 63) - 1, (1 << 63) - 8), (2, 16, 0, 0),
          (0, 0, 0, 0)], (-5, -1)),
    ])
    cols = table.columns(bytearray([1, 0, 1]))
    # allocated 2^64 + 8 bytes (wrapped to 8) in 2^64 + 1 blocks (1), freed 2^63 - 8 in 2^63 - 1
    assert list(cols["live_bytes"]) == [200, 0, 8 - ((1 << 63) - 8)]
    assert list(cols["live_blocks"]) == [2, 0, 1 - ((1 << 63) - 1)]
    assert list(cols["alloc_count"]) == [5, 0, 1]
    assert list(cols["alloc_bytes"]) == [350, 0, 8]
    assert list(cols["reported_bytes"]) == [10, 0, -5]
    assert list(cols["reported_blocks"]) == [1, 0, -1]


def test_columns_read_only_the_stripes_counted_in():
    """A stripe no thread counted in is never read (its pages are never
    touched, by the reporter either): what the mask leaves out counts
    nothing."""
    rows = [([(3, 300, 1, 100), (2, 50, 2, 50), (7, 7, 0, 0)], (0, 0))]
    assert list(StackTable(rows, used=0b011).columns(bytearray([1]))["live_bytes"]) == [200]
    assert list(StackTable(rows, used=0b101).columns(bytearray([1]))["live_bytes"]) == [207]


def test_commit_writes_only_what_changed():
    stacks = StackTable([([(1, 8, 0, 0)] + [(0, 0, 0, 0)] * (STRIPES - 1), (0, 0)),
                         ([(1, 8, 0, 0)] + [(0, 0, 0, 0)] * (STRIPES - 1), (8, 1))])
    cols = stacks.columns(bytearray([1, 1]))
    table = stacks.stacks
    table[1].reported_bytes = 1234  # a change after the snapshot: commit must not undo it
    report_core.commit(table, cols["live_bytes"], cols["live_blocks"],
                       cols["reported_bytes"], cols["reported_blocks"],
                       cols["alloc_count"], cols["reported_allocs"])
    assert (table[0].reported_bytes, table[0].reported_blocks) == (8, 1)
    assert (table[1].reported_bytes, table[1].reported_blocks) == (1234, 1)
    assert (table[0].reported_allocs, table[1].reported_allocs) == (1, 1)


def merged(live_b, live_k, rep_b, rep_k, key_of):
    changes = Changes(live_b, live_k, rep_b, rep_k)
    key_of = array("q", key_of)
    nkeys = max(key_of) + 1
    scratch = array("q", [-1] * nkeys)
    rows = changes.merge(key_of, nkeys, scratch)
    assert list(scratch) == [-1] * nkeys  # left ready for the next report
    return [rows.row(i) for i in range(len(rows))]


def test_merge_sums_by_key_sorts_and_drops_what_cancels():
    #          pos: 0    1    2    3    4    5
    live_b = [100, 50, 0, 30, 7, 10]
    live_k = [1, 1, 0, 3, 1, 2]
    rep_b = [0, 0, 64, 0, 7, 20]
    rep_k = [0, 0, 2, 0, 1, 1]
    key_of = [2, 0, 1, 0, -1, 3]  # pos 4 unchanged: needs no key
    rows = merged(live_b, live_k, rep_b, rep_k, key_of)
    # key 0 = pos 1 + 3 (80 bytes, 4 blocks); key 3 changed by -10 bytes, +1 block;
    # shrinkage by size too: -64 before -10
    # (not sampled: -1 samples)
    assert rows == [[2, 0, 100, 1, 100, 1, -1, -1], [0, 1, 80, 4, 80, 4, -1, -1],
                    [1, 2, -64, -2, 0, 0, -1, -1], [3, 5, -10, 1, 10, 2, -1, -1]]
    # equal bytes: more blocks first, then the lower position; a sum of zero is left out
    rows = merged([8, 8, 8, 5, 0], [1, 2, 1, 1, 0], [0, 0, 0, 0, 5], [0, 0, 0, 0, 1],
                  [0, 1, 2, 3, 3])
    assert [r[0] for r in rows] == [1, 0, 2]


def test_sampled_rows_carry_the_recorded_blocks_behind_them():
    """A sampled entry says how many recorded samples its estimate rests on
    (issue: one sample scaled to 7,282 blocks with nothing to show it)."""
    changes = Changes([7282, 300, 50], [7282, 3, 1], [0, 0, 50], [0, 0, 1],
                      samples=([1, 3, 1], [0, 0, 1]))
    rows = changes.merge(array("q", [0, 1, 0]), 2, array("q", [-1, -1]))
    assert [rows.row(i) for i in range(len(rows))] == [[0, 0, 7282, 7282, 7282, 7282, 1, -1],
                                                       [1, 1, 300, 3, 300, 3, 3, -1]]
    store = store_with({0: ["	a	(/bin/p)"], 1: ["	b	(/bin/p)"]})
    assert b"".join(store.render(rows)) == (b"+7282 +7282 samples=+1\n\ta\t(/bin/p)\n"
                                            b"+300 +3 samples=+3\n\tb\t(/bin/p)\n")


def test_keys_that_print_the_same_frames_are_one_entry():
    """Different return addresses on one line of code, or frames that differ
    only below what is printed, give keys with the same text: one entry."""
    store = TextStore()
    store.set_key(0, [store.add_line("\tf\t(/bin/p)\tp.c:3"), store.add_line("\tmain\t(/bin/p)")])
    store.set_key(1, [store.add_line("\tg\t(/bin/p)\tp.c:9")])
    store.set_key(2, [store.add_line("\tf\t(/bin/p)\tp.c:3"), store.add_line("\tmain\t(/bin/p)")])
    store.set_key(3, [store.add_line("\tf\t(/bin/p)\tp.c:3"), store.add_line("\tmain\t(/bin/p)")])
    assert list(store.canon) == [-1, -1, 0, 0]
    words = array("q")
    for key, pos, b, k in ((1, 0, 40, 1), (0, 1, 17, 1), (2, 2, 17, 1), (3, 3, -34, -2)):
        words.extend([key, pos, b, k, 100, 1, -1, 10])
    rows = report_core.Rows.of(words)
    scratch = array("q", [-1] * 4)
    rows.merge_same_text(store.canon, scratch)
    assert [rows.row(i) for i in range(len(rows))] == [[1, 0, 40, 1, 100, 1, -1, 10]]  # 17+17-34: gone
    assert list(scratch) == [-1] * 4
    words = array("q")
    for key, pos, b, k in ((0, 1, 17, 1), (1, 0, 40, 1), (2, 2, 17, 1), (3, 3, 17, 1)):
        words.extend([key, pos, b, k, 100, 1, -1, 10])
    rows = report_core.Rows.of(words)
    rows.merge_same_text(store.canon, scratch)
    assert [rows.row(i) for i in range(len(rows))] == [[0, 1, 51, 3, 300, 3, -1, 30],
                                                       [1, 0, 40, 1, 100, 1, -1, 10]]


def test_rows_carry_the_allocations_made_since_the_previous_report():
    """'allocated 901,000 times' tells a hot path from a rare error path."""
    changes = Changes([64, 0, 10], [1, 0, 1], [0, 0, 10], [0, 0, 1],
                      allocs=([901000, 5, 7], [0, 5, 3]))
    rows = changes.merge(array("q", [0, 1, 2]), 3, array("q", [-1, -1, -1]))
    assert [rows.row(i) for i in range(len(rows))] == [[0, 0, 64, 1, 64, 1, -1, 901000]]
    store = store_with({0: ["\ta\t(/bin/p)"]})
    assert b"".join(store.render(rows)) == b"+64 +1 allocs=+901000\n\ta\t(/bin/p)\n"


def test_entries_name_their_allocator_family_and_kinds_are_not_merged():
    """`new` and `mmap` are said (malloc's is the default); a new[] and a
    malloc on one line stay two entries."""
    store = TextStore()
    line = store.add_line("\tf\t(/bin/p)\tp.c:3")
    store.set_key(0, [line], kind=0)
    store.set_key(1, [line], kind=1)
    store.set_key(2, [line], kind=2)
    assert list(store.canon) == [-1, -1, -1]
    words = array("q")
    for key, b in ((2, 8192), (1, 40), (0, 10)):
        words.extend([key, key, b, 1, b, 1, -1, -1])
    text = b"".join(store.render(report_core.Rows.of(words))).decode()
    assert text.splitlines()[::2] == ["+8192 +1 kind=mmap", "+40 +1 kind=new", "+10 +1"]


def test_unkeyed_lists_changed_positions_without_a_key():
    changes = Changes([1, 0, 3] * 700, [1, 0, 1] * 700, [0] * 2100, [0] * 2100)
    key_of = array("q", [-1, -1, 5] * 700)
    assert changes.unkeyed(key_of) == list(range(0, 2100, 3))  # more than one buffer's worth


def test_unkeyed_lists_what_merge_takes_a_scanned_stack_unchanged_too():
    """A scan report lists every stack the scan found blocks of, changed or
    not: its key must be made first (else the merge finds it keyless --
    a hostile program's forged address table made one, tests/test_hostile.py)."""
    scan = array("q", [0] * 8 + [64, 1] + [0] * 6 + [0] * 8)  # position 1: a block definitely lost
    changes = Changes([0, 64, 0], [0, 1, 0], [0, 64, 0], [0, 1, 0], scan=scan)
    key_of = array("q", [-1, -1, -1])
    assert changes.unkeyed(key_of) == [1]
    key_of[1] = 0
    rows = changes.merge(key_of, 1, array("q", [-1]))
    assert len(rows) == 1 and list(rows.row(0)[:2]) == [0, 1]  # key 0, position 1


def store_with(texts_by_key):
    store = TextStore()
    for kid, lines in texts_by_key.items():
        store.set_key(kid, [store.add_line(t) for t in lines])
    return store


def test_render_writes_what_memlog_writes():
    frames = {0: ["\tf\t(/bin/p)\tp.c:3", "\tg\t(/bin/p)\tp.c:9\n\th [inlined]\t(/bin/p)"],
              1: [],                                   # no frame of the program's
              2: ["\t/lib/libx.so+0x1a2b", "\t0xdeadbeef", "\tcaf\u00e9\t(/bin/p)"]}
    store = store_with(frames)
    words = array("q")
    for key, b, k in ((2, 1 << 62, 7), (0, 100, 1), (1, 0, -3), (0, -(1 << 63), -(1 << 63))):
        words.extend([key, 0, b, k, 0, 0, -1, -1])
    rows = report_core.Rows.of(words)
    expected = render((), [Entry(b, k, [], frames_text="\n".join(frames[key]))
                           for key, b, k in ((2, 1 << 62, 7), (0, 100, 1), (1, 0, -3),
                                             (0, -(1 << 63), -(1 << 63)))])
    assert b"".join(store.render(rows)).decode() == expected
    # in pieces smaller than one entry: the buffer grows, nothing is cut
    pieces = list(store.render(rows, chunk_bytes=16))
    assert len(pieces) == 4 and b"".join(pieces).decode() == expected


def test_temporary_texts_are_dropped_after_the_report():
    store = store_with({0: ["\ta\t(/bin/p)"]})
    store.begin_temporary()
    store.set_key(3, [store.add_line("\tpartial\t(/bin/p)"), 0])
    rows = report_core.Rows.of(array("q", [3, 0, 1, 1, 0, 0, -1, -1, 0, 2, 2, 1, 0, 0, -1, -1]))
    body = store.render(rows)
    text = b"".join(body).decode()
    store.end_temporary()
    assert text == "+1 +1\n\tpartial\t(/bin/p)\n\ta\t(/bin/p)\n+2 +1\n\ta\t(/bin/p)\n"
    assert not store.has(3) and store.has(0)
    assert bytes(store.arena) == b"\ta\t(/bin/p)\n" and list(store.pool) == [0]
    assert rows.textless(store.key_first) == [3]


def test_a_key_beyond_the_store_is_textless_and_written_without_frames():
    store = store_with({0: ["\ta\t(/bin/p)"]})
    rows = report_core.Rows.of(array("q", [10, 0, 5, 1, 0, 0, -1, -1]))
    assert rows.textless(store.key_first) == [10]
    assert b"".join(store.render(rows)) == b"+5 +1\n"


def test_a_scan_report_lists_every_scanned_stack_with_its_split():
    """Unchanged stacks are entries too when the scan found blocks of
    theirs; the split is absolute (no sign), zero categories left out."""
    changes = Changes([100, 50, 0], [2, 1, 0], [100, 40, 0], [2, 1, 0],
                      scan=array("q", [60, 1, 0, 0, 40, 1, 0, 0,      # stack 0: unchanged
                                       0, 0, 0, 0, 0, 0, 50, 1,       # stack 1: changed
                                       0, 0, 0, 0, 0, 0, 0, 0]))      # stack 2: nothing
    rows = changes.merge(array("q", [0, 1, 2]), 3, array("q", [-1, -1, -1]))
    assert [rows.row(i)[:4] for i in range(len(rows))] == [[1, 1, 10, 0], [0, 0, 0, 0]]
    assert rows.lost(0) == [0, 0, 0, 0, 0, 0, 50, 1]
    store = store_with({0: ["\ta\t(/bin/p)"], 1: ["\tb\t(/bin/p)"]})
    text = b"".join(store.render(rows)).decode()
    assert text == ("+10 +0 still-reachable=50/1\n\tb\t(/bin/p)\n"
                    "+0 +0 definitely-lost=60/1 possibly-lost=40/1\n\ta\t(/bin/p)\n")


def test_a_derived_key_reads_as_the_same_key_stored():
    """Keys whose every frame is named for good keep no run of their own
    (DERIVED: made from their tokens when read, ~200 MB fewer at a million
    keys); entries, stack tables, merges of equal texts and key_text must
    be exactly those of the same keys stored run by run."""
    from libmemleak.daemon.stack_keys import KeyTable
    from libmemleak.daemon.stack_table import StackTable
    from libmemleak.daemon.text_store import DERIVED
    texts = ["\tf\t(/bin/p)\tp.c:3", "\tg\t(/bin/p)\tp.c:9\n\th [inlined]\t(/bin/p)", "\tmain\t(/bin/p)"]
    keys = KeyTable()
    token_line = array("i")
    derived, stored = TextStore(), TextStore()
    for store in (derived, stored):
        lines = [store.add_line(t) for t in texts]
        assert lines == [0, 1, 2]
    token_line.extend([0, 1, 2, -1, 1])  # token 3: our own frame (left out); token 4: g's line again
    kid = [keys.id_of("malloc", t) for t in ([0, 1, 2], [3, 0, 2], [4, 0, 2], [1, 0, 2] * 1000)]
    assert kid == [0, 1, 2, 3]
    derived.derive_from(keys, token_line)
    left = derived.add_keys(keys, array("q", kid), token_line, bytearray(5), array("b", [0]))
    assert len(left) == 0 and all(derived.key_first[k] == DERIVED for k in kid)
    for k in kid:
        stored.set_key(k, [token_line[t] for t in keys.tokens(k) if token_line[t] != -1])
    assert list(derived.canon) == list(stored.canon) == [-1, -1, -1, -1]  # key 1 (f, main) is no other's
    assert derived.key_text(3) == stored.key_text(3) and len(derived.key_text(3)) == 4000
    words = array("q")
    for k, b in ((3, 5), (2, 300), (1, 20), (0, -7)):
        words.extend([k, k, b, 1, b, 1, -1, -1])
    for table in (None, StackTable()):
        out = []
        for store in (derived, stored):
            t = table or None
            if t is not None:
                t.begin(1, ("d", "p", 1))
            body = b"".join(store.render(report_core.Rows.of(words), table=t, chunk_bytes=64))
            defined = b"".join(t.render(report_core.Rows.of(words), store)) if t is not None else b""
            out.append((body, defined))
            if t is not None:
                table = StackTable()  # the same table anew for the stored store
        assert out[0] == out[1] and out[0][0].count(b"\tmain\t") == 1003
