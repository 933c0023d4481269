"""Call sites from DWARF (pyelftools): the function that contains an address,
the chain of functions inlined at it, and file:line for each.

Work is lazy and per compile unit: .debug_aranges (or, without it, the top
DIE of each unit) says which unit holds an address, and only that unit's
line table and function scopes are decoded, once.  Broken DWARF makes a
unit answer nothing; it never raises."""

import bisect
import os
from dataclasses import dataclass

from elftools.common.exceptions import DWARFError, ELFError
from elftools.elf.elffile import ELFFile

from libmemleak.symbols.demangle import demangle
from libmemleak.symbols.lines import decode_rows

_PARSE_ERRORS = (DWARFError, ELFError, KeyError, IndexError, ValueError, AttributeError,
                 AssertionError, TypeError, OSError, UnicodeDecodeError)


@dataclass(frozen=True)
class Location:
    function: str | None
    file: str | None
    line: int | None
    inlined: bool


@dataclass
class _Scope:
    lo: int
    hi: int
    depth: int
    name: str | None
    inlined: bool
    call_file: str | None
    call_line: int | None


class _Unit:
    """What one compile unit knows: its line table and function scopes."""

    def __init__(self, dwarf, cu):
        self.addrs, self.rows = [], []  # rows: (file, line) or None at a sequence end
        self._dwarf = dwarf
        self._files = []
        self._functions = []   # (lo, hi, DIE) of the unit's function definitions
        self._scopes = {}      # function DIE offset -> its scopes, walked on demand
        try:
            self._load_lines(dwarf, cu)
        except _PARSE_ERRORS:
            self.addrs, self.rows = [], []
        try:
            self._find_functions(cu.get_top_DIE())
        except _PARSE_ERRORS:
            pass
        self._functions.sort(key=lambda f: f[0])
        self._function_los = [f[0] for f in self._functions]

    # -- .debug_line -------------------------------------------------------

    def _load_lines(self, dwarf, cu):
        lp = dwarf.line_program_for_CU(cu)
        if lp is None:
            return
        version = lp.header["version"]
        comp_dir = _attr_str(cu.get_top_DIE(), "DW_AT_comp_dir") or ""
        dirs = [_s(d) for d in lp.header["include_directory"]]
        if version < 5:
            dirs = [comp_dir] + dirs
        files = []
        for entry in lp.header["file_entry"]:
            name = _s(entry.name)
            d = dirs[entry.dir_index] if entry.dir_index < len(dirs) else ""
            if d and not os.path.isabs(d):
                d = os.path.join(comp_dir, d)
            files.append(os.path.normpath(os.path.join(d, name)) if not os.path.isabs(name) else name)
        self._files = files
        base = 0 if version >= 5 else 1
        lp.stream.seek(lp.program_start_offset)
        data = lp.stream.read(lp.program_end_offset - lp.program_start_offset)
        rows = []
        for address, file, line, end in decode_rows(data, lp.header, cu["address_size"]):
            if end:
                rows.append((address, None))
            else:
                idx = file - base
                rows.append((address, (files[idx] if 0 <= idx < len(files) else None, line)))
        rows.sort(key=lambda r: (r[0], r[1] is not None))  # an end, then a start at one address
        self.addrs = [r[0] for r in rows]
        self.rows = [r[1] for r in rows]

    def file_name(self, index, version_base):
        i = index - version_base
        return self._files[i] if 0 <= i < len(self._files) else None

    def line_at(self, addr):
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0:
            return None
        return self.rows[i]

    # -- .debug_info ---------------------------------------------------------

    def _find_functions(self, die):
        """Function definitions at unit level and in namespaces; their
        subtrees are skipped here (pyelftools jumps over them by
        DW_AT_sibling) and walked only when an address falls inside."""
        for child in die.iter_children():
            if child.tag == "DW_TAG_subprogram":
                for lo, hi in _die_ranges(self._dwarf, child):
                    self._functions.append((lo, hi, child))
            elif child.tag == "DW_TAG_namespace" and child.has_children:
                self._find_functions(child)

    def _function_scopes(self, die):
        scopes = self._scopes.get(die.offset)
        if scopes is None:
            scopes = []
            for lo, hi in _die_ranges(self._dwarf, die):
                scopes.append(_Scope(lo, hi, 0, _die_name(die), False, None, None))
            try:
                self._walk(die, 1, scopes)
            except _PARSE_ERRORS:
                pass
            self._scopes[die.offset] = scopes
        return scopes

    def _walk(self, die, depth, out):
        for child in die.iter_children():
            tag = child.tag
            if tag == "DW_TAG_inlined_subroutine":
                for lo, hi in _die_ranges(self._dwarf, child):
                    out.append(_Scope(lo, hi, depth, _die_name(child), True,
                                      self._call_file(child), _attr_int(child, "DW_AT_call_line")))
            if child.has_children and tag in ("DW_TAG_inlined_subroutine", "DW_TAG_lexical_block"):
                self._walk(child, depth + 1, out)

    def _call_file(self, die):
        index = _attr_int(die, "DW_AT_call_file")
        if index is None:
            return None
        version = die.cu["version"]
        return self.file_name(index, 0 if version >= 5 else 1)

    def chain_at(self, addr):
        """Scopes containing addr, innermost first, up to the physical function."""
        found = []
        # Function ranges do not overlap: the candidate is the last one
        # starting at or below addr (a few more back for split functions).
        i = bisect.bisect_right(self._function_los, addr) - 1
        for lo, hi, die in self._functions[max(i - 3, 0):i + 1][::-1]:
            if lo <= addr < hi:
                found = [s for s in self._function_scopes(die) if s.lo <= addr < s.hi]
                break
        found.sort(key=lambda s: -s.depth)
        out = []
        for s in found:
            out.append(s)
            if not s.inlined:
                break
        return out


def _s(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


def _attr_str(die, name):
    a = die.attributes.get(name)
    return _s(a.value) if a is not None else None


def _attr_int(die, name):
    a = die.attributes.get(name)
    return a.value if a is not None and isinstance(a.value, int) else None


# An unnamed class or struct with a member function is, in practice, a lambda's closure type.
_ANONYMOUS = {"DW_TAG_namespace": "(anonymous namespace)", "DW_TAG_class_type": "{lambda}",
              "DW_TAG_structure_type": "{lambda}"}
_NAMED_SCOPES = ("DW_TAG_namespace", "DW_TAG_class_type", "DW_TAG_structure_type",
                 "DW_TAG_union_type", "DW_TAG_subprogram")


def _die_name(die, hops=0):
    """The function's name as a debugger prints it: the demangled linkage
    name when there is one; otherwise its name qualified by the enclosing
    namespaces, classes and functions (lambdas and local classes get no
    linkage name from gcc when inlined)."""
    for attr in ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name"):
        if attr in die.attributes:
            return demangle(_s(die.attributes[attr].value))
    for ref in ("DW_AT_abstract_origin", "DW_AT_specification"):
        if ref in die.attributes and hops < 8:
            try:
                return _die_name(die.get_DIE_from_attribute(ref), hops + 1)
            except _PARSE_ERRORS:
                pass
    name = _attr_str(die, "DW_AT_name")
    if name is None or die.cu["version"] < 2:
        return name
    parts = [name]
    try:
        parent = die.get_parent()
        while parent is not None and len(parts) < 16:
            if parent.tag in _NAMED_SCOPES:
                if parent.tag == "DW_TAG_subprogram":
                    parts.append(_die_name(parent, hops + 1) or "?")
                    break
                parts.append(_attr_str(parent, "DW_AT_name") or _ANONYMOUS.get(parent.tag, "{anonymous}"))
            parent = parent.get_parent()
    except _PARSE_ERRORS:
        return name
    return "::".join(reversed(parts))


def _die_ranges(dwarf, die):
    attrs = die.attributes
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        lo = attrs["DW_AT_low_pc"].value
        high = attrs["DW_AT_high_pc"]
        hi = high.value if high.form == "DW_FORM_addr" else lo + high.value
        return [(lo, hi)]
    if "DW_AT_ranges" in attrs:
        rl = dwarf.range_lists()
        if rl is None:
            return []
        base = _cu_base(die.cu)
        out = []
        for entry in rl.get_range_list_at_offset(attrs["DW_AT_ranges"].value, cu=die.cu):
            kind = type(entry).__name__
            if kind == "BaseAddressEntry":
                base = entry.base_address
            elif hasattr(entry, "begin_offset"):
                absolute = getattr(entry, "is_absolute", False)
                add = 0 if absolute else base
                out.append((entry.begin_offset + add, entry.end_offset + add))
        return out
    return []


def _cu_base(cu):
    top = cu.get_top_DIE()
    low = top.attributes.get("DW_AT_low_pc")
    return low.value if low is not None else 0


class DwarfIndex:
    """Address (file vaddr) -> [Location, ...] innermost first, or []."""

    def __init__(self, path):
        self.path = path
        self.error = None
        self._units = {}
        self._ranges = None  # sorted [(lo, hi, cu_offset)]
        self._aranges = None
        try:
            self._file = open(path, "rb")
            self._elf = ELFFile(self._file)
            if not self._elf.has_dwarf_info():
                raise ELFError("no DWARF")
            self._dwarf = self._elf.get_dwarf_info()
            if not self._dwarf.has_debug_info:
                raise ELFError("no .debug_info")
        except _PARSE_ERRORS as e:
            self.error = f"{type(e).__name__}: {e}"
            self._dwarf = None

    def _unit_offset(self, addr):
        if self._aranges is None and self._ranges is None:
            try:
                self._aranges = self._dwarf.get_aranges() or False
            except _PARSE_ERRORS:
                self._aranges = False
            if not self._aranges:
                self._ranges = self._build_ranges()
        if self._aranges:
            # A unit missing from .debug_aranges is rare (hand-written
            # assembly); finding it would mean parsing every unit's top DIE
            # (18 s for glibc's debug file), so such an address keeps its
            # symbol-table name instead.
            try:
                return self._aranges.cu_offset_at_addr(addr)
            except _PARSE_ERRORS:
                return None
        i = bisect.bisect_right(self._ranges, (addr, float("inf"), 0)) - 1
        while i >= 0:
            lo, hi, off = self._ranges[i]
            if lo <= addr < hi:
                return off
            i -= 1
            if addr - lo > (1 << 24):
                break
        return None

    def _build_ranges(self):
        out = []
        try:
            for cu in self._dwarf.iter_CUs():
                try:
                    for lo, hi in _die_ranges(self._dwarf, cu.get_top_DIE()):
                        out.append((lo, hi, cu.cu_offset))
                except _PARSE_ERRORS:
                    continue
        except _PARSE_ERRORS:
            pass
        out.sort()
        return out

    def _unit(self, offset):
        unit = self._units.get(offset)
        if unit is None:
            try:
                cu = self._dwarf.get_CU_at(offset)
                unit = _Unit(self._dwarf, cu)
            except _PARSE_ERRORS:
                unit = None
            self._units[offset] = unit
        return unit

    def locate(self, addr):
        if self._dwarf is None:
            return []
        offset = self._unit_offset(addr)
        if offset is None:
            return []
        unit = self._unit(offset)
        if unit is None:
            return []
        row = unit.line_at(addr)
        file, line = row if row else (None, None)
        out = []
        for scope in unit.chain_at(addr):
            out.append(Location(scope.name, file, line, scope.inlined))
            if scope.inlined:
                file, line = scope.call_file, scope.call_line
        if not out and row:
            out.append(Location(None, file, line, False))
        return out
