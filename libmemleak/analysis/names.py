"""Readable frames: C++ names shortened the way heaptrack shows them, and a
stack cut to the frames that matter (the first frames of the program's own
code), with a count of the rest."""

import re

from libmemleak.files.memlog import PYTHON_MODULE

LIBRARY_HINTS = ("/libc.so", "/libstdc++.so", "/ld-linux", "/libm.so", "/libgcc_s.so",
                 "/libpthread.so")


def short_name(name):
    """Template arguments and parameter lists elided:
    `std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(...)`
    -> `std::vector::_M_realloc_insert`.  `operator<` and the like are kept,
    and so is a Go method's receiver: `runtime.(*mheap).grow`, not
    `runtime..grow` (#60)."""
    if not name or ("<" not in name and "(" not in name):
        return name
    out, depth, i = [], 0, 0
    while i < len(name):
        if name.startswith("operator", i) and depth == 0:
            j = i + len("operator")
            while j < len(name) and name[j] in "<>=!+-*/%^&|~[]() ,":
                if name[j] == "(" and name.startswith("()", j):
                    j += 2
                    break
                if name[j] == "(":
                    break
                j += 1
            out.append(name[i:j])
            i = j
            continue
        c = name[i]
        if c == "(" and depth == 0 and i and name[i - 1] == ".":  # Go: pkg.(*T).method
            j = name.find(")", i)
            if j > 0 and name.startswith(".", j + 1):
                out.append(name[i:j + 1])
                i = j + 1
                continue
        if c in "<(":
            depth += 1
        elif c in ">)" and depth:
            depth -= 1
        elif depth == 0:
            out.append(c)
        i += 1
    return "".join(out).strip() or name


# Library code compiled into the program: C++'s headers, and Rust's standard
# library (its sources as rustup's toolchains and Debian's rustc record
# them), whose allocation layer -- alloc::alloc, RawVec, Box, String,
# format! -- is monomorphized into every Rust binary and would otherwise be
# every stack's first frame of the program's own.
SYSTEM_SOURCES = ("/usr/include/", "/usr/lib/gcc/", "/usr/lib/llvm", "/rustc/", "/usr/src/rustc-")
LIBRARY_NAMESPACES = ("std::", "__gnu_cxx::", "__cxxabiv1::", "void std::", "__gnu_debug::",
                      # Rust's (frames without line information: a release build's std).
                      # Not a bare "core::": a C++ program may have a namespace of that name.
                      "alloc::", "<alloc::", "<core::", "<std::", "hashbrown::", "<hashbrown::",
                      "__rust_alloc", "__rust_realloc", "__rust_dealloc", "__rdl_", "__rg_",
                      # Go's runtime and cgo's glue: its C wrappers (_cgo_<hash>_Cfunc_f),
                      # runtime/cgo's C (x_cgo_mmap...).  ("runtime." is no C or C++ name.)
                      "runtime.", "_cgo_", "x_cgo_")
# cgo's Go stub of each C function: PKG._Cfunc_f (.abi0)
GO_CGO_STUB = "._Cfunc_"


def is_library(module):
    return bool(module) and any(hint in module for hint in LIBRARY_HINTS)


# The interpreter's own modules: CPython's executable (python3.11) or its
# library.
_INTERPRETER = re.compile(r"(libpython\d[\d.]*\w*\.so[\d.]*|python\d+(\.\d+)?[a-z]*)")


def is_interpreter(module):
    return bool(module) and _INTERPRETER.fullmatch(module.rsplit("/", 1)[-1]) is not None


def has_python_frames(frames):
    """Whether a stack carries the Python frames that were running."""
    return any(f.module == PYTHON_MODULE for f in frames)


def is_own_code(frame, executable=None, python=False):
    """A frame of the program's own code: not in a system library, and not
    library code inlined into the program (std::string's members, say,
    compiled from /usr/include).  In a stack with Python frames (`python`),
    the interpreter's frames are library code too: a Python leak is the
    Python line's, a C extension's its C line."""
    if frame.module != executable and is_library(frame.module):
        return False
    if python and is_interpreter(frame.module):
        return False
    if frame.file and frame.file.startswith(SYSTEM_SOURCES):
        return False
    name = frame.function or ""
    return (not name.startswith(LIBRARY_NAMESPACES) and "/include/c++/" not in (frame.file or "")
            and GO_CGO_STUB not in name)


def shown_frames(frames, executable=None, keep=4, layer=None):
    """(frames to show, how many are left out above, below).  The shown ones
    start at the first frame of the program's own code outside its
    allocation layer (analysis.alloc_layer), so the allocator wrappers and
    inlined library code above it do not push it out of sight."""
    first, python = 0, has_python_frames(frames)
    for i, f in enumerate(frames):
        if is_own_code(f, executable, python) and not (layer and f in layer):
            first = i
            break
    shown = frames[first:first + keep]
    return shown, first, max(0, len(frames) - first - keep)


def frame_text(frame, full=False):
    name = frame.function if full else short_name(frame.function)
    if name is None:
        return f"{frame.module}+{frame.offset:#x}" if frame.module else f"{frame.offset:#x}"
    where = f"{frame.file.rsplit('/', 1)[-1]}:{frame.line}" if frame.file and frame.line else (
        frame.module.rsplit("/", 1)[-1] if frame.module else "")
    return f"{name}{' [inlined]' if frame.inlined else ''} ({where})" if where else name


def frame_lines(frames, executable=None, keep=4, full=False, cut=0, more=" (--frames N)", layer=None):
    """A stack as lines to show: the frames from the program's own code on,
    with how many were left out above (library frames, the allocation
    layer's) and below, and, for a stack cut at the configured depth `cut`,
    that its callers are not known.  `more`: how the reader sees the rest
    (a command line option)."""
    shown, above, below = shown_frames(frames, executable, keep, layer)
    lines = [frame_text(f, full) for f in shown]
    folded = [short_name(f.function) for f in frames[:above] if layer and f in layer]
    if folded:
        lines.insert(0, f"({above} frame{'s' if above != 1 else ''} above, allocation layer: "
                        f"{' <- '.join(dict.fromkeys(folded))})")
    elif above:
        lines.insert(0, f"({above} frame{'s' if above != 1 else ''} in libraries above)")
    if below:
        lines.append(f"... {below} more{more}")
    if cut:
        lines.append(cut_words(cut))
    return lines


def cut_words(depth):
    """What to say under a stack whose backtrace was cut at `depth`."""
    return f"(stack cut at depth {depth}: its outer callers were not recorded; {deeper_words(depth)})"


def deeper_words(depth):
    """The configuration that records stacks deeper than `depth`."""
    if depth < 64:
        return f"MEMLEAK_CONFIG depth={min(64, depth * 2)} (at most 64) shows more"
    return "64 is the deepest"


def cut_of(entry):
    """The depth a report entry's stack was cut at (its cut= field), 0 if whole."""
    for extra in entry.extra or ():
        name, _, value = extra.partition("=")
        if name == "cut" and value.isdigit():
            return int(value)
    return 0

