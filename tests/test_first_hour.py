"""What a new user hits in the first hour (issue "The first hour"): each
test reproduces one trap with a real program, the real command and real
signals, and checks the fix."""

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import (CLI_ENV, Traced, by_site, cli, cli_argv, compile_program, reporters_of, reports_of,
                     signal_handled, wait_for, wait_for_file, wait_for_reporter)
from libmemleak import PACKAGE_DIR, preload_path
from libmemleak.files import memlog

libmemleak = cli_argv  # `libmemleak ARGS` as a user types it


def run_blocked(workdir, *run_args, prog=None):
    """`libmemleak run RUN_ARGS blocked`, stopped at its checkpoint."""
    prog = prog or compile_program("blocked.c")
    p = subprocess.Popen(libmemleak("run", *run_args, prog), cwd=workdir, env=CLI_ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b"checkpoint blocked\n"
    return p


def finish(p):
    out, err = p.communicate(b"\n", timeout=60)
    return p.returncode, out.decode(), err.decode()


# -- 1. silent non-tracing ----------------------------------------------------

def test_run_with_config_collects_from_the_start(workdir):
    """`run --config depth=32` (the example of `run --help`) used to wait for
    the program's mtrace(): no report, and the signal swallowed."""
    p = run_blocked(workdir, "--config", "depth=32")
    p.send_signal(signal.SIGUSR1)
    first = memlog.read(wait_for_file(os.path.join(workdir, f"blocked-{p.pid}-1.memlog")))
    status, _, err = finish(p)
    assert status == 0, err
    assert first.header["reason"] == "signal"
    assert first.header["depth"] == "32"
    assert by_site(first)["site_blocked"] == (4242, 1)


def test_run_can_still_wait_for_mtrace_and_a_signal_then_says_why_nothing_came(workdir):
    p = run_blocked(workdir, "--wait-for-mtrace")
    for _ in range(2):  # said once, not per signal
        p.send_signal(signal.SIGUSR1)
        wait_for(lambda: signal_handled(p.pid), "the signal handled")
    status, _, err = finish(p)
    assert status == 0, err
    assert reports_of(str(workdir), "blocked", p.pid) == []
    said = [line for line in err.splitlines() if "no report written" in line]
    assert len(said) == 1, err
    assert "mtraceinit" in said[0] and "--wait-for-mtrace" in said[0]


def test_bare_config_without_mtraceinit_explains_the_ignored_signal(workdir):
    """The seed's semantics stay for LD_PRELOAD with MEMLEAK_CONFIG, but the
    signal that does nothing says why."""
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir, config="depth=8")
    t.expect("blocked")
    t.proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: signal_handled(t.pid), "the signal handled")
    t.resume()
    assert t.finish() == 0
    assert t.reports() == []
    assert "nothing is being collected yet" in t.stderr


# -- 2. a bad report directory ------------------------------------------------

@pytest.mark.parametrize("how", ["missing", "a file"])
def test_bad_report_directory_is_said_at_start_and_the_final_report_is_kept(workdir, how):
    target = workdir / "reports"
    if how == "a file":
        target.write_text("")
    p = run_blocked(workdir, "--config", f"dir={target}")
    # One line at start, naming the directory, before any report is asked.
    first_line = p.stderr.readline().decode()
    while "tracing blocked" in first_line:
        first_line = p.stderr.readline().decode()
    assert f"report directory {target}:" in first_line, first_line
    status, _, err = finish(p)
    assert status == 0, err
    moved = [line for line in err.splitlines() if "the final report went to" in line]
    assert len(moved) == 1, err
    assert f"cannot write a report in {target}:" in moved[0]  # the directory, not a temporary file
    path = moved[0].rsplit(" ", 1)[1]
    st = os.lstat(path)
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()
    assert os.lstat(os.path.dirname(path)).st_mode & 0o077 == 0
    final = memlog.read(path)
    assert final.header["reason"] == "exit"
    assert by_site(final)["site_blocked"] == (4242, 1)
    os.unlink(path)


# -- 3. exactly one final report ----------------------------------------------

def test_every_run_ends_with_exactly_one_final_report(workdir):
    """A spurious `death` report used to follow the exit report in some runs
    with signals (a second reporter, started in the moment the first had
    finished the exit report and left).  The machine is loaded while it
    runs (the race needs the exit path to be slow), and the caller reads
    the program's stderr to its end, as a script does: no reporter may hold
    it past the program's exit."""
    prog = compile_program("exitrace.c")
    hogs = [subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()+60\nwhile time.time()<t: pass"])
            for _ in range(2)]
    try:
        for run in range(10):
            p = subprocess.Popen(libmemleak("run", "-q", prog, "1500"), cwd=workdir, env=CLI_ENV,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            wait_for_reporter(p.pid)  # started after the signal handler: signals are safe now
            for _ in range(3):
                time.sleep(0.25)
                p.send_signal(signal.SIGUSR1)
            p.communicate(timeout=60)  # stderr reaches its end (a reporter holding it would hold this)
            assert p.returncode == 0
            wait_for(lambda: not reporters_of(p.pid), "its reporter gone")  # (a spurious report came after the exit)
            reasons = [r.header["reason"] for r in reports_of(str(workdir), "exitrace", p.pid)]
            # Signals that come while a report is being started are answered by
            # that one report (documented in docs/memlog.md), so a loaded machine
            # may write fewer than three signal reports; never a second final one.
            assert reasons[-1] == "exit" and 1 <= len(reasons) - 1 <= 3, (run, reasons)
            assert set(reasons[:-1]) == {"signal"}, (run, reasons)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def test_a_reporter_that_finds_the_final_report_written_writes_no_other(workdir):
    """The mechanism behind the spurious report, made deterministic: a
    second reporter for the same process, started after its exit report,
    finds it gone.  It must not write a `death` report after the `exit`
    one."""
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir, config="mtraceinit")
    t.expect("blocked")
    reporter = wait_for_reporter(t.pid)
    import fcntl
    opened = os.open(f"/proc/{reporter}/fd/3", os.O_RDWR)  # the memfd, opened again
    segment = fcntl.fcntl(opened, fcntl.F_DUPFD, 10)  # above 3 and 4, where they go
    os.close(opened)
    opened = os.pidfd_open(t.pid)
    pidfd = fcntl.fcntl(opened, fcntl.F_DUPFD, 10)
    os.close(opened)
    t.resume()
    assert t.finish() == 0
    wait_for_file(os.path.join(workdir, f"blocked-{t.pid}-1.memlog"))

    def as_reporter_fds():
        os.dup2(segment, 3)
        os.dup2(pidfd, 4)
    late = subprocess.run([sys.executable, "-E", os.path.join(PACKAGE_DIR, "_reporter_main.py")],
                          preexec_fn=as_reporter_fds, close_fds=False, cwd=workdir,
                          capture_output=True, text=True, timeout=60)
    os.close(segment)
    os.close(pidfd)
    assert late.returncode == 0, late.stderr
    reasons = [r.header["reason"] for r in reports_of(str(workdir), "blocked", t.pid)]
    assert reasons == ["exit"]


# -- 4, 5. file names and function names as gdb shows them --------------------

def test_relative_compilation_directory_is_not_doubled_and_public_names_win(workdir):
    """A relative DW_AT_comp_dir (Debian builds with -fdebug-prefix-map=
    ...=.) was joined twice: sub/sub/x.c.  glibc's hidden alias
    __GI___strdup is shown as strdup."""
    src = os.path.join(workdir, "x.c")
    with open(src, "w") as f:
        f.write('#include <string.h>\n#include <stdio.h>\n'
                '__attribute__((noinline)) char *copy(const char *s) { return strdup(s); }\n'
                'int main(void) { printf("%p\\n", (void *)copy("leak")); return 0; }\n')
    exe = os.path.join(workdir, "x")
    subprocess.run(["gcc", "-g", f"-fdebug-prefix-map={workdir}=./sub", "x.c", "-o", exe],
                   cwd=workdir, check=True)
    p = subprocess.Popen(libmemleak("run", "-q", exe), cwd=workdir, env=CLI_ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    [report] = reports_of(str(workdir), "x", p.pid)
    entry = next(e for e in report.entries if any(f.function == "copy" for f in e.frames))
    copy = next(f for f in entry.frames if f.function == "copy")
    assert copy.file == "./sub/x.c" and copy.line == 3
    assert entry.frames[0].function == "strdup"
    if entry.frames[0].file:  # with glibc's debug info (libc6-dbg)
        assert entry.frames[0].file == "./string/strdup.c"


# -- 11. one stack, one entry ------------------------------------------------

@pytest.mark.parametrize("opt", ["-O0", "-O1"])
def test_calls_that_print_as_one_stack_are_one_entry(workdir, opt):
    prog = compile_program("oneline.c", opt, name=f"oneline{opt}")
    p = subprocess.Popen(libmemleak("run", "-q", prog), cwd=workdir, env=CLI_ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    [report] = reports_of(str(workdir), f"oneline{opt}", p.pid)
    copies = [e for e in report.entries if any(f.function == "prefix_copy" for f in e.frames)]
    assert [(e.bytes, e.blocks) for e in copies] == [(85, 5)]
    texts = [tuple((f.function, f.module, f.file, f.line) for f in e.frames) for e in report.entries]
    assert len(texts) == len(set(texts))  # no two entries print the same


# -- 6. mistakes get one line and a documented status ------------------------

def one_line(r):
    assert r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("libmemleak: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("args, status, words", [
    (["demo", "--keep", "{file}"], 2, "not a directory"),
    (["demo", "--keep", "/proc/nope"], 2, "--keep /proc/nope"),
    (["run"], 2, "name the program"),
    (["run", "no-such-program-xyz"], 127, "command not found"),
    (["run", "/no/such/path"], 127, "command not found"),
    (["run", "{file}"], 126, "not an ELF"),
    (["run", "--sample", "lots", "true"], 2, "--sample"),
    (["run", "--wait-for-mtrace", "--config", "mtraceinit", "true"], 2, "contradict"),
    (["no-such-command"], 2, "invalid choice"),
])
def test_user_mistakes_get_one_line_and_a_documented_status(workdir, args, status, words):
    afile = workdir / "afile"
    afile.write_text("not a program\n")
    os.chmod(afile, 0o755)
    args = [a.replace("{file}", str(afile)) for a in args]
    r = subprocess.run(libmemleak(*args), cwd=workdir, env=CLI_ENV, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == status, r.stderr
    assert words in one_line(r)


@pytest.mark.parametrize("config, said", [
    ("mtraceinit, depth=8", None),
    (" mtraceinit ,depth = 8 ", None),
    ("mtraceinit,dir=", "ignoring 'dir=': needs a path"),
    ("mtraceinit,dir", "ignoring 'dir': needs a path"),
    ("mtraceinit,depth=99", "depth must be 1 to 64"),
    ("mtraceinit,mtraceinit=1", "mtraceinit takes no value"),
    ("mtraceinit,alloc_fns=", "ignoring 'alloc_fns=': needs a regular expression"),
    ("mtraceinit,alloc_fns=" + "x" * 300, "alloc_fns takes a regular expression of at most 255 characters"),
    ("mtraceinit,scan_heuristics=valgrind+bogus", "heuristics are all, none, valgrind, or some of"),
])
def test_config_items_are_trimmed_and_missing_values_named(workdir, config, said):
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir, config=config)
    [report] = t.reports_at("blocked")
    assert t.finish() == 0
    lines = [line for line in t.stderr.splitlines() if "MEMLEAK_CONFIG" in line]
    if said is None:
        assert lines == [], t.stderr
        assert report.header["depth"] == "8"
    else:
        assert len(lines) == 1 and said in lines[0], t.stderr


# -- 8. the launcher says what it does ---------------------------------------

def test_run_says_what_it_traces_and_which_reports_it_wrote(workdir):
    p = run_blocked(workdir)
    p.send_signal(signal.SIGUSR1)
    wait_for_file(os.path.join(workdir, f"blocked-{p.pid}-1.memlog"))
    status, _, err = finish(p)
    assert status == 0
    lines = err.splitlines()
    assert lines[0] == (f"libmemleak: tracing blocked (pid {p.pid}); reports go to "
                        f"{workdir}/blocked-{p.pid}-N.memlog; ask for a report with: "
                        f"kill -USR1 {p.pid} (or: libmemleak snapshot {p.pid}); a final one at exit")
    assert lines[-1] == (f"libmemleak: wrote 2 reports: {workdir}/blocked-{p.pid}-1.memlog, "
                         f"{workdir}/blocked-{p.pid}-2.memlog")
    # another report signal, or none: the line says how to ask
    other = run_blocked(workdir, "--config", "signal=usr2")
    status, _, err = finish(other)
    assert status == 0 and f"kill -USR2 {other.pid} (or: libmemleak snapshot {other.pid})" in err
    quiet = run_blocked(workdir, "-q")
    status, _, err = finish(quiet)
    assert status == 0 and err == ""


# -- 9. (Python programs: no start-up hint now, their objects routed each at
# its own stack -- tests/test_python_frames.py.)  The README's demo ----------

def test_the_demo_ends_with_the_ranked_leaks(workdir):
    """The README's first command: build the bundled server, take reports
    while it runs, and show `libmemleak report` naming its two leaks."""
    keep = workdir / "demo"
    r = subprocess.run(libmemleak("demo", "--keep", str(keep)), env=CLI_ENV, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert len([n for n in os.listdir(keep) if n.endswith(".memlog")]) == 5
    ranked = r.stdout[r.stdout.index("$ libmemleak report"):]
    first, second = ranked.index("#1 "), ranked.index("#2 ")
    assert "cache_put (leaky_server.c:" in ranked[first:second]
    assert "parse_request (leaky_server.c:" in ranked[second:]
    assert "never freed" in ranked[first:second]


def test_snapshot_after_the_report_directory_was_deleted_says_so(tmp_path):
    """(#28 item 9) It printed a file name that never existed (...-0.memlog)
    and exited 0."""
    from helpers import Traced
    where = tmp_path / "reports"
    where.mkdir()
    t = Traced([compile_program("slowleaks.c")], where, config=f"mtraceinit,dir={where}")
    try:
        t.expect("round")
        where.rmdir()
        out = cli("snapshot", t.pid)
        assert out.returncode == 1
        assert out.stdout == ""
        assert out.stderr == (f"libmemleak: snapshot: process {t.pid}: no report was written in "
                              f"{where}: it does not exist any more (the data is kept for the next "
                              "report)\n")
    finally:
        t.proc.kill()
        t.proc.wait()


def test_run_keeps_an_exported_memleak_config_and_says_which_option_wins(tmp_path):
    """(#28 item 10) `run` replaced a MEMLEAK_CONFIG the user exported:
    their dir= was lost without a word."""
    prog = compile_program("blocked.c")
    (tmp_path / "reports").mkdir()
    env = dict(CLI_ENV, MEMLEAK_CONFIG="dir=reports,depth=8")
    r = subprocess.run(libmemleak("run", "-q", "--config", "depth=32", prog), cwd=tmp_path, env=env,
                       input=b"\n", capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.decode() == ("libmemleak: run: your MEMLEAK_CONFIG is kept, but run's options win "
                                 "over depth=8 by depth=32\n")
    [name] = os.listdir(tmp_path / "reports")
    report = memlog.read(tmp_path / "reports" / name)
    assert report.header["reason"] == "exit" and report.header["depth"] == "32"
    # without a conflict, nothing is said
    r = subprocess.run(libmemleak("run", "-q", prog), cwd=tmp_path, env=env, input=b"\n",
                       capture_output=True, timeout=120)
    assert (r.returncode, r.stderr) == (0, b"")
    assert len(os.listdir(tmp_path / "reports")) == 2


def test_a_program_started_as_proc_self_exe_is_named_by_its_executable(tmp_path):
    """(#28 item 10) A program re-executing itself through /proc/self/exe
    reported as exe-PID-N.memlog."""
    prog = compile_program("reexec.c")
    r = subprocess.run(libmemleak("run", "-q", prog), cwd=tmp_path, env=CLI_ENV, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split()[1])
    assert sorted(os.listdir(tmp_path)) == [f"reexec-{pid}-1.memlog"]
    report = memlog.read(tmp_path / f"reexec-{pid}-1.memlog")
    assert by_site(report)["site_reexec"] == (321, 1)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the program as another user")
def test_a_user_who_cannot_run_the_reporters_python_is_told_once_with_the_remedy(tmp_path):
    """(#28 item 10) The reporter runs with the installing user's Python; a
    program running as a service account that cannot execute it (a venv
    under a private home) got no report and not a word."""
    import pathlib
    import tempfile
    top = pathlib.Path(tempfile.mkdtemp(prefix="mlk-users-"))   # pytest's own are root-only
    try:
        private_python_for_another_user(top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def private_python_for_another_user(tmp_path):
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    # A script, not a symlink: a venv's python reached through a link in
    # another directory finds no pyvenv.cfg and none of the venv's modules,
    # and root's setpriv, which the tracer sees first, would say so too.
    (private / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    os.chmod(private / "python", 0o755)
    work = tmp_path / "work"
    work.mkdir()
    os.chmod(work, 0o777)
    os.chmod(tmp_path, 0o755)
    prog = compile_program("deepstack.c")
    # The library from a place the other user can read: the checkout may sit
    # where it cannot (a mktemp -d clone, a 0750 home: #64 item 18).
    shared = tmp_path / "lib" / "libmemleak"  # (the whole package: its reporter imports it from beside it)
    shutil.copytree(PACKAGE_DIR, shared, ignore=shutil.ignore_patterns("__pycache__"))
    os.chmod(tmp_path / "lib", 0o755)
    env = dict(CLI_ENV, LD_PRELOAD=str(shared / "libmtrace.so"), MEMLEAK_PYTHON=str(private / "python"))
    env.pop("MEMLEAK_CONFIG", None)
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", prog], cwd=work,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr == (f"libmemleak: cannot start the reporter as uid 65534: {private}/python: permission "
                        "denied (exec); the program runs on, but no report is written. Install libmemleak "
                        "where this user can run it (a system-wide or shared `pip install`), or set "
                        "MEMLEAK_PYTHON to a Python that has it\n")
    assert os.listdir(work) == []


def test_a_checkout_not_built_in_place_says_so_and_its_bench_uses_the_installed_package(tmp_path):
    """#64 item 18: bench/report_scale.py failed after `pip install .` (it
    forced PYTHONPATH to a checkout whose package has no reporter library),
    and the checkout's own `python -m libmemleak` was a traceback there."""
    checkout = tmp_path / "checkout"
    root = os.path.dirname(PACKAGE_DIR)
    shutil.copytree(os.path.join(root, "bench"), checkout / "bench")
    shutil.copytree(PACKAGE_DIR, checkout / "libmemleak",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "shm_layout.h"))
    (checkout / "native").mkdir()
    shutil.copy(os.path.join(root, "native", "shm_layout.h"), checkout / "native")
    env = {k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-m", "libmemleak", "report", str(tmp_path)], cwd=checkout,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 126 and out.stderr.count("\n") == 1, out.stderr
    assert "python setup.py build_native" in out.stderr
    # the bench, run in that checkout, reads reports with the package that is built: the installed one
    # (here: this tree's, as the suite runs it)
    bench = subprocess.run([sys.executable, "bench/report_scale.py", "--reports", "2", "--stacks", "300"],
                           cwd=checkout, env=dict(env, PYTHONPATH=root), capture_output=True, text=True,
                           timeout=300)
    assert bench.returncode == 0 and "report --json" in bench.stdout, bench.stdout + bench.stderr


def test_the_programs_own_preloads_are_not_the_reporters(tmp_path):
    """#64 item 10: the reporter inherited the program's LD_PRELOAD without
    its library path -- Firefox gives its children
    LD_PRELOAD=libmozsandbox.so, found through the executable's own
    RUNPATH -- and ld.so's "cannot be preloaded" reached the program's
    stderr 7-13 times a run.  The reporter starts without LD_PRELOAD."""
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libpre.so"), "-x", "c", "-"],
                   input="int pre_marker(void) { return 1; }\n", text=True, check=True)
    prog = tmp_path / "hello"
    subprocess.run(["gcc", "-o", str(prog), "-x", "c", "-", "-Wl,-rpath,$ORIGIN"],
                   input='#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n', text=True,
                   check=True)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(CLI_ENV, LD_PRELOAD=f"{preload_path()}:libpre.so")  # found by the program's RUNPATH alone
    env.pop("MEMLEAK_CONFIG", None)
    r = subprocess.run([str(prog)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, "hello\n", "")
    assert [n for n in os.listdir(work) if n.endswith(".memlog")]  # its reporter ran, and wrote


def test_snapshot_of_a_process_whose_reporter_cannot_start_says_so_at_once(tmp_path):
    """#64 item 15: after an attach that could start no reporter, snapshot
    waited its 60 s for a report nobody would write."""
    prog = compile_program("attachee.c")
    env = dict(CLI_ENV, LD_PRELOAD=preload_path(), MEMLEAK_PYTHON=str(tmp_path / "no-python"))
    env.pop("MEMLEAK_CONFIG", None)
    p = subprocess.Popen([prog], cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "checkpoint attach\n"
        # (asked to wait 600 s: cli's own 120 s would end the test were it waited for)
        out = cli("snapshot", "--timeout", "600", p.pid, cwd=tmp_path)
        assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        assert "its reporter could not be started (running its Python: No such file or directory)" in out.stderr
    finally:
        p.kill()
        p.wait()
