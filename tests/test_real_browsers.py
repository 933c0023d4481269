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


PAGE = """<html><body><script>
window.keep = [];
for (let i = 0; i < 40; i++) { const b = new ArrayBuffer(3 << 20); new Uint8Array(b).fill(i + 1); window.keep.push(b); }
document.body.textContent = "held " + window.keep.length;
</script></body></html>
"""


@pytest.mark.skipif(not FIREFOX, reason="firefox-esr is not installed")
def test_a_pages_array_buffers_are_seen_in_its_content_process(tmp_path):
    """#64 item 2, on the program it came from: a page's ArrayBuffers (1 MiB
    moz_arena_calloc blocks in the Firefox it was found in) were not seen --
    RSS grew 209 MB, live bytes 38 KB, no suspect, no blind line.  Each of
    the page's 40 buffers of 3 MiB is one block of the content process
    holding the page, at its final report; no report says anything unseen."""
    home = tmp_path / "home"
    home.mkdir()
    page = tmp_path / "page.html"
    page.write_text(PAGE)
    shot = tmp_path / "shot.png"
    p = subprocess.run(cli_argv("run", "-q", FIREFOX, "--headless", "--screenshot", str(shot), page.as_uri()),
                       cwd=tmp_path, env=dict(CLI_ENV, HOME=str(home)), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and shot.exists(), p.stderr[-3000:]
    held = {}
    for name in os.listdir(tmp_path):
        m = REPORT_NAME.match(name)
        if m and m["prog"] == "firefox-esr":
            report = memlog.read(str(tmp_path / name))
            assert "blind" not in report.header, (name, report.header["blind"])
            held[name] = sum(e.blocks for e in report.entries
                             if e.blocks and 3 << 20 <= e.bytes // e.blocks < (3 << 20) + 65536)
    assert sorted(held.values())[-1] == 40, held
