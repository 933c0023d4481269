#!/usr/bin/env python3
"""How `libmemleak report` scales (issue 20): generated report files of the
real format -- N reports of one process with S stacks each (C++-like frames
of ~80 characters, 6 a stack), or one report of many stacks -- read,
ranked and written as JSON and as text.  Prints wall and CPU time and the
peak RSS of the report process.

    python bench/report_scale.py                   # 100 x 10,000 and 1 x 100,000
    python bench/report_scale.py --reports 20 --stacks 5000 [--stack-table]
"""

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# ~80 characters a frame, 6 frames a stack: ~480 bytes an entry, so that
# 100,000 stacks make the 48 MB report of the issue.
FRAME = "\tns{a}::Pool<{b}>::grow(unsigned long)\t(/usr/bin/server)\t/src/pool{a}.h:{line}\n"


def write_reports(directory, reports, stacks, seed=1, table=False):
    """table: reports with a stack table (docs/memlog.md), as the reporter
    writes them: the first defines every stack, the entries name them."""
    rnd = random.Random(seed)
    frames = ["".join(FRAME.format(a=(s * 7 + k) % 97, b=s % 13, line=10 + k) for k in range(6))
              for s in range(stacks)]
    if table:
        ids, definitions = {}, []
        for s in range(stacks):
            numbers = []
            for line in frames[s].splitlines(keepends=True):
                if line not in ids:
                    ids[line] = len(ids) + 1
                    definitions.append(f"@f {ids[line]}\n{line}")
                numbers.append(str(ids[line]))
            definitions.append(f"@s {s + 1} 0 {' '.join(numbers)}\n")
            frames[s] = ""
    leaking = set(rnd.sample(range(stacks), max(1, stacks // 100)))
    size = 0
    for seq in range(1, reports + 1):
        path = os.path.join(directory, f"server-4242-{seq}.memlog")
        with open(path, "w") as f:
            f.write(f"# program: /usr/bin/server\n# pid: 4242\n# seq: {seq}\n"
                    f"# time: 2026-11-23T12:{seq // 60:02d}:{seq % 60:02d}.000+00:00\n"
                    f"# reason: signal\n" + ("# stack-table-from: 1\n" if table else ""))
            for s in range(stacks):
                if s in leaking:
                    b, k = 64, 1
                else:
                    k = rnd.choice((-2, -1, 1, 2))
                    b = 48 * k
                f.write(f"{b:+d} {k:+d} allocs=+{abs(k) * 3}{f' stack={s + 1}' if table else ''}\n{frames[s]}")
            if table:
                f.write("".join(definitions) if seq == 1 else "")
                f.write("@end\n")
        size += os.path.getsize(path)
    return size


def report_env():
    """The checkout's libmemleak where it is built in place (setup.py
    build_native), else the installed one (`pip install .`: the checkout's
    package has no reporter library of its own then)."""
    if os.path.exists(os.path.join(ROOT, "libmemleak", "libmlkreport.so")):
        return dict(os.environ, PYTHONPATH=ROOT)
    return dict(os.environ)


def measure(directory, args):
    """(wall seconds, CPU seconds, peak RSS in MiB, bytes of output) of one report."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    # (not from the checkout's directory: `python -m` would take its package from there)
    r = subprocess.run([sys.executable, "-m", "libmemleak", "report", directory, *args],
                       capture_output=True, env=report_env(), cwd=directory)
    took = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"report failed: {r.stderr.decode()[:300]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    # (ru_maxrss of children is the largest of any: the first report's is its own)
    return took, cpu, after.ru_maxrss / 1024, len(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reports", type=int)
    ap.add_argument("--stacks", type=int)
    ap.add_argument("--stack-table", action="store_true", help="reports with a stack table, as written now")
    a = ap.parse_args()
    cases = [(a.reports, a.stacks)] if a.reports else [(100, 10_000), (1, 100_000)]
    for reports, stacks in cases:
        work = tempfile.mkdtemp(prefix="report-scale-")
        try:
            size = write_reports(work, reports, stacks, table=a.stack_table)
            for args in (["--json"], []):
                took, cpu, peak, out = measure(work, args)
                print(f"{reports:4d} reports x {stacks:7,d} stacks ({size / 1e6:6.1f} MB): "
                      f"report {' '.join(args) or '(text)':7s} {took:6.2f} s ({cpu:5.2f} s CPU), "
                      f"peak RSS {peak:6.0f} MiB, output {out / 1e6:.1f} MB", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
