"""How many reporters a program starts: one at a time, however slow the
start (#64 item 7: a second reporter near the exit, a stray
PROG-PID-2.events saying "the reporter was replaced")."""

import json
import os
import shutil
import signal
import time

from helpers import (Traced, by_site, children_of, cli, compile_program, env_for, gone, kill_and_wait,
                     kill_reporter_and_standby, report_path, reporters_of, signal_handled, wait_for, wait_for_file,
                     wait_for_reporter, wait_until_idle)
from libmemleak import preload_path
from libmemleak.files import memlog

# A successor's first report: a cold start -- its Python, then every frame
# symbolized anew -- which a loaded machine stretched past 20 s once (the
# fresh clone's suite beside a test loop and two busy loops).
SUCCESSOR_TIMEOUT = 120


def _copies_of(exe, but):
    """Pids running `exe` other than `but`: a reporter's process between
    its clone and its exec still runs the program's image."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != but:
            try:
                if os.readlink(f"/proc/{entry}/exe") == exe and not gone(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_a_reporter_slow_to_start_is_not_started_twice(tmp_path):
    """The started reporter told the program it was alive only once it was
    about to exec, and the program took 2 s without a word as "none":
    a report request after that started a second reporter beside the
    first (on a loaded machine, under valgrind).  Its start is made slow
    here for as long as the test likes: the reporter's script, next to the
    library, is a FIFO nobody writes, so its open blocks."""
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    lib = lib_dir / "libmtrace.so"
    shutil.copy(preload_path(), lib)
    os.mkfifo(lib_dir / "_reporter_main.py")
    prog = compile_program("blocked.c")
    env = env_for(None, {"LD_PRELOAD": str(lib)})
    t = Traced([prog], tmp_path, env=env)
    starting = []
    try:
        t.expect("blocked")
        wait_for(lambda: _copies_of(os.path.realpath(prog), t.pid), "the reporter's process")
        starting = _copies_of(os.path.realpath(prog), t.pid)
        assert len(starting) == 1
        # Report requests, past the old 2 s: each sees the reporter alive.
        for _ in range(4):
            time.sleep(1)  # (time passing is the point here)
            t.proc.send_signal(signal.SIGUSR1)
            wait_for(lambda: signal_handled(t.pid), "the signal handled")
        starting = _copies_of(os.path.realpath(prog), t.pid)
        assert len(starting) == 1, "a second reporter was started beside the first"
    finally:
        for pid in starting:
            kill_and_wait(pid)
        t.proc.kill()
        t.finish()


def test_a_process_gone_without_its_final_report_is_said_so(tmp_path):
    """(#64 item 7) The reporter's standby killed, then the reporter, then
    the program (-9): nobody is left to write its final report, nor to
    say so then.  The next `report` says it: the process named by its
    report is gone, and that report is not a final one."""
    prog = compile_program("blocked.c")
    t = Traced([prog], tmp_path)
    t.expect("blocked")
    t.signal_report(1)
    out = cli("report", str(tmp_path))
    assert "still running at the last report" in out.stdout and "gone since" not in out.stdout
    reporter = wait_for_reporter(t.pid)
    kill_reporter_and_standby(reporter)
    t.proc.kill()
    t.finish()
    wait_for(lambda: not reporters_of(t.pid), "no reporter left")
    out = cli("report", str(tmp_path))
    assert "gone since, without a final report" in out.stdout, out.stdout
    doc = json.loads(cli("report", "--json", str(tmp_path)).stdout)
    assert doc["processes"][0]["final_report_lost"] is True
    assert len(t.reports()) == 1


def test_a_report_whose_baseline_was_being_committed_is_not_written_again(tmp_path):
    """(#64 item 7) The reporter killed after report 2's file was put in
    place, while it committed that report's baseline into the stacks: its
    successor wrote report 2 again, replacing the file -- and what the
    stacks committed already counted was then in no report.  Now seq 2 is
    taken, and report 3 says it may count again part of report 2.  The
    dead reporter's state is made in the segment (committing_seq) and the
    directory (report 2's file, as it left it)."""
    from libmemleak.live.client import open_segment
    prog = compile_program("blocked.c")
    t = Traced([prog], tmp_path)
    t.expect("blocked")
    first = report_path(tmp_path, t.prog, t.pid, 1)
    t.signal_report(1)
    shutil.copy(first, report_path(tmp_path, t.prog, t.pid, 2))   # report 2, in place
    segment, fd = open_segment(t.pid)
    try:
        segment.header.committing_seq = 2
        kill_and_wait(wait_for_reporter(t.pid))
        wait_for(lambda: segment.header.report_seq == 2, "the successor taking seq 2 as written")
    finally:
        segment.close()
        os.close(fd)
    third = t.signal_report(3, timeout=SUCCESSOR_TIMEOUT)
    assert "report 2's reporter was killed as it committed" in third.header["handover"]
    with open(report_path(tmp_path, t.prog, t.pid, 2)) as copy, open(first) as original:
        assert copy.read() == original.read()                      # not written again
    out = cli("report", str(tmp_path))
    assert "report 3: report 2's reporter was killed" in out.stdout, out.stdout
    t.resume()
    assert t.finish() == 0


def test_a_commit_cut_short_is_finished_from_its_journal(tmp_path):
    """(#64 item 7) "The standby must never repeat a report's deltas": a
    reporter killed after report 1's file was in place, before its
    baseline was committed into the stacks, left its successor no way to
    tell which stacks the report had counted -- report 2 counted the
    4242 bytes again ("may count again part of what report 1 counted").
    The reporter now writes the commit down before the rename
    (daemon/commit_journal.py) and the successor finishes it: report 2
    says +0, and no hand-over.  The dead reporter's state is made here:
    report 1's file in place, its journal written from the segment's own
    snapshot, committing_seq said, nothing committed."""
    from libmemleak.daemon.commit_journal import ReportPlace
    from libmemleak.live.client import open_segment
    prog = compile_program("blocked.c")
    t = Traced([prog], tmp_path)
    t.expect("blocked")
    reporter = wait_for_reporter(t.pid)
    wait_until_idle(reporter)  # up, its standby forked (nothing asked of it yet: no report 1)
    segment, fd = open_segment(t.pid)
    try:
        snap = segment.take_snapshot()
        assert sum(snap.live_bytes) - sum(snap.reported_bytes) >= 4242  # nothing reported yet
        place = ReportPlace(segment, str(tmp_path), snap.name, t.pid, None)
        assert place.journal(1, snap)
        with open(report_path(tmp_path, t.prog, t.pid, 1), "w") as f:
            f.write("# libmemleak: 0.1.0\n# seq: 1\n# reason: signal\n")
        segment.header.committing_seq = 1
        kill_and_wait(reporter)
        wait_for(lambda: segment.header.report_seq == 1, "the successor finishing report 1's commit")
    finally:
        segment.close()
        os.close(fd)
    second = t.signal_report(2, timeout=SUCCESSOR_TIMEOUT)
    assert "handover" not in second.header, second.header
    assert (second.header["live-bytes"], second.header["change-bytes"]) == ("4242", "+0"), second.header
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".commit")]  # the journal gone
    t.resume()
    assert t.finish() == 0


def test_a_report_killed_before_its_file_was_in_place_is_written(tmp_path):
    """(#64 item 7) committing_seq was said after the report's file was
    renamed into place: a reporter killed between the two left report 1
    on disk and no word of it, and its successor counted that report's
    bytes again in the next (a death report of "+4242" after a report of
    "+4242", 1 run in 60 of the lifecycle test under load).  Now it is
    said just before the rename -- and a successor that finds it said but
    the file not in place (killed before the rename) writes that report,
    all it held, under its seq: no seq is skipped.  The dead reporter's
    state is made in the segment: report 2 said, its file never renamed."""
    from libmemleak.live.client import open_segment
    prog = compile_program("blocked.c")
    t = Traced([prog], tmp_path)
    t.expect("blocked")
    t.signal_report(1)
    segment, fd = open_segment(t.pid)
    try:
        segment.header.committing_seq = 2
        kill_and_wait(wait_for_reporter(t.pid))
        wait_for(lambda: reporters_of(t.pid), "a successor")
    finally:
        segment.close()
        os.close(fd)
    second = t.signal_report(2, timeout=SUCCESSOR_TIMEOUT)
    assert "handover" not in second.header, second.header
    assert second.header["reason"] == "signal"
    t.resume()
    assert t.finish() == 0
    assert [r.header["seq"] for r in t.reports()] == ["1", "2", "3"]


def _holds_pidfd_at(pid, fd):
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[pidfd]"
    except OSError:
        return False


def test_a_standby_killed_alone_is_replaced(tmp_path):
    """(#64 item 7) The reporter's standby killed, then the reporter, then
    the program (-9): with nobody left, the final report was lost.  The
    reporter now starts a standby again when its own dies, which takes
    over when the reporter is killed in turn, and writes the death report."""
    prog = compile_program("blocked.c")
    t = Traced([prog], tmp_path)
    t.expect("blocked")
    t.signal_report(1)
    reporter = wait_for_reporter(t.pid)
    (first,) = children_of(reporter)
    kill_and_wait(first)
    wait_for(lambda: [c for c in children_of(reporter) if c != first and not gone(c)], "a new standby")
    (second,) = [c for c in children_of(reporter) if c != first and not gone(c)]
    wait_for(lambda: _holds_pidfd_at(second, 9), "the new standby holding the program")  # (waiting on its pipe)
    kill_and_wait(reporter)
    wait_for(lambda: reporters_of(t.pid) not in ([], [reporter]), "the new standby taking over")
    t.proc.kill()
    t.finish()
    last = memlog.read(wait_for_file(report_path(tmp_path, t.prog, t.pid, 2)))
    assert last.header["reason"] == "death" and last.header["live-bytes"] == "4242"


def test_a_program_cannot_make_its_reporter_a_standby(tmp_path):
    """The variable that tells a standby started anew from a reporter
    (MEMLEAK_STANDBY_PIPE) is the reporter's own: set in the program's
    environment, it is not passed on, and a value that is no pipe is not
    believed -- the program's reports come as ever, without a traceback."""
    prog = compile_program("blocked.c")
    t = Traced([prog], tmp_path, env=env_for(None, {"MEMLEAK_STANDBY_PIPE": "0"}))
    t.expect("blocked")
    assert by_site(t.signal_report(1))["site_blocked"] == (4242, 1)
    t.resume()
    assert t.finish() == 0
    assert "Traceback" not in t.stderr and "libmemleak" not in t.stderr, t.stderr
