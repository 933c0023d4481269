"""diff_snapshot on hand-made snapshots: pure, no process."""

from libmemleak.daemon.diff import diff_snapshot, totals
from libmemleak.daemon.segment_types import Module, Snapshot, Stack

EXE = Module(0, "/bin/prog", base=0x1000, lo=0x1000, hi=0x9000, load_epoch=1, unload_epoch=0, build_id="")
PLUGIN_OLD = Module(1, "/lib/a.so", base=0x100000, lo=0x100000, hi=0x108000, load_epoch=2,
                    unload_epoch=3, build_id="")
PLUGIN_NEW = Module(2, "/lib/b.so", base=0x100000, lo=0x100000, hi=0x108000, load_epoch=3,
                    unload_epoch=0, build_id="")


def snap(rows, modules=(EXE,)):
    """rows: (id, frames, epoch, live_bytes, live_blocks, reported_bytes, reported_blocks)"""
    stacks = {r[0]: Stack(r[0], "malloc", tuple(r[1]), r[2]) for r in rows}
    return Snapshot(pid=1, parent_pid=0, exe="/bin/prog", name="prog", report_dir="/tmp", taken_ns=0,
                    start_time_ns=0, depth=16, collecting=True, health={}, modules=tuple(modules),
                    stacks=stacks, ids=[r[0] for r in rows],
                    live_bytes=[r[3] for r in rows], live_blocks=[r[4] for r in rows],
                    alloc_count=[r[4] for r in rows], alloc_bytes=[r[3] for r in rows],
                    reported_bytes=[r[5] for r in rows], reported_blocks=[r[6] for r in rows])


def test_changes_are_live_minus_baseline_sorted_with_negatives_last():
    s = snap([(0, [0x1100], 1, 100, 1, 0, 0),
              (1, [0x1200], 1, 0, 0, 64, 2),
              (2, [0x1300], 1, 500, 5, 200, 2),
              (3, [0x1400], 1, 7, 1, 7, 1)])          # unchanged: left out
    d = diff_snapshot(s)
    assert [(x.bytes, x.blocks) for x in d] == [(300, 3), (100, 1), (-64, -2)]
    assert d[0].key == ("malloc", (("/bin/prog", 0x300),))
    t = totals(s)
    assert (t.live_bytes, t.change_bytes, t.change_blocks) == (607, 336, 2)


def test_frees_only_list_the_largest_first():
    """Growth first, then shrinkage, each by size: -16384 before -8."""
    s = snap([(0, [0x1100], 1, 0, 0, 8, 1),
              (1, [0x1200], 1, 0, 0, 16384, 1),
              (2, [0x1300], 1, 0, 0, 512, 4),
              (3, [0x1400], 1, 32, 1, 0, 0),
              (4, [0x1500], 1, 4096, 1, 0, 0)])
    d = diff_snapshot(s)
    assert [x.bytes for x in d] == [4096, 32, -16384, -512, -8]


def test_entries_of_one_stack_are_merged():
    s = snap([(0, [0x1100, 0x1500], 1, 10, 1, 0, 0), (7, [0x1100, 0x1500], 2, 30, 3, 10, 1)])
    d = diff_snapshot(s)
    assert len(d) == 1 and (d[0].bytes, d[0].blocks, d[0].live_bytes) == (30, 3, 40)


def test_same_address_after_dlclose_resolves_by_epoch():
    mods = (EXE, PLUGIN_OLD, PLUGIN_NEW)
    s = snap([(0, [0x100010], 2, 8, 1, 0, 0), (1, [0x100010], 3, 16, 1, 0, 0)], mods)
    d = {x.key[1][0][0]: x.bytes for x in diff_snapshot(s)}
    assert d == {"/lib/a.so": 8, "/lib/b.so": 16}


def test_address_outside_every_module_is_kept_raw():
    d = diff_snapshot(snap([(0, [0xdead0000], 1, 1, 1, 0, 0)]))
    assert d[0].key == ("malloc", ((None, 0xdead0000),)) and d[0].modules == (None,)
