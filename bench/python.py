#!/usr/bin/env python3
"""What tracing a Python program costs (#60): instructions counted by
callgrind, as bench/callgrind.py counts them, for bench/programs/pywork.py
(allocation-dense) or pycalls.py (call-dense) bare, under libmemleak with CPython's default allocator (pymalloc), in
sampling mode (the always-on one, bench/run.py's interval), and with
PYTHONMALLOC=malloc (every object through malloc, each with its
Python frames), and under memray --native (the tool that names Python
lines today) when it is installed for the interpreter measured.

    python bench/python.py                       # this interpreter
    python bench/python.py --python /tmp/venv/bin/python   # one with memray installed
    python bench/python.py --rounds 5 --lib /path/to/libmtrace.so
    python bench/python.py --workload pycalls

memray writes its capture file as it runs (its cost includes that);
libmemleak counts in shared memory and writes a report at exit.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from callgrind import measure  # noqa: E402
from libmemleak import preload_path  # noqa: E402
from run import SAMPLE_BYTES  # noqa: E402

WORKLOADS = {"pywork": os.path.join(HERE, "programs", "pywork.py"),    # allocation-dense: an object every ~150 instructions
             "pycalls": os.path.join(HERE, "programs", "pycalls.py")}  # call-dense: many calls, few objects


def has_memray(python):
    return subprocess.run([python, "-c", "import memray"], capture_output=True).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="the interpreter measured (default: this one)")
    ap.add_argument("--rounds", type=int, default=None, help="the workload's rounds (pywork 10, pycalls 3000)")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="pywork", help="which (default pywork)")
    ap.add_argument("--lib", default=None, help="the libmtrace.so to measure (default: this checkout's)")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("bench/python.py: valgrind is not installed (apt-get install valgrind)")
    # The interpreter itself, not a launcher (pyenv's shims are shell scripts).
    python = subprocess.run([args.python, "-c", "import sys; print(sys.executable)"], capture_output=True,
                            text=True, check=True).stdout.strip()
    real = os.path.realpath(python)
    lib = os.path.abspath(args.lib) if args.lib else preload_path()
    work = tempfile.mkdtemp(prefix="mlk-python-bench-")
    rounds = args.rounds or {"pywork": 10, "pycalls": 3000}[args.workload]
    script = [WORKLOADS[args.workload], str(rounds)]
    runs = [("bare", [real, *script], {}),
            ("libmemleak", [real, *script], {"LD_PRELOAD": lib, "MEMLEAK_CONFIG": f"mtraceinit,dir={work}"}),
            ("libmemleak sampled (always-on)", [real, *script],
             {"LD_PRELOAD": lib, "MEMLEAK_CONFIG": f"mtraceinit,sample={SAMPLE_BYTES},dir={work}"}),
            ("libmemleak PYTHONMALLOC=malloc", [real, *script],
             {"LD_PRELOAD": lib, "MEMLEAK_CONFIG": f"mtraceinit,dir={work}", "PYTHONMALLOC": "malloc"})]
    if has_memray(python):
        runs.append(("memray --native", [python, "-m", "memray", "run", "--native", "-q", "-f",
                                         "-o", os.path.join(work, "capture.bin"), *script], {}))
    else:
        print(f"memray: not installed for {python} (pip install memray there), not measured")
    base = None
    for name, argv, extra in runs:
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MEMLEAK_CONFIG", "PYTHONMALLOC")}
        # (str hashes fixed: with a random seed each run's dicts differ,
        # and so do its instructions -- by 1-3% between runs)
        env.update(extra, PYTHONHASHSEED="0")
        m = measure(argv, None, env)
        base = base or m["Ir"]
        print(f"{name:31} Ir {m['Ir'] / 1e6:9.1f}M  est {m['est'] / 1e6:9.1f}M  {m['Ir'] / base:6.2f}x bare (Ir)",
              flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
