"""`libmemleak shell PID` (#24): a prompt on a running traced process,
scripted (-c, standard input) and under a real terminal (tmux)."""

import re
import shutil
import subprocess

import pytest

from helpers import CLI_ENV, Terminal, cli, cli_argv, compile_program, reports_of

ROUNDS = 4


@pytest.fixture
def running(tmp_path):
    """slowleaks traced, stopped at its 5th round, having had a report at
    each of the first four (asked through the shell itself)."""
    prog = compile_program("slowleaks.c")
    p = subprocess.Popen(cli_argv("run", "-q", prog), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(ROUNDS):
        assert p.stdout.readline() == b"checkpoint round\n"
        out = cli("shell", p.pid, "-c", "report")
        assert out.returncode == 0, out.stderr
        p.stdin.write(b"\n")
        p.stdin.flush()
    assert p.stdout.readline() == b"checkpoint round\n"
    yield p, tmp_path
    p.stdin.close()
    p.wait(timeout=60)


def test_scripted_commands_answer_from_the_live_process(running):
    p, workdir = running
    out = cli("shell", p.pid, "-c", "top 3; show 1; trend 1; diff; scan; restart")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"slowleaks (pid {p.pid}): {ROUNDS + 1} reports" in text   # top took one
    assert text.index("#1 ") < text.index("site_leak (slowleaks.c:") < text.index("#2 ")
    assert "  _start (slowleaks)" in text  # show: the whole stack
    assert text.count("(snapshot): +64 B +1 block\n") >= ROUNDS  # trend of site_leak, a line a report
    assert f"report {ROUNDS + 1} (snapshot):" in text  # diff: the latest report's changes
    scan = text[text.index("reachability scan"):]  # scan: site_startup's 4 KB is lost
    assert re.search(r"definitely lost: [\d,]+ bytes in \d+ blocks", scan)
    assert scan.index("definitely lost, by stack") < scan.index("site_startup")
    assert "a new interval starts here" in text
    reasons = [r.header["reason"] for r in reports_of(str(workdir), "slowleaks", p.pid)]
    assert reasons == ["snapshot"] * (ROUNDS + 1) + ["scan", "snapshot"]


def test_commands_on_standard_input_and_mistakes(running):
    p, _ = running
    out = subprocess.run(cli_argv("shell", p.pid), input="top 1\nshow 9\nfrobnicate\nhelp\n", env=CLI_ENV,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2  # typed wrong; the other commands still ran
    assert "#1 " in out.stdout and "watch SECS [K]" in out.stdout
    assert "libmemleak: shell: no suspect 9: 'top' lists" in out.stderr
    assert "libmemleak: shell: unknown command 'frobnicate' (help lists them)" in out.stderr


def test_a_live_top_takes_a_report_and_says_what_grew_before_there_is_a_ranking(tmp_path):
    """(#28 item 16) `top` right after the first report said "no leak
    suspects" from that one report: a live top asks for a report now, and
    until reports enough to rank are in, says what grew since the last."""
    prog = compile_program("slowleaks.c")
    p = subprocess.Popen(cli_argv("run", "-q", prog), cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"checkpoint round\n"
        first = cli("shell", p.pid, "-c", "top 3")
        assert first.returncode == 0, first.stderr
        assert "what is live at report 1, largest first:" in first.stdout
        assert "site_startup (slowleaks.c:" in first.stdout    # its 4 KB, the largest
        p.stdin.write(b"\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"checkpoint round\n"
        second = cli("shell", p.pid, "-c", "top 3").stdout
        grew = second[second.index("what grew from report 1 to report 2, largest first:"):]
        assert re.search(r"\+200 B \+1 block  site_rare \(slowleaks.c:", grew), grew
        assert "site_startup" not in grew
        assert [r.header["reason"] for r in reports_of(str(tmp_path), "slowleaks", p.pid)] == ["snapshot"] * 2
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def test_watch_reports_and_ranks_every_interval(running):
    p, workdir = running
    out = cli("shell", p.pid, "-c", "watch 0.2 2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("leak suspects, most likely first") == 2
    assert len(reports_of(str(workdir), "slowleaks", p.pid)) == ROUNDS + 2


def test_a_process_that_cannot_be_asked():
    out = cli("shell", 4194000, "-c", "top")
    assert out.returncode == 1 and out.stderr.startswith("libmemleak: shell: ")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        out = cli("shell", sleeper.pid, "-c", "top")
        assert out.returncode == 1 and "is not traced by libmemleak" in out.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux for a real terminal")
def test_the_prompt_under_a_real_terminal(running, tmp_path):
    """readline's prompt in tmux: a command typed, its answer on the
    screen, completion of a command name, quit."""
    p, _ = running
    term = Terminal(["shell", p.pid], tmp_path, height=40, env={"HOME": str(tmp_path)})
    try:
        term.wait_for(f"memleak {p.pid}>")  # (tmux leaves out trailing blanks)
        term.keys("to", "Tab")  # completes 'top'
        term.keys(" 1", "Enter")
        term.wait_for("#1 ")
        assert f"memleak {p.pid}> top 1" in term.screen()
        term.keys("quit", "Enter")
        assert term.wait_done()
        assert (tmp_path / ".libmemleak_history").read_text().splitlines()[-2:] == ["top 1", "quit"]
    finally:
        term.close()


def test_stop_and_start_recording(running):
    """stop: what the program allocates is not counted (site_leak's +64 a
    round); start: it is again; the exit report is still written."""
    p, workdir = running
    assert cli("shell", p.pid, "-c", "stop").returncode == 0
    for _ in range(2):  # two rounds while paused
        p.stdin.write(b"\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"checkpoint round\n"
    out = cli("shell", p.pid, "-c", "report; start")
    assert out.returncode == 0, out.stderr
    paused = reports_of(str(workdir), "slowleaks", p.pid)[-1]
    leak = [e for e in paused.entries if any(f.function == "site_leak" for f in e.frames)]
    # round 5's block, made before its checkpoint, before the pause; rounds 6
    # and 7 made two more while paused: not counted
    assert [(e.bytes, e.blocks) for e in leak] == [(64, 1)]
    p.stdin.write(b"\n")
    p.stdin.flush()
    assert p.stdout.readline() == b"checkpoint round\n"
    assert cli("shell", p.pid, "-c", "report").returncode == 0
    resumed = reports_of(str(workdir), "slowleaks", p.pid)[-1]
    leak = [e for e in resumed.entries if any(f.function == "site_leak" for f in e.frames)]
    assert [(e.bytes, e.blocks) for e in leak] == [(64, 1)]
    assert cli("shell", p.pid, "-c", "stop").returncode == 0  # and exits while paused
    p.stdin.write(b"\n")  # past the last round
    p.stdin.close()
    assert p.wait(timeout=60) == 0
    assert reports_of(str(workdir), "slowleaks", p.pid)[-1].header["reason"] == "exit"
