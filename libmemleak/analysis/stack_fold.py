"""A process's reports folded, one at a time and in order, into one Trend
per call stack: its change in each report, and what its entries said of it
(allocations made, family, slack, a scan's split).

The folding is the offline tools' inner loop -- every entry of every report
passes through StackFold.add once -- so it keeps no entry: a reader can hand
it each report as it is read and let the report's entries go (memory then
follows the distinct stacks, not the files; series.read_series(fold=)).
What an entry's extra fields say is worked out once for each distinct set
of fields ("allocs=+3 kind=new" recurs across stacks and reports)."""

from dataclasses import dataclass, field

from libmemleak.analysis import lost
from libmemleak.files.stack_tables import stack_identity


def _key(entry, kind):
    """A stack's identity across reports: its allocator family or resource
    kind (the entry's kind= or resource= field), and what a report prints
    of it."""
    if entry.identity is not None:
        return (kind, entry.identity)
    if entry.frames_text is not None:
        return (kind, stack_identity(entry.frames_text))
    return (kind, *((f.function, f.module, f.file, f.line, f.inlined) for f in entry.frames))


@dataclass(slots=True)
class Trend:
    key: tuple
    frames: list                       # memlog frames (of the first entry seen)
    deltas: list                       # byte change per report (0 where absent)
    block_deltas: list
    samples: int = 0                   # sampled reports: recorded blocks behind the estimates
    allocations: int | None = None     # allocations made (reports that count them: allocs=)
    alloc_deltas: list | None = None   # allocations made in each report's interval
    kind: str = "malloc"               # allocator family: malloc, new, mmap, shared, custom (kind=)
    touched: int | None = None         # mappings: bytes ever touched, as last said (touched=)
    touched_at: int = -1               # the report that said it
    slack: int = 0                     # bytes reserved beyond its live blocks' sizes, as last said (slack=)
    slack_at: int = -1                 # the report that said it
    cut: int = 0                       # the depth its stack was cut at (cut=), 0 if whole
    resource: str = ""                 # a resource other than memory (resource=fd): its kind; its
                                       # "bytes" are weights and its "blocks" how many are held
    # filled in by rank():
    live_bytes: int = 0
    live_blocks: int = 0
    running_live_bytes: int = 0        # live at the last report before teardown
    running_live_blocks: int = 0
    grew: int = 0                      # intervals (after the first report) it grew in
    shrank: int = 0
    intervals: int = 0
    recent_grew: int = 0
    growth_bytes: int = 0              # net change over those intervals
    rate: float | None = None          # bytes per second over them
    freed_at_exit: int = 0
    survival: float | None = None      # share of its allocations (in those intervals) still live
    lost: dict = field(default_factory=dict)  # the latest scan's split: category -> (bytes, blocks)
    since: dict = field(default_factory=dict)  # the latest scan's survivors: report seq -> blocks
    score: float = 0.0
    suspect: bool = False
    verdict: str = ""


# What an entry's extra fields say, for folding: (its first kind= or
# resource= field, as the stack's identity has it; family (None: not said);
# resource kind (None: not said); samples; allocations (None: not counted); touched (None:
# not said); cut; slack; whether allocations are all it says).  Fields that do not read as numbers are left out.
_NOTHING = ("", None, None, 0, None, None, 0, 0, False)
SAID_KEPT = 1 << 16


def _said(extra):
    kind_field, family, resource, samples, allocs, touched, cut, slack, _ = _NOTHING
    for x in extra:
        name, sep, value = x.partition("=")
        try:
            if name == "samples":
                samples += int(value)
            elif name == "allocs":
                allocs = (allocs or 0) + int(value)
            elif name == "kind":
                family = value
            elif name == "resource":
                family, resource = "resource", value
            elif name == "touched":
                touched = (touched or 0) + int(value)
            elif name == "cut":
                cut = max(cut, int(value))
            elif name == "slack":
                slack += int(value)
        except ValueError:
            continue
        if not kind_field and sep and name in ("kind", "resource"):
            kind_field = x
    facts = (kind_field, family, resource, samples, allocs, touched, cut, slack)
    return (*facts, allocs is not None and facts == ("", None, None, 0, allocs, None, 0, 0))


class StackFold:
    """Trends of one process's `n` reports, folded in by add(i, report)
    for i = 0, 1, ... in seq order."""

    def __init__(self, n):
        self.n = n
        self.by_key = {}
        self.scan = (None, None)   # (index, lost.ScanResult) of the latest report with a scan
        self._split = []           # the trends that scan split (their lost/since are its)
        self._said = {}            # extra fields -> what they say (_said)

    @property
    def trends(self):
        return list(self.by_key.values())

    def add(self, i, report):
        """Report i's entries into the trends (and its scan, if it has one:
        the latest report's scan is the one that counts)."""
        scan = lost.from_report(report)
        if scan is not None:
            for t in self._split:
                t.lost, t.since = {}, {}
            self._split, self.scan = [], (i, scan)
        slack_said = "live-slack" in report.header  # then an entry without slack= has none
        by_key, said, n = self.by_key, self._said, self.n
        if len(said) > SAID_KEPT:
            said.clear()
        for entry in report.entries:
            extra = entry.extra
            if extra:
                try:
                    facts = said.get(extra)
                except TypeError:  # (a list, as an Entry made by hand may hold: memlog's are tuples)
                    extra = tuple(extra)
                    facts = said.get(extra)
                if facts is None:
                    facts = said[extra] = _said(extra)
            else:
                facts = _NOTHING
            key = (facts[0], entry.identity) if entry.identity is not None else _key(entry, facts[0])
            t = by_key.get(key)
            if t is None:
                t = by_key[key] = Trend(key, entry.frames, [0] * n, [0] * n)
            t.deltas[i] += entry.bytes
            if entry.blocks:
                t.block_deltas[i] += entry.blocks
            if slack_said and t.slack_at != i:  # an amount as of report i, as touched=
                t.slack, t.slack_at = 0, i
            if facts[8]:  # allocs= alone, the common case: inline
                made = t.alloc_deltas
                if made is None:
                    made = t.alloc_deltas = [0] * n
                made[i] += facts[4]
                t.allocations = (t.allocations or 0) + facts[4]
            elif facts is not _NOTHING:
                _fold_said(t, i, n, facts, slack_said)
            if scan is not None and extra:
                self._fold_split(t, entry)

    def end(self, count):
        """No more reports: `count` were added (fewer than n when some
        could not be read)."""
        if count < self.n:
            for t in self.by_key.values():
                for deltas in (t.deltas, t.block_deltas, t.alloc_deltas):
                    if deltas is not None:
                        del deltas[count:]
            self.n = count

    def _fold_split(self, t, entry):
        categories = lost.categories_of(entry)
        for name, value in categories.items():
            b, k = t.lost.get(name, (0, 0))
            t.lost[name] = (b + value[0], k + value[1])
        ages = lost.since_of(entry)
        for seq, blocks in ages.items():
            t.since[seq] = t.since.get(seq, 0) + blocks
        if categories or ages:
            self._split.append(t)


def _fold_said(t, i, n, facts, slack_said):
    _, family, resource, samples, allocs, touched, cut, slack, _ = facts
    t.samples += samples
    if allocs is not None:
        if t.alloc_deltas is None:
            t.alloc_deltas = [0] * n
        t.alloc_deltas[i] += allocs
        t.allocations = (t.allocations or 0) + allocs
    if family is not None:
        t.kind = family
    if resource is not None:
        t.resource = resource
    if touched is not None:  # an amount as of report i: the latest counts
        t.touched = touched + (t.touched or 0 if t.touched_at == i else 0)
        t.touched_at = i
    t.cut = max(t.cut, cut)
    if slack_said:
        t.slack += slack


def fold_series(series):
    """The StackFold of every report of `series` (whose entries are kept)."""
    fold = StackFold(len(series.reports))
    for i, report in enumerate(series.reports):
        fold.add(i, report)
    fold.end(len(series.reports))
    return fold
