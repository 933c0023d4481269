"""Misuse of the allocator as the hook records it in the segment
(native/hook/misuse.c, struct mlk_misuse), read as hostile input -- the
traced program can write any of it -- and written into a report as its
misuse= entries and header lines (docs/memlog.md)."""

from typing import NamedTuple

from libmemleak.daemon.layout import CONST
from libmemleak.files.memlog import QUARANTINE_REFUSED, Misuse, misuse_fields

KINDS = {CONST["MLK_MISUSE_DOUBLE_FREE"]: "double-free", CONST["MLK_MISUSE_INVALID_FREE"]: "invalid-free",
         CONST["MLK_MISUSE_MISMATCH"]: "mismatch", CONST["MLK_MISUSE_SIZE"]: "size-mismatch",
         CONST["MLK_MISUSE_ALIGN"]: "align-mismatch"}
CALLS = {CONST["MLK_CALL_FREE"]: "free", CONST["MLK_CALL_DELETE"]: "delete",
         CONST["MLK_CALL_DELETE_ARRAY"]: "delete[]", CONST["MLK_CALL_DELETE_ALIGNED"]: "aligned-delete",
         CONST["MLK_CALL_DELETE_ARRAY_ALIGNED"]: "aligned-delete[]", CONST["MLK_CALL_REALLOC"]: "realloc"}
# A block's family has the code of the call that should free it.
FAMILIES = {CONST["MLK_CALL_FREE"]: "malloc", CONST["MLK_CALL_DELETE"]: "new",
            CONST["MLK_CALL_DELETE_ARRAY"]: "new[]", CONST["MLK_CALL_DELETE_ALIGNED"]: "aligned-new",
            CONST["MLK_CALL_DELETE_ARRAY_ALIGNED"]: "aligned-new[]", CONST["MLK_BLOCK_CUSTOM"]: "custom"}
WHERES = {CONST["MLK_WHERE_STACK"]: "stack", CONST["MLK_WHERE_GLOBAL"]: "global",
          CONST["MLK_WHERE_NOT_A_BLOCK"]: "not-a-block", CONST["MLK_WHERE_INTERIOR"]: "interior",
          CONST["MLK_WHERE_POOL_CHUNK"]: "pool-chunk", CONST["MLK_WHERE_CUSTOM_BLOCK"]: "custom-block"}
ALIGN_MAX = 1 << 31  # an alignment past this is not one the hook records
MODES = {CONST["MLK_MISUSE_OFF"]: "no", CONST["MLK_MISUSE_REPORT"]: "report", CONST["MLK_MISUSE_HOLD"]: "hold"}
NO_STACK = 0xFFFFFFFF


class Record(NamedTuple):
    """One record of the segment's misuse table, checked."""
    index: int
    kind: str
    call: str
    block: str              # "" when not known
    at_stack: int
    alloc_stack: int | None
    size: int | None
    given: int | None
    where: str
    address: str
    count: int
    reported: int           # count as of the previous report
    first_free: int | None = None  # a double free the quarantine caught: the first free's stack
    offset: int | None = None      # an invalid free inside a block: how far in
    align: int | None = None       # an alignment mismatch: the block's alignment (0: default)
    given_align: int | None = None  # ... and the delete's (0: an unaligned delete)


def records(header, stack_ok):
    """The misuse table's complete records whose words and stacks check
    out (stack_ok(id): a published stack); the rest are left out."""
    out = []
    for i in range(min(header.misuse_used, CONST["MLK_MISUSE_MAX"])):
        m = header.misuse[i]
        kind, call = KINDS.get(m.kind), CALLS.get(m.call)
        if m.state != CONST["MLK_MISUSE_READY"] or kind is None or call is None or not stack_ok(m.at_stack):
            continue
        alloc = m.alloc_stack if m.alloc_stack != NO_STACK and stack_ok(m.alloc_stack) else None
        count = min(m.count, 1 << 62)
        first = m.first_free - 1 if kind == "double-free" and m.first_free and stack_ok(m.first_free - 1) else None
        where = WHERES.get(m.where, "") if kind == "invalid-free" else ""
        aligns = kind == "align-mismatch" and m.align <= ALIGN_MAX and m.given_align <= ALIGN_MAX
        out.append(Record(i, kind, call, FAMILIES.get(m.family, ""), m.at_stack, alloc,
                          m.size or None, m.given if kind == "size-mismatch" else None, where,
                          f"{m.given:#x}" if kind == "invalid-free" and m.given else "",
                          count, m.reported if m.reported <= count else 0, first,
                          min(m.offset, 1 << 62) if where == "interior" else None,
                          m.align if aligns else None, m.given_align if aligns else None))
    return out


def changed(recs):
    """The records that happened since the previous report."""
    return [r for r in recs if r.count != r.reported]


def stacks_of(recs):
    """Every stack id the records name."""
    return {s for r in recs for s in (r.at_stack, r.alloc_stack, r.first_free) if s is not None}


def entries_text(recs, lines_of):
    """The records' misuse= entries (after '+0 +0': nothing live changes),
    lines_of(stack id) giving a stack's frame lines."""
    out = []
    for r in recs:
        frames = tuple(lines_of(r.at_stack))
        alloc = tuple(lines_of(r.alloc_stack)) if r.alloc_stack is not None else ()
        freed = tuple(lines_of(r.first_free)) if r.first_free is not None else ()
        m = Misuse(r.kind, r.call, r.count - r.reported, frames, alloc, r.block, r.size, r.given,
                   r.where, r.address, freed, r.offset, r.align, r.given_align)
        out.append(" ".join(["+0 +0", *misuse_fields(m)]))
        out.extend(frames + alloc + freed)  # frame lines, each its tab first
    return "\n".join(out) + "\n" if out else ""


def header_lines(header, tracking, sampled):
    """What every report says of misuse: checked or not, and why not; how
    many were seen since collection started; the quarantine's state."""
    mode = MODES.get(header.misuse_mode, "report")
    checked = mode != "no" and tracking == "trailers" and not sampled
    refused = []
    if header.quarantine_refused:
        why = ("its table could not be mapped (out of memory)" if checked else
               "it needs blocks with trailers and misuse checks (not with sample=, track=table or misuse=no)")
        refused = [("quarantine", f"{QUARANTINE_REFUSED}: quarantine={min(header.quarantine_refused, 1 << 62)} "
                                  f"was asked for, but {why}: double frees after reuse are not caught")]
    if mode == "no":
        return [("misuse", "not checked (MEMLEAK_CONFIG misuse=no)")] + refused
    if tracking != "trailers" or sampled:
        return [("misuse", "not checked (it reads the blocks' trailers: not with sample= or track=table)")] + refused
    said = [f"{min(header.misuse_total, 1 << 62)} seen since collection started"]
    if mode == "hold":
        said.append("(misuse=hold: bad frees kept from the allocator)")
    if header.routed_len:  # its blocks carry no trailer: their frees are not checked
        said.append("(not checked: frees of the routed allocator's blocks)")
    if header.misuse_no_families:
        said.append("(not checked: mismatched free/delete/delete[] -- the program defines its own "
                    "operator new or delete)")
    lines = [("misuse", " ".join(said))] + refused
    if header.quarantine_cap:
        lines.append(("quarantine", f"{min(header.quarantine_held, 1 << 62)} bytes of freed blocks held of "
                                    f"{min(header.quarantine_cap, 1 << 62)} (quarantine=): a second free of one "
                                    "is caught with the first free's stack"))
    if header.misuse_dropped:
        lines.append(("misuse-dropped", f"{min(header.misuse_dropped, 1 << 62)} not in any entry: "
                                        f"more than {CONST['MLK_MISUSE_MAX']} different misuses"))
    return lines


def commit(header, recs):
    """The records are in a report now: the next one says what follows."""
    for r in recs:
        header.misuse[r.index].reported = r.count
