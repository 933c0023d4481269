"""The keeper: the root's reporter also holds the segments of the root's
descendants, so that a descendant that dies before it has started a reporter
of its own (SIGKILL, OOM kill, _exit, a crash) still gets its final report.

Descendants start their reporter only when they need one (a report request,
their exit), so that shells and builds do not start a Python process per
fork.  Each hands the keeper a descriptor of its segment and a pidfd of
itself over a unix socket (native/hook/keeper_client.c).  The keeper
then writes the descendant's reports itself, in this process: those it asks
for (a report signal, mtrace(): it posts the request in its segment and
pokes the keeper over the same socket) and, when it dies, its last one --
the exit report it asked for, or a death report from what the segment
holds, exactly as for the root.  So descendants start no Python process of
their own (a prefork server's workers share one), and none that a
subreaper program could see as its child.  A descendant that cannot reach
the keeper starts its own reporter, as the root does.

It runs as a thread of the root's reporter and outlives the root for as long
as it holds a live descendant (a daemon that forked away, say).  The root's
exit, and its exec (the new image has a keeper of its own), wait for the
last reports of the descendants dead by then (settle_dead_descendants):
`libmemleak run make` returns with the compilers' reports on disk."""

import array
import os
import queue
import resource
import select
import socket
import struct
import threading
import time

from libmemleak.files.memlog import header_text
from libmemleak.daemon.segment import Segment, SegmentError
from libmemleak.daemon.segment_header import header_fields, header_string, program_name_of
from libmemleak.symbols import Symbolizer
from libmemleak.symbols.answer_cache import AnswerCache
from libmemleak.daemon.trust import kernel_name, pid_of_pidfd, vouched_directory

KEEPER_FD = 5                 # where the hook library puts the listening socket
MESSAGE = struct.Struct("=4si")  # tag, pid of the sender
REGISTER = b"MLK1"            # with SCM_RIGHTS [segment, pidfd]: hold my segment
REQUEST = b"MLK2"             # without descriptors: a report request is posted in it
POLL_SECONDS = 0.5
GRACE_SECONDS = 2.0           # a reporter being started publishes its pid within this
OWN_REPORTER_SECONDS = 60.0   # a dead descendant's own reporter writes its final report within this
RECEIVE_TIMEOUT = 0.5         # a sender killed between connect and send
DECISION_FIELDS = ("pid", "exec_pending", "final_done", "reporter_pid", "reporter_starts",
                   "collecting", "request_seq", "done_seq")


class Ward:
    """A descendant whose segment the keeper holds.  The watcher thread
    owns the table of wards; everything that reads or closes a ward's
    segment happens in the writer thread, in queue order."""
    __slots__ = ("pid", "segment_pid", "segment_fd", "pidfd", "died_at", "reporter", "queued",
                 "directory", "name")

    def __init__(self, pid, segment_fd, pidfd, directory, name, segment_pid=None):
        self.pid, self.segment_fd, self.pidfd = pid, segment_fd, pidfd
        self.segment_pid = segment_pid or pid  # as its segment names it (its own namespace's)
        # where its reports go and what they are called, read at hand-over:
        # it may rewrite its segment once it has dropped its privileges
        self.directory, self.name = directory, name
        self.died_at = None
        self.reporter = None      # made at its first report, kept for its caches
        self.queued = False       # a "serve" job for it is waiting (set by the watcher)

    def release(self):
        if self.reporter is not None:
            self.reporter.seg.close()
            self.reporter = None
        for fd in (self.segment_fd, self.pidfd):
            try:
                os.close(fd)
            except OSError:
                pass


class Keeper:
    def __init__(self, listener, say, directory, root_header=None):
        self.listener = listener
        self.root_header = root_header  # the root's segment header: keeper_wards is counted there
        self.say = say
        self.directory = directory  # the root's: for descendants whose own claim is refused
        self.uid = os.geteuid()
        self.wards = {}           # pidfd -> Ward, live or awaiting the verdict on its death
        self.poller = select.poll()
        self.poller.register(listener.fileno(), select.POLLIN)
        self.root_done = threading.Event()
        self.watcher = None
        # Reports are written by a second thread, so that taking descendants
        # in never waits behind a report (a first report loads debug info
        # for seconds; meanwhile a shell loop could fill the socket's queue).
        self.jobs = queue.Queue()   # (what, ward): "serve", "final", "release"; None: stop
        self.writer = None
        self.written = 0          # reports written for descendants
        self.final_paths = []     # descendants' last reports written here (the root's reporter lists them)
        self.finals_elsewhere = 0  # ... and by their own reporters (counted, not named)
        # The root's exit and exec ask for its dead descendants' last reports first
        # (settle_dead_descendants): events the writer sets when they are on
        # disk, and a pipe that wakes the watcher to take them in.
        self.flushes = []
        self.flushes_lock = threading.Lock()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.poller.register(self.wake_r, select.POLLIN)
        self.symbolizer = Symbolizer(cache=AnswerCache.default())  # shared: descendants run the same binaries
        self._warned = set()
        self.profile = os.environ.get("MEMLEAK_PROFILE_REPORTER")  # as for the reporter
        self.profiler = None
        if self.profile:
            import cProfile
            self.profiler = cProfile.Profile()

    @classmethod
    def inherited(cls, say, directory, root_header=None):
        """The keeper, if the hook library handed us its listening socket."""
        try:
            listener = socket.socket(fileno=KEEPER_FD)
        except OSError:
            return None
        try:
            if (listener.family != socket.AF_UNIX
                    or not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                listener.detach()
                return None
        except OSError:
            listener.detach()
            return None
        listener.set_inheritable(False)   # not into the reporters we start
        listener.setblocking(False)
        _raise_descriptor_limit()
        return cls(listener, say, directory, root_header)

    # -- the threads --------------------------------------------------------

    def start(self):
        self.writer = threading.Thread(target=self._write, name="keeper-writer", daemon=True)
        self.writer.start()
        self.watcher = threading.Thread(target=self._watch, name="keeper", daemon=True)
        self.watcher.start()

    def finish(self):
        """The root is done: go on until no descendant is left, then stop.
        (The reporter has let go of the program's stderr by now: a shell
        pipeline reading it must see its end when the root ends, not when a
        daemon it left behind does.)"""
        self.root_done.set()
        if self.watcher is None:
            return
        self.watcher.join()
        self.writer.join()

    def _watch(self):
        try:
            while True:
                self.take_events(POLL_SECONDS * 1000)
                self.settle_dead()
                self.answer_flushes()
                self.serve_posted()
                if self.root_done.is_set() and not self.wards:
                    self.accept_all()   # one that registered just now
                    if not self.wards:
                        break
        except Exception as e:  # noqa: BLE001 -- never a traceback on the program's stderr
            self.say(f"keeper stopped by an internal error ({type(e).__name__}: {e}); "
                     "descendants killed from now on may lose their last state")
        finally:
            self.listener.close()
            for ward in self.wards.values():
                self.jobs.put(("release", ward))
            self.wards.clear()
            with self.flushes_lock:
                for done in self.flushes:
                    self.jobs.put(("flush", done))
                self.flushes = None   # no more are taken
            self.jobs.put(None)

    def take_events(self, timeout_ms):
        """Descendants handing themselves over, wards that died, a wake-up.
        Whether any was handed over (its death is not seen before the next
        poll)."""
        taken = False
        for fd, _ in self.poller.poll(timeout_ms):
            if fd == self.listener.fileno():
                self.accept_all()
                taken = True
            elif fd == self.wake_r:
                try:
                    os.read(self.wake_r, 512)
                except OSError:
                    pass
            elif fd in self.wards and self.wards[fd].died_at is None:
                self.wards[fd].died_at = time.monotonic()
                self.poller.unregister(fd)
        return taken

    def _write(self):
        try:
            while (job := self.jobs.get()) is not None:
                what, ward = job
                if what == "flush":
                    ward.set()    # (an event, not a ward) every job before it is done
                    continue
                if what == "release":
                    ward.release()
                    continue
                if self.profiler is not None:
                    self.profiler.runcall(self.write, what, ward)
                else:
                    self.write(what, ward)
                if what == "final":
                    ward.release()
        finally:
            if self.profiler is not None:
                self.profiler.dump_stats(f"{self.profile}.{os.getpid()}.keeper")

    # -- taking descendants in, and their requests ----------------------------

    def accept_all(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # EMFILE and the like: the sender goes on without us
                self._warn_once("accept", f"keeper cannot take more descendants: {e.strerror}")
                return
            with conn:
                self.take(conn)

    def take(self, conn):
        try:
            pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                              12))
            conn.settimeout(RECEIVE_TIMEOUT)
            data, ancillary, _, _ = conn.recvmsg(MESSAGE.size, socket.CMSG_SPACE(2 * 4),
                                                 socket.MSG_CMSG_CLOEXEC)
        except OSError:
            return
        fds = array.array("i")
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        tag, sender = MESSAGE.unpack(data) if len(data) == MESSAGE.size else (None, None)
        # `sender` is the pid the process knows itself by, which its segment
        # names; `pid` the kernel's, in our namespace.  They differ for a
        # process in a pid namespace of its own (unshare --pid, a container):
        # then the pidfd it hands over must not be of another live process
        # (of none: it may have exited before we got here).
        if (uid == self.uid and tag == REGISTER and len(fds) == 2 and sender and sender > 0
                and (sender == pid or pid_of_pidfd(fds[1]) in (pid, None))):
            self.register(pid, fds[0], fds[1], sender)
            return
        for fd in fds:
            os.close(fd)
        if tag == REQUEST and not fds:
            # From a ward, whatever its uid now: a worker that dropped its
            # privileges after it was handed over (nginx's, as nobody) is
            # still served.  SO_PEERCRED's pid is the kernel's word that the
            # sender is that ward; anybody else is not listened to.
            for ward in self.wards.values():
                if ward.pid == pid and ward.died_at is None:
                    self.serve(ward)
        # anything else (a reachability probe, a stranger): nothing to do

    def serve(self, ward):
        if not ward.queued:
            ward.queued = True
            self.jobs.put(("serve", ward))

    def serve_posted(self):
        """Requests posted in a live ward's segment with nobody to serve
        them -- `libmemleak snapshot` posts them there, without a signal or
        a word to us -- are served here, within a poll."""
        for ward in self.wards.values():
            if ward.died_at is not None or ward.queued:
                continue
            h = header_fields(ward.segment_fd, DECISION_FIELDS)
            if (h is not None and h["pid"] == ward.segment_pid and h["request_seq"] != h["done_seq"]
                    and not h["final_done"]
                    and not (h["reporter_pid"] > 0 and _alive(h["reporter_pid"]))):
                self.serve(ward)

    def register(self, pid, segment_fd, pidfd, segment_pid=None):
        # The same pid again: its old image exec'd, and that segment is done.
        for old in [w for w in self.wards.values() if w.pid == pid]:
            if old.died_at is None:
                self.poller.unregister(old.pidfd)
            del self.wards[old.pidfd]
            self.jobs.put(("release", old))
        directory, name = self.vouch(pid, segment_fd)
        ward = Ward(pid, segment_fd, pidfd, directory, name, segment_pid)
        self.wards[ward.pidfd] = ward
        self.poller.register(ward.pidfd, select.POLLIN)
        if self.root_header is not None:  # the root's next exec waits for settle_dead_descendants
            self.root_header.keeper_wards = (self.root_header.keeper_wards + 1) & 0xffffffff

    def vouch(self, pid, segment_fd):
        """(directory, name) for a descendant's reports: what its segment
        names if it may choose them for us; else our directory (said once)
        and the name of the executable the kernel knows it by (trust.py)."""
        claimed = header_string(segment_fd, "dir_off", "dir_len")
        name = program_name_of(segment_fd)
        directory, refused = vouched_directory(claimed, pid, self.directory)
        if refused:
            name = kernel_name(pid) or name
            if claimed != self.directory:
                self._warn_once(("vouch", pid), f"pid {pid} does not run as uid {self.uid} alone: "
                                                f"its reports go to {self.directory}, not to the "
                                                f"directory its segment names "
                                                f"({header_text(claimed)!r})")
        return directory, name

    # -- the root's exit and exec ---------------------------------------------

    def settle_dead_descendants(self):
        """Asked by the root's reporter as the root exits or execs: an event
        set once the last reports of every descendant dead by now are on
        disk -- so that `libmemleak run make && libmemleak check *.memlog`
        finds the compilers' reports, which would otherwise land after
        make's exit.  Descendants still alive (a daemon) do not hold it up."""
        done = threading.Event()
        with self.flushes_lock:
            if self.flushes is None or self.watcher is None or not self.writer.is_alive():
                done.set()    # (no keeper, or nobody left to answer: do not wait for it)
                return done
            self.flushes.append(done)
        try:
            os.write(self.wake_w, b"!")
        except OSError:
            pass          # (the pipe is full: the watcher is awake anyway)
        return done

    def answer_flushes(self):
        with self.flushes_lock:
            if not self.flushes:
                return
        # Descendants that handed themselves over just before the root's
        # exit or exec (a short one may have died since), and deaths the last poll
        # did not report, are taken in first.
        while self.take_events(0):
            pass
        self.settle_dead()
        if any(w.died_at is not None for w in self.wards.values()):
            return        # a reporter being started as it died: within GRACE_SECONDS
        with self.flushes_lock:
            for done in self.flushes:
                self.jobs.put(("flush", done))
            self.flushes.clear()

    # -- descendants that died ----------------------------------------------

    def settle_dead(self):
        now = time.monotonic()
        for ward in [w for w in self.wards.values() if w.died_at is not None]:
            verdict = self.verdict(ward, now)
            if verdict == "wait":
                continue
            del self.wards[ward.pidfd]
            self.jobs.put(("final" if verdict == "report" else "release", ward))

    def verdict(self, ward, now):
        """'report' (write its last report), 'done' (nothing to do) or 'wait'."""
        h = header_fields(ward.segment_fd, DECISION_FIELDS)
        if h is None or h["pid"] != ward.segment_pid:
            return "done"
        if h["exec_pending"]:
            return "done"   # its last act was an exec
        if h["final_done"]:
            if ward.reporter is None:  # written by its own reporter, not here (final_paths): counted
                self.finals_elsewhere += 1
            return "done"
        if not h["collecting"] and h["request_seq"] == h["done_seq"]:
            return "done"   # nothing recorded since its last report, nothing asked
        if h["reporter_pid"] > 0 and _alive(h["reporter_pid"]):
            # Its own reporter notices the death and writes the final report:
            # the root's exit waits for that one too (`run` returned with 2
            # of 11 still to come), for as long as a report may take.
            return "wait" if now - ward.died_at < OWN_REPORTER_SECONDS else "done"
        if h["reporter_starts"] == 0 or now - ward.died_at > GRACE_SECONDS:
            return "report"
        return "wait"       # a reporter was being started as it died

    # -- writing (the writer thread) ------------------------------------------

    def write(self, what, ward):
        """'serve': the reports a live descendant asked for; 'final': a dead
        one's last report -- the exit report it asked for, else its death
        report.  Written here, in this process, with symbols shared by every
        descendant, so a build's thousandth cc1 costs little."""
        ward.queued = False
        reporter = self.reporter_for(ward)
        if reporter is None:
            return
        h = reporter.h
        before = len(reporter.written)
        try:
            if what == "final":
                reporter.final_report()
                h.final_done = 1
                reporter.finish_log("death", dead=True)
            elif reporter.watch.dead():
                return  # it died meanwhile: its final report answers what it asked
            else:
                while h.request_seq != h.done_seq and not h.final_done:
                    if reporter.handle(h.request_seq) == "exit":
                        h.final_done = 1
            self.written += 1
            if h.final_done and len(reporter.written) > before:
                self.final_paths.append(reporter.written[-1])
        except Exception as e:  # noqa: BLE001 -- one bad segment must not stop the keeper
            self._warn_once(("report", type(e)), f"keeper cannot report pid {ward.pid}: "
                                                 f"{type(e).__name__}: {e}")

    def reporter_for(self, ward):
        if ward.reporter is None:
            from libmemleak.daemon.reporter import Reporter  # (it imports us)
            try:
                segment = Segment.from_fd(ward.segment_fd)
            except (OSError, SegmentError, ValueError) as e:
                self._warn_once(("segment", str(e)), f"keeper cannot read the segment of "
                                                      f"pid {ward.pid}: {e}")
                return None
            try:
                ward.reporter = Reporter(segment, ward.directory, ward.segment_fd, ward.pidfd,
                                         self.symbolizer, ward.name, ward.pid)
            except Exception as e:  # noqa: BLE001
                segment.close()
                self._warn_once(("reporter", type(e)), f"keeper cannot report pid {ward.pid}: "
                                                       f"{type(e).__name__}: {e}")
                return None
        return ward.reporter

    def _warn_once(self, key, message):
        if key not in self._warned:
            self._warned.add(key)
            self.say(message)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _raise_descriptor_limit():
    """Two descriptors per live descendant: a big parallel build needs more
    than the usual soft limit of 1024."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (OSError, ValueError):
        pass
