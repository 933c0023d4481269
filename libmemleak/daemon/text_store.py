"""The frame lines of the reporter's stack keys (TextStore), as C writes
entries and stack tables from them (native/reporter/report_core.c,
stack_table.c): each distinct line stored once as bytes, each key a run
of line ids."""

from array import array

from libmemleak.daemon.report_core import _q, chunks, extend_to, ffi, lib, zeros
from libmemleak.daemon.stack_keys import Bound

CUT_KIND = 0x40  # in TextStore.key_kind: entries say cut=DEPTH (report_core.c)
NO_TEXT, DERIVED = -1, -2  # key_first: MLK_RC_NO_TEXT, MLK_RC_DERIVED (report_core.h)
KIND_TEXT_KINDS, KIND_TEXT_WIDTH = 64, 48  # mlk_rc_texts.kind_text (report_core.c)


class TextStore:
    """The frame lines of each stack key, as C reads them to write entries:
    each distinct line (the frames of one return address) stored once as
    bytes, each key a run of line ids: made from its frame tokens when read
    (DERIVED: a key whose every frame was named once for all -- nearly
    every key; report_core.h), or stored, 4 bytes per frame, for a key
    with a frame named for it alone (merged Python frames, a
    symbolization cut short).

    Texts added between begin_temporary() and end_temporary() (frames whose
    symbolization was cut short by the time budget) are dropped at the end,
    so the next report tries again."""

    def __init__(self):
        self.arena = bytearray()
        self.line_off = array("q", [0])
        self.pool = array("i")
        self.key_first = array("q")
        self.key_lines = array("i")
        self.key_kind = array("b")  # MLK_KIND_* per key (kind=), | CUT_KIND if cut at the depth (cut=)
        self._mark = None
        self._temporary_keys = []
        # key id -> the first key id whose frames print the same (-1: none
        # before it); such keys are one entry (Rows.merge_same_text).
        self.canon = array("q")
        # The first key of each distinct text (kind, line ids), as C finds
        # it (stack_keys.c mlk_rc_store.texts): a slot is a word, half a
        # hash and key + 1.
        self.texts = zeros(1024, "Q")
        self.ntexts = 0
        self._line_of_text = {}   # text -> line id, so equal lines get one id
        self._keys = self._token_line = None  # where DERIVED runs come from (derive_from)

    def derive_from(self, keys, token_line):
        """Keys given text by add_keys are runs of their tokens' lines:
        `keys` (the KeyTable) and `token_line` (FrameLines') are read for
        them from now on."""
        self._keys, self._token_line = keys, token_line

    def grow_keys(self, nkeys):
        extend_to(self.key_first, nkeys)
        extend_to(self.key_lines, nkeys, 0)
        extend_to(self.key_kind, nkeys, 0)
        extend_to(self.canon, nkeys)

    def add_line(self, text):
        """The line id of `text` (one or more frame lines, no final newline):
        equal texts share one id, so that equal stacks have equal runs."""
        if self._mark is None:
            known = self._line_of_text.get(text)
            if known is not None:
                return known
        data = text.encode("utf-8", "surrogateescape")
        self.arena += data + b"\n" if data else b""
        self.line_off.append(len(self.arena))
        line_id = len(self.line_off) - 2
        if self._mark is None:  # temporary lines are dropped after the report
            self._line_of_text[text] = line_id
        return line_id

    def has(self, key_id):
        return key_id < len(self.key_first) and self.key_first[key_id] != NO_TEXT

    def set_key(self, key_id, line_ids, kind=0):
        """The frame lines of a key, and its allocator family (MLK_KIND_*)."""
        self.grow_keys(key_id + 1)
        self.key_kind[key_id] = kind
        self.key_first[key_id] = len(self.pool)
        self.key_lines[key_id] = len(line_ids)
        self.pool.extend(array("i", line_ids))
        if self._mark is not None:
            self._temporary_keys.append(key_id)
        else:
            while not self._with_store(lambda store, bind: lib.mlk_rc_text_canon(store, key_id)):
                self._more_texts()

    def add_keys(self, keys, key_ids, token_line, python_token, kind_byte):
        """set_key, in C, for the keys `key_ids` (array('q')) whose every
        frame token has a line in token_line and none is Python's to merge
        (python_token); kind_byte: a key's kind code -> its key_kind.
        Returns the key ids left for set_key.  (keys and token_line are
        those of derive_from.)"""
        self.grow_keys(keys.nkeys)
        n, left, nleft, at = len(key_ids), zeros(len(key_ids)), ffi.new("int64_t *"), 0
        if 2 * (self.ntexts + n) > len(self.texts):  # (a million keys: one rebuild, not twelve)
            self._more_texts(2 * (self.ntexts + n))
        while at < n:
            def fill(store, bind):
                return lib.mlk_rc_key_texts(keys.words.struct(bind), bind("int64_t[]", key_ids), at, n,
                                            bind("int32_t[]", token_line), bind("uint8_t[]", python_token),
                                            min(len(token_line), len(python_token)), bind("int8_t[]", kind_byte),
                                            len(kind_byte), store, bind("int64_t[]", left), n, nleft)
            at = self._with_store(fill)
            if at < n and 2 * (self.ntexts + 1) > len(self.texts):
                self._more_texts()
        return left[:nleft[0]]

    def _derive(self, bind):
        """Where derived runs come from, as C reads it (NULL: none yet)."""
        if self._keys is None:
            return ffi.NULL
        words = self._keys.words
        return ffi.new("struct mlk_rc_derive *", [
            bind("int32_t[]", words.pool), bind("int64_t[]", words.start), bind("int32_t[]", words.len),
            words.count, bind("int32_t[]", self._token_line), len(self._token_line)])

    def _with_store(self, call):
        """call(the store as C sees it, bind)'s answer; the texts table's
        count kept."""
        with Bound() as bind:
            derive = self._derive(bind)
            store = ffi.new("struct mlk_rc_store *", [
                bind("int32_t[]", self.pool), bind("int64_t[]", self.key_first), bind("int32_t[]", self.key_lines),
                bind("int8_t[]", self.key_kind), bind("int64_t[]", self.canon), len(self.key_first),
                bind("uint64_t[]", self.texts), len(self.texts), self.ntexts, derive])
            got = call(store, bind)
            self.ntexts = store.ntexts
            return got

    def _more_texts(self, at_least=0):
        """Twice the texts table's slots (or more, to at_least slots: a word each),
        refilled."""
        size = len(self.texts) * 2
        while size < at_least:
            size *= 2
        while True:
            self.texts = zeros(size, "Q")
            if self._with_store(lambda store, bind: lib.mlk_rc_texts_rebuild(store)):
                return
            size *= 2

    def line_text(self, line_id):
        """The text of one line id (a frame's lines, newline-separated)."""
        text = bytes(self.arena[self.line_off[line_id]:self.line_off[line_id + 1]])
        return text.decode("utf-8", "surrogateescape").rstrip("\n")

    def line_ids(self, key_id):
        """The line ids of a key that has text."""
        first = self.key_first[key_id]
        if first == DERIVED:
            line_of = self._token_line
            return [line_of[t] for t in self._keys.tokens(key_id) if line_of[t] != -1]
        return self.pool[first:first + self.key_lines[key_id]]

    def key_text(self, key_id):
        """The frame lines of a key that has them, one string each."""
        lines = []
        for line_id in self.line_ids(key_id):
            text = bytes(self.arena[self.line_off[line_id]:self.line_off[line_id + 1]])
            lines += text.decode("utf-8", "surrogateescape").rstrip("\n").split("\n") if text else []
        return lines

    def begin_temporary(self):
        self._mark = (len(self.arena), len(self.line_off), len(self.pool))

    def end_temporary(self):
        arena, lines, pool = self._mark
        del self.arena[arena:]
        del self.line_off[lines:]
        del self.pool[pool:]
        for key_id in self._temporary_keys:
            self.key_first[key_id] = NO_TEXT
        self._temporary_keys, self._mark = [], None

    def permanent_lines(self):
        """Line ids below this one outlive the report being written."""
        return (self._mark[1] if self._mark is not None else len(self.line_off)) - 1

    def render(self, rows, chunk_bytes=1 << 20, since_seq=None, depth=0, kind_words=None, table=None):
        """The entries of `rows` in the report format, as bytes pieces of
        about chunk_bytes.  Nothing may be added to the store until the
        generator is finished or closed (C holds its buffers).  since_seq:
        the report seq of each age bucket of a scan report's rows.  depth:
        the configured depth, which keys marked cut (CUT_KIND) say they were
        cut at.  kind_words: kind code -> what its entries say of it
        (" resource=fd"), for kinds whose words C does not know.  table: the
        StackTable whose stacks entries name (stack=), or None: every
        entry with its frames."""
        keep = []
        try:
            texts = self.texts_struct(keep, since_seq, depth, kind_words, table, rows.scans)
            rows_ptr = rows.pointer()
            keep.append(rows_ptr)
            yield from chunks(lambda at, buf, cap, nxt: lib.mlk_rc_render(rows_ptr, at, len(rows), texts, buf,
                                                                          cap, nxt),
                              len(rows), chunk_bytes)
        finally:
            for b in keep:
                ffi.release(b)

    def texts_struct(self, keep, since_seq=None, depth=0, kind_words=None, table=None, scans=None):
        """The store as C reads it (struct mlk_rc_texts); the buffers it
        points into are appended to `keep`, for the caller to release.
        scans: the rows' scan words (report_core.Rows.scans), or None."""
        mine = [ffi.from_buffer("char[]", self.arena), _q(self.line_off),
                ffi.from_buffer("int32_t[]", self.pool), _q(self.key_first),
                ffi.from_buffer("int32_t[]", self.key_lines),
                ffi.from_buffer("int8_t[]", self.key_kind)]
        seqs = ffi.new("int32_t[8]", list(since_seq)[:8]) if since_seq is not None else ffi.NULL
        kinds = bytearray(KIND_TEXT_KINDS * KIND_TEXT_WIDTH)
        for code, words in (kind_words or {}).items():
            data = words.encode("ascii", "replace")[:KIND_TEXT_WIDTH - 1]
            if 0 < code < KIND_TEXT_KINDS:
                kinds[code * KIND_TEXT_WIDTH:code * KIND_TEXT_WIDTH + len(data)] = data
        mine.append(ffi.from_buffer("char[]", kinds))
        pool = self._mark[2] if self._mark is not None else len(self.pool)
        if scans is not None:
            mine.append(ffi.from_buffer("int64_t[]", scans))
        scan_words = mine[7] if scans is not None else ffi.NULL
        derive = self._derive(lambda ctype, a: mine.append(ffi.from_buffer(ctype, a)) or mine[-1])
        texts = ffi.new("struct mlk_rc_texts *", mine[:6] + [len(self.key_first), seqs, depth, mine[6],
                                                             table is not None, INLINE_ENTRIES, pool,
                                                             self.permanent_lines(), scan_words, derive])
        keep += mine
        if derive != ffi.NULL:
            keep.append(derive)  # (C holds it through texts: it must live as long)
        return texts


# The first entries of a report written with a stack table carry their
# frames inline as well (docs/memlog.md): the largest changes read in a
# text editor as before; the rest name their stack.
INLINE_ENTRIES = 100


