"""One self-contained HTML page (nothing fetched from the network): per
process the summary, live bytes over time (the total and the top
suspects, an inline SVG chart), the leak suspects with their verdicts,
then one flamegraph of live bytes and a searchable table of the stacks.
Its size is bounded: the table holds the STACKS_SHOWN biggest stacks (the
rest are counted), the flamegraph merges frames too narrow to see."""

import html

from libmemleak.analysis.names import frame_lines, frame_text, shown_frames
from libmemleak.analysis.trends import count, human_bytes
from libmemleak.outputs import flamegraph
from libmemleak.outputs.text import live_words

STACKS_SHOWN = 2000
SUSPECTS_CHARTED = 5
COLORS = ("#c0392b", "#2471a3", "#229954", "#b9770e", "#7d3c98")

STYLE = """
body { font: 13px sans-serif; margin: 12px; }
table { border-collapse: collapse; margin: 6px 0; }
td, th { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
td.n { text-align: right; white-space: nowrap; }
.frames { font-family: monospace; font-size: 12px; white-space: pre; }
.note { color: #a04000; }
table.charts td { border: none; padding: 1px 8px; }
table.charts td.label { max-width: 360px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap;
                        font-family: monospace; font-size: 12px; }
table.charts th.axis { font-weight: normal; color: #666; }
"""

SCRIPT = """<script>
(function () {
const box = document.getElementById('stack-search');
function filter() {
  const q = box.value.toLowerCase();
  let shown = 0;
  for (const row of document.querySelectorAll('#stacks tbody tr')) {
    const keep = !q || row.textContent.toLowerCase().includes(q);
    row.style.display = keep ? '' : 'none'; if (keep) shown++;
  }
  document.getElementById('stack-count').textContent = shown + ' shown';
}
box.oninput = filter;
const m = location.hash.match(/stacks=([^&]*)/);
if (m) box.value = decodeURIComponent(m[1]);
filter();
})();
</script>"""


def _e(text):
    return html.escape(str(text))


def _frames(t, executable, keep=4, layer=None):
    return "\n".join(frame_lines(t.frames, executable, keep, cut=t.cut, more="", layer=layer))


def usage_chart(usage, width=840, height=90):
    """An event log's live total over time at full resolution: each step's
    highest total (so no peak is lost between points), the peak marked
    and, for a page of one moment, that moment."""
    points = usage.points
    if len(points) < 2:
        return ""
    lo_t, hi_t = usage.start_ns, max(usage.end_ns, points[-1][0], usage.start_ns + 1)
    high = max(max(p[2] for p in points), usage.peak_bytes, 1)

    def x(ns):
        return 2 + (width - 4) * (min(max(ns, lo_t), hi_t) - lo_t) / (hi_t - lo_t)

    def y(v):
        return 2 + (height - 4) * (high - max(v, 0)) / high
    line = " ".join(f"{x(p[0]):.1f},{y(p[2]):.1f}" for p in points)
    # the allocation rate, on a scale of its own: each step's allocations over its length
    rates, before = [], lo_t
    for p in points:
        rates.append(p[3] / max(p[0] - before, 1) * 1e9)
        before = p[0]
    top_rate = max(rates) or 1
    rate_line = " ".join(f"{x(p[0]):.1f},{2 + (height - 4) * (top_rate - r) / top_rate:.1f}"
                         for p, r in zip(points, rates))
    peak = (f'<circle cx="{x(usage.peak_ns):.1f}" cy="{y(usage.peak_bytes):.1f}" r="4" fill="#c33">'
            f'<title>peak: {_e(human_bytes(usage.peak_bytes))} at +{(usage.peak_ns - lo_t) / 1e9:.3f} s</title>'
            '</circle>')
    moment = ""
    if usage.moment_ns is not None:
        moment = (f'<line x1="{x(usage.moment_ns):.1f}" x2="{x(usage.moment_ns):.1f}" y1="0" y2="{height}" '
                  f'stroke="#36c" stroke-dasharray="3,3"><title>the moment shown: '
                  f'+{(usage.moment_ns - lo_t) / 1e9:.3f} s</title></line>')
    return (f'<h3>Live total over time (event log, {len(points):,} steps)</h3>'
            f'<p>peak <b>{_e(human_bytes(usage.peak_bytes))}</b> at +{(usage.peak_ns - lo_t) / 1e9:.3f} s of '
            f'{(hi_t - lo_t) / 1e9:.3f} s'
            + (f'; shown below: +{(usage.moment_ns - lo_t) / 1e9:.3f} s' if usage.moment_ns is not None else
               '; the suspects below are ranked over the log read as reports evenly spaced over it')
            + f'</p><svg class="usage" width="{width}" height="{height}">'
            f'<polyline fill="none" stroke="#444" stroke-width="1.5" points="{line}"/>'
            f'<polyline class="rate" fill="none" stroke="#e90" stroke-width="1" stroke-opacity="0.7" '
            f'points="{rate_line}"/>{moment}{peak}</svg>'
            f'<p class="axis">live: 0 to {_e(human_bytes(high))}; <span style="color:#e90">allocations: 0 to '
            f'{top_rate:,.0f}/s</span>; +0 s to +{(hi_t - lo_t) / 1e9:.3f} s</p>')


def chart(a, width=420, height=36):
    """Live bytes after each report: the total, then each charted suspect,
    one row each on a scale of its own -- a stack growing by kilobytes
    beside one growing by megabytes is not a flat line at zero -- labelled
    with its rank and whole name (and the range its scale spans)."""
    n = len(a.series.reports)
    if n < 2:
        return "<p>one report: no chart</p>"
    series = [("all stacks", "all stacks", _cumulative([sum(t.deltas[i] for t in a.trends)
                                                        for i in range(n)]))]
    for rank, t in enumerate(a.suspects[:SUSPECTS_CHARTED], 1):
        name = frame_text(shown_frames(t.frames, a.series.executable, 1, a.layer)[0][0]) if t.frames else "?"
        series.append((f"#{rank} {name}", name, _cumulative(t.deltas)))
    rows = [f'<tr><th></th><th class="axis">report 1 &rarr; report {n}</th><th>scale</th></tr>']
    for k, (label, name, values) in enumerate(series):
        color = "#444" if k == 0 else COLORS[(k - 1) % len(COLORS)]
        low, high = min(0, min(values)), max(values)
        span = (high - low) or 1
        points = " ".join(f"{2 + (width - 4) * i / (n - 1):.1f},{2 + (height - 4) * (high - v) / span:.1f}"
                          for i, v in enumerate(values))
        scale = (f"{human_bytes(low)} to {human_bytes(high)}" if low < 0
                 else f"0 to {human_bytes(high)}")
        rows.append(f'<tr><td class="label" title="{_e(name)}" style="color:{color}">{_e(label)}</td>'
                    f'<td><svg class="chart" width="{width}" height="{height}">'
                    f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}">'
                    f'<title>{_e(name)}</title></polyline></svg></td>'
                    f'<td class="n">{_e(scale)}</td></tr>')
    return '<table class="charts">' + "\n".join(rows) + "</table>"


def _cumulative(deltas):
    total, out = 0, []
    for d in deltas:
        total += d
        out.append(total)
    return out


def page(analyses, problems):
    parts = []
    stacks_rows, hidden = [], 0
    for a in analyses:
        s = a.series
        span = f", {a.seconds:.1f} s between the first and the last" if a.seconds else ""
        parts.append(f"<h2>{_e(s.program)} (pid {s.pid})</h2>"
                     f"<p>{len(s.reports)} reports{_e(span)}; ended: {_e(s.ended or 'still running')}; "
                     f"live now: <b>{_e(human_bytes(a.live_bytes))}</b> in {count(a.live_blocks, 'block')}</p>")
        if a.scan:
            parts.append(f'<p class="scan">reachability scan (report {a.scan_seq}): ' + ", ".join(
                f"{_e(name.replace('-', ' '))} <b>{_e(human_bytes(b))}</b> in {count(k, 'block')}"
                for name, (b, k) in a.scan.totals.items()) + "</p>")
        for note in a.notes:
            parts.append(f'<p class="note">{_e(note)}</p>')
        if s.usage is not None:
            parts.append(usage_chart(s.usage))
        if len(s.reports) > 1 or s.usage is None:
            parts.append(chart(a))
        if a.suspects:
            rows = "".join(f'<tr><td class="n">#{i}</td><td>{_e(t.verdict)}</td>'
                           f'<td class="n">{_e(live_words(t))}</td>'
                           f'<td class="frames">{_e(_frames(t, s.executable, layer=a.layer))}</td></tr>'
                           for i, t in enumerate(a.suspects, 1))
            parts.append('<h3>Leak suspects, most likely first</h3><table id="suspects">'
                         '<thead><tr><th></th><th>verdict</th><th>live</th><th>where</th></tr></thead>'
                         f"<tbody>{rows}</tbody></table>")
        else:
            parts.append("<p>No leak suspects: no stack grew steadily while it ran.</p>")
        for t in a.trends:
            if len(stacks_rows) < STACKS_SHOWN:
                stacks_rows.append(f'<tr><td class="n">{_e(human_bytes(t.live_bytes))}</td>'
                                   f'<td class="n">{t.live_blocks:,}</td><td>{_e(s.program)} {s.pid}</td>'
                                   f'<td class="frames">{_e(_frames(t, s.executable, 6, a.layer))}</td></tr>')
            else:
                hidden += 1
    for problem in problems:
        parts.append(f'<p class="note">{_e(problem)}</p>')
    parts.append(f"<h3>By stack (flamegraph): {_e(flamegraph.moment_words(analyses))}</h3>" + flamegraph.body(analyses))
    more = f" ({hidden:,} smaller stacks not listed: libmemleak report --all)" if hidden else ""
    parts.append(f'<h3>Stacks</h3><input id="stack-search" placeholder="filter stacks" size="40"> '
                 f'<span id="stack-count"></span>{_e(more)}'
                 '<table id="stacks"><thead><tr><th>live</th><th>blocks</th><th>process</th>'
                 f'<th>frames</th></tr></thead><tbody>{"".join(stacks_rows)}</tbody></table>')
    title = "libmemleak: " + page_title(analyses)
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{STYLE}{flamegraph.STYLE}</style></head><body><h1>{_e(title)}</h1>"
            + "\n".join(parts) + SCRIPT + "</body></html>\n")


def page_title(analyses):
    """What the page is of, short enough for a tab: one process by name and
    pid; more, by program names (three at most) and how many processes."""
    if len(analyses) == 1:
        return f"{analyses[0].series.program} (pid {analyses[0].series.pid})"
    names = list(dict.fromkeys(a.series.program for a in analyses))
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{shown}: {count(len(analyses), 'process')}"


def write(out, analyses, problems):
    out.write(page(analyses, problems))
