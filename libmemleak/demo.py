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


def fail(message, code):
    print(f"libmemleak: demo: {message}", file=sys.stderr)
    return code


def run_demo(keep_dir=None):
    """Exit status: 0, 2 for a bad --keep, 1 when the demo itself could not
    be built or run (no compiler, a failed build, no report in time)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return fail("needs a C compiler (cc or gcc) to build the example", 1)
    if keep_dir:
        if os.path.exists(keep_dir) and not os.path.isdir(keep_dir):
            return fail(f"--keep {keep_dir}: not a directory", 2)
        try:
            os.makedirs(keep_dir, exist_ok=True)
        except OSError as e:
            return fail(f"--keep {keep_dir}: {e.strerror}", 2)
        if not os.access(keep_dir, os.W_OK | os.X_OK):
            return fail(f"--keep {keep_dir}: not a directory we can write in", 2)
    work = keep_dir or tempfile.mkdtemp(prefix="libmemleak-demo-")
    try:
        return _demo(cc, work, keep_dir)
    except subprocess.CalledProcessError:
        return fail(f"building the example with {cc} failed (its errors are above)", 1)
    except subprocess.TimeoutExpired:
        return fail("the traced example did not finish within 60 s", 1)
    except TimeoutError as e:
        return fail(f"no report appeared at {e} within 30 s", 1)
    except OSError as e:
        return fail(f"{e.filename or work}: {e.strerror}", 1)
    finally:
        if not keep_dir:
            shutil.rmtree(work, ignore_errors=True)


def _demo(cc, work, keep_dir):
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
    print("\nEach entry: change in live bytes and blocks of one call stack, innermost frame first.")
    print("Stacks that keep growing report after report are your leaks: here strdup in "
          "parse_request and cache_put.")
    return 0
