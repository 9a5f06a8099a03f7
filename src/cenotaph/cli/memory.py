"""Memory commands: ``write``, ``read`` and ``list``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .options import data_option, json_callback, open_existing_store, parse_json
from .output import emit, records_table, table_option

__all__ = ["list_records", "read", "write"]


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
