"""Anonymous mappings in a process's reports, as what they cost: a mapping
is address space until its pages are written (MariaDB's 370 MB "live" held
114 MB of RSS), and a shared one (MAP_SHARED, PostgreSQL's main segment) is
counted in the process that mapped it, not in the children that inherit it.
The entries say each mapping's touched bytes (`touched=`, docs/memlog.md);
the totals here are made from the stacks, so they always agree with what
`report` calls live now."""

from libmemleak.analysis.trends import human_bytes

KINDS = (("mmap", "private"), ("shared", "shared"))


def totals(trends):
    """{"private"|"shared": (live bytes, live blocks, touched bytes or None
    when some mapping's is not known)} over the stacks with mappings live."""
    out = {}
    for kind, name in KINDS:
        live = [t for t in trends if t.kind == kind and t.live_bytes > 0]
        if live:
            known = all(t.touched is not None for t in live)
            out[name] = (sum(t.live_bytes for t in live), sum(t.live_blocks for t in live),
                         sum(min(t.touched, t.live_bytes) for t in live) if known else None)
    return out


def _touched(mapped, touched, here=""):
    if touched is None:
        return "touched not known"
    return f"{human_bytes(touched)} touched{here}, {human_bytes(mapped - touched)} never touched"


def summary(a):
    """One line for `report` under "live now", or None: how much of the
    live mappings was touched, the shared ones apart, and the RSS beside it."""
    found = totals(a.trends)
    if not found:
        return None
    parts = []
    if "private" in found:
        mapped, _, touched = found["private"]
        parts.append(f"{human_bytes(mapped)} in private mappings ({_touched(mapped, touched)})")
    if "shared" in found:
        mapped, _, touched = found["shared"]
        parts.append(f"{human_bytes(mapped)} in shared mappings ({_touched(mapped, touched, ' here')}; "
                     "counted in this process, which mapped them, not in those it forked)")
    reports = a.series.reports
    rss = (reports[-1].header.get("vm-rss", "") if reports else "").split()
    if rss and rss[0].isdigit():
        parts.append(f"RSS {human_bytes(int(rss[0]) * 1024)}")
    return "; ".join(parts)


def touched_words(t):
    """', 2.0 MB of it touched' for a mapping's stack whose touched bytes
    are known, else ''."""
    if t.kind not in ("mmap", "shared") or t.touched is None:
        return ""
    return f", {human_bytes(t.touched)} of it touched"
