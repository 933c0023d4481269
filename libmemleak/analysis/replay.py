"""Replays of an event log (files/events.py) through the C replay
(native/reporter/replay.c): the log's pages fed in time order, each
thread's in the order it filled them, and the answers read back per
stack.  Streams: a page's records are held only until they are applied,
so memory follows the live blocks followed, not the log's size.

Every answer is per stack and exact: live bytes and blocks at a moment
are what was live when the log began (the log's last STAT, less what the
log changed: zero for a log recorded from the program's start) plus the
records up to that moment."""

import os
import re
from typing import NamedTuple

import cffi

from libmemleak import PACKAGE_DIR
from libmemleak.files.events import EventsError

ffi = cffi.FFI()
ffi.cdef("""
struct mlk_replay;
struct mlk_rp_totals { uint64_t records, ordinal, peak_ordinal, peak_tick, first_tick, last_tick, unknown_frees,
                       bad_records, nstacks, nseries, live_blocks_followed; int64_t total, peak; };
struct mlk_replay *mlk_rp_new(int, int, uint64_t, int, uint64_t, uint64_t, uint64_t);
void mlk_rp_free(struct mlk_replay *);
int mlk_rp_feed(struct mlk_replay *, int32_t, uint64_t, const uint8_t *, uint32_t);
int mlk_rp_advance(struct mlk_replay *, uint64_t);
void mlk_rp_window(struct mlk_replay *, uint64_t);
void mlk_rp_totals(const struct mlk_replay *, struct mlk_rp_totals *);
const void *mlk_rp_column(const struct mlk_replay *, int);
""")
_lib = None
ALL = (1 << 64) - 1
LIFE_BUCKETS = 40
COLUMNS = ("live_bytes", "live_blocks", "allocs", "alloc_bytes", "temp_count", "temp_bytes",
           "window_bytes", "window_blocks")


def lib():
    global _lib
    if _lib is None:
        path = os.path.join(PACKAGE_DIR, "libmlkreport.so")
        try:
            _lib = ffi.dlopen(path)
        except OSError:
            raise EventsError(f"{path}: missing or broken; reinstall libmemleak (pip install .)") from None
    return _lib


class Pass(NamedTuple):
    """One replay's answers: totals (struct mlk_rp_totals as a dict, times
    in ns), per-stack columns (dicts id -> value, nonzero only), lifetimes
    (id -> 40 log2 buckets of ticks), the usage series [(ns, live, max)]."""
    totals: dict
    columns: dict
    lifetimes: dict
    series: list


def replay(log, stop_ordinal=ALL, stop_ns=ALL, blocks=False, lifetimes=False, temporary_ns=0,
           temporary_adjacent=False, series_step_ns=0, window_from_ns=None):
    """Replays `log` (an open EventLog) up to a stop point (records before
    ordinal stop_ordinal, at times up to stop_ns); what it follows: blocks
    (their addresses: lifetimes, temporaries, windows), lifetimes,
    temporaries (freed within temporary_ns, or -- temporary_adjacent,
    heaptrack's -- by the thread's very next record), the live total every
    series_step_ns, what a window that began at window_from_ns left live."""
    L = lib()
    shift = log.head.get("tick_shift", 10)
    if not isinstance(shift, int) or not 0 <= shift < 32:
        raise EventsError(f"{log.path}: HEAD says tick_shift {shift!r}")
    r = L.mlk_rp_new(int(blocks or window_from_ns is not None), int(lifetimes), temporary_ns,
                     int(temporary_adjacent), stop_ordinal, stop_ns, series_step_ns)
    if r == ffi.NULL:
        raise MemoryError
    try:
        _feed_all(log, L, r)
        if window_from_ns is not None:
            L.mlk_rp_window(r, window_from_ns)
        return _answers(L, r, shift, lifetimes)
    finally:
        L.mlk_rp_free(r)


def _feed_all(log, L, r):
    """Every page, by its first record's time; one thread's pages are in
    the file in the order it filled them (the sort is stable).  A chunk is
    decompressed when its first page is due and dropped after its last."""
    order = sorted(((p[2], c, k) for c, evts in enumerate(log.evts) for k, p in enumerate(evts.pages)),
                   key=lambda x: x[0])
    remaining = [len(evts.pages) for evts in log.evts]
    open_chunks = {}
    for first_ns, c, k in order:
        if not L.mlk_rp_advance(r, first_ns):
            return  # the stop point is reached
        if c not in open_chunks:
            open_chunks[c] = log.pages(log.evts[c])
        tid, first, records = open_chunks[c][k]
        if not L.mlk_rp_feed(r, tid, first, records, len(records)):
            raise MemoryError
        remaining[c] -= 1
        if not remaining[c]:
            del open_chunks[c]
    L.mlk_rp_advance(r, ALL)


def _answers(L, r, shift, lifetimes):
    t = ffi.new("struct mlk_rp_totals *")
    L.mlk_rp_totals(r, t)
    totals = {name: getattr(t, name) for name in ("records", "ordinal", "peak_ordinal", "unknown_frees",
                                                  "bad_records", "total", "peak", "live_blocks_followed")}
    for name in ("peak_tick", "first_tick", "last_tick"):
        totals[name.replace("tick", "ns")] = getattr(t, name) << shift
    n = t.nstacks
    columns = {}
    for which, name in enumerate(COLUMNS):
        ptr = L.mlk_rp_column(r, which)
        values = ffi.unpack(ffi.cast("int64_t *", ptr), n) if ptr != ffi.NULL and n else []
        columns[name] = {i: v for i, v in enumerate(values) if v}
    lives = {}
    ptr = L.mlk_rp_column(r, 8)
    if lifetimes and ptr != ffi.NULL and n:
        flat = ffi.unpack(ffi.cast("uint64_t *", ptr), n * LIFE_BUCKETS)
        for i in range(n):
            row = flat[i * LIFE_BUCKETS:(i + 1) * LIFE_BUCKETS]
            if any(row):
                lives[i] = row
    series = []
    if t.nseries:
        ticks, tot, mx = (ffi.unpack(ffi.cast("int64_t *", L.mlk_rp_column(r, w)), t.nseries) for w in (9, 10, 11))
        series = [(a << shift, b, c) for a, b, c in zip(ticks, tot, mx)]
    return Pass(totals, columns, lives, series)


class Baseline(NamedTuple):
    """What was live per stack as the log began (id -> (bytes, blocks)),
    and whether that is known (from the log's last STAT)."""
    live: dict
    known: bool


def baseline(log, whole):
    """From the last STAT (what was live as the log ended) less what the
    log's records changed (`whole`: a Pass over all of it)."""
    stat = log.final_stat()
    if not stat or not isinstance(stat.get("live"), list):
        return Baseline({}, False)
    ended = {}
    for item in stat["live"]:
        if isinstance(item, list) and len(item) == 3 and all(isinstance(x, int) for x in item):
            ended[item[0]] = (item[1], item[2])
    changed_b, changed_n = whole.columns["live_bytes"], whole.columns["live_blocks"]
    live = {}
    for i in set(ended) | set(changed_b) | set(changed_n):
        b = ended.get(i, (0, 0))[0] - changed_b.get(i, 0)
        n = ended.get(i, (0, 0))[1] - changed_n.get(i, 0)
        if b or n:
            live[i] = (b, n)
    return Baseline(live, True)


def live_at(base, answer):
    """id -> (bytes, blocks) live at a pass's stop point."""
    out = {}
    cb, cn = answer.columns["live_bytes"], answer.columns["live_blocks"]
    for i in set(base.live) | set(cb) | set(cn):
        b = base.live.get(i, (0, 0))[0] + cb.get(i, 0)
        n = base.live.get(i, (0, 0))[1] + cn.get(i, 0)
        if b or n:
            out[i] = (b, n)
    return out


def live_moment(log, whole, base, at_ns=None):
    """(moment ns, id -> (bytes, blocks) live then): at at_ns, or at the
    peak (the moment the most was live: exact, by the peak's ordinal)."""
    t = whole.totals
    if at_ns is not None:
        return at_ns, live_at(base, replay(log, stop_ns=at_ns))
    if t["peak"] <= 0:  # nothing grew: what was live as it began
        return t["first_ns"], dict(base.live)
    return t["peak_ns"], live_at(base, replay(log, stop_ordinal=t["peak_ordinal"] + 1))


def start_ns(log):
    """The log's start on its own clock: when recording began (else its
    first page's first record)."""
    start = log.head.get("start_mono_ns")
    return start if isinstance(start, int) else min((e.first_ns for e in log.evts), default=0)


def moment_series(log, at_ns=None):
    """What was live at a moment of the log (its peak by default) as a
    series of one report (files/series.py), for the outputs that draw
    reports -- export's flamegraph, pprof, speedscope, html, json: the
    header says which moment; each stack an entry, its frames as the log
    names them."""
    from libmemleak.files.memlog import Entry, parse_frame
    from libmemleak.files.series import Report, Series

    whole = replay(log)
    base = baseline(log, whole)
    moment, live = live_moment(log, whole, base, at_ns)
    start = start_ns(log)
    entries = []
    for i, (b, n) in sorted(live.items(), key=lambda kv: (-kv[1][0], kv[0])):
        kind, lines = log.stacks.get(i, ("unknown", []))
        frames = [f for f in (parse_frame(line.strip("\t")) for line in lines) if f is not None]
        # (a kind is one word in a report's entry: the log's may be anything)
        kind = kind if isinstance(kind, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,32}", kind) else "unknown"
        entries.append(Entry(b, n, frames, [f"kind={kind}"] if kind not in ("malloc", "unknown") else []))
    program, pid = log.head.get("program"), log.head.get("pid")
    program = program if isinstance(program, str) else os.path.basename(log.path)
    pid = pid if isinstance(pid, int) and 0 < pid < 1 << 22 else 0
    header = {"program": program, "pid": str(pid), "seq": "1", "reason": "replay",
              "replay-moment": f"{'at' if at_ns is not None else 'peak'} +{max(0, moment - start) / 1e9:.3f} s "
                               f"of {os.path.basename(log.path)}",
              "live-bytes": str(sum(b for b, _ in live.values())),
              "live-blocks": str(sum(n for _, n in live.values()))}
    alloc_fns = log.head.get("alloc_fns")
    if isinstance(alloc_fns, str) and alloc_fns:
        header["alloc-fns"] = alloc_fns
    exe = log.head.get("exe")
    series = Series(os.path.basename(program), exe if isinstance(exe, str) else program, pid)
    series.reports.append(Report(log.path, 1, "replay", None, header, entries))
    return series
