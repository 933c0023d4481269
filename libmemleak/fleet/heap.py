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
from array import array
from collections import defaultdict

from libmemleak.daemon.diff import FrameResolver, estimate
from libmemleak.daemon.stack_keys import KeyTable
from libmemleak.daemon.header_parts import SELF_LIBRARY
from libmemleak.daemon.python_code import PyFrame, as_frame, is_eval_loop, kind_of, merged_order
from libmemleak.outputs.pprof import GZIP_LEVEL, Tables, encode_samples
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
        # A key's frames and the build ids they name, made once: a key id
        # stands for the same frames for the table's life (as a reporter's
        # texts do), and a scrape must not rebuild each stack's Python
        # frames (scrapers give up after ~10 s).
        self.key_frames = {}
        # What one frame token shows (_token_frames), by its number: shared
        # by the keys that have it.
        self.token_frames = {}
        self.tables = Tables()  # the profiles' tables, kept across scrapes (pprof.Tables)

    def profile(self, which):
        """The gzipped profile `which` ("heap" or "allocs")."""
        snap = self.segment.take_snapshot()
        if self.resolver is None or self.resolver.modules != tuple(snap.modules):
            self.resolver = FrameResolver(snap.modules, self.keys)
        apart = set(snap.custom) | {pos for pos, _ in snap.resources}  # not memory, or inside memory counted
        resolver = self.resolver
        resolver.key_ids(snap.stacks, array("q", snap.ids))  # (new ones in C, as a report keys them)
        sums = defaultdict(lambda: [0, 0, 0, 0])
        for pos, sid in enumerate(snap.ids):
            if pos in apart or (not snap.live_blocks[pos] and not snap.alloc_count[pos]):
                continue
            kid = resolver.key_id(snap.stacks, sid)
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
        data = encode_samples(samples, TYPES, DEFAULT_TYPE[which], build_ids, rate or 1, tables=self.tables)
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)

    def frames_of(self, kid, build_ids):
        """The key's frames, Python frames where the evaluation loop's
        native frames stood (as reports show them); the build ids of the
        modules they are in go into `build_ids`."""
        made = self.key_frames.get(kid)
        if made is None:
            made = self._frames_of(kid)
            if made[2]:
                self.key_frames[kid] = made
        build_ids.update(made[1])
        return made[0]

    def _frames_of(self, kid):
        each, kinds, build_ids, final = [], [], {}, True  # per frame token: its frames, and its kind
        known = self.token_frames
        for token in self.keys.tokens(kid):
            shown = known.get(token)
            if shown is None:
                shown = self._token_frames(token)
                if shown[3]:
                    known[token] = shown
                else:
                    final = False  # a JIT's code its perf map does not name yet: looked up again
            if shown[0] is None:
                continue  # (our own library's frames are left out, as reports leave them)
            each.append(shown[0])
            kinds.append(shown[1])
            if shown[2]:
                build_ids[shown[2][0]] = shown[2][1]
        if "py" in kinds or "py-entry" in kinds:
            each = [each[i] for i in merged_order(kinds)]
        return tuple(f for fs in each for f in fs), build_ids, final

    def _token_frames(self, token):
        """(frames or None to leave it out, kind, (module path, build id) or
        None, final) of one frame token: a Python frame, a JIT's (no module:
        the perf map names it) or a native one.  Not final: a JIT's frame
        its perf map does not name yet."""
        module, _address, (_path, offset) = self.keys.frames[token]
        if type(offset) is PyFrame:
            return [as_frame(offset)], kind_of(offset), None, True
        if module is None:
            found = self.perf_map.frame_at(offset)
            return ([Frame(found[0], self.perf_map.shown, found[1]) if found else Frame(None, None, offset)],
                    None, None, found is not None)
        if module.path.endswith("/" + SELF_LIBRARY):
            return None, None, None, True
        frames = self.symbolizer.frames_for(module, module.base + offset)
        return (frames, "eval" if is_eval_loop(frames) else None,
                (module.path, module.build_id) if module.build_id else None, True)
