"""The symbolizer's answers kept on disk (symbols/answer_cache.py): a cold
reporter -- a killed reporter's successor, the next run -- names frames
from them without reading the binary again, and never from a binary that
has changed since."""

import os
import subprocess

from helpers import Traced, compile_program, kill_and_wait, reporters_of, wait_for, \
    wait_for_reporter, wait_until_idle
from libmemleak.daemon.segment_types import Module
from libmemleak.symbols import Symbolizer
from libmemleak.symbols.answer_cache import AnswerCache, default_directory
from test_symbolize import build


def module_of(path, base=0x400000):
    return Module(0, path, base=base, lo=0, hi=1 << 62, load_epoch=1, unload_epoch=0, build_id="")


def function_addresses(binary):
    """A return address inside each function of `binary` (its start + 1)."""
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    return sorted({int(p[0], 16) + 1 for p in (line.split() for line in out.splitlines())
                   if len(p) == 3 and p[1] in "tT" and int(p[0], 16)})


def answers(symbolizer, module, addresses):
    return [symbolizer.frames_for(module, module.base + a) for a in addresses]


def test_a_second_symbolizer_answers_from_the_cache_without_reading_the_binary(tmp_path):
    prog = str(build(tmp_path, "-O2"))
    module = module_of(prog)
    addresses = function_addresses(prog)
    first = Symbolizer(cache=AnswerCache(str(tmp_path / "cache")))
    fresh = answers(first, module, addresses)
    first.save()
    assert any(f.file and f.line for frames in fresh for f in frames)  # DWARF answers, not names only
    assert any(len(frames) > 1 for frames in fresh)                    # inlined calls among them

    second = Symbolizer(cache=AnswerCache(str(tmp_path / "cache")))
    assert answers(second, module, addresses) == fresh
    held = second.module(prog, "")
    assert held._elf is None and held._dwarf is None  # neither symbol table nor DWARF was read

    # The binary rebuilt at the same path: its old answers are not believed.
    (tmp_path / "new").mkdir()
    os.replace(build(tmp_path / "new", "-O0"), prog)
    third = Symbolizer(cache=AnswerCache(str(tmp_path / "cache")))
    assert answers(third, module, function_addresses(prog)) == \
        answers(Symbolizer(), module, function_addresses(prog))
    assert third.module(prog, "")._elf is not None


def test_answers_past_the_symbol_budget_are_not_kept(tmp_path):
    prog = str(build(tmp_path, "-O2"))
    module = module_of(prog)
    addresses = function_addresses(prog)
    late = Symbolizer(cache=AnswerCache(str(tmp_path / "cache")))
    late.deadline = 0  # spent: symbol-table names only
    answers(late, module, addresses)
    late.save()
    later = Symbolizer(cache=AnswerCache(str(tmp_path / "cache")))
    assert answers(later, module, addresses) == answers(Symbolizer(), module, addresses)
    assert later.module(prog, "")._dwarf  # it had to read DWARF: nothing partial was kept


def test_the_cache_directory_is_the_users_own(tmp_path, monkeypatch):
    """Owner-only, made where missing; a directory others may write is not
    used; off when asked; a caller's XDG_CACHE_HOME is believed only when
    the real and effective ids agree."""
    base = tmp_path / "xdg"
    assert default_directory({"XDG_CACHE_HOME": str(base)}) == str(base / "libmemleak" / "symbols")
    assert default_directory({"XDG_CACHE_HOME": str(base), "MEMLEAK_SYMBOL_CACHE": "off"}) is None
    cache = AnswerCache(default_directory({"XDG_CACHE_HOME": str(base)}))
    prog = compile_program("blocked.c")
    s = Symbolizer(cache=cache)
    s.frames_for(module_of(prog, 0), function_addresses(prog)[0])
    s.save()
    for d in (base / "libmemleak", base / "libmemleak" / "symbols"):
        assert os.stat(d).st_mode & 0o777 == 0o700
    assert all(os.stat(f).st_mode & 0o777 == 0o600 for f in (base / "libmemleak" / "symbols").iterdir())
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    s = Symbolizer(cache=AnswerCache(str(shared)))
    s.frames_for(module_of(prog, 0), function_addresses(prog)[0])
    s.save()
    assert not os.listdir(shared)
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # as a setuid program's reporter
    assert "xdg" not in (default_directory({"XDG_CACHE_HOME": str(base)}) or "")


def test_a_killed_reporters_successor_names_the_exit_report_from_its_answers(workdir, tmp_path):
    """#64 item 7: the program waits at its exit while the successor of a
    killed reporter writes the exit report; that successor must not read
    every binary's DWARF again (seconds on a big program): it takes the
    killed reporter's answers."""
    prog = compile_program("blocked.c")
    cache = tmp_path / "cache"
    t = Traced([prog], workdir, env={"XDG_CACHE_HOME": str(cache)})
    t.expect("blocked")
    reporter = wait_for_reporter(t.pid)
    wait_until_idle(reporter)  # its idle warm-up has named every stack
    files = lambda: {f.name: f.read_bytes() for f in (cache / "libmemleak" / "symbols").iterdir()}  # noqa: E731
    kept = files()
    assert kept
    kill_and_wait(reporter)
    wait_for(lambda: [r for r in reporters_of(t.pid) if r != reporter], "the standby took over", timeout=120)
    t.resume()
    assert t.finish() == 0, t.stderr
    final = t.reports()[-1]
    assert final.header["reason"] == "exit"
    site = next(e for e in final.entries if e.frames and e.frames[0].function == "site_blocked")
    assert site.bytes == 4242 and site.frames[0].file.endswith("blocked.c")
    assert files() == kept  # every answer the successor needed was there
