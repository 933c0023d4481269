"""C++ name demangling through the C++ runtime's own __cxa_demangle, called
in-process with cffi: exact, and no subprocess per name."""

import functools

import cffi

_ffi = cffi.FFI()
_ffi.cdef("""
    char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);
    void free(void *);
""")

try:
    _cxx = _ffi.dlopen("libstdc++.so.6")
    _libc = _ffi.dlopen(None)
except OSError:  # no C++ runtime on this machine: names stay mangled
    _cxx = None


@functools.lru_cache(maxsize=65536)
def demangle(name):
    if _cxx is None or not name.startswith("_Z"):
        return name
    status = _ffi.new("int *")
    out = _cxx.__cxa_demangle(name.encode(), _ffi.NULL, _ffi.NULL, status)
    if status[0] != 0 or out == _ffi.NULL:
        return name
    try:
        return _ffi.string(out).decode("utf-8", "replace")
    finally:
        _libc.free(out)
