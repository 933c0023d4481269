"""`libmemleak shell PID`: a prompt on a running traced process (Carlo Wood's
libmemleak and mtrace-ng give one).  Each command asks the process over
its control channel (libmemleak/live/client.py: its own segment, which only its
user or root may open) and answers from its reports with the analysis
`libmemleak report` and `scan` use:

    report            a report now (as the signal would), and what changed
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
    help, quit

With readline editing, history (~/.libmemleak_history) and completion on
a terminal; scriptable with `-c 'report; top 5'` or commands on standard
input.  `libmemleak shell HOST:PORT` drives a process on another host that
was started with listen=HOST:PORT (libmemleak/daemon/remote.py): the same
commands, its reports copied into --dir as they are written.  Exit
status: 0; 1 when a command failed (the process could not be asked), 2
when one was typed wrong -- the last failure's, the other commands still
run."""

import os
import shlex
import sys
import time

from libmemleak.analysis import lost, memory
from libmemleak.analysis.names import frame_lines, frame_text, shown_frames
from libmemleak.analysis.trends import analyse, count, human_bytes
from libmemleak.live.client import LiveError, open_segment, request_report, set_collecting
from libmemleak.files.memlog import MemlogError, read as read_memlog, report_names
from libmemleak.outputs import text
from libmemleak.daemon.remote import Client, RemoteError, read_secret
from libmemleak.files.series import InputError, read_series

EXIT_FAILED, EXIT_USAGE = 1, 2
COMMANDS = ("report", "top", "show", "trend", "scan", "diff", "memory", "watch", "restart", "stop", "start",
            "help", "quit")
HISTORY = os.path.join(os.path.expanduser("~"), ".libmemleak_history")


def add_parser(sub):
    p = sub.add_parser("shell", help="a prompt on a running traced process: report, top, scan, ...",
                       description="An interactive prompt on the traced process PID: ask for "
                                   "reports, see the leak suspects and their trends, scan for "
                                   "lost memory. Commands: " + ", ".join(COMMANDS) + ".")
    p.add_argument("target", metavar="PID|HOST:PORT",
                   help="a traced process here, or one on another host started with "
                        "listen=HOST:PORT")
    p.add_argument("-c", metavar="COMMANDS", dest="commands",
                   help="run these commands (separated by ';') and exit")
    p.add_argument("--timeout", metavar="SECONDS", type=float, default=60.0,
                   help="how long to wait for a report or a scan (default 60)")
    p.add_argument("--secret-file", metavar="FILE",
                   help="remote: the secret the process printed (else $MEMLEAK_SECRET, or asked)")
    p.add_argument("--dir", metavar="DIR", default=".",
                   help="remote: where its reports are copied to (default: here)")
    p.set_defaults(func=run)


class UsageError(Exception):
    """A command typed wrong (one line)."""


class LocalTarget:
    """A process on this host, asked through its segment (live.py)."""

    def __init__(self, pid, timeout):
        self.pid, self.timeout = pid, timeout
        segment, fd = open_segment(pid)  # LiveError if it cannot be asked
        try:
            self.directory = segment.report_dir()
            self.program = segment.program_name()
        finally:
            segment.close()
            os.close(fd)

    def request_report(self, scan=False):
        return request_report(self.pid, self.timeout, scan=scan)

    def set_collecting(self, on):
        set_collecting(self.pid, on)

    def sync(self):
        return 0


class Session:
    """One process, asked over its control channel (here, or remote); its
    reports read back from the directory they are in (or copied to)."""

    def __init__(self, target, out=sys.stdout):
        self.target, self.out = target, out
        self.pid, self.directory, self.program = target.pid, target.directory, target.program

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
        self.say(__doc__.split("\n\n")[1])

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
        if name not in COMMANDS:
            raise UsageError(f"unknown command {name!r} (help lists them)")
        getattr(self, f"do_{name}")(args)
        return True


def _one(session, line):
    """Run a line; its status (0, or 1/2 after saying why)."""
    try:
        return 0 if session.run(line) else None
    except UsageError as e:
        print(f"libmemleak: shell: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LiveError, RemoteError, MemlogError, OSError) as e:
        print(f"libmemleak: shell: {e}", file=sys.stderr)
        return EXIT_FAILED


def _interactive(session):
    import readline
    try:
        readline.read_history_file(HISTORY)
    except OSError:
        pass
    readline.set_completer(lambda prefix, i: ([c for c in COMMANDS if c.startswith(prefix)] + [None])[i])
    readline.parse_and_bind("tab: complete")
    session.say(f"libmemleak shell on {session.program} (pid {session.pid}); 'help' lists the commands")
    status = 0
    try:
        while True:
            try:
                line = input(f"memleak {session.pid}> ")
            except EOFError:
                session.say()
                break
            except KeyboardInterrupt:
                session.say()
                continue
            result = _one(session, line)
            if result is None:
                break
            status = result
    finally:
        try:
            fd = os.open(HISTORY, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            os.close(fd)
            readline.write_history_file(HISTORY)
        except OSError:
            pass
    return status


def connect(args):
    """The target named on the command line."""
    if args.target.isdigit():
        return LocalTarget(int(args.target), args.timeout)
    if ":" not in args.target:
        raise UsageError(f"{args.target!r} is neither a PID nor HOST:PORT")
    secret = read_secret(args.secret_file)
    try:
        os.makedirs(args.dir, exist_ok=True)
    except OSError as e:
        raise RemoteError(f"--dir {args.dir}: {e.strerror}") from None
    client = Client(args.target, secret, args.dir, args.timeout)
    client.sync()
    return client


def run(args):
    try:
        session = Session(connect(args))
    except UsageError as e:
        print(f"libmemleak: shell: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LiveError, RemoteError) as e:
        print(f"libmemleak: shell: {e}", file=sys.stderr)
        return EXIT_FAILED
    if args.commands is not None:
        lines = args.commands.split(";")
    elif not sys.stdin.isatty():
        lines = sys.stdin.read().splitlines()
    else:
        return _interactive(session)
    status = 0
    for line in lines:
        result = _one(session, line)
        if result is None:
            break
        status = result or status
    return status
