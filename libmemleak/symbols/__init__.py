"""Addresses -> frames (function, module, file:line).  Knows nothing about
reports: it answers for one (module, offset) at a time and caches."""

import time
from dataclasses import dataclass

from libmemleak.symbols.debugfile import find_debug_file
from libmemleak.symbols.demangle import demangle
from libmemleak.symbols.dwarf import DwarfIndex
from libmemleak.symbols.elf import ElfIndex


@dataclass(frozen=True)
class Frame:
    function: str | None    # None when unknown
    module: str | None      # path of the ELF object, None when the address is in none
    offset: int             # module-relative address (file vaddr), or the address itself
    file: str | None = None
    line: int | None = None
    inlined: bool = False


_NOT_LOOKED = object()


class _ModuleSymbols:
    """Symbol tables and, where found, DWARF of one module (each built
    lazily: answers found in the answer cache need neither)."""

    def __init__(self, path, build_id, debug_dirs, cache):
        self.path = path
        self._elf = None
        self._build_id = build_id
        self._debug_dirs = debug_dirs
        self._dwarf = None
        self._debug_file = _NOT_LOOKED
        self._cache = cache
        self._shelf = _NOT_LOOKED

    @property
    def elf(self):
        if self._elf is None:
            self._elf = ElfIndex(self.path)
        return self._elf

    @property
    def debug_file(self):
        if self._debug_file is _NOT_LOOKED:
            self._debug_file = None  # one attempt per module, even if it raises
            self._debug_file = find_debug_file(self.path, self._build_id or None, self._debug_dirs)
        return self._debug_file

    @property
    def dwarf(self):
        if self._dwarf is None:
            self._dwarf = False  # one attempt per module, even if it raises
            self._dwarf = DwarfIndex(self.debug_file) if self.debug_file else False
        return self._dwarf

    @property
    def shelf(self):
        """This module's answers kept on disk (symbols/answer_cache.py), or None."""
        if self._shelf is _NOT_LOOKED:
            self._shelf = None
            if self._cache is not None:
                self._shelf = self._cache.shelf(self.path, self._build_id, self.debug_file)
        return self._shelf

    def save(self):
        """Write this module's answers found since the last save."""
        if self._shelf not in (None, _NOT_LOOKED):
            self._shelf.flush()


class Symbolizer:
    """Caches one index per module and one answer per return address."""

    def __init__(self, debug_dirs=None, cache=None):
        """cache: an AnswerCache (symbols/answer_cache.py) whose answers are
        taken as this symbolizer's own, and which keeps its new ones."""
        self._modules = {}
        self._cache = cache
        self._frames = {}
        self._debug_dirs = debug_dirs
        # After this time.monotonic() value, answer from symbol tables only
        # (fast) and do not cache, so a later report can still do better.
        self.deadline = None
        self.skipped = 0
        self._internal_errors = {}  # module path -> first unexpected error

    def module(self, path, build_id=""):
        key = (path, build_id)
        m = self._modules.get(key)
        if m is None:
            m = self._modules[key] = _ModuleSymbols(path, build_id, self._debug_dirs, self._cache)
        return m

    def save(self):
        """Write the answers found since the last save to the answer cache."""
        for m in self._modules.values():
            m.save()

    def frames_for(self, module, address):
        """Frames (innermost first) for one return address in `module`
        (a segment.Module or None).  Usually one frame; more when the call
        site sits in inlined code."""
        # Keyed by file and offset, not by the segment's module index, so one
        # Symbolizer can serve many processes (the keeper's descendants).
        key = (module.path, module.build_id, address - module.base) if module else address
        hit = self._frames.get(key)
        if hit is not None:
            return hit
        if module is None:
            result = (Frame(None, None, address),)
        else:
            result = self._answer(module, address - module.base)
            if type(result) is list:  # an answer of symbol tables only, past the deadline
                self.skipped += 1
                return tuple(result)
        self._frames[key] = result
        return result

    def _answer(self, module, offset):
        """The frames at `offset` in `module`: a tuple (to keep), or a list
        (an answer of symbol tables only, past the deadline: not to keep)."""
        syms = self.module(module.path, module.build_id)
        shelf = syms.shelf
        rows = shelf.get(offset) if shelf is not None else None
        if rows is not None:
            return tuple(Frame(f, module.path, offset, file, line, inlined)
                         for f, file, line, inlined in rows)
        late = self.deadline is not None and time.monotonic() > self.deadline
        try:
            result = self._lookup(module, offset, use_dwarf=not late)
        except Exception as e:  # noqa: BLE001 -- hostile files must not cost the report
            # The readers catch what malformed input is known to raise;
            # anything else still leaves the frame as module+offset.
            self._internal_errors.setdefault(module.path, f"{type(e).__name__}: {e}")
            return (Frame(None, module.path, offset),)
        if late:
            return list(result)
        if shelf is not None and not syms.elf.error:  # (an unreadable file is said at each start)
            shelf.put(offset, tuple((f.function, f.file, f.line, f.inlined) for f in result))
        return result

    def _lookup(self, module, offset, use_dwarf=True):
        syms = self.module(module.path, module.build_id)
        # A return address points after the call: look up the call itself.
        pc = offset - 1
        symtab_name = syms.elf.function_at(pc)
        symtab_name = demangle(symtab_name) if symtab_name else None
        dwarf = syms.dwarf if use_dwarf else None
        locations = dwarf.locate(pc) if dwarf else []
        if not locations:
            return (Frame(symtab_name, module.path, offset) if symtab_name
                    else Frame(None, module.path, offset),)
        frames = []
        for loc in locations:
            name = loc.function
            if not loc.inlined and symtab_name and (not name or "(" not in name):
                # The symbol table's name where it is the same function: with
                # parameters (C++), or the public alias of an internal name.
                if (not name or symtab_name.startswith(name) or name in syms.elf.aliases_at(pc)
                        or name.lstrip("_") == symtab_name.lstrip("_")):
                    name = symtab_name
            frames.append(Frame(name or symtab_name, module.path, offset, loc.file, loc.line,
                                loc.inlined))
        return tuple(frames)

    def problems(self):
        """One line per ELF file that could not be read."""
        out = [f"{m.path}: {m._elf.error}" for m in self._modules.values() if m._elf and m._elf.error]
        return out + [f"{path}: {error}" for path, error in self._internal_errors.items()]
