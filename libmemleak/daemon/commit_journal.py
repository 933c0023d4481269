"""A report's baseline commit, written down before the report is put in
place: what the reporter is about to write into the segment's stacks
(each stack's reported bytes, blocks and allocations := the snapshot's).

The commit runs stack by stack after the report's rename; a reporter
killed in the middle leaves some stacks committed and others not, and
its successor cannot tell which -- its next report would count again
part of what that report counted.  With the journal it finishes the
commit instead (setting a stack's baseline twice to the same values
changes nothing): no report repeats another's deltas.  The journal goes
when the commit is done.

The file lies in the report directory, hidden (.PROG-PID-SEQ.commit),
owner-only, made with exclusive create and never through a symbolic
link; read back only as a regular file of our own user, of the size its
count says, for the seq asked, every id below the segment's stack count
(Segment.recommit)."""

import os
import struct
from array import array

from libmemleak.daemon import report_core
from libmemleak.files.owned import read_owned
from libmemleak.files.report_names import commit_journal_name, report_in_place

MAGIC = b"MLKCJ\x00\x01\x00"
HEAD = struct.Struct("<8sQQ")  # magic, seq, records
RECORD_WORDS = 4               # id, live bytes, live blocks, allocations


def write(directory, prog, pid, ns, seq, put_records):
    """Write report `seq`'s journal: its head, then the records
    put_records(fd) writes (their count, or -1); False if it could not be
    (the successor then says the report may be counted again, as without
    one)."""
    path = os.path.join(directory, commit_journal_name(prog, pid, seq, ns))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:  # a killed reporter's, of this seq: stale
            os.unlink(path)
            fd = os.open(path, flags, 0o600)
    except OSError:
        return False
    try:
        os.lseek(fd, HEAD.size, os.SEEK_SET)
        n = put_records(fd)
        # (the head last: a journal cut short by a kill reads as none)
        return n >= 0 and os.pwrite(fd, HEAD.pack(MAGIC, seq, n), 0) == HEAD.size
    except OSError:
        return False
    finally:
        os.close(fd)


def read(directory, prog, pid, ns, seq, max_records):
    """The records written for report `seq`, or None (none, not ours, not
    of that seq, or not whole)."""
    path = os.path.join(directory, commit_journal_name(prog, pid, seq, ns))
    got = read_owned(path, os.geteuid(), HEAD.size + max_records * RECORD_WORDS * 8)
    data = got[1] if got else b""
    if len(data) < HEAD.size:
        return None
    magic, got_seq, n = HEAD.unpack_from(data)
    if magic != MAGIC or got_seq != seq or n > max_records or len(data) != HEAD.size + n * RECORD_WORDS * 8:
        return None
    records = array("q")
    records.frombytes(data[HEAD.size:])
    return records


def remove(directory, prog, pid, ns, seq):
    try:
        os.unlink(os.path.join(directory, commit_journal_name(prog, pid, seq, ns)))
    except OSError:
        pass


class ReportPlace:
    """Where one process's reports go, as its reporter's commits see it:
    a report in place, a commit's journal written, finished or gone."""

    def __init__(self, seg, directory, prog, pid, ns):
        self.seg, self.where = seg, (directory, prog, pid, ns)

    def in_place(self, seq):
        """Whether report `seq`'s file is there (whatever its label)."""
        directory, prog, pid, ns = self.where
        return report_in_place(directory, prog, pid, seq, ns)

    def journal(self, seq, snap):
        """Before report `seq`'s rename: its commit written down."""
        return write(*self.where, seq, lambda fd: report_core.write_commit_records(
            fd, snap.ids, snap.live_bytes, snap.live_blocks, snap.reported_bytes, snap.reported_blocks,
            snap.alloc_count, snap.reported_allocs))

    def finish(self, seq):
        """A killed reporter's commit of report `seq`, finished from its
        journal: True, or False where there is none to finish it by."""
        records = read(*self.where, seq, self.seg.stacks_in_use())
        done = records is not None and self.seg.recommit(records)
        self.done(seq)
        return done

    def done(self, seq):
        remove(*self.where, seq)
