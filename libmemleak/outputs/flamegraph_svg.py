"""The flamegraph as an SVG file (`export --format flamegraph -o x.svg`), as
flamegraph.pl draws one: the outermost frame at the bottom, each frame as
wide as its share of the drawn bytes, a tooltip (<title>) with its bytes,
blocks and source line.  Static: what a browser, an image viewer or a
document shows as it is.  The same tree as the HTML page's
(flamegraph.tree_of), frames narrower than MIN_WIDTH pixels merged into
their parent."""

from xml.sax.saxutils import escape, quoteattr

from libmemleak.analysis.trends import human_bytes
from libmemleak.outputs.flamegraph import moment_words, tree_of

WIDTH = 1200        # pixels
ROW = 16            # a frame's height
MIN_WIDTH = 0.5     # pixels: narrower frames are left out (their bytes stay in the parent)
CHAR = 6.6          # a character's width at the font size used, to cut names that do not fit
TOP = 40            # the title's room


def _color(name):
    """A warm colour of its own per name, as flamegraph.pl's: the same
    function the same colour wherever it is."""
    h = 0
    for c in name:
        h = (h * 31 + ord(c)) & 0xFFFFFFFF
    return f"rgb({205 + h % 50},{80 + (h >> 8) % 150},{(h >> 16) % 55})"


def _frames(node, x, depth, scale, out):
    """(x, depth, width, node) of node and every descendant wide enough."""
    width = node["v"] * scale
    if width < MIN_WIDTH:
        return 0
    out.append((x, depth, width, node))
    at = x
    for child in sorted(node["c"].values(), key=lambda c: -c["v"]):
        _frames(child, at, depth + 1, scale, out)
        at += child["v"] * scale
    return out


def _depth(node):
    return 1 + max((_depth(c) for c in node["c"].values()), default=0)


def svg(analyses, what=None):
    root = tree_of(analyses)
    names = ", ".join(f"{a.series.program} (pid {a.series.pid})" for a in analyses)
    title = f"libmemleak: {what or moment_words(analyses)} of {names}"
    rows = min(_depth(root), 512)
    height = TOP + rows * ROW + 10
    parts = [f'<?xml version="1.0" encoding="UTF-8"?>\n'
             f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" font-family="Verdana, sans-serif" font-size="11">\n'
             f'<rect width="100%" height="100%" fill="#f8f8f0"/>\n'
             f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="15">{escape(title)}</text>\n']
    if root["v"] <= 0:
        parts.append(f'<text x="{WIDTH / 2}" y="{TOP + ROW}" text-anchor="middle">nothing live</text>\n')
    else:
        frames = _frames(root, 0.0, 0, (WIDTH - 20) / root["v"], [])
        for x, depth, width, node in frames:
            if depth >= rows:
                continue
            y = height - 10 - (depth + 1) * ROW
            tip = (f"{node['n']} -- {human_bytes(node['v'])} in {node['k']:,} blocks "
                   f"({100 * node['v'] / root['v']:.1f}%)" + (f", {node['f']}" if node.get("f") else ""))
            fits = int((width - 6) / CHAR)
            label = node["n"] if len(node["n"]) <= fits else (node["n"][:fits - 2] + ".." if fits > 3 else "")
            parts.append(f'<g><title>{escape(tip)}</title>'
                         f'<rect x="{10 + x:.1f}" y="{y}" width="{width:.1f}" height="{ROW - 1}" '
                         f'fill={quoteattr(_color(node["n"]))} rx="2"/>'
                         + (f'<text x="{13 + x:.1f}" y="{y + 11}">{escape(label)}</text>' if label else "")
                         + "</g>\n")
    parts.append("</svg>\n")
    return "".join(parts)


def write(out, analyses, problems, what=None):
    out.write(svg(analyses, what))
