"""Maintenance commands: ``purge`` and ``rotate-keys``.

Both can take a while on a large store, so both draw a progress bar on stderr when it is a
terminal; stdout only ever holds the report.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

from .forgetting import retention_table
from .interrupts import on_interrupt
from .options import DataLocation, data_option, open_existing_store
from .output import emit, generic_table, table_option
from .progress import progress_bar

__all__ = ["purge", "rotate_keys"]


@click.command()
@data_option
@table_option
def purge(data: DataLocation, table: bool) -> None:
    """Physically purge forgotten data, then verify by scanning every file.

    Removes erased rows, truncates the WAL, clears caches, then scans the store's files for
    probes of what was erased. Prints each erasure request's state, rows reclaimed, whether the
    WAL was truncated, and the scan (files, bytes, probes, matches, positive control). Pending
    layers are reported, not raised: see `cenotaph status ID` for a request's gaps.
    """
    on_interrupt(
        "interrupted: the purge stopped part-way; what it finished stays done, and "
        "`cenotaph purge` resumes the rest"
    )
    with open_existing_store(data) as store, progress_bar("scanning for residue") as progress:
        report = store.purge(progress=progress)
    emit(report.to_dict(), table=table, render=_purge_table)


def _purge_table(doc: dict[str, Any]) -> RenderableType:
    head = {k: v for k, v in doc.items() if k not in ("requests", "scan")}
    requests = [{"request": rid, "state": state} for rid, state in doc.get("requests", {}).items()]
    return Group(
        generic_table(head, "purge"),
        _scan_part(doc.get("scan", {})),
        generic_table(requests, "erasure requests")
        if requests
        else Text("(no erasure requests)", style="dim"),
    )


def _scan_part(scan: dict[str, Any]) -> RenderableType:
    """The residue scan for people. With nothing awaiting verification no scan runs, and its
    ``positive_control: false`` (JSON) means "not run", not "the scanner is broken"."""
    if not scan.get("files") and not scan.get("probes"):
        return Text("residue scan: not run (no erasure was waiting for verification)", style="dim")
    control = scan.get("positive_control")
    shown = {k: v for k, v in scan.items() if k != "positive_control"}
    shown["positive control"] = Text(
        "found the planted probe" if control else "FAILED: the scan proves nothing",
        style="green" if control else "red",
    )
    return generic_table(shown, "residue scan")


@click.command("rotate-keys")
@data_option
@table_option
def rotate_keys(data: DataLocation, table: bool) -> None:
    """Rewrap every live key under a new KEK epoch and destroy the old ones.

    An old epoch is retained while a registered backup needs it (`cenotaph release-backup`) or a
    pending erasure request's probes are sealed under it (until that request verifies);
    `retained` names each holder, why, and what releases it. Destroying the epochs live at a
    forget is what reaches that forget's erasure horizon: copies made before it (backups, old
    key files) can no longer be decrypted.
    """
    on_interrupt(
        "interrupted: the rotation either committed or rolled back whole; run `cenotaph rotate-keys` "
        "again to finish (an unused new epoch may be left; the next rotation destroys it)"
    )
    with open_existing_store(data) as store, progress_bar("rewrapping keys", unit="items") as progress:
        report = store.rotate_keys(progress=progress)
    emit(report.to_dict(), table=table, render=_rotation_table)


def _rotation_table(doc: dict[str, Any]) -> RenderableType:
    head = {k: v for k, v in doc.items() if k != "retained"}
    parts: list[RenderableType] = [generic_table(head, "key rotation")]
    if doc["retained"]:
        parts.append(retention_table(doc["retained"]))
        parts.append(
            Text(
                "each retained epoch is destroyed by the next `cenotaph rotate-keys` once its holder "
                "lets go (see release)",
                style="yellow",
            )
        )
    return Group(*parts)
