"""The one reader of the offline tools: report files or directories -> one
series of reports per process, validated.  Everything that analyses reports
(analysis/) reads only this.

A problem with the input -- a corrupt or truncated file, a foreign one, a
gap in a process's sequence numbers (a deleted report: its sums would be
wrong), two programs under one pid -- is said once, in a line, and the rest
is still read.  `Series.complete` says whether a process's sums can be
trusted."""

import datetime
import os
import re
from dataclasses import dataclass, field

from libmemleak.files import memlog

REPORT_NAME = memlog.REPORT_NAME


@dataclass
class Report:
    path: str
    seq: int
    reason: str
    time: float | None       # seconds since the epoch, None if the header lacks it
    header: dict
    entries: list            # memlog.Entry
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


def read_series(paths, progress=None):
    """(list of Series ordered by program and pid, list of problems that
    concern no single process).  Raises InputError when no report at all
    could be read.  progress(done, total) is called as files are read."""
    problems = []
    by_process = {}
    frames = {}  # frame text -> parsed frames, shared by every file read
    files = list(_files(paths, problems))
    for done, path in enumerate(files, 1):
        if progress:
            progress(done, len(files))
        try:
            parsed = memlog.read(path, frames)
        except memlog.MemlogError as e:
            problems.append(f"{e}: not read")
            continue
        if parsed.truncated:
            problems.append(f"{memlog.printable(path)}: truncated or altered ({parsed.truncated}): "
                            "read as it is")
        found = report_from(path, parsed, problems)
        if found is None:
            continue
        key, report = found
        series = by_process.get(key)
        if series is None:
            program, pid, executable, ns = key
            series = by_process[key] = Series(program, executable, pid, pid_namespace=ns)
        series.reports.append(report)
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


def report_from(path, parsed, problems):
    """(series key: (program, pid, executable, pid namespace), Report) of a
    parsed report read from `path`; None, said in problems, where it names
    no pid or seq in range."""
    h = parsed.header
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
    key = (program, pid, executable, _namespace(h, match))
    return key, Report(path, seq, h.get("reason", "?"), _time(h.get("time")), h, parsed.entries, parsed.misuse,
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
