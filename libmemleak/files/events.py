"""The event log's file, PROG-PID.events (docs/events.md): its chunks,
written by the reporter's recorder (daemon/recorder.py) and read here for
`libmemleak replay` (analysis/replay.py).

A file is the magic line and then chunks, each a 4-byte tag, a 4-byte
little-endian payload length and the payload, so that a file cut short
(the reporter killed as it wrote) reads up to its last whole chunk:

    HEAD  JSON: program, pid, exe, mode, tick_shift, times of its start
    STKS  zstd(JSON [[stack id, kind, [frame line, ...]], ...]): stacks named once
    EVTS  u32 pages, u32 raw bytes, per page (i32 tid, u32 bytes, u64 first_ns,
          u64 last_ns), then zstd(the pages' records, one after another)
    STAT  JSON: the counters as of a moment -- live bytes and blocks per
          stack, records lost, why the log ended or stopped

Everything in a file is the traced program's to write (its records pass
through the reporter unread): the reader bounds every size and says what
is wrong in one line (EventsError)."""

import json
import struct

MAGIC = b"MLKEVENTS 1\n"
CHUNK = struct.Struct("<4sI")
EVTS_HEAD = struct.Struct("<II")
PAGE = struct.Struct("<iIQQ")
VERSION = 1
MAX_CHUNK = 1 << 30          # a chunk's payload, compressed or not
MAX_PAGE_BYTES = 1 << 16     # a page's records (the hook's pages are 32 KiB)
MAX_RAW = 64 << 20           # an EVTS chunk's records (the recorder writes ~1 MiB, 32 MiB at the end)
MAX_JSON = 256 << 20         # a HEAD, STAT or STKS chunk, decompressed


class EventsError(Exception):
    """A file that is not an event log, or a broken one: one line."""


def chunk(tag, payload):
    return CHUNK.pack(tag, len(payload)) + payload


def json_chunk(tag, obj, compressor=None):
    data = json.dumps(obj, separators=(",", ":")).encode()
    return chunk(tag, compressor.compress(data) if compressor else data)


def evts_chunk(pages, compressor):
    """pages: (tid, first_ns, last_ns, records bytes) each."""
    raw = b"".join(p[3] for p in pages)
    head = EVTS_HEAD.pack(len(pages), len(raw)) + b"".join(
        PAGE.pack(tid, len(data), first, last) for tid, first, last, data in pages)
    return chunk(b"EVTS", head + compressor.compress(raw))


def is_event_log(path):
    """Whether path is a file that begins as an event log does."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


class Chunk:
    __slots__ = ("tag", "offset", "length")

    def __init__(self, tag, offset, length):
        self.tag, self.offset, self.length = tag, offset, length


class EventLog:
    """An event log file opened for reading: its chunks indexed (tags,
    offsets), HEAD, stacks and STATs read; EVTS chunks read on demand."""

    def __init__(self, path):
        import zstandard
        self.path = path
        self._dctx = zstandard.ZstdDecompressor()
        try:
            self._f = open(path, "rb")
        except OSError as e:
            raise EventsError(f"{path}: cannot open: {e.strerror}") from None
        self.head, self.stacks, self.stats, self.evts = None, {}, [], []
        self.truncated = False
        try:
            self._index()
        except EventsError:
            self._f.close()
            raise

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _index(self):
        f, path = self._f, self.path
        if f.read(len(MAGIC)) != MAGIC:
            raise EventsError(f"{path}: not a libmemleak event log (PROG-PID.events)")
        import os
        size = os.fstat(f.fileno()).st_size
        offset = len(MAGIC)
        while True:
            head = f.read(CHUNK.size)
            if not head:
                break
            if len(head) < CHUNK.size:
                self.truncated = True
                break
            tag, length = CHUNK.unpack(head)
            if length > MAX_CHUNK:
                raise EventsError(f"{path}: a chunk of {length} bytes at offset {offset}: not an event log's")
            start = offset + CHUNK.size
            if start + length > size:  # the last chunk cut short: the log ends before it
                self.truncated = True
                break
            if tag == b"EVTS":
                self.evts.append(self._evts_index(start, length))
                f.seek(start + length)
            elif length > MAX_JSON:
                raise EventsError(f"{path}: a {tag!r} chunk of {length} bytes: not an event log's")
            else:
                self._meta_chunk(tag, f.read(length))
            offset = start + length
        if self.head is None:
            raise EventsError(f"{path}: no HEAD chunk: not a complete event log")

    def _json(self, payload, compressed):
        try:
            data = self._dctx.decompress(payload, max_output_size=MAX_JSON) if compressed else payload
            return json.loads(data)
        except Exception as e:  # zstd or JSON: the file is broken either way
            raise EventsError(f"{self.path}: a broken chunk ({type(e).__name__})") from None

    def _meta_chunk(self, tag, payload):
        if tag == b"HEAD":
            head = self._json(payload, False)
            if not isinstance(head, dict) or head.get("version") != VERSION:
                raise EventsError(f"{self.path}: event log version {head.get('version') if isinstance(head, dict) else '?'}"
                                  f" (this libmemleak reads version {VERSION})")
            self.head = head
        elif tag == b"STKS":
            items = self._json(payload, True)
            for item in items if isinstance(items, list) else ():
                if (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                        and isinstance(item[2], list)):
                    self.stacks[item[0]] = (str(item[1]), [str(x) for x in item[2]])
        elif tag == b"STAT":
            stat = self._json(payload, False)
            if isinstance(stat, dict):
                self.stats.append(stat)
        # unknown tags: skipped (a later version's)

    def _evts_index(self, start, length):
        f = self._f
        head = f.read(EVTS_HEAD.size)
        if len(head) < EVTS_HEAD.size:
            raise EventsError(f"{self.path}: a broken EVTS chunk at offset {start}")
        npages, raw = EVTS_HEAD.unpack(head)
        if npages > length // PAGE.size or raw > min(npages * MAX_PAGE_BYTES, MAX_RAW):
            raise EventsError(f"{self.path}: a broken EVTS chunk at offset {start}")
        table = f.read(npages * PAGE.size)
        if EVTS_HEAD.size + len(table) > length or len(table) < npages * PAGE.size:
            raise EventsError(f"{self.path}: a broken EVTS chunk at offset {start}")
        pages = [PAGE.unpack_from(table, i * PAGE.size) for i in range(npages)]
        if sum(p[1] for p in pages) != raw or any(p[1] > MAX_PAGE_BYTES for p in pages):
            raise EventsError(f"{self.path}: a broken EVTS chunk at offset {start}")
        body = start + EVTS_HEAD.size + npages * PAGE.size
        first = min((p[2] for p in pages), default=0)
        last = max((p[3] for p in pages), default=0)
        return EvtsChunk(body, start + length - body, raw, pages, first, last)

    def pages(self, evts):
        """The (tid, first_ns, records) of an EVTS chunk's pages."""
        self._f.seek(evts.body)
        data = self._f.read(evts.compressed)
        try:
            raw = self._dctx.decompress(data, max_output_size=evts.raw)
        except Exception as e:
            raise EventsError(f"{self.path}: a broken EVTS chunk ({type(e).__name__})") from None
        if len(raw) != evts.raw:
            raise EventsError(f"{self.path}: a broken EVTS chunk (its records are not the size it says)")
        out, at = [], 0
        for tid, n, first, _last in evts.pages:
            out.append((tid, first, raw[at:at + n]))
            at += n
        return out

    def final_stat(self):
        """The last STAT (the counters as the log ended), or None."""
        return self.stats[-1] if self.stats else None


class EvtsChunk:
    __slots__ = ("body", "compressed", "raw", "pages", "first_ns", "last_ns")

    def __init__(self, body, compressed, raw, pages, first_ns, last_ns):
        self.body, self.compressed, self.raw, self.pages = body, compressed, raw, pages
        self.first_ns, self.last_ns = first_ns, last_ns
