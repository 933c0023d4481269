"""Collapsed stacks, the input of flamegraph.pl and inferno:
`outermost;...;innermost VALUE` a line, one line per stack, live bytes as
the value (stacks with nothing live are left out).  Frames are the short
names (function, else module+offset); semicolons in names are replaced,
as flamegraph.pl's own stackcollapse scripts do."""

from libmemleak.analysis.names import short_name


def frame_name(f):
    if f.function:
        return short_name(f.function).replace(";", ":")
    return f"{(f.module or '?').rsplit('/', 1)[-1]}+{f.offset:#x}"


def write(out, analyses, problems, value="live_bytes"):
    for a in analyses:
        for t in a.trends:
            v = getattr(t, value)
            if v > 0 and t.frames:
                out.write(";".join(frame_name(f) for f in reversed(t.frames)) + f" {v}\n")
