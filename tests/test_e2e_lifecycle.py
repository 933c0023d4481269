"""Program lifecycle under the tracer: dlopen/dlclose, death without exit
handlers, exec, a reporter that dies, a report directory that refuses."""

import os
import signal
import subprocess
import time

import pytest

from helpers import (CLI_ENV, PROGRAMS, Traced, by_site, cli_argv, compile_program, kill_and_wait,
                     report_path, reporters_of, reports_of, segment_header, wait_for, wait_for_file,
                     wait_for_reporter)
from libmemleak.files import memlog


def build_plugin():
    out = compile_program("host.c", "-ldl")
    plugin = os.path.join(os.path.dirname(out), "plugin.so")
    if not os.path.exists(plugin):
        subprocess.run(["gcc", "-g", "-O0", "-shared", "-fPIC", os.path.join(PROGRAMS, "plugin.c"),
                        "-o", plugin], check=True)
    return out, plugin


def test_plugin_closed_before_the_report_is_still_named(workdir):
    host, plugin = build_plugin()
    t = Traced([host, plugin], workdir)
    t.expect("closed")
    report = t.signal_report(1)
    t.resume()
    assert t.finish() == 0, t.stderr
    assert by_site(report)["plugin_leak"] == (1554, 2)  # two calls, from two lines of main
    entries = [e for e in report.entries if e.frames[0].function == "plugin_leak"]
    assert len(entries) == 2
    for entry in entries:
        assert entry.frames[0].module == plugin
        assert [f.function for f in entry.frames[:3]] == ["plugin_leak", "plugin_entry", "main"]
        assert (os.path.basename(entry.frames[0].file), entry.frames[0].line) == ("plugin.c", 4)


@pytest.mark.parametrize("how", ["SIGKILL", "abort", "SIGSEGV"])
def test_death_without_exit_handlers_still_gives_the_final_report(workdir, how):
    prog = compile_program("spin.c")
    t = Traced([prog] + ([how] if how != "SIGKILL" else []), workdir)
    t.expect("ready")
    wait_for_reporter(t.pid, timeout=120)  # the reporter is the one that must notice
    if how == "SIGKILL":
        t.proc.kill()
    else:
        t.resume()
    t.finish()
    report = memlog.read(wait_for_file(report_path(str(workdir), "spin", t.pid, 1)))
    assert report.header["reason"] == "death"
    assert by_site(report)["site_spin"] == (6060, 1)


def test_a_root_leaving_by__exit_has_its_exit_report_written_before_it_is_gone(workdir):
    """_exit() runs no exit handler (dash ends that way): the root asks for
    its exit report there, as exit() would, instead of leaving a death
    report to be written after it -- and after `libmemleak run` -- is gone."""
    prog = compile_program("spin.c")
    t = Traced([prog, "_exit"], workdir)
    t.expect("ready")
    t.resume()
    assert t.finish() == 5, t.stderr
    path = report_path(str(workdir), "spin", t.pid, 1)
    assert os.path.exists(path)   # the moment the program is gone, not later
    report = memlog.read(path)
    assert report.header["reason"] == "exit"
    assert by_site(report)["site_spin"] == (6060, 1)
    wait_for(lambda: not reporters_of(t.pid), "its reporter gone")
    assert not os.path.exists(report_path(str(workdir), "spin", t.pid, 2))   # and no death report after it


def test_exec_starts_a_new_traced_image_and_the_old_reporter_leaves(workdir):
    prog = compile_program("spin.c")
    target = compile_program("mtrace_api.c")
    t = Traced([prog, "exec", target], workdir)
    t.expect("ready")
    wait_for_reporter(t.pid, timeout=120)
    t.resume()
    assert t.finish() == 0, t.stderr
    assert t.stdout.endswith("sync 1 1\n")
    wait_for(lambda: reporters_of(t.pid) == [], "nobody left behind")  # (the old reporter too: no report of it since)
    # the exec'd image reports under the same pid; the pre-exec image wrote nothing
    assert len(reports_of(str(workdir), "mtrace_api", t.pid)) == 2
    assert not [n for n in os.listdir(workdir) if n.startswith("spin-")]


def test_reporter_is_invisible_to_the_program(workdir):
    """Not the program's child, not in its process group or session."""
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    reporter = wait_for_reporter(t.pid)
    with open(f"/proc/{reporter}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ppid, pgrp, session = int(fields[1]), int(fields[2]), int(fields[3])
    assert ppid != t.pid
    assert pgrp != os.getpgid(t.pid) and session != os.getsid(t.pid)
    def links(pid):
        out = {}
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                pass
        return out
    mine, program = links(reporter), links(t.pid)
    assert mine[0] == mine[1] == "/dev/null"
    assert mine[2] == program[2]  # stderr is kept on purpose, for one-line errors
    shared = {v for k, v in mine.items() if k != 2} & set(program.values())
    assert not {v for v in shared if v.startswith(("pipe:", "socket:"))}, shared
    with open(f"/proc/{reporter}/environ", "rb") as f:
        env = f.read().split(b"\0")
    assert not [v for v in env if v.startswith(b"LD_PRELOAD=") and b"libmtrace" in v]
    t.resume()
    assert t.finish() == 0


def test_a_killed_reporter_is_replaced_and_loses_nothing(workdir):
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    first = t.signal_report(1)
    kill_and_wait(wait_for_reporter(t.pid))
    second = t.signal_report(2)  # a new reporter starts at this request
    t.resume()
    assert t.finish() == 0, t.stderr
    assert by_site(first)["site_blocked"] == (4242, 1)
    assert second.header["change-bytes"] == "+0"  # the baseline survived the reporter
    assert second.header["live-bytes"] == first.header["live-bytes"]


def test_unwritable_report_directory_warns_once_and_keeps_the_data(workdir):
    if os.geteuid() == 0:
        # root ignores permissions: make the directory vanish instead
        target = workdir / "gone"
        target.mkdir()
        config = f"mtraceinit,dir={target}"
        broken = lambda: target.rmdir()  # noqa: E731
        fixed = lambda: target.mkdir()  # noqa: E731
    else:
        target = workdir / "ro"
        target.mkdir()
        config = f"mtraceinit,dir={target}"
        broken = lambda: target.chmod(0o500)  # noqa: E731
        fixed = lambda: target.chmod(0o700)  # noqa: E731
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir, config=config)
    t.expect("blocked")
    broken()
    with segment_header(t.pid) as h:
        for tried in (1, 2):
            t.proc.send_signal(signal.SIGUSR1)
            wait_for(lambda: h.report_errors == tried, "the report refused")
    fixed()
    t.resume()
    assert t.finish() == 0
    lines = [line for line in t.stderr.splitlines() if "cannot write a report" in line]
    assert len(lines) == 1, t.stderr
    reports = reports_of(str(target), "blocked", t.pid)
    assert len(reports) == 1 and reports[0].header["seq"] == "1"
    assert by_site(reports[0])["site_blocked"] == (4242, 1)  # nothing was lost


@pytest.mark.parametrize("mode, paths", [("keeper", 3), ("nokeeper", 256)])
def test_forked_child_killed_by_sigkill_keeps_its_data(workdir, mode, paths):
    """A descendant starts no reporter of its own before it needs one, so
    that shells and builds stay fast.  SIGKILLed before that, it still gets
    its death report: the root's reporter (the keeper) holds its segment and
    writes it.  Where the keeper cannot be reached (here: the child
    execs with MEMLEAK_KEEPER removed from its environment), a descendant
    that does real work (over a hundred stacks of its own) starts its
    reporter early instead."""
    from helpers import wait_for_reporter
    prog = compile_program("killedchild.c")
    t = Traced([prog, mode, str(paths)], workdir, config="mtraceinit,depth=32")
    line = t.proc.stdout.readline().decode()
    assert line.startswith("child ")
    child = int(line.split()[1])
    t.expect("child")
    if mode == "keeper":
        assert reporters_of(child) == []  # the keeper, not a reporter of its own
    else:
        wait_for_reporter(child)
    os.kill(child, signal.SIGKILL)
    assert t.finish() == 0, t.stderr
    report = memlog.read(wait_for_file(report_path(workdir, t.prog, child, 1)))
    assert report.header["reason"] == "death"
    sites = by_site(report)
    assert sites["leaf"] == (10 * paths, paths)
    assert sites["site_child_big"] == (5555, 1)
    assert t.stderr == ""


def test_a_daemon_outliving_the_root_is_still_kept(workdir):
    """The keeper outlives the root while a descendant it holds lives on."""
    prog = compile_program("killedchild.c")
    t = Traced([prog, "orphan", "5"], workdir, config="mtraceinit")
    line = t.proc.stdout.readline().decode()
    child = int(line.split()[1])
    assert t.finish() == 0, t.stderr
    wait_for_file(report_path(workdir, t.prog, t.pid, 1))  # the root's exit report
    time.sleep(0.5)
    assert reporters_of(child) == []
    os.kill(child, signal.SIGKILL)
    report = memlog.read(wait_for_file(report_path(workdir, t.prog, child, 1)))
    assert report.header["reason"] == "death"
    sites = by_site(report)
    assert sites["leaf"] == (50, 5)
    assert sites["site_child_big"] == (5555, 1)


def test_exiting_children_are_reported_by_the_keeper_without_a_reporter_each(workdir):
    """Forty short-lived children, four at a time: each gets its exact exit
    report, and all of them are written by one process, the root's reporter
    (the keeper), not by a Python process per child."""
    prog = compile_program("manykids.c")
    t = Traced([prog, "40"], workdir, config="mtraceinit")
    assert t.finish() == 0, t.stderr
    assert t.stderr == ""
    children = [tuple(map(int, line.split())) for line in t.stdout.splitlines()]
    assert len(children) == 40
    root = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 1)))
    assert root.header["reason"] == "exit"
    writers = set()
    for pid, i in children:
        report = memlog.read(wait_for_file(report_path(workdir, t.prog, pid, 1)))
        assert report.header["reason"] == "exit"
        assert report.header["parent-pid"] == str(t.pid)
        sites = by_site(report)
        assert sites["site_child"] == (100 + i, 1)
        assert sites["site_parent"] == (4321, 1)   # inherited at fork
        writers.add(report.header["reporter-pid"])
        assert not os.path.exists(report_path(workdir, t.prog, pid, 2))
    assert writers == {root.header["reporter-pid"]}


def test_run_returns_with_the_last_report_of_every_dead_descendant_on_disk(workdir):
    """`libmemleak run make && libmemleak check *.memlog`: the keeper
    writes a descendant's last report after it is gone, and the root's exit
    waits for those of every descendant dead by then -- forked children and
    exec'd compilers alike -- so that they are all there when run returns.
    The shell (dash ends with _exit) gets its exit report too."""
    kids = compile_program("manykids.c")
    source = os.path.join(workdir, "unit.c")
    with open(source, "w") as f:
        f.write("int unit(int x) { return x * 3; }\n")
    script = f"{kids} 6 > kids.out && gcc -O2 -c {source} -o unit.o; true"
    p = subprocess.Popen(cli_argv("run", "sh", "-c", script), cwd=workdir, env=CLI_ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    names = sorted(os.listdir(workdir))   # at once: nothing may land later
    reports = [n for n in names if n.endswith(".memlog")]
    programs = sorted(n.split("-")[0] for n in reports)
    assert programs == sorted(["sh", "gcc", "cc1", "as"] + ["manykids"] * 7), names
    assert all(n.endswith("-1.memlog") for n in reports), names   # each one's exit report, once
    children = [tuple(map(int, line.split())) for line in open(os.path.join(workdir, "kids.out"))]
    assert len(children) == 6
    for pid, i in children:
        report = memlog.read(report_path(workdir, "manykids", pid, 1))
        assert report.header["reason"] == "exit"
        assert by_site(report)["site_child"] == (100 + i, 1)
    shell = memlog.read(report_path(workdir, "sh", p.pid, 1))
    assert shell.header["reason"] == "exit"
    assert err.splitlines()[-1] == (f"libmemleak: wrote {workdir}/sh-{p.pid}-1.memlog, and the "
                                    f"last reports of 10 descendants")


def test_a_root_that_execs_has_its_dead_descendants_reports_written_first(workdir):
    """The new image gets a keeper of its own: the old one writes the last
    reports of the descendants dead by the exec before the exec goes on,
    so that they are there when run returns however short the new image.
    (The report signal first, and the wait for its report, make sure the
    keeper has started and taken the children in by then.)"""
    kids = compile_program("manykids.c")
    # (300 children at once: they die within a moment of the exec, and
    # writing their reports takes the keeper longer than `true` lives)
    script = (f"kill -USR1 $$; while [ ! -e sh-$$-1.memlog ]; do sleep 0.05; done; "
              f"{kids} 300 300 > kids.out && exec true")
    p = subprocess.Popen(cli_argv("run", "sh", "-c", script), cwd=workdir, env=CLI_ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    names = sorted(n for n in os.listdir(workdir) if n.endswith(".memlog"))   # at once
    children = [tuple(map(int, line.split())) for line in open(os.path.join(workdir, "kids.out"))]
    assert len(children) == 300
    for pid, i in children:
        assert f"manykids-{pid}-1.memlog" in names, names
        assert by_site(memlog.read(report_path(workdir, "manykids", pid, 1)))["site_child"] == (100 + i, 1)
    assert len([n for n in names if n.startswith("manykids-")]) == 301
    assert memlog.read(report_path(workdir, "sh", p.pid, 1)).header["reason"] == "signal"
    assert memlog.read(report_path(workdir, "true", p.pid, 1)).header["reason"] == "exit"


def test_a_forked_worker_reports_through_the_keeper_unseen_by_a_subreaper(workdir):
    """A worker asked for reports (SIGUSR1) starts no reporter of its own:
    the keeper writes them, exact and in sequence.  Its parent, a child
    subreaper that reaps every child it has, sees only its worker -- a
    reporter the worker started itself would have become its child."""
    prog = compile_program("supervisor.c")
    t = Traced([prog, "subreaper"], workdir, config="mtraceinit")
    worker = int(t.proc.stdout.readline().decode().split()[1])
    t.expect("first")
    os.kill(worker, signal.SIGUSR1)
    first = memlog.read(wait_for_file(report_path(workdir, t.prog, worker, 1)))
    t.resume()
    t.expect("second")
    os.kill(worker, signal.SIGUSR1)
    second = memlog.read(wait_for_file(report_path(workdir, t.prog, worker, 2)))
    assert reporters_of(worker) == []
    t.resume()
    assert t.proc.stdout.readline().decode() == f"reaped {worker}\n"
    t.expect("idle")
    t.resume()
    assert t.finish() == 0, t.stderr
    assert t.stdout == "no children\n"
    assert t.stderr == ""
    assert first.header["reason"] == second.header["reason"] == "signal"
    assert by_site(first)["site_worker_first"] == (7000, 1)
    assert by_site(first)["site_supervisor"] == (1212, 1)   # inherited at fork
    assert "site_worker_second" not in by_site(first)
    assert by_site(second) == {"site_worker_second": (600, 2)}
    exit_report = memlog.read(wait_for_file(report_path(workdir, t.prog, worker, 3)))
    assert exit_report.header["reason"] == "exit"
    root = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 1)))
    writers = {r.header["reporter-pid"] for r in (first, second, exit_report, root)}
    assert len(writers) == 1


def test_a_worker_whose_keeper_is_gone_starts_its_own_reporter(workdir):
    prog = compile_program("supervisor.c")
    t = Traced([prog, "plain"], workdir, config="mtraceinit")
    worker = int(t.proc.stdout.readline().decode().split()[1])
    t.expect("first")
    keeper = wait_for_reporter(t.pid)
    kill_and_wait(keeper)
    os.kill(worker, signal.SIGUSR1)
    first = memlog.read(wait_for_file(report_path(workdir, t.prog, worker, 1)))
    assert by_site(first)["site_worker_first"] == (7000, 1)
    assert reporters_of(worker) != []
    t.resume()
    t.expect("second")
    t.resume()
    assert t.proc.stdout.readline().decode() == f"reaped {worker}\n"
    t.expect("idle")
    t.resume()
    assert t.finish() == 0, t.stderr
    exit_report = memlog.read(wait_for_file(report_path(workdir, t.prog, worker, 2)))
    assert by_site(exit_report) == {"site_worker_second": (600, 2)}


@pytest.mark.parametrize("order", ["reporter then program", "both at once"])
def test_a_killed_reporter_and_then_a_killed_program_still_give_the_death_report(workdir, order):
    """(#28 item 9) The reporter killed (-9), then the program (-9): the
    segment died with the last process that held it and no report at all
    was written.  The reporter's standby takes over."""
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    t.signal_report(1)   # the reporter is up (its standby is forked first thing)
    reporter = wait_for_reporter(t.pid)
    os.kill(reporter, signal.SIGKILL)
    if order == "reporter then program":
        # (One look, kept: a look during the standby's exec -- its
        # command line and descriptors in flux -- finds no reporter.)
        deadline, found = time.monotonic() + 30, []
        while found in ([], [reporter]) and time.monotonic() < deadline:
            time.sleep(0.05)
            found = reporters_of(t.pid)
        assert found not in ([], [reporter])   # the standby is the reporter now
    t.proc.kill()
    t.finish()
    report = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 2)))
    assert report.header["reason"] == "death"
    assert report.header["live-bytes"] == "4242" and report.header["change-bytes"] == "+0"
    wait_for(lambda: not reporters_of(t.pid), "its reporters gone: no report may follow")
    assert len(reports_of(str(workdir), t.prog, t.pid)) == 2


@pytest.mark.parametrize("written", [True, False])
def test_a_reporter_killed_between_its_report_and_done_leaves_the_request_finished_not_doubled(workdir,
                                                                                              written):
    """A reporter takes a request's reasons, writes the report, posts
    done_seq: killed in between (what made the test above fail now and
    then), its successor found the request pending and no reason, and wrote
    a second report ("reason: request").  The state it leaves is made here
    in the segment itself, as the dead reporter leaves it: the reasons
    taken, the report written or not.  Written: only done_seq is posted, no
    report; not written: that report is written, with its reason."""
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    t.signal_report(1)
    with segment_header(t.pid) as h:
        _taken_by_a_dead_reporter(h, "signal", written)
        os.kill(wait_for_reporter(t.pid), signal.SIGKILL)  # its successor finds the request
        wait_for(lambda: h.done_seq == h.request_seq, "the successor posting done_seq")
    if not written:
        report = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 2)))
        assert report.header["reason"] == "signal"
    t.proc.kill()
    t.finish()
    final = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 3 if not written else 2)))
    assert final.header["reason"] == "death"
    wait_for(lambda: not reporters_of(t.pid), "its reporters gone: no report may follow")
    assert len(reports_of(str(workdir), t.prog, t.pid)) == (3 if not written else 2)


def _taken_by_a_dead_reporter(h, reason, written):
    """The header as a reporter leaves it that took a request of `reason`
    and died -- after writing its report, or before."""
    from libmemleak.daemon.report_reasons import REASON_FIELDS
    names = [name for name, _, _ in REASON_FIELDS]
    _, asked, seen = REASON_FIELDS[names.index(reason)]
    setattr(h, asked, getattr(h, asked) + 1)
    setattr(h, seen, getattr(h, asked))
    h.answering_reason = 1 + names.index(reason)
    h.answering_seq = h.report_seq if written else h.report_seq + 1
    h.request_seq += 1


def test_a_reporter_killed_after_writing_the_exit_report_leaves_it_the_last(workdir):
    """(#64 item 7) The exit report taken and written, the reporter killed
    before it posted done_seq: its successor posts it -- and went on
    watching, so when the program then ended it wrote a second final
    report, "reason: death", after the exit one.  The state the dead
    reporter leaves is made in the segment itself, as in the test above."""
    prog = compile_program("blocked.c")
    t = Traced([prog], workdir)
    t.expect("blocked")
    t.signal_report(1)
    with segment_header(t.pid) as h:
        _taken_by_a_dead_reporter(h, "exit", written=True)  # (report 1 stands for it)
        kill_and_wait(wait_for_reporter(t.pid))
        wait_for(lambda: h.done_seq == h.request_seq, "the successor posting done_seq")
        wait_for(lambda: h.final_done, "the successor taking the written exit report as the last")
        t.proc.kill()                                 # (as the program, released, exits)
        t.finish()
        wait_for(lambda: not reporters_of(t.pid), "the reporters leaving")
    assert [r.header["reason"] for r in reports_of(str(workdir), t.prog, t.pid)] == ["signal"]


def test_a_subreapers_replacement_reporter_is_not_among_its_children(workdir):
    """The root made itself a child subreaper after its reporter started.
    That reporter is killed; the next SIGUSR1 starts another, which must not
    become one of the program's children (its wait() would reap it)."""
    prog = compile_program("supervisor.c")
    t = Traced([prog, "subreaper"], workdir, config="mtraceinit")
    worker = int(t.proc.stdout.readline().decode().split()[1])
    for name in ("first", "second"):
        t.expect(name)
        t.resume()
    assert t.proc.stdout.readline().decode() == f"reaped {worker}\n"
    t.expect("idle")
    kill_and_wait(wait_for_reporter(t.pid))
    t.proc.send_signal(signal.SIGUSR1)
    report = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 1)))
    assert by_site(report)["site_supervisor"] == (1212, 1)
    t.resume()
    assert t.finish() == 0, t.stderr
    assert t.stdout == "no children\n"
    final = memlog.read(wait_for_file(report_path(workdir, t.prog, t.pid, 2)))
    assert final.header["reason"] == "exit"


@pytest.mark.parametrize("how, sig", [("wait", signal.SIGTERM), ("segv", signal.SIGSEGV),
                                      ("abort", signal.SIGABRT)])
def test_a_death_by_signal_has_its_final_report_on_disk_when_run_returns(tmp_path, how, sig):
    """#64 item 13: `run` returned before the final report was on disk when
    the program was killed by a signal (10 of 10; it landed 0.7-0.9 s
    later).  The program dies of the same signal, sees the default
    disposition where the tracer's handler stands, and its report says
    what killed it."""
    prog = compile_program("dies.c")
    # (SIGINT at its default in the program whatever the suite's: a shell's
    # background job starts with it ignored, and an ignored signal stays so
    # across exec)
    p = subprocess.Popen(cli_argv("run", "-q", prog, how), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdout.readline() == "defaults: yes yes\n"
        if how == "wait":
            assert p.stdout.readline() == "checkpoint waiting\n"
            os.kill(p.pid, sig)  # (run exec'd the program: its pid)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -sig
    # at once, no waiting: the report is there as run returns
    names = [n for n in os.listdir(tmp_path) if n.endswith(".memlog")]
    assert names == [f"dies-{p.pid}-1.memlog"], names
    final = memlog.read(str(tmp_path / names[0]))
    assert (final.header["reason"], final.header["killed-by"]) == ("death", sig.name)
    assert by_site(final)["site_before_death"] == (1000, 10)
