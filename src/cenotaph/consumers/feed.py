"""What consumers took and what they owe, as content-free rows: the one place for each rule.

- what a consumer is asked to delete: the records of a compliance forget that it took (:func:`notify`,
  run in the forget's transaction, so a forget and its events commit together)
- what a request still waits for: the events of it no consumer has acknowledged (:func:`standing`)
- what an acknowledgement may say: a flat JSON object, bounded (:func:`check_evidence`)
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..audit.chain import AuditEntry
from ..backends import ops
from ..backends.base import Txn
from ..errors import InvalidValueError, StorageError
from ..model import LayerState, LayerStatus, canonical_json

__all__ = [
    "ACKNOWLEDGE",
    "ACK_EVENT",
    "ack_entry",
    "check_audited",
    "DEFAULT_ACK_DAYS",
    "MAX_ACK_DAYS",
    "MAX_EVIDENCE_BYTES",
    "ConsumerEvent",
    "ConsumerInfo",
    "TakenRecord",
    "check_ack_days",
    "check_consumer_name",
    "check_evidence",
    "consumers",
    "events",
    "layer",
    "new_consumer_id",
    "notify",
    "standing",
    "statement",
]

DEFAULT_ACK_DAYS = 30  # how long a consumer has to acknowledge an erasure, unless registered otherwise
MAX_ACK_DAYS = 365
MAX_NAME = 64
MAX_EVIDENCE_BYTES = 4096
MAX_EVIDENCE_FIELDS = 32
MAX_EVIDENCE_TEXT = 512


@dataclass(frozen=True, slots=True)
class TakenRecord:
    """A record a consumer took: its id and version (never its value, scope, key or subjects)."""

    record_id: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"record_id": self.record_id, "version": self.version}


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """A registered consumer (``Consumer.info``): its id, name, the days it has to acknowledge an
    erasure, and when it was registered."""

    id: str
    name: str
    ack_days: int
    registered_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "ack_days": self.ack_days,
            "registered_at": self.registered_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class ConsumerEvent:
    """An erasure a consumer must carry out: delete ``records`` (what it was given) by ``deadline``,
    then acknowledge ``request_id``. Content-free: ids, versions and times only."""

    consumer_id: str
    request_id: str
    records: tuple[TakenRecord, ...]
    created_at: datetime
    deadline: datetime
    acknowledged_at: datetime | None = None
    evidence: Mapping[str, Any] | None = None

    @property
    def pending(self) -> bool:
        return self.acknowledged_at is None

    def overdue(self, now: datetime) -> bool:
        return self.pending and now > self.deadline

    def to_dict(self) -> dict[str, Any]:
        return {
            "consumer_id": self.consumer_id,
            "request_id": self.request_id,
            "records": [r.to_dict() for r in self.records],
            "created_at": self.created_at.isoformat(),
            "deadline": self.deadline.isoformat(),
            "acknowledged_at": self.acknowledged_at.isoformat() if self.acknowledged_at else None,
            "evidence": dict(self.evidence) if self.evidence is not None else None,
        }


def new_consumer_id() -> str:
    return "cn_" + os.urandom(12).hex()


def check_consumer_name(name: object) -> str:
    if (
        not isinstance(name, str)
        or not name
        or len(name) > MAX_NAME
        or not name.isprintable()
        or name != name.strip()
    ):
        raise InvalidValueError(
            f"a consumer name is 1 to {MAX_NAME} printable characters without leading or trailing "
            "spaces, e.g. 'summarizer'"
        )
    return name


def check_ack_days(days: object) -> int:
    if type(days) is not int or not 1 <= days <= MAX_ACK_DAYS:
        raise InvalidValueError(f"ack_days must be a whole number of days from 1 to {MAX_ACK_DAYS}")
    return days


def check_evidence(evidence: object) -> str:
    """The acknowledgement's evidence as canonical JSON text, if it is a flat JSON object of at most
    32 fields (names up to 64 characters; values null, booleans, finite numbers or text up to 512
    characters) and 4096 bytes; else InvalidValueError saying so."""
    shape = (
        f"evidence must be a JSON object of at most {MAX_EVIDENCE_FIELDS} fields whose values are "
        f"null, true/false, numbers or text of at most {MAX_EVIDENCE_TEXT} characters, e.g. "
        '{"method": "deleted from the summary index", "deleted": 3}'
    )
    if not isinstance(evidence, Mapping) or len(evidence) > MAX_EVIDENCE_FIELDS:
        raise InvalidValueError(shape)
    for name, value in evidence.items():
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise InvalidValueError(shape)
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidValueError(shape)
        if isinstance(value, str) and len(value) > MAX_EVIDENCE_TEXT:
            raise InvalidValueError(shape)
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InvalidValueError(shape)
    text = canonical_json(dict(evidence))
    if len(text.encode("utf-8")) > MAX_EVIDENCE_BYTES:
        raise InvalidValueError(f"evidence must be at most {MAX_EVIDENCE_BYTES} bytes of JSON")
    return text


def notify_reads(record_ids: Sequence[str]) -> list[ops.Op[Any]]:
    """What :func:`notify` of ``record_ids`` reads first, for a forget to send ahead with its
    locks (a list equal to the one it notifies then: a record "written since" changes it)."""
    return [ops.TakersOf(list(record_ids))] if record_ids else []


def notify(txn: Txn, request_id: str, record_ids: Sequence[str], requested_at: str) -> int:
    """In a compliance forget's transaction: give every consumer that took one of ``record_ids``
    an event naming what it took of them, due its ``ack_days`` after ``requested_at``. A consumer
    already asked about the request is not asked again. Returns how many consumers were asked."""
    if not record_ids:
        return 0
    takers = txn.run(ops.TakersOf(record_ids))
    if not takers:  # nobody took any: no consumer to ask (and none asked before)
        return 0
    asked = {e.consumer_id for e in events(txn, request_id=request_id)}  # again: no second event
    taken: dict[str, list[tuple[str, int]]] = {}
    for consumer_id, record_id, version in takers:
        if consumer_id not in asked:
            taken.setdefault(consumer_id, []).append((record_id, version))
    if not taken:
        return 0
    days = {c[0]: c[2] for c in txn.run(ops.Consumers())}
    start = datetime.fromisoformat(requested_at)
    rows = [
        (
            consumer_id,
            request_id,
            json.dumps([{"record_id": r, "version": v} for r, v in sorted(records)]),
            requested_at,
            (start + timedelta(days=days.get(consumer_id, DEFAULT_ACK_DAYS))).isoformat(),
        )
        for consumer_id, records in sorted(taken.items())
    ]
    txn.run(ops.InsertConsumerEvents(rows))
    return len(rows)


def events(txn: Txn, *, consumer_id: str | None = None, request_id: str | None = None) -> list[ConsumerEvent]:
    return [_event(row) for row in txn.run(ops.ConsumerEvents(consumer_id, request_id))]


def standing(txn: Txn, request_id: str) -> list[tuple[ConsumerInfo | None, ConsumerEvent]]:
    """Every consumer asked about ``request_id`` and its event (pending or acknowledged)."""
    known = {c.id: c for c in consumers(txn)}
    return [(known.get(e.consumer_id), e) for e in events(txn, request_id=request_id)]


def consumers(txn: Txn) -> list[ConsumerInfo]:
    return [
        ConsumerInfo(cid, name, days, datetime.fromisoformat(at))
        for cid, name, days, at in txn.run(ops.Consumers())
    ]


def _event(row: tuple[str, str, str, str, str, str | None, str | None]) -> ConsumerEvent:
    consumer_id, request_id, records, created_at, deadline, acknowledged_at, evidence = row
    return ConsumerEvent(
        consumer_id=consumer_id,
        request_id=request_id,
        records=tuple(TakenRecord(str(r["record_id"]), int(r["version"])) for r in json.loads(records)),
        created_at=datetime.fromisoformat(created_at),
        deadline=datetime.fromisoformat(deadline),
        acknowledged_at=datetime.fromisoformat(acknowledged_at) if acknowledged_at else None,
        evidence=json.loads(evidence) if evidence else None,
    )


# in every surface's words at once: a consumer acknowledges through its own handle or key
ACKNOWLEDGE = "each consumer named must delete what its event lists, then acknowledge the request"


def layer(asked: Sequence[tuple[ConsumerInfo | None, ConsumerEvent]]) -> tuple[LayerStatus, list[str]]:
    """The ``consumers`` layer of a request's status, and one gap per consumer still owing an
    answer: pending until every consumer asked acknowledged."""
    owing = [
        f"consumer {_label(info, event)} has not acknowledged the erasure (deadline {event.deadline.isoformat()})"
        for info, event in asked
        if event.pending
    ]
    evidence = {"consumers": [statement(info, event) for info, event in asked]}
    return LayerStatus(LayerState.PENDING if owing else LayerState.DONE, evidence), owing


def statement(info: ConsumerInfo | None, event: ConsumerEvent) -> dict[str, Any]:
    """What a status and a certificate say of one consumer asked about a request."""
    return {
        "id": event.consumer_id,
        "name": info.name if info else None,
        "records": len(event.records),
        "deadline": event.deadline.isoformat(),
        "acknowledged_at": event.acknowledged_at.isoformat() if event.acknowledged_at else None,
        "evidence": dict(event.evidence) if event.evidence is not None else None,
    }


def _label(info: ConsumerInfo | None, event: ConsumerEvent) -> str:
    return f"{info.name!r} ({event.consumer_id})" if info else event.consumer_id


ACK_EVENT = "consumer.acknowledge"  # the audit entry of an acknowledgement


def ack_entry(consumer_id: str, request_id: str, evidence: str) -> dict[str, Any]:
    """The audit entry's fields of an acknowledgement: ids, and the hash of its evidence (the
    evidence itself stays in the database; the log holds nothing a consumer wrote)."""
    return {
        "consumer_id": consumer_id,
        "request_id": request_id,
        "evidence_sha256": hashlib.sha256(evidence.encode("utf-8")).hexdigest(),
    }


def check_audited(
    asked: Sequence[tuple[ConsumerInfo | None, ConsumerEvent]], entries: Sequence[AuditEntry]
) -> None:
    """Every acknowledgement of ``asked`` is in the verified audit log, with the evidence stored
    now; else StorageError (a row says acknowledged that no consumer acknowledged)."""
    logged = {
        (e.fields.get("consumer_id"), e.fields.get("request_id"), e.fields.get("evidence_sha256"))
        for e in entries
        if e.event == ACK_EVENT
    }
    for _, event in asked:
        if event.pending:
            continue
        text = canonical_json(dict(event.evidence or {}))
        if tuple(ack_entry(event.consumer_id, event.request_id, text).values()) not in logged:
            raise StorageError(
                f"consumer {event.consumer_id}'s acknowledgement of this request is not in the audit log, "
                "or its evidence differs from what was logged: the database was altered; no certificate "
                "was issued, investigate"
            )
