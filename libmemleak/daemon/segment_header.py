"""A few fields and strings of a segment's header, read through its
descriptor without mapping the segment (the keeper's look at the
processes it keeps; Segment maps and checks the whole)."""

import mmap
import os

from libmemleak.daemon.layout import CONST, HEADER_SIZE, ffi
from libmemleak.files.report_names import safe_name


def header_fields(fd, names):
    """A copy of a few header fields of the segment on `fd`, mapping only
    the header; None if it is not a segment of this libmemleak."""
    try:
        if os.fstat(fd).st_size < HEADER_SIZE:
            return None
        with mmap.mmap(fd, HEADER_SIZE, mmap.MAP_SHARED, mmap.PROT_READ) as m:
            buf = ffi.from_buffer(m)
            try:
                h = ffi.cast("struct mlk_header *", buf)
                if (h.magic != CONST["MLK_MAGIC"] or h.header_size != HEADER_SIZE
                        or h.layout_version != CONST["MLK_LAYOUT_VERSION"]):
                    return None
                return {name: getattr(h, name) for name in names}
            finally:
                ffi.release(buf)
    except (OSError, ValueError):
        return None


def header_string(fd, off_field, len_field):
    """One string of the segment on `fd` (named by its header's *_off and
    *_len fields), read without mapping the segment; None if unreadable."""
    h = header_fields(fd, ("strings_off", "strings_cap", "strings_used", off_field, len_field))
    if h is None:
        return None
    used = min(h["strings_used"], h["strings_cap"])
    off, length = h[off_field], h[len_field]
    if off + length > used or length > 1 << 16:
        return None
    try:
        raw = os.pread(fd, length, h["strings_off"] + off)
    except OSError:
        return None
    return raw.decode("utf-8", "surrogateescape") if len(raw) == length else None


def program_name_of(fd):
    """Segment.program_name of the segment on `fd`, without mapping it."""
    return program_name(header_string(fd, "name_off", "name_len") or "",
                         header_string(fd, "exe_off", "exe_len") or "")


def program_name(invoked, exe):
    """What reports are named after: the program as invoked (argv[0]'s
    last part), else the executable's name."""
    return safe_name(invoked or os.path.basename(exe) or "unknown")
