"""The fast .eh_frame unwinder must give exactly the stacks libgcc gives."""

import pytest

from helpers import Traced, by_stack, compile_program


def stacks(workdir, prog, config, checkpoints):
    t = Traced([prog], workdir, config=config)
    report = t.reports_at(*checkpoints)[0]
    assert t.finish() == 0, t.stderr
    return by_stack(report)


@pytest.mark.parametrize("source, flags, checkpoints", [
    ("allocators.c", ("-O2",), ["allocated", "changed"]),
    ("allocators.c", ("-O0",), ["allocated", "changed"]),
    ("cxx.cc", ("-O2",), ["allocated", "freed"]),
    ("threads.c", ("-O2",), ["joined"]),
])
def test_fast_unwinder_matches_libgcc(tmp_path, source, flags, checkpoints):
    prog = compile_program(source, *flags, name=f"{source.split('.')[0]}{flags[0]}")
    (tmp_path / "fast").mkdir()
    (tmp_path / "gcc").mkdir()
    fast = stacks(tmp_path / "fast", prog, "mtraceinit,unwind=fast", checkpoints)
    slow = stacks(tmp_path / "gcc", prog, "mtraceinit,unwind=libgcc", checkpoints)
    assert fast == slow
    assert len(fast) >= 2
    deepest = max(len(k) for k in fast)
    assert deepest >= 4  # really walked through libc to _start / clone
