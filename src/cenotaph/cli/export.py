"""``cenotaph export``: an access request, everything the store holds about one data subject."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

from .options import DataLocation, data_option, open_existing_store
from .output import emit, generic_table, records_table, table_option

__all__ = ["export"]


@click.command()
@click.argument("subject")
@data_option
@table_option
def export(subject: str, data: DataLocation, table: bool) -> None:
    """Export everything about a data subject (an access request).

    Prints one JSON document: the records carrying SUBJECT, the records derived from them, and
    the erasure requests that targeted SUBJECT (id, mode, state, version). Forgotten, expired
    and erased records are not in it: they are not held any more.
    """
    with open_existing_store(data) as store:
        doc = store.export_subject(subject)
    emit(doc, table=table, render=_export_table)


def _export_table(doc: dict[str, Any]) -> RenderableType:
    head = {k: v for k, v in doc.items() if k not in ("records", "derived_records", "erasure_requests")}
    requests = doc.get("erasure_requests") or []
    return Group(
        generic_table(head, "subject export"),
        Text("records", style="bold"),
        records_table(doc.get("records") or []),
        Text("derived records", style="bold"),
        records_table(doc.get("derived_records") or []),
        Text("erasure requests", style="bold"),
        generic_table(requests) if requests else Text("(none)", style="dim"),
    )
