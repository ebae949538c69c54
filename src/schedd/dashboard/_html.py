"""HTML building blocks of the dashboard: escaping, the page layout, tables, the lateness chart.

Every value shown goes through :func:`esc` (``html.escape`` with quotes), so a job named
``<script>`` shows as text. Markup is built only from constants and escaped values; the
:class:`Markup` type marks a string that is already HTML, so it is not escaped twice.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from datetime import datetime
from zoneinfo import ZoneInfo


class Markup(str):
    """A string that is already safe HTML (built by these helpers)."""

    __slots__ = ()


def esc(value: object) -> Markup:
    """``value`` as HTML text: ``&``, ``<``, ``>``, ``"`` and ``'`` escaped; None shows as ``-``."""
    if isinstance(value, Markup):
        return value
    if value is None:
        return Markup("-")
    return Markup(html.escape(str(value), quote=True))


def join(parts: Iterable[object]) -> Markup:
    """Concatenates parts, escaping those that are not :class:`Markup` already."""
    return Markup("".join(esc(p) for p in parts))


_VOID = frozenset({"input", "br", "meta", "link", "hr"})


def tag(element: str, content: object = "", /, **attrs: object) -> Markup:
    """``<name attrs>content</name>``; attribute values escaped, ``class_`` for ``class``."""
    text = "".join(
        f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None
    )
    if element in _VOID:
        return Markup(f"<{element}{text}>")
    return Markup(f"<{element}{text}>{esc(content)}</{element}>")


def counted(n: int, noun: str, plural: str = "") -> str:
    """``1 job``, ``2 jobs`` (``plural``: when adding an s will not do)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def link(href: str, text: object) -> Markup:
    return tag("a", text, href=href)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, id_: str | None = None
) -> Markup:
    """A table of escaped cells (a :class:`Markup` cell is kept as it is)."""
    head = join(tag("th", h) for h in headers)
    body = join(tag("tr", join(tag("td", c) for c in row)) for row in rows)
    return tag("table", join([tag("thead", tag("tr", head)), tag("tbody", body)]), id=id_)


NAV = (
    ("/", "Cluster"),
    ("/jobs", "Jobs"),
    ("/runs", "Runs"),
    ("/dead", "Dead letters"),
    ("/lateness", "Lateness"),
)


def layout(title: str, body: object, *, node_id: str, actions: bool, user: str = "") -> str:
    """A whole page: the navigation, a heading, the body; CSS and JS from /static only.
    ``user``: who is signed in (auth on), shown with a sign-out button."""
    nav = join(link(href, text) for href, text in NAV)
    if user:
        nav = join([nav, Markup(
            f'<form method="post" action="/logout" class="inline">'
            f'<span class="node">{esc(user)}</span> <button type="submit">Sign out</button></form>'
        )])  # fmt: skip
    mode = "actions on" if actions else "read-only"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · schedd</title>"
        '<link rel="stylesheet" href="/static/dash.css">'
        '<script src="/static/dash.js" defer></script></head><body>'
        f'<header><strong>schedd</strong> <span class="node">node {esc(node_id)} ({mode})</span>'
        f"<nav>{nav}</nav></header><main><h1>{esc(title)}</h1>{esc(body)}</main></body></html>"
    )


def fmt_ms(ms: int, zone: str = "UTC") -> str:
    """A millisecond timestamp as ``YYYY-MM-DD HH:MM:SS`` in ``zone`` with its offset ("-": 0)."""
    if not ms:
        return "-"
    when = datetime.fromtimestamp(ms / 1000, tz=ZoneInfo(zone or "UTC"))
    return when.strftime("%Y-%m-%d %H:%M:%S %z")


def lateness_svg(
    points: Sequence[tuple[str, int]], *, width: int = 640, height: int = 200, unit: str = "ms"
) -> Markup:
    """An inline SVG bar chart of runs' lateness (start minus due, ms), oldest first.

    ``points``: (label, lateness ms); each bar has a ``<title>`` with its label and value.
    No script, no external resource."""
    if not points:
        return Markup('<p class="empty">no started runs yet</p>')
    top = max([v for _, v in points] + [1])
    pad = 30
    inner_w, inner_h = width - pad - 5, height - pad - 5
    bar_w = max(inner_w / len(points), 1.0)
    bars = []
    for i, (label, value) in enumerate(points):
        h = max(value, 0) / top * inner_h
        x = pad + i * bar_w
        y = 5 + inner_h - h
        bars.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - 1, 0.5):.1f}" '
            f'height="{h:.1f}"><title>{esc(label)}: {value} {esc(unit)}</title></rect>'
        )
    axis = (
        f'<line x1="{pad}" y1="{5 + inner_h}" x2="{width - 5}" y2="{5 + inner_h}" class="axis"/>'
        f'<line x1="{pad}" y1="5" x2="{pad}" y2="{5 + inner_h}" class="axis"/>'
        f'<text x="2" y="14" class="label">{top}</text>'
        f'<text x="2" y="{5 + inner_h}" class="label">0</text>'
        f'<text x="{pad}" y="{height - 8}" class="label">'
        + (f"ms late, {len(points)} runs, oldest first" if unit == "ms" else esc(unit))
        + "</text>"
    )
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'aria-label="lateness of recent runs" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{axis}{"".join(bars)}</svg>'
    )
