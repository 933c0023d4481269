"""`libmemleak shell PID`: a prompt on a running traced process (Carlo Wood's
libmemleak and mtrace-ng give one).  Each command asks the process over
its control channel (libmemleak/live/client.py: its own segment, which only its
user or root may open) and answers from its reports with the analysis
`libmemleak report` and `scan` use (the commands: shell_session.HELP, what
`help` prints).

With readline editing, history (~/.libmemleak_history) and completion on
a terminal; scriptable with `-c 'report; top 5'` or commands on standard
input.  `libmemleak shell HOST:PORT` drives a process on another host that
was started with listen=HOST:PORT (libmemleak/daemon/remote.py): the same
commands, its reports copied into --dir as they are written.  `libmemleak
shell FILE.events` reads an event log instead (commands/shell_log.py: its
timeline's suspects, and replay's peak, at, between, temporary...).  Exit
status: 0; 1 when a command failed (the process could not be asked), 2
when one was typed wrong -- the last failure's, the other commands still
run."""

import os
import sys

from libmemleak.commands.shell_log import LogSession
from libmemleak.commands.shell_session import COMMANDS, Session, UsageError
from libmemleak.daemon.remote import Client, RemoteError, read_secret
from libmemleak.files.events import EventsError, is_event_log
from libmemleak.files.memlog import MemlogError
from libmemleak.live.client import LiveError, open_segment, request_report, set_collecting

EXIT_FAILED, EXIT_USAGE = 1, 2
HISTORY = os.path.join(os.path.expanduser("~"), ".libmemleak_history")


def add_parser(sub):
    p = sub.add_parser("shell", help="a prompt on a running traced process (or an event log): report, top, "
                                     "scan, ...",
                       description="An interactive prompt on the traced process PID: ask for "
                                   "reports, see the leak suspects and their trends, scan for "
                                   "lost memory. Commands: " + ", ".join(COMMANDS) + ".  On an event "
                                   "log (PROG-PID.events): its suspects over time, peak, at, between, "
                                   "temporary, lifetimes, usage ('help' there).")
    p.add_argument("target", metavar="PID|HOST:PORT|FILE.events",
                   help="a traced process here, one on another host started with "
                        "listen=HOST:PORT, or an event log")
    p.add_argument("-c", metavar="COMMANDS", dest="commands",
                   help="run these commands (separated by ';') and exit")
    p.add_argument("--timeout", metavar="SECONDS", type=float, default=60.0,
                   help="how long to wait for a report or a scan (default 60)")
    p.add_argument("--secret-file", metavar="FILE",
                   help="remote: the secret the process printed (else $MEMLEAK_SECRET, or asked)")
    p.add_argument("--dir", metavar="DIR", default=".",
                   help="remote: where its reports are copied to (default: here)")
    p.set_defaults(func=run)


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


def _one(session, line):
    """Run a line; its status (0, or 1/2 after saying why)."""
    try:
        return 0 if session.run(line) else None
    except UsageError as e:
        print(f"libmemleak: shell: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LiveError, RemoteError, MemlogError, EventsError, OSError) as e:
        print(f"libmemleak: shell: {e}", file=sys.stderr)
        return EXIT_FAILED


def _interactive(session):
    import readline
    try:
        readline.read_history_file(HISTORY)
    except OSError:
        pass
    readline.set_completer(lambda prefix, i: ([c for c in session.commands if c.startswith(prefix)] + [None])[i])
    readline.parse_and_bind("tab: complete")
    session.say(f"libmemleak shell on {session.label}; 'help' lists the commands")
    status = 0
    try:
        while True:
            try:
                line = input(session.prompt)
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
    if is_event_log(args.target):
        return None
    if args.target.isdigit():
        return LocalTarget(int(args.target), args.timeout)
    if os.path.lexists(args.target):  # a file after all: say what is wrong with it
        try:
            with open(args.target, "rb"):
                pass
        except OSError as e:
            raise UsageError(f"cannot read {args.target!r}: {e.strerror}") from None
        raise UsageError(f"{args.target!r} is not an event log (PROG-PID.events): shell takes a PID, HOST:PORT "
                         "or an event log; for report files, libmemleak report")
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
        target = connect(args)
        session = Session(target) if target is not None else LogSession(args.target)
    except UsageError as e:
        print(f"libmemleak: shell: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LiveError, RemoteError, EventsError) as e:
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
