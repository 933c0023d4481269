#!/usr/bin/env python3
"""What recording an event log costs (#32): each workload run bare, traced
(the default mode) and traced with --record, interleaved; the median wall
time of each, and the log's size per record (bytes per event).  heaptrack's
capture of the same work, where heaptrack is installed, beside it.

    python bench/record.py                       # cc1, sqlite3, alloc-glibc (threads), 3 rounds
    python bench/record.py --rounds 5 --only sqlite3

The hot path's instruction count with recording on is bench/callgrind.py's
job: MEMLEAK_CONFIG=record=all there (--config)."""

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

from callgrind import workloads  # noqa: E402
from libmemleak import preload_path  # noqa: E402
from libmemleak.analysis import replay as R  # noqa: E402
from libmemleak.files.events import EventLog  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", default=["cc1", "sqlite3", "alloc-glibc"])
    args = ap.parse_args()
    out = os.path.join(HERE, "out")
    os.makedirs(out, exist_ok=True)
    lib = preload_path()
    heaptrack = shutil.which("heaptrack")
    print(f"{'workload':12s} {'bare s':>8s} {'traced':>8s} {'record':>8s} {'records':>12s} "
          f"{'log bytes':>12s} {'B/event':>8s} {'heaptrack bytes':>16s}")
    for name, (argv, stdin_path) in workloads(out, args.only).items():
        if not argv:
            continue
        times = {"bare": [], "traced": [], "record": []}
        with tempfile.TemporaryDirectory(prefix="mlk-record-") as d:
            for _ in range(args.rounds):
                for mode in times:
                    for f in glob.glob(os.path.join(d, "*")):
                        os.unlink(f)
                    env = dict(os.environ)
                    if mode != "bare":
                        env["LD_PRELOAD"] = lib
                        env["MEMLEAK_CONFIG"] = f"mtraceinit,dir={d}" + (",record=all,record_cap=64G"
                                                                        if mode == "record" else "")
                    times[mode].append(run_once(argv, stdin_path, env, d))
                    if mode == "record":
                        time.sleep(0.5)  # the reporter finishes the log as the program exits
                        logs = glob.glob(os.path.join(d, "*.events"))
                        size = sum(os.path.getsize(p) for p in logs)
                        records = 0
                        for p in logs:
                            with EventLog(p) as log:
                                records += R.replay(log).totals["records"]
            hsize = ""
            if heaptrack:
                subprocess.run([heaptrack, "-o", os.path.join(d, "ht"), *argv], stdin=open(stdin_path)
                               if stdin_path else subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, cwd=d)
                hsize = str(sum(os.path.getsize(p) for p in glob.glob(os.path.join(d, "ht*"))))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{name:12s} {med['bare']:8.2f} {med['traced'] / med['bare']:7.2f}x "
              f"{med['record'] / med['bare']:7.2f}x {records:12,d} {size:12,d} "
              f"{size / max(records, 1):8.2f} {hsize:>16s}")


if __name__ == "__main__":
    main()
