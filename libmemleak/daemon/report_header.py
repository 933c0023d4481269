"""A report's header (docs/memlog.md): every field the reporter writes
before the entries, from the segment's snapshot, its sums, the process as
/proc shows it and what the reporter itself knows (its event log, its
symbols).  The parts that stand alone are header_parts.py's."""

import datetime
import os

from libmemleak import __version__
from libmemleak.daemon import allocator_stats, memory_use, misuse
from libmemleak.daemon.layout import CONST
from libmemleak.daemon.header_parts import (SELF_LIBRARY, default_suppression_lines, mapping_lines, process_status,
                                            resource_lines, signal_name, slack_lines)


def header_lines(rep, snap, sums, seq, reason, scan=None, touched=None, label=""):
    """A report's header, a (field, value) pair a line, in the order docs/memlog.md
    lists them: what rep (the Reporter) knows of the process as of snap."""
    when = datetime.datetime.fromtimestamp(snap.taken_ns / 1e9).astimezone()
    lines = [
        ("libmemleak", __version__),
        ("program", snap.exe),
        ("pid", rep.pid),
    ]
    if rep.h.pid != rep.pid:  # in a pid namespace of its own: what it calls itself
        lines.append(("pid-in-namespace", rep.h.pid))
    if rep.ns_tag:  # `pid` is numbered in this pid namespace (its inode), not the host's
        lines.append(("pid-namespace", rep.ns_tag))
    if rep.process_start:  # (`report` tells by it whether the process is gone)
        lines.append(("process-start", rep.process_start))
    if snap.parent_pid:
        lines.append(("parent-pid", snap.parent_pid))
    if rep.h.blind_len:  # what the hook could not see: first, never missed
        lines.append(("blind", rep.seg.string(rep.h.blind_off, min(rep.h.blind_len, 1024))))
    if rep.h.routed_len:  # the program's own allocator, routed to the hook
        lines.append(("routed", rep.seg.string(rep.h.routed_off, min(rep.h.routed_len, 1024))))
    lines += default_suppression_lines(rep.seg)
    if rep.h.alloc_fns_len:  # its allocation layer, as its user named it
        lines.append(("alloc-fns", rep.seg.string(rep.h.alloc_fns_off, min(rep.h.alloc_fns_len, 255))))
    lines += [
        ("seq", seq),
        ("time", when.isoformat(timespec="milliseconds")),
        ("reason", reason),
        *([("killed-by", signal_name(rep.h.dying_signal))] if reason == "death" and rep.h.dying_signal else []),
        *_ended_lines(rep.ended if reason in ("exit", "death") else None),
    ]
    if label:
        lines.append(("label", label))
    if rep.handover:  # a report before it was cut short by its reporter's death (reporter.commit_record)
        lines.append(("handover", rep.handover))
    if rep.recorder:  # the event log, and what it missed: said, never silent
        lines.append(("event-log", rep.recorder.state_words()))
    if snap.attached_ns:
        attached = datetime.datetime.fromtimestamp(snap.attached_ns / 1e9).astimezone()
        lines.append(("attached", attached.isoformat(timespec="milliseconds")))
    lines += [
        ("live-bytes", sums.live_bytes),
        ("live-blocks", sums.live_blocks),
        *([("custom-live", f"{sums.custom_bytes} {sums.custom_blocks}")]
          if sums.custom_bytes or sums.custom_blocks or snap.custom else []),
        *slack_lines(snap, sums, bool(rep.h.routed_len)),
        ("change-bytes", f"{sums.change_bytes:+d}"),
        ("change-blocks", f"{sums.change_blocks:+d}"),
        ("allocated-bytes", sums.alloc_bytes),
        ("allocations", sums.alloc_count),
        *resource_lines(snap, sums),
        ("collecting-seconds", f"{max(0, snap.taken_ns - snap.start_time_ns) / 1e9:.3f}"),
        ("stacks", sums.stacks),
        ("depth", snap.depth),
        ("tracking", snap.tracking),
        ("report-signal", signal_name(rep.h.report_signal)),
    ]
    if scan:
        lines += scan.header_lines()
        if scan.through_header:
            lines.append(("reachable-through-header", "; ".join(
                f"{offset} {nbytes} {blocks} {rep.site_words(ip)}"
                for ip, offset, blocks, nbytes in sorted(scan.through_header, key=lambda x: -x[3]))))
    elif rep.scan_refused:
        lines.append(("scan", f"not made: {rep.scan_refused}"))
    if snap.last_report_ns:
        lines.append(("interval-seconds",
                      f"{max(0, snap.taken_ns - snap.last_report_ns) / 1e9:.3f}"))
    if snap.sample_bytes:
        lines.append(("sampled", f"every {snap.sample_bytes} bytes on average "
                                 "(byte-weighted); bytes and blocks are estimates"))
    if not rep.watch.dead():  # else the pid may already be another process's
        lines += process_status(rep.pid)
    elif rep.h.exit_hwm_kb:  # what it said of itself as it exited
        lines += [("vm-rss", f"{rep.h.exit_rss_kb} kB"), ("vm-hwm", f"{rep.h.exit_hwm_kb} kB")]
    lines += mapping_lines(touched, rep.touched_refused)
    if not rep.watch.dead():  # else the pid may already be another process's
        lines += memory_lines(rep, snap, sums, touched)
    lines += misuse.header_lines(rep.h, snap.tracking, snap.sample_bytes)
    # Which process wrote it: a descendant's own reporter, or the keeper
    # (the root's reporter), which writes most descendants' last reports.
    lines.append(("reporter-pid", os.getpid()))
    lines += [("reporter-" + k, v) for k, v in process_status("self") if k == "vm-hwm"]
    for name, value in snap.health.items():
        if value and name == "unknown_frees" and snap.attached_ns:
            lines.append(("frees-before-attach", value))  # the program's older blocks
        elif value:
            lines.append((name.replace("_", "-"), value))
    if snap.corrupt_stacks:
        lines.append(("corrupt-stacks", snap.corrupt_stacks))
    fp_stacks, fp_frames, stopped = rep.h.fp_stacks, rep.h.fp_frames, rep.h.fp_stopped_stacks
    if fp_stacks:  # frames the chain gave, where no unwind table covers the code
        lines.append(("frame-pointers", f"{fp_frames} frames of {fp_stacks} stacks followed by "
                                        "frame pointers through code without unwind tables"))
    if stopped:  # where it could not: those stacks lack their outer callers
        lines.append(("stacks-ended-without-tables",
                      f"{stopped} stacks end in code without unwind tables whose frame-pointer "
                      "chain did not check out (no frame pointers there, or a thread whose stack "
                      "extent is not known): their outer callers are missing"))
    lines += python_lines(rep.seg.python)
    if rep.symbolizer.skipped:
        lines.append(("symbolization", f"partial: {rep.symbolizer.skipped} frames without "
                                       f"file:line after the {rep.budget:g}s budget "
                                       "(MEMLEAK_SYMBOL_BUDGET)"))
    for problem in rep.symbolizer.problems():
        lines.append(("symbols-unreadable", problem))
    if not rep.symbolize:
        lines.append(("symbolization", "none (MEMLEAK_SYMBOLIZE=no): frames are module+offset"))
    # Which file each module was (what pprof and debuginfod look files up by).
    seen = set()
    for m in snap.modules:
        if m.build_id and m.path not in seen and not m.path.endswith("/" + SELF_LIBRARY):
            seen.add(m.path)
            lines.append((f"build-id {m.path}", m.build_id))
    return lines


def memory_lines(rep, snap, sums, touched):
    """Where its resident memory goes (memory_use): the heap blocks'
    totals are the live ones less its mappings'."""
    mapped = [touched.by_kind.get(kind, (0, 0, 0)) for kind in ("mmap", "shared")] if touched else []
    heap_bytes = sums.live_bytes - sum(m[0] for m in mapped)
    heap_blocks = sums.live_blocks - sum(m[1] for m in mapped)
    # What is held free is the heaps less the blocks' exact shares:
    # glibc's (slack_floor is set for it), all of them measured.
    why = ("the program's allocator is routed: its heaps are not glibc's" if rep.h.routed_len
           else "blocks are tracked in the table (sample=, track=table): their slack is not measured"
           if sums.live_slack is None
           else "the allocator is not glibc's malloc" if not snap.slack_floor else None)
    use = memory_use.measure(rep.pid, (rep.h.own_lo, rep.h.own_hi))
    return memory_use.header_lines(use, heap_bytes, heap_blocks, sums.live_slack, why,
                                   trailers=snap.tracking == "trailers",
                                   quarantined=(min(rep.h.quarantine_held, 1 << 62),
                                                min(rep.h.quarantine_blocks, 1 << 62))) + \
        allocator_stats.header_lines(rep.pid, rep.h)


# What a report says of a CPython's allocator (shm_layout.h MLK_PYMALLOC_*).
PYMALLOC_WORDS = {
    CONST["MLK_PYMALLOC_ROUTED"]: "objects routed (each at its own stack)",
    CONST["MLK_PYMALLOC_RUNNING"]: "objects not routed yet (the interpreter ran before collection started: "
                                   "routed once a thread is seen allocating with its GIL)",
    CONST["MLK_PYMALLOC_MALLOC"]: "objects through malloc",
    CONST["MLK_PYMALLOC_REPLACED"]: "objects not routed (PYTHONMALLOC or -X dev chose its allocator)",
    CONST["MLK_PYMALLOC_NO_INTERFACE"]: "objects not routed (no PyMem_SetAllocator found): pymalloc's are "
                                        "seen as its 1 MiB arenas",
}


def _ended_lines(ended):
    """A process gone without our exit hook, as its zombie said
    (Reporter.death_reason): its exit status, or the signal that killed it."""
    if ended is None:
        return []
    how, number = ended
    if how == "exit":
        return [("exit-status", f"{number} (no exit handler of libmemleak's ran: an exit_group past libc's "
                                "exit, as a Go program's or _exit)")]
    return [("killed-by", signal_name(number))]


def python_lines(python):
    """A CPython's line (docs/memlog.md): its version, whether its frames
    are read -- where they are not, stacks stop at the interpreter, and
    every report says so -- and whether its objects are routed."""
    if python.interpreter is None:
        return []
    version = python.interpreter.version_text()
    if python.interpreter.frames_read:
        text = f"CPython {version}: frames read"
    else:
        text = (f"CPython {version}: frames not read (libmemleak reads the frames of CPython 3.11's to 3.13's "
                "release builds): stacks stop at the interpreter")
    words = PYMALLOC_WORDS.get(python.interpreter.pymalloc)
    return [("python", f"{text}; {words}" if words else text)]
