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
from libmemleak.tracing import traced_environment
from libmemleak.files.report_names import report_name

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


BATCHES = 4


def _demo(cc, work, keep_dir):
    prog = os.path.join(work, "leaky_server")
    subprocess.run([cc, "-g", "-O0", EXAMPLE, "-o", prog], check=True)
    print(f"$ libmemleak run {prog} {BATCHES}      # in {work}")
    p = subprocess.Popen([prog, str(BATCHES)], cwd=work, env=traced_environment(), text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for batch in range(1, BATCHES + 1):
        print(p.stdout.readline().rstrip())
        print(f"$ kill -USR1 {p.pid}")
        p.send_signal(signal.SIGUSR1)
        _wait_for(os.path.join(work, report_name("leaky_server", p.pid, batch)))
        p.stdin.write("go on\n")
        p.stdin.flush()
    p.communicate(timeout=60)
    final = os.path.join(work, report_name("leaky_server", p.pid, BATCHES + 1))
    _wait_for(final)
    first = os.path.join(work, report_name("leaky_server", p.pid, 1))
    print(f"\n==> {first}   [the first report, taken while it ran: everything live; its start]")
    with open(first) as f:
        print("\n".join(f.read().rstrip().splitlines()[:30]))
    print("    ...")
    print(f"\nEach entry: the change in live bytes and blocks of one call stack since the previous "
          f"report,\ninnermost frame first.  {BATCHES + 1} reports were written; line them up:")
    print(f"\n$ libmemleak report {work}")
    sys.stdout.flush()
    # In the demo's directory: `-m` looks in the working directory first,
    # and a source checkout there is not the installed package.
    subprocess.run([sys.executable, "-m", "libmemleak", "report", "--top", "3", work], cwd=work,
                   env=dict(os.environ, PYTHONPATH=os.path.dirname(PACKAGE_DIR)))
    print("The two suspects are the demo's two leaks: the strdup in parse_request and cache_put.")
    return 0
