"""The reporter's watch on the traced program: has it died, exec'd another
image, or blocked the report signal in every thread?"""

import os
import select
import signal
import time

from libmemleak.daemon.procfs import how_it_ended, proc_dir

EXEC_CHECK_SECONDS = 1.0


class ProgramWatch:
    """Is the traced program still running this image?"""

    def __init__(self, pid, segment_inode, pidfd):
        self.pid = pid
        self.inode = segment_inode
        self.poll = None
        self.pidfd = None
        try:
            os.fstat(pidfd)
            self.poll = select.poll()
            self.poll.register(pidfd, select.POLLIN)
            self.pidfd = pidfd
        except OSError:
            pass
        self._next_exec_check = 0.0
        self._pending_polls = 0

    def dead(self):
        if self.poll is not None:
            return bool(self.poll.poll(0))
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                state = f.read().rpartition(b")")[2].split()[0]
            return state in (b"Z", b"X")
        except (OSError, IndexError):
            return True

    def how_it_ended(self, start):
        """How the program ended, read from its zombie (procfs.how_it_ended),
        or None.  Its pidfd tells that the zombie read was the program
        even where its start was not read (it died first): a pid is not
        reused before its process is reaped, and the pidfd says whether
        it is, after the read."""
        ended = how_it_ended(self.pid, start)
        if ended is None or start is not None:
            return ended
        if self.pidfd is None:
            return None
        try:
            signal.pidfd_send_signal(self.pidfd, 0)
        except OSError:
            return None
        return ended

    def signal_blocked_pending(self, signal_number):
        """True, once per occurrence, when `signal_number` has been pending
        for the whole process for two polls in a row: every thread blocks
        it, so the program's handler cannot ask for the report."""
        if not signal_number or signal_number > 64:
            return False
        try:
            with open(f"/proc/{self.pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"ShdPnd:"):
                        pending = int(line.split()[1], 16) >> (signal_number - 1) & 1
                        break
                else:
                    return False
        except (OSError, ValueError, IndexError):
            return False
        if not pending:
            self._pending_polls = 0
            return False
        self._pending_polls += 1
        return self._pending_polls == 2

    def exec_happened(self, urgent=False):
        """After exec the segment is no longer mapped in the process."""
        now = time.monotonic()
        if now < self._next_exec_check and not urgent:
            return False
        self._next_exec_check = now + EXEC_CHECK_SECONDS
        try:
            # a live thread's view: a main thread that called pthread_exit
            # has no maps while the others run (no exec happened)
            with open(f"{proc_dir(self.pid)}/maps", "rb") as f:
                maps = f.read()
        except OSError:
            return False  # gone: dead() tells
        return f" {self.inode} ".encode() not in maps
