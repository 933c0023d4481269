"""Names of JIT-compiled code, from the map a runtime writes for Linux
perf: /tmp/perf-PID.map, a line per piece of code, "START SIZE name" (hex
numbers), later lines over earlier ones where code was replaced.  Node
(--perf-basic-prof), the JVM (perf-map-agent), Python 3.12 (-X perf) and
others write it; a frame in code no module holds is named from it.

The traced program writes that file: it is hostile input.  It is read
only when it is a regular file owned by the program's user (a file
someone else planted in /tmp is not the program's), never through a
symbolic link, at most MAX_BYTES of it (files/owned.py); names are cut and their control characters shown as
'?' (a tab or newline would forge a report's frame lines).  It is read
again when it has changed (the runtime appends as it compiles)."""

import bisect

from libmemleak.files.memlog import header_text
from libmemleak.files.owned import owner_of, read_owned

MAX_BYTES = 64 << 20
MAX_NAME = 512
LOOK_BACK = 64  # overlapping entries looked at per address


class PerfMap:
    def __init__(self, pid, pid_inside):
        """pid: as we number it; pid_inside: as the process numbers itself
        (its pid namespace's), which names its file in its own /tmp."""
        self.pid = pid
        self.path = f"/proc/{pid}/root/tmp/perf-{pid_inside}.map"
        self.shown = f"/tmp/perf-{pid_inside}.map"  # the module a named frame is said to be in
        self._seen = None      # (size, mtime_ns) of the file as last read
        self._starts, self._entries = [], []

    def frame_at(self, address):
        """(name, offset from the code's start), or None."""
        self._refresh()
        i = bisect.bisect_right(self._starts, address)
        best = None
        for start, end, order, name in self._entries[max(0, i - LOOK_BACK):i][::-1]:
            if start <= address < end and (best is None or order > best[2]):
                best = (name, address - start, order)
        return best[:2] if best else None

    def _refresh(self):
        owner = owner_of(self.pid)
        found = read_owned(self.path, owner, MAX_BYTES, self._seen) if owner is not None else None
        if found is None or found[1] is None:
            return
        self._seen, data = found
        entries = []
        for order, line in enumerate(data.decode("utf-8", "replace").splitlines()):
            parts = line.split(" ", 2)
            if len(parts) != 3:
                continue
            try:
                start, size = int(parts[0], 16), int(parts[1], 16)
            except ValueError:
                continue
            if 0 < size < 1 << 32 and 0 <= start < 1 << 64:
                entries.append((start, start + size, order, header_text(parts[2][:MAX_NAME])))
        entries.sort()
        self._entries = entries
        self._starts = [e[0] for e in entries]
