"""Symbol lookup on real compiled binaries."""

import os
import subprocess

from helpers import compile_program
from libmemleak.daemon.segment_types import Module
from libmemleak.symbols import Symbolizer
from libmemleak.symbols.demangle import demangle
from libmemleak.symbols.elf import ElfIndex


def nm_address(binary, name):
    out = subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise KeyError(name)


def test_functions_from_symtab_including_static_ones():
    prog = compile_program("allocators.c")
    idx = ElfIndex(prog)
    assert idx.error is None
    for name in ("site_malloc", "hold", "main"):  # hold() is static
        addr = nm_address(prog, name)
        assert idx.function_at(addr) == name
        assert idx.function_at(addr + 3) == name


def test_stripped_binary_still_has_dynsym_names(tmp_path):
    lib = tmp_path / "libx.so"
    src = tmp_path / "x.c"
    src.write_text("int exported_fn(int x) { return x * 3; }\nstatic int hidden(int x) { return x; }\n"
                   "int use(int x) { return hidden(x); }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", str(src), "-o", str(lib)], check=True)
    addr = nm_address(str(lib), "exported_fn")
    subprocess.run(["strip", str(lib)], check=True)
    assert ElfIndex(str(lib)).function_at(addr + 1) == "exported_fn"


def test_unreadable_files_give_an_error_not_an_exception(tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF" + os.urandom(200))
    for path in (str(junk), str(tmp_path / "missing"), "/etc/hostname"):
        idx = ElfIndex(path)
        assert idx.error and idx.function_at(0x1000) is None


def test_demangling():
    assert demangle("_ZN7storage4PoolIdE4grabEi") == "storage::Pool<double>::grab(int)"
    assert demangle("_Znwm") == "operator new(unsigned long)"
    assert demangle("main") == "main"
    assert demangle("_Zbogus") == "_Zbogus"


def test_symbolizer_uses_the_call_site_and_module_offsets():
    prog = compile_program("allocators.c")
    start = nm_address(prog, "site_calloc")
    mod = Module(0, prog, base=0x555500000000, lo=0, hi=1 << 62, load_epoch=1, unload_epoch=0,
                 build_id="")
    sym = Symbolizer()
    # a return address just past the end of the previous function's call is
    # still that function: the lookup uses address - 1
    frames = sym.frames_for(mod, 0x555500000000 + start + 1)
    assert frames[0].function == "site_calloc" and frames[0].offset == start + 1
    unknown = sym.frames_for(None, 0x1234)
    assert unknown[0].function is None and unknown[0].module is None


def test_fuzz_corrupted_binaries_never_raise_and_always_give_frames(tmp_path):
    """ELF and DWARF are read from files a user points us at; damaged ones
    (random bytes changed anywhere, or cut short) cost names, never the
    report: every address still gets a frame."""
    import random
    from helpers import PROGRAMS
    exe = tmp_path / "prog"
    subprocess.run(["g++", "-g", "-O2", f"-I{PROGRAMS}", os.path.join(PROGRAMS, "symbolize.cc"),
                    "-x", "c", os.path.join(PROGRAMS, "libshape.c"), "-o", str(exe)], check=True)
    original = exe.read_bytes()
    addresses = [nm_address(str(exe), "main") + k for k in (1, 5, 9, 17)]
    sym_clean = Symbolizer()
    mod = Module(0, str(exe), base=0, lo=0, hi=1 << 62, load_epoch=1, unload_epoch=0, build_id="")
    assert sym_clean.frames_for(mod, addresses[0])[0].function == "main"
    rng = random.Random(1234)
    named = 0
    for trial in range(60):
        data = bytearray(original)
        if trial % 4 == 0:
            del data[rng.randrange(64, len(data)):]
        for _ in range(rng.choice((1, 10, 200))):
            data[rng.randrange(len(data))] = rng.randrange(256)
        victim = tmp_path / f"damaged{trial}"
        victim.write_bytes(bytes(data))
        m = Module(0, str(victim), base=0, lo=0, hi=1 << 62, load_epoch=1, unload_epoch=0,
                   build_id="")
        sym = Symbolizer()
        for a in addresses:
            frames = sym.frames_for(m, a)
            assert frames and all(f.offset == a for f in frames)
            named += frames[0].function is not None
        sym.problems()
    assert named > 0  # light damage keeps most names


def test_build_id_is_the_gnu_note_not_a_probe_note_of_the_same_type(tmp_path):
    """SystemTap probe notes (libstdc++, cc1) have type 3, like NT_GNU_BUILD_ID.
    Taking one for the build-id used to lose every name of the module and
    retry the search for each address."""
    src = tmp_path / "probe.c"
    src.write_text(
        'int probed(int x) { return x * 7; }\n'
        '__asm__(".pushsection .note.stapsdt,\\"?\\",\\"note\\"\\n.balign 4\\n'
        '.long 8\\n.long 8\\n.long 3\\n.asciz \\"stapsdt\\"\\n.quad 0x1122334455667788\\n'
        '.popsection\\n");\n')
    lib = tmp_path / "libprobe.so"
    subprocess.run(["gcc", "-g", "-O1", "-shared", "-fPIC", "-Wl,--build-id", str(src), "-o",
                    str(lib)], check=True)
    notes = subprocess.run(["readelf", "-n", str(lib)], capture_output=True, text=True).stdout
    assert "stapsdt" in notes
    build_id = notes.split("Build ID:")[1].split()[0]
    addr = nm_address(str(lib), "probed")
    debug_dir = tmp_path / "debug"
    target = debug_dir / ".build-id" / build_id[:2] / (build_id[2:] + ".debug")
    target.parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(lib), str(target)], check=True)
    subprocess.run(["strip", "--strip-all", str(lib)], check=True)
    mod = Module(0, str(lib), base=0, lo=0, hi=1 << 40, load_epoch=1, unload_epoch=0, build_id="")
    frames = Symbolizer([str(debug_dir)]).frames_for(mod, addr + 2)
    assert frames[0].function == "probed"
    assert frames[0].file == str(src) and frames[0].line == 1


def test_line_rows_in_address_order_with_overlapping_sequences():
    """Sequences out of order are put in order whole; overlapping ones (a
    linker leaves discarded functions' rows at address 0) are sorted row by
    row, a sequence's end before a row that starts at the same address."""
    from array import array

    from libmemleak.symbols.dwarf import _in_address_order
    from libmemleak.symbols.lines import END

    def table(rows):
        a, f, l, seqs, start = array("Q"), array("q"), array("q"), [], 0
        for addr, file, line in rows:
            a.append(addr), f.append(file), l.append(line)
            if file == END:
                seqs.append((start, len(a)))
                start = len(a)
        return a, f, l, seqs

    later, earlier = [(0x200, 1, 20), (0x210, 1, 21), (0x220, END, 21)], \
        [(0x100, 1, 10), (0x200, END, 11)]
    a, f, l = _in_address_order(*table(later + earlier))
    assert list(a) == [0x100, 0x200, 0x200, 0x210, 0x220]
    assert list(f) == [1, END, 1, 1, END] and list(l) == [10, 11, 20, 21, 21]
    gone = [(0, 2, 5), (0x40, END, 6), (0, 2, 7), (0x30, END, 8)]
    a, f, l = _in_address_order(*table(earlier + gone))
    assert list(a) == sorted(a) and len(a) == 6
    assert list(zip(a, f, l))[-2:] == [(0x100, 1, 10), (0x200, END, 11)]
