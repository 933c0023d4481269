#!/usr/bin/env python3
"""What recording an event log costs (#32): each workload run bare, traced
(the default mode) and traced with --record, interleaved; the median wall
time of each, and the log's size per record (bytes per event).  The same
work captured by heaptrack and by memray, where they are installed, beside
it: their files' sizes, and per our record (the same allocations and
frees; heaptrack's and memray's own counts are not comparable units).

    python bench/record.py                       # every workload, 3 rounds
    python bench/record.py --rounds 5 --only sqlite3 python-sqlite

Workloads: cc1, sqlite3 and alloc-glibc (bench/callgrind.py's cut-down
ones), churn (bench/programs/churn.cc: 2 threads, 2 x 5,000,000 pairs),
threaded-server (tests/programs/slowleaks_server.cc: 3 worker threads
serving requests among std::map and std::string traffic) and
python-sqlite: the sqlite3 workload's SQL run by Python's sqlite3 module
with PYTHONMALLOC=malloc (every object through malloc), since memray
traces only Python programs -- `memray run --native`, native stacks as
ours.  Real servers under load (redis, memcached) are bench/servers.py's
libmemleak-record rows.

The hot path's instruction count with recording on is bench/callgrind.py's
job: MEMLEAK_CONFIG=record=all there."""

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from callgrind import SQLITE_ROWS, workloads  # noqa: E402
from libmemleak import preload_path  # noqa: E402
from libmemleak.analysis import replay as R  # noqa: E402
from libmemleak.files.events import EventLog  # noqa: E402
from run import gen_sqlite  # noqa: E402

CHURN_PAIRS = 5_000_000
PYTHON_SQLITE = """import sqlite3, sys
db = sqlite3.connect(":memory:")
db.executescript(open(sys.argv[1]).read())
"""


def all_workloads(out, only):
    """{name: (argv, stdin path, extra env, python script or None)}."""
    found = {name: (argv, stdin, {}, None) for name, (argv, stdin) in workloads(out, only).items()}
    if not only or "churn" in only:
        exe = os.path.join(out, "churn")
        subprocess.run(["g++", "-O2", os.path.join(HERE, "programs", "churn.cc"), "-o", exe, "-pthread"],
                       check=True)
        found["churn"] = ([exe, str(CHURN_PAIRS)], None, {}, None)
    if not only or "threaded-server" in only:
        exe = os.path.join(out, "slowleaks_server")
        programs = os.path.join(os.path.dirname(HERE), "tests", "programs")
        subprocess.run(["g++", "-O2", "-g", "-I", programs, os.path.join(programs, "slowleaks_server.cc"), "-o", exe,
                        "-pthread"], check=True)
        lines = os.path.join(out, "newlines.txt")  # its checkpoints: one line each
        with open(lines, "w") as f:
            f.write("\n" * 16)
        found["threaded-server"] = ([exe], lines, {}, None)
    if not only or "python-sqlite" in only:
        script = os.path.join(out, "python_sqlite.py")
        with open(script, "w") as f:
            f.write(PYTHON_SQLITE)
        sql = gen_sqlite(out, SQLITE_ROWS)
        found["python-sqlite"] = ([sys.executable, script, sql], None, {"PYTHONMALLOC": "malloc"}, script)
    return found


def run_once(argv, stdin_path, env, cwd):
    stdin = open(stdin_path) if stdin_path else subprocess.DEVNULL
    try:
        start = time.monotonic()
        subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                       cwd=cwd, check=True)
        return time.monotonic() - start
    finally:
        if stdin_path:
            stdin.close()


def finished_logs(d, timeout=60):
    """The event logs in d once their reporters have written their last
    counters (a STAT chunk: the reporter finishes as the program exits)."""
    deadline = time.monotonic() + timeout
    while True:
        logs = glob.glob(os.path.join(d, "*.events"))
        done = []
        for p in logs:
            with EventLog(p) as log:
                if log.stats:
                    done.append(p)
        if (logs and len(done) == len(logs)) or time.monotonic() > deadline:
            return logs


def log_size(d):
    """(records, bytes) of the event logs in d."""
    size = records = 0
    for p in finished_logs(d):
        size += os.path.getsize(p)
        with EventLog(p) as log:
            records += R.replay(log).totals["records"]
    return records, size


def capture_size(tool, argv, stdin_path, env, d):
    """The bytes of heaptrack's or memray's capture of the same run."""
    stdin = open(stdin_path) if stdin_path else subprocess.DEVNULL
    try:
        if tool == "heaptrack":
            cmd, pattern = ["heaptrack", "-o", os.path.join(d, "ht"), *argv], "ht*"
        else:  # memray: Python programs only
            cmd, pattern = [sys.executable, "-m", "memray", "run", "--native", "-q", "-o",
                            os.path.join(d, "memray.bin"), *argv[1:]], "memray.bin*"
        subprocess.run(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                       cwd=d, check=True)
    finally:
        if stdin_path:
            stdin.close()
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(d, pattern)))


def have_memray():
    return subprocess.run([sys.executable, "-c", "import memray"], capture_output=True).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=["cc1", "sqlite3", "alloc-glibc", "churn", "threaded-server",
                                                       "python-sqlite"])
    args = ap.parse_args()
    out = os.path.join(HERE, "out")
    os.makedirs(out, exist_ok=True)
    lib = preload_path()
    heaptrack = bool(shutil.which("heaptrack"))
    memray = have_memray()
    for tool, there in (("heaptrack", heaptrack), ("memray", memray)):
        if not there:
            print(f"note: {tool} not installed: its column is empty")
    only = args.only or ["cc1", "sqlite3", "alloc-glibc", "churn", "threaded-server", "python-sqlite"]
    rows = []
    for name, (argv, stdin_path, extra, script) in all_workloads(out, only).items():
        if not argv:
            continue
        times = {"bare": [], "traced": [], "record": []}
        with tempfile.TemporaryDirectory(prefix="mlk-record-") as d:
            base_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MEMLEAK_CONFIG")}
            base_env.update(extra)
            for _ in range(args.rounds):
                for mode in times:
                    for f in glob.glob(os.path.join(d, "*")):
                        os.unlink(f)
                    env = dict(base_env)
                    if mode != "bare":
                        env["LD_PRELOAD"] = lib
                        env["MEMLEAK_CONFIG"] = f"mtraceinit,dir={d}" + (",record=all,record_cap=64G"
                                                                        if mode == "record" else "")
                    times[mode].append(run_once(argv, stdin_path, env, d))
                    if mode == "record":
                        records, size = log_size(d)
            sizes = {}
            for tool, there in (("heaptrack", heaptrack), ("memray", memray and script)):
                if there:
                    with tempfile.TemporaryDirectory(prefix=f"mlk-{tool}-") as t:
                        sizes[tool] = capture_size(tool, argv, stdin_path, base_env, t)
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append((name, med, records, size, sizes))
        print(f"done {name}", flush=True)
    rule = "=============  ======  ======  ======  ===========  ===========  =======  ===================  ==================="
    print(f"\n{rule}\nworkload       bare s  traced  record  records      log bytes    B/event  heaptrack (B/event)  memray (B/event)\n{rule}")
    for name, med, records, size, sizes in rows:
        other = [f"{sizes[t]:>11,d} ({sizes[t] / max(records, 1):5.2f})" if t in sizes else f"{'-':>19s}"
                 for t in ("heaptrack", "memray")]
        print(f"{name:13s}  {med['bare']:6.2f}  {med['traced'] / med['bare']:5.2f}x  "
              f"{med['record'] / med['bare']:5.2f}x  {records:11,d}  {size:11,d}  {size / max(records, 1):7.2f}  "
              f"{other[0]}  {other[1]}")
    print(rule)


if __name__ == "__main__":
    main()
