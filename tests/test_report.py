"""`libmemleak report` on the real reports of a real program with known
leaks among churn (issue "Answers, not files")."""

import html
import json
import re
import os
import shutil
import subprocess

import pytest

from helpers import CHROMIUM, CLI_ENV, Terminal, Traced, cli, cli_argv, compile_program, headless
from libmemleak.files import memlog

ROUNDS = 8


def report_cmd(*args):
    return cli("report", *args)


@pytest.fixture(scope="module")
def slowleaks(tmp_path_factory):
    """A directory with the reports of one run: one per round, then exit."""
    workdir = tmp_path_factory.mktemp("slowleaks")
    prog = compile_program("slowleaks.c")
    t = Traced([prog], workdir, config="mtraceinit")
    t.reports_at(*["round"] * ROUNDS)
    assert t.finish() == 0, t.stderr
    return workdir, t.pid


def first_function(stack):
    return next((f["function"] for f in stack["frames"] if (f["function"] or "").startswith("site_")),
                None)


def test_report_ranks_the_leaks_and_not_the_churn(slowleaks):
    workdir, pid = slowleaks
    r = report_cmd(workdir, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    [proc] = doc["processes"]
    assert (proc["program"], proc["pid"], proc["reports"], proc["ended"]) == ("slowleaks", pid,
                                                                              ROUNDS + 1, "exit")
    suspects = {first_function(s): s for s in doc["processes"][0]["suspects"]}
    assert {"site_leak", "site_rare", "site_cache_grow"} <= set(suspects), list(suspects)
    # each real leak ranks above every other stack: start-up and the LRU are
    # never suspects; churn, which can grow a few intervals in a row by
    # chance, may be one, but only below every leak
    assert "site_startup" not in suspects and "site_lru" not in suspects
    last_leak = max(suspects[k]["rank"] for k in ("site_leak", "site_rare", "site_cache_grow"))
    assert "site_churn" not in suspects or suspects["site_churn"]["rank"] > last_leak
    leak, rare, cache = suspects["site_leak"], suspects["site_rare"], suspects["site_cache_grow"]
    assert (leak["live_bytes"], leak["live_blocks"]) == (64 * ROUNDS, ROUNDS)
    assert (rare["live_bytes"], rare["live_blocks"]) == (600, 3)
    assert leak["intervals_grown"] == ROUNDS - 1 and leak["intervals_shrunk"] == 0
    assert "never freed" in leak["verdict"] and f"grows in {ROUNDS - 1} of {ROUNDS - 1}" in leak["verdict"]
    # allocation counts tell a steady path from a rare one
    assert leak["allocations"] == ROUNDS and rare["allocations"] == 3
    assert f"allocated {ROUNDS} times" in leak["verdict"]
    # teardown does not hide growth: freed by its atexit handler, still a suspect
    assert cache["live_bytes"] == 0 and cache["freed_at_exit_bytes"] == 48 * ROUNDS
    assert "freed at exit" in cache["verdict"]
    assert [s["rank"] for s in proc["suspects"]] == list(range(1, len(proc["suspects"]) + 1))
    # the steady leak ranks above the rare one
    assert leak["rank"] < rare["rank"]


def test_json_live_totals_are_the_sum_of_the_reports(slowleaks):
    workdir, pid = slowleaks
    doc = json.loads(report_cmd(workdir, "--json").stdout)
    [proc] = doc["processes"]
    from libmemleak.files import memlog
    reports = [memlog.read(os.path.join(workdir, f"slowleaks-{pid}-{seq}.memlog"))
               for seq in range(1, ROUNDS + 2)]
    assert proc["live_bytes"] == sum(int(r.header["change-bytes"]) for r in reports)
    assert proc["live_bytes"] == int(reports[-1].header["live-bytes"])
    assert proc["live_blocks"] == int(reports[-1].header["live-blocks"])
    assert sum(s["live_bytes"] for s in proc["stacks"]) == proc["live_bytes"]


def test_text_report_fits_a_screen_and_names_the_leak_first(slowleaks):
    workdir, pid = slowleaks
    r = report_cmd(workdir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"slowleaks (pid {pid}): {ROUNDS + 1} reports")
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#1 "))
    assert "never freed" in lines[first]
    assert any("site_leak (slowleaks.c:" in line for line in lines[first:first + 6])
    assert len(lines) < 60


def test_a_missing_report_is_said_and_the_exit_status_says_the_sums_are_wrong(slowleaks, tmp_path):
    workdir, pid = slowleaks
    for name in os.listdir(workdir):
        shutil.copy(os.path.join(workdir, name), tmp_path)
    os.unlink(tmp_path / f"slowleaks-{pid}-3.memlog")
    (tmp_path / "broken-1-1.memlog").write_text("# pid: 1\n+12 +1\nnot an entry\n")
    r = report_cmd(tmp_path)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert f"slowleaks pid {pid}: report 3 missing: live totals are wrong" in r.stderr
    assert "broken-1-1.memlog:3" in r.stderr
    assert r.stdout.startswith(f"slowleaks (pid {pid}): {ROUNDS} reports")


@pytest.mark.parametrize("args, words", [
    (["{empty}"], "no report could be read"),
    (["/no/such/dir"], "no such file or directory"),
    (["{empty}", "--include", "("], "not a regular expression"),
])
def test_nothing_to_read_is_one_line_and_status_2(tmp_path, args, words):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = report_cmd(*[a.replace("{empty}", str(empty)) for a in args])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


def diff_cmd(*args):
    return cli("diff", *args)


def test_diff_of_two_reports_is_what_was_live_between_them(slowleaks):
    workdir, pid = slowleaks
    r = diff_cmd(workdir / f"slowleaks-{pid}-2.memlog", workdir / f"slowleaks-{pid}-6.memlog", "--json")
    assert r.returncode == 0, r.stderr
    stacks = {first_function(s): s for s in json.loads(r.stdout)["stacks"]}
    assert (stacks["site_leak"]["change_bytes"], stacks["site_leak"]["change_blocks"]) == (256, 4)
    assert (stacks["site_cache_grow"]["change_bytes"], stacks["site_cache_grow"]["change_blocks"]) == (192, 4)
    assert (stacks["site_rare"]["change_bytes"], stacks["site_rare"]["change_blocks"]) == (200, 1)
    assert all(s["status"] == "grown" for k, s in stacks.items() if k in ("site_leak", "site_rare"))
    # (#28 item 16) the text showed the 2 innermost frames, with no way to see more
    before, after = workdir / f"slowleaks-{pid}-2.memlog", workdir / f"slowleaks-{pid}-6.memlog"
    leak = stacks["site_leak"]["frames"]
    def shown(*frames):
        out = diff_cmd(before, after, *frames).stdout
        stack = re.split(r"\n  (?! )", out[out.index("site_leak"):])[0]   # up to the next stack
        return [line.strip() for line in stack.splitlines()]
    assert shown("--frames", "1")[1] == f"... {len(leak) - 1} more (--frames N)"
    assert len(shown()) == 5 and shown()[1].startswith("main (slowleaks.c:")   # 4 frames, then "more"
    every = shown("--frames", str(len(leak)))
    assert len(every) == len(leak) and "more" not in every[-1]


def test_diff_of_two_runs_matches_stacks_across_aslr(slowleaks, tmp_path):
    """Another run: every address differs (ASLR), the stacks are the same."""
    workdir, pid = slowleaks
    prog = compile_program("slowleaks.c")
    t = Traced([prog], tmp_path, config="mtraceinit")
    t.reports_at(*["round"] * (ROUNDS - 2))   # two rounds fewer before its exit
    t.proc.stdin.write(b"\n\n")
    t.proc.stdin.flush()
    assert t.finish() == 0, t.stderr
    r = diff_cmd(workdir, tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    stacks = {first_function(s): s for s in json.loads(r.stdout)["stacks"]}
    # run 2 exited after as many rounds (its last two without a report): same leaks
    assert "site_leak" not in stacks and "site_rare" not in stacks
    assert not [s for s in json.loads(r.stdout)["stacks"] if s["status"] in ("new", "gone")
                and first_function(s)]


def test_the_reader_survives_damaged_reports(slowleaks, tmp_path):
    """Truncated and corrupted copies of real reports, and foreign files:
    one line each, never a traceback, the rest still read."""
    from hypothesis import given, settings, strategies as st
    from libmemleak.files.series import InputError, read_series
    workdir, pid = slowleaks
    original = (workdir / f"slowleaks-{pid}-2.memlog").read_bytes()

    @settings(max_examples=150, deadline=None)
    @given(cut=st.integers(0, len(original)), flips=st.lists(
        st.tuples(st.integers(0, len(original) - 1), st.integers(0, 255)), max_size=8),
        junk=st.binary(max_size=200))
    def damaged(cut, flips, junk):
        data = bytearray(original[:cut]) + junk
        for at, value in flips:
            if at < len(data):
                data[at] = value
        d = tmp_path / "case"
        d.mkdir(exist_ok=True)
        for old in d.iterdir():
            old.unlink()
        (d / f"slowleaks-{pid}-1.memlog").write_bytes(data)
        (d / "other-9-1.memlog").write_bytes(original)
        try:
            series, problems = read_series([str(d)])
        except InputError:
            return
        assert series  # the intact one at least
        from libmemleak.analysis.trends import analyse
        for s in series:
            analyse(s)

    damaged()


def test_group_by_site_and_function(slowleaks):
    """Stacks merged by the program's own code where they allocate."""
    workdir, pid = slowleaks
    for how in ("site", "function"):
        r = report_cmd(workdir, "--json", "--group-by", how, "--all")
        assert r.returncode == 0, r.stderr
        [proc] = json.loads(r.stdout)["processes"]
        names = [first_function(s) for s in proc["stacks"]]
        assert len([n for n in names if n == "site_leak"]) == 1
        leak = next(s for s in proc["suspects"] if first_function(s) == "site_leak")
        assert (leak["live_bytes"], leak["live_blocks"]) == (64 * ROUNDS, ROUNDS)
        assert sum(s["live_bytes"] for s in proc["stacks"]) == proc["live_bytes"]
        if how == "function":
            assert len(leak["frames"]) == 1


def test_report_on_a_threaded_cxx_server_with_map_and_string_churn(tmp_path):
    """Worker threads churning std::map<std::string, std::string>, an LRU
    cache, and three kinds of growth hidden in it."""
    prog = compile_program("slowleaks_server.cc", "-O1")
    t = Traced([prog], tmp_path, config="mtraceinit")
    t.reports_at(*["round"] * ROUNDS)
    assert t.finish() == 0, t.stderr
    r = report_cmd(tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    [proc] = json.loads(r.stdout)["processes"]

    def own_function(stack):
        return next((f["function"] for f in stack["frames"]
                     if f["function"] and any(k in f["function"] for k in
                                              ("Session::open", "parse_error_path",
                                               "KeyCache::remember"))), None)
    suspects = [own_function(s) for s in proc["suspects"]]
    for leak in ("Session::open", "parse_error_path", "KeyCache::remember"):
        assert any(s and leak in s for s in suspects), (leak, [s["verdict"] for s in proc["suspects"]])
    # every real leak ranks above anything else that grew (the LRU's strings
    # grow a little as its keys get longer)
    real = [bool(own_function(s)) for s in proc["suspects"]]
    assert real == sorted(real, reverse=True), [s["verdict"] for s in proc["suspects"]]
    session = next(s for s in proc["suspects"] if "Session::open" in (own_function(s) or ""))
    assert (session["live_bytes"], session["live_blocks"]) == (96 * ROUNDS, ROUNDS)
    assert session["kind"] == "new"
    error = next(s for s in proc["suspects"] if "parse_error_path" in (own_function(s) or ""))
    assert (error["live_bytes"], error["live_blocks"]) == (900, 3)
    # what else grew (churn that happened to grow, the LRU's strings) keeps
    # few of its allocations
    assert all(s["survival"] < 0.5 for s in proc["suspects"] if not own_function(s))


def test_progress_bar_on_a_terminal_and_none_in_a_pipe():
    import pty
    from libmemleak.commands.inputs import progress_bar
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        show = progress_bar(tty, every=0, delay=0)
        show(3, 10)
        show(10, 10)
    shown = b""
    while True:  # to the end: the slave is closed
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: no writer left
            break
        if not chunk:
            break
        shown += chunk
    shown = shown.decode()
    os.close(master)
    assert "reading reports [#########.....................] 3/10" in shown
    assert shown.endswith("\r\x1b[K")  # the line is cleared when done
    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe:
        assert progress_bar(pipe) is None
    os.close(r)


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux for a real terminal")
def test_on_a_terminal_the_report_fits_the_screen(slowleaks, tmp_path):
    workdir, pid = slowleaks
    term = Terminal(["report", workdir], tmp_path)
    try:
        term.wait_done()
        screen = term.screen()
    finally:
        term.close()
    lines = [line for line in screen.splitlines() if line.strip()]
    assert lines[0].startswith(f"slowleaks (pid {pid})"), screen
    assert any(line.lstrip().startswith("#1 ") for line in lines), screen
    assert any("more: --top N" in line for line in lines), screen  # cut to the screen
    assert len(screen.splitlines()) <= 24


def export_cmd(*args):
    return cli("export", *args)


def test_collapsed_export_adds_up_to_the_live_total(slowleaks, tmp_path):
    workdir, pid = slowleaks
    out = tmp_path / "stacks.folded"
    r = export_cmd("--format", "collapsed", "-o", out, workdir)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    values = {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in lines}
    doc = json.loads(report_cmd(workdir, "--json").stdout)
    [proc] = doc["processes"]
    assert sum(values.values()) == sum(s["live_bytes"] for s in proc["stacks"] if s["live_bytes"] > 0)
    leak = next(k for k in values if k.endswith(";main;site_leak"))
    assert leak.startswith("_start;") and values[leak] == 64 * ROUNDS  # outermost first
    assert all(";" in k and " " not in k.split(";")[-1] for k in values)


def test_export_bad_input_is_one_line(tmp_path):
    r = export_cmd("--format", "collapsed", tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no report" in r.stderr
    r = export_cmd("--format", "pdf", tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "invalid choice" in r.stderr


def test_export_says_what_its_file_is_and_keeps_html_off_a_terminal(slowleaks, tmp_path):
    """(#28 item 16) without -o the flamegraph filled the terminal with HTML;
    a name that is not its format's gets a note."""
    workdir, _ = slowleaks
    r = export_cmd("--format", "flamegraph", "-o", tmp_path / "flame.htm", workdir)
    assert r.returncode == 0
    assert r.stderr == ("libmemleak: export: note: flamegraph writes an HTML page; a name ending in "
                        ".html opens it where it belongs\n")
    assert (tmp_path / "flame.htm").read_text().startswith("<!DOCTYPE html>")
    r = export_cmd("--format", "flamegraph", "-o", tmp_path / "flame.html", workdir)
    assert (r.returncode, r.stderr) == (0, "")
    term = Terminal(["export", "--format", "flamegraph", workdir], tmp_path)
    try:
        assert term.wait_done()
        screen = term.screen()
        assert ("libmemleak: export: flamegraph is an HTML page, not for a terminal: -o flamegraph.html"
                in screen.replace("\n", "")) and "<html" not in screen
    finally:
        term.close()


def check_cmd(*args):
    return cli("check", *args)


def test_check_fails_a_leaking_program_and_passes_a_clean_one(slowleaks, tmp_path):
    workdir, pid = slowleaks
    r = check_cmd(workdir, "--max-leaks", "0")
    assert r.returncode == 1, r.stderr
    assert "3 leak suspects, over --max-leaks 0" in r.stdout and "site_leak" in r.stdout
    assert check_cmd(workdir, "--max-growth", "10000000").returncode == 0
    assert check_cmd(workdir, "--max-growth", "100").returncode == 1
    # sizes as MEMLEAK_CONFIG takes them (#64 item 15): 10M, 100k
    assert check_cmd(workdir, "--max-growth", "10M").returncode == 0
    # (1k is 1024, whatever the churn thread grew by chance: none of the
    # program's own stacks grows past 600 bytes)
    kilo, plain = check_cmd(workdir, "--max-growth", "1k"), check_cmd(workdir, "--max-growth", "1024")
    assert (kilo.returncode, kilo.stdout) == (plain.returncode, plain.stdout)
    bad = check_cmd(workdir, "--max-growth", "10Q")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    # a clean program: everything freed before exit
    src = tmp_path / "clean.c"
    src.write_text("#include <stdlib.h>\nint main(void) { for (int i = 0; i < 1000; i++) "
                   "free(malloc(64)); return 0; }\n")
    subprocess.run(["gcc", "-O0", str(src), "-o", str(tmp_path / "clean")], check=True)
    runs = tmp_path / "runs"
    runs.mkdir()
    run = cli("run", "-q", tmp_path / "clean", cwd=runs)
    assert run.returncode == 0
    r = check_cmd(runs, "--max-live", "0", "--max-leaks", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert check_cmd(tmp_path / "nothing-here").returncode == 2  # no limit, no input
    assert check_cmd(tmp_path / "nothing-here", "--max-live", "0").returncode == 2


@pytest.mark.skipif(not shutil.which("go"), reason="needs go (Debian's golang-go) for go tool pprof")
def test_pprof_export_loads_in_go_tool_pprof_with_the_right_totals(slowleaks, tmp_path):
    workdir, pid = slowleaks
    out = tmp_path / "heap.pb.gz"
    r = export_cmd("--format", "pprof", "-o", out, workdir)
    assert r.returncode == 0, r.stderr
    doc = json.loads(report_cmd(workdir, "--json").stdout)
    [proc] = doc["processes"]
    live = sum(s["live_bytes"] for s in proc["stacks"] if s["live_bytes"] > 0)
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "gocache"))
    top = subprocess.run(["go", "tool", "pprof", "-top", "-nodefraction=0", "-sample_index=inuse_space",
                          str(out)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert top.returncode == 0, top.stderr
    assert f"100% of {live}B total" in top.stdout, top.stdout
    rows = {line.split()[-1]: line.split()[0] for line in top.stdout.splitlines()
            if line.strip().endswith(("site_leak", "site_rare", "site_startup"))}
    assert rows == {"site_leak": f"{64 * ROUNDS}B", "site_rare": "600B", "site_startup": "4096B"}
    allocs = subprocess.run(["go", "tool", "pprof", "-top", "-nodefraction=0", "-sample_index=alloc_objects",
                             str(out)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert allocs.returncode == 0, allocs.stderr
    leak = next(line for line in allocs.stdout.splitlines() if line.strip().endswith("site_leak"))
    assert leak.split()[0] == str(ROUNDS)




def exported_page(fmt, workdir, page):
    """An HTML export, checked to be self-contained (nothing fetched)."""
    r = export_cmd("--format", fmt, "-o", page, workdir)
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert "http://" not in text and "https://" not in text
    return page


def test_flamegraph_draws_what_the_program_held_before_exit_and_svg_is_svg(slowleaks, tmp_path):
    """#64 item 6: the flamegraph drew what was live in the exit report (for
    Node, OpenSSL's certificate store, not the 148 MB leak ranked #1 on the
    same page), and `-o x.svg` wrote an HTML page.  site_cache_grow's 384
    bytes, freed at exit, are a suspect: the drawing has them."""
    import xml.etree.ElementTree as ET
    workdir, _ = slowleaks
    svg = tmp_path / "flame.svg"
    r = export_cmd("--format", "flamegraph", "-o", svg, workdir)
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    root = ET.parse(svg).getroot()  # well-formed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    ns = {"s": "http://www.w3.org/2000/svg"}
    title = " ".join(t.text for t in root.findall("s:text", ns))
    assert "live bytes before exit (the last report before the exit report)" in title, title
    tips = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    cache = [tip for tip in tips if tip.startswith("site_cache_grow -- ")]
    assert cache and cache[0].startswith(f"site_cache_grow -- {48 * ROUNDS} B in {ROUNDS} blocks"), cache
    assert any(tip.startswith(f"site_leak -- {64 * ROUNDS} B") for tip in tips)
    page = exported_page("flamegraph", workdir, tmp_path / "flame.html")
    assert "site_cache_grow" in page.read_text() and "before exit" in page.read_text()
    if CHROMIUM:  # its real consumer: a browser draws it
        shot = tmp_path / "svg.png"
        headless(tmp_path / "profile", "--window-size=1200,400", f"--screenshot={shot}", f"file://{svg}")
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium")
def test_flamegraph_renders_and_searches_in_a_real_browser(slowleaks, tmp_path):
    workdir, pid = slowleaks
    page = exported_page("flamegraph", workdir, tmp_path / "flame.html")
    url = f"file://{page}#search=site_leak"
    dom = headless(tmp_path / "profile", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr
    frames = re.findall(r'<div class="f( hit)?" title="([^"]*)"', dom.stdout)
    names = {name for _, name in frames}
    assert {"all", "main", "site_leak", "site_rare", "site_startup"} <= names, names
    assert [name for hit, name in frames if hit] == ["site_leak"]  # the search found it alone
    assert "1 matched" in dom.stdout
    shot = tmp_path / "flame.png"
    headless(tmp_path / "profile", "--window-size=1200,500", f"--screenshot={shot}", url)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000  # a picture, not an empty page


def test_suppressions_in_leaksanitizer_syntax(slowleaks, tmp_path):
    workdir, pid = slowleaks
    rules = tmp_path / "leaks.supp"
    rules.write_text("# known, accepted\nleak:site_rare\nleak:^site_cache*$\n")
    r = check_cmd(workdir, "--max-leaks", "1", "--suppressions", rules)
    assert r.returncode == 0, r.stdout  # only site_leak is left
    doc = json.loads(report_cmd(workdir, "--json", "--suppressions", rules).stdout)
    [proc] = doc["processes"]
    names = {first_function(s) for s in proc["suspects"]}
    assert "site_leak" in names and not names & {"site_rare", "site_cache_grow"}
    assert any("suppressed" in note for note in proc["notes"])
    full = json.loads(report_cmd(workdir, "--json").stdout)["processes"][0]
    assert proc["live_bytes"] == full["live_bytes"] - 600  # site_rare's 600 live bytes left out
    folded = export_cmd("--format", "collapsed", "--suppressions", rules, workdir).stdout
    assert "site_rare" not in folded and "site_leak" in folded
    rules.write_text("leak site_rare\n")
    r = report_cmd(workdir, "--suppressions", rules)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "leaks.supp:1" in r.stderr


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium")
def test_html_report_renders_its_parts_and_its_table_filters(slowleaks, tmp_path):
    workdir, pid = slowleaks
    page = exported_page("html", workdir, tmp_path / "report.html")
    dom = headless(tmp_path / "profile", "--dump-dom", f"file://{page}#stacks=site_rare")
    assert dom.returncode == 0, dom.stderr
    out = dom.stdout
    suspects = out[out.index('id="suspects"'):out.index("</table>", out.index('id="suspects"'))]
    assert suspects.index("site_leak") < suspects.index("site_rare")  # the ranking, in order
    assert out.count("<polyline") >= 4  # the total and the charted suspects
    assert "1 shown" in out  # the stack table filtered to site_rare
    rows = re.findall(r'<tr style="display: none;">', out)
    assert len(rows) >= 5  # the other stacks hidden
    assert 'class="f"' in out  # the flamegraph drew its frames
    shot = tmp_path / "report.png"
    headless(tmp_path / "profile", "--window-size=1200,1400", f"--screenshot={shot}", f"file://{page}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20000


@pytest.mark.skipif(not shutil.which("go"), reason="needs go (Debian's golang-go) for go tool pprof")
def test_pprof_of_a_sampled_run_carries_its_sampling_period(tmp_path):
    prog = compile_program("sampled.c")
    t = Traced([prog, "20000"], tmp_path, config="mtraceinit,sample=65536")
    t.reports_at("allocated", "freed")
    assert t.finish() == 0, t.stderr
    out = tmp_path / "heap.pb.gz"
    assert export_cmd("--format", "pprof", "-o", out, tmp_path).returncode == 0
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "gocache"))
    raw = subprocess.run(["go", "tool", "pprof", "-raw", str(out)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert raw.returncode == 0, raw.stderr
    assert "Period: 65536" in raw.stdout, raw.stdout[:400]


def test_diff_of_what_cannot_be_read_is_one_line_and_status_2(slowleaks, tmp_path):
    workdir, pid = slowleaks
    r = diff_cmd(tmp_path / "no-such-report.memlog", workdir)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "no such file or directory" in r.stderr, r.stderr



def test_growth_since_a_report_is_what_grew_after_it(slowleaks, tmp_path):
    """--since SEQ draws the leak between two reports, not what is live."""
    workdir, pid = slowleaks
    r = export_cmd("--format", "collapsed", "--since", "3", workdir)
    assert r.returncode == 0, r.stderr
    values = {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in r.stdout.splitlines()}
    leak = next(v for k, v in values.items() if k.endswith(";main;site_leak"))
    assert leak == 64 * (ROUNDS - 3)  # rounds 4..8; nothing of it freed at exit
    assert not any(k.endswith(";site_startup") for k in values)  # start-up grew before report 3
    page = tmp_path / "growth.html"
    assert export_cmd("--format", "flamegraph", "--since", "3", "-o", page, workdir).returncode == 0
    assert "growth since report 3" in page.read_text()
    bad = export_cmd("--format", "json", "--since", "3", workdir)
    assert bad.returncode == 2 and "--since draws growth" in bad.stderr
    bad = export_cmd("--format", "collapsed", "--since", "99", workdir)
    assert bad.returncode == 2 and "no process has a report 99" in bad.stderr


SPEEDSCOPE_VERSION = "1.25.0"


def speedscope_package():
    """speedscope's npm package (its schema and its app), fetched once with
    npm into a cache; None where npm or the registry is not at hand."""
    cache = os.path.join(os.environ.get("MEMLEAK_TEST_BUILD", "/tmp/libmemleak-test-build"),
                         f"speedscope-{SPEEDSCOPE_VERSION}")
    release = os.path.join(cache, "package", "dist", "release")
    if os.path.exists(os.path.join(release, "index.html")):
        return release
    if not shutil.which("npm"):
        return None
    os.makedirs(cache, exist_ok=True)
    try:
        packed = subprocess.run(["npm", "pack", f"speedscope@{SPEEDSCOPE_VERSION}"], cwd=cache,
                                capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None
    tgz = os.path.join(cache, f"speedscope-{SPEEDSCOPE_VERSION}.tgz")
    if packed.returncode != 0 or not os.path.exists(tgz):
        return None
    subprocess.run(["tar", "xzf", tgz], cwd=cache, check=True)
    return release if os.path.exists(os.path.join(release, "index.html")) else None


def test_speedscope_export_follows_the_schema_and_opens_in_speedscope(slowleaks, tmp_path):
    import http.server
    import threading
    jsonschema = pytest.importorskip("jsonschema")
    release = speedscope_package()
    if release is None:
        pytest.skip("speedscope's npm package is not at hand (npm, registry)")
    workdir, pid = slowleaks
    profile = tmp_path / "heap.speedscope.json"
    r = export_cmd("--format", "speedscope", "-o", profile, workdir)
    assert r.returncode == 0, r.stderr
    doc = json.loads(profile.read_text())
    with open(os.path.join(release, "file-format-schema.json")) as f:
        schema = json.load(f)
    jsonschema.validate(doc, {**schema, "$ref": "#/definitions/FileFormat.File"})
    [prof] = doc["profiles"]
    collapsed = export_cmd("--format", "collapsed", workdir).stdout.splitlines()
    assert prof["endValue"] == sum(prof["weights"]) == sum(int(line.rsplit(" ", 1)[1]) for line in collapsed)
    names = [doc["shared"]["frames"][i]["name"] for i in prof["samples"][prof["weights"].index(64 * ROUNDS)]]
    assert names[0] == "_start" and names[-2:] == ["main", "site_leak"]  # root first
    # speedscope itself, served from localhost, loads it
    shutil.copy(profile, os.path.join(tmp_path, "p.json"))
    for name in os.listdir(release):
        os.symlink(os.path.join(release, name), tmp_path / name)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        url = f"{base}/index.html#profileURL={base}/p.json"
        if not CHROMIUM:
            pytest.skip("needs Debian's chromium")
        dom = headless(tmp_path / "profile", "--virtual-time-budget=8000", "--dump-dom", url)
        assert f"slowleaks (pid {pid}): live bytes" in dom.stdout
        shot = tmp_path / "speedscope.png"
        headless(tmp_path / "profile", "--virtual-time-budget=8000", "--window-size=1200,500",
                 f"--screenshot={shot}", url)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10000
    finally:
        server.shutdown()


@pytest.mark.skipif(not shutil.which("go"), reason="needs go tool pprof (Debian's golang-go)")
def test_unsymbolized_reports_give_a_pprof_that_stock_pprof_symbolizes(tmp_path):
    """MEMLEAK_SYMBOLIZE=no: frames as module+offset and the modules'
    build-ids in the header; the pprof export leaves those locations for
    pprof to symbolize from the binary, as on another host."""
    prog = compile_program("slowleaks.c")
    t = Traced([prog], tmp_path, config="mtraceinit", env={"MEMLEAK_SYMBOLIZE": "no"})
    t.reports_at(*["round"] * ROUNDS)
    assert t.finish() == 0, t.stderr
    last = t.reports()[-1]
    assert last.header["symbolization"].startswith("none")
    build_ids = {k[len("build-id "):]: v for k, v in last.header.items() if k.startswith("build-id ")}
    assert re.fullmatch(r"[0-9a-f]{40}", build_ids[prog])
    assert all(f.function is None for e in last.entries for f in e.frames)
    out = tmp_path / "heap.pb.gz"
    assert export_cmd("--format", "pprof", "-o", out, tmp_path).returncode == 0
    env = dict(os.environ, HOME=str(tmp_path), GOCACHE=str(tmp_path / "gocache"))
    raw = subprocess.run(["go", "tool", "pprof", "-raw", str(out)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert build_ids[prog] in raw.stdout  # the mapping names the file by build-id
    top = subprocess.run(["go", "tool", "pprof", "-symbolize=local", "-top", "-nodefraction=0",
                          "-sample_index=inuse_space", str(out)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert top.returncode == 0, top.stderr
    rows = {line.split()[-1]: line.split()[0] for line in top.stdout.splitlines()
            if line.strip().endswith(("site_leak", "site_rare", "site_startup"))}
    assert rows == {"site_leak": f"{64 * ROUNDS}B", "site_rare": "600B", "site_startup": "4096B"}


def test_symbolize_on_another_host_gives_the_frames_a_local_report_has(slowleaks, tmp_path):
    """Reports written with MEMLEAK_SYMBOLIZE=no, symbolized later from a
    copy of the binary under --sysroot (the original gone, as on another
    host): the same frames as the local run's reports name."""
    prog = compile_program("slowleaks.c", name="slowleaks_offline")
    raw = tmp_path / "raw"
    raw.mkdir()
    t = Traced([prog], raw, config="mtraceinit", env={"MEMLEAK_SYMBOLIZE": "no"})
    t.reports_at(*["round"] * ROUNDS)
    assert t.finish() == 0, t.stderr
    sysroot = tmp_path / "sysroot"
    os.makedirs(sysroot / os.path.dirname(prog).lstrip("/"))
    shutil.copy(prog, str(sysroot) + prog)
    os.rename(prog, prog + ".away")  # the capture host's file is not here
    try:
        out = cli("symbolize", "-o", tmp_path / "out", "--sysroot", sysroot, raw)
    finally:
        os.rename(prog + ".away", prog)
    assert out.returncode == 0, out.stderr
    first = memlog.read(str(tmp_path / "out" / os.path.basename(out.stdout.splitlines()[0])))
    assert first.header["symbolization"] == "offline (libmemleak symbolize)"

    def sites(report):  # the site frame and its caller, of the sites every run has
        return {tuple((f.function, os.path.basename(f.file or ""), f.line) for f in e.frames[:2])
                for e in report.entries if e.frames and e.frames[0].function in ("site_startup", "site_leak")}

    workdir, pid = slowleaks
    local = memlog.read(os.path.join(workdir, f"slowleaks-{pid}-1.memlog"))
    assert len(sites(first)) == 2 and sites(first) == sites(local)
    missing = cli("symbolize", "-o", tmp_path / "out2", "--sysroot", tmp_path / "nowhere", raw)
    assert missing.returncode == 0 and "not found; its frames stay module+offset" in missing.stderr
    bad = cli("symbolize", "-o", tmp_path / "out3", tmp_path / "nothing-here")
    assert bad.returncode == 2


def test_check_leaves_suppressed_stacks_out_of_definitely_lost(tmp_path):
    """(#28 item 11) `report` dropped suppressed stacks; `check
    --max-definitely-lost` still counted their lost bytes."""
    prog = compile_program("reach.c")
    out = subprocess.run(cli_argv("run", "-q", "--scan-at-exit", prog), cwd=tmp_path, env=CLI_ENV,
                         input="\n" * 10, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert cli("check", tmp_path, "--max-definitely-lost", "0").returncode == 1
    rules = tmp_path / "rules.supp"
    rules.write_text("# every stack reach.c loses a block from\n"
                     "leak:site_lost\nleak:site_cycle\nleak:site_forgotten\nleak:site_tree_root\nleak:site_stack\n")
    r = cli("check", tmp_path, "--max-definitely-lost", "0", "--suppressions", rules)
    assert (r.returncode, r.stdout) == (0, ""), r.stdout + r.stderr
    # the suppressions cover only some of it: the rest still fails
    rules.write_text("leak:site_forgotten\n")
    r = cli("check", tmp_path, "--max-definitely-lost", "0", "--suppressions", rules)
    assert r.returncode == 1
    assert "definitely lost" in r.stdout and "site_forgotten" not in r.stdout


def test_report_says_when_stacks_were_cut_at_the_depth(tmp_path):
    """(#28 item 15) Most of a PostgreSQL backend's stacks were cut at depth
    16 and nothing said so."""
    prog = compile_program("deepstack.c")
    assert cli("run", "-q", prog, cwd=tmp_path).returncode == 0
    note = ("5 allocations (83% of 6) had their call stack cut at depth 16: outer frames are not "
            "shown, and stacks that differ only there are one; MEMLEAK_CONFIG depth=32 (at most 64) "
            "shows more")
    assert f"  note: {note}\n" in cli("report", tmp_path).stdout
    doc = json.loads(cli("report", "--json", tmp_path).stdout)
    assert note in doc["processes"][0]["notes"]
    # per stack (#28 item 15, per suspect): the report's entry, report, --json
    [report] = [memlog.read(p) for p in tmp_path.glob("deepstack-*.memlog")]
    deep = [e for e in report.entries if e.frames[0].function == "deep"]
    assert [(e.bytes, e.blocks) for e in deep] == [(160, 5)] and "cut=16" in deep[0].extra
    assert not [e for e in report.entries if e not in deep and any(x.startswith("cut=") for x in e.extra)]
    shown = cli("report", "--all", tmp_path).stdout
    said = ("(stack cut at depth 16: its outer callers were not recorded; MEMLEAK_CONFIG depth=32 "
            "(at most 64) shows more)")
    assert shown.count(said) == 1
    assert shown.index("160 B live in 5 blocks") < shown.index(said)
    stacks = {s["live_bytes"]: s for s in doc["processes"][0]["stacks"]}
    assert stacks[160]["cut_at_depth"] == 16 and "cut_at_depth" not in stacks[8]
    (tmp_path / "deeper").mkdir()
    assert cli("run", "-q", "--config", "depth=40", prog, cwd=tmp_path / "deeper").returncode == 0
    assert "cut at depth" not in cli("report", tmp_path / "deeper").stdout


def run_bigsteady(directory):
    """bigsteady.c traced, a report at each of its 6 rounds (the third a
    live scan), then its exit report; its pid."""
    prog = compile_program("bigsteady.c")
    t = Traced([prog], directory)
    for seq in range(1, 7):
        t.expect("round")
        if seq == 3:
            scanned = cli("scan", t.pid)
            assert scanned.returncode == 0, scanned.stderr
        else:
            t.signal_report(seq)
        t.resume()
    assert t.finish() == 0, t.stderr
    return t.pid


@pytest.fixture(scope="module")
def bigsteady(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bigsteady")
    return workdir, run_bigsteady(workdir)


def test_a_large_steady_grower_outranks_a_small_block_lost_at_start_up(bigsteady):
    """(#28 item 12) After one scan, a constant 432-byte start-up block
    (definitely lost) ranked above a stack growing 1 MiB in every
    interval.  Both stay suspects, each with its verdict; the grower first."""
    tmp_path, _ = bigsteady
    doc = json.loads(cli("report", "--json", tmp_path).stdout)
    [proc] = doc["processes"]
    suspects = [first_function(s) for s in proc["suspects"]]
    assert suspects[:2] == ["site_steady", "site_startup_lost"], suspects
    lost = proc["suspects"][1]
    assert lost["reachability"] == {"definitely_lost": {"bytes": 432, "blocks": 1}}
    assert lost["verdict"].startswith("definitely lost: 432 B in 1 block")
    # (#28 item 16) it was "never freed, 6.0 MB freed at exit"
    steady = proc["suspects"][0]["verdict"]
    assert steady.startswith("grows in 5 of 5 intervals, ") and steady.endswith(
        "6 blocks live before exit, allocated 6 times, never freed before exit, 6.0 MB freed at exit")
    text = cli("report", tmp_path).stdout
    assert text.index("site_steady") < text.index("site_startup_lost")


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium")
def test_html_report_agrees_with_the_cli_and_charts_each_suspect_on_its_own_scale(bigsteady, tmp_path):
    """(#28 item 13) The suspect table's "live" showed another value than
    the verdict beside it; one scale for MB and KB stacks drew the KB
    grower flat at zero; legends were cut to the same prefix; the title
    listed every pid."""
    workdir, pid = bigsteady
    page = exported_page("html", workdir, tmp_path / "report.html")
    dom = headless(tmp_path / "profile", "--dump-dom", f"file://{page}")
    assert dom.returncode == 0, dom.stderr
    out = dom.stdout
    assert f"<title>libmemleak: bigsteady (pid {pid})</title>" in out
    # the live column says what `report` says, next to the same verdict
    cli_ranked = [line for line in cli("report", workdir).stdout.splitlines() if line.startswith("  #")]
    html_rows = re.findall(r'<tr><td class="n">#(\d+)</td><td>([^<]*)</td><td class="n">([^<]*)</td>', out)
    assert len(html_rows) == len(cli_ranked) >= 3
    for (rank, verdict, live), line in zip(html_rows, cli_ranked):
        assert line == f"  #{rank} {live} -- {html.unescape(verdict)}"
    # each charted series on its own scale: the 48-byte grower spans its
    # chart's height like the 1 MiB one does; labels whole and distinct
    charts = re.findall(r'<td class="label" title="([^"]*)"[^>]*>([^<]*)</td><td><svg class="chart" '
                        r'width="\d+" height="(\d+)"><polyline[^>]*points="([^"]*)"', out)
    labels = {label: (int(height), [float(p.split(",")[1]) for p in points.split()])
              for _, label, height, points in charts}
    assert len(labels) == len(charts) and "all stacks" in labels
    small = next(v for k, v in labels.items() if "site_small_grower (bigsteady.c:" in k)
    steady = next(v for k, v in labels.items() if k.startswith("#1 site_steady (bigsteady.c:"))
    for height, ys in (small, steady):
        assert max(ys) - min(ys) > height / 2, ys
    assert "0 to 6.0 MB" in out and "0 to 288 B" in out   # each scale says what it spans
    # two processes: the title names the program and counts them
    (tmp_path / "two").mkdir()
    run_bigsteady(tmp_path / "two")
    for name in os.listdir(workdir):
        if name.endswith(".memlog"):
            shutil.copy(workdir / name, tmp_path / "two")
    two = exported_page("html", tmp_path / "two", tmp_path / "two.html").read_text()
    assert "<title>libmemleak: bigsteady: 2 processes</title>" in two


def test_churn_that_keeps_nothing_is_not_a_suspect_however_its_level_falls(tmp_path):
    """A stack that keeps almost none of what it allocates: its live level
    at each report is what happens to be in flight, and rises between two
    reports about half the time (slowleaks' churn thread rose in 4 of 7
    intervals under load and was called a leak).  A slow leak hidden in
    the same churn rises in every interval and still is one."""
    from libmemleak.files.memlog import Entry
    from libmemleak.files.memlog_write import render
    from libmemleak.symbols import Frame

    def frames(site):
        return [Frame(site, "/opt/app", 0x10, "app.c", 10), Frame("main", "/opt/app", 0x20, "app.c", 99)]

    churn_levels = [30, 34, 29, 36, 38, 31, 40, 35]          # 4 rises in 7
    hidden_leak = [10, 11, 12, 13, 14, 15, 16, 17]           # a block a round among 1,000 freed
    for seq in range(1, 9):
        entries = []
        for site, levels in (("site_churn", churn_levels), ("site_hidden_leak", hidden_leak)):
            was = levels[seq - 2] if seq > 1 else 0
            change = levels[seq - 1] - was
            entries.append(Entry(64 * change, change, frames(site), [f"allocs=+{20000 if seq > 1 else 30}"]))
        header = [("libmemleak", "0.1.0"), ("program", "/opt/app"), ("pid", 4242), ("seq", seq),
                  ("time", f"2026-11-24T06:00:{10 * seq:02d}.000+00:00"), ("reason", "signal")]
        (tmp_path / f"app-4242-{seq}.memlog").write_text(render(header, entries))
    out = cli("report", "--json", tmp_path)
    assert out.returncode == 0, out.stderr
    [process] = json.loads(out.stdout)["processes"]
    assert [s["frames"][0]["function"] for s in process["suspects"]] == ["site_hidden_leak"]
