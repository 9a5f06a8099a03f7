"""Memory commands: ``write``, ``read``, ``list`` and ``search``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text

from .options import data_option, json_callback, open_existing_store, parse_json
from .output import RECORD_COLUMNS, cell, emit, new_table, records_table, table_option

__all__ = ["list_records", "read", "search", "write"]


@click.command()
@click.argument("scope")
@click.argument("key")
@click.argument("value")
@click.option("--json", "as_json", is_flag=True, help="Parse VALUE as JSON instead of taking it as a string.")
@click.option(
    "--ttl",
    metavar="SECONDS",
    type=click.FloatRange(min=0, min_open=True),
    help="Expire the record after SECONDS.",
)
@click.option(
    "--subject", "subjects", metavar="SUBJECT", multiple=True, help="Add a data subject (repeatable)."
)
@click.option(
    "--derived-from", "derived_from", metavar="ID", multiple=True, help="Id of a source record (repeatable)."
)
@click.option(
    "--metadata",
    metavar="JSON",
    callback=json_callback,
    help="A JSON object stored (encrypted) with the record.",
)
@click.option(
    "--base-version",
    metavar="N",
    type=click.IntRange(min=0),
    help="Refuse the write if the record or a forget is newer than this version.",
)
@click.option(
    "--reauthorization",
    metavar="TOKEN",
    help="A token from `cenotaph reauthorize`, to write a forgotten target.",
)
@data_option
@table_option
def write(
    scope: str,
    key: str,
    value: str,
    as_json: bool,
    ttl: float | None,
    subjects: tuple[str, ...],
    derived_from: tuple[str, ...],
    metadata: Any,
    base_version: int | None,
    reauthorization: str | None,
    data: Path,
    table: bool,
) -> None:
    """Write a value under a key in a scope.

    Writes VALUE under KEY in SCOPE and prints the record. VALUE is a string unless --json is
    given. A forgotten target refuses the write (exit 1) unless --reauthorization carries a token
    issued after the forget.
    """
    parsed = parse_json(value, "VALUE") if as_json else value
    with open_existing_store(data) as store:
        record = store.write(
            scope,
            key,
            parsed,
            subjects=subjects or None,
            ttl=ttl,
            derived_from=derived_from,
            metadata=metadata,
            base_version=base_version,
            reauthorization=reauthorization,
        )
    emit(record.to_dict(), table=table, render=records_table)


@click.command()
@click.argument("scope")
@click.argument("key")
@click.option("--no-fallthrough", is_flag=True, help="Read SCOPE only, not its ancestors.")
@data_option
@table_option
@click.pass_context
def read(ctx: click.Context, scope: str, key: str, no_fallthrough: bool, data: Path, table: bool) -> None:
    """Read a key, falling through to ancestor scopes.

    Prints the record under KEY in SCOPE, else in its nearest ancestor. When nothing is found
    (never written, expired or forgotten) it prints `null` (with --table: a line saying so) and
    exits 1, so scripts can test the exit code.
    """
    with open_existing_store(data) as store:
        record = store.read(scope, key, fallthrough=not no_fallthrough)
    if record is None:
        if table:
            click.echo("not found")
        else:
            emit(None, table=False)
        ctx.exit(1)
    emit(record.to_dict(), table=table, render=records_table)


@click.command("list")
@click.argument("scope")
@click.option("--descendants", is_flag=True, help="Also list the records of every descendant scope.")
@data_option
@table_option
def list_records(scope: str, descendants: bool, data: Path, table: bool) -> None:
    """List the records in a scope.

    Prints every visible record in SCOPE as a JSON array, ordered by scope then key.
    """
    with open_existing_store(data) as store:
        records = store.list(scope, include_descendants=descendants)
    emit([r.to_dict() for r in records], table=table, render=records_table)


@click.command()
@click.argument("scope")
@click.argument("query")
@click.option(
    "-k",
    "k",
    metavar="N",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Return at most N hits.",
)
@click.option("--no-fallthrough", is_flag=True, help="Search SCOPE only, not its ancestors.")
@click.option("--descendants", is_flag=True, help="Also search every descendant scope.")
@click.option(
    "--filter",
    "filter_",
    metavar="JSON",
    callback=json_callback,
    help='Match record metadata, e.g. \'{"topic": "health"}\' or \'{"n": {"$in": [1, 2]}}\'.',
)
@data_option
@table_option
def search(
    scope: str,
    query: str,
    k: int,
    no_fallthrough: bool,
    descendants: bool,
    filter_: Any,
    data: Path,
    table: bool,
) -> None:
    """Search records by similarity to a text query.

    Prints up to N hits, best first, as a JSON array of {record, score}: records in SCOPE and
    its ancestors (unless --no-fallthrough), and in its descendants with --descendants. Every
    hit passes the same checks as `cenotaph read`; hits with nothing in common are left out.
    --filter operators: $eq, $ne, $in, $nin, $exists.
    """
    with open_existing_store(data) as store:
        hits = store.search(
            scope,
            query,
            k=k,
            fallthrough=not no_fallthrough,
            include_descendants=descendants,
            filter=filter_,
        )
    emit([hit.to_dict() for hit in hits], table=table, render=_hits_table)


def _hits_table(hits: list[dict[str, Any]]) -> RenderableType:
    if not hits:
        return Text("(no hits)", style="dim")
    table = new_table("score", *RECORD_COLUMNS)
    for hit in hits:
        record = hit["record"]
        table.add_row(f"{hit['score']:.3f}", *(cell(record.get(c)) for c in RECORD_COLUMNS))
    return table
