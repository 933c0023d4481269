"""libmemleak: find what a running native program leaks, while it runs."""

import os

__version__ = "0.1.0"

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def preload_path():
    """Absolute path of the hook library (libmtrace.so) of this installation."""
    return os.path.join(PACKAGE_DIR, "libmtrace.so")


REPORTER_LIBRARY = os.path.join(PACKAGE_DIR, "libmlkreport.so")
_opened = {}


def reporter_library(ffi):
    """The reporter's C library (native/reporter/*.c) opened through `ffi`,
    whose declarations are its caller's -- once per ffi.  OSError, in one
    line that names the file, when the installation lacks it."""
    lib = _opened.get(id(ffi))
    if lib is None:
        try:
            lib = _opened[id(ffi)] = ffi.dlopen(REPORTER_LIBRARY)
        except OSError as e:
            why = "missing" if not os.path.exists(REPORTER_LIBRARY) else str(e).split(".  Additionally")[0]
            raise OSError(f"{REPORTER_LIBRARY}: {why}; reinstall libmemleak (pip install .)") from None
    return lib
