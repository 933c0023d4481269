"""Servers as people run them (issue "Real servers"): programs that own the
report signal, workers that drop their privileges, reports asked for
without a signal (`libmemleak snapshot`)."""

import os
import signal
import subprocess

import pytest

from helpers import (Traced, by_site, cli, compile_program, gone, kill_and_wait, reporters_of, reports_of,
                     segment_header, wait_for, wait_for_file, wait_for_reporter, wait_for_reports)
from libmemleak.files import memlog



def snapshot(*args):
    return cli("snapshot", *args)


def test_snapshot_reports_without_a_signal_where_the_program_owns_it(workdir):
    """memcached shuts down on SIGUSR1: a user must never have to send it.
    The program's own handler is left alone (it does not run), the program
    is told once that the signal is its own now, and snapshot reports."""
    prog = compile_program("blocked.c")
    t = Traced([prog, "own-handler"], workdir, config="mtraceinit")
    t.expect("blocked")
    r = snapshot(t.pid)
    assert r.returncode == 0, r.stderr
    path = r.stdout.strip()
    assert path == os.path.join(str(workdir), f"blocked-{t.pid}-1.memlog")
    report = memlog.read(path)
    assert report.header["reason"] == "snapshot"
    assert by_site(report)["site_blocked"] == (4242, 1)
    t.resume()
    assert t.finish() == 0
    assert "own handler ran" not in t.stdout  # no signal reached the program
    said = [line for line in t.stderr.splitlines() if "installs its own handler" in line]
    assert len(said) == 1 and f"libmemleak snapshot {t.pid}" in said[0], t.stderr
    assert [r.header["reason"] for r in t.reports()] == ["snapshot", "exit"]
    # (#28 item 16) the reports know the signal is the program's, and the
    # hints stop suggesting it
    assert [r.header["report-signal"] for r in t.reports()] == ["none", "none"]
    hint = cli("report", workdir).stdout
    assert f"take more reports while it runs (libmemleak snapshot {t.pid})" in hint and "kill -" not in hint


def test_reports_name_the_report_signal_and_the_hint_uses_it(workdir):
    prog = compile_program("slowleaks.c")
    t = Traced([prog], workdir, config="mtraceinit,signal=USR2")
    t.expect("round")
    assert t.signal_report(1, signal.SIGUSR2).header["report-signal"] == "SIGUSR2"
    t.proc.stdin.write(b"\n" * 8)
    assert t.finish() == 0, t.stderr
    hint = cli("report", workdir).stdout
    assert f"(kill -USR2 {t.pid} or libmemleak snapshot {t.pid})" in hint


def test_snapshot_of_what_is_not_traced_is_one_line(workdir):
    sleeper = subprocess.Popen(["sleep", "30"])
    zombie = subprocess.Popen(["true"])
    wait_for(lambda: gone(zombie.pid), "true exited")  # (not waited for: a zombie)
    try:
        for pid, words in ((sleeper.pid, "is not traced"), (2 ** 22 + 7, "no process"),
                           (zombie.pid, "has exited")):
            r = snapshot(pid)
            assert r.returncode == 1 and r.stdout == ""
            assert r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
        zombie.wait()


def test_worker_that_dropped_privileges_reports_on_signal_and_on_snapshot(workdir):
    """nginx's workers run as nobody: the root's keeper refused them, and
    their own reporter could not start.  The keeper already holds the
    worker's segment: it serves it whatever its uid now."""
    prog = compile_program("dropuid.c")
    os.chmod(workdir, 0o755)
    t = Traced([prog], workdir, config="mtraceinit")
    line = t.proc.stdout.readline().decode().split()
    worker, uid = int(line[1]), int(line[3])
    if os.geteuid() == 0:
        assert uid == 65534
    t.expect("dropped")
    os.kill(worker, signal.SIGUSR1)
    first = memlog.read(wait_for_file(os.path.join(str(workdir), f"dropuid-{worker}-1.memlog")))
    assert first.header["reason"] == "signal"
    assert by_site(first)["site_worker"] == (777, 1)
    assert by_site(first)["site_master"] == (1000, 1)  # inherited across fork
    t.resume()
    t.expect("later")
    r = snapshot(worker)
    assert r.returncode == 0, r.stderr
    second = memlog.read(r.stdout.strip())
    assert second.header["reason"] == "snapshot"
    assert by_site(second) == {"site_worker_later": (333, 1)}
    t.resume()
    assert t.finish() == 0, t.stderr
    reports = wait_for_reports(str(workdir), "dropuid", worker, 3)
    assert [r.header["reason"] for r in reports] == ["signal", "snapshot", "exit"]
    # every report of a descendant says its memory, the last one (written
    # after it was gone) what it had as it exited
    assert all(r.header["vm-hwm"].endswith(" kB") and int(r.header["vm-hwm"].split()[0]) > 0
               for r in reports)
    assert "could not start the reporter" not in t.stderr, t.stderr


def test_a_worker_killed_with_a_request_pending_ends_with_a_death_report(workdir):
    """Its one report used to say `reason: signal`: a process's last report
    says how it ended.  (The keeper is held still so that the request is
    certainly pending when the worker dies.)"""
    prog = compile_program("dropuid.c")
    os.chmod(workdir, 0o755)
    t = Traced([prog], workdir, config="mtraceinit")
    worker = int(t.proc.stdout.readline().decode().split()[1])
    t.expect("dropped")
    keeper = wait_for_reporter(t.pid)
    os.kill(keeper, signal.SIGSTOP)
    try:
        with segment_header(worker) as h:
            asked = h.request_seq
            os.kill(worker, signal.SIGUSR1)
            wait_for(lambda: h.request_seq != asked, "the worker's request posted")  # (the keeper is stopped)
        kill_and_wait(worker)
    finally:
        os.kill(keeper, signal.SIGCONT)
    wait_for_file(os.path.join(str(workdir), f"dropuid-{worker}-1.memlog"))
    assert t.finish() == 100  # the parent saw its worker killed
    wait_for(lambda: not reporters_of(t.pid), "the keeper gone: no report may follow")
    [report] = reports_of(str(workdir), "dropuid", worker)
    assert report.header["reason"] == "death"
    assert by_site(report)["site_worker"] == (777, 1)


JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


@pytest.mark.skipif(not os.path.exists(JEMALLOC), reason="needs Debian's libjemalloc2")
def test_an_allocator_in_a_shared_library_is_counted_once(workdir):
    """jemalloc's own mmaps of its arenas were counted on top of the blocks
    our malloc hooks count (redis: 84.9 MB of them against 37.4 MB)."""
    from libmemleak import preload_path
    prog = compile_program("jemalloced.c")
    t = Traced([prog], workdir, config="mtraceinit",
               env={"LD_PRELOAD": f"{preload_path()}:{JEMALLOC}"})
    allocated, freed = t.reports_at("allocated", "freed")
    assert t.finish() == 0, t.stderr
    sites = by_site(allocated)
    assert sites["site_many"] == (20_000_000, 20000)
    assert sites["site_big"] == (8 << 20, 1)
    in_jemalloc = [e for e in allocated.entries if e.frames and "libjemalloc" in (e.frames[0].module or "")]
    assert in_jemalloc == [], in_jemalloc[:1]
    assert int(allocated.header["live-bytes"]) < 20_000_000 + (8 << 20) + 200_000
    assert by_site(freed)["site_many"] == (-20_000_000, -20000)
