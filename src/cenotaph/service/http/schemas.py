"""The HTTP API's bodies: every request, response and error shape, as the OpenAPI document shows.

Requests forbid unknown fields and take JSON types strictly (``"3"`` is not a number, ``1`` is not
``true``): a typo or a wrong type is a 422 that names the field, never a silent default.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cenotaph.limits import MAX_DERIVED_FROM, MAX_K, MAX_KEY_LENGTH, MAX_SUBJECTS

__all__ = [
    "BackupList",
    "BackupOut",
    "BatchIn",
    "BatchOut",
    "CertificateOut",
    "EpochList",
    "ErasureAccepted",
    "ErasureList",
    "ErasureOut",
    "ErrorBody",
    "ExportOut",
    "ForgetIn",
    "Health",
    "KeyInfo",
    "PublicKey",
    "PurgeOut",
    "ReauthorizeIn",
    "ReauthorizeOut",
    "RecordList",
    "RecordOut",
    "RotationOut",
    "SearchIn",
    "SearchOut",
    "SessionIn",
    "SessionOut",
    "StatusOut",
    "WriteIn",
]

ERROR_CODES = (
    "invalid_input",
    "invalid_scope",
    "unauthorized",
    "forbidden",
    "not_found",
    "forgotten",
    "derived_from_forgotten",
    "stale_write",
    "scope_closure",
    "not_provable",
    "too_large",
    "method_not_allowed",
    "unavailable",
    "internal",
)
LIMIT_MAX = 1000
LIMIT_DEFAULT = 100


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# -- errors -------------------------------------------------------------------------------------
class ErrorBody(BaseModel):
    """Every error: a stable ``error`` code, a ``message`` that says what to do, and details."""

    error: Literal[ERROR_CODES]  # type: ignore[valid-type]
    message: str
    version: int | None = Field(None, description="forgotten, derived_from_forgotten: the forget's version")
    gaps: list[str] | None = Field(None, description="not_provable: why the erasure is not verified yet")
    ancestors: list[str] | None = Field(
        None, description="scope_closure: ancestor scopes inside this key's prefix that hold the key"
    )


# -- records ------------------------------------------------------------------------------------
class RecordOut(BaseModel):
    id: str
    scope: str
    key: str
    value: Any = Field(description="any JSON value")
    version: int
    subjects: list[str]
    created_at: str = Field(description="ISO 8601")
    expires_at: str | None = Field(description="ISO 8601, or null when the record does not expire")
    derived_from: list[str]
    metadata: dict[str, Any]


class WriteIn(_In):
    scope: str = Field(examples=["tenant:acme/user:alice"])
    key: str = Field(max_length=MAX_KEY_LENGTH, examples=["diet"])
    value: Any = Field(description="any JSON value, at most 1 MiB as compact UTF-8 JSON")
    subjects: list[str] | None = Field(
        None, max_length=MAX_SUBJECTS, description="extra subjects: scope paths inside this key's prefix"
    )
    ttl_seconds: float | None = Field(None, gt=0, description="expire after this many seconds")
    derived_from: list[str] = Field(default_factory=list, max_length=MAX_DERIVED_FROM)
    metadata: dict[str, Any] | None = None
    base_version: int | None = Field(None, description="refuse the write if the record changed since")
    reauthorization: str | None = Field(None, description="a token from POST /v1/reauthorizations")


class BatchIn(_In):
    items: list[WriteIn] = Field(min_length=1, max_length=1000)


class BatchOut(BaseModel):
    records: list[RecordOut]


class RecordList(BaseModel):
    records: list[RecordOut]
    next_cursor: str | None = Field(description="pass as cursor= for the next page; null on the last")


class SearchIn(_In):
    scope: str
    query: str = Field(min_length=1)
    k: int = Field(10, ge=1, le=MAX_K)
    fallthrough: bool = True
    include_descendants: bool = False
    filter: dict[str, Any] | None = Field(None, description='metadata filter, e.g. {"topic": "health"}')


class SearchHitOut(BaseModel):
    record: RecordOut
    score: float


class SearchOut(BaseModel):
    hits: list[SearchHitOut]


# -- sessions -----------------------------------------------------------------------------------
class SessionIn(_In):
    scope: str


class SessionOut(BaseModel):
    session_id: str = Field(description="send it as the Cenotaph-Session header")
    scope: str
    idle_timeout_seconds: int


# -- forgetting ---------------------------------------------------------------------------------
class ForgetIn(_In):
    scope: str
    key: str | None = Field(None, description="omit to forget the whole scope subtree")
    mode: Literal["compliance", "operational"] = "compliance"
    include_ancestors: bool = False


class ReauthorizeIn(_In):
    scope: str
    key: str | None = Field(
        None, description="the key to reopen; an agent key must name one, and must have made its forgets"
    )
    subject: str | None = Field(None, description="also lift this subject's erasure (operator keys only)")


class ReauthorizeOut(BaseModel):
    token: str = Field(description="pass as reauthorization on the next write; good once")


class ErasureAccepted(BaseModel):
    request_id: str
    status_url: str
    version: int
    mode: Literal["compliance", "operational"]
    target_kind: str
    requested_at: str


class LayerOut(BaseModel):
    state: Literal["done", "pending", "failed"]
    evidence: dict[str, Any]


class StatusOut(BaseModel):
    state: Literal["tombstoned", "shredded", "purged", "verified"]
    layers: dict[str, LayerOut]
    horizon: str | None
    gaps: list[str]


class ErasureOut(BaseModel):
    id: str
    version: int
    mode: Literal["compliance", "operational"]
    target_kind: str
    requested_at: str
    status: StatusOut


class ErasureList(BaseModel):
    erasures: list[ErasureOut]
    next_cursor: str | None


class CertificateOut(BaseModel):
    """The signed certificate's fields, exactly as signed (verify with GET /v1/public-key)."""

    model_config = ConfigDict(extra="allow")
    format: str
    request_id: str
    signature: str


class ExportOut(BaseModel):
    format: str
    subject: str
    exported_at: str
    records: list[RecordOut]
    derived_records: list[RecordOut]
    erasure_requests: list[dict[str, Any]]
    next_cursor: str | None


class TreeHead(BaseModel):
    """A signed RFC 9162 tree head over the audit log (verify with GET /v1/public-key)."""

    tree_size: int = Field(description="how many audit entries the tree holds")
    root_hash: str = Field(description="the RFC 9162 root, 64 hex characters")
    timestamp: str = Field(description="when it was signed, ISO-8601 UTC")
    signature: str = Field(description="Ed25519 over the head, 128 hex characters")


class ConsistencyOut(BaseModel):
    tree_head: TreeHead
    proof: list[str] = Field(description="RFC 9162 consistency proof from the older size, hex hashes")


class PublicKey(BaseModel):
    public_key: str = Field(description="raw Ed25519 public key, 64 hex characters")


# -- operations ---------------------------------------------------------------------------------
class BackupOut(BaseModel):
    id: str
    epochs: list[int]
    created_here: bool = Field(description="made through this server by a key of your tenant")
    created_at: str | None = Field(None, description="when it was taken (in the answer to POST only)")
    bytes: int | None = Field(None, description="its size on disk (in the answer to POST only)")


class BackupList(BaseModel):
    backups: list[BackupOut]


class EpochOut(BaseModel):
    epoch: int
    current: bool
    wraps_live_keys: bool
    backups: list[str] = Field(description="registered backups that need this epoch")
    pending_erasures: list[str] = Field(description="your pending erasures whose probes it seals")
    other_pending_erasures: int = Field(description="pending erasures of other tenants that hold it")


class EpochList(BaseModel):
    epochs: list[EpochOut]


class RotationOut(BaseModel):
    new_epoch: int
    rewrapped: int
    destroyed_epochs: list[int]
    retained_epochs: list[int]


class PurgeOut(BaseModel):
    requests: dict[str, str] = Field(description="state of each of your erasure requests")
    reclaimed: int
    wal_truncated: bool
    scan: dict[str, Any]


class KeyInfo(BaseModel):
    id: str
    tenant: str
    prefix: str
    role: Literal["agent", "operator", "consumer"]
    consumer: str | None = None


class Health(BaseModel):
    status: Literal["ok"]


class ConsumerIn(_In):
    name: str = Field(min_length=1, max_length=64, description="what the consumer is, e.g. 'summarizer'")
    ack_days: int = Field(default=30, ge=1, le=365, description="days it has to acknowledge an erasure")


class ConsumerOut(BaseModel):
    id: str
    name: str
    ack_days: int
    registered_at: str


class ConsumerCreated(ConsumerOut):
    api_key: str = Field(description="the consumer's API key (role consumer); shown once")
    api_key_id: str


class ConsumerList(BaseModel):
    consumers: list[ConsumerOut]


class TakenOut(BaseModel):
    record_id: str
    version: int


class ConsumerEventOut(BaseModel):
    consumer_id: str
    request_id: str
    records: list[TakenOut] = Field(description="what to delete: the records (ids, versions) it was given")
    created_at: str
    deadline: str
    acknowledged_at: str | None
    evidence: dict[str, Any] | None


class ConsumerEventList(BaseModel):
    events: list[ConsumerEventOut]


class AcknowledgementIn(_In):
    request_id: str = Field(min_length=1, max_length=64)
    evidence: dict[str, Any] = Field(
        default_factory=dict,
        description="the consumer's own statement: a flat JSON object, at most 4096 bytes",
    )
