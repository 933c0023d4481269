#!/usr/bin/env python3
"""What attaching costs (issue "Live"): the same work done by a program
started bare, started under the tracer (LD_PRELOAD, `libmemleak run`),
attached to while it runs (`libmemleak attach`), and attached to then
detached -- interleaved round by round -- and how long attach and detach
keep the borrowed thread.

    python bench/attach.py                  # 3 rounds
    python bench/attach.py --rounds 5 --only sqlite3

Workloads: sqlite3 fed SQL on a pipe (an in-memory table of 400,000 rows
built, indexed, queried, half deleted: timed from the first statement to
the answer of the last); redis-server (Debian's, jemalloc) under
redis-benchmark (SET and GET of 1 KB values, 50 clients: requests/s).
A missing program is skipped with a note."""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from libmemleak.live.attach import attach, detach  # noqa: E402
from libmemleak.tracing import traced_environment  # noqa: E402

MODES = ("bare", "preload", "attached", "detached")
SQL_WORK = ("create table w(a integer, b text);\n"
            "insert into w select value, printf('%050d', value) from generate_series(1, 400000);\n"
            "create index wi on w(b);\n"
            "select count(*), sum(length(b)) from w where a % 7 = 3;\n"
            "delete from w where a % 2 = 0;\n"
            "select 'done';\n")


def clean_env():
    env = dict(os.environ)
    for name in ("LD_PRELOAD", "MEMLEAK_CONFIG", "MEMLEAK_ROOT_PID", "MEMLEAK_KEEPER"):
        env.pop(name, None)
    return env


def start(mode, argv, work, **kw):
    env = traced_environment(clean_env()) if mode == "preload" else clean_env()
    if mode == "preload":
        env["MEMLEAK_CONFIG"] = f"mtraceinit,dir={work},signal=none"
    p = subprocess.Popen(argv, env=env, cwd=work, **kw)
    stops = {}
    if mode in ("attached", "detached"):
        time.sleep(0.3)  # let it start, as a user attaches to a running program
        stops["attach"] = attach(p.pid, f"dir={work},signal=none")[1]
        if mode == "detached":
            stops["detach"] = detach(p.pid)[1]
    return p, stops


def sqlite3_round(mode, work):
    p, stops = start(mode, ["sqlite3", ":memory:"], work, stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True)
    t0 = time.perf_counter()
    p.stdin.write(SQL_WORK)
    p.stdin.flush()
    while p.stdout.readline().strip() != "done":
        pass
    elapsed = time.perf_counter() - t0
    p.communicate(".quit\n", timeout=120)
    return elapsed, stops


def redis_round(mode, work):
    port = 26379 + os.getpid() % 1000
    p, stops = start(mode, ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                     work, stdout=subprocess.DEVNULL)
    for _ in range(200):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG":
            break
        time.sleep(0.05)
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-q", "-n", "200000", "-c", "50",
                          "-d", "1000", "-t", "set,get"], capture_output=True, text=True).stdout
    rates = [float(x) for x in re.findall(r"([\d.]+) requests per second", out)]
    p.terminate()
    p.wait(timeout=60)
    return statistics.mean(rates) if rates else float("nan"), stops


WORKLOADS = {
    "sqlite3": (sqlite3_round, ("sqlite3",), "s", False),
    "redis": (redis_round, ("redis-server", "redis-benchmark", "redis-cli"), "req/s", True),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=sorted(WORKLOADS))
    args = ap.parse_args()
    print(f"# python bench/attach.py --rounds {args.rounds}   ({time.strftime('%Y-%m-%d %H:%M')}, "
          f"{os.cpu_count()} cores)")
    print(f"{'workload':10} {'mode':9} {'median':>12} {'vs bare':>8}  stops (ms, median)")
    for name, (run_round, needs, unit, higher_is_better) in WORKLOADS.items():
        if args.only and name != args.only:
            continue
        missing = [n for n in needs if not shutil.which(n)]
        if missing:
            print(f"{name:10} skipped: {', '.join(missing)} not installed")
            continue
        values = {m: [] for m in MODES}
        stops = {"attach": [], "detach": []}
        with tempfile.TemporaryDirectory() as work:
            for _ in range(args.rounds):
                for mode in MODES:
                    value, kept = run_round(mode, work)
                    values[mode].append(value)
                    for k, v in kept.items():
                        stops[k].append(v)
        bare = statistics.median(values["bare"])
        for mode in MODES:
            med = statistics.median(values[mode])
            ratio = (bare / med if higher_is_better else med / bare) if bare else float("nan")
            note = ""
            if mode == "attached" and stops["attach"]:
                note = f"attach {statistics.median(stops['attach']):.1f}"
            if mode == "detached" and stops["detach"]:
                note = f"detach {statistics.median(stops['detach']):.1f}"
            print(f"{name:10} {mode:9} {med:>10.3f} {unit:5} {ratio:6.2f}x  {note}")
    print("(ratio: time or slowdown against bare; 1.00x = as fast as bare)")


if __name__ == "__main__":
    main()
