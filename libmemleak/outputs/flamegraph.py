"""A self-contained interactive flamegraph of live bytes (one HTML file, no
network): click a frame to zoom into it, type in the search box to
highlight frames, hover for bytes, blocks and allocations.  Readable for
10,000 stacks: frames narrower than a pixel's share are merged into their
parent (as flamegraph.pl's --minwidth), so the page holds what can be seen.

The tree is built here and written as JSON into the page; the page draws
it with a few lines of plain JavaScript into absolutely positioned divs."""

import html
import json

from libmemleak.outputs.collapsed import drawing_notes, drawn_frames, frame_name

MIN_SHARE = 0.0005  # of the total: narrower nodes are left out (their bytes stay in the parent)


def before_teardown(a):
    """Whether a's drawing is of its last report before its exit (or death)
    report: what the program held while it ran -- what the suspects are
    about -- where the exit report holds what was left after teardown (a
    Node process's certificate store, not the 148 MB leak it freed as it
    ended)."""
    return a.running_reports < len(a.series.reports)


def drawn(t, a):
    """(bytes, blocks) of trend t the drawing shows (before_teardown)."""
    return (t.running_live_bytes, t.running_live_blocks) if before_teardown(a) else (t.live_bytes, t.live_blocks)


def moment_words(analyses):
    """What the drawing is of, for its title."""
    if any(before_teardown(a) for a in analyses):
        return "live bytes before exit (the last report before the exit report)"
    return "live bytes at the last report"


def tree_of(analyses):
    root = {"n": "all", "v": 0, "k": 0, "a": 0, "c": {}}
    for a in analyses:
        for t in a.trends:
            live, blocks = drawn(t, a)
            if live <= 0:
                continue
            root["v"] += live
            root["k"] += blocks
            node = root
            for f in reversed(drawn_frames(t, a)):  # outermost first
                name = frame_name(f)
                child = node["c"].get(name)
                if child is None:
                    child = node["c"][name] = {"n": name, "v": 0, "k": 0, "a": 0, "c": {},
                                               "f": f"{f.file}:{f.line}" if f.file else (f.module or "")}
                child["v"] += live
                child["k"] += blocks
                child["a"] += t.allocations or 0
                node = child
    return root


def _prune(node, floor):
    kids = [_prune(c, floor) for c in node["c"].values() if c["v"] >= floor]
    kids.sort(key=lambda c: -c["v"])
    out = {"n": node["n"], "v": node["v"], "k": node["k"], "a": node["a"], "c": kids}
    if node.get("f"):
        out["f"] = node["f"]
    return out


STYLE = """
.f { position: absolute; height: 17px; overflow: hidden; white-space: nowrap; box-sizing: border-box;
     border: 1px solid #fff; padding: 0 3px; font-size: 11px; line-height: 15px; cursor: pointer;
     background: #e8a33d; }
.f.hit { background: #d94fd9; }
#flame { position: relative; width: 100%; }
#flame-info { height: 18px; margin: 4px 0; }
"""

# The graph's own part of a page: a search box, a line for the hovered
# frame, the graph, its data and the script that draws it.
BODY = """<input id="flame-search" placeholder="search frames" size="40"> <button id="flame-reset">reset zoom</button>
<span id="flame-matched"></span>
<div id="flame-info">hover a frame; click to zoom</div>
<div id="flame"></div>
<script id="flame-data" type="application/json">%(data)s</script>
<script>
(function () {
const root = JSON.parse(document.getElementById('flame-data').textContent);
const graph = document.getElementById('flame'), info = document.getElementById('flame-info');
const box = document.getElementById('flame-search'), H = 18;
function depth(n) { return 1 + Math.max(0, ...n.c.map(depth)); }
function human(b) { const u = ['B','KB','MB','GB']; let i = 0; while (b >= 1024 && i < 3) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + ' ' + u[i]; }
function draw(top) {
  graph.innerHTML = '';
  if (!top.v) { graph.textContent = 'nothing live'; return; }
  const rows = depth(top);
  graph.style.height = (rows * H) + 'px';
  const width = graph.clientWidth;
  (function place(n, x, level, scale) {
    const w = n.v * scale;
    if (w < 1) return;
    const d = document.createElement('div');
    d.className = 'f'; d.textContent = n.n; d.title = n.n;
    d.style.left = x + 'px'; d.style.width = w + 'px'; d.style.top = ((rows - level - 1) * H) + 'px';
    d.onmouseover = () => info.textContent = n.n + ' \u2014 ' + human(n.v) + ' live in ' + n.k +
      ' blocks' + (n.a ? ', ' + n.a + ' allocations' : '') + (n.f ? ' (' + n.f + ')' : '');
    d.onclick = () => draw(n);
    graph.appendChild(d);
    let cx = x;
    for (const c of n.c) { place(c, cx, level + 1, scale); cx += c.v * scale; }
  })(top, 0, 0, width / top.v);
  search();
}
function search() {
  const q = box.value.toLowerCase();
  let hits = 0;
  for (const d of graph.children) {
    const hit = q && d.textContent.toLowerCase().includes(q);
    d.classList.toggle('hit', !!hit); if (hit) hits++;
  }
  document.getElementById('flame-matched').textContent = q ? hits + ' matched' : '';
}
box.oninput = search;
document.getElementById('flame-reset').onclick = () => draw(root);
// page.html#search=TEXT opens with TEXT searched (a link that shows a suspect)
const m = location.hash.match(/search=([^&]*)/);
if (m) box.value = decodeURIComponent(m[1]);
draw(root);
})();
</script>"""

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>%(title)s</title>
<style>body { font: 12px sans-serif; margin: 8px; }%(style)s</style></head><body>
<h3>%(title)s</h3>
%(body)s
</body></html>
"""


def body(analyses):
    """The flamegraph's part of a page (STYLE goes in its head)."""
    root = tree_of(analyses)
    pruned = _prune(root, max(1, root["v"] * MIN_SHARE))
    # "</" must not end the script element early (a function named "</script>" ...)
    data = json.dumps(pruned, separators=(",", ":")).replace("</", "<\\/")
    return BODY % {"data": data}


def page(analyses, title="live bytes"):
    notes = "".join(f'<p class="note">{html.escape(n)}</p>\n' for n in drawing_notes(analyses))
    return PAGE % {"title": html.escape(title), "style": STYLE, "body": notes + body(analyses)}


def write(out, analyses, problems, what=None):
    names = ", ".join(f"{a.series.program} (pid {a.series.pid})" for a in analyses)
    out.write(page(analyses, f"libmemleak: {what or moment_words(analyses)} of {names}"))

