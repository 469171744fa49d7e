"""Self-contained HTML pages and atomic writes for the plot commands.

A page inlines plotly.js once (about 4.7 MB) and then any number of figures and tables, so it
opens with no network: nothing is loaded from a CDN. Each figure's div gets
``data-rendered="1"`` once plotly has drawn it, which the browser test waits for.

Files are written through a temporary sibling and ``os.replace``, so a failure never leaves a
half-written file where the output should be.
"""

from __future__ import annotations

import html
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from sortedrl.aside import aside
from sortedrl.plot.inputs import PlotError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()
RENDERED = "document.getElementById('{plot_id}').setAttribute('data-rendered', '1');"

_STYLE = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 16px 24px;
       color: #222; }
h1 { font-size: 20px; margin: 4px 0 12px; } h2 { font-size: 16px; margin: 24px 0 8px; }
p.note { color: #555; font-size: 13px; margin: 4px 0; }
table.data { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
table.data th, table.data td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
table.data th { background: #f3f3f3; } table.data td.text { text-align: left; }
"""


def figure_div(fig: go.Figure, div_id: str) -> str:
    """The figure as a div plus the script that draws it (plotly.js must already be loaded)."""
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       post_script=RENDERED, config={"responsive": True, "displaylogo": False})


@dataclass(frozen=True)
class Link:
    """A table cell that links to a relative path (another page written next to this one)."""

    text: str
    href: str


def table(columns: Sequence[str], rows: Sequence[Sequence[object]], table_id: str,
          formats: Sequence[str | None] | None = None) -> str:
    """An HTML table; numbers are right-aligned, text cells left-aligned, :class:`Link` links.
    ``formats``: a format spec per column for its numbers (one precision down a column; None:
    the default by size)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            spec = formats[i] if formats is not None else None
            if spec is not None and isinstance(v, int | float) and not isinstance(v, bool):
                cells.append(f"<td>{html.escape(format(v, spec))}</td>")
                continue
            if isinstance(v, Link):
                cells.append(f'<td class="text"><a href="{html.escape(v.href, quote=True)}">'
                             f"{html.escape(v.text)}</a></td>")
                continue
            text = isinstance(v, str)
            cls = ' class="text"' if text else ""
            cells.append(f"<td{cls}>{html.escape(v if text else _num(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="data" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _num(v: object) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.1f}"
    return str(v)


def check_html_out(path: Path | None, option: str, command: str) -> None:
    """An output ``command`` writes a page to, checked before any work: the page is HTML, and a
    browser or file manager goes by the ending (``--out x.png`` held HTML and would not open as
    an image). Any case of ``.html`` (``None``: not given)."""
    if path is not None and path.suffix.lower() != ".html":
        raise PlotError(f"{option} {path}: {command} writes an HTML page (give a .html file)")


def page(title: str, parts: Sequence[str]) -> str:
    """A complete HTML document with plotly.js inlined, then ``parts`` (HTML snippets) in order."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


def atomic_write(files: dict[Path, str]) -> None:
    """Write every file or none: each goes to a temporary sibling first, then all are moved in.

    Raises :class:`PlotError` naming the file when one cannot be written.
    """
    temps: list[tuple[str, Path]] = []
    path = Path()
    try:
        for path, text in files.items():
            if path.is_dir():
                raise PlotError(f"{path}: is a directory, not a file")
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=aside(path.name, ""), suffix=".tmp")
            temps.append((tmp, path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, _FILE_MODE)  # mkstemp creates 0600; give the usual umask-based mode
        for tmp, path in temps:
            os.replace(tmp, path)
    except OSError as e:
        raise PlotError(f"{path}: cannot write ({e.strerror or e})") from None
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
