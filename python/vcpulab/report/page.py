"""The pieces of the HTML report and the page that holds them: :class:`Table` (shown as HTML,
written as CSV), :class:`Section` (a titled part of the page) and :func:`render_page`.

Nothing here reads the store or draws a figure; the sections are made in
:mod:`vcpulab.report.sections` (and by anyone passing ``extra_sections`` to
:func:`vcpulab.report.build_report`). The page is one self-contained file: inline CSS, inline
SVG figures, no script, no font or style sheet fetched.
"""

from __future__ import annotations

import html
import io
import math
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..text import printable

DASH = "—"

def href_path(path: str) -> str:
    """A relative file path as a link: every byte a URL cannot hold (``#``, ``%``, a space, a
    byte that is not UTF-8) percent-encoded, so the link reaches the file."""
    return urllib.parse.quote(os.fsencode(path))


_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")

FORMATS = ("text", "int", "num", "pct", "pct_pts", "frac", "ratio", "us", "s")
"""How a column is shown in HTML (the CSV always has the plain value):
``pct`` a ratio as a signed percentage (δη 0.123 → +12.3%), ``pct_pts`` a percentage already
(12.3 → 12.3%), ``frac`` a fraction as a percentage (0.123 → 12.3%), ``ratio`` three
decimals, ``num`` three significant digits, ``us`` µs, ``s`` seconds, ``int`` and ``text`` as
they are."""


def fmt_value(value: Any, kind: str = "num") -> str:
    """A value for an HTML cell (a dash for None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if isinstance(value, bool) or kind == "text" or isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or DASH
    v = float(value)
    if kind == "int":
        return f"{int(value):,}"
    if kind == "pct":
        return f"{v * 100:+.1f}%"
    if kind == "pct_pts":
        return f"{v:.2f}%"
    if kind == "frac":
        return f"{v * 100:.1f}%"
    if kind == "ratio":
        return f"{v:.3f}"
    if kind == "us":
        return f"{v:,.1f} µs" if abs(v) < 1e6 else f"{v / 1e3:,.0f} ms"
    if kind == "s":
        return f"{v:.4g} s"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:,.0f}"


def csv_value(value: Any) -> str:
    """A value for a CSV cell: empty for None, floats to 10 significant digits, lists joined by ``;``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".10g")
    if isinstance(value, (list, tuple)):
        return ";".join(csv_value(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class Table:
    """Rows with named columns. Every table of a report is written as ``<name>.csv`` beside
    the page; ``shown`` tables also appear on the page (figure data is usually CSV only)."""

    name: str
    """The CSV file's stem: lower-case letters, digits and ``_``; unique within a report."""
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    caption: str = ""
    shown: bool = False
    formats: Mapping[str, str] = field(default_factory=dict)
    """Column → one of :data:`FORMATS` for the HTML view (default ``num`` for numbers)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Column → the heading shown in HTML (default: the column name)."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"table name {self.name!r}: use lower-case letters, digits and '_'")
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.name}: a row has {len(row)} values for {len(self.columns)} columns")
        for column, kind in self.formats.items():
            if kind not in FORMATS:
                raise ValueError(f"table {self.name}: format {kind!r} of {column!r} is not one of {FORMATS}")

    @classmethod
    def of(cls, name: str, records: Sequence[Mapping[str, Any]], columns: Sequence[str], **kw: Any) -> Table:
        """A table of ``columns`` taken from dicts (a missing key is None)."""
        rows = tuple(tuple(r.get(c) for c in columns) for r in records)
        return cls(name, tuple(columns), rows, **kw)

    def csv_text(self) -> str:
        import csv

        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(self.columns)
        for row in self.rows:
            w.writerow([csv_value(v) for v in row])
        return printable(out.getvalue())  # a file name's non-UTF-8 byte as \xff, as printed

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(self.headers.get(c, c))}</th>" for c in self.columns)
        body = []
        for row in self.rows:
            cells = []
            for c, v in zip(self.columns, row, strict=True):
                kind = self.formats.get(c, "text" if isinstance(v, str) else "num")
                cls = "" if kind == "text" or isinstance(v, str) else ' class="n"'
                cells.append(f"<td{cls}>{html.escape(fmt_value(v, kind))}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        rows = "".join(body)
        return f'<div class="tw"><table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


@dataclass(frozen=True)
class Section:
    """One part of the report: a title in the table of contents, an anchor, trusted HTML and
    the tables written as CSV beside the page (linked from the section).

    A section whose data the results lack is *omitted*: ``note`` says why in one line, and the
    page shows that line in place of the body. Extensions (the diagnosis section) build their
    own ``Section`` and pass it to :func:`vcpulab.report.build_report` as ``extra_sections``.
    """

    title: str
    anchor: str
    html: str = ""
    tables: tuple[Table, ...] = ()
    note: str | None = None

    def __post_init__(self) -> None:
        if not re.match(r"^[a-z][a-z0-9-]*$", self.anchor):
            raise ValueError(f"section anchor {self.anchor!r}: use lower-case letters, digits and '-'")

    @property
    def omitted(self) -> bool:
        return self.note is not None

    @classmethod
    def omit(cls, title: str, anchor: str, note: str) -> Section:
        """A section left out because the results lack its data; ``note`` says what is missing."""
        return cls(title=title, anchor=anchor, note=note)


def paragraph(text: str, cls: str = "") -> str:
    """Plain text as a paragraph (escaped)."""
    attr = f' class="{cls}"' if cls else ""
    return f"<p{attr}>{html.escape(text)}</p>"


def figure(svg: str, caption: str = "") -> str:
    """An inline SVG figure with an optional caption (escaped)."""
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure class="fig">{svg}{cap}</figure>'


CSS = """
:root { --fg: #1d1d1f; --muted: #5f6368; --line: #d9dce1; --bg-alt: #f6f7f9; --accent: #1f5fa8; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 1.5rem 2rem 4rem; }
h1 { font-size: 1.7rem; margin: 0.5rem 0 0.25rem; }
h2 { font-size: 1.3rem; margin: 2.5rem 0 0.5rem; padding-top: 0.75rem; border-top: 1px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.5rem 0 0.4rem; }
a { color: var(--accent); }
.sub { color: var(--muted); margin: 0 0 1rem; }
.what { margin: 0.25rem 0 0.75rem; }
.how { color: var(--muted); font-size: 0.92rem; margin: 0.25rem 0 0.75rem; }
.note { color: var(--muted); font-style: italic; }
nav.toc { background: var(--bg-alt); border: 1px solid var(--line); border-radius: 6px; padding: 0.6rem 1.2rem; }
nav.toc ol { margin: 0.3rem 0; padding-left: 1.3rem; }
nav.toc li.omitted, nav.toc li.omitted a { color: var(--muted); }
figure.fig { margin: 0.75rem 0 1.25rem; }
figure.fig svg { display: block; max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 0.9rem; margin-top: 0.3rem; }
.tw { overflow-x: auto; margin: 0.5rem 0 1rem; }
table { border-collapse: collapse; font-size: 0.85rem; font-variant-numeric: tabular-nums; }
caption { text-align: left; color: var(--muted); padding-bottom: 0.3rem; }
th, td { padding: 0.2rem 0.6rem; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--bg-alt); position: sticky; top: 0; }
td.n { text-align: right; white-space: nowrap; }
tbody tr:hover { background: #fafbfc; }
.csv { font-size: 0.85rem; color: var(--muted); }
details { margin: 0.4rem 0; }
summary { cursor: pointer; }
pre { background: var(--bg-alt); border: 1px solid var(--line); padding: 0.6rem; overflow-x: auto; font-size: 0.8rem; }
code { font-size: 0.9em; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 0.15rem 1rem; }
dl.kv dt { color: var(--muted); }
dl.kv dd { margin: 0; }
"""


def render_page(title: str, subtitle: str, sections: Sequence[Section], csv_dir: str | None) -> str:
    """The whole page. ``csv_dir`` is the CSV folder's path relative to the page (for links)."""
    toc = []
    body = []
    for s in sections:
        anchor, title_html = html.escape(s.anchor), html.escape(s.title)
        if s.omitted:
            toc.append(f'<li class="omitted"><a href="#{anchor}">{title_html}</a> (omitted)</li>')
            body.append(f'<section id="{anchor}"><h2>{title_html}</h2>{paragraph(s.note or "", "note")}</section>')
            continue
        toc.append(f'<li><a href="#{anchor}">{title_html}</a></li>')
        links = ""
        if s.tables and csv_dir is not None:
            href = html.escape(href_path(csv_dir))
            names = ", ".join(f'<a href="{href}/{t.name}.csv">{t.name}.csv</a>' for t in s.tables)
            links = f'<p class="csv">Data: {names}</p>'
        body.append(f'<section id="{anchor}"><h2>{title_html}</h2>{s.html}{links}</section>')
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        f"<h1>{html.escape(title)}</h1>\n{paragraph(subtitle, 'sub')}\n"
        f'<nav class="toc"><strong>Contents</strong><ol>{"".join(toc)}</ol></nav>\n'
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    )
    # The page is UTF-8: a non-UTF-8 byte of a file name anywhere in it (the results
    # directory, the command) is shown escaped.
    return printable(page)
