#!/usr/bin/env python3
"""Time to report (issue 3): a generated C program (-g -O2) with N distinct
allocation stacks; SIGUSR1 is sent the moment they exist (cold caches), then
again after another round through the same stacks.  Prints seconds from the
signal to the report on disk.  libc frames are symbolized too (with
libc6-dbg installed, through its build-id debug file).

    python bench/symbols.py [--stacks 5000] [--rounds 3]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stacks", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    out = os.path.join(HERE, "out", "symbols")
    os.makedirs(out, exist_ok=True)
    src, exe = os.path.join(out, "many.c"), os.path.join(out, "many")
    generate(src, args.stacks)
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
    print(f"{args.stacks} stacks ({entries} entries in the first report), -g -O2, {args.rounds} runs")
    print(f"  first report (cold):  median {statistics.median(firsts):.2f} s  {[round(x, 2) for x in firsts]}")
    print(f"  later report:         median {statistics.median(laters):.2f} s  {[round(x, 2) for x in laters]}")


if __name__ == "__main__":
    main()
