"""A traced process's heap as Go's net/http/pprof serves one
(/debug/pprof/heap, /debug/pprof/allocs): gzipped profile.proto with the
sample types alloc_objects, alloc_space, inuse_objects, inuse_space in
Go's order, one sample per distinct stack -- stacks merged as reports
merge them (the same frames, the same key) -- symbolized here, build ids
on the mappings, and the period in bytes: the sampling interval where the
process samples (the numbers then the estimates its reports give), 1
where every allocation is counted.

Read from the segment, read-only: the process's own reports are untouched.
Our own library's frames are left out, as reports leave them; JIT frames
are named from the process's perf map."""

import gzip
from collections import defaultdict

from libmemleak.daemon.diff import FrameResolver, estimate
from libmemleak.daemon.stack_keys import KeyTable
from libmemleak.daemon.header_parts import SELF_LIBRARY
from libmemleak.daemon.python_code import PyFrame, as_frame, is_eval_loop, kind_of, merged_order
from libmemleak.outputs.pprof import encode_samples
from libmemleak.symbols import Frame
from libmemleak.symbols.perfmap import PerfMap

TYPES = [("alloc_objects", "count"), ("alloc_space", "bytes"), ("inuse_objects", "count"),
         ("inuse_space", "bytes")]
DEFAULT_TYPE = {"heap": "inuse_space", "allocs": "alloc_space"}


class HeapProfiles:
    """Profiles of one process, its stack keys learnt once."""

    def __init__(self, segment, pid, symbolizer):
        self.segment, self.symbolizer = segment, symbolizer
        self.keys = KeyTable()
        self.resolver = None
        self.perf_map = PerfMap(pid, segment.header.pid)

    def profile(self, which):
        """The gzipped profile `which` ("heap" or "allocs")."""
        snap = self.segment.take_snapshot()
        if self.resolver is None or self.resolver.modules != tuple(snap.modules):
            self.resolver = FrameResolver(snap.modules, self.keys)
        apart = set(snap.custom) | {pos for pos, _ in snap.resources}  # not memory, or inside memory counted
        sums = defaultdict(lambda: [0, 0, 0, 0])
        for pos, sid in enumerate(snap.ids):
            if pos in apart or (not snap.live_blocks[pos] and not snap.alloc_count[pos]):
                continue
            kid = self.resolver.key_id(snap.stacks, sid)
            row = sums[kid]
            row[0] += snap.alloc_count[pos]
            row[1] += snap.alloc_bytes[pos]
            row[2] += snap.live_blocks[pos]
            row[3] += snap.live_bytes[pos]
        rate = snap.sample_bytes
        samples = []
        build_ids = {}
        for kid, (alloc_n, alloc_b, live_n, live_b) in sums.items():
            if rate:  # the estimates the process's reports give
                alloc_b, alloc_n = estimate(alloc_b, alloc_n, rate)
                live_b, live_n = estimate(live_b, live_n, rate)
            frames = self.frames_of(kid, build_ids)
            samples.append((frames, [alloc_n, alloc_b, max(0, live_n), max(0, live_b)]))
        data = encode_samples(samples, TYPES, DEFAULT_TYPE[which], build_ids, rate or 1)
        return gzip.compress(data, mtime=0)

    def frames_of(self, kid, build_ids):
        """The key's frames, Python frames where the evaluation loop's
        native frames stood (as reports show them)."""
        (_, pairs), modules = self.keys.key(kid)
        each, kinds = [], []  # per frame token: its frames, and its kind for merged_order
        for (_path, offset), module in zip(pairs, modules):
            if type(offset) is PyFrame:
                each.append([as_frame(offset)])
                kinds.append(kind_of(offset))
            elif module is None:
                found = self.perf_map.frame_at(offset)
                each.append([Frame(found[0], self.perf_map.shown, found[1]) if found else Frame(None, None, offset)])
                kinds.append(None)
            elif not module.path.endswith("/" + SELF_LIBRARY):
                if module.build_id:
                    build_ids[module.path] = module.build_id
                each.append(self.symbolizer.frames_for(module, module.base + offset))
                kinds.append("eval" if is_eval_loop(each[-1]) else None)
        if "py" in kinds or "py-entry" in kinds:
            each = [each[i] for i in merged_order(kinds)]
        frames = [f for fs in each for f in fs]
        return frames
