"""The program's own allocation layer: the functions it allocates through
(MariaDB's my_malloc, PostgreSQL's palloc and AllocSetAlloc, GLib's
g_malloc, xmalloc, a server's pool_alloc).  Blamed as they are, they are
where every stack's first frame of the program's own code lands: grouping
by function then names the wrapper, one suspect for a dozen leaks.  Folded,
a stack is attributed to the first frame outside the layer -- the wrapper's
caller -- and every report says which functions were folded.

The layer is found three ways, in this order:
  - functions named by the user (`--alloc-fns REGEX`, or `alloc_fns=` in
    MEMLEAK_CONFIG, which every report's header carries: `# alloc-fns:`);
  - well-known allocation functions of common programs and libraries;
  - by their shape: a function that is the first own frame of a large share
    of the allocations (MIN_SHARE of them) with many distinct callers
    (MIN_CALLERS), which is how an allocation wrapper looks and a leaking
    function seldom does.  Allocations, not stacks: a library's start-up
    (OpenSSL registering its ciphers from 136 places) makes many stacks
    and few allocations, and is no wrapper (redis-server: it was folded
    when stacks were counted).
Layers stack up (palloc -> MemoryContextAlloc -> AllocSetAlloc -> malloc):
the search runs again past what it folded, a few levels deep."""

import re

from libmemleak.analysis.names import has_python_frames, is_own_code, short_name

# Allocation functions of programs and libraries people trace, by exact
# (demangled, shortened) name: wrappers everywhere they occur.
KNOWN = frozenset((
    "my_malloc", "my_realloc", "my_strdup", "my_memdup", "my_multi_malloc", "alloc_root",  # MariaDB
    "palloc", "palloc0", "palloc_extended", "repalloc", "MemoryContextAlloc",              # PostgreSQL
    "MemoryContextAllocZero", "MemoryContextAllocExtended", "AllocSetAlloc",
    "GenerationAlloc", "SlabAlloc", "pstrdup", "pnstrdup",
    "g_malloc", "g_malloc0", "g_malloc_n", "g_malloc0_n", "g_realloc", "g_try_malloc",     # GLib
    "g_strdup", "g_strndup", "g_slice_alloc", "g_slice_alloc0", "g_memdup2",
    "xmalloc", "xcalloc", "xrealloc", "xstrdup", "xzalloc", "xmemdup",                     # GNU
    "zmalloc", "zcalloc", "zrealloc", "ztrymalloc", "zstrdup", "zmalloc_usable",           # redis
    "zcalloc_usable", "zrealloc_usable", "ztrymalloc_usable",
    "emalloc", "ecalloc", "erealloc", "estrdup",                                           # PHP
    "sqlite3Malloc", "sqlite3MallocZero", "sqlite3DbMallocRaw", "sqlite3DbMallocZero",     # SQLite
    "sqlite3DbMallocRawNN", "sqlite3DbStrDup",
    "PyMem_Malloc", "PyMem_RawMalloc", "PyObject_Malloc", "_PyObject_Malloc",              # CPython
))
# (std::allocator<T>::allocate and the like are library code, which every
# attribution passes over already: names.is_own_code.)
# Prefixes of allocator entry layers that are never where a leak is made
# (Chromium's shims and PartitionAlloc, V8's Malloced).
KNOWN_PREFIXES = ("partition_alloc::", "allocator_shim::", "base::allocator::",
                  "v8::internal::Malloced::", "v8::internal::AlignedAlloc")

# What `alloc_fns=` may be when read from a report (the traced program
# writes it): names or parts of names, anchored with ^ and $, joined by |.
# No groups, classes or quantifiers: nothing a hostile report could make
# backtrack for ever.
CONFIGURED = re.compile(r"\^?[\w:~.]+\$?(\|\^?[\w:~.]+\$?)*")

MIN_CALLERS = 5     # distinct callers of a wrapper found by its shape
MIN_SHARE = 0.10    # of the process's allocations whose first own frame it is
LEVELS = 4


class Layer:
    """Which functions are folded, and why (name -> reason)."""

    def __init__(self, folded=None, problems=()):
        self.folded = dict(folded or {})
        self.problems = list(problems)  # what could not be applied, one line each

    def __bool__(self):
        return bool(self.folded)

    def __contains__(self, frame):
        return frame.function is not None and short_name(frame.function) in self.folded

    def notes(self):
        """One line saying what was folded, or nothing."""
        if not self.folded:
            return list(self.problems)
        parts = [f"{name} ({why})" for name, why in sorted(self.folded.items())]
        return ["allocation layer folded (stacks attributed to its callers; --no-fold shows it): "
                + ", ".join(parts), *self.problems]


def _first_outside(frames, executable, layer):
    """Index of the first own frame not folded, or None."""
    python = has_python_frames(frames)
    for i, f in enumerate(frames):
        if is_own_code(f, executable, python) and short_name(f.function or "") not in layer:
            return i
    return None


def configured(text):
    """The report's `alloc-fns` as a compiled pattern and None, or None and
    the line saying why it is not used."""
    if not CONFIGURED.fullmatch(text) or len(text) > 255:
        return None, (f"alloc-fns {text[:80]!r} in the reports is not names joined by | "
                      "(with ^ and $): not used")
    return re.compile(text.replace(".", r"\.")), None


def find(stacks, executable=None, pattern=None, fold=True, config=None):
    """The Layer of a process from its stacks: (frames, allocations made
    there -- None when the reports do not say, then 1).  pattern: a regular
    expression (search) over function names, or None; config: the
    reports' `alloc-fns`, or None."""
    if not fold:
        return Layer()
    folded, problems = {}, []
    named, problem = configured(config) if config else (None, None)
    if problem:
        problems.append(problem)
    names = set()
    for frames, _ in stacks:
        for f in frames:
            if f.function:
                names.add(short_name(f.function))
    regex = re.compile(pattern) if pattern else None
    for name in names:
        if regex and regex.search(name):
            folded[name] = "--alloc-fns"
        elif named and named.search(name):
            folded[name] = "alloc_fns="
        elif name in KNOWN or name.startswith(KNOWN_PREFIXES):
            folded[name] = "an allocation function"
    total = sum(made or 1 for _, made in stacks)
    for _ in range(LEVELS):
        callers, counts = {}, {}
        for frames, made in stacks:
            i = _first_outside(frames, executable, folded)
            if i is None or i + 1 >= len(frames):
                continue
            name = short_name(frames[i].function or "")
            if not name:
                continue
            counts[name] = counts.get(name, 0) + (made or 1)
            callers.setdefault(name, set()).add(short_name(frames[i + 1].function or "") or frames[i + 1].offset)
        found = {name: f"{len(callers[name])} callers" for name, n in counts.items()
                 if n >= MIN_SHARE * total and len(callers[name]) >= MIN_CALLERS
                 and name != "main"}
        if not found:
            break
        folded.update(found)
    return Layer(folded, problems)
