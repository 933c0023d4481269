"""The event log's file, PROG-PID.events (docs/events.md): its chunks,
written by the reporter's recorder (daemon/recorder.py) and read here for
`libmemleak replay` (analysis/replay.py).

A file is the magic line and then chunks, each a 4-byte tag, a 4-byte
little-endian payload length and the payload, so that a file cut short
(the reporter killed as it wrote) reads up to its last whole chunk:

    HEAD  JSON: program, pid, exe, mode, tick_shift, times of its start
    STK2  zstd(JSON {"lines": [frame line, ...], "stacks": [[stack id, kind,
          [line number, ...]], ...]}): stacks named once; a frame line is
          numbered once a log, counting on from the previous STK2's lines
    STKS  zstd(JSON [[stack id, kind, [frame line, ...]], ...]) (version 1's)
    EVTP  u32 pages, u32 raw bytes, per page (i32 tid, u32 bytes, u64 first_ns,
          u64 last_ns, u64 claim), then zstd(the pages' records packed:
          files/event_pack.py)
    EVTS  the same without claims, the records as the hook wrote them (version 1's)
    STAT  JSON: the counters as of a moment -- live bytes and blocks per
          stack, records lost, why the log ended or stopped

Everything in a file is the traced program's to write (its records pass
through the reporter unread): the reader bounds every size and says what
is wrong in one line (EventsError)."""

import json
import struct

from libmemleak.files.memlog import printable_field
from libmemleak.files.event_pack import Packer, packed_bound

MAGIC = b"MLKEVENTS 1\n"
CHUNK = struct.Struct("<4sI")
EVTS_HEAD = struct.Struct("<II")
PAGE = struct.Struct("<iIQQ")          # EVTS: tid, bytes, first_ns, last_ns
PAGE_CLAIMED = struct.Struct("<iIQQQ")  # EVTP: ... and the page's claim (the order pages were taken in)
VERSION = 2                  # 2: records packed (EVTP); 1: as the hook wrote them (EVTS)
READS = (1, 2)
MAX_CHUNK = 1 << 30          # a chunk's payload, compressed or not
MAX_PAGE_BYTES = 1 << 16     # a page's records (the hook's pages are 32 KiB)
MAX_RAW = 64 << 20           # an EVTS chunk's records (the recorder writes ~1 MiB, 32 MiB at the end)
MAX_JSON = 256 << 20         # a HEAD, STAT, STKS or STK2 chunk, decompressed


class EventsError(Exception):
    """A file that is not an event log, or a broken one: one line."""


# HEAD's and STAT's fields as the readers use them: numbers in range, text
# cut to MAX_TEXT characters with control characters as '?' (a forged
# `program` must not clear a terminal through `replay` or `shell`, nor a
# 10 MB one be echoed whole).  A field of the wrong kind is a broken log.
MAX_TEXT = 4096
U63 = (0, (1 << 63) - 1)
HEAD_NUMBERS = {"version": U63, "pid": (0, (1 << 32) - 1), "tick_shift": (0, 40), "start_mono_ns": U63,
                "mono_ns": U63, "realtime_ns": U63}
HEAD_TEXTS = ("program", "exe", "mode", "alloc_fns")
STAT_NUMBERS = {"lost": U63}
STAT_TEXTS = ("reason", "stopped")


def _checked(doc, numbers, texts, what, path):
    for key, (lo, hi) in numbers.items():
        value = doc.get(key)
        if value is not None and (type(value) is not int or not lo <= value <= hi):
            raise EventsError(f"{path}: a broken {what} chunk ({key} is not a number from {lo} to {hi})")
    for key in texts:
        value = doc.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise EventsError(f"{path}: a broken {what} chunk ({key} is not text)")
            doc[key] = printable_field(value, MAX_TEXT)
    return doc


def chunk(tag, payload):
    return CHUNK.pack(tag, len(payload)) + payload


def json_chunk(tag, obj, compressor=None):
    data = json.dumps(obj, separators=(",", ":")).encode()
    return chunk(tag, compressor.compress(data) if compressor else data)


class StackNamer:
    """STK2 chunks of one log: frame lines numbered once (a program's
    thousands of stacks share most of their frames; zstd then sees each
    line once and the stacks as short lists of numbers: 2.5x smaller)."""

    def __init__(self):
        self.lines = {}

    def chunk(self, items, compressor):
        """items: (stack id, kind, frame lines) each."""
        new, stacks = [], []
        for sid, kind, frames in items:
            numbers = []
            for line in frames:
                n = self.lines.get(line)
                if n is None:
                    n = self.lines[line] = len(self.lines)
                    new.append(line)
                numbers.append(n)
            stacks.append([sid, kind, numbers])
        return json_chunk(b"STK2", {"lines": new, "stacks": stacks}, compressor)


def evts_chunk(pages, compressor, packer):
    """pages: (tid, first_ns, last_ns, records bytes, claim) each."""
    records = [p[3] for p in pages]
    head = EVTS_HEAD.pack(len(pages), sum(map(len, records))) + b"".join(
        PAGE_CLAIMED.pack(tid, len(data), first, last, claim) for tid, first, last, data, claim in pages)
    return chunk(b"EVTP", head + compressor.compress(packer.pack(records)))


def is_event_log(path):
    """Whether path is a file that begins as an event log does."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


CONTINUATIONS = 99   # PROG-PID-2.events ... -99: the recorder's other names for a pid


class EventLog:
    """An event log file opened for reading: its chunks indexed (tags,
    offsets), HEAD, stacks and STATs read; EVTS chunks read on demand.

    A log whose reporter was replaced while the process ran (killed, and
    the keeper took over its pool) goes on in PROG-PID-2.events: those of
    the same process image (HEAD's pid and start) are read as one log with
    it, in order (`continued` lists them)."""

    def __init__(self, path):
        import zstandard
        self.path = path
        self._dctx = zstandard.ZstdDecompressor()
        self._packer = None
        self._files = []
        self.head, self.stacks, self.stats, self.evts = None, {}, [], []
        self.truncated = False       # the last file read ends in the middle of a chunk
        self.continued = []          # the files read as this log's continuation
        self.claims = []             # the pages' claims (version 2): a gap is a page missing
        try:
            self._index(self._open(path), path)
            for other in self._continuations(path):
                try:
                    f = self._open(other)
                    if self._index(f, other, self.head):
                        self.continued.append(other)
                except EventsError:
                    pass  # not this log's: left alone
        except EventsError:
            self.close()
            raise

    def _open(self, path):
        try:
            f = open(path, "rb")
        except OSError as e:
            raise EventsError(f"{path}: cannot open: {e.strerror}") from None
        self._files.append(f)
        return f

    @staticmethod
    def _continuations(path):
        import os
        import re
        m = re.fullmatch(r"(.*-\d+)\.events", path)
        if not m:
            return []
        found = []
        for n in range(2, CONTINUATIONS + 1):
            other = f"{m.group(1)}-{n}.events"
            if not os.path.exists(other):
                break
            found.append(other)
        return found

    def close(self):
        for f in self._files:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _index(self, f, path, first_head=None):
        """Index one file's chunks; with first_head (a continuation), only
        if it is the same process image's -- else False, nothing taken.  A
        continuation broken after its HEAD is taken up to the break, as a
        file cut short is."""
        if f.read(len(MAGIC)) != MAGIC:
            raise EventsError(f"{path}: not a libmemleak event log (PROG-PID.events)")
        import os
        size = os.fstat(f.fileno()).st_size
        self._lines = []             # STK2's frame lines, numbered per file (per writer)
        offset, cut = len(MAGIC), False
        while True:
            head = f.read(CHUNK.size)
            if not head:
                break
            if len(head) < CHUNK.size:
                cut = True
                break
            tag, length = CHUNK.unpack(head)
            start = offset + CHUNK.size
            if length > MAX_CHUNK or start + length > size:  # the last chunk cut short: the log ends before it
                if length > MAX_CHUNK and first_head is None:
                    raise EventsError(f"{path}: a chunk of {length} bytes at offset {offset}: not an event log's")
                cut = True
                break
            if first_head is not None and offset == len(MAGIC):  # a continuation: the same image's?
                if tag != b"HEAD" or length > MAX_JSON or not _same_image(self._json(f.read(length), False),
                                                                          first_head):
                    return False
            else:
                try:
                    if tag in (b"EVTS", b"EVTP"):
                        self.evts.append(self._evts_index(f, path, start, length, tag == b"EVTP"))
                        f.seek(start + length)
                    elif length > MAX_JSON:
                        raise EventsError(f"{path}: a {tag!r} chunk of {length} bytes: not an event log's")
                    else:
                        self._meta_chunk(tag, f.read(length))
                except EventsError:
                    if first_head is None:
                        raise
                    cut = True  # a broken continuation: what came before the break
                    break
            offset = start + length
        if self.head is None:
            raise EventsError(f"{path}: no HEAD chunk: not a complete event log")
        if first_head is not None and offset == len(MAGIC):
            return False      # not even a HEAD: nothing of it taken
        self.truncated = cut  # (the last file read: a first file cut short is a replaced reporter's)
        return True

    def _json(self, payload, compressed):
        try:
            data = self._dctx.decompress(payload, max_output_size=MAX_JSON) if compressed else payload
            return json.loads(data)
        except Exception as e:  # zstd or JSON: the file is broken either way
            raise EventsError(f"{self.path}: a broken chunk ({type(e).__name__})") from None

    def _meta_chunk(self, tag, payload):
        if tag == b"HEAD":
            if self.head is not None:
                return  # one HEAD a log: a second one (a continuation's, a forged one) changes nothing
            head = self._json(payload, False)
            if not isinstance(head, dict) or head.get("version") not in READS:
                version = head.get("version") if isinstance(head, dict) else "?"
                raise EventsError(f"{self.path}: event log version {printable_field(version, 40)}"
                                  f" (this libmemleak reads versions 1 and 2)")
            self.head = _checked(head, HEAD_NUMBERS, HEAD_TEXTS, "HEAD", self.path)
        elif tag == b"STKS":
            items = self._json(payload, True)
            for item in items if isinstance(items, list) else ():
                if (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                        and isinstance(item[2], list)):
                    self.stacks[item[0]] = (str(item[1]), [str(x) for x in item[2]])
        elif tag == b"STK2":
            doc = self._json(payload, True)
            lines, stacks = (doc.get("lines"), doc.get("stacks")) if isinstance(doc, dict) else (None, None)
            if isinstance(lines, list):
                self._lines.extend(str(x) for x in lines)
            known = len(self._lines)
            for item in stacks if isinstance(stacks, list) else ():
                if (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                        and isinstance(item[2], list)
                        and all(isinstance(n, int) and 0 <= n < known for n in item[2])):
                    self.stacks[item[0]] = (str(item[1]), [self._lines[n] for n in item[2]])
        elif tag == b"STAT":
            stat = self._json(payload, False)
            if isinstance(stat, dict):
                self.stats.append(_checked(stat, STAT_NUMBERS, STAT_TEXTS, "STAT", self.path))
        # unknown tags: skipped (a later version's)

    def _evts_index(self, f, path, start, length, packed):
        head = f.read(EVTS_HEAD.size)
        if len(head) < EVTS_HEAD.size:
            raise EventsError(f"{path}: a broken EVTS chunk at offset {start}")
        npages, raw = EVTS_HEAD.unpack(head)
        entry = PAGE_CLAIMED if packed else PAGE
        if npages > length // entry.size or raw > min(npages * MAX_PAGE_BYTES, MAX_RAW):
            raise EventsError(f"{path}: a broken EVTS chunk at offset {start}")
        table = f.read(npages * entry.size)
        if EVTS_HEAD.size + len(table) > length or len(table) < npages * entry.size:
            raise EventsError(f"{path}: a broken EVTS chunk at offset {start}")
        pages = [entry.unpack_from(table, i * entry.size) for i in range(npages)]
        if sum(p[1] for p in pages) != raw or any(p[1] > MAX_PAGE_BYTES for p in pages):
            raise EventsError(f"{path}: a broken EVTS chunk at offset {start}")
        body = start + EVTS_HEAD.size + npages * entry.size
        first = min((p[2] for p in pages), default=0)
        last = max((p[3] for p in pages), default=0)
        if packed:
            self.claims.extend(p[4] for p in pages)
        return EvtsChunk(f, body, start + length - body, raw, pages, first, last, packed)

    def pages(self, evts):
        """The (tid, first_ns, records) of an EVTS chunk's pages."""
        evts.f.seek(evts.body)
        data = evts.f.read(evts.compressed)
        lens = [p[1] for p in evts.pages]
        try:
            raw = self._dctx.decompress(
                data, max_output_size=packed_bound(evts.raw, len(lens)) if evts.packed else evts.raw)
        except Exception as e:
            raise EventsError(f"{self.path}: a broken EVTS chunk ({type(e).__name__})") from None
        if evts.packed:
            if self._packer is None:
                self._packer = Packer()
            raw = self._packer.unpack(raw, lens)
            if raw is None:
                raise EventsError(f"{self.path}: a broken EVTS chunk (its packed records do not add up)")
        if len(raw) != evts.raw:
            raise EventsError(f"{self.path}: a broken EVTS chunk (its records are not the size it says)")
        out, at = [], 0
        for tid, n, first, _last, *_claim in evts.pages:
            out.append((tid, first, raw[at:at + n]))
            at += n
        return out

    def missing_pages(self):
        """Pages the hook filled that are in no chunk of the log: claims
        missing between the first and the last (a reporter killed between
        taking pages and writing them); 0 for a version 1 log (no claims)."""
        if not self.claims:
            return 0
        seen = set(self.claims)
        low = 0 if self.head.get("mode") == "all" else min(seen)
        return max(seen) + 1 - low - len(seen)

    def final_stat(self):
        """The last STAT (the counters as the log ended), or None."""
        return self.stats[-1] if self.stats else None


def _same_image(head, first):
    """A continuation's HEAD says the same process image as the first file's."""
    return (isinstance(head, dict) and head.get("version") in READS
            and all(head.get(k) == first.get(k) for k in ("pid", "start_mono_ns", "exe")))


class EvtsChunk:
    __slots__ = ("f", "body", "compressed", "raw", "pages", "first_ns", "last_ns", "packed")

    def __init__(self, f, body, compressed, raw, pages, first_ns, last_ns, packed):
        self.f = f
        self.body, self.compressed, self.raw, self.pages = body, compressed, raw, pages
        self.first_ns, self.last_ns, self.packed = first_ns, last_ns, packed
