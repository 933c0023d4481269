"""Call sites from DWARF: the function that contains an address,
the chain of functions inlined at it, and file:line for each.

Work is lazy and per compile unit: .debug_aranges (or, without it, the top
DIE of each unit) says which unit holds an address, and only that unit's
line table and function scopes are decoded, once.  Broken DWARF makes a
unit answer nothing; it never raises.

DIEs are read by symbols/dies.py (fast, only the attributes used here);
pyelftools provides the sections and line-program headers."""

import bisect
import operator
import os
from array import array
from itertools import islice
from dataclasses import dataclass

from elftools.common.exceptions import ELFError

import libmemleak.symbols.dies as dies
from libmemleak.symbols.demangle import demangle
from libmemleak.symbols.elfcheck import READ_ERRORS, open_elf
from libmemleak.symbols.lines import END, decode_rows

_PARSE_ERRORS = READ_ERRORS


def _source_path(path):
    """A source path as gdb prints it: normalized, but a path relative to
    the compilation directory keeps its leading "./" (Debian's packages are
    built with -fdebug-prefix-map=...=., giving "./string/strdup.c")."""
    clean = os.path.normpath(path)
    return "./" + clean if path.startswith("./") and not clean.startswith(".") else clean


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

    def __init__(self, index, unit, cu):
        # The line table, sorted by address: three flat arrays (see lines.py).
        self.addrs, self.files, self.lines = _EMPTY_ROWS
        self._line_file_base = 1
        self.unit = unit
        self._index = index
        self._files = []
        self._functions = []   # (lo, hi, Die) of the unit's function definitions
        self._scopes = {}      # function DIE offset -> its scopes, walked on demand
        self._file_base = 0 if unit.version >= 5 else 1
        try:
            self._load_lines(index._dwarf, cu)
        except _PARSE_ERRORS:
            self.addrs, self.files, self.lines = _EMPTY_ROWS
        try:
            if unit.top is not None:
                self._find_functions(unit.top)
        except _PARSE_ERRORS:
            pass
        self._functions.sort(key=lambda f: f[0])
        self._function_los = [f[0] for f in self._functions]

    # -- .debug_line -------------------------------------------------------

    def _load_lines(self, dwarf, cu):
        lp = self._line_program(dwarf, cu)
        if lp is None:
            return
        version = lp.header["version"]
        comp_dir = self.unit.top.attrs.get(dies.AT_comp_dir, "") if self.unit.top else ""
        dirs = [_s(d) for d in lp.header["include_directory"]]
        if version < 5:
            dirs = [comp_dir] + dirs
        files = []
        for entry in lp.header["file_entry"]:
            name = _s(entry.name)
            d = dirs[entry.dir_index] if entry.dir_index < len(dirs) else ""
            # Directory 0 is the compilation directory itself (DWARF 5 writes
            # it there; for 2-4 we put comp_dir there above): joining a
            # relative one with comp_dir again gave "sub/sub/x.c".
            if d and entry.dir_index > 0 and not os.path.isabs(d):
                d = os.path.join(comp_dir, d)
            files.append(_source_path(os.path.join(d, name)) if not os.path.isabs(name) else name)
        self._files = files
        self._line_file_base = 0 if version >= 5 else 1
        lp.stream.seek(lp.program_start_offset)
        data = lp.stream.read(lp.program_end_offset - lp.program_start_offset)
        addrs, files, lines, sequences = decode_rows(data, lp.header, cu["address_size"])
        self.addrs, self.files, self.lines = _in_address_order(addrs, files, lines, sequences)

    def _line_program(self, dwarf, cu):
        """pyelftools' line program of this unit.  Its public way there
        parses the unit's top DIE with pyelftools' own abbreviation tables,
        cached per unit (15 MB for 200 units of libpython); our top DIE
        already holds DW_AT_stmt_list, so go straight to the program."""
        top = self.unit.top
        parse = getattr(dwarf, "_parse_line_program_at_offset", None)
        if parse is None or top is None:
            return dwarf.line_program_for_CU(cu)
        stmt_list = top.attrs.get(dies.AT_stmt_list)
        if not isinstance(stmt_list, int) or dwarf.debug_line_sec is None:
            return None
        return parse(stmt_list, cu.structs)

    def line_at(self, addr):
        """(file, line) of the row covering addr, or None."""
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0 or self.files[i] == END:
            return None
        f = self.files[i] - self._line_file_base
        return (self._files[f] if 0 <= f < len(self._files) else None, self.lines[i])

    # -- .debug_info ---------------------------------------------------------

    def _find_functions(self, die):
        """Function definitions at unit level and in namespaces; their
        subtrees are jumped over here (by DW_AT_sibling) and walked only
        when an address falls inside."""
        for child in self.unit.children(die):
            if child.tag == dies.TAG_subprogram:
                for lo, hi in self.unit.ranges(child):
                    self._functions.append((lo, hi, child))
            elif child.tag == dies.TAG_namespace and child.has_children:
                self._find_functions(child)

    def _function_scopes(self, die):
        scopes = self._scopes.get(die.offset)
        if scopes is None:
            scopes = []
            name = self._index.name_of(self.unit, die)
            for lo, hi in self.unit.ranges(die):
                scopes.append(_Scope(lo, hi, 0, name, False, None, None))
            try:
                self._walk(die, 1, scopes)
            except _PARSE_ERRORS:
                pass
            self._scopes[die.offset] = scopes
        return scopes

    def _walk(self, die, depth, out):
        unit = self.unit
        for child in unit.children(die):
            tag = child.tag
            if tag == dies.TAG_inlined_subroutine:
                ranges = unit.ranges(child)
                if ranges:
                    name = self._index.name_of(unit, child)
                    call_file = self._file(child.attrs.get(dies.AT_call_file))
                    call_line = child.attrs.get(dies.AT_call_line)
                    for lo, hi in ranges:
                        out.append(_Scope(lo, hi, depth, name, True, call_file, call_line))
            if child.has_children and tag in (dies.TAG_inlined_subroutine, dies.TAG_lexical_block):
                self._walk(child, depth + 1, out)

    def _file(self, index):
        if not isinstance(index, int):
            return None
        i = index - self._file_base
        return self._files[i] if 0 <= i < len(self._files) else None

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


_EMPTY_ROWS = (array("Q"), array("q"), array("q"))


def _in_address_order(addrs, files, lines, sequences):
    """The rows sorted by address, a sequence's end before a row starting
    at the same address.  Each sequence is already in address order, so
    usually ordering whole sequences is enough; overlapping ones (a linker
    leaves discarded functions' sequences at address 0) take a full sort."""
    if len(sequences) > 1:
        order = sorted(sequences, key=lambda s: (addrs[s[0]], addrs[s[1] - 1]))
        if order != sequences:
            a, f, l = array("Q"), array("q"), array("q")
            for lo, hi in order:
                a.extend(addrs[lo:hi])
                f.extend(files[lo:hi])
                l.extend(lines[lo:hi])
            addrs, files, lines = a, f, l
    if all(map(operator.le, addrs, islice(addrs, 1, None))):
        return addrs, files, lines
    perm = sorted(range(len(addrs)), key=lambda i: (addrs[i], files[i] != END))
    return (array("Q", (addrs[i] for i in perm)), array("q", (files[i] for i in perm)),
            array("q", (lines[i] for i in perm)))


def _s(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


# An unnamed class or struct with a member function is, in practice, a lambda's closure type.
_ANONYMOUS = {dies.TAG_namespace: "(anonymous namespace)", dies.TAG_class_type: "{lambda}",
              dies.TAG_structure_type: "{lambda}"}
_NAMED_SCOPES = (dies.TAG_namespace, dies.TAG_class_type, dies.TAG_structure_type,
                 dies.TAG_union_type, dies.TAG_subprogram)


class DwarfIndex:
    """Address (file vaddr) -> [Location, ...] innermost first, or []."""

    def __init__(self, path):
        self.path = path
        self.error = None
        self._units = {}       # unit offset -> _Unit (or None when unreadable)
        self._readers = {}     # unit offset -> dies.Unit, also for units only names come from
        self._ranges = None    # sorted [(lo, hi, unit offset)]
        self._unit_starts = None
        try:
            self._file = open(path, "rb")
            self._elf = open_elf(self._file)
            if not self._elf.has_dwarf_info():
                raise ELFError("no DWARF")
            self._dwarf = self._elf.get_dwarf_info()
            if not self._dwarf.has_debug_info:
                raise ELFError("no .debug_info")
            self._sections = dies.Sections.from_pyelftools(self._dwarf)
        except _PARSE_ERRORS as e:
            self.error = f"{type(e).__name__}: {e}"
            self._dwarf = None

    def _unit_offset(self, addr):
        if self._ranges is None:
            self._ranges = []
            try:
                sec = self._dwarf.debug_aranges_sec
                if sec is not None:
                    self._ranges = dies.parse_aranges(sec.stream.getvalue())
            except _PARSE_ERRORS:
                self._ranges = []
            if not self._ranges:
                # Without .debug_aranges each unit's top DIE says what it covers.
                # (A unit missing from a present .debug_aranges is rare --
                # hand-written assembly -- and keeps its symbol-table name.)
                self._ranges = self._top_die_ranges()
        i = bisect.bisect_right(self._ranges, (addr, float("inf"), 0)) - 1
        while i >= 0:
            lo, hi, off = self._ranges[i]
            if lo <= addr < hi:
                return off
            i -= 1
            if addr - lo > (1 << 24):
                break
        return None

    def _top_die_ranges(self):
        out = []
        for off in dies.unit_offsets(self._sections.info):
            unit = self._reader(off)
            if unit is not None and unit.top is not None:
                try:
                    out.extend((lo, hi, off) for lo, hi in unit.ranges(unit.top))
                except _PARSE_ERRORS:
                    continue
        out.sort()
        return out

    def _reader(self, offset):
        if offset not in self._readers:
            try:
                self._readers[offset] = dies.Unit(self._sections, offset)
            except _PARSE_ERRORS:
                self._readers[offset] = None
        return self._readers[offset]

    def _unit(self, offset):
        if offset not in self._units:
            unit = self._reader(offset)
            try:
                self._units[offset] = _Unit(self, unit, self._dwarf.get_CU_at(offset)) if unit else None
            except _PARSE_ERRORS:
                self._units[offset] = None
        return self._units[offset]

    def _reader_holding(self, offset):
        """The unit whose bytes hold the DIE at `offset` (DW_FORM_ref_addr)."""
        if self._unit_starts is None:
            self._unit_starts = dies.unit_offsets(self._sections.info)
        i = bisect.bisect_right(self._unit_starts, offset) - 1
        return self._reader(self._unit_starts[i]) if i >= 0 else None

    def name_of(self, unit, die, hops=0):
        """The function's name as a debugger prints it: the demangled linkage
        name when there is one; otherwise its name qualified by the enclosing
        namespaces, classes and functions (lambdas and local classes get no
        linkage name from gcc when inlined)."""
        try:
            return self._name_of(unit, die, hops)
        except _PARSE_ERRORS:
            return None

    def _name_of(self, unit, die, hops):
        a = die.attrs
        linkage = a.get(dies.AT_linkage_name) or a.get(dies.AT_MIPS_linkage_name)
        # A mangled C++ name says more than DW_AT_name (its scope and
        # parameters).  A C function has a linkage name only from an asm
        # label, which names an internal alias (glibc's __GI___strdup for
        # __strdup): the name in the source is the one users know.
        if isinstance(linkage, str) and linkage.startswith("_Z"):
            return demangle(linkage)
        for ref in (dies.AT_abstract_origin, dies.AT_specification):
            target = a.get(ref)
            if isinstance(target, int) and hops < 8:
                owner = unit if unit.offset <= target < unit.end else self._reader_holding(target)
                other = owner.die(target) if owner is not None else None
                if other is not None:
                    found = self._name_of(owner, other, hops + 1)
                    if found:
                        return found
        name = a.get(dies.AT_name)
        if not isinstance(name, str):
            return linkage if isinstance(linkage, str) else None
        parts = [name]
        for parent in unit.parents(die):
            if parent.tag in _NAMED_SCOPES:
                if parent.tag == dies.TAG_subprogram:
                    parts.append(self.name_of(unit, parent, hops + 1) or "?")
                    break
                pname = parent.attrs.get(dies.AT_name)
                parts.append(pname if isinstance(pname, str)
                             else _ANONYMOUS.get(parent.tag, "{anonymous}"))
            if len(parts) >= 16:
                break
        return "::".join(reversed(parts))

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
