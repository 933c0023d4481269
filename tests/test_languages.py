"""Every language reaches its own line (#60): programs of other languages'
runtimes under the real library, their leaks named at the program's own
functions, demangled, with the runtime's allocation layer passed over."""

import contextlib
import json
import os
import re
import shutil
import subprocess

import pytest

from helpers import CLI_ENV, PROGRAMS, cli, cli_argv, compile_program, reports_of
from libmemleak.files import memlog

RUSTC = shutil.which("rustc")
MANGLED = re.compile(r"\$LT\$|\$GT\$|\$C\$|::h[0-9a-f]{16}$|^_R|^_ZN")
RUST_LEAKS = {"rustleaks::leak_vec": (81920, 10), "rustleaks::leak_boxes": (40960, 10),
              "rustleaks::leak_strings": (160, 10)}


def rust_program(tmp_path, opt):
    out = tmp_path / f"rustleaks-{opt}"
    subprocess.run([RUSTC, "-g", "-C", f"opt-level={opt}", "-o", str(out), os.path.join(PROGRAMS, "rustleaks.rs")],
                   check=True, capture_output=True, timeout=300)
    return out


@pytest.mark.skipif(not RUSTC, reason="needs rustc")
@pytest.mark.parametrize("opt", ["0", "2"], ids=["debug", "release"])
def test_rust_leaks_are_named_at_their_functions_demangled_under_every_grouping(tmp_path, opt):
    """Every suspect's first frames were alloc::alloc::alloc / RawVec's,
    legacy-mangled names showed as RawVec$LT$T$C$A$GT$::allocate_in::hea8a8...,
    and --group-by site merged three leaks into one.  Rust's standard
    library is library code (its /rustc/ sources, its alloc:: and core::
    names), as C++'s headers are; names are demangled by libiberty."""
    prog = rust_program(tmp_path, opt)
    work = tmp_path / "work"
    work.mkdir()
    out = cli("run", "-q", prog, cwd=work)
    assert (out.returncode, out.stdout, out.stderr) == (0, "done\n", ""), out.stderr
    for group in ("stack", "site", "function"):
        doc = json.loads(cli("report", "--json", "--group-by", group, work).stdout)
        [proc] = doc["processes"]
        got = {}
        for s in proc["stacks"]:
            # grouped by site or function, the first frame is the program's own
            # (shown_frames); by stack, the whole stack, the library's frames first
            own = [f["function"] for f in s["frames"] if (f["function"] or "").startswith("rustleaks::")]
            name = (s["frames"][0]["function"] if s["frames"] else None) if group != "stack" else \
                (own[0] if own else None)
            if name in RUST_LEAKS:
                b, k = got.get(name, (0, 0))
                got[name] = (b + s["live_bytes"], k + s["live_blocks"])
            assert not any(f["function"] and MANGLED.search(f["function"]) for f in s["frames"]), s["frames"]
        assert got == RUST_LEAKS, (group, got)


GROW = "kept = []\nfor i in range(200000):\n    kept.append((i, str(i)))\nprint(len(kept))\n"


def test_a_pool_in_the_way_is_named_with_its_switch(tmp_path):
    """#64 item 17: under a pool allocator the blame lands on whichever call
    refilled the pool, and nothing said a pool was in the way.  CPython's
    pymalloc is one (its 1 MiB arenas) where it is not routed -- here, told
    by PYTHONMALLOC=pymalloc, which replaces the routed one as the
    interpreter starts: report names it and the switch that sends every
    object to malloc.  Routed (the default, #60) or under that switch,
    nothing is in the way and nothing is said."""
    import sys
    script = tmp_path / "grow.py"
    script.write_text(GROW)
    for allocator in ("pymalloc", "malloc", None):
        work = tmp_path / (allocator or "routed")
        work.mkdir()
        env = dict(CLI_ENV, PYTHONMALLOC=allocator) if allocator else None
        out = cli("run", "-q", sys.executable, script, cwd=work, env=env)
        assert (out.returncode, out.stdout) == (0, "200000\n"), out.stderr
        shown = cli("report", work).stdout
        said = [line for line in shown.splitlines() if "pool in the way" in line]
        if allocator == "pymalloc":
            assert len(said) == 1 and "through CPython's pymalloc" in said[0], shown
            assert said[0].endswith("run it with PYTHONMALLOC=malloc for each allocation's own stack")
        else:
            assert said == [], said


GO = shutil.which("go")


@pytest.fixture(scope="module")
def cgoleak(tmp_path_factory):
    """tests/programs/cgoleak.go built with Debian's go."""
    if not GO:
        pytest.skip("needs Debian's golang-go")
    at = tmp_path_factory.mktemp("go")
    env = dict(os.environ, HOME=str(at), GOCACHE=str(at / "cache"), GOPATH=str(at / "gopath"), GO111MODULE="off")
    prog = at / "cgoleak"
    subprocess.run([GO, "build", "-o", str(prog), os.path.join(PROGRAMS, "cgoleak.go")], env=env, check=True,
                   capture_output=True, timeout=600)
    return prog


def run_cgoleak(prog, tmp_path):
    """cgoleak under `run --wait`: its directory and pid."""
    work = tmp_path / "work"
    work.mkdir()
    out = cli("run", "-q", "--wait", prog, cwd=work)
    assert (out.returncode, out.stdout) == (0, "done 50\n"), out.stderr
    # Go's exit runs no atexit handler: the reporter writes the final report
    # after the exit, and `run --wait` returns once it is there (#64 item 13).
    (pid,) = {int(n.split("-")[1]) for n in os.listdir(work) if n.endswith(".memlog")}
    # ... and says it was an exit: status 0 (its zombie, which run keeps
    # until then, says so)
    last = reports_of(work, "cgoleak", pid)[-1].header
    assert last["reason"] == "exit" and last["exit-status"].startswith("0 "), last
    return work, pid


def test_a_cgo_leak_is_named_at_the_go_function_that_called_c(cgoleak, tmp_path):
    """#60: a C leak made through cgo had its stack stop at
    runtime.asmcgocall, where the C code's stack (the thread's) ends and
    the goroutine's begins: the Go function that made the call was never
    named.  The walk crosses the switch: the 50 blocks of 100 bytes c_leak
    makes from main.handle are one stack, through handle and main, exact."""
    work, pid = run_cgoleak(cgoleak, tmp_path)
    entries = [e for r in reports_of(work, "cgoleak", pid) for e in r.entries if (e.bytes, e.blocks) == (5000, 50)]
    assert len(entries) == 1, [(e.bytes, e.blocks) for r in reports_of(work, "cgoleak", pid) for e in r.entries]
    names = [f.function for f in entries[0].frames]
    assert names.index("runtime.asmcgocall.abi0") < names.index("main.handle") < names.index("main.main"), names
    assert "cut" not in " ".join(entries[0].extra or ()), entries[0].extra
    # attributed to the Go function (the C side is cgo's own wrapper)
    doc = json.loads(cli("report", "--json", "--all", "--group-by", "function", str(work)).stdout)
    [proc] = doc["processes"]
    mine = [s for s in proc["stacks"] if s["live_bytes"] == 5000]
    assert mine and any(f["function"] == "main.handle" for f in mine[0]["frames"]), mine


def test_go_names_print_intact(cgoleak, tmp_path):
    """#60: runtime.(*mheap).grow printed as runtime..grow -- the receiver
    taken for a parameter list.  A cgo program's reports and drawings keep
    Go's method names whole."""
    work, _ = run_cgoleak(cgoleak, tmp_path)
    folded = cli("export", "--format", "collapsed", "--no-fold", work).stdout
    names = {name for line in folded.splitlines() for name in line.rsplit(" ", 1)[0].split(";")}
    assert any(n.startswith("runtime.(*mheap).") for n in names), sorted(names)[:40]
    assert not [n for n in names if ".." in n and not n.startswith("...")], sorted(n for n in names if ".." in n)


def jit_run(tmp_path, *args):
    """jitleak under `run`: the entry of its 5 blocks of 777 bytes, and its pid."""
    prog = compile_program("jitleak.c", "-fno-omit-frame-pointer")
    out = cli("run", "-q", prog, *args, cwd=tmp_path)
    (path,) = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    pid = int(path.split("-")[1])
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"/tmp/perf-{pid}.map")  # (left by the program, as runtimes leave theirs)
    assert (out.returncode, out.stdout) == (0, "done\n"), out.stderr
    (entry,) = [e for e in memlog.read(os.path.join(tmp_path, path)).entries if (e.bytes, e.blocks) == (5 * 777, 5)]
    return entry, pid


def test_jit_compiled_frames_are_named_from_the_runtimes_perf_map(tmp_path):
    """#60: JIT frames were bare addresses; runtimes say what they compiled
    where in /tmp/perf-PID.map (Node --perf-basic-prof, the JVM's
    perf-map-agent, Python 3.12's -X perf)."""
    entry, pid = jit_run(tmp_path)
    assert [(f.function, f.module) for f in entry.frames[:3]] == [
        ("site_from_jit", entry.frames[0].module),
        ("LazyCompile:*handleRequest app.js:17", f"/tmp/perf-{pid}.map"),
        ("main", entry.frames[0].module)]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_perf_map_of_another_user_is_not_believed(tmp_path):
    entry, _ = jit_run(tmp_path, "foreign")
    assert entry.frames[1].function is None and entry.frames[1].module is None, entry.frames[1]


NODE = shutil.which("node")


@pytest.mark.skipif(not NODE, reason="needs Debian's nodejs")
def test_a_node_scripts_native_growth_names_its_javascript_function(tmp_path):
    """#60: Node's stacks stopped in V8's entry trampolines: the walk by
    frame pointers would not step to a return address in memory no
    loaded object holds -- where V8's compiled JavaScript lies.  Now one
    in executable memory (/proc/self/maps) is followed, and named from the
    perf map Node writes: every Buffer jsleak.js keeps is counted, exact,
    at stacks through its JavaScript -- handleRequest, or serve where the
    JIT has inlined handleRequest into it (as its optimizing tier does
    once serve is hot: then no frame of handleRequest's own exists).  (A
    JIT frame whose code V8 replaced before the reporter read the map takes
    the newer code's name -- docs/languages.md; its outer frames are still
    the script's: every Buffer is at stacks through jsleak.js, nearly all
    through its two functions.)"""
    script = os.path.join(PROGRAMS, "jsleak.js")
    p = subprocess.Popen(cli_argv("run", "-q", NODE, "--perf-basic-prof", "--interpreted-frames-native-stack",
                                  script), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "done 4000\n", p.stderr.read() if p.poll() is not None else ""
        out = cli("snapshot", p.pid, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        snapshot = memlog.read(out.stdout.strip())
    finally:
        p.stdin.close()
        p.wait(timeout=120)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/tmp/perf-{p.pid}.map")
    named, at_function, at_handler = 0, 0, 0
    for e in snapshot.entries:
        frames = [(f.function or "", f.module or "") for f in e.frames]
        ours = [f for f, m in frames if f"perf-{p.pid}.map" in m and "jsleak.js" in f]
        if any("NodeArrayBufferAllocator::AllocateUninitialized" in f for f, _ in frames[:3]) and ours:
            named += e.bytes
            at_function += e.bytes if "handleRequest" in ours[0] or "serve" in ours[0] else 0
            at_handler += e.bytes if "handleRequest" in ours[0] else 0
    assert named == 20 * sum(50000 + i % 7 for i in range(200)), named
    assert at_function >= 0.9 * named, (at_function, named)
    assert at_handler > 0  # (before the JIT inlined it: its own frame)
