"""Entry point the hook library executes (python -E this-file).  It puts the
package's parent directory first on sys.path instead of this directory, so
that no module of the package can shadow a standard one."""
import os
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SEGMENT_FD = 3  # as in reporter.py, which may be what cannot be imported


def first_failure():
    """True the first time a reporter of this segment cannot start: the
    segment counts it in report_errors, so the program's stderr gets one
    line, not one per report request (each starts a new reporter)."""
    try:
        import mmap
        from libmemleak.daemon.layout import CONST, HEADER_SIZE, ffi
        with mmap.mmap(SEGMENT_FD, HEADER_SIZE, mmap.MAP_SHARED,
                       mmap.PROT_READ | mmap.PROT_WRITE) as m:
            buf = ffi.from_buffer(m)
            try:
                h = ffi.cast("struct mlk_header *", buf)
                if h.magic != CONST["MLK_MAGIC"] or h.header_size != HEADER_SIZE:
                    return True
                h.report_errors += 1
                return h.report_errors == 1
            finally:
                ffi.release(buf)
    except Exception:  # noqa: BLE001 -- then say it every time rather than never
        return True


def take_life():
    """Lock the segment's reporter life mutex (native/reporter/life.c)
    before anything else: from then on the program tells that we live
    without a system call its sandbox may refuse."""
    try:
        import cffi
        from libmemleak import reporter_library
        ffi = cffi.FFI()
        ffi.cdef("int mlk_rc_take_reporter_life(int, int32_t);")
        reporter_library(ffi).mlk_rc_take_reporter_life(SEGMENT_FD, os.getpid())
    except Exception:  # noqa: BLE001 -- then the program asks /proc, as before
        pass


if "MEMLEAK_STANDBY_PIPE" in os.environ:  # a standby started anew (daemon/standby.py): no life to take
    from libmemleak.daemon.standby import serve_started_anew, started_anew  # noqa: E402
    pipe = started_anew()
    if pipe is not None:
        sys.exit(serve_started_anew(pipe, SEGMENT_FD, 4, os.path.abspath(__file__)))

take_life()
try:
    from libmemleak.daemon.reporter_main import main  # noqa: E402
except Exception as e:  # noqa: BLE001 -- a broken installation: one line on the program's stderr
    if first_failure():
        try:
            os.write(2, f"libmemleak: the reporter cannot start ({type(e).__name__}: {e}); "
                        "no reports will be written\n".encode("utf-8", "replace"))
        except OSError:
            pass
    sys.exit(1)

sys.exit(main())
