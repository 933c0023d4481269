"""Which report answers the program's pending requests, and what a
reporter killed in the middle of one left its successor (the segment's
header says both: shm_layout.h, answering_seq and committing_seq).

A request is a reason's counter moved past its `seen_` counter; one
report answers every reason pending, named after the first in
REASON_FIELDS' order.  Taking the reasons is said in the header before
the report is written (answering_seq, answering_reason), and putting the
file in place before its baseline is committed (committing_seq): a
successor then finishes the request -- writes that report if it is not
written, else only posts done_seq -- and never writes a seq twice."""

REASON_FIELDS = (("exit", "exit_requests", "seen_exit"),
                 ("detach", "detach_requests", "seen_detach"),
                 ("muntrace", "muntrace_requests", "seen_muntrace"),
                 ("mtrace", "mtrace_requests", "seen_mtrace"),
                 ("scan", "scan_requests", "seen_scan"),
                 ("check", "check_requests", "seen_check"),  # memleak_leak_check: with a scan
                 ("call", "api_requests", "seen_api"),  # memleak_report: its label named
                 ("signal", "signal_requests", "seen_signal"),
                 ("snapshot", "snapshot_requests", "seen_snapshot"))
FINAL_REASONS = ("exit", "death", "muntrace", "detach")  # no report of this process follows
ENDS_REPORTER = ("exit", "detach")  # this reporter's work is done
ASKS_FOR_SCAN = ("scan", "check")


def take_reason(h):
    """(the reason of the report that answers the pending requests -- the
    first pending in REASON_FIELDS' order; None when that report is
    written already, by a reporter that died before it posted done_seq --,
    whether a scan was asked for with it).  The reasons are taken: their
    seen_ counters move, and the header says which report answers them.
    A scan asked for as the program exits is made in its exit report."""
    found, scan = None, False
    for i, (name, asked, seen) in enumerate(REASON_FIELDS):
        if getattr(h, asked) != getattr(h, seen):
            if found is None:
                found, h.answering_reason = name, i + 1
            setattr(h, seen, getattr(h, asked))
            scan = scan or name in ASKS_FOR_SCAN
    if found is not None:
        h.answering_seq = (h.report_seq + 1) & 0xffffffff  # taken: said before the report is written
    elif h.answering_seq and h.report_seq == h.answering_seq:
        return None, False  # the report of these reasons is written (its reporter died before done_seq)
    elif h.answering_seq and 0 < h.answering_reason <= len(REASON_FIELDS):
        found = REASON_FIELDS[h.answering_reason - 1][0]  # taken by a reporter that died: write it
        scan = found in ASKS_FOR_SCAN
    if found == "exit" and h.scan_at_exit:
        scan = True
    return found or "request", scan


def written_reason(h):
    """The reason of the report last taken, if it is written (by a
    reporter that died before it posted done_seq), else None."""
    if 0 < h.answering_reason <= len(REASON_FIELDS) and h.report_seq == h.answering_seq:
        return REASON_FIELDS[h.answering_reason - 1][0]
    return None


def final_written(h):
    """Whether the report last taken, and written, was a final one (an
    exit report whose reporter died before it posted done_seq)."""
    return written_reason(h) in FINAL_REASONS


def commit_record(h, place):
    """A reporter killed while it committed a report's baseline (its file
    in place): that seq is taken -- written again, the file would lose
    what the stacks committed already count.  The commit is finished from
    the journal the reporter wrote before the rename (place.finish:
    commit_journal.py); where there is none, the next report may count
    again what the others changed in it: what its header says, or None.
    (Killed before the rename -- committing_seq is said just before it,
    so place.in_place tells --: the report is written again under the
    same name, with all it held.)"""
    cut, h.committing_seq = h.committing_seq, 0
    if cut != (h.report_seq + 1) & 0xffffffff:
        return None
    if not place.in_place(cut):
        place.done(cut)
        return None
    finished = place.finish(cut)
    h.report_seq = cut  # (a request it answered is then seen written: take_reason)
    if finished:
        return None
    return (f"report {cut}'s reporter was killed as it committed that report's baseline: "
            f"this report may count again part of what report {cut} counted")
