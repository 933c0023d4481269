"""Reading a file the traced program wrote (a report, its perf map), as
hostile input: believed only when it is a regular file owned by the
program's user, opened without following a symbolic link (a reader with
more rights -- an exporter run as root -- must not be steered to another
file), and read to at most a bound."""

import os
import stat


def read_owned(path, owner, limit, unchanged=None, dir_fd=None):
    """(key, data) of the file at `path` (relative to `dir_fd` if given) if
    it is a regular file of uid `owner` no larger than `limit`; key is
    (size, mtime) -- when it equals `unchanged` the file is not read again
    and data is None.  None when it is not to be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != owner or st.st_size > limit:
            return None
        key = (st.st_size, st.st_mtime_ns)
        if key == unchanged:
            return key, None
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return key, b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def owner_of(pid):
    """The uid process `pid` runs as (its /proc directory's owner), or None."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
