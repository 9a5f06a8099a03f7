"""Memory commands: ``write``, ``read``, ``list`` and ``search``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text

from cenotaph.limits import MAX_VALUE_BYTES

from .interrupts import held, on_interrupt
from .options import DataLocation, data_option, json_callback, open_existing_store, parse_json
from .output import RECORD_COLUMNS, cell, emit, new_table, records_table, table_option

__all__ = ["list_records", "read", "search", "write"]


class ValueCommand(click.Command):
    """A command whose arguments may start with ``-`` (``-5``, ``-x marks the spot``).

    Before ``--``, an argument that starts with one ``-`` and is not one of the command's own
    short options (``-h``) is an argument, not a bundle of short flags; an unknown long option
    (``--jsn``) stays an error, since it is far more often a typo than a value: a value like that
    goes after ``--``.
    """

    _HIDDEN = "\0cenotaph-argument-"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        params = self.get_params(ctx)
        known = {opt for param in params for opt in (*param.opts, *param.secondary_opts)}
        takes_value = {
            opt
            for p in params
            if isinstance(p, click.Option) and not p.is_flag and not p.count
            for opt in p.opts
        }
        hidden: dict[str, str] = {}
        shown: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                shown.extend(args[i:])
                break
            is_option_value = i > 0 and args[i - 1] in takes_value  # `--ttl -5` is the option's
            short = arg.startswith("-") and len(arg) > 1 and not arg.startswith("--")
            if short and arg not in known and not is_option_value:
                hidden[placeholder := f"{self._HIDDEN}{i}"] = arg
                arg = placeholder
            shown.append(arg)
        rest = super().parse_args(ctx, shown)
        for name, value in ctx.params.items():
            if isinstance(value, str) and value in hidden:
                ctx.params[name] = hidden[value]
        return rest


# Input read for one value: the store refuses more than MAX_VALUE_BYTES of compact JSON; JSON
# text may be pretty-printed, so allow some room, but never read an unbounded stream.
_MAX_INPUT_BYTES = 16 * MAX_VALUE_BYTES


def read_value(value: str | None, file: Path | None) -> str:
    """VALUE itself, stdin for ``-``, or the file's contents: text exactly as given (UTF-8)."""
    if value is not None and file is not None:
        raise click.UsageError("give either VALUE or --file PATH, not both")
    if value is None and file is None:
        raise click.UsageError("missing VALUE: give it, `-` to read it from stdin, or --file PATH")
    if file is None:
        assert value is not None
        if value != "-":
            return value
        if sys.stdin.isatty():
            click.echo("reading the value from stdin; end it with Ctrl-D", err=True)
        where, raw = "stdin", sys.stdin.buffer.read(_MAX_INPUT_BYTES + 1)
    else:
        where = f"--file {file}"
        try:
            with open(file, "rb") as handle:
                raw = handle.read(_MAX_INPUT_BYTES + 1)
        except OSError as exc:
            raise click.BadParameter(f"cannot read {file} ({exc.strerror})", param_hint="--file") from exc
    if len(raw) > _MAX_INPUT_BYTES:
        raise click.UsageError(
            f"the value from {where} is over {_MAX_INPUT_BYTES} bytes; a value is at most "
            f"{MAX_VALUE_BYTES} bytes of compact JSON (1 MiB): split it into several keys"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.UsageError(
            f"the value from {where} is not UTF-8 text (byte {exc.start}); values are JSON, so "
            "encode binary data (e.g. base64) first"
        ) from None


@click.command(cls=ValueCommand)
@click.argument("scope")
@click.argument("key")
@click.argument("value", required=False)
@click.option(
    "--file",
    "file",
    metavar="PATH",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the value from PATH (UTF-8 text, exactly as it is) instead of VALUE.",
)
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
    value: str | None,
    file: Path | None,
    as_json: bool,
    ttl: float | None,
    subjects: tuple[str, ...],
    derived_from: tuple[str, ...],
    metadata: Any,
    base_version: int | None,
    reauthorization: str | None,
    data: DataLocation,
    table: bool,
) -> None:
    """Write a value under a key in a scope.

    Writes VALUE under KEY in SCOPE and prints the record. VALUE `-` reads the value from stdin,
    and --file PATH from a file, exactly as given (a trailing newline is kept): that is how values
    larger than the command line allows (up to the 1 MiB limit) get in. VALUE is a string unless
    --json is given. A VALUE starting with `-` (`-5`) is a value; one starting with `--` needs `--`
    before it (`cenotaph write SCOPE KEY -- --text`). A forgotten target refuses the write (exit 1)
    unless --reauthorization carries a token issued after the forget.
    """
    text = read_value(value, file)
    parsed = parse_json(text, "VALUE") if as_json else text
    with open_existing_store(data) as store, held():
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
        on_interrupt(f"interrupted after the write committed (record {record.id}, version {record.version})")
    emit(record.to_dict(), table=table, render=records_table)


@click.command()
@click.argument("scope")
@click.argument("key")
@click.option("--no-fallthrough", is_flag=True, help="Read SCOPE only, not its ancestors.")
@data_option
@table_option
@click.pass_context
def read(
    ctx: click.Context, scope: str, key: str, no_fallthrough: bool, data: DataLocation, table: bool
) -> None:
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
def list_records(scope: str, descendants: bool, data: DataLocation, table: bool) -> None:
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
    data: DataLocation,
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
    table = new_table("score", *RECORD_COLUMNS, free=("value",))
    for hit in hits:
        record = hit["record"]
        table.add_row(f"{hit['score']:.3f}", *(cell(record.get(c)) for c in RECORD_COLUMNS))
    return table
