"""Opening ELF files that may be damaged or hostile.

pyelftools trusts section headers: a section whose size field says 40 GB is
read with one read() of that size, and a compressed section is inflated to
whatever its header claims.  `open_elf` checks every section against the
file first, so a corrupt file fails fast with ELFError instead of eating
the reporter's memory.  READ_ERRORS is everything malformed input has been
seen to raise from pyelftools (fuzzed in tests/test_symbols.py) and from
our own readers."""

import os
import struct

from elftools.common.exceptions import DWARFError, ELFError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile

from libmemleak.symbols.dies import DieError

READ_ERRORS = (OSError, ELFError, DWARFError, ConstructError, DieError, ValueError, KeyError,
               IndexError, AssertionError, TypeError, AttributeError, struct.error,
               UnicodeDecodeError, OverflowError, MemoryError, RecursionError)

# A compressed section may inflate this much at most (zlib's own limit is ~1032x;
# debug sections compress 3-10x in practice).
MAX_INFLATION = 1100


def open_elf(f):
    """ELFFile for the open binary file `f`, after checking that every
    section lies inside the file and inflates to a sane size."""
    size = os.fstat(f.fileno()).st_size
    elf = ELFFile(f)
    for i in range(elf.num_sections()):
        section = elf.get_section(i)
        header = section.header
        if header["sh_type"] in ("SHT_NOBITS", "SHT_NULL"):
            continue
        end = header["sh_offset"] + header["sh_size"]
        if header["sh_offset"] > size or end > size:
            raise ELFError(f"section {i} lies outside the file ({end} > {size} bytes)")
        if getattr(section, "compressed", False):
            if section.data_size > MAX_INFLATION * max(header["sh_size"], 1):
                raise ELFError(f"section {i} claims to inflate to {section.data_size} bytes")
    return elf


def has_interpreter(f):
    """Whether the ELF file open as `f` names a program interpreter (it is
    dynamically linked: a preload can reach it)."""
    from elftools.elf.elffile import ELFFile
    try:
        f.seek(0)
        elf = ELFFile(f)
        return any(seg["p_type"] == "PT_INTERP" for seg in elf.iter_segments())
    except (ELFError, ValueError, KeyError, IndexError, OSError):
        return True  # unreadable program headers: let the loader decide
