"""Where a traced process's resident memory goes, read from outside it:
its mappings (/proc/PID/smaps) sorted into the allocator's heaps, its big
blocks in mappings of their own, thread stacks, other anonymous memory,
shared memory, code and data, and the tracer's own -- so that a report can
answer "RSS keeps growing, but nothing leaks: why?" (docs/memory.md).

How each is told apart, without the program's help:
  - glibc's heaps: the main arena's is [heap]; every other arena's heaps
    are mappings glibc aligns to HEAP_MAX_SIZE (64 MiB on 64-bit), an rw
    part and, above it, the rest of the 64 MiB reserved PROT_NONE;
  - a block too big for the heaps is a mapping of its own that starts with
    a chunk header marked IS_MMAPPED (two words read from the process);
  - a thread's stack is the rw mapping its stack pointer is in, for a
    thread waiting in a system call (/proc/PID/task/TID/syscall says
    where); else an rw mapping right above its guard page (a small
    PROT_NONE mapping), as glibc's pthread_create lays it out -- a guard
    that an arena's PROT_NONE reserve happens to lie right below merges
    with it and is no longer small, so the pointer is asked first; the
    main thread's is [stack];
  - libmtrace.so's mappings, its segment (a memfd named libmemleak) and
    its tables (mapped inside the address range it reserves for them,
    the segment's own_lo..own_hi) are the tracer's.
What fits none is "other anonymous": the program's own mmaps (its entries
say which stacks made them), another allocator's arenas, the loader's.

Everything read here is the program's to change while it runs: a mapping
that comes or goes between two reads is counted where it was seen, and a
misread costs one report's split, never a wrong path or an exception."""

import bisect
import os
import time
from dataclasses import dataclass, field

from libmemleak.daemon import glibc_arenas, report_core
from libmemleak.daemon.procfs import maps_entry, proc_dir
from libmemleak.daemon.header_parts import SELF_LIBRARY

HEAP_MAX_SIZE = 64 << 20       # glibc's arena heap alignment on 64-bit
GUARD_MAX = 1 << 20            # a thread stack's guard is a page or a few
THREADS_MAX = 1 << 16          # threads whose stack pointers are read, at most
SETTLE_S = 0.05                # how long running threads are asked again (thread_stack_pointers)
IS_MMAPPED = 2
SMAPS_BYTES_MAX = 64 << 20     # more than any process's smaps: a bigger one is cut
# Shared memory that is not a file's data (a file mapped shared and
# read-only is code and data, as a font or a database file is).
SHARED_PATHS = ("/memfd:", "/SYSV", "/dev/shm/", "/dev/zero")

# The parts, in the order the header lists them.
PARTS = ("heap", "malloc-mapped", "thread-stacks", "anonymous", "shared", "code-data", "tracer")


@dataclass
class Part:
    resident: int = 0     # bytes in memory (Rss)
    mapped: int = 0       # bytes of address space (Size)
    count: int = 0        # mappings (the heaps: arenas)


@dataclass
class MemoryUse:
    parts: dict = field(default_factory=lambda: {name: Part() for name in PARTS})
    arenas: list = field(default_factory=list)   # glibc's heaps: [resident, mapped]; 0: the main arena's
    malloc_arenas: object = "not read"            # glibc_arenas.read's answer: its own statistics


@dataclass
class _Mapping:
    start: int
    end: int
    perms: str
    path: str
    rss: int = 0


def read_smaps(pid):
    """The process's mappings with their resident bytes, or a reason (str)
    why they cannot be read."""
    path = f"{proc_dir(pid)}/smaps"  # a live thread's: a main thread gone by pthread_exit has none
    try:
        with open(path, "rb") as f:
            data = f.read(SMAPS_BYTES_MAX)
    except OSError as e:
        return f"{path}: {e.strerror or e}"
    out = []
    for line in data.decode("utf-8", "replace").split("\n"):
        if out and line.startswith("Rss:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                out[-1].rss = int(parts[1]) * 1024
            continue
        entry = maps_entry(line)
        if entry is not None:
            lo, hi, perms, _, where = entry
            out.append(_Mapping(lo, hi, perms, where))
    return out


RUNNING = "running"  # what a running thread's /proc syscall file says (_stack_pointer)


def thread_stack_pointers(pid, settle_s=SETTLE_S):
    """The stack pointers of the process's threads that wait in a system
    call or are blocked (/proc/PID/task/TID/syscall: "NR ARGS... SP PC",
    or "-1 SP PC"), sorted; a file that cannot be read gives none.

    A thread other than the main one that is running ("running") is asked
    again for up to settle_s: one caught between waits -- the thread that
    ran the report signal's handler, where the main thread blocks the
    signal, is back in its wait a moment later -- would otherwise go
    uncounted where its guard page does not tell it either (a guard right
    above an arena's reserve merges with it).  One that stays running
    (busy) gives none, as before, after that bounded wait."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")[:THREADS_MAX]
    except OSError:
        return []
    sps, running = [], []
    for tid in tids:
        sp = _stack_pointer(pid, tid)
        if sp == RUNNING:
            if tid != str(pid):  # (the main thread's stack is [stack] anyway)
                running.append(tid)
        elif sp is not None:
            sps.append(sp)
    deadline = time.monotonic() + settle_s
    while running and time.monotonic() < deadline:
        time.sleep(0.001)
        still = []
        for tid in running:
            sp = _stack_pointer(pid, tid)
            if sp == RUNNING:
                still.append(tid)
            elif sp is not None:
                sps.append(sp)
        running = still
    return sorted(sps)


def _stack_pointer(pid, tid):
    """Thread tid's stack pointer as its syscall file says, RUNNING, or None."""
    try:
        with open(f"/proc/{pid}/task/{tid}/syscall", "rb") as f:
            fields = f.read(512).split()
    except OSError:
        return None
    if fields == [b"running"]:
        return RUNNING
    if len(fields) >= 3:
        try:
            return int(fields[-2], 16)
        except ValueError:
            pass
    return None


def _threads(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 1


def _in_main_stack(maps, sp):
    return any(m.path == "[stack]" and m.start <= sp < m.end for m in maps)


def _holds_a_stack_pointer(sps, m):
    i = bisect.bisect_left(sps, m.start)
    return i < len(sps) and sps[i] < m.end


def _arena_heap_start(pid, m):
    """Whether m, writable and at a 64 MiB boundary, begins an arena's heap:
    its first words are glibc's heap_info -- its arena (not 0, 8-aligned),
    the previous heap, the bytes in use and those made writable (neither 0
    nor over 64 MiB).  A thread's stack can begin at such a boundary too
    (one that ends where the tracer's range begins did, in 1 run in ~25:
    its second thread's stack taken for an arena); the bottom of a stack
    is never-touched zeros."""
    ar_ptr, _prev, size, writable = report_core.read_words(pid, m.start, 4)
    return ar_ptr != 0 and ar_ptr % 8 == 0 and 0 < size <= HEAP_MAX_SIZE and 0 < writable <= HEAP_MAX_SIZE


def _anonymous(m):
    return not m.path or m.path.startswith("[anon")


def _is_tracer(m):
    return m.path.endswith("/" + SELF_LIBRARY) or m.path.startswith("/memfd:libmemleak")


def _malloc_mapped(pid, m):
    """A glibc block in a mapping of its own: its first words are the
    chunk's prev_size (the chunk's offset into the mapping, 0 but for
    aligned blocks) and size, marked IS_MMAPPED, ending within the mapping."""
    offset, size = report_core.read_words(pid, m.start, 2)
    return bool(size & IS_MMAPPED) and 0 < (size & ~7) and offset % 16 == 0 and \
        offset + (size & ~7) <= m.end - m.start and offset < m.end - m.start


def measure(pid, own=(0, 0)):
    """The process's MemoryUse, or a reason (str) why it cannot be told.
    own: the address range the tracer keeps its tables in."""
    maps = read_smaps(pid)
    if isinstance(maps, str):
        return maps
    sps = thread_stack_pointers(pid)
    # Guard pages tell thread stacks only for threads whose stack pointer
    # did not (busy ones): an rw mapping above a PROT_NONE one is also how
    # JavaScript engines and allocators lay out their own regions (a
    # one-thread program had 101 "thread stacks", a 16-thread Firefox
    # 1,947: #64 item 4).
    guard_budget = _threads(pid) - 1 - sum(1 for sp in sps if not _in_main_stack(maps, sp))
    use = MemoryUse()
    use.arenas.append([0, 0])  # the main arena's [heap] (none: glibc's malloc used no brk)
    arena_of = {}   # a 64 MiB window's start -> index in use.arenas
    prev = None
    for m in maps:
        size, name = m.end - m.start, None
        if _is_tracer(m) or own[0] <= m.start < own[1]:
            name = "tracer"
        elif m.path == "[heap]":  # the main arena's: arena 0
            name = "heap"
            _add(use.arenas[0], m.rss, size)
        elif m.path == "[stack]":
            name = "thread-stacks"
        elif m.perms[3] == "s" and (_anonymous(m) or "w" in m.perms or m.path.startswith(SHARED_PATHS)):
            name = "shared"
        elif not _anonymous(m):
            name = "code-data"   # files, the vdso
        else:
            window = m.start - m.start % HEAP_MAX_SIZE
            if window in arena_of or (m.start == window and m.perms.startswith("rw") and size <= HEAP_MAX_SIZE
                                      and _arena_heap_start(pid, m)):
                name = "heap"    # an arena's heap: its rw part, then the reserve above it in the window
                if window not in arena_of:
                    arena_of[window] = len(use.arenas)
                    use.arenas.append([0, 0])
                _add(use.arenas[arena_of[window]], m.rss, size)
            elif m.perms.startswith("rw") and _holds_a_stack_pointer(sps, m):
                name = "thread-stacks"
            elif (guard_budget > 0 and m.perms.startswith("rw") and prev is not None and prev.end == m.start
                  and prev.perms.startswith("---") and _anonymous(prev)
                  # (a guard just above the tracer's reserved range merges with it)
                  and (prev.end - prev.start <= GUARD_MAX or own[0] <= prev.start < own[1])):
                name = "thread-stacks"
                guard_budget -= 1
            elif m.perms.startswith("rw") and _malloc_mapped(pid, m):
                name = "malloc-mapped"
            else:
                name = "anonymous"
        part = use.parts[name]
        part.resident += m.rss
        part.mapped += size
        if name != "heap":
            part.count += 1
        prev = m
    use.parts["heap"].count = len(use.arenas) - (use.arenas[0] == [0, 0])
    use.malloc_arenas = glibc_arenas.read(pid, maps, sorted(arena_of))
    return use


def _add(pair, resident, mapped):
    pair[0] += resident
    pair[1] += mapped


def header_lines(use, heap_live_bytes, heap_live_blocks, slack, free_unknown, trailers, quarantined=(0, 0)):
    """The header's memory lines (docs/memlog.md): each part's resident
    and mapped bytes and mappings, each arena's, and -- for glibc's malloc
    -- the resident memory of its heaps and big blocks that no live block
    holds: what it keeps free.  heap_live_*: the live blocks of the malloc
    family (new included); slack: their slack, or None; free_unknown: why
    what the allocator holds free cannot be told, or None; trailers:
    blocks carry the tracer's 16-byte trailers; quarantined: (usable
    bytes, blocks) the quarantine holds -- freed for the program, live to
    the allocator: neither live blocks nor free memory."""
    if isinstance(use, str):
        return [("memory", f"not known: {use}")]
    lines = [(f"memory-{name}", f"{p.resident} {p.mapped} {p.count}") for name, p in use.parts.items()]
    lines += [(f"memory-arena {i}", f"{r} {m}") for i, (r, m) in enumerate(use.arenas[:64])]
    lines.append(("memory-heap-live", f"{heap_live_bytes} {heap_live_blocks}"))
    lines += glibc_arenas.header_lines(use.malloc_arenas)
    if free_unknown:
        lines.append(("memory-allocator-free", f"not known: {free_unknown}"))
        return lines
    # A glibc block takes its usable bytes plus the chunk's 8-byte size word.
    held = use.parts["heap"].resident + use.parts["malloc-mapped"].resident
    trailer_bytes = 16 * heap_live_blocks if trailers else 0
    quarantine_bytes = quarantined[0] + 8 * quarantined[1]
    used = heap_live_bytes + (slack or 0) + 8 * heap_live_blocks + trailer_bytes + quarantine_bytes
    lines.append(("memory-allocator-free", max(0, held - used)))
    if trailers:
        lines.append(("memory-trailers", trailer_bytes))
    if quarantine_bytes:
        lines.append(("memory-quarantine", quarantine_bytes))
    return lines

