"""Two states of a program -> what grew, shrank, appeared and went away.

Stacks are matched by what stays the same across runs and rebuilds: each
frame's function, source file name and line (not addresses, which ASLR
and every rebuild move, nor directories, which differ between build
trees).  A frame without a function is matched by its module's name."""

import os
from dataclasses import dataclass

from libmemleak.files.report_names import REPORT_NAME
from libmemleak.files.series import read_series


def match_key(frames):
    return tuple((f.function or os.path.basename(f.module or "?"),
                  os.path.basename(f.file) if f.file else None, f.line, bool(f.inlined))
                 for f in frames)


@dataclass
class Change:
    frames: list
    before_bytes: int
    before_blocks: int
    after_bytes: int
    after_blocks: int

    @property
    def change_bytes(self):
        return self.after_bytes - self.before_bytes

    @property
    def change_blocks(self):
        return self.after_blocks - self.before_blocks

    @property
    def status(self):
        if self.before_blocks == 0 and self.before_bytes == 0:
            return "new"
        if self.after_blocks == 0 and self.after_bytes == 0:
            return "gone"
        return "grown" if self.change_bytes > 0 else "shrunk" if self.change_bytes < 0 else "same"


def live_state(path):
    """{match key: [frames, bytes, blocks]} live at `path`, notes, the
    `alloc-fns` its reports carry (MEMLEAK_CONFIG alloc_fns=; the last one
    said) or None, and the set of programs (their names) whose reports it is.
    A report file stands for what was live when it was written: its own
    change plus those of the reports before it beside it.  A directory (or
    several files) stands for what was live at the last report of every
    process in it."""
    notes = []
    upto = None
    if os.path.isfile(path):
        m = REPORT_NAME.match(os.path.basename(path))
        if m:
            upto = (m["prog"], int(m["pid"]), int(m["seq"]))
            ns = int(m["ns"]) if m["ns"] else None
            series, problems = read_series([os.path.dirname(path) or "."])
            series = [s for s in series if (s.program, s.pid, s.pid_namespace) == (*upto[:2], ns)]
        else:
            series, problems = read_series([path])
    else:
        series, problems = read_series([path])
    notes.extend(problems)
    state = {}
    alloc_fns = None
    programs = {s.program for s in series}
    for s in series:
        reports = [r for r in s.reports if upto is None or r.seq <= upto[2]]
        alloc_fns = next((r.header["alloc-fns"] for r in reversed(reports) if r.header.get("alloc-fns")),
                         alloc_fns)
        seqs = [r.seq for r in reports]
        if seqs != list(range(1, len(seqs) + 1)):
            notes.append(f"{s.program} pid {s.pid}: reports before {max(seqs)} missing: "
                         "what was live is not known exactly")
        for r in reports:
            for e in r.entries:
                if any(x.startswith("resource=") for x in e.extra):
                    continue  # descriptors and named resources: not memory, not compared here
                key = match_key(e.frames)
                slot = state.setdefault(key, [e.frames, 0, 0])
                slot[1] += e.bytes
                slot[2] += e.blocks or 0
    return state, notes, alloc_fns, programs


def compare(before_path, after_path):
    """(changes sorted by status and size, notes, the reports' alloc-fns --
    AFTER's, else BEFORE's -- or None)."""
    before, notes_a, config_a, programs_a = live_state(before_path)
    after, notes_b, config_b, programs_b = live_state(after_path)
    if programs_a and programs_b and not programs_a & programs_b:
        notes_a.append(f"BEFORE is of {', '.join(sorted(programs_a))} and AFTER of {', '.join(sorted(programs_b))}: "
                       "two different programs (only the code they share -- libraries -- can match)")
    changes = []
    for key in before.keys() | after.keys():
        fa, ba, ka = before.get(key, (None, 0, 0))
        fb, bb, kb = after.get(key, (None, 0, 0))
        c = Change(fb or fa, ba, ka, bb, kb)
        if c.change_bytes or c.change_blocks:
            changes.append(c)
    order = {"new": 0, "grown": 1, "shrunk": 2, "gone": 3, "same": 4}
    changes.sort(key=lambda c: (order[c.status], -abs(c.change_bytes), -abs(c.change_blocks)))
    return changes, notes_a + notes_b, config_b or config_a
