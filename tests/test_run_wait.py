"""`run --wait` (#64 item 13): `run` returns only once the program's final
report is on disk -- also for a program killed by SIGKILL, whose report
the reporter writes after the death -- with the program's exit status or
its death by the same signal; signals sent to `run` reach the program; a
daemon the program leaves behind does not hold `run` up."""

import os
import signal
import subprocess

from helpers import (CLI_ENV, cli, cli_argv, compile_program, kill_reporter_and_standby, reports_of,
                     wait_for, wait_for_reporter)


def _final(tmp_path):
    """The one process's reports, read the moment `run` returned."""
    (name,) = {n.rsplit("-", 1)[0] for n in os.listdir(tmp_path) if n.endswith(".memlog")}
    prog, pid = name.rsplit("-", 1)
    return reports_of(tmp_path, prog, int(pid))


def test_a_program_killed_by_sigkill_has_its_report_when_run_returns(tmp_path):
    prog = compile_program("waited.c")
    r = cli("run", "-q", "--wait", prog, "kill", cwd=tmp_path)
    assert r.returncode == -signal.SIGKILL and r.stdout == "ready\n", r.stderr
    last = _final(tmp_path)[-1]  # no waiting here: it is there
    assert last.header["reason"] == "death"
    assert last.header.get("killed-by") == "SIGKILL"  # (no handler ran: its zombie says so)
    assert sum(e.bytes for e in last.entries if any(f.function == "site_waited" for f in e.frames)) == 3000


def test_the_exit_status_is_the_programs(tmp_path):
    prog = compile_program("waited.c")
    r = cli("run", "--wait", prog, "exit", "3", cwd=tmp_path)
    assert r.returncode == 3 and r.stdout == "ready\n", r.stderr
    assert _final(tmp_path)[-1].header["reason"] == "exit"
    assert "libmemleak: wrote" in r.stderr  # the reporter's end line came before run returned


def test_an_exit_past_the_exit_handlers_is_an_exit(tmp_path):
    """(#60) A program that leaves by exit_group past libc -- as a Go
    program does -- runs no exit handler of ours: its report was written
    after it was gone and said "death" for a clean exit.
    `run --wait` keeps the ended program unreaped until its reporters are
    done, and the reporter reads from it how it ended: "exit", status 3."""
    prog = compile_program("waited.c")
    r = cli("run", "-q", "--wait", prog, "exit_group", "3", cwd=tmp_path)
    assert r.returncode == 3 and r.stdout == "ready\n", r.stderr
    last = _final(tmp_path)[-1]
    assert last.header["reason"] == "exit", last.header
    assert last.header["exit-status"].startswith("3 (no exit handler"), last.header
    assert sum(e.bytes for e in last.entries if any(f.function == "site_waited" for f in e.frames)) == 3000


def test_signals_sent_to_run_reach_the_program(tmp_path):
    """kill -USR1 $RUN asks the program for a report; kill -TERM $RUN ends
    it (its report first, as the tracer's handler does), and run dies of
    SIGTERM too."""
    prog = compile_program("waited.c")
    p = subprocess.Popen(cli_argv("run", "-q", "--wait", prog, "wait"), cwd=tmp_path, env=CLI_ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGUSR1)
    wait_for(lambda: any(n.endswith("-1.memlog") for n in os.listdir(tmp_path)), "the report USR1 asked for")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=120) == -signal.SIGTERM, p.stderr.read()
    reports = _final(tmp_path)
    assert [r.header["reason"] for r in reports] == ["signal", "death"]
    assert reports[-1].header.get("killed-by") == "SIGTERM"


def test_a_daemon_left_behind_does_not_hold_run(tmp_path):
    prog = compile_program("waited.c")
    r = cli("run", "-q", "--wait", prog, "daemon", cwd=tmp_path, timeout=25)  # (the daemon lives 30 s)
    assert r.returncode == 0 and r.stdout == "ready\n", r.stderr
    assert _final(tmp_path)[-1].header["reason"] == "exit"


def test_a_program_whose_reporters_were_killed_before_it_is_said_to_have_no_final_report(tmp_path):
    """(#64 item 7) The reporter's standby, then the reporter, then the
    program killed (-9): nobody writes its final report -- said, as `run`
    returns, with the report that is its last."""
    prog = compile_program("waited.c")
    p = subprocess.Popen(cli_argv("run", "-q", "--wait", prog, "wait"), cwd=tmp_path, env=CLI_ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGUSR1)  # (run passes it on; the report's name says the program's pid)
    wait_for(lambda: any(n.endswith("-1.memlog") for n in os.listdir(tmp_path)), "the report USR1 asked for")
    (first,) = [n for n in os.listdir(tmp_path) if n.endswith("-1.memlog")]
    pid = int(first.rsplit("-", 2)[1])
    reporter = wait_for_reporter(pid)
    kill_reporter_and_standby(reporter)
    os.kill(pid, signal.SIGKILL)
    assert p.wait(timeout=120) == -signal.SIGKILL
    err = p.stderr.read()
    assert "the program ended without its final report" in err and f"-{pid}-1.memlog is its last" in err, err
