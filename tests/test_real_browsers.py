"""Firefox ESR (Debian's package) under the tracer, as a new user runs it:
headless, a page drawn to a file.  Its content processes confine
themselves in a seccomp sandbox; nothing the tracer does inside may be a
call the sandbox refuses, and every process's reports end with a final
one.  .ci/run installs firefox-esr; a machine without it skips."""

import os
import shutil
import subprocess
from collections import defaultdict

import pytest

from helpers import CLI_ENV, cli_argv
from libmemleak.files import memlog
from libmemleak.files.report_names import REPORT_NAME

FIREFOX = shutil.which("firefox-esr")


@pytest.mark.skipif(not FIREFOX, reason="firefox-esr is not installed")
@pytest.mark.parametrize("config", ["", "route=no"], ids=["routed", "route=no"])
def test_firefox_content_processes_are_reported_and_their_sandbox_never_refuses_us(tmp_path, config):
    """(#64 item 10) With route=no a content process, not held by the
    keeper (its own network namespace), started its reporter lazily inside
    its sandbox: pidfd_open, prctl and clone refused (three violations
    logged), and that process's reports missing without a word."""
    home = tmp_path / "home"
    home.mkdir()
    shot = tmp_path / "shot.png"
    options = ["--config", config] if config else []
    p = subprocess.run(cli_argv("run", "-q", *options, FIREFOX, "--headless", "--screenshot", str(shot),
                                "about:blank"),
                       cwd=tmp_path, env=dict(CLI_ENV, HOME=str(home), MOZ_SANDBOX_LOGGING="1"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and shot.exists(), p.stderr[-3000:]
    assert "sandbox violation" not in p.stderr, [line for line in p.stderr.splitlines() if "violation" in line]
    assert "Traceback" not in p.stderr
    by_pid = defaultdict(list)
    for name in os.listdir(tmp_path):
        m = REPORT_NAME.match(name)
        if m and m["prog"] == "firefox-esr":
            by_pid[int(m["pid"])].append((int(m["seq"]), name))
    assert len(by_pid) >= 3, sorted(by_pid)  # the parent and its content processes
    for pid, reports in by_pid.items():
        last = memlog.read_header(str(tmp_path / max(reports)[1]))
        assert last["reason"] in ("exit", "death"), (pid, last)
