"""Talking to a traced process from outside it, without a signal.

The control channel is the process's own segment: a traced process keeps
it open as a memfd, and anyone allowed to open /proc/PID/fd/N of it -- the
kernel's ptrace access check, the one gdb passes: the same user (and a
dumpable process), or root -- can post a report request in it and wait for
the answer.  No socket, no name to guess, nothing another user's process
can reach.  Whoever serves the process serves the request: its own
reporter (woken through the futex), or the keeper, which holds the
segments of descendants that have no reporter of their own (it looks at
their requests every half second: a worker that dropped its privileges
cannot poke it).

`libmemleak snapshot` and `libmemleak scan` use this; `attach`/`shell`
are to reuse it."""

import contextlib
import os

from libmemleak.daemon.procfs import not_allowed, proc_dir
from libmemleak.daemon.requests import (LiveError, not_collecting_why, request_on_segment,  # noqa: F401
                                        set_collecting_on_segment)
from libmemleak.daemon.segment import Segment, SegmentError
from libmemleak.daemon.trust import namespace_pids

MEMFD_NAME = "/memfd:libmemleak"


def open_segment(pid, writable=True):
    """The segment of the traced process `pid`, mapped writable (or only
    readable: the exporter, which must not touch it); (segment, fd)."""
    where = proc_dir(pid)
    fd_dir = f"{where}/fd"
    try:
        with open(f"{where}/stat", "rb") as f:
            if f.read().rpartition(b")")[2].split()[:1] in ([b"Z"], [b"X"]):
                raise LiveError(f"process {pid} has exited")
        names = os.listdir(fd_dir)
    except FileNotFoundError:
        raise LiveError(f"no process {pid}") from None
    except PermissionError:
        raise LiveError(not_allowed(pid, "run as its user or as root")) from None
    found_other = False
    own_pids = namespace_pids(pid)
    for name in names:
        try:
            if not os.readlink(f"{fd_dir}/{name}").startswith(MEMFD_NAME):
                continue
            fd = os.open(f"{fd_dir}/{name}", (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC)
        except PermissionError:
            raise LiveError(not_allowed(pid, "run as its user or as root", "open its segment")) from None
        except OSError:
            continue
        try:
            segment = Segment.from_fd(fd, writable)
        except (OSError, SegmentError, ValueError):
            os.close(fd)
            continue
        if segment.header.pid in own_pids:  # its own, by any pid it has (pid namespaces)
            segment.pid = pid
            return segment, fd
        found_other = True  # a parent's segment, inherited across fork: not this one
        segment.close()
        os.close(fd)
    if found_other:
        raise LiveError(f"process {pid} is traced but has no segment of its own yet")
    raise LiveError(f"process {pid} is not traced by libmemleak (start it with 'libmemleak run')")


@contextlib.contextmanager
def collecting_segment(pid):
    """The segment of process `pid`, which must be collecting; closed after."""
    segment, fd = open_segment(pid)
    try:
        if not segment.header.collecting:
            raise LiveError(not_collecting_why(segment.header, segment.pid))
        yield segment
    finally:
        segment.close()
        os.close(fd)


def request_report(pid, timeout=60.0, scan=False, heuristics=None):
    """Ask process `pid` for a report -- with a reachability scan if
    `scan` -- and wait for it; the report's path."""
    with collecting_segment(pid) as segment:
        return request_on_segment(segment, timeout, scan, heuristics)


def set_collecting(pid, on):
    """Pause (on=False) or resume the recording of new allocations in the
    traced process `pid`, without a signal: its hooks read a flag of its
    own, which is written through /proc/PID/mem (the kernel's ptrace check:
    the same user, or root); the segment's `paused` tells its exit and its
    report signal that reports are still owed.  Frees keep being counted
    while paused, so reports then show only what is released."""
    with collecting_segment(pid) as segment:
        set_collecting_on_segment(segment, on)
