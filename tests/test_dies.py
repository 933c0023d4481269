"""symbols/dies.py, the fast DIE reader, checked against pyelftools DIE by
DIE on real compiler output: every DWARF version gcc writes, 64-bit DWARF,
compressed sections, and glibc's debug file when the machine has it."""

import copy
import os
import random
import shutil
import subprocess

import pytest
from elftools.dwarf.enums import ENUM_DW_AT, ENUM_DW_TAG
from elftools.elf.elffile import ELFFile

from helpers import PROGRAMS
from libmemleak.symbols import dies
from libmemleak.symbols.dwarf import _PARSE_ERRORS as PARSE_ERRORS

SOURCE = os.path.join(PROGRAMS, "symbolize.cc")
COMPARED = {
    "DW_AT_name": dies.AT_name, "DW_AT_linkage_name": dies.AT_linkage_name,
    "DW_AT_call_file": dies.AT_call_file, "DW_AT_call_line": dies.AT_call_line,
    "DW_AT_low_pc": dies.AT_low_pc, "DW_AT_comp_dir": dies.AT_comp_dir,
}
REFS = {"DW_AT_abstract_origin": dies.AT_abstract_origin,
        "DW_AT_specification": dies.AT_specification, "DW_AT_sibling": dies.AT_sibling}


def expected_attrs(die):
    """What dies.Die.attrs should hold for a pyelftools DIE."""
    out = {}
    a = die.attributes
    for name, code in COMPARED.items():
        if name in a and a[name].form in ("DW_FORM_strp", "DW_FORM_string", "DW_FORM_line_strp",
                                          "DW_FORM_addr", "DW_FORM_data1", "DW_FORM_data2",
                                          "DW_FORM_data4", "DW_FORM_udata", "DW_FORM_sdata",
                                          "DW_FORM_implicit_const"):
            v = a[name].value
            out[code] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    for name, code in REFS.items():
        if name in a:
            attr = a[name]
            out[code] = attr.value if attr.form == "DW_FORM_ref_addr" else attr.value + die.cu.cu_offset
    if "DW_AT_high_pc" in a and "DW_AT_low_pc" in a:
        high = a["DW_AT_high_pc"]
        out[dies.AT_high_pc] = (high.value if high.form == "DW_FORM_addr"
                                else a["DW_AT_low_pc"].value + high.value)
    return out


def expected_ranges(dwarf, die):
    a = die.attributes
    if "DW_AT_low_pc" in a and "DW_AT_high_pc" in a:
        return None  # compared through the attributes
    if "DW_AT_ranges" not in a:
        return []
    rl = dwarf.range_lists()
    top = die.cu.get_top_DIE().attributes
    base = top["DW_AT_low_pc"].value if "DW_AT_low_pc" in top else 0
    out = []
    for entry in rl.get_range_list_at_offset(a["DW_AT_ranges"].value, cu=die.cu):
        kind = type(entry).__name__
        if kind == "BaseAddressEntry":
            base = entry.base_address
        elif hasattr(entry, "begin_offset"):
            add = 0 if getattr(entry, "is_absolute", False) else base
            out.append((entry.begin_offset + add, entry.end_offset + add))
    return out


def compare_file(path, max_units=None):
    with open(path, "rb") as f:
        dwarf = ELFFile(f).get_dwarf_info()
        sections = dies.Sections.from_pyelftools(dwarf)
        seen = 0
        for n, cu in enumerate(dwarf.iter_CUs()):
            if max_units is not None and n >= max_units:
                break
            unit = dies.Unit(sections, cu.cu_offset)
            for die in cu.iter_DIEs():
                if die.is_null():
                    continue
                mine = unit.die(die.offset)
                assert mine is not None, hex(die.offset)
                assert mine.tag == ENUM_DW_TAG.get(die.tag, die.tag), hex(die.offset)
                assert mine.has_children == die.has_children
                want = expected_attrs(die)
                got = {k: v for k, v in mine.attrs.items() if k in want}
                assert got == want, (hex(die.offset), die.tag)
                ranges = expected_ranges(dwarf, die)
                if ranges is not None:
                    assert unit.ranges(mine) == ranges, hex(die.offset)
                if die.tag in ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine"):
                    parents = []
                    p = die.get_parent()
                    while p is not None:
                        parents.append(p.offset)
                        p = p.get_parent()
                    assert [d.offset for d in unit.ancestors(die.offset)] == parents
                seen += 1
            # Walking children with sibling jumps visits exactly the top-level DIEs.
            top = cu.get_top_DIE()
            assert [d.offset for d in unit.children(unit.top)] == [c.offset for c in top.iter_children()]
    assert seen > 50
    return seen


assert ENUM_DW_AT["DW_AT_call_line"] == dies.AT_call_line  # our constants are DWARF's


@pytest.mark.parametrize("flags", [
    ["-gdwarf-5", "-O2"], ["-gdwarf-4", "-O2"], ["-gdwarf-5", "-O0"], ["-gdwarf-2", "-O1"],
    ["-gdwarf-5", "-gdwarf64", "-O2"], ["-gdwarf-4", "-gz", "-O2"],
], ids=lambda f: " ".join(f))
def test_reader_matches_pyelftools_on_gcc_output(tmp_path, flags):
    exe = tmp_path / "prog"
    subprocess.run(["g++", *flags, f"-I{PROGRAMS}", "-c", SOURCE, "-o", str(exe)], check=True)
    compare_file(str(exe))


def test_reader_matches_pyelftools_on_glibc_debug_file():
    from libmemleak.symbols.debugfile import find_debug_file
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    out = subprocess.run(["readelf", "-n", libc], capture_output=True, text=True).stdout
    if "Build ID:" not in out:
        pytest.skip("libc has no build-id")
    debug = find_debug_file(libc, out.split("Build ID:")[1].split()[0], None)
    if not debug or debug == libc:
        pytest.skip("no debug file for libc (libc6-dbg not installed)")
    compare_file(debug, max_units=40)


def test_garbled_and_truncated_debug_info_raises_only_what_callers_catch(tmp_path):
    """The reader's contract with symbols/dwarf.py: malformed input raises
    one of the errors it catches (a unit then answers nothing), and
    never loops forever."""
    exe = tmp_path / "prog.o"
    subprocess.run(["g++", "-g", "-O2", f"-I{PROGRAMS}", "-c", SOURCE, "-o", str(exe)], check=True)
    with open(exe, "rb") as f:
        sections = dies.Sections.from_pyelftools(ELFFile(f).get_dwarf_info())
    rng = random.Random(7)
    outcomes = {"ok": 0, "error": 0}
    for trial in range(200):
        data = bytearray(sections.info)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if trial % 3 == 0:
            del data[rng.randrange(12, len(data)):]
        garbled = copy.copy(sections)
        garbled.info = bytes(data)
        try:
            unit = dies.Unit(garbled, 0)
            todo = [unit.top] if unit.top else []
            visited = 0
            while todo and visited < 20000:
                d = todo.pop()
                visited += 1
                unit.ranges(d)
                if visited % 50 == 0:
                    unit.ancestors(d.offset)
                todo.extend(unit.children(d))
            outcomes["ok"] += 1
        except PARSE_ERRORS:
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["ok"] > 0, outcomes


@pytest.mark.skipif(not shutil.which("rustc"), reason="needs rustc")
def test_a_subtree_is_walked_once_where_no_die_names_its_sibling(tmp_path):
    """rustc writes no DW_AT_sibling: finding where a DIE's subtree ends
    meant walking it, again at every look-up that passed it -- a small
    Rust program's exit report took 12 s, 2.6 million DIEs decoded.  Where
    each subtree ends is now kept as it is first walked: looking up 300 of
    the standard library's functions decodes a DIE a few times at most on
    average (it was hundreds)."""
    import collections
    from libmemleak.symbols.dwarf import DwarfIndex
    prog = tmp_path / "rustleaks"
    subprocess.run(["rustc", "-g", "-C", "opt-level=0", "-o", str(prog), os.path.join(PROGRAMS, "rustleaks.rs")],
                   check=True, capture_output=True, timeout=300)
    symbols = subprocess.run(["nm", "-C", str(prog)], capture_output=True, text=True, check=True).stdout
    addrs = [int(line.split()[0], 16) + 8 for line in symbols.splitlines()
             if line.split()[1:2] in (["T"], ["t"]) and ("std::" in line or "alloc::" in line)][:300]
    assert len(addrs) == 300
    decoded = collections.Counter()
    die = dies.Unit.die

    def counted(unit, pos, *args, **kwargs):
        decoded[(unit.offset, pos)] += 1
        return die(unit, pos, *args, **kwargs)
    dies.Unit.die = counted
    try:
        index = DwarfIndex(str(prog))
        named = sum(1 for a in addrs if any(loc.function for loc in index.locate(a)))
    finally:
        dies.Unit.die = die
    assert named > 250
    assert sum(decoded.values()) < 10 * len(decoded), (sum(decoded.values()), len(decoded))
