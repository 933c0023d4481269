"""Python frames inside native stacks (#60): a Python service with a C
extension's leak and a pure-Python leak at known lines, under the real
library with CPython's default allocator, started by `run` and reached
by `attach`, on Debian's own python3 and on the interpreter running the
tests (a venv's, pyenv's).  `report` must name the Python lines as the
first frames of user code, the C line first for the extension's leak,
with the planted bytes exact."""

import glob
import json
import shutil
import os
import subprocess
import sys
import sysconfig

import pytest

from helpers import BARE_ENV, CLI_ENV, PROGRAMS, cli, cli_argv
from libmemleak.files import memlog

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVICE = os.path.join(PROGRAMS, "python", "pyservice.py")
EXTENSION = os.path.join(PROGRAMS, "python", "leakmod.c")
SYSTEM_PYTHON = "/usr/bin/python3.11"
ROUNDS, PER_ROUND = 3, 100
C_BYTES, PY_BYTES = 1000, 3001  # malloc(1000); bytearray(3000)'s buffer holds a NUL more


def line_of(path, marker):
    with open(path, encoding="utf-8") as f:
        return next(n for n, text in enumerate(f, 1) if marker in text)


def build_extension(python, into):
    """leakmod built for `python` (its headers, its suffix) in `into`."""
    include, suffix = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['include']); "
                       "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
        capture_output=True, text=True, check=True).stdout.split()
    if not os.path.exists(os.path.join(include, "Python.h")):
        pytest.skip(f"no Python.h for {python} (Debian: python3-dev)")
    os.makedirs(into, exist_ok=True)
    subprocess.run(["gcc", "-g", "-O1", "-shared", "-fPIC", "-I", include, EXTENSION,
                    "-o", os.path.join(into, "leakmod" + suffix)], check=True, timeout=120)
    return into


def tell(p, line, answer):
    p.stdin.write(line)
    p.stdin.flush()
    got = p.stdout.readline()
    assert got == answer, (got, p.stderr.read() if p.poll() is not None else "")


def serve(tmp_path, python, attach):
    """The service run ROUNDS rounds of PER_ROUND requests, a snapshot
    after each: the snapshots' paths (at its exit CPython frees what its
    modules held: the final report has no leak left)."""
    ext = build_extension(python, str(tmp_path / "ext"))
    work = tmp_path / "work"
    work.mkdir()
    base = BARE_ENV if attach else CLI_ENV
    env = dict(base, PYTHONPATH=os.pathsep.join(filter(None, [ext, base.get("PYTHONPATH")])))
    argv = [python, SERVICE] if attach else cli_argv("run", "-q", python, SERVICE)
    p = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        tell(p, "grow 0\n", "ok 0\n")  # up, its modules imported
        if attach:
            out = cli("attach", "-q", p.pid, cwd=work)
            assert out.returncode == 0, out.stderr
        snapshots = []
        for k in range(1, ROUNDS + 1):
            tell(p, f"grow {PER_ROUND}\n", f"ok {k * PER_ROUND}\n")
            out = cli("snapshot", p.pid, cwd=work)
            assert out.returncode == 0, out.stderr
            snapshots.append(out.stdout.strip())
        if attach:
            assert cli("detach", "-q", p.pid, cwd=work).returncode == 0
        _, err = p.communicate("", timeout=120)
        assert p.returncode == 0, err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return snapshots


def own(frames):
    """(function, file's last part, line) of the user's frames: the
    extension's and the Python ones."""
    return [(f["function"], os.path.basename(f["file"] or ""), f["line"]) for f in frames
            if f["module"] == "python" or "leakmod" in (f["module"] or "")]


def other_python(minor):
    """A CPython 3.`minor` of this machine (Debian's, pyenv's, or named
    by MEMLEAK_TEST_PYTHON3_`minor`), or None."""
    named = os.environ.get(f"MEMLEAK_TEST_PYTHON3_{minor}")
    found = [named] if named else [f"/usr/bin/python3.{minor}",
                                    *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/"
                                                                         f"python3.{minor}"))),
                                    shutil.which(f"python3.{minor}")]
    # (one that runs: pyenv's shims are on PATH for versions not installed too)
    return next((p for p in found if p and os.access(p, os.X_OK)
                 and subprocess.run([p, "-c", ""], capture_output=True).returncode == 0), None)


def python_param(minor):
    found = other_python(minor)
    return pytest.param(found or f"python3.{minor}", id=f"python3.{minor}",
                        marks=pytest.mark.skipif(found is None, reason=f"no CPython 3.{minor} here"))


PYTHONS = [
    pytest.param(sys.executable, id="this-python"),
    pytest.param(SYSTEM_PYTHON, id="system-python",
                 marks=pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no Debian python3.11")),
    python_param(12),
    python_param(13),
]


@pytest.mark.parametrize("attach", [False, True], ids=["run", "attach"])
@pytest.mark.parametrize("python", PYTHONS)
def test_python_lines_are_the_first_frames_of_user_code(tmp_path, python, attach):
    if sysconfig.get_config_var("VERSION") not in ("3.11", "3.12", "3.13") and python == sys.executable:
        pytest.skip("the frames read are CPython 3.11's to 3.13's")
    snapshots = serve(tmp_path, python, attach)
    leak_line = line_of(EXTENSION, "LEAK")
    calls_c, py_leak = line_of(SERVICE, "CALLS-C"), line_of(SERVICE, "PYTHON-LEAK")
    outer = [("serve", "pyservice.py", line_of(SERVICE, "SERVE")),
             ("main", "pyservice.py", line_of(SERVICE, "MAIN")),
             ("<module>", "pyservice.py", line_of(SERVICE, "MODULE"))]
    n = ROUNDS * PER_ROUND
    # Each call stack, exact to the byte: the reports' entries summed per
    # stack over the snapshots.
    per_stack = {}
    for path in snapshots:
        for e in memlog.read(path).entries:
            frames = tuple((f.function, f.module, f.file, f.line) for f in e.frames)
            b, k = per_stack.get(frames, (0, 0))
            per_stack[frames] = (b + e.bytes, k + (e.blocks or 0))
    mine = {}  # the user's frames -> (bytes, blocks) of each stack through them
    for frames, counts in per_stack.items():
        user = tuple((f, os.path.basename(file or ""), line) for f, m, file, line in frames
                     if m == "python" or "leakmod" in (m or ""))
        mine.setdefault(user, []).append(counts)
    c_stack = (("leak", "leakmod.c", leak_line), ("handle", "pyservice.py", calls_c), *outer)
    py_stack = (("handle", "pyservice.py", py_leak), *outer)
    assert mine.get(c_stack) == [(n * C_BYTES, n)], sorted(mine.items(), key=lambda kv: -max(kv[1])[0])[:4]
    # the bytearrays' buffers; and -- pymalloc routed, before the interpreter
    # started or once attached, by the first thread seen holding its GIL --
    # the bytearray objects themselves (pymalloc's), not an arena's stack
    size = int(subprocess.run([python, "-c", "import sys; print(sys.getsizeof(bytearray()))"],
                              capture_output=True, text=True, check=True).stdout)
    assert {(n * PY_BYTES, n), (n * size, n)} <= set(mine.get(py_stack, [])), mine.get(py_stack)
    # By stack, `report` makes each Python stack one entry: the interpreter's
    # frames above the first of user code (the object, its buffer, the
    # list's growth) do not make one Python line's leak several suspects.
    doc = json.loads(cli("report", "--json", "--all", *snapshots).stdout)
    [proc] = doc["processes"]
    entries = {}
    for s in proc["stacks"]:
        entries.setdefault(tuple(own(s["frames"])), []).append((s["live_bytes"], s["live_blocks"]))
    assert entries.get(c_stack) == [(n * C_BYTES, n)], entries.get(c_stack)
    assert entries.get(py_stack) == [tuple(map(sum, zip(*mine[py_stack])))], (entries.get(py_stack), mine[py_stack])
    # The suspects, by site: each leak at its own first frame.
    doc = json.loads(cli("report", "--json", "--group-by", "site", *snapshots).stdout)
    [proc] = doc["processes"]
    firsts = {(s["frames"][0]["function"], os.path.basename(s["frames"][0]["file"] or ""),
               s["frames"][0]["line"]): s["live_bytes"] for s in proc["stacks"] if s["frames"]}
    assert firsts.get(("leak", "leakmod.c", leak_line)) == n * C_BYTES, firsts
    # (the line's bytes: the bytearrays' and the list's that keeps them)
    assert firsts.get(("handle", "pyservice.py", py_leak)) == sum(b for b, _ in mine[py_stack]), firsts
    shown = cli("report", *snapshots).stdout
    assert f"handle (pyservice.py:{py_leak})" in shown, shown
    assert f"leak (leakmod.c:{leak_line})" in shown, shown
    # Every report of it says whose frames were read.
    work = os.path.dirname(snapshots[0])
    said = "frames read; objects routed (each at its own stack)"
    for name in os.listdir(work):
        header = memlog.read(os.path.join(work, name)).header
        assert said in header.get("python", ""), header.get("python")


def include_dir(python):
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("python", PYTHONS)
def test_the_layout_read_is_the_interpreters_own(tmp_path, python):
    """Every offset the hook reads is checked against CPython's own
    internal headers, compiled (a wrong one fails here, never in a traced
    program)."""
    include = include_dir(python)
    if not os.path.exists(os.path.join(include, "internal", "pycore_frame.h")):
        pytest.skip(f"no internal headers for {python} (Debian: python3-dev)")
    out = tmp_path / "layout_check"
    subprocess.run(["gcc", "-I", include, "-I", os.path.join(HERE, "native", "hook", "runtimes"),
                    os.path.join(PROGRAMS, "python", "layout_check.c"), "-o", str(out)], check=True, timeout=120)
    assert subprocess.run([str(out)]).returncode == 0


# Run by the interpreter under test: per code object of a few modules of
# its standard library, its location table and the line of each
# instruction as CPython itself gives it (co_positions).
LINES_OF = """
import base64, json, sys
import dis  # (a big module with every form of location entry)
def all_codes(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_linetable"):
            yield from all_codes(const)
out = []
for name in ("dis", "json.decoder", "argparse", "asyncio.base_events"):
    module = __import__(name, fromlist=["_"])
    with open(module.__file__, encoding="utf-8") as f:
        top = compile(f.read(), module.__file__, "exec")
    for code in all_codes(top):
        out.append([code.co_qualname, code.co_firstlineno, base64.b64encode(code.co_linetable).decode(),
                    [line or 0 for line, *_ in code.co_positions()]])
json.dump(out, sys.stdout)
"""


@pytest.mark.parametrize("python", PYTHONS)
def test_lines_are_the_interpreters_own(python):
    """The reporter's reading of the location table (python_code.line_at)
    gives, for every instruction of every function of a few modules of
    the interpreter's standard library, the line CPython itself gives."""
    import base64
    from libmemleak.daemon.python_code import CodeInfo, line_at
    got = subprocess.run([python, "-c", LINES_OF], capture_output=True, text=True, check=True, timeout=300)
    checked = 0
    for qualname, firstlineno, table, lines in json.loads(got.stdout):
        info = CodeInfo(qualname, "", firstlineno, base64.b64decode(table))
        for index, line in enumerate(lines):
            assert line_at(info, index) == line, (qualname, index)
            checked += 1
    assert checked > 40000


def test_a_dead_code_objects_address_taken_by_another_is_not_confused(tmp_path):
    """Each of 40 functions, compiled one after another, each dropped
    before the next, allocates on its own line: each line's stacks hold
    one bytearray of 5,000 -- where a code object known by its address
    alone gave the next one's allocations the dead one's line."""
    p = subprocess.Popen(cli_argv("run", "-q", sys.executable, os.path.join(PROGRAMS, "python", "codereuse.py")),
                         cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        report = snapshot_when(p, tmp_path, lambda r: any(f.file == "gen.py" for e in r.entries for f in e.frames)
                               and sum(1 for e in r.entries if e.bytes == 5001) >= 40)
    finally:
        p.communicate("\n", timeout=120)
    lines = {}
    for e in report.entries:
        for f in e.frames:
            if f.module == "python" and f.file == "gen.py" and f.line != 1:  # (line 1: each `def`, whose
                # function and namespace, a cycle, wait for the collector)
                lines.setdefault(f.line, []).append((e.bytes, e.blocks))
    # (each line: the bytearray's buffer, and -- pymalloc routed -- the object itself)
    made = sorted([(5001, 1), (sys.getsizeof(bytearray()), 1)])
    assert {line: sorted(v) for line, v in lines.items()} == {k + 2: made for k in range(40)}, lines


def snapshot_when(p, cwd, wanted):
    """The first snapshot of p (a memlog.Report) for which wanted(report)
    holds, snapshots taken until one does (p waits on stdin meanwhile; each
    report holds the changes since the one before)."""
    from helpers import wait_for
    found = []

    def seen():
        out = cli("snapshot", p.pid, cwd=cwd)
        report = memlog.read(out.stdout.strip()) if out.returncode == 0 else None
        found[:] = [report] if report is not None and wanted(report) else []
        return bool(found)
    wait_for(seen, "the program's blocks in a snapshot")
    return found[0]


def snapshot_entry(p, cwd, wanted):
    """The first entry for which wanted(entry) holds, of a snapshot of p."""
    report = snapshot_when(p, cwd, lambda r: any(wanted(e) for e in r.entries))
    return next(e for e in report.entries if wanted(e))


def entry_while_running(tmp_path, name, source, wanted):
    """The first entry for which wanted(entry) holds, of a snapshot of the
    Python script `source` (saved as tmp_path/name) run traced: it waits on
    stdin meanwhile, and is let go after."""
    script = tmp_path / name
    script.write_text(source)
    p = subprocess.Popen(cli_argv("run", "-q", sys.executable, script), cwd=tmp_path, env=CLI_ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        return snapshot_entry(p, tmp_path, wanted)
    finally:
        p.communicate("\n", timeout=120)


def test_records_and_words_the_program_wrote_never_break_the_reader():
    """The records and the stack words are written by the traced program:
    random ones, and real ones mutated, are refused or read -- never an
    exception, never a loop that does not end (python_code)."""
    import random
    from libmemleak.daemon import python_code as pc
    rng = random.Random(20261129)
    code = compile("def f(x):\n    y = [x]\n    return y * 2\n", "t.py", "exec").co_consts[0]
    name, file = code.co_qualname.encode(), code.co_filename.encode()
    table = code.co_linetable

    def words_of(data):
        data += b"\0" * (-len(data) % 8)
        return [int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8)]
    real = [0x7f0000001000, 0x123456 | code.co_firstlineno << 32, len(name) | 1 << 16, len(file) | 1 << 16,
            len(table), *words_of(name), *words_of(file), *words_of(table)]
    parsed = pc.parse_record(real)
    assert parsed[0] == "code" and parsed[2].name == "f" and parsed[2].file == "t.py"
    for _ in range(3000):
        words = list(real)
        for _ in range(rng.randint(1, 4)):
            words[rng.randrange(len(words))] = rng.getrandbits(64) if rng.random() < 0.5 else rng.randrange(1 << 20)
        if rng.random() < 0.2:
            words = words[:rng.randrange(len(words) + 1)]
        got = pc.parse_record(words)
        if got and got[0] == "code":
            for index in (0, 1, 7, 1 << 31, pc.NO_INSTRUCTION, rng.getrandbits(32)):
                assert isinstance(pc.line_at(got[2], index), int)
        stack = [pc.TAG_NATIVE << pc.TAG_SHIFT | 3] + [rng.getrandbits(64) for _ in range(rng.randrange(8))]
        if rng.random() < 0.5:
            stack[1::2] = [pc.TAG_CODE << pc.TAG_SHIFT | w & 0xffffffffffff for w in stack[1::2]]
        got = pc.python_frames(stack, {})
        assert got is None or got[0] == 3
    for _ in range(2000):  # line tables of random bytes
        info = pc.CodeInfo("f", "t.py", 1, bytes(rng.getrandbits(8) for _ in range(rng.randrange(40))))
        assert isinstance(pc.line_at(info, rng.randrange(64)), int)


@pytest.mark.skipif(not shutil.which("go"), reason="go is not installed")
def test_the_exporters_profile_has_the_python_frames(tmp_path):
    """/debug/pprof/heap of a Python service, read by `go tool pprof`: the
    extension's leak under the Python functions that called it, merged
    where the evaluation loop stood, as the reports show it."""
    from test_exporter import start_exporter, stop
    ext = build_extension(sys.executable, str(tmp_path / "ext"))
    env = dict(CLI_ENV, PYTHONPATH=os.pathsep.join([ext, CLI_ENV.get("PYTHONPATH", "")]))
    p = subprocess.Popen(cli_argv("run", "-q", sys.executable, SERVICE), cwd=tmp_path, env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    exporter, base = start_exporter(tmp_path)
    try:
        tell(p, "grow 50\n", "ok 50\n")
        traces = subprocess.run([shutil.which("go"), "tool", "pprof", "-traces", "-lines",
                                 f"{base}/debug/pprof/heap?pid={p.pid}"], capture_output=True, text=True,
                                timeout=120, env=dict(os.environ, PPROF_TMPDIR=str(tmp_path), HOME=str(tmp_path),
                                                      GOCACHE=str(tmp_path / "gocache")))
        assert traces.returncode == 0, traces.stderr
    finally:
        stop(exporter)
        p.communicate("", timeout=120)
    stacks = traces.stdout.split("-----------+-------------------------------------------------------")
    leak = [s for s in stacks if " leak " in s and "leakmod.c" in s]
    assert leak, traces.stdout[-3000:]
    lines = [line.split() for line in leak[0].splitlines() if line.strip()]
    functions = [words[-2] if len(words) > 1 else words[0] for words in lines]
    assert functions.index("leak") < functions.index("handle") < functions.index("serve") < \
        functions.index("main"), lines
    assert f"pyservice.py:{line_of(SERVICE, 'CALLS-C')}" in leak[0], leak[0]


DEEP = """import sys
def down(n):
    if n == 0:
        return bytearray(7000)  # DEEP-LEAK
    return down(n - 1)
kept = down(55)
sys.stdin.readline()
"""


def test_a_deep_python_stack_keeps_its_frames(tmp_path):
    """55 nested calls and the module's frame: every Python frame is in
    the stack (up to 63 are kept), not cut where a native walk's depth is."""
    entry = entry_while_running(tmp_path, "deep.py", DEEP, lambda e: e.bytes == 7001)
    python = [(f.function, f.line) for f in entry.frames if f.module == "python"]
    assert python == [("down", 4)] + [("down", 5)] * 55 + [("<module>", 6)], python
    assert "cut" not in " ".join(entry.extra or ()), entry.extra


DEBUG_PYTHON = "/usr/bin/python3.11d"
UNREAD = [
    pytest.param(DEBUG_PYTHON, id="debug-build",
                 marks=pytest.mark.skipif(not os.path.exists(DEBUG_PYTHON), reason="no Debian python3.11-dbg")),
    pytest.param(other_python(10) or "python3.10", id="python3.10",
                 marks=pytest.mark.skipif(other_python(10) is None, reason="no CPython 3.10 here")),
]


@pytest.mark.parametrize("python", UNREAD)
def test_a_layout_not_checked_is_said_not_read(tmp_path, python):
    """A debug build lays its objects out otherwise than the layouts
    checked, and 3.10 has its own: their frames are not read -- never
    guessed -- and the run and every report say so; the program runs as
    it would."""
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    out = cli("run", "-q", python, "-c", "x = [bytearray(1000) for i in range(10)]; print('ok')",
              cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "ok\n"), out.stderr
    minor = ".".join(version.split(".")[:2])
    assert f"Python {minor}: its frames are not read" in out.stderr, out.stderr
    [name] = os.listdir(tmp_path)
    report = memlog.read(os.path.join(tmp_path, name))
    assert report.header["python"] == (f"CPython {version}: frames not read (libmemleak reads the frames of "
                                       "CPython 3.11's to 3.13's release builds): stacks stop at the interpreter"), \
        report.header
    assert not any(f.module == "python" for e in report.entries for f in e.frames)


FORGER = """import sys
code = compile("def make():\\n    return bytearray(9000)\\n", "evil\\n+999999 +1\\tforged", "exec")
namespace = {}
exec(code, namespace)
kept = namespace["make"]()
sys.stdin.readline()
"""


def test_a_file_name_the_program_chose_cannot_forge_report_lines(tmp_path):
    """A code object's file name is the program's to choose: one with a
    newline and a tab is shown with '?' for them, inside its frame line --
    no entry or field of its making appears in the report."""
    entry = entry_while_running(tmp_path, "forger.py", FORGER, lambda e: e.bytes == 9001)
    assert [(f.function, f.file, f.line) for f in entry.frames if f.module == "python"][0] == \
        ("make", "evil?+999999 +1?forged", 2), entry.frames
    path = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    assert not any(e.bytes == 999999 for n in path for e in memlog.read(os.path.join(tmp_path, n)).entries)


def test_run_does_not_tell_a_python_user_to_give_up_pymalloc(tmp_path):
    """#64 item 15: `run` told every Python user that growth is blamed on
    pymalloc's arenas and to run with PYTHONMALLOC=malloc -- untrue since
    its objects are routed, each at its own stack (the report says so)."""
    out = cli("run", sys.executable, "-c", "x = [bytearray(100) for i in range(10)]", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "PYTHONMALLOC" not in out.stderr and "arena" not in out.stderr, out.stderr
    report = memlog.read(str(next(tmp_path.glob("*.memlog"))))
    assert "objects routed (each at its own stack)" in report.header["python"]

    # nor does `report` of it while it runs: the interpreter's frame-stack
    # chunk (an mmap through _PyObject_VirtualAlloc) is no pool, and its
    # objects are not behind one
    (tmp_path / "live").mkdir()
    p = subprocess.Popen(cli_argv("run", "-q", sys.executable, "-c",
                                  "import sys; x = [bytearray(100) for i in range(10)]; print('ready', flush=True); "
                                  "sys.stdin.readline()"),
                         cwd=tmp_path / "live", env=CLI_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    taken = cli("snapshot", p.pid)
    assert taken.returncode == 0, taken.stderr
    p.communicate("\n", timeout=120)
    shown = cli("report", next((tmp_path / "live").glob("*-1.memlog")))
    assert "PYTHONMALLOC" not in shown.stdout and "pool in the way" not in shown.stdout, shown.stdout
