"""glibc's own statistics of each arena -- what mallinfo2() and
malloc_info() say inside the program -- read from outside it
(native/reporter/glibc_arenas.c): the memory each arena has from the
system, what of it is free and where (its bins, fastbins, the top chunk),
free chunks by size.  It answers where malloc's free memory lies: many
free chunks pinned between live blocks (fragmentation) or a top chunk
glibc has not given back (docs/memory.md)."""

from dataclasses import dataclass

import cffi

from libmemleak import reporter_library
from libmemleak.daemon.report_core import read_words

ffi = cffi.FFI()
ffi.cdef("""
struct mlk_glibc_arena {
    uint64_t at, system, max_system, top, bins_bytes, bins_chunks, fast_bytes, fast_chunks;
    uint64_t class_bytes[8], class_chunks[8];
    int32_t partial, pad;
};
int mlk_glibc_arenas(int, uint64_t, uint64_t, const uint64_t *, int, const uint64_t *, int,
                     struct mlk_glibc_arena *, int);
""")
lib = reporter_library(ffi)

ARENAS_MAX = 64          # said per report; more are counted
CLASSES = 8
# The size classes' upper bounds (chunk bytes), as the header's and the shell's words.
CLASS_NAMES = ("<64 B", "<256 B", "<1 KiB", "<4 KiB", "<16 KiB", "<64 KiB", "<256 KiB", ">=256 KiB")
LIBC_NAMES = ("/libc.so", "/libc-")


@dataclass
class Arena:
    system: int            # bytes it has from the system
    max_system: int
    top: int               # the top chunk: free, at its memory's end (what trimming gives back)
    bins_bytes: int        # free chunks between live ones (and the unsorted bin)
    bins_chunks: int
    fast_bytes: int        # freed small chunks in fastbins
    fast_chunks: int
    classes: tuple         # (chunks, bytes) per size class, bins and fastbins
    partial: bool          # a list could not be read to its end (it changed, or was cut)
    torn: bool = False     # figures no arena can have: read while the program changed them

    @property
    def free(self):
        """Free as mallinfo2's fordblks counts it."""
        return self.top + self.bins_bytes + self.fast_bytes


def read(pid, maps, heap_starts):
    """(arenas, how many there are) of process pid, main first, or a
    reason (str) they cannot be found.  maps: its mappings (memory_use's:
    start, end, perms, path); heap_starts: the start of each non-main
    arena heap (its heap_info names its arena)."""
    heap = next(((m.start, m.end) for m in maps if m.path == "[heap]"), (0, 0))
    libc = [m for m in maps if "w" in m.perms[:2] and any(n in m.path for n in LIBC_NAMES)]
    search = ffi.new("uint64_t[]", [x for m in libc for x in (m.start, m.end)] or [0])
    named = [read_words(pid, start, 1)[0] for start in heap_starts[:ARENAS_MAX]]
    named_c = ffi.new("uint64_t[]", named or [0])
    out = ffi.new("struct mlk_glibc_arena[]", ARENAS_MAX)
    n = lib.mlk_glibc_arenas(pid, heap[0], heap[1], search, len(libc), named_c, len(named), out, ARENAS_MAX)
    if n < 0:
        return "out of memory"
    if n == 0:
        return ("no glibc arena found (another allocator, or a C library this reader does not know)"
                if heap != (0, 0) or named else "glibc's malloc has no heap yet")
    mapped = sum(m.end - m.start for m in maps)
    return [_arena(out[i], mapped) for i in range(min(n, ARENAS_MAX))], n


def _arena(a, mapped):
    """One arena, each figure bounded (they are the program's memory's to say).
    One whose figures exceed all the process has mapped, or whose free
    memory exceeds what it has from the system, was read as it changed (an
    exit report taken mid-teardown read 293 TB in one field): torn, said
    and not used (#64 item 4)."""
    v = [min(x, 1 << 62) for x in (a.system, a.max_system, a.top, a.bins_bytes, a.bins_chunks, a.fast_bytes,
                                   a.fast_chunks)]
    system, max_system, top, bins, _, fast, _ = v
    torn = (max(system, max_system, top, bins, fast) > mapped
            or top + bins + fast > max(system, max_system))
    return Arena(*v, tuple((min(a.class_chunks[k], 1 << 62), min(a.class_bytes[k], 1 << 62))
                           for k in range(CLASSES)), bool(a.partial), torn)


def header_lines(found):
    """The header's lines (docs/memlog.md): `memory-malloc-arenas N
    [partial]`, then per arena `memory-malloc-arena I SYSTEM MAX TOP
    BINS_BYTES BINS_CHUNKS FAST_BYTES FAST_CHUNKS` and `memory-malloc-free
    I` with chunks and bytes per size class; or why none is known."""
    if isinstance(found, str):
        return [("memory-malloc-arenas", f"not known: {found}")]
    arenas, n = found
    partial = " partial" if any(a.partial or a.torn for a in arenas) else ""
    lines = [("memory-malloc-arenas", f"{n}{partial}")]
    for i, a in enumerate(arenas):
        if a.torn:  # (readers stop at it: the arenas after it are not used either)
            lines.append((f"memory-malloc-arena {i}", "not known: read as the program changed it (torn)"))
            continue
        lines.append((f"memory-malloc-arena {i}", f"{a.system} {a.max_system} {a.top} {a.bins_bytes} "
                                                   f"{a.bins_chunks} {a.fast_bytes} {a.fast_chunks}"))
        lines.append((f"memory-malloc-free {i}", " ".join(f"{c} {b}" for c, b in a.classes)))
    return lines
