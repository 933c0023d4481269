"""The symbolizer's answers kept on disk, one file per module file, so that a
reporter starting cold -- the standby taking over from a killed reporter
while the program waits at its exit, the next run of the same program, the
hundredth backend of a database -- names frames without reading DWARF again
(the cold report's largest cost on a binary built with -g:
docs/performance.rst).  As perf keeps symbols by build-id (~/.debug), this keeps
answers by what makes them: the module file (build-id, device, inode,
size, mtime), where its debug information was found (that file's identity,
or none: installing debug symbols later is a miss, not a stale answer), and
the symbolizer's own code (a changed reader is a miss too).

Where: $XDG_CACHE_HOME/libmemleak/symbols, else ~/.cache/libmemleak/symbols
of the user the reporter runs as (the environment is believed only when
the reporter's real and effective ids agree: a setuid program's reporter
must not be steered by its caller's environment).  MEMLEAK_SYMBOL_CACHE=off
turns it off.  Owner-only directory and files, opened without following
links; every file is read as hostile input (bounded, each line checked).

A file is a text of lines, each one answer as JSON: [offset, [[function,
file, line, inlined], ...]].  Reporters of many processes append to the
same file at once: each flush is one O_APPEND write of whole lines, and a
line that does not parse is passed over.  A file stops growing at
MAX_FILE_BYTES; the directory keeps at most MAX_FILES files (the least
recently written go first)."""

import hashlib
import json
import os
import pwd
import stat
import threading

from libmemleak.files.owned import read_owned

MAX_FILE_BYTES = 32 << 20
MAX_FILES = 512          # files the directory keeps; pruned to KEEP_FILES when more
KEEP_FILES = 384
MAX_FRAMES = 64          # frames one answer may hold (inlined calls)
MAX_TEXT = 4096          # characters of one function or file name
FLUSH_EVERY = 512        # answers a shelf holds before it writes them
_SUFFIX = ".answers"


def _code_identity():
    """A digest of the symbolizer's own source: answers made by other code
    are not believed."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            try:
                with open(os.path.join(here, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
            except OSError:
                return None
    return h.hexdigest()[:16]


def _file_identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def default_directory(environ=None):
    """The cache directory for this process's user, or None (turned off)."""
    env = os.environ if environ is None else environ
    if env.get("MEMLEAK_SYMBOL_CACHE", "").lower() in ("off", "no", "0"):
        return None
    trusted = os.getuid() == os.geteuid() and os.getgid() == os.getegid()
    base = env.get("XDG_CACHE_HOME", "") if trusted else ""
    if not os.path.isabs(base):
        try:
            home = pwd.getpwuid(os.geteuid()).pw_dir
        except KeyError:
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "libmemleak", "symbols")


def _private_directory(path):
    """An fd of `path` made owner-only where missing; None unless it is a
    directory of ours that nobody else may write."""
    parent = os.path.dirname(path)
    for d in (os.path.dirname(parent), parent, path):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        return None
    return fd


class AnswerCache:
    """The directory; a Shelf per module file."""

    def __init__(self, directory):
        self.directory = directory
        self._dir_fd = None
        self._tried = False
        self._code = _code_identity()

    @classmethod
    def default(cls):
        directory = default_directory()
        return cls(directory) if directory else None

    def _fd(self):
        if not self._tried:
            self._tried = True
            self._dir_fd = _private_directory(self.directory)
        return self._dir_fd

    def shelf(self, path, build_id, debug_file):
        """The answers for the module file at `path` (build-id as the
        segment says; `debug_file`: where its DWARF was found, or None), or
        None when they cannot be kept."""
        module = _file_identity(path)
        if module is None or self._code is None or self._fd() is None:
            return None
        debug = _file_identity(debug_file) if debug_file else "none"
        key = "\0".join((self._code, build_id or "", module, debug_file or "", debug or "gone"))
        name = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:40] + _SUFFIX
        return Shelf(self._dir_fd, name, self._prune)

    def _prune(self):
        """A new file is about to be made: keep the directory bounded."""
        fd = self._dir_fd
        try:
            names = [n for n in os.listdir(fd) if n.endswith(_SUFFIX)]
        except OSError:
            return
        if len(names) < MAX_FILES:
            return
        aged = []
        for n in names:
            try:
                aged.append((os.stat(n, dir_fd=fd, follow_symlinks=False).st_mtime_ns, n))
            except OSError:
                continue
        for _, n in sorted(aged)[:len(aged) - KEEP_FILES]:
            try:
                os.unlink(n, dir_fd=fd)
            except OSError:
                pass


class Shelf:
    """One module file's answers: read at the first question, new ones
    written in batches (FLUSH_EVERY, and at flush())."""

    def __init__(self, dir_fd, name, prune):
        self._dir_fd, self.name, self._prune = dir_fd, name, prune
        self._answers = None
        self._new = []
        self._size = 0
        self.full = False
        self._lock = threading.Lock()  # (the exporter's requests run side by side)

    def get(self, offset):
        """[(function, file, line, inlined), ...] or None."""
        if self._answers is None:
            self._answers = self._load()
        return self._answers.get(offset)

    def put(self, offset, rows):
        if self._answers is None:
            self._answers = self._load()
        self._answers[offset] = rows
        if not self.full:
            self._new.append(json.dumps([offset, rows], separators=(",", ":")))
            if len(self._new) >= FLUSH_EVERY:
                self.flush()

    def flush(self):
        with self._lock:
            new, self._new = self._new, []
            if new and not self.full:
                self._write(("\n".join(new) + "\n").encode("utf-8", "surrogateescape"))

    def _write(self, data):
        if self._size + len(data) > MAX_FILE_BYTES:
            self.full = True
            return
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(self.name, flags, dir_fd=self._dir_fd)
        except FileNotFoundError:
            self._prune()
            try:
                fd = os.open(self.name, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=self._dir_fd)
            except OSError:
                self.full = True
                return
        except OSError:
            self.full = True
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                self.full = True
                return
            self._size = st.st_size + len(data)
            if self._size > MAX_FILE_BYTES:
                self.full = True
                return
            os.write(fd, data)
        except OSError:
            self.full = True
        finally:
            os.close(fd)

    def _load(self):
        got = read_owned(self.name, os.geteuid(), MAX_FILE_BYTES, dir_fd=self._dir_fd)
        if got is None:
            return {}
        self._size = len(got[1])
        answers = {}
        for line in got[1].decode("utf-8", "surrogateescape").splitlines():
            parsed = _parse(line)
            if parsed is not None:
                answers[parsed[0]] = parsed[1]
        return answers


def _parse(line):
    """(offset, rows) of one line, or None: it is not what we write."""
    try:
        offset, rows = json.loads(line)
    except (ValueError, TypeError, RecursionError):
        return None
    if type(offset) is not int or not 0 <= offset < 1 << 64 or type(rows) is not list \
            or not 0 < len(rows) <= MAX_FRAMES:
        return None
    out = []
    for row in rows:
        if type(row) is not list or len(row) != 4:
            return None
        function, file, line_no, inlined = row
        if not (function is None or (type(function) is str and len(function) <= MAX_TEXT)) \
                or not (file is None or (type(file) is str and len(file) <= MAX_TEXT)) \
                or not (line_no is None or (type(line_no) is int and 0 <= line_no < 1 << 32)) \
                or type(inlined) is not bool:
            return None
        out.append((function, file, line_no, inlined))
    return offset, tuple(out)
