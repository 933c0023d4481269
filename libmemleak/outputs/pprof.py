"""pprof's profile.proto, gzipped, laid out as Go's heap profiles: sample
types inuse_objects/inuse_space (and alloc_objects where the reports count
allocations), in-use space the default; one mapping per module, one
location per distinct frame -- inlined frames as lines of the location of
the function they were inlined into, innermost first, as profile.proto
says -- and functions deduplicated.  Loads in `go tool pprof`, Pyroscope
and Parca.

Frames the reports left unsymbolized (MEMLEAK_SYMBOLIZE=no, or symbols
missing) become locations with an address and no lines, in a mapping
that carries the module's build-id (from the reports' `# build-id PATH:`
lines) and spans the whole address space with no offset -- pprof's sign
that addresses are already the file's own (its elfexec.GetBase) -- so
stock pprof symbolizes them on another host from the binaries it finds
by name or build-id (`PPROF_BINARY_PATH`).  The address is the return
address less one: the call, as a debugger looks it up.

The encoder is the few lines of protobuf wire format this needs (varints
and length-delimited fields), not the protobuf package: a dependency for
one writer, and no faster for this shape of data."""

import gzip

from libmemleak.outputs.collapsed import drawing_notes, drawn_frames


def _varint(n):
    n &= (1 << 64) - 1  # negative int64s are ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte = n & 0x7f
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_varint(number, value):
    return _varint(number << 3) + _varint(value) if value else b""


def _field_bytes(number, data):
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _packed(number, values):
    return _field_bytes(number, b"".join(_varint(v) for v in values)) if values else b""


# Go's level (gzip.DefaultCompression): Python's default, 9, spends many
# times as long on a big profile for little less (docs/performance.rst).
GZIP_LEVEL = 6


class Tables:
    """A profile's strings, mappings, functions and locations, each made
    once -- and kept from one profile to the next where the same frames
    come back (the exporter's scrapes of one process: its frames are the
    same objects each time, so a sample's location ids are packed once).
    Frames are keyed by identity and held here, so that an id is never a
    dead frame's reused."""

    def __init__(self):
        self.strings, self.string_ids = [""], {"": 0}
        self.mappings, self.functions, self.locations = {}, {}, {}
        self.mapping_msgs, self.function_msgs, self.location_msgs = [], [], []
        self.by_group = {}    # ids of a group's frames -> (location id, the group)
        self.alone = {}       # id of a frame that is a location alone -> (its location id as a varint, it)
        self.by_frames = {}   # id of a sample's frames -> (its packed location ids, the frames)

    def string(self, s):
        s = s or ""
        i = self.string_ids.get(s)
        if i is None:
            i = self.string_ids[s] = len(self.strings)
            self.strings.append(s)
        return i

    def mapping_id(self, module, build_ids, symbolized=True):
        key = (module, symbolized)
        mid = self.mappings.get(key)
        if mid is None:
            mid = self.mappings[key] = len(self.mappings) + 1
            msg = _field_varint(1, mid) + _field_varint(5, self.string(module))
            msg += _field_varint(6, self.string(build_ids.get(module)))
            if symbolized:
                msg += _field_varint(7, 1) + _field_varint(8, 1) + _field_varint(9, 1) + _field_varint(10, 1)
            else:  # addresses are the file's own: start 0, no offset, the whole space
                msg += _field_varint(3, (1 << 64) - 1)
            self.mapping_msgs.append(msg)
        return mid

    def function_id(self, f):
        name = f.function or f"{(f.module or '?').rsplit('/', 1)[-1]}+{f.offset:#x}"
        key = (name, f.file)
        fid = self.functions.get(key)
        if fid is None:
            fid = self.functions[key] = len(self.functions) + 1
            self.function_msgs.append(_field_varint(1, fid) + _field_varint(2, self.string(name))
                                      + _field_varint(3, self.string(name)) + _field_varint(4, self.string(f.file)))
        return fid

    def location_id(self, group, build_ids):
        """The location of a group of frames: inlined ones, then the
        function they are inlined into."""
        ident = tuple(map(id, group))
        known = self.by_group.get(ident)
        if known is not None:
            return known[0]
        key = tuple((f.function, f.module, f.file, f.line, f.offset if not f.function else 0) for f in group)
        lid = self.locations.get(key)
        if lid is None:
            lid = self.locations[key] = len(self.locations) + 1
            self.location_msgs.append(self._location(lid, group, build_ids))
        self.by_group[ident] = (lid, group)
        return lid

    def _location(self, lid, group, build_ids):
        real = group[-1]
        if not real.function and real.module and len(group) == 1:  # for pprof to symbolize
            msg = _field_varint(1, lid) + _field_varint(2, self.mapping_id(real.module, build_ids, False))
            return msg + _field_varint(3, max(0, real.offset - 1))
        msg = _field_varint(1, lid) + _field_varint(2, self.mapping_id(real.module or "?", build_ids))
        msg += _field_varint(3, real.offset if not real.function else 0)
        for f in group:  # innermost first; the last is the function they are inlined into
            msg += _field_bytes(4, _field_varint(1, self.function_id(f)) + _field_varint(2, f.line or 0))
        return msg

    def packed_locations(self, frames, build_ids):
        """A sample's location ids, packed (field 1 of a Sample)."""
        known = self.by_frames.get(id(frames))
        if known is not None and known[1] is frames:
            return known[0]
        pieces, group, alone = [], [], self.alone
        for f in frames:
            if not group and not f.inlined:  # a location of one frame: most are
                got = alone.get(id(f))
                if got is None:
                    got = alone[id(f)] = (_varint(self.location_id([f], build_ids)), f)
                pieces.append(got[0])
                continue
            group.append(f)
            if not f.inlined:
                pieces.append(_varint(self.location_id(group, build_ids)))
                group = []
        if group:
            pieces.append(_varint(self.location_id(group, build_ids)))
        packed = _field_bytes(1, b"".join(pieces)) if pieces else b""
        if type(frames) is tuple:  # (a list may change: not kept)
            self.by_frames[id(frames)] = (packed, frames)
        return packed


def encode(analyses):
    """The uncompressed profile of the processes' live stacks."""
    counts_allocs = any(t.allocations is not None for a in analyses for t in a.trends)
    types = [("inuse_objects", "count"), ("inuse_space", "bytes")]
    if counts_allocs:
        types.append(("alloc_objects", "count"))
    build_ids = {key[len("build-id "):]: value for a in analyses for r in a.series.reports
                 for key, value in r.header.items() if key.startswith("build-id ")}

    def samples():
        for a in analyses:
            for t in a.trends:
                if t.live_bytes <= 0 and not t.allocations:
                    continue
                values = [max(0, t.live_blocks), max(0, t.live_bytes)]
                if counts_allocs:
                    values.append(t.allocations or 0)
                yield drawn_frames(t, a), values

    return encode_samples(samples(), types, "inuse_space", build_ids, sampling_period(analyses),
                          drawing_notes(analyses))


def encode_samples(samples, types, default_type, build_ids, period=0, notes=(), tables=None):
    """The uncompressed profile of `samples`: (frames innermost first --
    symbols.Frame, inlined ones before the function they are inlined into
    -- and a value per sample type), `types` [(type, unit)], the module
    paths' build ids, the sampling period in bytes (0: exact), comments.
    `tables`: a Tables kept from an earlier profile of the same frames."""
    t = tables or Tables()
    body = bytearray()
    for kind, unit in types:
        body += _field_bytes(1, _field_varint(1, t.string(kind)) + _field_varint(2, t.string(unit)))
    for frames, values in samples:
        body += _field_bytes(2, t.packed_locations(frames, build_ids) + _packed(2, values))
    for msgs, field in ((t.mapping_msgs, 3), (t.location_msgs, 4), (t.function_msgs, 5)):
        for msg in msgs:
            body += _field_bytes(field, msg)
    if period:  # as Go's sampled heap profiles: the mean bytes between samples
        body += _field_bytes(11, _field_varint(1, t.string("space")) + _field_varint(2, t.string("bytes")))
        body += _field_varint(12, period)
    for note in notes:  # what was folded: `go tool pprof -comments`
        body += _field_varint(13, t.string(note))
    default = t.string(default_type)
    for s in t.strings:
        body += _field_bytes(6, s.encode("utf-8", "surrogateescape"))
    body += _field_varint(14, default)
    return bytes(body)


def sampling_period(analyses):
    """BYTES of `# sampled: every BYTES bytes on average`, if the reports say so."""
    for a in analyses:
        for r in a.series.reports:
            words = r.header.get("sampled", "").split()
            if len(words) > 1 and words[0] == "every" and words[1].isdigit():
                return int(words[1])
    return 0


def write(out, analyses, problems):
    data = gzip.compress(encode(analyses), compresslevel=GZIP_LEVEL, mtime=0)
    target = getattr(out, "buffer", out)
    target.write(data)
