"""Python frames of a traced CPython (#60; the hook's side is
native/hook/runtimes/cpython.c, the words' format shm_layout.h's
MLK_PY_* and MLK_KIND_PYCODE): the code objects' records the hook copied
into the segment, turned into names, files and lines; a stack's interpreter
words turned into PyFrames.  Everything here was written by the traced
program: every length and index is checked, and a record that does not
hold together is dropped, never trusted."""

import functools
from typing import NamedTuple

from libmemleak.daemon.layout import CONST
from libmemleak.files.memlog import PYTHON_MODULE, header_text
from libmemleak.symbols import Frame

TAG_SHIFT = CONST["MLK_PY_TAG_SHIFT"]
TAG_NATIVE = CONST["MLK_PY_TAG_NATIVE"]
TAG_CODE = CONST["MLK_PY_TAG_CODE"]
TAG_WHERE = CONST["MLK_PY_TAG_WHERE"]
ENTRY_BIT = 1 << CONST["MLK_PY_ENTRY_SHIFT"]
NO_INSTRUCTION = CONST["MLK_PY_NO_INSTRUCTION"]
ADDRESS_MASK = (1 << 47) - 1
RECORD_MAX_WORDS = 8192   # the hook's longest record is ~2,700 words (cpython.c's caps)


class PyFrame(NamedTuple):
    """One Python frame of a stack, as a report shows it."""
    function: str
    file: str
    line: int        # 0: not known
    entry: bool      # the first frame of its run of the evaluation loop


class CodeInfo(NamedTuple):
    name: str
    file: str
    firstline: int
    table: bytes     # co_linetable (the location table of 3.11 to 3.13)


class Interpreter(NamedTuple):
    version: int     # Py_Version (0x030b02f0: 3.11.2)
    eval_address: int
    frames_read: bool
    pymalloc: int    # MLK_PYMALLOC_*: its allocator routed, or why not (0: not said)

    def version_text(self):
        v = self.version
        text = f"{v >> 24}.{v >> 16 & 0xff}"
        return text + f".{v >> 8 & 0xff}" if v & 0xffff else text


def is_python_stack(frames):
    """Whether a stack's words are a native stack's id and Python frames."""
    return bool(frames) and frames[0] >> TAG_SHIFT == TAG_NATIVE


def _text(words, start, length, size):
    """A string the hook copied: `length` bytes of characters `size` wide."""
    data = b"".join(w.to_bytes(8, "little") for w in words[start:start + (length + 7) // 8])[:length]
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}.get(size)
    if codec is None or len(data) < length or length % size:
        return None
    return data.decode(codec, "replace")


def parse_record(words):
    """A record's words -> ("code", (address, fingerprint), CodeInfo), or
    ("interpreter", None, Interpreter), or None if it does not hold together."""
    if len(words) < 4 or len(words) > RECORD_MAX_WORDS:
        return None
    if words[0] == 0:
        status, pymalloc = words[3] & 0xff, words[3] >> 8
        if status not in (CONST["MLK_PY_FRAMES_READ"], CONST["MLK_PY_FRAMES_NOT_READ"]) or pymalloc > 255:
            return None
        return "interpreter", None, Interpreter(words[1] & 0xffffffff, words[2],
                                                status == CONST["MLK_PY_FRAMES_READ"], pymalloc)
    if len(words) < 5:
        return None
    lengths = [(words[2] & 0xffff, words[2] >> 16 & 0xff), (words[3] & 0xffff, words[3] >> 16 & 0xff)]
    table_len = words[4]
    at, texts = 5, []
    for length, size in lengths:
        text = _text(words, at, length, size)
        if text is None:
            return None
        texts.append(text)
        at += (length + 7) // 8
    if table_len > 8 * (len(words) - at):
        return None
    table = b"".join(w.to_bytes(8, "little") for w in words[at:at + (table_len + 7) // 8])[:table_len]
    firstline = words[1] >> 32
    firstline = firstline - (1 << 32) if firstline >= 1 << 31 else firstline
    # (The program's text: a file named with a newline or a tab would
    # otherwise forge a report's lines and fields.)
    name, file = (header_text(t) for t in texts)
    return "code", (words[0], words[1] & 0xffffff), CodeInfo(name or "?", file, firstline, table)


def _varint(table, i):
    value = shift = 0
    while i < len(table):
        b = table[i]
        i += 1
        value |= (b & 63) << shift
        shift += 6
        if not b & 64:
            break
    return value, i


def _svarint(table, i):
    value, i = _varint(table, i)
    return (-(value >> 1) if value & 1 else value >> 1), i


def line_at(info, index):
    """The line of instruction `index` (in code units) by the code's
    location table, the format of CPython 3.11 to 3.13 (Objects/locations.md):
    entries of a first byte (bit 7 set; the form in bits 3-6, the instructions it
    covers less one in bits 0-2) and the form's bytes.  0 where none is
    known; the function's first line before its first instruction."""
    if index == NO_INSTRUCTION:
        return info.firstline
    table, line, addr, i = info.table, info.firstline, 0, 0
    while i < len(table):
        first = table[i]
        if not first & 128:
            return 0  # not an entry's first byte: a table cut short or of another format
        form, length = first >> 3 & 15, (first & 7) + 1
        i += 1
        here = line
        if form == 15:      # no location
            here = 0
        elif form == 14:    # long: line delta, end line delta, column, end column
            delta, i = _svarint(table, i)
            line += delta
            here = line
            for _ in range(3):
                _, i = _varint(table, i)
        elif form == 13:    # no column: line delta
            delta, i = _svarint(table, i)
            line += delta
            here = line
        elif form >= 10:    # one line: delta form - 10, then two column bytes
            line += form - 10
            here = line
            i += 2
        else:               # short: same line, one column byte
            i += 1
        if addr <= index < addr + length:
            return here
        addr += length
    return 0


# A line is found by decoding the code's table from its start: kept for the
# (code, instruction) pairs stacks name again and again (an exporter reads
# every stack of a process at every scrape).
_line_of = functools.lru_cache(maxsize=1 << 16)(line_at)


def python_frames(words, codes, known=None):
    """A stack's words (is_python_stack) -> (the native stack's id, the
    Python frames innermost first, whether every frame's code was known);
    None if the words do not hold together.  `known`: a dict of the frames
    of word pairs made before (with these codes), added to."""
    native = words[0] & 0xffffffff
    if len(words) % 2 != 1:
        return None
    frames, complete = [], True
    for k in range(1, len(words), 2):
        code_word, where = words[k], words[k + 1]
        if known is not None:
            frame = known.get((code_word, where))
            if frame is not None:
                frames.append(frame)
                continue
        if code_word >> TAG_SHIFT != TAG_CODE or where >> TAG_SHIFT != TAG_WHERE:
            return None
        address, print_ = code_word & ADDRESS_MASK, where >> 32 & 0xffffff
        info = codes.get((address, print_))
        entry = bool(code_word & ENTRY_BIT)
        if info is None:
            complete = False
            frames.append(PyFrame(f"<code {address:#x}>", "", 0, entry))
        else:
            frames.append(PyFrame(info.name, info.file, _line_of(info, where & 0xffffffff), entry))
            if known is not None:  # (a code's description never changes once learnt)
                known[code_word, where] = frames[-1]
    return native, frames, complete


class PythonCodes:
    """A segment's Python records: the code objects the hook described
    (kept for the reporter's life: a stack names them for good) and the
    interpreter it found."""

    def __init__(self):
        self.codes = {}          # (address, fingerprint) -> CodeInfo
        self.known = {}          # (code word, where word) -> its PyFrame, once its code is known
        self.interpreter = None  # Interpreter, once its record is read
        self.bad_records = 0

    def learn(self, words):
        parsed = parse_record(words)
        if parsed is None:
            self.bad_records += 1
        elif parsed[0] == "interpreter":
            self.interpreter = parsed[2]
        else:
            self.codes.setdefault(parsed[1], parsed[2])

    def frames(self, words):
        return python_frames(words, self.codes)

    def stack_frames(self, words, native_frames, learn):
        """A stack's frames: its native stack's, then its Python frames;
        () where its words do not hold together.  A code not described yet
        may be in a record published after the stack was read: learn() reads
        the records again, once."""
        found = python_frames(words, self.codes, self.known)
        if found is not None and not found[2]:
            learn()
            found = python_frames(words, self.codes, self.known)
        if found is None or not native_frames:
            return ()
        return native_frames + tuple(found[1])


# The evaluation loop's native frames, which a run of Python frames stands
# for (3.11: one function; gcc may split off a ".cold" part).
EVAL_LOOP = "_PyEval_EvalFrameDefault"


def is_eval_loop(frames):
    """Whether a native frame's symbolized frames (its inlined calls and
    its function) are the evaluation loop's."""
    return any(f.function and f.function.startswith(EVAL_LOOP) for f in frames)


def kind_of(pyframe):
    """A Python frame's kind for merged_order."""
    return "py-entry" if pyframe.entry else "py"


def as_frame(pyframe):
    """A Python frame as a report's frame (docs/memlog.md): its function,
    "python" as its module, its file and line."""
    return Frame(pyframe.function, PYTHON_MODULE, 0, pyframe.file or None, pyframe.line or None)


def merged_order(kinds):
    """A stack's frames in the order a report shows them, as indices into
    `kinds`: per frame, native ones first and then the Python ones, "eval"
    (a native frame of the evaluation loop), "py" or "py-entry" (a Python
    frame, the first of its run), or None.  As memray merges: each eval
    frame, innermost first, is replaced by its run of Python frames (up to
    and including the next entry frame).  Runs left over -- an eval frame
    not recognized (no symbols) -- follow the last native frame replaced,
    else the native frames."""
    natives = [i for i, k in enumerate(kinds) if k is None or k == "eval"]
    runs, run = [], []
    for i, k in enumerate(kinds):
        if k in ("py", "py-entry"):
            run.append(i)
            if k == "py-entry":
                runs.append(run)
                run = []
    if run:
        runs.append(run)
    out, r, after = [], 0, None
    for i in natives:
        if kinds[i] == "eval" and r < len(runs):
            out.extend(runs[r])
            r += 1
            after = len(out)
        else:
            out.append(i)
    rest = [i for run in runs[r:] for i in run]
    if after is None:
        after = len(out)
    return out[:after] + rest + out[after:]
