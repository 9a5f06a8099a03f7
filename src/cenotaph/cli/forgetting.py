"""Forgetting commands: ``forget``, ``forget-subject``, ``reauthorize`` and ``status``.

Every forget prints the request and its status as the store reports it: a compliance forget
returns at ``shredded`` with the layers still pending listed as gaps; nothing here says
"erased" on the strength of a return code.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Group, RenderableType

import cenotaph
from cenotaph.backends.sqlite.backend import SQLiteBackend

from .options import data_option, keyring_location, open_existing_store
from .output import emit, erasure_table, generic_table, table_option

__all__ = ["forget", "forget_subject", "reauthorize", "status"]


def request_document(request: cenotaph.ErasureRequest) -> dict[str, Any]:
    """One erasure request and its current status, as printed by every command that shows one."""
    return {**request.to_dict(), "status": request.status().to_dict()}


@click.command()
@click.argument("scope")
@click.argument("key", required=False)
@click.option(
    "--mode",
    type=click.Choice(["compliance", "operational"]),
    default="compliance",
    show_default=True,
    help="compliance: erasure (keys destroyed, cascade to derived records); operational: stop recalling.",
)
@click.option(
    "--include-ancestors",
    is_flag=True,
    help="Also forget copies of KEY held by ancestor scopes (else such a copy refuses the forget).",
)
@data_option
@table_option
def forget(scope: str, key: str | None, mode: str, include_ancestors: bool, data: Path, table: bool) -> None:
    """Forget KEY in SCOPE and every descendant, or the whole SCOPE subtree without KEY.

    Prints the erasure request (id, version, mode) and its status; poll it with `cenotaph status ID`.
    """
    with open_existing_store(data) as store:
        request = store.forget(scope, key, mode=mode, include_ancestors=include_ancestors)
        doc = request_document(request)
    emit(doc, table=table, render=erasure_table)


@click.command("forget-subject")
@click.argument("subject")
@data_option
@table_option
def forget_subject(subject: str, data: Path, table: bool) -> None:
    """Forget everything about SUBJECT, and every record derived from it (always compliance)."""
    with open_existing_store(data) as store:
        doc = request_document(store.forget_subject(subject))
    emit(doc, table=table, render=erasure_table)


@click.command()
@click.argument("scope")
@click.argument("key", required=False)
@click.option("--subject", help="Lift a subject's tombstone instead (a token naming that subject).")
@data_option
@table_option
def reauthorize(scope: str, key: str | None, subject: str | None, data: Path, table: bool) -> None:
    """Print a one-time token that lets one write reach a forgotten target again.

    Without KEY the token covers SCOPE's subtree; with KEY that key in SCOPE; with --subject that
    subject. Pass it to `cenotaph write --reauthorization TOKEN`. It never revives a stale write.
    """
    if key is not None and subject is not None:
        raise click.UsageError("give KEY or --subject, not both")
    with open_existing_store(data) as store:
        token = store.reauthorize(scope, key, subject=subject)
    emit({"token": token}, table=table)


@click.command()
@click.argument("request_id", required=False)
@data_option
@table_option
def status(request_id: str | None, data: Path, table: bool) -> None:
    """Print one erasure request's status, or without REQUEST_ID a summary of the store.

    The summary lists every erasure request (id, mode, kind, version, state); it holds no names.
    """
    with open_existing_store(data) as store:
        if request_id is not None:
            emit(request_document(store.erasure(request_id)), table=table, render=erasure_table)
            return
        requests = _erasure_requests(data)
    summary = {
        "data": str(data),
        "keyring": str(keyring_location(data)),
        "erasures": {
            "total": len(requests),
            "by_state": dict(sorted(Counter(r["state"] for r in requests).items())),
            "by_mode": dict(sorted(Counter(r["mode"] for r in requests).items())),
        },
        "requests": requests,
    }
    emit(summary, table=table, render=_summary_table)


def _erasure_requests(data: Path) -> list[dict[str, Any]]:
    """Every erasure request of the store, content-free (no target token).

    Read from the backend because the Store has no public listing yet; replace with
    ``Store.erasures()`` when it exists.
    """
    backend = SQLiteBackend(data)
    try:
        with backend.read() as txn:
            rows = txn.erasures()
    finally:
        backend.close()
    return [
        {
            "id": r.id,
            "mode": r.mode,
            "target_kind": r.target_kind,
            "version": r.version,
            "requested_at": r.requested_at,
            "state": r.state,
        }
        for r in rows
    ]


def _summary_table(doc: dict[str, Any]) -> RenderableType:
    head = {"data": doc["data"], "keyring": doc["keyring"], **doc["erasures"]}
    return Group(generic_table(head, "store"), generic_table(doc["requests"], "erasure requests"))
