#!/usr/bin/env python3
"""Time to report (issue 3): a generated C program (-g -O2) with N distinct
allocation stacks; SIGUSR1 is sent the moment they exist (cold caches), then
again after another round through the same stacks.  Prints seconds from the
signal to the report on disk.  libc frames are symbolized too (with
libc6-dbg installed, through its build-id debug file).

    python bench/symbols.py [--stacks 5000] [--rounds 3]

With --sqlite DIR (a directory holding sqlite's amalgamation, sqlite3.c and
shell.c), the same two timings for a real large program instead: the sqlite3
shell built from it with -g -O2 (one 8 MB compile unit, ~2,700 functions)
running a SQL workload that touches many code paths (FTS5, JSON, window
functions, recursive CTEs, triggers, an index build, VACUUM).  Getting the
amalgamation without a download from sqlite.org, from Debian's source
package (needs a deb-src line and tclsh):

    apt-get source sqlite3 && mkdir bld && cd bld \
        && ../sqlite3-*/configure --disable-tcl && make sqlite3.c shell.c
    python bench/symbols.py --sqlite bld
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from libmemleak import preload_path  # noqa: E402


def generate(path, n):
    with open(path, "w") as f:
        f.write("#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
                "void *volatile sink;\n")
        for i in range(n):
            f.write(f"__attribute__((noinline)) void leak{i}(void) {{ sink = malloc({16 + i % 64}); }}\n")
        f.write("static void round_(void) {\n")
        for i in range(n):
            f.write(f"  leak{i}();\n")
        # One call site for both rounds: the second round goes through the same stacks.
        f.write("}\nint main(void) { char c;\n"
                "  for (int r = 0; r < 2; r++) {\n"
                "    round_(); write(1, \"r\\n\", 2); if (read(0, &c, 1) != 1) return 1;\n"
                "  }\n  return 0; }\n")


def wait_for(path, start, timeout=120):
    while not os.path.exists(path):
        if time.monotonic() - start > timeout:
            raise TimeoutError(path)
        time.sleep(0.002)
    return time.monotonic() - start


SQL_ROUND = """
DROP TABLE IF EXISTS t; DROP TABLE IF EXISTS docs; DROP TABLE IF EXISTS log; DROP VIEW IF EXISTS v;
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INT, doc TEXT);
CREATE TABLE log(id INTEGER PRIMARY KEY, what TEXT);
CREATE TRIGGER tr AFTER INSERT ON t WHEN new.id % 1000 = 0 BEGIN
  INSERT INTO log(what) VALUES ('row ' || new.id); END;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
  INSERT INTO t SELECT x, hex(randomblob(12)), x % 97,
    json_object('k', x, 'tags', json_array(x % 7, x % 11, 'w' || x)) FROM c;
CREATE INDEX t_name ON t(name);
CREATE VIEW v AS SELECT grp, count(*) n, sum(length(name)) l FROM t GROUP BY grp;
SELECT count(*), max(l) FROM v;
SELECT grp, rank() OVER (PARTITION BY grp % 5 ORDER BY n DESC) FROM v LIMIT 3;
SELECT sum(json_extract(doc, '$.k')), count(DISTINCT json_extract(doc, '$.tags[1]')) FROM t;
SELECT count(*) FROM t a JOIN t b ON a.grp = b.grp AND a.id < b.id AND b.id < a.id + 5;
CREATE VIRTUAL TABLE docs USING fts5(body);
INSERT INTO docs SELECT 'alpha ' || name || ' beta ' || grp || ' gamma' FROM t WHERE id % 4 = 0;
SELECT count(*) FROM docs WHERE docs MATCH 'alpha AND gamma';
SELECT printf('%.3f', avg(length(doc))) FROM t;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
.print ready
"""


def sqlite_timings(src_dir, rounds, out):
    """First and later report times for the sqlite3 shell built -g -O2."""
    exe = os.path.join(out, "sqlite3-g")
    if not os.path.exists(exe):
        subprocess.run(["gcc", "-g", "-O2", "-DSQLITE_ENABLE_FTS5", "-DSQLITE_THREADSAFE=0",
                        os.path.join(src_dir, "sqlite3.c"), os.path.join(src_dir, "shell.c"),
                        "-o", exe, "-lm"], check=True)
    env = dict(os.environ, LD_PRELOAD=preload_path(), MEMLEAK_PYTHON=sys.executable)
    env.pop("MEMLEAK_ROOT_PID", None)
    firsts, laters, entries = [], [], 0
    for _ in range(rounds):
        for name in os.listdir(out):
            if name.endswith(".memlog"):
                os.unlink(os.path.join(out, name))
        p = subprocess.Popen([exe, ":memory:"], cwd=out, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

        def timed_report(seq):
            p.stdin.write(SQL_ROUND.encode())
            p.stdin.flush()
            while p.stdout.readline() != b"ready\n":
                pass
            t0 = time.monotonic()
            p.send_signal(signal.SIGUSR1)
            return wait_for(os.path.join(out, f"sqlite3-g-{p.pid}-{seq}.memlog"), t0)

        firsts.append(timed_report(1))
        laters.append(timed_report(2))
        p.stdin.close()
        p.wait()
        with open(os.path.join(out, f"sqlite3-g-{p.pid}-1.memlog")) as f:
            text = f.read()
        entries = text.count("\n+") + text.count("\n-")
    return firsts, laters, entries


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stacks", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sqlite", metavar="DIR", help="time the sqlite3 shell built from DIR instead")
    ap.add_argument("--idle", type=float, default=0.0, metavar="SECONDS",
                    help="wait this long before each signal: the reporter symbolizes new "
                         "stacks while the program runs, as in a long-running server")
    args = ap.parse_args()
    if args.sqlite:
        out = os.path.join(HERE, "out", "symbols-sqlite")
        os.makedirs(out, exist_ok=True)
        firsts, laters, entries = sqlite_timings(args.sqlite, args.rounds, out)
        print(f"sqlite3 shell -g -O2 ({entries} entries in the first report), {args.rounds} runs")
        print(f"  first report (cold):  median {statistics.median(firsts):.2f} s  {[round(x, 2) for x in firsts]}")
        print(f"  later report:         median {statistics.median(laters):.2f} s  {[round(x, 2) for x in laters]}")
        return
    out = os.path.join(HERE, "out", "symbols")
    os.makedirs(out, exist_ok=True)
    src, exe = os.path.join(out, "many.c"), os.path.join(out, "many")
    generate(src + ".new", args.stacks)
    same = os.path.exists(src) and open(src).read() == open(src + ".new").read()
    os.replace(src + ".new", src)
    if not (same and os.path.exists(exe)):  # 100k functions take minutes to compile
        subprocess.run(["gcc", "-g", "-O2", src, "-o", exe], check=True)
    env = dict(os.environ, LD_PRELOAD=preload_path(), MEMLEAK_PYTHON=sys.executable)
    env.pop("MEMLEAK_ROOT_PID", None)
    firsts, laters = [], []
    for _ in range(args.rounds):
        for name in os.listdir(out):
            if name.endswith(".memlog"):
                os.unlink(os.path.join(out, name))
        p = subprocess.Popen([exe], cwd=out, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

        def timed_report(seq):
            """Wait for the program's round, signal it, time until report `seq`."""
            p.stdout.readline()
            time.sleep(args.idle)
            t0 = time.monotonic()
            p.send_signal(signal.SIGUSR1)
            elapsed = wait_for(os.path.join(out, f"many-{p.pid}-{seq}.memlog"), t0)
            p.stdin.write(b"x")
            p.stdin.flush()
            return elapsed

        firsts.append(timed_report(1))
        laters.append(timed_report(2))
        p.stdin.close()
        p.wait()
        text = open(os.path.join(out, f"many-{p.pid}-1.memlog")).read()
        entries = text.count("\n+")
    idle = f", {args.idle:g} s idle before each signal" if args.idle else ""
    print(f"{args.stacks} stacks ({entries} entries in the first report), -g -O2, "
          f"{args.rounds} runs{idle}")
    print(f"  first report (cold):  median {statistics.median(firsts):.2f} s  {[round(x, 2) for x in firsts]}")
    print(f"  later report:         median {statistics.median(laters):.2f} s  {[round(x, 2) for x in laters]}")


if __name__ == "__main__":
    main()
