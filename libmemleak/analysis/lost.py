"""A scan's answer, read back from a report: the four totals of the header
and each entry's split (docs/memlog.md, "Reachability"), and the stacks
that lost memory in the order a user should look at them -- definitely
lost first, then indirectly, then possibly, each largest first (valgrind
prints its loss records the other way round, smallest first; on a screen
the largest belongs on top)."""

from dataclasses import dataclass, field

CATEGORIES = ("definitely-lost", "indirectly-lost", "possibly-lost", "still-reachable")
LOST = CATEGORIES[:3]


@dataclass
class ScanResult:
    totals: dict                     # category -> (bytes, blocks)
    pause_ms: float | None
    threads: int | None
    stacks: list = field(default_factory=list)   # (category, bytes, blocks, entry), by rank
    splits: list = field(default_factory=list)   # (entry, {category: (bytes, blocks)}), every entry scanned

    def without(self, dropped):
        """This result less the entries `dropped(entry)` says to leave out
        (suppressions): their blocks leave the totals too."""
        totals = dict(self.totals)
        splits = []
        for entry, split in self.splits:
            if not dropped(entry):
                splits.append((entry, split))
                continue
            for name, (nbytes, blocks) in split.items():
                if name in totals:
                    b, k = totals[name]
                    totals[name] = (b - nbytes, k - blocks)
        stacks = [s for s in self.stacks if isinstance(s[3], BeforeAttach) or not dropped(s[3])]
        return ScanResult(totals, self.pause_ms, self.threads, stacks, splits)


def categories_of(entry):
    """An entry's split: category -> (bytes, blocks); {} if it has none."""
    split = {}
    for extra in entry.extra or ():
        name, eq, value = extra.partition("=")
        if eq and name in CATEGORIES:
            nbytes, _, blocks = value.partition("/")
            try:
                split[name] = (int(nbytes), int(blocks))
            except ValueError:
                continue
    return split


def since_of(entry):
    """A scan entry's survivors: {report seq: blocks live since then}
    (blocks first seen by an earlier scan; docs/memlog.md); {} if none."""
    ages = {}
    for extra in entry.extra or ():
        name, eq, value = extra.partition("=")
        if eq and name == "since":
            for item in value.split(","):
                seq, _, blocks = item.partition(":")
                try:
                    ages[int(seq)] = int(blocks)
                except ValueError:
                    continue
    return ages


def survivors_words(ages):
    """"8 since report 2, 3 since report 5": the oldest first."""
    return ", ".join(f"{n:,} since report {seq}" for seq, n in sorted(ages.items()) if n)


def header_totals(header):
    """category -> (bytes, blocks) from a report header; None if it carries no scan."""
    totals = {}
    for name in CATEGORIES:
        parts = header.get(name, "").split()
        if len(parts) != 2:
            return None
        try:
            totals[name] = (int(parts[0]), int(parts[1]))
        except ValueError:
            return None
    return totals


@dataclass
class BeforeAttach:
    """The blocks an attached process made before the attach, as one
    pseudo-stack of a scan's answer (they have no recorded stack)."""
    frames: tuple = ()
    extra: tuple = ()
    label: str = "(before attach: no stack recorded)"


def before_attach_split(header):
    """category -> (bytes, blocks) of the older blocks an attached
    process's scan classified (`# before-attach:`); {} if none."""
    split = {}
    for item in header.get("before-attach", "").split(","):
        parts = item.split()
        if len(parts) == 3 and parts[0] in CATEGORIES:
            try:
                split[parts[0]] = (int(parts[1]), int(parts[2]))
            except ValueError:
                continue
    return split


def _number(text, kind):
    try:
        return kind(text)
    except (TypeError, ValueError):
        return None


def from_report(report):
    """The ScanResult of a parsed report (memlog.Report or series.Report);
    None if the report carries no scan."""
    totals = header_totals(report.header)
    if totals is None:
        return None
    stacks, splits = [], []
    for entry in report.entries:
        split = categories_of(entry)
        if split:
            splits.append((entry, split))
        for name, (nbytes, blocks) in split.items():
            if name in LOST and blocks:
                stacks.append((name, nbytes, blocks, entry))
    for name, (nbytes, blocks) in before_attach_split(report.header).items():
        if name in LOST and blocks:
            stacks.append((name, nbytes, blocks, BeforeAttach()))
    stacks.sort(key=lambda s: (LOST.index(s[0]), -s[1], -s[2]))
    return ScanResult(totals, _number(report.header.get("scan-pause-ms"), float),
                      _number(report.header.get("scan-threads"), int), stacks, splits)
