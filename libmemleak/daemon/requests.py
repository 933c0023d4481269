"""Requests posted in an open segment: a report (with a reachability scan
or not), waited for; collection paused or resumed.  The live commands
(live/client.py) open the segment of a process by its pid first; the
remote server holds one already."""

import errno
import os
import struct
import time

from libmemleak.daemon import report_core
from libmemleak.daemon.procfs import proc_dir
from libmemleak.daemon.futex import futex_wait, futex_wake


class LiveError(Exception):
    """Why a live process cannot be asked (one line, for the user)."""


def not_collecting_why(h, pid):
    if h.detach_requests:
        return f"process {pid} was detached from (libmemleak detach): it is not traced any more"
    return f"process {pid} is not collecting (it waits for its mtrace(), or called muntrace())"


def spawn_words(error):
    """The hook's spawn_error (shm_layout.h: errno | MLK_SPAWN_* << 16) in words."""
    step = {1: "reading its script", 2: "running its Python", 3: "creating its process"}.get(error >> 16, "starting it")
    code = error & 0xffff
    return f"{step}: {os.strerror(code)}" if code in errno.errorcode else step


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
        if h.reporter_pid < 0:  # the hook could start none (and said why on the program's stderr)
            raise LiveError(f"process {pid}: its reporter could not be started ({spawn_words(h.spawn_error)}): "
                            "no report can be written; the program's stderr says what to change")
        left = deadline - time.monotonic()
        if left <= 0:
            raise LiveError(f"process {pid}: no report within {timeout:g} s (is its reporter "
                            "running? the request stays posted and is served when one runs)")
        futex_wait(done_at, h.done_seq, min(left, 0.5))
    path = next((p for p in segment.report_paths(h.report_seq) if os.path.exists(p)), None)
    if h.report_seq == written_before or path is None:
        # Served, but nothing written: the directory refused it (deleted,
        # full, read-only).  The reporter keeps the data for the next one.
        directory = segment.report_dir()
        why = "it does not exist any more" if not os.path.isdir(directory) else "it refused the file"
        raise LiveError(f"process {pid}: no report was written in {directory}: {why} (the data is "
                        "kept for the next report)")
    return path


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
