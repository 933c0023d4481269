"""Where the debug information of an ELF file lives: in the file itself, or
in a separate file found by build-id or by .gnu_debuglink (CRC-checked), in
the standard places and in the directories of MEMLEAK_DEBUG_PATH."""

import os
import zlib

from libmemleak.symbols.elfcheck import READ_ERRORS as _ERRORS
from libmemleak.symbols.elfcheck import open_elf

SYSTEM_DEBUG_DIR = "/usr/lib/debug"


def debug_dirs(extra=None):
    dirs = []
    for source in (extra or [], os.environ.get("MEMLEAK_DEBUG_PATH", "").split(":")):
        dirs.extend(d for d in source if d)
    dirs.append(SYSTEM_DEBUG_DIR)
    return dirs


def _elf_facts(path):
    """(has .debug_info, build-id hex or None, (debuglink name, crc) or None)"""
    with open(path, "rb") as f:
        elf = open_elf(f)
        has_info = elf.get_section_by_name(".debug_info") is not None or \
            elf.get_section_by_name(".zdebug_info") is not None
        build_id = None
        for section in elf.iter_sections():
            if section["sh_type"] == "SHT_NOTE":
                for note in section.iter_notes():
                    # SystemTap probe notes share the type number (3): ask for the GNU owner.
                    if note["n_type"] == "NT_GNU_BUILD_ID" and note["n_name"] == "GNU" \
                            and isinstance(note["n_desc"], str):
                        build_id = note["n_desc"]
        link = None
        sec = elf.get_section_by_name(".gnu_debuglink")
        if sec is not None:
            data = sec.data()
            end = data.find(b"\0")
            if end > 0:
                crc_at = (end + 4) & ~3
                if crc_at + 4 <= len(data):
                    link = (data[:end].decode("utf-8", "surrogateescape"),
                            int.from_bytes(data[crc_at:crc_at + 4], "little"))
    return has_info, build_id, link


def _crc32(path):
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def find_debug_file(path, build_id=None, extra_dirs=None):
    """Path of the file holding `path`'s DWARF, or None."""
    try:
        has_info, own_id, link = _elf_facts(path)
    except _ERRORS:
        return None
    if has_info:
        return path
    build_id = build_id or own_id
    dirs = debug_dirs(extra_dirs)
    if build_id and len(build_id) > 2:
        for d in dirs:
            candidate = os.path.join(d, ".build-id", build_id[:2], build_id[2:] + ".debug")
            if os.path.isfile(candidate):
                return candidate
    if link:
        name, crc = link
        here = os.path.dirname(os.path.realpath(path))
        candidates = [os.path.join(here, name), os.path.join(here, ".debug", name)]
        for d in dirs:
            candidates += [os.path.join(d, here.lstrip("/"), name), os.path.join(d, name)]
        for candidate in candidates:
            try:
                if os.path.isfile(candidate) and os.path.realpath(candidate) != os.path.realpath(path) \
                        and _crc32(candidate) == crc:
                    return candidate
            except OSError:
                continue
    return None
