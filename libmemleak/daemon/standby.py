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
when the reporter lets go of it."""

import os
import sys

PIDFD_PARKED = 9      # where the standby keeps the program's pidfd (4 in a reporter:
                      # tools find reporters by their fd 4)
MAX_TAKEOVERS = 16    # reporter starts after which a standby lets the program be (a crash loop)
DONE = b"d"


def start(segment_fd, pidfd, main_script, header):
    """Fork the standby; returns what the reporter calls when its work is
    done (the standby then exits).  `header`: the segment's header (cffi),
    through which the standby claims the reporter's place."""
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:
        return lambda: None  # no standby: as before, the program starts the next reporter
    if pid:
        os.close(r)
        return lambda: _say_done(w)
    try:
        os.close(w)
        _stand_by(r, segment_fd, pidfd, main_script, header)
    finally:
        os._exit(0)


def _say_done(w):
    try:
        os.write(w, DONE)
        os.close(w)
    except OSError:
        pass


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
