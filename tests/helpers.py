"""Shared test machinery: compile real programs, run them under the real
preload library, stop them at checkpoints, and read their real reports."""

import contextlib
import glob
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

from libmemleak import PACKAGE_DIR, preload_path
from libmemleak.files import memlog, report_names
from libmemleak.tracing import traced_environment

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")
BENCH_PROGRAMS = os.path.join(os.path.dirname(HERE), "bench", "programs")  # the tests run some of them too
BUILD = os.environ.get("MEMLEAK_TEST_BUILD", "/tmp/libmemleak-test-build")
REPORT_TIMEOUT = 20.0


def compile_program(source, *flags, name=None):
    """Compile tests/programs/SOURCE, or SOURCE when it is an absolute path
    (cached by content and flags)."""
    path = os.path.join(PROGRAMS, source)
    with open(path, "rb") as f:
        digest = hashlib.sha1(f.read() + repr(("libraries last", flags)).encode()).hexdigest()[:12]
    include_dirs = [PROGRAMS] + [f[2:] for flag in flags for f in flag.split() if f.startswith("-I")]
    for directory in include_dirs:  # what the programs include (memleak.h, its valgrind headers)
        for header in sorted(glob.glob(os.path.join(directory, "**", "*.h"), recursive=True)):
            with open(header, "rb") as f:
                digest += hashlib.sha1(f.read()).hexdigest()[:4]
    base = name or os.path.splitext(source)[0]
    out_dir = os.path.join(BUILD, digest)
    out = os.path.join(out_dir, base)
    if not os.path.exists(out):
        os.makedirs(out_dir, exist_ok=True)
        cc = "g++" if source.endswith(".cc") else "gcc"
        std = [] if source.endswith(".cc") else ["-std=gnu11"]
        # Libraries after the source: the linker takes a library only for
        # what the objects before it need.
        libs = [f for f in flags if f.startswith(("-l", "-Wl,--whole-archive", "-Wl,--no-whole-archive"))
                or f.endswith(".a")]
        options = [f for f in flags if f not in libs]
        # (Under a name of this process's own, then renamed: test sessions
        # run at once share the cache, and one renamed another's .tmp away.)
        building = f"{out}.building-{os.getpid()}"
        subprocess.run([cc, *std, "-g", "-O0", *options, path, "-o", building, *libs, "-lpthread"],
                       check=True)
        os.replace(building, out)
    return out


# The libmemleak command as a user runs it: this checkout's package, and
# none of the tracer's variables the test process may carry.
CLI_ENV = dict(os.environ, PYTHONPATH=os.path.dirname(PACKAGE_DIR))
for _name in ("LD_PRELOAD", "MEMLEAK_CONFIG", "MEMLEAK_ROOT_PID", "MEMLEAK_KEEPER"):
    CLI_ENV.pop(_name, None)
# A program's environment without the tracer, nor this checkout on its path.
BARE_ENV = {k: v for k, v in CLI_ENV.items() if k != "PYTHONPATH"}


def cli_argv(*args):
    return [sys.executable, "-m", "libmemleak", *map(str, args)]


def cli(*args, cwd=None, env=None, timeout=120):
    """`libmemleak ARGS`, run to its end: a CompletedProcess with text output."""
    return subprocess.run(cli_argv(*args), cwd=cwd, env=env or CLI_ENV, capture_output=True,
                          text=True, timeout=timeout)


def env_for(config=None, extra=None):
    env = traced_environment()
    env.pop("MEMLEAK_CONFIG", None)
    if config is not None:
        env["MEMLEAK_CONFIG"] = config
    env.update(extra or {})
    return env


def report_path(directory, prog, pid, seq):
    return os.path.join(directory, report_names.report_name(prog, pid, seq))


def wait_for(predicate, what, timeout=60):
    """Polls predicate() until it is true; fails naming `what` after
    `timeout` seconds (generous: the suite runs on loaded machines)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen in {timeout}s: {what}")
        time.sleep(0.01)


def gone(pid):
    """pid has ended (exited, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def kill_and_wait(pid, sig=signal.SIGKILL):
    """Sends sig to pid and waits until it has ended."""
    os.kill(pid, sig)
    wait_for(lambda: gone(pid), f"pid {pid} ended")


def wait_for_file(path, timeout=REPORT_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"no report {path} after {timeout}s")
        time.sleep(0.01)
    return path


def child_pids_with_reports(directory, prog, parent_pid, timeout=60, expected=1):
    """Pids of prog's processes other than parent_pid that wrote reports
    (a forked child writes its last one after it has gone: wait for
    `expected` of them, or the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        names = [n for n in os.listdir(directory) if n.startswith(f"{prog}-") and n.endswith(".memlog")]
        pids = {int(n.split("-")[-2]) for n in names} - {parent_pid}
        if len(pids) >= expected or time.monotonic() > deadline:
            return pids
        time.sleep(0.02)


def reports_of(directory, prog, pid):
    """All reports of one process, labelled ones (prog-PID-SEQ-LABEL) too,
    in seq order (checks seq has no gaps)."""
    prefix = f"{prog}-{pid}-"
    names = [n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(".memlog")]
    by_seq = sorted((int(n[len(prefix):-len(".memlog")].split("-")[0]), n) for n in names)
    assert [seq for seq, _ in by_seq] == list(range(1, len(names) + 1)), f"gap in report numbers: {sorted(names)}"
    return [memlog.read(os.path.join(directory, n)) for _, n in by_seq]


def only_pid(directory, prog):
    """The pid of the one process of `prog` with reports in `directory`."""
    pids = {int(n[len(prog) + 1:].split("-")[0]) for n in os.listdir(directory)
            if n.startswith(prog + "-") and n.endswith(".memlog")}
    assert len(pids) == 1, pids
    return pids.pop()


def memleak_include():
    """The -I flag `libmemleak cflags` prints (memleak.h's directory)."""
    flags = cli("cflags")
    assert flags.returncode == 0, flags.stderr
    include = flags.stdout.strip()
    assert include.startswith("-I") and os.path.exists(os.path.join(include[2:], "memleak.h")), include
    return include


def wait_for_reports(directory, prog, pid, count, timeout=REPORT_TIMEOUT):
    """The reports of one process once report `count` is there (a
    descendant's last one is written after it has gone).  Waits for that
    file rather than polling reports_of, which would see a report appear
    between its two looks as a gap."""
    wait_for_file(report_path(directory, prog, pid, count), timeout)
    return reports_of(directory, prog, pid)


def by_site(report):
    """first-frame function -> (bytes, blocks), summed over the report."""
    sites = {}
    for e in report.entries:
        name = e.frames[0].function if e.frames and e.frames[0].function else "?"
        b, k = sites.get(name, (0, 0))
        sites[name] = (b + e.bytes, k + (e.blocks or 0))
    return sites


def by_stack(report):
    """frames tuple -> (bytes, blocks), to add reports together exactly."""
    out = {}
    for e in report.entries:
        key = tuple((f.function, f.module, f.offset) for f in e.frames)
        b, k = out.get(key, (0, 0))
        out[key] = (b + e.bytes, k + (e.blocks or 0))
    return out


def add_reports(reports):
    total = {}
    for r in reports:
        for key, (b, k) in by_stack(r).items():
            tb, tk = total.get(key, (0, 0))
            total[key] = (tb + b, tk + k)
    return {key: v for key, v in total.items() if v != (0, 0)}


class Traced:
    """A program running under the tracer, driven through its checkpoints."""

    def __init__(self, argv, cwd, config=None, env=None, stdin=True):
        self.cwd = str(cwd)
        self.prog = os.path.basename(argv[0])
        self.proc = subprocess.Popen(argv, cwd=self.cwd, env=env_for(config, env),
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pid = self.proc.pid

    def expect(self, name):
        line = self.proc.stdout.readline().decode()
        assert line == f"checkpoint {name}\n", f"expected checkpoint {name}, got {line!r}"

    def resume(self):
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()

    def signal_report(self, seq, sig=signal.SIGUSR1, timeout=REPORT_TIMEOUT):
        """Send the report signal and wait for report `seq`."""
        self.proc.send_signal(sig)
        return memlog.read(wait_for_file(report_path(self.cwd, self.prog, self.pid, seq), timeout))

    def reports_at(self, *checkpoints):
        """At each checkpoint in turn: take a signal report, then let the
        program go on.  Returns those reports (seq 1, 2, ...)."""
        taken = []
        for seq, name in enumerate(checkpoints, 1):
            self.expect(name)
            taken.append(self.signal_report(seq))
            self.resume()
        return taken

    def finish(self, timeout=60):
        out, err = self.proc.communicate(timeout=timeout)
        self.stdout, self.stderr = out.decode(), err.decode()
        return self.proc.returncode

    def reports(self):
        return reports_of(self.cwd, self.prog, self.pid)


def lib_exists():
    return os.path.exists(preload_path())


def reporters_of(traced_pid):
    """Pids of reporter processes watching `traced_pid` (their fd 4 is a
    pidfd of it: /proc/R/fdinfo/4 says 'Pid: N')."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"_reporter_main.py" not in f.read():
                    continue
            with open(f"/proc/{entry}/fdinfo/4") as f:
                if f"Pid:\t{traced_pid}\n" in f.read():
                    out.append(int(entry))
        except OSError:
            continue
    return out


@contextlib.contextmanager
def segment_header(pid):
    """The traced process's segment header (cffi, writable: tests make the
    states a killed reporter leaves), for the block's length."""
    from libmemleak.live.client import open_segment
    segment, fd = open_segment(pid)
    try:
        yield segment.header
    finally:
        segment.close()
        os.close(fd)


def signal_handled(pid):
    """No signal pending for pid, and it blocked in read() again: its
    handler has run to its end.  (For programs that wait on stdin -- the
    checkpoints -- when a signal is sent.)"""
    with open(f"/proc/{pid}/status") as f:
        pending = [line.split()[1] for line in f if line.startswith(("SigPnd", "ShdPnd"))]
    with open(f"/proc/{pid}/syscall") as f:
        call = f.read().split()
    return all(int(p, 16) == 0 for p in pending) and call[:1] == ["0"]


def wait_until_idle(reporter, timeout=120):
    """Waits until reporter's main thread has nothing left to do: it waits
    in futex() for the next request (reporter.py's loop; while it warms
    its symbols it does not) at three looks in a row."""
    seen = []
    def waiting():
        try:
            with open(f"/proc/{reporter}/syscall") as f:
                seen.append(f.read().split()[:1] == [str(FUTEX_SYSCALL)])
        except OSError:
            seen.append(False)
        time.sleep(0.05)
        return seen[-3:] == [True] * 3
    wait_for(waiting, f"reporter {reporter} idle", timeout)


FUTEX_SYSCALL = 202  # x86-64


def children_of(pid):
    """Pids whose parent is `pid` (a reporter's: its standby)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    if int(f.read().rpartition(b")")[2].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def kill_reporter_and_standby(reporter):
    """SIGKILL a reporter and its standby, leaving nobody to write the
    program's final report (stopped first: it starts a standby again when
    its own dies)."""
    os.kill(reporter, signal.SIGSTOP)
    for standby in children_of(reporter):
        kill_and_wait(standby)
    kill_and_wait(reporter)


def wait_for_reporter(traced_pid, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = reporters_of(traced_pid)
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no reporter for pid {traced_pid}")


class Terminal:
    """A command in a real terminal (a detached tmux session of a given
    size): its screen, keys typed into it, and the moment it is done (the
    command line ends by touching a file; the session stays to be read)."""

    def __init__(self, libmemleak_args, tmp_path, width=120, height=24, env=None):
        self.session = f"mlk-{os.getpid()}-{len(os.listdir(tmp_path))}"
        self.done = tmp_path / f"done-{self.session}"
        args = " ".join(str(a) for a in libmemleak_args)
        command = (f"PYTHONPATH={os.path.dirname(PACKAGE_DIR)} {sys.executable} -m libmemleak {args}; "
                   f"touch {self.done}; sleep 30")
        subprocess.run(["tmux", "new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height),
                        command], check=True, env=dict(CLI_ENV, TERM="xterm", **(env or {})))

    def screen(self):
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.session], capture_output=True,
                              text=True, check=True).stdout

    def wait_for(self, words, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if words in self.screen():
                return
            time.sleep(0.1)
        raise AssertionError(f"{words!r} never on the screen:\n{self.screen()}")

    def keys(self, *keys):
        subprocess.run(["tmux", "send-keys", "-t", self.session, *keys], check=True)

    def wait_done(self, timeout=30):
        deadline = time.monotonic() + timeout
        while not self.done.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.done.exists()

    def close(self):
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def headless(profile, *args):
    """Debian's chromium, headless, with nothing that reaches the network."""
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                           "--no-first-run", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)
