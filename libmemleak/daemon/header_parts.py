"""Parts of a report's header that stand on their own: the program's default
suppressions, slack, resources, anonymous mappings, the report signal's
name, the process's memory status (docs/memlog.md has each field)."""

from libmemleak.daemon import report_core
from libmemleak.daemon.layout import CONST


DEFAULT_SUPPRESSIONS_SHOWN = 64  # lines of a program's own suppressions a report carries
SELF_LIBRARY = "libmtrace.so"    # our own library: its frames are left out, its module named by no build-id


def default_suppression_lines(seg):
    """The program's __lsan_default_suppressions, a header line per rule
    (`default-suppression N: leak:PATTERN`), comments and blank lines left
    out: the analysis applies them as LSan would (docs/memlog.md)."""
    h = seg.header
    if not h.default_suppressions_len:
        return []
    text = seg.string(h.default_suppressions_off, min(h.default_suppressions_len,
                                                      CONST["MLK_DEFAULT_SUPPRESSIONS_MAX"]))
    rules = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(f"default-suppression {i}", rule[:512]) for i, rule in enumerate(rules[:DEFAULT_SUPPRESSIONS_SHOWN], 1)]


def slack_lines(snap, sums, routed):
    """The header's slack -- bytes the allocator reserved beyond what the
    live blocks asked for -- or why it is not measured, and what it is
    measured against (docs/memlog.md)."""
    if sums.live_slack is None:
        return [("slack", "not measured: blocks are tracked in the table (sampled, track=table, or "
                          "an allocator without malloc_usable_size), whose usable sizes are not read")]
    notes = []
    if not snap.slack_floor:
        notes.append("as traced: each block's usable size less the trailer (the allocator's smallest "
                     "block is not known, so its smallest blocks may differ bare)")
    if routed:
        notes.append("not measured for the routed allocator's blocks (their usable size is not read)")
    return [("live-slack", sums.live_slack)] + ([("slack", "; ".join(notes))] if notes else [])


def resource_lines(snap, sums):
    """The header's resources other than memory: whether descriptors are
    tracked, and each kind named -- weight and count held now, and their
    change -- even when nothing is held (the reader then knows it was
    looked at)."""
    lines = [] if snap.fds_tracked else [("fds", "not tracked (MEMLEAK_CONFIG fds=no)")]
    if snap.fds_tracked and snap.fds_before:
        lines.append(("fds-before-collection", f"{snap.fds_before} descriptors (3 and up) were open when "
                                               "collection started: opened by no stack here, in no entry"))
    for name, weight, held, change_weight, change_held in sums.resources:
        lines.append((f"resource-live {name}", f"{weight} {held}"))
        lines.append((f"resource-change {name}", f"{change_weight:+d} {change_held:+d}"))
    return lines


def mapping_lines(touched, refused):
    """The header's account of anonymous mappings: how much of them was
    ever touched (a mapping is address space until written), and the
    shared ones apart -- counted in the process that mapped them, not in
    the children that inherit them."""
    if refused:
        return [("mappings-touched", f"not known: {refused}")]
    if not touched:
        return []
    lines = []
    for kind, key, what in (("mmap", "anonymous-mappings", "private"),
                            ("shared", "shared-mappings", "shared (MAP_SHARED)")):
        mapped, count, used = touched.by_kind.get(kind, (0, 0, 0))
        if not count:
            continue
        text = (f"{mapped} bytes in {count} {what} mapping{'s' if count != 1 else ''}, "
                f"{used} touched ({mapped - used} mapped but never touched)")
        if kind == "shared":
            text += "; counted in this process, which mapped them, not in the children it forks"
        lines.append((key, text))
    if touched.partial:
        lines.append(("mappings-touched", f"partial: more than {report_core.TOUCH_PAGES_MAX * 4096 >> 30} "
                                          "GiB of mappings; touched counts are low"))
    return lines


def signal_name(number):
    """The report signal as a report names it: SIGUSR1; `none` when there
    is none (signal=none, or the program installed its own handler)."""
    import signal
    if not number:
        return "none"
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def process_status(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return []
    out = []
    for key, name in (("VmRSS", "vm-rss"), ("VmHWM", "vm-hwm")):
        if key in fields:
            out.append((name, fields[key].strip()))
    return out
