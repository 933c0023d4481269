"""A traced process's leak suspects as `libmemleak report` ranks them --
the same analysis over the same reports: its report files, read as they
are written (the exporter writes none).  Suspects need the series: a
stack is one when it grew across the intervals between reports.

The report files' directory is the one the process's segment names: the
process chose it, so a file there is believed only when it is a regular
file owned by the process's user, opened without following a symbolic
link (an exporter running as root must not be made to read another
file), and at most memlog's MAX_REPORT_BYTES.  Read again only when the
process has written a new report."""

from libmemleak.analysis.names import frame_text, shown_frames
from libmemleak.analysis.stack_fold import StackFold
from libmemleak.analysis.trends import analyse
from libmemleak.files import memlog
from libmemleak.files.owned import owner_of, read_owned
from libmemleak.files.series import Series, report_from

MAX_SITE = 200       # characters of a site label
MAX_REPORTS = 10000  # a longer series is not read again at every new report: no suspects served


class Suspects:
    def __init__(self, segment, pid):
        self.segment, self.pid = segment, pid
        self._seen_seq, self._ranked = 0, ()

    def top(self, k):
        """((rank, site, live bytes, bytes grown), ...) of the first k."""
        seq = int(self.segment.header.report_seq)  # (the process's to write: bounded)
        if seq > MAX_REPORTS:
            return ()
        if seq != self._seen_seq:
            self._seen_seq, self._ranked = seq, self._rank(seq)
        return self._ranked[:k]

    def _rank(self, last_seq):
        owner = owner_of(self.pid)
        if owner is None:
            return ()
        frames, problems, series = {memlog.WITHOUT_TEXT: True}, [], None
        fold = StackFold(last_seq)  # (each report folded as read: no entries kept, nor their text)
        for seq in range(1, last_seq + 1):
            found = None
            for path in self.segment.report_paths(seq):
                parsed = _read_owned(path, owner, frames)
                if parsed is not None:
                    found = report_from(path, parsed, problems)
                    break
            if found is None:
                continue
            (program, pid, executable, ns), report = found
            if series is None:
                series = Series(program, executable, pid, pid_namespace=ns, fold=fold)
            fold.add(len(series.reports), report)
            report.entries = None
            series.reports.append(report)
        if series is None:
            return ()
        fold.end(len(series.reports))
        a = analyse(series)
        ranked = []
        for rank, t in enumerate(a.suspects, 1):
            shown, _, _ = shown_frames(t.frames, series.executable, 1, a.layer)
            site = frame_text(shown[0]) if shown else "?"
            ranked.append((rank, site[:MAX_SITE], t.live_bytes, t.growth_bytes))
        return tuple(ranked)


def _read_owned(path, owner, frames):
    """The parsed report at path, if it is a regular file of `owner`'s."""
    found = read_owned(path, owner, memlog.MAX_REPORT_BYTES)
    if found is None:
        return None
    def load(sibling):  # an earlier report holding stacks this one names: believed likewise
        got = read_owned(sibling, owner, memlog.MAX_REPORT_BYTES)
        return got[1] if got else None
    try:
        return memlog.parse_bytes(found[1], memlog.printable(path), frames, path, load)
    except memlog.MemlogError:
        return None
