"""A standby for the reporter, so that a killed reporter does not take the
program's last report with it.

The counters live in the program's memfd segment, which lasts while some
process holds it.  If the reporter is killed (SIGKILL, the OOM killer) and
then the program dies too, nobody holds it and the final report is lost.
So a reporter forks a standby first thing, before any thread: a process
that holds the segment and waits on a pipe.  The reporter writes "done"
when its work is over; a pipe that closes without it means the reporter
died, and the standby becomes the next reporter (exec, same arguments),
which reports on the program alive or writes its death report.

The standby is nobody's child to wait for: it is the reporter's child, and
the reporter's parent is init or a subreaper above the program, never the
program itself (native/hook/spawn.c).  It holds the program's stderr only as
/dev/null: a pipe the program's stderr feeds (`prog 2>&1 | tee`) must end
when the reporter lets go of it.

A standby killed alone is replaced: the reporter looks at each wake-up
(Standby.check) and starts another -- a new Python process this time
(_reporter_main.py with MEMLEAK_STANDBY_PIPE set), as the reporter has
threads by then and a fork of it would not be safe to run Python in."""

import os
import stat
import sys

PIDFD_PARKED = 9      # where the standby keeps the program's pidfd (4 in a reporter:
                      # tools find reporters by their fd 4)
MAX_TAKEOVERS = 16    # reporter starts after which a standby lets the program be (a crash loop)
MAX_REPLACED = 16     # standbys a reporter starts again after one was killed
PIPE_ENV = "MEMLEAK_STANDBY_PIPE"  # a standby started anew: its pipe's descriptor
DONE = b"d"


class Standby:
    """The reporter's side of its standby: say done, or replace it."""

    def __init__(self, pid, w, main_script):
        self.pid, self.w, self.main_script = pid, w, main_script
        self.replaced = 0

    def done(self):
        """The reporter's work is done: the standby exits."""
        if self.w is not None:
            try:
                os.write(self.w, DONE)
                os.close(self.w)
            except OSError:
                pass
            self.w = None

    def check(self, say):
        """Start another standby if this one has died (killed alone)."""
        if self.pid is None:
            return
        try:
            gone = os.waitpid(self.pid, os.WNOHANG)[0] == self.pid
        except ChildProcessError:
            # Not ours to wait for: SIGCHLD ignored, which a reporter inherits
            # from a program that ignores it.  Whether it lives is not known:
            # it is not replaced (else one more standby at every wake-up).
            gone = False
        if not gone:
            return
        self.pid = None
        try:
            os.close(self.w)
        except OSError:
            pass
        self.w = None
        if self.replaced >= MAX_REPLACED:
            return
        self.replaced += 1
        try:
            r, w = os.pipe()
        except OSError as e:
            say(f"the reporter's standby was killed and cannot be started again ({e.strerror}): "
                "if the reporter is killed too, the program's last report is lost")
            return
        try:
            os.set_inheritable(r, True)
            env = dict(os.environ, **{PIPE_ENV: str(r)})
            self.pid = os.posix_spawn(sys.executable, [sys.executable, "-E", "-B", self.main_script,
                                                       *sys.argv[1:]], env)
            self.w = w
        except OSError as e:
            os.close(w)
            say(f"the reporter's standby was killed and cannot be started again ({e.strerror}): "
                "if the reporter is killed too, the program's last report is lost")
        finally:
            os.close(r)


def start(segment_fd, pidfd, main_script, header):
    """Fork the standby; returns its Standby (done() when the reporter's
    work is done: the standby then exits).  `header`: the segment's header
    (cffi), through which the standby claims the reporter's place."""
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:
        return Standby(None, None, main_script)  # none: the program starts the next reporter
    if pid:
        os.close(r)
        return Standby(pid, w, main_script)
    try:
        os.close(w)
        _stand_by(r, segment_fd, pidfd, main_script, header)
    finally:
        os._exit(0)


def started_anew():
    """The pipe of a standby started anew by its reporter (Standby.check),
    or None: this is a reporter.  (The hook library starts reporters
    without PIPE_ENV in their environment; a value that is no pipe of ours
    is not believed.)"""
    text = os.environ.pop(PIPE_ENV, "")
    try:
        r = int(text)
        return r if r > 2 and stat.S_ISFIFO(os.fstat(r).st_mode) else None
    except (ValueError, OSError):
        return None


def serve_started_anew(r, segment_fd, pidfd, main_script):
    """A standby started anew by its reporter: its pipe `r`; the segment
    and pidfd at their places."""
    from libmemleak.daemon.segment import Segment
    try:
        segment = Segment.from_fd(segment_fd)
    except Exception:  # noqa: BLE001 -- no standby then; the program starts the next reporter
        return 0
    _stand_by(r, segment_fd, pidfd if _is_open(pidfd) else None, main_script, segment.header)
    return 0


def _is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _stand_by(r, segment_fd, pidfd, main_script, header):
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 2)
    os.close(null)
    if pidfd is not None:
        os.dup2(pidfd, PIDFD_PARKED)
        os.close(pidfd)
    reporter = os.getppid()
    said = b""
    while True:
        try:
            chunk = os.read(r, 16)
        except InterruptedError:
            continue
        if not chunk:
            break
        said += chunk
    if DONE in said or header.final_done or header.reporter_starts >= MAX_TAKEOVERS:
        return
    # Claim the reporter's place from the dead one, unless the program has
    # started another meanwhile (it claims it the same way: native/hook/spawn.c).
    if not _claim(header, reporter, os.getpid()):
        return
    header.reporter_starts += 1
    if pidfd is not None:
        os.dup2(PIDFD_PARKED, pidfd)
        os.close(PIDFD_PARKED)
    os.set_inheritable(segment_fd, True)
    if pidfd is not None:
        os.set_inheritable(pidfd, True)
    try:
        os.execv(sys.executable, [sys.executable, "-E", "-B", main_script, *sys.argv[1:]])
    except OSError:
        header.reporter_pid = -1  # the program then says no reporter could start


def _claim(header, old, new):
    """reporter_pid: old -> new, atomically (the program may be claiming it
    at the same moment)."""
    from libmemleak.daemon.report_core import lib
    return bool(lib.mlk_rc_claim_reporter(header, old, new))
