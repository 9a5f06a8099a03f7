"""Forgetting commands: ``forget``, ``forget-subject``, ``reauthorize`` and ``status``.

Every forget prints the request and its status as the store reports it, with every layer's
evidence and every gap still open: nothing here says "erased" on the strength of a return code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

import cenotaph
from cenotaph.errors import ErasureNotProvableError
from cenotaph.model import Mode
from cenotaph.service.apikeys import KEYS_DIR

from .interrupts import held, on_interrupt
from .options import DataLocation, api_key_ring, data_option, keyring_location, open_existing_store
from .output import cell, emit, erasure_table, generic_table, message_cell, new_table, table_option
from .progress import progress_bar

__all__ = [
    "emit_forgotten",
    "erasure_counts",
    "forget",
    "forget_subject",
    "reauthorize",
    "registered_backups",
    "request_rows",
    "retention_table",
    "status",
]


def request_document(request: cenotaph.ErasureRequest) -> dict[str, Any]:
    """One erasure request and its current status, as printed by every command that shows one."""
    return {**request.to_dict(), "status": request.status().to_dict()}


no_wait_option = click.option(
    "--no-wait",
    is_flag=True,
    help="Return once the tombstone and key destruction are durable (shredded), without waiting "
    "for the purge and the verifying scan; `cenotaph purge` (or the next process that keeps the "
    "store open) does them.",
)


def emit_forgotten(
    store: cenotaph.Store, request: cenotaph.ErasureRequest, no_wait: bool, table: bool
) -> None:
    """Print a request as ``forget`` and ``forget-subject`` do: a compliance forget is purged and
    verified first (a progress bar while it scans, then waiting until it is verified or cannot
    be), unless ``no_wait``. A wait that cannot succeed prints the request with its gaps, then its
    error ends the command (one line, a non-zero exit)."""
    failure: ErasureNotProvableError | None = None
    if request.mode == Mode.COMPLIANCE and not no_wait:
        with progress_bar("purging and verifying") as progress:
            store.purge(progress=progress)
        try:
            request.wait()
        except ErasureNotProvableError as exc:
            failure = exc
    emit(request_document(store.erasure(request.id)), table=table, render=erasure_table)
    if failure is not None:
        raise failure


@click.command()
@click.argument("scope")
@click.argument("key", required=False)
@click.option(
    "--mode",
    type=click.Choice([m.value for m in Mode]),
    default=Mode.COMPLIANCE.value,
    show_default=True,
    help="compliance: erasure (keys destroyed, cascade to derived records); operational: stop recalling.",
)
@click.option(
    "--include-ancestors",
    is_flag=True,
    help="Also forget copies of KEY held by ancestor scopes (else such a copy refuses the forget).",
)
@no_wait_option
@data_option
@table_option
def forget(
    scope: str,
    key: str | None,
    mode: str,
    include_ancestors: bool,
    no_wait: bool,
    data: DataLocation,
    table: bool,
) -> None:
    """Forget a key, or a whole scope subtree.

    Forgets KEY in SCOPE and every descendant, or without KEY the whole SCOPE subtree. A
    compliance forget waits until its purge and verifying scan are done (--no-wait: until its
    keys are destroyed). Prints the erasure request (id, version, mode) and its status; poll it
    with `cenotaph status ID`.
    """
    with open_existing_store(data) as store:
        request = committed_forget(
            store, lambda: store.forget(scope, key, mode=mode, include_ancestors=include_ancestors)
        )
        emit_forgotten(store, request, no_wait, table)


def committed_forget(
    store: cenotaph.Store, forget: Callable[[], cenotaph.ErasureRequest]
) -> cenotaph.ErasureRequest:
    """Run ``forget`` with Ctrl-C held until it committed (a compliance forget's purge follows in
    :func:`emit_forgotten`, which Ctrl-C may cut short: the erasure then waits, shredded, for the
    next `cenotaph purge`). The store is opened with purging off, so nothing runs behind it."""
    with held():
        request = forget()
        if request.mode == Mode.COMPLIANCE:
            on_interrupt(
                f"interrupted after the forget committed (request {request.id}: keys destroyed, "
                "nothing of it readable); run `cenotaph purge` to finish erasing and verify it"
            )
        else:
            on_interrupt(f"interrupted after the forget committed (request {request.id})")
    return request


@click.command("forget-subject")
@click.argument("subject")
@no_wait_option
@data_option
@table_option
def forget_subject(subject: str, no_wait: bool, data: DataLocation, table: bool) -> None:
    """Forget everything about a data subject.

    Every record carrying SUBJECT, and every record derived from one, always in compliance mode.
    API keys bound inside SUBJECT's scope are revoked. Waits until the erasure is verified
    (--no-wait: until its keys are destroyed).
    """
    with open_existing_store(data) as store:
        request = committed_forget(store, lambda: store.forget_subject(subject))
        if (data.api_keys_home() / KEYS_DIR).is_dir():  # API keys bound inside the subject go with it
            api_key_ring(data, store).erase_subject(subject)
        emit_forgotten(store, request, no_wait, table)


@click.command()
@click.argument("scope")
@click.argument("key", required=False)
@click.option(
    "--subject", help="Also lift this subject's erasure (the token is used by a write inside SCOPE)."
)
@data_option
@table_option
def reauthorize(scope: str, key: str | None, subject: str | None, data: DataLocation, table: bool) -> None:
    """Issue a token to rewrite a forgotten target.

    The token is good for one write. Without KEY it covers SCOPE's subtree; with KEY that key in
    SCOPE; --subject adds that subject's erasure (lifted everywhere once the token's write, inside
    SCOPE or to KEY, lands). Pass it to `cenotaph write --reauthorization TOKEN`. It never
    revives a stale write (one whose --base-version predates the forget).
    """
    with open_existing_store(data) as store, held():
        token = store.reauthorize(scope, key, subject=subject)
        on_interrupt("interrupted after the token was issued (it was not printed: request a new one)")
    emit({"token": token}, table=table)


@click.command()
@click.argument("request_id", required=False)
@data_option
@table_option
def status(request_id: str | None, data: DataLocation, table: bool) -> None:
    """Show an erasure request, or sum up the store.

    With REQUEST_ID: that request and its status (with `stuck`: purging again cannot verify it,
    `next_step`, and `retained_by`: what keeps its horizon back). Without: where the store and
    its keyring are, its certificate-signing public key, every erasure request (id, mode, kind,
    version, state, stuck, and horizon: when copies made before the forget became undecryptable,
    null until `cenotaph rotate-keys` reaches it) with counts by state and mode, the registered
    backups with the KEK epochs each retains, and `retained`: every KEK epoch a registered backup
    or a pending erasure request holds back from rotation, why, and what releases it. It holds
    no names.
    """
    with open_existing_store(data) as store:
        if request_id is not None:
            emit(request_document(store.erasure(request_id)), table=table, render=erasure_table)
            return
        requests = request_rows(store)
        public_key = store.public_key
        backups = registered_backups(store)
        retained = [r.to_dict() for r in store.retention()]
    summary = {
        "data": data.shown,
        "keyring": str(keyring_location(data).resolve()),
        "public_key": public_key,
        "erasures": erasure_counts(requests),
        "requests": requests,
        "backups": backups,
        "retained": retained,
    }
    emit(summary, table=table, render=_summary_table)


def request_rows(store: cenotaph.Store) -> list[dict[str, Any]]:
    """Every erasure request, oldest first, with its state and erasure horizon (None: not reached)."""
    rows = []
    for request, status in store.erasure_statuses():  # one read transaction for them all
        horizon = status.horizon.isoformat() if status.horizon is not None else None
        rows.append({**request.to_dict(), "state": status.state, "stuck": status.stuck, "horizon": horizon})
    return rows


def erasure_counts(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """How many requests there are, by state and by mode."""
    return {
        "total": len(requests),
        "by_state": dict(sorted(Counter(r["state"] for r in requests).items())),
        "by_mode": dict(sorted(Counter(r["mode"] for r in requests).items())),
    }


def registered_backups(store: cenotaph.Store) -> dict[str, list[int]]:
    """The backups registered with this store's keyring (id -> the KEK epochs each retains)."""
    return dict(sorted(store.backups().items()))


def _summary_table(doc: dict[str, Any]) -> RenderableType:
    head = {k: doc[k] for k in ("data", "keyring", "public_key")} | doc["erasures"]
    rows = [
        {k: r.get(k) for k in ("id", "mode", "target_kind", "version", "state", "stuck")}
        | {"horizon": r.get("horizon") or "not reached"}
        for r in doc["requests"]
    ]
    backups = [{"backup": b, "retains epochs": e} for b, e in doc["backups"].items()]
    return Group(
        generic_table(head, "store"),
        generic_table(rows, "erasure requests") if rows else Text("(no erasure requests)", style="dim"),
        generic_table(backups, "registered backups")
        if backups
        else Text("(no registered backups)", style="dim"),
        retention_table(doc["retained"]),
    )


def retention_table(rows: list[dict[str, Any]]) -> RenderableType:
    """The KEK epochs held back from rotation, each with its holder, why and what releases it."""
    if not rows:
        return Text("(no KEK epoch is held back: `cenotaph rotate-keys` destroys every old one)", style="dim")
    table = new_table(
        "epoch",
        "holder",
        "id",
        "reason",
        "release",
        "stuck",
        title="KEK epochs held back from rotation",
        free=("reason", "release"),
    )
    for r in rows:
        table.add_row(
            cell(r["epoch"]),
            r["holder"],
            r["id"],
            message_cell(r["reason"]),
            message_cell(r["release"]),
            cell(r["stuck"]),
        )
    return table
