"""`run --wait`: the program runs as this process's child, and `run`
returns only once the program's final report is on disk -- also where the
program cannot wait for it itself: killed by SIGKILL or the OOM killer (no
handler runs), or a Go program, whose exit runs no atexit handler.  Its
reporter writes those reports after the death.  The reporter is a
grandchild of the program whose parent exits at once (native/hook/
spawn.c), so an orphan from its start: `run` is the reaper of the
program's orphans (PR_SET_CHILD_SUBREAPER), the reporter becomes its
child, and `run` waits until it says the final report is written (at most
exit_timeout).

The price of waiting is a pid of its own: `run` forwards every signal a
process sends it (kill -USR1 for a report, SIGTERM, ...) to the program,
but not those a terminal sends its whole foreground process group (^C,
^\\, a hang-up): the program has those already.  The program's exit status
is `run`'s; a death by a signal is `run`'s death by the same signal (its
core is the program's: none of `run`'s own)."""

import ctypes
import os
import resource
import signal
import sys
import time

from libmemleak import PACKAGE_DIR
from libmemleak.daemon.segment_header import header_fields

FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGALRM, signal.SIGWINCH)
PR_SET_CHILD_SUBREAPER = 36
REPORTER_SCRIPT = os.path.realpath(os.path.join(PACKAGE_DIR, "_reporter_main.py"))


def run_waiting(start, argv, exit_timeout_s, reports_at):
    """Forks; the child calls start() (which execs the program, argv, and
    does not return).  Returns the exit status for `run` once the program
    has ended and its reporters are done (or exit_timeout_s passed).
    `reports_at(pid)`: the paths of the program's reports, by its pid."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"libmemleak: run: --wait: cannot adopt the program's orphans "
              f"({os.strerror(ctypes.get_errno())}): its final report may land after run returns",
              file=sys.stderr, flush=True)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # (blocked below: taken by sigwaitinfo)
    watched = {signal.SIGCHLD, *FORWARDED}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        code = 127
        try:
            code = start()  # (returns only when the exec failed: its status, said)
        finally:
            os._exit(code if isinstance(code, int) else 127)
    status = _until_it_ends(pid, watched)
    _until_reporters_end(exit_timeout_s, watched, [os.fsencode(a) for a in argv], pid)
    _reap(pid)
    _say_if_final_lost(reports_at(pid))
    return _leave_as(status)


def _say_if_final_lost(paths):
    """The program's last report is not a final one although it has ended
    and its reporters are done: they were killed before it (the reporter
    and its standby), and what it did since that report is lost -- said,
    or the missing end would go unnoticed."""
    from libmemleak.daemon.report_reasons import FINAL_REASONS
    from libmemleak.files.memlog import MemlogError, read_header
    if not paths:
        return
    try:
        reason = read_header(paths[-1]).get("reason")
    except (OSError, MemlogError):
        return
    if reason not in FINAL_REASONS:
        print(f"libmemleak: run: the program ended without its final report (its reporter was killed "
              f"before it): {paths[-1]} is its last", file=sys.stderr, flush=True)


def _until_it_ends(pid, watched):
    """The program's wait status, forwarding signals until then.  The
    program is left a zombie, not reaped, until its reporters are done:
    its reporter reads from the zombie how it ended (an exit without our
    exit hook -- a Go program's -- is then "exit", not "death")."""
    while True:
        info = signal.sigwaitinfo(watched)
        if info.si_signo != signal.SIGCHLD:
            if info.si_code <= 0:  # sent by a process (SI_USER, SI_QUEUE...), not by the kernel to the group
                try:
                    os.kill(pid, info.si_signo)
                except ProcessLookupError:
                    pass
            continue
        _reap_all_but(pid)
        ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if ended is not None and ended.si_pid == pid:
            if ended.si_code == os.CLD_EXITED:
                return ended.si_status << 8
            return ended.si_status | (0x80 if ended.si_code == os.CLD_DUMPED else 0)


def _reap_all_but(pid):
    """Every child that has ended (reparented orphans too), but `pid`."""
    for child in _children():
        if child != pid:
            try:
                os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                pass


def _reap(pid):
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# A reporter is a grandchild of the program's (native/hook/spawn.c), ours
# from its start: in the moment before its exec it is a copy of the
# program, named as the program is.  Such a child is waited for this long
# to become a reporter; one that does not is the program's own (a daemon).
EXEC_GRACE_S = 2.0


def _until_reporters_end(timeout_s, watched, program_argv, program):
    """Waits until the reporters now our children (the program's, ours
    from their start) have written the final reports of the processes
    that ended.  Other children (a daemon the program left, and its
    reporter) are not waited for; the program itself (a zombie) is not
    reaped."""
    start = time.monotonic()
    deadline, first_seen = start + timeout_s, {}
    while True:
        _reap_all_but(program)
        now, waiting = time.monotonic(), False
        for child in _children():
            if child == program:
                continue
            argv = _argv(child)
            if _is_reporter(argv):
                waiting = waiting or _still_writing(child)
            elif argv == program_argv and now - first_seen.setdefault(child, now) < EXEC_GRACE_S:
                waiting = True  # (a reporter not yet exec'd, or a daemon: a moment tells)
        if not waiting:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            print(f"libmemleak: run: the reporter is still writing after {timeout_s:g} s; its reports land "
                  "later", file=sys.stderr, flush=True)
            return
        info = signal.sigtimedwait(watched, min(left, 1.0))
        if info is not None and info.si_signo != signal.SIGCHLD:
            return  # asked to stop: the program is gone, nothing to forward it to


def _children():
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:  # (a kernel without CONFIG_PROC_CHILDREN)
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if ppid == me:
                    found.append(int(name))
        return found


def _argv(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[:-1]
    except OSError:
        return []


def _still_writing(reporter):
    """Whether `reporter` has yet to write the final report of the process
    it reports on, which has ended (a reporter whose process lives -- a
    daemon's, or the program's own, kept on for its descendants -- is not
    waited for).  Its segment is its descriptor 3 (native/hook/spawn.c)."""
    try:
        fd = os.open(f"/proc/{reporter}/fd/3", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fields = header_fields(fd, ("pid", "final_done"))
    finally:
        os.close(fd)
    if not fields or fields["final_done"]:
        return False
    try:
        with open(f"/proc/{fields['pid']}/stat") as f:
            alive = f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        alive = False
    return not alive


def _is_reporter(argv):
    """Whether a process of this argv is a libmemleak reporter (its third
    argument is this installation's reporter script: native/hook/spawn.c)."""
    return any(a.endswith(b"/_reporter_main.py") and os.path.realpath(os.fsdecode(a)) == REPORTER_SCRIPT
               for a in argv[:4])


def _leave_as(status):
    """The program's exit status as ours; its death by a signal, ours."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # (their disposition is always the default)
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        return 128 + sig  # (a signal that does not kill: the shell's number for it)
    return os.waitstatus_to_exitcode(status)
