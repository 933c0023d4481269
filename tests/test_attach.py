"""`libmemleak attach PID` / `detach PID` (#24): programs started bare --
no LD_PRELOAD, no environment of ours -- attached to while they run,
their reports asserted to the byte and block for what was allocated after
the attach, detached, and their output and exit status compared with a
run nobody attached to."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from helpers import BARE_ENV, CLI_ENV, by_site, cli, compile_program, reports_of, wait_for, wait_for_file
from libmemleak.files import memlog
from libmemleak.analysis.lost import before_attach_split, categories_of



def start_bare(argv, cwd, env=None):
    return subprocess.Popen(argv, cwd=cwd, env=env or BARE_ENV, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def expect(p, line):
    got = p.stdout.readline().decode()
    assert got == line, f"expected {line!r}, got {got!r}"


def tell(p, line, answer):
    """Writes line to p's stdin; p must answer `answer`."""
    p.stdin.write(line)
    p.stdin.flush()
    expect(p, answer)


def snapshot(pid, cwd):
    out = cli("snapshot", pid, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return memlog.read(out.stdout.strip())


def through(report, function):
    """(bytes, blocks) of the entries whose stack passes through `function`."""
    found = [e for e in report.entries if any(f.function == function for f in e.frames)]
    return sum(e.bytes for e in found), sum(e.blocks for e in found)


def not_stopped(pid):
    with open(f"/proc/{pid}/status") as f:
        state = next(line for line in f if line.startswith("State:"))
        tracer = next(line for line in f if line.startswith("TracerPid:"))
    return "stopped" not in state and tracer.split()[1] == "0"


def refused_and_untouched(p, cwd, why):
    """`attach` of process p fails with exactly `why`, p runs on; p ends."""
    try:
        out = cli("attach", p.pid, cwd=cwd)
        assert (out.returncode, out.stderr) == (1, f"libmemleak: attach: {why}\n")
        assert not_stopped(p.pid)
    finally:
        p.kill()
        p.wait()


def let_finish(p):
    """p waits for a line to end: give it, and it ends with status 0."""
    p.stdin.write(b"\n")
    p.stdin.close()
    assert p.wait(timeout=60) == 0


def detach_and_let_finish(p, cwd):
    """Detach from p, which waits for a line to end; it ends with status 0."""
    assert cli("detach", "-q", p.pid, cwd=cwd).returncode == 0
    let_finish(p)


@contextlib.contextmanager
def attached_between(argv, cwd, ready="ready\n", done="done\n", config=None, before_attach=None):
    """argv started bare; when it says `ready`, attached to (`attach -q`,
    --config `config`) and given a line; when it says `done`: (the
    process, attach's result, a snapshot).  Killed if still running after."""
    p = start_bare(argv, cwd)
    try:
        expect(p, ready)
        if before_attach:
            before_attach(p)
        out = cli("attach", "-q", *(["--config", config] if config else []), p.pid, cwd=cwd)
        assert out.returncode == 0, out.stderr
        p.stdin.write(b"\n")
        p.stdin.flush()
        expect(p, done)
        yield p, out, snapshot(p.pid, cwd)
    finally:
        p.kill()
        p.wait()


def bare_run(argv, stdin, env=None):
    p = subprocess.run(argv, input=stdin, capture_output=True, env=env or BARE_ENV, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_attach_counts_what_follows_exactly_and_detach_leaves_the_program_as_it_was(tmp_path):
    prog = compile_program("attachee.c")
    expected = bare_run([prog], b"\n\n\n")
    p = start_bare([prog], tmp_path)
    expect(p, "checkpoint attach\n")
    out = cli("attach", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"attached to attachee (pid {p.pid}" in out.stderr
    assert f"{tmp_path}/attachee-{p.pid}-N.memlog" in out.stderr
    assert not_stopped(p.pid)
    p.stdin.write(b"\n")
    p.stdin.flush()
    expect(p, "sum 99000\n")
    expect(p, "checkpoint counted\n")
    first = snapshot(p.pid, tmp_path)
    sites = by_site(first)
    assert sites["leak_after_attach"] == (1000, 10)
    assert sites["zeroed_after_attach"] == (500, 5)
    assert through(first, "copied_after_attach") == (51, 3)  # strdup's malloc, inside libc
    assert sites["grown_after_attach"] == (500, 1)   # an older block grown: a new one
    assert first.header["frees-before-attach"] == "21"  # 20 frees and the realloc's old block
    assert "attached" in first.header
    # A scan: the block linked only from an older block is reachable.
    out = cli("scan", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    scanned = memlog.read(out.stdout.splitlines()[0])
    [linked] = [e for e in scanned.entries if e.frames[0].function == "linked_after_attach"]
    assert categories_of(linked) == {"still-reachable": (72, 1)}
    assert categories_of(next(e for e in scanned.entries
                              if e.frames[0].function == "leak_after_attach")) == {"still-reachable": (1000, 10)}
    # the older blocks: 19 of `early` and the C runtime's, all reachable
    before = before_attach_split(scanned.header)
    assert before["definitely-lost"] == (0, 0) and before["still-reachable"][1] >= 19
    p.stdin.write(b"\n")
    p.stdin.flush()
    expect(p, "checkpoint detach\n")
    second = snapshot(p.pid, tmp_path)
    assert second.header["seq"] == "3"
    assert by_site(second)["leak_after_attach"] == (-500, -5)
    out = cli("detach", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    last = memlog.read(wait_for_file(os.path.join(tmp_path, f"attachee-{p.pid}-4.memlog")))
    assert last.header["reason"] == "detach"
    assert not_stopped(p.pid)
    stdout, stderr = p.communicate(b"\n", timeout=60)
    # The program's own view: nothing happened.
    assert (p.returncode, b"checkpoint attach\nsum 99000\ncheckpoint counted\ncheckpoint detach\n"
            + stdout, stderr) == expected
    assert p.returncode == 7
    # Nothing after the detach: no exit report, no reporter left.
    assert len(reports_of(str(tmp_path), "attachee", p.pid)) == 4


def test_attach_to_a_threaded_cxx_server_and_detach(tmp_path):
    """The threaded server of `report`'s tests, started bare: attached at its
    first round (its workers running or waiting on its lock), its leaks
    counted exactly from there, detached before it exits."""
    prog = compile_program("slowleaks_server.cc")
    expected = bare_run([prog], b"\n" * 8)
    p = start_bare([prog], tmp_path)
    expect(p, "checkpoint round\n")
    out = cli("attach", "-q", p.pid, cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    for _ in range(7):
        p.stdin.write(b"\n")
        p.stdin.flush()
        expect(p, "checkpoint round\n")
    report = snapshot(p.pid, tmp_path)
    sites = by_site(report)
    assert sites["Session::open()"] == (7 * 96, 7)                  # rounds 2..8
    assert sites["parse_error_path(unsigned long)"] == (900, 3)     # rounds 2, 5, 7
    # A scan: the workers' arenas walked too; only the error path's buffers
    # are lost, nothing from before the attach.
    out = cli("scan", "--top", "0", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    scanned = memlog.read(out.stdout.splitlines()[0])
    assert scanned.header["definitely-lost"] == "900 3"
    assert before_attach_split(scanned.header)["definitely-lost"] == (0, 0)
    # the older blocks still live (most map nodes were churned away since)
    assert sum(b for _, b in before_attach_split(scanned.header).values()) > 10
    assert cli("detach", "-q", p.pid, cwd=tmp_path).returncode == 0
    stdout, stderr = p.communicate(b"\n", timeout=60)
    assert (p.returncode, b"checkpoint round\n" * 8 + stdout, stderr) == expected


PY_LOOP = r"""
import sys
import time
keep = []
for line in sys.stdin:
    if line.startswith("grow"):
        keep.extend(bytearray(100000) for _ in range(int(line.split()[1])))
    print("ok", len(keep), flush=True)
print("bye", len(keep))
"""


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.parametrize("python", [
    sys.executable,
    # Debian's is a non-PIE executable that takes free's address: dlsym
    # answers with its canonical PLT entry, which an attach routes to our
    # free -- once, free called itself until the stack overflowed (#64).
    pytest.param(SYSTEM_PYTHON, marks=pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON),
                                                         reason="no /usr/bin/python3")),
], ids=["this-python", "system-python"])
def test_attach_to_python3(tmp_path, python):
    env = dict(BARE_ENV, PYTHONMALLOC="malloc")
    argv = [python, "-c", PY_LOOP]
    expected = bare_run(argv, b"x\ngrow 20\nx\n", env)
    p = start_bare(argv, tmp_path, env)
    tell(p, b"x\n", "ok 0\n")
    out = cli("attach", "-q", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    tell(p, b"grow 20\n", "ok 20\n")
    # the shell on the attached process
    out = cli("shell", p.pid, "-c", "report; diff 1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    path = out.stdout.splitlines()[0]
    assert "+2,000,020 B +20 blocks" in out.stdout
    report = memlog.read(path)
    assert any(e.bytes == 20 * 100001 and e.blocks == 20 for e in report.entries), \
        [(e.bytes, e.blocks) for e in report.entries[:5]]
    assert cli("detach", "-q", p.pid, cwd=tmp_path).returncode == 0
    stdout, stderr = p.communicate(b"x\n", timeout=60)
    assert (p.returncode, b"ok 0\nok 20\n" + stdout, stderr) == expected


SQL_BEFORE = b"create table t(a, b);\ninsert into t select value, 'x' from generate_series(1, 2000);\n" \
             b"select 'ready';\n"
SQL_AFTER = b"create table u(a, b);\ninsert into u select value, printf('%0300d', value) from " \
            b"generate_series(1, 3000);\nselect count(*), sum(length(b)) from u;\n"
SQL_END = b"delete from u;\nselect count(*) from t;\n.quit\n"


@pytest.mark.skipif(not shutil.which("sqlite3"), reason="sqlite3 is not installed")
def test_attach_to_sqlite3_fed_on_a_pipe_and_scan_it(tmp_path):
    expected = bare_run(["sqlite3", ":memory:"], SQL_BEFORE + SQL_AFTER + SQL_END)
    p = start_bare(["sqlite3", ":memory:"], tmp_path)
    p.stdin.write(SQL_BEFORE)
    p.stdin.flush()
    expect(p, "ready\n")
    assert cli("attach", "-q", p.pid, cwd=tmp_path).returncode == 0
    p.stdin.write(SQL_AFTER)
    p.stdin.flush()
    expect(p, "3000|900000\n")
    out = cli("scan", "--top", "0", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = memlog.read(out.stdout.splitlines()[0])
    assert report.header["reason"] == "scan"
    before = before_attach_split(report.header)
    # table t's pages and the schema, from glibc's chains (glibc's cached
    # free chunks left out: none of them is called lost)
    assert sum(blocks for _, blocks in before.values()) > 100
    assert before["definitely-lost"] == (0, 0)
    # Table u's rows (300+ bytes each, in pages made after the attach) are
    # all counted, and none is called lost: the older table's pages and
    # the schema point to them.
    assert int(report.header["live-bytes"]) > 900000
    assert report.header["definitely-lost"] == "0 0"
    assert cli("detach", "-q", p.pid, cwd=tmp_path).returncode == 0
    stdout, stderr = p.communicate(SQL_END, timeout=60)
    assert (p.returncode, b"ready\n3000|900000\n" + stdout, stderr) == expected


def test_a_scan_classifies_the_blocks_made_before_the_attach(tmp_path):
    """reach.c builds its known structures bare; attached afterwards, a scan
    finds them in glibc's heap (no trailer) and classifies them as the live
    scan of a preloaded run does (blocks: 12 definitely, 10 indirectly lost),
    in glibc's usable sizes (valgrind's requested 852 and 400 bytes)."""
    prog = compile_program("reach.c")
    p = start_bare([prog], tmp_path)
    expect(p, "checkpoint built\n")
    assert cli("attach", "-q", p.pid, cwd=tmp_path).returncode == 0
    out = cli("scan", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = memlog.read(out.stdout.splitlines()[0])
    before = before_attach_split(report.header)
    assert before["definitely-lost"] == (880, 12)
    assert before["indirectly-lost"] == (432, 10)
    # 5 as in a preloaded run, and the main thread's DTV that glibc's loader
    # grew for libmtrace.so (reached through an interior pointer, as
    # valgrind says of every thread's DTV)
    assert before["possibly-lost"][1] in (5, 6)
    assert "(before attach: no stack recorded)" in out.stdout
    stdout, _ = p.communicate(b"\n", timeout=60)
    assert p.returncode == 0


def test_what_cannot_be_attached_is_said_and_left_running(tmp_path):
    # A static binary.
    src = tmp_path / "spin.c"
    src.write_text("#include <unistd.h>\nint main(void){for(;;)pause();}\n")
    static = tmp_path / "spin"
    if subprocess.run(["gcc", "-static", "-o", static, src], capture_output=True).returncode != 0:
        pytest.skip("no static libc to build a static program with")
    p = subprocess.Popen([static], env=BARE_ENV)
    refused_and_untouched(p, tmp_path, f"process {p.pid} is statically linked: there is no dynamic "
                          "loader in it to load the tracer with (rebuild it without -static)")
    # No such process; one that is not attached; one under libmemleak run.
    out = cli("attach", 999999999, cwd=tmp_path)
    assert (out.returncode, out.stderr) == (1, "libmemleak: attach: no process 999999999\n")
    p = subprocess.Popen(["sleep", "30"], env=BARE_ENV)
    try:
        out = cli("detach", p.pid, cwd=tmp_path)
        assert out.returncode == 1
        assert "is not attached" in out.stderr
    finally:
        p.kill()
        p.wait()
    p = subprocess.Popen([sys.executable, "-m", "libmemleak", "run", "-q", "sleep", "30"],
                         env=CLI_ENV, cwd=tmp_path)
    try:
        from helpers import wait_for_reporter
        wait_for_reporter(p.pid)
        out = cli("attach", p.pid, cwd=tmp_path)
        assert (out.returncode, out.stderr) == (
            1, f"libmemleak: attach: process {p.pid} is already traced by libmemleak\n")
    finally:
        p.kill()
        p.wait()


def test_a_process_under_a_debugger_is_refused_in_one_line(tmp_path):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    p = subprocess.Popen(["sleep", "30"], env=BARE_ENV)
    PTRACE_SEIZE, PTRACE_DETACH = 0x4206, 17
    if libc.ptrace(PTRACE_SEIZE, p.pid, None, None) != 0:
        p.kill()
        pytest.skip(f"cannot ptrace here: errno {ctypes.get_errno()}")
    try:
        out = cli("attach", p.pid, cwd=tmp_path)
        with open(f"/proc/{p.pid}/status") as f:
            state = next(line for line in f if line.startswith("State:"))
    finally:
        libc.ptrace(PTRACE_DETACH, p.pid, None, None)
    assert out.returncode == 1
    assert out.stderr == (f"libmemleak: attach: process {p.pid} is already traced by process "
                          f"{os.getpid()} (a debugger or strace?): detach that first\n")
    assert "stopped" not in state  # left as it was: running, the test its only tracer
    p.kill()
    p.wait()


def test_preloaded_into_a_non_pie_program_taking_mallocs_address(tmp_path):
    """The tracer tells a preload from a dlopen by the modules' lookup
    order, not by asking dlsym for malloc: in this program that answer is
    the program's own PLT entry."""
    prog = compile_program("fnptr.c", "-no-pie")
    out = cli("run", "-q", prog, cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "1\n"), out.stderr
    [report] = reports_of(str(tmp_path), "fnptr", int(sorted(os.listdir(tmp_path))[0].split("-")[1]))
    assert by_site(report)["main"] == (1234, 1)


def test_a_process_in_another_mount_namespace_is_told_what_to_do(tmp_path):
    """A container's process cannot see our library at our path: one line
    says so and how to attach anyway; the process is untouched."""
    from libmemleak import preload_path
    hide = os.path.dirname(preload_path())
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                          f"mount -t tmpfs none {hide} && echo ready && exec sleep 30"],
                         env=BARE_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.stdout.readline() != b"ready\n":
        p.kill()
        p.wait()
        pytest.skip("cannot make a mount namespace here")
    refused_and_untouched(p, tmp_path, f"process {p.pid} cannot see {preload_path()} (another mount "
                          "namespace: a container?): copy libmtrace.so into its file system and "
                          "pass --library with its path there")


@pytest.mark.parametrize("how", ["run", "attach"])
def test_a_process_whose_main_thread_exited(tmp_path, how):
    """pthread_exit in main leaves a zombie main thread while a worker runs:
    the reporter keeps serving (it once took the missing maps for an exec),
    snapshot, scan and attach look through the live thread."""
    prog = compile_program("mainexits.c")
    argv = [prog] if how == "attach" else [sys.executable, "-m", "libmemleak", "run", "-q", prog]
    p = start_bare(argv, tmp_path, None if how == "attach" else CLI_ENV)
    expect(p, "checkpoint started\n")
    for _ in range(500):  # the main thread exits right after starting the worker
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                break
        time.sleep(0.01)
    else:
        raise AssertionError("the main thread did not exit")
    if how == "attach":
        out = cli("attach", "-q", p.pid, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
    time.sleep(1.5)  # longer than the reporter's exec check
    p.stdin.write(b"\n")
    p.stdin.flush()
    expect(p, "checkpoint ready\n")
    assert by_site(snapshot(p.pid, tmp_path))["site_worker"] == (1000, 10)
    out = cli("scan", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    scanned = memlog.read(out.stdout.splitlines()[0])
    assert categories_of(next(e for e in scanned.entries if e.frames[0].function == "site_worker")) \
        == {"still-reachable": (1000, 10)}
    p.communicate(b"\n", timeout=60)
    assert p.returncode == 5


def test_attach_with_a_report_directory_that_cannot_take_reports(tmp_path):
    p = subprocess.Popen(["sleep", "30"], env=BARE_ENV)
    try:
        out = cli("attach", "--config", "dir=/nonexistent/reports", p.pid, cwd=tmp_path)
        assert (out.returncode, out.stderr) == (1, "libmemleak: attach: the report directory "
                                                   "/nonexistent/reports is missing or not "
                                                   "writable: nothing done\n")
        with open(f"/proc/{p.pid}/maps") as f:
            assert "libmtrace" not in f.read()
    finally:
        p.kill()
        p.wait()


def test_a_sandboxed_process_that_may_start_no_process_is_said_at_once(tmp_path):
    """(#28 item 10) Attach into a process whose seccomp filter forbids
    clone took 11 s, named its reports PID-PID-N.memlog, and detach said a
    last report was written when none was.  Now: at once, one line each,
    status 1; the process runs on, its output and status its own."""
    prog = compile_program("noclone.c")
    p = subprocess.Popen([prog], env=BARE_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        assert p.stdout.readline() == b"sandboxed\n"
        started = time.monotonic()
        out = cli("attach", p.pid, cwd=tmp_path)
        assert time.monotonic() - started < 10   # not the reporter's 10 s wait: generous on a loaded machine
        assert (out.returncode, out.stderr) == (1, (
            f"libmemleak: attach: process {p.pid} is traced, but no reporter could be started for it (a "
            "seccomp filter or a sandbox may forbid it new processes; its stderr says why): no report "
            "will be written\n"))
        out = cli("detach", p.pid, cwd=tmp_path)
        assert (out.returncode, out.stderr) == (1, f"libmemleak: detached from pid {p.pid}, but no last "
                                                   "report was written: it has no reporter (see its stderr)\n")
        stdout, stderr = p.communicate(b"\n", timeout=60)
    finally:
        p.kill()
    assert p.returncode == 0 and stdout == b""
    said = stderr.decode().splitlines()
    assert len(said) == 1 and said[0].startswith("libmemleak: cannot start the reporter as uid ")
    assert "(clone: a seccomp filter or a sandbox may forbid the program new processes)" in said[0]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]


OWNHEAP = ("ownheap.c", "-O2", "-fno-optimize-sibling-calls")


def entry_bytes(pid, prog, names):
    """The first 16 bytes of each function `names` of executable prog in process pid."""
    from libmemleak.live import attach as attach_module
    _path, base = attach_module.find_module(attach_module.read_maps(pid),
                                            lambda name: name == os.path.basename(prog))
    offsets = attach_module.symbol_offsets(prog, names)
    with open(f"/proc/{pid}/mem", "rb") as mem:
        return {name: (mem.seek(base + offsets[name]), mem.read(16))[1] for name in names}


def test_attach_routes_a_program_with_its_own_malloc(tmp_path):
    """An executable that defines malloc calls it directly, through no
    offset table (#29): the attach patches its entries, with its other
    threads stopped, and what it allocates afterwards is exact."""
    from test_allocators import OWNHEAP_LEAKS
    names = ("malloc", "free", "calloc", "realloc")
    prog, bare = compile_program(*OWNHEAP), {}
    with attached_between([prog, "first"], tmp_path,
                          before_attach=lambda p: bare.update(entry_bytes(p.pid, prog, names))) as (p, out, report):
        assert out.stderr == ""
        assert "blind" not in report.header
        assert report.header["routed"] == (f"7 allocator entry points of {prog} (its own malloc, free, "
                                           "calloc, realloc) are routed to libmemleak")
        sites = by_site(report)
        assert {site: sites.get(site) for site in OWNHEAP_LEAKS} == OWNHEAP_LEAKS
        assert (report.header["live-bytes"], report.header["live-blocks"]) == ("1492", "14")  # stdout's buffer came before
        assert report.header["allocations"] == str(3000 + 14 + 1)
        assert cli("check", tmp_path, "--max-live", "1000").returncode == 1  # a verdict, not "not seen"
        patched = entry_bytes(p.pid, prog, names)
        assert all(patched[n][0] == 0xE9 and patched[n] != bare[n] for n in names)  # jmp rel32
        # detach writes the program's own bytes back
        assert cli("detach", "-q", p.pid, cwd=tmp_path).returncode == 0
        assert entry_bytes(p.pid, prog, names) == bare
        let_finish(p)


def test_attach_with_route_no_says_what_it_cannot_see(tmp_path):
    """Not routed on purpose: the attach says the blind spot, and so do
    every report and check."""
    prog = compile_program(*OWNHEAP)
    with attached_between([prog, "first"], tmp_path, config="route=no") as (p, out, report):
        assert out.stderr == (f"libmemleak: attach: NOT SEEN: malloc, free, calloc, realloc are defined "
                              f"by {prog}, which the program's symbol lookups find before libmemleak's, "
                              "and is not routed (MEMLEAK_CONFIG route=no): allocations made through it "
                              "are not seen\n")
        assert report.header["blind"] == out.stderr.removeprefix("libmemleak: attach: NOT SEEN: ").strip()
        assert report.header["live-blocks"] == "0"
        assert cli("check", tmp_path, "--max-leaks", "0").returncode == 3
        detach_and_let_finish(p, tmp_path)


def test_attach_waits_for_no_thread_inside_the_bytes_it_patches(tmp_path, monkeypatch):
    """A thread stopped part-way through a function's first bytes would be
    wrecked by the jump written over them: the process refuses ("busy"),
    the attacher lets the threads run and tries again.  Here the first two
    stops report a thread one byte into malloc."""
    from libmemleak.live import attach as attach_module
    prog = compile_program(*OWNHEAP)
    p = start_bare([prog, "first"], tmp_path)
    try:
        expect(p, "ready\n")
        maps = attach_module.read_maps(p.pid)
        _path, base = attach_module.find_module(maps, lambda name: name == os.path.basename(prog))
        malloc_at = base + attach_module.symbol_offsets(prog, ("malloc",))["malloc"]
        stops = []
        real_places = attach_module.thread_places

        def places(world):
            stops.append(1)
            return real_places(world) + ([malloc_at + 1] if len(stops) <= 2 else [])

        monkeypatch.setattr(attach_module, "thread_places", places)
        config = f"dir={tmp_path},signal=none"
        attach_module.attach(p.pid, config)
        assert len(stops) == 3
        p.stdin.write(b"\n")
        p.stdin.flush()
        expect(p, "done\n")
        report = snapshot(p.pid, tmp_path)
        assert "blind" not in report.header and "routed" in report.header
        assert (report.header["live-bytes"], report.header["live-blocks"]) == ("1492", "14")
        detach_and_let_finish(p, tmp_path)
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(not os.path.exists("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.a"),
                    reason="needs Debian's libgoogle-perftools-dev")
def test_attach_to_a_static_tcmalloc_while_its_threads_allocate(tmp_path):
    """A statically linked tcmalloc, four threads allocating and freeing
    through it without pause while the attach patches it: the program
    runs on, and what it leaks after the attach is exact."""
    from test_allocators import TCMALLOC_STATIC
    prog = compile_program("tcmalloced.cc", "-Wl,--whole-archive", TCMALLOC_STATIC,
                           "-Wl,--no-whole-archive", name="tcmalloced_static")
    with attached_between([prog, "wait"], tmp_path) as (p, out, report):
        assert out.stderr == ""
        assert "blind" not in report.header
        assert report.header["routed"].endswith(f"of {prog} (its own malloc, free, calloc, realloc) are "
                                                "routed to libmemleak")
        sites = by_site(report)
        assert sites["site_malloc(unsigned long)"] == (1000, 10)
        assert sites["site_new()"] == (320, 5)
        assert (report.header["live-bytes"], report.header["live-blocks"]) == ("1320", "15")  # the churn: all given back
        assert int(report.header["allocations"]) > 2000
        detach_and_let_finish(p, tmp_path)


@pytest.mark.skipif(not os.path.exists("/usr/include/mimalloc.h"), reason="needs Debian's libmimalloc-dev")
def test_attach_to_a_program_calling_mimalloc_by_name(tmp_path):
    """The attach routes mimalloc's own names (mi_malloc, mi_free, ...) in
    every calling module's offset table, as it does malloc's: what the
    program makes after the attach is exact, across the families."""
    from test_allocators import mimalloc_exactly
    prog = compile_program("mimalloced.c", "-O2", "-lmimalloc")
    with attached_between([prog, "wait"], tmp_path) as (p, out, report):
        assert out.stderr == ""
        assert report.header["routed"] == (
            "allocator entry points of /lib/x86_64-linux-gnu/libmimalloc.so.2 (mimalloc's mi_*) are routed to "
            "libmemleak through the offset tables of the modules that call them")
        mimalloc_exactly(report)
        detach_and_let_finish(p, tmp_path)


GROWING_PAGE = """<html><body><script>
let kept = [];
setInterval(() => { for (let i = 0; i < 300; i++) { const d = document.createElement('div');
  d.textContent = 'row ' + kept.length; document.body.appendChild(d); kept.push(d); } }, 100);
</script></body></html>"""


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")),
                    reason="needs Debian's chromium")
def test_attach_to_a_running_chromium_and_detach(tmp_path):
    """A headless Chromium browser, started bare, its ~30 threads running:
    the attach patches the allocator its executable defines (its shim over
    PartitionAlloc) with them stopped, reports name what it allocates, and
    the detach gives the bytes back -- the browser runs on throughout."""
    from libmemleak.live import attach as attach_module
    page = tmp_path / "grow.html"
    page.write_text(GROWING_PAGE)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    p = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                          "--no-first-run", "--disable-background-networking", "--disable-component-update",
                          "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
                          "--remote-debugging-port=0", page.as_uri()],
                         cwd=tmp_path, env=BARE_ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)  # (it says much; a pipe nobody reads would fill)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(os.listdir(f"/proc/{p.pid}/task")) < 10:
            time.sleep(0.5)  # its threads started
        time.sleep(2)
        _path, base = attach_module.find_module(attach_module.read_maps(p.pid),
                                                lambda name: name == "chromium")
        binary = os.path.realpath(f"/proc/{p.pid}/exe")
        offsets = attach_module.symbol_offsets(binary, ("malloc", "free"))
        def entries():
            with open(f"/proc/{p.pid}/mem", "rb") as mem:
                return [(mem.seek(base + offsets[n]), mem.read(16))[1] for n in ("malloc", "free")]
        bare = entries()
        out = cli("attach", "-q", p.pid, cwd=tmp_path)
        assert (out.returncode, out.stderr) == (0, ""), out.stderr
        assert all(b[0] == 0xE9 for b in entries())
        time.sleep(3)
        report = snapshot(p.pid, tmp_path)
        assert "blind" not in report.header
        assert report.header["routed"].endswith("/chromium (its own malloc, free, calloc, realloc) are "
                                                "routed to libmemleak")
        assert int(report.header["allocations"]) > 1000
        assert max(len(e.frames) for e in report.entries) >= 8
        assert cli("detach", "-q", p.pid, cwd=tmp_path).returncode == 0
        assert entries() == bare
        time.sleep(1)
        assert p.poll() is None and not_stopped(p.pid)  # the browser runs on
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_attach_records_an_event_log(tmp_path):
    """attach --config record=all: the log starts at the attach, ends at
    the detach, and replays to what the reports say, per site, exactly
    (the frees of blocks from before the attach are not in it)."""
    prog = compile_program("attachee.c")
    p = start_bare([prog], tmp_path)
    expect(p, "checkpoint attach\n")
    out = cli("attach", "--config", "record=all", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    p.stdin.write(b"\n")
    p.stdin.flush()
    expect(p, "sum 99000\n")
    expect(p, "checkpoint counted\n")
    p.stdin.write(b"\n")
    p.stdin.flush()
    expect(p, "checkpoint detach\n")
    out = cli("detach", p.pid, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    p.communicate(b"\n", timeout=60)
    reports = reports_of(str(tmp_path), "attachee", p.pid)
    assert reports[-1].header["reason"] == "detach"
    log = wait_for_file(os.path.join(tmp_path, f"attachee-{p.pid}.events"))
    r = cli("replay", "--json", "--at", "100000", log, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["baseline_known"] and doc["before_log_bytes"] == 0
    replayed, reported = {}, {}
    for row in doc["stacks"]:
        name = row["frames"][0].strip("\t").split("\t")[0] if row["frames"] else "?"
        b, n = replayed.get(name, (0, 0))
        replayed[name] = (b + row["bytes"], n + row["blocks"])
    for report in reports:
        for name, (b, n) in by_site(report).items():
            ob, on = reported.get(name, (0, 0))
            reported[name] = (ob + b, on + n)
    assert replayed["leak_after_attach"] == (500, 5) == reported["leak_after_attach"]
    assert replayed["zeroed_after_attach"] == (500, 5) == reported["zeroed_after_attach"]
    assert replayed["grown_after_attach"] == (500, 1) == reported["grown_after_attach"]
    assert {k: v for k, v in replayed.items() if v != (0, 0)} == {k: v for k, v in reported.items() if v != (0, 0)}


def in_system_call(pid, nr):
    with open(f"/proc/{pid}/syscall") as f:
        return f.read().split()[0] == str(nr)


def test_attach_never_borrows_a_thread_while_a_fork_holds_mallocs_locks(tmp_path):
    """glibc's fork() holds every malloc arena lock across its clone call; a
    thread borrowed then would wait in malloc for ever (a program forking
    in a loop hung for good in 2 of 3 attaches).  Here the clone is held
    open: attach refuses in one line, the program runs on, and once the
    fork is done the attach goes through."""
    prog = compile_program("forkheld.c", "-lpthread")
    release = tmp_path / "release"
    p = start_bare([prog, str(release)], tmp_path)
    try:
        expect(p, "forking\n")
        wait_for(lambda: in_system_call(p.pid, 56), "the main thread inside clone")
        out = cli("attach", p.pid, cwd=tmp_path)
        assert out.returncode == 1, out.stderr
        assert out.stderr == (f"libmemleak: attach: process {p.pid}: thread {p.pid} of process {p.pid} "
                              "was inside fork() (which holds malloc's locks) at every try\n")
        assert not_stopped(p.pid)
        release.touch()
        expect(p, "forked\n")
        out = cli("attach", "-q", p.pid, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        tell(p, b"grow\n", "ok 1\n")
        assert through(snapshot(p.pid, tmp_path), "main") == (100000, 1)
        stdout, _ = p.communicate(b"", timeout=60)
        assert (p.returncode, stdout) == (0, b"bye\n")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
