"""The stack table a reporter writes into its reports (docs/memlog.md,
"Stack tables"; native/reporter/stack_table.c): a stack of the process is
written once -- as nodes of a tree of frames grown from the outermost
caller inward, each frame's text once -- and entries name it (stack=N).

One table serves the reports of one reporter in one directory: a new
reporter (a standby that took over, the keeper writing a last report), a
report written elsewhere (the final report's fallback directory) or a
write that failed begins a new table, and that report's header says so
(`stack-table-from` is its own seq): it defines every stack it names."""

import os
from array import array

from libmemleak.daemon.report_core import chunks, extend_to, ffi, lib, zeros

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
        self.parent = zeros(1024)
        self.line = zeros(1024, "i")
        self.mark = zeros(1024, "i")
        self.slots = zeros(2048)
        self.line_mark = zeros(0, "i")
        self.key_node = array("q")   # key id -> its node (0: none)
        self.nodes = 1               # node 0 is "no caller"
        self.stamp = 0               # write attempts so far
        self.scope_first = 1         # the table's first attempt
        self.first_seq = None        # the seq of the table's first report
        self.directory = None        # where its reports are
        self.begun = False           # this attempt began a new table

    def begin(self, seq, directory):
        """A report (seq) is about to be written in `directory`: the seq
        whose report began the table it uses (its header's
        stack-table-from)."""
        self.stamp += 1
        if self.first_seq is None or directory != self.directory:
            self.scope_first, self.first_seq, self.directory = self.stamp, seq, directory
        return self.first_seq

    def failed(self):
        """The report was not written: what it defined is in no file, so
        the next report begins a new table."""
        self.first_seq = None

    def forget(self, key_ids):
        """Keys whose text was this report's only (partly symbolized)."""
        for key in key_ids:
            if key < len(self.key_node):
                self.key_node[key] = 0

    def _struct(self, keep, permanent_lines):
        keep += [ffi.from_buffer("int64_t[]", self.parent), ffi.from_buffer("int32_t[]", self.line),
                 ffi.from_buffer("int32_t[]", self.mark), ffi.from_buffer("int64_t[]", self.slots),
                 ffi.from_buffer("int32_t[]", self.line_mark)]
        return ffi.new("struct mlk_rc_table *", [keep[0], keep[1], keep[2], self.nodes, len(self.parent),
                                                 keep[3], len(self.slots), keep[4], len(self.line_mark),
                                                 permanent_lines, self.stamp, self.scope_first])

    def add_nodes(self, rows, texts):
        """Give every row's key its node, growing the tree as needed."""
        extend_to(self.key_node, len(texts.key_first), 0)
        extend_to(self.line_mark, texts.permanent_lines(), 0)
        at, total = 0, len(rows)
        while at < total:
            keep = []
            try:
                t = self._struct(keep, texts.permanent_lines())
                x = texts.texts_struct(keep, table=self)
                rows_ptr = rows.pointer()
                keep.append(rows_ptr)
                at = lib.mlk_rc_table_nodes(t, rows_ptr, at, total, x, x.key_node)
                self.nodes = t.nodes
            finally:
                for b in keep:
                    ffi.release(b)
            if at < total:
                self._grow()

    def _grow(self):
        more = len(self.parent)
        self.parent.extend(zeros(more))
        self.line.extend(zeros(more, "i"))
        self.mark.extend(zeros(more, "i"))
        if 2 * len(self.parent) > len(self.slots):
            self.slots = zeros(2 * len(self.slots))
            keep = []
            try:
                lib.mlk_rc_table_rehash(self._struct(keep, 0))
            finally:
                for b in keep:
                    ffi.release(b)

    def render(self, rows, texts, chunk_bytes=1 << 20):
        """The definitions rows need that the table does not have yet, as
        bytes pieces (a generator: nothing may be added to the store or the
        table until it is finished or closed)."""
        keep = []
        try:
            t = self._struct(keep, texts.permanent_lines())
            x = texts.texts_struct(keep, table=self)
            rows_ptr = rows.pointer()
            keep.append(rows_ptr)
            yield from chunks(lambda at, buf, cap, nxt: lib.mlk_rc_table_render(t, rows_ptr, at, len(rows), x,
                                                                                x.key_node, buf, cap, nxt),
                              len(rows), chunk_bytes)
            yield END
        finally:
            for b in keep:
                ffi.release(b)
