"""Map a traced process's shared-memory segment, validate it, and turn it
into plain immutable snapshots.  Nothing else in the package touches raw
memory.  The segment is written by a program that may be corrupting its own
memory, so every count and offset is checked before use."""

import mmap
import os
import time
from array import array

from typing import NamedTuple

from libmemleak.daemon import python_code, report_core
from libmemleak.daemon.layout import CONST, COUNTERS_SIZE, HEADER_SIZE, MODULE_SIZE, STACK_SIZE, ffi, stack_word
from libmemleak.daemon.procfs import namespace_tag
from libmemleak.daemon.stack_keys import Bound
from libmemleak.files.memlog import resource_name
from libmemleak.daemon.segment_header import program_name
from libmemleak.daemon.segment_types import Module, Snapshot, Stack
from libmemleak.files.report_names import report_name

KIND_NAMES = {CONST["MLK_KIND_MALLOC"]: "malloc", CONST["MLK_KIND_NEW"]: "new",
              CONST["MLK_KIND_MMAP"]: "mmap", CONST["MLK_KIND_SHARED"]: "shared",
              CONST["MLK_KIND_CUSTOM"]: "custom"}
_KIND_CODES = {name: code for code, name in KIND_NAMES.items()}
RESOURCE_BASE = CONST["MLK_KIND_RESOURCE"]
RESOURCE_KINDS = CONST["MLK_RESOURCE_KINDS"]
RESOURCE_NAME_MAX = CONST["MLK_RESOURCE_NAME_MAX"]
RESOURCE_PREFIX = "resource:"  # a resource stack's kind: "resource:" + the kind's name
TRACKING_NAMES = {CONST["MLK_TRACK_TABLE"]: "table", CONST["MLK_TRACK_TRAILERS"]: "trailers"}

_W = STACK_SIZE // 8
_W_HASH = stack_word("hash")
_W_STATE = stack_word("state")  # state:u32 | depth:u16 | kind:u16
_W_FRAMES = stack_word("frames_off")
_W_EPOCHS = stack_word("map_epoch")  # map_epoch:u32 | unload_epoch:u32
_W_REP_BYTES = stack_word("reported_bytes")
_W_REP_BLOCKS = stack_word("reported_blocks")
_W_REP_ALLOCS = stack_word("reported_allocs")
_W_FLAGS = stack_word("flags")  # flags:u32 | reserved:u32
_PYCODE = CONST["MLK_KIND_PYCODE"]
_CUT = 1 << 16  # in the kind column: the stack was cut at the depth (MLK_STACK_CUT)

HEALTH_FIELDS = ("dropped_stacks", "dropped_blocks", "unknown_frees", "truncated_stacks", "resources_dropped")


class Geometry(NamedTuple):
    """Where a segment's tables lie, as its header said when it was opened
    (and checked then)."""
    stacks_off: int
    stacks_cap: int
    stripes_off: int
    frames_off: int
    frames_cap: int
    modules_off: int
    modules_cap: int
    strings_off: int
    strings_cap: int


class SegmentError(Exception):
    """The segment is not a libmemleak segment, or is damaged."""


# Kinds _fill has nothing to note of (not custom blocks, resources or
# Python's code records): mlk_rc_learn_stacks fills their stacks itself.
_ORDINARY_KINDS = bytes(kind not in (_PYCODE, CONST["MLK_KIND_CUSTOM"]) and
                        not RESOURCE_BASE <= kind < RESOURCE_BASE + RESOURCE_KINDS for kind in range(64))


def learn_stacks(seg, first, n, frames_used, max_depth):
    """native/reporter/stack_keys.c's mlk_rc_learn_stacks over stacks
    first..n-1 of seg: the columns of the plain ones filled; the ids of the
    others, for _fill."""
    others = report_core.zeros(n - first)
    with Bound() as bind:
        learn = report_core.ffi.new("struct mlk_rc_learn *", [
            bind("int64_t[]", seg._stack_words), _W, _W_STATE, _W_FRAMES, _W_EPOCHS, _W_FLAGS,
            bind("uint64_t[]", seg._frames), frames_used, max_depth, CONST["MLK_STACK_READY"],
            CONST["MLK_STACK_CUT"], bind("uint8_t[]", _ORDINARY_KINDS), python_code.TAG_SHIFT, python_code.TAG_NATIVE,
            bind("int64_t[]", seg._kind), bind("int64_t[]", seg._off), bind("int64_t[]", seg._epoch),
            bind("int64_t[]", seg._depth), bind("uint8_t[]", seg._ok)])
        count = report_core.lib.mlk_rc_learn_stacks(learn, first, n, bind("int64_t[]", others))
    return others[:count]


class _StackView:
    """snapshot.stacks: id -> Stack, built on demand from the segment."""

    def __init__(self, segment):
        self._seg = segment

    def __getitem__(self, i):
        return self._seg.stack(i)

    def key_columns(self):
        return self._seg.key_columns()


class KeyColumns(NamedTuple):
    """Where C reads each stack's frames to key it (stack_keys.py)."""
    frames: object      # the segment's frame words
    off: array          # stack id -> its first word in frames
    depth: array        # stack id -> its words
    kind: array         # stack id -> MLK_KIND_* | _CUT
    special: bytearray  # stack id -> 1: read by Python (its Python frames)
    kind_name: object   # kind -> its name (Segment.kind_name)


class Segment:
    """A mapped segment.  Use `Segment.from_fd` (the reporter's inherited
    descriptor) or `Segment.from_path` (e.g. /proc/PID/fd/N)."""

    def __init__(self, fd, writable=True):
        try:
            size = os.fstat(fd).st_size
        except OSError as e:
            raise SegmentError(f"cannot stat the segment: {e}") from None
        if size < HEADER_SIZE:
            raise SegmentError(f"segment too small ({size} bytes)")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        try:
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
        except OSError as e:
            import errno
            import resource
            limit = resource.getrlimit(resource.RLIMIT_AS)[0]
            if e.errno == errno.ENOMEM and limit != resource.RLIM_INFINITY:
                raise SegmentError(f"cannot map the segment ({size >> 20} MiB) within the address-space "
                                   f"limit (ulimit -v) of {limit >> 20} MiB: raise it") from None
            raise
        self._size = size
        self.writable = writable
        self._buf = ffi.from_buffer(self._map)
        self.header = ffi.cast("struct mlk_header *", self._buf)
        g = self._geometry = self._validate_header()
        h = self.header
        # The process's pid as this side numbers it: the header's, unless the
        # opener knows better (a process in a pid namespace of its own).
        self.pid = h.pid
        whole = memoryview(self._map)
        self._stack_words = whole[g.stacks_off:g.stacks_off + g.stacks_cap * STACK_SIZE].cast("q")
        self._frames = whole[g.frames_off:g.frames_off + g.frames_cap * 8].cast("Q")
        self._strings = whole[g.strings_off:g.strings_off + g.strings_cap]
        at = ffi.cast("char *", self._buf)
        self._stacks_ptr = ffi.cast("struct mlk_stack *", at + g.stacks_off)
        self._stripes_ptr = ffi.cast("struct mlk_counters *", at + g.stripes_off)
        self._stripes_used_ptr = ffi.addressof(h, "stripes_used")
        self._modules_ptr = ffi.cast("struct mlk_module *", at + g.modules_off)
        # What is known of stacks 0.._next_id-1 (see _learn_new_stacks).
        self._next_id = 0
        self._kind, self._off = array("q"), array("q")
        self._epoch, self._depth = array("q"), array("q")
        self._ok = bytearray()
        self._custom_ids = []  # ids of kind custom, ascending
        self._cut_ids = array("l")  # ids of stacks cut at the depth (MLK_STACK_CUT)
        self._resource_ids = []  # (id, resource kind index) of resource stacks, ascending
        self._resource_names = []
        self._pending = set()
        self._corrupt = 0
        self.python = python_code.PythonCodes()  # a CPython's code records (MLK_KIND_PYCODE)
        self._python_words = {}  # id -> (offset, words) of a stack with Python frames
        self.stacks = _StackView(self)  # id -> Stack, for ids known to be ok

    @classmethod
    def from_fd(cls, fd, writable=True):
        return cls(fd, writable)

    @classmethod
    def from_path(cls, path, writable=False):
        fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        try:
            return cls(fd, writable)
        finally:
            os.close(fd)

    def _validate_header(self):
        """The tables' offsets and capacities (a Geometry), each read once
        and checked to lie in the segment -- the program may write other
        values there later: only these are used."""
        h = self.header
        if h.magic != CONST["MLK_MAGIC"]:
            raise SegmentError("not a libmemleak segment (bad magic)")
        if h.layout_version != CONST["MLK_LAYOUT_VERSION"] or h.header_size != HEADER_SIZE:
            raise SegmentError(
                f"segment layout version {h.layout_version} (header {h.header_size} bytes) "
                f"does not match this libmemleak (version {CONST['MLK_LAYOUT_VERSION']}, "
                f"header {HEADER_SIZE} bytes): use the same installation for both")
        if h.segment_size > self._size:
            raise SegmentError("segment header claims more bytes than the segment has")
        g = Geometry(*(getattr(h, name) for name in Geometry._fields))
        for off, cap, elem in ((g.stacks_off, g.stacks_cap, STACK_SIZE),
                               (g.stripes_off, g.stacks_cap * CONST["MLK_COUNTER_STRIPES"], COUNTERS_SIZE),
                               (g.frames_off, g.frames_cap, 8),
                               (g.modules_off, g.modules_cap, MODULE_SIZE),
                               (g.strings_off, g.strings_cap, 1)):
            if off < HEADER_SIZE or off % 8 or off + cap * elem > self._size:
                raise SegmentError("segment tables lie outside the segment")
        return g

    # -- small readers -----------------------------------------------------

    def program_name(self):
        """The program as invoked (argv[0]'s last part), which reports are
        named after; the executable's name for segments without it."""
        h = self.header
        return program_name(self.string(h.name_off, h.name_len) if h.name_len else "",
                             self.string(h.exe_off, h.exe_len))

    def report_dir(self):
        """The directory the process's reports go to."""
        return self.string(self.header.dir_off, self.header.dir_len)

    def report_path(self, seq):
        """Where report `seq` of this segment's process is written."""
        return os.path.join(self.report_dir(), report_name(self.program_name(), self.pid, seq))

    def report_paths(self, seq):
        """Where report `seq` may be, seen from this side: named by the pid
        this side knows (a reporter on this side of a pid namespace), or by
        the one the process knows itself by, with its namespace (a reporter
        inside it: procfs.namespace_tag); each in the directory as given and
        as seen through the process's root (a mount namespace of its own)."""
        names = [report_name(self.program_name(), self.pid, seq)]
        ns = namespace_tag(self.pid) if self.pid != self.header.pid else None
        if ns:
            names.append(report_name(self.program_name(), self.header.pid, seq, ns=ns))
        directory = self.report_dir()
        dirs = [directory, f"/proc/{self.pid}/root{directory}"] if directory.startswith("/") else [directory]
        return [os.path.join(d, n) for d in dirs for n in names]

    def string(self, off, length):
        """A string of the segment's strings array (header *_off/*_len)."""
        used = min(self.header.strings_used, self._geometry.strings_cap)
        if off + length > used:
            return "?"
        return bytes(self._strings[off:off + length]).decode("utf-8", "surrogateescape")

    def modules(self):
        n = min(self.header.modules_used, self._geometry.modules_cap)
        raw = self._modules_ptr
        out = []
        for i in range(n):
            m = raw[i]
            bid_len = min(m.build_id_len, CONST["MLK_BUILD_ID_MAX"])
            out.append(Module(i, self.string(m.path_off, m.path_len), m.base, m.lo, m.hi,
                              m.load_epoch, m.unload_epoch,
                              bytes(ffi.buffer(m.build_id, bid_len)).hex()))
        return tuple(out)

    # -- the snapshot ------------------------------------------------------

    def take_snapshot(self):
        """Read every published stack's counters, without stopping the
        program.  Counters of different stacks are read a few microseconds
        apart; each report's baseline is exactly what the previous report
        read, so the reports of a process still add up exactly.

        Memory stays small with a million stacks: per stack the segment
        object keeps four machine words (array module), and a Stack with
        its frames is built only when asked for (snapshot.stacks[id])."""
        h = self.header
        taken = time.time_ns()
        self._learn_new_stacks()
        n = self._next_id
        # Summed in C (report_core): per stack, frees are read before
        # allocations, so a free racing with us can never make live negative.
        cols = report_core.columns(self._stacks_ptr, self._stripes_ptr, self._geometry.stacks_cap,
                                   self._stripes_used_ptr, n, self._ok)
        ok = self._ok
        if ok.count(0) == 0:
            ids = range(n)
        else:  # a few bad entries: keep the good ones, positions follow ids
            ids = [i for i in range(n) if ok[i]]
            cols = {name: array("q", (col[i] for i in ids)) for name, col in cols.items()}
        custom = tuple(sorted(self._custom_ids))
        names = self.resource_names()
        resources = tuple((i, names[r] if r < len(names) else f"kind{r}") for i, r in sorted(self._resource_ids))
        if (custom or resources) and not isinstance(ids, range):
            where = {i: pos for pos, i in enumerate(ids)}
            custom = tuple(where[i] for i in custom if i in where)
            resources = tuple((where[i], name) for i, name in resources if i in where)
        return Snapshot(
            pid=h.pid, parent_pid=h.parent_pid,
            exe=self.string(h.exe_off, h.exe_len),
            name=self.program_name(),
            report_dir=self.report_dir(),
            taken_ns=taken, start_time_ns=h.start_time_ns, depth=h.depth,
            collecting=bool(h.collecting),
            health=self._health(cols["alloc_count"], ids),
            modules=self.modules(), stacks=self.stacks, ids=ids,
            corrupt_stacks=self._corrupt, sample_bytes=h.sample_bytes,
            tracking=TRACKING_NAMES.get(h.tracking, "unknown"), last_report_ns=h.last_report_ns,
            attached_ns=h.attached_ns, custom=custom, resources=resources, resource_names=tuple(names),
            fds_tracked=bool(h.fds_tracked), fds_before=h.fds_before, slack_floor=h.slack_floor, **cols)

    def _health(self, alloc_count, ids):
        """The segment's health counters; truncated_stacks is not counted by
        the hook (a locked add on the header's line, which every allocation
        of every thread reads, at each cut walk -- most of a deep program's)
        but summed here: the allocations of the stacks cut at the depth, as
        the hook's counters recorded them."""
        h = self.header
        health = {name: getattr(h, name) for name in HEALTH_FIELDS}
        if isinstance(ids, range):
            n = len(alloc_count)
            cut = sum(alloc_count[i] for i in self._cut_ids if i < n)
        else:
            where = {i: pos for pos, i in enumerate(ids)}
            cut = sum(alloc_count[where[i]] for i in self._cut_ids if i in where)
        health["truncated_stacks"] = cut
        return health

    def resource_names(self):
        """The names of the resource kinds the process named, by index
        (written once each, so kept), cleaned: the program wrote them."""
        h = self.header
        n = min(h.resource_kinds, RESOURCE_KINDS)
        raw = bytes(ffi.buffer(h.resource_names))
        while len(self._resource_names) < n:
            r = len(self._resource_names)
            text = raw[r * RESOURCE_NAME_MAX:(r + 1) * RESOURCE_NAME_MAX].split(b"\0", 1)[0]
            self._resource_names.append(resource_name(text) or f"kind{r}")
        return self._resource_names

    def _learn_new_stacks(self):
        """Validate the stacks published since the last call, once each:
        entries are immutable once ready.  An entry not ready yet (being
        written, or left empty because the frame table was full) is looked
        at again next time."""
        h = self.header
        ready, max_depth = CONST["MLK_STACK_READY"], CONST["MLK_MAX_DEPTH"]
        frames_used = min(h.frames_used, self._geometry.frames_cap)
        for i in list(self._pending):
            base = i * _W
            st = self._stack_words[base + _W_STATE]
            if st & 0xffffffff == ready:
                self._pending.discard(i)
                self._fill(i, st, self._stack_words[base + _W_FRAMES],
                           self._stack_words[base + _W_EPOCHS], frames_used, max_depth)
        n = self.stacks_in_use()
        first = self._next_id
        if first >= n:
            return
        grow = n - first
        for col in (self._kind, self._off, self._epoch, self._depth):
            col.frombytes(bytes(8 * grow))
        self._ok.extend(bytes(grow))
        self._next_id = n
        for i in learn_stacks(self, first, n, frames_used, max_depth):  # the plain ones in C
            base = i * _W
            st = self._stack_words[base + _W_STATE]
            if st & 0xffffffff != ready:
                self._pending.add(i)
            else:
                self._fill(i, st, self._stack_words[base + _W_FRAMES], self._stack_words[base + _W_EPOCHS],
                           frames_used, max_depth)

    def _fill(self, i, state, off, epochs, frames_used, max_depth):
        depth = (state >> 32) & 0xffff
        if (state >> 48) & 0xffff == _PYCODE:
            max_depth = python_code.RECORD_MAX_WORDS
        elif depth > max_depth and 0 <= off < len(self._frames) and \
                self._frames[off] >> python_code.TAG_SHIFT == python_code.TAG_NATIVE:
            max_depth = CONST["MLK_PY_MAX_WORDS"]  # a stack with Python frames
        if off + depth > frames_used:
            # frames_used was read before this entry's state: the entry may
            # be newer than that reading (its frames are reserved before it
            # is marked ready).  Judge by a reading taken now.
            frames_used = min(self.header.frames_used, self._geometry.frames_cap)
        if depth > max_depth or off < 0 or off + depth > frames_used:
            self._corrupt += 1
            return
        python = depth and self._frames[off] >> python_code.TAG_SHIFT == python_code.TAG_NATIVE
        if python and self._frames[off] & 0xffffffff in self._pending:
            self._pending.add(i)  # its native stack is not read yet: both are, next time
            return
        cut = self._stack_words[i * _W + _W_FLAGS] & CONST["MLK_STACK_CUT"]
        self._kind[i] = ((state >> 48) & 0xffff) | (_CUT if cut else 0)
        if cut:
            self._cut_ids.append(i)
        kind = (state >> 48) & 0xffff
        if kind == _PYCODE:  # a record, not a stack: kept apart, no frames
            self.python.learn(self._frames[off:off + depth].tolist())
            depth = 0
        elif kind == CONST["MLK_KIND_CUSTOM"]:
            self._custom_ids.append(i)
        elif RESOURCE_BASE <= kind < RESOURCE_BASE + RESOURCE_KINDS:
            self._resource_ids.append((i, kind - RESOURCE_BASE))
        epoch = epochs & 0xffffffff
        if python:
            off, depth, epoch = self._python_stack(i, off, depth)
        self._off[i] = off
        self._epoch[i] = epoch
        self._depth[i] = depth
        self._ok[i] = 1

    def stack(self, i):
        """The Stack with id i (a valid, ready one)."""
        off, depth, kind = self._off[i], self._depth[i], self._kind[i]
        frames = tuple(self._frames[off:off + depth].tolist())
        cut, kind = bool(kind & _CUT), kind & 0xffff
        words = self._python_words.get(i)
        if words is not None:
            return self._with_python_frames(i, kind, frames, words, cut)
        return Stack(i, self.kind_name(kind), frames, self._epoch[i], cut)

    def _python_stack(self, i, off, depth):
        """A stack whose words are a native stack's id and Python frames
        (python_code): its words kept aside, and the native stack's frames
        made its own -- what the scan's allocation sites read.  (The native
        stack was interned first: its id is smaller.)"""
        self._python_words[i] = (off, depth)
        native = self._frames[off] & 0xffffffff
        if native < i and self._ok[native] and native not in self._python_words:
            return self._off[native], self._depth[native], self._epoch[native]
        return off, 0, 0  # words that do not hold together: no frames

    def _with_python_frames(self, i, kind, native_frames, where, cut):
        """Stack i: its native stack's frames, then its Python frames; cut
        where its Python frames were (the Python frames carry it to its
        outermost caller where its native ones are cut at the depth)."""
        off, depth = where
        frames = self.python.stack_frames(self._frames[off:off + depth].tolist(), native_frames,
                                          self._learn_new_stacks)
        return Stack(i, self.kind_name(kind), frames, self._epoch[i], cut)

    def kind_name(self, kind):
        """A stack kind's name: the allocator family's, or "resource:" and
        the resource kind's (file descriptors: "resource:fd")."""
        if RESOURCE_BASE <= kind < RESOURCE_BASE + RESOURCE_KINDS:
            names = self.resource_names()
            r = kind - RESOURCE_BASE
            return RESOURCE_PREFIX + (names[r] if r < len(names) else f"kind{r}")
        return KIND_NAMES.get(kind, f"kind{kind}")

    def kind_code(self, name):
        """The stack kind kind_name() calls `name` (0, malloc's, for a name
        it never gives)."""
        code = _KIND_CODES.get(name)
        if code is None and name.startswith(RESOURCE_PREFIX):
            names = self.resource_names()
            r = name[len(RESOURCE_PREFIX):]
            code = RESOURCE_BASE + names.index(r) if r in names else None
        return code or 0

    def stack_ok(self, i):
        return i < self._next_id and bool(self._ok[i])

    def refresh(self):
        """Look at newly published stacks; returns how many ids are known."""
        self._learn_new_stacks()
        return self._next_id

    def key_columns(self):
        """The stacks as C keys them (KeyColumns)."""
        special = bytearray(self._next_id)
        for i in self._python_words:
            if i < len(special):
                special[i] = 1
        return KeyColumns(self._frames, self._off, self._depth, self._kind, special, self.kind_name)

    def frame_arrays(self):
        """(offsets, depths, frames, n): where the frames of each of stack
        ids 0..n-1 are in `frames` (depth 0 for a stack not known to be
        ok), for C to read (the scan's allocation sites)."""
        self._learn_new_stacks()
        return self._off, self._depth, self._frames, self._next_id

    def measure_touched(self, pid):
        """How much of the program's anonymous mappings was ever touched,
        read from outside (report_core.touched): a Touched, or a reason
        (str) why it could not be told."""
        return report_core.touched(pid, self.header.region_table, self._stacks_ptr, self._next_id,
                                   KIND_NAMES)

    def api_label(self):
        """The label of the report the program asked for (memleak.h): its
        bytes up to the first NUL, as text ("" when none)."""
        raw = bytes(ffi.buffer(self.header.api_label, CONST["MLK_API_LABEL_MAX"]))
        return raw.split(b"\0", 1)[0].decode("ascii", "replace")

    def set_last_report(self, path):
        """The path of the report just written, for the program (memleak.h's
        memleak_report says it): cut to the field, NUL-terminated."""
        data = os.fsencode(path)[:CONST["MLK_LAST_REPORT_MAX"] - 1] + b"\0"
        ffi.memmove(self.header.last_report, data, len(data))

    def set_check_totals(self, nbytes, blocks, seq):
        """A scan's totals (definitely, indirectly, possibly lost, still
        reachable), for the program's leak check (memleak.h); then the seq
        of the report that carries them, which tells it they are fresh."""
        h = self.header
        for i in range(4):
            h.check_bytes[i] = int(nbytes[i])
            h.check_blocks[i] = int(blocks[i])
        h.check_seq = seq

    def commit_baseline(self, snapshot):
        """Record that a report now covers `snapshot`: the next report is the
        change from here.  Called only after the report file is in place."""
        ids = snapshot.ids
        self.header.last_report_ns = snapshot.taken_ns
        if report_core.positions_are_ids(ids):
            report_core.commit(self._stacks_ptr, snapshot.live_bytes, snapshot.live_blocks,
                               snapshot.reported_bytes, snapshot.reported_blocks,
                               snapshot.alloc_count, snapshot.reported_allocs)
            return
        words = self._stack_words
        for i, b, k, a, rb, rk, ra in zip(ids, snapshot.live_bytes, snapshot.live_blocks,
                                          snapshot.alloc_count, snapshot.reported_bytes,
                                          snapshot.reported_blocks, snapshot.reported_allocs):
            if b != rb:
                words[i * _W + _W_REP_BYTES] = b
            if k != rk:
                words[i * _W + _W_REP_BLOCKS] = k
            if a != ra:
                words[i * _W + _W_REP_ALLOCS] = a

    def stacks_in_use(self):
        """Stacks the table holds, bounded by its capacity (the header's
        count is the program's to write)."""
        return min(self.header.stacks_used, self._geometry.stacks_cap)

    def recommit(self, records):
        """A commit_journal's records, committed (a killed reporter's commit
        finished); False, nothing written, if one names no stack."""
        n = self.stacks_in_use()
        if any(not 0 <= records[i] < n for i in range(0, len(records), 4)):
            return False
        words = self._stack_words
        for i in range(0, len(records), 4):
            at = records[i] * _W
            words[at + _W_REP_BYTES], words[at + _W_REP_BLOCKS], words[at + _W_REP_ALLOCS] = records[i + 1:i + 4]
        return True

    def event_pool(self):
        """The event pool (record=): (page headers, as a cffi array; the
        pages' data, a memoryview), or None -- also when the header places
        it outside the segment (the program wrote it: never trusted)."""
        h = self.header
        n, off, data_off = h.events_pages, h.events_off, h.events_data_off
        page_size = CONST["MLK_EVENT_PAGE_BYTES"]
        head_bytes = n * ffi.sizeof("struct mlk_event_page")
        if (not n or off < HEADER_SIZE or off % 8 or off + head_bytes > data_off
                or data_off + n * page_size > self._size):
            return None
        pages = ffi.cast("struct mlk_event_page *", ffi.cast("char *", self._buf) + off)
        return pages, memoryview(self._map)[data_off:data_off + n * page_size]

    def field_address(self, name):
        return int(ffi.cast("uintptr_t", ffi.addressof(self.header, name)))

    def close(self):
        self.header = self._buf = self._stacks_ptr = self._stripes_ptr = self._stripes_used_ptr = None
        for view in ("_stack_words", "_frames", "_strings"):
            getattr(self, view).release()
        try:
            self._map.close()
        except BufferError:  # a caller still holds a view; the mapping goes with it
            pass
