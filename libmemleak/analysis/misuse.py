"""Misuse of the allocator across a process's reports (their misuse=
entries): each distinct misuse -- kind, call, both stacks -- with how many
times it happened, and valgrind's words for it."""

import re
from dataclasses import dataclass

from libmemleak.files.memlog import MISUSE_WORDS, QUARANTINE_REFUSED

WHERE_WORDS = {"stack": "on the thread's stack", "global": "in a module's data (a global or static)",
               "not-a-block": "not the start of any heap block",
               "pool-chunk": "a chunk of the program's own pool (MEMPOOL_ALLOC, memleak.h), not a malloc block"}
MADE = {"malloc": "malloc'd", "new": "made by new", "new[]": "made by new[]",
        "aligned-new": "made by aligned new", "aligned-new[]": "made by aligned new[]",
        "custom": "of the program's own allocator (MALLOCLIKE_BLOCK, memleak.h)"}


def alignment(value):
    """An alignment as valgrind words it: 0 is the default."""
    return "default-aligned" if not value else str(value)


@dataclass
class MisuseSite:
    kind: str
    call: str
    frames: tuple
    alloc_frames: tuple
    block: str
    times: int = 0
    size: int | None = None
    given: int | None = None
    where: str = ""
    address: str = ""
    freed_frames: tuple = ()   # a double free the quarantine caught: the first free's stack
    offset: int | None = None  # an interior pointer: how far into its block
    align: int | None = None   # an alignment mismatch: the block's alignment and the delete's
    given_align: int | None = None

    def title(self):
        """valgrind's first line for it (memcheck's words)."""
        words = MISUSE_WORDS.get(self.kind, self.kind)
        if self.kind == "size-mismatch" and self.given is not None:
            return f"{words}: {self.given}"
        if self.kind == "align-mismatch" and self.align is not None and self.given_align is not None:
            return f"{words} alloc value: {alignment(self.align)} dealloc value: {alignment(self.given_align)}"
        return words

    def detail(self):
        """What it was, in a few words."""
        call = f"{self.call}()" if self.call in ("free", "realloc") else self.call.replace("aligned-", "aligned ")
        made = MADE.get(self.block, "")
        size = f"{self.size:,}-byte " if self.size else ""
        if self.kind == "double-free":
            return f"{call} of a {size}block already freed" + (f" ({made})" if made else "")
        if self.kind == "invalid-free" and self.where == "interior" and self.offset is not None:
            return f"{call} of {self.address or 'a pointer'}, {self.offset:,} bytes inside a {size}block {made}".rstrip()
        if self.kind == "invalid-free" and self.where == "pool-chunk":
            return f"{call} of {self.address or 'a pointer'}, a {size}chunk of the program's own pool " \
                   "(MEMPOOL_ALLOC, memleak.h), not a malloc block"
        if self.kind == "invalid-free":
            where = WHERE_WORDS.get(self.where, "never allocated")
            return f"{call} of {self.address or 'a pointer'}, {where}"
        if self.kind == "size-mismatch" and self.given is not None:
            return f"sized {call} of {self.given:,} bytes for a {size}block {made}".rstrip()
        return f"{call} of a {size}block {made}".rstrip()


def of_series(series):
    """The process's misuses, most frequent first."""
    by_key = {}
    for report in series.reports:
        for m in report.misuse:
            key = (m.kind, m.call, m.block, m.frames, m.alloc_frames, m.given, m.where, m.align, m.given_align)
            site = by_key.get(key)
            if site is None:
                site = by_key[key] = MisuseSite(m.kind, m.call, m.frames, m.alloc_frames, m.block,
                                                size=m.size, given=m.given, where=m.where, address=m.address,
                                                freed_frames=m.freed_frames, offset=m.offset, align=m.align,
                                                given_align=m.given_align)
            site.freed_frames = site.freed_frames or m.freed_frames
            site.times += max(0, m.times)
    return sorted(by_key.values(), key=lambda s: -s.times)


def partly_checked(series):
    """What the reports say misuse was not checked for, where it was
    checked for the rest (a routed allocator's frees), or None."""
    last = series.reports[-1].header.get("misuse", "") if series.reports else ""
    parts = re.findall(r"\(not checked: ([^()]*)\)", last)
    return "; ".join(parts) if parts else None


def quarantine_refused(series):
    """What the reports say of a quarantine asked for and not started, or None."""
    last = series.reports[-1].header.get("quarantine", "") if series.reports else ""
    return last if last.startswith(QUARANTINE_REFUSED) else None


def not_checked(series):
    """Why the reports say misuse was not checked, or None."""
    last = series.reports[-1].header.get("misuse", "") if series.reports else ""
    return last[len("not checked "):].strip("()") if last.startswith("not checked") else None
