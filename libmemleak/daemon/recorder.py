"""The event log's reporter side (record=all|last; docs/events.md): copies
the pages the hook filled (native/hook/events/events.c) out of the
segment, frees them for reuse, and writes them compressed as
PROG-PID.events beside the reports.

record=all appends to the file as it goes, up to record_cap (then the
hook is told to stop, and the file says so); record=last keeps the last
record_keep bytes or seconds in memory and writes the file -- replaced
whole -- with every report (signal, snapshot, exit, death).  Each file
ends with the counters as they were then (a STAT chunk), from which a
replay knows what was live before its first record."""

import collections
import os
import time

import cffi

from libmemleak import reporter_library

from libmemleak.daemon.futex import futex_wake
from libmemleak.daemon.layout import CONST
from libmemleak.files.event_pack import Packer
from libmemleak.files.events import MAGIC, VERSION, StackNamer, evts_chunk, json_chunk
from libmemleak.files.memlog_write import write_report

FREE, FILLING, FULL = (CONST["MLK_EVENT_PAGE_FREE"], CONST["MLK_EVENT_PAGE_FILLING"],
                       CONST["MLK_EVENT_PAGE_FULL"])
PAGE_BYTES = CONST["MLK_EVENT_PAGE_BYTES"]
MODES = {CONST["MLK_RECORD_ALL"]: "all", CONST["MLK_RECORD_LAST"]: "last"}
MEMORY_KINDS = ("malloc", "new", "mmap", "shared")  # what the log's records count
DEFAULT_CAP = 1 << 30
MAX_CAP = 1 << 40
DEFAULT_KEEP = 64 << 20
CHUNK_RAW_BYTES = 1 << 20    # records per EVTS chunk, before compression
CHUNK_SECONDS = 1.0          # ... or this much time's worth: the file lags by no more
STAT_ROOM = 64 << 10         # of record_cap, kept for the counters written as the log ends
DRAIN_SECONDS = 0.05         # how often the reporter drains while recording


_ffi = cffi.FFI()
_ffi.cdef("""
uint32_t mlk_cas_u32(uint32_t *, uint32_t, uint32_t);
""")


def atomics():
    return reporter_library(_ffi)


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class DrainLock:
    """One drainer at a time for a segment's pool: a descendant's own
    reporter and the keeper (in the root's reporter) may both hold its
    segment.  Two drains of one page would copy it twice and free it after
    the hook had taken it again.  The segment's events_drainer word holds
    the draining reporter's pid; one left by a reporter that died is taken
    over."""

    def __init__(self, seg):
        self.word = _ffi.cast("uint32_t *", seg.field_address("events_drainer"))
        self.me = os.getpid()

    def take(self):
        L = atomics()
        held = L.mlk_cas_u32(self.word, 0, self.me)
        if held in (0, self.me):
            return True
        return not _alive(held) and L.mlk_cas_u32(self.word, held, self.me) == held

    def give_back(self):
        atomics().mlk_cas_u32(self.word, self.me, 0)


def chunk_groups(pages):
    """pages in groups of about CHUNK_RAW_BYTES of records, one EVTS chunk
    each (a reader takes a chunk of at most 64 MiB; record_buffer may be 4G)."""
    group, size = [], 0
    for page in pages:
        group.append(page)
        size += len(page[3])
        if size >= CHUNK_RAW_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


class Recorder:
    """One segment's log.  `names(ids)` gives (id, kind, frame lines) of
    stacks ids, symbolized (the reporter's)."""

    @classmethod
    def of(cls, reporter):
        h = reporter.h
        if h.record_mode not in MODES:
            return None
        pool = reporter.seg.event_pool()
        if pool is None:
            return None
        return cls(reporter, pool)

    def __init__(self, reporter, pool):
        import zstandard
        self.rep = reporter
        self.seg, self.h = reporter.seg, reporter.h
        self.pages, self.data = pool
        self.npages = self.h.events_pages
        self.mode = MODES[self.h.record_mode]
        self.cap = min(self.h.record_cap or DEFAULT_CAP, MAX_CAP)
        keep_bytes, keep_ns = self.h.record_keep_bytes, self.h.record_keep_ns
        self.keep_bytes = min(keep_bytes, MAX_CAP) if keep_bytes else (0 if keep_ns else DEFAULT_KEEP)
        self.keep_ns = keep_ns
        self.cctx = zstandard.ZstdCompressor(level=3)
        self.packer = Packer()
        self.namer = StackNamer()
        self.names_cctx = zstandard.ZstdCompressor(level=9)  # written once a stack: worth the time
        self.pending, self.pending_bytes, self.pending_since = [], 0, None
        self.named = 0               # stack ids below this are named in the log
        self.stack_chunks = []       # record=last: every STK2 chunk, for each file written
        self.kept = collections.deque()  # record=last: (EVTS chunk, last_ns)
        self.kept_bytes = 0
        self.fd, self.path, self.written = None, None, 0
        self.stopped = None          # why the log stopped early ("cap", "write error: ...")
        self.dropped_bytes = 0       # records drained after it stopped
        self.finished = False
        self.name = f"{reporter.name}-{reporter.pid}.events"
        self.lock = DrainLock(self.seg)

    # -- draining ---------------------------------------------------------

    def drain(self, final=False):
        """Take the full pages; with `final`, what every page holds (the
        process is gone, or about to be: FILLING pages are read, not freed,
        since a live thread may still append to them).  Nothing while
        another reporter drains the same pool (DrainLock)."""
        if not self.lock.take():
            return
        try:
            self._drain(final)
        finally:
            self.lock.give_back()

    def _copy(self, i):
        """Page i as a chunk takes it: (tid, first_ns, last_ns, records,
        claim) -- an empty page too, so that the log's claims stay contiguous."""
        page = self.pages[i]
        used = min(page.used, PAGE_BYTES)
        return (page.tid, page.first_ns, page.last_ns,
                bytes(self.data[i * PAGE_BYTES:i * PAGE_BYTES + used]), page.claim)

    def _drain(self, final):
        pages, freed = self.pages, False
        got = []
        for i in range(self.npages):
            page = pages[i]
            state = page.state
            if state != FULL and not (final and state == FILLING):
                continue
            got.append(self._copy(i))
            if state == FULL:
                page.used = 0      # its next owner's records start empty
                page.state = FREE  # x86-64 keeps our copy and that store before this one
                freed = True
        if freed:
            self.h.events_freed = (self.h.events_freed + 1) & 0xffffffff
            futex_wake(self.seg.field_address("events_freed"))
        got.sort(key=lambda p: p[4])  # in the order the pages were claimed
        self.pending += got
        self.pending_bytes += sum(len(p[3]) for p in got)
        if self.pending and self.pending_since is None:
            self.pending_since = time.monotonic()
        if self.pending and (final or self.pending_bytes >= CHUNK_RAW_BYTES
                             or time.monotonic() - self.pending_since >= CHUNK_SECONDS):
            self._flush()

    def _flush(self):
        pages, self.pending, self.pending_bytes, self.pending_since = self.pending, [], 0, None
        for group in chunk_groups(pages):  # the cap holds to a chunk
            self._write_chunk(group)

    def _write_chunk(self, pages):
        if self.stopped:
            self.dropped_bytes += sum(len(p[3]) for p in pages)
            return
        names = self._new_names()
        evts = evts_chunk(pages, self.cctx, self.packer)
        last_ns = max(p[2] for p in pages)
        if self.mode == "last":
            if names:
                self.stack_chunks.append(names)
            self.kept.append((evts, last_ns))
            self.kept_bytes += len(evts)
            self._evict()
            return
        if self.written + len(names) + len(evts) > self.cap - STAT_ROOM:
            self._append(names)  # (the file exists, and names what its records name)
            self._stop("cap", f"the event log reached record_cap ({self.cap} bytes); "
                              f"later events are not in {self.name}")
            self.dropped_bytes += sum(len(p[3]) for p in pages)
            return
        self._append(names + evts)

    def _evict(self):
        while len(self.kept) > 1 and (
                (self.keep_bytes and self.kept_bytes > self.keep_bytes)
                or (self.keep_ns and self.kept[-1][1] - self.kept[0][1] > self.keep_ns)):
            evts, _ = self.kept.popleft()
            self.kept_bytes -= len(evts)

    def _new_names(self):
        """A STK2 chunk naming the stacks made since the last one (b"" if none)."""
        end = self.seg.refresh()
        if end <= self.named:
            return b""
        items = self.rep.stack_names(range(self.named, end))
        self.named = end
        return self.namer.chunk(items, self.names_cctx) if items else b""

    # -- the file ---------------------------------------------------------

    def _head(self):
        return json_chunk(b"HEAD", {
            "version": VERSION, "program": self.rep.name, "pid": self.rep.pid,
            "exe": self.seg.string(self.h.exe_off, self.h.exe_len), "mode": self.mode,
            "tick_shift": CONST["MLK_EVENT_TICK_SHIFT"], "start_mono_ns": self.h.events_start_ns,
            # one moment on both clocks: record times (CLOCK_MONOTONIC) as dates
            "mono_ns": time.monotonic_ns(), "realtime_ns": time.time_ns(),
            "parent_pid": self.h.parent_pid,
            # the program's allocation layer as its user named it (alloc_fns=), for replay's folding
            "alloc_fns": self.seg.string(self.h.alloc_fns_off, min(self.h.alloc_fns_len, 255))})

    def _stat(self, reason):
        """The counters now: what was live per stack (memory kinds only: the
        log has no records of the others), and the log's own health."""
        snap = self.seg.take_snapshot()
        live = [[i, b, n] for i, b, n in zip(snap.ids, snap.live_bytes, snap.live_blocks)
                if (b or n) and snap.stacks[i].kind in MEMORY_KINDS]
        return json_chunk(b"STAT", {
            "mono_ns": time.monotonic_ns(), "reason": reason, "live": live,
            "lost": self.h.events_lost, "waits": self.h.events_waits,
            "stopped": self.stopped, "dropped_bytes": self.dropped_bytes})

    def _append(self, data):
        try:
            if self.fd is None:
                self._create()
                data = MAGIC + self._head() + data
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
            self.written += len(data)
        except OSError as e:
            self._stop("write error", f"cannot write the event log {self.path or self.name}: {e.strerror}; "
                                      "recording stopped")

    def _create(self):
        directory = self.rep.directory
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for n in range(1, 100):  # a reporter that took over, an exec'd image of the same name
                name = self.name if n == 1 else self.name.replace(".events", f"-{n}.events")
                try:
                    self.fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                      0o600, dir_fd=dir_fd)
                except FileExistsError:
                    continue
                self.path = os.path.join(directory, name)
                return
            raise FileExistsError(17, "99 event logs of this name exist")
        finally:
            os.close(dir_fd)

    def _stop(self, why, message):
        if self.stopped:
            return
        self.stopped = why
        self.h.events_stop = 1
        self.rep.say_once(message)

    # -- reports ----------------------------------------------------------

    def state_words(self):
        """What a report's header says of the log: its mode, its file, and
        what it missed ("all prog-42.events lost 0", "... stopped cap")."""
        name = os.path.basename(self.path) if self.path else self.name  # (-2: a reporter that took over)
        words = f"{self.mode} {name} lost {min(self.h.events_lost, 1 << 62)}"
        return words + (f" stopped {self.stopped}" if self.stopped else "")

    def on_report(self, reason):
        """A report was written: record=last writes its file now."""
        if self.mode == "last" and not self.finished:
            self.drain()
            self._write_last(reason, final=False)

    def finish(self, reason, dead=True):
        """The process ended (or exec'd): everything left, and the counters."""
        if self.finished:
            return
        self.h.events_stop = 1  # nobody drains the pool after this
        self.drain(final=True)
        self.finished = True
        if self.mode == "last":
            self._write_last(reason, final=dead)
        elif self.stopped != "write error":
            self._append(self._new_names() + self._stat(reason))
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _write_last(self, reason, final):
        """record=last: the file, whole -- what is kept, what the pages
        hold now (their records so far, left in place), the counters."""
        partial = []
        if not final and self.lock.take():  # pages in progress: their records so far, not taken
            try:
                partial = [self._copy(i) for i in range(self.npages) if self.pages[i].state in (FULL, FILLING)]
            finally:
                self.lock.give_back()
        pieces = sorted(partial, key=lambda p: p[4]) + list(self.pending)
        names = self._new_names()
        if names:
            self.stack_chunks.append(names)
        body = [MAGIC, self._head(), *self.stack_chunks, *(e for e, _ in self.kept)]
        body.extend(evts_chunk(group, self.cctx, self.packer) for group in chunk_groups(pieces))
        body.append(self._stat(reason))
        try:
            self.path = write_report(self.rep.directory, self.name, body)
        except OSError as e:
            self.rep.say_once(f"cannot write the event log {self.name}: {e.strerror}")
