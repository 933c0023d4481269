"""End to end: real programs under the real preload library; exact bytes and
blocks per call site in the real report files."""

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import (Traced, add_reports, by_site, child_pids_with_reports, compile_program,
                     env_for, report_path, reports_of, signal_handled, wait_for, wait_for_file,
                     wait_for_reporter)
from libmemleak import PACKAGE_DIR
from libmemleak.files import memlog

PAGE = 4096

# Each block's record lives in a trailer at its end (the default) or in a
# side table (track=table): the same reports either way.
TRACKING = [pytest.param(None, id="trailers"), pytest.param("mtraceinit,track=table", id="table")]


def tracking_of(config):
    return "table" if config else "trailers"


@pytest.mark.parametrize("config", TRACKING)
def test_every_c_allocator_first_incremental_and_final_reports(workdir, config):
    prog = compile_program("allocators.c")
    t = Traced([prog], workdir, config=config)
    first, second = t.reports_at("allocated", "changed")
    assert t.finish() == 0, t.stderr
    assert t.stderr == ""
    reports = t.reports()
    assert len(reports) == 3
    final = reports[2]

    s1 = by_site(first)
    expected1 = {
        "site_malloc": (300, 3), "site_calloc": (160, 2), "site_realloc_new": (50, 1),
        "site_reallocarray": (63, 1), "site_posix_memalign": (256, 1),
        "site_aligned_alloc": (128, 1), "site_memalign": (96, 1), "site_valloc": (1000, 1),
        "site_pvalloc": (PAGE, 1), "site_mmap": (3 * PAGE, 1), "site_mmap_small": (PAGE, 1),
    }
    for site, want in expected1.items():
        assert s1.get(site) == want, (site, s1.get(site))
    assert "site_file_mmap" not in s1  # a file mapping is not an allocation
    assert s1["site_realloc_keep"] == (77, 1)  # a failed realloc leaves the block where it was
    assert "site_realloc_fails" not in s1
    assert first.header["reason"] == "signal"
    assert first.header["seq"] == "1" and first.header["pid"] == str(t.pid)
    assert first.header["tracking"] == tracking_of(config)
    assert int(first.header["live-bytes"]) == sum(e.bytes for e in first.entries)

    s2 = by_site(second)
    assert s2["site_malloc"] == (-100, -1)           # freed: charged to the allocating stack
    assert s2["site_realloc_new"] == (-50, -1)       # realloc moves the bytes ...
    assert s2["site_realloc_grow"] == (500, 1)       # ... to the stack that reallocated
    assert s2["site_mmap"] == (-PAGE, 1)             # a hole splits one mapping into two
    assert s2["site_mmap_small"] == (-PAGE, -1)
    assert s2["site_mremap"] == (5 * PAGE, 1)
    assert second.entries[-1].bytes < 0               # negative entries come last
    # growth first, then shrinkage, each largest first (docs/memlog.md)
    changes = [e.bytes for e in second.entries]
    assert changes == (sorted((b for b in changes if b > 0), reverse=True)
                       + sorted((b for b in changes if b < 0), key=abs, reverse=True))
    for site in ("site_calloc", "site_valloc"):      # unchanged stacks are left out
        assert site not in s2

    s3 = by_site(final)
    assert final.header["reason"] == "exit"
    assert s3["site_mmap"] == (-PAGE, -1)
    assert s3["site_realloc_grow"] == (-500, -1)
    assert s3["site_malloc"] == (-100, -1)

    # Adding a process's reports together gives what is live at the last one.
    total = add_reports(reports)
    assert sum(b for b, _ in total.values()) == int(final.header["live-bytes"])
    assert sum(k for _, k in total.values()) == int(final.header["live-blocks"])
    live = {}
    for (frames), (b, k) in total.items():
        site = frames[0][0]
        live[site] = (live.get(site, (0, 0))[0] + b, live.get(site, (0, 0))[1] + k)
    assert live["site_malloc"] == (100, 1)
    assert live["site_mmap"] == (PAGE, 1)
    assert "site_realloc_grow" not in live and "site_realloc_new" not in live
    assert live["site_mremap"] == (5 * PAGE, 1)


def test_frames_name_functions_and_modules_in_a_pie_executable(workdir):
    prog = compile_program("allocators.c")
    t = Traced([prog], workdir)
    first, _ = t.reports_at("allocated", "changed")
    t.finish()
    entry = next(e for e in first.entries if e.frames[0].function == "site_calloc")
    assert [f.function for f in entry.frames[:2]] == ["site_calloc", "main"]
    assert entry.frames[0].module == prog
    assert all("libmtrace" not in (f.module or "") for e in first.entries for f in e.frames)
    assert first.header["program"] == prog


@pytest.mark.parametrize("config", TRACKING)
def test_cxx_operators_templates_and_bad_alloc(workdir, config):
    prog = compile_program("cxx.cc")
    t = Traced([prog], workdir, config=config)
    first, second = t.reports_at("allocated", "freed")
    assert t.finish() == 0, t.stderr
    s1 = by_site(first)
    assert s1["site_new()"] == (16, 2)
    assert s1["site_nothrow()"] == (40, 1)
    assert s1["site_aligned()"] == (128, 1)
    assert s1["site_aligned_array()"] == (256, 1)
    assert s1["storage::Pool<double>::grab(int)"] == (32, 1)
    assert "site_deleted()" not in s1                 # new then delete: nothing left
    assert s1["site_after_throw()"] == (33, 1)        # still recording after bad_alloc
    # operator new called malloc inside: counted once, not twice
    assert not any(e.frames[0].function == "operator new(unsigned long)" for e in first.entries)
    s2 = by_site(second)
    assert s2["site_new()"] == (-8, -1)
    assert s2["site_aligned()"] == (-128, -1)


@pytest.mark.parametrize("config", TRACKING)
def test_eight_threads_leaking_from_one_stack_exact_total(workdir, config):
    t = Traced([compile_program("threads.c")], workdir, config=config)
    [report] = t.reports_at("joined")
    assert t.finish() == 0
    assert report.header["tracking"] == tracking_of(config)
    sites = by_site(report)
    assert sites["site_thread_leak"] == (8 * 5000 * 24, 8 * 5000)
    assert "site_thread_churn" not in sites
    assert int(report.header["allocations"]) >= 8 * 5000 * 2


@pytest.mark.parametrize("config", TRACKING)
def test_ten_threads_new_and_sized_delete_past_the_owned_stripes_exact(workdir, config):
    """Threads past the first seven count on the shared stripe (locked adds,
    their own fast ways): new, sized delete, delete[] and malloc/free from
    ten threads at once, exact."""
    t = Traced([compile_program("threads_cxx.cc")], workdir, config=config)
    [report] = t.reports_at("joined")
    assert t.finish() == 0
    sites = by_site(report)
    assert sites["site_cxx_keep()"] == (10 * 4000 * 56, 10 * 4000)
    assert sites["site_cxx_malloc(unsigned long)"] == (10 * 2000 * 24, 10 * 2000)
    assert "site_cxx_churn()" not in sites
    assert "site_cxx_array(unsigned long)" not in sites
    assert int(report.header["allocations"]) >= 10 * 4000 * 4


@pytest.mark.parametrize("config", TRACKING)
def test_fork_child_has_its_own_reports_with_inherited_blocks(workdir, config):
    prog = compile_program("forker.c")
    t = Traced([prog], workdir, config=config, stdin=False)
    assert t.finish() == 0, t.stderr
    parent = t.reports()
    assert len(parent) == 1
    # A child writes its report after it has gone (it does not make its exit
    # wait): wait for that file.
    child_pids = child_pids_with_reports(str(workdir), "forker", t.pid)
    assert len(child_pids) == 1, child_pids
    child = reports_of(str(workdir), "forker", child_pids.pop())
    assert len(child) == 1
    c = by_site(child[0])
    assert c["site_before_fork"] == (1111, 1)         # inherited from the parent
    assert c["site_in_child"] == (4444, 2)
    assert "site_in_parent" not in c
    assert child[0].header["parent-pid"] == str(t.pid)
    p = by_site(parent[0])
    assert p["site_before_fork"] == (1111, 1)
    assert p["site_in_parent"] == (3333, 1)
    assert "site_in_child" not in p


@pytest.mark.parametrize("config", ["", "track=table"])
def test_blocks_recorded_or_not_mix_freely(workdir, config):
    """Blocks recorded with a trailer, and blocks never recorded (from before
    collection started, or made while it was stopped), pass through realloc
    and free in any order; the program owns every byte malloc_usable_size
    grants; realloc(p, 0) frees; free_sized, free_aligned_sized and cfree are
    frees.  Both ways of tracking give these reports."""
    prog = compile_program("trailers.c")
    t = Traced([prog], workdir, config=config, stdin=False)
    assert t.finish() == 0, t.stderr
    assert t.stdout == "usable 1 zero 1 sized 3\n"
    assert t.stderr == ""
    reports = t.reports()
    assert [r.header["reason"] for r in reports] == ["mtrace", "muntrace", "mtrace", "exit"]
    assert reports[0].header["tracking"] == tracking_of(config)
    s1, s2, s3, s4 = (by_site(r) for r in reports)
    assert s1 == {"site_adopt": (300, 1), "site_usable": (100, 1), "site_stopped": (64, 1)}
    assert s2 == {}
    # The realloc while stopped took the block away from its stack and
    # recorded the new one nowhere; its free later is one the tracer never saw.
    assert s3 == {"site_stopped": (-64, -1), "site_usable": (-100, -1)}
    assert s4["site_adopt"] == (-300, -1)
    assert [r.header["unknown-frees"] for r in reports] == ["2", "2", "3", "3"]


@pytest.mark.parametrize("config", [None, "mtraceinit", ""])
def test_mtrace_muntrace_semantics(workdir, config):
    prog = compile_program("mtrace_api.c")
    t = Traced([prog], workdir, config=config, stdin=False)
    assert t.finish() == 0, t.stderr
    assert t.stdout == "sync 1 1\n"      # each report existed when the call returned
    reports = t.reports()
    assert [r.header["reason"] for r in reports] == ["mtrace", "muntrace"]  # no exit report
    s1, s2 = by_site(reports[0]), by_site(reports[1])
    assert s1["site_collected"] == (502, 1)
    assert s2["site_collected"] == (502, 1)
    if config == "":  # MEMLEAK_CONFIG set without mtraceinit: mtrace() starts collection
        assert "site_before_start" not in s1
    else:             # collecting from load
        assert s1["site_before_start"] == (501, 1)
    assert "site_after_stop" not in s2


def test_signal_gives_a_report_while_the_program_is_blocked(workdir):
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    wait_for_reporter(t.pid, timeout=120)  # the reporter is up; the program sits in read()
    start = time.monotonic()
    report = t.signal_report(1)
    latency = time.monotonic() - start
    t.resume()
    assert t.finish() == 0
    assert by_site(report)["site_blocked"] == (4242, 1)
    print(f"SIGUSR1 -> report on disk: {latency * 1000:.0f} ms")


def test_program_own_sigusr1_handler_wins(workdir):
    prog = compile_program("blocked.c")
    t = Traced([prog, "own-handler"], workdir)
    t.expect("blocked")
    t.proc.send_signal(signal.SIGUSR1)
    wait_for(lambda: signal_handled(t.pid), "the signal handled")
    t.resume()
    assert t.finish() == 0
    assert t.stdout.endswith("own handler ran\n")
    assert [r.header["reason"] for r in t.reports()] == ["exit"]


def test_signal_option_moves_the_report_signal(workdir):
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir, config="mtraceinit,signal=USR2")
    t.expect("blocked")
    report = t.signal_report(1, sig=signal.SIGUSR2)
    t.resume()
    assert t.finish() == 0
    assert report.header["reason"] == "signal"


def test_bad_options_warn_once_and_run_on_with_defaults(workdir):
    prog = compile_program("mtrace_api.c")
    t = Traced([prog], workdir, config="mtraceinit,bogus,depth=999", stdin=False)
    assert t.finish() == 0
    assert t.stdout == "sync 1 1\n"
    lines = t.stderr.splitlines()
    assert len(lines) == 2, lines
    assert "unknown option" in lines[0] and "'bogus'" in lines[0]
    assert "depth must be 1 to 64" in lines[1]
    assert t.reports()[0].header["depth"] == "16"


def test_dir_and_depth_options(workdir):
    prog = compile_program("mtrace_api.c")
    out = workdir / "reports"
    out.mkdir()
    t = Traced([prog], workdir, config="mtraceinit,dir=reports,depth=1", stdin=False)
    assert t.finish() == 0
    reports = reports_of(str(out), "mtrace_api", t.pid)
    assert len(reports) == 2
    assert all(len(e.frames) == 1 for e in reports[0].entries)
    assert reports[0].header["depth"] == "1"


def test_report_files_are_owner_only(workdir):
    prog = compile_program("mtrace_api.c")
    t = Traced([prog], workdir, stdin=False)
    t.finish()
    path = report_path(str(workdir), "mtrace_api", t.pid, 1)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert not [n for n in os.listdir(workdir) if n.endswith(".tmp")]


def test_run_command_keeps_output_and_exit_status(workdir):
    code = "import sys; print(sum(range(10))); x = [bytes(1000) for _ in range(100)]; sys.exit(3)"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(PACKAGE_DIR))
    env.pop("LD_PRELOAD", None)
    python = os.path.realpath(sys.executable)  # the interpreter itself, not a wrapper script
    r = subprocess.run([sys.executable, "-m", "libmemleak", "run", "-q", "--", python, "-c", code],
                       cwd=workdir, capture_output=True, text=True, timeout=120, env=env)
    bare = subprocess.run([python, "-c", code], capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (bare.returncode, bare.stdout, bare.stderr) == (3, "45\n", "")
    names = [n for n in os.listdir(workdir) if n.endswith(".memlog")]
    assert len(names) == 1 and names[0].startswith(os.path.basename(python) + "-")
    report = memlog.read(os.path.join(workdir, names[0]))
    assert report.header["reason"] == "exit"
    assert int(report.header["live-bytes"]) > 0
    functions = {f.function for e in report.entries for f in e.frames}
    assert "main" in functions or "Py_BytesMain" in functions


def test_sqlite3_live_report_then_unchanged_output(workdir):
    rows = " ".join(f"insert into t values({i}, '{'x' * (i % 50)}');" for i in range(2000))
    script = f"create table t(a, b); begin; {rows} commit;\n"
    query = "select count(*), sum(length(b)) from t;\n"
    bare = subprocess.run(["sqlite3", ":memory:"], input=script + query, capture_output=True, text=True)
    p = subprocess.Popen(["sqlite3", ":memory:"], cwd=workdir, env=env_for(), text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(script + "select 'loaded';\n")
    p.stdin.flush()
    assert p.stdout.readline() == "loaded\n"
    p.send_signal(signal.SIGUSR1)      # while it holds the table, waiting for input
    live = memlog.read(wait_for_file(report_path(str(workdir), "sqlite3", p.pid, 1)))
    out, err = p.communicate(query, timeout=120)
    assert (p.returncode, out, err) == (bare.returncode, bare.stdout, bare.stderr)
    assert out == "2000|49000\n"
    assert int(live.header["live-bytes"]) > 49000
    modules = {f.module for e in live.entries for f in e.frames}
    assert "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6" in modules or any(
        m and "libsqlite3" in m for m in modules)
    functions = {f.function for e in live.entries for f in e.frames}
    assert "sqlite3_step" in functions
    final = reports_of(str(workdir), "sqlite3", p.pid)
    assert [r.header["reason"] for r in final] == ["signal", "exit"]
