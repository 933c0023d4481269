"""Tracing a process that was started without the tracer, and stopping.

`attach(pid)` borrows one of the process's threads (native/reporter/
inject.c: ptrace, no signal the program sees), has it call the C runtime's
dlopen() on libmtrace.so and then libmtrace's mlk_attach(), which routes
the program's allocation calls to the hooks and starts the reporter as
under LD_PRELOAD (native/hook/attach.c); an executable with its own malloc
is patched with its other threads stopped (mlk_attach_patch), and
mlk_attach_finish routes the allocations and says what was routed.  `detach(pid)` has it call
mlk_detach(): the routing is undone, a last report written.  Everything
this module decides -- which process can be attached, where the functions
are -- it decides from /proc and the ELF files, before the process is
touched; whatever fails is one line (AttachError) and the process runs on.
"""

import contextlib
import os
import struct
import time

import cffi

from libmemleak import preload_path, reporter_library
from libmemleak.daemon.procfs import maps_entry, not_allowed, proc_dir

ffi = cffi.FFI()
ffi.cdef("""
struct mlk_hijack;
struct mlk_hijack *mlk_hijack_begin(int, const uint64_t *, const uint64_t *, int, int, char *, int);
int mlk_hijack_tid(const struct mlk_hijack *);
uint64_t mlk_hijack_push(struct mlk_hijack *, const void *, size_t);
int mlk_hijack_call(struct mlk_hijack *, uint64_t, const uint64_t *, int, char *, int);
int mlk_hijack_wait(struct mlk_hijack *, int, uint64_t *, char *, int);
int64_t mlk_hijack_end(struct mlk_hijack *);
size_t mlk_read_mem(int, uint64_t, void *, size_t);
int mlk_write_mem(int, uint64_t, const void *, size_t);
struct mlk_world;
struct mlk_world *mlk_world_stop_except(int, int, char *, int);
int mlk_world_threads(const struct mlk_world *);
uint64_t mlk_world_pc(const struct mlk_world *, int);
void mlk_world_resume(struct mlk_world *);
""")
lib = reporter_library(ffi)

RTLD_NOW = 2
WHY_BYTES = 512
SAFE_POINT_ROUNDS = 400          # 5 ms apart: 2 s to find a thread at a safe point
PATCH_TRIES = 100                # the threads stopped this often, 2 ms apart, to find none in a patch
CALL_SLICE_MS = 5000             # how often a slow call is said to be slow
RUNTIME_LIBRARIES = ("libc.so", "libc-", "ld-linux", "libstdc++", "libgcc_s", "libpthread",
                     "libm.so", "libdl")
LIBRARY_NAME = "libmtrace.so"


class AttachError(Exception):
    """Why the process cannot be attached to (or detached from), one line."""


# -- what /proc says ----------------------------------------------------------

def read_maps(pid):
    """[(lo, hi, perms, offset, path)] of process pid."""
    try:
        with open(f"{proc_dir(pid)}/maps") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise AttachError(f"no process {pid}") from None
    except PermissionError:
        raise AttachError(not_allowed(pid, "attach as its user or as root")) from None
    return [entry for entry in map(maps_entry, lines) if entry is not None]


def _base_name(path):
    return os.path.basename(path.removesuffix(" (deleted)"))


def find_module(maps, predicate):
    """(path, load bias) of the first file mapping whose name matches."""
    for lo, _hi, _perms, offset, path in maps:
        if path.startswith("/") and offset == 0 and predicate(_base_name(path)):
            return path, lo
    return None


def _is_libc(name):
    return name == "libc.so.6" or (name.startswith("libc-") and name.endswith(".so"))


def runtime_ranges(maps):
    """Executable mappings of the C/C++ runtime: a thread stopped in them may
    hold the locks dlopen and malloc take."""
    return [(lo, hi) for lo, hi, perms, _off, path in maps
            if "x" in perms and path.startswith("/") and _base_name(path).startswith(RUNTIME_LIBRARIES)]


def symbol_offsets(path, names):
    """{name: st_value} of the defined dynamic symbols `names` in ELF file
    `path` (a shared object's values are offsets from its load bias)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    found = {}
    try:
        with open(path, "rb") as f:
            dynsym = ELFFile(f).get_section_by_name(".dynsym")
            if dynsym is None:
                return found
            for sym in dynsym.iter_symbols():
                if (sym.name in names and sym.name not in found and sym["st_shndx"] != "SHN_UNDEF"
                        and sym["st_value"]):
                    found[sym.name] = sym["st_value"]
    except (OSError, ELFError, ValueError) as e:
        raise AttachError(f"cannot read {path}: {e}") from None
    return found


def _in_process_root(pid, path):
    """The file the process sees at `path` (its mount namespace)."""
    return f"{proc_dir(pid)}/root{path}"


def _check_process(pid, maps):
    """The glibc of the process (its path there, its bias), or why not."""
    try:
        with open(f"{proc_dir(pid)}/exe", "rb") as f:
            from libmemleak.symbols.elfcheck import has_interpreter
            if not has_interpreter(f):
                raise AttachError(f"process {pid} is statically linked: there is no dynamic "
                                  "loader in it to load the tracer with (rebuild it without -static)")
    except PermissionError:
        raise AttachError(not_allowed(pid, "attach as its user or as root")) from None
    except FileNotFoundError:
        raise AttachError(f"no process {pid}") from None
    libc = find_module(maps, _is_libc)
    if libc is None:
        if find_module(maps, lambda n: n.startswith("ld-musl")):
            raise AttachError(f"process {pid} runs on musl, not glibc: attach needs glibc's "
                              "loader (start it under libmemleak run instead)")
        raise AttachError(f"process {pid} has no glibc loaded: attach needs glibc's loader")
    return libc


def _library_visible(pid, library):
    """The process sees our library file at the same path (same file)."""
    try:
        mine, theirs = os.stat(library), os.stat(_in_process_root(pid, library))
    except FileNotFoundError:
        return False
    except PermissionError:
        raise AttachError(f"process {pid}: not allowed to look into its file system "
                          "(attach as its user or as root)") from None
    except OSError as e:  # ESRCH: a sandboxed process whose root the kernel will not show
        raise AttachError(f"process {pid}: cannot look into its file system ({e.strerror}): "
                          "a sandbox or a container? trace it from its start with "
                          "libmemleak run instead") from None
    return (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)


# -- borrowing a thread ---------------------------------------------------------

class Borrowed:
    """One thread of the process, borrowed to make calls; given back by close()."""

    def __init__(self, pid, avoid, say=None):
        self.pid = pid
        self.say = say or (lambda message: None)
        why = ffi.new("char[]", WHY_BYTES)
        lo = ffi.new("uint64_t[]", [a for a, _ in avoid] or [0])
        hi = ffi.new("uint64_t[]", [b for _, b in avoid] or [0])
        self.h = lib.mlk_hijack_begin(pid, lo, hi, len(avoid), SAFE_POINT_ROUNDS, why, WHY_BYTES)
        if self.h == ffi.NULL:
            raise AttachError(_explain(pid, ffi.string(why).decode(errors="replace")))
        self.tid = lib.mlk_hijack_tid(self.h)
        self.kept_ns = 0

    def push(self, data):
        addr = lib.mlk_hijack_push(self.h, data, len(data))
        if not addr:
            raise AttachError(f"cannot write to the stack of thread {self.tid}")
        return addr

    def push_string(self, text):
        return self.push(os.fsencode(text) + b"\0")

    def call(self, func, *args):
        why = ffi.new("char[]", WHY_BYTES)
        argv = ffi.new("uint64_t[]", list(args) or [0])
        if lib.mlk_hijack_call(self.h, func, argv, len(args), why, WHY_BYTES) != 0:
            raise AttachError(ffi.string(why).decode(errors="replace"))
        ret = ffi.new("uint64_t *")
        waited = 0
        while True:
            status = lib.mlk_hijack_wait(self.h, CALL_SLICE_MS, ret, why, WHY_BYTES)
            if status == 0:
                return ret[0]
            if status < 0:
                raise AttachError(f"process {self.pid}: {ffi.string(why).decode(errors='replace')}")
            waited += CALL_SLICE_MS
            # Never give up on it: let go mid-call, it would return into
            # address 0.  Say what it is doing instead.
            self.say(f"thread {self.tid} of process {self.pid} is still in the call after "
                     f"{waited // 1000} s (waiting on a lock?); still waiting")

    def read_string(self, addr, limit=4096):
        buf = ffi.new("char[]", limit)
        lib.mlk_read_mem(self.tid, addr, buf, limit - 1)  # the main thread may be a zombie
        return ffi.string(buf).decode(errors="replace")

    def read(self, addr, size):
        buf = ffi.new("char[]", size)
        lib.mlk_read_mem(self.tid, addr, buf, size)
        return bytes(ffi.buffer(buf, size))

    def write(self, addr, data):
        return lib.mlk_write_mem(self.tid, addr, data, len(data)) == 0

    def close(self):
        if self.h != ffi.NULL:
            self.kept_ns = lib.mlk_hijack_end(self.h)
            self.h = ffi.NULL


def _explain(pid, why):
    if "Operation not permitted" in why:
        scope = ""
        try:
            with open("/proc/sys/kernel/yama/ptrace_scope") as f:
                scope = f.read().strip()
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/status") as f:
                tracer = next((line.split()[1] for line in f if line.startswith("TracerPid:")), "0")
        except OSError:
            tracer = "0"
        if tracer != "0":
            return (f"process {pid} is already traced by process {tracer} (a debugger or strace?): "
                    "detach that first")
        if scope and scope != "0":
            return (f"not allowed to attach to process {pid} (kernel.yama.ptrace_scope is {scope}: "
                    "run as root, or `sysctl kernel.yama.ptrace_scope=0`)")
        return (f"not allowed to attach to process {pid} ({why}: another user's process, or "
                "seccomp or a container forbids ptrace)")
    return f"process {pid}: {why}"


@contextlib.contextmanager
def borrowed_thread(pid, maps, libc_path, libc_base, say):
    """A thread of the process borrowed for calls; its errno (which our
    calls may change) put back, and the thread given back, at the end."""
    syms = symbol_offsets(_in_process_root(pid, libc_path), ("__errno_location",))
    borrowed = Borrowed(pid, runtime_ranges(maps), say)
    try:
        errno_at = borrowed.call(libc_base + syms["__errno_location"]) if syms else 0
        errno_was = borrowed.read(errno_at, 4) if errno_at else b""
        try:
            yield borrowed
        finally:
            if errno_at:
                borrowed.write(errno_at, errno_was)
    finally:
        borrowed.close()


def _status_of(borrowed, func, *args):
    """Call one of libmtrace's mlk_attach*/mlk_detach* functions, which
    answer "" or why not: that answer."""
    status_at = borrowed.call(func, *args)
    return borrowed.read_string(status_at, 512) if status_at else "no answer"


def _status_call(borrowed, func, *args):
    """The same, an answer other than "" raised as AttachError."""
    status = _status_of(borrowed, func, *args)
    if status:
        raise AttachError(f"process {borrowed.pid}: {status}")


@contextlib.contextmanager
def others_stopped(borrowed):
    """Every thread of the process but the borrowed one stopped (ptrace, as
    for a scan: no signal the program sees) while in the block, which gets
    the stopped world; AttachError when they cannot be stopped."""
    why = ffi.new("char[]", WHY_BYTES)
    world = lib.mlk_world_stop_except(borrowed.pid, borrowed.tid, why, WHY_BYTES)
    if world == ffi.NULL:
        raise AttachError(f"the program's threads could not be stopped: {ffi.string(why).decode(errors='replace')}")
    try:
        yield world
    finally:
        lib.mlk_world_resume(world)


# -- attach and detach ------------------------------------------------------------

def loaded_library(maps):
    """(path, bias) of libmtrace.so in the process's maps, or None."""
    return find_module(maps, lambda n: n == LIBRARY_NAME)


def attach(pid, config="", library=None, say=None):
    """Start tracing process pid.  Returns (thread borrowed, ms it was kept)."""
    library = os.path.realpath(library or preload_path())
    maps = read_maps(pid)
    libc_path, libc_base = _check_process(pid, maps)
    if loaded_library(maps):
        from libmemleak.live.client import open_segment, LiveError
        try:
            segment, fd = open_segment(pid)
        except LiveError:
            segment = None
        if segment is not None:
            detached = segment.header.detach_requests and not segment.header.collecting
            segment.close()
            os.close(fd)
            if detached:
                raise AttachError(f"process {pid} was attached to and detached from before: "
                                  "attaching again is not supported (restart it, or attach and "
                                  "use the shell's stop/start instead of detach)")
            raise AttachError(f"process {pid} is already traced by libmemleak")
    if not _library_visible(pid, library):
        raise AttachError(f"process {pid} cannot see {library} (another mount namespace: a "
                          "container?): copy libmtrace.so into its file system and pass "
                          "--library with its path there")
    syms = symbol_offsets(_in_process_root(pid, libc_path), ("dlopen", "dlerror"))
    if "dlopen" not in syms:
        raise AttachError(f"process {pid}: its glibc ({libc_path}) is older than 2.34 (dlopen "
                          "outside libc): attach is not supported there")
    ours = symbol_offsets(library, ATTACH_CALLS)
    if any(name not in ours for name in ATTACH_CALLS):
        raise AttachError(f"{library} is not a libmemleak hook library with attach support")
    with borrowed_thread(pid, maps, libc_path, libc_base, say) as borrowed:
        handle = borrowed.call(libc_base + syms["dlopen"], borrowed.push_string(library), RTLD_NOW)
        if not handle:
            why = ""
            if "dlerror" in syms:
                message = borrowed.call(libc_base + syms["dlerror"])
                why = borrowed.read_string(message) if message else ""
            raise AttachError(f"process {pid} could not load {library}: {why or 'dlopen failed'}")
        found = loaded_library(read_maps(pid))
        if not found:
            raise AttachError(f"process {pid} loaded {library} but it is not in its maps")
        base = found[1]
        _status_call(borrowed, base + ours["mlk_attach"], borrowed.push_string(config))
        why_not = ""
        if borrowed.call(base + ours["mlk_attach_patches_waiting"]) & 0xFFFFFFFF:
            why_not = _patch_with_threads_stopped(borrowed, base + ours["mlk_attach_patch"],
                                                  base + ours["mlk_attach_places"])
        _status_call(borrowed, base + ours["mlk_attach_finish"], borrowed.push_string(why_not))
    return borrowed.tid, borrowed.kept_ns / 1e6


ATTACH_CALLS = ("mlk_attach", "mlk_attach_patches_waiting", "mlk_attach_patch", "mlk_attach_places",
                "mlk_attach_finish")
PLACES_MAX = 65536  # native/hook/attach.c's ATTACH_PLACES_MAX


def thread_places(world):
    """Where each stopped thread is: its instruction pointer."""
    return [lib.mlk_world_pc(world, i) for i in range(lib.mlk_world_threads(world))]


def _patch_with_threads_stopped(borrowed, patch, places_at):
    """An executable that defines malloc itself calls it directly: the
    process patches its entries (native/hook/route/route.c), and that is
    only safe while no other thread runs through them.  So every other
    thread is stopped, the process told where each one is (in its buffer
    at places_at), and it writes the patches unless one is part-way through
    the bytes they overwrite ("busy": let them run a moment and try again).
    Returns "" (written, or refused: the process says that itself), else
    why they were not written, for the blind line."""
    for _ in range(PATCH_TRIES):
        try:
            with others_stopped(borrowed) as world:
                places = thread_places(world)
                if len(places) <= PLACES_MAX and not borrowed.write(
                        places_at, struct.pack(f"<{len(places)}Q", *places)):
                    return "cannot write the threads' places into the process"
                status = _status_of(borrowed, patch, len(places))  # (too many: it says so)
        except AttachError as e:
            return str(e)
        if status != "busy":
            return status
        time.sleep(0.002)
    return (f"a thread was part-way through the first bytes of its allocator's functions each of "
            f"{PATCH_TRIES} times its threads were stopped")


def detach(pid, say=None):
    """Stop tracing an attached process: routing undone, a last report
    written (reason detach).  Returns (thread, ms kept)."""
    maps = read_maps(pid)
    found = loaded_library(maps)
    if not found:
        raise AttachError(f"process {pid} is not attached (libmtrace.so is not loaded in it)")
    path, base = found
    names = ("mlk_detach", "mlk_detach_patches_left", "mlk_detach_unpatch")
    ours = symbol_offsets(_in_process_root(pid, path.removesuffix(" (deleted)")), names)
    if "mlk_detach" not in ours:
        raise AttachError(f"process {pid}: its libmtrace.so cannot detach (an older build?)")
    libc_path, libc_base = _check_process(pid, maps)
    with borrowed_thread(pid, maps, libc_path, libc_base, say) as borrowed:
        _status_call(borrowed, base + ours["mlk_detach"])
        if "mlk_detach_unpatch" in ours and borrowed.call(base + ours["mlk_detach_patches_left"]) & 0xFFFFFFFF:
            _unpatch_with_threads_stopped(borrowed, base + ours["mlk_detach_unpatch"])
    return borrowed.tid, borrowed.kept_ns / 1e6


def _unpatch_with_threads_stopped(borrowed, unpatch):
    """The executable's entries patched by the attach get their own first
    bytes back, written with the other threads stopped (inert hooks left
    in place otherwise: the program runs as it did, one jump slower)."""
    try:
        with others_stopped(borrowed):
            _status_call(borrowed, unpatch)
    except AttachError as e:
        borrowed.say(f"detach: its own allocator's entries stay routed through inert hooks ({e})")


def wait_for_reporter(pid, timeout=10.0):
    """(started, report directory, program name, blind) of an attached
    process: started is True once its reporter runs, False as soon as the
    process says none could start (a seccomp filter that forbids clone: no
    use waiting), None if the time ran out; directory and name are None
    when its segment cannot be read; blind is what the hook cannot see in
    it (its segment's `blind` line), or ""."""
    from libmemleak.live.client import open_segment, LiveError
    deadline = time.monotonic() + timeout
    where = (None, None, "")
    while True:
        try:
            segment, fd = open_segment(pid)
            try:
                h = segment.header
                blind = segment.string(h.blind_off, min(h.blind_len, 1024)) if h.blind_len else ""
                where = (segment.report_dir(), segment.program_name(), blind)
                reporter = h.reporter_pid
            finally:
                segment.close()
                os.close(fd)
            if reporter != 0:
                return (reporter > 0, *where)
        except LiveError:
            pass
        if time.monotonic() > deadline:
            return (None, *where)
        time.sleep(0.02)


def last_report_written(pid, timeout=10.0):
    """After detach: True once the process's last report is written, False
    when it has no reporter to write it (none could start)."""
    from libmemleak.live.client import open_segment, LiveError
    deadline = time.monotonic() + timeout
    while True:
        try:
            segment, fd = open_segment(pid)
            try:
                h = segment.header
                if h.final_done:
                    return True
                if h.reporter_pid < 0:
                    return False
            finally:
                segment.close()
                os.close(fd)
        except LiveError:
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
