"""``cenotaph init``: create the store (a data directory, or a PostgreSQL schema) and its keyring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

import cenotaph
from cenotaph.operations import holds_store

from .interrupts import held, on_interrupt
from .options import (
    DataLocation,
    data_option,
    keyring_inside,
    keyring_location,
    root_of_trust_warning,
)
from .output import emit, generic_table, table_option

__all__ = ["init"]


@click.command()
@data_option
@table_option
def init(data: DataLocation, table: bool) -> None:
    """Create the store and its keyring.

    Safe to run again on an existing store. Prints where both live. With the default keyring
    inside the data directory, whoever copies the directory has the keys: it warns about that,
    and says how to keep the keyring elsewhere (CENOTAPH_KEYRING, CENOTAPH_MASTER_KEY).

    With --data postgresql://user@host/db?schema=NAME (default schema: cenotaph) it creates the
    schema and its tables, and the keyring in the directory CENOTAPH_KEYRING names (required).
    The only command that creates a store: every other one refuses a schema or directory
    holding none.
    """
    replicas = data.replicas()
    if data.url is not None:
        keyring_location(data)  # CENOTAPH_KEYRING, or a usage error before anything is made
        created = not holds_store(data.url)
        target: str | Path = data.url
    else:
        assert data.directory is not None
        created = not holds_store(data.directory)
        target = data.directory
    with held():
        cenotaph.open(target, replicas=replicas).close()
        on_interrupt(f"interrupted after the store in {data.given} was {'created' if created else 'checked'}")
    warning = root_of_trust_warning(data)
    doc = {
        "data": data.shown,
        "keyring": str(keyring_location(data).resolve()),
        "keyring_inside_data": keyring_inside(data),
        "created": created,
        "warning": warning,
    }
    if warning is not None and not table:  # the table shows it; JSON readers also get it on stderr
        click.echo(f"warning: {warning}", err=True)
    emit(doc, table=table, render=_init_table)


def _init_table(doc: dict[str, Any]) -> RenderableType:
    fields = {k: v for k, v in doc.items() if k != "warning"}
    parts: list[RenderableType] = [generic_table(fields, "cenotaph store")]
    if doc["warning"]:
        parts.append(Text("warning: " + doc["warning"], style="yellow"))
    return Group(*parts)
