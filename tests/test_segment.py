"""The segment reader refuses what is not a valid segment, clearly."""

import os
import signal
import struct

import pytest

from helpers import Traced, compile_program, wait_for_reporter
from libmemleak.daemon.layout import CONST, HEADER_SIZE
from libmemleak.daemon.segment import Segment, SegmentError


def memfd_with(data, size=None):
    fd = os.memfd_create("test")
    os.write(fd, data)
    if size:
        os.ftruncate(fd, size)
    return fd


SEGMENT = (HEADER_SIZE + 4095) // 4096 * 4096 + 4096  # a header and a page after it


@pytest.mark.parametrize("data, message", [
    (b"", "too small"),
    (b"\0" * HEADER_SIZE, "bad magic"),
    (struct.pack("<QII", CONST["MLK_MAGIC"], 99, HEADER_SIZE) + b"\0" * (HEADER_SIZE - 16),
     "layout version 99"),
    (struct.pack("<QIIQ", CONST["MLK_MAGIC"], CONST["MLK_LAYOUT_VERSION"], HEADER_SIZE, 1 << 40)
     + b"\0" * (HEADER_SIZE - 24), "claims more bytes"),
    (struct.pack("<QIIQQ", CONST["MLK_MAGIC"], CONST["MLK_LAYOUT_VERSION"], HEADER_SIZE, SEGMENT, SEGMENT)
     + b"\0" * (HEADER_SIZE - 32), "outside the segment"),
])
def test_invalid_segments_are_refused(data, message):
    fd = memfd_with(data, SEGMENT if data else None)
    try:
        with pytest.raises(SegmentError, match=message):
            Segment.from_fd(fd, writable=False)
    finally:
        os.close(fd)


def test_reads_a_live_program_segment_through_proc(workdir):
    """What attaching to a running process will build on."""
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    reporter = wait_for_reporter(t.pid)
    seg = Segment.from_path(f"/proc/{reporter}/fd/3")
    snap = seg.take_snapshot()
    assert snap.pid == t.pid and snap.exe == prog and snap.collecting
    assert any(m.path == prog and m.build_id for m in snap.modules)
    assert sum(snap.live_bytes) >= 4242
    t.resume()
    assert t.finish() == 0


def test_corrupted_live_segment_still_gives_a_report(workdir):
    """The traced program may scribble over the segment.  Garbage in the
    stack table, counters and module table leaves the reporter writing a
    report (bad entries counted and skipped), never a traceback."""
    import random
    from helpers import report_path, wait_for_file
    from libmemleak.files import memlog
    from libmemleak.daemon.layout import STACK_SIZE
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    reporter = wait_for_reporter(t.pid)
    fd = os.open(f"/proc/{reporter}/fd/3", os.O_RDWR)
    try:
        seg = Segment.from_fd(fd, writable=True)
        h = seg.header
        rng = random.Random(99)
        used = h.stacks_used
        with open(f"/proc/{reporter}/fd/3", "r+b") as f:
            for _ in range(200):  # random words of the used stack entries and beyond
                i = rng.randrange(used + 50)
                f.seek(h.stacks_off + i * STACK_SIZE + 8 * rng.randrange(STACK_SIZE // 8))
                f.write(struct.pack("<Q", rng.getrandbits(64)))
            f.seek(h.modules_off + 8)  # a module's lo/hi
            f.write(struct.pack("<QQ", rng.getrandbits(64), rng.getrandbits(64)))
        h.stacks_used = used + 50
        h.modules_used = 1 << 40
        h.strings_used = 1 << 40
        seg.close()
    finally:
        os.close(fd)
    t.proc.send_signal(signal.SIGUSR1)
    report = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 1)))
    assert report.header["reason"] == "signal"
    t.resume()
    assert t.finish() == 0
    assert "reporter error" not in t.stderr and "Traceback" not in t.stderr, t.stderr


def test_tables_moved_after_the_open_are_not_followed(workdir):
    """Where the tables lie is read from the header once, when the
    reporter opens the segment, and checked then: a program that later
    writes other offsets and capacities there (past the segment's end)
    does not make the reporter read outside it -- the report is written
    from the tables as they were."""
    from helpers import report_path, wait_for_file
    from libmemleak.files import memlog
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    reporter = wait_for_reporter(t.pid)
    t.proc.send_signal(signal.SIGUSR1)  # (the reporter has opened the segment once it wrote a report)
    wait_for_file(report_path(workdir, t.prog, t.pid, 1))
    fd = os.open(f"/proc/{reporter}/fd/3", os.O_RDWR)
    try:
        seg = Segment.from_fd(fd, writable=True)
        h = seg.header
        far = 1 << 46
        h.modules_off = h.stripes_off = h.stacks_off = h.frames_off = far
        h.modules_cap = h.stacks_cap = h.frames_cap = h.strings_cap = far
        h.modules_used = h.frames_used = 1 << 40
        seg.close()
    finally:
        os.close(fd)
    t.proc.send_signal(signal.SIGUSR1)
    report = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 2)))
    assert report.header["reason"] == "signal" and int(report.header["live-bytes"]) >= 4242
    t.resume()
    assert t.finish() == 0
    assert "reporter error" not in t.stderr and "Traceback" not in t.stderr, t.stderr
