"""The event log (#32): tests/programs/phases.c builds a 50 MB peak in one
function and frees it, makes 100,000 temporary blocks in two threads, and
leaks 1,000 KiB-blocks slowly in a third -- recorded under the real
library (`run --record`), replayed by `libmemleak replay`, and held
against the program's own reports: exact bytes and counts, where the
reports cannot see the peak at all.  The flight recorder of a program
killed with SIGKILL replays to its end; the size cap holds; the reader
and the C replay take any broken or hostile file with one line."""

import contextlib
import glob
import json
import os
import random
import re
import signal
import sys
import subprocess
import time

import pytest

import helpers
from helpers import CHROMIUM, CLI_ENV, cli, cli_argv, compile_program, headless, reports_of, wait_for_file

MB = 1 << 20


def site(frames):
    for line in frames:
        name = line.strip("\t").split("\t")[0]
        if name in ("build_peak", "churn", "leak_slowly"):
            return name
    return None


def replay_json(path, *args):
    r = cli("replay", path, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def by_site(doc, field="bytes"):
    out = {}
    for row in doc["stacks"]:
        name = site(row["frames"])
        if name:
            b, n = out.get(name, (0, 0))
            out[name] = (b + row[field], n + row["blocks"])
    return out


def finished(path):
    """The log has its last counters: its reporter is done with it."""
    from libmemleak.files.events import EventLog, EventsError
    try:
        with EventLog(path) as log:
            return bool(log.stats)
    except EventsError:
        return False


def until(done, what, timeout=120):
    """Waits for done() (polling), failing with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def wait_until_finished(path):
    until(lambda: finished(path), f"{path}: no last counters")


def program_pid(prog, args, timeout=60):
    """The pid of the running `prog args`: the process of that command line
    and executable whose parent is not one as well -- not the hook's reporter
    between its fork and its exec, which is the program's copy for that
    moment (and then holds the program's segment: a test waiting for the
    process's own segment would wait on it for ever)."""
    deadline = time.monotonic() + timeout
    while True:
        found = subprocess.run(["pgrep", "-f", f"^{prog} {args}"], capture_output=True, text=True).stdout.split()
        parents = {}
        for pid in map(int, found):
            try:
                if os.readlink(f"/proc/{pid}/exe") == os.path.realpath(prog):
                    with open(f"/proc/{pid}/stat", "rb") as f:
                        parents[pid] = int(f.read().rpartition(b")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                pass
        roots = [pid for pid, parent in parents.items() if parent not in parents]
        if len(roots) == 1:
            return roots[0]
        assert time.monotonic() < deadline, f"no single process {prog} {args}: {found}"
        time.sleep(0.05)


@contextlib.contextmanager
def segment(pid, timeout=60):
    """The traced process's segment, once it has one (a process that has
    only just started may not yet), mapped for the block."""
    from libmemleak.live.client import LiveError, open_segment
    deadline = time.monotonic() + timeout
    while True:
        try:
            seg, fd = open_segment(pid)
            break
        except LiveError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        yield seg
    finally:
        seg.close()
        os.close(fd)


@contextlib.contextmanager
def phases_forever(tmp_path, *options):
    """phases.c leaking forever under `run -q OPTIONS`, ready: its pid for
    the block, which kills it; `run` is then waited for (or killed)."""
    prog = compile_program("phases.c")
    p = subprocess.Popen(cli_argv("run", "-q", *options, prog, "forever"), cwd=tmp_path, env=CLI_ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        yield program_pid(prog, "forever")
        p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()


def record(tmp_path, *args, options=("--record",)):
    prog = compile_program("phases.c")
    r = subprocess.run(cli_argv("run", "-q", *options, prog, *args), cwd=tmp_path, env=CLI_ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    logs = glob.glob(str(tmp_path / "phases-*.events"))
    assert len(logs) == 1, os.listdir(tmp_path)
    return logs[0], r.stderr


def test_replay_names_the_peak_the_temporaries_and_the_slow_leak(tmp_path):
    log, _ = record(tmp_path)
    assert os.stat(log).st_mode & 0o777 == 0o600
    pid = int(os.path.basename(log).split("-")[1].split(".")[0])
    [report] = reports_of(tmp_path, "phases", pid)

    assert report.header["event-log"] == f"all {os.path.basename(log)} lost 0"
    # The reports see only what is live as they are written: the leak.
    assert 1000 * 1024 <= int(report.header["live-bytes"]) < 1000 * 1024 + 4096  # (+ the threads' own)
    peak, err = replay_json(log)
    assert not err
    assert peak["before_log_bytes"] == 0 and peak["baseline_known"]  # the log agrees with the counters
    sites = by_site(peak)
    assert sites["build_peak"] == (50 * MB, 50)
    assert peak["peak_bytes"] - 50 * MB < 64 * 1024  # the peak is build_peak's, and little else
    assert "leak_slowly" not in sites and "churn" not in sites

    temporary, _ = replay_json(log, "--temporary")
    rows = [r for r in temporary["stacks"] if site(r["frames"]) == "churn"]
    assert sum(r["blocks"] for r in rows) == 100000
    assert sum(r["bytes"] for r in rows) == 100000 * 64
    assert sum(r["allocations"] for r in rows) == 100000
    assert all(site(r["frames"]) != "build_peak" for r in temporary["stacks"])  # lived far longer

    # A window from after the churn to the end: the slow leak, every block.
    whole, _ = replay_json(log, "--usage")
    end = (whole["end_ns"] - whole["start_ns"]) / 1e9
    window, _ = replay_json(log, "--between", "0", f"{end + 1:.3f}")
    assert by_site(window)["leak_slowly"] == (1000 * 1024, 1000)
    at_end, _ = replay_json(log, "--at", f"{end + 1:.3f}")
    assert by_site(at_end)["leak_slowly"] == (1000 * 1024, 1000)
    assert max(p["max_bytes"] for p in whole["usage"]) == peak["peak_bytes"]
    # every allocation in some step of the usage series, and its last point the end's total
    lives, _ = replay_json(log, "--lifetimes")
    assert sum(p["allocations"] for p in whole["usage"]) == sum(r["blocks"] for r in lives["stacks"]) > 101000
    assert whole["usage"][-1]["live_bytes"] == sum(r["bytes"] for r in at_end["stacks"])

    text = cli("replay", log, "--frames", "1")
    assert "peak: 50.0 MB live at" in text.stdout and "build_peak (phases.c:" in text.stdout


def test_the_peak_is_kept_in_the_one_pass_that_finds_it(tmp_path):
    """What each stack held at the peak is kept as the replay goes (an
    undo record per stack, native/reporter/replay.c): exactly what a second
    replay stopped at the peak's record has live -- in a log of four
    threads, the peak reached again and again while build_peak grows."""
    from libmemleak.analysis import replay as R
    from libmemleak.files.events import EventLog
    log_path, _ = record(tmp_path)
    with EventLog(log_path) as log:
        whole = R.replay(log)
        base = R.baseline(log, whole)
        at_peak = R.live_at(base, whole, at_peak=True)
        stopped = R.replay(log, stop_ordinal=whole.totals["peak_ordinal"] + 1)
        assert stopped.totals["total"] == whole.totals["peak"]
        assert at_peak == R.live_at(base, stopped)
        assert sum(b for b, _ in at_peak.values()) == whole.totals["peak"] + sum(b for b, _ in base.live.values())
        assert at_peak != R.live_at(base, whole)  # (not what is live at the end)


def test_flight_recorder_of_a_killed_program_replays_to_its_end(tmp_path):
    with phases_forever(tmp_path, "--record-last", "30s") as pid:
        time.sleep(1.5)
        os.kill(pid, signal.SIGKILL)
    log = str(tmp_path / f"phases-{pid}.events")
    [death] = reports_of(tmp_path, "phases", pid) if wait_for_file(str(tmp_path / f"phases-{pid}-1.memlog")) else []
    assert death.header["reason"] == "death"
    assert wait_for_file(log)
    wait_until_finished(log)  # (its last counters: the reporter is done with it)
    doc, err = replay_json(log, "--at", "100000")
    assert "flight-recorder" in err
    assert by_site(doc)["leak_slowly"] == helpers.by_site(death)["leak_slowly"]  # the death report's, exactly
    # It holds the run's last second: the leaks of that second are in it.
    window, _ = replay_json(log, "--between", f"{(doc['end_ns'] - doc['start_ns']) / 1e9 - 1:.3f}", "100000")
    assert by_site(window)["leak_slowly"][1] >= 50


def test_the_size_cap_holds_and_is_said(tmp_path):
    log, err = record(tmp_path, "churn", "3000000", options=("--record", "--record-cap", "1M"))
    assert os.path.getsize(log) <= MB
    assert "record_cap" in err
    doc, notes = replay_json(log, "--temporary")
    assert "stopped early (cap)" in notes
    pid = int(os.path.basename(log).split("-")[1].split(".")[0])
    [report] = reports_of(tmp_path, "phases", pid)
    assert report.header["event-log"].endswith(" stopped cap")  # the report says the log is cut
    assert 0 < sum(r["blocks"] for r in doc["stacks"]) < 3000000


def test_broken_and_hostile_logs_get_one_line(tmp_path):
    log, _ = record(tmp_path, "churn", "20000")
    data = open(log, "rb").read()
    # Cut short: replayed up to its last whole chunk, said.
    cut = tmp_path / "cut.events"
    cut.write_bytes(data[:len(data) - 40])
    r = cli("replay", str(cut))
    assert r.returncode == 0 and "ends in the middle of a chunk" in r.stderr
    # Its reader gone (`replay F | head`): stopped without a traceback, as cat does.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run(cli_argv("replay", log), stdout=write_end, stderr=subprocess.PIPE, env=CLI_ENV,
                           text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr) == (141, "")
    not_one = tmp_path / "not.events"
    not_one.write_bytes(b"hello\n")
    r = cli("replay", str(not_one))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a libmemleak event log" in r.stderr
    # Flipped bytes anywhere: an answer or one line, never a traceback or a crash
    # (the C replay decodes whatever the records say).
    from libmemleak.analysis import replay as R
    from libmemleak.files.events import EventLog, EventsError
    rng = random.Random(32)
    for i in range(300):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        path = tmp_path / "bad.events"
        path.write_bytes(bytes(bad))
        try:
            with EventLog(str(path)) as log_:
                whole = R.replay(log_, blocks=True, lifetimes=True, temporary_ns=10**6)
                R.baseline(log_, whole)
        except EventsError as e:
            assert "\n" not in str(e)


def rewritten(data, change):
    """The log `data` with its HEAD's and STATs' JSON passed through change(tag, doc)."""
    from libmemleak.files.events import CHUNK, MAGIC, json_chunk
    out, at = [MAGIC], len(MAGIC)
    while at < len(data):
        tag, length = CHUNK.unpack_from(data, at)
        payload = data[at + CHUNK.size:at + CHUNK.size + length]
        if tag in (b"HEAD", b"STAT"):
            out.append(json_chunk(tag, change(tag, json.loads(payload))))
        else:
            out.append(data[at:at + CHUNK.size + length])
        at += CHUNK.size + length
    return b"".join(out)


def test_forged_head_and_stat_fields_get_one_line_and_never_reach_a_terminal_raw(tmp_path):
    """#64 items 12 and 14: a STAT whose `lost` is not a number, a HEAD whose
    start is negative were tracebacks; a HEAD's program with escape
    sequences reached the terminal raw through replay and report (the
    title set, the screen cleared), and a 10 MB one was echoed whole."""
    log, _ = record(tmp_path, "churn", "20000")
    data = open(log, "rb").read()
    forged = tmp_path / "forged"
    forged.mkdir()

    def outcome(change, *command):
        path = forged / "phases-4242.events"
        path.write_bytes(rewritten(data, change))
        r = cli(*command, str(path))
        assert "Traceback" not in r.stderr and "\x1b" not in r.stdout + r.stderr, r.stderr[-2000:]
        assert len(r.stdout) + len(r.stderr) < 200_000
        return r

    def field(tag, key, value):
        return lambda t, doc: {**doc, key: value} if t == tag else doc

    for tag, key, value in [(b"STAT", "lost", "many"), (b"STAT", "lost", -3), (b"HEAD", "start_mono_ns", -5),
                            (b"HEAD", "tick_shift", 99), (b"HEAD", "pid", "x"), (b"STAT", "reason", [1]),
                            (b"HEAD", "program", {"a": 1})]:
        for command in ("replay", "report"):
            r = outcome(field(tag, key, value), command)
            assert r.returncode == 2 and r.stderr.count("\n") == 1, (key, value, command, r.stderr)
            assert f"({key} is not" in r.stderr, r.stderr
    hostile = "\x1b]0;owned\x07\x1b[2J" + "P" * (10 << 20)
    for key in ("program", "exe"):
        for command in ("replay", "report"):
            r = outcome(field(b"HEAD", key, hostile), command)
            assert r.returncode == 0, r.stderr
            shown = r.stdout + r.stderr
            assert "\x07" not in shown and "PPPP" * 1024 not in shown  # escaped, and cut


def test_export_draws_a_log_at_its_peak_and_at_a_moment(tmp_path):
    """export reads an event log as it reads reports: what was live at the
    peak (the 50 MB of build_peak, which no report saw), or with --at at a
    moment (the slow leak at the end), in every format it writes."""
    log, _ = record(tmp_path)
    folded = cli("export", "--format", "collapsed", log)
    assert folded.returncode == 0, folded.stderr
    peak = {}
    for line in folded.stdout.splitlines():
        stack, _, value = line.rpartition(" ")
        name = next((n for n in ("build_peak", "churn", "leak_slowly") if n in stack), None)
        if name:
            peak[name] = peak.get(name, 0) + int(value)
    assert peak == {"build_peak": 50 * MB}, peak
    whole, _ = replay_json(log, "--usage")
    end = (whole["end_ns"] - whole["start_ns"]) / 1e9
    doc = json.loads(cli("export", "--format", "json", "--at", f"{end + 1:.3f}", log).stdout)
    [process] = doc["processes"]
    leak = [s for s in process["stacks"] if any(f.get("function") == "leak_slowly" for f in s["frames"])]
    assert sum(s["live_bytes"] for s in leak) == 1000 * 1024 and sum(s["live_blocks"] for s in leak) == 1000, leak
    page = tmp_path / "peak.html"
    assert cli("export", "--format", "flamegraph", "-o", str(page), log).returncode == 0
    assert "build_peak" in page.read_text()
    pb = tmp_path / "peak.pb.gz"
    assert cli("export", "--format", "pprof", "-o", str(pb), log).returncode == 0 and pb.stat().st_size > 100
    # Reports and a log together, --since with a log, --at without a log or not a time, a log
    # of another pid: one line each.
    for argv in (["--since", "1", log], [log, log + ".nope"], ["--at", "1", str(tmp_path)], ["--pid", "1", log],
                 ["--at", "soon", log]):
        bad = cli("export", "--format", "json", *argv)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, (argv, bad.stderr)


def test_report_ranks_a_log_over_its_timeline(tmp_path):
    """report reads an event log as reports evenly spaced over it: the slow
    leak ranked first with its exact bytes and blocks and its allocations,
    the peak built and freed and the temporaries not suspects -- from one
    run that wrote a single exit report (which alone can rank nothing)."""
    log, _ = record(tmp_path)
    r = cli("report", "--json", log)
    assert r.returncode == 0, r.stderr
    [process] = json.loads(r.stdout)["processes"]
    assert process["reports"] == 16 and process["ended"] == "exit"
    first = process["suspects"][0]
    assert site(f"{f.get('function')}\t" for f in first["frames"]) == "leak_slowly"
    assert (first["live_bytes"], first["live_blocks"], first["allocations"]) == (1000 * 1024, 1000, 1000)
    assert sum(first["trend"]) == 1000 * 1024
    named = {site(f"{f.get('function')}\t" for f in s["frames"]) for s in process["suspects"]}
    assert not named & {"build_peak", "churn"}, named
    four = json.loads(cli("report", "--json", "--moments", "4", log).stdout)["processes"][0]
    leak = [st for st in four["stacks"] if site(f"{f.get('function')}\t" for f in st["frames"]) == "leak_slowly"]
    assert four["reports"] == 4 and sum(st["live_bytes"] for st in leak) == 1000 * 1024
    text = cli("report", log).stdout
    assert "16 reports" in text and "leak_slowly (phases.c:" in text
    # check gates on a log as report ranks it: the slow leak fails --max-leaks 0; the end's 1 MB passes
    # --max-live 2M, which the peak's 50 MB would not (the gate is on what is live at the end).
    gate = cli("check", "--max-leaks", "0", log)
    assert gate.returncode == 1 and "leak_slowly (phases.c:" in gate.stdout, gate.stdout + gate.stderr
    assert cli("check", "--max-live", str(2 * MB), log).returncode == 0
    # A log with reports, or a log of another pid: one line.
    reports = [p for p in glob.glob(str(tmp_path / "phases-*.memlog"))]
    for argv in ([log, *reports], ["--pid", "1", log]):
        bad = cli("report", *argv)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, (argv, bad.stderr)


def test_shell_on_a_log(tmp_path):
    """shell FILE.events: the timeline's suspects (top, show, trend) and
    replay's views as commands; what asks a running process is refused in
    one line, the other commands still run."""
    log, _ = record(tmp_path)
    r = cli("shell", "-c", "top 1; show 1; trend 1; peak; temporary; scan; between 0 100; lifetimes; usage; "
                           "moments 4; top 1", log)
    assert r.returncode == 2, r.stderr  # the refused scan's
    out = r.stdout
    assert "#1 1000.0 KB live in 1,000 blocks" in out and "leak_slowly (phases.c:" in out
    assert out.count("report   16 (    exit)") == 1
    assert "the log is read as 4 reports" in out and ": 4 reports, " in out
    assert "peak: 50.0 MB live at" in out and "build_peak (phases.c:" in out
    assert "temporary (freed at once): 100,000 allocations" in out
    assert "allocated from +0.000 s and still live at +100.000 s:" in out
    assert "   1000.0 KB 1,000 blocks\n      leak_slowly (phases.c:" in out
    assert r.stderr.strip().splitlines() == [
        "libmemleak: shell: 'scan' asks a running process; an event log is its past ('help' lists what it answers)"]
    # Not a log, not a pid: one line.
    bad = tmp_path / "x.events"
    bad.write_bytes(b"MLKEVENTS 1\n")
    r = cli("shell", "-c", "top", str(bad))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium")
def test_the_html_page_of_a_log_charts_it_at_full_resolution(tmp_path):
    """export --format html FILE.events, read by a real browser: the live
    total over time, every step replay --usage has (each step's highest
    total: the 50 MB peak is on the line, marked), the suspects ranked over
    the log's timeline; with --at, the moment shown is marked."""
    log, _ = record(tmp_path)
    usage, _ = replay_json(log, "--usage")
    page = tmp_path / "log.html"
    r = cli("export", "--format", "html", "-o", str(page), log)
    assert r.returncode == 0, r.stderr
    dom = headless(tmp_path / "profile", "--dump-dom", f"file://{page}")
    assert dom.returncode == 0, dom.stderr
    out = dom.stdout
    [points] = re.findall(r'<svg class="usage"[^>]*><polyline[^>]*points="([^"]*)"', out)
    ys = [float(p.split(",")[1]) for p in points.split()]
    assert len(ys) == len(usage["usage"]) > 100
    assert min(ys) == pytest.approx(2.0)  # the line reaches the top of its scale: the peak
    assert "<title>peak: 50.0 MB at +" in out and "live: 0 to 50.0 MB" in out
    [rates] = re.findall(r'<polyline class="rate"[^>]*points="([^"]*)"', out)  # the allocation rate
    assert len(rates.split()) == len(ys) and "allocations: 0 to " in out
    assert re.search(r'<td class="n">#1</td><td>grows in [^<]*never freed</td><td class="n">1000.0 KB live in '
                     r'1,000 blocks</td><td class="frames">leak_slowly \(phases.c:', out), out[-3000:]
    at = tmp_path / "at.html"
    assert cli("export", "--format", "html", "--at", "0.1", "-o", str(at), log).returncode == 0
    text = at.read_text()
    assert "the moment shown: +0.100 s" in text and "shown below: +0.100 s" in text
    shot = tmp_path / "log.png"
    headless(tmp_path / "profile", "--window-size=1000,700", f"--screenshot={shot}", f"file://{page}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_children_and_exec_images_get_logs_of_their_own(tmp_path):
    """A forked child logs under its own pid (what it inherited is what was
    live before its first record); an image exec'd under the same pid gets
    PROG-PID-2.events.  Each replays, at its end, to its own reports."""
    forker = compile_program("forker.c")
    r = subprocess.run(cli_argv("run", "-q", "--record", forker), cwd=tmp_path, env=CLI_ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    def logs():
        return sorted(glob.glob(str(tmp_path / "forker-*.events")), key=lambda p: int(p.split("-")[-1][:-7]))
    # (a child's last report and log are the keeper's to write: `run` does not wait for them)
    until(lambda: len(logs()) == 2 and all(map(finished, logs())), f"not two finished logs: {os.listdir(tmp_path)}")
    parent, child = logs()
    def first_frames(doc):
        sites = {}
        for row in doc["stacks"]:
            name = row["frames"][0].strip("\t").split("\t")[0] if row["frames"] else "?"
            b, n = sites.get(name, (0, 0))
            sites[name] = (b + row["bytes"], n + row["blocks"])
        return sites
    doc, _ = replay_json(child, "--at", "100000")
    sites = first_frames(doc)
    assert sites["site_in_child"] == (2 * 2222, 2)
    assert sites["site_before_fork"] == (1111, 1) and doc["before_log_bytes"] >= 1111  # inherited: before the log
    doc, _ = replay_json(parent, "--at", "100000")
    assert first_frames(doc)["site_in_parent"] == (3333, 1) and doc["before_log_bytes"] == 0
    for path in (parent, child):
        pid = int(path.split("-")[-1][:-7])
        [report] = reports_of(tmp_path, "forker", pid)
        whole, _ = replay_json(path, "--at", "100000")
        assert sum(row["bytes"] for row in whole["stacks"]) == int(report.header["live-bytes"])
    reexec = compile_program("reexec.c")
    r = subprocess.run(cli_argv("run", "-q", "--record", reexec), cwd=tmp_path, env=CLI_ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split()[-1])
    second = str(tmp_path / f"reexec-{pid}-2.events")
    first = str(tmp_path / f"reexec-{pid}.events")
    wait_until_finished(first)
    wait_until_finished(second)
    doc, _ = replay_json(second, "--at", "100000")
    assert [row["bytes"] for row in doc["stacks"] if any("site_reexec" in f for f in row["frames"])] == [321]


def test_a_forged_stack_id_is_refused_not_paid_for(tmp_path):
    """A record naming a stack id near the hook's cap (2^21) in a log that
    names a handful: refused as not the log's, said, and no 670 MB of
    per-stack lifetimes for it."""
    import zstandard
    from libmemleak.files.events import EVTS_HEAD, PAGE, EventLog, chunk
    log, _ = record(tmp_path, "churn", "1000")
    with EventLog(log) as opened:
        first = opened.evts[0].first_ns

    def varint(v):
        out = bytearray()
        while v >= 0x80:
            out.append(v & 0x7f | 0x80)
            v >>= 7
        return bytes(out + bytes([v]))
    rec = bytes([1]) + varint(0) + varint(0) + varint(64) + varint((1 << 21) - 1)
    body = EVTS_HEAD.pack(1, len(rec)) + PAGE.pack(1, len(rec), first, first) + zstandard.ZstdCompressor().compress(rec)
    forged = tmp_path / "forged.events"
    forged.write_bytes(open(log, "rb").read() + chunk(b"EVTS", body))
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, *cli_argv("replay", "--lifetimes", "--json", str(forged))],
                         env=CLI_ENV, capture_output=True, text=True, timeout=300).stdout
    status, rss_kb = map(int, out.split("\n")[0].split())
    assert status == 0 and rss_kb < 300 * 1024, out
    assert "1 records could not be used" in out


def test_one_reporter_drains_a_pool_at_a_time(tmp_path):
    """The pool's drain lock (the segment's events_drainer: a descendant's
    own reporter and the keeper may both hold its segment).  Held by a live
    process, the reporter leaves the pool alone and the log does not grow;
    left by a dead one, the reporter takes it over; the log then holds
    every record, exactly what the death report counts."""
    with phases_forever(tmp_path, "--record") as pid:
        log = tmp_path / f"phases-{pid}.events"
        size = lambda: log.stat().st_size if log.exists() else 0  # noqa: E731
        with segment(pid) as seg:
            seg.header.events_drainer = os.getpid()  # a live drainer: this test
            time.sleep(1.5)  # (a drain under way when it was set finishes)
            held = size()
            time.sleep(3)    # pages fill (one a second) and close; none is drained
            assert size() == held
            gone = subprocess.Popen(["true"])
            gone.wait()
            seg.header.events_drainer = gone.pid  # left by a drainer that died: taken over
            until(lambda: size() != held, "the reporter never took the pool over")
        os.kill(pid, signal.SIGKILL)
    [death] = reports_of(tmp_path, "phases", pid) if wait_for_file(str(tmp_path / f"phases-{pid}-1.memlog")) else []
    wait_until_finished(str(log))
    doc, err = replay_json(str(log), "--at", "100000")
    assert "have been lost" not in err and "not logged" not in err, err
    assert by_site(doc)["leak_slowly"] == helpers.by_site(death)["leak_slowly"]


def test_a_log_whose_reporter_was_replaced_is_read_with_its_continuation(tmp_path):
    """The reporter killed while the program runs: its standby takes over
    and the log goes on in PROG-PID-2.events.  Replaying PROG-PID.events
    reads both as one log, says so, and says any pages the killed reporter
    had taken and not written."""
    with phases_forever(tmp_path, "--record") as pid:
        time.sleep(1.5)
        with segment(pid) as seg:
            first = seg.header.reporter_pid
            os.kill(first, signal.SIGKILL)
            until(lambda: seg.header.reporter_pid not in (0, first), "no reporter took over")
        second = tmp_path / f"phases-{pid}-2.events"
        until(second.exists, f"no {second}")
        time.sleep(1.5)
        os.kill(pid, signal.SIGKILL)
    wait_for_file(str(tmp_path / f"phases-{pid}-1.memlog"))
    wait_until_finished(str(tmp_path / f"phases-{pid}.events"))
    reports = reports_of(tmp_path, "phases", pid)
    assert reports[-1].header["reason"] == "death"
    assert reports[-1].header["event-log"].startswith(f"all phases-{pid}-2.events ")
    log = str(tmp_path / f"phases-{pid}.events")
    doc, err = replay_json(log, "--at", "100000")
    assert f"read with {second}: its reporter was replaced" in err
    from libmemleak.files.events import EventLog
    with EventLog(log) as both:
        assert both.continued == [str(second)] and both.final_stat()["reason"] == "death"
        missing = both.missing_pages()
    assert (doc["before_log_bytes"] == 0) if not missing else ("pages of records are missing" in err)
    alone = tmp_path / "alone.events"   # the first file by another name: no continuation
    alone.write_bytes(open(log, "rb").read())
    part, _ = replay_json(str(alone), "--at", "100000")
    assert part["records"] < doc["records"]
    sites = by_site(doc)
    total = {}
    for r in reports:
        for name, (b, n) in helpers.by_site(r).items():
            ob, on = total.get(name, (0, 0))
            total[name] = (ob + b, on + n)
    assert sites["leak_slowly"] == total["leak_slowly"]  # what was live at death, exactly


def test_a_stopped_reporter_costs_one_wait_not_one_per_page(tmp_path):
    """The pool full and its reporter stopped (SIGSTOP): the hook waits 3 s
    for a page once, then drops records -- counted, said in the report and
    by replay -- until the reporter frees pages again, instead of 3 s for
    every page each thread fills (here about a thousand: most of an hour)."""
    prog = compile_program("recordstall.c")
    p = subprocess.Popen(cli_argv("run", "-q", "--record", "--config", "record_buffer=1M", prog, "2000000"),
                         cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    reporter = None
    try:
        assert p.stdout.readline().strip() == "ready"
        pid = program_pid(prog, "2000000")
        with segment(pid) as seg:
            until(lambda: seg.header.reporter_pid, "no reporter")
            reporter = seg.header.reporter_pid
        os.kill(reporter, signal.SIGSTOP)
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "done"  # (the test's timeout is the bound)
        os.kill(reporter, signal.SIGCONT)
        reporter = None
        p.stdin.write("\n")
        p.stdin.flush()
        p.communicate(timeout=120)
    finally:
        if reporter:
            os.kill(reporter, signal.SIGCONT)
        if p.poll() is None:
            p.kill()
    [report] = reports_of(tmp_path, "recordstall", pid)
    lost = int(report.header["event-log"].split(" lost ")[1].split()[0])
    assert lost > 1000000
    log = str(tmp_path / f"recordstall-{pid}.events")
    doc, err = replay_json(log, "--at", "100000")
    assert f"{lost:,} records were not logged" in err
