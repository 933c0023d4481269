"""The traced processes an exporter may read, and what each holds now.

A traced process is found by its segment (a memfd named libmemleak among
its descriptors), opened read-only through /proc/PID/fd/N: the kernel's
ptrace access check decides who may (the same user, or root) -- no
channel of ours, nothing another user's process can reach.  The exporter
never writes to a segment: reading the counters does not move the
baseline the process's own reports are deltas from, so its reports are
the same whether an exporter runs or not.

A process is kept open between scrapes (its segment's mapping, its stack
table learnt once) and dropped when its pid ends or is reused (its start
time in /proc/PID/stat differs).

Requests are served side by side (server.py): one thread at a time reads
a process's segment (Process.begin, end), and while a profile of it is made
-- seconds, for a big Python service's first -- /metrics says what its
last sample said rather than wait."""

import os
import threading
import time
from dataclasses import dataclass

from libmemleak.daemon import memory_use
from libmemleak.daemon.diff import totals
from libmemleak.daemon.header_parts import process_status
from libmemleak.daemon.procfs import proc_dir
from libmemleak.fleet.heap import HeapProfiles
from libmemleak.fleet.suspects import Suspects
from libmemleak.live.client import LiveError, open_segment
from libmemleak.symbols import Symbolizer
from libmemleak.symbols.answer_cache import AnswerCache

MAX_PROCESSES = 4096  # a bound on what one exporter holds open
RELOOK_SECONDS = 10.0  # a process found untraced is looked at again after this


@dataclass(frozen=True)
class Sample:
    """What one traced process holds, as its next report would count it."""
    pid: int
    program: str
    labels: tuple          # ((name, value), ...): where it runs (pod, container)
    live_bytes: int
    live_blocks: int
    allocated_bytes: int   # since collection started (estimates where sampled)
    allocations: int
    rss_bytes: int | None  # None: /proc no longer says
    blind: bool            # it has allocations the tracer cannot see (its reports' `blind` line)
    sampled: bool
    suspects: tuple = ()   # ((rank, site, live bytes, bytes grown), ...): as `report` ranks them
    malloc_free_bytes: int | None = None  # what glibc's malloc holds free, by its arenas' own count


class Process:
    def __init__(self, pid, started, symbolizer):
        self.pid, self.started = pid, started
        self.segment, self.fd = open_segment(pid, writable=False)
        self.labels = where_it_runs(pid)
        self.heap = HeapProfiles(self.segment, pid, symbolizer)
        self.suspects = Suspects(self.segment, pid)
        self.last = None                # its last Sample
        self._reader = threading.Lock() # held by the one thread reading its segment
        self._state = threading.Lock()  # guards the two below
        self._busy = self._retired = False

    def begin(self, wait=True):
        """Take the segment for reading (False: it is dropped, or -- not
        waiting -- another thread reads it); end() gives it back."""
        if not self._reader.acquire(blocking=wait):
            return False
        with self._state:
            if not self._retired:
                self._busy = True
                return True
        self._reader.release()
        return False

    def end(self):
        with self._state:
            self._busy = False
            close = self._retired
        self._reader.release()
        if close:
            self._close()

    def retire(self):
        """Dropped: closed now, or by the reader that has it when it is done."""
        with self._state:
            self._retired = True
            close = not self._busy
        if close:
            self._close()

    def sample_or_last(self, top):
        """A sample now -- or, while another thread reads the segment (a
        profile being made), the last one; None if there is neither.
        Never waits: the table's lock is held."""
        if not self.begin(wait=False):
            return self.last
        try:
            self.last = self.sample(top)
            return self.last
        finally:
            self.end()

    def sample(self, top):
        seg = self.segment
        h = seg.header
        sums = totals(seg.take_snapshot())
        return Sample(self.pid, seg.program_name() or "?", self.labels, sums.live_bytes, sums.live_blocks,
                      sums.alloc_bytes, sums.alloc_count, rss_bytes(self.pid), bool(h.blind_len),
                      bool(h.sample_bytes), self.suspects.top(top) if top else (),
                      malloc_free_bytes(self.pid, (h.own_lo, h.own_hi)))

    def _close(self):
        self.segment.close()
        os.close(self.fd)


class Processes:
    """The traced processes found at each scrape, kept open across them."""

    def __init__(self, suspects=0, say=lambda line: None):
        self.lock = threading.Lock()  # held while the table below is looked at or changed
        self.top = suspects      # suspects served per process (0: none)
        self.say = say           # one line on what went wrong with a process
        self.open = {}           # pid -> Process
        # pid -> (start time, when looked): no segment then.  Looked at
        # again when the pid is reused, and after RELOOK_SECONDS: a process
        # gets its segment late (an exec into a traced program keeps its
        # start time; MEMLEAK_CONFIG without mtraceinit waits for mtrace()).
        self.not_traced = {}
        self.symbolizer = Symbolizer(cache=AnswerCache.default())  # shared: processes run the same binaries

    def profile(self, pid, which):
        """Process pid's gzipped pprof profile `which` ("heap", "allocs"), or
        None when it is no traced process this exporter may read."""
        self.samples()  # (finds it, or drops it if it ended)
        with self.lock:
            proc = self.open.get(pid)
        if proc is None or not proc.begin():
            return None
        try:
            made = proc.heap.profile(which)
            self.symbolizer.save()
            return made
        except Exception as e:  # noqa: BLE001 -- as in samples()
            with self.lock:
                self._drop(pid, proc)
            self.say(f"libmemleak: exporter: no profile of pid {pid}: {type(e).__name__}: {e}")
            return None
        finally:
            proc.end()

    def _worth_a_look(self, pid, started, now):
        seen = self.not_traced.get(pid)
        return seen is None or seen[0] != started or now - seen[1] >= RELOOK_SECONDS

    def samples(self):
        with self.lock:
            return self._samples()

    def _samples(self):
        found = []
        alive = set()
        now = time.monotonic()
        for pid, started in _running():
            alive.add(pid)
            proc = self.open.get(pid)
            if proc is not None and proc.started != started:  # the pid was reused
                self._drop(pid)
                proc = None
            if proc is None and self._worth_a_look(pid, started, now) and len(self.open) < MAX_PROCESSES:
                try:
                    proc = self.open[pid] = Process(pid, started, self.symbolizer)
                except (LiveError, OSError):
                    self.not_traced[pid] = (started, now)  # not traced, not ours, or gone
                    continue
            if proc is None:
                continue
            try:
                sample = proc.sample_or_last(self.top)
                if sample is not None:
                    found.append(sample)
            except Exception as e:  # noqa: BLE001 -- its segment or files are its own to spoil: the others go on
                self._drop(pid)
                self.not_traced[pid] = (started, now)
                self.say(f"libmemleak: exporter: pid {pid} left out of this scrape: {type(e).__name__}: {e}")
        for pid in [p for p in self.open if p not in alive]:
            self._drop(pid)
        self.not_traced = {p: s for p, s in self.not_traced.items() if p in alive}
        return found

    def _drop(self, pid, which=None):
        """Forget pid's process (`which`: only if it is that one still)."""
        if which is not None and self.open.get(pid) is not which:
            return
        proc = self.open.pop(pid, None)
        if proc is not None:
            proc.retire()

    def close(self):
        with self.lock:
            for pid in list(self.open):
                self._drop(pid)


def _running():
    """(pid, start time) of every process /proc lists."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            started = _start_time(int(name))
            if started is not None:
                yield int(name), started


def _start_time(pid):
    try:
        with open(f"{proc_dir(pid)}/stat", "rb") as f:
            return int(f.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def malloc_free_bytes(pid, own):
    """What glibc's malloc holds free in the process -- its arenas' own
    count (mallinfo2's fordblks), read from outside as reports read it --
    or None where that is not known (another allocator, arenas read while
    they changed, a process gone)."""
    use = memory_use.measure(pid, own)
    arenas = None if isinstance(use, str) else use.malloc_arenas
    if not isinstance(arenas, tuple) or any(a.torn for a in arenas[0]):
        return None
    return sum(a.free for a in arenas[0])


def rss_bytes(pid):
    """VmRSS in bytes, as reports say it (header_parts.process_status), or None."""
    rss = dict(process_status(pid)).get("vm-rss", "").split()
    return int(rss[0]) * 1024 if rss and rss[0].isdigit() else None


# Kubernetes' downward API, as pods commonly name it in their environment.
POD_ENVIRONMENT = (("POD_NAMESPACE", "namespace"), ("POD_NAME", "pod"))


def where_it_runs(pid):
    """Labels for where the process runs: its pod and namespace (the
    downward API's environment, where the pod spec sets it) and its
    container (the id in its cgroup path, as container runtimes name it)."""
    labels = []
    try:
        with open(f"{proc_dir(pid)}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read(1 << 20).split(b"\0") if b"=" in item)
        for var, label in POD_ENVIRONMENT:
            value = env.get(var.encode())
            if value:
                labels.append((label, value.decode("utf-8", "replace")[:253]))
    except OSError:
        pass
    container = _container_of(pid)
    if container:
        labels.append(("container", container))
    return tuple(labels)


def _container_of(pid):
    """The 64-hex-digit container id in the process's cgroup path, if any
    (docker-ID.scope, cri-containerd-ID.scope, .../kubepods/.../ID)."""
    try:
        with open(f"{proc_dir(pid)}/cgroup", "rb") as f:
            text = f.read(1 << 16).decode("ascii", "replace")
    except OSError:
        return None
    for part in reversed(text.replace("\n", "/").replace(":", "/").split("/")):
        word = part.removesuffix(".scope").rpartition("-")[2]
        if len(word) == 64 and all(c in "0123456789abcdef" for c in word):
            return word[:12]
    return None
