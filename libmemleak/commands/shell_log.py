"""`libmemleak shell FILE.events`: the shell on an event log instead of a
running process.  A log is the past, so the commands that ask a process
for something (report, scan, memory, watch, restart, stop, start) have
nothing to ask; those that read reports answer from the log read as
reports evenly spaced over it (as `report FILE.events` reads it), and
replay's views are commands of their own:

    top [N]           the leak suspects over the log's timeline, most likely first
    show N            suspect N's whole stack, full names
    trend N           suspect N's change in each of the timeline's reports
    diff [N]          the biggest changes of the timeline's last interval
    moments N         read the log as N reports (16)
    peak              the moment the most was live, and what was live then
    at TIME           what was live at TIME (seconds from the start, 300ms, 10:02:03)
    between T1 T2     what was allocated from T1 on and still live at T2
    temporary [WITHIN]  allocations freed at once (or within WITHIN: 1ms)
    lifetimes         how long each stack's blocks lived
    usage             the live total over time
    help, quit"""

import argparse
import sys

from libmemleak.analysis import replay as R
from libmemleak.analysis.trends import analyse
from libmemleak.commands import inputs, replay as replay_cmd
from libmemleak.commands.shell_session import Session, UsageError
from libmemleak.files.events import EventLog, EventsError

COMMANDS = ("top", "show", "trend", "diff", "moments", "peak", "at", "between", "temporary", "lifetimes",
            "usage", "help", "quit")
ASKS_A_PROCESS = ("report", "scan", "memory", "watch", "restart", "stop", "start")
MAX_MOMENTS = 1000


class LogSession(Session):
    """The shell's commands on an event log (EventsError if it cannot be read)."""

    commands = COMMANDS

    def __init__(self, path, out=sys.stdout):
        self.target, self.out = None, out
        self.log = EventLog(path)
        pid = self.log.head.get("pid")
        self.pid = pid if isinstance(pid, int) else 0
        self.program = str(self.log.head.get("program") or path)
        self.directory = None
        self.label = f"{path} ({self.program}, pid {self.pid})"
        self.prompt = "memleak log> "
        self.moments = 16
        self._analysis = None
        for note in inputs.log_notes(self.log):
            print(f"libmemleak: shell: {note}", file=sys.stderr)

    def unknown(self, name):
        if name in ASKS_A_PROCESS:
            return UsageError(f"{name!r} asks a running process; an event log is its past "
                              "('help' lists what it answers)")
        return super().unknown(name)

    def analysis(self):
        if self._analysis is None:
            self._analysis = analyse(R.timeline_series(self.log, self.moments))
        return self._analysis

    def do_top(self, words):
        if len(words) > 1 or (words and not words[0].isdigit()):
            raise UsageError("top [N]: the N most likely leaks (default 10)")
        self._top(int(words[0]) if words else 10)

    def do_moments(self, words):
        if len(words) != 1 or not words[0].isdigit() or not 2 <= int(words[0]) <= MAX_MOMENTS:
            raise UsageError(f"moments N: the log read as N reports (2 to {MAX_MOMENTS})")
        self.moments, self._analysis = int(words[0]), None
        self.say(f"the log is read as {self.moments} reports")

    def _replay(self, **view):
        """One of replay's answers, printed as `libmemleak replay` prints it."""
        args = argparse.Namespace(peak=False, at=None, between=None, temporary=False, lifetimes=False,
                                  usage=False, within=None, top=10, frames=4, json=False, alloc_fns=None,
                                  no_fold=False)
        for name, value in view.items():
            setattr(args, name, value)
        try:
            replay_cmd.answer(args, self.log)
        except inputs.BadTime as e:
            raise UsageError(str(e)) from None
        except MemoryError:
            raise EventsError("out of memory following the live blocks") from None
        sys.stdout.flush()

    def do_peak(self, words):
        self._replay(peak=True)

    def do_at(self, words):
        if len(words) != 1:
            raise UsageError("at TIME: what was live then (12.5, 300ms, 10:02:03)")
        self._replay(at=words[0])

    def do_between(self, words):
        if len(words) != 2:
            raise UsageError("between T1 T2: what was allocated from T1 on and still live at T2")
        self._replay(between=words)

    def do_temporary(self, words):
        if len(words) > 1:
            raise UsageError("temporary [WITHIN]: freed at once, or within WITHIN (1ms)")
        self._replay(temporary=True, within=words[0] if words else None)

    def do_lifetimes(self, words):
        self._replay(lifetimes=True)

    def do_usage(self, words):
        self._replay(usage=True)

    def do_help(self, words):
        self.say(__doc__.split("\n\n")[1])
