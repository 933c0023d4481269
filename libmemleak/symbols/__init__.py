"""Addresses -> frames (function, module, file:line).  Knows nothing about
reports: it answers for one (module, offset) at a time and caches."""

from dataclasses import dataclass

from libmemleak.symbols.demangle import demangle
from libmemleak.symbols.elf import ElfIndex


@dataclass(frozen=True)
class Frame:
    function: str | None    # None when unknown
    module: str | None      # path of the ELF object, None when the address is in none
    offset: int             # module-relative address (file vaddr), or the address itself
    file: str | None = None
    line: int | None = None
    inlined: bool = False


class Symbolizer:
    """Caches one index per ELF file and one Frame per return address."""

    def __init__(self):
        self._elves = {}
        self._frames = {}

    def elf(self, path):
        idx = self._elves.get(path)
        if idx is None:
            idx = self._elves[path] = ElfIndex(path)
        return idx

    def frames_for(self, module, address):
        """Frames (innermost first) for one return address in `module`
        (a segment.Module or None).  Usually one frame; more when the call
        site sits in inlined code."""
        key = (module.index if module else None, address)
        hit = self._frames.get(key)
        if hit is not None:
            return hit
        if module is None:
            result = (Frame(None, None, address),)
        else:
            offset = address - module.base
            # A return address points after the call: look up the call itself.
            name = self.elf(module.path).function_at(offset - 1)
            result = (Frame(demangle(name) if name else None, module.path, offset),)
        self._frames[key] = result
        return result

    def problems(self):
        """One line per ELF file that could not be read."""
        return [f"{path}: {idx.error}" for path, idx in self._elves.items() if idx.error]
