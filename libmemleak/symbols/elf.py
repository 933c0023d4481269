"""Function names from an ELF file's symbol tables (.symtab and .dynsym).

pyelftools finds the sections; the symbol entries themselves are unpacked
in bulk with struct, which is an order of magnitude faster than parsing them
one by one (libpython has tens of thousands).  Hostile or broken files give
an empty index with an `error` string, never an exception."""

import bisect
import struct

from libmemleak.symbols.elfcheck import READ_ERRORS, open_elf

STT_FUNC, STT_GNU_IFUNC = 2, 10
STB_GLOBAL, STB_WEAK = 1, 2
STV_DEFAULT = 0
_SYM64 = struct.Struct("<IBBHQQ")  # st_name, st_info, st_other, st_shndx, st_value, st_size
_SYM32 = struct.Struct("<IIIBBH")  # st_name, st_value, st_size, st_info, st_other, st_shndx


class ElfIndex:
    def __init__(self, path):
        self.path = path
        self.error = None
        self._starts, self._ends, self._names = [], [], []
        self._aliases = {}  # start -> every name there, where there are several
        try:
            with open(path, "rb") as f:
                self._load(open_elf(f))
        except READ_ERRORS as e:
            self.error = f"{type(e).__name__}: {e}"

    def _load(self, elf):
        best = {}  # start -> (rank, name, size)
        wide = elf.elfclass == 64
        for section in elf.iter_sections():
            if section["sh_type"] not in ("SHT_SYMTAB", "SHT_DYNSYM"):
                continue
            strtab = elf.get_section(section["sh_link"]).data()
            data = section.data()
            entries = (_SYM64.iter_unpack(data[:len(data) - len(data) % 24]) if wide else
                       ((n, i, o, sh, v, sz) for n, v, sz, i, o, sh in
                        _SYM32.iter_unpack(data[:len(data) - len(data) % 16])))
            for name_off, info, other, shndx, value, size in entries:
                kind = info & 0xf
                if (kind != STT_FUNC and kind != STT_GNU_IFUNC) or not shndx or not value:
                    continue
                end = strtab.find(b"\0", name_off)
                name = strtab[name_off:end if end >= 0 else len(strtab)]
                if not name:
                    continue
                rank = _alias_rank(name, info >> 4, other & 3, size)
                prev = best.get(value)
                text = name.decode("utf-8", "replace")
                if prev is not None:
                    self._aliases.setdefault(value, {prev[1]}).add(text)
                if prev is None or rank < prev[0]:
                    best[value] = (rank, text, size)
        for start in sorted(best):
            _, name, size = best[start]
            self._starts.append(start)
            self._ends.append(start + size if size else None)
            self._names.append(name)

    def aliases_at(self, vaddr):
        """Every symbol name of the function holding vaddr (one or more)."""
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return ()
        return self._aliases.get(self._starts[i], (self._names[i],))

    def function_at(self, vaddr):
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        end = self._ends[i]
        if end is not None and vaddr >= end:
            return None
        return self._names[i]


def _alias_rank(name, binding, visibility, size):
    """Several symbols often name one address (glibc: __GI___strdup, a
    hidden alias; __strdup; strdup).  Show the name users call, as gdb and
    valgrind do: an exported one (global or weak, default visibility)
    before a local or hidden one, then the one with the fewest leading
    underscores, then the shortest; an entry with a size before one
    without.  Lower ranks win."""
    exported = binding in (STB_GLOBAL, STB_WEAK) and visibility == STV_DEFAULT
    underscores = len(name) - len(name.lstrip(b"_"))
    return (not size, not exported, underscores, len(name), name)
