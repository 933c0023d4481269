"""What the offline commands (report, check, export, replay, shell) read:
report files -- each report folded into the analysis as it is read --
or event logs, each read alone, with what the reader must know of a log
said first.  Bad input is one line on stderr and None: the command then
exits EXIT_BAD_INPUT."""

import re
import sys
import time

from libmemleak.analysis.stack_fold import StackFold
from libmemleak.commands import read_reports
from libmemleak.files.events import EventLog, EventsError, is_event_log


class BadTime(ValueError):
    """A time given on the command line that is not one of the log's."""


def parse_duration(text):
    """ns of '12.5', '12.5s', '300ms', '40us', '2m', '1h'."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|ms|s|m|h)?\s*", text)
    if not m:
        raise BadTime(f"not a time: {text!r} (seconds, or with ns, us, ms, s, m, h)")
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, None: 1e9, "m": 60e9, "h": 3600e9}[m.group(2)]
    return int(float(m.group(1)) * scale)


def parse_time(text, head, start_ns):
    """A moment on the log's clock (CLOCK_MONOTONIC ns): seconds from its
    start, or a clock time of the day it was recorded (local time)."""
    m = re.fullmatch(r"\s*(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d*)?))?\s*", text)
    if not m:
        return start_ns + parse_duration(text)
    mono, real = head.get("mono_ns"), head.get("realtime_ns")
    if not isinstance(mono, int) or not isinstance(real, int):
        raise BadTime("this log does not say its dates: give seconds from its start")
    start_real = real - (mono - start_ns)
    day = time.localtime(start_real / 1e9)
    seconds = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3) or 0)
    midnight = time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))
    return start_ns + int((midnight + seconds) * 1e9) - start_real


def reports_or_logs(command, paths, pid, make, progress=None):
    """(series, problems) of the reports in paths, or -- when paths are
    event logs, which are read alone -- make(log) of each; None after one
    line when nothing can be read (report's, check's and export's input)."""
    logs = [p for p in paths if is_event_log(p)]
    if not logs:
        # (analysed, not shown: each report's entries folded as read, none kept)
        return read_reports(command, paths, pid, progress, StackFold)
    if len(logs) < len(paths):
        print(f"libmemleak: {command}: an event log is read alone, not with reports", file=sys.stderr)
        return None
    return read_logs(command, logs, pid, make)


def read_logs(command, paths, pid, make):
    """(series, problems) of the event logs in paths (of process pid, if
    given), make(log) a Series of each; None after one line when one
    cannot be read or none is pid's (report's and export's bad input)."""
    series = []
    for path in paths:
        one = with_log(command, path, make)
        if one is None:
            return None
        for problem in one.problems:
            print(f"libmemleak: {command}: {problem}", file=sys.stderr)
        if pid is None or one.pid == pid:
            series.append(one)
    if not series:
        print(f"libmemleak: {command}: no event log of pid {pid} in {', '.join(paths)}", file=sys.stderr)
        return None
    return series, []


def with_log(command, path, use):
    """use(log) on the event log at `path`, what the reader must know of
    the log said first; None after one line when the file cannot be read,
    a time given is not one, or following its live blocks runs out of
    memory (replay's and export's bad input)."""
    try:
        with EventLog(path) as log:
            for note in log_notes(log):
                print(f"libmemleak: {command}: {note}", file=sys.stderr)
            return use(log)
    except (EventsError, BadTime) as e:
        print(f"libmemleak: {command}: {e}", file=sys.stderr)
    except MemoryError:
        print(f"libmemleak: {command}: out of memory following the live blocks", file=sys.stderr)
    return None


def log_notes(log):
    """What the reader must know of the log itself, one line each."""
    out = []
    if log.continued:
        out.append(f"read with {', '.join(log.continued)}: its reporter was replaced while the process ran")
    if log.truncated:
        out.append(f"{log.path} ends in the middle of a chunk (its writer was stopped): replayed up to there")
    stat = log.final_stat()
    missing = log.missing_pages()
    if missing and not (stat and stat.get("stopped")):
        out.append(f"{missing:,} pages of records are missing (a reporter was killed between taking them and "
                   "writing them): what they changed counts as live before the log")
    if not stat:
        out.append("the log has no final counters (its reporter was killed): what was live before "
                   "its first record is not known; amounts are changes since then")
    else:
        if stat.get("lost"):
            out.append(f"{stat['lost']:,} records were not logged (the pool stayed full, or a signal "
                       "handler freed inside a hook): amounts can be off by those")
        if stat.get("stopped"):
            out.append(f"the log stopped early ({stat['stopped']}): nothing after that is in it")
    if log.head.get("mode") == "last":
        out.append("a flight-recorder log (record=last): it holds the last part of the run only")
    return out


def progress_bar(out=sys.stderr, every=0.2, delay=0.5):
    """A one-line progress bar on a terminal, for long reads; nothing when
    stderr is not a terminal (a pipe, a CI log)."""
    if not out.isatty():
        return None
    state = {"next": time.monotonic() + delay, "shown": False}

    def show(done, total):
        now = time.monotonic()
        if done == total:
            if state["shown"]:
                out.write("\r\033[K")
                out.flush()
            return
        if now < state["next"]:
            return
        state["next"], state["shown"] = now + every, True
        width = 30
        filled = width * done // total
        out.write(f"\rreading reports [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        out.flush()
    return show
