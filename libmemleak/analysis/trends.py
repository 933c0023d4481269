"""A process's reports -> one trend per call stack, and the leak-suspect
ranking.  Pure functions over series.Series: tested without a process.

What makes a leak stand out from the rest of a busy heap (the idea of Carlo
Wood's interval ranking, and of Cork's and BLeak's growth tests):

- a leaked block is never freed, so a leaking stack's live bytes **never go
  down** from one report to the next, while churn goes up and down;
- it grows in **many** intervals, where start-up grows once, in the first;
- it **keeps** growing: a cache that fills and then plateaus grew only early.

So each stack is scored on the intervals after its first report (which
holds start-up): the share of them it grew in, whether it ever shrank,
whether it still grew in the recent half, and how much.  The final `exit`
report is the program's teardown: it is not ranked on (a server that runs
for weeks never gets there), and what it freed is said instead."""

import math
from dataclasses import dataclass, field

from libmemleak.analysis import lost
from libmemleak.analysis import alloc_layer
from libmemleak.analysis import pools
from libmemleak.analysis.names import deeper_words, has_python_frames, shown_frames
from libmemleak.analysis.stack_fold import Trend, fold_series

TEARDOWN = "exit"


def add_live(a, t):
    """Counts trend t into analysis a's totals: the allocator's view, with
    the program's own blocks (kind custom), which lie inside its blocks,
    and resources other than memory (by kind: weight, count held) apart."""
    if t.resource:
        held = a.resources.setdefault(t.resource, [0, 0])
        held[0] += t.live_bytes
        held[1] += t.live_blocks
    elif t.kind == "custom":
        a.custom_bytes += t.live_bytes
        a.custom_blocks += t.live_blocks
    else:
        a.live_bytes += t.live_bytes
        a.live_blocks += t.live_blocks


@dataclass
class Analysis:
    series: object                     # series.Series
    trends: list                       # every stack, by live bytes
    suspects: list                     # the ranked ones, most likely leak first
    live_bytes: int = 0                # what the allocator holds (custom blocks lie inside it)
    live_blocks: int = 0
    custom_bytes: int = 0              # the program's own blocks (kind custom: memleak.h)
    custom_blocks: int = 0
    running_reports: int = 0
    seconds: float | None = None       # from the first to the last running report
    notes: list = field(default_factory=list)
    scan: object = None                # lost.ScanResult of the latest report with a scan
    scan_seq: int | None = None        # that report's seq
    layer: object = None               # alloc_layer.Layer: the functions attributions pass over
    # Resources other than memory (file descriptors: "fd"), apart from the
    # memory above: kind -> [weight, count] held at the last report, for
    # every kind the reports say was tracked; their stacks and suspects.
    resources: dict = field(default_factory=dict)
    resource_trends: list = field(default_factory=list)
    resource_suspects: list = field(default_factory=list)
    fds_untracked: bool = False        # the reports say descriptors were not tracked (fds=no)
    fds_before: int = 0                # descriptors open before collection started (in no stack)
    # Misuse of the allocator (analysis/misuse.py): each distinct one, most
    # frequent first; why it was not checked, if it was not.
    misuse: list = field(default_factory=list)
    misuse_unchecked: str | None = None
    quarantine_refused: str | None = None  # quarantine= asked for, not started: why
    live_slack: int | None = None      # the last report's live-slack (None: not measured)
    # Where its resident memory went (analysis/memory.Memory), at the first
    # and the last report that measured it (None: none did).
    memory_first: object = None
    memory_last: object = None


def regroup(trends, by, executable, layer=None):
    """Stacks merged by where the program's own code allocates, as
    LeakSanitizer's and heaptrack's groupings do: by="site", the first frame
    of the program's own code (function, file, line) with the frames under
    it; by="function", that frame's function alone; by="stack", stacks
    with Python frames by all their frames from that one on (others stay
    as they are).  The allocator wrappers and library frames above it --
    and the program's own allocation layer (alloc_layer) -- do not split a
    site in many, nor take the blame."""
    groups = {}
    # Each frame's (function, module, file, line) made once and shared by
    # every key that has it: a key of 40 frames is then 40 pointers, not 40
    # new tuples (a deep Python stack's key was most of its memory).
    # (Keyed by the frame's value, which holds it: never by id(), which a
    # frame made for one trend and dropped would hand to the next.)
    parts, part_of = {}, lambda f: parts.get(f) or parts.setdefault(f, (f.function, f.module, f.file, f.line))
    for t in trends:
        if by == "stack":  # (python_stacks: the stacks without Python frames stay as they are)
            if not has_python_frames(t.frames):
                groups[("stack", len(groups))] = t
                continue
        frames, _, _ = shown_frames(t.frames, executable, keep=len(t.frames), layer=layer)
        own = frames[0] if frames else None
        if own is None:
            key = ("?",)
        elif by == "stack":
            key = (t.kind, t.resource, tuple(map(part_of, frames)))
        elif by == "function":
            key = (t.kind, t.resource, own.function or own.module)
        else:
            key = (t.kind, t.resource, own.function, own.file, own.line)
        g = groups.get(key)
        if g is None:
            g = groups[key] = Trend(key, frames[:1] if by == "function" else frames,
                                    list(t.deltas), list(t.block_deltas), t.samples,
                                    allocations=t.allocations, kind=t.kind, cut=t.cut, resource=t.resource,
                                    touched=t.touched, lost=dict(t.lost), since=dict(t.since),
                                    slack=t.slack)
            continue
        g.slack += t.slack
        for seq, blocks in t.since.items():
            g.since[seq] = g.since.get(seq, 0) + blocks
        for name, (b, k) in t.lost.items():
            gb, gk = g.lost.get(name, (0, 0))
            g.lost[name] = (gb + b, gk + k)
        g.deltas = [a + b for a, b in zip(g.deltas, t.deltas)]
        g.block_deltas = [a + b for a, b in zip(g.block_deltas, t.block_deltas)]
        g.samples += t.samples
        g.cut = max(g.cut, t.cut)
        if t.touched is not None:
            g.touched = (g.touched or 0) + t.touched
        if t.allocations is not None:
            g.allocations = (g.allocations or 0) + t.allocations
    return list(groups.values())


def analyse(series, group_by="stack", alloc_fns=None, fold=True):
    """Trends, totals and the ranking of one process; group_by: "stack"
    (each call stack), "site" or "function" (see regroup).  alloc_fns: a
    regular expression naming more of the program's allocation layer;
    fold=False attributes to the wrapper itself (alloc_layer)."""
    reports = series.reports
    # (read_series(fold=) folded the reports as it read them, and kept no entries)
    folded = series.fold if series.fold is not None else fold_series(series)
    scanned_at, scan = folded.scan
    trends = folded.trends
    config = next((r.header["alloc-fns"] for r in reversed(reports) if r.header.get("alloc-fns")), None)
    layer = alloc_layer.find([(t.frames, t.allocations) for t in trends], series.executable, alloc_fns, fold,
                             config)
    # By stack, a Python process's stacks are one per Python stack: the
    # interpreter's own frames above the first of user code (its object
    # making, a list's growth, a dict's keys) do not make one Python line's
    # leak several suspects (#60).
    trends = regroup(trends, group_by, series.executable, layer)
    running = len(reports) - (1 if reports and reports[-1].reason == TEARDOWN and len(reports) > 1 else 0)
    times = [r.time for r in reports[:running]]
    seconds = (times[-1] - times[0]) if running > 1 and None not in (times[0], times[-1]) else None
    a = Analysis(series, trends, [], running_reports=running, seconds=seconds, scan=scan,
                 scan_seq=reports[scanned_at].seq if scan else None, layer=layer)
    for t in trends:
        t.live_bytes, t.live_blocks = sum(t.deltas), sum(t.block_deltas)
        t.running_live_bytes = sum(t.deltas[:running])
        t.running_live_blocks = sum(t.block_deltas[:running])
        t.freed_at_exit = -t.deltas[-1] if running < len(reports) and t.deltas[-1] < 0 else 0
        later = t.deltas[1:running]
        t.intervals = len(later)
        t.grew = sum(1 for d in later if d > 0)
        t.shrank = sum(1 for d in later if d < 0)
        half = later[len(later) // 2:]
        t.recent_grew = sum(1 for d in half if d > 0)
        t.growth_bytes = sum(later)
        if t.alloc_deltas is not None:
            made = sum(t.alloc_deltas[1:running])
            kept = sum(t.block_deltas[1:running])
            t.survival = min(1.0, max(0.0, kept / made)) if made > 0 else None
        if seconds:
            t.rate = t.growth_bytes / seconds
        _judge(t)
        add_live(a, t)
    a.resource_trends = [t for t in trends if t.resource]
    a.trends = trends = [t for t in trends if not t.resource]
    for name in tracked_resources(series):  # looked at, even with nothing held
        a.resources.setdefault(name, [0, 0])
    a.fds_untracked = any(r.header.get("fds", "").startswith("not tracked") for r in reports)
    said = reports[-1].header.get("live-slack", "") if reports else ""
    a.live_slack = int(said) if said.isdigit() else None
    from libmemleak.analysis import memory  # noqa: it reads the reports' headers only
    a.memory_first, a.memory_last = memory.first_and_last(series)
    before = reports[-1].header.get("fds-before-collection", "") if reports else ""
    a.fds_before = int(before.split()[0]) if before.split() and before.split()[0].isdigit() else 0
    from libmemleak.analysis import misuse  # noqa: it reads the reports' misuse entries only
    a.misuse, a.misuse_unchecked = misuse.of_series(series), misuse.not_checked(series)
    a.quarantine_refused = misuse.quarantine_refused(series)
    partly = misuse.partly_checked(series)
    if partly:
        a.notes.append(f"misuse of the allocator not checked for {partly}")
    a.resource_trends.sort(key=lambda t: (t.resource, -t.live_blocks))
    a.resource_suspects = sorted((t for t in a.resource_trends if t.suspect), key=lambda t: -t.score)
    a.trends.sort(key=lambda t: -t.live_bytes)  # stable: first seen first among equals
    # One scale for both kinds of evidence (see _judge): a large steady
    # grower outranks a small block lost once at start-up, and a large lost
    # block a slow grower; on a tie, the certain one (definitely lost) first.
    a.suspects = sorted((t for t in trends if t.suspect),
                        key=lambda t: (-t.score, -t.lost.get("definitely-lost", (0, 0))[0]))
    # What the tracer could not see comes first: without it every other
    # answer here ("no leak suspects", a small live total) misleads.
    a.notes[:0] = [f"NOT SEEN: {text}" for text in series.blind]
    a.notes += [f"routed: {text}" for text in series.routed]
    a.notes += [f"report {r.seq}: {r.header['handover']}" for r in reports if r.header.get("handover")]
    a.notes += layer.notes()
    # How the unwinder got the stacks (counts since start: the last report's).
    last = series.reports[-1].header if series.reports else {}
    for said, label in (("frame-pointers", "frame pointers"), ("stacks-ended-without-tables", "stacks cut short")):
        if last.get(said):
            a.notes.append(f"{label}: {last[said]}")
    through = reports[scanned_at].header.get("reachable-through-header") if scan else None
    if through:  # what valgrind would call possibly lost
        a.notes.append(f"reachable through an allocator's header (valgrind: possibly lost; "
                       f"OFFSET BYTES BLOCKS SITE): {through}")
    cut = stacks_cut_note(series)
    if cut:
        a.notes.append(cut)
    a.notes += health_notes(series)
    a.notes += pools.notes(trends)
    if running < 3:
        a.notes.append(f"{count(running, 'report')} before exit: a stack must "
                       "grow across two intervals to be a suspect; take more reports while it "
                       f"runs ({ways_to_ask(series)})")
    if not series.complete:
        a.notes.extend(series.problems)
    from libmemleak.analysis import suppressions  # it builds on this module
    own = suppressions.from_reports(series)
    if own:  # the program's own word, as LSan takes it
        a = suppressions.apply(a, own, " by the program's __lsan_default_suppressions")
    return a


def tracked_resources(series):
    """The resource kinds the process's reports say were tracked (their
    `resource-live NAME` header lines), in the order first said."""
    names = {}
    for r in series.reports:
        for key in r.header:
            if key.startswith("resource-live "):
                names.setdefault(key[len("resource-live "):], None)
    return list(names)


def resource_noun(name):
    """What one of a resource kind is called: "descriptor" for "fd"."""
    return "descriptor" if name == "fd" else name


def resource_title(name):
    """A resource kind as a section or a limit names it."""
    return "file descriptors" if name == "fd" else f"resource {name}"


def _resource_words(t):
    """A growing resource stack's verdict in its own units: how many are
    held, how often they were acquired."""
    weighed = t.resource != "fd" and t.live_bytes != t.live_blocks
    words = [f"grows in {t.grew} of {count(t.intervals, 'interval')}"]
    if weighed:
        words.append(f"weighing {t.live_bytes:,}")
    if t.allocations is not None:
        words.append(f"acquired {count(t.allocations, 'time')}")
    if t.survival is not None and t.survival < 0.995:
        words.append(f"keeps {t.survival:.0%} of them")
    words.append("never released" if t.shrank == 0 and (t.survival is None or t.survival >= 0.995)
                 else "never fewer" if t.shrank == 0 else f"fewer in {t.shrank}")
    t.verdict = ", ".join(words)


def growth_since(a, seq):
    """A copy of analysis `a` whose stacks hold, as their live bytes and
    blocks, what they grew by after report `seq` (what a growth
    flamegraph draws); None if the process has no report `seq` with one
    after it.  The rest of the analysis is left as it was."""
    import copy
    reports = a.series.reports
    at = next((i for i, r in enumerate(reports) if r.seq == seq), None)
    if at is None or at == len(reports) - 1:
        return None
    grown = copy.copy(a)
    grown.running_reports = len(reports)  # (its live is the growth: no moment before teardown to draw)
    grown.trends = []
    for t in a.trends:
        g = copy.copy(t)
        g.live_bytes = sum(t.deltas[at + 1:])
        g.live_blocks = sum(t.block_deltas[at + 1:])
        if g.alloc_deltas is not None:
            g.allocations = sum(t.alloc_deltas[at + 1:])
        grown.trends.append(g)
    grown.trends.sort(key=lambda t: -t.live_bytes)
    grown.live_bytes = sum(max(0, t.live_bytes) for t in grown.trends)
    grown.live_blocks = sum(max(0, t.live_blocks) for t in grown.trends)
    return grown


def _judge(t):
    """Suspect or not, its score and verdict."""
    if _judge_growth(t):
        (_resource_words if t.resource else _growth_words)(t)
    definite, blocks = t.lost.get("definitely-lost", (0, 0))
    if blocks:
        t.suspect = True
        # Certain (nothing points to it), so weighed as the steadiest growth
        # of the same bytes would be: log2 of what is at stake.  What it
        # holds indirectly is lost with it.
        indirect = t.lost.get("indirectly-lost", (0, 0))[0]
        t.score = max(t.score, math.log2(2 + definite + indirect))
        words = f"definitely lost: {human_bytes(definite)} in {count(blocks, 'block')}"
        if indirect:
            words += f" (and {human_bytes(indirect)} indirectly)"
        if t.since:
            words += f"; live: {lost.survivors_words(t.since)}"
        t.verdict = words + (f"; {t.verdict}" if t.verdict else "")


def _judge_growth(t):
    """Whether t's growth makes it a suspect (and its score then)."""
    # Two intervals of growth at least: one is a burst, or start-up.
    if t.intervals < 2 or t.running_live_bytes <= 0 or t.growth_bytes <= 0:
        return False
    if t.grew < 2 or t.recent_grew == 0:
        return False
    steadiness = t.grew / t.intervals
    never_freed = t.shrank == 0
    # A leaked block survives: a leaking stack keeps what it allocates, where
    # churn and a cache that recycles its entries (an LRU) allocate many to
    # keep a few (the survivor test of Cork and of Carlo Wood's libmemleak).
    # Unknown (sampled reports): taken as kept.
    survival = 1.0 if t.survival is None else t.survival
    if steadiness < 0.5 and not (never_freed and survival >= 0.5):
        return False  # up and down, or now and then while recycling: churn, not a leak
    if survival < 0.01 and steadiness < 0.75:
        # It keeps almost nothing of what it allocates: its live count is
        # what is in flight when the report is taken, a random level, which
        # goes up between two reports about half the time (slowleaks.c's
        # churn thread: 4 of 7 under load).  A slow leak hidden in such
        # churn goes up in nearly every interval; random levels seldom do
        # (6 rises in 7: 0.6% of orders).
        return False
    recent = t.recent_grew / max(1, t.intervals - t.intervals // 2)
    t.suspect = True
    t.score = ((1.0 if never_freed else 0.5) * (0.25 + 0.75 * steadiness)
               * (0.25 + 0.75 * recent) * (0.2 + 0.8 * survival) * math.log2(2 + t.growth_bytes))
    return True


def _growth_words(t):
    """A growing memory stack's verdict in words."""
    never_freed = t.shrank == 0
    words = [f"grows in {t.grew} of {count(t.intervals, 'interval')}"]
    if t.rate is not None:
        words.append(f"{human_bytes(t.rate, sign=True)}/s")
    blocks, when = ((t.running_live_blocks, " before exit") if t.freed_at_exit
                    else (t.live_blocks, ""))
    words.append(f"{count(blocks, 'block')} live{when}")
    if t.allocations is not None:
        words.append(f"allocated {count(t.allocations, 'time')}")
    if t.survival is not None and t.survival < 0.995:
        words.append(f"keeps {t.survival:.0%} of them")
    # "never freed" only where it is true: a stack whose live bytes never
    # went down may still free some of what it allocates (it keeps a share),
    # and one freed by the program's exit was freed -- at exit.
    if not never_freed:
        words.append(f"shrank in {t.shrank}")
    elif t.survival is not None and t.survival < 0.995:
        words.append("never shrank")
    else:
        words.append("never freed before exit" if t.freed_at_exit else "never freed")
    if t.freed_at_exit:
        words.append(f"{human_bytes(t.freed_at_exit)} freed at exit")
    t.verdict = ", ".join(words)


def ways_to_ask(series):
    """How to ask this process for a report: its report signal, unless the
    program took it over (its reports say `report-signal: none`), and
    `libmemleak snapshot`, which needs none."""
    pid = series.pid
    sig = series.reports[-1].header.get("report-signal", "SIGUSR1") if series.reports else "SIGUSR1"
    snapshot = f"libmemleak snapshot {pid}"
    if not sig.startswith("SIG"):
        return snapshot
    return f"kill -{sig[3:]} {pid} or {snapshot}"


def stacks_cut_note(series):
    """How many allocations had their call stack cut at the configured
    depth (the last report's cumulative counters), and what to do; None
    when none was."""
    if not series.reports:
        return None
    header = series.reports[-1].header
    try:
        cut = int(header.get("truncated-stacks", 0))
        made = int(header.get("allocations", 0))
        depth = int(header.get("depth", 0))
    except ValueError:
        return None
    if cut <= 0 or depth <= 0:
        return None
    share = f" ({100 * cut / made:.0f}% of {made:,})" if made >= cut else ""
    whose = "its" if cut == 1 else "their"
    remedy = deeper_words(depth)
    return (f"{count(cut, 'allocation')}{share} had {whose} call stack cut at depth {depth}: "
            f"outer frames are not shown, and stacks that differ only there are one; {remedy}")


# The hook's health counters (every report's header carries them when not
# zero), and what each means for the numbers shown: nothing is lost silently.
HEALTH_SAID = (
    ("dropped-stacks", "allocations whose call stack had no room in the stack table (it was full): "
                       "not in any entry, so live totals are low"),
    ("dropped-blocks", "blocks that could not be tracked (no memory for the address table, or 1 TiB or "
                       "more): their frees are not subtracted"),
    ("unknown-frees", "frees of blocks never seen allocated (an allocator not intercepted, or a library "
                      "loaded with RTLD_DEEPBIND)"),
    ("resources-dropped", "acquisitions of resources not tracked (a 33rd kind -- 32 at most, fd "
                          "included -- or no memory for the table)"),
)


def health_notes(series):
    """A line for each health counter the last report says is not zero."""
    last = series.reports[-1].header if series.reports else {}
    notes = []
    for said, meaning in HEALTH_SAID:
        try:
            n = int(last.get(said, 0))
        except ValueError:
            continue
        if n > 0:
            notes.append(f"{said}: {n:,} {meaning}")
    return notes


def count(n, noun, sign=False):
    """'1 block', '2 blocks', '+1 block' (sign=True), with thousands commas."""
    number = f"{n:+,d}" if sign else f"{n:,}"
    plural = "es" if noun.endswith(("s", "x", "ch", "sh")) else "s"
    return f"{number} {noun}{'' if abs(n) == 1 else plural}"


def human_bytes(n, sign=False):
    prefix = ("+" if n >= 0 else "-") if sign else ("-" if n < 0 else "")
    n = abs(n)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            text = f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
            return prefix + text
        n /= 1024
    return prefix + f"{n:.1f} TB"
