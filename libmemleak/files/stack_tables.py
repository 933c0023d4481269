"""Reading the stack tables of reports (docs/memlog.md, "Stack tables").

A report written with a stack table names most of its stacks (`stack=N`)
instead of listing their frames: `@s N P F1 F2 ...` defines stack N as
frames F1, F2, ... (innermost first) followed by stack P's frames (0:
none), and `@f F` with its tab-indented lines defines frame F, once.  One
table serves a run of one process's reports -- from the one whose
`stack-table-from` header names itself up to the last that names it -- and
each report defines what it is first to name.  Reading report k of such a
run needs the definitions of the reports before it: a Scope gathers them,
from the files already read or, for a report read on its own, from its
siblings on disk.

Everything here is the traced program's word: ids are bounded, a stack
that loops or runs past CHAIN_MAX frames, an id defined twice differently
or named and never defined is one StackTableError, never a hang."""

import hashlib
import itertools
import re
from array import array

CHAIN_MAX = 4096          # frames of one stack: a loop in a hostile table stops here
_ID = r"\d{1,18}"
DEFINITION = re.compile(rf"@(?:f (?P<frame>{_ID})|s (?P<node>{_ID}) (?P<parent>{_ID})(?P<frames>(?: {_ID}){{0,{CHAIN_MAX}}})|"
                        r"(?P<end>end))\n?$")
# The definitions of a report whose entries are not wanted (an earlier
# report of the run, read for its table only).
_DEFINITIONS = re.compile(r"^@[^\n]*\n(?:\t[^\n]*\n?)*", re.M)
_TABLE_FROM = re.compile(r"^# stack-table-from: *(\d{1,18}) *$", re.M)


def stack_identity(text):
    """A stack's frame lines in 16 bytes (BLAKE2b): what a fold of many
    reports keys a stack by, keeping no text for it."""
    return hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=16).digest()


class StackTableError(ValueError):
    """A stack table that cannot be read: the message says why."""


class Unresolved(StackTableError):
    """A stack named that the definitions known do not make whole (one
    never defined, or one that loops): a report missing or cut short, or
    a table that is not ours."""


class Scope:
    """The definitions of one run of reports sharing a table: frames
    (id -> (frames, text)) and stacks (id -> (frame ids, parent id)), the
    seqs whose definitions are in, and the stacks resolved so far (their
    text only when keep_text: a fold keeps none)."""

    def __init__(self, first_seq, keep_text=True):
        self.first_seq = first_seq
        self.keep_text = keep_text
        self.frames = {}
        self.nodes = {}
        self.seqs = set()
        self.missing = set()   # reports of the run that are not there: their definitions are not known
        self.stacks = {}

    def add(self, seq, definitions):
        """The definitions of report `seq` (from definition()); once."""
        if seq in self.seqs:
            return
        for what, ident, value in definitions:
            if what == "end":
                continue
            into = self.frames if what == "f" else self.nodes
            known = into.get(ident)
            if known is not None and known != value:
                raise StackTableError(f"{'frame' if what == 'f' else 'stack'} {ident} is defined twice, "
                                      "differently")
            into[ident] = value
        self.seqs.add(seq)

    def stack(self, named):
        """(frames, text or None, identity) of the stack an entry names as
        stack=`named`: its frames innermost first, and their lines as an
        entry would list them (None: not kept).  (Remembered in self.stacks by `named`: a reader looks there
        first, this runs once a stack.)"""
        known = self.stacks.get(named)
        if known is not None:
            return known
        if not (named.isascii() and named.isdigit() and len(named) < 19):
            raise StackTableError(f"stack={named[:30]!r} is not a stack number")
        node = int(named)
        frame_ids, at, steps = [], node, 0
        while at:
            got = self.nodes.get(at)
            if got is None:
                raise Unresolved(f"stack {at} is named but not defined (a report of its run missing "
                                 "or cut short?)")
            frame_ids += got[0]
            steps += 1
            if len(frame_ids) > CHAIN_MAX or steps > CHAIN_MAX:
                raise Unresolved(f"stack {node} loops, or is deeper than {CHAIN_MAX} frames")
            at = got[1]
        parts = []
        for ident in frame_ids:
            part = self.frames.get(ident)
            if part is None:
                raise Unresolved(f"frame {ident} of stack {node} is not defined")
            parts.append(part)
        text = "\n".join(p[1] for p in parts if p[1])
        known = self.stacks[named] = (tuple(itertools.chain.from_iterable(p[0] for p in parts)),
                                      text if self.keep_text else None, stack_identity(text))
        return known


def definition(head, lines, frames_of):
    """One definition: its head line ("@f 12", "@s 40 0 12 7 3") and the tab
    lines after it, as (kind, id, value); frames_of(text) parses frame lines."""
    m = DEFINITION.match(head)
    if m is None:
        raise StackTableError(f"not a stack table line: {head.rstrip()[:60]!r}")
    if m["end"] is not None:
        return "end", 0, None
    if m["frame"] is not None:
        text = lines.rstrip("\n")
        return "f", int(m["frame"]), (frames_of(text), text)
    if lines:
        raise StackTableError(f"frame lines after {head.rstrip()!r}")
    node, parent = int(m["node"]), int(m["parent"])
    if node == 0:
        raise StackTableError("stack 0 is defined (0 means none)")
    return "s", node, (array("q", map(int, m["frames"].split())), parent)  # (no int object a frame)


def definitions_in(text, frames_of):
    """The definitions of a report's text, not its entries."""
    found = []
    for m in _DEFINITIONS.finditer(text):
        head, _, lines = m.group().partition("\n")
        found.append(definition(head, lines, frames_of))
    return found


def table_from(header, seq):
    """The seq of the report that began this report's table, from its
    header (None: it has none)."""
    text = header.get("stack-table-from")
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and len(text) < 19) or not 0 < int(text) <= seq:
        raise StackTableError(f"stack-table-from {text[:30]!r} is not a report before this one")
    return int(text)


def scope_of(first, seq, scopes, where, siblings, frames_of, keep_text=True):
    """The Scope of a report (seq) whose table began at report `first`,
    with the definitions of every report of the run before it.  scopes: a
    dict kept across the files read (where: what tells processes apart --
    the directory and name); siblings(): {k: load} for the reports of the
    same process found, load() giving report k's text or None.  Reports of
    the run that are not there are counted missing, never looked for one
    by one (a forged seq of 10^12 must cost nothing).  keep_text: as
    Scope's."""
    scope = scopes.get((where, first))
    if scope is None:
        scope = scopes[(where, first)] = Scope(first, keep_text)
    if sum(first <= k < seq for k in scope.seqs) < seq - first:  # (else all there: nothing to look for)
        found = siblings()
        for k in sorted(k for k in found if first <= k < seq and k not in scope.seqs):
            text = found[k]()
            if text is None:
                continue
            m = _TABLE_FROM.search(text)
            if m is None or int(m.group(1)) != first:
                raise StackTableError(f"report {k} of this process belongs to another stack table")
            got = definitions_in(text, frames_of)
            if not got or got[-1][0] != "end":  # cut short: what it defined past the cut is not known
                scope.missing.add(k)
            scope.add(k, got)
        have = sorted(k for k in scope.seqs if first <= k < seq)
        scope.missing.update(_first_gaps(first, seq, have))
    return scope


def _first_gaps(first, seq, have, most=8):
    """Up to `most` numbers of first..seq-1 missing from sorted `have`."""
    gaps, expected = [], first
    for k in have + [seq]:
        while expected < k and len(gaps) < most:
            gaps.append(expected)
            expected += 1
        expected = max(expected, k + 1)
    return gaps
