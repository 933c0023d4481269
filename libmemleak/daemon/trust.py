"""What a reporter may take from a segment it did not write.

The traced program can write every byte of its segment, including the
directory its reports go to.  A reporter that runs with more privilege than
the program has now (root's keeper holding a worker that dropped to nobody,
root's reporter of a daemon that called setuid) must not let those bytes
choose where it creates files: that would be a file write as root anywhere.
So a claimed directory is taken only from a process that runs wholly as the
reporter's own user -- it could write there itself -- and a dropped uid can
never be regained, so a claim read *before* that check was written while
the process was still trusted.  Names are made safe separately
(report_names.safe_name)."""

import os
import stat
import tempfile

from libmemleak.files.report_names import safe_name


def _numbers(path, key):
    """The numbers of the `key:` line of a /proc file (status, fdinfo);
    [] if it cannot be read or has no such line."""
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(key + b":"):
                    return [int(n) for n in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def runs_only_as(pid, uid):
    """Are the real, effective, saved and filesystem uids of `pid` all
    `uid`?  False if that cannot be read (the process is gone, say)."""
    uids = _numbers(f"/proc/{int(pid)}/status", b"Uid")
    return len(uids) == 4 and all(u == uid for u in uids)


def vouched_directory(claimed, pid, otherwise):
    """`claimed` (read from pid's segment before this call) if pid runs only
    as our user; else `otherwise` -- a directory this reporter chose.
    Returns (directory, whether the claim was refused)."""
    if claimed and runs_only_as(pid, os.geteuid()):
        return claimed, False
    return otherwise, True


def kernel_name(pid):
    """The file name of pid's executable as the kernel knows it (a process
    cannot rewrite that); None if it cannot be read (gone, say)."""
    try:
        return safe_name(os.path.basename(os.readlink(f"/proc/{int(pid)}/exe")).removesuffix(" (deleted)"))
    except (OSError, ValueError):
        return None


# -- pids across pid namespaces ------------------------------------------------
# A process in a pid namespace (`unshare --pid`, a container, Chromium's
# sandbox) knows itself -- and writes into its segment -- by a pid that
# means another process, or none, out here.  The kernel translates: the pid
# SO_PEERCRED gives and the pid a pidfd's fdinfo shows are in the namespace
# of the one who asks (of the /proc it reads, for fdinfo).

def pid_of_pidfd(fd):
    """The pid of the process pidfd `fd` refers to, as this /proc numbers
    it; None if unknown (an old kernel, the process reaped: -1)."""
    pid = _numbers(f"/proc/self/fdinfo/{int(fd)}", b"Pid")
    return pid[0] if pid and pid[0] > 0 else None


def innermost_pid(pid):
    """The pid `pid` knows itself by (the last of NSpid), or `pid`."""
    return (_numbers(f"/proc/{int(pid)}/status", b"NSpid") or [int(pid)])[-1]


def namespace_pids(pid):
    """Every pid `pid` has, from this /proc's namespace inwards (NSpid of
    /proc/PID/status): {pid} for a process in no namespace of its own."""
    return set(_numbers(f"/proc/{int(pid)}/status", b"NSpid")) | {int(pid)}


def fallback_directory():
    """Where a final report goes when its directory refuses it:
    /tmp/libmemleak-UID, owner-only, made here if missing; if that name is
    taken by anything else (another user's directory, a symlink), a fresh
    private directory."""
    path = f"/tmp/libmemleak-{os.geteuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="libmemleak-")
    try:
        st = os.lstat(path)
    except OSError:
        return tempfile.mkdtemp(prefix="libmemleak-")
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
        return path
    return tempfile.mkdtemp(prefix="libmemleak-")
