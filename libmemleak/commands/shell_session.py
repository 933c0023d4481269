"""The shell's session (commands/shell.py): its commands on one traced
process, asked over its control channel -- here or remote -- and answered
from its reports with the analysis `report` and `scan` use.  An event log's
session (commands/shell_log.py) is one of these with other commands."""

import os
import shlex
import sys
import time

from libmemleak.analysis import lost, memory
from libmemleak.analysis.names import frame_lines, frame_text, shown_frames
from libmemleak.analysis.trends import analyse, count, human_bytes
from libmemleak.files.memlog import read as read_memlog
from libmemleak.files.report_names import report_names
from libmemleak.files.series import InputError, read_series
from libmemleak.live.client import LiveError
from libmemleak.outputs import text

COMMANDS = ("report", "top", "show", "trend", "scan", "diff", "memory", "watch", "restart", "stop", "start",
            "help", "quit")
HELP = """    report            a report now (as the signal would), and what changed
    top [N]           a report now, then the leak suspects, most likely first (as
                      `report`); before there are enough reports to rank, what
                      grew since the previous one
    show N            suspect N's whole stack, full names
    trend N           suspect N's change in each report
    scan              what is lost: valgrind's categories, per stack
    diff              the biggest changes of the latest report
    memory            a report now, and where the process's memory is: the
                      allocator's heaps per arena, what it holds free, slack,
                      thread stacks, mappings (OpenBSD's mdump -D, from outside)
    watch SECS [K]    a report and `top` every SECS seconds (K times, or until ^C)
    restart           start a new interval: a report now, `diff` then shows only what follows
    stop, start       pause and resume recording new allocations (frees still count)
    help, quit"""


class UsageError(Exception):
    """A command typed wrong (one line)."""


class Session:
    """One process, asked over its control channel (here, or remote); its
    reports read back from the directory they are in (or copied to)."""

    commands = COMMANDS

    def __init__(self, target, out=sys.stdout):
        self.target, self.out = target, out
        self.pid, self.directory, self.program = target.pid, target.directory, target.program
        self.label = f"{self.program} (pid {self.pid})"
        self.prompt = f"memleak {self.pid}> "

    def unknown(self, name):
        """The error for a command this session does not have."""
        return UsageError(f"unknown command {name!r} (help lists them)")

    def say(self, line=""):
        self.out.write(line + "\n")
        self.out.flush()

    # -- reading what the process wrote -----------------------------------

    def analysis(self):
        self.target.sync()
        paths = [os.path.join(self.directory, n)
                 for n in report_names(self.directory, self.program, self.pid)]
        if not paths:
            raise UsageError("no report yet: 'report' writes one")
        try:
            series, _ = read_series(paths)
        except InputError as e:
            raise UsageError(str(e)) from None
        mine = [s for s in series if s.pid == self.pid]
        if not mine:
            raise UsageError("no report of this process yet: 'report' writes one")
        return analyse(mine[0])

    def suspect(self, words):
        if len(words) != 1 or not words[0].isdigit():
            raise UsageError("give the suspect's number, as 'top' shows it (show 1)")
        a = self.analysis()
        n = int(words[0])
        if not 1 <= n <= len(a.suspects):
            raise UsageError(f"no suspect {n}: 'top' lists {len(a.suspects)}")
        return a, a.suspects[n - 1]

    # -- the commands ------------------------------------------------------

    def do_report(self, words):
        path = self.target.request_report()
        self.say(path)
        self._changes(read_memlog(path), 5)

    def do_restart(self, words):
        path = self.target.request_report()
        self.say(f"{path}: a new interval starts here")

    def do_top(self, words):
        if len(words) > 1 or (words and not words[0].isdigit()):
            raise UsageError("top [N]: the N most likely leaks (default 10)")
        # A live answer is about now: what the last report said may be an
        # hour old, or the only report there is (nothing to compare).
        self.target.request_report()
        self._top(int(words[0]) if words else 10)

    def _top(self, n):
        a = self.analysis()
        text.write(self.out, [a], [], top=n)
        if not a.suspects:
            reports = a.series.reports
            last = reports[-1]
            grown = sorted((e for e in last.entries if e.bytes > 0), key=lambda e: -e.bytes)
            since = (f"what grew from report {reports[-2].seq} to report {last.seq}" if len(reports) > 1
                     else f"what is live at report {last.seq}")
            self.say(f"  {since}{', largest first:' if grown else ': nothing'}")
            self._lines(grown[:n], last)
        self.out.flush()

    def do_show(self, words):
        a, t = self.suspect(words)
        self.say(f"{human_bytes(t.live_bytes)} live in {count(t.live_blocks, 'block')} -- {t.verdict}")
        for line in frame_lines(t.frames, a.series.executable, keep=len(t.frames), full=True, cut=t.cut):
            self.say(f"  {line}")

    def do_trend(self, words):
        a, t = self.suspect(words)
        for report, nbytes, blocks in zip(a.series.reports, t.deltas, t.block_deltas):
            self.say(f"  report {report.seq:>4} ({report.reason:>8}): {nbytes:+,} B {count(blocks, 'block', sign=True)}")
        self.say(f"  live: {human_bytes(t.live_bytes)} in {count(t.live_blocks, 'block')}")

    def do_scan(self, words):
        path = self.target.request_report(scan=True)
        self.say(path)
        report = read_memlog(path)
        result = lost.from_report(report)
        if result is None:
            raise LiveError(report.header.get("scan", "the report carries no scan"))
        self.out.write(text.render_scan(result, self.pid, 5, executable=report.header.get("program")))
        self.out.flush()

    def do_diff(self, words):
        a = self.analysis()
        last = a.series.reports[-1]
        self.say(f"report {last.seq} ({last.reason}): {last.header.get('change-bytes', '?')} B, "
                 f"{last.header.get('change-blocks', '?')} blocks since the one before")
        self._changes(last, int(words[0]) if words and words[0].isdigit() else 10)

    def do_memory(self, words):
        path = self.target.request_report()
        self.say(path)
        m = memory.of_report(read_memlog(path))
        if m is None:
            raise LiveError("the report does not say where memory is (the process could not be read)")
        for line in memory.state_lines(m):
            self.say(f"  {line}")

    def _changes(self, report, top):
        """The biggest changes of one report, a line each."""
        self._lines(sorted(report.entries, key=lambda e: -abs(e.bytes))[:top], report)

    def _lines(self, entries, report):
        for e in entries:
            frames, _, _ = shown_frames(e.frames, report.header.get("program"), keep=1)
            where = frame_text(frames[0]) if frames else "?"
            self.say(f"  {e.bytes:+,} B {count(e.blocks or 0, 'block', sign=True)}  {where}")

    def do_watch(self, words):
        try:
            seconds = float(words[0])
            times = int(words[1]) if len(words) > 1 else None
        except (IndexError, ValueError):
            raise UsageError("watch SECONDS [TIMES]: a report and top every SECONDS") from None
        if seconds <= 0:
            raise UsageError("watch: SECONDS must be more than 0")
        done = 0
        try:
            while times is None or done < times:
                if done:
                    time.sleep(seconds)
                self.do_report([])
                self._top(5)
                done += 1
        except KeyboardInterrupt:
            self.say("(watch stopped)")

    def do_stop(self, words):
        self.target.set_collecting(False)
        self.say(f"recording paused in {self.pid}: new allocations are not counted, frees are")

    def do_start(self, words):
        self.target.set_collecting(True)
        self.say(f"recording resumed in {self.pid}")

    def do_help(self, words):
        self.say(HELP)

    def run(self, line):
        """Run one command line; True to go on, False after quit."""
        try:
            words = shlex.split(line)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if not words:
            return True
        name, args = words[0], words[1:]
        if name in ("quit", "exit", "q"):
            return False
        if name not in self.commands:
            raise self.unknown(name)
        getattr(self, f"do_{name}")(args)
        return True
