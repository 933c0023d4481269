"""DWARF's attribute and form codes, and the readers below the DIEs: LEB128
numbers, strings, the size of each form, abbreviation tables compiled into
steps (dies.py's Unit runs them), and the unit and address-range indexes.
Input is hostile: a malformed byte sequence raises DieError (or IndexError
from a read past the end)."""

import struct

# Attributes
AT_sibling, AT_name, AT_stmt_list, AT_low_pc, AT_high_pc = 0x01, 0x03, 0x10, 0x11, 0x12
AT_comp_dir, AT_abstract_origin, AT_specification, AT_ranges = 0x1b, 0x31, 0x47, 0x55
AT_call_file, AT_call_line, AT_linkage_name = 0x58, 0x59, 0x6e
AT_str_offsets_base, AT_addr_base, AT_rnglists_base = 0x72, 0x73, 0x74
AT_MIPS_linkage_name = 0x2007
WANTED = frozenset((AT_sibling, AT_name, AT_low_pc, AT_high_pc, AT_abstract_origin,
                    AT_specification, AT_ranges, AT_call_file, AT_call_line, AT_linkage_name,
                    AT_MIPS_linkage_name, AT_comp_dir, AT_stmt_list, AT_str_offsets_base,
                    AT_addr_base, AT_rnglists_base))
# A high_pc of a constant form is an offset from low_pc (DWARF 4+); kept apart.
AT_high_pc_offset = -AT_high_pc

# Forms
F_addr, F_block2, F_block4, F_data2, F_data4, F_data8 = 0x01, 0x03, 0x04, 0x05, 0x06, 0x07
F_string, F_block, F_block1, F_data1, F_flag, F_sdata = 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d
F_strp, F_udata, F_ref_addr, F_ref1, F_ref2, F_ref4 = 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13
F_ref8, F_ref_udata, F_indirect, F_sec_offset, F_exprloc = 0x14, 0x15, 0x16, 0x17, 0x18
F_flag_present, F_strx, F_addrx, F_ref_sup4, F_strp_sup = 0x19, 0x1a, 0x1b, 0x1c, 0x1d
F_data16, F_line_strp, F_ref_sig8, F_implicit_const = 0x1e, 0x1f, 0x20, 0x21
F_loclistx, F_rnglistx, F_ref_sup8 = 0x22, 0x23, 0x24
F_strx1, F_strx2, F_strx3, F_strx4 = 0x25, 0x26, 0x27, 0x28
F_addrx1, F_addrx2, F_addrx3, F_addrx4 = 0x29, 0x2a, 0x2b, 0x2c
F_GNU_addr_index, F_GNU_str_index, F_GNU_ref_alt, F_GNU_strp_alt = 0x1f01, 0x1f02, 0x1f20, 0x1f21

_CONSTANT_FORMS = frozenset((F_data1, F_data2, F_data4, F_data8, F_sdata, F_udata,
                             F_implicit_const))
U16, U32, U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")


class DieError(ValueError):
    """The DWARF is malformed."""


def uleb(data, pos):
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    result, shift = b & 0x7f, 7
    while True:
        pos += 1
        b = data[pos]
        result |= (b & 0x7f) << shift
        if b < 0x80:
            return result, pos + 1
        shift += 7
        if shift > 70:
            raise DieError("LEB128 number too long")


def sleb(data, pos):
    result, shift = 0, 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7f) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                result -= 1 << shift
            return result, pos
        if shift > 70:
            raise DieError("LEB128 number too long")


def cstring(data, pos):
    end = data.find(b"\0", pos)
    if end < 0:
        raise DieError("unterminated string")
    return data[pos:end].decode("utf-8", "replace")



_FIXED = {F_data1: 1, F_ref1: 1, F_flag: 1, F_strx1: 1, F_addrx1: 1,
          F_data2: 2, F_ref2: 2, F_strx2: 2, F_addrx2: 2, F_strx3: 3, F_addrx3: 3,
          F_data4: 4, F_ref4: 4, F_strx4: 4, F_addrx4: 4, F_ref_sup4: 4,
          F_data8: 8, F_ref8: 8, F_ref_sig8: 8, F_ref_sup8: 8, F_data16: 16,
          F_flag_present: 0, F_implicit_const: 0}


def _fixed_size(form, unit):
    """Bytes an attribute of `form` takes, when that does not depend on its content."""
    if form in _FIXED:
        return _FIXED[form]
    if form == F_addr:
        return unit.address_size
    if form in (F_strp, F_line_strp, F_sec_offset, F_strp_sup, F_GNU_ref_alt, F_GNU_strp_alt):
        return unit.offset_size
    if form == F_ref_addr:
        return unit.ref_addr_size
    return None


def skip_size(form, unit, info, pos):
    """Bytes taken by a variable-size attribute nobody asked for."""
    fixed = _fixed_size(form, unit)
    if fixed is not None:
        return fixed
    if form in (F_udata, F_sdata, F_ref_udata, F_strx, F_addrx, F_loclistx, F_rnglistx,
                F_GNU_addr_index, F_GNU_str_index):
        return uleb(info, pos)[1] - pos
    if form == F_string:
        end = info.find(b"\0", pos)
        if end < 0:
            raise DieError("unterminated string")
        return end + 1 - pos
    if form in (F_block, F_exprloc):
        n, p = uleb(info, pos)
        return p - pos + n
    if form == F_block1:
        return 1 + info[pos]
    if form == F_block2:
        return 2 + U16.unpack_from(info, pos)[0]
    if form == F_block4:
        return 4 + U32.unpack_from(info, pos)[0]
    raise DieError(f"unknown attribute form 0x{form:x}")


_abbrev_cache = {}


def parse_abbrevs(data, offset, unit):
    """code -> (tag, has_children, steps); a step is an int (bytes to skip)
    or (attribute, form, implicit constant) to decode."""
    key = (id(data), offset, unit.address_size, unit.offset_size, unit.version)
    hit = _abbrev_cache.get(key)
    if hit is not None and hit[0] is data:
        return hit[1]
    table = {}
    pos = offset
    while True:
        code, pos = uleb(data, pos)
        if code == 0:
            break
        tag, pos = uleb(data, pos)
        has_children = bool(data[pos])
        pos += 1
        steps = []
        while True:
            at, pos = uleb(data, pos)
            form, pos = uleb(data, pos)
            const = None
            if form == F_implicit_const:
                const, pos = sleb(data, pos)
            if at == 0 and form == 0:
                break
            fixed = _fixed_size(form, unit)
            if at == AT_high_pc and form in _CONSTANT_FORMS:
                at = AT_high_pc_offset
            elif at not in WANTED and fixed is not None:
                if steps and steps[-1].__class__ is int:
                    steps[-1] += fixed
                elif fixed:
                    steps.append(fixed)
                continue
            steps.append((at, form, const))
        table[code] = (tag, has_children, tuple(steps))
        if len(table) > 1_000_000:
            raise DieError("abbreviation table too long")
    if len(_abbrev_cache) > 4096:
        _abbrev_cache.clear()
    _abbrev_cache[key] = (data, table)
    return table


def unit_offsets(info):
    """Offsets of every unit in .debug_info (headers only, cheap)."""
    out, pos = [], 0
    while pos + 4 <= len(info):
        out.append(pos)
        length = U32.unpack_from(info, pos)[0]
        if length == 0xffffffff:
            length = U64.unpack_from(info, pos + 4)[0] + 8
        elif length >= 0xfffffff0:
            break
        pos += 4 + length
    return out


def parse_aranges(data):
    """.debug_aranges -> sorted [(lo, hi, unit offset)]."""
    out, pos = [], 0
    while pos + 4 <= len(data):
        start = pos
        length = U32.unpack_from(data, pos)[0]
        pos += 4
        offset_size = 4
        if length == 0xffffffff:
            length = U64.unpack_from(data, pos)[0]
            pos += 8
            offset_size = 8
        end = pos + length
        if length == 0 or end > len(data):
            break
        pos += 2  # version
        cu = (U32 if offset_size == 4 else U64).unpack_from(data, pos)[0]
        pos += offset_size
        addr_size, seg_size = data[pos], data[pos + 1]
        pos += 2
        if addr_size not in (4, 8) or seg_size:
            pos = end
            continue
        tuple_size = 2 * addr_size
        pos = start + ((pos - start + tuple_size - 1) // tuple_size) * tuple_size
        fmt = struct.Struct("<QQ" if addr_size == 8 else "<II")
        n = (end - pos) // tuple_size
        for lo, size in fmt.iter_unpack(data[pos:pos + n * tuple_size]):
            if lo == 0 and size == 0:
                break
            if size:
                out.append((lo, lo + size, cu))
        pos = end
    out.sort()
    return out
