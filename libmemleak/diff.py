"""Snapshot -> per-stack changes since the previous report.  Pure functions.

A stack's change is its live bytes/blocks now minus what the previous report
covered (the baseline kept in the segment).  Entries whose backtraces are the
same once addresses are made module-relative are merged: the program may
hold several entries for one stack (after a dlclose, or when its index
grew), and users care about call sites, not entries."""

import math
from dataclasses import dataclass
from typing import NamedTuple

from libmemleak.modmap import ModuleMap


class StackDelta(NamedTuple):  # a named tuple: thousands are built per report
    key: tuple          # (kind, ((module path or None, offset), ...))
    sid: int            # a representative stack id (the lowest of those merged)
    modules: tuple      # segment.Module or None, per frame of the key
    bytes: int          # change in live bytes since the previous report
    blocks: int
    live_bytes: int     # live now (over the merged entries that changed)
    live_blocks: int


@dataclass(frozen=True)
class Totals:
    live_bytes: int
    live_blocks: int
    change_bytes: int
    change_blocks: int
    alloc_count: int
    alloc_bytes: int
    stacks: int


class FrameResolver:
    """Return address -> (module, (module path or None, offset)), cached per
    address wherever the answer cannot depend on when the stack was
    recorded (one module ever held that address).  Valid for one module
    list: build a new one when the list changes."""

    def __init__(self, modules, stacks_kept=250_000):
        self.modules = tuple(modules)
        self._modmap = ModuleMap(self.modules)
        self._cache = {}
        # Stack id -> (key, modules, key id): a stack is immutable once published,
        # so it is resolved once, not at every report that finds it changed
        # (100,000 changed stacks took seconds to resolve again each time).
        # Module tuples repeat across stacks and are shared.
        self._stacks = {}
        self._stacks_kept = stacks_kept
        self._module_tuples = {}
        self._key_ids = {}

    def resolve(self, address, epoch):
        hit = self._cache.get(address)
        if hit is not None:
            return hit
        m = self._modmap.find(address, epoch)
        answer = (m, (m.path, address - m.base) if m else (None, address))
        if m is not None and self._modmap.only_one(address):
            self._cache[address] = answer
        return answer

    def stack_key(self, stacks, sid):
        """(key, modules per frame, key id) of stack `sid` of `stacks` (an
        id -> segment.Stack mapping, the same one each time).  Stacks with
        one key have one key id: merging by it hashes an int, not the key."""
        hit = self._stacks.get(sid)
        if hit is None:
            stack = stacks[sid]
            cache, epoch = self._cache, stack.map_epoch
            resolved = [cache.get(a) or self.resolve(a, epoch) for a in stack.frames]
            mods = tuple([r[0] for r in resolved])
            mods = self._module_tuples.setdefault(mods, mods)
            key = (stack.kind, tuple([r[1] for r in resolved]))
            hit = (key, mods, self._key_ids.setdefault(key, len(self._key_ids)))
            if len(self._stacks) < self._stacks_kept:
                self._stacks[sid] = hit
        return hit


def estimate(sampled_bytes, sampled_blocks, sample_bytes):
    """Scale what sampling recorded up to an estimate of the real totals.
    An allocation of s bytes is recorded with probability 1 - exp(-s/R);
    like pprof, take s as the stack's average recorded size."""
    if not sample_bytes or sampled_blocks <= 0 or sampled_bytes <= 0:
        return sampled_bytes, sampled_blocks
    average = sampled_bytes / sampled_blocks
    scale = 1.0 / -math.expm1(-average / sample_bytes)
    return round(sampled_bytes * scale), round(sampled_blocks * scale)


def _estimated(snapshot):
    """(live_bytes, live_blocks, reported_bytes, reported_blocks) columns,
    scaled up when the snapshot is sampled."""
    cols = (snapshot.live_bytes, snapshot.live_blocks,
            snapshot.reported_bytes, snapshot.reported_blocks)
    rate = snapshot.sample_bytes
    if not rate:
        return cols
    live = [estimate(b, k, rate) for b, k in zip(cols[0], cols[1])]
    reported = [estimate(b, k, rate) for b, k in zip(cols[2], cols[3])]
    return ([x[0] for x in live], [x[1] for x in live],
            [x[0] for x in reported], [x[1] for x in reported])


def diff_snapshot(snapshot, resolver=None):
    """List of StackDelta, largest byte change first; unchanged stacks left
    out.  Only changed stacks are looked at closely (their frames read and
    resolved), so a report stays cheap with a million stacks.  `resolver`
    (a FrameResolver for snapshot.modules) may be kept across reports."""
    if resolver is None or resolver.modules != tuple(snapshot.modules):
        resolver = FrameResolver(snapshot.modules)
    live_bytes, live_blocks, reported_bytes, reported_blocks = _estimated(snapshot)
    merged = {}
    ids, stacks, stack_key = snapshot.ids, snapshot.stacks, resolver.stack_key
    for pos, (live_b, rep_b, live_k, rep_k) in enumerate(
            zip(live_bytes, reported_bytes, live_blocks, reported_blocks)):
        if live_b == rep_b and live_k == rep_k:
            continue
        sid = ids[pos]
        key, mods, key_id = stack_key(stacks, sid)
        prev = merged.get(key_id)
        if prev is None:
            merged[key_id] = [key, sid, mods, live_b - rep_b, live_k - rep_k, live_b, live_k]
        else:
            prev[3] += live_b - rep_b
            prev[4] += live_k - rep_k
            prev[5] += live_b
            prev[6] += live_k
    chosen = [v for v in merged.values() if v[3] or v[4]]
    chosen.sort(key=lambda v: (-v[3], -v[4], v[1]))
    return [StackDelta(*v) for v in chosen]


def totals(snapshot):
    live_bytes, live_blocks, reported_bytes, reported_blocks = _estimated(snapshot)
    live_b, live_k = sum(live_bytes), sum(live_blocks)
    if snapshot.sample_bytes:
        alloc = [estimate(b, n, snapshot.sample_bytes)
                 for b, n in zip(snapshot.alloc_bytes, snapshot.alloc_count)]
        alloc_count, alloc_bytes = sum(n for _, n in alloc), sum(b for b, _ in alloc)
    else:
        alloc_count, alloc_bytes = sum(snapshot.alloc_count), sum(snapshot.alloc_bytes)
    return Totals(live_b, live_k, live_b - sum(reported_bytes), live_k - sum(reported_blocks),
                  alloc_count, alloc_bytes, len(snapshot.ids))
