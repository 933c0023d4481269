"""Name demangling, in-process with cffi: exact, and no subprocess per name.

C++ through the C++ runtime's own __cxa_demangle.  Rust -- both its
manglings, the legacy one (an Itanium-shaped name whose last part is a
17-character hash, `$LT$`-escaped: __cxa_demangle leaves
`RawVec$LT$T$C$A$GT$::allocate_in::hea8a8...`) and v0 (`_R...`, which
__cxa_demangle does not know) -- through GNU libiberty's demangler, the
one binutils' c++filt and gdb use, as binutils' shared libbfd exports it
(`cplus_demangle` with DMGL_AUTO).  Where there is no libbfd (binutils is
not installed), Rust names stay as __cxa_demangle leaves them
(RUST_DEMANGLER says so)."""

import functools
import glob
import re

import cffi

_ffi = cffi.FFI()
_ffi.cdef("""
    char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);
    char *cplus_demangle(const char *mangled, int options);
    void free(void *);
""")

DMGL_PARAMS, DMGL_ANSI, DMGL_AUTO = 1 << 0, 1 << 1, 1 << 8
# A legacy Rust symbol: _ZN ... 17h<16 hex digits>E
_RUST_LEGACY = re.compile(r"^_ZN.*17h[0-9a-f]{16}E$")

try:
    _cxx = _ffi.dlopen("libstdc++.so.6")
    _libc = _ffi.dlopen(None)
except OSError:  # no C++ runtime on this machine: names stay mangled
    _cxx = None


def _libiberty():
    for pattern in ("/usr/lib/*-linux-gnu/libbfd*.so*", "/usr/lib64/libbfd*.so*", "/usr/lib/libbfd*.so*"):
        for path in sorted(glob.glob(pattern)):
            try:
                lib = _ffi.dlopen(path)
                lib.cplus_demangle  # noqa: B018 -- exported: it is libiberty's
                return lib
            except (OSError, AttributeError):
                continue
    return None


_iberty = _libiberty()
RUST_DEMANGLER = ("libiberty (binutils' libbfd)" if _iberty is not None else
                  "none: Rust names keep their mangling's escapes (install binutils for libbfd)")


def _owned(out):
    try:
        return _ffi.string(out).decode("utf-8", "replace")
    finally:
        _libc.free(out)


def _rust(name):
    if _iberty is None or _cxx is None:
        return None
    out = _iberty.cplus_demangle(name.encode(), DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO)
    return None if out == _ffi.NULL else _owned(out)


@functools.lru_cache(maxsize=65536)
def demangle(name):
    if name.startswith("_R") or _RUST_LEGACY.match(name):
        rust = _rust(name)
        if rust:
            return rust
    if _cxx is None or not name.startswith("_Z"):
        return name
    status = _ffi.new("int *")
    out = _cxx.__cxa_demangle(name.encode(), _ffi.NULL, _ffi.NULL, status)
    if status[0] != 0 or out == _ffi.NULL:
        return name
    return _owned(out)
