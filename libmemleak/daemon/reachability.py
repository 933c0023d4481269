"""The reachability scan, from the reporter: stop the traced process's
threads, take the snapshot while they stand still (so the counters and the
blocks agree), classify every live block in C (native/reporter/scan.c,
valgrind memcheck's categories), resume the threads.  The pause -- from
the first thread stopped to the last resumed -- is measured and reported.

What the categories mean and how the scan finds roots and blocks:
docs/scan.md."""

import os
import sys
import time
from dataclasses import dataclass

from libmemleak.analysis.lost import CATEGORIES
from libmemleak.daemon.layout import CONST
from libmemleak.daemon.report_core import ffi, lib, zeros, _q

# valgrind's --leak-check-heuristics, bit n = heuristic n (native/reporter/heuristics.h),
# and one of libmemleak's own: a pointer at the offset of an allocator's
# header, learned per allocation site (native/reporter/headers.c).
HEURISTICS = ("stdstring", "length64", "newarray", "multipleinheritance", "header")
ALL_HEURISTICS = CONST["MLK_SCAN_HEURISTICS_ALL"]            # bits 1-5
VALGRIND_HEURISTICS = CONST["MLK_SCAN_HEURISTICS_VALGRIND"]  # valgrind's own four, as its `all`
HEADER_SITES_MAX = 64        # sites listed in the header
HEURISTICS_SET = CONST["MLK_SCAN_HEURISTICS_SET"]  # the field says which; 0 = all
WHY_BYTES = 512
AGE_BUCKETS = 8              # MLK_AGE_BUCKETS (native/reporter/age.h)


def heuristics_field(text):
    """The header's scan_heuristics for `all`, `none`, `valgrind` (its
    own four, as its `all`: what to compare with valgrind) or a
    comma-separated list of HEURISTICS; ValueError naming what is not one."""
    text = text.strip().lower()
    if text == "all":
        return 0
    if text == "none":
        return HEURISTICS_SET
    if text == "valgrind":
        return HEURISTICS_SET | VALGRIND_HEURISTICS
    bits = HEURISTICS_SET
    for name in filter(None, (n.strip() for n in text.replace("+", ",").split(","))):
        if name not in HEURISTICS:
            raise ValueError(f"{name!r} is not a heuristic (all, none, valgrind, or of: "
                             f"{', '.join(HEURISTICS)})")
        bits |= 1 << (HEURISTICS.index(name) + 1)
    return bits


def heuristics_set(field):
    """The bit set a scan applies, from the header's field."""
    return field & ALL_HEURISTICS if field & HEURISTICS_SET else ALL_HEURISTICS


def heuristics_words(field):
    bits = heuristics_set(field)
    if bits == ALL_HEURISTICS:
        return "all"
    if bits == VALGRIND_HEURISTICS:
        return "valgrind"
    return ",".join(n for i, n in enumerate(HEURISTICS) if bits & (1 << (i + 1))) or "none"


class ScanRefused(Exception):
    """The scan could not be made (one line for the user); the report is
    written without categories."""


class AgeHistory:
    """What the earlier scans of this reporter saw (native/reporter/age.c):
    the survivors view.  Lost with the reporter (a new one starts afresh)."""

    def __init__(self):
        self.handle = ffi.gc(lib.mlk_age_history_new(), lib.mlk_age_history_free)


@dataclass
class Scan:
    per_stack: object      # array('q'): 8 words per stack id, bytes then blocks per category
    per_stack_age: object  # array('q'): 8 words per stack id, blocks live since each bucket_seq
    bucket_seq: tuple      # the report seq of each age bucket (0: unused)
    bytes: tuple           # per category, in CATEGORIES order
    blocks: tuple
    pause_ms: float
    threads: int
    heap_blocks: int
    unattributed: int
    heuristics: str = "all"           # which of valgrind's heuristics were applied
    via_heuristic: tuple = ()         # (name, bytes, blocks) of the still reachable, by heuristic
    before_attach: tuple = ()         # an attached process's older blocks: (bytes, blocks) per category
    through_header: tuple = ()        # (site return address, offset, blocks, bytes) per allocation site
    held: tuple = (0, 0)              # (bytes, blocks) set aside: they hold the program's own blocks

    def header_lines(self):
        """The report header's lines for this scan (docs/memlog.md)."""
        lines = [(name, f"{b} {n}") for name, b, n in zip(CATEGORIES, self.bytes, self.blocks)]
        if self.via_heuristic:
            lines.append(("reachable-via-heuristic",
                          ", ".join(f"{name} {b} {k}" for name, b, k in self.via_heuristic)))
        lines += [("scan-heuristics", self.heuristics),
                  ("scan-pause-ms", f"{self.pause_ms:.1f}"), ("scan-threads", self.threads)]
        if self.unattributed:
            lines.append(("scan-unattributed-blocks", self.unattributed))
        if self.held[1]:
            lines.append(("scan-set-aside", f"{self.held[0]} {self.held[1]}"))
        if self.before_attach:
            lines.append(("before-attach", ", ".join(f"{name} {b} {n}" for name, (b, n)
                                                     in zip(CATEGORIES, self.before_attach))))
        return lines


def _stack_count(snapshot):
    ids = snapshot.ids
    if isinstance(ids, range):
        return ids.stop
    return max(ids) + 1 if len(ids) else 0


# mlk_scan_heap's option (native/reporter/heuristics.h): an attached process's
# blocks from before the attach have no trailer; the heap between the listed
# blocks is then read as a root.
UNLISTED_HEAP_IS_ROOT = 0x40000000


def _frame_arrays(segment):
    """struct mlk_scan_stacks for the scan's allocation sites (headers.c),
    and what keeps its buffers alive; (NULL, None) without a segment."""
    if segment is None:
        return ffi.NULL, None
    off, depth, frames, n = segment.frame_arrays()
    keep = [ffi.from_buffer("int64_t[]", off), ffi.from_buffer("int64_t[]", depth),
            ffi.from_buffer("uint64_t[]", frames)]
    st = ffi.new("struct mlk_scan_stacks *", {"off": keep[0], "depth": keep[1], "n": n,
                                                "frames": keep[2], "nframes": len(frames)})
    return st, keep


def scan(pid, header, take_snapshot, history=None, seq=0, segment=None, exiting_tid=0):
    """(snapshot, Scan) of process `pid`, its threads stopped for both.
    Raises ScanRefused when the threads cannot be stopped or the process
    cannot be read; nothing is changed in the process then."""
    trailer_key = header.trailer_key
    if header.sample_bytes or not (trailer_key or header.addr_table):
        raise ScanRefused("the scan needs every block recorded (not sampled): this process "
                          "records a sample of them")
    why = ffi.new("char[]", WHY_BYTES)
    started = time.monotonic()
    world = lib.mlk_world_stop(pid, why, WHY_BYTES)
    if world == ffi.NULL:
        raise ScanRefused(ffi.string(why).decode("utf-8", "replace"))
    # An exit scan: the exiting thread's stack is dead (shm_layout.h, exiting_tid)
    lib.mlk_world_forget_thread(world, exiting_tid)
    try:
        t0 = time.monotonic()
        snapshot = take_snapshot()
        t1 = time.monotonic()
        nstacks = _stack_count(snapshot)
        per_stack = zeros(8 * nstacks)
        per_stack_age = zeros(AGE_BUCKETS * nstacks)
        bucket_seq = ffi.new("int32_t[]", AGE_BUCKETS)
        totals = ffi.new("struct mlk_scan_totals *")
        stacks, keep = _frame_arrays(segment)
        sites, nsites = zeros(4 * HEADER_SITES_MAX), ffi.new("int64_t *")
        status = lib.mlk_scan_heap(world, trailer_key, header.addr_table, header.custom_table, header.lsan_table,
                                   header.own_lo, header.own_hi,
                                   heuristics_set(header.scan_heuristics)
                                   | (UNLISTED_HEAP_IS_ROOT if header.attached_ns else 0), nstacks,
                                   _q(per_stack), totals,
                                   history.handle if history else ffi.NULL, seq,
                                   _q(per_stack_age), bucket_seq, stacks, _q(sites), HEADER_SITES_MAX,
                                   nsites, why, WHY_BYTES)
        del keep
        threads = lib.mlk_world_threads(world)
        t2 = time.monotonic()
    finally:
        lib.mlk_world_resume(world)
    if os.environ.get("MEMLEAK_SCAN_TIMES"):  # where a pause goes (bench/scan_pause.py)
        blocks, roots, flood, cliques = (ns / 1e6 for ns in totals.phase_ns)
        print(f"libmemleak: scan of {pid}: stopping {1000 * (t0 - started):.1f} ms, snapshot "
              f"{1000 * (t1 - t0):.1f} ms, blocks {blocks:.1f} ms ({totals.heap_blocks}), roots "
              f"{roots:.1f} ms ({totals.root_bytes >> 20} MB), flood {flood:.1f} ms "
              f"({totals.heap_bytes_read >> 20} MB), cliques {cliques:.1f} ms, resuming "
              f"{1000 * (time.monotonic() - t2):.1f} ms", file=sys.stderr)
    pause_ms = (time.monotonic() - started) * 1000
    if status != 0:
        raise ScanRefused(ffi.string(why).decode("utf-8", "replace"))
    via = tuple((name, totals.heuristic_bytes[i], totals.heuristic_blocks[i])
                for i, name in enumerate(HEURISTICS) if totals.heuristic_blocks[i])
    return snapshot, Scan(per_stack, per_stack_age, tuple(bucket_seq), tuple(totals.bytes),
                          tuple(totals.blocks), pause_ms, threads, totals.heap_blocks,
                          totals.unattributed, heuristics_words(header.scan_heuristics), via,
                          tuple(zip(totals.before_bytes, totals.before_blocks))
                          if header.attached_ns else (),
                          tuple(tuple(sites[4 * i:4 * i + 4]) for i in range(min(nsites[0], HEADER_SITES_MAX))),
                          (totals.held_bytes, totals.held_blocks))
