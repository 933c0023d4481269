"""Where a process's memory goes beyond its live blocks, from its reports'
headers (the reporter's memory_use: docs/memory.md): the allocator's
slack and the free memory it holds, thread stacks, other mappings -- and,
over the reports, what made RSS grow when live memory did not."""

from dataclasses import dataclass

from libmemleak.analysis.trends import count, human_bytes
from libmemleak.files.memlog import header_text

# The header's parts (memory-NAME: RESIDENT MAPPED COUNT), as people say them.
PART_WORDS = {
    "heap": "malloc's heaps",
    "malloc-mapped": "big blocks in mappings of their own",
    "thread-stacks": "thread stacks",
    "anonymous": "other anonymous memory",
    "shared": "shared memory",
    "code-data": "code and data",
    "tracer": "the tracer's own",
}
GROWTH_WORTH_SAYING = 1 << 20  # RSS growth below this is noise
SLACK_WORTH_SAYING = 64 << 10   # ... and slack


@dataclass
class Memory:
    """One report's memory lines."""
    rss: int | None                     # vm-rss, bytes
    parts: dict                         # name -> (resident, mapped, count)
    arenas: list                        # (resident, mapped) per glibc arena heap, main first
    live_bytes: int                     # the live heap blocks' (malloc and new; mappings apart)
    slack: int | None
    allocator_free: int | None          # resident memory glibc holds free (None: not known)
    trailers: int = 0                   # the tracer's 16-byte trailers inside the heaps
    free_unknown: str = ""              # why allocator_free is not known, as the report says
    quarantine: int = 0                 # freed blocks the quarantine holds (quarantine=)
    malloc_arenas: list = ()            # MallocArena per glibc arena, glibc's own statistics
    malloc_arenas_said: str = ""        # the memory-malloc-arenas line: "N [partial]" or "not known: WHY"
    jemalloc: "JemallocStats | None" = None  # jemalloc's own stats.* (allocator-stats)


@dataclass
class JemallocStats:
    """jemalloc's own statistics as the program answered (allocator-stats)."""
    allocated: int      # bytes in live blocks, by its size classes
    active: int         # bytes of the pages that hold live blocks
    metadata: int
    resident: int       # its pages in memory, metadata included
    mapped: int
    retained: int       # address space it keeps unmapped-ish for reuse
    age: float          # seconds between its answer and the report

    @property
    def in_pages(self):
        """Free inside pages that hold live blocks: fragmentation."""
        return max(0, self.active - self.allocated)

    @property
    def dirty(self):
        """Pages it freed but holds resident (not yet purged)."""
        return max(0, self.resident - self.active - self.metadata)

    @property
    def free(self):
        return self.in_pages + self.dirty


@dataclass
class MallocArena:
    """One glibc arena's own statistics (memory-malloc-arena I)."""
    system: int
    max_system: int
    top: int
    bins_bytes: int
    bins_chunks: int
    fast_bytes: int
    fast_chunks: int
    classes: tuple = ()                 # (chunks, bytes) per size class (memory-malloc-free I)

    @property
    def free(self):
        return self.top + self.bins_bytes + self.fast_bytes

    @property
    def in_use(self):
        return max(0, self.system - self.free)


# memory-malloc-free's size classes (chunk bytes), as people say them.
SIZE_CLASS_WORDS = ("<64 B", "<256 B", "<1 KB", "<4 KB", "<16 KB", "<64 KB", "<256 KB", ">=256 KB")


def _numbers(text, n):
    words = (text or "").split()
    if len(words) < n or not all(w.isdigit() for w in words[:n]):
        return None
    return tuple(int(w) for w in words[:n])


def of_report(report):
    """A report's Memory, or None when it carries no memory lines (older
    reports, a process gone before it was measured)."""
    h = report.header
    parts = {name: _numbers(h.get(f"memory-{name}"), 3) for name in PART_WORDS}
    if not any(parts.values()):
        return None
    parts = {k: v for k, v in parts.items() if v}
    arenas = []
    while (arena := _numbers(h.get(f"memory-arena {len(arenas)}"), 2)) is not None:
        arenas.append(arena)
    rss = _numbers(h.get("vm-rss"), 1)
    free_said = h.get("memory-allocator-free", "")
    free = _numbers(free_said, 1)
    slack = _numbers(h.get("live-slack"), 1)
    live = _numbers(h.get("memory-heap-live"), 1)
    return Memory(rss[0] * 1024 if rss else None, parts, arenas, live[0] if live else 0,
                  slack[0] if slack else None, free[0] if free else None,
                  (_numbers(h.get("memory-trailers"), 1) or (0,))[0],
                  header_text(free_said.removeprefix("not known: ")[:200]) if free is None else "",
                  (_numbers(h.get("memory-quarantine"), 1) or (0,))[0],
                  _malloc_arenas(h), header_text(h.get("memory-malloc-arenas", "")[:200]), _jemalloc(h))


def _jemalloc(h):
    words = h.get("allocator-stats", "").split()
    if len(words) != 8 or words[0] != "jemalloc" or not all(w.isdigit() for w in words[1:7]):
        return None
    try:
        age = float(words[7])
    except ValueError:
        return None
    return JemallocStats(*(int(w) for w in words[1:7]), age if age >= 0 else 0.0)


def _malloc_arenas(h):
    out = []
    while (said := _numbers(h.get(f"memory-malloc-arena {len(out)}"), 7)) is not None:
        classes = _numbers(h.get(f"memory-malloc-free {len(out)}"), 2 * len(SIZE_CLASS_WORDS)) or ()
        out.append(MallocArena(*said, tuple(zip(classes[::2], classes[1::2]))))
    return out


def first_and_last(series):
    """(first, last) Memory of the reports that carry one (those written
    while the process lived), or Nones."""
    found = [m for m in (of_report(r) for r in series.reports) if m is not None]
    if not found:
        return None, None
    return found[0], found[-1]


def _tracer_shares(m):
    """What the tracer itself holds inside malloc's heaps: the blocks'
    trailers, and freed blocks its quarantine keeps from malloc."""
    return ([f"the tracer's trailers {human_bytes(m.trailers)}"] if m.trailers else []) + \
        ([f"the quarantine's freed blocks {human_bytes(m.quarantine)}"] if m.quarantine else [])


def breakdown_line(m):
    """RSS, split: the live heap, slack, malloc's free memory, then the
    other parts that hold any of it, largest first."""
    shown = [f"live blocks {human_bytes(m.live_bytes)}"]
    if m.slack:
        shown.append(f"slack {human_bytes(m.slack)}")
    if malloc_free(m) is not None:
        shown.append(f"malloc's free memory {human_bytes(malloc_free(m))}{_glibc_count(m)}")
    shown += _tracer_shares(m)
    others = sorted(((v[0], name) for name, v in m.parts.items()
                     if name not in ("heap", "malloc-mapped") and v[0]), reverse=True)
    shown += [f"{PART_WORDS[name]} {human_bytes(r)}" for r, name in others]
    rss = f"RSS {human_bytes(m.rss)}: " if m.rss is not None else ""
    return rss + ", ".join(shown)


def malloc_free(m):
    """What glibc's malloc holds free: its arenas' own count where the
    report carries it, else the estimate from its heaps' resident memory
    (docs/memory.md); None when not known (another allocator, a routed one)."""
    if m.allocator_free is None:  # jemalloc's, if it answered for this very report
        return m.jemalloc.free if m.jemalloc and m.jemalloc.age == 0 else None
    return sum(a.free for a in m.malloc_arenas) if m.malloc_arenas else m.allocator_free


def _glibc_count(m):
    """' (glibc's own count, in N arenas: ...)': where the free memory
    lies -- chunks between live blocks, or the arenas' tops (or for
    jemalloc, inside its pages or in pages it has not purged)."""
    if m.allocator_free is None and m.jemalloc and m.jemalloc.age == 0:
        return _jemalloc_words(m.jemalloc)
    if not m.malloc_arenas:
        return " (estimated from resident memory)"
    between = sum(a.bins_bytes + a.fast_bytes for a in m.malloc_arenas)
    chunks = sum(a.bins_chunks + a.fast_chunks for a in m.malloc_arenas)
    top = sum(a.top for a in m.malloc_arenas)
    return (f" (glibc's own count, in {count(len(m.malloc_arenas), 'arena')}: {human_bytes(between)} in "
            f"{count(chunks, 'free chunk')} between live blocks, {human_bytes(top)} at the tops)")


def _jemalloc_words(j):
    return (f" (jemalloc's own count: {human_bytes(j.in_pages)} free inside pages that hold live "
            f"blocks -- fragmentation, {human_bytes(j.dirty)} in freed pages not yet given back)")


def growth_line(first, last):
    """'RSS grew by X but live blocks by Y: ...' naming the parts that grew
    most, or None when RSS did not outgrow the live blocks."""
    if first is None or last is None or first is last or first.rss is None or last.rss is None:
        return None
    rss, live = last.rss - first.rss, last.live_bytes - first.live_bytes
    if rss < GROWTH_WORTH_SAYING or rss < 2 * max(live, 0):
        return None
    grew = []
    if malloc_free(first) is not None and malloc_free(last) is not None:
        free = malloc_free(last) - malloc_free(first)
        if free > 0:
            where = _malloc_arena_that_grew(first, last) or (
                _jemalloc_words(last.jemalloc) if last.allocator_free is None and last.jemalloc else None) or (
                f"{_arena_that_grew(first, last)} (freed blocks it keeps: fragmentation, or memory not "
                "given back -- malloc_trim)")
            grew.append((free, f"malloc's free memory by {human_bytes(free)}{where}"))
    if (first.slack or 0) < (last.slack or 0):
        grew.append((last.slack - first.slack, f"slack by {human_bytes(last.slack - first.slack)}"))
    for name, words in PART_WORDS.items():
        if name in ("heap", "malloc-mapped"):
            continue
        d = last.parts.get(name, (0, 0, 0))[0] - first.parts.get(name, (0, 0, 0))[0]
        if d > 0:
            maps = last.parts.get(name, (0, 0, 0))[2] - first.parts.get(name, (0, 0, 0))[2]
            more = f", {maps:+d} mappings" if maps and name != "code-data" else ""
            grew.append((d, f"{words} by {human_bytes(d)}{more}"))
    grew.sort(reverse=True)
    said = "; ".join(text for _, text in grew[:3]) or "no part this report measures"
    return f"RSS grew by {human_bytes(rss)} but live blocks by {human_bytes(live, sign=True)}: {said}"


def _malloc_arena_that_grew(first, last):
    """' (most in the main arena: ... fragmentation)': by glibc's own
    statistics, the arena whose free memory grew most and the form it
    took -- free chunks pinned between live blocks, or a top chunk not
    given back -- or "" when the reports do not carry them."""
    best, at = 0, None
    for i, a in enumerate(last.malloc_arenas):
        before = first.malloc_arenas[i].free if i < len(first.malloc_arenas) else 0
        if a.free - before > best:
            best, at = a.free - before, i
    if at is None:
        return ""
    a = last.malloc_arenas[at]
    name = "the main arena" if at == 0 else f"arena {at}"
    if a.top > a.bins_bytes + a.fast_bytes:
        return f" (most in {name}: {human_bytes(a.top)} at its top, not given back -- malloc_trim)"
    return (f" (most in {name}: {human_bytes(a.bins_bytes + a.fast_bytes)} in "
            f"{count(a.bins_chunks + a.fast_chunks, 'free chunk')} between live blocks -- fragmentation)")


def _arena_that_grew(first, last):
    best, at = 0, None
    for i, (r, _) in enumerate(last.arenas):
        d = r - (first.arenas[i][0] if i < len(first.arenas) else 0)
        if d > best:
            best, at = d, i
    if at is None or len(last.arenas) < 2:
        return ""
    return f" (most in {heap_name(at)})"


def heap_name(i):
    """glibc's heap i as the reports number them (0: the main arena's)."""
    return "the main arena's heap ([heap])" if i == 0 else f"another arena's heap {i}"


def state_lines(m):
    """The whole split of one report, a line a part (the shell's
    `memory`): resident and mapped bytes, the heaps one by one."""
    rss = human_bytes(m.rss) if m.rss is not None else "not known"
    lines = [f"RSS {rss}",
             f"live heap blocks {human_bytes(m.live_bytes)}"
             + (f", slack {human_bytes(m.slack)}" if m.slack is not None else ", slack not measured"),
             "malloc holds free " + (human_bytes(malloc_free(m)) if malloc_free(m) is not None
                                     else f"(not known: {m.free_unknown or 'not said'})")]
    lines += _tracer_shares(m)
    if m.jemalloc:
        j = m.jemalloc
        lines.append(f"jemalloc, by its own statistics{f' ({j.age:.1f} s before: no allocation since)' if j.age else ''}: "
                     f"{human_bytes(j.allocated)} allocated, {human_bytes(j.active)} active, "
                     f"{human_bytes(j.resident)} resident, {human_bytes(j.metadata)} metadata, "
                     f"{human_bytes(j.mapped)} mapped, {human_bytes(j.retained)} retained")
    for name, (resident, mapped, n) in m.parts.items():
        lines.append(f"{PART_WORDS[name] + ':':<38} {human_bytes(resident):>10} resident "
                     f"of {human_bytes(mapped):>10} mapped, {count(n, 'heap' if name == 'heap' else 'mapping')}")
        if name == "heap":
            for i, (r, size) in enumerate(m.arenas):
                lines.append(f"  {heap_name(i) + ':':<36} {human_bytes(r):>10} resident of {human_bytes(size):>10} mapped")
    return lines + arena_lines(m)


def arena_lines(m):
    """glibc's arenas as it counts them (OpenBSD's mdump -D, from outside):
    each arena's memory, what of it is in use and free, where the free
    memory lies, and its free chunks by size."""
    if not m.malloc_arenas:
        said = m.malloc_arenas_said.removeprefix("not known: ")
        return [f"glibc's arenas: not known ({said})"] if said else []
    partial = m.malloc_arenas_said.split()[1:2] == ["partial"]
    lines = ["glibc's arenas, by its own statistics"
             + (" (a list changed while it was read: approximate)" if partial else "") + ":"]
    for i, a in enumerate(m.malloc_arenas):
        name = "main arena" if i == 0 else f"arena {i}"
        lines.append(f"  {name + ':':<12} {human_bytes(a.system):>10} from the system (at most "
                     f"{human_bytes(a.max_system)}), {human_bytes(a.in_use)} in use, {human_bytes(a.free)} free: "
                     f"{human_bytes(a.bins_bytes)} in {count(a.bins_chunks, 'chunk')} in bins, "
                     f"{human_bytes(a.fast_bytes)} in {count(a.fast_chunks, 'chunk')} in fastbins, "
                     f"{human_bytes(a.top)} at the top")
        sizes = [f"{word} {c:,} ({human_bytes(b)})" for word, (c, b) in zip(SIZE_CLASS_WORDS, a.classes) if c]
        if sizes:
            lines.append(f"  {'':<12} free chunks by size: " + ", ".join(sizes))
    return lines


def worth_saying(m):
    """A report's split is worth a line of `report` when the allocator
    holds at least as much free as live, and a MiB of it."""
    return malloc_free(m) is not None and malloc_free(m) >= max(GROWTH_WORTH_SAYING, m.live_bytes)


def slack_worth_saying(slack, live_bytes):
    """Slack is worth a section when it is a quarter of the live bytes or
    more, and 64 KiB."""
    return bool(slack) and slack >= max(SLACK_WORTH_SAYING, live_bytes // 4)


def slack_stacks(trends, n=3):
    """The stacks whose live blocks have the most slack, largest first."""
    return sorted((t for t in trends if t.slack > 0), key=lambda t: -t.slack)[:n]
