"""The reporter process's life: the hook library starts it (python -E
_reporter_main.py) with the segment on fd 3 and a pidfd of the program on
fd 4; it decides where reports go, starts its standby and the keeper,
serves remote shells if asked, runs the Reporter until the program is
gone, and lets go of the program's descriptors."""

import os
import sys

from libmemleak import PACKAGE_DIR
from libmemleak.daemon import standby
from libmemleak.daemon.keeper import Keeper
from libmemleak.daemon.reporter import PIDFD, SEGMENT_FD, Reporter, say
from libmemleak.daemon.segment import Segment, SegmentError
from libmemleak.daemon.trust import fallback_directory, pid_of_pidfd, vouched_directory
from libmemleak.files.memlog import header_text
from libmemleak.files.report_names import safe_name


def started_with():
    """(directory, name) the hook library started this reporter with
    (native/hook/segment.c freeze_reporter_args), or (None, None)."""
    if len(sys.argv) >= 3 and sys.argv[1]:
        return sys.argv[1], safe_name(sys.argv[2]) if sys.argv[2] else None
    return None, None


def root_directory(segment):
    """The directory the segment names, if its process may choose one for
    us (it runs only as our user); else the fallback directory, said once."""
    claimed = segment.report_dir()
    pid = pid_of_pidfd(PIDFD) or segment.header.pid  # the kernel's pid: ours may be a namespace's
    directory, refused = vouched_directory(claimed, pid, None)
    if refused:
        directory = fallback_directory()
        say(f"pid {pid} does not run as uid {os.geteuid()} alone, so its segment "
            f"may not choose where reports go (it names {header_text(claimed)!r}); "
            f"reports go to {directory}")
    return directory


def main():
    try:
        segment = Segment.from_fd(SEGMENT_FD)
    except (OSError, SegmentError, ValueError) as e:
        say(f"reporter cannot read the segment: {e}")
        return 1
    # Where reports go and what they are called: as the hook library
    # started us with them, never as the segment says now (trust.py).
    directory, name = started_with()
    directory = directory or root_directory(segment)
    # Before any thread: a killed reporter must not take the last report along.
    stand_by = standby.start(SEGMENT_FD, PIDFD if _is_open(PIDFD) else None,
                             os.path.join(PACKAGE_DIR, "_reporter_main.py"), segment.header)
    # The root's first reporter keeps its descendants.
    keeper = Keeper.inherited(say, directory, segment.header)
    if keeper is not None:
        keeper.start()
    try:
        return _run_reporter(segment, directory, name, keeper, stand_by)
    finally:
        stand_by.done()
        # The program is gone (or another image runs): hold none of its
        # descriptors from here on.  Its stderr may be a pipe someone reads
        # to its end (`prog 2>&1 | tee`, a build tool); a keeper still
        # waiting for a daemon's descendants would keep that pipe open.
        _let_go_of_stderr()
        if keeper is not None:
            keeper.finish()


def _is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _let_go_of_stderr():
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    os.dup2(null, 2)
    os.close(null)


def _run_reporter(segment, directory, name, keeper, stand_by):
    from libmemleak.daemon import remote
    server = remote.serve_if_asked(segment, say, directory, name)
    try:
        return _run(segment, directory, name, keeper, stand_by)
    finally:
        if server is not None:
            server.close()


def _run(segment, directory, name, keeper, stand_by):
    profile = os.environ.get("MEMLEAK_PROFILE_REPORTER")  # a file for cProfile stats
    if not profile:
        try:
            return Reporter(segment, directory, name=name, keeper=keeper, standby=stand_by).run()
        except Exception as e:  # noqa: BLE001 -- one line on the program's stderr, never a traceback
            if os.environ.get("MEMLEAK_DEBUG"):
                raise
            say(f"reporter stopped by an internal error ({type(e).__name__}: {e}); "
                "the next report request starts a new one")
            return 1
    import cProfile
    profiler = cProfile.Profile()
    try:
        return profiler.runcall(Reporter(segment, directory, name=name, keeper=keeper, standby=stand_by).run)
    finally:
        profiler.dump_stats(f"{profile}.{os.getpid()}")
