"""The .memlog writer and reader (spec/memlog.md), without a process."""

import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libmemleak.files import memlog, memlog_write
from libmemleak.files.memlog import Entry, MemlogError
from libmemleak.symbols import Frame

ORIGINAL_MTRACE_SAMPLE = (
    "+63360\n"
    "\tg_realloc\t(/usr/lib/libglib-2.0.so.0)\n"
    "\tg_closure_add_invalidate_notifier\t(/usr/lib/libgobject-2.0.so.0)\n"
    "\t/usr/lib/libbonoboui-2.so.0\n")


def test_reads_the_original_mtrace_format():
    r = memlog.parse(ORIGINAL_MTRACE_SAMPLE)
    assert len(r.entries) == 1
    e = r.entries[0]
    assert (e.bytes, e.blocks) == (63360, None)
    assert [f.function for f in e.frames] == ["g_realloc", "g_closure_add_invalidate_notifier",
                                               "/usr/lib/libbonoboui-2.so.0"]
    assert e.frames[0].module == "/usr/lib/libglib-2.0.so.0"


def test_render_writes_signs_tabs_and_optional_fields():
    frames = [Frame("grab", "/bin/x", 0x10, "pool.cc", 42), Frame("inner", "/bin/x", 0x20, "a.h", 7, True),
              Frame(None, "/lib/libfoo.so", 0x1a2b), Frame(None, None, 0x7f0000001000)]
    text = memlog_write.render([("pid", 12), ("reason", "signal")],
                         [Entry(100, 2, frames), Entry(-8, -1, frames[:1])])
    assert text == ("# pid: 12\n# reason: signal\n"
                    "+100 +2\n\tgrab\t(/bin/x)\tpool.cc:42\n\tinner [inlined]\t(/bin/x)\ta.h:7\n"
                    "\t/lib/libfoo.so+0x1a2b\n\t0x7f0000001000\n"
                    "-8 -1\n\tgrab\t(/bin/x)\tpool.cc:42\n")
    back = memlog.parse(text)
    assert back.header == {"pid": "12", "reason": "signal"}
    assert [(e.bytes, e.blocks) for e in back.entries] == [(100, 2), (-8, -1)]
    f = back.entries[0].frames
    assert (f[0].function, f[0].file, f[0].line, f[0].inlined) == ("grab", "pool.cc", 42, False)
    assert (f[1].function, f[1].inlined) == ("inner", True)
    assert (f[2].module, f[2].offset) == ("/lib/libfoo.so", 0x1a2b)
    assert (f[3].module, f[3].offset) == (None, 0x7f0000001000)


def test_zero_is_written_with_a_sign():
    assert memlog_write.render([], [Entry(0, 3, [])]) == "+0 +3\n"


def test_unknown_extra_fields_and_header_lines_are_tolerated():
    r = memlog.parse("# future-key: x\n# not a pair\n+5 +1 +9 future\n\tf\t(/m)\n")
    assert r.header["future-key"] == "x"
    assert r.entries[0].extra == ("+9", "future")


@pytest.mark.parametrize("text, where", [
    ("\tf\t(/m)\n", ":1: frame line before any entry"),
    ("+5\nbogus line\n", ":2: expected an entry"),
    ("12\n", ":1: expected an entry"),
])
def test_broken_files_give_one_clear_error(text, where):
    with pytest.raises(MemlogError, match=where):
        memlog.parse(text, "r.memlog")


def test_read_of_a_missing_file_is_a_memlog_error(tmp_path):
    with pytest.raises(MemlogError, match="No such file"):
        memlog.read(tmp_path / "absent.memlog")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("+-0123456789\t\n #:()abx/.[]"), max_size=300))
def test_fuzz_parse_raises_only_memlog_error(text):
    try:
        memlog.parse(text)
    except MemlogError:
        pass


def test_write_report_is_atomic_owner_only_and_ignores_planted_symlinks(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "p-1-1.memlog").symlink_to(victim)
    path = memlog_write.write_report(str(tmp_path), "p-1-1.memlog", "+1 +1\n")
    assert victim.read_text() == "precious"          # not written through the link
    assert not os.path.islink(path)
    assert open(path).read() == "+1 +1\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["p-1-1.memlog", "victim"]  # no temporary left


def test_write_report_into_a_missing_directory_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        memlog_write.write_report(str(tmp_path / "nope"), "x.memlog", "")


def test_a_report_too_large_is_refused_before_it_is_read(tmp_path):
    """A file past MAX_REPORT_BYTES (sparse here: 4 GiB of nothing) is one
    line, from its size alone -- neither its header nor its body is read."""
    from libmemleak.files.series import InputError, read_series
    path = tmp_path / "x-7-1.memlog"
    with open(path, "wb") as f:
        f.write(b"# pid: 7\n# seq: 1\n")
        f.truncate(memlog.MAX_REPORT_BYTES + 1)
    with pytest.raises(InputError, match="too large for a report"):
        read_series([str(tmp_path)])
