"""A small, fast reader of DWARF debugging information entries (DIEs),
versions 2 to 5, for the few attributes symbolization needs.

pyelftools builds every attribute of every DIE through its generic
`construct` parser: about 100 µs per DIE, which made the first report of a
program with a few thousand functions take seconds.  Here each abbreviation
is compiled once into a list of steps -- "skip N bytes" for fixed-size
attributes nobody asked for, "decode" for the wanted ones -- so a DIE costs
a few microseconds.  Everything else (unit headers, sections, compression)
still comes from pyelftools.

Input is hostile: any malformed byte sequence raises DieError (or IndexError
from a read past the end), which callers turn into "no answer"."""

import bisect
from array import array

from libmemleak.symbols.dwarf_forms import (  # noqa: F401 -- (AT_*, unit_offsets...: read as dies.X)
    AT_MIPS_linkage_name, AT_abstract_origin, AT_addr_base, AT_call_file, AT_call_line, AT_comp_dir,
    AT_high_pc, AT_high_pc_offset, AT_linkage_name, AT_low_pc, AT_name, AT_ranges, AT_rnglists_base,
    AT_sibling, AT_specification, AT_stmt_list, AT_str_offsets_base, DieError, F_GNU_addr_index,
    F_GNU_ref_alt, F_GNU_str_index, F_GNU_strp_alt, F_addr, F_addrx, F_addrx1, F_addrx2, F_addrx3,
    F_addrx4, F_block, F_block1, F_block2, F_block4, F_data1, F_data16, F_data2, F_data4, F_data8,
    F_exprloc, F_flag, F_flag_present, F_implicit_const, F_indirect, F_line_strp, F_loclistx, F_ref1,
    F_ref2, F_ref4, F_ref8, F_ref_addr, F_ref_sig8, F_ref_sup4, F_ref_sup8, F_ref_udata, F_rnglistx,
    F_sdata, F_sec_offset, F_string, F_strp, F_strp_sup, F_strx, F_strx1, F_strx2, F_strx3, F_strx4,
    F_udata, WANTED, U16, U32, U64, parse_abbrevs, skip_size, cstring, parse_aranges, sleb, uleb,
    unit_offsets)

# Tags
TAG_class_type, TAG_lexical_block, TAG_compile_unit = 0x02, 0x0b, 0x11
TAG_structure_type, TAG_union_type, TAG_inlined_subroutine = 0x13, 0x17, 0x1d
TAG_subprogram, TAG_namespace, TAG_partial_unit = 0x2e, 0x39, 0x3c

# What symbolization walks and names through; only these DIEs are cached.
_SCOPE_TAGS = frozenset((TAG_compile_unit, TAG_partial_unit, TAG_subprogram, TAG_namespace,
                         TAG_class_type, TAG_structure_type, TAG_union_type,
                         TAG_inlined_subroutine, TAG_lexical_block))

class Sections:
    """The raw bytes of the DWARF sections one reader needs (missing ones empty)."""

    def __init__(self, info, abbrev, str_=b"", line_str=b"", str_offsets=b"", addr=b"",
                 rnglists=b"", ranges=b""):
        self.info, self.abbrev, self.str, self.line_str = info, abbrev, str_, line_str
        self.str_offsets, self.addr, self.rnglists, self.ranges = str_offsets, addr, rnglists, ranges

    @classmethod
    def from_pyelftools(cls, dwarf):
        def raw(name):
            sec = getattr(dwarf, name, None)
            if sec is None:
                return b""
            return sec.stream.getvalue() if hasattr(sec.stream, "getvalue") else (
                sec.stream.seek(0) or sec.stream.read())
        return cls(raw("debug_info_sec"), raw("debug_abbrev_sec"), raw("debug_str_sec"),
                   raw("debug_line_str_sec"), raw("debug_str_offsets_sec"), raw("debug_addr_sec"),
                   raw("debug_rnglists_sec"), raw("debug_ranges_sec"))


class Die:
    __slots__ = ("offset", "tag", "has_children", "attrs", "end", "parent")

    def __init__(self, offset, tag, has_children, attrs, end, parent):
        self.offset = offset          # in .debug_info
        self.tag = tag
        self.has_children = has_children
        self.attrs = attrs            # attribute code -> value (refs made absolute)
        self.end = end                # where the next DIE (first child or sibling) starts
        self.parent = parent          # offset of the parent DIE, or None if not known


class Unit:
    """One compile unit: its header, abbreviations and the bases its
    indexed forms (DWARF 5 strx/addrx/rnglistx) are relative to."""

    def __init__(self, sections, offset):
        self.sec = sections
        self.offset = offset
        info = sections.info
        length = U32.unpack_from(info, offset)[0]
        pos = offset + 4
        self.offset_size = 4
        if length == 0xffffffff:
            length = U64.unpack_from(info, pos)[0]
            pos += 8
            self.offset_size = 8
        elif length >= 0xfffffff0:
            raise DieError("reserved unit length")
        self.end = pos + length
        if self.end > len(info):
            raise DieError("unit runs past the end of .debug_info")
        self.version = U16.unpack_from(info, pos)[0]
        pos += 2
        if not 2 <= self.version <= 5:
            raise DieError(f"DWARF version {self.version}")
        if self.version >= 5:
            unit_type = info[pos]
            self.address_size = info[pos + 1]
            abbrev_off = self._offset(info, pos + 2)
            pos += 2 + self.offset_size
            if unit_type in (0x02, 0x06):  # type and split type units carry a signature + offset
                pos += 8 + self.offset_size
            elif unit_type in (0x04, 0x05):  # skeleton and split compile units: a DWO id
                pos += 8
        else:
            abbrev_off = self._offset(info, pos)
            self.address_size = info[pos + self.offset_size]
            pos += self.offset_size + 1
        if self.address_size not in (4, 8):
            raise DieError(f"address size {self.address_size}")
        self.ref_addr_size = self.address_size if self.version == 2 else self.offset_size
        self.first_die = pos
        self.abbrevs = parse_abbrevs(sections.abbrev, abbrev_off, self)
        self.str_offsets_base = 8 if self.offset_size == 4 else 16
        self.addr_base = 8
        self.rnglists_base = None
        self._dies = {}
        self._children_at = {}  # scope offset -> its children's offsets (see ancestors)
        self._ends = {}         # offset of a DIE with children and no DW_AT_sibling -> past its subtree
        top = self.die(self.first_die)
        if top is not None:
            a = top.attrs
            self.str_offsets_base = a.get(AT_str_offsets_base, self.str_offsets_base)
            self.addr_base = a.get(AT_addr_base, self.addr_base)
            self.rnglists_base = a.get(AT_rnglists_base)
            self._dies.clear()  # indexed values in the top DIE may have used the defaults
        self.top = self.die(self.first_die)

    def _offset(self, data, pos):
        return (U32 if self.offset_size == 4 else U64).unpack_from(data, pos)[0]

    # -- indexed values (DWARF 5) ------------------------------------------

    def str_index(self, index):
        s = self.sec.str_offsets
        pos = self.str_offsets_base + index * self.offset_size
        return cstring(self.sec.str, self._offset(s, pos))

    def addr_index(self, index):
        pos = self.addr_base + index * self.address_size
        return (U32 if self.address_size == 4 else U64).unpack_from(self.sec.addr, pos)[0]

    # -- DIEs --------------------------------------------------------------

    def die(self, offset, parent=None, keep=True):
        """The DIE at `offset` (None for a null entry).  A scope asked for
        by offset (a function, a class a name is qualified by) is cached.
        DIEs met while walking (keep=False) and everything else -- types,
        variables, declarations: most DIEs -- are parsed again if asked for
        again, which is rare, instead of being kept by the hundred thousand
        (60 MB for 200 units of libpython)."""
        d = self._dies.get(offset)
        if d is not None:
            if d.parent is None and parent is not None:
                d.parent = parent
            return d
        info = self.sec.info
        code, pos = uleb(info, offset)
        if code == 0:
            return None
        ab = self.abbrevs.get(code)
        if ab is None:
            raise DieError(f"unknown abbreviation {code} at 0x{offset:x}")
        tag, has_children, steps = ab
        attrs = {}
        for step in steps:
            if step.__class__ is int:
                pos += step
            else:
                at, form, const = step
                value, pos = self._value(info, pos, form, const)
                attrs[at] = value
        if pos > self.end:
            raise DieError(f"DIE at 0x{offset:x} runs past its unit")
        hi = attrs.pop(AT_high_pc_offset, None)
        if hi is not None and AT_low_pc in attrs:
            attrs[AT_high_pc] = attrs[AT_low_pc] + hi
        d = Die(offset, tag, has_children, attrs, pos, parent)
        if keep and tag in _SCOPE_TAGS:
            self._dies[offset] = d
        return d

    def _value(self, info, pos, form, const):
        if form == F_strp or form == F_line_strp:
            off = self._offset(info, pos)
            sec = self.sec.str if form == F_strp else self.sec.line_str
            return cstring(sec, off), pos + self.offset_size
        if form == F_ref4:
            return self.offset + U32.unpack_from(info, pos)[0], pos + 4
        if form == F_addr:
            if self.address_size == 8:
                return U64.unpack_from(info, pos)[0], pos + 8
            return U32.unpack_from(info, pos)[0], pos + 4
        if form == F_data1 or form == F_flag or form == F_ref1:
            v = info[pos]
            return (self.offset + v if form == F_ref1 else v), pos + 1
        if form == F_data2 or form == F_ref2:
            v = U16.unpack_from(info, pos)[0]
            return (self.offset + v if form == F_ref2 else v), pos + 2
        if form == F_data4:
            return U32.unpack_from(info, pos)[0], pos + 4
        if form == F_data8 or form == F_ref8:
            v = U64.unpack_from(info, pos)[0]
            return (self.offset + v if form == F_ref8 else v), pos + 8
        if form == F_udata or form == F_ref_udata:
            v, pos = uleb(info, pos)
            return (self.offset + v if form == F_ref_udata else v), pos
        if form == F_sdata:
            return sleb(info, pos)
        if form == F_implicit_const:
            return const, pos
        if form == F_flag_present:
            return 1, pos
        if form == F_string:
            end = info.find(b"\0", pos)
            if end < 0:
                raise DieError("unterminated string")
            return info[pos:end].decode("utf-8", "replace"), end + 1
        if form == F_sec_offset:
            return self._offset(info, pos), pos + self.offset_size
        if form == F_ref_addr:
            n = self.ref_addr_size
            return (U32 if n == 4 else U64).unpack_from(info, pos)[0], pos + n
        if F_strx1 <= form <= F_strx4 or form in (F_strx, F_GNU_str_index):
            index, pos = self._index(info, pos, form, F_strx1)
            return self.str_index(index), pos
        if F_addrx1 <= form <= F_addrx4 or form in (F_addrx, F_GNU_addr_index):
            index, pos = self._index(info, pos, form, F_addrx1)
            return self.addr_index(index), pos
        if form == F_rnglistx or form == F_loclistx:
            v, pos = uleb(info, pos)
            return ("index", v), pos
        if form == F_indirect:
            real, pos = uleb(info, pos)
            if real == F_indirect:
                raise DieError("indirect form of an indirect form")
            const = None
            if real == F_implicit_const:
                raise DieError("implicit_const through indirect")
            return self._value(info, pos, real, const)
        size = skip_size(form, self, info, pos)
        return None, pos + size

    @staticmethod
    def _index(info, pos, form, first):
        if form < first or form > first + 3:
            return uleb(info, pos)
        n = form - first + 1
        return int.from_bytes(info[pos:pos + n], "little"), pos + n

    def children(self, die):
        """The children of `die`, in order.  A child's subtree is jumped over
        by DW_AT_sibling when it has one, else parsed through."""
        if not die.has_children:
            return
        pos = die.end
        end = self.end
        depth_guard = 0
        while pos < end:
            child = self.die(pos, die.offset, keep=False)
            if child is None:
                return
            yield child
            pos = self._after(child)
            depth_guard += 1
            if depth_guard > 10_000_000:
                raise DieError("too many DIEs")

    def _after(self, die):
        """Offset just past `die` and its whole subtree."""
        if not die.has_children:
            return die.end
        sib = die.attrs.get(AT_sibling)
        if sib is not None and die.end <= sib <= self.end:
            return sib
        ends = self._ends
        known = ends.get(die.offset)
        if known is not None:
            return known
        # Walked through once, and where every subtree in it ends kept:
        # compilers that write no DW_AT_sibling (rustc) made each look-up
        # walk whole subtrees again -- 12 s of a small Rust program's exit
        # report, 2.6 million DIEs decoded.
        pos, info, abbrevs = die.end, self.sec.info, self.abbrevs
        open_ = [die.offset]  # the DIEs whose children are being read, innermost last
        while open_:
            if pos >= self.end:
                raise DieError("children run past the unit")
            code, p = uleb(info, pos)
            if code == 0:
                ends[open_.pop()] = pos = p
                continue
            d = self.die(pos, keep=False)
            if abbrevs[code][1]:
                s = d.attrs.get(AT_sibling)
                if s is not None and d.end <= s <= self.end:
                    pos = s
                    continue
                known = ends.get(d.offset)
                if known is not None:
                    pos = known
                    continue
                open_.append(d.offset)
            pos = d.end
        return ends[die.offset]

    def parents(self, die):
        """The DIEs enclosing `die`, innermost first: by the parent links
        that walking down left, else found by descending from the top."""
        out = []
        while die.parent is not None and len(out) < 1000:
            die = self.die(die.parent)
            out.append(die)
        if die.offset != self.first_die:
            found = self.ancestors(die.offset)
            if found:
                die.parent = found[0].offset  # a cached DIE: next time by link
            out.extend(found)
        return out

    def ancestors(self, target):
        """The DIEs enclosing the DIE at `target`, innermost first, found by
        descending from the top: at each level the child holding `target`
        is the last one starting at or before it (children's offsets are
        listed once per scope descended into)."""
        path = []
        die = self.top
        while die is not None and die.offset != target:
            path.append(die)
            offsets = self._child_offsets(die)
            i = bisect.bisect_right(offsets, target) - 1
            if i < 0:
                return []
            if offsets[i] == target:
                return path[::-1]
            child = self.die(offsets[i], die.offset)
            if child is None or not child.offset < target < self._after(child):
                return []
            die = child
        return path[::-1] if die is not None else []

    def _child_offsets(self, die):
        offsets = self._children_at.get(die.offset)
        if offsets is None:
            offsets = self._children_at[die.offset] = array("Q", (
                c.offset for c in self.children(die)))
        return offsets

    # -- ranges --------------------------------------------------------------

    def ranges(self, die):
        """[(lo, hi), ...] covered by `die` (from low/high_pc or DW_AT_ranges)."""
        a = die.attrs
        lo = a.get(AT_low_pc)
        if lo is not None and AT_high_pc in a:
            return [(lo, a[AT_high_pc])]
        r = a.get(AT_ranges)
        if r is None:
            return []
        base = self.top.attrs.get(AT_low_pc, 0) if self.top is not None else 0
        if self.version >= 5:
            if isinstance(r, tuple):  # rnglistx
                if self.rnglists_base is None:
                    return []
                pos = self.rnglists_base + r[1] * self.offset_size
                r = self.rnglists_base + self._offset(self.sec.rnglists, pos)
            return self._rnglist(r, base)
        return self._ranges_v4(r, base)

    def _ranges_v4(self, pos, base):
        data, out = self.sec.ranges, []
        fmt = U64 if self.address_size == 8 else U32
        n = self.address_size
        all_ones = (1 << (8 * n)) - 1
        for _ in range(100_000):
            lo = fmt.unpack_from(data, pos)[0]
            hi = fmt.unpack_from(data, pos + n)[0]
            pos += 2 * n
            if lo == 0 and hi == 0:
                return out
            if lo == all_ones:
                base = hi
            else:
                out.append((base + lo, base + hi))
        raise DieError("range list too long")

    def _rnglist(self, pos, base):
        data, out = self.sec.rnglists, []
        fmt = U64 if self.address_size == 8 else U32
        n = self.address_size
        for _ in range(100_000):
            kind = data[pos]
            pos += 1
            if kind == 0:  # end_of_list
                return out
            if kind == 1:  # base_addressx
                i, pos = uleb(data, pos)
                base = self.addr_index(i)
            elif kind == 2:  # startx_endx
                i, pos = uleb(data, pos)
                j, pos = uleb(data, pos)
                out.append((self.addr_index(i), self.addr_index(j)))
            elif kind == 3:  # startx_length
                i, pos = uleb(data, pos)
                length, pos = uleb(data, pos)
                start = self.addr_index(i)
                out.append((start, start + length))
            elif kind == 4:  # offset_pair
                a, pos = uleb(data, pos)
                b, pos = uleb(data, pos)
                out.append((base + a, base + b))
            elif kind == 5:  # base_address
                base = fmt.unpack_from(data, pos)[0]
                pos += n
            elif kind == 6:  # start_end
                a = fmt.unpack_from(data, pos)[0]
                b = fmt.unpack_from(data, pos + n)[0]
                pos += 2 * n
                out.append((a, b))
            elif kind == 7:  # start_length
                a = fmt.unpack_from(data, pos)[0]
                length, pos = uleb(data, pos + n)
                out.append((a, a + length))
            else:
                raise DieError(f"range list entry kind {kind}")
        raise DieError("range list too long")


