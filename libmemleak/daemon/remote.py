"""The remote mode: a shell on another host drives a traced process.

With MEMLEAK_CONFIG listen=HOST:PORT the process's reporter (the root's
only) serves the control channel over TCP (Server, a thread of the
reporter): the same requests `libmemleak snapshot`, `scan` and the shell's
stop/start make locally through the segment, and the reports' text sent
back, so that the far side keeps copies and answers `top`, `trend` and
`diff` from them with the same analysis.

Nothing is served before the client proves it knows the secret: at start
the reporter makes 32 random bytes, writes them hex-encoded to a file only
its user may read (/tmp/libmemleak-UID/remote-PID.secret, exclusive
create, no-follow) and prints them once on the program's stderr; a client
answers a fresh random challenge with HMAC-SHA256(secret, challenge), so
the secret never crosses the network.  A wrong answer is refused after a
second's pause and the connection closed.  The traffic itself is not
encrypted: across an untrusted network, tunnel it (ssh -L).

The protocol: one JSON object per line each way.
  server: {"libmemleak": VERSION, "pid", "program", "challenge": HEX}
  client: {"answer": HEX}            server: {"ok": true} | {"error": WHY}
  client: {"op": "report", "scan": BOOL, "heuristics": INT|null}
          {"op": "collecting", "on": BOOL}
          {"op": "fetch", "have": [NAME, ...]}
  server: {"ok": true, "name": NAME, ...} | {"error": WHY}
          fetch answers {"ok": true, "reports": [[NAME, TEXT], ...]}: the
          process's reports the client does not have yet."""

import collections
import errno
import hashlib
import hmac
import json
import os
import secrets
import socket
import sys
import threading
import time

from libmemleak import __version__
from libmemleak.daemon.trust import fallback_directory
from libmemleak.files.report_names import report_names

SECRET_BYTES = 32
REFUSE_PAUSE_SECONDS = 1.0
MAX_LOGIN_LINE = 4096         # a peer's line before it proved the secret, at most
LOGIN_TIMEOUT = 5.0           # seconds a peer has to answer the challenge, in all (not per byte)
MAX_LINE = 1 << 20            # a client's request line, at most
MAX_REPLY_LINE = 1 << 30      # a server's reply line (report texts), at most
MAX_DEPTH = 16                # nesting of a message, at most (none needs more than 3)
CLIENT_TIMEOUT = 600.0        # an idle, logged-in shell
MAX_CLIENTS = 8               # logged-in shells served at once; more are refused
MAX_PENDING = 16              # peers not logged in yet; a new one pushes the oldest out


class RemoteError(Exception):
    """Why the remote process cannot be reached or asked (one line)."""


class _TryAgain(Exception):
    """The server is busy, or dropped this login for newer peers: again, soon."""


def parse_address(text):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise RemoteError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def answer(secret_hex, challenge_hex):
    return hmac.new(bytes.fromhex(secret_hex), bytes.fromhex(challenge_hex), hashlib.sha256).hexdigest()


def _send(sock, obj):
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _no_constant(name):
    raise ValueError(f"{name} is not a number here")


def _finite(text):
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("not a finite number")
    return value


def decode(line, max_depth=MAX_DEPTH):
    """One message from a peer, who may be hostile: nesting deeper than
    max_depth, NaN, Infinity and numbers too large for a float are refused
    before they reach json's recursive parser or our arithmetic."""
    depth = 0
    in_string = escaped = False
    for byte in line:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5c:        # backslash
                escaped = True
            elif byte == 0x22:        # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5b, 0x7b):    # [ {
            depth += 1
            if depth > max_depth:
                raise RemoteError("not a libmemleak remote message (nested too deeply)")
        elif byte in (0x5d, 0x7d):    # ] }
            depth -= 1
    try:
        return json.loads(line, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        raise RemoteError("not a libmemleak remote message") from None


class _Lines:
    """Newline-delimited JSON from a socket, each line at most `limit` bytes."""

    def __init__(self, sock, limit):
        self.sock, self.buf, self.scanned, self.limit = sock, bytearray(), 0, limit
        self.deadline = None  # (monotonic) a line must be whole by then, however it trickles in

    def read(self):
        while True:
            cut = self.buf.find(b"\n", self.scanned)
            if cut >= 0:
                line = bytes(self.buf[:cut])
                del self.buf[:cut + 1]
                self.scanned = 0
                if len(line) > self.limit:
                    raise RemoteError("message too long")
                return decode(line)
            self.scanned = len(self.buf)
            if self.scanned > self.limit:
                raise RemoteError("message too long")
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise RemoteError("too slow")
                self.sock.settimeout(left)
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RemoteError("connection closed")
            self.buf += chunk


# -- the server: a thread of the root's reporter ----------------------------------

def secret_path(pid):
    return os.path.join(fallback_directory(), f"remote-{pid}.secret")


def write_secret(pid, bound):
    """A new secret, in an owner-only file (the secret on its first line,
    where it listens on the second); its path and value."""
    path = secret_path(pid)
    value = secrets.token_hex(SECRET_BYTES)
    try:
        os.unlink(path)  # a previous reporter's, for this pid (pids are reused)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{value}\nlistening on {bound}\n")
    return path, value


class Server:
    """Serves up to MAX_CLIENTS logged-in shells at once, each in a thread of
    its own, and apart from them up to MAX_PENDING peers that have not
    proved the secret yet: those have LOGIN_TIMEOUT seconds in all (a peer
    trickling a byte every two seconds is not given more), and a new one
    pushes the oldest out -- a legitimate shell answers the challenge in a
    round trip, so peers that never answer, however many and however often
    re-opened, can neither take a logged-in shell's place nor keep a new
    one out.  Nothing a peer sends can stop it or reach the program's
    stderr: every failure ends that one connection, silently."""

    def __init__(self, segment, address, say, directory, name):
        self.seg, self.say, self.directory = segment, say, directory
        self.pid = segment.pid
        self.program = name or segment.program_name()
        host, port = parse_address(address)
        self.listener = socket.create_server((host, port), family=_family(host), reuse_port=False)
        self.listener.settimeout(None)
        bound = self.listener.getsockname()
        self.secret_file, self.secret = write_secret(self.pid, f"{bound[0]}:{bound[1]}")
        self.places = threading.BoundedSemaphore(MAX_CLIENTS)
        self.pending = collections.OrderedDict()  # peers not logged in yet, oldest first
        self.pending_lock = threading.Lock()
        self.asking = threading.Lock()  # one request on the segment at a time
        path = self.secret_file
        say(f"listening on {bound[0]}:{bound[1]} for remote shells of pid {self.pid}: "
            f"libmemleak shell HOST:{bound[1]} with the secret {self.secret} (also in {path})")

    def start(self):
        threading.Thread(target=self._serve_forever, name="libmemleak-remote", daemon=True).start()

    def close(self):
        """The reporter ends: no more shells, and the secret goes."""
        self.listener.close()
        try:
            os.unlink(self.secret_file)
        except OSError:
            pass

    def _serve_forever(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    time.sleep(0.1)  # out of descriptors for now: not the end of the server
                    continue
                return  # closed: the reporter ends
            self._admit(conn)
            try:
                threading.Thread(target=self._connection, args=(conn,), daemon=True,
                                 name="libmemleak-remote-client").start()
            except RuntimeError:
                self._leave(conn)
                _refuse(conn, "busy")

    def _admit(self, conn):
        """conn among the pending peers; the oldest pushed out past MAX_PENDING."""
        with self.pending_lock:
            self.pending[conn] = threading.Event()  # set when pushed out
            pushed = [self.pending.popitem(last=False) for _ in range(len(self.pending) - MAX_PENDING)]
        for old, gone in pushed:
            gone.set()  # (its wrong-secret pause ends)
            try:
                old.shutdown(socket.SHUT_RDWR)  # its thread's read ends; the thread closes it
            except OSError:
                pass

    def _leave(self, conn):
        """conn is no longer pending: False if it was pushed out meanwhile."""
        with self.pending_lock:
            return self.pending.pop(conn, None) is not None

    def _connection(self, conn):
        try:
            with conn:
                self._serve(conn)
        except Exception:  # noqa: BLE001 -- a peer ends its own connection, nothing else
            pass
        finally:
            self._leave(conn)

    def _serve(self, conn):
        lines = _Lines(conn, MAX_LOGIN_LINE)
        lines.deadline = time.monotonic() + LOGIN_TIMEOUT
        conn.settimeout(LOGIN_TIMEOUT)
        challenge = secrets.token_hex(32)
        _send(conn, {"libmemleak": __version__, "pid": self.pid,
                     "program": self.program, "challenge": challenge})
        reply = lines.read()
        expected = answer(self.secret, challenge)
        given = reply.get("answer") if isinstance(reply, dict) else None
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), expected.encode()):
            with self.pending_lock:
                gone = self.pending.get(conn)
            if gone is not None:  # (the pause holds its pending place: such threads stay bounded)
                gone.wait(REFUSE_PAUSE_SECONDS)
            _send(conn, {"error": "wrong secret"})
            return
        if not self._leave(conn):
            return  # pushed out as it answered
        if not self.places.acquire(blocking=False):
            _send(conn, {"error": "busy: too many shells"})
            return
        try:
            _send(conn, {"ok": True})
            self._logged_in(conn, lines)
        finally:
            self.places.release()

    def _logged_in(self, conn, lines):
        lines.deadline = None
        conn.settimeout(CLIENT_TIMEOUT)
        lines.limit = MAX_LINE
        while True:
            request = lines.read()
            try:
                reply = self._answer(request)
            except BadRequest as e:
                reply = {"error": str(e)}
            _send(conn, reply)

    def _answer(self, request):
        from libmemleak.daemon.requests import LiveError, request_on_segment, set_collecting_on_segment
        op = _field(request, "op", str)
        try:
            if op == "report":
                scan = _field(request, "scan", bool, False)
                heuristics = _field(request, "heuristics", int, None)
                if heuristics is not None and not 0 <= heuristics < 1 << 16:
                    raise BadRequest("heuristics out of range")
                timeout = _field(request, "timeout", (int, float), 60)
                if not 0 < timeout <= 3600:
                    raise BadRequest("timeout out of range (0-3600 s)")
                with self.asking:
                    path = request_on_segment(self.seg, float(timeout), scan, heuristics)
                return {"ok": True, "name": os.path.basename(path)}
            if op == "collecting":
                on = _field(request, "on", bool)
                with self.asking:
                    set_collecting_on_segment(self.seg, on)
                return {"ok": True}
            if op == "fetch":
                have = _field(request, "have", list, [])
                return {"ok": True, "reports": self._reports({h for h in have if isinstance(h, str)})}
        except LiveError as e:
            return {"error": str(e)}
        return {"error": f"unknown request {op!r}"}

    def _reports(self, have):
        out = []
        for name in report_names(self.directory, self.program, self.pid):
            if name not in have:
                try:
                    with open(os.path.join(self.directory, name), encoding="utf-8",
                              errors="replace") as f:
                        out.append([name, f.read()])
                except OSError:
                    continue
        return out


class BadRequest(Exception):
    """A logged-in client's request that does not make sense (one line back)."""


_MISSING = object()


def _field(request, name, kind, default=_MISSING):
    """request[name], which must be of `kind` (bool is not an int here)."""
    if not isinstance(request, dict):
        raise BadRequest("a request is a JSON object")
    value = request.get(name, default)
    if value is _MISSING:
        raise BadRequest(f"{name!r} is missing")
    if value is default:
        return value
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise BadRequest(f"{name!r} has the wrong type")
    return value


def _refuse(conn, why):
    try:
        with conn:
            conn.settimeout(1.0)
            _send(conn, {"error": why})
    except OSError:
        pass


def _family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def serve_if_asked(segment, say, directory, name=None):
    """Start the server when the segment names an address (the root's
    reporter only); says why not in one line if it cannot."""
    h = segment.header
    if not h.listen_len or h.parent_pid:
        return None
    address = segment.string(h.listen_off, h.listen_len)
    try:
        server = Server(segment, address, say, directory, name)
    except (OSError, RemoteError) as e:
        say(f"listen={address}: cannot serve remote shells: {getattr(e, 'strerror', None) or e}")
        return None
    server.start()
    return server


# -- the client: what the shell talks to ---------------------------------------------

class Client:
    """A connection to a remote process's reporter; its reports mirrored
    into `directory`."""

    def __init__(self, address, secret, directory, timeout=60.0):
        host, port = parse_address(address)
        self.address, self.directory, self.timeout = address, directory, timeout
        try:
            bytes.fromhex(secret.strip())
        except ValueError:
            raise RemoteError("the secret is not the hex string the process printed") from None
        # A server whose shells are all taken, or that pushed this login out
        # for newer peers (a flood of peers that never log in), is tried
        # again for a while.
        deadline = time.monotonic() + 2 * LOGIN_TIMEOUT + 5
        while True:
            try:
                self._login(host, port, secret.strip())
                return
            except _TryAgain as e:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise RemoteError(f"{address}: {e}") from None
                time.sleep(0.2)

    def _login(self, host, port, secret):
        try:
            self.sock = socket.create_connection((host, port), timeout=30)
        except OSError as e:
            raise RemoteError(f"cannot connect to {self.address}: {e.strerror or e}") from None
        try:
            # a silent peer (not a libmemleak remote) must not hang the shell
            self.sock.settimeout(max(60.0, self.timeout + 30.0))
            self.lines = _Lines(self.sock, MAX_REPLY_LINE)
            hello = self.lines.read()
            if isinstance(hello, dict) and str(hello.get("error", "")).startswith("busy"):
                raise _TryAgain(hello["error"])
            if not isinstance(hello, dict) or "challenge" not in hello or "pid" not in hello:
                raise RemoteError(f"{self.address} is not a libmemleak remote")
            try:
                self.pid, self.program = int(hello["pid"]), str(hello.get("program", "?"))
                response = answer(secret, str(hello["challenge"]))
            except ValueError:
                raise RemoteError(f"{self.address} is not a libmemleak remote") from None
            _send(self.sock, {"answer": response})
            reply = self.lines.read()
        except RemoteError as e:
            if str(e) == "connection closed" and hasattr(self, "pid"):
                raise _TryAgain("busy: pushed out before the login ended") from None
            raise
        except OSError as e:
            if hasattr(self, "pid"):  # after its hello: pushed out (a reset)
                raise _TryAgain(f"busy: {e.strerror or e}") from None
            raise RemoteError(f"{self.address}: {e.strerror or e or 'timed out'}") from None
        if isinstance(reply, dict) and str(reply.get("error", "")).startswith("busy"):
            raise _TryAgain(reply["error"])
        if not isinstance(reply, dict) or not reply.get("ok"):
            why = reply.get("error", "failed") if isinstance(reply, dict) else "not understood"
            raise RemoteError(f"{self.address} refused: {why}")

    def _exchange(self, message, refused=""):
        """Send one message, read the answer: it must say ok."""
        try:
            _send(self.sock, message)
            reply = self.lines.read()
        except OSError as e:
            raise RemoteError(f"{self.address}: {e.strerror or e or 'timed out'}") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            why = reply.get("error", "failed") if isinstance(reply, dict) else "not understood"
            raise RemoteError(f"{self.address} {refused}{why}" if refused else f"{self.address}: {why}")
        return reply

    def _ask(self, **request):
        return self._exchange(request)

    def sync(self):
        """Copy the reports not here yet; their number."""
        have = [n for n in os.listdir(self.directory) if n.endswith(".memlog")]
        got = self._ask(op="fetch", have=have).get("reports") or []
        for item in got:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                continue
            name, text = item
            if os.path.basename(name) != name or not name.endswith(".memlog"):
                continue  # a name that would leave the directory: not ours to write
            fd = os.open(os.path.join(self.directory, name),
                         os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        return len(got)

    def request_report(self, scan=False, heuristics=None):
        name = str(self._ask(op="report", scan=scan, heuristics=heuristics, timeout=self.timeout).get("name"))
        if os.path.basename(name) != name:
            raise RemoteError(f"{self.address}: not understood")
        self.sync()
        return os.path.join(self.directory, name)

    def set_collecting(self, on):
        self._ask(op="collecting", on=on)

    def close(self):
        self.sock.close()


def read_secret(args_secret_file):
    """The secret: --secret-file, else $MEMLEAK_SECRET, else asked for."""
    if args_secret_file:
        try:
            with open(args_secret_file) as f:
                return f.readline().strip()  # the second line says where it listens
        except OSError as e:
            raise RemoteError(f"{args_secret_file}: {e.strerror}") from None
    if os.environ.get("MEMLEAK_SECRET"):
        return os.environ["MEMLEAK_SECRET"].strip()
    if sys.stdin.isatty():
        import getpass
        return getpass.getpass("secret (printed by the process, or in its remote-PID.secret): ")
    raise RemoteError("no secret: give --secret-file FILE or set MEMLEAK_SECRET")
