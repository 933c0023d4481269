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
import struct
import time

from libmemleak import report_core
from libmemleak.segment import Segment, SegmentError, futex_wait, futex_wake
from libmemleak.trust import namespace_pids

MEMFD_NAME = "/memfd:libmemleak"


class LiveError(Exception):
    """Why a live process cannot be asked (one line, for the user)."""


def proc_dir(pid):
    """/proc/PID, or /proc/PID/task/TID of a live thread when the main thread
    has exited (pthread_exit): a zombie main thread has no fd, maps, mem,
    exe or root of its own while the others run."""
    def alive(stat_path):
        with open(stat_path, "rb") as f:
            return f.read().rpartition(b")")[2].split()[:1] not in ([b"Z"], [b"X"])
    try:
        if alive(f"/proc/{pid}/stat"):
            return f"/proc/{pid}"
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            if alive(f"/proc/{pid}/task/{tid}/stat"):
                return f"/proc/{pid}/task/{tid}"
    except OSError:
        pass
    return f"/proc/{pid}"


def maps_entry(line):
    """(lo, hi, perms, offset, path) of a line of /proc/PID/maps -- or of
    a mapping's first line in /proc/PID/smaps -- or None for any other."""
    parts = line.split(None, 5)
    if len(parts) < 5 or len(parts[1]) != 4:
        return None
    lo, _, hi = parts[0].partition("-")
    try:
        return int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16), parts[5].strip() if len(parts) > 5 else ""
    except ValueError:
        return None


def open_segment(pid):
    """The segment of the traced process `pid`, mapped writable."""
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
        raise LiveError(f"process {pid} belongs to another user: not allowed to read it "
                        "(run as its user or as root)") from None
    found_other = False
    own_pids = namespace_pids(pid)
    for name in names:
        try:
            if not os.readlink(f"{fd_dir}/{name}").startswith(MEMFD_NAME):
                continue
            fd = os.open(f"{fd_dir}/{name}", os.O_RDWR | os.O_CLOEXEC)
        except PermissionError:
            raise LiveError(f"process {pid}: not allowed to open its segment "
                            "(run as its user or as root)") from None
        except OSError:
            continue
        try:
            segment = Segment.from_fd(fd)
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


def not_collecting_why(h, pid):
    if h.detach_requests:
        return f"process {pid} was detached from (libmemleak detach): it is not traced any more"
    return f"process {pid} is not collecting (it waits for its mtrace(), or called muntrace())"


def request_on_segment(segment, timeout=60.0, scan=False, heuristics=None):
    """request_report on an open segment (the remote server's: it holds
    one)."""
    h = segment.header
    pid = segment.pid
    if not h.collecting and not h.paused:
        raise LiveError(not_collecting_why(h, pid))
    if scan and not h.trailer_key:
        raise LiveError(f"process {pid} cannot be scanned: the scan needs every block "
                        "tracked with a trailer (not sample=, not track=table)")
    if scan and heuristics is not None:  # read by the reporter as it serves the request
        h.scan_heuristics = heuristics
    post = report_core.lib.mlk_rc_post_scan if scan else report_core.lib.mlk_rc_post_snapshot
    written_before = h.report_seq
    mine = post(h)
    futex_wake(segment.field_address("request_seq"))
    done_at = segment.field_address("done_seq")
    deadline = time.monotonic() + timeout
    while ((h.done_seq - mine) & 0xffffffff) >= 1 << 31:  # done_seq before mine
        left = deadline - time.monotonic()
        if left <= 0:
            raise LiveError(f"process {pid}: no report within {timeout:g} s (is its reporter "
                            "running? the request stays posted and is served when one runs)")
        futex_wait(done_at, h.done_seq, min(left, 0.5))
    path = segment.report_path(h.report_seq)
    if h.report_seq == written_before or not os.path.exists(path):
        # Served, but nothing written: the directory refused it (deleted,
        # full, read-only).  The reporter keeps the data for the next one.
        directory = segment.report_dir()
        why = "it does not exist any more" if not os.path.isdir(directory) else "it refused the file"
        raise LiveError(f"process {pid}: no report was written in {directory}: {why} (the data is "
                        "kept for the next report)")
    return path


def set_collecting(pid, on):
    """Pause (on=False) or resume the recording of new allocations in the
    traced process `pid`, without a signal: its hooks read a flag of its
    own, which is written through /proc/PID/mem (the kernel's ptrace check:
    the same user, or root); the segment's `paused` tells its exit and its
    report signal that reports are still owed.  Frees keep being counted
    while paused, so reports then show only what is released."""
    with collecting_segment(pid) as segment:
        set_collecting_on_segment(segment, on)


def set_collecting_on_segment(segment, on):
    h = segment.header
    pid = segment.pid
    if not h.collecting_addr:
        raise LiveError(f"process {pid}: its libmemleak cannot be paused from outside")
    try:
        mem = os.open(f"{proc_dir(pid)}/mem", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise LiveError(f"process {pid}: cannot write its memory ({e.strerror}): pausing needs "
                        "the rights a debugger needs") from None
    try:
        if not on:
            h.paused = 1  # first: an exit in between still owes its report
        os.pwrite(mem, struct.pack("i", 1 if on else 0), h.collecting_addr)
        if on:
            h.paused = 0
    except OSError as e:
        raise LiveError(f"process {pid}: cannot write its memory ({e.strerror})") from None
    finally:
        os.close(mem)
