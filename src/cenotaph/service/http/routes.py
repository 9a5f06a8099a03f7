"""The ``/v1`` routes: the store's API over JSON, confined to each key's prefix (see ``auth``).

Every handler is a plain ``def``: FastAPI runs it in its thread pool, and the store is thread-safe.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from cenotaph import Scope, StoreSession

from ...errors import ForgottenError, ScopeClosureError
from ...model import ErasureRequest, Record
from ..apikeys import ApiKey, Role
from . import schemas as s
from .auth import (
    agent_key,
    any_key,
    consumer_of,
    exporter_key,
    inside,
    operator_key,
    owned_by_reach,
    subject_inside,
    subjects_inside,
    visible,
)
from .context import Service, service_dependency
from .operations import (
    accept_erasure,
    backups_for,
    epochs_for,
    erasure_doc,
    erasure_docs,
    erasures_for,
    export_for,
    forget_subject_for,
    owner_of,
    purge_for,
    visible_erasure,
)
from .problems import ApiError, NotVisible
from .sessions import IDLE_TIMEOUT

__all__ = ["router"]


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters a route takes, its dependencies' included."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _known_query_only(request: Request) -> None:
    """Refuse a query parameter the route does not take (a typo such as ``limt=`` would otherwise
    be ignored silently, and the caller would act on an answer to another question)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    known = _query_names(route.dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        takes = ", ".join(sorted(known)) or "none"
        raise ApiError(
            422,
            "invalid_input",
            f"this route takes no query parameter named {unknown[0]!r} (it takes: {takes}); see /docs",
        )


router = APIRouter(prefix="/v1", dependencies=[Depends(_known_query_only)])

SvcDep = Annotated[Service, Depends(service_dependency)]
Agent = Annotated[ApiKey, Depends(agent_key)]
Operator = Annotated[ApiKey, Depends(operator_key)]
Reader = Annotated[ApiKey, Depends(any_key)]  # agents, operators and consumers (recorded as taken)
Exporter = Annotated[ApiKey, Depends(exporter_key)]
SessionHeader = Annotated[
    str | None,
    Header(
        alias="Cenotaph-Session",
        description="a session id from POST /v1/sessions: reads join its read set, writes derive from it",
    ),
]
Limit = Annotated[int, Query(ge=1, le=s.LIMIT_MAX, description="items per page")]
Cursor = Annotated[str | None, Query(max_length=4096, description="next_cursor of the previous page")]


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {
        401: "missing, wrong or revoked API key",
        403: "the key's role may not do this",
        404: "outside this key's prefix, missing or forgotten (one body for all three)",
        409: "refused by the store: forgotten target, stale write, scope closure, or not provable yet",
        413: "request body larger than the store accepts",
        422: "malformed input; the message says what to fix",
        503: "the store is busy or its key provider failed; retry",
    }
    return {code: {"model": s.ErrorBody, "description": text[code]} for code in codes}


READ = _errors(401, 404, 422, 503)
WRITE = _errors(401, 403, 404, 409, 413, 422, 503)
OPERATOR_READ = _errors(401, 403, 404, 409, 422, 503)
SEARCH = _errors(401, 404, 413, 422, 503)


def _record(record: Record) -> dict[str, Any]:
    return record.to_dict()


def _session(svc: Service, key: ApiKey, session_id: str | None) -> StoreSession | None:
    return None if session_id is None else svc.sessions.get(key, session_id)


def _taint(session: StoreSession | None, record: Record) -> Record | None:
    """In a session, the record joins its read set (read again through it, so only what is
    returned is recorded); None if it was forgotten meanwhile."""
    return record if session is None else session.get(record.id)


def _answer_with(
    svc: Service, key: ApiKey, session: StoreSession | None, record: Record | None
) -> dict[str, Any]:
    """A record the key may see, read through the session if there is one; else NotVisible."""
    found = _taint(session, record) if record is not None and visible(key, record) else None
    if found is None:
        raise NotVisible
    _given(svc, key, [found])
    return _record(found)


def _given(svc: Service, key: ApiKey, records: list[Record] | list[dict[str, Any]]) -> None:
    """Under a consumer's key, what is answered is recorded as what that consumer took."""
    consumer = consumer_of(key)
    if consumer is not None and records:
        svc.store.consumer(consumer).took(records)


# -- records ------------------------------------------------------------------------------------
@router.post("/memories", status_code=201, response_model=s.RecordOut, responses=WRITE, tags=["memories"])
def write(body: s.WriteIn, svc: SvcDep, key: Agent, session_id: SessionHeader = None) -> dict[str, Any]:
    """Write a record (durable when answered). Writes in a session derive from what it read (W6)."""
    item, session = _write_item(svc, key, body), _session(svc, key, session_id)
    return _record(svc.store.write(**item) if session is None else session.write(**item))


@router.post(
    "/memories/batch", status_code=201, response_model=s.BatchOut, responses=WRITE, tags=["memories"]
)
def write_many(body: s.BatchIn, svc: SvcDep, key: Agent, session_id: SessionHeader = None) -> dict[str, Any]:
    """Write several records in one transaction: all land or none does."""
    items, session = [_write_item(svc, key, item) for item in body.items], _session(svc, key, session_id)
    written = svc.store.write_many(items) if session is None else session.write_many(items)
    return {"records": [_record(r) for r in written]}


def _write_item(svc: Service, key: ApiKey, body: s.WriteIn) -> dict[str, Any]:
    scope = inside(key, body.scope)
    derived = list(body.derived_from)
    for record_id in derived:  # a source the key cannot see is one it cannot name
        if not visible(key, svc.store.get(record_id)):
            raise NotVisible
    return {
        "scope": scope.path,
        "key": body.key,
        "value": body.value,
        "subjects": subjects_inside(key, body.subjects),
        "ttl": body.ttl_seconds,
        "derived_from": derived,
        "metadata": body.metadata,
        "base_version": body.base_version,
        "reauthorization": body.reauthorization,
    }


@router.get("/memories", response_model=s.RecordOut, responses=READ, tags=["memories"])
def read(
    svc: SvcDep,
    key: Reader,
    scope: Annotated[str, Query(description="the scope to read; falls through to its ancestors")],
    record_key: Annotated[str, Query(alias="key")],
    fallthrough: bool = True,
    session_id: SessionHeader = None,
) -> dict[str, Any]:
    """The record under ``key`` in ``scope``, else in its nearest ancestor inside this key's prefix."""
    parsed = Scope.parse(scope)
    session = _session(svc, key, session_id)
    # the store is asked whatever the scope, so a foreign scope costs what a missing one does
    record = svc.store.read(parsed.path, record_key, fallthrough=fallthrough)
    return _answer_with(svc, key, session, record if key.covers(parsed) else None)


@router.get("/memories/list", response_model=s.RecordList, responses=READ, tags=["memories"])
def list_records(
    svc: SvcDep,
    key: Reader,
    scope: str,
    include_descendants: bool = False,
    limit: Limit = s.LIMIT_DEFAULT,
    cursor: Cursor = None,
    session_id: SessionHeader = None,
) -> dict[str, Any]:
    """Every record in ``scope`` (and its descendants), ordered by scope then key, a page at a time.
    A scope with nothing in it answers 404, like a foreign one."""
    parsed = inside(key, scope)
    session = _session(svc, key, session_id)
    store = session if session is not None else svc.store
    records = store.list(parsed.path, include_descendants=include_descendants)
    if not records and cursor is None:
        raise NotVisible
    listing = f"list\0{parsed.path}\0{include_descendants}"
    chunk, next_cursor = svc.pager.page(
        records, lambda r: [r.scope, r.key], limit=limit, cursor=cursor, listing=listing, key=key
    )
    _given(svc, key, chunk)
    return {"records": [_record(r) for r in chunk], "next_cursor": next_cursor}


@router.get("/memories/{record_id}", response_model=s.RecordOut, responses=READ, tags=["memories"])
def get(
    svc: SvcDep,
    key: Reader,
    record_id: Annotated[str, Path(max_length=64)],
    session_id: SessionHeader = None,
) -> dict[str, Any]:
    """The record with this id, under the same checks as a read."""
    session = _session(svc, key, session_id)
    return _answer_with(svc, key, session, svc.store.get(record_id))


@router.post("/search", response_model=s.SearchOut, responses=SEARCH, tags=["memories"])
def search(body: s.SearchIn, svc: SvcDep, key: Agent, session_id: SessionHeader = None) -> dict[str, Any]:
    """The ``k`` records most like ``query`` in ``scope``, its ancestors inside this key's prefix
    (``fallthrough``) and its descendants (``include_descendants``), best first."""
    parsed = inside(key, body.scope)
    session = _session(svc, key, session_id)
    levels = [p for p in parsed.prefixes() if key.covers(p)] if body.fallthrough else [parsed]
    found: dict[str, tuple[float, Record]] = {}
    for level in levels:
        for hit in svc.store.search(
            level.path,
            body.query,
            k=body.k,
            fallthrough=False,
            include_descendants=body.include_descendants and level == parsed,
            filter=body.filter,
        ):
            found[hit.record.id] = (hit.score, hit.record)
    best = sorted(found.values(), key=lambda pair: -pair[0])[: body.k]
    hits = []
    for score, record in best:
        returned = _taint(session, record)
        if returned is not None:
            hits.append({"record": _record(returned), "score": score})
    return {"hits": hits}


# -- sessions -----------------------------------------------------------------------------------
@router.post("/sessions", status_code=201, response_model=s.SessionOut, responses=WRITE, tags=["sessions"])
def open_session(body: s.SessionIn, svc: SvcDep, key: Agent) -> dict[str, Any]:
    """Open a session bound to this key: pass its id as ``Cenotaph-Session`` on reads and writes."""
    parsed = inside(key, body.scope)
    session_id = svc.sessions.open(key, parsed)
    return {"session_id": session_id, "scope": parsed.path, "idle_timeout_seconds": IDLE_TIMEOUT}


@router.delete("/sessions/{session_id}", status_code=204, responses=READ, tags=["sessions"])
def close_session(session_id: Annotated[str, Path(max_length=128)], svc: SvcDep, key: Agent) -> Response:
    """End a session; its id answers 404 from then on."""
    svc.sessions.close(key, session_id)
    return Response(status_code=204)


# -- forgetting ---------------------------------------------------------------------------------
def _accepted(request: Request, response: Response, handle: ErasureRequest) -> dict[str, Any]:
    """The 202 of a forget already accepted (``accept_erasure``)."""
    url = str(request.url_for("erasure_status", request_id=handle.id).path)
    response.headers["Location"] = url
    return {
        "request_id": handle.id,
        "status_url": url,
        "version": handle.version,
        "mode": handle.mode,
        "target_kind": handle.target_kind,
        "requested_at": handle.requested_at.isoformat(),
    }


OUTSIDE_ANCESTOR = (
    "an ancestor scope outside this key's prefix holds the same key, so a read there would still "
    "find it; an operator whose key covers that scope must forget it there"
)


@router.post("/forget", status_code=202, response_model=s.ErasureAccepted, responses=WRITE, tags=["erasure"])
def forget(body: s.ForgetIn, svc: SvcDep, key: Agent, request: Request, response: Response) -> dict[str, Any]:
    """Forget ``key`` in ``scope`` and every descendant, or (no key) the whole subtree. Answers 202
    once the tombstone (and, in compliance mode, key destruction) is durable; poll ``status_url``."""
    parsed = inside(key, body.scope)
    if body.include_ancestors and body.key is not None:
        for ancestor in parsed.ancestors():  # never reach outside the prefix to forget a copy there
            if not key.covers(ancestor) and svc.store.read(ancestor.path, body.key, fallthrough=False):
                raise ScopeClosureError(OUTSIDE_ANCESTOR, [])
    try:
        handle = svc.store.forget(
            parsed.path,
            body.key,
            mode=body.mode,
            include_ancestors=body.include_ancestors,
            owner=owner_of(key),
        )
    except ScopeClosureError as exc:
        mine = [a for a in exc.ancestors if key.covers(Scope.parse(a))]
        if len(mine) < len(exc.ancestors):
            raise ScopeClosureError(OUTSIDE_ANCESTOR, mine) from None
        raise
    accept_erasure(svc, key, handle)
    return _accepted(request, response, handle)


@router.post(
    "/subjects/{subject:path}/forget",
    status_code=202,
    response_model=s.ErasureAccepted,
    responses=WRITE,
    tags=["erasure"],
)
def forget_subject(
    subject: Annotated[
        str, Path(description="a subject inside this key's prefix, e.g. tenant:acme/user:alice")
    ],
    svc: SvcDep,
    key: Operator,
    request: Request,
    response: Response,
) -> dict[str, Any]:
    """Compliance-forget everything about a subject, including records derived from it."""
    return _accepted(request, response, forget_subject_for(svc, key, subject))


@router.post(
    "/reauthorizations", status_code=201, response_model=s.ReauthorizeOut, responses=WRITE, tags=["erasure"]
)
def reauthorize(body: s.ReauthorizeIn, svc: SvcDep, key: Agent) -> dict[str, Any]:
    """A one-time token that lets the next write to a forgotten target land. An operator key
    lifts any forget inside its prefix; an agent key only forgets its own key made -- every forget
    the token could lift (each version of a key's target; for a whole scope, every forget in or
    above its subtree) made by this very API key -- and never a subject's erasure (403)."""
    parsed = inside(key, body.scope)
    if key.role == Role.OPERATOR:
        subject = None if body.subject is None else subject_inside(key, body.subject)
        return {"token": svc.store.reauthorize(parsed.path, body.key, subject=subject)}
    if body.subject is not None:
        raise ApiError(403, "forbidden", AGENT_LIFTS_SUBJECT)
    try:
        return {"token": svc.store.reauthorize(parsed.path, body.key, owner=owner_of(key))}
    except ForgottenError:
        raise ApiError(403, "forbidden", AGENT_LIFTS_OTHERS) from None


AGENT_LIFTS_SUBJECT = "lifting a subject's erasure needs an operator key; an agent key may not do it"
AGENT_LIFTS_OTHERS = (
    "this target was forgotten by an operator or another API key; an agent key may lift only its "
    "own forgets: an operator key is needed to reauthorize it"
)


@router.get("/erasures", response_model=s.ErasureList, responses=READ, tags=["erasure"])
def list_erasures(
    svc: SvcDep, key: Agent, limit: Limit = s.LIMIT_DEFAULT, cursor: Cursor = None
) -> dict[str, Any]:
    """The erasure requests made through this server by keys inside this key's prefix, oldest first."""
    chunk, next_cursor = svc.pager.page(
        erasures_for(svc, key),
        lambda h: [h.requested_at.isoformat(), h.id],
        limit=limit,
        cursor=cursor,
        listing="erasures",
        key=key,
    )
    return {"erasures": erasure_docs(svc, chunk), "next_cursor": next_cursor}


@router.get("/erasures/{request_id}", response_model=s.ErasureOut, responses=READ, tags=["erasure"])
def erasure_status(
    request_id: Annotated[str, Path(max_length=64)], svc: SvcDep, key: Agent
) -> dict[str, Any]:
    """Where an erasure request stands: state, layers with evidence, horizon, gaps."""
    return erasure_doc(visible_erasure(svc, key, request_id))


@router.get(
    "/erasures/{request_id}/certificate",
    response_model=s.CertificateOut,
    responses=OPERATOR_READ,
    tags=["erasure"],
)
def certificate(
    request_id: Annotated[str, Path(max_length=64)], svc: SvcDep, key: Operator
) -> dict[str, Any]:
    """The signed certificate once the request is verified; 409 with the gaps until then."""
    handle = visible_erasure(svc, key, request_id)
    return svc.store.attest(handle.id, requester_key_id=svc.owners.owner("erasure", handle.id)).to_dict()


@router.get(
    "/subjects/{subject:path}/export", response_model=s.ExportOut, responses=OPERATOR_READ, tags=["erasure"]
)
def export_subject(
    subject: Annotated[str, Path(description="a subject inside this key's prefix")],
    svc: SvcDep,
    key: Exporter,
    limit: Limit = s.LIMIT_DEFAULT,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Everything about a subject inside this key's prefix (an access request), a page at a time."""
    doc = export_for(svc, key, subject)
    items = [(0, r) for r in doc["records"]] + [(1, r) for r in doc["derived_records"]]
    chunk, next_cursor = svc.pager.page(
        items,
        lambda item: [item[0], item[1]["scope"], item[1]["key"], item[1]["id"]],
        limit=limit,
        cursor=cursor,
        listing=f"export\0{doc['subject']}",
        key=key,
    )
    _given(svc, key, [r for _, r in chunk])
    return {
        **doc,
        "records": [r for n, r in chunk if n == 0],
        "derived_records": [r for n, r in chunk if n == 1],
        "next_cursor": next_cursor,
    }


@router.get("/public-key", response_model=s.PublicKey, tags=["erasure"])
def public_key(svc: SvcDep) -> dict[str, Any]:
    """The Ed25519 key that signs this store's certificates (no API key needed)."""
    return {"public_key": svc.store.public_key}


@router.get("/log/head", response_model=s.TreeHead, responses=READ, tags=["erasure"])
def tree_head(svc: SvcDep, key: Agent) -> dict[str, Any]:
    """A signed tree head over the audit log: keep it, and later ask for a consistency proof."""
    return svc.store.tree_head()


@router.get("/log/consistency", response_model=s.ConsistencyOut, responses=READ, tags=["erasure"])
def consistency(
    svc: SvcDep,
    key: Agent,
    old_size: Annotated[int, Query(alias="from", ge=0, description="the tree_size of the head you kept")],
) -> dict[str, Any]:
    """A signed head now and the proof that the log of ``from`` entries is its prefix."""
    return svc.store.consistency_proof(old_size)


# -- operations ---------------------------------------------------------------------------------
@router.get("/backups", response_model=s.BackupList, responses=OPERATOR_READ, tags=["operations"])
def list_backups(svc: SvcDep, key: Operator) -> dict[str, Any]:
    """Every registered backup (ids and the KEK epochs each keeps alive; no paths)."""
    return {"backups": backups_for(svc, key)}


@router.post("/backups", status_code=201, response_model=s.BackupOut, responses=WRITE, tags=["operations"])
def create_backup(svc: SvcDep, key: Operator) -> dict[str, Any]:
    """A ciphertext-only backup into the server's backup directory (``cenotaph serve --backup-dir``)."""
    if svc.backup_dir is None:
        raise ApiError(
            403, "forbidden", "this server takes no backups: start it with `cenotaph serve --backup-dir DIR`"
        )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    info = svc.store.backup(svc.backup_dir / f"backup-{stamp}-{secrets.token_hex(4)}")
    svc.owners.record("backup", info.id, key)
    return {
        "id": info.id,
        "epochs": list(info.epochs),
        "created_here": True,
        "created_at": info.created_at.isoformat(),
        "bytes": info.bytes,
    }


@router.post("/backups/{backup_id}/release", status_code=204, responses=OPERATOR_READ, tags=["operations"])
def release_backup(backup_id: Annotated[str, Path(max_length=64)], svc: SvcDep, key: Operator) -> Response:
    """End the retention of a backup made through this server by your tenant."""
    if not owned_by_reach(svc, key, svc.owners.owner("backup", backup_id)):
        raise NotVisible
    svc.store.release_backup(backup_id)
    return Response(status_code=204)


@router.get("/keys/epochs", response_model=s.EpochList, responses=OPERATOR_READ, tags=["operations"])
def key_epochs(svc: SvcDep, key: Operator) -> dict[str, Any]:
    """Every live KEK epoch and what holds it back (erasure ids listed only if yours)."""
    return {"epochs": epochs_for(svc, key)}


@router.post("/keys/rotate", response_model=s.RotationOut, responses=OPERATOR_READ, tags=["operations"])
def rotate_keys(svc: SvcDep, key: Operator) -> dict[str, Any]:
    """Rewrap every live key under a new KEK epoch; destroy the epochs nothing holds back."""
    return svc.store.rotate_keys().to_dict()


@router.post("/purge", response_model=s.PurgeOut, responses=OPERATOR_READ, tags=["operations"])
def purge(svc: SvcDep, key: Operator) -> dict[str, Any]:
    """Purge and verify pending erasures now (the server also does it in the background)."""
    return purge_for(svc, key)


@router.get("/key", response_model=s.KeyInfo, responses=_errors(401), tags=["operations"])
def whoami(key: Reader) -> dict[str, Any]:
    """The calling key's binding: tenant, prefix and role (and a consumer key's consumer)."""
    return {
        "id": key.id,
        "tenant": key.tenant,
        "prefix": key.prefix,
        "role": str(key.role),
        "consumer": key.consumer,
    }


@router.get("/health", response_model=s.Health, tags=["operations"])
def health() -> dict[str, Any]:
    return {"status": "ok"}
