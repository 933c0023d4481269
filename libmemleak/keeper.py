"""The keeper: the root's reporter also holds the segments of the root's
descendants, so that a descendant that dies before it has started a reporter
of its own (SIGKILL, OOM kill, _exit, a crash) still gets its final report.

Descendants start their reporter only when they need one (a report request,
their exit), so that shells and builds do not start a Python process per
fork.  Each hands the keeper a descriptor of its segment and a pidfd of
itself over a unix socket (native/control.c, "the keeper").  When a
descendant dies, the keeper looks at its segment: unless a reporter of its
own is there to see to it, the keeper writes its last report itself -- the
exit report it asked for, or a death report from what the segment holds,
exactly as for the root.  So a descendant needs no Python process of its
own unless it is sent a report signal or calls mtrace().

It runs as a thread of the root's reporter and outlives the root for as long
as it holds a live descendant (a daemon that forked away, say)."""

import array
import os
import queue
import resource
import select
import socket
import struct
import threading
import time

from libmemleak.segment import Segment, SegmentError, header_fields
from libmemleak.symbols import Symbolizer

KEEPER_FD = 5                 # where the hook library puts the listening socket
MESSAGE = struct.Struct("=4si")  # b"MLK1", pid of the sender
POLL_SECONDS = 0.5
GRACE_SECONDS = 2.0           # a reporter being started publishes its pid within this
RECEIVE_TIMEOUT = 0.5         # a sender killed between connect and send
DECISION_FIELDS = ("pid", "exec_pending", "final_done", "reporter_pid", "reporter_starts",
                   "collecting", "request_seq", "done_seq")


class Ward:
    """A descendant whose segment the keeper holds."""
    __slots__ = ("pid", "segment_fd", "pidfd", "died_at")

    def __init__(self, pid, segment_fd, pidfd):
        self.pid, self.segment_fd, self.pidfd = pid, segment_fd, pidfd
        self.died_at = None

    def release(self):
        for fd in (self.segment_fd, self.pidfd):
            try:
                os.close(fd)
            except OSError:
                pass


class Keeper:
    def __init__(self, listener, say):
        self.listener = listener
        self.say = say
        self.uid = os.geteuid()
        self.wards = {}           # pidfd -> Ward
        self.poller = select.poll()
        self.poller.register(listener.fileno(), select.POLLIN)
        self.root_done = threading.Event()
        self.thread = None
        # Reports are written by a second thread, so that taking descendants
        # in never waits behind a report (a first report loads debug info
        # for seconds; meanwhile a shell loop could fill the socket's queue).
        self.to_write = queue.Queue()
        self.writer = None
        self.written = 0          # final reports written for descendants
        self.symbolizer = Symbolizer()  # shared: descendants run the same binaries
        self._warned = set()
        self.profile = os.environ.get("MEMLEAK_PROFILE_REPORTER")  # as for the reporter
        self.profiler = None
        if self.profile:
            import cProfile
            self.profiler = cProfile.Profile()

    @classmethod
    def inherited(cls, say):
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
        return cls(listener, say)

    # -- the thread ---------------------------------------------------------

    def start(self):
        self.writer = threading.Thread(target=self._write_reports, name="keeper-writer",
                                       daemon=True)
        self.writer.start()
        self.thread = threading.Thread(target=self._run, name="keeper", daemon=True)
        self.thread.start()

    def finish(self):
        """The root is done: go on until no descendant is left, then stop.
        Meanwhile hold none of the program's files: a shell pipeline reading
        the root's stderr must see its end when the root ends, not when a
        daemon it left behind does."""
        self.root_done.set()
        if self.thread is None:
            return
        try:
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 2)
            os.close(null)
        except OSError:
            pass
        self.thread.join()
        self.writer.join()

    def _run(self):
        try:
            while True:
                for fd, _ in self.poller.poll(POLL_SECONDS * 1000):
                    if fd == self.listener.fileno():
                        self.accept_all()
                    elif fd in self.wards and self.wards[fd].died_at is None:
                        self.wards[fd].died_at = time.monotonic()
                        self.poller.unregister(fd)
                self.settle_dead()
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
                ward.release()
            self.wards.clear()
            self.to_write.put(None)

    def _write_reports(self):
        try:
            while (ward := self.to_write.get()) is not None:
                try:
                    self.final_report(ward)
                finally:
                    ward.release()
        finally:
            if self.profiler is not None:
                self.profiler.dump_stats(f"{self.profile}.{os.getpid()}.keeper")

    # -- taking descendants in ---------------------------------------------

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
        ok = (uid == self.uid and len(fds) == 2 and len(data) == MESSAGE.size
              and MESSAGE.unpack(data) == (b"MLK1", pid))
        if not ok:
            for fd in fds:
                os.close(fd)
            return
        # The same pid again: its old image exec'd, and that segment is done.
        for old in [w for w in self.wards.values() if w.pid == pid]:
            self.drop(old)
        ward = Ward(pid, fds[0], fds[1])
        self.wards[ward.pidfd] = ward
        self.poller.register(ward.pidfd, select.POLLIN)

    def drop(self, ward):
        if ward.died_at is None:
            self.poller.unregister(ward.pidfd)
        del self.wards[ward.pidfd]
        ward.release()

    # -- descendants that died ----------------------------------------------

    def settle_dead(self):
        now = time.monotonic()
        for ward in [w for w in self.wards.values() if w.died_at is not None]:
            verdict = self.verdict(ward, now)
            if verdict == "wait":
                continue
            del self.wards[ward.pidfd]
            if verdict == "report":
                self.to_write.put(ward)   # the writer releases it
            else:
                ward.release()

    def verdict(self, ward, now):
        """'report' (write its last report), 'done' (nothing to do) or 'wait'."""
        h = header_fields(ward.segment_fd, DECISION_FIELDS)
        if h is None or h["pid"] != ward.pid:
            return "done"
        if h["exec_pending"] or h["final_done"]:
            return "done"   # its last act was an exec, or its final report is written
        if not h["collecting"] and h["request_seq"] == h["done_seq"]:
            return "done"   # nothing recorded since its last report, nothing asked
        if h["reporter_pid"] > 0 and _alive(h["reporter_pid"]):
            return "done"   # its own reporter notices the death itself
        if h["reporter_starts"] == 0 or now - ward.died_at > GRACE_SECONDS:
            return "report"
        return "wait"       # a reporter was being started as it died

    def final_report(self, ward):
        """Write the dead descendant's last report here, in this process:
        its exit report if it asked for one (descendants that hand us their
        segment leave that to us rather than start a Python process each),
        else its death report.  Symbols are shared with every other
        descendant's, so a build's thousandth cc1 costs little."""
        from libmemleak.reporter import Reporter  # (it imports us)
        try:
            segment = Segment.from_fd(ward.segment_fd)
        except (OSError, SegmentError, ValueError) as e:
            self._warn_once(("segment", str(e)), f"keeper cannot read the segment of pid "
                                                  f"{ward.pid}: {e}")
            return
        try:
            reporter = Reporter(segment, ward.segment_fd, ward.pidfd, self.symbolizer)
            if self.profiler is not None:
                self.profiler.runcall(reporter.final_report)
            else:
                reporter.final_report()
            segment.header.final_done = 1
            self.written += 1
        except Exception as e:  # noqa: BLE001 -- one bad segment must not stop the keeper
            self._warn_once(("report", type(e)), f"keeper cannot report pid {ward.pid}: "
                                                 f"{type(e).__name__}: {e}")
        finally:
            segment.close()

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
