"""Waiting on and waking the segment's futex words (request_seq,
done_seq, ...): how the reporter sleeps until the hook asks for a report,
and how each side tells the other that something is done."""

import cffi

_sys = cffi.FFI()
_sys.cdef("long syscall(long number, ...); struct futex_timespec { long tv_sec; long tv_nsec; };")
_libc = _sys.dlopen(None)
_SYS_FUTEX, _FUTEX_WAIT, _FUTEX_WAKE = 202, 0, 1


def futex_wait(address, expected, timeout):
    """Sleep until the u32 at `address` is woken or no longer `expected`, or
    `timeout` seconds pass.  cffi releases the GIL for the call."""
    ts = _sys.new("struct futex_timespec *", (int(timeout), int((timeout % 1) * 1e9)))
    _libc.syscall(_sys.cast("long", _SYS_FUTEX), _sys.cast("long", address),
                  _sys.cast("long", _FUTEX_WAIT), _sys.cast("long", expected),
                  _sys.cast("long", int(_sys.cast("uintptr_t", ts))))


def futex_wake(address):
    _libc.syscall(_sys.cast("long", _SYS_FUTEX), _sys.cast("long", address),
                  _sys.cast("long", _FUTEX_WAKE), _sys.cast("long", 0x7fffffff))
