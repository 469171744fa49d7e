"""The width every console of the CLI writes to, and ``--help`` pages that never cut a word.

``COLUMNS`` is read by three parties: the plain-text tables (:func:`sortedrl.tables.terminal_width`,
floored at 40 columns), rich's consoles (``policies``, ``trace stats``, the progress display) and
typer's help pages. Rich took ``COLUMNS=0`` for a width of 0 and printed nothing at all
(``COLUMNS=0 sortedrl --help`` printed 0 bytes, exit 0) and ``COLUMNS=10`` for 10 columns. So the
CLI reads it once, as the tables do, before any console is made (:func:`normalise_columns`, from
the command group's ``main``): a value that is not a whole number, or is 0, is no width (the
terminal's is used, or each console's default, as Python's ``shutil.get_terminal_size`` already
did), and one under :data:`MIN_WIDTH` is :data:`MIN_WIDTH`. Every rich console made after that
(``Console()`` in any command, typer's) reads the normalised value; one made at import time
(``cli_common.err``) is floored on the spot. Typer's own ``TERMINAL_WIDTH`` is read likewise;
the ``sortedrl`` command (:mod:`sortedrl.console`) normalises both before it imports anything
that reads them.

Typer lays an options panel out as a rich table: the option names, their type and the help
text. Where the terminal is narrower than the table, rich shortens every column in turn and cuts
what no longer fits with an ellipsis (``--trace,--trac…`` at 60 columns, a default path at 70).
:func:`install_help_layout` has the help text give way first (it wraps, and a word longer than
its column is folded onto the next line, never cut); the option names and types keep their
width while the help column keeps at least :data:`MIN_HELP` columns, and as many as the longest
word of any help text in the table (a 10-column help column split ``module:Clas|s`` and
``--save-resu|lt`` at 56-64 columns). Narrower than that (below about 75 columns for ``simulate``)
each option is printed as a line of its names and type and, indented under it, its help: a name
is whole at any width from MIN_WIDTH, and a word of the help is split only when it is longer
than that indented line.
The commands panel's names are typer's own fixed-width column, its help wraps the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping

from rich.cells import cell_len
from rich.columns import Columns
from rich.console import RenderHook
from rich.measure import Measurement
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

MIN_WIDTH = 40  # the narrowest terminal laid out for (tables.terminal_width's floor)
MIN_HELP = 24  # the narrowest help column beside option names kept on one line (10 split words)
# the terminal's width as the user gives it: to every console, and to typer's help (read when
# typer is imported: TERMINAL_WIDTH=abc failed that import with a traceback)
WIDTH_VARIABLES = ("COLUMNS", "TERMINAL_WIDTH")
_WHOLE = re.compile(r"\s*[0-9]+\s*")


def normalise_columns(environ: MutableMapping[str, str] = os.environ) -> None:
    """``COLUMNS`` (and typer's ``TERMINAL_WIDTH``) as every console of the CLI may read it:
    unset where it is not a whole number or is 0 (no width given), at least :data:`MIN_WIDTH`
    where it is one."""
    for name in WIDTH_VARIABLES:
        value = environ.get(name)
        if value is None:
            continue
        if not _WHOLE.fullmatch(value) or int(value) == 0:
            del environ[name]
        else:
            environ[name] = str(max(MIN_WIDTH, int(value)))


def floor_width(console) -> None:
    """A rich console made before :func:`normalise_columns` ran, no narrower than MIN_WIDTH."""
    if console.width < MIN_WIDTH:
        from sortedrl.tables import terminal_width

        console.width = terminal_width()


def install_help_layout() -> None:
    """Make typer's help consoles at least MIN_WIDTH wide and their panels' tables uncut (see
    the module's docstring); idempotent. Typer makes every help console with
    ``rich_utils._get_rich_console``, which this wraps; a typer without it is left as it is."""
    from typer import rich_utils

    make = getattr(rich_utils, "_get_rich_console", None)
    if make is None or getattr(make, "uncut", False):
        return

    def console(*args, **kwargs):
        made = make(*args, **kwargs)
        if made.width < MIN_WIDTH:  # (TERMINAL_WIDTH=0 made a console 0 wide)
            made.width = MIN_WIDTH
        made.push_render_hook(UncutPanels())
        return made

    console.uncut = True
    rich_utils._get_rich_console = console


class UncutPanels(RenderHook):
    """Each table a panel holds (typer's options and commands panels) laid out by :class:`Uncut`."""

    def process_renderables(self, renderables):
        for r in renderables:
            if isinstance(r, Panel) and isinstance(r.renderable, Table):
                r.renderable = Uncut(r.renderable)
        return renderables


class Uncut:
    """A table whose layout is chosen once the width it gets is known, so that nothing is cut:
    the last (help) column wraps, folding a word that does not fit, and the others keep their
    width while the help column keeps MIN_HELP columns; where they cannot, each row is printed
    as its other cells on one line (the option names, folded only past the whole width) and
    its help, indented, under them."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_measure__(self, console, options):
        return Measurement.get(console, options, self.table)

    def __rich_console__(self, console, options):
        table, columns = self.table, self.table.columns
        widths = [max((Measurement.get(console, options, cell).maximum for cell in column.cells), default=0)
                  + _padding(table, i) for i, column in enumerate(columns)]
        edges = ((2 if table.show_edge else 0) + len(columns) - 1) if table.box else 0
        help_min = max([MIN_HELP, *(_longest_word(cell) for cell in columns[-1].cells)])  # (no word split)
        fits = sum(widths[:-1]) + _padding(table, len(columns) - 1) + help_min + edges <= options.max_width
        for column in columns:
            column.overflow = "fold"
            for cell in column.cells:
                _fold(cell)
            if column is not columns[-1] and column.width is None:  # (typer sizes its commands column)
                column.no_wrap = True
        if fits or len(columns) < 2:
            yield table
            return
        rows = [[_text(cell) for cell in row[:-1]] + [row[-1]]
                for row in zip(*(list(column.cells) for column in columns), strict=True)]
        marked = any(row[0].plain for row in rows)  # (typer's first column: * for a required option)
        for *names, help_text in rows:
            line = Text(" ", overflow="fold").join(cell for cell in names if cell.plain)
            yield Text("  ", overflow="fold") + line if marked and not names[0].plain else line
            yield Padding(help_text, (0, 0, 0, 4))


def _text(cell) -> Text:
    """A cell of the names' columns as Text (typer's are Text, or a string)."""
    return cell if isinstance(cell, Text) else Text(str(cell or ""))


def _longest_word(renderable) -> int:
    """The cells of the longest word of a help cell (a Text, a string, typer's Columns of them)."""
    if isinstance(renderable, Columns):
        return max((_longest_word(item) for item in renderable.renderables), default=0)
    plain = renderable.plain if isinstance(renderable, Text) else str(renderable or "")
    return max((cell_len(word) for word in plain.split()), default=0)


def _fold(renderable) -> None:
    """Have the text in a cell fold a word too long for its column, not cut it: a Text, or the
    Texts of the Columns typer groups an option's help, default and ``[required]`` in (each
    laid out in a grid table of its own, which would cut them)."""
    if isinstance(renderable, Text):
        renderable.overflow = "fold"
    elif isinstance(renderable, Columns):
        for item in renderable.renderables:
            _fold(item)


def _padding(table: Table, index: int) -> int:
    """The padding rich puts around column ``index`` of ``table`` (``Table._get_padding_width``)."""
    _, right, _, left = table.padding
    if table.collapse_padding:
        left, right = 0, abs(left - right)
    if not table.pad_edge:
        left = 0 if index == 0 else left
        right = 0 if index == len(table.columns) - 1 else right
    return left + right


def prepare(*consoles) -> None:
    """Before a command line is parsed: :func:`normalise_columns`, :func:`floor_width` of the
    ``consoles`` made at import time, and :func:`install_help_layout`."""
    normalise_columns()
    for console in consoles:
        floor_width(console)
    install_help_layout()
