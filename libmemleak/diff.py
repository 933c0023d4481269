"""Snapshot -> per-stack changes since the previous report.  Pure functions.

A stack's change is its live bytes/blocks now minus what the previous report
covered (the baseline kept in the segment).  Entries whose backtraces are the
same once addresses are made module-relative are merged: the program may
hold several entries for one stack (after a dlclose, or when its index
grew), and users care about call sites, not entries."""

import math
from dataclasses import dataclass

from libmemleak.modmap import ModuleMap


@dataclass(frozen=True)
class StackDelta:
    key: tuple          # (kind, ((module path or None, offset), ...))
    stack: object       # a representative segment.Stack
    modules: tuple      # segment.Module or None, per frame of `stack`
    bytes: int          # change in live bytes since the previous report
    blocks: int
    live_bytes: int     # live now
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


def canonical_frames(stack, modmap):
    mods = tuple(modmap.find(a, stack.map_epoch) for a in stack.frames)
    key = tuple((m.path, a - m.base) if m else (None, a) for m, a in zip(mods, stack.frames))
    sortable = (stack.kind, tuple((path or "", off) for path, off in key))
    return key, mods, sortable


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


def diff_snapshot(snapshot, key_cache=None):
    """List of StackDelta, largest byte change first; unchanged stacks left out.
    key_cache (stack id -> canonical_frames(...)) may be kept across reports
    of one process: a stack's frames and their modules never change."""
    modmap = ModuleMap(snapshot.modules)
    if key_cache is None:
        key_cache = {}
    merged = {}
    live_bytes, live_blocks, reported_bytes, reported_blocks = _estimated(snapshot)
    for pos, sid in enumerate(snapshot.ids):
        stack = snapshot.stacks[sid]
        live_b, live_k = live_bytes[pos], live_blocks[pos]
        db = live_b - reported_bytes[pos]
        dk = live_k - reported_blocks[pos]
        if not (db or dk or live_b or live_k):
            continue
        cached = key_cache.get(sid)
        if cached is None:
            cached = key_cache[sid] = canonical_frames(stack, modmap)
        frames_key, mods, sortable = cached
        key = (stack.kind, frames_key)
        prev = merged.get(key)
        if prev is None:
            merged[key] = [stack, mods, db, dk, live_b, live_k, sortable]
        else:
            prev[2] += db
            prev[3] += dk
            prev[4] += live_b
            prev[5] += live_k
    chosen = [(key, v) for key, v in merged.items() if v[2] or v[3]]
    chosen.sort(key=lambda kv: (-kv[1][2], -kv[1][3], kv[1][6]))
    return [StackDelta(key, v[0], v[1], v[2], v[3], v[4], v[5]) for key, v in chosen]


def totals(snapshot):
    live_bytes, live_blocks, reported_bytes, reported_blocks = _estimated(snapshot)
    live_b, live_k = sum(live_bytes), sum(live_blocks)
    alloc = [estimate(b, n, snapshot.sample_bytes)
             for b, n in zip(snapshot.alloc_bytes, snapshot.alloc_count)]
    return Totals(live_b, live_k, live_b - sum(reported_bytes), live_k - sum(reported_blocks),
                  sum(n for _, n in alloc), sum(b for b, _ in alloc), len(snapshot.ids))
