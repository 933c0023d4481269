"""`libmemleak demo`: build the bundled leaking example, run it under the
tracer, take a report while it runs (SIGUSR1) and one at exit, show both."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from libmemleak import PACKAGE_DIR
from libmemleak.cli import traced_environment
from libmemleak.memlog import report_name

EXAMPLE = os.path.join(PACKAGE_DIR, "examples", "leaky_server.c")


def _wait_for(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.02)


def run_demo(keep_dir=None):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("libmemleak demo: needs a C compiler (cc or gcc) to build the example", file=sys.stderr)
        return 2
    work = keep_dir or tempfile.mkdtemp(prefix="libmemleak-demo-")
    os.makedirs(work, exist_ok=True)
    prog = os.path.join(work, "leaky_server")
    subprocess.run([cc, "-g", "-O0", EXAMPLE, "-o", prog], check=True)
    print(f"$ libmemleak run {prog}      # in {work}")
    p = subprocess.Popen([prog], cwd=work, env=traced_environment(), text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    print(p.stdout.readline().rstrip())
    print(f"$ kill -USR1 {p.pid}")
    p.send_signal(signal.SIGUSR1)
    first = os.path.join(work, report_name("leaky_server", p.pid, 1))
    _wait_for(first)
    p.communicate("go on\n", timeout=60)
    second = os.path.join(work, report_name("leaky_server", p.pid, 2))
    _wait_for(second)
    for path, what in ((first, "taken while it ran (SIGUSR1): everything live"),
                       (second, "at exit: the change since the first report")):
        print(f"\n==> {path}   [{what}]")
        with open(path) as f:
            print(f.read().rstrip())
    if not keep_dir:
        shutil.rmtree(work, ignore_errors=True)
    print("\nEach entry: change in live bytes and blocks of one call stack, innermost frame first.")
    print("Stacks that keep growing report after report are your leaks: here strdup in "
          "parse_request and cache_put.")
    return 0
