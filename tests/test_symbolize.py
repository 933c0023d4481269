"""Issue 3: every frame reads like a debugger's backtrace: function,
file:line of the call site, inline chains, demangled names, and debug
information found in separate files."""

import os
import shutil
import subprocess

import pytest

from helpers import PROGRAMS, Traced, report_path, wait_for_reporter, wait_until_idle
from libmemleak.files import memlog

SOURCE = os.path.join(PROGRAMS, "symbolize.cc")
LIB_SOURCE = os.path.join(PROGRAMS, "libshape.c")


def line_of(path, marker):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith(f"// @{marker}") or f"// @{marker}" in line:
                return n
    raise KeyError(marker)


def build(tmp, opt, *, strip_with_debuglink=False, build_id_dir=None):
    lib = tmp / "libshape.so"
    subprocess.run(["gcc", "-g", opt, "-shared", "-fPIC", LIB_SOURCE, "-o", str(lib)], check=True)
    exe = tmp / "symbolize"
    subprocess.run(["g++", "-g", opt, f"-I{PROGRAMS}", SOURCE, "-o", str(exe), f"-L{tmp}", "-lshape",
                    f"-Wl,-rpath,{tmp}", "-Wl,--build-id"], check=True)
    if strip_with_debuglink:
        debug = tmp / "symbolize.debug"
        subprocess.run(["objcopy", "--only-keep-debug", str(exe), str(debug)], check=True)
        subprocess.run(["strip", "--strip-all", str(exe)], check=True)
        subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(exe)], check=True)
    if build_id_dir is not None:
        out = subprocess.run(["readelf", "-n", str(exe)], capture_output=True, text=True).stdout
        build_id = out.split("Build ID:")[1].split()[0]
        target = build_id_dir / ".build-id" / build_id[:2] / (build_id[2:] + ".debug")
        target.parent.mkdir(parents=True)
        subprocess.run(["objcopy", "--only-keep-debug", str(exe), str(target)], check=True)
        subprocess.run(["strip", "--strip-all", str(exe)], check=True)
    return str(exe)


def report_for(tmp, exe, env=None):
    t = Traced([exe], tmp, env=env)
    t.expect("ready")
    report = t.signal_report(1)
    t.resume()
    assert t.finish() == 0, t.stderr
    return report


def entry_with(report, function):
    found = [e for e in report.entries if any(f.function == function for f in e.frames)]
    assert found, f"no entry with {function}: {[[f.function for f in e.frames] for e in report.entries]}"
    return found[0]


def loc(frame):
    return (frame.function, os.path.basename(frame.file or ""), frame.line, frame.inlined)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_functions_files_lines_and_templates(tmp_path, opt):
    exe = build(tmp_path, opt)
    report = report_for(tmp_path, exe)
    L = lambda m: line_of(SOURCE, m)  # noqa: E731
    grab = entry_with(report, "storage::Pool<double>::grab(int)")
    assert (grab.bytes, grab.blocks) == (32, 1)
    i = [f.function for f in grab.frames].index("storage::Pool<double>::grab(int)")
    assert loc(grab.frames[i]) == ("storage::Pool<double>::grab(int)", "symbolize.cc", L("grab"), False)
    assert loc(grab.frames[i + 1]) == ("main", "symbolize.cc", L("main_grab"), False)
    assert grab.frames[i].module == exe

    shared = entry_with(report, "shared_alloc")
    assert (shared.bytes, shared.blocks) == (300, 1)
    assert loc(shared.frames[0]) == ("shared_alloc", "libshape.c", line_of(LIB_SOURCE, "shared"), False)
    assert shared.frames[0].module == str(tmp_path / "libshape.so")
    assert loc(shared.frames[1]) == ("main", "symbolize.cc", L("main_shared"), False)

    lam = [e for e in report.entries if e.bytes == 21]
    assert len(lam) == 1
    assert (os.path.basename(lam[0].frames[0].file), lam[0].frames[0].line) == ("symbolize.cc", L("lambda"))
    # out of line (-O0): the symbol's demangled name; inlined (-O2): qualified from DWARF scopes
    assert lam[0].frames[0].function in ("main::{lambda(unsigned long)#1}::operator()(unsigned long) const",
                                         "main::{lambda}::operator()")

    # the tracer's own frames never appear; the first frame is the allocator's caller
    for e in report.entries:
        assert all("libmtrace" not in (f.module or "") for f in e.frames)


@pytest.mark.parametrize("opt", ["-O0", "-O2"])  # always_inline inlines at -O0 too
def test_inline_chain(tmp_path, opt):
    exe = build(tmp_path, opt)
    report = report_for(tmp_path, exe)
    L = lambda m: line_of(SOURCE, m)  # noqa: E731
    e = next(e for e in report.entries if e.bytes == 10)
    assert [loc(f) for f in e.frames[:4]] == [
        ("inner_alloc", "symbolize.cc", L("inner"), True),
        ("middle_alloc", "symbolize.cc", L("middle"), True),
        ("site_inlined(unsigned long)", "symbolize.cc", L("outer"), False),
        ("main", "symbolize.cc", L("main_inlined"), False),
    ]
    text = open(report_path(str(tmp_path), "symbolize", report.header["pid"], 1)).read()
    assert "\tinner_alloc [inlined]\t(" in text


def test_stripped_executable_with_debuglink_file_next_to_it(tmp_path):
    exe = build(tmp_path, "-O2", strip_with_debuglink=True)
    out = subprocess.run(["nm", exe], capture_output=True, text=True)
    assert "no symbols" in out.stderr  # really stripped
    report = report_for(tmp_path, exe)
    grab = entry_with(report, "storage::Pool<double>::grab(int)")
    f = next(f for f in grab.frames if f.function == "storage::Pool<double>::grab(int)")
    assert (os.path.basename(f.file), f.line) == ("symbolize.cc", line_of(SOURCE, "grab"))


def test_build_id_debug_file_in_a_custom_directory(tmp_path):
    debug_dir = tmp_path / "debug"
    exe = build(tmp_path, "-O2", build_id_dir=debug_dir)
    # without the directory: only what the stripped file has (no names in the exe)
    bare = report_for(tmp_path, exe)
    assert not any(f.function == "site_inlined(unsigned long)" for e in bare.entries for f in e.frames)
    os.makedirs(tmp_path / "second")
    shutil.copy(exe, tmp_path / "second" / "symbolize")
    report = report_for(tmp_path / "second", str(tmp_path / "second" / "symbolize"),
                        env={"MEMLEAK_DEBUG_PATH": str(debug_dir)})
    e = next(e for e in report.entries if e.bytes == 10)
    assert [f.function for f in e.frames[:3]] == ["inner_alloc", "middle_alloc", "site_inlined(unsigned long)"]


def test_stripped_binary_without_debug_info_falls_back_to_module_offsets(tmp_path):
    exe = build(tmp_path, "-O2")
    subprocess.run(["strip", "--strip-all", exe], check=True)
    report = report_for(tmp_path, exe)
    e = next(e for e in report.entries if e.bytes == 10)
    assert e.frames[0].function is None and e.frames[0].module == exe and e.frames[0].offset > 0
    text = memlog.format_frame(e.frames[0])
    assert text.startswith(f"\t{exe}+0x")


def test_symbol_budget_spent_gives_a_partial_report_finished_while_idle(tmp_path):
    """MEMLEAK_SYMBOL_BUDGET bounds a report's time in DWARF: past it frames
    keep symbol-table names and the header says so; the reporter finishes
    them while the program runs on, so the next report is complete."""
    exe = build(tmp_path, "-O2")
    t = Traced([exe], tmp_path, env={"MEMLEAK_SYMBOL_BUDGET": "0"})
    t.expect("ready")
    first = t.signal_report(1)
    assert first.header["symbolization"].startswith("partial")
    # Symbol-table names (gcc's clone suffix included), no file:line.
    grab = [e for e in first.entries
            if e.frames[0].function.startswith("storage::Pool<double>::grab(int)")]
    assert grab and all(f.file is None for f in grab[0].frames if f.module == exe)
    # Idle: the reporter finishes what the budget cut short.
    wait_until_idle(wait_for_reporter(t.pid))
    t.resume()
    assert t.finish() == 0, t.stderr
    final = t.reports()[-1]
    assert "symbolization" not in final.header
    names = [(f.function, os.path.basename(f.file or "")) for e in final.entries for f in e.frames]
    assert ("main", "symbolize.cc") in names
