"""report.html: the sim-to-real report.md as one HTML page, with the sweep PNGs and the videos inline.

No markdown library: report.md is written by embodied/eval/report.py, and this renders exactly the
markdown it writes: `#`/`##` headings, paragraphs, fenced code blocks, pipe tables, `- ` lists,
and inline `code`, [links](target) and ![images](target). Images and videos are linked by
their relative paths (the page lives in the report folder beside them); every other character
is HTML-escaped.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

STYLE = """body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;line-height:1.4}
table{border-collapse:collapse;margin:1rem 0;font-size:.9rem}th,td{border:1px solid #ccc;padding:.2rem .5rem}
th{background:#f3f3f3}td{font-variant-numeric:tabular-nums}pre{background:#f6f6f6;padding:.8rem;overflow-x:auto}
img{max-width:100%}video{max-width:32rem;display:block;margin:.5rem 0}"""
_INLINE = re.compile(r"`([^`]*)`|!\[([^\]]*)\]\(([^)\s]+)\)|\[([^\]]*)\]\(([^)\s]+)\)")


def inline(text: str) -> str:
    """One line of markdown text -> HTML: `code`, ![alt](src) (an mp4: a video), [text](href)."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        code, alt, src, label, href = m.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif src is not None:
            out.append(f'<img src="{html.escape(src)}" alt="{html.escape(alt)}">')
        elif href.endswith(".mp4"):
            out.append(f'<video controls preload="metadata" src="{html.escape(href)}"></video>'
                       f'<a href="{html.escape(href)}">{html.escape(label)}</a>')
        else:
            out.append(f'<a href="{html.escape(href)}">{html.escape(label)}</a>')
        pos = m.end()
    return "".join(out) + html.escape(text[pos:])


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def to_html(markdown: str, title: str = "Sim-to-real report") -> str:
    """report.md's text -> a whole HTML page."""
    lines, body, i = markdown.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            body.append(f"<pre><code>{html.escape(chr(10).join(lines[i + 1:end]))}</code></pre>")
            i = end + 1
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 6)
            body.append(f"<h{level}>{inline(line[level:].strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            head, rest = rows[0], [r for r in rows[1:] if not all(set(c) <= set("-: ") for c in r)]
            body.append("<table><thead><tr>" + "".join(f"<th>{inline(c)}</th>" for c in head) + "</tr></thead><tbody>"
                        + "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in rest)
                        + "</tbody></table>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{inline(lines[i][2:])}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "- ", "```")):
                para.append(inline(lines[i].strip()))
                i += 1
            body.append("<p>" + "\n".join(para) + "</p>")
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>\n{STYLE}\n</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")


def write_html(folder: str | Path, markdown: str) -> Path:
    """folder/report.html from report.md's text."""
    path = Path(folder) / "report.html"
    path.write_text(to_html(markdown))
    return path
