"""Sampling mode (MEMLEAK_CONFIG sample=BYTES): a byte-weighted random
subset of allocations is recorded, and the reports scale it up.  Checked
against the truth of a real program: the estimates land near it, frees of
unrecorded blocks are not mistaken for unknown ones, and once everything is
freed the reports add up to exactly nothing."""

import pytest

from helpers import Traced, add_reports, by_site, compile_program

SMALL = 1_000_000   # 48-byte blocks from site_small
BIG = 500           # 200,000-byte blocks from site_big


def close_to(value, truth, tolerance):
    return abs(value - truth) <= tolerance * truth


@pytest.mark.parametrize("rate", [16384, 262144])
def test_estimates_are_near_the_truth_and_frees_cancel_exactly(workdir, rate):
    prog = compile_program("sampled.c")
    t = Traced([prog, str(SMALL)], workdir, config=f"mtraceinit,sample={rate}")
    allocated, freed = t.reports_at("allocated", "freed")
    assert t.finish() == 0, t.stderr
    assert t.stderr == ""
    assert allocated.header["sampled"].startswith(f"every {rate} bytes")

    sites = by_site(allocated)
    small_bytes, small_blocks = sites["site_small"]
    big_bytes, big_blocks = sites["site_big"]
    # About 48 * SMALL / rate samples of the small site: 2,900 at 16 KiB
    # (1.9% standard error), 180 at 256 KiB (7.5%).  Bounds at > 4 sigma.
    tolerance = 0.08 if rate == 16384 else 0.35
    assert close_to(small_bytes, 48 * SMALL, tolerance), small_bytes
    assert close_to(small_blocks, SMALL, tolerance), small_blocks
    # Big blocks are each sampled with probability 1 - exp(-200000 / rate).
    assert close_to(big_bytes, 200000 * BIG, 0.2), big_bytes
    assert close_to(big_blocks, BIG, 0.2), big_blocks
    # Each entry says how many recorded samples its estimate rests on: the
    # big site's blocks are nearly all recorded, the small site's few.
    for entry in allocated.entries:
        [samples] = [f for f in entry.extra if f.startswith("samples=")]
        recorded = int(samples.split("=")[1])
        assert 0 < recorded <= entry.blocks, (entry.extra, entry.blocks)
    small = [e for e in allocated.entries if e.frames[0].function == "site_small"]
    small_samples = sum(int(e.extra[0].split("=")[1]) for e in small)
    assert small_samples < small_blocks / 4  # an estimate scaled from far fewer samples
    # Churned blocks were all freed before the report.
    assert "site_churn" not in sites
    assert int(allocated.header["allocations"]) > SMALL  # estimated, churn included
    assert "unknown-frees" not in allocated.header

    # Everything the program freed: what the reports say is live adds up to
    # nothing -- but glibc's own, which a sample may catch: joined threads'
    # stacks and their TLS (allocate_dtv) stay in its thread-stack cache.
    live = add_reports([allocated, freed])
    assert {k: v for k, v in live.items() if not any(f[0] == "allocate_stack" for f in k)} == {}
    if not live:
        assert freed.header["live-bytes"] == "0"
    assert "unknown-frees" not in freed.header


def test_bad_sample_option_is_one_line_and_collection_is_exact(workdir):
    prog = compile_program("sampled.c")
    t = Traced([prog, "1000"], workdir, config="mtraceinit,sample=lots")
    allocated, _ = t.reports_at("allocated", "freed")
    assert t.finish() == 0
    assert t.stderr.count("\n") == 1 and "sample" in t.stderr, t.stderr
    assert "sampled" not in allocated.header
    assert not [x for e in allocated.entries for x in e.extra if x.startswith("samples=")]  # exact
    assert by_site(allocated)["site_small"] == (48 * 1000, 1000)
