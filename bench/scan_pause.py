#!/usr/bin/env python3
"""How long a reachability scan stops a program (#21): the pause from the
first thread stopped to the last resumed, as the report header says it
(`scan-pause-ms`), on programs with small and big live heaps.

    python bench/scan_pause.py              # the table of docs/performance.rst
    python bench/scan_pause.py --gb 1 --scans 5

Programs: bench/programs/bigheap.c at 64 MB, 256 MB and --gb GB of live
heap in 1,024 linked lists with 16 threads; python3 holding a dict of a
million entries; sqlite3 with a 100,000-row in-memory table.  Each is
scanned --scans times while it waits; the median pause is printed with
the heap it had (live-bytes of the scan report) and the target: 50 ms
plus 1 s per GB of live heap."""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from libmemleak.files import memlog  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))


def cli(*args):
    return [sys.executable, "-m", "libmemleak", *map(str, args)]


def build(work):
    out = os.path.join(work, "bigheap")
    subprocess.check_call(["gcc", "-O2", "-o", out, os.path.join(HERE, "programs", "bigheap.c"),
                           "-lpthread"])
    return out


def scan_pauses(argv, ready, stdin_after, work, scans):
    """Start argv under libmemleak, wait for the line `ready` on stdout,
    scan it `scans` times: (pause ms of each, live bytes)."""
    p = subprocess.Popen(cli("run", "-q", *argv), cwd=work, env=ENV, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        while True:
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"{argv[0]} ended before it was ready")
            if line.strip() == ready:
                break
        pauses, live = [], 0
        for _ in range(scans):
            out = subprocess.run(cli("scan", "--top", "0", p.pid), env=ENV, capture_output=True,
                                 text=True, timeout=600)
            if out.returncode != 0:
                raise SystemExit(f"scan failed: {out.stderr.strip()}")
            header = memlog.read(out.stdout.splitlines()[0]).header
            pauses.append(float(header["scan-pause-ms"]))
            live = int(header["live-bytes"])
        return pauses, live
    finally:
        try:
            p.communicate(stdin_after, timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


PY_DICT = ("import sys\nd = {i: str(i) * 3 for i in range(1_000_000)}\nprint('ready', flush=True)\n"
           "sys.stdin.readline()\n")
SQLITE = ("create table t(a integer primary key, b text);\n"
          "with recursive c(x) as (select 1 union all select x + 1 from c where x < 100000)\n"
          "insert into t select x, printf('%0100d', x) from c;\n"
          "select 'ready';\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="the biggest heap, GB (default 1)")
    ap.add_argument("--scans", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="scan-pause-")
    big = build(work)
    cases = [(f"bigheap {mb} MB, 16 threads", [big, mb, 16], "ready", "\n")
             for mb in (64, 256, int(args.gb * 1024))]
    cases.append(("python3, a dict of 1M entries", [sys.executable, "-c", PY_DICT], "ready", "\n"))
    if shutil.which("sqlite3"):
        cases.append(("sqlite3, 100,000 rows in memory", ["sqlite3"], None, None))
    cases.append(("cc1 at its exit (gcc -O2 -c big.c)", ["cc1"], None, None))
    print(f"{'program':34} {'live heap':>10} {'pause (median)':>15} {'target':>8}")
    for name, argv, ready, after in cases:
        if argv[0] == "sqlite3":
            pauses, live = scan_sqlite(work, args.scans)
        elif argv[0] == "cc1":
            pauses, live = scan_cc1_at_exit(work, args.scans)
        else:
            pauses, live = scan_pauses(argv, ready, after, work, args.scans)
        target = 50 + 1000 * live / (1 << 30)
        print(f"{name:34} {live / (1 << 20):8.1f} MB {statistics.median(pauses):12.1f} ms "
              f"{target:6.0f} ms", flush=True)
    shutil.rmtree(work, ignore_errors=True)


def scan_sqlite(work, scans):
    """sqlite3 reads its commands from stdin: they build the table, print
    ready, and the shell then waits for more input."""
    p = subprocess.Popen(cli("run", "-q", "sqlite3", ":memory:"), cwd=work, env=ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    p.stdin.write(SQLITE)
    p.stdin.flush()
    while p.stdout.readline().strip() != "ready":
        pass
    pauses, live = [], 0
    for _ in range(scans):
        out = subprocess.run(cli("scan", "--top", "0", p.pid), env=ENV, capture_output=True,
                             text=True, timeout=600)
        header = memlog.read(out.stdout.splitlines()[0]).header
        pauses.append(float(header["scan-pause-ms"]))
        live = int(header["live-bytes"])
    p.communicate(".quit\n", timeout=60)
    return pauses, live


def scan_cc1_at_exit(work, runs):
    """cc1 does not wait to be asked: its exit report carries the scan
    (run --scan-at-exit; the driver passes the configuration on to cc1)."""
    sys.path.insert(0, HERE)
    from run import gen_c
    src = gen_c(work)
    pauses, live = [], 0
    for i in range(runs):
        out = os.path.join(work, f"cc1-{i}")
        os.makedirs(out)
        subprocess.run(cli("run", "-q", "--scan-at-exit", "--config", f"dir={out}", "gcc", "-O2", "-c",
                           src, "-o", os.path.join(out, "big.o")), check=True, env=ENV, cwd=out)
        reports = [n for n in os.listdir(out) if n.startswith("cc1-") and n.endswith(".memlog")]
        final = max(reports, key=lambda n: int(n.rsplit("-", 1)[1].split(".")[0]))
        header = memlog.read(os.path.join(out, final)).header
        pauses.append(float(header["scan-pause-ms"]))
        live = int(header["live-bytes"])
    return pauses, live


if __name__ == "__main__":
    main()
