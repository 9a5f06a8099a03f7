"""``cenotaph.Client``: a store on a cenotaph server, with the methods, types and errors of ``Store``::

    client = cenotaph.Client("http://127.0.0.1:8000", api_key)
    client.write("tenant:acme/user:alice", "diet", "vegetarian")
    client.forget("tenant:acme/user:alice", "diet").wait(10).state     # 'verified'

(``tests/http/test_client.py`` runs this against a real server.)

What differs from ``Store``, by design of the server: the key reaches only its prefix, so a scope
outside it reads as empty (``read`` -> None, ``list`` / ``search`` -> []); ``backup()`` takes no
destination (the server writes into its ``--backup-dir``); a ``forget``'s ``reason`` is checked and
never sent. A refused key or role raises :class:`~cenotaph.errors.AccessDeniedError`; a server that
cannot be reached raises :class:`~cenotaph.errors.StorageError`. Needs ``httpx`` (the ``server`` extra).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx

from . import ConsumerEvent, ConsumerInfo, TakenRecord
from .errors import CenotaphError, ErasureNotProvableError, InvalidValueError, NotFoundError, StorageError
from .model import (
    BackupInfo,
    Certificate,
    ErasureRequest,
    ErasureStatus,
    JSONValue,
    LayerState,
    LayerStatus,
    PurgeReport,
    Record,
    RotationReport,
    SearchHit,
)
from .wire import error_for

__all__ = ["Client", "ClientSession", "RegisteredConsumer"]

SESSION_HEADER = "Cenotaph-Session"
_PAGE = 1000
_MISSING = 404


@dataclass(frozen=True, slots=True)
class RegisteredConsumer:
    """What ``Client.register_consumer`` returns: the consumer and its API key (role ``consumer``),
    which the server shows this once. The key is left out of the repr."""

    info: ConsumerInfo
    api_key: str = field(repr=False)
    api_key_id: str

    @property
    def id(self) -> str:
        return self.info.id


class Client:
    """A cenotaph server reached with one API key. Thread-safe (one ``httpx.Client``); a context manager."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        http_client: httpx.Client | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InvalidValueError("base_url must be the server's http:// or https:// URL")
        if not isinstance(api_key, str) or not api_key:
            raise InvalidValueError("api_key must be a key printed by `cenotaph api-keys create`")
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._owned = http_client is None
        self._http = http_client if http_client is not None else httpx.Client(timeout=timeout)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        if self._owned:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -----------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        session: str | None = None,
        missing_ok: bool = False,
        timeout: httpx.Timeout | None = None,
    ) -> Any:
        headers = dict(self._headers)
        content = None
        if body is not None:
            content = _encode(body)
            headers["Content-Type"] = "application/json"
        if session is not None:
            headers[SESSION_HEADER] = session
        held: dict[str, Any] = {} if timeout is None else {"timeout": timeout}  # else the client's own
        try:
            response = self._http.request(
                method,
                self.base_url + path,
                content=content,
                params=params,
                headers=headers,
                **held,
            )
        except httpx.HTTPError as exc:
            raise StorageError(
                f"cannot reach the cenotaph server at {self.base_url} ({type(exc).__name__}); "
                "check the URL and that `cenotaph serve` is running"
            ) from None
        if response.status_code == _MISSING and missing_ok:
            return None
        if response.status_code == 204:
            return {}
        try:
            doc = response.json()
        except ValueError:
            doc = None
        if response.is_success and doc is not None:
            return doc
        raise error_for(response.status_code, doc)

    def _pages(
        self, path: str, params: Mapping[str, Any], session: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every page of a listing (none if it answers 404: outside the key's reach, or empty)."""
        cursor = None
        while True:
            page = {**params, "limit": _PAGE, **({"cursor": cursor} if cursor else {})}
            doc = self._call("GET", path, params=page, session=session, missing_ok=True)
            if doc is None:
                return
            yield doc
            cursor = doc.get("next_cursor")
            if not cursor:
                return

    # -- writes --------------------------------------------------------------------------
    def write(
        self,
        scope: str,
        key: str,
        value: JSONValue,
        *,
        subjects: Iterable[str] | None = None,
        ttl: float | timedelta | None = None,
        derived_from: Iterable[str] = (),
        metadata: Mapping[str, JSONValue] | None = None,
        base_version: int | None = None,
        reauthorization: str | None = None,
        _session: str | None = None,
    ) -> Record:
        """Write ``value`` under ``(scope, key)``; durable when it returns."""
        item = _write_item(
            scope, key, value, subjects, ttl, derived_from, metadata, base_version, reauthorization
        )
        return _record(self._call("POST", "/v1/memories", body=item, session=_session))

    def write_many(self, items: Iterable[Mapping[str, Any]], *, _session: str | None = None) -> list[Record]:
        """Write several records in one transaction: all land or none does."""
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise InvalidValueError("write_many takes a list of dicts, each with scope, key and value")
        batch = [_write_item_from(item) for item in items]
        if not batch:
            return []
        doc = self._call("POST", "/v1/memories/batch", body={"items": batch}, session=_session)
        return [_record(r) for r in doc["records"]]

    def reauthorize(self, scope: str, key: str | None = None, *, subject: str | None = None) -> str:
        """A one-time token that lets the next write to a forgotten target land."""
        body = {"scope": scope, "key": key, "subject": subject}
        return str(self._call("POST", "/v1/reauthorizations", body=body)["token"])

    # -- reads ---------------------------------------------------------------------------
    def read(
        self, scope: str, key: str, *, fallthrough: bool = True, _session: str | None = None
    ) -> Record | None:
        """The record under ``key`` in ``scope``, else in its nearest ancestor inside the key's prefix."""
        params = {"scope": scope, "key": key, "fallthrough": _flag(fallthrough, "fallthrough")}
        doc = self._call("GET", "/v1/memories", params=params, session=_session, missing_ok=True)
        return None if doc is None else _record(doc)

    def get(self, record_id: str, *, _session: str | None = None) -> Record | None:
        if not isinstance(record_id, str) or not record_id.isalnum() or len(record_id) > 64:
            raise InvalidValueError("record_id must be an id returned by write()")
        doc = self._call("GET", f"/v1/memories/{record_id}", session=_session, missing_ok=True)
        return None if doc is None else _record(doc)

    def list(
        self, scope: str, *, include_descendants: bool = False, _session: str | None = None
    ) -> list[Record]:
        """Every record in ``scope`` (and its descendants), ordered by scope then key."""
        params = {"scope": scope, "include_descendants": _flag(include_descendants, "include_descendants")}
        pages = self._pages("/v1/memories/list", params, _session)
        return [_record(r) for doc in pages for r in doc["records"]]

    def search(
        self,
        scope: str,
        query: str,
        *,
        k: int = 10,
        fallthrough: bool = True,
        include_descendants: bool = False,
        filter: Mapping[str, Any] | None = None,
        _session: str | None = None,
    ) -> builtins.list[SearchHit]:
        """The ``k`` records most similar to ``query``, best first."""
        body = {
            "scope": scope,
            "query": query,
            "k": k,
            "fallthrough": fallthrough,
            "include_descendants": include_descendants,
            "filter": None if filter is None else dict(filter),
        }
        doc = self._call("POST", "/v1/search", body=body, session=_session, missing_ok=True)
        return (
            [] if doc is None else [SearchHit(_record(h["record"]), float(h["score"])) for h in doc["hits"]]
        )

    # -- sessions ------------------------------------------------------------------------
    @contextmanager
    def session(self, scope: str) -> Iterator[ClientSession]:
        """A server-side session (W6): what it reads becomes ``derived_from`` of what it writes."""
        doc = self._call("POST", "/v1/sessions", body={"scope": scope})
        session = ClientSession(self, str(doc["session_id"]), str(doc["scope"]))
        try:
            yield session
        finally:
            session.close()

    # -- forgetting ----------------------------------------------------------------------
    def forget(
        self,
        scope: str,
        key: str | None = None,
        *,
        mode: str = "compliance",
        include_ancestors: bool = False,
        reason: str | None = None,
    ) -> ErasureRequest:
        """Forget ``key`` in ``scope`` and every descendant, or (``key=None``) the whole subtree."""
        _check_reason(reason)
        body = {"scope": scope, "key": key, "mode": mode, "include_ancestors": include_ancestors}
        return self._accepted(self._call("POST", "/v1/forget", body=body))

    def forget_subject(self, subject: str, *, reason: str | None = None) -> ErasureRequest:
        """Compliance-forget everything about a subject (an operator key)."""
        _check_reason(reason)
        return self._accepted(self._call("POST", f"/v1/subjects/{_segment(subject)}/forget"))

    def _accepted(self, doc: Mapping[str, Any]) -> ErasureRequest:
        return self._handle(
            {k: doc[k] for k in ("version", "mode", "target_kind", "requested_at")}
            | {"id": doc["request_id"]}
        )

    def _handle(self, doc: Mapping[str, Any]) -> ErasureRequest:
        return ErasureRequest(
            id=str(doc["id"]),
            version=int(doc["version"]),
            mode=doc["mode"],
            target_kind=str(doc["target_kind"]),
            requested_at=datetime.fromisoformat(doc["requested_at"]),
            _status=self._status,
            _wait=self._wait,
        )

    def _erasure_doc(self, request_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self._call("GET", _erasure_path(request_id))
        return doc

    def _status(self, request_id: str) -> ErasureStatus:
        return _status(self._erasure_doc(request_id)["status"])

    def _wait(self, request_id: str, timeout: float | None) -> ErasureStatus:
        """Poll until verified (operational: reclaimed) or ``timeout`` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.05
        while True:
            doc = self._erasure_doc(request_id)
            status = _status(doc["status"])
            reclaimed = (
                doc["mode"] == "operational" and status.layers.get("reclaim", _PENDING).state == "done"
            )
            if status.state == "verified" or reclaimed:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                return status
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)

    def erasure(self, request_id: str) -> ErasureRequest:
        """The handle of an earlier forget (made through the server by a key inside this one's reach)."""
        return self._handle(self._erasure_doc(request_id))

    def erasures(self) -> builtins.list[ErasureRequest]:
        """Every erasure request this key may see, oldest first."""
        return [self._handle(e) for doc in self._pages("/v1/erasures", {}) for e in doc["erasures"]]

    def confirm_erasure(self, request_id: str) -> ErasureStatus:
        """The request's status if verified; else ErasureNotProvableError naming every gap."""
        status = self._status(request_id)
        if status.state != "verified" or status.gaps:
            gaps = list(status.gaps) or [f"the request is {status.state}, not verified"]
            raise ErasureNotProvableError("erasure is not provable yet: " + "; ".join(gaps), gaps)
        return status

    def attest(self, request_id: str) -> Certificate:
        """The signed certificate of a verified compliance erasure (an operator key)."""
        return Certificate(self._call("GET", _erasure_path(request_id) + "/certificate"))

    def export_subject(self, subject: str) -> dict[str, Any]:
        """Everything about a subject inside the key's prefix (an operator key)."""
        merged: dict[str, Any] | None = None
        for doc in self._pages(f"/v1/subjects/{_segment(subject)}/export", {}):
            if merged is None:
                merged = {k: v for k, v in doc.items() if k != "next_cursor"}
            else:
                merged["records"] += doc["records"]
                merged["derived_records"] += doc["derived_records"]
        if merged is None:
            raise NotFoundError("this key may not export that subject: it lies outside the key's prefix")
        return merged

    # -- downstream consumers -------------------------------------------------------------
    def register_consumer(self, name: str, *, ack_days: int | None = None) -> RegisteredConsumer:
        """Register a downstream consumer and mint its key (an operator key; the key is shown once)."""
        body: dict[str, Any] = {"name": name} | ({} if ack_days is None else {"ack_days": ack_days})
        doc = self._call("POST", "/v1/consumers", body=body)
        return RegisteredConsumer(_consumer_info(doc), str(doc["api_key"]), str(doc["api_key_id"]))

    def consumers(self) -> builtins.list[ConsumerInfo]:
        """The consumers of this key's tenant, oldest first (an operator key)."""
        return [_consumer_info(c) for c in self._call("GET", "/v1/consumers")["consumers"]]

    def consumer_events(
        self, consumer_id: str, *, wait: float = 0, pending_only: bool = True
    ) -> builtins.list[ConsumerEvent]:
        """The consumer's erasure events (its own key, or an operator of its tenant). With ``wait``
        (seconds, at most 60) an empty answer is held by the server until an event arrives; the
        client's own read timeout is stretched to cover it (an ``http_client`` given keeps its own)."""
        if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 60:
            raise InvalidValueError("wait must be a number of seconds from 0 to 60")
        configured = self._http.timeout
        held = None
        if wait and self._owned and configured.read is not None and configured.read < wait + 10:
            held = httpx.Timeout(
                configured.connect, read=wait + 10, write=configured.write, pool=configured.pool
            )
        doc = self._call(
            "GET",
            _consumer_path(consumer_id) + "/events",
            params={"wait": wait, "pending_only": _flag(pending_only, "pending_only")},
            timeout=held,
        )
        return [_consumer_event(e) for e in doc["events"]]

    def acknowledge(
        self, consumer_id: str, request_id: str, evidence: Mapping[str, Any] | None = None
    ) -> ConsumerEvent:
        """The consumer's statement that it deleted what the request's event named (its own key)."""
        body = {"request_id": request_id} | ({} if evidence is None else {"evidence": dict(evidence)})
        doc = self._call("POST", _consumer_path(consumer_id) + "/acknowledgements", body=body)
        return _consumer_event(doc)

    # -- operations ----------------------------------------------------------------------
    def purge(self) -> PurgeReport:
        """Purge and verify pending erasures now (an operator key; the server also does it itself)."""
        doc = self._call("POST", "/v1/purge")
        return PurgeReport(doc["requests"], doc["reclaimed"], doc["wal_truncated"], doc["scan"])

    def backup(self) -> BackupInfo:
        """A ciphertext-only backup into the server's backup directory (an operator key)."""
        doc = self._call("POST", "/v1/backups")
        return BackupInfo(
            id=doc["id"],
            path="",
            created_at=datetime.fromisoformat(doc["created_at"])
            if doc.get("created_at")
            else datetime.now(UTC),
            epochs=tuple(doc["epochs"]),
            bytes=int(doc.get("bytes") or 0),
        )

    def backups(self) -> dict[str, builtins.list[int]]:
        return {b["id"]: list(b["epochs"]) for b in self._call("GET", "/v1/backups")["backups"]}

    def release_backup(self, backup_id: str) -> None:
        if not isinstance(backup_id, str) or not backup_id:
            raise InvalidValueError("backup_id must be the id returned by backup()")
        self._call("POST", f"/v1/backups/{quote(backup_id, safe='')}/release")

    def key_epochs(self) -> dict[int, dict[str, Any]]:
        return {e.pop("epoch"): e for e in self._call("GET", "/v1/keys/epochs")["epochs"]}

    def rotate_keys(self) -> RotationReport:
        doc = self._call("POST", "/v1/keys/rotate")
        return RotationReport(
            new_epoch=doc["new_epoch"],
            rewrapped=doc["rewrapped"],
            destroyed_epochs=tuple(doc["destroyed_epochs"]),
            retained_epochs=tuple(doc["retained_epochs"]),
        )

    def tree_head(self) -> dict[str, Any]:
        """A signed tree head over the server store's audit log (see :meth:`cenotaph.Store.tree_head`)."""
        head: dict[str, Any] = self._call("GET", "/v1/log/head")
        return head

    def consistency_proof(self, old_size: int) -> dict[str, Any]:
        """``{"tree_head", "proof"}`` from ``old_size`` (see :meth:`cenotaph.Store.consistency_proof`)."""
        if isinstance(old_size, bool) or not isinstance(old_size, int) or old_size < 0:
            raise InvalidValueError(
                "old_size must be the tree_size of an earlier tree head (an integer >= 0)"
            )
        answer: dict[str, Any] = self._call("GET", "/v1/log/consistency", params={"from": old_size})
        return answer

    @property
    def public_key(self) -> str:
        """The Ed25519 public key that signs the server store's certificates (64 hex characters)."""
        return str(self._call("GET", "/v1/public-key")["public_key"])


class ClientSession:
    """A session on the server: every record it returns joins its read set; its writes derive from it."""

    def __init__(self, client: Client, session_id: str, scope: str) -> None:
        self.client = client
        self.id = session_id
        self.scope = scope
        self._read: dict[str, None] = {}
        self._closed = False

    @property
    def read_set(self) -> tuple[str, ...]:
        """The ids this session returned (the server keeps the same set)."""
        return tuple(self._read)

    def _sid(self) -> str:
        if self._closed:
            raise InvalidValueError("this session has ended (its with-block exited); open a new one")
        return self.id

    def _note(self, records: Iterable[Record]) -> None:
        for record in records:
            self._read[record.id] = None

    def read(self, scope: str, key: str, *, fallthrough: bool = True) -> Record | None:
        record = self.client.read(scope, key, fallthrough=fallthrough, _session=self._sid())
        self._note([record] if record else [])
        return record

    def get(self, record_id: str) -> Record | None:
        record = self.client.get(record_id, _session=self._sid())
        self._note([record] if record else [])
        return record

    def list(self, scope: str, *, include_descendants: bool = False) -> builtins.list[Record]:
        records = self.client.list(scope, include_descendants=include_descendants, _session=self._sid())
        self._note(records)
        return records

    def search(self, scope: str, query: str, **options: Any) -> builtins.list[SearchHit]:
        hits = self.client.search(scope, query, _session=self._sid(), **options)
        self._note(h.record for h in hits)
        return hits

    def write(self, scope: str, key: str, value: JSONValue, **options: Any) -> Record:
        return self.client.write(scope, key, value, _session=self._sid(), **options)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            # the server ends idle sessions itself; a lost close changes nothing stored
            with contextlib.suppress(CenotaphError):
                self.client._call("DELETE", f"/v1/sessions/{quote(self.id, safe='')}", missing_ok=True)


_PENDING = LayerStatus(LayerState.PENDING)


def _encode(body: Mapping[str, Any]) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidValueError(
            f"values must be JSON (dict, list, str, int, float, bool or None, no NaN): {exc}"
        ) from None


def _erasure_path(request_id: object) -> str:
    if not isinstance(request_id, str) or not request_id or len(request_id) > 64 or not request_id.isascii():
        raise InvalidValueError("request_id must be the id returned by forget()")
    return f"/v1/erasures/{quote(request_id, safe='')}"


def _flag(value: object, name: str) -> str:
    if not isinstance(value, bool):
        raise InvalidValueError(f"{name} must be True or False")
    return "true" if value else "false"


def _consumer_path(consumer_id: object) -> str:
    if (
        not isinstance(consumer_id, str)
        or not consumer_id.isascii()
        or not consumer_id.replace("_", "").isalnum()
        or len(consumer_id) > 64
    ):
        raise InvalidValueError("consumer_id must be an id returned by register_consumer()")
    return f"/v1/consumers/{consumer_id}"


def _segment(subject: object) -> str:
    if not isinstance(subject, str) or not subject:
        raise InvalidValueError("subject must be a non-empty string")
    return quote(subject, safe=":/")


def _check_reason(reason: object) -> None:
    if reason is not None and not isinstance(reason, str):
        raise InvalidValueError("reason must be a string")


def _ttl_seconds(ttl: object) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, timedelta):
        return ttl.total_seconds()
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidValueError("ttl must be seconds (a number) or a timedelta")
    return float(ttl)


def _write_item(
    scope: str,
    key: str,
    value: JSONValue,
    subjects: Iterable[str] | None,
    ttl: float | timedelta | None,
    derived_from: Iterable[str],
    metadata: Mapping[str, JSONValue] | None,
    base_version: int | None,
    reauthorization: str | None,
) -> dict[str, Any]:
    if isinstance(derived_from, str) or (subjects is not None and isinstance(subjects, str)):
        raise InvalidValueError("subjects and derived_from must be lists of strings, not one string")
    return {
        "scope": scope,
        "key": key,
        "value": value,
        "subjects": None if subjects is None else list(subjects),
        "ttl_seconds": _ttl_seconds(ttl),
        "derived_from": list(derived_from or ()),
        "metadata": None if metadata is None else dict(metadata),
        "base_version": base_version,
        "reauthorization": reauthorization,
    }


_WRITE_OPTIONS = ("subjects", "ttl", "derived_from", "metadata", "base_version", "reauthorization")


def _write_item_from(item: object) -> dict[str, Any]:
    if not isinstance(item, Mapping) or not {"scope", "key", "value"} <= set(item):
        raise InvalidValueError("each write_many item is a dict with scope, key and value")
    unknown = set(item) - {"scope", "key", "value", *_WRITE_OPTIONS}
    if unknown:
        raise InvalidValueError(f"unknown write option(s): {', '.join(sorted(map(str, unknown)))}")
    return _write_item(
        item["scope"],
        item["key"],
        item["value"],
        item.get("subjects"),
        item.get("ttl"),
        item.get("derived_from") or (),
        item.get("metadata"),
        item.get("base_version"),
        item.get("reauthorization"),
    )


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _record(doc: Mapping[str, Any]) -> Record:
    return Record(
        id=doc["id"],
        scope=doc["scope"],
        key=doc["key"],
        value=doc["value"],
        version=doc["version"],
        subjects=tuple(doc["subjects"]),
        created_at=datetime.fromisoformat(doc["created_at"]),
        expires_at=_time(doc.get("expires_at")),
        derived_from=tuple(doc.get("derived_from") or ()),
        metadata=dict(doc.get("metadata") or {}),
    )


def _status(doc: Mapping[str, Any]) -> ErasureStatus:
    return ErasureStatus(
        state=doc["state"],
        layers={n: LayerStatus(v["state"], v.get("evidence") or {}) for n, v in doc["layers"].items()},
        horizon=_time(doc.get("horizon")),
        gaps=tuple(doc.get("gaps") or ()),
    )


def _consumer_info(doc: Mapping[str, Any]) -> ConsumerInfo:
    return ConsumerInfo(
        id=str(doc["id"]),
        name=str(doc["name"]),
        ack_days=int(doc["ack_days"]),
        registered_at=datetime.fromisoformat(doc["registered_at"]),
    )


def _consumer_event(doc: Mapping[str, Any]) -> ConsumerEvent:
    return ConsumerEvent(
        consumer_id=str(doc["consumer_id"]),
        request_id=str(doc["request_id"]),
        records=tuple(TakenRecord(str(r["record_id"]), int(r["version"])) for r in doc["records"]),
        created_at=datetime.fromisoformat(doc["created_at"]),
        deadline=datetime.fromisoformat(doc["deadline"]),
        acknowledged_at=_time(doc.get("acknowledged_at")),
        evidence=doc.get("evidence"),
    )
