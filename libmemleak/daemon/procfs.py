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
