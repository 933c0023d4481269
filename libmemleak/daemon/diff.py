"""Snapshot -> per-stack changes since the previous report.  Pure functions.

A stack's change is its live bytes/blocks now minus what the previous report
covered (the baseline kept in the segment).  Entries whose backtraces are the
same once addresses are made module-relative are merged: the program may
hold several entries for one stack (after a dlclose, or when its index
grew), and users care about call sites, not entries."""

import math
from array import array
from dataclasses import dataclass
from typing import NamedTuple

from libmemleak.daemon import report_core
from libmemleak.daemon.modmap import ModuleMap
from libmemleak.daemon.stack_keys import AddressCache, KeyTable, key_stacks


class StackDelta(NamedTuple):  # a named tuple: thousands are built per report
    key: tuple          # (kind, ((module path or None, offset), ...))
    sid: int            # a representative stack id (the lowest of those merged)
    modules: tuple      # segment.Module or None, per frame of the key
    bytes: int          # change in live bytes since the previous report
    blocks: int
    live_bytes: int     # live now (over the merged entries that changed)
    live_blocks: int
    samples: int = -1   # sampled reports: change in recorded blocks behind the estimate
    allocs: int = -1    # allocations made since the previous report (-1: not known)


@dataclass(frozen=True)
class Totals:
    live_bytes: int
    live_blocks: int
    change_bytes: int
    change_blocks: int
    alloc_count: int
    alloc_bytes: int
    stacks: int
    custom_bytes: int = 0   # the program's own blocks (kind custom), inside the blocks above
    custom_blocks: int = 0
    # Resources other than memory, per kind named: (name, live weight, live
    # count, change in weight, change in count), in the order named.
    resources: tuple = ()
    live_slack: int | None = None  # bytes the allocator reserved beyond the live blocks' sizes


class FrameResolver:
    """Return address -> frame token, cached per address wherever the
    answer cannot depend on when the stack was recorded (one module ever
    held that address); stack id -> key id.  Valid for one module list:
    build a new one when the list changes (passing the same KeyTable keeps
    tokens and key ids)."""

    def __init__(self, modules, keys=None):
        self.modules = tuple(modules)
        self.keys = keys if keys is not None else KeyTable()
        self._modmap = ModuleMap(self.modules)
        self._cache = {}
        self.addrs = AddressCache()  # the int addresses of _cache, for C (stack_keys.py)
        # Stack id -> key id, -1 while not resolved: a stack is immutable once
        # published, so it is resolved once, not at every report that finds it
        # changed.  An array: 8 bytes per stack, and C reads it (report_core).
        self.key_of = array("q")
        self.scratch = array("q")  # report_core's per-key scratch, all -1 between uses

    def resolve(self, address, epoch):
        hit = self._cache.get(address)
        if hit is not None:
            return hit
        if type(address) is not int:  # a Python frame (python_code.PyFrame): its own token
            token = self._cache[address] = self.keys.token(None, address)
            return token
        m = self._modmap.find(address, epoch)
        token = self.keys.token(m, address)
        fixed, sole = self._modmap.fixed(address)
        if fixed and sole is m:
            self._remember(address, token)
        return token

    def _remember(self, address, token):
        """address has this token whenever its stack was recorded: for
        Python's look-ups and C's (key_many)."""
        self._cache[address] = token
        self.addrs.put(address, token)

    def key_many(self, stacks, ids, key_of):
        """Key the stacks `ids` (array('q')) whose frames C can read
        (stacks.key_columns(): the segment's) in C, after resolving each
        address they have that is new here once; returns the ids left for
        key_id (Python's frames, an address whose module depends on when
        the stack was recorded)."""
        columns = stacks.key_columns()
        for address in self.addrs.misses(columns, ids):
            fixed, sole = self._modmap.fixed(address)
            if fixed:
                self._remember(address, self.keys.token(sole, address))
        return key_stacks(self.keys, self.addrs, columns, ids, key_of)

    def key_ids(self, stacks, ids):
        """key_of[i] for every stack id of `ids` (array('q') of ids that are
        ok): those new here keyed in C (key_many), the rest in Python."""
        if not ids:
            return
        self.cover(max(ids) + 1)
        key_of = self.key_of
        new = array("q", [i for i in ids if key_of[i] < 0])
        if new:
            for i in self.key_many(stacks, new, key_of):
                self.key_id(stacks, i)

    def cover(self, n):
        """Make key_of long enough for stack ids below n."""
        report_core.extend_to(self.key_of, n)

    def key_id(self, stacks, sid):
        """The key id of stack `sid` of `stacks` (an id -> segment.Stack
        mapping, the same one each time).  Stacks with one key (module paths
        and offsets) have one key id."""
        if sid < len(self.key_of):
            kid = self.key_of[sid]
            if kid >= 0:
                return kid
        else:
            self.cover(sid + 1)
        stack = stacks[sid]
        get = self._cache.get
        tokens = [get(a) for a in stack.frames]
        if None in tokens:  # first sight of an address, or one whose module depends on the epoch
            resolve, epoch = self.resolve, stack.map_epoch
            tokens = [resolve(a, epoch) if t is None else t for a, t in zip(stack.frames, tokens)]
        kid = self.key_of[sid] = self.keys.id_of(stack.kind, tokens, stack.cut)
        return kid



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
    for pos, _ in snapshot.resources:  # never sampled: counted as they are
        live[pos], reported[pos] = (cols[0][pos], cols[1][pos]), (cols[2][pos], cols[3][pos])
    return ([x[0] for x in live], [x[1] for x in live],
            [x[0] for x in reported], [x[1] for x in reported])


class Deltas:
    """diff_snapshot's answer: a sequence of StackDelta, kept as C rows
    (report_core.Rows) so that a report of 100,000 changed stacks does not
    build 100,000 Python objects to write them."""

    def __init__(self, rows, resolver, ids):
        self.rows = rows
        self._keys = resolver.keys
        self._ids = ids

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        kid, pos, nbytes, blocks, live_b, live_k, samples, allocs = self.rows.row(i)
        key, mods = self._keys.key(kid)
        return StackDelta(key, self._ids[pos], mods, nbytes, blocks, live_b, live_k, samples, allocs)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def diff_snapshot(snapshot, resolver=None, scan=None, age=None, touched=None):
    """Deltas (a sequence of StackDelta), largest byte change first;
    unchanged stacks left out.  Only changed stacks are looked at closely
    (their frames read and resolved, in Python); the scan, merge and sort
    run in C, so a report stays cheap with a million stacks.  `resolver`
    (a FrameResolver for snapshot.modules) may be kept across reports.
    `scan`: a reachability scan's split of each stack id's live blocks (8
    words a stack id, reachability.Scan.per_stack): every stack with
    scanned blocks is then an entry, changed or not.  `touched`: the bytes
    of each stack id's mappings ever touched, now and at the previous
    report (two arrays): a stack whose count moved is an entry."""
    if resolver is None or resolver.modules != tuple(snapshot.modules):
        resolver = FrameResolver(snapshot.modules, resolver.keys if resolver else None)
    live_bytes, live_blocks, reported_bytes, reported_blocks = _estimated(snapshot)
    samples = ((snapshot.live_blocks, snapshot.reported_blocks) if snapshot.sample_bytes
               else None)
    # Allocation counts per entry where they are exact (a sampled one counts
    # recorded allocations only).
    allocs = ((snapshot.alloc_count, snapshot.reported_allocs)
              if not snapshot.sample_bytes and snapshot.reported_allocs is not None else None)
    ids, stacks = snapshot.ids, snapshot.stacks
    scan, age = (_per_position(a, ids) for a in (scan, age))
    if touched:
        touched = [_per_position(a, ids, 1) for a in touched]
    changes = report_core.Changes(live_bytes, live_blocks, reported_bytes, reported_blocks, samples,
                                  allocs, scan, age, touched, slack_of(snapshot))
    if report_core.positions_are_ids(ids):  # the resolver's own array serves
        resolver.cover(len(ids))
        key_of = resolver.key_of
    else:
        key_of = array("q", [resolver.key_of[i] if i < len(resolver.key_of) else -1 for i in ids])
    unkeyed = changes.unkeyed(key_of)
    if unkeyed and report_core.positions_are_ids(ids) and hasattr(stacks, "key_columns"):
        unkeyed = resolver.key_many(stacks, array("q", unkeyed), key_of)  # positions are ids
    for pos in unkeyed:
        key_of[pos] = resolver.key_id(stacks, ids[pos])
    nkeys = resolver.keys.nkeys
    report_core.extend_to(resolver.scratch, nkeys)
    rows = changes.merge(key_of, nkeys, resolver.scratch)
    return Deltas(rows, resolver, ids)


def slack_of(snapshot):
    """Each position's live slack, or None where it is not measured: only
    blocks with a trailer know their usable size (not sampled or
    table-tracked ones)."""
    return snapshot.live_slack if snapshot.tracking == "trailers" else None


def _per_position(per_id, ids, words=8):
    """An array of `words` words per stack id, as as many per snapshot position."""
    if per_id is None:
        return None
    if report_core.positions_are_ids(ids):
        report_core.extend_to(per_id, words * len(ids), 0)
        return per_id
    return array("q", (per_id[words * i + k] if words * i + k < len(per_id) else 0
                       for i in ids for k in range(words)))


def totals(snapshot):
    live_bytes, live_blocks, reported_bytes, reported_blocks = _estimated(snapshot)
    live_b, live_k = sum(live_bytes), sum(live_blocks)
    rep_b, rep_k = sum(reported_bytes), sum(reported_blocks)
    # The program's own blocks lie inside blocks counted already, and
    # resources are not memory: both apart.
    custom = snapshot.custom
    custom_b, custom_k = sum(live_bytes[p] for p in custom), sum(live_blocks[p] for p in custom)
    apart = list(custom) + [p for p, _ in snapshot.resources]
    live_b -= sum(live_bytes[p] for p in apart)
    live_k -= sum(live_blocks[p] for p in apart)
    rep_b -= sum(reported_bytes[p] for p in apart)
    rep_k -= sum(reported_blocks[p] for p in apart)
    if snapshot.sample_bytes:
        alloc = [estimate(b, n, snapshot.sample_bytes)
                 for b, n in zip(snapshot.alloc_bytes, snapshot.alloc_count)]
        alloc_count, alloc_bytes = sum(n for _, n in alloc), sum(b for b, _ in alloc)
        alloc_count -= sum(alloc[p][1] for p in apart)
        alloc_bytes -= sum(alloc[p][0] for p in apart)
    else:
        alloc_count, alloc_bytes = sum(snapshot.alloc_count), sum(snapshot.alloc_bytes)
        alloc_count -= sum(snapshot.alloc_count[p] for p in apart)
        alloc_bytes -= sum(snapshot.alloc_bytes[p] for p in apart)
    by_kind = {name: [0, 0, 0, 0] for name in snapshot.resource_names}
    for p, name in snapshot.resources:
        sums = by_kind.setdefault(name, [0, 0, 0, 0])
        sums[0] += live_bytes[p]
        sums[1] += live_blocks[p]
        sums[2] += live_bytes[p] - reported_bytes[p]
        sums[3] += live_blocks[p] - reported_blocks[p]
    slack = slack_of(snapshot)
    return Totals(live_b, live_k, live_b - rep_b, live_k - rep_k, alloc_count, alloc_bytes, len(snapshot.ids),
                  custom_b, custom_k, tuple((name, *sums) for name, sums in by_kind.items()),
                  sum(slack) if slack is not None else None)
