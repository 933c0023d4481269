"""What the reporter and the live commands read of a process in /proc: its
directory (a live thread's, when the main thread is gone) and the lines
of its maps."""

import os


def proc_dir(pid):
    """/proc/PID, or /proc/PID/task/TID of a live thread when the main thread
    has exited (pthread_exit): a zombie main thread has no fd, maps, mem,
    exe or root of its own while the others run."""
    def alive(stat_path):
        with open(stat_path, "rb") as f:
            return f.read().rpartition(b")")[2].split()[:1] not in ([b"Z"], [b"X"])
    try:
        if alive(f"/proc/{pid}/stat"):
            return f"/proc/{pid}"
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            if alive(f"/proc/{pid}/task/{tid}/stat"):
                return f"/proc/{pid}/task/{tid}"
    except OSError:
        pass
    return f"/proc/{pid}"


INIT_PID_NAMESPACE = 0xEFFFFFFC  # the kernel's PROC_PID_INIT_INO: the first pid namespace's inode


def pid_namespace(pid="self"):
    """The inode of `pid`'s pid namespace (/proc/PID/ns/pid), or None."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def namespace_tag(pid="self"):
    """What tells apart pids numbered in `pid`'s pid namespace from those of
    every other: the namespace's inode, or None in the first pid namespace
    (whose pids are the host's, unique).  Reports named by a pid that
    another namespace also has -- pid 1 of ten containers writing to one
    directory -- carry it in their names."""
    ns = pid_namespace(pid)
    return ns if ns not in (None, INIT_PID_NAMESPACE) else None


def report_pid(pid):
    """The PID part of the names of `pid`'s reports as a reporter started
    inside it writes them: its pid, or -- in a pid namespace of its own --
    the pid it knows itself by and the namespace (report_names.report_name)."""
    from libmemleak.daemon.trust import innermost_pid  # (trust reads reports: not for every user of this)
    ns = namespace_tag(pid)
    return f"{innermost_pid(pid)}@{ns}" if ns else str(pid)


def not_allowed(pid, advice, what="read it"):
    """Why /proc/PID refused us, in a line: another user's process -- or,
    when it is ours or we are root, the kernel's ptrace access check (a
    process that made itself non-dumpable, one in a user namespace above
    ours, a security module), which no change of user mends."""
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        owner = None
    me = os.geteuid()
    if owner is not None and owner != me and me != 0:
        return f"process {pid} belongs to another user (uid {owner}): not allowed to {what} ({advice})"
    who = "we are root" if me == 0 else "it is this user's"
    return (f"process {pid}: the kernel's ptrace access check refused to let us {what} although {who} "
            "(it may be non-dumpable, run in a user namespace above ours, or a security module may "
            "forbid it)")


def maps_entry(line):
    """(lo, hi, perms, offset, path) of a line of /proc/PID/maps -- or of
    a mapping's first line in /proc/PID/smaps -- or None for any other."""
    parts = line.split(None, 5)
    if len(parts) < 5 or len(parts[1]) != 4:
        return None
    lo, _, hi = parts[0].partition("-")
    try:
        return int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16), parts[5].strip() if len(parts) > 5 else ""
    except ValueError:
        return None


def process_start(pid):
    """What names `pid`'s process for as long as this machine runs, where
    a pid alone is reused: "BOOT-ID/TICKS" (the boot's id, the process's
    start in clock ticks since boot), or None if /proc does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        with open(f"/proc/{pid}/stat", "rb") as f:
            ticks = int(f.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None
    return f"{boot}/{ticks}"


def how_it_ended(pid, start):
    """How the process `pid` (started at `start`: process_start) ended, read
    from its zombie while its parent has not reaped it yet (`run --wait`
    keeps it until the final report is on disk): ("exit", status),
    ("signal", number), or None -- not a zombie (reaped, or not ended), or
    another process by that pid now (by `start`; None: not checked here)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        state, ticks, code = fields[0], int(fields[19]), int(fields[49])
    except (OSError, ValueError, IndexError):
        return None
    if state != b"Z" or (start is not None and not start.endswith(f"/{ticks}")):
        return None
    return ("signal", code & 0x7f) if code & 0x7f else ("exit", code >> 8 & 0xff)


def still_running(start, pid, pid_ns):
    """Whether the process a report names by `start` (process_start) and
    `pid` (in pid namespace tag `pid_ns`, None for the host's) runs now:
    True or False, or None where this process cannot tell (another boot or
    machine, pids numbered in another namespace, a field we never wrote)."""
    if not isinstance(start, str) or start.count("/") != 1 or pid_ns != namespace_tag():
        return None
    boot = start.partition("/")[0]
    now = process_start("self")
    if now is None or now.partition("/")[0] != boot:
        return None
    return process_start(pid) == start
