"""The allocator's own statistics, asked inside the program: jemalloc's
stats.* (native/hook/allocator_stats.c).  Where glibc's arenas are read
from outside (glibc_arenas.py), jemalloc's numbers live in its own
structures, which only its mallctl() reads safely -- so the reporter asks
and the program's next allocation answers, where the hook holds no lock
(docs/memory.md).  A process that allocates nothing within ANSWER_WAIT
keeps its last answer, said with its age."""

import os
import struct
import time

from libmemleak.daemon.layout import ffi as layout_ffi
from libmemleak.daemon.procfs import proc_dir
from libmemleak.files.memlog import header_text

ANSWER_WAIT = 0.2     # seconds a report waits for the program's next allocation
NAMES = ("allocated", "active", "metadata", "resident", "mapped", "retained")
JEMALLOC = 1          # MLK_ALLOC_STATS_JEMALLOC
ATTEND_STATS = 2      # MLK_ATTEND_STATS


def _ask(pid, h):
    """Bump the ask and set the program's attention bit (its own word,
    written through /proc/PID/mem as `shell stop` writes the collecting
    flag); None, or why it cannot be asked."""
    h.alloc_stats_asked = (h.alloc_stats_asked + 1) & 0xffffffff
    try:
        mem = os.open(f"{proc_dir(pid)}/mem", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return f"cannot write its memory ({e.strerror}): asking needs the rights a debugger needs"
    try:
        # The hook only ever clears this bit, and sets the events bit before
        # collection starts: a bit lost to a race costs one answer.
        now = struct.unpack("i", os.pread(mem, 4, h.attention_addr))[0]
        os.pwrite(mem, struct.pack("i", now | ATTEND_STATS), h.attention_addr)
    except (OSError, struct.error) as e:
        return f"cannot write its memory ({getattr(e, 'strerror', None) or e})"
    finally:
        os.close(mem)
    return None


def header_lines(pid, h, wait=ANSWER_WAIT):
    """`allocator-stats jemalloc ALLOCATED ACTIVE METADATA RESIDENT MAPPED
    RETAINED AGE` (docs/memlog.md) and `allocator-version`, or `not known:
    WHY`; nothing when the program has no allocator to ask."""
    if h.alloc_stats_kind != JEMALLOC or not h.attention_addr:
        return []
    refused = _ask(pid, h)
    asked = h.alloc_stats_asked
    deadline = time.monotonic() + wait
    while not refused and h.alloc_stats_answered != asked and time.monotonic() < deadline:
        time.sleep(0.005)
    answered = h.alloc_stats_answered == asked
    if not h.alloc_stats_ns:  # never answered
        why = refused or f"asked; the program made no allocation that could answer in {wait:g} s"
        return [("allocator-stats", f"not known: {why}")]
    if h.alloc_stats_failed:
        return [("allocator-stats", "not known: jemalloc's mallctl refused stats.* (built without stats?)")]
    age = 0.0 if answered else max(0, time.clock_gettime_ns(time.CLOCK_MONOTONIC) - h.alloc_stats_ns) / 1e9
    values = " ".join(str(min(h.alloc_stats[i], 1 << 62)) for i in range(len(NAMES)))
    version = header_text(layout_ffi.string(h.alloc_stats_version, 63).decode("ascii", "replace"))
    lines = [("allocator-stats", f"jemalloc {values} {age:.3f}")]
    if version:
        lines.append(("allocator-version", f"jemalloc {version}"))
    return lines
