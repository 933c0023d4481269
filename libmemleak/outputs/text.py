"""`libmemleak report`: one screen per process -- what is live, over what
time, and the leak suspects with a verdict in words, readable frames and a
compact trend."""

from libmemleak.analysis import mappings, memory
from libmemleak.analysis.names import cut_of, frame_lines
from libmemleak.analysis.trends import count, human_bytes, resource_noun, resource_title

TREND_POINTS = 8


def compact_trend(deltas, bytes_=True):
    shown = deltas[-TREND_POINTS:]
    text = " ".join((human_bytes(d, sign=True).replace(" ", "") if bytes_ else f"{d:+d}") if d else "0"
                    for d in shown)
    return ("... " if len(deltas) > len(shown) else "") + text


def live_words(t):
    """What a stack holds, as its verdict counts it: before the exit
    report where exit freed some of it (the verdict's blocks are those),
    else now."""
    if t.freed_at_exit:
        return f"{human_bytes(t.running_live_bytes)} live before exit"
    return f"{human_bytes(t.live_bytes)} live in {count(t.live_blocks, 'block')}{mappings.touched_words(t)}"


def _namespace_init(header):
    """Whether the report's process is pid 1 of its pid namespace (by the
    pid it knows itself by; the reporter's own pid if it saw no other)."""
    return header.get("pid-in-namespace", header.get("pid") if "pid-namespace" in header else None) == "1"


def write(out, analyses, problems, top=10, full_names=False, all_stacks=False, frames=4):
    for a in analyses:
        s = a.series
        span = f", {a.seconds:.1f} s between the first and the last" if a.seconds else ""
        ended = f", ended: {s.ended}" if s.ended else ", still running at the last report"
        if s.final_report_lost:
            ended += (" -- and gone since, without a final report (its reporter was killed "
                      "before it): what it did after that report is not known")
        elif not s.ended and s.reports and _namespace_init(s.reports[-1].header):
            ended += (" -- or killed: as pid 1 of its pid namespace, a SIGKILL takes its reporter "
                      "along and leaves no final report")
        where = f" in pid namespace {s.pid_namespace}" if s.pid_namespace else ""
        out.write(f"{s.program} (pid {s.pid}{where}): {count(len(s.reports), 'report')}"
                  f"{span}{ended}\n")
        out.write(f"  live now: {human_bytes(a.live_bytes)} in {count(a.live_blocks, 'block')}"
                  f"{' (estimates: sampled)' if s.sampled else ''}\n")
        if a.custom_bytes or a.custom_blocks:
            out.write(f"  the program's own blocks (kind=custom, inside those): {human_bytes(a.custom_bytes)} "
                      f"in {count(a.custom_blocks, 'block')}\n")
        mapped = mappings.summary(a)
        if mapped:
            out.write(f"  of which: {mapped}\n")
        _write_memory(out, a, full_names)
        if a.scan:
            parts = [f"{name.replace('-', ' ')} {human_bytes(b)} in {count(k, 'block')}"
                     for name, (b, k) in a.scan.totals.items()]
            out.write(f"  scan (report {a.scan_seq}): {', '.join(parts)}\n")
        for note in a.notes:
            out.write(f"  note: {note}\n")
        _write_misuse(out, a, top, full_names, frames)  # bugs that crash, before what leaks
        _write_rows(out, a, a.trends if all_stacks else a.suspects, all_stacks, top, full_names, frames)
        _write_resources(out, a, all_stacks, top, full_names, frames)
        out.write("\n")
    for problem in problems:
        out.write(f"note: {problem}\n")


def _write_memory(out, a, full_names):
    """Where RSS goes when much of it is not in live blocks, what made it
    grow beyond them, and the stacks whose blocks the allocator rounds up
    most -- each only when it is worth a line (memory.worth_saying)."""
    grew = memory.growth_line(a.memory_first, a.memory_last)
    if a.memory_last and (grew or memory.worth_saying(a.memory_last)):
        out.write(f"  memory: {memory.breakdown_line(a.memory_last)}\n")
    if grew:
        out.write(f"  {grew}\n")
    if memory.slack_worth_saying(a.live_slack, a.live_bytes):
        out.write(f"  slack: {human_bytes(a.live_slack)} reserved beyond what the live blocks asked for; most at:\n")
        for t in memory.slack_stacks(a.trends):
            line = next(iter(frame_lines(t.frames, a.series.executable, 1, full=full_names, layer=a.layer)), "?")
            each = f", {t.slack / t.live_blocks:.0f} a block" if t.live_blocks > 0 else ""
            out.write(f"    {human_bytes(t.slack)} over {count(t.live_blocks, 'block')}{each}  {line}\n")


def _write_rows(out, a, rows, all_stacks, top, full_names, frames, noun=None):
    """The ranked stacks (memory's, or one resource kind's: noun names its units)."""
    s = a.series
    if not rows:
        if noun is None:
            seen = " among the allocations libmemleak saw (NOT SEEN above)" if s.blind else ""
            out.write(f"  no leak suspects{seen}: no stack grew steadily while it ran\n")
        return
    if noun:
        title = f"{noun} stacks, by how many they hold" if all_stacks else f"{noun} leak suspects, most likely first"
    else:
        title = "stacks, by live bytes" if all_stacks else "leak suspects, most likely first"
    out.write(f"  {title}:\n")
    for rank, t in enumerate(rows[:top], 1):
        verdict = t.verdict or "not a suspect"
        held = f"{t.live_blocks:,} held" if noun else live_words(t)
        out.write(f"  #{rank} {held} -- {verdict}\n")
        out.write(f"     trend: {compact_trend(t.block_deltas if noun else t.deltas, bytes_=not noun)}\n")
        for line in frame_lines(t.frames, s.executable, frames, full=full_names, cut=t.cut, layer=a.layer):
            out.write(f"       {line}\n")
    if len(rows) > top:
        out.write(f"  ({len(rows) - top} more: --top N)\n")


def _write_resources(out, a, all_stacks, top, full_names, frames):
    """Resources other than memory, a section each: how many are held at
    the end, and the stacks that keep acquiring them."""
    if a.fds_untracked:
        out.write("  file descriptors: not tracked (MEMLEAK_CONFIG fds=no)\n")
    for name, (weight, held) in a.resources.items():
        trends = [t for t in a.resource_trends if t.resource == name]
        before = a.fds_before if name == "fd" else 0
        if name == "fd" and not trends and not before:
            continue  # none opened while it was traced: nothing to say (the reports say they were tracked)
        suspects = [t for t in a.resource_suspects if t.resource == name]
        noun, title = resource_noun(name), resource_title(name)
        weighed = f", weighing {weight:,}" if name != "fd" and weight != held else ""
        unseen = (f" (and {before:,} open before collection started, which no stack here opened)"
                  if before else "")
        out.write(f"  {title}: {held:,} held at the last report{weighed}{unseen}\n")
        rows = trends if all_stacks else suspects
        if not rows and held > 0 and trends:  # no steady grower: who holds them
            rows = sorted(trends, key=lambda t: -t.live_blocks)[:3]
            rows = [t for t in rows if t.live_blocks > 0]
            if rows:
                out.write(f"  no {noun} leak suspects; held by:\n")
                for t in rows:
                    line = next(iter(frame_lines(t.frames, a.series.executable, 1, full=full_names,
                                                 layer=a.layer)), "?")
                    out.write(f"    {t.live_blocks:,} held  {line}\n")
            continue
        _write_rows(out, a, rows, all_stacks, top, full_names, frames, noun=noun)


def _write_misuse(out, a, top, full_names, frames):
    """Misuse of the allocator, valgrind's words first, with the misusing
    call's stack and the block's allocation stack."""
    if a.quarantine_refused:
        out.write(f"  quarantine: {a.quarantine_refused}\n")
    if a.misuse_unchecked:
        out.write(f"  allocator misuse: not checked ({a.misuse_unchecked})\n")
        return
    if not a.misuse:
        return
    total = sum(m.times for m in a.misuse)
    out.write(f"  allocator misuse: {count(total, 'time')} at {count(len(a.misuse), 'site')}:\n")
    executable = a.series.executable
    for m in a.misuse[:top]:
        out.write(f"  {m.title()} -- {m.detail()}, {count(m.times, 'time')}\n")
        # the misusing call's stack, then (when known) the block's allocation's and its first free's
        for said, stack in (("", m.frames), ("the block was allocated at:", m.alloc_frames),
                            ("and first freed at:", m.freed_frames)):
            if said and stack:
                out.write(f"     {said}\n")
            for line in frame_lines(stack, executable, frames, full=full_names, layer=a.layer):
                out.write(f"       {line}\n")
    if len(a.misuse) > top:
        out.write(f"  ({len(a.misuse) - top} more: --top N)\n")


def render_scan(result, pid, top=10, full_names=False, executable=None):
    """A scan's answer as valgrind's LEAK SUMMARY would put it, then the
    stacks that lost memory (the `top` largest of each category)."""
    from libmemleak.analysis.lost import CATEGORIES, since_of, survivors_words
    out = []
    pause = f", paused {result.pause_ms:.1f} ms" if result.pause_ms is not None else ""
    threads = f" ({count(result.threads, 'thread')})" if result.threads else ""
    out.append(f"process {pid}: reachability scan{pause}{threads}")
    width = max(len(c) for c in CATEGORIES)
    for name in CATEGORIES:
        nbytes, blocks = result.totals[name]
        label = name.replace("-", " ")
        out.append(f"  {label:>{width}}: {nbytes:,} bytes in {count(blocks, 'block')}")
    shown = {}
    for name, nbytes, blocks, entry in result.stacks:
        if top <= 0 or shown.get(name, 0) >= top:
            continue
        if name not in shown:
            out.append(f"{name.replace('-', ' ')}, by stack:")
        shown[name] = shown.get(name, 0) + 1
        lines = (frame_lines(entry.frames, executable, full=full_names, cut=cut_of(entry))
                 or [getattr(entry, "label", "(no frames)")])
        ages = survivors_words(since_of(entry))
        if ages:
            lines.append(f"(live blocks of this stack: {ages})")
        first = f"  {human_bytes(nbytes):>9} in {count(blocks, 'block')}  "
        out.append(first + lines[0])
        out.extend(" " * len(first) + line for line in lines[1:])
    return "\n".join(out) + "\n"
