"""Allocations through libc's malloc looked up in libc's own handle
(dlsym/dlvsym on dlopen("libc.so.6"), Python's ctypes.CDLL("libc.so.6")):
the lookup hands back the tracer's hook, so they are counted exactly;
the program's RTLD_NEXT and RTLD_DEFAULT lookups are its own as before.
A library loaded by dlmopen into a namespace of its own, whose C library
the tracer is not in front of: not seen, and said so.  And a plugin the
program dlopens by its bare name from its own DT_RUNPATH: found as
without the tracer (whose dlopen hook is the loader's caller)."""

import subprocess
import sys

from helpers import PROGRAMS, Traced, by_site, cli, compile_program


def test_malloc_looked_up_in_libc_handle_is_traced_exactly(tmp_path):
    prog = compile_program("dlsym_libc.c", "-ldl")
    t = Traced([prog], tmp_path, config="mtraceinit")
    [report] = t.reports_at("done")
    assert t.finish() == 0, t.stderr  # 3: RTLD_NEXT found another malloc; 4: a missing name was found
    assert by_site(report)["site_dlsym_malloc"] == (30 * 700, 30)
    [final] = [r for r in t.reports() if r.header["reason"] == "exit"]
    assert by_site(final)["site_dlsym_malloc"] == (-30 * 700, -30)  # freed through libc's free: seen


LEAK_PY = """
import ctypes, sys
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
kept = [libc.malloc(1234) for _ in range(40)]
for _ in range(25):
    libc.free(libc.malloc(4321))
sys.stdout.write("checkpoint done\\n")
sys.stdout.flush()
sys.stdin.readline()
"""


def test_python_ctypes_libc_malloc_is_traced(tmp_path):
    """The real consumer: Python's ctypes, through libffi."""
    script = tmp_path / "leak.py"
    script.write_text(LEAK_PY)
    t = Traced([sys.executable, str(script)], tmp_path, config="mtraceinit")
    [report] = t.reports_at("done")
    assert t.finish() == 0, t.stderr
    through_ffi = [(e.bytes, e.blocks) for e in report.entries
                   if any("libffi" in (f.module or "") for f in e.frames[:3])]
    assert through_ffi == [(40 * 1234, 40)], through_ffi  # the 4321-byte ones freed through libc.free: seen


def test_dlmopen_into_its_own_namespace_is_said_not_seen(tmp_path):
    lib = tmp_path / "libownns.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), f"{PROGRAMS}/dlmopen_lib.c"], check=True)
    prog = compile_program("dlmopen_main.c", "-ldl")
    t = Traced([prog, str(lib)], tmp_path, config="mtraceinit")
    [report] = t.reports_at("done")
    assert t.finish() == 0, t.stderr
    line = (f"{lib} was loaded by dlmopen into a link-map namespace of its own, with its own C library: "
            "allocations made there are not seen")
    assert f"libmemleak: {line}" in t.stderr.splitlines()  # said at once, on stderr
    assert report.header["blind"] == line                  # and in every report
    assert by_site(report)["site_own_namespace_main"] == (10 * 333, 10)
    assert cli("check", tmp_path, "--max-leaks", "0").returncode == 3  # no verdict over a blind spot


def test_dlopen_of_a_bare_name_searches_the_callers_runpath(tmp_path):
    (tmp_path / "plug").mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "plug" / "libplugin.so"),
                    f"{PROGRAMS}/dlmopen_lib.c"], check=True)
    prog = tmp_path / "runpath"
    subprocess.run(["gcc", "-g", f"-I{PROGRAMS}", f"{PROGRAMS}/dlopen_runpath.c", "-o", str(prog), "-ldl",
                    "-Wl,--enable-new-dtags,-rpath,$ORIGIN/plug"], check=True)
    bare = subprocess.run([str(prog)], input=b"\n", capture_output=True)
    assert bare.returncode == 0, bare  # the program itself is right
    t = Traced([str(prog)], tmp_path, config="mtraceinit")
    [report] = t.reports_at("done")
    assert t.finish() == 0, t.stderr  # 2: the plugin was not found; 3: the missing name was
    assert by_site(report)["lib_alloc"] == (20 * 555, 20)
