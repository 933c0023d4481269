"""The shared-memory layout, read from the same C header the hook library
is compiled with, so that the two can never drift apart."""

import os
import re

import cffi

from libmemleak import PACKAGE_DIR

_CANDIDATES = (
    os.path.join(PACKAGE_DIR, "shm_layout.h"),  # installed: copied in by setup.py
    os.path.join(PACKAGE_DIR, os.pardir, "native", "shm_layout.h"),  # source tree
)


def _header_text():
    for path in _CANDIDATES:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    raise FileNotFoundError("shm_layout.h is missing from the libmemleak installation")


def _cdef_text(text):
    # cffi understands '#define NAME number' but no other preprocessor line.
    keep = [line for line in text.splitlines()
            if not line.lstrip().startswith("#") or line.lstrip().startswith("#define")]
    return "\n".join(keep)


ffi = cffi.FFI()
ffi.cdef(_cdef_text(_header_text()))

# The '#define' constants, as a plain namespace (cffi exposes them only on a
# compiled or dlopen'ed library object).
CONST = {name: int(value, 0) for name, value in
         re.findall(r"^#define\s+(MLK_\w+)\s+(0x[0-9a-fA-F]+|\d+)\s*$", _header_text(), re.M)}

STACK_SIZE = ffi.sizeof("struct mlk_stack")
COUNTERS_SIZE = ffi.sizeof("struct mlk_counters")
MODULE_SIZE = ffi.sizeof("struct mlk_module")
HEADER_SIZE = ffi.sizeof("struct mlk_header")


def stack_word(field):
    """Index of a 64-bit-aligned field of struct mlk_stack, in 8-byte words."""
    off = ffi.offsetof("struct mlk_stack", field)
    assert off % 8 == 0, field
    return off // 8
