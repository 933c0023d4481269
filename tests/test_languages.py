"""Every language reaches its own line (#60): programs of other languages'
runtimes under the real library, their leaks named at the program's own
functions, demangled, with the runtime's allocation layer passed over."""

import json
import os
import re
import shutil
import subprocess

import pytest

from helpers import CLI_ENV, PROGRAMS, cli

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
    pymalloc is one (its 1 MiB arenas): report names it and the switch that
    sends every object to malloc, and under that switch says nothing."""
    import sys
    script = tmp_path / "grow.py"
    script.write_text(GROW)
    for pymalloc in (True, False):
        work = tmp_path / ("pymalloc" if pymalloc else "malloc")
        work.mkdir()
        env = None if pymalloc else dict(CLI_ENV, PYTHONMALLOC="malloc")
        out = cli("run", "-q", sys.executable, script, cwd=work, env=env)
        assert (out.returncode, out.stdout) == (0, "200000\n"), out.stderr
        shown = cli("report", work).stdout
        said = [line for line in shown.splitlines() if "pool in the way" in line]
        if pymalloc:
            assert len(said) == 1 and "through CPython's pymalloc" in said[0], shown
            assert said[0].endswith("run it with PYTHONMALLOC=malloc for each allocation's own stack")
        else:
            assert said == [], said


GO = shutil.which("go")


@pytest.mark.skipif(not GO, reason="needs Debian's golang-go")
def test_go_names_print_intact(tmp_path):
    """#60: runtime.(*mheap).grow printed as runtime..grow -- the receiver
    taken for a parameter list.  A cgo program's reports and drawings keep
    Go's method names whole."""
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "cache"), GOPATH=str(tmp_path / "gopath"),
               GO111MODULE="off")
    prog = tmp_path / "cgoleak"
    subprocess.run([GO, "build", "-o", str(prog), os.path.join(PROGRAMS, "cgoleak.go")], env=env, check=True,
                   capture_output=True, timeout=600)
    work = tmp_path / "work"
    work.mkdir()
    out = cli("run", "-q", prog, cwd=work)
    assert (out.returncode, out.stdout) == (0, "done 50\n"), out.stderr
    folded = cli("export", "--format", "collapsed", "--no-fold", work).stdout
    names = {name for line in folded.splitlines() for name in line.rsplit(" ", 1)[0].split(";")}
    assert any(n.startswith("runtime.(*mheap).") for n in names), sorted(names)[:40]
    assert not [n for n in names if ".." in n and not n.startswith("...")], sorted(n for n in names if ".." in n)
