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
from rich.table import Column, Table
from rich.text import Text

__all__ = [
    "RECORD_COLUMNS",
    "Renderer",
    "cell",
    "console",
    "emit",
    "erasure_table",
    "generic_table",
    "new_table",
    "records_table",
    "table_option",
]

Renderer = Callable[[Any], RenderableType]
F = TypeVar("F", bound=Callable[..., Any])


def table_option(func: F) -> F:
    """The shared ``--table`` flag, passed to the command as ``table``."""
    return click.option("--table", "table", is_flag=True, help="Print a table for people instead of JSON.")(
        func
    )


def console() -> Console:
    """A console on the current stdout (looked up per call, so test runners can capture it)."""
    return Console(highlight=False, soft_wrap=False)


def emit(doc: Any, *, table: bool, render: Renderer | None = None) -> None:
    """Print ``doc`` as JSON, or as a table when ``table`` is set."""
    if table:
        console().print(render(doc) if render is not None else generic_table(doc))
    else:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False))


def new_table(*headers: str, title: str | None = None) -> Table:
    """A table whose cells wrap instead of being cut: ids and timestamps must stay whole."""
    return Table(*(Column(h, overflow="fold") for h in headers), title=title)


def cell(value: Any) -> Text:
    """One table cell: strings as they are, None as a dim dash, anything else as JSON."""
    if value is None:
        return Text("-", style="dim")
    if isinstance(value, str):
        return Text(value)
    return Text(json.dumps(value, ensure_ascii=False))


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
    table = new_table(*RECORD_COLUMNS)
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in RECORD_COLUMNS))
    return table


_STATE_STYLE = {"done": "green", "pending": "yellow", "failed": "red"}


def erasure_table(doc: Mapping[str, Any]) -> RenderableType:
    """An erasure request document: the request, its layers, and every gap still open."""
    status: Mapping[str, Any] = doc.get("status", {})
    head = new_table("field", "value", title="erasure request")
    for name in ("id", "mode", "target_kind", "version", "requested_at"):
        head.add_row(name, cell(doc.get(name)))
    head.add_row("state", cell(status.get("state")))
    head.add_row("horizon", cell(status.get("horizon") or "not reached"))
    layers = new_table("layer", "state", "evidence", title="layers")
    for name, layer in status.get("layers", {}).items():
        state = str(layer.get("state"))
        layers.add_row(name, Text(state, style=_STATE_STYLE.get(state, "")), cell(layer.get("evidence")))
    gaps = list(status.get("gaps", []))
    if gaps:
        footer = Text("gaps: " + "; ".join(gaps), style="yellow")
    elif status.get("state") == "verified":
        footer = Text("no gaps: erasure verified", style="green")
    else:
        footer = Text(f"no gaps reported; state {status.get('state')}")
    return Group(head, layers, footer)
