"""The ``memory`` profile: seven tools over one agent's scopes, each connection a store session.

``memory_write``, ``memory_read``, ``memory_search``, ``memory_list``, ``memory_forget``,
``erasure_status`` and ``erasure_certificate``. Confinement is :mod:`.confinement`'s; what a connection is and what it
remembers is :mod:`.connections`'; what a refusal says is :mod:`.refusals`'.

Writes record everything the connection has read as ``derived_from`` (W6), so a summary of a
note dies with the note (W3) and a summary written after the note was forgotten is refused.
A write hitting a forget is let in only when every forget that blocks it is one this connection
issued, after that forget returned: the server then takes a reauthorization token itself (W1),
and the copies of that same memory the connection had read are not recorded as its sources (the
new value replaces what was forgotten). Anyone else's forget, a subject erasure and a stale
``base_version`` are refused, saying which.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it for nested TypedDicts before Python 3.12

from cenotaph import Scope, Store
from cenotaph.errors import DerivedFromForgottenError, ForgottenError, NotFoundError
from cenotaph.limits import MAX_DERIVED_FROM, MAX_K
from cenotaph.model import ErasureRequest, ErasureStatus, Record, SearchHit

from .confinement import Confinement
from .connections import AgentConnection, ConnectionRegistry
from .refusals import READ_FORGOTTEN, Refused
from .toolserver import CenotaphMCPServer, build_tool, connection_for, text_result

__all__ = ["MemoryTools", "memory_server"]

Ctx = Context[ConnectionRegistry, Any]


class MemoryRecord(TypedDict):
    """One memory as stored: its id and version identify this exact value."""

    id: str
    scope: str
    key: str
    value: Any
    version: int
    subjects: list[str]
    created_at: str
    expires_at: str | None
    derived_from: list[str]


class WriteResult(TypedDict):
    """The memory as written; ``reauthorized`` when it re-opened what this connection forgot."""

    record: MemoryRecord
    reauthorized: bool


class ReadResult(TypedDict):
    found: bool
    record: MemoryRecord | None


class ListResult(TypedDict):
    records: list[MemoryRecord]


class SearchHitOut(TypedDict):
    record: MemoryRecord
    score: float


class SearchResult(TypedDict):
    hits: list[SearchHitOut]


class ForgetResult(TypedDict):
    """An erasure request: poll it with erasure_status(request_id)."""

    request_id: str
    state: str
    mode: str
    version: int
    target_kind: str
    verified: bool
    horizon: str | None
    gaps: list[str]


class LayerOut(TypedDict):
    state: str
    evidence: dict[str, Any]


class CertificateResult(TypedDict):
    """The signed certificate, exactly as signed, and the key that verifies it."""

    certificate: dict[str, Any]
    public_key: str


class ErasureStatusResult(TypedDict):
    request_id: str
    state: str
    mode: str
    version: int
    target_kind: str
    requested_at: str
    verified: bool
    horizon: str | None
    gaps: list[str]
    layers: dict[str, LayerOut]


def record_out(record: Record) -> MemoryRecord:
    return {
        "id": record.id,
        "scope": record.scope,
        "key": record.key,
        "value": record.value,
        "version": record.version,
        "subjects": list(record.subjects),
        "created_at": record.created_at.isoformat(),
        "expires_at": record.expires_at.isoformat() if record.expires_at else None,
        "derived_from": list(record.derived_from),
    }


def _result(summary: str, structured: Mapping[str, Any]) -> CallToolResult:
    return text_result(summary + "\n" + json.dumps(structured, indent=2, ensure_ascii=False), structured)


STATE_MEANINGS = {
    "tombstoned": "hidden from every read and refused to writes; nothing destroyed yet",
    "shredded": "keys destroyed, so no copy can be decrypted by this store; bytes not yet purged",
    "purged": "keys destroyed and rows, WAL and caches purged; the scan has not verified it yet",
    "verified": "keys destroyed, bytes purged, and a scan of every file the store owns found none of them",
}
OPERATIONAL = "an operational forget hides the memory from every read; it is never reported as an erasure"


class MemoryTools:
    """The seven tools of one server: a store and the scopes it may reach."""

    def __init__(self, store: Store, confinement: Confinement) -> None:
        self.store = store
        self.reach = confinement

    # -- helpers -------------------------------------------------------------------------
    @staticmethod
    def _target(reach: Confinement, scope: str | None) -> Scope:
        """The scope a write or forget names; outside the prefix it is refused (same words always)."""
        target = reach.inside(scope)
        if target is None:
            raise Refused(reach.outside_message())
        return target

    # -- tools ---------------------------------------------------------------------------
    def write(
        self,
        ctx: Ctx,
        key: Annotated[str, Field(description="The memory's key (1-512 printable characters).")],
        value: Annotated[Any, Field(description="Any JSON value: text, number, list or object.")],
        scope: Annotated[str | None, Field(description="Where to write (default: your scope).")] = None,
        ttl_seconds: Annotated[
            float | None, Field(gt=0, description="Forget it (operationally) after this many seconds.")
        ] = None,
        derived_from: Annotated[
            list[str] | None,
            Field(description="Ids of memories this value was made from, beyond what you read here."),
        ] = None,
        base_version: Annotated[
            int | None,
            Field(
                ge=0,
                description="Refuse the write if the memory changed or was forgotten after this version.",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, WriteResult]:
        conn = connection_for(ctx)
        target = self._target(conn.reach, scope)
        explicit = self._sources(conn.reach, derived_from or [])
        self._capped(conn, explicit)
        options: dict[str, Any] = {"ttl": ttl_seconds, "base_version": base_version, "derived_from": explicit}
        try:
            record, reauthorized = conn.session.reopening_write(target.path, key, value, **options)
        except ForgottenError as refused:
            raise Refused(self._why_refused(target, key, refused)) from None
        out: WriteResult = {"record": record_out(record), "reauthorized": reauthorized}
        again = " (re-opening what this connection forgot)" if reauthorized else ""
        return _result(f"wrote {key!r} in {record.scope} at version {record.version}{again}", out)

    def _sources(self, reach: Confinement, ids: list[str]) -> list[str]:
        """Explicit ``derived_from`` ids must name memories this connection can see."""
        for record_id in ids:
            found = self.store.get(record_id)
            if found is None or not Scope.parse(found.scope).is_within(reach.prefix):
                raise Refused(
                    "refused: derived_from names a memory that does not exist here or has been forgotten; "
                    "do not write data derived from forgotten memories"
                )
        return ids

    @staticmethod
    def _capped(conn: AgentConnection, explicit: list[str]) -> None:
        if len({*conn.session.read_set, *explicit}) > MAX_DERIVED_FROM:
            raise Refused(
                f"refused: this connection has read more than {MAX_DERIVED_FROM} memories, and a write "
                "cannot be recorded as derived from more; nothing was written. Write from a new connection"
            )

    def _why_refused(self, target: Scope, key: str, refused: ForgottenError) -> str:
        """What a write the session did not (or could not) re-open says: a forgotten source it
        read, a subject erasure, or a forget this connection did not make (or made after the write
        began)."""
        found = self.store.blocking_erasures(target.path, key)
        blockers = [r.version for r in found]
        if not blockers and isinstance(refused, DerivedFromForgottenError):
            return READ_FORGOTTEN
        if any(r.target_kind == "subject" for r in found):
            return (
                "refused: everything about this memory's data subject was erased (a subject erasure); "
                "it cannot be written again through this server"
            )
        return (
            f"refused: this memory was forgotten (at version {max(blockers or [refused.version])}) "
            "by another connection or an operator; this server re-opens only what the same connection "
            "forgot. Writing it again needs a reauthorization from an operator"
        )

    def read(
        self,
        ctx: Ctx,
        key: Annotated[str, Field(description="The memory's key.")],
        scope: Annotated[str | None, Field(description="Where to look first (default: your scope).")] = None,
    ) -> Annotated[CallToolResult, ReadResult]:
        conn = connection_for(ctx)
        target = conn.reach.inside(scope)
        for where in [] if target is None else conn.reach.chain(target):
            record = conn.session.read(where.path, key, fallthrough=False)
            if record is not None:
                found: ReadResult = {"found": True, "record": record_out(record)}
                return _result(f"{key!r} found in {record.scope} (version {record.version})", found)
        return _result(f"no memory {key!r} here", {"found": False, "record": None})

    def list_memories(
        self,
        ctx: Ctx,
        scope: Annotated[str | None, Field(description="The scope to list (default: your scope).")] = None,
        include_descendants: Annotated[
            bool, Field(description="Also list the scopes below it (e.g. every session of a user).")
        ] = False,
    ) -> Annotated[CallToolResult, ListResult]:
        conn = connection_for(ctx)
        target = conn.reach.inside(scope)
        records = (
            [] if target is None else conn.session.list(target.path, include_descendants=include_descendants)
        )
        out: ListResult = {"records": [record_out(r) for r in records]}
        return _result(f"{len(records)} memories", out)

    def search(
        self,
        ctx: Ctx,
        query: Annotated[str, Field(description="What to look for, in words.")],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many hits at most.")] = 10,
        scope: Annotated[
            str | None, Field(description="Search this scope and its wider scopes (default: your scope).")
        ] = None,
    ) -> Annotated[CallToolResult, SearchResult]:
        conn = connection_for(ctx)
        target = conn.reach.inside(scope)
        hits = [] if target is None else self._search(conn, target, query, k)
        out: SearchResult = {"hits": [{"record": record_out(h.record), "score": h.score} for h in hits]}
        return _result(f"{len(hits)} hits", out)

    def _search(self, conn: AgentConnection, target: Scope, query: str, k: int) -> list[SearchHit]:
        """The best ``k`` hits in ``target`` and its ancestors inside the prefix. Only what is
        returned joins the read set: candidates are found without the session, then each hit is
        fetched through it (a hit forgotten meanwhile drops out, as a read would)."""
        found: dict[str, SearchHit] = {}
        for where in conn.reach.chain(target):
            for hit in self.store.search(where.path, query, k=k, fallthrough=False):
                found.setdefault(hit.record.id, hit)
        best = sorted(found.values(), key=lambda h: -h.score)[:k]
        fetched = ((conn.session.get(h.record.id), h.score) for h in best)
        return [SearchHit(record, score) for record, score in fetched if record is not None]

    def forget(
        self,
        ctx: Ctx,
        key: Annotated[
            str | None, Field(description="The memory to forget; leave out to forget the whole scope.")
        ] = None,
        scope: Annotated[
            str | None, Field(description="Where (default: your scope); its sub-scopes are covered too.")
        ] = None,
        mode: Annotated[
            Literal["compliance", "operational"],
            Field(description="compliance (default): erase, provably; operational: stop recalling it."),
        ] = "compliance",
    ) -> Annotated[CallToolResult, ForgetResult]:
        conn = connection_for(ctx)
        target = self._target(conn.reach, scope)
        request = conn.session.forget(target.path, key, mode=mode)
        status = request.status()
        out: ForgetResult = {
            "request_id": request.id,
            "state": status.state,
            "mode": request.mode,
            "version": request.version,
            "target_kind": request.target_kind,
            "verified": status.state == "verified",
            "horizon": status.horizon.isoformat() if status.horizon else None,
            "gaps": list(status.gaps),
        }
        return _result(f"forget {request.id}: {status.state} - {_meaning(request, status)}", out)

    def erasure_status(
        self,
        request_id: Annotated[str, Field(description="The request_id memory_forget returned.")],
        wait_seconds: Annotated[
            float, Field(ge=0, le=60, description="Purge and wait up to this long for it to verify.")
        ] = 0,
    ) -> Annotated[CallToolResult, ErasureStatusResult]:
        request = self._request(request_id)
        status = request.wait(wait_seconds) if wait_seconds > 0 else request.status()
        out: ErasureStatusResult = {
            "request_id": request.id,
            "state": status.state,
            "mode": request.mode,
            "version": request.version,
            "target_kind": request.target_kind,
            "requested_at": request.requested_at.isoformat(),
            "verified": status.state == "verified",
            "horizon": status.horizon.isoformat() if status.horizon else None,
            "gaps": list(status.gaps),
            "layers": {
                name: {"state": layer.state, "evidence": dict(layer.evidence)}
                for name, layer in sorted(status.layers.items())
            },
        }
        return _result(f"erasure {request.id}: {status.state} - {_meaning(request, status)}", out)

    def erasure_certificate(
        self,
        request_id: Annotated[str, Field(description="The request_id memory_forget returned.")],
    ) -> Annotated[CallToolResult, CertificateResult]:
        """The request's signed certificate once it is verified; before, a tool error naming the
        gaps (``attest`` raises ErasureNotProvableError with them)."""
        request = self._request(request_id)
        certificate = self.store.attest(request.id).to_dict()
        out: CertificateResult = {"certificate": certificate, "public_key": self.store.public_key}
        return _result(
            f"certificate of erasure {request.id}: verify it with cenotaph.verify_certificate and public_key",
            out,
        )

    def _request(self, request_id: str) -> ErasureRequest:
        """The erasure request ``request_id`` names; any request: ids are unguessable (96 random
        bits), and a status or a certificate names no scope or key."""
        try:
            return self.store.erasure(request_id)
        except NotFoundError:
            raise Refused("not found: no erasure request has that id") from None

    # -- registration --------------------------------------------------------------------
    def tools(self, *, keyed: bool = False) -> list[Tool]:
        """``keyed``: each API key narrows the reach, so descriptions cannot name the scopes."""
        scope, prefix = (
            ("your scope", "the prefix your API key allows")
            if keyed
            else (self.reach.scope.path, self.reach.prefix.path)
        )
        inside = f"A scope must lie inside {prefix}; anything outside it does not exist for this server."
        read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
        return [
            build_tool(
                self.write,
                name="memory_write",
                title="Write a memory",
                description=(
                    f"Store a value under a key, in your scope {scope} unless you name another. {inside} "
                    "Everything you have read through this connection is recorded as what the value was "
                    "made from, so if any of it is forgotten later, this memory is forgotten with it. "
                    "A write is refused (with the reason) if the memory was forgotten by someone else, "
                    "erased with its data subject, changed since base_version, or if you read something "
                    "here that has since been forgotten; a memory you forgot yourself on this connection "
                    "can be written again."
                ),
                annotations=ToolAnnotations(
                    destructive_hint=False, idempotent_hint=False, open_world_hint=False
                ),
                verbatim=("value",),
            ),
            build_tool(
                self.read,
                name="memory_read",
                title="Read a memory",
                description=(
                    f"Read the memory under a key: from the scope (default {scope}), else from its nearest "
                    f"wider scope up to {prefix}. {inside} Forgotten and expired memories are never returned."
                ),
                annotations=read_only,
            ),
            build_tool(
                self.search,
                name="memory_search",
                title="Search memories",
                description=(
                    f"Find the memories most similar to a query in the scope (default {scope}) and its "
                    f"wider scopes up to {prefix}, best first. {inside}"
                ),
                annotations=read_only,
            ),
            build_tool(
                self.list_memories,
                name="memory_list",
                title="List memories",
                description=f"List the memories of a scope (default {scope}), by key. {inside}",
                annotations=read_only,
            ),
            build_tool(
                self.forget,
                name="memory_forget",
                title="Forget memories",
                description=(
                    "Forget a memory (a key) or a whole scope, in every sub-scope too, and everything "
                    "derived from it anywhere. mode=compliance (default) is an erasure: keys destroyed, "
                    "bytes purged and verified by a scan; mode=operational only stops recall. Returns an "
                    "erasure request id to check with erasure_status. Afterwards writes to what was "
                    "forgotten are refused, except your own rewrite of it on this connection. "
                    f"{inside}"
                ),
                annotations=ToolAnnotations(
                    destructive_hint=True, idempotent_hint=True, open_world_hint=False
                ),
            ),
            build_tool(
                self.erasure_status,
                name="erasure_status",
                title="Erasure status",
                description=(
                    "Where an erasure request stands: tombstoned < shredded < purged < verified, each layer "
                    "with its evidence, and the gaps that keep it from verified. With wait_seconds, purge "
                    "and wait for it. Only 'verified' means the bytes are provably gone."
                ),
                annotations=read_only,
            ),
            build_tool(
                self.erasure_certificate,
                name="erasure_certificate",
                title="Erasure certificate",
                description=(
                    "The signed, content-free certificate of a verified compliance erasure, and the "
                    "public key that verifies it. Before the request is verified it is refused, naming "
                    "what is still missing; an operational forget never has one."
                ),
                annotations=read_only,
            ),
        ]


def _meaning(request: ErasureRequest, status: ErasureStatus) -> str:
    return OPERATIONAL if request.mode == "operational" else STATE_MEANINGS.get(status.state, status.state)


def memory_server(
    store: Store, confinement: Confinement, *, session_idle_seconds: float | None = None, keyed: bool = False
) -> CenotaphMCPServer:
    """The ``memory`` profile's server over ``store``, confined to ``confinement`` (and, when
    ``keyed``, each connection further to its API key's prefix)."""
    tools = MemoryTools(store, confinement)
    where = (
        "Your API key's prefix bounds the scopes you may reach."
        if keyed
        else f"Your scope is {confinement.scope.path}; you may reach scopes inside {confinement.prefix.path}."
    )
    return CenotaphMCPServer(
        "cenotaph-memory",
        instructions=(
            f"cenotaph memory. {where} Reads fall back from a scope to its wider scopes. What you "
            "write is linked to what you read on this connection: forgetting a source forgets what "
            "was made from it. memory_forget is an erasure by default; erasure_status tells whether it "
            "is verified. A refused call says why in one line; nothing was changed."
        ),
        tools=tools.tools(keyed=keyed),
        registry=lambda: ConnectionRegistry(store, confinement, session_idle_seconds=session_idle_seconds),
    )
