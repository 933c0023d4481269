"""Anonymous mappings in a process's reports, as what they cost: a mapping
is address space until its pages are written (MariaDB's 370 MB "live" held
114 MB of RSS), and a shared one (MAP_SHARED, PostgreSQL's main segment) is
counted in the process that mapped it, not in the children that inherit it.
The reporter says both in each report's header (docs/memlog.md)."""
import re

from libmemleak.analysis.trends import human_bytes

HEADER_KEYS = (("anonymous-mappings", "private"), ("shared-mappings", "shared"))
_AMOUNTS = re.compile(r"(\d+) bytes in (\d+) .*?, (\d+) touched")


def latest(series):
    """{"private"|"shared": (mapped bytes, mappings, touched bytes)} from the
    latest report that measured them (a report written after the process
    was gone cannot), and that report's header; ({}, None) if none did."""
    for report in reversed(series.reports):
        h = report.header
        found = {}
        for key, name in HEADER_KEYS:
            m = _AMOUNTS.match(h.get(key, ""))
            if m:
                found[name] = tuple(int(x) for x in m.groups())
        if found:
            return found, h
    return {}, None


def summary(series):
    """One line for `report` under "live now", or None: how much of the
    mappings was touched, the shared ones apart, and the RSS beside it."""
    found, header = latest(series)
    if not found:
        return None
    parts = []
    if "private" in found:
        mapped, _, touched = found["private"]
        parts.append(f"{human_bytes(mapped)} in private mappings ({human_bytes(touched)} touched, "
                     f"{human_bytes(mapped - touched)} never touched)")
    if "shared" in found:
        mapped, _, touched = found["shared"]
        parts.append(f"{human_bytes(mapped)} in shared mappings ({human_bytes(touched)} touched here; "
                     "counted in this process, which mapped them, not in those it forked)")
    rss = header.get("vm-rss", "").split()
    if rss and rss[0].isdigit():
        parts.append(f"RSS {human_bytes(int(rss[0]) * 1024)}")
    return "; ".join(parts)


def touched_words(t):
    """', 2.0 MB of it touched' for a mapping's stack whose touched bytes
    are known, else ''."""
    if t.kind not in ("mmap", "shared") or t.touched is None:
        return ""
    return f", {human_bytes(t.touched)} of it touched"
