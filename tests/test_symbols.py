"""Symbol lookup on real compiled binaries."""

import os
import subprocess

from helpers import compile_program
from libmemleak.segment import Module
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
