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
(memlog.safe_name)."""

import os

from libmemleak.memlog import safe_name


def runs_only_as(pid, uid):
    """Are the real, effective, saved and filesystem uids of `pid` all
    `uid`?  False if that cannot be read (the process is gone, say)."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return all(int(u) == uid for u in line.split()[1:5])
    except (OSError, ValueError):
        pass
    return False


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
