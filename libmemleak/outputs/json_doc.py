"""`libmemleak report --json`: the document scripts read instead of parsing
.memlog files (docs/report-json.md)."""

import json
import secrets

from libmemleak.analysis import mappings, memory


_TOKEN = secrets.token_hex(16)


def frame_dict(f):
    return {"function": f.function, "module": f.module, "file": f.file, "line": f.line,
            "inlined": bool(f.inlined)}


def trend_dict(t, rank=None):
    d = {"kind": t.kind, "live_bytes": t.live_bytes, "live_blocks": t.live_blocks,
         "growth_bytes": t.growth_bytes, "intervals_grown": t.grew, "intervals_shrunk": t.shrank,
         "intervals": t.intervals, "rate_bytes_per_s": t.rate,
         "freed_at_exit_bytes": t.freed_at_exit, "trend": t.deltas,
         "frames": [frame_dict(f) for f in t.frames]}
    if t.samples:
        d["samples"] = t.samples
    if t.cut:
        d["cut_at_depth"] = t.cut
    if t.allocations is not None:
        d["allocations"] = t.allocations
    if t.touched is not None:
        d["touched_bytes"] = t.touched
    if t.slack:
        d["slack_bytes"] = t.slack
    if t.survival is not None:
        d["survival"] = round(t.survival, 3)
    if t.since:
        d["live_since_report"] = {str(seq): n for seq, n in sorted(t.since.items())}
    if t.lost:
        d["reachability"] = {name.replace("-", "_"): {"bytes": b, "blocks": k}
                             for name, (b, k) in t.lost.items()}
    if rank is not None:
        d = {"rank": rank, "verdict": t.verdict, "score": round(t.score, 3), **d}
    return d


def resource_dict(t, rank=None):
    """A stack of a resource other than memory: how many it holds and
    their weight, its trend in counts."""
    d = {"held": t.live_blocks, "weight": t.live_bytes, "growth": sum(t.block_deltas[1:]),
         "intervals_grown": t.grew, "intervals_shrunk": t.shrank, "intervals": t.intervals,
         "trend": t.block_deltas, "frames": [frame_dict(f) for f in t.frames]}
    if t.allocations is not None:
        d["acquisitions"] = t.allocations
    if rank is not None:
        d = {"rank": rank, "verdict": t.verdict, "score": round(t.score, 3), **d}
    return d


def document(analyses, problems, stacks=None):
    """The document as dicts; stacks(trends): what stands for a process's
    "stacks" (default: their dicts)."""
    stacks = stacks or (lambda trends: [trend_dict(t) for t in trends])
    return {"processes": [{
        "program": a.series.program, "executable": a.series.executable, "pid": a.series.pid,
        "reports": len(a.series.reports), "complete": a.series.complete,
        "ended": a.series.ended, "final_report_lost": a.series.final_report_lost, "sampled": a.series.sampled,
        "seconds": a.seconds, "live_bytes": a.live_bytes, "live_blocks": a.live_blocks,
        "custom_bytes": a.custom_bytes, "custom_blocks": a.custom_blocks,
        "notes": a.notes,
        "mappings": {name: {"bytes": b, "mappings": n, "touched_bytes": used}
                     for name, (b, n, used) in mappings.totals(a.trends).items()},
        "scan": None if not a.scan else {
            "report": a.scan_seq, "pause_ms": a.scan.pause_ms, "threads": a.scan.threads,
            **{name.replace("-", "_"): {"bytes": b, "blocks": k} for name, (b, k) in a.scan.totals.items()}},
        "suspects": [trend_dict(t, i) for i, t in enumerate(a.suspects, 1)],
        "stacks": stacks(a.trends),
        "fds_tracked": not a.fds_untracked,
        "fds_before_collection": a.fds_before,
        "resources": {name: {
            "weight": weight, "held": held,
            "suspects": [resource_dict(t, i) for i, t in
                         enumerate((t for t in a.resource_suspects if t.resource == name), 1)],
            "stacks": [resource_dict(t) for t in a.resource_trends if t.resource == name],
        } for name, (weight, held) in a.resources.items()},
        "live_slack": a.live_slack,
        "memory": memory_dict(a),
        "misuse_checked": a.misuse_unchecked is None,
        "misuse": [misuse_dict(m) for m in a.misuse],
    } for a in analyses], "problems": problems}


def memory_dict(a):
    """Where its resident memory went at the last report that measured it
    (None: none did), and the growth since the first."""
    m = a.memory_last
    if m is None:
        return None
    return {"rss": m.rss, "heap_live_bytes": m.live_bytes, "slack": m.slack,
            "allocator_free": m.allocator_free, "malloc_free": memory.malloc_free(m), "trailers": m.trailers,
            "parts": {name.replace("-", "_"): {"resident": r, "mapped": size, "mappings": n}
                      for name, (r, size, n) in m.parts.items()},
            "arenas": [{"resident": r, "mapped": size} for r, size in m.arenas],
            "malloc_arenas": [{"system": x.system, "max_system": x.max_system, "top": x.top,
                               "bins_bytes": x.bins_bytes, "bins_chunks": x.bins_chunks,
                               "fast_bytes": x.fast_bytes, "fast_chunks": x.fast_chunks,
                               "free_by_size": [{"chunks": c, "bytes": b} for c, b in x.classes]}
                              for x in m.malloc_arenas],
            "jemalloc": vars(m.jemalloc) if m.jemalloc else None,
            "growth": memory.growth_line(a.memory_first, m)}


def misuse_dict(m):
    """A misuse of the allocator: valgrind's words, how many times, both stacks."""
    d = {"kind": m.kind, "call": m.call, "what": m.title(), "times": m.times,
         "frames": [frame_dict(f) for f in m.frames],
         "allocation_frames": [frame_dict(f) for f in m.alloc_frames]}
    if m.freed_frames:
        d["first_free_frames"] = [frame_dict(f) for f in m.freed_frames]
    for name in ("block", "size", "given", "where", "address", "offset", "align", "given_align"):
        value = getattr(m, name)
        if value not in (None, ""):
            d[name] = value
    return d


def write(out, analyses, problems):
    """The document, as json.dump(indent=1) writes it -- byte for byte --
    with each process's "stacks" written a stack at a time: the document's
    dicts are never all in memory at once, only one stack's (figures:
    docs/performance.rst)."""
    lazy = {}
    doc = document(analyses, problems, lambda trends: _placeholder(lazy, trends))
    text = json.dumps(doc, indent=1)
    for marker, trends in lazy.items():
        head, found, text = text.partition(json.dumps(marker))
        out.write(head)
        if not found:  # (never: every placeholder is in the document)
            continue
        _write_list(out, (trend_dict(t) for t in trends), _indent_of(head))
    out.write(text)
    out.write("\n")


def _placeholder(lazy, trends):
    """A string that stands for the list of `trends`' dicts until written."""
    marker = f"\x00stacks {len(lazy)} {_TOKEN}\x00"  # (no field read from a file holds it)
    lazy[marker] = trends
    return marker


def _indent_of(head):
    """The indentation of the line `head` ends in (the list's key's)."""
    line = head.rpartition("\n")[2]
    return len(line) - len(line.lstrip(" "))


def _write_list(out, items, depth):
    """A JSON list of `items` as json.dump(indent=1) writes it at a key
    indented by `depth`."""
    pad = "\n" + " " * (depth + 1)
    first = True
    for item in items:
        out.write(("[" if first else ",") + pad + json.dumps(item, indent=1).replace("\n", pad))
        first = False
    out.write("[]" if first else "\n" + " " * depth + "]")
