"""The stack table a reporter writes into its reports (docs/memlog.md,
"Stack tables"; native/reporter/stack_table.c): a stack of the process is
written once -- a line of frame numbers -- and each frame's text once, and
entries name the stack (stack=N).

One table serves the reports of one reporter in one directory: a new
reporter (a standby that took over, the keeper writing a last report), a
report written elsewhere (the final report's fallback directory) or a
write that failed begins a new table, and that report's header says so
(`stack-table-from` is its own seq): it defines every stack it names."""

import os
from array import array

from libmemleak.daemon.report_core import chunks, extend_to, ffi, lib

# MEMLEAK_STACK_TABLE=no: every entry with its frames, as reports were
# written before stack tables (for tools that read only that form).
ENV = "MEMLEAK_STACK_TABLE"


def stack_table_wanted():
    return os.environ.get(ENV, "yes").lower() not in ("no", "0", "off")


# A report's last line when it has a stack table: a file without it was
# cut short (docs/memlog.md).
END = b"@end\n"


class StackTable:
    def __init__(self):
        self.key_mark = array("i")   # key id -> the attempt that defined its stack (0: never)
        self.line_mark = array("i")  # line id -> the attempt that defined it
        self.stamp = 0               # write attempts so far
        self.scope_first = 1         # the table's first attempt
        self.first_seq = None        # the seq of the table's first report
        self.place = None            # where its reports are, and how they are named

    def begin(self, seq, place):
        """A report (seq) is about to be written at `place` (its directory
        and what names the process's reports there: a reader finds a
        table's reports by both, so any change begins a new table): the seq
        whose report began the table it uses (its header's
        stack-table-from)."""
        self.stamp += 1
        if self.first_seq is None or place != self.place:
            self.scope_first, self.first_seq, self.place = self.stamp, seq, place
        return self.first_seq

    def failed(self):
        """The report was not written: what it defined is in no file, so
        the next report begins a new table."""
        self.first_seq = None

    def render(self, rows, texts, chunk_bytes=1 << 20):
        """The definitions rows need that the table does not have yet, then
        END, as bytes pieces (a generator: nothing may be added to the store
        until it is finished or closed)."""
        extend_to(self.key_mark, len(texts.key_first), 0)
        extend_to(self.line_mark, texts.permanent_lines(), 0)
        keep = [ffi.from_buffer("int32_t[]", self.key_mark), ffi.from_buffer("int32_t[]", self.line_mark)]
        try:
            t = ffi.new("struct mlk_rc_table *", [keep[0], len(self.key_mark), keep[1], len(self.line_mark),
                                                  self.stamp, self.scope_first])
            x = texts.texts_struct(keep, table=self)
            rows_ptr = rows.pointer()
            keep.append(rows_ptr)
            yield from chunks(lambda at, buf, cap, nxt: lib.mlk_rc_table_render(t, rows_ptr, at, len(rows), x,
                                                                                buf, cap, nxt),
                              len(rows), chunk_bytes)
            yield END
        finally:
            for b in keep:
                ffi.release(b)
