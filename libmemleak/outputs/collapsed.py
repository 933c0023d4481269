"""Collapsed stacks, the input of flamegraph.pl and inferno:
`outermost;...;innermost VALUE` a line, one line per stack, live bytes as
the value (stacks with nothing live are left out).  Frames are the short
names (function, else module+offset); semicolons in names are replaced,
as flamegraph.pl's own stackcollapse scripts do."""

from libmemleak.analysis.names import short_name, shown_frames
from libmemleak.symbols import Frame

# The root every shared mapping is drawn under: apart from the private
# heap, as it is memory the process shares with those it forked.
SHARED_ROOT = Frame("[shared mappings]", None, 0)
# ... and the program's own blocks (kind=custom, memleak.h): their bytes lie
# inside blocks drawn elsewhere (a pool's superblocks), so apart as well.
CUSTOM_ROOT = Frame("[the program's own blocks, inside its heap blocks]", None, 0)


def frame_name(f):
    if f.function:
        return short_name(f.function).replace(";", ":")
    return f"{(f.module or '?').rsplit('/', 1)[-1]}+{f.offset:#x}"


def drawn_frames(t, analysis):
    """The frames a drawing shows for trend t, innermost first.  The
    allocation layer (analysis.layer) is folded as `report` folds it: the
    frames from the allocator up to the first own frame outside the layer
    are left out, so the leaf -- what pprof's top and a flamegraph's tips
    rank -- is the caller that asked.  A shared mapping is drawn under
    SHARED_ROOT, a block of the program's own allocator under CUSTOM_ROOT."""
    frames = t.frames
    layer = analysis.layer
    if layer and frames:
        _, above, _ = shown_frames(frames, analysis.series.executable, len(frames), layer)
        if any(f in layer for f in frames[:above]):
            frames = frames[above:]
    if t.kind == "shared":
        frames = [*frames, SHARED_ROOT]
    elif t.kind == "custom":
        frames = [*frames, CUSTOM_ROOT]
    return frames


def drawing_notes(analyses):
    """What the drawings folded, one line per process that has a layer:
    said where each format has room (a page, pprof's comments), else by
    `export` on stderr."""
    return [f"{a.series.program} (pid {a.series.pid}): {note}" for a in analyses for note in a.layer.notes()
            if a.layer]


def write(out, analyses, problems, value="live_bytes"):
    for a in analyses:
        for t in a.trends:
            v = getattr(t, value)
            if v > 0 and t.frames:
                out.write(";".join(frame_name(f) for f in reversed(drawn_frames(t, a))) + f" {v}\n")
