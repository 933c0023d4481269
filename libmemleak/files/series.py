"""The one reader of the offline tools: report files or directories -> one
series of reports per process, validated.  Everything that analyses reports
(analysis/) reads only this.

A problem with the input -- a corrupt or truncated file, a foreign one, a
gap in a process's sequence numbers (a deleted report: its sums would be
wrong), two programs under one pid -- is said once, in a line, and the rest
is still read.  `Series.complete` says whether a process's sums can be
trusted."""

import contextlib
import datetime
import gc
import os
from dataclasses import dataclass, field

from libmemleak.files import memlog
from libmemleak.files.report_names import REPORT_NAME


@dataclass
class Report:
    path: str
    seq: int
    reason: str
    time: float | None       # seconds since the epoch, None if the header lacks it
    header: dict
    entries: list | None     # memlog.Entry (None: folded as read, not kept -- read_series(fold=))
    misuse: list = field(default_factory=list)  # memlog.Misuse
    truncated: str = ""      # why the file looks cut short (memlog.Report.truncated), or ""


@dataclass
class Series:
    program: str             # the name reports are filed under (argv[0]'s last part)
    executable: str          # the header's `program:` (resolved path)
    pid: int
    reports: list = field(default_factory=list)   # Report, by seq
    problems: list = field(default_factory=list)  # one line each
    usage: object = None     # an event log's live total over time (analysis/replay.Usage), for charts
    pid_namespace: int | None = None  # `pid` is numbered in this pid namespace (its inode), not the host's
    fold: object = None      # what read_series(fold=) folded the reports' entries into (they are not kept)

    @property
    def complete(self):
        """Every report from 1 to the last is here, whole: the sums are what was live."""
        return ([r.seq for r in self.reports] == list(range(1, len(self.reports) + 1))
                and not any(r.truncated for r in self.reports))

    @property
    def sampled(self):
        return any("sampled" in r.header for r in self.reports)

    def _said(self, field):
        said = []
        for r in self.reports:
            text = r.header.get(field)
            if text and text not in said:
                said.append(text)
        return said

    @property
    def blind(self):
        """What the tracer said it could not see in this process (each
        report's `blind` header), in the order first said; empty when it
        saw everything it traces."""
        return self._said("blind")

    @property
    def routed(self):
        """The program's own allocator routed to the tracer (each report's
        `routed` header): how its blocks were seen at all."""
        return self._said("routed")

    @property
    def ended(self):
        """How the process ended, if its last report says so."""
        last = self.reports[-1].reason if self.reports else None
        return last if last in ("exit", "death", "muntrace") else None

    @property
    def final_report_lost(self):
        """The process is gone and its last report is not a final one:
        its reporter (and the standby) were killed before it, or pid 1 of
        a namespace took them along.  False where this host cannot tell."""
        if self.ended or not self.reports:
            return False
        from libmemleak.daemon.procfs import still_running
        return still_running(self.reports[-1].header.get("process-start"), self.pid,
                             self.pid_namespace) is False


MAX_PID = 1 << 22    # the kernel's pid_max limit
MAX_SEQ = 1 << 31    # reports of one process, far beyond any real run


class InputError(Exception):
    """Nothing readable was given (one line, for the user)."""


def _files(paths, problems):
    for path in paths:
        if os.path.isdir(path):
            try:
                names = sorted(os.listdir(path))
            except OSError as e:
                problems.append(f"{path}: {e.strerror}")
                continue
            for name in names:
                if name.endswith(".memlog") and not name.startswith("."):
                    yield os.path.join(path, name)
        elif os.path.exists(path):
            yield path
        else:
            problems.append(f"{path}: no such file or directory")


def _namespace(header, match):
    """The pid namespace a report's pid is numbered in (its header's, else
    its name's), or None: the host's."""
    for text in (header.get("pid-namespace"), match["ns"] if match else None):
        if text and text.isdigit() and len(text) < 20:
            return int(text)
    return None


def _time(text):
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


def read_series(paths, progress=None, fold=None):
    """(list of Series ordered by program and pid, list of problems that
    concern no single process).  Raises InputError when no report at all
    could be read.  progress(done, total) is called as files are read.

    Each process's reports are read in seq order (a report's stack table
    is then already known from the ones before it).  fold(n): something
    that takes a process's n reports one at a time -- add(i, report) as
    each is read, end(count) after the last -- and keeps what it needs of
    their entries; then no report keeps its entries (Report.entries is
    None, Series.fold is what folded them), and the memory read_series
    needs follows the largest report and the distinct stacks, not the
    files."""
    problems = []
    members = {}  # series key -> [(seq, path)]
    for path in _files(paths, problems):
        try:
            header = memlog.read_header(path)
        except memlog.MemlogError as e:
            problems.append(f"{e}: not read")
            continue
        found = _identity(path, header, problems)
        if found is not None:
            members.setdefault(found[0], []).append((found[1], path))
    by_process, frames = {}, {}  # frames: frame text -> parsed frames, shared by every file read
    if fold is not None:
        frames[memlog.WITHOUT_TEXT] = True  # the fold keys stacks by identity: no text kept per stack
    total, done = sum(map(len, members.values())), 0
    for key, found in members.items():
        program, pid, executable, ns = key
        series = Series(program, executable, pid, pid_namespace=ns)
        series.fold = fold(len(found)) if fold else None
        for seq, path in sorted(found):
            done += 1
            if progress:
                progress(done, total)
            with _collector_paused():
                report = _read_report(path, key, seq, frames, problems)
                if report is None:
                    continue
                if series.fold is not None:
                    series.fold.add(len(series.reports), report)
                    report.entries = None
            series.reports.append(report)
        if series.fold is not None:
            series.fold.end(len(series.reports))
        if series.reports:
            by_process[key] = series
    if not by_process:
        where = ", ".join(paths)
        raise InputError(f"no report could be read in {where}" + (f" ({problems[0]})" if problems else ""))
    seen_pids = {}
    for (program, pid, executable, _), series in by_process.items():
        series.reports.sort(key=lambda r: r.seq)
        seqs = [r.seq for r in series.reports]
        if len(set(seqs)) != len(seqs):
            series.problems.append(f"{program} pid {pid}: two reports with one seq number")
        missing = _gaps(seqs)
        if missing:
            many = len(missing) > 1 or missing[0][0] != missing[0][1]
            series.problems.append(
                f"{program} pid {pid}: report{'s' if many else ''} "
                f"{_ranges(missing)} missing: live totals are wrong")
        seen_pids.setdefault((pid, series.pid_namespace), []).append(series)
    for (pid, _), group in seen_pids.items():
        if len(group) > 1:
            problems.append(f"pid {pid}: reports of {len(group)} different programs "
                            f"({', '.join(memlog.printable_field(s.executable, 200) for s in group)}): kept apart")
    ordered = sorted(by_process.values(), key=lambda s: (s.program, s.pid, s.pid_namespace or 0))
    return ordered, problems


@contextlib.contextmanager
def _collector_paused():
    """Python's cycle collector off while a report is read: reading makes a
    million objects that can form no cycle (entries, frames, trends), and
    the collector, run every 700 of them, would walk every one it holds
    again and again -- about half the time of a read."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _identity(path, header, problems):
    """(series key: (program, pid, executable, pid namespace), seq) of the
    report at `path` with `header`; None, said in problems, where it names
    no pid or seq in range."""
    h = header
    match = REPORT_NAME.match(os.path.basename(path))
    try:
        pid = int(h.get("pid") or (match and match["pid"]))
        seq = int(h.get("seq") or (match and match["seq"]))
    except (TypeError, ValueError):
        problems.append(f"{memlog.printable(path)}: not a libmemleak report (no pid or seq): not read")
        return None
    if not (0 < pid <= MAX_PID and 0 < seq <= MAX_SEQ):
        problems.append(f"{memlog.printable(path)}: pid {pid} or seq {seq} out of range: not read")
        return None
    executable = h.get("program", "?")
    program = memlog.printable(match["prog"] if match else os.path.basename(executable))
    return (program, pid, executable, _namespace(h, match)), seq


def _read_report(path, key, seq, frames, problems):
    """The Report at `path`, whose header said it is report `seq` of
    process `key`; None, said in problems, where it cannot be read or no
    longer says so."""
    try:
        parsed = memlog.read(path, frames)
    except memlog.MemlogError as e:
        problems.append(f"{e}: not read")
        return None
    if _identity(path, parsed.header, []) != (key, seq):
        problems.append(f"{memlog.printable(path)}: changed while it was read: not read")
        return None
    if parsed.truncated:
        problems.append(f"{memlog.printable(path)}: truncated or altered ({parsed.truncated}): "
                        "read as it is")
    return _report(path, seq, parsed)


def report_from(path, parsed, problems):
    """(series key, Report) of a report parsed from `path`; None, said in
    problems, where it names no pid or seq in range."""
    found = _identity(path, parsed.header, problems)
    return None if found is None else (found[0], _report(path, found[1], parsed))


def _report(path, seq, parsed):
    h = parsed.header
    return Report(path, seq, h.get("reason", "?"), _time(h.get("time")), h, parsed.entries, parsed.misuse,
                  parsed.truncated)


def _gaps(seqs):
    """The runs (first, last) of numbers from 1 to max(seqs) that sorted
    `seqs` lacks -- computed from neighbours, never by listing every
    number (a forged seq of 10^11 must cost nothing)."""
    gaps, expected = [], 1
    for seq in seqs:
        if seq > expected:
            gaps.append((expected, seq - 1))
        expected = max(expected, seq + 1)
    return gaps


def _ranges(gaps, shown=8):
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in gaps[:shown])
    return text + (f" and {len(gaps) - shown} more runs" if len(gaps) > shown else "")
