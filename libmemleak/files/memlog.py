"""The .memlog report format (spec/memlog.md): write one, and read one back.

    +63360 +12
    <TAB>FUNCTION<TAB>(MODULE)<TAB>FILE:LINE
    <TAB>/usr/lib/libfoo.so+0x1a2b

Entries are written largest byte change first; `#` header lines are
`# key: value`.  The reader is strict about what it needs and tolerant of
what it does not know, and says where a file is broken."""

import os
import re
from dataclasses import dataclass, field

from libmemleak.files import report_names, stack_tables
from libmemleak.symbols import Frame

INLINED_MARK = " [inlined]"


class MemlogError(Exception):
    """A .memlog file that cannot be read; the message names file and line."""


@dataclass(slots=True)
class Entry:
    bytes: int
    blocks: int | None
    frames: list                    # of Frame (read back: module/file may be None)
    extra: tuple = ()               # the fields after the counts (allocs=+3, kind=new, ...)
    frames_text: str | None = None  # the frame lines already rendered (a writer's cache)
    # What the frame lines are, in 16 bytes (stack_tables.stack_identity): a
    # stack's identity for a fold of many reports, which then keeps no text
    # per stack (5 KB at a deep Python stack's 40 lines).  None: not read.
    identity: bytes | None = None


@dataclass
class Misuse:
    """A misuse of the allocator, as a report lists it (misuse=KIND
    entries): how many more times it happened since the previous report,
    the misusing call's frames and the block's allocation frames."""
    kind: str                       # MISUSE_WORDS' keys: double-free, invalid-free, mismatch, size-mismatch, ...
    call: str                       # free, delete, delete[], aligned-delete, aligned-delete[], realloc
    times: int                      # more since the previous report
    frames: tuple                   # the misusing call's stack, innermost first
    alloc_frames: tuple = ()        # the block's allocation stack (empty: not known)
    block: str = ""                 # the family that made the block: malloc, new, new[], aligned-new... ("": not known)
    size: int | None = None         # the block's size as allocated
    given: int | None = None        # a sized delete's size
    where: str = ""                 # an invalid free's pointer: stack, global, not-a-block, interior, pool-chunk...
    address: str = ""               # ... its address (0x...)
    freed_frames: tuple = ()        # a double free caught in the quarantine: the first free's stack
    offset: int | None = None       # an interior pointer: how far into its block
    align: int | None = None        # an alignment mismatch: the block's alignment (0: default)
    given_align: int | None = None  # ... and the one the delete gave (0: none)


# How a report's `quarantine` header begins when quarantine= was asked for
# and could not start.
QUARANTINE_REFUSED = "not started"

# What valgrind says of each misuse (memcheck's words), for people.
MISUSE_WORDS = {
    "double-free": "Invalid free() / delete / delete[] / realloc()",
    "invalid-free": "Invalid free() / delete / delete[] / realloc()",
    "mismatch": "Mismatched free() / delete / delete []",
    "size-mismatch": "Mismatched new/delete size value",
    "align-mismatch": "Mismatched new/delete alignment",
}


@dataclass
class Report:
    header: dict                    # key -> value (strings), in file order
    entries: list
    misuse: list = field(default_factory=list)  # of Misuse, in file order
    truncated: str = ""             # why the file looks cut short (its reader says so), or ""


# A resource kind's name (memleak_resource_acquire's; "fd"), as entries
# (resource=NAME) and header keys (resource-live NAME:) carry it: one word.
_UNSAFE_RESOURCE = re.compile(r"[^A-Za-z0-9._+@%~-]")


def resource_name(raw):
    """A resource kind's name as the traced program wrote it (bytes), cleaned."""
    return _UNSAFE_RESOURCE.sub("_", raw.decode("ascii", "replace"))[:31]


# A Python frame's module column: its line is FUNCTION (python) FILE:LINE
# (docs/memlog.md).
PYTHON_MODULE = "python"


def format_frame(frame):
    if frame.function is None:
        if frame.module is None:
            return f"\t{frame.offset:#x}"
        return f"\t{frame.module}+{frame.offset:#x}"
    name = frame.function + (INLINED_MARK if frame.inlined else "")
    text = f"\t{name}\t({frame.module})"
    if frame.file:
        text += f"\t{frame.file}:{frame.line}" if frame.line else f"\t{frame.file}"
    return text


# Control characters: C0, DEL and C1 (\x9b is a terminal's CSI on its own).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
# Those a report file may not carry -- all but tab and newline, the format's own.
_FILE_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PLAIN_BYTES = b"\t\n" + bytes(range(0x20, 0x7f))


def file_text(data):
    """A file's bytes as text a reader may keep: undecodable bytes kept as
    surrogates, control characters (but tab and newline) as '?'.  A file of
    printable ASCII alone -- nearly every report -- is known so by one
    bytes.translate, three times faster than looking with the pattern."""
    text = data.decode("utf-8", "surrogateescape")
    return text if not data.translate(None, _PLAIN_BYTES) else _FILE_CONTROLS.sub("?", text)


def header_text(value):
    """A header value on one line: control characters (a newline that would
    start a forged header line, an escape sequence) shown as '?'."""
    return _CONTROLS.sub("?", str(value))


def render_frames(frames):
    return "\n".join(format_frame(f) for f in frames)


def parse_frame(text):
    """One frame line of an entry (tab-separated, as written) as a Frame."""
    return _parse_frame(text)


def _parse_frame(text):
    parts = text.split("\t")
    if len(parts) == 1:
        token = parts[0]
        if "+0x" in token:
            module, _, off = token.rpartition("+0x")
            try:
                return Frame(None, module, int(off, 16))
            except ValueError:
                pass
        try:
            return Frame(None, None, int(token, 16) if token.startswith("0x") else int(token))
        except ValueError:
            return Frame(token, None, 0)  # a bare module path, as the original MTrace wrote
    function = parts[0]
    inlined = function.endswith(INLINED_MARK)
    if inlined:
        function = function[: -len(INLINED_MARK)]
    module = parts[1]
    if module.startswith("(") and module.endswith(")"):
        module = module[1:-1]
    file = line = None
    if len(parts) > 2 and parts[2]:
        file, sep, num = parts[2].rpartition(":")
        if sep and num.isascii() and num.isdigit() and len(num) < 10:
            line = int(num)
        else:
            file = parts[2]
    return Frame(function, module, 0, file, line, inlined)


# A file is header lines, entries with their frame lines, and blank lines,
# in that grammar and nothing else: split in C by one regular expression
# (findall: no match object per piece), so that a reader of 20 reports of
# 100,000 stacks is not a Python loop over every line.  Each piece is
# (header line, entry line, its newline, its frame lines, blank line), and
# together they are the whole text unless something broke the grammar.
_PIECES = re.compile(r"(#[^\n]*\n?)|([-+@][^\n]*)(\n?)((?:\t[^\n]*\n?)*)|(\n)")
HEADS_KEPT = 1 << 16   # entry lines (less their stack=) remembered as read: "+32 +1 allocs=+1" recurs
BLOCKS_KEPT_BYTES = 64 << 20  # entries' frame lines remembered as read; past this they are forgotten
# A parse cache holding this key (True) makes entries without their text
# (frames_text None; their identity and frames only): a reader that folds
# each report as it is read keeps no text per stack (series.read_series).
WITHOUT_TEXT = "entries without text"


def _pieces(text):
    """(the pieces of text before anything broken, the offset of what broke
    the grammar or None)."""
    pieces = _PIECES.findall(text)
    if sum(map(len, map("".join, pieces))) == len(text):
        return pieces, None
    pos = count = 0
    for m in _PIECES.finditer(text):
        if m.start() != pos:
            break
        pos, count = m.end(), count + 1
    return pieces[:count], pos


def _line_of(text, pieces, piece):
    """The line number of `piece` (one of pieces, as it is) in text."""
    k = next(k for k, p in enumerate(pieces) if p is piece)
    return text.count("\n", 0, sum(map(len, map("".join, pieces[:k])))) + 1


def parse(text, source="<report>", cache=None, path=None, load=None):
    """The Report in `text`.  cache: a dict kept across calls (the files of
    one process share most frame lines and their stack table), mapping
    frame text to frames.  path: where the text was read (its stack
    table's earlier reports are its siblings); load(path): their text, or
    None (read() reads them as it reads this one)."""
    header, entries, misuse, table_cut = _parse_part(text, source, cache, path, load)
    return Report(header, entries, misuse, table_cut or _cut_short(text, header, entries))


def _parse_part(text, source, cache, path, load, line0=0, header=None):
    """(header, entries, misuse, why its table looks cut short) of `text`:
    a whole report, or a part of one that begins at an entry, line0 lines
    into the file (read_file), whose header was read already (`header`)."""
    cache = {} if cache is None else cache
    heads = cache.setdefault("entry heads", {})
    if len(heads) > HEADS_KEPT:
        heads.clear()
    texts = not cache.get(WITHOUT_TEXT)
    blocks = cache.setdefault("frame blocks", {})
    header, entries, misuse = {} if header is None else header, [], []
    # the stack table's lines; (entry index, stack, piece, head) of entries naming one
    definitions, named = [], []
    pieces, broken = _pieces(text)
    for piece in pieces:
        h, first, _, block, _ = piece
        if h:
            if not entries:
                _header_line(h, header)
            continue
        if not first:
            continue
        if first[0] == "@":
            definitions.append((first, block, piece))
            continue
        # The entry line less its stack= (the last field, written so by
        # the reporter), whose numbers are read once for all its repeats.
        line, sep, stack = first.rpartition(" stack=")
        if not (sep and stack.isdigit()):
            line, stack = first, None
        head = heads.get(line)
        if head is None:
            head = heads[line] = _entry_head(line, source, lambda: line0 + _line_of(text, pieces, piece))
        if head[3] is not None:  # a misuse entry, or a stack= the fast way above did not take
            if head[3] is True:
                misuse.append(_misuse_of(head[2], _frames_known(block, cache)[0]))
                continue
            stack = head[3]
        if stack is not None and not block:  # frames in the stack table (written last): then
            named.append((len(entries), stack, piece, head))
            entries.append(None)
            continue
        known = blocks.get(block) or _frames_known(block, cache)
        entries.append(Entry(head[0], head[1], known[0], head[2], known[1] if texts else None, known[2]))
    if broken is not None:
        line = line0 + text.count("\n", 0, broken) + 1
        bad = text[broken:text.find("\n", broken) if "\n" in text[broken:] else len(text)]
        if bad.startswith("\t"):
            raise MemlogError(f"{source}:{line}: frame line before any entry")
        raise MemlogError(f"{source}:{line}: expected an entry like '+1024 +2', got {bad[:60]!r}")
    table_cut = ""
    if definitions or named:
        table_cut = _name_stacks(entries, named, definitions, header, source, cache, path, load, text, pieces)
    return header, entries, misuse, table_cut


def _frames_known(block, cache):
    """(frames, text, identity) of an entry's frame lines: one tuple of
    frames, one text and one identity per distinct stack, shared by every
    entry that prints it -- while the blocks remembered are fewer than
    BLOCKS_KEPT_BYTES (then they are forgotten and read again: a fold's
    memory follows the distinct stacks, not their texts)."""
    blocks = cache.setdefault("frame blocks", {})
    known = blocks.get(block)
    if known is None:
        kept = cache.get("frame block bytes", 0)
        if kept > BLOCKS_KEPT_BYTES:
            blocks.clear()
            kept = 0
        text = block.rstrip("\n")
        known = blocks[block] = (tuple(_frame_of(line[1:], cache) for line in block.split("\n") if line),
                                 text, stack_tables.stack_identity(text))
        cache["frame block bytes"] = kept + 2 * len(block)
    return known


def _header_line(line, header):
    key, sep, value = line[1:].strip().partition(":")
    if sep:
        header[key.strip()] = value.strip()


_HEADER_END = re.compile(rb"(?:^|\n)[^#\n]")  # the first line that is neither header nor blank


def read_header(path):
    """The header of the report at `path`, as parse() would read it, from
    the beginning of the file only (as far as the header goes: a line of
    it may be long)."""
    def header_bytes(f):
        data, end = bytearray(), None
        while len(data) <= MAX_REPORT_BYTES:  # (a file that grows as it is read stops there)
            chunk = f.read(1 << 16)
            data += chunk
            end = _HEADER_END.search(data, max(0, len(data) - len(chunk) - 1))
            if end is not None or not chunk:
                break
        return bytes(data[:end.start() if end else len(data)])
    header = {}
    for line in file_text(_read_report(path, header_bytes)).split("\n"):
        if line.startswith("#"):
            _header_line(line, header)
    return header


def _entry_head(line, source, line_number):
    """(bytes, blocks or None, the other fields, True if it is a misuse
    entry else its stack= or None) of an entry's first line."""
    fields = line.split()
    try:
        nbytes = int(fields[0])
        blocks = int(fields[1]) if len(fields) > 1 and fields[1][:1] in "+-" else None
    except ValueError:
        raise MemlogError(f"{source}:{line_number()}: expected an entry like '+1024 +2', "
                          f"got {line.rstrip()[:60]!r}") from None
    extra = tuple(fields[2 if blocks is not None else 1:])
    if extra and extra[0].startswith("misuse="):
        return nbytes, blocks, extra, True
    if extra and extra[-1].startswith("stack="):
        return nbytes, blocks, extra[:-1], extra[-1][6:]
    return nbytes, blocks, extra, None


def _name_stacks(entries, named, definitions, header, source, cache, path, load, text, pieces):
    """Give the entries that name a stack of the table (stack=N) its
    frames: the table's definitions in this report and the earlier ones of
    its run (docs/memlog.md, "Stack tables").  Returns why the table looks
    cut short ("" if it does not): it does not end with @end, and the
    entries whose stacks are gone with its end are left without frames."""
    frames_of = lambda block: _frames_known(block, cache)[0]
    at = None
    if definitions and not text.endswith("\n") and not definitions[-1][1]:
        definitions = definitions[:-1]  # the line the file was cut inside (said: no @end)
    try:
        mine = []
        for head, lines, at in definitions:
            mine.append(stack_tables.definition(head, lines, frames_of))
        at = None
        seq = header.get("seq", "")
        seq = int(seq) if seq.isascii() and seq.isdigit() and len(seq) < 19 else 0
        first = stack_tables.table_from(header, seq)
        if first is None:
            raise stack_tables.StackTableError("it names stacks of a table (stack=) but says no "
                                               "stack-table-from")
        where = (os.path.dirname(path or source), report_names.run_name(path or source))
        scope = stack_tables.scope_of(first, seq, cache.setdefault("stack tables", {}), where,
                                      lambda: _siblings(path, load), frames_of, not cache.get(WITHOUT_TEXT))
        whole = bool(mine) and mine[-1][0] == "end"
        scope.add(seq, mine)
        lost, known = 0, scope.stacks
        for index, stack, at, head in named:
            got = known.get(stack)
            if got is None:
                try:
                    got = scope.stack(stack)
                except stack_tables.Unresolved:
                    if whole and not scope.missing:
                        raise  # a table that names what it never defines: not ours
                    got, lost = ((), "", None), lost + 1
            entries[index] = Entry(head[0], head[1], got[0], head[2], got[1], got[2])
        at = None
        if not whole:
            return f"its stack table ends early ({lost} entries' stacks are not there)"
        if lost:
            gone = sorted(scope.missing)
            many = len(gone) > 1
            return (f"{lost} entries without frames: their stacks are defined in report{'s' if many else ''} "
                    f"{', '.join(map(str, gone[:8]))}{' (and more)' if len(gone) > 8 else ''} of this "
                    f"process, which {'are' if many else 'is'} not there")
        return ""
    except stack_tables.StackTableError as e:
        line = f":{_line_of(text, pieces, at)}" if at is not None else ""
        raise MemlogError(f"{source}{line}: {e}") from None


def _siblings(path, load):
    """{seq: a function giving that report's text, or None} for the reports
    of the process whose report is at `path` (same directory, same
    PROG-PID[@NS]): one listing of the directory."""
    m = report_names.REPORT_NAME.match(os.path.basename(path or ""))
    if not m:
        return {}
    directory = os.path.dirname(path)
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return {}
    found = {}
    for name in names:
        n = report_names.REPORT_NAME.match(name)
        if n and (n["prog"], n["pid"], n["ns"]) == (m["prog"], m["pid"], m["ns"]) and len(n["seq"]) < 12:
            found[int(n["seq"])] = lambda name=name: _text_of(os.path.join(directory, name), load)
    return found


def _text_of(path, load):
    data = (load or _read_bytes)(path)
    return None if data is None else file_text(data)


def _read_bytes(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if os.fstat(f.fileno()).st_size > MAX_REPORT_BYTES:
            return None
        return f.read()


def _cut_short(text, header, entries):
    """Why a report looks cut short ("" if it does not): a reporter writes it
    whole and renames it into place, so a file that ends inside a line, or
    whose memory entries do not add up to its header's change (entries of
    resources, and the program's own custom blocks, are not in it), was cut
    -- copied half-way, or truncated since."""
    if text and not text.endswith("\n"):
        return "it ends inside a line"
    try:
        want = int(header["change-bytes"]), int(header["change-blocks"])
    except (KeyError, ValueError):
        return ""
    memory = [e for e in entries if not any(x.startswith("resource=") or x == "kind=custom" for x in e.extra)]
    got = sum(e.bytes for e in memory), sum(e.blocks or 0 for e in memory)
    if got != want:
        return (f"its entries add up to {got[0]:+,} bytes in {got[1]:+,} blocks, not the header's "
                f"change-bytes {want[0]:+,} and change-blocks {want[1]:+,}")
    return ""


def _misuse_of(fields, frames):
    """A misuse entry's fields (name=value) and frames as a Misuse: the
    last freed-frames=F frames are the first free's, the alloc-frames=N
    before them the allocation's.  Values it cannot read
    are left out (a file is the traced program's word)."""
    got = dict(f.partition("=")[::2] for f in fields)

    def number(name):
        try:
            return int(got.get(name, ""))
        except ValueError:
            return None
    f = max(0, min(number("freed-frames") or 0, len(frames)))
    n = max(0, min(number("alloc-frames") or 0, len(frames) - f))
    first, alloc_at = len(frames) - f - n, len(frames) - f
    return Misuse(got.get("misuse", ""), got.get("call", ""), number("times") or 0,
                  tuple(frames[:first]), tuple(frames[first:alloc_at]), got.get("block", ""),
                  number("size"), number("given"), got.get("where", ""), got.get("address", ""),
                  tuple(frames[alloc_at:]), number("offset"), number("align"), number("given-align"))


def misuse_fields(m):
    """A Misuse's first line, after the entry's '+0 +0': the fields it
    has (a number that is None, a word that is empty, a frame list that
    is empty are left out), in the order docs/memlog.md lists them."""
    fields = [f"misuse={m.kind}", f"call={m.call}", f"times={m.times:+d}"]
    for name, value in (("block", m.block), ("size", m.size), ("given", m.given), ("where", m.where),
                        ("address", m.address), ("offset", m.offset), ("align", m.align),
                        ("given-align", m.given_align),
                        ("alloc-frames", len(m.alloc_frames) or None),
                        ("freed-frames", len(m.freed_frames) or None)):
        if value not in (None, ""):
            fields.append(f"{name}={value}")
    return fields


def _frame_of(text, cache):
    key = ("frame", text)
    frame = cache.get(key)
    if frame is None:
        frame = cache[key] = _parse_frame(text)
    return frame


MAX_REPORT_BYTES = 4 << 30   # a report of millions of stacks is a few hundred MB


def printable(text):
    """`text` (a path, a message quoting a file) safe for a terminal: control
    characters and undecodable bytes shown as escapes."""
    text = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def printable_field(value, limit):
    """A field of a file shown to a person: printable (control characters
    as '?', as a report's are when it is read) and cut to `limit`
    characters, the cut said."""
    text = _CONTROLS.sub("?", str(value))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters, cut)"


def read(path, cache=None):
    return _read_report(path, lambda f: read_file(f, printable(path), cache, path))


PART_BYTES = 16 << 20  # a report read for a fold is parsed this much at a time (read_file)


def read_file(f, name, cache=None, path=None):
    """The Report in the open file `f`.  For a fold (cache holds
    WITHOUT_TEXT) a report without a stack table is parsed PART_BYTES at a
    time, cut where an entry begins: its entries keep no text, so a large
    report of deep stacks costs the reader a part's memory, not the file's
    three times over (bytes, text, pieces).  A report with a stack table
    is read whole (its entries are resolved at its end)."""
    first = f.read(PART_BYTES)
    if len(first) < PART_BYTES or not (cache or {}).get(WITHOUT_TEXT) or _has_table(first):
        if len(first) == PART_BYTES:  # (read again whole: first + the rest would be a second copy)
            f.seek(0)
            first = f.read()
        return parse_bytes(first, name, cache, path)
    header, entries, misuse, lines, rest, text = None, [], [], 0, first, ""
    while True:
        more = f.read(PART_BYTES)
        data = rest + more
        cut = max(data.rfind(b"\n+"), data.rfind(b"\n-")) + 1 if more else len(data)
        if cut <= 0:  # (one entry longer than a part: read on)
            rest = data
            continue
        text, rest = file_text(data[:cut]), data[cut:]
        del data
        got = _parse_part(text, name, cache, path, None, lines, header)
        header = got[0]
        entries += got[1]
        misuse += got[2]
        lines += text.count("\n")
        if not more:
            return Report(header, entries, misuse, _cut_short(text, header, entries))


def _has_table(start):
    """Whether a report's first bytes say it has a stack table (or cannot
    tell: its header is longer than they are)."""
    end = re.search(rb"(?:^|\n)[^#\n]", start)
    return end is None or b"# stack-table-from:" in start[:end.start()]


def _read_report(path, take):
    """take(the open file) of the report at `path`, refused from its size
    alone when it is past MAX_REPORT_BYTES; MemlogError in one line."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_REPORT_BYTES:
                raise MemlogError(f"{printable(path)}: {size:,} bytes: too large for a report")
            return take(f)
    except OSError as e:
        raise MemlogError(f"{printable(path)}: {e.strerror}") from None


def parse_bytes(data, name, cache=None, path=None, load=None):
    """A report's bytes, read by the caller (`name` says where from; path
    and load: as for parse)."""
    # An escape sequence in a function name, say, never reaches a terminal
    # or an output: '?' as the file is read.
    return parse(file_text(data), name, cache, path, load)
