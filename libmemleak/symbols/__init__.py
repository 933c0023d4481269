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


class _ModuleSymbols:
    """Symbol tables and, where found, DWARF of one module (built lazily)."""

    def __init__(self, path, build_id, debug_dirs):
        self.path = path
        self.elf = ElfIndex(path)
        self._build_id = build_id
        self._debug_dirs = debug_dirs
        self._dwarf = None
        self.debug_file = None

    @property
    def dwarf(self):
        if self._dwarf is None:
            self._dwarf = False  # one attempt per module, even if it raises
            self.debug_file = find_debug_file(self.path, self._build_id or None, self._debug_dirs)
            self._dwarf = DwarfIndex(self.debug_file) if self.debug_file else False
        return self._dwarf


class Symbolizer:
    """Caches one index per module and one answer per return address."""

    def __init__(self, debug_dirs=None):
        self._modules = {}
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
            m = self._modules[key] = _ModuleSymbols(path, build_id, self._debug_dirs)
        return m

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
            late = self.deadline is not None and time.monotonic() > self.deadline
            try:
                result = self._lookup(module, address - module.base, use_dwarf=not late)
            except Exception as e:  # noqa: BLE001 -- hostile files must not cost the report
                # The readers catch what malformed input is known to raise;
                # anything else still leaves the frame as module+offset.
                self._internal_errors.setdefault(module.path, f"{type(e).__name__}: {e}")
                result = (Frame(None, module.path, address - module.base),)
            if late:
                self.skipped += 1
                return result
        self._frames[key] = result
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
        out = [f"{m.path}: {m.elf.error}" for m in self._modules.values() if m.elf.error]
        return out + [f"{path}: {error}" for path, error in self._internal_errors.items()]
