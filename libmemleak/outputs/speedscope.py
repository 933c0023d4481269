"""speedscope's own JSON format (https://www.speedscope.app, or the
`speedscope` npm package offline): one sampled profile per process, each
stack a sample weighted by its live bytes, frames shared.  speedscope then
gives its flame chart, left-heavy view and sandwich view (callers and
callees of any function) over the heap.  Schema: the package's
dist/release/file-format-schema.json."""

import json

from libmemleak import __version__
from libmemleak.outputs.collapsed import drawn_frames, frame_name

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def document(analyses, value="live_bytes", what="live bytes"):
    frames, index = [], {}

    def frame_id(f):
        key = (frame_name(f), f.file, f.line)
        if key not in index:
            index[key] = len(frames)
            d = {"name": key[0]}
            if f.file:
                d["file"] = f.file
                if f.line:
                    d["line"] = f.line
            elif f.module:
                d["file"] = f.module
            frames.append(d)
        return index[key]

    profiles = []
    for a in analyses:
        samples, weights = [], []
        for t in a.trends:
            v = getattr(t, value)
            if v > 0 and t.frames:
                samples.append([frame_id(f) for f in reversed(drawn_frames(t, a))])  # root first
                weights.append(v)
        profiles.append({"type": "sampled", "name": f"{a.series.program} (pid {a.series.pid}): {what}",
                         "unit": "bytes", "startValue": 0, "endValue": sum(weights),
                         "samples": samples, "weights": weights})
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": profiles,
            "name": f"libmemleak: {what}", "activeProfileIndex": 0,
            "exporter": f"libmemleak {__version__}"}


def write(out, analyses, problems, what="live bytes"):
    json.dump(document(analyses, what=what), out, separators=(",", ":"))
    out.write("\n")
