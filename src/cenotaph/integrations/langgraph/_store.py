"""``CenotaphStore``: a LangGraph ``BaseStore`` over cenotaph, and ``BaseCenotaphStore``, what
it shares with its async twin (``_aio.AsyncCenotaphStore``).

>>> import tempfile
>>> from cenotaph.integrations.langgraph import CenotaphStore
>>> with CenotaphStore(tempfile.mkdtemp(), users=[("memories", "{user_id}")]) as store:
...     store.put(("memories", "alice"), "diet", {"text": "vegetarian"})
...     store.get(("memories", "alice"), "diet").value
...     request = store.forget_user("alice")           # subject erasure of everything she has
...     store.get(("memories", "alice"), "diet") is None
{'text': 'vegetarian'}
True

Every operation goes through the public :class:`cenotaph.Store` API and one store session
owned by this adapter (``cenotaph.session``: taint, and re-creating what the adapter itself
deleted). Reads in a batch see the store as it was before the batch's writes (as in LangGraph's
own stores); the batch's puts are one ``write_many`` transaction. A delete is the model's
housekeeping: an operational forget of the item's slot (hidden at once, stale puts refused,
reclaimed by the store's background worker, no cascade to what was made from it); with
``delete_mode="compliance"`` it is an erasure (keys destroyed before it returns, purged and
verified by the worker, everything derived from it forgotten too). Erasing a person is
:meth:`forget_user`, always compliance. As LangGraph splits ``BaseSqliteStore`` from ``SqliteStore`` and ``AsyncSqliteStore``,
:class:`BaseCenotaphStore` holds everything but how a batch is called: planning a batch, running
it against cenotaph, the put rules after a delete, lineage, users; the two store classes add the
sync and async entry points, TTL sweeping and closing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import hashlib
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from cenotaph import ErasureRequest, Record, Store, StoreSession
from cenotaph import open as open_cenotaph
from cenotaph.errors import DerivedFromForgottenError, ForgottenError, InvalidValueError, StaleWriteError

from .._labels import decode_label, encode_label
from ._filters import compile_filter
from ._namespaces import NamespaceMap
from ._vectors import Index, decode_vectors, encode_vectors, pooled_scores

__all__ = [
    "DEFAULT_SCOPE",
    "BaseCenotaphStore",
    "CenotaphStore",
    "ForgottenItemError",
    "StaleItemError",
    "in_lineage",
]

DEFAULT_SCOPE = "app:langgraph"
_MARK = "langgraph"  # metadata field marking a record as a LangGraph item (schema version 1)
DELETE_MODES = ("operational", "compliance")
# the session of the innermost lineage block (its reads become derived_from of its puts)
_LINEAGE: contextvars.ContextVar[StoreSession | None] = contextvars.ContextVar(
    "cenotaph_langgraph_lineage", default=None
)


def in_lineage() -> bool:
    """Is the caller inside a store's ``lineage()`` block?"""
    return _LINEAGE.get() is not None


class ForgottenItemError(InvalidNamespaceError, ForgottenError):
    """A put was refused: its item was erased by a subject erasure or by another writer's forget
    (LangGraph's store error type, and cenotaph's :class:`~cenotaph.errors.ForgottenError`)."""

    def __init__(self, message: str, version: int) -> None:
        ForgottenError.__init__(self, message, version)


class StaleItemError(InvalidNamespaceError, StaleWriteError):
    """A put was refused: it was issued before this store's delete of the same item returned."""


@dataclass
class _Plan:
    """A batch, validated: what to read, what to write, what to embed."""

    ops: list[Op]
    puts: dict[tuple[tuple[str, ...], str], PutOp] = field(default_factory=dict)
    texts: dict[str, list[tuple[tuple[tuple[str, ...], str], str]]] = field(default_factory=dict)
    queries: set[str] = field(default_factory=set)
    issued: int = 0  # the store's known version when the batch was issued (for stale puts)


def _now() -> str:
    return datetime.now(UTC).isoformat()


class BaseCenotaphStore:
    """What :class:`CenotaphStore` and :class:`~cenotaph.integrations.langgraph.AsyncCenotaphStore`
    share: a LangGraph store over a cenotaph data directory (or an open :class:`cenotaph.Store`).

    ``index`` and ``ttl`` are LangGraph's ``IndexConfig`` and ``TTLConfig``. ``scope`` is the
    cenotaph scope every namespace lives under (e.g. ``"tenant:acme"``); ``users`` lists namespace
    patterns whose ``{placeholder}`` label names the user, e.g. ``[("memories", "{user_id}")]``:
    the user's items then carry the subject :meth:`user_subject` returns, and
    :meth:`forget_user` erases all of them (and the user's native cenotaph records in
    ``<scope>/user:<id>/...``). ``delete_mode`` is what a delete is: ``"operational"``
    (default: housekeeping) or ``"compliance"`` (an erasure). ``owner`` names the writer its
    deletes belong to (default: one per ``scope``, so a restarted app re-creates what it deleted);
    give two applications sharing a scope different owners, and neither re-creates what the
    other deleted.
    """

    supports_ttl = True
    index_config: dict[str, Any] | None
    ttl_config: TTLConfig | None

    def _open(
        self,
        path_or_store: str | os.PathLike[str] | Store,
        *,
        index: IndexConfig | None,
        ttl: TTLConfig | None,
        scope: str,
        users: Sequence[Sequence[str]],
        delete_mode: str = "operational",
        owner: str | None = None,
    ) -> None:
        if delete_mode not in DELETE_MODES:
            raise ValueError("delete_mode must be 'operational' (the default) or 'compliance'")
        self._delete_mode = delete_mode
        self._namespaces = NamespaceMap(scope, users)
        self._index = Index.build(index)
        self.index_config = None if self._index is None else self._index.config
        self.embeddings = None if self._index is None else self._index.embeddings
        self.ttl_config = ttl
        self._owned = not isinstance(path_or_store, Store)
        # opened here: deletes are purged and verified by the store's background worker, coalesced
        self._store = path_or_store if isinstance(path_or_store, Store) else open_cenotaph(path_or_store)
        # by default every adapter over the same scope is one owner: a store opened again (a
        # restart, another process of the app) re-creates what an earlier one deleted, and nothing
        # anyone else forgot
        root = self._namespaces.root_text
        self._owner = (
            owner if owner is not None else "langgraph:" + hashlib.sha256(root.encode()).hexdigest()[:32]
        )
        self._session = self._store.session(root, owner=self._owner)

    @property
    def cenotaph(self) -> Store:
        """The underlying cenotaph store (for erasure status, certificates, exports)."""
        return self._store

    def _close_store(self) -> None:
        """If this adapter opened the cenotaph store, close it: the store's worker gets a last
        pass for the purges still due, and a background purge that failed unseen is raised."""
        if self._owned:
            self._store.close()

    # -- subjects ------------------------------------------------------------------------
    def user_subject(self, user_id: str) -> str:
        """The cenotaph subject of ``user_id``'s items (``<scope>/user:<user_id>``)."""
        return self._namespaces.subject(user_id)

    def forget_user(self, user_id: str, *, reason: str | None = None) -> ErasureRequest:
        """Compliance-erase everything about ``user_id`` (:meth:`cenotaph.Store.forget_subject`);
        purged and verified before it returns when this adapter opened the store."""
        request = self._store.forget_subject(self.user_subject(user_id), reason=reason)
        self._namespaces.drop_cache()
        if self._owned:
            request.wait()
        return request

    async def aforget_user(self, user_id: str, *, reason: str | None = None) -> ErasureRequest:
        """:meth:`forget_user`, in a worker thread."""
        return await asyncio.to_thread(self.forget_user, user_id, reason=reason)

    @contextmanager
    def lineage(self) -> Iterator[None]:
        """Within the block, every put records the items read so far in it as ``derived_from``: a
        summary written from memories dies with them (cenotaph's W3), wherever it is stored."""
        session = self._store.session(self._namespaces.root_text, owner=self._owner)
        token = _LINEAGE.set(session)
        try:
            yield
        finally:
            _LINEAGE.reset(token)
            session.close()

    # -- batches -----------------------------------------------------------------------
    def _queries(self, plan: _Plan) -> dict[str, Sequence[float]]:
        if self._index is None or not plan.queries:
            return {}
        return {q: self._index.embeddings.embed_query(q) for q in plan.queries}

    async def _aqueries(self, plan: _Plan) -> dict[str, Sequence[float]]:
        if self._index is None or not plan.queries:
            return {}
        distinct = sorted(plan.queries)
        found = await asyncio.gather(*(self._index.embeddings.aembed_query(q) for q in distinct))
        return dict(zip(distinct, found, strict=True))

    def _plan(self, ops: Iterable[Op]) -> _Plan:
        self._store.raise_background_failure()  # a purge that failed unseen is this call's to raise
        plan = _Plan(list(ops))
        for op in plan.ops:
            if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
                raise ValueError(f"Unknown operation type: {type(op)}")
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                plan.puts[(tuple(op.namespace), op.key)] = op  # the last put of an item wins
            elif isinstance(op, SearchOp) and op.query and self._index:
                plan.queries.add(op.query)
        for slot, op in plan.puts.items():
            if op.value is not None and self._index is not None:
                for name, text in self._index.texts(op.value, op.index):
                    plan.texts.setdefault(text, []).append((slot, name))
        plan.issued = self._store.known_version()
        return plan

    def _embed(self, plan: _Plan) -> dict[tuple[tuple[str, ...], str], dict[str, str]]:
        if not plan.texts or self._index is None:
            return {}
        texts = list(plan.texts)
        return self._vectors(plan, texts, self._index.embeddings.embed_documents(texts))

    async def _aembed(self, plan: _Plan) -> dict[tuple[tuple[str, ...], str], dict[str, str]]:
        if not plan.texts or self._index is None:
            return {}
        texts = list(plan.texts)
        return self._vectors(plan, texts, await self._index.embeddings.aembed_documents(texts))

    def _vectors(
        self, plan: _Plan, texts: list[str], found: Sequence[Sequence[float]]
    ) -> dict[tuple[tuple[str, ...], str], dict[str, str]]:
        assert self._index is not None
        per_item: dict[tuple[tuple[str, ...], str], tuple[list[str], list[Sequence[float]]]] = {}
        for text, vector in zip(texts, self._index.checked(found, len(texts)), strict=True):
            for slot, name in plan.texts[text]:
                names, vectors = per_item.setdefault(slot, ([], []))
                names.append(name)
                vectors.append(vector)
        return {slot: encode_vectors(names, vectors) for slot, (names, vectors) in per_item.items()}

    def _execute(
        self,
        plan: _Plan,
        vectors: Mapping[tuple[tuple[str, ...], str], dict[str, str]],
        queries: Mapping[str, Sequence[float]],
    ) -> list[Result]:
        results: list[Result] = []
        refresh: list[Record] = []
        for op in plan.ops:
            if isinstance(op, GetOp):
                results.append(self._get(op, refresh))
            elif isinstance(op, SearchOp):
                results.append(self._search(op, queries, refresh))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                results.append(None)
        self._refresh(refresh)
        self._write(plan, vectors)
        return results

    # -- reads ---------------------------------------------------------------------------
    def _item_record(self, record: Record) -> tuple[tuple[str, ...], str] | None:
        """(namespace, key) of a record this adapter wrote; None for any other record."""
        if not isinstance(record.metadata.get(_MARK), Mapping) or not isinstance(record.value, Mapping):
            return None
        namespace = self._namespaces.namespace(record.scope)
        return None if namespace is None else (namespace, decode_label(record.key))

    @staticmethod
    def _read(record: Record) -> None:
        session = _LINEAGE.get()
        if session is not None:
            session.taint([record])

    def _wants_refresh(self, refresh_ttl: bool, record: Record) -> bool:
        # as LangGraph's SqliteStore: only a store configured to refresh on read does, for the items
        # that have a TTL, unless the read says refresh_ttl=False
        return (
            bool(refresh_ttl)
            and bool(self.ttl_config and self.ttl_config.get("refresh_on_read", False))
            and record.metadata[_MARK].get("ttl_minutes") is not None
        )

    def _get(self, op: GetOp, refresh: list[Record]) -> Item | None:
        try:
            scope = self._namespaces.item_scope(tuple(op.namespace))
            record = self._store.read(scope, encode_label(op.key), fallthrough=False)
        except (InvalidNamespaceError, InvalidValueError):
            return None  # a namespace or key too long to be stored names no stored item
        if record is None or self._item_record(record) is None:
            return None
        self._read(record)
        if self._wants_refresh(op.refresh_ttl, record):
            refresh.append(record)
        created, updated = _times(record)
        return Item(
            value=record.value["value"],
            key=op.key,
            namespace=tuple(op.namespace),
            created_at=created,
            updated_at=updated,
        )

    def _items_under(self, prefix: tuple[str, ...]) -> list[tuple[Record, tuple[str, ...], str]]:
        try:
            scope = self._namespaces.prefix_scope(prefix)
        except InvalidNamespaceError:
            return []  # too deep or too long to be stored: nothing can be under it
        records = self._store.list(scope, include_descendants=True)
        found = []
        for record in records:
            named = self._item_record(record)
            if named is not None:
                found.append((record, *named))
        return found

    def _search(
        self, op: SearchOp, queries: Mapping[str, Sequence[float]], refresh: list[Record]
    ) -> list[SearchItem]:
        matches = compile_filter(op.filter)
        candidates = [
            c for c in self._items_under(tuple(op.namespace_prefix)) if matches(c[0].value["value"])
        ]
        page: list[tuple[float | None, tuple[Record, tuple[str, ...], str]]]
        if op.query and self._index is not None:
            scores = pooled_scores(
                queries[op.query], [decode_vectors(c[0].value.get("vectors") or {}) for c in candidates]
            )
            scored = sorted(
                ((s, c) for s, c in zip(scores, candidates, strict=True) if s is not None),
                key=lambda pair: -pair[0],
            )
            page = [(s, c) for s, c in scored[op.offset : op.offset + op.limit]]
            if len(page) < op.limit:  # as InMemoryStore: fill with items that have no vectors
                unscored = [c for s, c in zip(scores, candidates, strict=True) if s is None]
                page.extend((None, c) for c in unscored[: op.limit - len(page)])
        else:
            candidates.sort(key=lambda c: (c[1], c[2]))
            candidates.sort(key=lambda c: c[0].metadata[_MARK]["updated_at"], reverse=True)
            page = [(None, c) for c in candidates[op.offset : op.offset + op.limit]]
        hits = []
        for score, (record, namespace, key) in page:
            self._read(record)
            if self._wants_refresh(op.refresh_ttl, record):
                refresh.append(record)
            created, updated = _times(record)
            hits.append(SearchItem(namespace, key, record.value["value"], created, updated, score))
        return hits

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = {ns for _, ns, _ in self._items_under(())}
        conditions = op.match_conditions or ()
        found = [ns for ns in namespaces if all(_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            found = list({ns[: op.max_depth] for ns in found})
        return sorted(found)[op.offset : op.offset + op.limit]

    def _refresh(self, records: list[Record]) -> None:
        """Restart the TTL of items read with ``refresh_ttl``: rewrite each as it is, with its TTL,
        unless it changed or was forgotten since it was read (then there is nothing to extend)."""
        for record in {r.id: r for r in records}.values():
            try:
                self._store.write(
                    record.scope,
                    record.key,
                    record.value,
                    subjects=record.subjects,
                    ttl=float(record.metadata[_MARK]["ttl_minutes"]) * 60,
                    derived_from=record.derived_from,
                    metadata=record.metadata,
                    base_version=record.version,
                )
            except (ForgottenError, StaleWriteError):
                continue

    # -- writes --------------------------------------------------------------------------
    def _write(self, plan: _Plan, vectors: Mapping[tuple[tuple[str, ...], str], dict[str, str]]) -> None:
        deletes = [slot for slot, op in plan.puts.items() if op.value is None]
        for namespace, key in deletes:
            scope = self._namespaces.item_scope(namespace)
            self._session.forget(scope, encode_label(key), mode=self._delete_mode, exact=True)
        items = [
            self._put_item(slot, op, vectors.get(slot))
            for slot, op in plan.puts.items()
            if op.value is not None
        ]
        if not items:
            return
        session = _LINEAGE.get() or self._session
        try:
            session.write_many(items, issued=plan.issued)
        except DerivedFromForgottenError as exc:
            raise ForgottenItemError(
                "The put was refused: it derives from an item read in this lineage block that has been "
                f"erased since ({exc}). Re-read what is left and write again.",
                exc.version,
            ) from exc
        except StaleWriteError as exc:
            raise StaleItemError(
                "A put was refused: it was issued before this store's delete of the same item returned, "
                "so it is stale and would have brought the deleted item back. Put it again to re-create it."
            ) from exc
        except ForgottenError as exc:
            raise self._refusal(items, exc) from exc

    def _put_item(
        self, slot: tuple[tuple[str, ...], str], op: PutOp, vectors: dict[str, str] | None
    ) -> dict[str, Any]:
        namespace, key = slot
        if not namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        now = _now()
        assert op.value is not None
        return {
            "scope": self._namespaces.item_scope(namespace),
            "key": encode_label(key),
            "value": {"value": dict(op.value), "vectors": vectors or {}},
            "subjects": self._namespaces.subjects(namespace),
            "ttl": None if op.ttl is None else float(op.ttl) * 60,
            "metadata": {_MARK: {"created_at": now, "updated_at": now, "ttl_minutes": op.ttl}},
        }

    def _refusal(self, items: list[dict[str, Any]], exc: ForgottenError) -> Exception:
        if len(items) > 1:
            return ForgottenItemError(
                f"A put in this batch of {len(items)} was refused and nothing was written: one of the items "
                "was erased by a subject erasure or forgotten by another writer. Put the items one by one "
                "to see which.",
                exc.version,
            )
        item = items[0]
        namespace, label = self._namespaces.namespace(item["scope"]), decode_label(item["key"])
        found = self._store.blocking_erasures(item["scope"], item["key"], subjects=item["subjects"])
        if any(r.target_kind == "subject" for r in found):
            return ForgottenItemError(
                f"The put of {label!r} in namespace {namespace} was refused: everything about its data "
                "subject (the user it belongs to) was erased. To write for that subject again, get a token "
                "naming the subject with store.cenotaph.reauthorize(...) and write through cenotaph.",
                exc.version,
            )
        return ForgottenItemError(
            f"The put of {label!r} in namespace {namespace} was refused: the item was forgotten by another "
            "writer (this store re-creates only items it deleted itself). If re-creating it is intended, "
            "get a token with store.cenotaph.reauthorize(...) and write through cenotaph.",
            exc.version,
        )

    def _sweep(self) -> int:
        return self._store.purge().reclaimed


class CenotaphStore(BaseCenotaphStore, BaseStore):
    """A LangGraph ``BaseStore`` over cenotaph, for LangGraph's sync API and its async one alike
    (``abatch`` runs the storage work in a worker thread). For an async-only application,
    :class:`~cenotaph.integrations.langgraph.AsyncCenotaphStore` batches the calls of one event
    loop tick as LangGraph's async stores do. See :class:`BaseCenotaphStore` for the arguments.
    """

    def __init__(
        self,
        path_or_store: str | os.PathLike[str] | Store,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        scope: str = DEFAULT_SCOPE,
        users: Sequence[Sequence[str]] = (),
        delete_mode: str = "operational",
        owner: str | None = None,
    ) -> None:
        self._open(
            path_or_store,
            index=index,
            ttl=ttl,
            scope=scope,
            users=users,
            delete_mode=delete_mode,
            owner=owner,
        )
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()

    def close(self) -> None:
        """Stop the TTL sweeper; if this adapter opened the cenotaph store, close it (its worker
        gets a last pass for the purges still due)."""
        self.stop_ttl_sweeper()
        self._close_store()

    def __enter__(self) -> CenotaphStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = self._plan(ops)
        vectors = self._embed(plan)
        return self._execute(plan, vectors, self._queries(plan))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        plan = self._plan(ops)
        vectors = await self._aembed(plan)
        queries = await self._aqueries(plan)
        return await asyncio.to_thread(self._execute, plan, vectors, queries)

    # -- TTL sweeping (in a thread, as SqliteStore) -------------------------------------
    def sweep_ttl(self) -> int:
        """Remove expired items now; returns how many rows the purge reclaimed. Expired items are
        never returned even before a sweep."""
        return self._sweep()

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self._sweep)

    def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> concurrent.futures.Future[None]:
        """Sweep every ``sweep_interval_minutes`` (default: the TTLConfig's, else 5) in a thread;
        the future ends when it stops (with the sweep's error if one failed, which ends it)."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        if not self.ttl_config or (self._sweeper is not None and self._sweeper.is_alive()):
            future.set_result(None)
            return future
        interval = float(sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes") or 5) * 60
        self._sweeper_stop.clear()

        def loop() -> None:
            try:
                while not self._sweeper_stop.wait(interval):
                    self._sweep()
            except Exception as exc:  # noqa: BLE001 - the returned future holds it
                with suppress(concurrent.futures.InvalidStateError):  # cancelled
                    future.set_exception(exc)
                return
            with suppress(concurrent.futures.InvalidStateError):
                future.set_result(None)

        self._sweeper = threading.Thread(target=loop, name="cenotaph-langgraph-ttl", daemon=True)
        self._sweeper.start()
        future.add_done_callback(lambda f: self._sweeper_stop.set() if f.cancelled() else None)
        return future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        if self._sweeper is None or not self._sweeper.is_alive():
            return True
        self._sweeper_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped


def _times(record: Record) -> tuple[datetime, datetime]:
    times = record.metadata[_MARK]
    return datetime.fromisoformat(times["created_at"]), datetime.fromisoformat(times["updated_at"])


def _matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(want == "*" or have == want for have, want in pairs)
