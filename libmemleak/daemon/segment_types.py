"""What a segment holds, as the reporter reads it (daemon/segment.py):
its modules, its stacks and a snapshot of its counters -- plain
immutable values."""

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class Module:
    index: int
    path: str
    base: int
    lo: int
    hi: int
    load_epoch: int
    unload_epoch: int
    build_id: str

    def valid_at(self, epoch):
        return self.load_epoch <= epoch and (self.unload_epoch == 0 or self.unload_epoch > epoch)


class Stack(NamedTuple):
    """One distinct backtrace: immutable once the program publishes it.
    (A named tuple: built by the thousand per report, it must be cheap.)"""
    id: int
    kind: str
    frames: tuple
    map_epoch: int
    cut: bool = False   # its backtrace was cut at the configured depth


@dataclass(frozen=True)
class Snapshot:
    pid: int
    parent_pid: int
    exe: str
    name: str               # as invoked (argv[0]'s last part): what reports are named after
    report_dir: str
    taken_ns: int
    start_time_ns: int
    depth: int
    collecting: bool
    health: dict
    modules: tuple
    stacks: object          # id -> Stack (a mapping), for every id in `ids`
    ids: object             # ready stacks, in id order (a sequence)
    live_bytes: object      # sequences of ints, per position in `ids`
    live_blocks: list
    alloc_count: list
    alloc_bytes: list
    reported_bytes: list    # the baseline: what the previous report covered
    reported_blocks: list
    corrupt_stacks: int = 0
    notes: list = field(default_factory=list)
    sample_bytes: int = 0   # sampling mode: mean bytes between samples; 0 = exact
    tracking: str = "table"  # how live blocks are tracked: "table" or "trailers"
    reported_allocs: object = None  # allocations made as of the previous report, per position
    last_report_ns: int = 0  # when the previous report's snapshot was taken (0: none)
    attached_ns: int = 0     # when `libmemleak attach` started collection (0: started with it)
    custom: tuple = ()       # positions of the program's own blocks' stacks (kind custom): their
                             # bytes lie inside other stacks' blocks, so totals leave them out
    resources: tuple = ()    # (position, kind name) of the stacks of resources other than memory
                             # (file descriptors: "fd"): counts and weights, not bytes -- apart
    resource_names: tuple = ()  # every resource kind named in the process, by index
    fds_tracked: bool = True
    fds_before: int = 0      # descriptors (3 and up) open when collection started: in no entry
    live_slack: object = None  # per position: bytes reserved beyond the blocks' sizes (trailers only)
    slack_floor: int = 0     # the allocator's smallest usable size, when known (glibc: 24)
