"""The segment reader refuses what is not a valid segment, clearly."""

import os
import struct

import pytest

from helpers import Traced, compile_program, wait_for_reporter
from libmemleak.layout import CONST, HEADER_SIZE
from libmemleak.segment import Segment, SegmentError


def memfd_with(data, size=None):
    fd = os.memfd_create("test")
    os.write(fd, data)
    if size:
        os.ftruncate(fd, size)
    return fd


@pytest.mark.parametrize("data, message", [
    (b"", "too small"),
    (b"\0" * HEADER_SIZE, "bad magic"),
    (struct.pack("<QII", CONST["MLK_MAGIC"], 99, HEADER_SIZE) + b"\0" * (HEADER_SIZE - 16),
     "layout version 99"),
    (struct.pack("<QIIQ", CONST["MLK_MAGIC"], CONST["MLK_LAYOUT_VERSION"], HEADER_SIZE, 1 << 40)
     + b"\0" * (HEADER_SIZE - 24), "claims more bytes"),
    (struct.pack("<QIIQQ", CONST["MLK_MAGIC"], CONST["MLK_LAYOUT_VERSION"], HEADER_SIZE, 8192, 8)
     + b"\0" * (HEADER_SIZE - 32), "outside the segment"),
])
def test_invalid_segments_are_refused(data, message):
    fd = memfd_with(data, 8192 if data else None)
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
