"""Function names from an ELF file's symbol tables (.symtab, else .dynsym),
read with pyelftools.  Hostile or broken files give an empty index with an
`error` string, never an exception."""

import bisect

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

_FUNCTION_TYPES = ("STT_FUNC", "STT_GNU_IFUNC")


class ElfIndex:
    def __init__(self, path):
        self.path = path
        self.error = None
        self._starts, self._ends, self._names = [], [], []
        try:
            with open(path, "rb") as f:
                self._load(ELFFile(f))
        except (OSError, ELFError, ValueError, KeyError, IndexError, AssertionError) as e:
            self.error = f"{type(e).__name__}: {e}"

    def _load(self, elf):
        best = {}
        for section in elf.iter_sections():
            if not isinstance(section, SymbolTableSection):
                continue
            for sym in section.iter_symbols():
                if sym["st_info"]["type"] not in _FUNCTION_TYPES:
                    continue
                if sym["st_shndx"] == "SHN_UNDEF" or not sym["st_value"] or not sym.name:
                    continue
                start = sym["st_value"]
                size = sym["st_size"]
                # Prefer a global name over a local alias at the same address,
                # and the .symtab entry (it has the sizes of static functions).
                prev = best.get(start)
                if prev is None or (prev[1] == 0 and size) or (
                        sym["st_info"]["bind"] == "STB_GLOBAL" and prev[2] != "STB_GLOBAL"):
                    best[start] = (sym.name, size, sym["st_info"]["bind"])
        for start in sorted(best):
            name, size, _ = best[start]
            self._starts.append(start)
            self._ends.append(start + size if size else None)
            self._names.append(name)

    def function_at(self, vaddr):
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        end = self._ends[i]
        if end is not None and vaddr >= end:
            return None
        return self._names[i]
