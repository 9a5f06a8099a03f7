"""What an operator key sees of the store's erasure and key state, confined to its reach: shared
by the ``/v1`` routes and the console, so both show the same things and refuse the same things."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cenotaph import Scope

from ...model import ErasureRequest, ErasureStatus
from ...remedies import Spelling
from ..apikeys import ApiKey
from .auth import owned_by_reach, subject_inside
from .context import Service
from .problems import NotVisible
from .spelling import speak_http

__all__ = [
    "accept_erasure",
    "backups_for",
    "epochs_for",
    "erasure_doc",
    "erasure_docs",
    "erasures_for",
    "consumers_for",
    "export_for",
    "tenant_consumers",
    "forget_subject_for",
    "owner_of",
    "purge_for",
    "visible_erasure",
]


def owner_of(key: ApiKey) -> str:
    """The owner the store records for a forget made with ``key`` (``reauthorize(owner=...)``
    then reopens only that key's forgets)."""
    return "api-key:" + key.id


def accept_erasure(svc: Service, key: ApiKey, handle: ErasureRequest) -> None:
    """A forget made through the server: remember who made it (the store's background purge
    carries it to verified)."""
    svc.owners.record("erasure", handle.id, key)


def forget_subject_for(svc: Service, key: ApiKey, subject: str) -> ErasureRequest:
    """Erase a subject inside the key's prefix; every API key bound inside that subject's scope
    is revoked and keeps no trace of it (the caller's own key too, if it is bound to exactly
    that subject: follow such a request with a key bound above it)."""
    checked = subject_inside(key, subject)
    handle = svc.store.forget_subject(checked, owner=owner_of(key))
    accept_erasure(svc, key, handle)
    svc.keys.erase_subject(checked)
    return handle


def visible_erasure(svc: Service, key: ApiKey, request_id: str) -> ErasureRequest:
    """The request, if a key inside this key's reach made it; else NotVisible."""
    if not owned_by_reach(svc, key, svc.owners.owner("erasure", request_id)):
        raise NotVisible
    return svc.store.erasure(request_id)


def erasures_for(svc: Service, key: ApiKey) -> list[ErasureRequest]:
    mine = {rid for rid, owner in svc.owners.owned("erasure").items() if owned_by_reach(svc, key, owner)}
    return [h for h in svc.store.erasures() if h.id in mine]


def erasure_doc(
    handle: ErasureRequest, spelling: Spelling = speak_http, status: ErasureStatus | None = None
) -> dict[str, Any]:
    """The request and where it stands, the store's words (gaps, next step, evidence) in
    ``spelling``: the API's routes, or the console's actions. ``status``: as a listing read it
    (:func:`erasure_docs`), else asked of the handle."""
    status = handle.status() if status is None else status
    return {**handle.to_dict(), "status": spelling.document(status.to_dict())}


def erasure_docs(
    svc: Service, handles: list[ErasureRequest], spelling: Spelling = speak_http
) -> list[dict[str, Any]]:
    """:func:`erasure_doc` of each handle, every status read in one transaction (not one a handle)."""
    statuses = {request.id: status for request, status in svc.store.erasure_statuses()} if handles else {}
    return [erasure_doc(h, spelling, statuses.get(h.id)) for h in handles]


def purge_for(svc: Service, key: ApiKey) -> dict[str, Any]:
    """Purge and verify every pending erasure now (``POST /v1/purge`` and the console's "Purge
    now"); the report names only the requests in the key's reach."""
    report = svc.store.purge()
    mine = svc.owners.owned("erasure")
    return {
        **report.to_dict(),
        "requests": {r: st for r, st in report.requests.items() if owned_by_reach(svc, key, mine.get(r))},
    }


def export_for(svc: Service, key: ApiKey, subject: str) -> dict[str, Any]:
    """The subject's export, holding only records inside the key's prefix and requests in its reach."""
    doc = svc.store.export_subject(subject_inside(key, subject))
    mine = svc.owners.owned("erasure")

    def inside(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if key.covers(Scope.parse(r["scope"]))]

    return {
        **doc,
        "records": inside(doc["records"]),
        "derived_records": inside(doc["derived_records"]),
        "erasure_requests": [
            r for r in doc["erasure_requests"] if owned_by_reach(svc, key, mine.get(r["id"]))
        ],
    }


def backups_for(svc: Service, key: ApiKey) -> list[dict[str, Any]]:
    """Every registered backup (ids and epochs are content-free), marked if this tenant made it."""
    mine = svc.owners.owned("backup")
    return [
        {"id": b, "epochs": epochs, "created_here": owned_by_reach(svc, key, mine.get(b))}
        for b, epochs in sorted(svc.store.backups().items())
    ]


def epochs_for(svc: Service, key: ApiKey) -> list[dict[str, Any]]:
    """Every live KEK epoch and what holds it back; other tenants' erasures only as a count."""
    mine = svc.owners.owned("erasure")
    epochs = []
    for epoch, holds in svc.store.key_epochs().items():
        pending = holds["pending_erasures"]
        shown = [r for r in pending if owned_by_reach(svc, key, mine.get(r))]
        epochs.append(
            {
                "epoch": epoch,
                "current": holds["current"],
                "wraps_live_keys": holds["wraps_live_keys"],
                "backups": holds["backups"],
                "pending_erasures": shown,
                "other_pending_erasures": len(pending) - len(shown),
            }
        )
    return epochs


def tenant_consumers(svc: Service, key: ApiKey) -> set[str]:
    """The ids of the consumers of ``key``'s tenant: those a key of the tenant acts for."""
    return {k.consumer for k in svc.keys.list() if k.consumer and k.tenant == key.tenant}


def consumers_for(svc: Service, key: ApiKey) -> list[dict[str, Any]]:
    """The tenant's consumers, each with its pending events and how many are overdue (API + console)."""
    mine = tenant_consumers(svc, key)
    now = datetime.now(UTC)
    docs = []
    for consumer in svc.store.consumers():
        if consumer.id in mine:
            pending = consumer.events()
            docs.append(
                {
                    **consumer.info.to_dict(),
                    "pending": [{**e.to_dict(), "overdue": e.overdue(now)} for e in pending],
                    "overdue": sum(1 for e in pending if e.overdue(now)),
                }
            )
    return docs
