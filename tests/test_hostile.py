"""What a hostile traced program or a hostile peer can do to a more
privileged libmemleak (#28, items 6 and 7): nothing it writes into its
segment chooses a path for root, and nothing it sends to the remote server
stops the server, reaches the program's stderr or keeps a shell out."""

import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from helpers import CLI_ENV, cli, cli_argv, compile_program
from libmemleak.files import memlog, report_names
from libmemleak.daemon import remote
from test_remote import read_until_secret

NATIVE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "native")
NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to drop to nobody")
@pytest.mark.parametrize("who", ["worker", "self"])
def test_a_process_that_dropped_to_nobody_cannot_choose_roots_paths(tmp_path, who):
    """worker: a forked worker (root's keeper reports it); self: the process
    itself (root's own reporter).  Both rewrite their segment's directory
    to a root-only one, their name to '/../../zz' and their executable's
    path to a forged header line, then exit."""
    nest = tmp_path / "n1" / "n2"
    reports, victim = nest / "aaaa", nest / "bbbb"
    reports.mkdir(parents=True)
    victim.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o755)  # nobody must be able to run the program from here
    prog = compile_program("scribbler.c", f"-I{NATIVE}")
    out = subprocess.run(cli_argv("run", "-q", prog, who, str(victim), "/../../zz",
                                  "\n# seq: 99999999\n# pid: 1\n"),
                         cwd=reports, env=CLI_ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pid = int(re.search(r"scribbled (\d+) uid 65534", out.stdout).group(1))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(f"-{pid}-" in n for n in os.listdir(reports)):
        time.sleep(0.1)
    assert os.listdir(victim) == []
    for place in (nest, tmp_path / "n1", tmp_path):
        assert not [n for n in os.listdir(place) if "zz" in n], place
    [name] = [n for n in os.listdir(reports) if f"-{pid}-" in n]
    # Named as the kernel knows it, or -- when the worker was gone before
    # the keeper could ask -- by its own claim, made harmless.
    assert name in (f"scribbler-{pid}-1.memlog", f"_.._.._zz-{pid}-1.memlog")
    report = memlog.read(str(reports / name))
    assert report.header["seq"] == "1" and report.header["pid"] == str(pid)
    assert "\n" not in report.header["program"]
    sites = {e.frames[0].function: (e.bytes, e.blocks) for e in report.entries if e.frames}
    assert sites["site_scribbler"] == (4321, 1)


def test_a_forged_address_table_does_not_break_the_scan(tmp_path):
    """The scan reads the hook's address table where the segment says it is
    (addr_table): a program pointing it at a forgery -- 2^31 slots claimed
    over one mapped page, garbage entries, an array at the top of the
    address space, a mask that is no table's -- gets scans that end and a
    reporter that goes on serving; the program's run is untouched.  Every
    report reads the table of mappings likewise (region_table): 2^22
    regions over one page, the first a terabyte, is bounded work, said.
    So with the table of announced blocks (custom_table: 2^30 nodes over
    one page, a thousand copies of a 1 MiB block, a 512 GiB one) and what
    the program told the check (lsan_table: 2^40 ignored pointers at the
    top of the address space, 4,096 root regions each all of it).  And
    glibc's heap, which every report reads for the arenas' statistics: a
    bin's list whose link points back at itself."""
    prog = compile_program("scribbler.c", f"-I{NATIVE}")
    p = subprocess.Popen(cli_argv("run", "-q", prog, "table"), cwd=tmp_path, env=CLI_ENV, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline() == "forged\n"  # run execs: p.pid is the program's
        first = True
        for _ in range(2):
            scan = cli("scan", p.pid, cwd=tmp_path, timeout=300)
            if scan.returncode:
                p.kill()
                raise AssertionError(scan.stderr + p.stderr.read())
            report = memlog.read(scan.stdout.splitlines()[0])
            assert report.header["reason"] == "scan"
            # the forged table of mappings: bounded work, said to be cut short
            assert report.header["mappings-touched"].startswith("partial: more than 16 GiB"), report.header
            # the forged resource kinds: 32 at most, each name one harmless word
            kinds = [k for k in report.header if k.startswith("resource-live ")]
            assert 0 < len(kinds) <= 32 and report.header["pid"] == str(p.pid)
            assert all(re.fullmatch(r"resource-live [A-Za-z0-9._+@%~-]{1,31}", k) for k in kinds), kinds
            # the forged suppressions: a line each, no control character in any (bytes that
            # are not UTF-8 pass through as bytes, as in paths), and report reads them
            rules = [v for k, v in report.header.items() if k.startswith("default-suppression ")]
            assert "leak:^$" in rules and "leak:?[2J" in rules, rules
            assert not [v for v in rules if any(ord(c) < 32 or ord(c) == 127 for c in v)], rules
            # the forged misuse records: only the plausible one, in the first report only
            assert [(m.kind, m.call, m.times) for m in report.misuse] == (
                [("double-free", "free", 5)] if first else []), report.misuse
            assert int(report.header["misuse"].split()[0]) <= 1 << 62
            # glibc's own heap, forged: a bin's list that never ends is read
            # as far as the bound, and said to be partial
            assert report.header["memory-malloc-arenas"] == "1 partial", report.header
            first = False
            shown = cli("report", "--json", tmp_path, cwd=tmp_path)
            assert shown.returncode in (0, 1) and "Traceback" not in shown.stderr, shown.stderr
        p.stdin.write("\n")
        p.stdin.close()
        assert p.wait(timeout=120) == 0, p.stderr.read()
    finally:
        p.kill()
        p.wait()


def test_safe_names():
    for hostile in ("/../../x", "..", ".", "", "a/b", "\x1b[2J", "x\ny", "é" * 300):
        name = report_names.safe_name(hostile)
        assert name and "/" not in name and not name.startswith(".")
        assert re.fullmatch(r"[A-Za-z0-9._+@=,%~-]{1,100}", name), name
    assert report_names.safe_name("redis-server") == "redis-server"
    assert report_names.safe_name("c++") == "c++"
    assert memlog.header_text("a\nb\x1bc\x9b[2J") == "a?b?c?[2J"  # C1 too: \x9b is a CSI


# -- the remote server under attack ------------------------------------------

def _hello(address, port):
    s = socket.create_connection((address, port), timeout=30)
    lines = remote._Lines(s, 1 << 20)
    return s, lines, lines.read()


def _login(address, port, secret):
    s, lines, hello = _hello(address, port)
    remote._send(s, {"answer": remote.answer(secret, hello["challenge"])})
    assert lines.read() == {"ok": True}
    return s, lines


def _trickle(port, stop):
    """A peer that sends the challenge's answer a byte every two seconds, and
    again when it is dropped, until `stop` is set."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                while not stop.wait(2.0):
                    s.sendall(b"{")
        except OSError:
            stop.wait(0.1)


def _reopen(port, stop):
    """One peer re-opening idle connections as fast as it can, keeping each."""
    held = []
    try:
        while not stop.is_set():
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            except OSError:
                stop.wait(0.05)
            if len(held) > 200:  # (a bound of its own: descriptors)
                held.pop(0).close()
    finally:
        for s in held:
            s.close()


def test_peers_that_never_log_in_keep_no_shell_out(tmp_path):
    """#64 item 11: 8 unauthenticated peers each sending a byte every 2 s
    kept every real shell out for as long as they went on ("busy: too many
    connections"), and one peer re-opening idle connections did the same.
    A login has LOGIN_TIMEOUT in all, a new peer pushes the oldest pending
    one out, and logged-in shells have places of their own."""
    prog = compile_program("slowleaks_server.cc")
    p = subprocess.Popen(cli_argv("run", "-q", "--config", "listen=127.0.0.1:0", prog),
                         cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    stop = threading.Event()
    attackers = []
    try:
        m = read_until_secret(p)
        port, secret = int(m.group(3)), m.group(4)
        assert p.stdout.readline() == b"checkpoint round\n"
        shell_env = dict(CLI_ENV, MEMLEAK_SECRET=secret)
        # A logged-in shell holds its place whatever comes after it.
        kept, kept_lines = _login("127.0.0.1", port, secret)
        for target, count in ((_trickle, remote.MAX_CLIENTS + 4), (_reopen, 1)):
            attackers = [threading.Thread(target=target, args=(port, stop), daemon=True) for _ in range(count)]
            for t in attackers:
                t.start()
            # the pending places are full before the shell tries (the trickling
            # peers have been connected past a LOGIN_TIMEOUT of their own)
            stop.wait(remote.LOGIN_TIMEOUT + 2)
            out = cli("shell", f"127.0.0.1:{port}", "--dir", tmp_path / "copies", "-c", "report",
                      env=shell_env, timeout=120)
            assert out.returncode == 0, (target.__name__, out.stderr)
            assert f"slowleaks_server-{p.pid}-" in out.stdout, out.stdout
            stop.set()
            for t in attackers:
                t.join(timeout=60)
            stop.clear()
        remote._send(kept, {"op": "collecting"})
        assert set(kept_lines.read()) == {"error"}  # still served: 'on' was missing
        kept.close()
        p.stdin.write(b"\n" * 8)
        p.stdin.flush()
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0
        assert "Traceback" not in err.decode(), err.decode()
    finally:
        stop.set()
        if p.poll() is None:
            p.kill()
            p.wait()


def test_hostile_remote_peers_neither_stop_the_server_nor_keep_shells_out(tmp_path):
    prog = compile_program("slowleaks_server.cc")
    p = subprocess.Popen(cli_argv("run", "-q", "--config", "listen=127.0.0.1:0", prog),
                         cwd=tmp_path, env=CLI_ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    idle = []
    try:
        m = read_until_secret(p)
        port, secret = int(m.group(3)), m.group(4)
        assert p.stdout.readline() == b"checkpoint round\n"
        # A flood of idle peers that never answer the challenge: they hold
        # no place for long (a shell gets in seconds later, below), and a few
        # that stay connected keep nobody out.
        flood = [socket.create_connection(("127.0.0.1", port), timeout=30)
                 for _ in range(remote.MAX_CLIENTS + 4)]
        time.sleep(remote.LOGIN_TIMEOUT + 1)
        for s in flood:
            s.close()
        for _ in range(3):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        # Before login: a nesting bomb, a line far too long, NaN, a non-string answer.
        for junk in (b"[" * 100_000 + b"\n", b"x" * (remote.MAX_LOGIN_LINE * 4) + b"\n",
                     b'{"answer": NaN}\n', b'{"answer": [1, 2]}\n', b"\xff\xfe\n"):
            s, lines, hello = _hello("127.0.0.1", port)
            with s:
                s.sendall(junk)
                with pytest.raises((remote.RemoteError, OSError)):
                    if lines.read().get("error") == "wrong secret":
                        raise remote.RemoteError("refused")
        # After login: nonsense of every type gets one error line, and the
        # connection goes on serving.
        s, lines = _login("127.0.0.1", port, secret)
        with s:
            for request in ({"op": "report", "heuristics": 1e300}, {"op": "report", "timeout": -1},
                            {"op": "report", "heuristics": "x"}, {"op": "collecting"},
                            {"op": "fetch", "have": {"a": 1}}, {"op": 7}, [1, 2], "report"):
                remote._send(s, request)
                reply = lines.read()
                assert set(reply) == {"error"}, (request, reply)
        # A message that is not well-formed ends that connection, nothing more.
        for bomb in (b'{"op": "report", "heuristics": 1e400}\n',
                     b'{"op": "fetch", "have": ' + b"[" * 1000 + b"]" * 1000 + b"}\n",
                     b'{"op": "fetch"}' * 100_000 + b"x" * remote.MAX_LINE + b"\n"):
            s, lines = _login("127.0.0.1", port, secret)
            with s:
                s.sendall(bomb)
                with pytest.raises((remote.RemoteError, OSError)):
                    lines.read()
        # A real shell still gets in, with the idle peers still connected.
        out = cli("shell", f"127.0.0.1:{port}", "--dir", tmp_path / "copies", "-c", "report",
                  env=dict(CLI_ENV, MEMLEAK_SECRET=secret), timeout=120)
        assert out.returncode == 0, out.stderr
        assert f"slowleaks_server-{p.pid}-1.memlog" in out.stdout
        for s in idle:
            s.close()
        p.stdin.write(b"\n" * 8)
        p.stdin.flush()
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0
        # Nothing a peer did reached the program's stderr.
        assert "Traceback" not in err.decode() and "Error" not in err.decode(), err.decode()
    finally:
        for s in idle:
            s.close()
        if p.poll() is None:
            p.kill()
            p.wait()


def test_the_decoder_refuses_bombs():
    with pytest.raises(remote.RemoteError):
        remote.decode(b"[" * 100_000)
    with pytest.raises(remote.RemoteError):
        remote.decode(b'{"a": Infinity}')
    with pytest.raises(remote.RemoteError):
        remote.decode(b'{"a": 1e400}')
    assert remote.decode(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[["}') == {"a": "[" * 27}
    assert remote.decode(json.dumps({"op": "fetch", "have": ["x"]}).encode()) == {
        "op": "fetch", "have": ["x"]}
