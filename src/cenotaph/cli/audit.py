"""``cenotaph audit verify``: check the audit log's hash chain against the keyring's anchor."""

from __future__ import annotations

import json

import click

from .options import DataLocation, data_option, open_existing_store
from .output import emit, table_option
from .witness import tree_head, witness

__all__ = ["audit"]


@click.group()
def audit() -> None:
    """Inspect the audit log (a hash chain of content-free events)."""


@audit.command()
@data_option
@table_option
def verify(data: DataLocation, table: bool) -> None:
    """Verify the audit log has not been altered.

    Re-hashes every entry and checks the head against the one anchored in the keyring, so an
    edited, reordered, removed or truncated entry is caught. Prints {"ok": true, "entries",
    "head", "anchored_seq"}; exits 1 naming the first bad entry if the log was tampered with.
    """
    with open_existing_store(data) as store:
        try:
            result = store.verify_audit()
        except json.JSONDecodeError:
            raise click.ClickException(
                "an audit entry is not valid JSON: the audit log was altered; restore it from a trusted "
                "copy and investigate"
            ) from None
    emit({"ok": True, **result}, table=table)


audit.add_command(tree_head)
audit.add_command(witness)
