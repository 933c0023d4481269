"""The reporter: a Python process outside the traced program.  It waits for
a report request (signal, mtrace, muntrace, exit), snapshots the segment,
diffs it against the previous report, symbolizes and writes the .memlog.
It also notices by itself when the program dies (final report) or execs
another image (it then leaves quietly: the new image has its own reporter).

The program starts it with the segment on fd 3 and a pidfd of the program
on fd 4 (see native/hook/control.c for how, and why that is safe).  Everything
else it needs is in the segment, including the baseline of the next report,
so a reporter that dies can be replaced without losing anything."""

import gc
import itertools
from array import array
import os
import time

from libmemleak.analysis.names import frame_text
from libmemleak.daemon import misuse, reachability, report_core
from libmemleak.daemon.diff import FrameResolver, diff_snapshot, totals
from libmemleak.daemon.stack_keys import KeyTable
from libmemleak.daemon.frame_lines import FrameLines
from libmemleak.daemon.report_header import header_lines
from libmemleak.daemon.report_reasons import (ENDS_REPORTER, FINAL_REASONS, commit_record, final_written,
                                              take_reason, written_reason)
from libmemleak.daemon.commit_journal import ReportPlace
from libmemleak.daemon.program_watch import ProgramWatch
from libmemleak.daemon.recorder import DRAIN_SECONDS, Recorder
from libmemleak.daemon.text_store import CUT_KIND, TextStore
from libmemleak.daemon.futex import futex_wait, futex_wake
from libmemleak.daemon.segment import RESOURCE_BASE
from libmemleak.daemon.stack_table import StackTable, stack_table_wanted
from libmemleak.daemon.procfs import namespace_tag, process_start
from libmemleak.daemon.trust import fallback_directory, pid_of_pidfd
from libmemleak.files.memlog import Frame
from libmemleak.files.memlog_write import render, write_report
from libmemleak.files.report_names import report_name, safe_label
from libmemleak.symbols import Symbolizer
from libmemleak.symbols.answer_cache import AnswerCache
from libmemleak.symbols.perfmap import PerfMap

SEGMENT_FD, PIDFD = 3, 4
POLL_SECONDS = 0.2
WARM_SLICE_SECONDS = 0.05   # idle symbolization per wake-up, so requests wait little
WARM_BATCH = 64             # stacks keyed and named at a time while idle, at first:
WARM_BATCH_MAX = 4096       # doubled up to this while a batch takes < WARM_SLICE_SECONDS / 8
DEFAULT_SYMBOL_BUDGET = 15.0
MAX_EXIT_TIMEOUT = 86400  # seconds: the most exit_timeout= takes (a segment may say anything)


# A pid namespace's first process is its init: when it dies, the kernel
# kills every other process in the namespace -- its reporter and standby
# among them -- so a SIGKILL (`docker kill`, the OOM killer) leaves no final
# report, and nothing is left to say so then.  Said at the start instead,
# and by `report` where the last report is not a final one.
NAMESPACE_INIT_WARNING = ("the program is pid 1 of its pid namespace (a container's entry point): "
                          "if it is killed by SIGKILL, the kernel kills its reporter with it and "
                          "its last state is lost; trace it from outside the namespace to keep "
                          "it (libmemleak run unshare ... PROGRAM, or a traced shell as pid 1)")


def say(message):
    """One line on stderr (the program's), prefixed like the hook library's."""
    try:
        os.write(2, f"libmemleak: {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass


def say_bug(what, e):
    """A bug of ours caught so the program's run goes on: one line with
    where it happened (the innermost frame); raised under MEMLEAK_DEBUG."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f" (at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})" if tb is not None else ""
    say(f"{what} {type(e).__name__}: {e}{where}; please report this")
    if os.environ.get("MEMLEAK_DEBUG"):
        raise e


class Reporter:
    """Reports for one segment.  The keeper makes one for each dead
    descendant, with the segment and pidfd it holds and a Symbolizer shared
    by all of them."""

    def __init__(self, segment, directory, segment_fd=SEGMENT_FD, pidfd=PIDFD, symbolizer=None,
                 name=None, pid=None, keeper=None, standby=None):
        self.seg = segment
        self.h = segment.header
        # Where reports go and what they are called, fixed before the program
        # could rewrite its segment (trust.py): from our argv (main), or as
        # the keeper vouched for them at the descendant's hand-over.
        self.directory = directory
        self.name = name or segment.program_name()
        # The program's pid as our /proc numbers it: its segment's may be
        # from a pid namespace of its own (trust.py).
        self.pid = pid or pid_of_pidfd(pidfd) or self.h.pid
        segment.pid = self.pid
        # Our pids are a pid namespace's own (a container's, unshare's):
        # the reports' names say which, or pid 1 of two of them collide.
        self.ns_tag = namespace_tag()
        self.symbolizer = symbolizer or Symbolizer(cache=AnswerCache.default())
        self.warned = set()
        self.budget = _float_env("MEMLEAK_SYMBOL_BUDGET", DEFAULT_SYMBOL_BUDGET)
        self.keys = KeyTable()   # stack key -> key id, for the reporter's lifetime
        self.resolver = FrameResolver((), self.keys)  # address -> module, stack id -> key id
        self.warm_next = 0       # the first stack id idle warm-up has not looked at
        self.warm_batch = WARM_BATCH  # stacks it looks at a time (warm())
        # The frame lines of each key id, once fully symbolized: each frame's
        # lines stored once (frame_lines.py), a key as a run of line ids.  C
        # writes entries from it.
        self.texts = TextStore()
        # Each stack written once, and entries naming it (stack_table.py).
        self.table = StackTable() if stack_table_wanted() else None
        self.watch = ProgramWatch(self.pid, os.fstat(segment_fd).st_ino, pidfd)
        # The process by a name no other will have: read while its pidfd
        # says it lives (a dead descendant's keeper reporter writes none).
        self.process_start = process_start(self.pid)
        if self.watch.dead():
            self.process_start = None
        self.written = []        # paths of the reports this reporter wrote
        self.scan_asked = False  # a pending request asked for a reachability scan
        self.scan_refused = None # why the scan asked for with this report could not be made
        # Bytes of each stack's mappings touched as of the last report: an
        # entry says touched= when its count moves.
        self.touched_before = report_core.zeros(0)
        self.touched_refused = None  # why that could not be told for this report
        self.ages = reachability.AgeHistory()  # what this reporter's earlier scans saw
        # `libmemleak run` (not -q) asked for the list of reports at the end,
        # for the process it started -- not a forked one's (its parent-pid is
        # set) nor an exec'd descendant's: the root's line counts those.
        self.announce = (bool(os.environ.get("MEMLEAK_ANNOUNCE")) and not segment.header.parent_pid
                         and os.environ.get("MEMLEAK_ROOT_PID") == str(self.pid))
        # MEMLEAK_SYMBOLIZE=no: frames as module+offset, symbolized on another
        # host (the unsymbolized pprof export, go tool pprof with
        # PPROF_BINARY_PATH); the header's build-ids name the files.
        self.symbolize = os.environ.get("MEMLEAK_SYMBOLIZE", "yes").lower() not in ("no", "0", "off")
        self.frame_lines = FrameLines(self.keys, self.texts, self.symbolizer, self.symbolize, self.kind_value,
                                      lambda: PerfMap(self.pid, self.h.pid))
        self.recorder = Recorder.of(self)  # the event log (record=), or None
        self.place = ReportPlace(self.seg, self.directory, self.name, self.pid, self.ns_tag)
        self.handover = commit_record(self.h, self.place)  # what the next report says of one cut short, or None
        self.keeper = keeper     # the root's first reporter's keeper (reporter_main), or None
        self.standby = standby   # its standby (standby.Standby: replaced if killed), or None
        self.announce_later = False  # the exit's summary waits for the descendants' reports
        self.ended = None  # how the process ended, where its zombie said (death_reason)

    # -- the loop -----------------------------------------------------------

    def run(self):
        h = self.h
        h.reporter_pid = os.getpid()
        if h.pid == 1 and not h.parent_pid and h.reporter_starts <= 1:
            say(NAMESPACE_INIT_WARNING)
        request_addr = self.seg.field_address("request_seq")
        drain = lambda r: r.drain()  # noqa: E731
        try:
            while True:
                if self.standby is not None:
                    self.standby.check(self.say_once)
                self.record(drain)
                if h.settle_asked != h.settle_done:
                    self.settle_before_exec()
                request = h.request_seq
                if request != h.done_seq:
                    reason = self.handle(request)
                    if reason in ENDS_REPORTER:  # (handle ended the log with this report)
                        h.final_done = 1
                        return 0
                    continue
                if self.watch.dead():
                    if not h.exec_pending:  # else its last act was to exec
                        self.final_report()
                        h.final_done = 1
                    self.finish_log("exec" if h.exec_pending else "death")
                    return 0
                if self.watch.exec_happened(urgent=bool(h.exec_pending)):
                    self.finish_log("exec")
                    return 0
                if h.collecting and self.watch.signal_blocked_pending(h.report_signal):
                    self.report("signal")  # from the segment, as after a death
                    continue
                if not self.warm():
                    futex_wait(request_addr, request, DRAIN_SECONDS if self.recorder else POLL_SECONDS)
        finally:
            if h.reporter_pid == os.getpid():
                h.reporter_pid = 0

    def finish_log(self, reason, dead=None):
        """The event log's end."""
        self.record(lambda r: r.finish(reason, dead=self.watch.dead() if dead is None else dead))

    def record(self, step):
        """A step of the event log's: a bug in it stops the log (said once,
        the hook told to log no more) but never the reports."""
        recorder = self.recorder
        if not recorder:
            return
        try:
            step(recorder)
        except Exception as e:
            self.recorder = None
            self.h.events_stop = 1
            say_bug("event log stopped: recorder error", e)

    def stack_names(self, ids):
        """[id, kind, frame lines] of each good stack of `ids`, symbolized
        as reports name them (for the event log)."""
        seg, out = self.seg, []
        self.update_resolver(seg.modules())
        for i in ids:
            if not seg.stack_ok(i):
                continue
            key_id = self.resolver.key_id(seg.stacks, i)
            partial = [] if self.texts.has(key_id) else self.frame_lines.symbolize_keys([key_id])
            if self.texts.has(key_id):
                lines = self.texts.key_text(key_id)
            else:
                lines = []
                for item in (partial[0][1] if partial else []):
                    text = item if type(item) is str else self.texts.line_text(item)
                    lines += text.split("\n") if text else []
            out.append([i, seg.stacks[i].kind, lines])
        return out

    def say_once(self, message):
        if message not in self.warned:
            self.warned.add(message)
            say(message)

    def warm(self):
        """Symbolize new stacks while idle, a slice at a time, so that a
        report request finds most frames cached.  Returns True if there is
        more to do."""
        seg = self.seg
        if self.h.stacks_used <= self.warm_next or not self.symbolize:
            return False
        end = seg.refresh()
        if self.warm_next >= end:
            return False
        self.update_resolver(seg.modules())
        stop = time.monotonic() + WARM_SLICE_SECONDS
        resolver = self.resolver
        while self.warm_next < end:
            began = time.monotonic()
            if began > stop:
                return True
            # A batch at a time, keyed in C and named in one call: each call
            # binds the stores' buffers for C, which cost more than a key.
            # Batches grow while they are quick (stacks whose frames are all
            # named: a program making stacks fast outran batches of 64) and
            # shrink when naming new frames makes them slow, so
            # that a request waits at most about a slice.
            first, self.warm_next = self.warm_next, min(end, self.warm_next + self.warm_batch)
            ids = array("q", [i for i in range(first, self.warm_next) if seg.stack_ok(i)])
            resolver.key_ids(seg.stacks, ids)
            new = [k for k in {resolver.key_of[i] for i in ids} if not self.texts.has(k)]
            if new:
                self.frame_lines.symbolize_keys(new)
            took = time.monotonic() - began
            if took < WARM_SLICE_SECONDS / 8:
                self.warm_batch = min(WARM_BATCH_MAX, 2 * self.warm_batch)
            elif took > WARM_SLICE_SECONDS / 2:
                self.warm_batch = max(WARM_BATCH, self.warm_batch // 2)
        settle_memory()
        return False

    def update_resolver(self, modules):
        if tuple(modules) != self.resolver.modules:
            self.resolver = FrameResolver(modules, self.keys)

    def reason(self):
        """The reason of the report that answers the pending requests
        (report_reasons.take_reason), noting whether one asked for a scan."""
        found, scan = take_reason(self.h)
        self.scan_asked = self.scan_asked or scan
        return found

    def handle(self, request):
        """Answers the pending requests with a report -- unless the report
        that answers them is written already -- and posts done_seq; the
        report's reason (None: none written, nor known)."""
        reason = self.reason()
        if reason is None:
            # Written by a reporter that died before it posted done_seq: if
            # that was the exit report, it is the last (the program, released,
            # ends now: no death report may follow it).
            reason = written_reason(self.h)
        elif reason == "exit":
            descendants = self.settle_descendants()
            # (the root asking from its handler for a signal that ends it:
            # its final report, a death by that signal -- shm_layout.h)
            self.report("death" if self.h.dying_signal else reason)
            if descendants is not None:
                self.wait_for_descendants(*descendants)
        else:
            self.report(reason)
        if reason in ENDS_REPORTER:
            # Before the program goes on: the log ends where its last report
            # does, complete when `run` returns (and the hook logs no more).
            self.finish_log(reason, dead=False)
        self.h.done_seq = request
        futex_wake(self.seg.field_address("done_seq"))
        return reason

    def settle_descendants(self):
        """The root exits: its keeper writes the last reports of the
        descendants that died before it, while we write its own, and the
        program's exit waits for both (keeper.settle_dead_descendants).
        (event, when asked), or None."""
        if self.keeper is None or not self.h.exit_timeout_s:
            return None
        self.announce_later = self.announce
        return self.keeper.settle_dead_descendants(), time.monotonic()

    def settle_before_exec(self):
        """The root is about to exec (shm_layout.h, settle_asked): the new
        image has a keeper of its own, so this one writes the last reports
        of the descendants dead by now first."""
        h = self.h
        asked = h.settle_asked
        if self.keeper is not None and h.exit_timeout_s:
            self.keeper.settle_dead_descendants().wait(self.descendants_wait())
        h.settle_done = asked
        futex_wake(self.seg.field_address("settle_done"))

    def descendants_wait(self):
        """Seconds the root waits for its descendants' reports, at most: half
        of the time it waits for its exit report (the rest is its own's)."""
        return min(self.h.exit_timeout_s, MAX_EXIT_TIMEOUT) / 2

    def wait_for_descendants(self, done, asked):
        left = self.descendants_wait() - (time.monotonic() - asked)
        if not done.wait(max(left, 0)):
            self.say_once("descendants' last reports are still being written as the program "
                          "exits; they land in a moment")
        if self.announce_later:
            self.announce_later = False
            theirs = len(self.keeper.final_paths) + self.keeper.finals_elsewhere
            say(written_summary(self.written) + (f", and the last reports of {theirs} "
                                                 f"descendants" if theirs else ""))

    def final_report(self):
        """The program died without asking (exit handlers skipped, a signal,
        SIGKILL, OOM kill): write what the segment holds -- unless its final
        report is written already.  A process's reports end with exactly
        one final report, however many reporters saw it die (one started in
        the moment its exit report was being finished, say)."""
        h = self.h
        if h.final_done:
            h.done_seq = h.request_seq  # nobody waits any more: the process is gone
            return
        if h.request_seq != h.done_seq:
            # A request was pending as it died.  Its exit (or muntrace) asked
            # for this report; anything else (a signal, a snapshot) is
            # answered by the death report, which says how the process ended.
            request = h.request_seq
            reason = self.reason()
            if reason is not None or not final_written(self.h):  # else: done, only not posted
                self.report(reason if reason in FINAL_REASONS else self.death_reason())
            h.done_seq = request
            futex_wake(self.seg.field_address("done_seq"))
        elif h.collecting:
            self.report(self.death_reason())

    def death_reason(self):
        """"exit" for a process that exited although no exit hook of ours
        ran (a Go program's exit_group) -- where its zombie says so
        (ProgramWatch.how_it_ended) --, else "death"."""
        if not self.h.dying_signal:
            self.ended = self.watch.how_it_ended(self.process_start)
        return "exit" if self.ended and self.ended[0] == "exit" else "death"

    # -- one report ---------------------------------------------------------

    def report(self, reason):
        try:
            try:
                path = self._report(reason)
            except OSError as e:
                path = self.cannot_write(reason, e)
            if path:
                self.written.append(path)
                if reason not in FINAL_REASONS:
                    self.record(lambda r: r.on_report(reason))
                if reason in FINAL_REASONS and self.announce and not self.announce_later:
                    say(written_summary(self.written))
        except Exception as e:  # a reporter bug must not surface as a traceback
            self.h.report_errors += 1
            say_bug("reporter error", e)

    def cannot_write(self, reason, error):
        """The report directory refused a report.  A report that is not the
        last keeps its data in the segment for the next one; the last one
        has no next, so it goes to a fallback directory (said where).
        Messages name the directory, never a temporary file in it."""
        self.h.report_errors += 1
        directory = self.directory
        first_time = (error.errno, directory) not in self.warned
        self.warned.add((error.errno, directory))
        if reason not in FINAL_REASONS:
            if first_time:
                say(f"cannot write a report in {directory}: {error.strerror}; "
                    "the data is kept for the next report")
            return None
        try:
            fallback = fallback_directory()
            path = self._report(reason, fallback)
        except OSError as e2:
            say(f"cannot write the final report in {directory} ({error.strerror}) nor in a "
                f"fallback directory ({e2.strerror}): it is lost")
            return None
        say(f"cannot write a report in {directory}: {error.strerror}; "
            f"the final report went to {path}")
        return path

    def _report(self, reason, directory=None):
        # A report makes hundreds of thousands of short-lived containers and
        # no cycles: collections in the middle of it only scan (diffing
        # 100,000 changed stacks: 0.83 -> 0.59 s without them).
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._report_now(reason, directory)
        finally:
            if collecting:
                gc.enable()

    def _report_now(self, reason, directory=None):
        """Write one report (in `directory`, else the configured one) and
        return its path."""
        snap, scan = self.take_snapshot(reason)
        touched = self.measure_touched()
        self.update_resolver(snap.modules)
        deltas = diff_snapshot(snap, self.resolver, scan.per_stack if scan else None,
                               scan.per_stack_age if scan else None,
                               (touched.per_stack, self.touched_before) if touched else None)
        sums = totals(snap)
        misused = misuse.changed(misuse.records(self.h, self.seg.stack_ok))
        misuse_keys = {sid: self.resolver.key_id(snap.stacks, sid) for sid in misuse.stacks_of(misused)}
        texts = self.texts
        texts.grow_keys(self.keys.nkeys)
        self.symbolizer.deadline = time.monotonic() + self.budget
        self.symbolizer.skipped = 0
        try:
            # Symbolize first (the header says whether that was complete),
            # then C writes the entries from the text store as the file is
            # written: a report of a million stacks never exists whole.
            partial = self.frame_lines.symbolize_keys(list(deltas.rows.textless(texts.key_first)) +
                                          [k for k in set(misuse_keys.values()) if not texts.has(k)])
            seq = self.h.report_seq + 1
            label = self.label_of(reason)
            where = directory or self.directory
            lines = header_lines(self, snap, sums, seq, reason, scan, touched, label)
            if self.table:
                lines.append(("stack-table-from", self.table.begin(seq, (where, self.name, self.pid))))
            header = render(lines, ())
            texts.begin_temporary()  # the texts of partly symbolized keys: this report only
            try:
                for key_id, items in partial:
                    texts.set_key(key_id, [x if isinstance(x, int) else texts.add_line(x)
                                           for x in items], self.kind_code(key_id))
                report_core.extend_to(self.resolver.scratch, len(texts.canon))
                deltas.rows.merge_same_text(texts.canon, self.resolver.scratch)
                if snap.resources:  # their own section, after memory's
                    deltas.rows.resources_last(texts.key_kind, RESOURCE_BASE)
                # misuse entries last (before the body holds the store's buffers)
                misuse_text = misuse.entries_text(misused, lambda sid: texts.key_text(misuse_keys[sid]))
                body = texts.render(deltas.rows, since_seq=scan.bucket_seq if scan else None,
                                    depth=snap.depth, kind_words=self.resource_words(), table=self.table)
                defined = self.table.render(deltas.rows, texts) if self.table else None
                # The file may be in place from its rename on: its seq is
                # taken then, though the baseline is not committed yet (a
                # successor finishes the commit from its journal, and never
                # writes this seq again: commit_record()).
                def committing():
                    self.place.journal(seq, snap)
                    self.h.committing_seq = seq
                try:
                    path = write_report(where, report_name(self.name, self.pid, seq, label, self.ns_tag),
                                        itertools.chain([header], body, [misuse_text], defined or ()),
                                        before_rename=committing)
                except BaseException:
                    self.h.committing_seq = 0
                    self.place.done(seq)
                    if self.table:
                        self.table.failed()
                    raise
                finally:
                    body.close()
                    if defined:
                        defined.close()
            finally:
                texts.end_temporary()
        finally:
            self.symbolizer.deadline = None
        self.seg.commit_baseline(snap)
        self.h.report_seq = seq
        self.h.committing_seq = 0
        self.place.done(seq)
        self.handover = None
        misuse.commit(self.h, misused)
        self.seg.set_last_report(path)  # for memleak_report, which says it
        if scan:  # for memleak_leak_check, which returns its totals
            self.seg.set_check_totals(scan.bytes, scan.blocks, seq)
        if touched:
            self.touched_before = touched.per_stack
        settle_memory()
        return path

    def measure_touched(self):
        """How much of the program's mappings was ever touched
        (report_core.Touched); None when the process is gone (its pid may
        be another's now) or cannot be read (said in the header)."""
        self.touched_refused = None
        if self.watch.dead():
            return None
        got = self.seg.measure_touched(self.pid)
        if isinstance(got, str):
            self.touched_refused = got
            return None
        return got

    def take_snapshot(self, reason):
        """The segment's snapshot, and the reachability scan asked for
        with this report (None if none was, or it could not be made: said
        on stderr and in the header)."""
        self.scan_refused = None
        if not self.scan_asked or reason in ("death", "muntrace") or self.watch.dead():
            self.scan_asked = False
            return self.seg.take_snapshot(), None
        self.scan_asked = False
        try:
            return reachability.scan(self.pid, self.h, self.seg.take_snapshot, self.ages,
                                     self.h.report_seq + 1, self.seg,
                                     self.h.exiting_tid if reason == "exit" else 0)
        except reachability.ScanRefused as e:
            self.scan_refused = str(e)
            say(f"no scan: {e}")
            return self.seg.take_snapshot(), None

    def kind_code(self, key_id):
        """What the key's entries say of it: its allocator family
        (MLK_KIND_*) or resource kind (MLK_KIND_RESOURCE + its index), and
        CUT_KIND if its stack was cut at the depth."""
        return self.kind_value(self.keys.kind(key_id), self.keys.cut(key_id))

    def kind_value(self, kind, cut):
        """What an entry of this allocator family says of it (a TextStore
        key_kind), cut at the depth or not."""
        return self.seg.kind_code(kind) | (CUT_KIND if cut else 0)

    def resource_words(self):
        """Resource kind code -> what its entries say: " resource=NAME"."""
        return {RESOURCE_BASE + r: f" resource={name}" for r, name in enumerate(self.seg.resource_names())}

    def site_words(self, ip):
        """Where return address ip is, as a frame line says it
        (function (file:line), else module+offset)."""
        token = self.resolver.resolve(ip, self.h.unload_epoch)
        module, address, _ = self.keys.frames[token]
        if module is None:
            return f"{ip:#x}"
        frames = self.symbolizer.frames_for(module, address) if self.symbolize else []
        return frame_text(frames[0] if frames else Frame(None, module.path, address - module.base), full=True)

    def label_of(self, reason):
        """The label the program gave the report it asked for (memleak.h),
        as a file name may carry it; "" for any other report."""
        if reason != "call":
            return ""
        return safe_label(self.seg.api_label())

def written_summary(paths):
    """One line: which report files this process's reporter wrote."""
    if len(paths) == 1:
        return f"wrote {paths[0]}"
    if len({os.path.dirname(p) for p in paths}) == 1 and len(paths) > 3:
        return f"wrote {len(paths)} reports: {paths[0]} ... {os.path.basename(paths[-1])}"
    return f"wrote {len(paths)} reports: " + ", ".join(paths)


def settle_memory():
    """Move what the caches hold out of the cyclic garbage collector's
    sight.  Symbol caches are hundreds of thousands of long-lived objects
    without cycles; a full collection scanning them in the middle of a
    report took 0.1 s (of 0.18 s) for 5,000 stacks."""
    gc.collect(0)
    gc.freeze()


def _float_env(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        say(f"{name} must be a number of seconds; using {default:g}")
        return default


