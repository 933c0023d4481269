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

from libmemleak import reporter_library
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
void mlk_rp_resume(struct mlk_replay *, uint64_t, uint64_t);
void mlk_rp_end_series(struct mlk_replay *);
void mlk_rp_stack_limit(struct mlk_replay *, uint64_t);
void mlk_rp_totals(const struct mlk_replay *, struct mlk_rp_totals *);
const void *mlk_rp_column(const struct mlk_replay *, int);
void mlk_rp_at_peak(struct mlk_replay *);
""")
ALL = (1 << 64) - 1
USAGE_POINTS = 2000     # the live total over time: about this many steps, each with its highest total
LIFE_BUCKETS = 40
COLUMNS = ("live_bytes", "live_blocks", "allocs", "alloc_bytes", "temp_count", "temp_bytes",
           "window_bytes", "window_blocks")
PEAK_COLUMNS = {14: "peak_bytes", 15: "peak_blocks"}  # what each stack held at the peak (mlk_rp_at_peak)


def lib():
    try:
        return reporter_library(ffi)
    except OSError as e:
        raise EventsError(str(e)) from None


class Pass(NamedTuple):
    """One replay's answers: totals (struct mlk_rp_totals as a dict, times
    in ns), per-stack columns (dicts id -> value, nonzero only), lifetimes
    (id -> 40 log2 buckets of ticks), the usage series [(ns, live, max,
    allocations, bytes allocated)], each point's since the one before."""
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
    L.mlk_rp_stack_limit(r, stack_limit(log))
    try:
        _feed_all(log, L, r)
        if series_step_ns:
            L.mlk_rp_end_series(r)
        if window_from_ns is not None:
            L.mlk_rp_window(r, window_from_ns)
        return _answers(L, r, shift, lifetimes)
    finally:
        L.mlk_rp_free(r)


STACK_ROOM = 65536


def unread_note(whole):
    """What a pass could not use, in a line (None: it used every record)."""
    bad = whole.totals["bad_records"]
    if not bad:
        return None
    return (f"{bad:,} records could not be used (a page broken from there on, or a stack id not the "
            "log's): the answers leave them out")


def stack_limit(log):
    """The largest stack id (+ 1) a record of this log may carry: the hook
    numbers stacks from 0 up and the log names each before using it, so as
    many as it names and the last counters list, and room for a log cut
    before it named its last ones -- memory in proportion to the file, not
    to a number it forged."""
    stat = log.final_stat() or {}
    live = stat.get("live") if isinstance(stat.get("live"), list) else []
    return len(log.stacks) + len(live) + STACK_ROOM


def _feed_all(log, L, r, on_stop=None):
    """Every page, by its first record's time; one thread's pages are in
    the file in the order it filled them (the sort is stable).  A chunk is
    decompressed when its first page is due and dropped after its last.
    At the stop point, on_stop() may move it on (mlk_rp_resume) and answer
    True: the pass goes on."""
    order = sorted(((p[2], c, k) for c, evts in enumerate(log.evts) for k, p in enumerate(evts.pages)),
                   key=lambda x: x[0])
    remaining = [len(evts.pages) for evts in log.evts]
    open_chunks = {}

    def advance(until):
        while not L.mlk_rp_advance(r, until):
            if on_stop is None or not on_stop():
                return False
        return True
    for first_ns, c, k in order:
        if not advance(first_ns):
            return  # the stop point is reached
        if c not in open_chunks:
            open_chunks[c] = log.pages(log.evts[c])
        tid, first, records = open_chunks[c][k]
        if not L.mlk_rp_feed(r, tid, first, records, len(records)):
            raise MemoryError
        remaining[c] -= 1
        if not remaining[c]:
            del open_chunks[c]
    advance(ALL)


def _answers(L, r, shift, lifetimes):
    t = ffi.new("struct mlk_rp_totals *")
    L.mlk_rp_totals(r, t)
    totals = {name: getattr(t, name) for name in ("records", "ordinal", "peak_ordinal", "unknown_frees",
                                                  "bad_records", "total", "peak", "live_blocks_followed")}
    for name in ("peak_tick", "first_tick", "last_tick"):
        totals[name.replace("tick", "ns")] = getattr(t, name) << shift
    n = t.nstacks
    columns = {}
    L.mlk_rp_at_peak(r)
    for which, name in [*enumerate(COLUMNS), *PEAK_COLUMNS.items()]:
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
        ticks, tot, mx, made, made_bytes = (ffi.unpack(ffi.cast("int64_t *", L.mlk_rp_column(r, w)), t.nseries)
                                            for w in (9, 10, 11, 12, 13))
        series = [(a << shift, b, c, d, e) for a, b, c, d, e in zip(ticks, tot, mx, made, made_bytes)]
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


def live_at(base, answer, at_peak=False):
    """id -> (bytes, blocks) live at a pass's stop point (at_peak: at the
    peak of the records it applied)."""
    out = {}
    cb, cn = (answer.columns["peak_bytes"], answer.columns["peak_blocks"]) if at_peak else \
        (answer.columns["live_bytes"], answer.columns["live_blocks"])
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
    return t["peak_ns"], live_at(base, whole, at_peak=True)  # (kept as the pass went: no second one)


def start_ns(log):
    """The log's start on its own clock: when recording began (else its
    first page's first record)."""
    start = log.head.get("start_mono_ns")
    return start if isinstance(start, int) else min((e.first_ns for e in log.evts), default=0)


def timeline(log, moments_ns, whole):
    """What was live at each of moments_ns (ascending) -- [id -> (bytes,
    blocks, allocations made since the log began)] -- in one pass (whole:
    the Pass of all of it)."""
    L = lib()
    base = baseline(log, whole)
    shift = log.head.get("tick_shift", 10)
    moments = list(moments_ns)
    out = []
    r = L.mlk_rp_new(0, 0, 0, 0, ALL, moments[0] if moments else ALL, 0)
    if r == ffi.NULL:
        raise MemoryError
    L.mlk_rp_stack_limit(r, stack_limit(log))

    def take():
        now = _answers(L, r, shift, False)
        made = now.columns["allocs"]
        live = live_at(base, now)
        out.append({i: (b, n, made.get(i, 0)) for i, (b, n) in live.items()}
                   | {i: (0, 0, a) for i, a in made.items() if i not in live})
        if len(out) < len(moments):
            L.mlk_rp_resume(r, ALL, moments[len(out)])
            return True
        return False
    try:
        _feed_all(log, L, r, take)
        while len(out) < len(moments):  # moments after the last record: the end's state
            take()
    finally:
        L.mlk_rp_free(r)
    return out


def span(log):
    return max((e.last_ns for e in log.evts), default=0) - min((e.first_ns for e in log.evts), default=0)


def usage_step(log):
    return max(1, span(log) // USAGE_POINTS)


class Usage(NamedTuple):
    """The live total over a log (times in ns on its clock): USAGE_POINTS
    steps, each (ns, total at its end, highest total in it, allocations
    made in it, their bytes), the exact peak, and the moment a series of
    one report shows (None: a timeline)."""
    start_ns: int
    end_ns: int
    points: list
    peak_ns: int
    peak_bytes: int
    moment_ns: int | None


def _usage(log, whole, base, moment_ns=None):
    before = sum(b for b, _ in base.live.values())
    t = whole.totals
    return Usage(start_ns(log), t["last_ns"], [(a, b + before, c + before, d, e) for a, b, c, d, e in whole.series],
                 t["peak_ns"] if t["peak"] > 0 else start_ns(log), max(t["peak"], 0) + before, moment_ns)


def timeline_series(log, moments=16, usage=False):
    """The log as a series of `moments` reports, evenly spaced from its
    first record to its end (the last one the exit's, if the log ended with
    the program): what `report` ranks -- each stack's change between
    moments, and its allocations -- at a resolution no signal gave."""
    whole = replay(log, series_step_ns=usage_step(log) if usage else 0)
    first, last = whole.totals["first_ns"], whole.totals["last_ns"]
    times = [first + (last - first) * (k + 1) // moments for k in range(moments)]
    states = timeline(log, times, whole)
    stat = log.final_stat() or {}
    ended = stat.get("reason") if isinstance(stat.get("reason"), str) else None
    reports, before = [], {}
    for k, (at_ns, live) in enumerate(zip(times, states)):
        entries = {}
        for i in set(live) | set(before):
            b, n, a = live.get(i, (0, 0, 0))
            pb, pn, pa = before.get(i, (0, 0, 0))
            if (b - pb, n - pn, a - pa) != (0, 0, 0):
                entries[i] = (b - pb, n - pn, a - pa)
        # (an exit's last interval holds its teardown, as an exit report's does; a death's has none)
        reason = ended if k == moments - 1 and ended in ("exit", "death") else "replay"
        reports.append((at_ns, reason, entries, live))
        before = live
    series = _series(log, reports, lambda at_ns: f"timeline +{max(0, at_ns - start_ns(log)) / 1e9:.3f} s "
                                                 f"of {os.path.basename(log.path)}")
    series.problems += [n for n in (unread_note(whole),) if n]
    if usage:
        series.usage = _usage(log, whole, baseline(log, whole))
    return series


def _series(log, moments, describe):
    """A Series of reports (files/series.py) from moments (ns, reason,
    id -> (bytes, blocks[, allocations]) to show, id -> live then): each stack
    an entry, its frames as the log names them."""
    from libmemleak.files.memlog import Entry, parse_frame
    from libmemleak.files.series import Report, Series

    program, pid = log.head.get("program"), log.head.get("pid")
    program = program if isinstance(program, str) else os.path.basename(log.path)
    pid = pid if isinstance(pid, int) and 0 < pid < 1 << 22 else 0
    exe = log.head.get("exe")
    series = Series(os.path.basename(program), exe if isinstance(exe, str) else program, pid)
    mono, real = log.head.get("mono_ns"), log.head.get("realtime_ns")
    clock = isinstance(mono, int) and isinstance(real, int)
    alloc_fns = log.head.get("alloc_fns")
    frames_of = {}
    for seq, (at_ns, reason, shown, live) in enumerate(moments, 1):
        entries = []
        for i, value in sorted(shown.items(), key=lambda kv: (-kv[1][0], kv[0])):
            if i not in frames_of:
                kind, lines = log.stacks.get(i, ("unknown", []))
                # (a kind is one word in a report's entry: the log's may be anything)
                kind = kind if isinstance(kind, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,32}", kind) else "unknown"
                frames_of[i] = (tuple(f for f in (parse_frame(line.strip("\t")) for line in lines) if f is not None),
                                (f"kind={kind}",) if kind not in ("malloc", "unknown") else ())
            frames, extra = frames_of[i]
            allocs = (f"allocs={value[2]}",) if len(value) > 2 and value[2] else ()
            entries.append(Entry(value[0], value[1], frames, extra + allocs))
        header = {"program": program, "pid": str(pid), "seq": str(seq), "reason": reason,
                  "replay-moment": describe(at_ns),
                  "live-bytes": str(sum(v[0] for v in live.values())),
                  "live-blocks": str(sum(v[1] for v in live.values()))}
        if isinstance(alloc_fns, str) and alloc_fns:
            header["alloc-fns"] = alloc_fns
        when = (real + (at_ns - mono)) / 1e9 if clock else None
        series.reports.append(Report(log.path, seq, reason, when, header, entries))
    return series


def moment_series(log, at_ns=None, usage=False):
    """What was live at a moment of the log (its peak by default) as a
    series of one report (files/series.py), for the outputs that draw
    reports -- export's flamegraph, pprof, speedscope, html, json: the
    header says which moment; each stack an entry, its frames as the log
    names them."""
    whole = replay(log, series_step_ns=usage_step(log) if usage else 0)
    base = baseline(log, whole)
    moment, live = live_moment(log, whole, base, at_ns)
    start = start_ns(log)
    series = _series(log, [(moment, "replay", live, live)],
                     lambda at: f"{'at' if at_ns is not None else 'peak'} +{max(0, at - start) / 1e9:.3f} s "
                                f"of {os.path.basename(log.path)}")
    series.problems += [n for n in (unread_note(whole),) if n]
    if usage:
        series.usage = _usage(log, whole, base, moment)
    return series
