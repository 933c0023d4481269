"""The event log's packing (native/reporter/event_pack.c): a chunk packs
and unpacks to the hook's bytes exactly, whatever the pages hold -- the
traced program writes them -- and unpacking takes any bytes (a file
anyone may have written) with an answer or a refusal, never a crash.
That replays stay exact through it is test_events.py's whole job; here,
the codec alone, on records made as the hook makes them and on the pages
of a real log."""

import glob
import random
import subprocess

from hypothesis import given, settings, strategies as st

from helpers import CLI_ENV, cli_argv, compile_program
from libmemleak.files.event_pack import Packer
from libmemleak.files.events import EventLog

ALLOC, FREE, MAP, UNMAP, RAW_ADDR = 1, 2, 3, 4, 8


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7f | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def page_of(records):
    """A page as the hook writes it (native/hook/events/events.c): records
    (type, ticks, address, size, stack) with addresses as deltas."""
    out, prev = bytearray(), 0
    for kind, dt, addr, size, stack in records:
        raw = addr % 8 or prev % 8
        d = (addr - prev if raw else (addr >> 3) - (prev >> 3)) & (2 ** 64 - 1)  # uint64_t, as the hook's
        zz = ((d << 1) ^ (2 ** 64 - 1 if d >> 63 else 0)) & (2 ** 64 - 1)
        out += bytes([kind | (RAW_ADDR if raw else 0)]) + varint(dt) + varint(zz) + varint(size) + varint(stack)
        prev = addr
    return bytes(out)


def roundtrip(pages):
    p = Packer()
    packed = p.pack(pages)
    assert p.unpack(packed, [len(x) for x in pages]) == b"".join(pages)
    return packed


def heap_records(rng, n):
    """Allocations and frees as a program makes them: frees of live blocks,
    allocations that reuse freed addresses, a few maps."""
    live, freed, out = [], [], []
    for _ in range(n):
        r = rng.random()
        if live and r < 0.45:
            addr, size, stack = live.pop(rng.randrange(len(live)) if rng.random() < 0.3 else -1)
            out.append((FREE, rng.randrange(3), addr, size, stack))
            freed.append(addr)
        elif r < 0.95:
            addr = freed.pop() if freed and rng.random() < 0.7 else 0x555500000000 + rng.randrange(1 << 24) * 16
            size, stack = rng.choice((24, 40, 4096, rng.randrange(1, 1 << 20))), rng.randrange(50)
            live.append((addr, size, stack))
            out.append((ALLOC, rng.randrange(3), addr, size, stack))
        else:
            out.append((rng.choice((MAP, UNMAP)), 1, 0x7f0000000000 + rng.randrange(1 << 20) * 4096 + rng.choice((0, 3)),
                        4096 * rng.randrange(1, 100), rng.randrange(50)))
    return out


def test_a_heaps_records_pack_small_and_come_back_exact():
    rng = random.Random(7)
    recs = heap_records(rng, 60000)
    pages = [page_of(recs[i:i + 3000]) for i in range(0, len(recs), 3000)]
    import zstandard
    c = zstandard.ZstdCompressor(level=3)
    packed = roundtrip(pages)
    assert len(c.compress(packed)) < 0.8 * len(c.compress(b"".join(pages)))


def test_hostile_pages_are_kept_verbatim_and_come_back_exact():
    good = page_of(heap_records(random.Random(1), 200))
    rng = random.Random(2)
    hostile = [
        b"",
        bytes(rng.randrange(256) for _ in range(5000)),           # noise
        bytes([ALLOC, 0x80, 0x00, 1, 1, 1]),                        # a varint not the shortest
        bytes([ALLOC | 0x40, 1, 1, 1, 1]),                          # the packer's own bits in a type byte
        bytes([ALLOC | 0x80, 1, 1, 1, 1]),
        good[:-1],                                                  # a record cut short
        bytes([FREE]) + b"\xff" * 9 + b"\x7f" + b"\x01\x01\x01",    # a varint past 64 bits
        bytes([ALLOC, 1, 2, 3]) + varint(1 << 40),                  # a stack id past 32 bits
        b"\x00" * 64,                                               # type 0
        # the same address twice, the second by a delta whose top bits the address loses:
        # not the hook's way, so not re-encoded from the first
        bytes([ALLOC, 0]) + varint((2 ** 61 - 1) << 1) + b"\x01\x01" + bytes([ALLOC, 0]) + varint(2 ** 62) + b"\x01\x01",
    ]
    for page in hostile:
        roundtrip([good, page, good])
    roundtrip(hostile)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from((ALLOC, FREE, MAP, UNMAP, UNMAP | 0x10, UNMAP | 0x30, 5, 6, 7)),
                                   st.integers(0, 1 << 40), st.sampled_from((0, 8, 16, 24, 1 << 47, 2 ** 64 - 8, 3)),
                                   st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 32 - 1)),
                         max_size=40), max_size=6))
def test_any_records_come_back_exact(pages):
    roundtrip([page_of(p) for p in pages])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(0, 300), max_size=4))
def test_unpacking_any_bytes_answers_or_refuses(data, lens):
    back = Packer().unpack(data, lens)
    assert back is None or len(back) == sum(lens)


def test_a_packed_chunk_broken_anywhere_is_refused_or_read_whole():
    pages = [page_of(heap_records(random.Random(3), 500)) for _ in range(3)]
    packed = roundtrip(pages)
    lens = [len(x) for x in pages]
    rng = random.Random(4)
    p = Packer()
    for _ in range(2000):
        bad = bytearray(packed)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        back = p.unpack(bytes(bad), lens)
        assert back is None or len(back) == sum(lens)
    assert p.unpack(packed[:-1], lens) is None
    assert p.unpack(packed + b"\0", lens) is None
    assert p.unpack(packed, lens[:-1] + [lens[-1] + 1]) is None


def test_a_real_logs_pages_come_back_exact(tmp_path):
    prog = compile_program("phases.c")
    subprocess.run(cli_argv("run", "-q", "--record", prog, "churn", "20000"), cwd=tmp_path, env=CLI_ENV,
                   check=True, capture_output=True, timeout=300)
    [path] = glob.glob(str(tmp_path / "phases-*.events"))
    with EventLog(path) as log:
        assert log.head["version"] == 2 and all(e.packed for e in log.evts)
        for evts in log.evts:
            roundtrip([records for _tid, _first, records in log.pages(evts)])


def test_continuations_are_read_only_when_they_are_the_same_images(tmp_path):
    """PROG-PID-2.events is read with PROG-PID.events only if its HEAD says
    the same process image; a sibling of another image (an exec's), an
    empty one, one cut after its HEAD or broken in its middle neither breaks
    the first file's reading nor hides that the first is cut short."""
    import json
    import zstandard
    from libmemleak.files.events import MAGIC, EventLog, chunk, evts_chunk
    head = {"version": 2, "program": "p", "pid": 42, "exe": "/bin/p", "mode": "all", "tick_shift": 10,
            "start_mono_ns": 1000}
    cctx = zstandard.ZstdCompressor()
    records = page_of([(ALLOC, 0, 4096, 64, 0)])

    def log(h, *chunks):
        return MAGIC + chunk(b"HEAD", json.dumps(h).encode()) + b"".join(chunks)
    evts = evts_chunk([(7, 2000, 3000, records, 0)], cctx, Packer())
    first = tmp_path / "p-42.events"
    first.write_bytes(log(head, evts)[:-5])  # cut short
    with EventLog(str(first)) as one:
        assert one.truncated and not one.continued and len(one.evts) == 0
    first.write_bytes(log(head, evts))
    other = dict(head, start_mono_ns=5000)  # an exec'd image's: not this log's
    (tmp_path / "p-42-2.events").write_bytes(log(other, evts_chunk([(7, 6000, 7000, records, 0)], cctx, Packer())))
    with EventLog(str(first)) as one:
        assert not one.continued and len(one.evts) == 1
    (tmp_path / "p-42-2.events").write_bytes(MAGIC)  # nothing but the magic
    with EventLog(str(first)) as one:
        assert not one.continued and len(one.evts) == 1 and not one.truncated
    same = evts_chunk([(7, 4000, 5000, records, 1)], cctx, Packer())
    (tmp_path / "p-42-2.events").write_bytes(log(head, same, b"EVTP" + b"\xff" * 12))  # broken after a chunk
    with EventLog(str(first)) as one:
        assert one.continued == [str(tmp_path / "p-42-2.events")] and len(one.evts) == 2 and one.truncated
        assert one.head["start_mono_ns"] == 1000 and one.missing_pages() == 0
        assert [p[2] for e in one.evts for p in one.pages(e)] == [records, records]


def test_hostile_stack_chunks_get_one_line(tmp_path):
    """A STK2 chunk nested beyond any parser's depth or not UTF-8: one line,
    status 2, from every command that reads a log; an index past its lines
    or a frame naming '../..' is only text, never a path."""
    import json
    import subprocess
    import sys
    import zstandard
    from helpers import CLI_ENV
    from libmemleak.files.events import MAGIC, chunk
    cctx = zstandard.ZstdCompressor()
    head = chunk(b"HEAD", json.dumps({"version": 2, "program": "p", "pid": 4, "mode": "all"}).encode())
    for payload, status in ((b"[" * 100000 + b"]" * 100000, 2),
                            (b'{"lines": ["\xff\xfe"], "stacks": [[0, "malloc", [0]]]}', 2),
                            (b'{"lines": ["a"], "stacks": [[0, "m", [99999999999999999999]]]}', 0),
                            (json.dumps({"lines": ["\t../../etc/passwd\t(/x)\t../a.c:1"],
                                         "stacks": [[0, "../..", [0]]]}).encode(), 0)):
        path = tmp_path / "h.events"
        path.write_bytes(MAGIC + head + chunk(b"STK2", cctx.compress(payload)))
        for argv in (["replay", str(path)], ["report", str(path)], ["export", "--format", "json", str(path)]):
            r = subprocess.run([sys.executable, "-m", "libmemleak", *argv], env=CLI_ENV, capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == status and "Traceback" not in r.stderr, (argv, r.stderr)
            if status:
                assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.events"]  # nothing written anywhere
