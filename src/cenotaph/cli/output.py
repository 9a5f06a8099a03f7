"""How commands print: one JSON document on stdout by default, a rich table with ``--table``.

A command builds one JSON-able document and hands it to :func:`emit`, optionally with a renderer
for people; without one, :func:`generic_table` draws the document as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

from cenotaph.model import ErasureState, LayerState

from .spelling import speak_cli

__all__ = [
    "GLOBAL_TABLE",
    "RECORD_COLUMNS",
    "Renderer",
    "cell",
    "console",
    "message_cell",
    "emit",
    "erasure_table",
    "generic_table",
    "new_table",
    "print_table",
    "records_table",
    "table_group_option",
    "table_option",
]

Renderer = Callable[[Any], RenderableType]
F = TypeVar("F", bound=Callable[..., Any])


GLOBAL_TABLE = "cenotaph.table"  # ctx.meta: ``cenotaph --table COMMAND`` was given


def table_option(func: F) -> F:
    """The shared ``--table`` flag, passed to the command as ``table`` (also accepted before the
    command: ``cenotaph --table COMMAND``)."""
    return click.option(
        "--table",
        "table",
        is_flag=True,
        callback=_command_table,
        help="Print a table for people instead of JSON (also accepted before the command).",
    )(func)


def table_group_option(func: F) -> F:
    """``--table`` on the ``cenotaph`` group, for the command's own flag to pick up."""
    return click.option(
        "--table",
        is_flag=True,
        callback=_group_table,
        expose_value=False,
        is_eager=True,
        help="Print tables for people instead of JSON, for every command that prints a document.",
    )(func)


def _group_table(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[GLOBAL_TABLE] = True
    return value


def _command_table(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    return value or bool(ctx.meta.get(GLOBAL_TABLE))


# Free text (a record's value, a layer's evidence, a check's detail) wraps within this width;
# every other cell keeps its longest word whole (see print_table).
FREE_TEXT_WIDTH = 48
_WIDEST = 1 << 16  # measure tables as if the terminal had no edge


def console(width: int | None = None) -> Console:
    """A console on the current stdout (looked up per call, so test runners can capture it)."""
    return Console(highlight=False, soft_wrap=False, width=width)


def emit(doc: Any, *, table: bool, render: Renderer | None = None) -> None:
    """Print ``doc`` as JSON, or as a table when ``table`` is set."""
    if table:
        print_table(render(doc) if render is not None else generic_table(doc))
    else:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False))


def print_table(renderable: RenderableType) -> None:
    """Print for people without ever breaking an id, key, token, scope or path across lines.

    Text wraps only at spaces: each column is at least as wide as its longest word (free-text
    columns excepted, see :func:`new_table`). When the terminal is narrower than that, the table
    is drawn wider than the terminal (which then soft-wraps whole lines) rather than folding an
    id that someone will copy into the next command.
    """
    _keep_words_whole(renderable)
    out = console()
    needed = Measurement.get(out, out.options.update_width(_WIDEST), renderable).minimum
    if needed > out.width:
        out = console(needed)
    out.print(renderable)


def _keep_words_whole(renderable: RenderableType) -> None:
    """Mark every column whose cells are all single words (ids, keys, tokens, versions) no_wrap:
    rich then narrows only the columns that can wrap at a space, never one of these."""
    if isinstance(renderable, Group):
        for part in renderable.renderables:
            _keep_words_whole(part)
    elif isinstance(renderable, Table):
        for column in renderable.columns:
            if column.max_width is None:  # free-text columns are capped instead
                column.no_wrap = all(_one_word(c) for c in column.cells)


def _one_word(renderable: RenderableType) -> bool:
    text = renderable.plain if isinstance(renderable, Text) else renderable
    return isinstance(text, str) and len(text.split()) <= 1


def new_table(*headers: str, title: str | None = None, free: tuple[str, ...] = ()) -> Table:
    """A table whose cells wrap at spaces only. Columns named in ``free`` hold free text (a value,
    evidence) and fold within :data:`FREE_TEXT_WIDTH`; the others never split a word."""
    return Table(
        *(Column(h, overflow="fold", max_width=FREE_TEXT_WIDTH if h in free else None) for h in headers),
        title=title,
    )


def cell(value: Any) -> Text:
    """One table cell: strings as they are, None as a dim dash, anything else as JSON."""
    if isinstance(value, Text):
        return value
    if value is None:
        return Text("-", style="dim")
    if isinstance(value, str):
        return Text(value)
    return Text(json.dumps(value, ensure_ascii=False))


def message_cell(value: Any) -> Text:
    """A cell holding the store's own words (evidence, a gap, a check's detail), in CLI spelling;
    never used for data (a record's value is shown as it is)."""
    shown = cell(value)
    return Text(speak_cli(shown.plain), style=shown.style)


def generic_table(doc: Any, title: str | None = None) -> RenderableType:
    """A field/value table for a dict, a row per item for a list of dicts, else the value itself."""
    if isinstance(doc, Mapping):
        table = new_table("field", "value", title=title)
        for name, value in doc.items():
            table.add_row(str(name), cell(value))
        return table
    if isinstance(doc, Sequence) and not isinstance(doc, str):
        if not doc:
            return Text("(none)", style="dim")
        columns = list(dict.fromkeys(k for row in doc if isinstance(row, Mapping) for k in row))
        table = new_table(*columns, title=title)
        for row in doc:
            table.add_row(*(cell(row.get(c)) if isinstance(row, Mapping) else cell(row) for c in columns))
        return table
    return cell(doc)


RECORD_COLUMNS = ("scope", "key", "value", "version", "expires_at", "id")


def records_table(records: Any) -> RenderableType:
    """Records (``Record.to_dict()`` documents, one or a list) as rows of their main fields."""
    rows = [records] if isinstance(records, Mapping) else list(records)
    if not rows:
        return Text("(no records)", style="dim")
    table = new_table(*RECORD_COLUMNS, free=("value",))
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in RECORD_COLUMNS))
    return table


_STATE_STYLE: dict[str, str] = {
    LayerState.DONE: "green",
    LayerState.PENDING: "yellow",
    LayerState.FAILED: "red",
}


def erasure_table(doc: Mapping[str, Any]) -> RenderableType:
    """An erasure request document: the request, its layers, and every gap still open."""
    status: Mapping[str, Any] = doc.get("status", {})
    head = new_table("field", "value", title="erasure request")
    for name in ("id", "mode", "target_kind", "version", "requested_at"):
        head.add_row(name, cell(doc.get(name)))
    head.add_row("state", cell(status.get("state")))
    head.add_row("horizon", cell(status.get("horizon") or "not reached"))
    layers = new_table("layer", "state", "evidence", title="layers", free=("evidence",))
    for name, layer in status.get("layers", {}).items():
        state = str(layer.get("state"))
        layers.add_row(
            name, Text(state, style=_STATE_STYLE.get(state, "")), message_cell(layer.get("evidence"))
        )
    gaps = list(status.get("gaps", []))
    if gaps:
        footer = Text("gaps: " + speak_cli("; ".join(gaps)), style="yellow")
    elif status.get("state") == ErasureState.VERIFIED:
        footer = Text("no gaps: erasure verified", style="green")
    else:
        footer = Text(f"no gaps reported; state {status.get('state')}")
    return Group(head, layers, footer)
